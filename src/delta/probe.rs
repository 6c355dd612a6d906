//! deltabench's probe: what is recorded is what is verified.
//!
//! 1. The diff is the harness's own view of the agent's workspace ([`snapshot`]): no index flag,
//!    git config, attribute or ignore rule of the agent's counts.
//! 2. The verify command runs in a *fresh* workspace made from the base, with exactly that diff
//!    applied and the hidden tests laid over it. Nothing the diff does not show (an ignored file,
//!    a git trick, a process the agent left behind in its own workspace) reaches the verdict.
//! 3. Under a sandbox or a container the verify command runs confined the same way, with a home
//!    of its own (on the host too), and Python test runs report through a hook that the
//!    workspace cannot shadow.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio_util::sync::CancellationToken;

use super::apart::{Apart, mutant_name};
use super::channel::Channel;
use super::container::{ContainerCapture, ContainerDelta};
use super::mutate::{self, BitingMutant, Listing, Mutant, MutateError, MutationReport};
use super::snapshot::{EntryKind, FileChange, Snapshot, SnapshotError, snapshot};
use super::tests_report::Outcomes;
use super::{
    CommandResult, DeltaProbe, EnvironmentDelta, ProbeContext, ProbeError, ProbeErrorKind,
    TestReport,
};
use crate::process::{self, CommandSpec};
use crate::workspace::{
    Confinement, ContainerPolicy, Isolation, Overlay, WorkspaceBase, WorkspaceProvisioner,
    apply_overlay, apply_overlay_edited, container_started, settle_beside, settle_times,
    settle_tree, write_entry,
};
use std::os::unix::ffi::OsStrExt;

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
/// The mutation check's verify run: its output, and its home once both runs are done (while
/// they run, each has the plain run's names).
pub const MUTANTS_LOG: &str = "mutants.log";
/// The mutation check's verify home, named as [`MUTANTS_LOG`] says.
pub const MUTANTS_HOME: &str = "mutants-home";

/// What the probe runs the mutation check for.
#[derive(Debug, Clone)]
pub enum MutationPlan {
    /// `validate`'s reference: list the hidden tests' mutants and keep those that bite.
    Discover,
    /// A trial: these biting mutants, in a verify run of their own.
    Check(Vec<BitingMutant>),
}

/// What one verify run does besides the command.
enum Step<'a> {
    Plain,
    /// The plain run of `validate`'s reference, which also lists the mutants.
    PlainListing,
    Mutants(&'a [Mutant]),
}

/// One verify run's result, with what it did to the hidden tests.
struct Verified {
    result: CommandResult,
    listing: Option<Result<Listing, MutateError>>,
    applied: Vec<Mutant>,
    notes: Vec<String>,
    /// Hidden test files whose content changed while the command ran.
    changed_tests: Vec<String>,
}

/// A verify command and its own time limit.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct VerifySpec {
    /// The command line, run by `sh -c`.
    pub run: String,
    /// How long the command may run before it is killed; `None` for no limit.
    pub timeout: Option<Duration>,
    /// Runs in the agent's own container, still running, on the agent's workspace.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub in_place: bool,
    /// The folder the test script writes its reward file in: a container path (a fresh folder
    /// is mounted there) or a folder of the verify workspace. Read by the harness after every
    /// process of the command has ended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reward: Option<PathBuf>,
}

/// Where the verify command runs: a workspace provisioned fresh from the base for it.
#[derive(Clone)]
pub struct FreshWorkspace {
    /// Makes the verify workspace, as it made the agent's.
    pub provisioner: Arc<dyn WorkspaceProvisioner>,
    /// The repository and commit the verify workspace starts from: the agent's base.
    pub base: WorkspaceBase,
    /// The isolation strategy of the verify workspace.
    pub isolation: Isolation,
}

/// Diff against the base, a fresh workspace with that diff and the hidden tests, then the
/// verify command in it.
#[derive(Clone)]
pub struct TaskProbe {
    /// The task's hidden tests, laid over the verify workspace; `None` when it has none.
    pub hidden_tests: Option<Overlay>,
    /// The verify command.
    pub verify: VerifySpec,
    /// Where `diff.patch`, `verify.log` and the test hook's files go, when set.
    pub artifacts: Option<PathBuf>,
    /// Where the verify command runs: on this machine, in the sandbox or in the container.
    pub confinement: Confinement,
    /// A harness-owned repository holding the base's objects, outside the agent's reach.
    pub objects: PathBuf,
    /// The most bytes of changed content a diff may hold.
    pub max_diff: u64,
    /// How the verify workspace is made.
    pub fresh: FreshWorkspace,
    /// The mutation check, when the task has one.
    pub mutation: Option<MutationPlan>,
    /// Under `delta: container`: the agent's container, whose changes the verify image gets.
    pub container_delta: Option<ContainerCapture>,
    /// `verify: {in_place: true}`: the agent's live container; the verify command runs in it,
    /// on the agent's own workspace.
    pub in_place: Option<ContainerPolicy>,
}

