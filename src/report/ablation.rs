//! `report --ablation`: what each factor of a `matrix:` did to pass rate, cost and time.
//!
//! For every matrix base in the run: each factor's levels with their pooled pass rate (over the
//! other factors' levels), the difference against the first level with an interval, mean cost
//! and median time; the two-factor interaction table when there are exactly two factors; and the
//! Pareto front of pass rate (higher), cost and time (lower) over the combinations.
//!
//! [`ablations`] computes it once; text, markdown, JSON and the HTML page render that.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use indexmap::IndexMap;
use serde::Serialize;

use super::{mean_cost, pct, percent, seconds};
use crate::stats::{self, TaskOutcome};
use crate::store::{Outcome, StoredRun, TrialRecord};
use crate::suite::AgentVariant;

/// The ablation of one matrix base.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Ablation {
    /// The agent the matrix expanded.
    pub base: String,
    /// Its combinations (agent names) in the run's order.
    pub combinations: Vec<String>,
    /// Trials of those combinations, infra errors included.
    pub trials: usize,
    /// Confidence of the intervals.
    pub confidence: f64,
    pub factors: Vec<Factor>,
    /// Pass rate by the levels of two factors; only when the matrix has exactly two.
    pub interaction: Option<Interaction>,
    /// Combinations no other beats on pass rate (higher), cost and time (lower) at once.
    pub pareto: Vec<ParetoPoint>,
}

/// One factor's main effect: each level pooled over the other factors' levels.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Factor {
    pub factor: String,
    pub levels: Vec<Level>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Level {
    pub level: String,
    /// The combinations at this level.
    pub agents: Vec<String>,
    pub pass_rate: Option<f64>,
    pub interval: Option<(f64, f64)>,
    /// Against the first level (the reference, which has none).
    pub effect: Option<Effect>,
    pub mean_cost_usd: Option<f64>,
    pub median_duration_ms: Option<u64>,
}

/// A difference in pass rate (fractions, not points) with its interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct Effect {
    pub diff: f64,
    pub lo: f64,
    pub hi: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Interaction {
    pub rows_factor: String,
    pub columns_factor: String,
    pub rows: Vec<String>,
    pub columns: Vec<String>,
    /// `cells[row][column]`: the pass rate of that combination, None when it has no scored trial.
    pub cells: Vec<Vec<Option<f64>>>,
    /// `(p00 - p01) - (p10 - p11)` for a 2x2 table: 0 when the effects add up.
    pub value: Option<f64>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct ParetoPoint {
    pub agent: String,
    pub pass_rate: f64,
    pub mean_cost_usd: Option<f64>,
    pub median_duration_ms: Option<u64>,
}

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
        if record.passed() {
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
    let records: Vec<&TrialRecord> = records.collect();
    let mut times: Vec<u64> = records.iter().map(|r| r.duration_ms).collect();
    times.sort_unstable();
    (
        mean_cost(records.into_iter()),
        times.get(times.len() / 2).copied(),
    )
}

/// The ablation of every matrix base of `run`, in the run's order; empty when it has no matrix.
pub(crate) fn ablations(run: &StoredRun, confidence: f64) -> Vec<Ablation> {
    let mut bases: IndexMap<&str, Vec<(&String, &AgentVariant)>> = IndexMap::new();
    for (agent, variant) in &run.manifest.variants {
        bases
            .entry(variant.base.as_str())
            .or_default()
            .push((agent, variant));
    }
    bases
        .into_iter()
        .map(|(base, variants)| {
            let agents: Vec<&str> = variants.iter().map(|(a, _)| a.as_str()).collect();
            let factors: Vec<&String> = variants[0].1.factors.keys().collect();
            Ablation {
                base: base.to_owned(),
                combinations: agents.iter().map(|a| (*a).to_owned()).collect(),
                trials: run
                    .trials
                    .iter()
                    .filter(|r| agents.contains(&r.agent.as_str()))
                    .count(),
                confidence,
                factors: factors
                    .iter()
                    .map(|factor| main_effect(run, &variants, factor, confidence))
                    .collect(),
                interaction: match factors[..] {
                    [first, second] => Some(interaction(run, &variants, first, second)),
                    _ => None,
                },
                pareto: pareto(run, &agents, confidence),
            }
        })
        .collect()
}

/// The levels of `factor` in the order the combinations first show them.
fn levels_of<'a>(variants: &[(&String, &'a AgentVariant)], factor: &str) -> Vec<&'a String> {
    let mut levels: Vec<&String> = Vec::new();
    for (_, variant) in variants {
        let level = &variant.factors[factor];
        if !levels.contains(&level) {
            levels.push(level);
        }
    }
    levels
}

