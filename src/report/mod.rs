//! Reports derived from a run directory alone: a per-agent summary in several formats.

use std::fmt::Write as _;

use serde::Serialize;
use tabled::settings::Style;
use tabled::{Table, Tabled};

use crate::store::{Outcome, StoredRun, TrialRecord};

mod ablation;
mod html;
mod junit;
pub use ablation::ablation;
pub use html::html;
pub use junit::junit;

/// Output formats of `deltabench report`.
pub const FORMATS: [&str; 6] = ["table", "markdown", "csv", "json", "junit", "html"];

/// One agent's results.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AgentSummary {
    pub agent: String,
    pub trials: usize,
    /// Scored trials (pass or fail).
    pub scored: usize,
    pub passed: usize,
    pub infra_errors: usize,
    /// passed / scored; None when nothing was scored.
    pub pass_rate: Option<f64>,
    /// 95% Wilson score interval of the pass rate.
    pub interval: Option<(f64, f64)>,
    pub median_duration_ms: Option<u64>,
}

/// The 95% Wilson score interval for `passed` out of `n`.
pub fn wilson_interval(passed: usize, n: usize) -> Option<(f64, f64)> {
    if n == 0 {
        return None;
    }
    let z = 1.959_963_984_540_054_f64;
    let n = n as f64;
    let p = passed as f64 / n;
    let denominator = 1.0 + z * z / n;
    let centre = (p + z * z / (2.0 * n)) / denominator;
    let half = z * ((p * (1.0 - p) / n) + z * z / (4.0 * n * n)).sqrt() / denominator;
    Some(((centre - half).max(0.0), (centre + half).min(1.0)))
}

fn median(mut values: Vec<u64>) -> Option<u64> {
    if values.is_empty() {
        return None;
    }
    values.sort_unstable();
    let mid = values.len() / 2;
    Some(if values.len().is_multiple_of(2) {
        (values[mid - 1] + values[mid]) / 2
    } else {
        values[mid]
    })
}

/// Per-agent summaries, agents in the order they first appear in `agents` then the records.
pub fn summarize(records: &[TrialRecord], agents: &[String]) -> Vec<AgentSummary> {
    let mut order: Vec<String> = agents.to_vec();
    for record in records {
        if !order.contains(&record.agent) {
            order.push(record.agent.clone());
        }
    }
    order
        .into_iter()
        .map(|agent| {
            let mine: Vec<&TrialRecord> = records.iter().filter(|r| r.agent == agent).collect();
            let scored = mine
                .iter()
                .filter(|r| r.outcome != Outcome::InfraError)
                .count();
            let passed = mine.iter().filter(|r| r.outcome == Outcome::Pass).count();
            AgentSummary {
                trials: mine.len(),
                scored,
                passed,
                infra_errors: mine.len() - scored,
                pass_rate: (scored > 0).then(|| passed as f64 / scored as f64),
                interval: wilson_interval(passed, scored),
                median_duration_ms: median(mine.iter().map(|r| r.duration_ms).collect()),
                agent,
            }
        })
        .collect()
}

fn percent(value: Option<f64>) -> String {
    value.map_or("-".into(), |v| format!("{:.1}%", v * 100.0))
}

fn interval_text(interval: Option<(f64, f64)>) -> String {
    interval.map_or("-".into(), |(lo, hi)| {
        format!("{:.1}-{:.1}%", lo * 100.0, hi * 100.0)
    })
}

fn seconds(ms: Option<u64>) -> String {
    ms.map_or("-".into(), |ms| format!("{:.2}s", ms as f64 / 1000.0))
}

#[derive(Tabled)]
struct Row {
    agent: String,
    trials: usize,
    passed: usize,
    #[tabled(rename = "pass rate")]
    pass_rate: String,
    #[tabled(rename = "95% CI")]
    interval: String,
    #[tabled(rename = "infra errors")]
    infra_errors: usize,
    #[tabled(rename = "median time")]
    median: String,
}

fn rows(summaries: &[AgentSummary]) -> Vec<Row> {
    summaries
        .iter()
        .map(|s| Row {
            agent: s.agent.clone(),
            trials: s.trials,
            passed: s.passed,
            pass_rate: percent(s.pass_rate),
            interval: interval_text(s.interval),
            infra_errors: s.infra_errors,
            median: seconds(s.median_duration_ms),
        })
        .collect()
}

/// The terminal summary table.
pub fn table(summaries: &[AgentSummary]) -> String {
    Table::new(rows(summaries))
        .with(Style::rounded())
        .to_string()
}

