//! Metrics: a verdict computed from the [`EnvironmentDelta`] alone.
//!
//! A metric's input has no field for the agent's summary, so no metric, custom ones included,
//! can score what the agent says about its own work.

mod evidence;
mod settle;
mod verdict;

use std::path::PathBuf;
use std::time::Duration;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::delta::EnvironmentDelta;
use crate::process::{self, CommandSpec};

pub use evidence::{TestEvidence, contradiction, failed_tests, unclean_exit};
pub use settle::{
    INTERRUPTED, Reached, Settled, TrialFacts, UnscoredCause, settle, unrunnable, verify_program,
};
pub use verdict::{Judgement, Verdict, VerdictInput, verdict};

/// Tokens whose presence in the verify output fails `delta-token`.
pub const FAILURE_TOKENS: [&str; 6] = [
    "FAILED",
    "FAIL:",
    "ERROR:",
    "Traceback",
    "panicked",
    "error:",
];

/// A verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Score {
    /// The metric's pass rule held.
    pub passed: bool,
    /// The metric's number: 1.0 or 0.0 from a pass rule alone, else the metric's own (a
    /// grader's `score`).
    pub score: f64,
    /// Why the metric failed the trial without a verdict of its own (a grader that crashed on
    /// what it read): the trial's reason.
    #[serde(skip)]
    pub note: Option<String>,
}

impl Score {
    /// 1.0 when passed, else 0.0, with no note.
    pub fn from_passed(passed: bool) -> Self {
        Self {
            passed,
            score: if passed { 1.0 } else { 0.0 },
            note: None,
        }
    }

    /// A fail the metric could not decide otherwise, and why.
    pub fn failed_because(note: String) -> Self {
        Self {
            note: Some(note),
            ..Self::from_passed(false)
        }
    }
}

/// The metric could not run at all (a grader that cannot start): the trial cannot be scored.
#[derive(Debug, thiserror::Error)]
#[error("metric '{metric}': {message}")]
pub struct MetricError {
    /// The metric's name (a grader's command).
    pub metric: String,
    /// What went wrong, e.g. that the grader cannot start.
    pub message: String,
}

/// Scores a delta.
pub trait Metric: Send + Sync {
    /// The name records and reports show (a grader's command).
    fn name(&self) -> &str;
    /// Scores the trial's delta; an error leaves the trial unscored.
    fn score<'a>(
        &'a self,
        delta: &'a EnvironmentDelta,
    ) -> BoxFuture<'a, Result<Score, MetricError>>;
}

/// The default: the diff is non-empty AND the verify command exited 0 within its timeout.
#[derive(Debug, Clone, Copy, Default)]
pub struct DeltaMetric;

impl Metric for DeltaMetric {
    fn name(&self) -> &str {
        "delta"
    }

    fn score<'a>(
        &'a self,
        delta: &'a EnvironmentDelta,
    ) -> BoxFuture<'a, Result<Score, MetricError>> {
        let passed = !delta.is_unchanged() && delta.command_result.succeeded();
        Box::pin(async move { Ok(Score::from_passed(passed)) })
    }
}

/// The agent kit's default rule: the diff is non-empty AND the output carries no failure token.
#[derive(Debug, Clone, Copy, Default)]
pub struct DeltaTokenMetric;

impl Metric for DeltaTokenMetric {
    fn name(&self) -> &str {
        "delta-token"
    }

    fn score<'a>(
        &'a self,
        delta: &'a EnvironmentDelta,
    ) -> BoxFuture<'a, Result<Score, MetricError>> {
        let output = &delta.command_result.output;
        let clean = !FAILURE_TOKENS.iter().any(|token| output.contains(token));
        let passed = !delta.is_unchanged() && clean;
        Box::pin(async move { Ok(Score::from_passed(passed)) })
    }
}

/// Passed when the verify command exited 0 within its timeout; ignores the diff.
#[derive(Debug, Clone, Copy, Default)]
pub struct ExitCodeMetric;

impl Metric for ExitCodeMetric {
    fn name(&self) -> &str {
        "exit-code"
    }

