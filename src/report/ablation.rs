//! `report --ablation`: what each factor of a `matrix:` did to pass rate, cost and time.
//!
//! For every matrix base in the run: each factor's levels with their pooled pass rate (over the
//! other factors' levels), the difference against the first level with an interval, mean cost
//! and median time; the two-factor interaction table when there are exactly two factors; and the
//! Pareto front of pass rate (higher), cost and time (lower) over the combinations.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use indexmap::IndexMap;

use crate::stats::{self, TaskOutcome};
use crate::store::{Outcome, StoredRun, TrialRecord};
use crate::suite::AgentVariant;

/// Per-task outcomes of the scored records that `keep` selects.
fn outcomes_where(
    records: &[TrialRecord],
    keep: impl Fn(&TrialRecord) -> bool,
) -> Vec<TaskOutcome> {
    let mut by_task: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
    for record in records
        .iter()
        .filter(|r| r.outcome != Outcome::InfraError && keep(r))
    {
        let entry = by_task.entry(&record.task).or_default();
        entry.1 += 1;
        if record.passed {
            entry.0 += 1;
        }
    }
    by_task
        .into_iter()
        .map(|(task, (passed, trials))| TaskOutcome {
            task: task.to_owned(),
            passed,
            trials,
        })
        .collect()
}

/// Mean cost in USD over the records that report one, and the median duration.
fn cost_and_time<'a>(records: impl Iterator<Item = &'a TrialRecord>) -> (Option<f64>, Option<u64>) {
    let mut costs = Vec::new();
    let mut times = Vec::new();
    for record in records {
        if let Some(cost) = record.usage.and_then(|u| u.cost_usd) {
            costs.push(cost);
        }
        times.push(record.duration_ms);
    }
    times.sort_unstable();
    let mean = (!costs.is_empty()).then(|| costs.iter().sum::<f64>() / costs.len() as f64);
    (mean, times.get(times.len() / 2).copied())
}

fn pct(v: f64) -> String {
    format!("{:.1}%", v * 100.0)
}

fn points(v: f64) -> String {
    format!("{:+.1}", v * 100.0)
}

fn cost_text(cost: Option<f64>) -> String {
    cost.map_or("-".into(), |c| format!("${c:.4}"))
}

fn time_text(ms: Option<u64>) -> String {
    ms.map_or("-".into(), |ms| format!("{:.2}s", ms as f64 / 1000.0))
}

/// The ablation report of `run`, or a sentence saying it has no matrix.
pub fn ablation(run: &StoredRun, confidence: f64) -> String {
    let mut bases: IndexMap<&str, Vec<(&String, &AgentVariant)>> = IndexMap::new();
    for (agent, variant) in &run.manifest.variants {
        bases
            .entry(variant.base.as_str())
            .or_default()
            .push((agent, variant));
    }
    if bases.is_empty() {
        return "this run has no ablation: no agent of it was expanded from a `matrix:`\n".into();
    }
    let mut out = String::new();
    for (base, variants) in bases {
        let agents: Vec<&str> = variants.iter().map(|(a, _)| a.as_str()).collect();
        let trials = run
            .trials
            .iter()
            .filter(|r| agents.contains(&r.agent.as_str()))
            .count();
        let _ = writeln!(
            out,
            "Ablation of {base}: {} combinations, {trials} trials\n",
            agents.len()
        );
        let factors: Vec<&String> = variants[0].1.factors.keys().collect();
        main_effects(&mut out, run, &variants, &factors, confidence);
        if let [first, second] = factors[..] {
            interaction(&mut out, run, &variants, first, second);
        }
        pareto(&mut out, run, &agents, confidence);
    }
    out
}

