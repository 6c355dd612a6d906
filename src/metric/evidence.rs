//! Cross-checks a verify command's exit code with what its output and the test hook say.
//!
//! What makes a trial `invalid` (not passed, shown apart): a test runner that ran zero tests, a
//! runner summary claiming every test passed while the command exited non-zero, or reporting
//! failures while it exited 0 (an exit code the agent's code rewrote) ([`contradiction`]); a
//! hooked Python process that never exited normally ([`unclean_exit`]); and, for a pass, a
//! failed test the reference did not fail ([`failures_shown`]) or less than the reference's
//! evidence ([`TestEvidence::unmet_by`]). Only the summary lines of unittest, pytest and
//! `cargo test` are read, each anchored to a whole line, so ordinary output (a bare `PASSED`, a
//! log line saying "OK") never triggers it; a verify command that prints no such summary is
//! never `invalid` by its output.

use std::sync::LazyLock;

use regex::Regex;

pub use crate::delta::failed_tests;
use crate::delta::{CommandResult, Outcomes};

/// One line of a runner's summary, as counts.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Summary {
    /// Tests the runner said it ran (or collected).
    ran: u64,
    /// Failures or errors it reported.
    failed: u64,
}

/// `Ran 3 tests in 0.001s` (unittest).
static UNITTEST_RAN: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?m)^Ran (\d+) tests? in ").unwrap());
/// `FAILED (failures=1, errors=2)` (unittest).
static UNITTEST_FAILED: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"(?m)^FAILED \(").unwrap());
/// `OK` or `OK (skipped=1)` on a line of its own (unittest).
static UNITTEST_OK: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?m)^OK(?: \(.*\))?\s*$").unwrap());
/// `===== 2 passed, 1 failed in 0.12s =====`, or with `-q` `2 deselected in 0.01s` and
/// `no tests ran in 0.01s` (pytest): a comma list of counts, then the duration.
static PYTEST_SUMMARY: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?m)^(?:=+ )?((?:\d+ [a-z]+|no tests ran)(?:, \d+ [a-z]+)*) in [\d.]+s(?: \([^)]*\))?(?: =+)?\s*$",
    )
    .unwrap()
});
/// The counts of a pytest summary; skipped and deselected tests did not run.
static PYTEST_COUNT: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(\d+) (passed|xpassed|xfailed|failed|errors?)\b").unwrap());
/// `collected 0 items` (pytest).
static PYTEST_COLLECTED: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?m)^collected (\d+) items?").unwrap());
/// `running 3 tests` (cargo test, once per test binary).
static CARGO_RUNNING: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?m)^running (\d+) tests?\s*$").unwrap());
/// `test result: ok. 3 passed; 0 failed; ...` (cargo test).
static CARGO_RESULT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?m)^test result: (ok|FAILED)\. (\d+) passed; (\d+) failed").unwrap()
});

fn number(text: &str) -> u64 {
    text.parse().unwrap_or(u64::MAX)
}