    fn score<'a>(
        &'a self,
        delta: &'a EnvironmentDelta,
    ) -> BoxFuture<'a, Result<Score, MetricError>> {
        let passed = delta.command_result.succeeded();
        Box::pin(async move { Ok(Score::from_passed(passed)) })
    }
}

type Predicate = Box<dyn Fn(&EnvironmentDelta) -> bool + Send + Sync>;
type Scorer = Box<dyn Fn(&EnvironmentDelta) -> f64 + Send + Sync>;

/// A metric built in code: a name, a pass rule, and optionally a numeric score.
pub struct CustomMetric {
    name: String,
    passed: Predicate,
    score: Option<Scorer>,
}

impl CustomMetric {
    /// A metric named `name` that passes a delta when `passed` holds.
    pub fn new(
        name: impl Into<String>,
        passed: impl Fn(&EnvironmentDelta) -> bool + Send + Sync + 'static,
    ) -> Self {
        Self {
            name: name.into(),
            passed: Box::new(passed),
            score: None,
        }
    }

    /// Without one, the score is 1.0 when passed, else 0.0.
    pub fn with_score(
        mut self,
        score: impl Fn(&EnvironmentDelta) -> f64 + Send + Sync + 'static,
    ) -> Self {
        self.score = Some(Box::new(score));
        self
    }
}

impl Metric for CustomMetric {
    fn name(&self) -> &str {
        &self.name
    }

    fn score<'a>(
        &'a self,
        delta: &'a EnvironmentDelta,
    ) -> BoxFuture<'a, Result<Score, MetricError>> {
        let passed = (self.passed)(delta);
        let score = self
            .score
            .as_ref()
            .map_or(Score::from_passed(passed).score, |f| f(delta));
        Box::pin(async move {
            Ok(Score {
                passed,
                score,
                note: None,
            })
        })
    }
}

/// The grader's output (its explanation and verdict, stdout and stderr) in the trial folder.
pub const GRADER_LOG: &str = "grader.log";

/// An external grader: a shell command that reads `{"diff", "command_result"}` as JSON on stdin
/// and prints `{"passed": bool, "score": number}` (the last JSON line of its output counts).
///
/// A grader that starts but gives no verdict (it exits non-zero, times out or prints no verdict
/// line) fails the trial, with why: what it reads is the agent's work, so an agent could
/// otherwise crash the grader to turn a fail into an unscored trial, which leaves the pass rate.
/// A grader broken for every input fails the reference solution too, which `validate` reports.
/// Only a grader that cannot be started leaves the trial unscored.
///
/// `command_result.output` keeps only the head and tail of a long verify output; when the full
/// log was written (`verify_log`), the grader finds its path in `$DELTABENCH_VERIFY_LOG`.
/// Everything the grader prints is kept in `log` (the trial's `grader.log`), so why it decided
/// stays readable after the run.
#[derive(Debug, Clone)]
pub struct GraderMetric {
    /// The shell command run.
    pub command: String,
    /// The grader's working directory (the runner gives the suite file's folder).
    pub cwd: PathBuf,
    /// How long it may run before it is killed and the trial fails.
    pub timeout: Duration,
    /// The full verify log, given as `$DELTABENCH_VERIFY_LOG` when the file exists.
    pub verify_log: Option<PathBuf>,
    /// Where the grader's output is written; `None` keeps it nowhere.
    pub log: Option<PathBuf>,
}

impl Metric for GraderMetric {
    fn name(&self) -> &str {
        &self.command
    }

