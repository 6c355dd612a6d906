//! The git CLI, as the harness runs it: no hooks, no fsmonitor, no prompts, no user config.
//!
//! Only ever used on repositories the agent has not touched yet (the source repo, a fresh
//! clone). Anything that reads a workspace after the agent ran goes through git2 instead.

use std::path::Path;
use std::process::Command;

use super::error::GitError;

/// A `git` command with the harness's safety settings.
pub fn git_command(cwd: &Path) -> Command {
    let mut command = Command::new("git");
    command
        .current_dir(cwd)
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .env_remove("GIT_INDEX_FILE")
        .args([
            "-c",
            "core.hooksPath=/dev/null",
            "-c",
            "core.fsmonitor=false",
            "-c",
            "advice.detachedHead=false",
        ])
        .stdin(std::process::Stdio::null());
    command
}

/// Runs git and returns its stdout, or its stderr as the error.
pub(super) fn run_git(cwd: &Path, args: &[&str]) -> Result<String, GitError> {
    let output = git_command(cwd)
        .args(args)
        .output()
        .map_err(|source| GitError::Spawn { source })?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
    } else {
        Err(GitError::Failed {
            args: args.join(" "),
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        })
    }
}

/// Resolves `commitish` in `repo` to a full commit id.
pub fn resolve_commit(repo: &Path, commitish: &str) -> Result<String, GitError> {
    let repository = git2::Repository::open(repo).map_err(|source| GitError::Open { source })?;
    let object = repository
        .revparse_single(commitish)
        .map_err(|source| GitError::NoCommit {
            commitish: commitish.to_owned(),
            source,
        })?;
    let commit = object
        .peel_to_commit()
        .map_err(|source| GitError::NotACommit {
            commitish: commitish.to_owned(),
            source,
        })?;
    Ok(commit.id().to_string())
}

/// The author of every commit the harness makes (snapshots, setup): a fixed name and date, so
/// the same files always give the same commit id.
pub fn harness_signature() -> Result<git2::Signature<'static>, git2::Error> {
    git2::Signature::new(
        "deltabench",
        "deltabench@localhost",
        &git2::Time::new(946_684_800, 0),
    )
}
