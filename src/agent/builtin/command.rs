//! `command`: bring your own harness as a shell command run in the workspace.
//!
//! The command runs under `sh -c` with the workspace as its working directory, stdin closed,
//! in its own process group, and gets the instruction in `$DELTABENCH_INSTRUCTION` and in the
//! file named by `$DELTABENCH_INSTRUCTION_FILE`. Exit 0 is `completed`, anything else `error`.
//! It may report its own messages, tool calls and usage in the file named by
//! `$DELTABENCH_EVENTS` ([`super::agent_events`]), read once it has ended.
//! Under `isolation: sandbox` it runs inside bubblewrap ([`SandboxPolicy`]), with the network
//! its `network:` key asks for. For a task with an `environment:` it runs in the task's
//! container instead ([`ContainerPolicy`]), whatever the isolation.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::agent_events::{self, AGENT_EVENTS};
use crate::agent::{
    BudgetStop, CodingAgent, CodingError, CodingHandle, CodingResult, CodingTask, ErrorCode,
    RunContext, StreamEvent, new_session_id,
};
use crate::process::{self, CommandSpec};
use crate::workspace::{Confinement, Network, program_paths};

/// Characters of the command's output kept as the result's summary text.
const SUMMARY_CHARS: usize = 2000;

/// How to run a command agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommandAgentConfig {
    /// A shell command line.
    pub run: String,
    /// How long the command may run before it is stopped; unset: no limit.
    #[serde(default, with = "crate::support::duration_opt")]
    pub timeout: Option<Duration>,
    /// Variables set for the command, over the trial's own `DELTABENCH_*` ones.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The network in the sandbox or the task's container (`host` there, `none` or `model`).
    /// Unset: `model` when its calls pass the gateway, else `none` ([`Network::for_agent`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<Network>,
    /// Route the command's model calls through deltabench's gateway: the base-URL variables
    /// the CLI adapters set (`ANTHROPIC_BASE_URL`, `OPENAI_BASE_URL`, `GOOGLE_GEMINI_BASE_URL`)
    /// point at it, the key variables hold a placeholder, and its usage is counted there.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub gateway: bool,
    /// With `gateway`: the server root the calls go on to (default: each provider's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<crate::agent::harness::Endpoint>,
    /// With `gateway`: limits on the trial's model use.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<crate::agent::Budget>,
}

/// A shell command wearing the [`CodingAgent`] interface.
#[derive(Debug, Clone)]
pub struct CommandAgent {
    name: String,
    config: CommandAgentConfig,
    workspace: PathBuf,
    scratch: PathBuf,
    confinement: Confinement,
    /// The gateway's root URL for this trial, and its budget stop.
    gateway: Option<(String, BudgetStop)>,
}

/// The instruction as a file, in the scratch folder.
pub const INSTRUCTION_FILE: &str = "instruction.md";
/// Everything the agent printed, in the scratch folder.
pub const AGENT_LOG: &str = "agent.log";

impl CommandAgent {
    /// `scratch` receives `instruction.md` and `agent.log`; it must exist and lie outside the
    /// workspace (anything written inside the workspace would show up in the diff).
    pub fn new(
        name: &str,
        config: CommandAgentConfig,
        workspace: PathBuf,
        scratch: PathBuf,
    ) -> Self {
        Self {
            name: name.to_owned(),
            config,
            workspace,
            scratch,
            confinement: Confinement::Host,
            gateway: None,
        }
    }

    /// Points the command's model clients at `url` (a gateway trial's root) and stops it when
    /// `stop` trips; the run then resolves `budget_exceeded`.
    pub fn through_gateway(mut self, url: String, stop: BudgetStop) -> Self {
        self.gateway = Some((url, stop));
        self
    }

    /// Runs the command confined (in the task's container or the sandbox), with its script and
    /// instruction file readable at their host paths and the agent's network there (so call it
    /// after [`Self::through_gateway`]).
    pub fn confined(mut self, confinement: Confinement) -> Self {
        let mut confinement = confinement
            .agent_network(self.config.network, self.gateway.is_some())
            .readable(self.scratch.join(INSTRUCTION_FILE));
        let contained = confinement.container().is_some();
        for path in program_paths(&self.config.run) {
            // A system folder the command names (`cd /usr/bin`) is the image's own there.
            if contained && !crate::agent::harness::mountable_in_container(&path) {
                continue;
            }
            confinement = confinement.readable(path);
        }
        self.confinement = confinement;
        self
    }

