//! The git CLI, as the harness runs it: no hooks, no fsmonitor, no prompts, no user config.
//!
//! Only ever used on repositories the agent has not touched yet (the source repo, a fresh
//! clone). Anything that reads a workspace after the agent ran goes through git2 instead.

use std::path::Path;
use std::process::Command;

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
pub fn run_git(cwd: &Path, args: &[&str]) -> Result<String, String> {
    let output = git_command(cwd)
        .args(args)
        .output()
        .map_err(|err| format!("cannot run git: {err}"))?;
    if output.status.success() {
        Ok(String::from_utf8_lossy(&output.stdout).trim().to_owned())
    } else {
        Err(format!(
            "`git {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

/// Resolves `commitish` in `repo` to a full commit id.
pub fn resolve_commit(repo: &Path, commitish: &str) -> Result<String, String> {
    let repository = git2::Repository::open(repo).map_err(|err| err.message().to_owned())?;
    let object = repository
        .revparse_single(commitish)
        .map_err(|err| format!("no commit '{commitish}': {}", err.message()))?;
    let commit = object
        .peel_to_commit()
        .map_err(|err| format!("'{commitish}' is not a commit: {}", err.message()))?;
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