/// Every runner summary found in `output`, by runner.
///
/// Only the last summary of unittest and of pytest counts: a passing test may print a test run
/// of its own (captured output shown by `pytest -rA`), and the outer run prints its summary last.
fn summaries(output: &str) -> Vec<(&'static str, Summary)> {
    let mut found = Vec::new();
    if let Some(tail) = unittest_tail(output)
        && let Some(ran) = UNITTEST_RAN.captures(tail)
    {
        found.push((
            "unittest",
            Summary {
                ran: number(&ran[1]),
                failed: u64::from(UNITTEST_FAILED.is_match(tail)),
            },
        ));
    }
    let mut pytest_summary = false;
    if let Some(line) = PYTEST_SUMMARY.captures_iter(output).last() {
        pytest_summary = true;
        let mut summary = Summary::default();
        for count in PYTEST_COUNT.captures_iter(&line[1]) {
            let n = number(&count[1]);
            match &count[2] {
                "passed" | "xpassed" | "xfailed" => summary.ran += n,
                _ => {
                    summary.ran += n;
                    summary.failed += n;
                }
            }
        }
        found.push(("pytest", summary));
    }
    if !pytest_summary {
        // Without a summary line (pytest killed early, `-q` variants), `collected N` still counts.
        for collected in PYTEST_COLLECTED.captures_iter(output) {
            found.push((
                "pytest",
                Summary {
                    ran: number(&collected[1]),
                    failed: 0,
                },
            ));
        }
    }
    let results: Vec<_> = CARGO_RESULT.captures_iter(output).collect();
    if results.is_empty() {
        for running in CARGO_RUNNING.captures_iter(output) {
            found.push((
                "cargo test",
                Summary {
                    ran: number(&running[1]),
                    failed: 0,
                },
            ));
        }
    }
    for result in results {
        let failed = number(&result[3]) + u64::from(&result[1] == "FAILED");
        found.push((
            "cargo test",
            Summary {
                ran: number(&result[2]) + number(&result[3]),
                failed,
            },
        ));
    }
    found
}

/// The output from unittest's last `Ran N tests` line on: the outermost run's summary.
fn unittest_tail(output: &str) -> Option<&str> {
    UNITTEST_RAN
        .find_iter(output)
        .last()
        .map(|ran| &output[ran.start()..])
}

/// Why the verify result is not evidence, or `None` when it is (or cannot be judged).
///
/// A timed-out command is left alone: the timeout already fails it.
pub fn contradiction(result: &CommandResult) -> Option<String> {
    if result.timed_out {
        return None;
    }
    let found = summaries(&result.output);
    if found.is_empty() {
        return None;
    }
    let runners = {
        let mut names: Vec<&str> = found.iter().map(|(name, _)| *name).collect();
        names.dedup();
        names.join(", ")
    };
    let ran: u64 = found.iter().map(|(_, s)| s.ran).sum();
    if ran == 0 {
        return Some(format!("the test runner ({runners}) ran zero tests"));
    }
    // A task whose test script writes a reward: the reward is the verdict, and it may be lower
    // than the tests say (other checks count too); a pass that shows failures is
    // `failures_shown`'s.
    if result.reward.is_some() {
        return None;
    }
    let failed: u64 = found.iter().map(|(_, s)| s.failed).sum();
    let unittest_ok = !found.iter().any(|(name, _)| *name == "unittest")
        || unittest_tail(&result.output).is_some_and(|tail| UNITTEST_OK.is_match(tail));
    match result.exit_code {
        Some(code) if code != 0 && failed == 0 && unittest_ok => Some(format!(
            "the output of {runners} claims {ran} test(s) passed, but verify exited {code}"
        )),
        Some(0) if failed > 0 => Some(format!(
            "the output of {runners} reports failures, but verify exited 0"
        )),
        _ => None,
    }
}

/// What a verify run shows of its tests: what `validate` records from the reference solution
/// and what every trial must show again.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TestEvidence {
    /// The runners whose summary or hook reported, e.g. `["unittest"]`.
    pub runners: Vec<String>,
    /// Tests the summaries report run.
    pub ran: u64,
    /// Tests the summaries report passed.
    pub passed: u64,
    /// Ids of the passed tests, where the runner gives them (the hook for unittest and pytest,
    /// the output of `cargo test`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub names: Vec<String>,
    /// Ids the reference's own run reported failed (a test the fix does not cover): the only
    /// failures a passing trial may show.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub failed: Vec<String>,
    /// Mutants of the hidden tests that made the reference fail: a sample of them runs with
    /// every passing trial.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mutants: Vec<crate::delta::BitingMutant>,
}

