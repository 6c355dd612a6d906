//! Why the harness could not make one of its own trees: a clone, a cached repository, an overlay
//! template. One type for the backends and the source cache, each variant a kind of failure with
//! the path it concerns and the error underneath as its source.

use std::io;
use std::path::PathBuf;

use super::remove::RemoveError;

/// The git CLI or git2 failed on a repository the harness reads (see [`super::git`]).
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    /// `git` itself could not be started.
    #[error("cannot run git: {source}")]
    Spawn {
        /// The error starting it (not installed, not on `PATH`).
        #[source]
        source: io::Error,
    },
    /// `git` ran and failed; `stderr` is what it said.
    #[error("`git {args}` failed: {stderr}")]
    Failed {
        /// The arguments it ran with, joined by spaces.
        args: String,
        /// Its standard error, trimmed.
        stderr: String,
    },
    /// The repository could not be opened.
    #[error("{}", source.message())]
    Open {
        /// git2's reason (not a repository, unreadable).
        #[source]
        source: git2::Error,
    },
    /// `commitish` names nothing in the repository.
    #[error("no commit '{commitish}': {}", source.message())]
    NoCommit {
        /// The name looked up (a branch, tag or hash).
        commitish: String,
        /// git2's reason.
        #[source]
        source: git2::Error,
    },
    /// `commitish` names an object that is no commit.
    #[error("'{commitish}' is not a commit: {}", source.message())]
    NotACommit {
        /// The name looked up.
        commitish: String,
        /// git2's reason.
        #[source]
        source: git2::Error,
    },
}

/// A step of copying one commit's history into the cache (see `source::history_repo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::Display)]
pub enum HistoryStep {
    /// Creating the cached repository.
    #[strum(to_string = "git init")]
    Init,
    /// Pointing it at the source's objects while the history is copied.
    #[strum(to_string = "alternates")]
    Alternates,
    /// Packing the commit's history out of the source.
    #[strum(to_string = "git pack-objects")]
    PackObjects,
    /// Indexing that pack in the cache.
    #[strum(to_string = "git index-pack")]
    IndexPack,
    /// Writing the cached repository's refs.
    #[strum(to_string = "refs")]
    Refs,
}

