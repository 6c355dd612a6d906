//! Isolated workspaces: one directory per trial, made from the base repo at the base commit.
//!
//! [`WorkspaceProvisioner`] validates the strategy string before any backend runs, then hands
//! the request to the backend registered for that strategy. There is never a fallback to a
//! shared directory: an unknown strategy, or one with no backend, is an error.

mod clone;
mod confinement;
mod container;
mod digest;
mod error;
mod git;
mod history_store;
mod model_route;
mod overlay;
mod overlayfs;
mod remove;
mod sandbox;
mod session;
mod source;

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use std::sync::Arc;
use strum::{VariantArray, VariantNames};

use futures::future::BoxFuture;

pub use clone::CloneBackend;
pub use confinement::Confinement;
pub use container::{
    ContainerError, ContainerPolicy, DEFAULT_WORKDIR, DeltaScope, Environment, FsChange,
    FsChangeKind, ImageNeed, ImageSource, Limits, RUN_LABEL, RUNTIME_VAR, RemoveContainersError,
    Runtime, RuntimeKind, container_started, tail,
};
pub use error::{GitError, HistoryStep, PrepareError, TreeError};
pub use git::{git_command, harness_signature, resolve_commit};
pub use history_store::{
    MANIFEST as HISTORY_MANIFEST, Removed as RemovedObjects, SetupLock, StoreError,
    enforce as enforce_history,
};
pub use model_route::{ModelRoute, SANDBOX_SOCKET_DIR, forward_then_exec};
pub use overlay::{
    EntryKind, Overlay, OverlayError, PatchError, PatchedFile, apply_overlay, apply_overlay_edited,
    patched_files, settle_beside, settle_times, settle_tree, write_entry,
};
pub use overlayfs::{EvictedTemplate, MADE, OverlayBackend, evict_templates, overlay_changes};
pub use remove::{LeftBehind, RemoveError, mounts_below, remove_tree, unmount_below};
pub use sandbox::{
    Network, SandboxPolicy, SandboxUnavailableError, UnknownNetworkError, check_bubblewrap,
    program_paths,
};
pub use session::SessionBackend;
pub use source::{PreparedSource, RepoKind, RepoSource, prepare_source};

/// Whether a command wrapped by [`SandboxPolicy::wrap`] got as far as starting its program:
/// bubblewrap writes the child's pid to its status fd once it has, and nothing when it failed
/// to set the sandbox up. A command run without the status fd counts as started.
pub fn sandbox_started(ended: &crate::process::ProcessOutput) -> bool {
    ended.status.as_ref().is_none_or(|status| {
        status
            .windows(b"child-pid".len())
            .any(|w| w == b"child-pid")
    })
}

/// The valid isolation strategies, in the order error messages list them.
pub const ISOLATION_STRATEGIES: &[&str] = <Isolation as VariantNames>::VARIANTS;

/// True when `value` names an isolation strategy.
pub fn is_isolation_strategy(value: &str) -> bool {
    ISOLATION_STRATEGIES.contains(&value)
}

/// Where a trial's agent works.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    serde::Serialize,
    serde::Deserialize,
    strum::VariantNames,
    strum::VariantArray,
    strum::IntoStaticStr,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum Isolation {
    /// The suite's own work tree (one trial only; changes are left for the user).
    Session,
    /// A private clone at the base commit (the default).
    Worktree,
    /// A private clone whose agent and verify commands run inside bubblewrap.
    Sandbox,
}

impl Isolation {
    /// The strategy's name as suites and JSON spell it (`worktree`).
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

impl fmt::Display for Isolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Isolation {
    type Err = UnknownIsolationStrategyError;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        <Self as VariantArray>::VARIANTS
            .iter()
            .copied()
            .find(|strategy| strategy.as_str() == value)
            .ok_or_else(|| UnknownIsolationStrategyError {
                value: value.to_owned(),
            })
    }
}

/// A strategy string that is not one of [`ISOLATION_STRATEGIES`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown isolation strategy: '{value}'. Valid strategies: {}", ISOLATION_STRATEGIES.join(", "))]
pub struct UnknownIsolationStrategyError {
    /// The string given.
    pub value: String,
}

