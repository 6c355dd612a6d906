//! The environment delta: what the workspace shows after the agent ran, the only scoring surface.
//!
//! A [`DeltaProbe`] runs inside the node, before the workspace is disposed. deltabench's own
//! probe ([`TaskProbe`]) takes the diff with a harness-owned view of the tree ([`snapshot`]),
//! then runs the verify command in a fresh workspace holding exactly that diff and the hidden
//! tests, with its own timeout and bounded output.

mod apart;
mod channel;
mod container;
mod diff;
pub mod flags;
pub mod mutate;
mod probe;
pub mod reward;
mod snapshot;
mod tests_report;
pub mod toolchain;
mod watch;

use std::path::Path;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

pub use container::{
    CONTAINER_CHANGES, CONTAINER_DELTA, CaptureError, ContainerCapture, ContainerChange,
    ContainerDelta, INSTALLED_NOT_APPLIED,
};
pub use diff::{DiffStats, changed_paths, commit_setup, patch_bytes};
pub use mutate::{BitingMutant, DEFAULT_MUTANTS, Mutant, MutationReport};
pub use probe::{
    DIFF_PATCH, FreshWorkspace, HOOK_DIR, HOOK_REPORT, MUTANTS_HOME, MUTANTS_LOG, MutationPlan,
    TaskProbe, VERIFY_HOME, VERIFY_LOG, VerifySpec, never_verified,
};
pub use snapshot::{EntryKind, FileChange, Snapshot, SnapshotError, snapshot};
pub use tests_report::{Outcomes, TestReport, cargo_tests, failed_tests};

/// The verify command's result as a metric sees it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CommandResult {
    /// The verify command as run, in shell syntax.
    pub command: String,
    /// The command's exit status; `None` when a signal ended it (as on timeout).
    pub exit_code: Option<i32>,
    /// True when the command ran past the verify timeout and was killed.
    pub timed_out: bool,
    /// Combined stdout and stderr, head and tail kept when long.
    pub output: String,
    /// Wall-clock time the command ran, in milliseconds.
    pub duration_ms: u64,
    /// What Python test runners reported through the harness's hook; `None` when the probe
    /// installed no hook.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tests: Option<TestReport>,
    /// The reward the test script wrote, read by the harness (a task with `verify.reward`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reward: Option<reward::Reward>,
}

impl EnvironmentDelta {
    /// Whether the agent changed nothing the verify command sees: the workspace's diff is empty
    /// and so is (under `delta: container`) what it changed in its container.
    pub fn is_unchanged(&self) -> bool {
        self.diff.trim().is_empty()
            && self
                .container
                .as_ref()
                .is_none_or(|c| !c.changes_anything())
    }
}

impl CommandResult {
    /// Within its timeout, a full reward (a task whose test script writes one: its authors'
    /// verdict, whatever the script's exit status), else exited 0.
    pub fn succeeded(&self) -> bool {
        !self.timed_out
            && match &self.reward {
                Some(reward) => reward.passed(),
                None => self.exit_code == Some(0),
            }
    }
}

/// The scoring surface: the diff and the verify command's result. There is no summary field.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EnvironmentDelta {
    /// The workspace diff against the base, then (under `delta: container`) the container's
    /// changes carried into verify, each in a `diff --container PATH` section; empty when
    /// nothing changed.
    pub diff: String,
    /// The verify command's run against that diff.
    pub command_result: CommandResult,
    /// Why the probe refused to verify (a diff over `max_diff`): the trial fails.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rejected: Option<String>,
    /// What the mutation check found, when it ran (a passing verify run, a task with mutants).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mutation: Option<MutationReport>,
    /// Hidden test files whose content changed while the verify command ran.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changed_tests: Vec<String>,
    /// Under `delta: container`: what the agent changed in its container outside the workspace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<ContainerDelta>,
}

impl EnvironmentDelta {
    /// The workspace's part of the diff: a git patch, without the container's sections.
    pub fn workspace_diff(&self) -> &str {
        let container = self.container.as_ref().map_or(0, |c| c.patch.len());
        match self.diff.len().checked_sub(container) {
            Some(end) if self.diff.is_char_boundary(end) => &self.diff[..end],
            _ => &self.diff,
        }
    }
}

/// What a probe knows about the run it inspects.
#[derive(Debug, Clone, Copy)]
pub struct ProbeContext<'a> {
    /// The trial's workspace directory, as the agent left it.
    pub workspace: &'a Path,
    /// The task's id, for messages and log names.
    pub task: &'a str,
    /// The tree-ish the workspace started from.
    pub base: &'a str,
    /// Cancelled when the run is interrupted: the probe stops its commands; `None` when the
    /// caller never cancels.
    pub signal: Option<&'a CancellationToken>,
    /// An overlay's upper dir: only paths under it can differ from the base.
    pub changes: Option<&'a Path>,
}

/// Gathers the delta before the workspace is disposed.
pub trait DeltaProbe: Send + Sync {
    /// Takes the delta of the workspace in `ctx`; an error leaves the trial unscored.
    fn probe<'a>(
        &'a self,
        ctx: &'a ProbeContext<'a>,
    ) -> BoxFuture<'a, Result<EnvironmentDelta, ProbeError>>;
}

/// The probe could not gather evidence: the trial cannot be scored.
#[derive(Debug, thiserror::Error)]
#[error("{kind}: {message}")]
pub struct ProbeError {
    /// Which step of the probe failed.
    pub kind: ProbeErrorKind,
    /// The underlying failure, as shown after the step.
    pub message: String,
}

/// The step of a probe that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeErrorKind {
    /// Taking the workspace's diff against the base.
    Diff,
    /// Copying the task's hidden tests into the verify workspace.
    HiddenTests,
    /// Starting or waiting for the verify command.
    Verify,
}

impl std::fmt::Display for ProbeErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Diff => "cannot diff the workspace",
            Self::HiddenTests => "cannot copy the hidden tests in",
            Self::Verify => "cannot run the verify command",
        })
    }
}

impl ProbeError {
    /// An error of `kind` with `message` as its detail.
    pub fn new(kind: ProbeErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
        }
    }
}
