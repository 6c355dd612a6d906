//! `report --format junit`: JUnit XML for CI test tabs, from the run directory alone.
//!
//! One `<testsuite>` per agent, one `<testcase>` per trial (`<task> #<trial>`, classname the
//! agent). A `fail` carries the tail of that trial's `verify.log` as its failure text; an
//! `infra_error` becomes an `<error>`. The XML is written by quick-junit (nextest's serializer),
//! which escapes markup and drops ANSI escapes and control characters.
//!
//! The helpers that read a trial's artifacts live here and are shared with the HTML report.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use chrono::DateTime;
use quick_junit::{
    NonSuccessKind, Property, Report, SerializeError, TestCase, TestCaseStatus, TestSuite,
};

use super::AgentSummary;
use crate::store::{Outcome, StoredRun, TrialRecord, layout};

/// Lines of `verify.log` a failure shows: enough for a traceback, short enough for a CI tab.
pub(super) const LOG_TAIL_LINES: usize = 40;

/// A log line longer than this is cut, so one runaway line cannot swamp the report.
const MAX_LINE_CHARS: usize = 2_000;

/// The JUnit XML of a run, agents in the order of `summaries`.
pub(crate) fn junit(run: &StoredRun, summaries: &[AgentSummary]) -> Result<String, SerializeError> {
    let mut report = Report::new(xml_safe(&run.manifest.suite));
    if let Some(started) = parse_time(&run.manifest.started_at) {
        report.set_timestamp(started);
        if let Some(finished) = run.manifest.finished_at.as_deref().and_then(parse_time) {
            report.set_time((finished - started).to_std().unwrap_or_default());
        }
    }
    let flaky = super::flaky_tasks(run);
    for summary in summaries {
        let mut trials: Vec<&TrialRecord> = run
            .trials
            .iter()
            .filter(|r| r.agent == summary.agent)
            .collect();
        // trials.jsonl is in finishing order; CI tabs read better in plan order.
        trials.sort_by_key(|r| (task_position(run, &r.task), r.task.as_str(), r.trial));
        let mut suite = TestSuite::new(xml_safe(&summary.agent));
        suite.set_time(Duration::from_millis(
            trials.iter().map(|r| r.duration_ms).sum(),
        ));
        suite.add_test_cases(trials.into_iter().map(|r| {
            let mut case = test_case(run, r);
            // No validated evidence: a pass there had no evidence or mutation check.
            if r.unvalidated {
                case.add_property(Property::new(
                    "unvalidated",
                    "no evidence in the suite's lock",
                ));
            }
            // A flaky task's trial says as much about the task as the agent: marked for CI.
            if let Some(f) = flaky.get(&r.task) {
                case.add_property(Property::new(
                    "flaky_task",
                    format!("reference passed {} of {}", f.passed, f.runs),
                ));
            }
            case
        }));
        report.add_test_suite(suite);
    }
    report.to_string()
}

fn test_case(run: &StoredRun, record: &TrialRecord) -> TestCase {
    let status = match record.outcome {
        Outcome::Pass => TestCaseStatus::success(),
        Outcome::Fail => {
            let mut status = TestCaseStatus::non_success(NonSuccessKind::Failure);
            let text = verify_log_tail(run, record).unwrap_or_else(|why| why.to_string());
            status
                .set_message(xml_safe(&failure_message(record)))
                .set_type("fail")
                .set_description(xml_safe(&text));
            status
        }
        Outcome::Invalid => {
            // A failure, not an error: the trial counts as not passed.
            let why = record
                .invalid
                .as_deref()
                .unwrap_or("the verify output is not evidence");
            let mut status = TestCaseStatus::non_success(NonSuccessKind::Failure);
            status
                .set_message(xml_safe(&format!("invalid: {why}")))
                .set_type("invalid")
                .set_description(xml_safe(
                    &verify_log_tail(run, record).unwrap_or_else(|why| why.to_string()),
                ));
            status
        }
        Outcome::InfraError => {
            let why = record.infra_error.as_deref().unwrap_or("unknown");
            let mut status = TestCaseStatus::non_success(NonSuccessKind::Error);
            status
                .set_message(xml_safe(why.lines().next().unwrap_or(why)))
                .set_type("infra_error")
                .set_description(xml_safe(why));
            status
        }
    };
    let mut case = TestCase::new(
        xml_safe(&format!("{} #{}", record.task, record.trial)),
        status,
    );
    case.set_classname(xml_safe(&record.agent))
        .set_time(Duration::from_millis(record.duration_ms));
    if let Some(started) = parse_time(&record.started_at) {
        case.set_timestamp(started);
    }
    case
}

