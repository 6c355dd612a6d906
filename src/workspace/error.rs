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
        #[source]
        source: io::Error,
    },
    /// `git` ran and failed; `stderr` is what it said.
    #[error("`git {args}` failed: {stderr}")]
    Failed { args: String, stderr: String },
    /// The repository could not be opened.
    #[error("{}", source.message())]
    Open {
        #[source]
        source: git2::Error,
    },
    /// `commitish` names nothing in the repository.
    #[error("no commit '{commitish}': {}", source.message())]
    NoCommit {
        commitish: String,
        #[source]
        source: git2::Error,
    },
    /// `commitish` names an object that is no commit.
    #[error("'{commitish}' is not a commit: {}", source.message())]
    NotACommit {
        commitish: String,
        #[source]
        source: git2::Error,
    },
}

/// A step of copying one commit's history into the cache (see `source::history_repo`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::Display)]
pub enum HistoryStep {
    #[strum(to_string = "git init")]
    Init,
    #[strum(to_string = "alternates")]
    Alternates,
    #[strum(to_string = "git pack-objects")]
    PackObjects,
    #[strum(to_string = "git index-pack")]
    IndexPack,
    #[strum(to_string = "refs")]
    Refs,
}

/// Why a tree the harness makes (a clone, a cached repository, a template) could not be made.
#[derive(Debug, thiserror::Error)]
pub enum TreeError {
    #[error(transparent)]
    Git(#[from] GitError),
    #[error("cannot create {}: {source}", path.display())]
    Create {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot resolve {}: {source}", path.display())]
    Resolve {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A file or folder of the tree could not be read or changed.
    #[error("{}: {source}", path.display())]
    Access {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A file the harness reads whole (a bundle, a lock file) is unreadable.
    #[error("{source}")]
    Io {
        #[source]
        source: io::Error,
    },
    #[error("cannot create a repository in {}: {}", path.display(), source.message())]
    Init {
        path: PathBuf,
        #[source]
        source: git2::Error,
    },
    /// git2 failed reading or writing a repository the harness made.
    #[error("{}", source.message())]
    Repo {
        #[source]
        source: git2::Error,
    },
    #[error("cannot create a staging folder in {}: {source}", path.display())]
    Staging {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot move the prepared repo to {}: {source}", target.display())]
    Publish {
        target: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot snapshot {}: {}", path.display(), source.message())]
    Snapshot {
        path: PathBuf,
        #[source]
        source: git2::Error,
    },
    #[error(
        "cannot copy the history of {commit} out of {}: {step}: {}",
        repo.display(),
        source.message()
    )]
    HistoryRepo {
        commit: String,
        repo: PathBuf,
        step: HistoryStep,
        #[source]
        source: git2::Error,
    },
    #[error("cannot copy the history of {commit} out of {}: {step}: {source}", repo.display())]
    HistoryIo {
        commit: String,
        repo: PathBuf,
        step: HistoryStep,
        #[source]
        source: io::Error,
    },
    /// A git command of the copy ran and failed; `stderr` is what it said.
    #[error("cannot copy the history of {commit} out of {}: {step}: {stderr}", repo.display())]
    HistoryTool {
        commit: String,
        repo: PathBuf,
        step: HistoryStep,
        stderr: String,
    },
    #[error(transparent)]
    Remove(#[from] RemoveError),
    /// A history store holds objects beyond its base and cannot be cleaned.
    #[error(transparent)]
    Store(#[from] super::history_store::StoreError),
    /// Another thread panicked holding one of the backend's locks.
    #[error("poisoned lock: another task failed inside")]
    Poisoned,
    #[error("{source}")]
    Lock {
        #[source]
        source: nix::Error,
    },
    #[error("cannot mount an overlay on {}: {source}", path.display())]
    Mount {
        path: PathBuf,
        #[source]
        source: nix::Error,
    },
    #[error("cannot bind {} on {}: {source}", template.display(), lower.display())]
    Bind {
        template: PathBuf,
        lower: PathBuf,
        #[source]
        source: nix::Error,
    },
    #[error("cannot unmount {}: {source}", path.display())]
    Unmount {
        path: PathBuf,
        #[source]
        source: nix::Error,
    },
    #[error("{}: {source}", path.display())]
    Stamp {
        path: PathBuf,
        #[source]
        source: nix::Error,
    },
    #[error("cannot remove {name} from {}: {source}", path.display())]
    Xattr {
        name: String,
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("{source}")]
    Clock {
        #[source]
        source: std::time::SystemTimeError,
    },
    #[error("{source}")]
    Record {
        #[source]
        source: serde_json::Error,
    },
    #[error("cannot read back {}: {source}", path.display())]
    ReadBack {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("cannot settle the index of {}: {source}", path.display())]
    Settle {
        path: PathBuf,
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
    pub reason: String,
}

impl From<String> for PrepareError {
    fn from(reason: String) -> Self {
        Self { reason }
    }
}
