//! What the harness's test hook saw during a verify command: which interpreters started and
//! exited normally, and each test's outcome as the runner itself reported it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::LazyLock;

use regex::Regex;
use serde::{Deserialize, Serialize};

use super::CommandResult;

/// What the harness's test hook saw in one verify run (Python runners only).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TestReport {
    /// Python interpreters that loaded the hook.
    pub interpreters: u32,
    /// Of those, the ones that never exited normally (`os._exit`, a signal, a crash).
    pub unclean_exits: u32,
    /// The runners that reported (`unittest`, `pytest`).
    pub runners: BTreeSet<String>,
    /// Test ids whose every report passed.
    pub passed: BTreeSet<String>,
    /// Test ids with a failed report in any phase or subtest.
    pub failed: BTreeSet<String>,
    /// Test ids reported skipped and never failed.
    pub skipped: BTreeSet<String>,
}

#[derive(Deserialize)]
struct Line {
    event: String,
    pid: u32,
    #[serde(default)]
    runner: String,
    #[serde(default)]
    id: String,
    #[serde(default)]
    outcome: String,
}

impl TestReport {
    /// Reads the hook's JSON lines; a line that does not parse is skipped.
    pub fn parse(text: &str) -> Self {
        let mut report = Self::default();
        // Each start is an interpreter (a pid may come back); an exit ends the latest with its pid.
        let mut running: Vec<bool> = Vec::new();
        let mut latest: BTreeMap<u32, usize> = BTreeMap::new();
        let mut outcomes: BTreeMap<String, &'static str> = BTreeMap::new();
        for line in text.lines() {
            let Ok(line) = serde_json::from_str::<Line>(line) else {
                continue;
            };
            match line.event.as_str() {
                "start" => {
                    report.interpreters += 1;
                    latest.insert(line.pid, running.len());
                    running.push(true);
                }
                "exit" => {
                    if let Some(&index) = latest.get(&line.pid) {
                        running[index] = false;
                    }
                }
                "test" => {
                    report.runners.insert(line.runner);
                    let outcome = outcomes.entry(line.id).or_insert("passed");
                    // A failure in any phase (or subtest) fails the test.
                    match (line.outcome.as_str(), *outcome) {
                        ("failed", _) => *outcome = "failed",
                        ("skipped", "passed") => *outcome = "skipped",
                        _ => {}
                    }
                }
                _ => {}
            }
        }
        report.unclean_exits = running.iter().filter(|running| **running).count() as u32;
        for (id, outcome) in outcomes {
            match outcome {
                "passed" => report.passed.insert(id),
                "failed" => report.failed.insert(id),
                _ => report.skipped.insert(id),
            };
        }
        report
    }

    /// The report with `path` (the verify workspace) written as `{workspace}` in test ids, so
    /// ids compare across runs and machines.
    pub fn without_path(self, path: &std::path::Path) -> Self {
        let path = path.to_string_lossy();
        let strip = |ids: BTreeSet<String>| -> BTreeSet<String> {
            ids.into_iter()
                .map(|id| id.replace(&*path, "{workspace}"))
                .collect()
        };
        Self {
            passed: strip(self.passed),
            failed: strip(self.failed),
            skipped: strip(self.skipped),
            ..self
        }
    }

    /// Tests that ran (passed or failed; skipped ones did not run).
    pub fn ran(&self) -> u64 {
        (self.passed.len() + self.failed.len()) as u64
    }
}

/// `FAILED tests/test_x.py::test_a - assert ...` and `ERROR ...` (pytest's short summary).
static PYTEST_FAILED_NAME: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?m)^(?:FAILED|ERROR) ([^\s(]\S*)").unwrap());
/// `FAIL: test_a (tests.test_x.XTest.test_a)`, or `(tests.test_x.XTest)` before Python 3.11.
static UNITTEST_FAILED_NAME: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?m)^(?:FAIL|ERROR): (\S+) \(([^)\s]+)\)").unwrap());