/// A backend could not materialise the workspace.
#[derive(Debug, Clone, thiserror::Error)]
#[error("cannot provision a {isolation} workspace from {}: {reason}", base.display())]
pub struct WorkspaceProvisionError {
    /// The strategy asked for.
    pub isolation: Isolation,
    /// The repository the workspace was to be made from.
    pub base: PathBuf,
    /// The backend's failure, as a message.
    pub reason: String,
}

/// Why `provision` failed: the backend's own failure (a strategy is an [`Isolation`], parsed
/// where it is read, so an unknown one never reaches a provisioner).
#[derive(Debug, Clone, thiserror::Error)]
pub enum ProvisionError {
    /// The backend failed to make the workspace.
    #[error(transparent)]
    Provision(#[from] WorkspaceProvisionError),
}

/// What to provision: a repository, a commit in it, and a deterministic workspace name.
#[derive(Debug, Clone)]
pub struct WorkspaceBase {
    /// A git repository (bare or not) holding `commit`.
    pub repo: PathBuf,
    /// A full commit id.
    pub commit: String,
    /// Unique within a run; names the workspace directory.
    pub name: String,
    /// Work a backend with templates does once per template (a task's setup); a backend
    /// without them leaves it to the caller (see [`ProvisionedWorkspace::prepared`]).
    pub prepare: Option<Arc<dyn Prepare>>,
}

impl WorkspaceBase {
    /// A base with no preparation.
    pub fn new(repo: PathBuf, commit: String, name: String) -> Self {
        Self {
            repo,
            commit,
            name,
            prepare: None,
        }
    }

    /// Sets the work done once per template (`None`: none).
    pub fn prepared_by(mut self, prepare: Option<Arc<dyn Prepare>>) -> Self {
        self.prepare = prepare;
        self
    }
}

/// Work done once in a fresh template checkout, before any workspace is made from it: every
/// workspace of the template then starts from what it left.
pub trait Prepare: Send + Sync + fmt::Debug {
    /// Everything the preparation depends on (templates of one commit differ by it).
    fn key(&self) -> &str;
    /// Prepares the checkout at `tree`, writing its logs to `dir`; returns the commit the
    /// workspaces start from. Blocking.
    fn prepare(&self, tree: &Path, dir: &Path) -> Result<String, PrepareError>;
    /// Whether what an earlier `prepare` made (outside the tree, e.g. an image) is still there
    /// for workspaces to start from `base`.
    fn intact(&self, base: &str) -> bool;
}

type Dispose = Box<dyn FnOnce() -> std::io::Result<()> + Send>;

/// A workspace that exists until it is disposed.
///
/// `dispose` runs exactly once: explicitly through [`ProvisionedWorkspace::dispose`], or, if the
/// owner never got that far (a dropped future, a panic), when the value is dropped.
pub struct ProvisionedWorkspace {
    /// The workspace's root directory, where the agent works.
    pub path: PathBuf,
    /// The strategy it was made under.
    pub isolation: Isolation,
    /// The tree-ish the workspace started from; the probe diffs against it.
    pub base: String,
    /// A directory holding every path that can differ from the base (an overlay's upper dir).
    pub changes: Option<PathBuf>,
    /// The base's [`Prepare`] ran (in the template this workspace is a view of).
    pub prepared: bool,
    /// How long this provision spent making (or waiting for) the template its workspaces are
    /// views of: preparation shared by every trial on that base, not this trial's time.
    pub preparation: Option<std::time::Duration>,
    dispose: Option<Dispose>,
}

impl ProvisionedWorkspace {
    /// A workspace at `path` starting from `base`, removed by `dispose`; not prepared, with no
    /// changes directory.
    pub fn new(
        path: PathBuf,
        isolation: Isolation,
        base: String,
        dispose: impl FnOnce() -> std::io::Result<()> + Send + 'static,
    ) -> Self {
        Self {
            path,
            isolation,
            base,
            changes: None,
            prepared: false,
            preparation: None,
            dispose: Some(Box::new(dispose)),
        }
    }

    /// Records where the workspace's changes are kept (see [`overlay_changes`]).
    pub fn with_changes(mut self, dir: PathBuf) -> Self {
        self.changes = Some(dir);
        self
    }

    /// Marks the workspace as made from a prepared template whose workspaces start at `base`.
    pub fn prepared_at(mut self, base: String) -> Self {
        self.base = base;
        self.prepared = true;
        self
    }

    /// Replaces the base the probe diffs against (after a setup step changed the tree).
    pub fn rebase(&mut self, base: String) {
        self.base = base;
    }