/// A markdown report fit for `$GITHUB_STEP_SUMMARY`.
pub fn markdown(run: &StoredRun, summaries: &[AgentSummary]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "## deltabench: {}\n", run.manifest.suite);
    let _ = writeln!(
        out,
        "{} trials, {} per task; deltabench {}\n",
        run.trials.len(),
        run.manifest.trials_per_task,
        run.manifest.deltabench_version
    );
    out.push_str(
        &Table::new(rows(summaries))
            .with(Style::markdown())
            .to_string(),
    );
    out.push('\n');
    let failures: Vec<&TrialRecord> = run
        .trials
        .iter()
        .filter(|r| r.outcome == Outcome::InfraError)
        .collect();
    if !failures.is_empty() {
        let _ = writeln!(out, "\n### Not scored (infrastructure errors)\n");
        for record in failures {
            let _ = writeln!(
                out,
                "- `{}` / `{}` #{}: {}",
                record.task,
                record.agent,
                record.trial,
                record.infra_error.as_deref().unwrap_or("unknown")
            );
        }
    }
    out
}

/// One CSV row per trial.
pub fn csv(records: &[TrialRecord]) -> Result<String, csv::Error> {
    let mut writer = csv::Writer::from_writer(Vec::new());
    writer.write_record([
        "task",
        "agent",
        "trial",
        "outcome",
        "passed",
        "score",
        "status",
        "error_code",
        "diff_files",
        "insertions",
        "deletions",
        "verify_exit_code",
        "verify_timed_out",
        "duration_ms",
        "input_tokens",
        "output_tokens",
        "cost_usd",
    ])?;
    let opt = |v: Option<String>| v.unwrap_or_default();
    for r in records {
        writer.write_record([
            r.task.clone(),
            r.agent.clone(),
            r.trial.to_string(),
            r.outcome.as_str().to_owned(),
            r.passed.to_string(),
            opt(r.score.map(|s| s.to_string())),
            opt(r.status.map(|s| s.as_str().to_owned())),
            opt(r.error.as_ref().map(|e| e.code.as_str().to_owned())),
            opt(r.diff.map(|d| d.files.to_string())),
            opt(r.diff.map(|d| d.insertions.to_string())),
            opt(r.diff.map(|d| d.deletions.to_string())),
            opt(r.verify.and_then(|v| v.exit_code).map(|c| c.to_string())),
            opt(r.verify.map(|v| v.timed_out.to_string())),
            r.duration_ms.to_string(),
            opt(r.usage.map(|u| u.input_tokens.to_string())),
            opt(r.usage.map(|u| u.output_tokens.to_string())),
            opt(r.usage.and_then(|u| u.cost_usd).map(|c| c.to_string())),
        ])?;
    }
    let bytes = writer.into_inner().map_err(|e| e.into_error())?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// A JSON summary.
pub fn json(run: &StoredRun, summaries: &[AgentSummary]) -> String {
    let value = serde_json::json!({
        "suite": run.manifest.suite,
        "suite_digest": run.manifest.suite_digest,
        "trials": run.trials.len(),
        "planned_trials": run.manifest.planned_trials,
        "interrupted": run.manifest.interrupted,
        "agents": summaries,
    });
    serde_json::to_string_pretty(&value).unwrap_or_default() + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wilson_matches_hand_computed_values() {
        // 3 of 6: centre 0.5, half-width 1.96*sqrt(0.25/6 + 1.96^2/144)/(1 + 1.96^2/6).
        let (lo, hi) = wilson_interval(3, 6).unwrap();
        assert!((lo - 0.1876).abs() < 1e-3, "{lo}");
        assert!((hi - 0.8124).abs() < 1e-3, "{hi}");
        let (lo, hi) = wilson_interval(6, 6).unwrap();
        assert!((lo - 0.6097).abs() < 1e-3, "{lo}");
        assert_eq!(hi, 1.0);
        let (lo, hi) = wilson_interval(0, 6).unwrap();
        assert!(lo.abs() < 1e-12, "{lo}");
        assert!((hi - 0.3903).abs() < 1e-3, "{hi}");
        assert_eq!(wilson_interval(0, 0), None);
    }

    #[test]
    fn median_of_even_and_odd() {
        assert_eq!(median(vec![3, 1, 2]), Some(2));
        assert_eq!(median(vec![4, 1, 3, 2]), Some(2));
        assert_eq!(median(vec![]), None);
    }
}
