//! The coding-agent seam, ported from the agent kit's coding module.
//!
//! A [`CodingAgent`] is two things at once: a runnable (`run` returns a [`CodingHandle`] you can
//! stream and await) and a tool (`execute`, which fails with `Err` where `run` resolves an
//! error-status result). Construction and the lifecycle around a run (provision, construct, run,
//! probe, dispose exactly once, score) live one layer up, in [`crate::lifecycle`].
//!
//! Nothing here knows about the CLI, the terminal or the run directory.

mod budget;
mod builtin;
mod handle;
pub mod harness;
mod types;

use std::sync::Arc;

use futures::future::BoxFuture;
use serde_json::Value;

pub use budget::{
    Budget, BudgetStop, REPLAY_MISMATCH, is_replay_mismatch, stop_event, stopped_result,
};
pub use builtin::agent_events::{AGENT_EVENTS, AgentEvents};
pub use builtin::command::{
    AGENT_LOG, CommandAgent, CommandAgentConfig, INSTRUCTION_FILE, SANDBOX_FAILED,
};
pub use builtin::mock::{MockAgent, MockArtifact, MockConfig, MockEvent, SimulatedError};
pub use builtin::noop::NoopAgent;
pub use builtin::oracle::OracleAgent;
pub use handle::{CodingHandle, RunContext};
pub use types::{
    CodingError, CodingInput, CodingOutput, CodingResult, CodingStatus, CodingTask,
    CodingToolInput, ErrorCode, ModelCall, StreamEvent, SystemSubtype, Usage,
    coding_tool_input_schema, new_session_id,
};

/// A coding harness wearing deltabench's interface.
pub trait CodingAgent: Send + Sync {
    /// The agent's name: its tool name, and what results and logs call it.
    fn name(&self) -> &str;

    /// One line on what the agent does, shown as its tool description.
    fn description(&self) -> &str;

    /// The tool form's input schema (`task`, optional `sessionId`).
    fn schema(&self) -> Value {
        coding_tool_input_schema()
    }

    /// Starts a run. The handle streams events and resolves the result.
    fn run(&self, task: CodingTask) -> CodingHandle;

    /// The tool form: drains the run and fails with `Err` when it ended in `error`.
    fn execute(
        &self,
        input: CodingToolInput,
    ) -> BoxFuture<'static, Result<CodingResult, CodingError>> {
        let handle = self.run(CodingTask {
            task: input.task,
            session_id: input.session_id,
            ..CodingTask::default()
        });
        Box::pin(async move {
            let result = handle.await;
            match (result.status, &result.error) {
                (CodingStatus::Error, Some(error)) => Err(error.clone()),
                (CodingStatus::Error, None) => Err(CodingError::new(
                    ErrorCode::Unknown,
                    "the run failed without an error",
                )),
                _ => Ok(result),
            }
        })
    }
}

/// Options for [`as_tool`]: only needed to rename or re-describe the tool form.
#[derive(Debug, Clone, Default)]
pub struct CodingToolOptions {
    /// The tool's name; `None` keeps the agent's.
    pub name: Option<String>,
    /// The tool's description; `None` keeps the agent's.
    pub description: Option<String>,
}

/// An agent in its tool form, possibly renamed.
#[derive(Clone)]
pub struct CodingTool {
    /// The name the tool is called by (the agent's unless renamed).
    pub name: String,
    /// What a model is told the tool does.
    pub description: String,
    /// The JSON schema [`CodingTool::execute`] checks its arguments against.
    pub schema: Value,
    agent: Arc<dyn CodingAgent>,
}

impl CodingTool {
    /// Validates `args` against the input schema's shape, then runs the agent.
    pub async fn execute(&self, args: Value) -> Result<CodingResult, CodingError> {
        let input: CodingToolInput = serde_json::from_value(args).map_err(|err| {
            CodingError::new(
                ErrorCode::Unknown,
                format!("invalid input for tool '{}': {err}", self.name),
            )
        })?;
        self.agent.execute(input).await
    }
}

/// The tool form of `agent`, renamed or re-described by `options`.
pub fn as_tool(agent: Arc<dyn CodingAgent>, options: CodingToolOptions) -> CodingTool {
    CodingTool {
        name: options.name.unwrap_or_else(|| agent.name().to_owned()),
        description: options
            .description
            .unwrap_or_else(|| agent.description().to_owned()),
        schema: agent.schema(),
        agent,
    }
}
