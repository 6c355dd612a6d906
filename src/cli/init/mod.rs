//! `deltabench init [DIR]`: a first suite that validates and runs as written, every part of it
//! commented, so writing one takes no guessing.

mod scaffold;

use std::path::Path;

use super::args::InitArgs;
use super::exit::Exit;
use super::{CliError, ErrorKind, print_stdout};
use scaffold::{PROJECT, TASK, scaffold};

pub(super) fn init(args: &InitArgs) -> Result<Exit, CliError> {
    let dir = &args.dir;
    if dir.join("suite.yaml").exists() {
        return Err(CliError::usage(format!(
            "{} already holds a suite.yaml: init writes a new suite only",
            dir.display()
        ))
        .hint("name a new folder: `deltabench init DIR` creates it"));
    }
    let files = scaffold(&suite_name(dir));
    let taken: Vec<String> = files
        .iter()
        .map(|(path, _)| top_level(path))
        .chain(["project".to_owned()])
        .filter(|top| dir.join(top).exists())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    if !taken.is_empty() {
        return Err(CliError::usage(format!(
            "{} already holds {}: init writes there and would mix its files with yours",
            dir.display(),
            taken.join(", ")
        ))
        .hint("name a new folder: `deltabench init DIR` creates it"));
    }
    // Checked before anything is written, so a failure leaves nothing half made.
    git(Path::new("."), &["--version"])?;

    let write = |path: &Path, content: &str| {
        std::fs::create_dir_all(path.parent().unwrap_or(dir))
            .and_then(|()| std::fs::write(path, content))
            .map_err(|e| {
                CliError::with_cause(
                    ErrorKind::Harness,
                    format!("cannot write {}", path.display()),
                    e,
                )
            })
    };
    let project = dir.join("project");
    for (path, content) in PROJECT {
        write(&project.join(path), content)?;
    }
    git(&project, &["init", "-q"])?;
    git(&project, &["add", "-A"])?;
    git(
        &project,
        &["commit", "-q", "--no-verify", "-m", "The stats module"],
    )?;
    // The suite file last: a folder without one can be initialized again.
    for (path, content) in &files {
        write(&dir.join(path), content)?;
    }
    let agent = dir.join("agents/my-agent.sh");
    std::fs::set_permissions(&agent, std::os::unix::fs::PermissionsExt::from_mode(0o755)).map_err(
        |e| {
            CliError::with_cause(
                ErrorKind::Harness,
                format!("cannot make {} executable", agent.display()),
                e,
            )
        },
    )?;

    let shown = match dir.as_os_str().to_str() {
        Some(".") => ".".to_owned(),
        _ => dir.display().to_string(),
    };
    let listing = [
        ("suite.yaml".to_owned(), "the suite; every key is commented"),
        (
            "project/".to_owned(),
            "the code under test: a git repo, one commit",
        ),
        (format!("tasks/{TASK}.md"), "what the agent is told"),
        (
            format!("tests/{TASK}/tests/test_median.py"),
            "the hidden tests, copied onto the workspace root",
        ),
        (format!("solutions/{TASK}.patch"), "the reference solution"),
        (
            "agents/my-agent.sh".to_owned(),
            "a stand-in agent: replace it with your harness",
        ),
    ];
    let mut text = format!("wrote a suite in {shown}:\n");
    for (path, what) in &listing {
        text.push_str(&format!("  {path:<40}{what}\n"));
    }
    text.push_str(&format!(
        "next:\n  deltabench validate {shown}    # the task fails on the base and passes with its solution\n  deltabench run {shown}         # my-agent and noop on the task\n"
    ));
    print_stdout(&text);
    Ok(Exit::Ok)
}

fn top_level(path: &str) -> String {
    path.split('/').next().unwrap_or(path).to_owned()
}

/// The folder's name when it makes a plain YAML scalar, else `my-suite`.
fn suite_name(dir: &Path) -> String {
    let name = std::path::absolute(dir)
        .ok()
        .and_then(|p| {
            p.components()
                .next_back()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
        })
        .unwrap_or_default();
    let plain = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && name.starts_with(|c: char| c.is_ascii_alphanumeric());
    if plain { name } else { "my-suite".into() }
}

/// Runs git in `dir` with a fixed identity and no hooks, so the scaffold commits anywhere.
fn git(dir: &Path, args: &[&str]) -> Result<(), CliError> {
    let output = std::process::Command::new("git")
        .current_dir(dir)
        .args([
            "-c",
            "init.defaultBranch=main",
            "-c",
            "commit.gpgsign=false",
            "-c",
            "core.hooksPath=/dev/null",
        ])
        .args(args)
        .env("GIT_AUTHOR_NAME", "deltabench init")
        .env("GIT_AUTHOR_EMAIL", "init@deltabench.invalid")
        .env("GIT_COMMITTER_NAME", "deltabench init")
        .env("GIT_COMMITTER_EMAIL", "init@deltabench.invalid")
        .output()
        .map_err(|e| CliError::with_cause(ErrorKind::Harness, "init needs git on PATH", e))?;
    if !output.status.success() {
        return Err(CliError::harness(format!(
            "git {} in {} failed: {}",
            args.join(" "),
            dir.display(),
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    Ok(())
}
