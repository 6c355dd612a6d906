//! What a task's trials left in their folders (`verify.log`, `tests.json`, the test hook's
//! report): the evidence shown under a bad task, so the reason reads without a rerun, and what the
//! reference showed, for the suite's lock.

use crate::metric::TestEvidence;
use crate::store::{TrialRecord, VerifyRecord, layout};
use std::path::{Path, PathBuf};

/// Lines of `verify.log` shown under a bad task: enough for an assertion and its summary.
pub(super) const TAIL_LINES: usize = 10;
/// Failed test names shown before "+N more".
const SHOWN_NAMES: usize = 5;
/// A longer log line is cut, so a minified blob does not flood the terminal.
const MAX_LINE_CHARS: usize = 200;

/// One trial of a task, with what its folder holds.
pub struct Trial<'a> {
    /// The trial's record, from `trials.jsonl`.
    pub record: &'a TrialRecord,
    /// The trial's folder in the run directory.
    pub dir: PathBuf,
    /// `tests.json`: absent when verify did not run.
    pub tests: Option<TestEvidence>,
}

impl<'a> Trial<'a> {
    /// The trial of `record` in the run directory `run_dir`, with its `tests.json` when readable.
    pub fn read(run_dir: &Path, record: &'a TrialRecord) -> Self {
        let dir = layout::record_path(run_dir, record);
        let tests = std::fs::read(dir.join(layout::TESTS))
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok());
        Self { record, dir, tests }
    }

    /// The verify command's exit code; `None` when verify did not run or no exit code was recorded.
    pub fn verify_exit(&self) -> Option<i32> {
        self.record.verify.as_ref().and_then(|v| v.exit_code)
    }

    /// Whether the verify command passed in time: a full reward where the test script writes
    /// one, else exit 0.
    pub fn verify_passed(&self) -> bool {
        self.record
            .verify
            .as_ref()
            .is_some_and(VerifyRecord::passed)
    }

    /// The container paths the trial's changes held back as packages installed (see
    /// `delta::toolchain`), from its `container-delta.txt`.
    pub fn held_back_installs(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.join(crate::delta::CONTAINER_CHANGES))
            .unwrap_or_default()
            .lines()
            .filter_map(|line| line.strip_suffix(crate::delta::INSTALLED_NOT_APPLIED))
            .filter_map(|line| line.split_once(' ').map(|(_, path)| path.to_owned()))
            .collect()
    }

    /// The test runners that reported, when they ran zero tests.
    pub fn zero_tests(&self) -> Option<String> {
        self.tests
            .as_ref()
            .filter(|t| !t.runners.is_empty() && t.ran == 0)
            .map(|t| t.runners.join(", "))
    }

    /// The ids of the tests that failed: the hook's report, else the runner's output.
    pub fn failed_tests(&self) -> Vec<String> {
        // Where the harness keeps the hook's report (the verify home is `verify-home/` in the
        // trial folder under every isolation).
        let hooked = std::fs::read_to_string(layout::hook_report(&self.dir))
            .map(|text| crate::delta::TestReport::parse(&text).failed)
            .unwrap_or_default();
        if !hooked.is_empty() {
            return hooked.into_iter().collect();
        }
        std::fs::read(self.dir.join(layout::VERIFY_LOG))
            .map(|bytes| crate::metric::failed_tests(&String::from_utf8_lossy(&bytes)))
            .unwrap_or_default()
    }

    /// The last lines of `verify.log`, indented, after a line naming the file.
    pub fn log_tail(&self, indent: &str) -> String {
        let path = self.dir.join(layout::VERIFY_LOG);
        let text = match std::fs::read(&path) {
            Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            Err(e) => return format!("{indent}(cannot read {}: {e})\n", path.display()),
        };
        let lines: Vec<&str> = text
            .trim_end()
            .lines()
            .skip_while(|line| line.trim().is_empty())
            .collect();
        if lines.is_empty() {
            return format!("{indent}(the verify command printed nothing)\n");
        }
        let skipped = lines.len().saturating_sub(TAIL_LINES);
        let mut out = match skipped {
            0 => format!("{indent}{}:\n", path.display()),
            _ => format!(
                "{indent}{} (last {TAIL_LINES} of {} lines):\n",
                path.display(),
                lines.len()
            ),
        };
        for line in &lines[skipped..] {
            let line = match line.char_indices().nth(MAX_LINE_CHARS) {
                Some((cut, _)) => format!("{} [... line cut]", &line[..cut]),
                None => (*line).to_owned(),
            };
            out.push_str(format!("{indent}  {line}").trim_end());
            out.push('\n');
        }
        out
    }
}

/// What every oracle trial's verify run showed (its `tests.json`): the least of them, so a trial
/// is held only to what the reference always shows. None when a trial has no `tests.json`.
pub fn reference_evidence(oracle: &[Trial]) -> Option<TestEvidence> {
    let mut least: Option<TestEvidence> = None;
    for trial in oracle {
        let seen = trial.tests.clone()?;
        least = Some(match least {
            None => seen,
            Some(mut least) => {
                least.ran = least.ran.min(seen.ran);
                least.passed = least.passed.min(seen.passed);
                least.names.retain(|name| seen.names.contains(name));
                least.runners.retain(|name| seen.runners.contains(name));
                least.mutants.retain(|m| seen.mutants.contains(m));
                least
            }
        });
    }
    least
}

/// `a, b, c (+2 more)`.
pub fn name_list(names: &[String]) -> String {
    let shown: Vec<&str> = names.iter().take(SHOWN_NAMES).map(String::as_str).collect();
    match names.len() - shown.len() {
        0 => shown.join(", "),
        more => format!("{} (+{more} more)", shown.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_name_lists_are_cut() {
        let names: Vec<String> = (1..=7).map(|i| format!("t{i}")).collect();
        assert_eq!(name_list(&names), "t1, t2, t3, t4, t5 (+2 more)");
        assert_eq!(name_list(&names[..2]), "t1, t2");
    }
}