    async fn execute_command(self, ctx: RunContext, task: String, session: String) -> CodingResult {
        let instruction_file = self.scratch.join(INSTRUCTION_FILE);
        let events_file = self.events_file();
        if let Err(err) = prepare_files(&instruction_file, &task, &events_file).await {
            return CodingResult::failed(session, err);
        }
        let spec = self.spec(&task, &session, &instruction_file, &events_file);
        let spec = match confined_spec(&self.confinement, &self.workspace, spec) {
            Ok(spec) => spec,
            Err(err) => return CodingResult::failed(session, err),
        };
        ctx.emit(StreamEvent::System {
            subtype: "spawn".into(),
            message: format!("{}sh -c {:?}", self.confinement.place(), self.config.run),
            data: None,
        })
        .await;
        let budget = self.gateway.as_ref().map(|(_, stop)| stop.clone());
        let ended = match run_within_budget(&spec, &ctx.cancel, budget.as_ref()).await {
            Ok(ended) => ended,
            Err(err) => {
                let message = format!("cannot start `{}`: {err}", self.config.run);
                return CodingResult::failed(
                    session,
                    CodingError::new(ErrorCode::SdkError, message),
                );
            }
        };
        let exceeded = budget.as_ref().and_then(BudgetStop::tripped);
        let reported = report_events(&ctx, &events_file, &ended).await;
        if let Some(failed) = confinement_failure(&self.confinement, &session, &ended) {
            return failed;
        }
        let end = CommandEnd {
            cancelled: ctx.cancel.is_cancelled(),
            exceeded,
            timeout: self.config.timeout,
        };
        if let Some(reason) = &end.exceeded {
            ctx.emit(crate::agent::stop_event(reason)).await;
        }
        let mut result = end.result(session, &ended);
        result.output.text = summary(&ended.output.text());
        result.usage = reported.usage;
        if !reported.problems.is_empty() {
            result.output.metadata.insert(
                "agent_events_problems".to_owned(),
                serde_json::json!(reported.problems),
            );
        }
        result
    }

    /// The command line with the trial's variables, the gateway's and the agent's own `env:`.
    fn spec(
        &self,
        task: &str,
        session: &str,
        instruction_file: &Path,
        events_file: &Path,
    ) -> CommandSpec {
        let mut spec = CommandSpec::shell(&self.config.run, &self.workspace)
            .env("DELTABENCH_INSTRUCTION", task)
            .env("DELTABENCH_EVENTS", events_file)
            .env("DELTABENCH_INSTRUCTION_FILE", instruction_file)
            .env("DELTABENCH_WORKSPACE", &self.workspace)
            .env("DELTABENCH_SESSION_ID", session)
            .timeout(self.config.timeout)
            .log_path(Some(self.scratch.join(AGENT_LOG)));
        if let Some((url, _)) = &self.gateway {
            let key = crate::agent::harness::invocation::DUMMY_API_KEY;
            for (name, value) in [
                ("DELTABENCH_GATEWAY_URL", url.clone()),
                ("ANTHROPIC_BASE_URL", url.clone()),
                ("OPENAI_BASE_URL", format!("{url}/v1")),
                ("GOOGLE_GEMINI_BASE_URL", url.clone()),
                ("ANTHROPIC_API_KEY", key.to_owned()),
                ("OPENAI_API_KEY", key.to_owned()),
                ("GEMINI_API_KEY", key.to_owned()),
            ] {
                spec = spec.env(name, value);
            }
        }
        for (key, value) in &self.config.env {
            spec = spec.env(key, value);
        }
        spec
    }

    /// Where the command writes its events: the trial folder, or the home it gets when it runs
    /// confined (the one folder of the trial's it can write there).
    fn events_file(&self) -> PathBuf {
        match self.confinement.home() {
            Some(home) => home.join(AGENT_EVENTS),
            None => self.scratch.join(AGENT_EVENTS),
        }
    }
}

/// The instruction file written and the events file made empty, or the agent's error saying
/// which could not be.
async fn prepare_files(instruction: &Path, task: &str, events: &Path) -> Result<(), CodingError> {
    let failed = |message| CodingError::new(ErrorCode::SdkError, message);
    tokio::fs::write(instruction, task)
        .await
        .map_err(|err| failed(format!("cannot write {}: {err}", instruction.display())))?;
    fresh_file(events).map_err(|err| failed(format!("cannot create {}: {err}", events.display())))
}

/// Runs `spec` until it ends, the run is cancelled, or the gateway's budget trips.
async fn run_within_budget(
    spec: &CommandSpec,
    cancel: &tokio_util::sync::CancellationToken,
    budget: Option<&BudgetStop>,
) -> std::io::Result<process::ProcessOutput> {
    let stop = cancel.child_token();
    let stopper = budget.cloned().map(|budget| {
        let stop = stop.clone();
        tokio::spawn(async move {
            budget.wait().await;
            stop.cancel();
        })
    });
    let ended = process::run(spec, &stop).await;
    if let Some(stopper) = stopper {
        stopper.abort();
    }
    ended
}