/// The hook's files, written under the verify command's home.
const HOOK_SITECUSTOMIZE: &str = include_str!("hook/sitecustomize.py");
const HOOK_PYTEST: &str = include_str!("hook/deltabench_pytest.py");

impl DeltaProbe for TaskProbe {
    fn probe<'a>(
        &'a self,
        ctx: &'a ProbeContext<'a>,
    ) -> BoxFuture<'a, Result<EnvironmentDelta, ProbeError>> {
        Box::pin(async move {
            let snapshot = match self.take_snapshot(ctx).await? {
                Ok(snapshot) => snapshot,
                Err(too_large) => {
                    return Ok(self.rejected(String::new(), too_large.to_string(), None));
                }
            };
            if let Some(dir) = &self.artifacts {
                save_diff(dir, &snapshot.patch)?;
            }
            let diff = String::from_utf8_lossy(&snapshot.patch).into_owned();
            if let Some(why) = escaping_symlink(&snapshot) {
                return Ok(self.rejected(diff, why, None));
            }
            if let Some(policy) = &self.in_place {
                return self.probe_in_place(ctx, policy, diff).await;
            }
            let Some(capture) = &self.container_delta else {
                let (command_result, mutation, changed_tests) = self.verify_all(&snapshot).await?;
                return Ok(EnvironmentDelta {
                    diff,
                    command_result,
                    rejected: None,
                    mutation,
                    changed_tests,
                    container: None,
                });
            };
            self.probe_container(capture, &snapshot, diff).await
        })
    }
}

impl TaskProbe {
    /// The harness's own diff of the agent's workspace (only the overlay's changed paths when
    /// it has one), off the runtime's workers: git2 and file reads block. A diff over the
    /// limit is the inner error, its rejection.
    async fn take_snapshot(
        &self,
        ctx: &ProbeContext<'_>,
    ) -> Result<Result<Snapshot, SnapshotError>, ProbeError> {
        let (objects, workspace, base) = (
            self.objects.clone(),
            ctx.workspace.to_owned(),
            ctx.base.to_owned(),
        );
        let upper = ctx.changes.map(Path::to_owned);
        let limit = self.max_diff;
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
        .map_err(|e| diff_error(e.to_string()))?;
        match taken {
            Ok(snapshot) => Ok(Ok(snapshot)),
            Err(too_large @ SnapshotError::TooLarge { .. }) => Ok(Err(too_large)),
            Err(e) => Err(diff_error(e.to_string())),
        }
    }

    /// A delta whose verify command never ran, and why.
    fn rejected(
        &self,
        diff: String,
        why: String,
        container: Option<ContainerDelta>,
    ) -> EnvironmentDelta {
        EnvironmentDelta {
            diff,
            rejected: Some(why),
            command_result: CommandResult {
                command: self.verify.run.clone(),
                ..CommandResult::default()
            },
            container,
            ..EnvironmentDelta::default()
        }
    }

    /// `in_place`: the container's changes listed, then the verify command run in the agent's
    /// own container, which goes once it ran.
    async fn probe_in_place(
        &self,
        ctx: &ProbeContext<'_>,
        policy: &ContainerPolicy,
        diff: String,
    ) -> Result<EnvironmentDelta, ProbeError> {
        // What the agent changed, listed before the verify command changes more.
        let container = match &self.container_delta {
            Some(capture) => {
                let (capture, artifacts) = (capture.clone(), self.artifacts.clone());
                let listed =
                    tokio::task::spawn_blocking(move || capture.list(artifacts.as_deref()))
                        .await
                        .map_err(|e| verify_error(e.to_string()))?;
                Some(listed.map_err(|e| {
                    verify_error(format!("cannot list the container's changes: {e}"))
                })?)
            }
            None => None,
        };
        let verified = self.verify_in_place(policy, ctx.workspace, ctx.base).await;
        policy
            .runtime
            .remove_container(policy.keep.as_deref().unwrap_or_default());
        Ok(EnvironmentDelta {
            diff,
            command_result: verified?,
            container,
            ..EnvironmentDelta::default()
        })
    }