fn main_effects(
    out: &mut String,
    run: &StoredRun,
    variants: &[(&String, &AgentVariant)],
    factors: &[&String],
    confidence: f64,
) {
    let _ = writeln!(
        out,
        "{:<28} {:<12} {:>9} {:>15} {:>22} {:>10} {:>8}",
        "factor", "level", "pass rate", "CI", "effect vs first (pts)", "mean cost", "time"
    );
    for factor in factors {
        let mut levels: Vec<&String> = Vec::new();
        for (_, variant) in variants {
            let level = &variant.factors[*factor];
            if !levels.contains(&level) {
                levels.push(level);
            }
        }
        let mut first: Option<stats::RateEstimate> = None;
        for (i, level) in levels.iter().enumerate() {
            let agents: Vec<&str> = variants
                .iter()
                .filter(|(_, v)| &v.factors[*factor] == *level)
                .map(|(a, _)| a.as_str())
                .collect();
            let mine = |r: &TrialRecord| agents.contains(&r.agent.as_str());
            let estimate = stats::pass_rate(&outcomes_where(&run.trials, mine), confidence);
            let (cost, time) = cost_and_time(run.trials.iter().filter(|r| mine(r)));
            let (rate, ci) = match &estimate {
                Some(e) => (
                    pct(e.rate),
                    format!("{}-{}", pct(e.interval.lo), pct(e.interval.hi)),
                ),
                None => ("-".into(), "-".into()),
            };
            let effect = match (&first, &estimate) {
                (Some(base), Some(e)) if i > 0 => {
                    // Independent-samples approximation: half-widths add in quadrature.
                    let half = |x: &stats::RateEstimate| (x.interval.hi - x.interval.lo) / 2.0;
                    let diff = e.rate - base.rate;
                    let spread = (half(base).powi(2) + half(e).powi(2)).sqrt();
                    format!(
                        "{} ({} to {})",
                        points(diff),
                        points(diff - spread),
                        points(diff + spread)
                    )
                }
                _ => "(reference)".into(),
            };
            if i == 0 {
                first = estimate;
            }
            let name = if i == 0 { factor.as_str() } else { "" };
            let _ = writeln!(
                out,
                "{name:<28} {level:<12} {rate:>9} {ci:>15} {effect:>22} {:>10} {:>8}",
                cost_text(cost),
                time_text(time)
            );
        }
    }
    out.push('\n');
}

fn interaction(
    out: &mut String,
    run: &StoredRun,
    variants: &[(&String, &AgentVariant)],
    a: &String,
    b: &String,
) {
    let levels_of = |factor: &String| {
        let mut levels: Vec<&String> = Vec::new();
        for (_, v) in variants {
            if !levels.contains(&&v.factors[factor]) {
                levels.push(&v.factors[factor]);
            }
        }
        levels
    };
    let (rows, columns) = (levels_of(a), levels_of(b));
    let cell = |row: &String, column: &String| -> Option<f64> {
        let agent = variants
            .iter()
            .find(|(_, v)| &v.factors[a] == row && &v.factors[b] == column)?
            .0;
        stats::pass_rate(&outcomes_where(&run.trials, |r| &r.agent == agent), 0.95).map(|e| e.rate)
    };
    let _ = writeln!(out, "Interaction: pass rate by {a} (rows) x {b} (columns)");
    let _ = write!(out, "{:<16}", "");
    for column in &columns {
        let _ = write!(out, " {:>10}", column);
    }
    out.push('\n');
    for row in &rows {
        let _ = write!(out, "{row:<16}");
        for column in &columns {
            let _ = write!(out, " {:>10}", cell(row, column).map_or("-".into(), pct));
        }
        out.push('\n');
    }
    if let ([r0, r1], [c0, c1]) = (&rows[..], &columns[..])
        && let (Some(p00), Some(p01), Some(p10), Some(p11)) =
            (cell(r0, c0), cell(r0, c1), cell(r1, c0), cell(r1, c1))
    {
        let _ = writeln!(
            out,
            "interaction = ({} - {}) - ({} - {}) = {} points (0 means the effects add up)",
            pct(p00),
            pct(p01),
            pct(p10),
            pct(p11),
            points((p00 - p01) - (p10 - p11))
        );
    }
    out.push('\n');
}

fn pareto(out: &mut String, run: &StoredRun, agents: &[&str], confidence: f64) {
    struct Point<'a> {
        agent: &'a str,
        rate: f64,
        cost: f64,
        time: u64,
    }
    let points: Vec<Point> = agents
        .iter()
        .filter_map(|agent| {
            let rate = stats::pass_rate(
                &outcomes_where(&run.trials, |r| r.agent == *agent),
                confidence,
            )?
            .rate;
            let (cost, time) = cost_and_time(run.trials.iter().filter(|r| r.agent == *agent));
            Some(Point {
                agent,
                rate,
                cost: cost.unwrap_or(0.0),
                time: time.unwrap_or(0),
            })
        })
        .collect();
    let dominated = |p: &Point| {
        points.iter().any(|q| {
            q.rate >= p.rate
                && q.cost <= p.cost
                && q.time <= p.time
                && (q.rate > p.rate || q.cost < p.cost || q.time < p.time)
        })
    };
    let _ = writeln!(out, "Pareto front (pass rate higher, cost and time lower):");
    for p in points.iter().filter(|p| !dominated(p)) {
        let _ = writeln!(
            out,
            "  {}  {}  {}  {}",
            p.agent,
            pct(p.rate),
            cost_text(Some(p.cost).filter(|c| *c > 0.0)),
            time_text(Some(p.time))
        );
    }
    out.push('\n');
}
