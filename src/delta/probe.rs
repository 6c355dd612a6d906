//! deltabench's probe: what is recorded is what is verified.
//!
//! 1. The diff is the harness's own view of the agent's workspace ([`snapshot`]): no index flag,
//!    git config, attribute or ignore rule of the agent's counts.
//! 2. The verify command runs in a *fresh* workspace made from the base, with exactly that diff
//!    applied and the hidden tests laid over it. Nothing the diff does not show (an ignored file,
//!    a git trick, a process the agent left behind in its own workspace) reaches the verdict.
//! 3. Under `isolation: sandbox` the verify command runs in the sandbox too, with a home of its
//!    own, and Python test runs report through a hook that the workspace cannot shadow.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use super::snapshot::{EntryKind, FileChange, Snapshot, SnapshotError, snapshot};
use super::{
    CommandResult, DeltaProbe, EnvironmentDelta, ProbeContext, ProbeError, ProbeErrorKind,
    TestReport,
};
use crate::agent::CodingResult;
use crate::process::{self, CommandSpec};
use crate::workspace::{
    ContainerPolicy, Overlay, SandboxPolicy, WorkspaceBase, WorkspaceProvisioner, apply_overlay,
    container_started, write_entry,
};

/// The patch of a trial's changes, in the artifacts folder.
pub const DIFF_PATCH: &str = "diff.patch";
/// The verify command's combined output, in the artifacts folder.
pub const VERIFY_LOG: &str = "verify.log";
/// The verify command's scratch home, in the artifacts folder.
pub const VERIFY_HOME: &str = "verify-home";
/// The test hook's folder in the verify command's home.
pub const HOOK_DIR: &str = ".deltabench";
/// The tests the hook saw run, one JSON object per line, in [`HOOK_DIR`].
pub const HOOK_REPORT: &str = "tests.jsonl";

/// A verify command and its own time limit.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct VerifySpec {
    pub run: String,
    pub timeout: Option<Duration>,
}

/// Where the verify command runs: a workspace provisioned fresh from the base for it.
#[derive(Clone)]
pub struct FreshWorkspace {
    pub provisioner: Arc<dyn WorkspaceProvisioner>,
    pub base: WorkspaceBase,
    pub isolation: String,
}

/// Diff against the base, a fresh workspace with that diff and the hidden tests, then the
/// verify command in it.
#[derive(Clone)]
pub struct TaskProbe {
    pub hidden_tests: Option<Overlay>,
    pub verify: VerifySpec,
    /// Where `diff.patch`, `verify.log` and the test hook's files go, when set.
    pub artifacts: Option<PathBuf>,
    /// Runs the verify command in this sandbox, when set.
    pub sandbox: Option<SandboxPolicy>,
    /// Runs the verify command in this container, when set (instead of the sandbox).
    pub container: Option<ContainerPolicy>,
    /// A harness-owned repository holding the base's objects, outside the agent's reach.
    pub objects: PathBuf,
    /// The most bytes of changed content a diff may hold.
    pub max_diff: u64,
    pub fresh: FreshWorkspace,
}

/// The hook's files, written under the verify command's home.
const HOOK_SITECUSTOMIZE: &str = include_str!("hook/sitecustomize.py");
const HOOK_PYTEST: &str = include_str!("hook/deltabench_pytest.py");