fn main_effect(
    run: &StoredRun,
    variants: &[(&String, &AgentVariant)],
    factor: &str,
    confidence: f64,
) -> Factor {
    let mut first: Option<stats::RateEstimate> = None;
    let mut levels = Vec::new();
    for (i, level) in levels_of(variants, factor).into_iter().enumerate() {
        let agents: Vec<&str> = variants
            .iter()
            .filter(|(_, v)| &v.factors[factor] == level)
            .map(|(a, _)| a.as_str())
            .collect();
        let mine = |r: &TrialRecord| agents.contains(&r.agent.as_str());
        let estimate = stats::pass_rate(&outcomes_where(&run.trials, mine), confidence);
        let (cost, time) = cost_and_time(run.trials.iter().filter(|r| mine(r)));
        let effect = match (&first, &estimate) {
            (Some(base), Some(e)) if i > 0 => {
                // Two independent rates: Newcombe's hybrid score interval, inside [-1, 1].
                let interval = stats::newcombe(base, e);
                Some(Effect {
                    diff: e.rate - base.rate,
                    lo: interval.lo,
                    hi: interval.hi,
                })
            }
            _ => None,
        };
        levels.push(Level {
            level: level.clone(),
            agents: agents.iter().map(|a| (*a).to_owned()).collect(),
            pass_rate: estimate.as_ref().map(|e| e.rate),
            interval: estimate.as_ref().map(|e| (e.interval.lo, e.interval.hi)),
            effect,
            mean_cost_usd: cost,
            median_duration_ms: time,
        });
        if i == 0 {
            first = estimate;
        }
    }
    Factor {
        factor: factor.to_owned(),
        levels,
    }
}

fn interaction(
    run: &StoredRun,
    variants: &[(&String, &AgentVariant)],
    a: &str,
    b: &str,
) -> Interaction {
    let (rows, columns) = (levels_of(variants, a), levels_of(variants, b));
    let cell = |row: &String, column: &String| -> Option<f64> {
        let agent = variants
            .iter()
            .find(|(_, v)| &v.factors[a] == row && &v.factors[b] == column)?
            .0;
        stats::pass_rate(&outcomes_where(&run.trials, |r| &r.agent == agent), 0.95).map(|e| e.rate)
    };
    let cells: Vec<Vec<Option<f64>>> = rows
        .iter()
        .map(|row| columns.iter().map(|column| cell(row, column)).collect())
        .collect();
    let value = match &cells[..] {
        [first, second] => match (&first[..], &second[..]) {
            ([Some(p00), Some(p01)], [Some(p10), Some(p11)]) => Some((p00 - p01) - (p10 - p11)),
            _ => None,
        },
        _ => None,
    };
    Interaction {
        rows_factor: a.to_owned(),
        columns_factor: b.to_owned(),
        rows: rows.into_iter().cloned().collect(),
        columns: columns.into_iter().cloned().collect(),
        cells,
        value,
    }
}

fn pareto(run: &StoredRun, agents: &[&str], confidence: f64) -> Vec<ParetoPoint> {
    let points: Vec<ParetoPoint> = agents
        .iter()
        .filter_map(|agent| {
            let rate = stats::pass_rate(
                &outcomes_where(&run.trials, |r| r.agent == *agent),
                confidence,
            )?
            .rate;
            let (cost, time) = cost_and_time(run.trials.iter().filter(|r| r.agent == *agent));
            Some(ParetoPoint {
                agent: (*agent).to_owned(),
                pass_rate: rate,
                mean_cost_usd: cost,
                median_duration_ms: time,
            })
        })
        .collect();
    // No cost reported counts as free, no time as instant: neither can make a point dominated.
    let key = |p: &ParetoPoint| {
        (
            p.pass_rate,
            p.mean_cost_usd.unwrap_or(0.0),
            p.median_duration_ms.unwrap_or(0),
        )
    };
    let dominated = |p: &ParetoPoint| {
        let (rate, cost, time) = key(p);
        points.iter().any(|q| {
            let (q_rate, q_cost, q_time) = key(q);
            q_rate >= rate
                && q_cost <= cost
                && q_time <= time
                && (q_rate > rate || q_cost < cost || q_time < time)
        })
    };
    points.iter().filter(|p| !dominated(p)).cloned().collect()
}