/// Why a tree the harness makes (a clone, a cached repository, a template) could not be made.
#[derive(Debug, thiserror::Error)]
pub enum TreeError {
    /// A git command or git2 call on the source repository failed.
    #[error(transparent)]
    Git(#[from] GitError),
    /// A folder or file could not be created.
    #[error("cannot create {}: {source}", path.display())]
    Create {
        /// The path being created.
        path: PathBuf,
        /// The error creating it.
        #[source]
        source: io::Error,
    },
    /// A file could not be written.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The file written.
        path: PathBuf,
        /// The error writing it.
        #[source]
        source: io::Error,
    },
    /// A path could not be made absolute and canonical.
    #[error("cannot resolve {}: {source}", path.display())]
    Resolve {
        /// The path resolved.
        path: PathBuf,
        /// The error resolving it.
        #[source]
        source: io::Error,
    },
    /// A file or folder of the tree could not be read or changed.
    #[error("{}: {source}", path.display())]
    Access {
        /// The file or folder.
        path: PathBuf,
        /// The error reading or changing it.
        #[source]
        source: io::Error,
    },
    /// A file the harness reads whole (a bundle, a lock file) is unreadable.
    #[error("{source}")]
    Io {
        /// The error reading it.
        #[source]
        source: io::Error,
    },
    /// git2 could not create a repository.
    #[error("cannot create a repository in {}: {}", path.display(), source.message())]
    Init {
        /// The folder the repository was to be made in.
        path: PathBuf,
        /// git2's reason.
        #[source]
        source: git2::Error,
    },
    /// git2 failed reading or writing a repository the harness made.
    #[error("{}", source.message())]
    Repo {
        /// git2's reason.
        #[source]
        source: git2::Error,
    },
    /// The temporary folder a tree is built in before it is moved into place could not be made.
    #[error("cannot create a staging folder in {}: {source}", path.display())]
    Staging {
        /// The folder it was to be made in.
        path: PathBuf,
        /// The error creating it.
        #[source]
        source: io::Error,
    },
    /// A prepared repository could not be renamed from its staging folder into the cache.
    #[error("cannot move the prepared repo to {}: {source}", target.display())]
    Publish {
        /// Its place in the cache.
        target: PathBuf,
        /// The error renaming it.
        #[source]
        source: io::Error,
    },
    /// A plain folder's files could not be committed into a repository of the cache.
    #[error("cannot snapshot {}: {}", path.display(), source.message())]
    Snapshot {
        /// The folder.
        path: PathBuf,
        /// git2's reason.
        #[source]
        source: git2::Error,
    },
    /// git2 failed copying a commit's history into the cache.
    #[error(
        "cannot copy the history of {commit} out of {}: {step}: {}",
        repo.display(),
        source.message()
    )]
    HistoryRepo {
        /// The commit whose history is copied.
        commit: String,
        /// The source repository.
        repo: PathBuf,
        /// The step that failed.
        step: HistoryStep,
        /// git2's reason.
        #[source]
        source: git2::Error,
    },
    /// A file of the history copy could not be written, or a git command not started.
    #[error("cannot copy the history of {commit} out of {}: {step}: {source}", repo.display())]
    HistoryIo {
        /// The commit whose history is copied.
        commit: String,
        /// The source repository.
        repo: PathBuf,
        /// The step that failed.
        step: HistoryStep,
        /// The I/O error (a git command that could not start, a file not written).
        #[source]
        source: io::Error,
    },
    /// A git command of the copy ran and failed; `stderr` is what it said.
    #[error("cannot copy the history of {commit} out of {}: {step}: {stderr}", repo.display())]
    HistoryTool {
        /// The commit whose history is copied.
        commit: String,
        /// The source repository.
        repo: PathBuf,
        /// The step that failed.
        step: HistoryStep,
        /// The command's standard error.
        stderr: String,
    },
    /// An old tree could not be removed.
    #[error(transparent)]
    Remove(#[from] RemoveError),
    /// A history store holds objects beyond its base and cannot be cleaned.
    #[error(transparent)]
    Store(#[from] super::history_store::StoreError),
    /// Another thread panicked holding one of the backend's locks.
    #[error("poisoned lock: another task failed inside")]
    Poisoned,
    /// A lock file could not be locked (`flock`).
    #[error("{source}")]
    Lock {
        /// The system's error.
        #[source]
        source: nix::Error,
    },
    /// The overlay file system could not be mounted (no privilege, no kernel support).
    #[error("cannot mount an overlay on {}: {source}", path.display())]
    Mount {
        /// The mount point.
        path: PathBuf,
        /// The system's error.
        #[source]
        source: nix::Error,
    },
    /// A template could not be bind-mounted as an overlay's lower layer.
    #[error("cannot bind {} on {}: {source}", template.display(), lower.display())]
    Bind {
        /// The template folder.
        template: PathBuf,
        /// Where it was to be mounted.
        lower: PathBuf,
        /// The system's error.
        #[source]
        source: nix::Error,
    },
    /// A mount could not be taken down.
    #[error("cannot unmount {}: {source}", path.display())]
    Unmount {
        /// The mount point.
        path: PathBuf,
        /// The system's error.
        #[source]
        source: nix::Error,
    },
    /// A file's times could not be set.
    #[error("{}: {source}", path.display())]
    Stamp {
        /// The file.
        path: PathBuf,
        /// The system's error.
        #[source]
        source: nix::Error,
    },
    /// An extended attribute could not be removed.
    #[error("cannot remove {name} from {}: {source}", path.display())]
    Xattr {
        /// The attribute's name.
        name: String,
        /// The file holding it.
        path: PathBuf,
        /// The system's error.
        #[source]
        source: io::Error,
    },
    /// The system clock is before the Unix epoch.
    #[error("{source}")]
    Clock {
        /// The clock's error.
        #[source]
        source: std::time::SystemTimeError,
    },
    /// A template's record could not be serialized as JSON.
    #[error("{source}")]
    Record {
        /// serde_json's error.
        #[source]
        source: serde_json::Error,
    },
    /// A tree the harness just made could not be read back to record its content.
    #[error("cannot read back {}: {source}", path.display())]
    ReadBack {
        /// The tree.
        path: PathBuf,
        /// The error reading it.
        #[source]
        source: io::Error,
    },
    /// A tree's git index could not be brought up to date with its files.
    #[error("cannot settle the index of {}: {source}", path.display())]
    Settle {
        /// The tree.
        path: PathBuf,
        /// What failed.
        #[source]
        source: Box<TreeError>,
    },
    /// A layer's base template was rebuilt by another run since this run checked it.
    #[error("the template under it was rebuilt")]
    Rebuilt,
    /// The task's preparation failed (here or, earlier in the run, for another trial).
    #[error(transparent)]
    Prepare(#[from] PrepareError),
}

impl<T> From<std::sync::PoisonError<T>> for TreeError {
    fn from(_: std::sync::PoisonError<T>) -> Self {
        Self::Poisoned
    }
}

/// Why a template's [`super::Prepare::prepare`] failed: what failed and where its log is, as the
/// preparation says it. Kept (and cloned) for every later trial on the template.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct PrepareError {
    /// The message shown, naming the failed step and its log.
    pub reason: String,
}

impl From<String> for PrepareError {
    fn from(reason: String) -> Self {
        Self { reason }
    }
}