impl DeltaProbe for TaskProbe {
    fn probe<'a>(
        &'a self,
        _result: &'a CodingResult,
        ctx: &'a ProbeContext<'a>,
    ) -> BoxFuture<'a, Result<EnvironmentDelta, ProbeError>> {
        Box::pin(async move {
            let err = |kind| move |message: String| ProbeError::new(kind, message);
            let (objects, workspace, base) = (
                self.objects.clone(),
                ctx.workspace.to_owned(),
                ctx.base.to_owned(),
            );
            let upper = ctx.changes.map(Path::to_owned);
            let limit = self.max_diff;
            // git2 and file reads block: keep them off the runtime's workers.
            let taken = tokio::task::spawn_blocking(move || {
                let only = upper
                    .map(|dir| crate::workspace::overlay_changes(&dir))
                    .transpose()
                    .map_err(|e| SnapshotError::Io {
                        path: PathBuf::from("the overlay's upper dir"),
                        source: e,
                    })?;
                snapshot(&objects, &workspace, &base, only.as_deref(), limit)
            })
            .await
            .map_err(|e| err(ProbeErrorKind::Diff)(e.to_string()))?;
            let snapshot = match taken {
                Ok(snapshot) => snapshot,
                Err(too_large @ SnapshotError::TooLarge { .. }) => {
                    return Ok(EnvironmentDelta {
                        rejected: Some(too_large.to_string()),
                        command_result: CommandResult {
                            command: self.verify.run.clone(),
                            ..CommandResult::default()
                        },
                        ..EnvironmentDelta::default()
                    });
                }
                Err(e) => return Err(err(ProbeErrorKind::Diff)(e.to_string())),
            };
            if let Some(dir) = &self.artifacts {
                std::fs::write(dir.join(DIFF_PATCH), &snapshot.patch).map_err(|e| {
                    err(ProbeErrorKind::Diff)(format!("cannot save {DIFF_PATCH}: {e}"))
                })?;
            }
            let command_result = self.verify_fresh(&snapshot).await?;
            Ok(EnvironmentDelta {
                diff: String::from_utf8_lossy(&snapshot.patch).into_owned(),
                command_result,
                rejected: None,
            })
        })
    }
}

impl TaskProbe {
    /// Provisions the fresh workspace, lays the agent's changes and the hidden tests over it,
    /// runs the verify command, and disposes of it on every path.
    async fn verify_fresh(&self, snapshot: &Snapshot) -> Result<CommandResult, ProbeError> {
        let fresh = &self.fresh;
        let workspace = fresh
            .provisioner
            .provision(&fresh.base, &fresh.isolation)
            .await
            .map_err(|e| {
                ProbeError::new(
                    ProbeErrorKind::Verify,
                    format!("cannot provision the workspace to verify in: {e}"),
                )
            })?;
        let result = self
            .verify_in(&workspace.path, &workspace.base, snapshot)
            .await;
        let path = workspace.path.clone();
        let disposed = tokio::task::spawn_blocking(move || workspace.dispose()).await;
        match (result, disposed) {
            (Ok(result), Ok(Ok(()))) => Ok(result),
            (Err(e), _) => Err(e),
            (Ok(_), Ok(Err(e))) => Err(ProbeError::new(
                ProbeErrorKind::Verify,
                format!(
                    "cannot dispose of the verify workspace {}: {e}",
                    path.display()
                ),
            )),
            (Ok(_), Err(e)) => Err(ProbeError::new(ProbeErrorKind::Verify, e.to_string())),
        }
    }

