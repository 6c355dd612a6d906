//! The `worktree` backend: a private `git clone --shared` at the base commit.
//!
//! Not `git worktree add`: linked worktrees share refs, config and hooks, and adds race under
//! concurrency. A shared clone has its own `.git` and borrows objects read-only (from the base
//! commit's history repo, see `source`, so no later object is reachable by hash). After the clone
//! every ref is deleted and the remote removed, so the agent sees only the base commit and its
//! ancestors, not another branch or tag of the source (a later commit can hold the answer).

use std::fs;
use std::path::{Path, PathBuf};

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
            return Err(fail(reason));
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

/// A `--shared` clone of `source` at `commit` in `path`, with every ref and the remote removed.
pub(super) fn make_clone(source: &Path, path: &Path, commit: &str) -> Result<(), String> {
    let parent = path.parent().unwrap_or(Path::new("/"));
    let (source, target) = (source.to_string_lossy(), path.to_string_lossy());
    run_git(
        parent,
        &[
            "clone",
            "--shared",
            "--no-checkout",
            "--quiet",
            &source,
            &target,
        ],
    )?;
    strip_refs(path).map_err(|err| format!("cannot clean refs of {}: {err}", path.display()))?;
    run_git(path, &["checkout", "--quiet", "--detach", commit])?;
    // The checkout wrote a reflog entry; history beyond HEAD must stay out of reach.
    let _ = fs::remove_dir_all(path.join(".git/logs"));
    Ok(())
}

/// Removes every ref, the packed refs and the `origin` remote of a fresh clone.
fn strip_refs(path: &Path) -> std::io::Result<()> {
    let git_dir = path.join(".git");
    for sub in ["refs/heads", "refs/tags", "refs/remotes"] {
        let dir = git_dir.join(sub);
        if dir.exists() {
            fs::remove_dir_all(&dir)?;
        }
        fs::create_dir_all(&dir)?;
    }
    for file in ["packed-refs", "FETCH_HEAD", "ORIG_HEAD"] {
        let _ = fs::remove_file(git_dir.join(file));
    }
    run_git(path, &["config", "--remove-section", "remote.origin"])
        .map_err(std::io::Error::other)?;
    Ok(())
}