pub(super) fn points(v: f64) -> String {
    format!("{:+.1}", v * 100.0)
}

pub(super) fn cost_text(cost: Option<f64>) -> String {
    cost.map_or("-".into(), |c| format!("${c:.4}"))
}

pub(super) fn ci_text(interval: Option<(f64, f64)>) -> String {
    interval.map_or("-".into(), |(lo, hi)| format!("{}-{}", pct(lo), pct(hi)))
}

/// `-33.3 (-76.5 to +9.8)`; the reference level reads `(reference)`.
pub(super) fn effect_text(effect: Option<Effect>, first: bool) -> String {
    match effect {
        Some(e) => format!("{} ({} to {})", points(e.diff), points(e.lo), points(e.hi)),
        None if first => "(reference)".into(),
        None => "-".into(),
    }
}

/// Each level's row of a factor table, as text: the factor (named on its first level only), the
/// level, pass rate, interval, effect against the first level, mean cost and median time. Every
/// format lays out these same cells.
pub(super) fn level_rows(ablation: &Ablation) -> impl Iterator<Item = [String; 7]> + '_ {
    ablation.factors.iter().flat_map(|factor| {
        factor.levels.iter().enumerate().map(move |(i, level)| {
            [
                if i == 0 {
                    factor.factor.clone()
                } else {
                    String::new()
                },
                level.level.clone(),
                percent(level.pass_rate),
                ci_text(level.interval),
                effect_text(level.effect, i == 0),
                cost_text(level.mean_cost_usd),
                seconds(level.median_duration_ms),
            ]
        })
    })
}

/// A Pareto point's pass rate, mean cost and median time, as text.
pub(super) fn pareto_cells(p: &ParetoPoint) -> [String; 3] {
    [
        pct(p.pass_rate),
        cost_text(p.mean_cost_usd),
        seconds(p.median_duration_ms),
    ]
}

/// What `--ablation` says of a run without a matrix.
pub(crate) const NO_ABLATION: &str =
    "this run has no ablation: no agent of it was expanded from a `matrix:`";

/// The ablation report of `run` as text, or a sentence saying it has no matrix.
pub(crate) fn ablation(run: &StoredRun, confidence: f64) -> String {
    let ablations = ablations(run, confidence);
    if ablations.is_empty() {
        return format!("{NO_ABLATION}\n");
    }
    let mut out = String::new();
    for ablation in &ablations {
        let _ = writeln!(
            out,
            "Ablation of {}: {} combinations, {} trials\n",
            ablation.base,
            ablation.combinations.len(),
            ablation.trials
        );
        let _ = writeln!(
            out,
            "{:<28} {:<12} {:>9} {:>15} {:>22} {:>10} {:>8}",
            "factor", "level", "pass rate", "CI", "effect vs first (pts)", "mean cost", "time"
        );
        for [factor, level, rate, ci, effect, cost, time] in level_rows(ablation) {
            let _ = writeln!(
                out,
                "{factor:<28} {level:<12} {rate:>9} {ci:>15} {effect:>22} {cost:>10} {time:>8}"
            );
        }
        out.push('\n');
        if let Some(table) = &ablation.interaction {
            let _ = writeln!(
                out,
                "Interaction: pass rate by {} (rows) x {} (columns)",
                table.rows_factor, table.columns_factor
            );
            let _ = write!(out, "{:<16}", "");
            for column in &table.columns {
                let _ = write!(out, " {column:>10}");
            }
            out.push('\n');
            for (row, cells) in table.rows.iter().zip(&table.cells) {
                let _ = write!(out, "{row:<16}");
                for cell in cells {
                    let _ = write!(out, " {:>10}", percent(*cell));
                }
                out.push('\n');
            }
            if let Some(line) = interaction_line(table) {
                let _ = writeln!(out, "{line}");
            }
            out.push('\n');
        }
        let _ = writeln!(out, "Pareto front (pass rate higher, cost and time lower):");
        for p in &ablation.pareto {
            let [rate, cost, time] = pareto_cells(p);
            let _ = writeln!(out, "  {}  {rate}  {cost}  {time}", p.agent);
        }
        out.push('\n');
    }
    out
}