    /// `delta: container`: the container's changes taken into an image, and the verify runs in
    /// that image; the image goes once they ran.
    async fn probe_container(
        &self,
        capture: &ContainerCapture,
        snapshot: &Snapshot,
        diff: String,
    ) -> Result<EnvironmentDelta, ProbeError> {
        let (capture, artifacts, limit) = (capture.clone(), self.artifacts.clone(), self.max_diff);
        let captured =
            tokio::task::spawn_blocking(move || capture.capture(artifacts.as_deref(), limit))
                .await
                .map_err(|e| verify_error(e.to_string()))?
                .map_err(|e| verify_error(format!("cannot take the container's delta: {e}")))?;
        // What the agent changed in its container is its work too: a task solved in /etc
        // shows a diff.
        let diff = diff + &captured.delta.patch;
        if let (Some(dir), false) = (&self.artifacts, captured.delta.patch.is_empty()) {
            save_diff(dir, diff.as_bytes())?;
        }
        if let Some(why) = captured.rejected {
            return Ok(self.rejected(diff, why, Some(captured.delta)));
        }
        // The verify command runs in the image holding the container's changes.
        let probe = TaskProbe {
            confinement: match (&self.confinement, &captured.image) {
                (Confinement::Container(policy), Some(image)) => {
                    Confinement::Container(policy.clone().image(image))
                }
                (confinement, _) => confinement.clone(),
            },
            container_delta: None,
            ..self.clone()
        };
        let verified = probe.verify_all(snapshot).await;
        if let (Some(image), Some(capture)) = (&captured.image, &self.container_delta) {
            capture.runtime.remove_image(image);
        }
        let (command_result, mutation, changed_tests) = verified?;
        Ok(EnvironmentDelta {
            diff,
            command_result,
            rejected: None,
            mutation,
            changed_tests,
            container: Some(captured.delta),
        })
    }
}

fn diff_error(message: String) -> ProbeError {
    ProbeError::new(ProbeErrorKind::Diff, message)
}

/// The diff in the artifacts folder, as [`DIFF_PATCH`].
fn save_diff(dir: &Path, patch: &[u8]) -> Result<(), ProbeError> {
    std::fs::write(dir.join(DIFF_PATCH), patch)
        .map_err(|e| diff_error(format!("cannot save {DIFF_PATCH}: {e}")))
}

/// Why a diff is not verified: a symlink pointing outside the workspace (the verify command
/// would read or run what it points at, which the diff does not hold).
fn escaping_symlink(snapshot: &Snapshot) -> Option<String> {
    snapshot.changes.iter().find_map(|change| match change {
        FileChange::Write {
            path,
            content,
            kind: EntryKind::Symlink,
        } => {
            let target = Path::new(std::ffi::OsStr::from_bytes(content));
            let mut depth = path.components().count() as i64 - 1;
            let escapes = target.is_absolute()
                || target.components().any(|part| {
                    depth += match part {
                        std::path::Component::ParentDir => -1,
                        std::path::Component::CurDir => 0,
                        _ => 1,
                    };
                    depth < 0
                });
            escapes.then(|| {
                format!(
                    "the diff holds a symlink that points outside the workspace: {} -> {}",
                    path.display(),
                    target.display()
                )
            })
        }
        _ => None,
    })
}

impl TaskProbe {
    /// The plain verify run and, when it passed and the task has mutants, the mutant run (in
    /// a random order: neither run can tell which one it is from what the other left behind).
    async fn verify_all(
        &self,
        snapshot: &Snapshot,
    ) -> Result<(CommandResult, Option<MutationReport>, Vec<String>), ProbeError> {
        let Some(plan) = &self.mutation else {
            let plain = self.verify_fresh(snapshot, Step::Plain).await?;
            return Ok((plain.result, None, plain.changed_tests));
        };
        match plan {
            MutationPlan::Discover => {
                let apart = self.apart()?;
                let plain = self.verify_fresh(snapshot, Step::PlainListing).await?;
                let report = self.discover(snapshot, &plain, apart).await?;
                Ok((plain.result, report, plain.changed_tests))
            }
            MutationPlan::Check(biting) => {
                let mutants: Vec<Mutant> = biting.iter().map(|b| b.mutant.clone()).collect();
                let mutants_first = !mutants.is_empty() && mutate::fresh_seed().is_multiple_of(2);
                // Both runs at the same paths; the first one's files leave the trial folder
                // until the second is over.
                let apart = self.apart()?;
                let early = match mutants_first {
                    true => {
                        let run = self.verify_fresh(snapshot, Step::Mutants(&mutants)).await?;
                        Some((run, apart.park()?))
                    }
                    false => None,
                };
                let plain = self.verify_fresh(snapshot, Step::Plain).await?;
                let mutated = match early {
                    Some((run, parked)) => {
                        apart.restore(parked, mutant_name)?;
                        Some(run)
                    }
                    None if plain.result.succeeded() && !mutants.is_empty() => {
                        let parked = apart.park()?;
                        let run = self.verify_fresh(snapshot, Step::Mutants(&mutants)).await?;
                        apart.rename_new(mutant_name)?;
                        apart.restore(parked, str::to_owned)?;
                        Some(run)
                    }
                    None => None,
                };
                let report = mutated.map(|run| check_report(biting, run));
                Ok((plain.result, report, plain.changed_tests))
            }
        }
    }

