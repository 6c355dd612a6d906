//! `deltabench init [DIR]`: a first suite that validates and runs as written, every part of it
//! commented, so writing one takes no guessing.

use std::path::{Path, PathBuf};

use super::{CliError, EXIT_OK, print_stdout};

#[derive(Debug, clap::Args)]
pub(super) struct InitArgs {
    /// The folder to write the suite into (created when missing); must not hold a suite.yaml.
    #[arg(value_name = "DIR", default_value = ".")]
    dir: PathBuf,
}

const TASK: &str = "fix-median";

/// The code under test, committed as the task's base. The bug: `median` of an even-length
/// list returns the upper middle value instead of the mean of the two middle values.
const PROJECT: &[(&str, &str)] = &[
    (
        "README.md",
        "# stats\n\nSmall statistics helpers: `mean` and `median` in `stats.py`.\n\n\
         Run the tests with `python3 -m unittest -v`.\n",
    ),
    (".gitignore", "__pycache__/\n"),
    (
        "stats.py",
        r#""""Small statistics helpers."""


def mean(values):
    """Return the arithmetic mean of a non-empty list of numbers."""
    return sum(values) / len(values)


def median(values):
    """Return the median of a non-empty list of numbers."""
    ordered = sorted(values)
    return ordered[len(ordered) // 2]
"#,
    ),
    ("tests/__init__.py", ""),
    (
        "tests/test_stats.py",
        r#"import unittest

from stats import mean


class MeanTest(unittest.TestCase):
    def test_mean(self):
        self.assertEqual(mean([1, 2, 3, 6]), 3)


if __name__ == "__main__":
    unittest.main()
"#,
    ),
];

const INSTRUCTION: &str = "\
# `stats.median` is wrong for lists of even length

`stats.median([4, 1, 3, 2])` returns `3`, but the median of an even number of values is the
mean of the two middle ones: `2.5`.

Fix `median` in `stats.py` so that it returns the mean of the two middle values for lists of
even length. Lists of odd length must keep working as before, e.g. `median([3, 1, 2]) == 2`.
";

const HIDDEN_TEST: &str = r#"import unittest

from stats import median


class MedianTest(unittest.TestCase):
    def test_odd_length(self):
        self.assertEqual(median([3, 1, 2]), 2)

    def test_even_length(self):
        self.assertEqual(median([4, 1, 3, 2]), 2.5)

    def test_single_value(self):
        self.assertEqual(median([7]), 7)


if __name__ == "__main__":
    unittest.main()
"#;

const SOLUTION: &str = r#"diff --git a/stats.py b/stats.py
--- a/stats.py
+++ b/stats.py
@@ -9,4 +9,7 @@ def mean(values):
 def median(values):
     """Return the median of a non-empty list of numbers."""
     ordered = sorted(values)
-    return ordered[len(ordered) // 2]
+    middle = len(ordered) // 2
+    if len(ordered) % 2 == 0:
+        return (ordered[middle - 1] + ordered[middle]) / 2
+    return ordered[middle]
"#;

const AGENT: &str = r#"#!/bin/sh
# my-agent: a stand-in for your agent. Replace its body with a call to your own harness, e.g.
#   exec my-harness --prompt "$DELTABENCH_INSTRUCTION"
#
# deltabench runs it as `sh -c RUN` (the `run:` of the suite's agent) with:
#   - the current directory: the workspace, a private git clone of the repo at the task's base
#     commit (the hidden tests are not in it);
#   - the task's instruction in $DELTABENCH_INSTRUCTION, and in the file
#     $DELTABENCH_INSTRUCTION_FILE; stdin closed.
# Exit 0 means the agent completed; any other exit code is an agent error. What it prints goes
# to agent.log in the trial's folder. Only what it leaves in the workspace is scored: its diff
# against the base, verified by the task's verify command with the hidden tests added.
set -eu

printf 'my-agent: the task says:\n%s\n' "$DELTABENCH_INSTRUCTION"

# This stand-in knows one fix: the scaffolded task's.
python3 - <<'EOF'
import pathlib

path = pathlib.Path("stats.py")
old = "    return ordered[len(ordered) // 2]\n"
new = (
    "    middle = len(ordered) // 2\n"
    "    if len(ordered) % 2 == 0:\n"
    "        return (ordered[middle - 1] + ordered[middle]) / 2\n"
    "    return ordered[middle]\n"
)
text = path.read_text()
if old not in text:
    raise SystemExit("my-agent: no rule for this task")
path.write_text(text.replace(old, new))
print("my-agent: fixed median() in stats.py")
EOF
"#;

/// The suite file; `{name}` is the suite's name.
const SUITE: &str = r#"# A deltabench suite, written by `deltabench init`. Paths are relative to this file.
#   deltabench validate DIR   checks each task: its verify command fails on the untouched base
#                             and passes with the reference solution
#   deltabench run DIR        runs the agents below on every task and prints a summary
#   deltabench schema         prints every key this file accepts

# The suite's name: names the default run directory (reports/<name>-<time>).
name: {name}
# One line about the suite, for people reading it (optional).
description: "A first suite: one Python bug fix, a stand-in agent and a do-nothing baseline."
# The code the agents work on: a git repo (bare or not), a git bundle, or a plain directory.
# Every trial gets a private clone at the task's base commit, so commit what you change here.
repo: project
# The agents `run` runs (`run --agent NAME` picks some; without this map: oracle and noop).
agents:
  # An agent's name: yours to choose; reports and run directories use it.
  my-agent:
    # `command`: your own harness, run as `sh -c RUN` in the workspace with the instruction in
    # $DELTABENCH_INSTRUCTION. Other kinds: `deltabench run --help`.
    kind: command
    # The command line; a leading ./ is relative to this file.
    run: ./agents/my-agent.sh
    # The agent's wall-clock limit; past it the agent is stopped and its trial fails.
    timeout: 5m
  # A baseline that changes nothing: it must fail every task (built in, like `oracle`, which
  # applies each task's reference solution).
  noop:
    # `noop`, `oracle`: built in, nothing else to set.
    kind: noop
# Values for every task; a task's own key wins.
defaults:
  # How a trial's workspace is kept apart: `worktree` (a private clone; no protection from the
  # agent), `sandbox` (the same, with the agent and verify commands run in bubblewrap: for
  # agents you do not trust), or `session` (the repo's own work tree, one trial).
  isolation: worktree
  # The agent's wall-clock limit, for agents that set none.
  timeout: 10m
# The tasks; each is one trial per agent (`run --trials N` for more).
tasks:
  # Unique in the suite, [A-Za-z0-9._-]+; names the task's folder in the run directory.
  - id: {task}
    # What the agent is told: a file (Markdown is fine), or `instruction: "..."` inline.
    instruction_file: tasks/{task}.md
    # The hidden tests: this folder's contents are copied onto the workspace root after the
    # agent has finished, so tests/{task}/tests/test_median.py lands at tests/test_median.py
    # next to the repo's own tests. The agent never sees them, and a diff touching them fails.
    tests: tests/{task}/
    # The verify command: runs in a fresh workspace holding the agent's diff and the hidden
    # tests. A trial passes when the diff is not empty and the command exits 0 in time.
    verify:
      # A shell command line, run at the workspace root.
      run: python3 -m unittest -v tests.test_median
      # Past this the verify command is killed and the trial fails.
      timeout: 2m
    # The reference solution: a .patch (as here) or a folder copied onto the workspace.
    # `validate` checks that verify fails without it and passes with it; the `oracle` agent
    # applies it.
    solution: solutions/{task}.patch
    # Labels for `run --tag TAG` (optional).
    tags: [bugfix, python]
"#;

pub(super) fn init(args: &InitArgs) -> Result<u8, CliError> {
    let dir = &args.dir;
    if dir.join("suite.yaml").exists() {
        return Err(CliError::usage(format!(
            "{} already holds a suite.yaml: init writes a new suite only",
            dir.display()
        ))
        .hint(Some(
            "name a new folder: `deltabench init DIR` creates it".into(),
        )));
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
        .hint(Some(
            "name a new folder: `deltabench init DIR` creates it".into(),
        )));
    }
    // Checked before anything is written, so a failure leaves nothing half made.
    git(Path::new("."), &["--version"])?;

    let write = |path: &Path, content: &str| {
        std::fs::create_dir_all(path.parent().unwrap_or(dir))
            .and_then(|()| std::fs::write(path, content))
            .map_err(|e| CliError::failed(format!("cannot write {}: {e}", path.display())))
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
        |e| CliError::failed(format!("cannot make {} executable: {e}", agent.display())),
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
    Ok(EXIT_OK)
}

/// The files besides the project, suite.yaml last.
fn scaffold(name: &str) -> Vec<(String, String)> {
    vec![
        (format!("tasks/{TASK}.md"), INSTRUCTION.to_owned()),
        (
            format!("tests/{TASK}/tests/test_median.py"),
            HIDDEN_TEST.to_owned(),
        ),
        (format!("solutions/{TASK}.patch"), SOLUTION.to_owned()),
        ("agents/my-agent.sh".to_owned(), AGENT.to_owned()),
        (
            "suite.yaml".to_owned(),
            SUITE.replace("{name}", name).replace("{task}", TASK),
        ),
    ]
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
        .map_err(|e| CliError::failed(format!("init needs git on PATH: {e}")))?;
    if !output.status.success() {
        return Err(CliError::failed(format!(
            "git {} in {} failed: {}",
            args.join(" "),
            dir.display(),
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    Ok(())
}