    /// Runs the dispose action now, returning its error (dropping the workspace ignores it).
    pub fn dispose(mut self) -> std::io::Result<()> {
        self.dispose.take().map_or(Ok(()), |dispose| dispose())
    }
}

impl Drop for ProvisionedWorkspace {
    fn drop(&mut self) {
        if let Some(dispose) = self.dispose.take() {
            let _ = dispose();
        }
    }
}

impl fmt::Debug for ProvisionedWorkspace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProvisionedWorkspace")
            .field("path", &self.path)
            .field("isolation", &self.isolation)
            .field("base", &self.base)
            .field("prepared", &self.prepared)
            .field("disposed", &self.dispose.is_none())
            .finish()
    }
}

/// Materialises workspaces for one strategy. Blocking: the provisioner runs it off the runtime.
pub trait WorkspaceBackend: Send + Sync {
    /// Makes a workspace of `base`.
    fn provision(
        &self,
        base: &WorkspaceBase,
    ) -> Result<ProvisionedWorkspace, WorkspaceProvisionError>;
}

/// One method in, a disposable workspace out.
pub trait WorkspaceProvisioner: Send + Sync {
    /// Makes a workspace of `base` with the backend for `isolation`; an error when it has none.
    fn provision<'a>(
        &'a self,
        base: &'a WorkspaceBase,
        isolation: Isolation,
    ) -> BoxFuture<'a, Result<ProvisionedWorkspace, ProvisionError>>;
}

/// A provisioner with a backend per strategy.
#[derive(Clone, Default)]
pub struct BackendProvisioner {
    session: Option<Arc<dyn WorkspaceBackend>>,
    worktree: Option<Arc<dyn WorkspaceBackend>>,
    sandbox: Option<Arc<dyn WorkspaceBackend>>,
}

impl BackendProvisioner {
    /// No backends: every strategy is an error until one is registered.
    pub fn new() -> Self {
        Self::default()
    }

    /// deltabench's own backends, with worktrees created under `root` (and left there on
    /// dispose when `keep` is set).
    pub fn git(root: &Path, keep: bool) -> Self {
        Self::new()
            .with(Isolation::Session, SessionBackend)
            .with(Isolation::Worktree, CloneBackend::new(root).keeping(keep))
    }

    /// Registers `backend` for `isolation`, replacing any before it.
    pub fn with(self, isolation: Isolation, backend: impl WorkspaceBackend + 'static) -> Self {
        self.with_shared(isolation, Arc::new(backend))
    }

    /// Registers a backend that other provisioners share (e.g. one that caches templates).
    pub fn with_shared(mut self, isolation: Isolation, backend: Arc<dyn WorkspaceBackend>) -> Self {
        match isolation {
            Isolation::Session => self.session = Some(backend),
            Isolation::Worktree => self.worktree = Some(backend),
            Isolation::Sandbox => self.sandbox = Some(backend),
        }
        self
    }

    fn backend(&self, isolation: Isolation) -> Option<Arc<dyn WorkspaceBackend>> {
        match isolation {
            Isolation::Session => self.session.clone(),
            Isolation::Worktree => self.worktree.clone(),
            Isolation::Sandbox => self.sandbox.clone(),
        }
    }
}

/// Why a strategy without a backend cannot run.
pub fn missing_backend_reason(isolation: Isolation) -> String {
    format!("no backend is registered for the `{isolation}` strategy")
}

impl WorkspaceProvisioner for BackendProvisioner {
    fn provision<'a>(
        &'a self,
        base: &'a WorkspaceBase,
        strategy: Isolation,
    ) -> BoxFuture<'a, Result<ProvisionedWorkspace, ProvisionError>> {
        Box::pin(async move {
            let Some(backend) = self.backend(strategy) else {
                return Err(WorkspaceProvisionError {
                    isolation: strategy,
                    base: base.repo.clone(),
                    reason: missing_backend_reason(strategy),
                }
                .into());
            };
            let request = base.clone();
            let provisioned = tokio::task::spawn_blocking(move || backend.provision(&request))
                .await
                .map_err(|err| WorkspaceProvisionError {
                    isolation: strategy,
                    base: base.repo.clone(),
                    reason: format!("the backend failed: {err}"),
                })??;
            Ok(provisioned)
        })
    }
}