    fn score<'a>(
        &'a self,
        delta: &'a EnvironmentDelta,
    ) -> BoxFuture<'a, Result<Score, MetricError>> {
        Box::pin(async move {
            let fail = |message: String| MetricError {
                metric: self.command.clone(),
                message,
            };
            let input = serde_json::to_vec(delta).map_err(|e| fail(e.to_string()))?;
            let mut spec = CommandSpec::shell(&self.command, &self.cwd)
                .timeout(Some(self.timeout))
                .stdin(input)
                .log_path(self.log.clone());
            if let Some(log) = self.verify_log.as_ref().filter(|log| log.is_file()) {
                spec = spec.env("DELTABENCH_VERIFY_LOG", log);
            }
            let ended = process::run(&spec, &CancellationToken::new())
                .await
                .map_err(|e| fail(format!("cannot start the grader: {e}")))?;
            let output = ended.output.text();
            let tail = || last_line(&output);
            if ended.timed_out {
                return Ok(Score::failed_because(format!(
                    "the grader gave no verdict: it timed out after {}",
                    humantime::format_duration(self.timeout)
                )));
            }
            if ended.exit_code != Some(0) {
                let how = match ended.exit_code {
                    Some(code) => format!("exited with {code}"),
                    None => "was killed by a signal".to_owned(),
                };
                return Ok(Score::failed_because(format!(
                    "the grader gave no verdict: it {how}{}",
                    tail()
                )));
            }
            Ok(output
                .lines()
                .rev()
                .find_map(|line| serde_json::from_str::<Score>(line.trim()).ok())
                .unwrap_or_else(|| {
                    Score::failed_because(format!(
                        "the grader gave no verdict: it printed no {{\"passed\": bool, \"score\": number}} line{}",
                        tail()
                    ))
                }))
        })
    }
}

/// `: LINE`, the last line of what a grader printed (its error, usually), at most 300 bytes.
fn last_line(output: &str) -> String {
    match output.lines().rev().map(str::trim).find(|l| !l.is_empty()) {
        Some(line) => {
            let mut end = line.len().min(300);
            while !line.is_char_boundary(end) {
                end -= 1;
            }
            format!(": {}", &line[..end])
        }
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::delta::CommandResult;

    fn delta(diff: &str, exit_code: i32, output: &str) -> EnvironmentDelta {
        EnvironmentDelta {
            diff: diff.into(),
            command_result: CommandResult {
                command: "t".into(),
                exit_code: Some(exit_code),
                output: output.into(),
                ..CommandResult::default()
            },
            ..EnvironmentDelta::default()
        }
    }

    fn verdict(metric: &dyn Metric, delta: &EnvironmentDelta) -> bool {
        futures::executor::block_on(metric.score(delta))
            .unwrap()
            .passed
    }

    #[test]
    fn delta_needs_a_diff_and_a_green_verify() {
        assert!(verdict(&DeltaMetric, &delta("+x", 0, "")));
        assert!(!verdict(&DeltaMetric, &delta("", 0, "ok")));
        assert!(!verdict(&DeltaMetric, &delta("+x", 1, "")));
        let mut timed_out = delta("+x", 0, "");
        timed_out.command_result.timed_out = true;
        assert!(!verdict(&DeltaMetric, &timed_out));
    }

    #[test]
    fn delta_token_looks_for_failure_tokens_only() {
        assert!(verdict(&DeltaTokenMetric, &delta("+x", 1, "all good")));
        assert!(!verdict(
            &DeltaTokenMetric,
            &delta("+x", 0, "FAILED (failures=1)")
        ));
        assert!(!verdict(&DeltaTokenMetric, &delta("", 0, "ok")));
    }

    #[test]
    fn exit_code_ignores_the_diff() {
        assert!(verdict(&ExitCodeMetric, &delta("", 0, "")));
        assert!(!verdict(&ExitCodeMetric, &delta("+x", 2, "")));
    }

    #[test]
    fn custom_metric_scores_with_its_own_rule() {
        let strict = CustomMetric::new("green-tests-only", |d| {
            !d.diff.trim().is_empty() && d.command_result.output.contains("0 failed")
        })
        .with_score(|d| d.diff.len() as f64);
        let scored =
            futures::executor::block_on(strict.score(&delta("+abc", 0, "3 passed, 0 failed")))
                .unwrap();
        assert_eq!(
            scored,
            Score {
                passed: true,
                score: 4.0,
                note: None,
            }
        );
        assert_eq!(strict.name(), "green-tests-only");
    }
}
