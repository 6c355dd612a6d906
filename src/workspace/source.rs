//! The suite's repository, made ready to clone from: a git repo is used in place, a bundle is
//! cloned once, and a plain directory is snapshotted once into a commit.

use std::path::{Path, PathBuf};

use git2::{IndexAddOption, Repository, Signature, Time};

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

/// Makes `repo` clonable; bundles and plain directories become `<scratch>/source.git`.
pub fn prepare_source(repo: &RepoSource, scratch: &Path) -> Result<PreparedSource, String> {
    match repo.kind {
        RepoKind::WorkTree => Ok(PreparedSource {
            git_dir: repo.path.clone(),
            work_tree: Some(repo.path.clone()),
        }),
        RepoKind::Bare => Ok(PreparedSource {
            git_dir: repo.path.clone(),
            work_tree: None,
        }),
        RepoKind::Bundle => {
            let target = scratch.join("source.git");
            std::fs::create_dir_all(scratch).map_err(|e| e.to_string())?;
            run_git(
                scratch,
                &[
                    "clone",
                    "--bare",
                    "--quiet",
                    &repo.path.to_string_lossy(),
                    &target.to_string_lossy(),
                ],
            )?;
            Ok(PreparedSource {
                git_dir: target,
                work_tree: None,
            })
        }
        RepoKind::PlainDir => {
            let target = scratch.join("source.git");
            snapshot_dir(&repo.path, &target)
                .map_err(|e| format!("cannot snapshot {}: {}", repo.path.display(), e.message()))?;
            Ok(PreparedSource {
                git_dir: target,
                work_tree: None,
            })
        }
    }
}

/// Commits the files of `dir` (honouring its `.gitignore`) as `main` in a new bare repo. The
/// author and date are fixed, so the same files always give the same commit id.
fn snapshot_dir(dir: &Path, target: &Path) -> Result<(), git2::Error> {
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
    repo.commit(
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
    Ok(())
}