    /// The trial folder's bookkeeping for runs that must not see each other's files.
    fn apart(&self) -> Result<Apart, ProbeError> {
        Apart::new(self.artifacts.clone())
    }

    /// `in_place`: the hidden tests laid over the agent's own workspace, and the verify command
    /// run in the agent's container, still running (started again when the agent's end
    /// stopped it). What the agent left running answers it: weaker evidence, and recorded so.
    async fn verify_in_place(
        &self,
        policy: &ContainerPolicy,
        workspace: &Path,
        base: &str,
    ) -> Result<CommandResult, ProbeError> {
        let fail = |message: String| ProbeError::new(ProbeErrorKind::Verify, message);
        let (dir, base, hidden, objects) = (
            workspace.to_owned(),
            base.to_owned(),
            self.hidden_tests.clone(),
            self.objects.clone(),
        );
        tokio::task::spawn_blocking(move || match &hidden {
            Some(overlay) => apply_overlay(&dir, &base, overlay, Some(&objects))
                .map(drop)
                .map_err(|e| ProbeError::new(ProbeErrorKind::HiddenTests, e.to_string())),
            None => Ok(()),
        })
        .await
        .map_err(|e| fail(e.to_string()))??;
        // An agent that ran nothing made no container: the verify command's run makes it.
        let name = policy.keep.clone().unwrap_or_default();
        if policy.runtime.container_exists(&name) {
            policy
                .runtime
                .start_container(&name)
                .map_err(|e| fail(format!("cannot start the agent's container again: {}", e.0)))?;
        }
        let spec = CommandSpec::shell(&self.verify.run, workspace)
            .timeout(self.verify.timeout)
            .log_path(self.artifacts.as_ref().map(|dir| dir.join(VERIFY_LOG)));
        let spec = policy.wrap(workspace, spec).map_err(|e| {
            fail(format!(
                "cannot run the verify command in the agent's container: {e}"
            ))
        })?;
        let ended = process::run(&spec, &CancellationToken::new())
            .await
            .map_err(|e| fail(format!("`{}`: {e}", self.verify.run)))?;
        if !container_started(&ended) {
            return Err(fail(format!(
                "the container runtime could not run the verify command: {}",
                ended.last_line()
            )));
        }
        Ok(CommandResult {
            command: self.verify.run.clone(),
            exit_code: ended.exit_code,
            timed_out: ended.timed_out,
            output: ended.output.text(),
            duration_ms: ended.duration.as_millis() as u64,
            tests: None,
            reward: None,
        })
    }

    /// `validate`: runs the listed candidates against the reference, round by round, and keeps
    /// those that make a test fail that passed in the plain run.
    async fn discover(
        &self,
        snapshot: &Snapshot,
        plain: &Verified,
        apart: Apart,
    ) -> Result<Option<MutationReport>, ProbeError> {
        let listing = match &plain.listing {
            None => return Ok(None),
            Some(Err(why)) => {
                return Ok(Some(MutationReport {
                    notes: vec![format!("no mutants: {why}")],
                    ..MutationReport::default()
                }));
            }
            Some(Ok(listing)) => listing,
        };
        let mut report = MutationReport {
            tried: listing.mutants.len(),
            notes: listing.errors.clone(),
            ..MutationReport::default()
        };
        if !plain.result.succeeded() || listing.mutants.is_empty() {
            return Ok(Some(report));
        }
        let passed = Outcomes::of(&plain.result).passed;
        let parked = apart.park()?;
        for round in mutate::rounds(&listing.mutants) {
            // Each round at the plain run's paths; the last one's files are kept.
            apart.remove_new()?;
            let run = self.verify_fresh(snapshot, Step::Mutants(&round)).await?;
            report.notes.extend(run.notes.iter().cloned());
            let outcomes = Outcomes::of(&run.result);
            for mutant in run.applied {
                let failed: Vec<String> = mutate::failed_by(&outcomes, &mutant)
                    .into_iter()
                    .filter(|id| passed.contains(id))
                    .collect();
                if !failed.is_empty() {
                    report.biting.push(BitingMutant { mutant, failed });
                }
            }
        }
        apart.rename_new(mutant_name)?;
        apart.restore(parked, str::to_owned)?;
        Ok(Some(report))
    }

    /// The home the verify command gets (mounted in its sandbox or container at that path).
    fn home(&self) -> Option<PathBuf> {
        let artifacts = self.artifacts.as_ref()?;
        Some(match self.confinement.home() {
            Some(home) => home.to_owned(),
            None => artifacts.join(VERIFY_HOME),
        })
    }