impl TestEvidence {
    /// The evidence in a verify result: the hook's report when it saw tests, else the summary
    /// lines of the output.
    pub fn of(result: &CommandResult) -> Self {
        let found = summaries(&result.output);
        let mut runners: Vec<String> = found.iter().map(|(name, _)| (*name).to_owned()).collect();
        let hooked = result.tests.as_ref().filter(|report| report.ran() > 0);
        if let Some(report) = hooked {
            runners.extend(report.runners.iter().cloned());
        }
        runners.sort();
        runners.dedup();
        let failed_ids: Vec<String> = Outcomes::of(result).failed.into_iter().collect();
        match hooked {
            Some(report) => Self {
                runners,
                ran: report.ran(),
                passed: report.passed.len() as u64,
                names: report.passed.iter().cloned().collect(),
                failed: failed_ids,
                mutants: Vec::new(),
            },
            None => {
                let ran: u64 = found.iter().map(|(_, s)| s.ran).sum();
                let failed: u64 = found.iter().map(|(_, s)| s.failed).sum();
                let names = crate::delta::cargo_tests(&result.output, "ok")
                    .collect::<std::collections::BTreeSet<_>>();
                Self {
                    runners,
                    ran,
                    passed: ran.saturating_sub(failed),
                    names: names.into_iter().collect(),
                    failed: failed_ids,
                    mutants: Vec::new(),
                }
            }
        }
    }

    /// Why `result` does not show at least this evidence, or `None` when it does.
    pub fn unmet_by(&self, result: &CommandResult) -> Option<String> {
        let seen = Self::of(result);
        let validated = format!(
            "when validated, {} ran {} test(s) and {} passed",
            self.runners.join(", "),
            self.ran,
            self.passed
        );
        if seen.runners.is_empty() && !self.runners.is_empty() {
            return Some(format!("no test runner reported a result ({validated})"));
        }
        if seen.ran < self.ran || seen.passed < self.passed {
            return Some(format!(
                "fewer tests than validated: {} ran and {} passed ({validated})",
                seen.ran, seen.passed
            ));
        }
        let missing: Vec<&String> = self
            .names
            .iter()
            .filter(|name| seen.names.binary_search(name).is_err())
            .collect();
        if !missing.is_empty() {
            let shown: Vec<&str> = missing.iter().take(3).map(|s| s.as_str()).collect();
            let more = missing.len().saturating_sub(shown.len());
            return Some(format!(
                "{} of the {} tests the reference solution passed did not pass here: {}{}",
                missing.len(),
                self.names.len(),
                shown.join(", "),
                if more > 0 {
                    format!(" (+{more} more)")
                } else {
                    String::new()
                }
            ));
        }
        None
    }
}

/// Why a passing verify run is no pass: it reports a test failed (on the hook's channel, or in
/// a runner's own failure line, whoever printed it) that the reference's run did not. The
/// judged run is read by the rule a mutant run is read by, where such a failure is a bite: a
/// failure forged in both runs cannot make the mutants bite and the judged run pass.
pub(super) fn failures_shown(
    result: &CommandResult,
    expected: Option<&TestEvidence>,
) -> Option<String> {
    let allowed = expected.map(|e| e.failed.as_slice()).unwrap_or_default();
    let failed: Vec<String> = Outcomes::of(result)
        .failed
        .into_iter()
        .filter(|id| !allowed.contains(id))
        .collect();
    let first = failed.first()?;
    let more = match failed.len() {
        1 => String::new(),
        n => format!(" (+{} more)", n - 1),
    };
    Some(format!(
        "the verify run reports failed tests while it passed: {first}{more} (a failure on the test hook's channel or in a runner's output is never part of a pass)"
    ))
}

