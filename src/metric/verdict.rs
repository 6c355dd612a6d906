//! The one place a trial's verdict is decided: from the delta, the metric's score, the tamper
//! check and the evidence `validate` recorded, to a [`Verdict`]. Pure: no I/O.

use serde::{Deserialize, Serialize};

use super::Score;
use super::evidence::{TestEvidence, contradiction, failures_shown, unclean_exit};
use crate::delta::EnvironmentDelta;

/// A trial's verdict, as its record's `outcome` writes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Judgement {
    /// The metric passed it, and its verify run is evidence.
    Pass,
    /// Not passed: the metric failed it, or its diff touched protected paths.
    Fail,
    /// The verify run is no evidence: zero tests, a contradiction, a fake summary.
    Invalid,
}

/// What [`verdict`] decides of a scored trial.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// What the record's `outcome` says.
    pub judgement: Judgement,
    /// The metric's score when the metric decided; 0.0 when invalid, rejected or tampered.
    pub score: f64,
    /// Why the trial did not pass, in words a user reads in the progress line and the record.
    pub reason: Option<String>,
}

impl Verdict {
    fn not_passed(judgement: Judgement, reason: String) -> Self {
        Self {
            judgement,
            score: 0.0,
            reason: Some(reason),
        }
    }

    /// Whether the judgement is [`Judgement::Pass`].
    pub fn passed(&self) -> bool {
        self.judgement == Judgement::Pass
    }
}

/// The facts a verdict is decided from.
pub struct VerdictInput<'a> {
    /// The trial's delta, its verify result included.
    pub delta: &'a EnvironmentDelta,
    /// What the trial's metric made of the delta.
    pub score: Score,
    /// Protected paths the diff touched: the trial fails under every metric (a grader's
    /// verdict on a tampered verifier says nothing).
    pub tampered: &'a [String],
    /// What the reference solution's verify run showed when the suite was validated.
    pub expected: Option<&'a TestEvidence>,
}