    /// Provisions the fresh workspace, lays the agent's changes and the hidden tests over it,
    /// runs the verify command, and disposes of it on every path.
    async fn verify_fresh(
        &self,
        snapshot: &Snapshot,
        step: Step<'_>,
    ) -> Result<Verified, ProbeError> {
        let fresh = &self.fresh;
        let workspace = fresh
            .provisioner
            .provision(&fresh.base, fresh.isolation)
            .await
            .map_err(|e| {
                ProbeError::new(
                    ProbeErrorKind::Verify,
                    format!("cannot provision the workspace to verify in: {e}"),
                )
            })?;
        let at = LaidAt {
            path: workspace.path.clone(),
            base: workspace.base.clone(),
            changes: workspace.changes.clone(),
        };
        let result = self.verify_in(&at, snapshot, step).await;
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
        provisioned: &LaidAt,
        snapshot: &Snapshot,
        step: Step<'_>,
    ) -> Result<Verified, ProbeError> {
        let workspace = provisioned.path.as_path();
        let laid = self.lay(provisioned, snapshot, step).await?;
        let hook = self
            .install_hook()
            .map_err(|e| verify_error(format!("cannot install the test hook: {e}")))?;
        let prepared = self.prepare_command(workspace, hook.as_ref(), &laid)?;
        self.settle_run_times(provisioned)?;
        let watch = super::watch::Watch::files(
            workspace,
            provisioned.changes.as_deref(),
            laid.hashes.iter().map(|(p, _)| p.as_str()),
        )
        .map_err(|e| verify_error(format!("cannot watch the hidden tests: {e}")))?;
        let (ended, reward) = self.run_for_reward(prepared).await?;
        // The runtime's or bubblewrap's own failure (125, 126...): the command never ran, so
        // no verdict.
        if !self.confinement.started(&ended) {
            return Err(verify_error(format!(
                "{} could not start the verify command: {}",
                self.confinement.starter(),
                ended.last_line()
            )));
        }
        let tests =
            match hook {
                Some(hook) => Some(hook.report(workspace).await.map_err(|e| {
                    verify_error(format!("cannot keep the test hook's report: {e}"))
                })?),
                None => None,
            };
        let changed_tests = changed_tests(watch.written(), workspace, &laid.hashes);
        Ok(Verified {
            result: CommandResult {
                command: self.verify.run.clone(),
                exit_code: ended.exit_code,
                timed_out: ended.timed_out,
                output: ended.output.text(),
                duration_ms: ended.duration.as_millis() as u64,
                tests,
                reward,
            },
            listing: laid.listing,
            applied: laid.applied,
            notes: laid.notes,
            changed_tests,
        })
    }

    /// The agent's changes, the hidden tests (with this step's mutants) and their times, laid
    /// over the fresh workspace off the runtime's workers.
    async fn lay(
        &self,
        provisioned: &LaidAt,
        snapshot: &Snapshot,
        step: Step<'_>,
    ) -> Result<Laid, ProbeError> {
        let (dir, base, changes) = (
            provisioned.path.clone(),
            provisioned.base.clone(),
            snapshot.changes.clone(),
        );
        let (hidden, objects) = (self.hidden_tests.clone(), self.objects.clone());
        let (listing_wanted, mutants) = match step {
            Step::Plain => (false, Vec::new()),
            Step::PlainListing => (true, Vec::new()),
            Step::Mutants(mutants) => (false, mutants.to_vec()),
        };
        tokio::task::spawn_blocking(move || {
            lay_over(
                &dir,
                &base,
                &changes,
                hidden.as_ref().map(|overlay| (overlay, objects.as_path())),
                listing_wanted,
                &mutants,
            )
        })
        .await
        .map_err(|e| verify_error(e.to_string()))?
    }

    /// The verify command, its hook, home and reward folder, wrapped in its confinement with
    /// the hidden tests read-only.
    fn prepare_command(
        &self,
        workspace: &Path,
        hook: Option<&TestHook>,
        laid: &Laid,
    ) -> Result<Prepared, ProbeError> {
        // Every run at the plain run's names: a mutant run's files are renamed once both ran.
        let mut spec = CommandSpec::shell(&self.verify.run, workspace)
            .timeout(self.verify.timeout)
            .log_path(self.artifacts.as_ref().map(|dir| dir.join(VERIFY_LOG)));
        if let Some(hook) = hook {
            spec = hook.env(spec, workspace);
        }
        // On the host a home of its own too (the sandbox and the container set theirs): the
        // user's site-packages, `.pth` files and config are not the verify run's.
        if self.confinement.is_host()
            && let Some(home) = self.home()
        {
            spec = host_home(spec, &home).map_err(|e| {
                verify_error(format!("cannot prepare the verify command's home: {e}"))
            })?;
        }
        // The hidden tests read-only inside the sandbox or container (a write fails there), and
        // watched in every isolation: a write, even one undone before the end, is tampering.
        let hidden_paths: Vec<PathBuf> =
            laid.hashes.iter().map(|(p, _)| workspace.join(p)).collect();
        let mut confinement = self.confinement.clone().read_only(&hidden_paths);
        let mut scratch = None;
        let reward_dir = match &self.verify.reward {
            Some(dir) => {
                let folder = self.reward_folder(workspace, dir, &mut scratch)?;
                if dir.is_absolute() {
                    confinement = confinement.bind(&folder, dir);
                }
                Some(folder)
            }
            None => None,
        };
        let spec = confinement
            .wrap(workspace, spec)
            .map_err(|e| verify_error(format!("cannot prepare the verify command's home: {e}")))?;
        Ok(Prepared {
            spec,
            reward_dir,
            scratch,
        })
    }