/// A Python process of the verify command that loaded the hook and never exited normally,
/// while the command exited 0: the shape of a fake summary followed by `os._exit(0)`.
pub fn unclean_exit(result: &CommandResult) -> Option<String> {
    let report = result.tests.as_ref()?;
    (result.succeeded() && report.unclean_exits > 0).then(|| {
        format!(
            "{} Python process(es) of the verify command ended without a normal exit (os._exit or a kill) while it exited 0",
            report.unclean_exits
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_names_come_from_each_runners_output() {
        let pytest = "FAILED tests/test_calc.py::test_add - assert 1 == 2\n\
            ERROR tests/test_calc.py::test_io\n=== 1 failed, 1 error in 0.1s ===\n";
        assert_eq!(
            failed_tests(pytest),
            [
                "tests/test_calc.py::test_add",
                "tests/test_calc.py::test_io"
            ]
        );
        let unittest = "FAIL: test_add (tests.test_calc.CalcTest.test_add)\n\
            ERROR: test_div (tests.test_calc.CalcTest)\nFAIL: test_add (tests.test_calc.CalcTest.test_add)\n";
        assert_eq!(
            failed_tests(unittest),
            [
                "tests.test_calc.CalcTest.test_add",
                "tests.test_calc.CalcTest.test_div"
            ]
        );
        let cargo = "test tests::adds ... FAILED\ntest tests::subtracts ... ok\n";
        assert_eq!(failed_tests(cargo), ["tests::adds"]);
        assert!(failed_tests("FAILED (failures=1)\nall good\n").is_empty());
    }

    fn check(exit_code: i32, output: &str) -> Option<String> {
        contradiction(&CommandResult {
            command: "verify".into(),
            exit_code: Some(exit_code),
            output: output.into(),
            ..CommandResult::default()
        })
    }

    const UNITTEST_OK_OUTPUT: &str = "...\n\
        ----------------------------------------------------------------------\n\
        Ran 3 tests in 0.001s\n\nOK\n";
    const UNITTEST_FAILED_OUTPUT: &str = ".F.\n\
        ======================================================================\n\
        FAIL: test_add (test_calc.TestCalc.test_add)\n\
        ----------------------------------------------------------------------\n\
        Traceback (most recent call last):\n  File \"test_calc.py\", line 6\n\
        AssertionError: 1 != 2\n\n\
        ----------------------------------------------------------------------\n\
        Ran 3 tests in 0.002s\n\nFAILED (failures=1)\n";
    const UNITTEST_ZERO: &str = "\n\
        ----------------------------------------------------------------------\n\
        Ran 0 tests in 0.000s\n\nNO TESTS RAN\n";
    const PYTEST_PASSED: &str = "============================= test session starts ==============================\n\
        platform linux -- Python 3.11.2, pytest-7.2.1, pluggy-1.0.0\n\
        rootdir: /w\ncollected 2 items\n\n\
        test_calc.py ..                                                          [100%]\n\n\
        ============================== 2 passed in 0.01s ===============================\n";
    const PYTEST_FAILED: &str = "collected 3 items\n\n\
        test_calc.py .F.                                                         [100%]\n\n\
        =========================== short test summary info ============================\n\
        FAILED test_calc.py::test_add - assert 1 == 2\n\
        ========================= 1 failed, 2 passed in 0.05s ==========================\n";
    const PYTEST_NONE: &str = "============================= test session starts ==============================\n\
        collected 0 items\n\n\
        ============================ no tests ran in 0.00s =============================\n";
    const CARGO_OK: &str = "   Compiling calc v0.1.0 (/w)\n    Finished test [unoptimized] target(s)\n\
        \x20    Running unittests src/lib.rs (target/debug/deps/calc-1234)\n\n\
        running 2 tests\ntest tests::adds ... ok\ntest tests::subtracts ... ok\n\n\
        test result: ok. 2 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s\n\n\
        \x20  Doc-tests calc\n\nrunning 0 tests\n\n\
        test result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s\n";
    const CARGO_FAILED: &str = "running 2 tests\ntest tests::adds ... FAILED\ntest tests::subtracts ... ok\n\n\
        failures:\n\n---- tests::adds stdout ----\nthread 'tests::adds' panicked at src/lib.rs:9:9\n\n\
        test result: FAILED. 1 passed; 1 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s\n\n\
        error: test failed, to rerun pass `--lib`\n";
    const CARGO_ZERO: &str = "     Running unittests src/lib.rs (target/debug/deps/calc-1234)\n\n\
        running 0 tests\n\n\
        test result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; finished in 0.00s\n\n\
        \x20  Doc-tests calc\n\nrunning 0 tests\n\n\
        test result: ok. 0 passed; 0 failed; 0 ignored; 0 measured; 2 filtered out; finished in 0.00s\n";

    #[test]
    fn honest_runs_are_evidence() {
        for (code, output) in [
            (0, UNITTEST_OK_OUTPUT),
            (1, UNITTEST_FAILED_OUTPUT),
            (0, PYTEST_PASSED),
            (1, PYTEST_FAILED),
            (1, ".F\n1 failed, 1 passed, 2 warnings in 0.03s\n"),
            (0, "===== 3 passed, 1 xfailed in 12.31s (0:00:12) =====\n"),
            (0, CARGO_OK),
            (101, CARGO_FAILED),
        ] {
            assert_eq!(check(code, output), None, "{output}");
        }
    }

    #[test]
    fn zero_tests_are_no_evidence_whatever_the_exit_code() {
        for (code, output) in [
            (0, UNITTEST_ZERO),
            (
                0,
                "\n----------------------------------------------------------------------\nRan 0 tests in 0.000s\n\nOK\n",
            ),
            (5, PYTEST_NONE),
            (5, "\nno tests ran in 0.00s\n"),
            (5, "\n2 deselected in 0.01s\n"),
            (
                0,
                "ssss                                                                     [100%]\n4 skipped in 0.01s\n",
            ),
            (0, CARGO_ZERO),
        ] {
            let why = check(code, output).expect(output);
            assert!(why.contains("ran zero tests"), "{why}");
        }
    }

    #[test]
    fn a_green_summary_with_a_red_exit_contradicts_itself() {
        let pytest_quiet = "..                                                                       [100%]\n2 passed in 0.01s\n";
        for output in [UNITTEST_OK_OUTPUT, PYTEST_PASSED, pytest_quiet, CARGO_OK] {
            let why = check(1, output).expect(output);
            assert!(why.contains("but verify exited 1"), "{why}");
        }
    }

    #[test]
    fn a_failure_summary_with_a_green_exit_contradicts_itself() {
        for output in [UNITTEST_FAILED_OUTPUT, PYTEST_FAILED, CARGO_FAILED] {
            let why = check(0, output).expect(output);
            assert!(
                why.contains("reports failures, but verify exited 0"),
                "{why}"
            );
        }
    }

    #[test]
    fn output_without_a_runner_summary_is_left_alone() {
        assert_eq!(check(1, "test_add PASSED\nOK\nall good\n"), None);
        assert_eq!(check(0, ""), None);
        // "Ran 0 tests" inside a longer line is not unittest's summary.
        assert_eq!(check(0, "log: Ran 0 tests in 0s (skipped)\n"), None);
    }

    #[test]
    fn an_inner_test_run_in_captured_output_does_not_count() {
        // A passing test that runs pytest itself: `-rA` shows its captured output, inner summary
        // included; the outer summary comes last and is the one that counts.
        let output = "tests/test_x.py::test_runs_inner PASSED\n\
                      ---- Captured stdout call ----\n\
                      ===== 1 failed in 0.01s =====\n\
                      PASSED tests/test_x.py::test_runs_inner\n\
                      ===== 1 passed in 0.20s =====\n";
        assert_eq!(check(0, output), None);
        let unittest =
            "Ran 1 test in 0.001s\n\nFAILED (failures=1)\n.\n---\nRan 2 tests in 0.01s\n\nOK\n";
        assert_eq!(check(0, unittest), None);
    }

    #[test]
    fn a_timeout_is_not_judged() {
        let result = CommandResult {
            exit_code: None,
            timed_out: true,
            output: UNITTEST_ZERO.into(),
            ..CommandResult::default()
        };
        assert_eq!(contradiction(&result), None);
    }
}
