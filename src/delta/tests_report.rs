//! What the harness's test hook saw during a verify command: which interpreters started and
//! exited normally, and each test's outcome as the runner itself reported it.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

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
    pub failed: BTreeSet<String>,
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