    async fn verify_in(
        &self,
        workspace: &Path,
        base: &str,
        snapshot: &Snapshot,
    ) -> Result<CommandResult, ProbeError> {
        let (dir, base_owned, changes) = (
            workspace.to_owned(),
            base.to_owned(),
            snapshot.changes.clone(),
        );
        let (hidden, objects) = (self.hidden_tests.clone(), self.objects.clone());
        tokio::task::spawn_blocking(move || -> Result<(), ProbeError> {
            for change in &changes {
                let (path, content, kind) = match change {
                    FileChange::Remove { path } => (path, None, EntryKind::File),
                    FileChange::Write {
                        path,
                        content,
                        kind,
                    } => (path, Some(content.as_slice()), *kind),
                };
                write_entry(&dir, path, content, kind).map_err(|e| {
                    ProbeError::new(
                        ProbeErrorKind::Verify,
                        format!("cannot apply the diff to the verify workspace: {e}"),
                    )
                })?;
            }
            if let Some(overlay) = &hidden {
                apply_overlay(&dir, &base_owned, overlay, Some(&objects))
                    .map_err(|e| ProbeError::new(ProbeErrorKind::HiddenTests, e.to_string()))?;
            }
            Ok(())
        })
        .await
        .map_err(|e| ProbeError::new(ProbeErrorKind::Verify, e.to_string()))??;

        let hook = self.install_hook().map_err(|e| {
            ProbeError::new(
                ProbeErrorKind::Verify,
                format!("cannot install the test hook: {e}"),
            )
        })?;
        // The verify command runs even when the run was cancelled: evidence first.
        let never = CancellationToken::new();
        let mut spec = CommandSpec::shell(&self.verify.run, workspace)
            .timeout(self.verify.timeout)
            .log_path(self.artifacts.as_ref().map(|dir| dir.join(VERIFY_LOG)));
        if let Some(hook) = &hook {
            spec = hook.env(spec);
        }
        if let Some(policy) = &self.sandbox {
            spec = policy.wrap(workspace, spec).map_err(|e| {
                ProbeError::new(
                    ProbeErrorKind::Verify,
                    format!("cannot prepare the sandbox's home: {e}"),
                )
            })?;
        }
        if let Some(container) = &self.container {
            spec = container.wrap(workspace, spec).map_err(|e| {
                ProbeError::new(
                    ProbeErrorKind::Verify,
                    format!("cannot prepare the verify command's container: {e}"),
                )
            })?;
        }
        let ended = process::run(&spec, &never).await.map_err(|e| {
            ProbeError::new(
                ProbeErrorKind::Verify,
                format!("`{}`: {e}", self.verify.run),
            )
        })?;
        // 125 is the runtime's own failure: the command never ran, so no verdict.
        if self.container.is_some() && !container_started(&ended) {
            return Err(ProbeError::new(
                ProbeErrorKind::Verify,
                format!(
                    "the container runtime could not run the verify command: {}",
                    ended.last_line()
                ),
            ));
        }
        if self.sandbox.is_some() && !crate::workspace::sandbox_started(&ended) {
            return Err(ProbeError::new(
                ProbeErrorKind::Verify,
                format!(
                    "the sandbox could not start the verify command: {}",
                    ended.last_line()
                ),
            ));
        }
        Ok(CommandResult {
            command: self.verify.run.clone(),
            exit_code: ended.exit_code,
            timed_out: ended.timed_out,
            output: ended.output.text(),
            duration_ms: ended.duration.as_millis() as u64,
            tests: hook.map(|hook| hook.report()),
        })
    }

    /// Writes the hook under the verify command's home (writable inside the sandbox too).
    fn install_hook(&self) -> std::io::Result<Option<TestHook>> {
        let Some(artifacts) = &self.artifacts else {
            return Ok(None);
        };
        // In the home the command gets: mounted in its sandbox or container at the same path.
        let dir = match (&self.sandbox, &self.container) {
            (Some(policy), _) => policy.home.join(HOOK_DIR),
            (None, Some(container)) => container.home.join(HOOK_DIR),
            (None, None) => artifacts.join(VERIFY_HOME).join(HOOK_DIR),
        };
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join("sitecustomize.py"), HOOK_SITECUSTOMIZE)?;
        std::fs::write(dir.join("deltabench_pytest.py"), HOOK_PYTEST)?;
        let evidence = dir.join(HOOK_REPORT);
        std::fs::write(&evidence, "")?;
        Ok(Some(TestHook { dir, evidence }))
    }
}

struct TestHook {
    dir: PathBuf,
    evidence: PathBuf,
}

impl TestHook {
    fn env(&self, spec: CommandSpec) -> CommandSpec {
        let joined = |var: &str, first: &str, sep: &str| match std::env::var(var) {
            Ok(rest) if !rest.is_empty() => format!("{first}{sep}{rest}"),
            _ => first.to_owned(),
        };
        spec.env(
            "PYTHONPATH",
            joined("PYTHONPATH", &self.dir.to_string_lossy(), ":"),
        )
        .env(
            "PYTEST_PLUGINS",
            joined("PYTEST_PLUGINS", "deltabench_pytest", ","),
        )
        .env("DELTABENCH_TEST_EVIDENCE", &self.evidence)
    }

    fn report(&self) -> TestReport {
        TestReport::parse(&std::fs::read_to_string(&self.evidence).unwrap_or_default())
    }
}