/// The verdict on a trial: a delta the probe rejected or a tampered diff fails it; a verify run
/// that contradicts itself, shows unexpected failures, misses the expected tests, or leaves a
/// mutant alive is invalid; else the metric's pass rule decides.
pub fn verdict(input: VerdictInput<'_>) -> Verdict {
    let result = &input.delta.command_result;
    if let Some(why) = &input.delta.rejected {
        return Verdict::not_passed(Judgement::Fail, why.clone());
    }
    if !input.tampered.is_empty() {
        return Verdict::not_passed(
            Judgement::Fail,
            format!("tampered: {}", input.tampered.join(", ")),
        );
    }
    if let Some(why) = contradiction(result).or_else(|| unclean_exit(result)) {
        return Verdict::not_passed(Judgement::Invalid, why);
    }
    if input.score.passed
        && let Some(why) = failures_shown(result, input.expected)
    {
        return Verdict::not_passed(Judgement::Invalid, why);
    }
    if input.score.passed
        && let Some(why) = input
            .expected
            .and_then(|expected| expected.unmet_by(result))
    {
        return Verdict::not_passed(Judgement::Invalid, why);
    }
    if input.score.passed
        && let Some(why) = input
            .delta
            .mutation
            .as_ref()
            .and_then(|report| report.survivor_reason())
    {
        return Verdict::not_passed(Judgement::Invalid, why);
    }
    if input.score.passed {
        return Verdict {
            judgement: Judgement::Pass,
            score: input.score.score,
            reason: None,
        };
    }
    let why = if let Some(note) = &input.score.note {
        note.clone()
    } else if result.timed_out {
        format!("verify timed out after {} ms", result.duration_ms)
    } else if result.succeeded() && input.delta.is_unchanged() {
        "the diff is empty".to_owned()
    } else {
        match result.exit_code {
            Some(0) => "the metric did not pass it".to_owned(),
            Some(code) => format!("verify exited {code}"),
            None => "verify was killed by a signal".to_owned(),
        }
    };
    Verdict {
        judgement: Judgement::Fail,
        score: input.score.score,
        reason: Some(why),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::delta::{CommandResult, TestReport};

    fn delta(exit_code: i32, output: &str) -> EnvironmentDelta {
        EnvironmentDelta {
            diff: "+x\n".into(),
            command_result: CommandResult {
                exit_code: Some(exit_code),
                output: output.into(),
                ..CommandResult::default()
            },
            ..EnvironmentDelta::default()
        }
    }

    fn judge(delta: &EnvironmentDelta, expected: Option<&TestEvidence>) -> Verdict {
        verdict(VerdictInput {
            delta,
            score: Score::from_passed(delta.command_result.succeeded()),
            tampered: &[],
            expected,
        })
    }

    const RAN_2: &str = "..\n----\nRan 2 tests in 0.001s\n\nOK\n";

    #[test]
    fn rejected_and_tampered_fail_with_the_reason() {
        let mut rejected = delta(0, RAN_2);
        rejected.rejected = Some("too big".into());
        assert_eq!(judge(&rejected, None).reason.as_deref(), Some("too big"));
        let tampered = verdict(VerdictInput {
            delta: &delta(0, RAN_2),
            score: Score::from_passed(true),
            tampered: &["conftest.py".into()],
            expected: None,
        });
        assert_eq!(tampered.judgement, Judgement::Fail);
        assert_eq!(tampered.reason.as_deref(), Some("tampered: conftest.py"));
    }

    #[test]
    fn a_fake_summary_without_the_hooked_tests_is_invalid() {
        let expected = TestEvidence {
            runners: vec!["unittest".into()],
            ran: 2,
            passed: 2,
            names: vec!["t.T.test_a".into(), "t.T.test_b".into()],
            ..TestEvidence::default()
        };
        // The agent's code printed the summary and called os._exit(0): the hook saw no test.
        let mut fake = delta(0, RAN_2);
        fake.command_result.tests = Some(TestReport {
            interpreters: 1,
            unclean_exits: 1,
            ..TestReport::default()
        });
        let v = judge(&fake, Some(&expected));
        assert_eq!(v.judgement, Judgement::Invalid);
        assert!(v.reason.unwrap().contains("without a normal exit"));
        fake.command_result.tests = Some(TestReport {
            interpreters: 1,
            ..TestReport::default()
        });
        let v = judge(&fake, Some(&expected));
        assert_eq!(v.judgement, Judgement::Invalid);
        assert!(
            v.reason
                .unwrap()
                .contains("did not pass here: t.T.test_a, t.T.test_b")
        );
        // The real run.
        let mut real = delta(0, RAN_2);
        real.command_result.tests = Some(TestReport {
            interpreters: 1,
            runners: ["unittest".to_owned()].into(),
            passed: ["t.T.test_a".to_owned(), "t.T.test_b".to_owned()].into(),
            ..TestReport::default()
        });
        assert_eq!(judge(&real, Some(&expected)).judgement, Judgement::Pass);
    }

    #[test]
    fn fewer_tests_than_validated_is_invalid() {
        let expected = TestEvidence {
            runners: vec!["pytest".into()],
            ran: 3,
            passed: 3,
            ..TestEvidence::default()
        };
        let v = judge(&delta(0, "1 passed in 0.01s\n"), Some(&expected));
        assert_eq!(v.judgement, Judgement::Invalid);
        assert!(
            v.reason
                .unwrap()
                .starts_with("fewer tests than validated: 1 ran")
        );
        let v = judge(&delta(0, "all good\n"), Some(&expected));
        assert!(
            v.reason
                .unwrap()
                .starts_with("no test runner reported a result")
        );
        assert_eq!(
            judge(&delta(0, "all good\n"), None).judgement,
            Judgement::Pass
        );
    }

    #[test]
    fn a_pass_that_reports_a_failure_is_invalid_unless_the_reference_failed_it_too() {
        let mut forged = delta(0, "test tests.test_x.C.test_y ... FAILED\n");
        forged.command_result.tests = Some(TestReport {
            interpreters: 1,
            runners: ["unittest".to_owned()].into(),
            passed: ["tests.test_x.C.test_y".to_owned()].into(),
            failed: ["tests/test_x.py::C::test_y[x]".to_owned()].into(),
            ..TestReport::default()
        });
        let v = judge(&forged, None);
        assert_eq!(v.judgement, Judgement::Invalid);
        assert!(
            v.reason
                .unwrap()
                .contains("reports failed tests while it passed")
        );
        let expected = TestEvidence {
            runners: vec!["unittest".into()],
            ran: 1,
            passed: 1,
            names: vec!["tests.test_x.C.test_y".into()],
            failed: vec!["tests/test_x.py::C::test_y[x]".into()],
            ..TestEvidence::default()
        };
        assert_eq!(
            judge(&forged, Some(&expected)).judgement,
            Judgement::Invalid
        );
        forged.command_result.output.clear();
        assert_eq!(
            judge(&forged, Some(&expected)).judgement,
            Judgement::Pass,
            "a failure the reference showed too stays allowed"
        );
    }

    #[test]
    fn a_failure_says_why() {
        assert_eq!(
            judge(&delta(1, ""), None).reason.as_deref(),
            Some("verify exited 1")
        );
    }
}