    /// The reward folder, fresh: a container path gets a folder of the verify home mounted
    /// there (or a scratch folder, kept in `scratch`, when there is no home); a workspace
    /// folder is emptied.
    fn reward_folder(
        &self,
        workspace: &Path,
        dir: &Path,
        scratch: &mut Option<tempfile::TempDir>,
    ) -> Result<PathBuf, ProbeError> {
        match (dir.is_absolute(), self.home()) {
            (true, Some(home)) => {
                super::reward::fresh_folder(&home, Path::new(".deltabench/reward"))
            }
            (true, None) => tempfile::tempdir().map(|made| {
                let path = made.path().to_owned();
                *scratch = Some(made);
                path
            }),
            (false, _) => super::reward::fresh_folder(workspace, dir),
        }
        .map_err(|e| {
            verify_error(format!(
                "cannot make the reward folder {}: {e}",
                dir.display()
            ))
        })
    }

    /// The home's times too, and those of the overlay's own folders beside the workspace
    /// (its upper and work folders), the same in every run (see `settle_times`).
    fn settle_run_times(&self, provisioned: &LaidAt) -> Result<(), ProbeError> {
        let beside = provisioned.changes.as_deref().and_then(Path::parent);
        self.home()
            .filter(|home| home.exists())
            .map_or(Ok(()), |home| settle_tree(&home))
            .and_then(|()| beside.map_or(Ok(()), |own| settle_beside(own, &provisioned.path)))
            .map_err(|e| verify_error(format!("cannot set the verify run's file times: {e}")))
    }

    /// Runs the prepared command to its end, then reads the reward on the host.
    async fn run_for_reward(
        &self,
        prepared: Prepared,
    ) -> Result<(process::ProcessOutput, Option<super::reward::Reward>), ProbeError> {
        let Prepared {
            spec,
            reward_dir,
            scratch,
        } = prepared;
        // The verify command runs even when the run was cancelled: evidence first.
        let never = CancellationToken::new();
        // The guard tells the test script's processes by their pid namespace: a sandbox's or a
        // container's. On the host (`worktree`, unconfined) there is none to tell them by.
        let guard = reward_dir
            .as_deref()
            .filter(|_| !self.confinement.is_host())
            .and_then(super::reward::Guard::start);
        let ended = process::run(&spec, &never)
            .await
            .map_err(|e| verify_error(format!("`{}`: {e}", self.verify.run)))?;
        // Every process of the command has ended (its container or sandbox is gone, its cgroup
        // killed): only now is the reward read, on the host.
        let mut reward = reward_dir
            .as_deref()
            .map(|dir| super::reward::read(dir, guard.map(super::reward::Guard::stop)));
        drop(scratch);
        if let Some(reward) = reward
            .as_mut()
            .filter(|_| killed_by_signal(ended.exit_code))
        {
            reward.problems.push(
                "the test script was killed by a signal before it ended: the reward file is not its verdict".to_owned(),
            );
        }
        Ok((ended, reward))
    }

    /// Writes the hook under the verify command's home (writable inside the sandbox too) and
    /// opens the channel it reports through.
    fn install_hook(&self) -> std::io::Result<Option<TestHook>> {
        // In the home the command gets: mounted in its sandbox or container at the same path.
        let Some(dir) = self.home().map(|home| home.join(HOOK_DIR)) else {
            return Ok(None);
        };
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join("sitecustomize.py"), HOOK_SITECUSTOMIZE)?;
        std::fs::write(dir.join("deltabench_pytest.py"), HOOK_PYTEST)?;
        let channel = Channel::open(&dir)?;
        Ok(Some(TestHook { dir, channel }))
    }
}

struct TestHook {
    dir: PathBuf,
    channel: Channel,
}

