//! `mock`: replays a scripted stream. For testing pipelines without a harness or a model.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::agent::{
    CodingAgent, CodingError, CodingHandle, CodingResult, CodingTask, ErrorCode, RunContext,
    StreamEvent, new_session_id,
};

/// Tool names whose `path` / `file_path` argument counts as a modified file.
const WRITE_TOOLS: [&str; 6] = ["write", "edit", "create", "str_replace", "Write", "Edit"];

/// An event the mock emits; the same vocabulary as every agent's stream.
pub type MockEvent = StreamEvent;

/// Fail on cue: after `after` events, resolve `error` with this message and code.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SimulatedError {
    /// How many scripted events are emitted before the failure (0: fail at once).
    pub after: usize,
    /// The error's message.
    pub message: String,
    /// The error's code, which also decides the result's status.
    pub code: ErrorCode,
}

/// A named text the mock hands back in `output.metadata.artifacts`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MockArtifact {
    /// What the artifact is called in the output's list.
    pub name: String,
    /// Its text, handed back as is.
    pub content: String,
}

/// The mock's script.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MockConfig {
    /// The events to emit, in order; the last `assistant` text becomes the output.
    #[serde(default)]
    pub responses: Vec<MockEvent>,
    /// Texts returned in the output's metadata.
    #[serde(default)]
    pub artifacts: Vec<MockArtifact>,
    /// Pause before each event.
    #[serde(default, with = "crate::support::duration_opt")]
    pub delay: Option<Duration>,
    /// Fail the run instead of completing it; `None`: complete.
    #[serde(default)]
    pub simulate_error: Option<SimulatedError>,
    /// Panic after this many events (to test that the harness survives a crashing agent).
    #[serde(default)]
    pub simulate_panic: Option<usize>,
    /// Perform scripted `write` calls (`{path, content}`) in the workspace. Off by default: the
    /// agent kit's mock touches no files.
    #[serde(default)]
    pub apply_writes: bool,
}

/// Replays [`MockConfig`] as a real stream; honours abort, `send(Abort)` and the task's signal.
#[derive(Debug, Clone)]
pub struct MockAgent {
    name: String,
    config: MockConfig,
    workspace: Option<PathBuf>,
}

impl MockAgent {
    /// A mock named `mock` playing `config`.
    pub fn new(config: MockConfig) -> Self {
        Self {
            name: "mock".to_owned(),
            config,
            workspace: None,
        }
    }

    /// The same mock under another name (as results and logs show it).
    pub fn named(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    /// Where `apply_writes` writes.
    pub fn in_workspace(mut self, workspace: PathBuf) -> Self {
        self.workspace = Some(workspace);
        self
    }

    async fn replay(self, ctx: RunContext, session: String) -> CodingResult {
        let mut result = CodingResult::completed(session);
        for (index, event) in self.config.responses.iter().enumerate() {
            if let Some(error) = &self.config.simulate_error
                && index == error.after
            {
                return self.fail(result, error);
            }
            if self.config.simulate_panic == Some(index) {
                panic!("mock agent simulated a panic after {index} events");
            }
            if let Some(delay) = self.config.delay {
                tokio::select! {
                    () = tokio::time::sleep(delay) => {}
                    () = ctx.cancel.cancelled() => return CodingResult::aborted(result.session_id),
                }
            }
            if ctx.cancel.is_cancelled() {
                return CodingResult::aborted(result.session_id);
            }
            self.observe(event, &mut result);
            if !ctx.emit(event.clone()).await {
                return CodingResult::aborted(result.session_id);
            }
        }
        if let Some(error) = &self.config.simulate_error
            && error.after >= self.config.responses.len()
        {
            return self.fail(result, error);
        }
        if self.config.simulate_panic.is_some() {
            panic!("mock agent simulated a panic at the end of its script");
        }
        if !self.config.artifacts.is_empty() {
            result.output.metadata.insert(
                "artifacts".into(),
                serde_json::to_value(&self.config.artifacts).unwrap_or_default(),
            );
        }
        result
    }

    fn fail(&self, mut result: CodingResult, error: &SimulatedError) -> CodingResult {
        let modified = std::mem::take(&mut result.output.modified_files);
        let mut failed = CodingResult::failed(
            result.session_id,
            CodingError::new(error.code, error.message.clone()),
        );
        failed.output.modified_files = modified;
        failed
    }

    fn observe(&self, event: &StreamEvent, result: &mut CodingResult) {
        match event {
            StreamEvent::Assistant { text } => result.output.text = Some(text.clone()),
            StreamEvent::ToolCall { name, args, .. } if WRITE_TOOLS.contains(&name.as_str()) => {
                let path = args
                    .get("path")
                    .or_else(|| args.get("file_path"))
                    .and_then(|p| p.as_str());
                if let Some(path) = path {
                    if !result.output.modified_files.iter().any(|p| p == path) {
                        result.output.modified_files.push(path.to_owned());
                    }
                    if self.config.apply_writes {
                        self.write(path, args.get("content").and_then(|c| c.as_str()));
                    }
                }
            }
            _ => {}
        }
    }

    fn write(&self, path: &str, content: Option<&str>) {
        let (Some(workspace), Some(content)) = (&self.workspace, content) else {
            return;
        };
        let target = workspace.join(path);
        if let Some(parent) = target.parent() {
            let _ = std::fs::create_dir_all(parent);
        }
        let _ = std::fs::write(target, content);
    }
}

impl CodingAgent for MockAgent {
    fn name(&self) -> &str {
        &self.name
    }

    fn description(&self) -> &str {
        "Replays a scripted stream of events."
    }

    fn run(&self, task: CodingTask) -> CodingHandle {
        let session = task.session_id.clone().unwrap_or_else(new_session_id);
        let agent = self.clone();
        CodingHandle::spawn(&self.name, &task, false, move |ctx| {
            agent.replay(ctx, session)
        })
    }
}