/// One line saying why a scored trial failed: the verify result, an empty diff, the agent's end.
fn failure_message(record: &TrialRecord) -> String {
    let mut message = String::from("fail: ");
    match &record.verify {
        Some(v) if v.timed_out => {
            let _ = write!(
                message,
                "verify timed out after {:.1}s",
                v.duration_ms as f64 / 1000.0
            );
        }
        Some(v) => match v.exit_code {
            Some(code) => {
                let _ = write!(message, "verify exited {code}");
            }
            None => message.push_str("verify ended without an exit code"),
        },
        None => message.push_str("verify did not run"),
    }
    if record.diff.is_some_and(|d| d.files == 0) {
        message.push_str("; empty diff");
    }
    if let Some(mark) = crate::report::evidence_marks(record) {
        let _ = write!(message, "; {mark}");
    }
    if !record.tampered.is_empty() {
        let _ = write!(message, "; tampered with {}", record.tampered.join(", "));
    }
    if !record.flags.is_empty() {
        let _ = write!(message, "; flagged: {}", record.flags.join(", "));
    }
    if let Some(status) = record.status {
        let _ = write!(message, "; agent {status}");
    }
    if let Some(error) = &record.error {
        let _ = write!(message, ": {error}");
    }
    message
}

/// The run-relative path of one of a trial's files, for notes that must not leak the machine.
pub(super) fn relative(run: &StoredRun, path: &Path) -> String {
    path.strip_prefix(&run.path)
        .unwrap_or(path)
        .display()
        .to_string()
}

/// Why a trial's `verify.log` is not shown: a note in its place, naming it run-relative.
#[derive(Debug, thiserror::Error)]
pub(super) enum LogUnreadable {
    #[error("({path} is missing)")]
    Missing {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("(cannot read {path}: {source})")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// The last `LOG_TAIL_LINES` lines of the trial's `verify.log`, or why not.
pub(super) fn verify_log_tail(
    run: &StoredRun,
    record: &TrialRecord,
) -> Result<String, LogUnreadable> {
    let path = layout::record_path(&run.path, record).join(layout::VERIFY_LOG);
    let bytes = std::fs::read(&path).map_err(|source| {
        let path = relative(run, &path);
        match source.kind() {
            std::io::ErrorKind::NotFound => LogUnreadable::Missing { path, source },
            _ => LogUnreadable::Read { path, source },
        }
    })?;
    let text = String::from_utf8_lossy(&bytes);
    let lines: Vec<&str> = text.lines().collect();
    let skipped = lines.len().saturating_sub(LOG_TAIL_LINES);
    let mut tail = String::new();
    if skipped > 0 {
        let _ = writeln!(
            tail,
            "[... {skipped} earlier lines of verify.log not shown]"
        );
    }
    for line in &lines[skipped..] {
        match line.char_indices().nth(MAX_LINE_CHARS) {
            Some((cut, _)) => {
                let _ = writeln!(tail, "{} [... line cut]", &line[..cut]);
            }
            None => {
                let _ = writeln!(tail, "{line}");
            }
        }
    }
    Ok(tail)
}

/// Drops the two characters XML 1.0 forbids that quick-junit keeps (it strips C0 controls).
fn xml_safe(text: &str) -> String {
    text.replace(['\u{FFFE}', '\u{FFFF}'], "")
}

fn parse_time(text: &str) -> Option<DateTime<chrono::FixedOffset>> {
    DateTime::parse_from_rfc3339(text).ok()
}

/// A task's index in the manifest; tasks it does not list sort last.
pub(super) fn task_position(run: &StoredRun, task: &str) -> usize {
    run.manifest
        .tasks
        .iter()
        .position(|t| t == task)
        .unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::VerifyRecord;

    /// A failed record; built from JSON so fields added to `TrialRecord` later keep defaults.
    fn record(verify: Option<VerifyRecord>) -> TrialRecord {
        serde_json::from_value(serde_json::json!({
            "task": "t", "agent": "a", "trial": 1, "outcome": "fail", "passed": false,
            "score": 0.0, "metric": "delta", "status": "completed", "error": null,
            "infra_error": null, "session_id": null, "diff": null, "verify": verify,
            "usage": null, "duration_ms": 1, "agent_duration_ms": null, "phases": [],
            "started_at": "",
        }))
        .unwrap()
    }

    #[test]
    fn failure_message_says_exit_code_or_timeout() {
        let exited = VerifyRecord {
            exit_code: Some(3),
            timed_out: false,
            duration_ms: 10,
            reward: None,
        };
        assert_eq!(
            failure_message(&record(Some(exited))),
            "fail: verify exited 3; agent completed"
        );
        let timed_out = VerifyRecord {
            exit_code: None,
            timed_out: true,
            duration_ms: 2500,
            reward: None,
        };
        assert_eq!(
            failure_message(&record(Some(timed_out))),
            "fail: verify timed out after 2.5s; agent completed"
        );
    }

    #[test]
    fn xml_safe_drops_noncharacters() {
        assert_eq!(xml_safe("a\u{FFFE}b\u{FFFF}c"), "abc");
    }
}
