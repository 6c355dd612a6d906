//! The suite's repository, made ready to clone from: a git repo is used in place; a bundle or a
//! plain directory becomes a content-addressed bare repo in the cache.

use std::path::{Path, PathBuf};

use git2::{IndexAddOption, Repository, Signature, Time};
use sha2::{Digest, Sha256};

use super::git::run_git;
use crate::suite::{RepoKind, RepoSource};

/// Where workspaces clone from, and the user's own work tree if there is one.
#[derive(Debug, Clone)]
pub struct PreparedSource {
    /// A git repository (bare or not) holding every base commit.
    pub git_dir: PathBuf,
    /// The user's work tree (for `session`), when the repo is one.
    pub work_tree: Option<PathBuf>,
}

/// Makes `repo` clonable. A bundle or a plain directory becomes a bare repo in `cache`, named by
/// its content (the bundle's sha256, the snapshot's commit id), so later runs and workspace
/// templates that borrow its objects find it again.
pub fn prepare_source(repo: &RepoSource, cache: &Path) -> Result<PreparedSource, String> {
    let bare = |git_dir: PathBuf| PreparedSource {
        git_dir,
        work_tree: None,
    };
    match repo.kind {
        RepoKind::WorkTree => Ok(PreparedSource {
            git_dir: repo.path.clone(),
            work_tree: Some(repo.path.clone()),
        }),
        RepoKind::Bare => Ok(bare(repo.path.clone())),
        RepoKind::Bundle => {
            let bytes = std::fs::read(&repo.path).map_err(|e| e.to_string())?;
            let target = cache.join(format!("bundle-{:x}.git", Sha256::digest(&bytes)));
            if !target.exists() {
                let scratch = scratch_dir(cache)?;
                let staged = scratch.path().join("source.git");
                run_git(
                    scratch.path(),
                    &[
                        "clone",
                        "--bare",
                        "--quiet",
                        &repo.path.to_string_lossy(),
                        &staged.to_string_lossy(),
                    ],
                )?;
                publish(&staged, &target)?;
            }
            Ok(bare(target))
        }
        RepoKind::PlainDir => {
            let scratch = scratch_dir(cache)?;
            let staged = scratch.path().join("source.git");
            let commit = snapshot_dir(&repo.path, &staged)
                .map_err(|e| format!("cannot snapshot {}: {}", repo.path.display(), e.message()))?;
            let target = cache.join(format!("plain-{commit}.git"));
            if !target.exists() {
                publish(&staged, &target)?;
            }
            Ok(bare(target))
        }
    }
}

fn scratch_dir(cache: &Path) -> Result<tempfile::TempDir, String> {
    std::fs::create_dir_all(cache)
        .map_err(|e| format!("cannot create {}: {e}", cache.display()))?;
    tempfile::Builder::new()
        .prefix(".staging-")
        .tempdir_in(cache)
        .map_err(|e| format!("cannot create a staging folder in {}: {e}", cache.display()))
}

/// Moves a finished repo into place; a concurrent run that got there first wins.
fn publish(staged: &Path, target: &Path) -> Result<(), String> {
    match std::fs::rename(staged, target) {
        Ok(()) => Ok(()),
        Err(_) if target.exists() => Ok(()),
        Err(e) => Err(format!(
            "cannot move the prepared repo to {}: {e}",
            target.display()
        )),
    }
}

/// Commits the files of `dir` (honouring its `.gitignore`) as `main` in a new bare repo. The
/// author and date are fixed, so the same files always give the same commit id.
fn snapshot_dir(dir: &Path, target: &Path) -> Result<String, git2::Error> {
    let repo = Repository::init_bare(target)?;
    repo.set_workdir(dir, false)?;
    let mut index = repo.index()?;
    index.add_all(["*"], IndexAddOption::DEFAULT, None)?;
    let tree = repo.find_tree(index.write_tree()?)?;
    let signature = Signature::new(
        "deltabench",
        "deltabench@localhost",
        &Time::new(946_684_800, 0),
    )?;
    let commit = repo.commit(
        Some("refs/heads/main"),
        &signature,
        &signature,
        "deltabench snapshot of the suite's repository",
        &tree,
        &[],
    )?;
    repo.set_head("refs/heads/main")?;
    // The index lives in the bare repo; drop it so the repo stays a plain object store.
    drop(index);
    let _ = std::fs::remove_file(target.join("index"));
    Ok(commit.to_string())
}