/// The failed test ids a runner's output names (pytest, unittest, `cargo test`), in order: what
/// `validate` shows under a reference that fails, when the test hook saw none.
pub fn failed_tests(output: &str) -> Vec<String> {
    let mut names: Vec<String> = PYTEST_FAILED_NAME
        .captures_iter(output)
        .map(|c| c[1].to_owned())
        .collect();
    names.extend(UNITTEST_FAILED_NAME.captures_iter(output).map(|c| {
        let (test, id) = (&c[1], &c[2]);
        match id.ends_with(&format!(".{test}")) {
            true => id.to_owned(),
            false => format!("{id}.{test}"),
        }
    }));
    names.extend(cargo_tests(output, "FAILED"));
    let mut seen = std::collections::HashSet::new();
    names.retain(|name| seen.insert(name.clone()));
    names
}

/// `test tests::adds ... ok` or `... FAILED` (cargo test): a test's name and outcome.
static CARGO_TEST_LINE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?m)^test (\S+) \.\.\. (ok|FAILED)\s*$").unwrap());

/// The names of the `cargo test` tests whose line ends in `outcome` (`ok` or `FAILED`).
pub fn cargo_tests<'a>(output: &'a str, outcome: &'a str) -> impl Iterator<Item = String> + 'a {
    CARGO_TEST_LINE
        .captures_iter(output)
        .filter(move |c| &c[2] == outcome)
        .map(|c| c[1].to_owned())
}

/// Per-test outcomes of one verify run, read by the one rule the judged run and every mutant run
/// share: the ids the hook's channel reported passed or failed, and the ids a runner's own
/// failure or result lines name (pytest's `FAILED id`, unittest's `FAIL: test (id)`, `cargo
/// test`'s `test id ... FAILED`), whoever printed them. A failure shown either way counts: in a
/// mutant run it is a bite, in the judged run it takes the pass away.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Outcomes {
    /// Test ids that passed and were never reported failed.
    pub passed: BTreeSet<String>,
    /// Test ids reported failed by the hook or the runner's own output.
    pub failed: BTreeSet<String>,
}

impl Outcomes {
    /// The outcomes `result` shows, from its hook report and its output.
    pub fn of(result: &CommandResult) -> Self {
        let mut outcomes = Self::default();
        if let Some(report) = &result.tests {
            outcomes.passed.extend(report.passed.iter().cloned());
            outcomes.failed.extend(report.failed.iter().cloned());
        }
        outcomes.failed.extend(failed_tests(&result.output));
        outcomes.passed.extend(cargo_tests(&result.output, "ok"));
        // A test reported both ways failed.
        outcomes.passed.retain(|id| !outcomes.failed.contains(id));
        outcomes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_outcomes_and_unclean_exits() {
        let text = r#"{"event":"start","pid":1}
{"event":"test","pid":1,"runner":"unittest","id":"t.A.test_a","outcome":"passed"}
{"event":"test","pid":1,"runner":"pytest","id":"t.py::b","outcome":"passed"}
{"event":"test","pid":1,"runner":"pytest","id":"t.py::b","outcome":"failed"}
{"event":"test","pid":1,"runner":"pytest","id":"t.py::c","outcome":"skipped"}
{"event":"exit","pid":1}
{"event":"start","pid":2}
not json
"#;
        let report = TestReport::parse(text);
        assert_eq!(report.interpreters, 2);
        assert_eq!(report.unclean_exits, 1);
        assert_eq!(report.passed, BTreeSet::from(["t.A.test_a".to_owned()]));
        assert_eq!(report.failed, BTreeSet::from(["t.py::b".to_owned()]));
        assert_eq!(report.skipped.len(), 1);
        assert_eq!(report.ran(), 2);
    }

    /// A parametrized id holding the verify workspace's path (psf__requests-6028's
    /// `test_unzipped_paths_unchanged[<path>/tests/test_utils.py]`) compares across runs.
    #[test]
    fn ids_are_kept_without_the_workspace_path() {
        let text = r#"{"event":"test","pid":1,"runner":"pytest","id":"t.py::u[/w/run-1/ws/merged/t.py]","outcome":"passed"}"#;
        let report =
            TestReport::parse(text).without_path(std::path::Path::new("/w/run-1/ws/merged"));
        assert_eq!(
            report.passed,
            BTreeSet::from(["t.py::u[{workspace}/t.py]".to_owned()])
        );
    }
}