/// `interaction = (a - b) - (c - d) = x points ...` for a 2x2 table.
pub(super) fn interaction_line(table: &Interaction) -> Option<String> {
    let value = table.value?;
    let cell = |r: usize, c: usize| table.cells[r][c].map_or("-".into(), pct);
    Some(format!(
        "interaction = ({} - {}) - ({} - {}) = {} points (0 means the effects add up)",
        cell(0, 0),
        cell(0, 1),
        cell(1, 0),
        cell(1, 1),
        points(value)
    ))
}

/// Escapes a markdown table cell.
fn md_cell(text: &str) -> String {
    text.replace('|', "\\|")
}

/// The ablation report as markdown, fit for `$GITHUB_STEP_SUMMARY`.
pub(crate) fn ablation_markdown(run: &StoredRun, confidence: f64) -> String {
    let ablations = ablations(run, confidence);
    let mut out = format!("## deltabench ablation: {}\n\n", run.manifest.suite);
    if ablations.is_empty() {
        let _ = writeln!(out, "{NO_ABLATION}");
        return out;
    }
    for ablation in &ablations {
        let _ = writeln!(
            out,
            "### Ablation of `{}`: {} combinations, {} trials\n",
            ablation.base,
            ablation.combinations.len(),
            ablation.trials
        );
        let _ = writeln!(
            out,
            "| factor | level | pass rate | {:.0}% CI | effect vs first (pts) | mean cost | time |\n\
             |---|---|---:|---:|---:|---:|---:|",
            confidence * 100.0
        );
        for [factor, level, rate, ci, effect, cost, time] in level_rows(ablation) {
            let _ = writeln!(
                out,
                "| {} | {} | {rate} | {ci} | {effect} | {cost} | {time} |",
                md_cell(&factor),
                md_cell(&level)
            );
        }
        if let Some(table) = &ablation.interaction {
            let _ = writeln!(
                out,
                "\n#### Interaction: pass rate by {} (rows) x {} (columns)\n",
                md_cell(&table.rows_factor),
                md_cell(&table.columns_factor)
            );
            let _ = write!(out, "| |");
            for column in &table.columns {
                let _ = write!(out, " {} |", md_cell(column));
            }
            let _ = write!(out, "\n|---|");
            for _ in &table.columns {
                out.push_str("---:|");
            }
            out.push('\n');
            for (row, cells) in table.rows.iter().zip(&table.cells) {
                let _ = write!(out, "| {} |", md_cell(row));
                for cell in cells {
                    let _ = write!(out, " {} |", percent(*cell));
                }
                out.push('\n');
            }
            if let Some(line) = interaction_line(table) {
                let _ = writeln!(out, "\n{line}");
            }
        }
        let _ = writeln!(
            out,
            "\n#### Pareto front (pass rate higher, cost and time lower)\n\n\
             | combination | pass rate | mean cost | time |\n|---|---:|---:|---:|"
        );
        for p in &ablation.pareto {
            let [rate, cost, time] = pareto_cells(p);
            let _ = writeln!(out, "| `{}` | {rate} | {cost} | {time} |", p.agent);
        }
        out.push('\n');
    }
    out
}

/// The ablation report as JSON: `ablations` is empty when the run has no matrix.
pub(crate) fn ablation_json(run: &StoredRun, confidence: f64) -> String {
    let value = serde_json::json!({
        "suite": run.manifest.suite,
        "suite_digest": run.manifest.suite_digest,
        "confidence": confidence,
        "ablations": ablations(run, confidence),
    });
    serde_json::to_string_pretty(&value).unwrap_or_default() + "\n"
}
