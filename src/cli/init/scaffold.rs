//! What `init` writes: a small Python project with a bug, one task with hidden tests and a
//! reference solution, a stand-in agent script, and a suite.yaml with every key commented.

pub(super) const TASK: &str = "fix-median";

/// The code under test, committed as the task's base. The bug: `median` of an even-length
/// list returns the upper middle value instead of the mean of the two middle values.
pub(super) const PROJECT: &[(&str, &str)] = &[
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

/// The files besides the project, suite.yaml last.
pub(super) fn scaffold(name: &str) -> Vec<(String, String)> {
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
