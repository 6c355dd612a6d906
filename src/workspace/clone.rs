//! The `worktree` backend: a private `git clone --shared` at the base commit.
//!
//! Not `git worktree add`: linked worktrees share refs, config and hooks, and adds race under
//! concurrency. A shared clone has its own `.git` and borrows objects read-only (from the base
//! commit's history repo, see `source`, so no later object is reachable by hash). It has no ref
//! and no remote, so the agent sees only the base commit and its ancestors, not another branch
//! or tag of the source (a later commit can hold the answer).

use std::fs;
use std::path::{Path, PathBuf};

use super::error::TreeError;
use super::git::run_git;
use super::remove::remove_tree;
use super::{
    Isolation, ProvisionedWorkspace, WorkspaceBackend, WorkspaceBase, WorkspaceProvisionError,
};

/// Creates workspaces as `<root>/<name>`.
#[derive(Debug, Clone)]
pub struct CloneBackend {
    root: PathBuf,
    keep: bool,
}

impl CloneBackend {
    /// Clones under `root`, one folder per workspace name, removed on dispose.
    pub fn new(root: &Path) -> Self {
        Self {
            root: root.to_owned(),
            keep: false,
        }
    }

    /// Dispose leaves the workspace on disk, for inspection.
    pub fn keeping(mut self, keep: bool) -> Self {
        self.keep = keep;
        self
    }
}

impl WorkspaceBackend for CloneBackend {
    fn provision(
        &self,
        base: &WorkspaceBase,
    ) -> Result<ProvisionedWorkspace, WorkspaceProvisionError> {
        let fail = |reason: String| WorkspaceProvisionError {
            isolation: Isolation::Worktree,
            base: base.repo.clone(),
            reason,
        };
        let path = self.root.join(&base.name);
        if path.exists() {
            return Err(fail(format!(
                "{} already exists (left by an earlier run?); remove it or choose another --workdir",
                path.display()
            )));
        }
        fs::create_dir_all(&self.root)
            .map_err(|err| fail(format!("cannot create {}: {err}", self.root.display())))?;
        let made = make_clone(&base.repo, &path, &base.commit);
        if let Err(reason) = made {
            let _ = remove_tree(&path);
            return Err(fail(reason.to_string()));
        }
        let dispose_path = path.clone();
        if self.keep {
            return Ok(ProvisionedWorkspace::new(
                path,
                Isolation::Worktree,
                base.commit.clone(),
                || Ok(()),
            ));
        }
        Ok(ProvisionedWorkspace::new(
            path,
            Isolation::Worktree,
            base.commit.clone(),
            // The agent may have mounted something inside (it runs as root here): dispose
            // detaches it and never deletes through it.
            move || remove_tree(&dispose_path).map_err(std::io::Error::from),
        ))
    }
}

/// A `--shared` clone of `source` at `commit` in `path`, with no ref, remote or reflog.
///
/// Made as `git clone --shared --no-checkout` would, less what the clone then had stripped: a
/// new repository whose alternates file names the source's object store, then a checkout. That
/// saves the clone's processes (upload-pack, the remote, the refs it writes): a new base
/// commit's template is on its first trial's path.
pub(super) fn make_clone(source: &Path, path: &Path, commit: &str) -> Result<(), TreeError> {
    let objects = objects_of(source)?;
    git2::Repository::init(path).map_err(|source| TreeError::Init {
        path: path.to_owned(),
        source,
    })?;
    let alternates = path.join(".git/objects/info/alternates");
    fs::create_dir_all(path.join(".git/objects/info"))
        .and_then(|()| fs::write(&alternates, format!("{}\n", objects.display())))
        .map_err(|source| TreeError::Write {
            path: alternates,
            source,
        })?;
    run_git(path, &["checkout", "--quiet", "--detach", commit])?;
    // The checkout wrote a reflog entry; history beyond HEAD must stay out of reach.
    let _ = fs::remove_dir_all(path.join(".git/logs"));
    Ok(())
}

/// The object store of the repository `source` (bare or not), as an absolute path.
pub(super) fn objects_of(source: &Path) -> Result<PathBuf, TreeError> {
    let objects = match source.join(".git/objects") {
        nested if nested.is_dir() => nested,
        _ => source.join("objects"),
    };
    std::path::absolute(&objects).map_err(|source| TreeError::Resolve {
        path: objects.clone(),
        source,
    })
}

/// The object store a clone made by [`make_clone`] at `path` borrows from.
pub(super) fn borrowed_objects(path: &Path) -> Option<PathBuf> {
    let alternates = fs::read_to_string(path.join(".git/objects/info/alternates")).ok()?;
    alternates.lines().next().map(PathBuf::from)
}