/// Emits what the command reported in `$DELTABENCH_EVENTS` (and the problems reading it), then
/// how it exited; an empty events file is removed.
async fn report_events(
    ctx: &RunContext,
    events_file: &Path,
    ended: &process::ProcessOutput,
) -> agent_events::AgentEvents {
    let mut reported = agent_events::read(events_file);
    if std::fs::symlink_metadata(events_file).is_ok_and(|m| m.is_file() && m.len() == 0) {
        // Nothing reported: no empty file left in the trial folder.
        let _ = std::fs::remove_file(events_file);
    }
    for event in std::mem::take(&mut reported.events) {
        ctx.emit(event).await;
    }
    for problem in &reported.problems {
        ctx.emit(StreamEvent::System {
            subtype: "warning".into(),
            message: format!("$DELTABENCH_EVENTS ({AGENT_EVENTS}): {problem}"),
            data: None,
        })
        .await;
    }
    ctx.emit(StreamEvent::System {
        subtype: "exit".into(),
        message: ended.ending(),
        data: Some(serde_json::json!({
            "exit_code": ended.exit_code,
            "signal": ended.signal,
            "timed_out": ended.timed_out,
            "leaked": ended.leaked,
            "output_bytes": ended.output.total_bytes(),
        })),
    })
    .await;
    reported
}

/// What decides a command agent's status besides its exit.
struct CommandEnd {
    /// The run was cancelled while the command ran.
    cancelled: bool,
    /// The gateway's budget tripped, and why.
    exceeded: Option<String>,
    timeout: Option<std::time::Duration>,
}

impl CommandEnd {
    /// The agent's result: aborted, stopped by its budget, timed out, completed or failed.
    fn result(&self, session: String, ended: &process::ProcessOutput) -> CodingResult {
        if self.cancelled {
            CodingResult::aborted(session)
        } else if let Some(reason) = &self.exceeded {
            crate::agent::stopped_result(session, reason.clone())
        } else if ended.cancelled {
            CodingResult::aborted(session)
        } else if ended.timed_out {
            let limit = humantime::format_duration(self.timeout.unwrap_or_default());
            let message = format!("command exceeded its timeout of {limit}");
            CodingResult::failed(session, CodingError::new(ErrorCode::Timeout, message))
        } else if ended.exit_code == Some(0) {
            CodingResult::completed(session)
        } else {
            let message = format!("command {}", ended.ending());
            CodingResult::failed(session, CodingError::new(ErrorCode::SdkError, message))
        }
    }
}

/// The last [`SUMMARY_CHARS`] characters of the command's output, `None` when it printed nothing.
fn summary(text: &str) -> Option<String> {
    let start = text
        .char_indices()
        .rev()
        .nth(SUMMARY_CHARS)
        .map_or(0, |(i, _)| i);
    Some(text[start..].to_owned()).filter(|t| !t.is_empty())
}

/// An empty file at `path`, replacing whatever was there (a symlink is removed, not followed).
fn fresh_file(path: &std::path::Path) -> std::io::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map(drop)
}

/// The key of a result's metadata that marks a sandbox that never started the agent: the
/// trial is the harness's failure (`infra_error`, retried), not the agent's.
pub const SANDBOX_FAILED: &str = "deltabench.sandbox_failed";

/// When a confined command never started (the runtime or bubblewrap could not start it), the
/// failed result that says so. The start is reported where the command's own processes cannot
/// write (bubblewrap's status fd, the container's mark), so an agent cannot fake it.
pub(crate) fn confinement_failure(
    confinement: &Confinement,
    session: &str,
    ended: &process::ProcessOutput,
) -> Option<CodingResult> {
    if confinement.started(ended) {
        return None;
    }
    let mut result = CodingResult::failed(
        session.to_owned(),
        CodingError::new(
            ErrorCode::SdkError,
            format!(
                "{} could not start the agent: {}",
                confinement.starter(),
                ended.last_line()
            ),
        ),
    );
    // The harness's failure: unscored, and retried.
    result
        .output
        .metadata
        .insert(SANDBOX_FAILED.to_owned(), serde_json::json!(true));
    Some(result)
}

/// `spec` wrapped in `confinement`; an agent's error when its home cannot be made.
pub(crate) fn confined_spec(
    confinement: &Confinement,
    workspace: &std::path::Path,
    spec: CommandSpec,
) -> Result<CommandSpec, CodingError> {
    confinement.wrap(workspace, spec).map_err(|err| {
        CodingError::new(
            ErrorCode::SdkError,
            format!("cannot prepare the confinement's home: {err}"),
        )
    })
}

impl CodingAgent for CommandAgent {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        "Runs a shell command in the workspace with the instruction in its environment."
    }

    fn run(&self, task: CodingTask) -> CodingHandle {
        let session = task.session_id.clone().unwrap_or_else(new_session_id);
        let agent = self.clone();
        let text = task.task.clone();
        CodingHandle::spawn(&self.name, &task, false, move |ctx| {
            agent.execute_command(ctx, text, session)
        })
    }
}