impl TestHook {
    /// The hook through `PYTHONPATH` (its pytest plugin registers itself from there), and no
    /// Python state the agent could have left: no user site, no bytecode written.
    fn env(&self, spec: CommandSpec, workspace: &Path) -> CommandSpec {
        let path = match std::env::var("PYTHONPATH") {
            Ok(rest) if !rest.is_empty() => format!("{}:{rest}", self.dir.display()),
            _ => self.dir.display().to_string(),
        };
        spec.env("PYTHONPATH", path)
            .env("PYTHONNOUSERSITE", "1")
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env("DELTABENCH_TEST_CHANNEL", self.channel.address())
            .env("DELTABENCH_VERIFY_ROOT", workspace)
    }

    /// Ends the channel once the command is over; keeps what it received in [`HOOK_REPORT`]
    /// (for the trial folder's reader) and returns it, test ids free of the run's paths (a
    /// parametrized id may hold one).
    async fn report(self, workspace: &Path) -> std::io::Result<TestReport> {
        let text = self.channel.close().await;
        // Whatever the command left at that path goes: the file is the harness's.
        let path = self.dir.join(HOOK_REPORT);
        match std::fs::symlink_metadata(&path) {
            Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(&path)?,
            Ok(_) => std::fs::remove_file(&path)?,
            Err(_) => {}
        }
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .and_then(|mut file| std::io::Write::write_all(&mut file, text.as_bytes()))?;
        Ok(TestReport::parse(&text).without_path(workspace))
    }
}

/// Where a verify run's workspace is: its path, the base it starts from, and where an overlay
/// keeps its changes.
struct LaidAt {
    path: PathBuf,
    base: String,
    changes: Option<PathBuf>,
}

/// What was laid over the verify workspace before the command ran.
struct Laid {
    listing: Option<Result<Listing, MutateError>>,
    applied: Vec<Mutant>,
    notes: Vec<String>,
    hashes: Vec<(String, Option<[u8; 32]>)>,
}

/// A verify command ready to run, with the reward folder it writes in.
struct Prepared {
    spec: CommandSpec,
    reward_dir: Option<PathBuf>,
    /// The reward folder's scratch home when the verify run has none: gone once it is read.
    scratch: Option<tempfile::TempDir>,
}

fn verify_error(message: String) -> ProbeError {
    ProbeError::new(ProbeErrorKind::Verify, message)
}

/// Writes the agent's changes and the hidden tests (with `mutants` spliced in) into `dir`,
/// makes the hidden tests read-only and hashes them, then settles the laid files' times.
fn lay_over(
    dir: &Path,
    base: &str,
    changes: &[FileChange],
    hidden: Option<(&Overlay, &Path)>,
    listing_wanted: bool,
    mutants: &[Mutant],
) -> Result<Laid, ProbeError> {
    for change in changes.iter().filter(|c| !not_verified(c)) {
        let (path, content, kind) = match change {
            FileChange::Remove { path } => (path, None, EntryKind::File),
            FileChange::Write {
                path,
                content,
                kind,
            } => (path, Some(content.as_slice()), *kind),
        };
        write_entry(dir, path, content, kind).map_err(|e| {
            verify_error(format!(
                "cannot apply the diff to the verify workspace: {e}"
            ))
        })?;
    }
    // The mutants go into the bytes before they are written: one write per file, the same in
    // every run.
    let mut splicer = mutate::Splicer::new(mutants);
    let written = match hidden {
        Some((overlay, objects)) => {
            apply_overlay_edited(dir, base, overlay, Some(objects), &mut |path, bytes| {
                splicer.edit(path, bytes)
            })
            .map_err(|e| ProbeError::new(ProbeErrorKind::HiddenTests, e.to_string()))?
        }
        None => Vec::new(),
    };
    let listing = listing_wanted.then(|| mutate::list(dir, &written));
    let (applied, notes) = splicer.finish();
    // Read-only, and hashed: a hidden test the command rewrites (a build script, a plugin) is
    // caught after it ran.
    let hashes = hidden_hashes(dir, &written);
    // Last, after every read and mode change of the laid files.
    let laid_paths = changes
        .iter()
        .filter(|c| !not_verified(c))
        .map(|c| c.path())
        .chain(written.iter().map(Path::new));
    settle_times(dir, laid_paths)
        .map_err(|e| verify_error(format!("cannot set the verify workspace's times: {e}")))?;
    Ok(Laid {
        listing,
        applied,
        notes,
        hashes,
    })
}

/// A test script killed before its end never wrote its own verdict: what is there is someone
/// else's (code the tests ran that killed it after writing a reward). A shell reports its
/// child's death by signal N as 128 + N.
fn killed_by_signal(exit_code: Option<i32>) -> bool {
    exit_code.is_none_or(|code| code > 128)
}

/// The hidden test files the command wrote: those the watch saw, then those whose content
/// no longer has its laid hash.
fn changed_tests(
    mut written: Vec<String>,
    workspace: &Path,
    hashes: &[(String, Option<[u8; 32]>)],
) -> Vec<String> {
    for (path, hash) in hashes {
        if file_hash(&workspace.join(path)) != *hash && !written.contains(path) {
            written.push(path.clone());
        }
    }
    written
}

