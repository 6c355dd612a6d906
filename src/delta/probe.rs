//! deltabench's probe: diff, then hidden tests, then the verify command (inside the sandbox
//! under `isolation: sandbox`, with a home of its own: nothing the agent left in its home, such
//! as a planted `usercustomize.py`, reaches the verify command).

use std::path::PathBuf;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use super::{
    CommandResult, DeltaProbe, EnvironmentDelta, ProbeContext, ProbeError, ProbeErrorKind,
    capture_diff, capture_diff_detached,
};
use crate::agent::CodingResult;
use crate::process::{self, CommandSpec};
use crate::workspace::{Overlay, SandboxPolicy, apply_overlay};

/// A verify command and its own time limit.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct VerifySpec {
    pub run: String,
    pub timeout: Option<Duration>,
}

/// Diff against the base, hidden tests over the workspace, then the verify command.
#[derive(Debug, Clone)]
pub struct TaskProbe {
    pub hidden_tests: Option<Overlay>,
    pub verify: VerifySpec,
    /// Where `diff.patch` and `verify.log` go, when set.
    pub artifacts: Option<PathBuf>,
    /// Runs the verify command in this sandbox, when set.
    pub sandbox: Option<SandboxPolicy>,
    /// A repo holding the base's objects, outside the agent's reach: the diff and the hidden
    /// tests go through it when the agent broke the workspace's own `.git`.
    pub objects: Option<PathBuf>,
    /// The workspace's `.git/info/exclude` is deltabench's (a fresh clone's), not the user's:
    /// it is set aside while the diff is taken, so an agent cannot hide a file from the diff
    /// by listing it there. False for `session` workspaces, whose excludes are the user's.
    pub set_aside_excludes: bool,
}

/// Moves a workspace's `.git/info/exclude` out of the way until dropped.
struct ExcludesAside {
    file: PathBuf,
    aside: PathBuf,
}

impl ExcludesAside {
    fn new(workspace: &std::path::Path) -> Option<Self> {
        let info = workspace.join(".git").join("info");
        let file = info.join("exclude");
        let aside = info.join("exclude.deltabench-aside");
        std::fs::rename(&file, &aside).ok()?;
        Some(Self { file, aside })
    }
}

impl Drop for ExcludesAside {
    fn drop(&mut self) {
        // Back for --keep-workspaces; the workspace is usually removed right after.
        let _ = std::fs::rename(&self.aside, &self.file);
    }
}

impl DeltaProbe for TaskProbe {
    fn probe<'a>(
        &'a self,
        _result: &'a CodingResult,
        ctx: &'a ProbeContext<'a>,
    ) -> BoxFuture<'a, Result<EnvironmentDelta, ProbeError>> {
        Box::pin(async move {
            let workspace = ctx.workspace.to_owned();
            let base = ctx.base.to_owned();
            let hidden = self.hidden_tests.clone();
            let artifacts = self.artifacts.clone();
            let upper = ctx.changes.map(|p| p.to_owned());
            let objects = self.objects.clone();
            let set_aside = self.set_aside_excludes;
            // git2 and file copies block: keep them off the runtime's workers.
            let diff = tokio::task::spawn_blocking(move || -> Result<Vec<u8>, ProbeError> {
                let excludes = set_aside.then(|| ExcludesAside::new(&workspace)).flatten();
                let changed = upper
                    .map(|dir| crate::workspace::overlay_changes(&dir))
                    .transpose()
                    .map_err(|e| {
                        ProbeError::new(
                            ProbeErrorKind::Diff,
                            format!("cannot list the overlay's changes: {e}"),
                        )
                    })?;
                let patch = capture_diff(&workspace, &base, changed.as_deref())
                    .or_else(|err| match &objects {
                        Some(objects) => {
                            capture_diff_detached(objects, &workspace, &base, changed.as_deref())
                        }
                        None => Err(err),
                    })
                    .map_err(|e| ProbeError::new(ProbeErrorKind::Diff, e.message()))?;
                drop(excludes);
                if let Some(dir) = &artifacts {
                    std::fs::write(dir.join("diff.patch"), &patch).map_err(|e| {
                        ProbeError::new(
                            ProbeErrorKind::Diff,
                            format!("cannot save diff.patch: {e}"),
                        )
                    })?;
                }
                if let Some(overlay) = &hidden {
                    apply_overlay(&workspace, &base, overlay, objects.as_deref())
                        .map_err(|e| ProbeError::new(ProbeErrorKind::HiddenTests, e.to_string()))?;
                }
                Ok(patch)
            })
            .await
            .map_err(|e| ProbeError::new(ProbeErrorKind::Diff, e.to_string()))??;

            // The verify command runs even when the run was cancelled: evidence first.
            let never = CancellationToken::new();
            let mut spec = CommandSpec::shell(&self.verify.run, ctx.workspace)
                .timeout(self.verify.timeout)
                .log_path(self.artifacts.as_ref().map(|dir| dir.join("verify.log")));
            if let Some(policy) = &self.sandbox {
                spec = policy.wrap(ctx.workspace, spec).map_err(|e| {
                    ProbeError::new(
                        ProbeErrorKind::Verify,
                        format!("cannot prepare the sandbox's home: {e}"),
                    )
                })?;
            }
            let ended = process::run(&spec, &never).await.map_err(|e| {
                ProbeError::new(
                    ProbeErrorKind::Verify,
                    format!("`{}`: {e}", self.verify.run),
                )
            })?;
            Ok(EnvironmentDelta {
                diff: String::from_utf8_lossy(&diff).into_owned(),
                command_result: CommandResult {
                    command: self.verify.run.clone(),
                    exit_code: ended.exit_code,
                    timed_out: ended.timed_out,
                    output: ended.output.text(),
                    duration_ms: ended.duration.as_millis() as u64,
                },
            })
        })
    }
}