/// What of the agent's diff never reaches the verify run (the diff still records it): Python
/// bytecode, which runs instead of the source it claims to come from (an unchecked-hash `.pyc`,
/// a sourceless `pytest.pyc`), and distribution metadata, whose `[pytest11]` entry points
/// pytest loads as plugins when the folder is on `sys.path`.
pub fn never_verified(path: &Path) -> bool {
    path.components().any(|part| {
        let part = part.as_os_str().to_string_lossy();
        part == "__pycache__" || part.ends_with(".dist-info") || part.ends_with(".egg-info")
    }) || path.extension().is_some_and(|e| e == "pyc" || e == "pyo")
}

fn not_verified(change: &FileChange) -> bool {
    never_verified(change.path())
}

/// Makes each hidden test file read-only and returns its hash.
fn hidden_hashes(dir: &Path, written: &[String]) -> Vec<(String, Option<[u8; 32]>)> {
    use std::os::unix::fs::PermissionsExt;
    written
        .iter()
        .map(|path| {
            let full = dir.join(path);
            if let Ok(meta) = std::fs::symlink_metadata(&full)
                && meta.is_file()
            {
                let mode = meta.permissions().mode() & !0o222;
                let _ = std::fs::set_permissions(&full, std::fs::Permissions::from_mode(mode));
            }
            (path.clone(), file_hash(&full))
        })
        .collect()
}

fn file_hash(path: &Path) -> Option<[u8; 32]> {
    use sha2::Digest;
    let bytes = std::fs::read(path).ok()?;
    Some(sha2::Sha256::digest(bytes).into())
}

/// The verify command's home on the host: `HOME` and `TMPDIR` in it, the toolchains' homes
/// kept where they are (cargo and rustup find themselves through them).
fn host_home(spec: CommandSpec, home: &Path) -> std::io::Result<CommandSpec> {
    let tmp = home.join("tmp");
    std::fs::create_dir_all(&tmp)?;
    let mut spec = spec.env("HOME", home).env("TMPDIR", &tmp);
    let real = std::env::var_os("HOME").map(PathBuf::from);
    for (key, default) in [("CARGO_HOME", ".cargo"), ("RUSTUP_HOME", ".rustup")] {
        let kept = std::env::var_os(key)
            .map(PathBuf::from)
            .or_else(|| real.as_ref().map(|home| home.join(default)))
            .filter(|dir| dir.is_dir());
        if let Some(dir) = kept {
            spec = spec.env(key, dir);
        }
    }
    Ok(spec)
}

/// A trial's mutation check from its mutant run: which sampled mutants did not make their test
/// fail.
fn check_report(biting: &[BitingMutant], run: Verified) -> MutationReport {
    let outcomes = Outcomes::of(&run.result);
    let survived = biting
        .iter()
        .filter(|b| run.applied.contains(&b.mutant) && !b.bit(&outcomes))
        .map(|b| b.mutant.clone())
        .collect();
    MutationReport {
        tried: run.applied.len(),
        biting: biting
            .iter()
            .filter(|b| run.applied.contains(&b.mutant))
            .cloned()
            .collect(),
        survived,
        notes: run.notes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signal_or_no_code_means_the_script_was_killed() {
        assert!(killed_by_signal(None));
        assert!(killed_by_signal(Some(137)));
        assert!(killed_by_signal(Some(129)));
        assert!(!killed_by_signal(Some(128)));
        assert!(!killed_by_signal(Some(1)));
        assert!(!killed_by_signal(Some(0)));
    }

    #[test]
    fn changed_tests_adds_rewritten_files_once_after_the_watched_ones() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["kept.py", "rewritten.py", "watched.py"] {
            std::fs::write(dir.path().join(name), name).unwrap();
        }
        let hashes: Vec<(String, Option<[u8; 32]>)> = ["kept.py", "rewritten.py", "watched.py"]
            .iter()
            .map(|name| (name.to_string(), file_hash(&dir.path().join(name))))
            .collect();
        std::fs::write(dir.path().join("rewritten.py"), "other").unwrap();
        std::fs::write(dir.path().join("watched.py"), "other").unwrap();
        let changed = changed_tests(vec!["watched.py".to_owned()], dir.path(), &hashes);
        assert_eq!(changed, ["watched.py", "rewritten.py"]);
    }

    #[test]
    fn a_removed_hidden_test_counts_as_changed() {
        let dir = tempfile::tempdir().unwrap();
        let hashes = vec![("gone.py".to_owned(), Some([0u8; 32]))];
        assert_eq!(changed_tests(Vec::new(), dir.path(), &hashes), ["gone.py"]);
    }
}
