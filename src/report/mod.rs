//! Reports derived from a run directory alone: a per-agent summary, a per-task table and the
//! ablation of a `matrix:`, in several formats.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use indexmap::IndexMap;

use serde::Serialize;
use tabled::settings::Style;
use tabled::{Table, Tabled};

use crate::agent::CodingStatus;
use crate::stats;
use crate::store::{Outcome, StoredRun, TrialRecord};

mod ablation;
mod claims;
mod html;
mod junit;
mod select;
mod tasks;
mod terminal;
pub(crate) use ablation::{NO_ABLATION, ablation, ablation_json, ablation_markdown, ablations};
pub(crate) use claims::{FalseClaims, false_claims, makes_claims};
pub(crate) use html::{HtmlOptions, html};
pub(crate) use junit::junit;
pub(crate) use select::select_agents;
pub(crate) use tasks::{PER_TASK_NOTE, per_task, per_task_markdown, per_task_table};
pub(crate) use terminal::{DEFAULT_WIDTH, wrap};

/// The comparison of a run with an earlier one, as `compare` words it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Baseline {
    /// The earlier run directory, as given.
    pub run_dir: String,
    pub text: String,
}

/// One agent's results.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct AgentSummary {
    pub agent: String,
    pub trials: usize,
    /// Scored trials (pass, fail or invalid).
    pub scored: usize,
    pub passed: usize,
    /// Scored trials whose verifier gave no evidence or contradicted itself: not passed.
    pub invalid: usize,
    /// Trials whose diff has the shape of an attack on the judge (`flags`), whatever the verdict.
    pub flagged: usize,
    pub infra_errors: usize,
    /// Mean of the per-task pass fractions; None when nothing was scored.
    pub pass_rate: Option<f64>,
    /// 95% interval of the pass rate: Wilson with one trial per task, task-clustered otherwise.
    pub interval: Option<(f64, f64)>,
    pub interval_method: Option<&'static str>,
    /// Scored trials the agent ended `completed`: it said the work is done.
    pub claimed: usize,
    /// Of those, the ones that did not pass verification.
    pub false_claims: usize,
    /// `false_claims / claimed`; None when the agent never ended `completed`.
    pub false_claim_rate: Option<f64>,
    /// 95% Wilson interval of the false-claim rate.
    pub false_claim_interval: Option<(f64, f64)>,
    /// Trials per task when every task has several (the k of pass@k and pass^k).
    pub k: Option<usize>,
    /// Unbiased pass@k averaged over tasks: at least one of k trials passes.
    pub pass_at_k: Option<f64>,
    /// pass^k averaged over tasks: all k trials pass.
    pub pass_hat_k: Option<f64>,
    /// Mean cost per trial over the trials that reported one.
    pub mean_cost_usd: Option<f64>,
    /// The sum of the reported costs; None when no trial reported one.
    pub total_cost_usd: Option<f64>,
    /// `total_cost_usd` over the passing trials (one pass is one solved task): what a solve cost.
    pub cost_per_solved_usd: Option<f64>,
    /// Tokens summed over the trials that reported usage; None when none did.
    pub tokens: Option<TokenTotals>,
    /// Some of those costs were priced by deltabench, not reported by the agent.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cost_estimated: bool,
    pub median_duration_ms: Option<u64>,
}

/// Tokens summed over trials.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub(crate) struct TokenTotals {
    pub input: u64,
    pub output: u64,
    pub cache_read: u64,
    pub cache_write: u64,
}

impl TokenTotals {
    fn add(&mut self, other: &TokenTotals) {
        self.input += other.input;
        self.output += other.output;
        self.cache_read += other.cache_read;
        self.cache_write += other.cache_write;
    }
}

/// What a whole run used: the agents' tokens and costs summed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub(crate) struct RunTotals {
    pub trials: usize,
    pub passed: usize,
    pub tokens: Option<TokenTotals>,
    pub cost_usd: Option<f64>,
    pub cost_per_solved_usd: Option<f64>,
    /// Some of the costs were priced by deltabench, not reported by the agents.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cost_estimated: bool,
}

/// The run's totals over `summaries`.
pub(crate) fn totals(summaries: &[AgentSummary]) -> RunTotals {
    let mut totals = RunTotals::default();
    for s in summaries {
        totals.trials += s.trials;
        totals.passed += s.passed;
        if let Some(tokens) = &s.tokens {
            totals.tokens.get_or_insert_default().add(tokens);
        }
        if let Some(cost) = s.total_cost_usd {
            *totals.cost_usd.get_or_insert(0.0) += cost;
        }
        totals.cost_estimated |= s.cost_estimated;
    }
    totals.cost_per_solved_usd = per_solved(totals.cost_usd, totals.passed);
    totals
}

/// What one pass cost; None without a cost or a pass.
fn per_solved(cost: Option<f64>, passed: usize) -> Option<f64> {
    cost.filter(|_| passed > 0).map(|cost| cost / passed as f64)
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

/// Per-agent summaries, agents in the order they first appear in `agents` then the records;
/// `configs` (the manifest's) says which agents are built-in baselines that claim nothing.
pub(crate) fn summarize(
    records: &[TrialRecord],
    agents: &[String],
    configs: &IndexMap<String, serde_json::Value>,
) -> Vec<AgentSummary> {
    let mut tally = Tally::default();
    for (name, config) in configs {
        if !makes_claims(Some(config)) {
            tally.claims_nothing(name);
        }
    }
    for record in records {
        tally.add(record);
    }
    tally.summaries(agents)
}

/// What the summary needs of trial records, gathered one record at a time: a run keeps this
/// instead of its records, so its memory does not grow with them (but for one duration per
/// trial, for the median).
#[derive(Debug, Clone, Default)]
pub(crate) struct Tally {
    /// By agent, in the order they first appeared.
    agents: IndexMap<String, AgentTally>,
    /// Built-in baselines (`noop`, `oracle`): their `completed` is no claim.
    no_claims: std::collections::BTreeSet<String>,
}

#[derive(Debug, Clone, Default)]
struct AgentTally {
    trials: usize,
    invalid: usize,
    flagged: usize,
    /// Scored trials and passes, by task.
    tasks: BTreeMap<String, (usize, usize)>,
    claimed: usize,
    false_claims: usize,
    /// The sum and count of the reported costs, summed in record order.
    cost: (f64, usize),
    tokens: Option<TokenTotals>,
    cost_estimated: bool,
    durations: Vec<u64>,
}

impl Tally {
    /// `agent` is a built-in baseline: its trials count, its claims do not.
    pub(crate) fn claims_nothing(&mut self, agent: &str) {
        self.no_claims.insert(agent.to_owned());
    }

    pub(crate) fn add(&mut self, record: &TrialRecord) {
        if !self.agents.contains_key(&record.agent) {
            self.agents
                .insert(record.agent.clone(), AgentTally::default());
        }
        let Some(agent) = self.agents.get_mut(&record.agent) else {
            return;
        };
        agent.trials += 1;
        agent.invalid += usize::from(record.outcome == Outcome::Invalid);
        agent.flagged += usize::from(!record.flags.is_empty());
        if record.outcome != Outcome::InfraError {
            if !agent.tasks.contains_key(&record.task) {
                agent.tasks.insert(record.task.clone(), (0, 0));
            }
            if let Some((trials, passed)) = agent.tasks.get_mut(&record.task) {
                *trials += 1;
                *passed += usize::from(record.outcome == Outcome::Pass);
            }
            if record.status == Some(CodingStatus::Completed) {
                agent.claimed += 1;
                agent.false_claims += usize::from(record.outcome != Outcome::Pass);
            }
        }
        if let Some(cost) = record.usage.and_then(|u| u.cost_usd) {
            agent.cost.0 += cost;
            agent.cost.1 += 1;
        }
        agent.cost_estimated |= record.usage.is_some_and(|u| u.cost_estimated);
        if let Some(usage) = record.usage {
            agent.tokens.get_or_insert_default().add(&TokenTotals {
                input: usage.input_tokens,
                output: usage.output_tokens,
                cache_read: usage.cache_read_tokens,
                cache_write: usage.cache_write_tokens,
            });
        }
        agent.durations.push(record.duration_ms);
    }

    /// Per-agent summaries, agents in the order they first appear in `agents` then the records.
    pub(crate) fn summaries(&self, agents: &[String]) -> Vec<AgentSummary> {
        let none = AgentTally::default();
        let order = agents
            .iter()
            .chain(self.agents.keys().filter(|agent| !agents.contains(agent)));
        order
            .map(|agent| {
                let tally = self.agents.get(agent).unwrap_or(&none);
                if self.no_claims.contains(agent) {
                    AgentTally {
                        claimed: 0,
                        false_claims: 0,
                        ..tally.clone()
                    }
                    .summary(agent)
                } else {
                    tally.summary(agent)
                }
            })
            .collect()
    }
}

impl AgentTally {
    fn summary(&self, agent: &str) -> AgentSummary {
        let outcomes: Vec<stats::TaskOutcome> = self
            .tasks
            .iter()
            .map(|(task, &(trials, passed))| stats::TaskOutcome {
                task: task.clone(),
                passed,
                trials,
            })
            .collect();
        let estimate = stats::pass_rate(&outcomes, 0.95);
        let scored = outcomes.iter().map(|o| o.trials).sum();
        let k = outcomes.iter().map(|o| o.trials).min().filter(|k| *k > 1);
        let claims = FalseClaims::of(self.claimed, self.false_claims, 0.95);
        let passed = outcomes.iter().map(|o| o.passed).sum();
        let total_cost = (self.cost.1 > 0).then_some(self.cost.0);
        AgentSummary {
            trials: self.trials,
            scored,
            passed,
            invalid: self.invalid,
            flagged: self.flagged,
            infra_errors: self.trials - scored,
            pass_rate: estimate.as_ref().map(|e| e.rate),
            interval: estimate.as_ref().map(|e| (e.interval.lo, e.interval.hi)),
            interval_method: estimate.as_ref().map(|e| e.method),
            claimed: claims.claimed,
            false_claims: claims.false_claims,
            false_claim_rate: claims.rate,
            false_claim_interval: claims.interval,
            k,
            pass_at_k: k.and_then(|k| stats::mean_pass_at_k(&outcomes, k)),
            pass_hat_k: k.and_then(|k| stats::mean_pass_hat_k(&outcomes, k)),
            mean_cost_usd: total_cost.map(|cost| cost / self.cost.1 as f64),
            total_cost_usd: total_cost,
            cost_per_solved_usd: per_solved(total_cost, passed),
            tokens: self.tokens,
            cost_estimated: self.cost_estimated,
            median_duration_ms: median(self.durations.clone()),
            agent: agent.to_owned(),
        }
    }
}

/// Mean cost in USD over the records that report one; None when none does.
fn mean_cost<'a>(records: impl Iterator<Item = &'a TrialRecord>) -> Option<f64> {
    let costs: Vec<f64> = records
        .filter_map(|r| r.usage.and_then(|u| u.cost_usd))
        .collect();
    (!costs.is_empty()).then(|| costs.iter().sum::<f64>() / costs.len() as f64)
}

fn pct(value: f64) -> String {
    format!("{:.1}%", value * 100.0)
}

fn percent(value: Option<f64>) -> String {
    value.map_or("-".into(), pct)
}

fn interval_text(interval: Option<(f64, f64)>) -> String {
    interval.map_or("-".into(), |(lo, hi)| {
        format!("{:.1}-{:.1}%", lo * 100.0, hi * 100.0)
    })
}

fn seconds(ms: Option<u64>) -> String {
    ms.map_or("-".into(), |ms| format!("{:.2}s", ms as f64 / 1000.0))
}

/// `$0.0123`, `~$0.0123` when priced by deltabench from its price table (not reported by the
/// agent), or `-`.
fn dollars(cost: Option<f64>, estimated: bool) -> String {
    cost.map_or("-".into(), |c| {
        format!("{}${c:.4}", if estimated { "~" } else { "" })
    })
}

/// `12.3k in / 4.5k out`: tokens read and written (cache reads count as read).
fn tokens_text(tokens: &TokenTotals) -> String {
    format!(
        "{} in / {} out",
        count(tokens.input + tokens.cache_read),
        count(tokens.output)
    )
}

/// `950`, `12.3k`, `4.56M`.
fn count(n: u64) -> String {
    match n {
        0..1_000 => n.to_string(),
        1_000..1_000_000 => format!("{:.1}k", n as f64 / 1e3),
        _ => format!("{:.2}M", n as f64 / 1e6),
    }
}

/// `total: 18 trials, 9 passed; 12.3k in / 4.5k out tokens; $0.1234, $0.0137 per solved task`.
pub(crate) fn totals_line(totals: &RunTotals) -> String {
    let mut line = format!("total: {} trials, {} passed", totals.trials, totals.passed);
    if let Some(tokens) = &totals.tokens {
        let _ = write!(line, "; tokens {}", tokens_text(tokens));
    }
    if totals.cost_usd.is_some() {
        let _ = write!(
            line,
            "; cost {}",
            dollars(totals.cost_usd, totals.cost_estimated)
        );
        if totals.cost_per_solved_usd.is_some() {
            let _ = write!(
                line,
                ", {} per solved task",
                dollars(totals.cost_per_solved_usd, totals.cost_estimated)
            );
        }
    }
    line
}

/// `1/6 16.7% (3.0-56.4%)`: false claims of claimed, the rate and its interval.
fn false_claims_text(s: &AgentSummary) -> String {
    match s.false_claim_rate {
        Some(rate) => format!(
            "{}/{} {} ({})",
            s.false_claims,
            s.claimed,
            percent(Some(rate)),
            interval_text(s.false_claim_interval)
        ),
        None => "-".into(),
    }
}

/// `1/6 16.7%`: trials with a flagged diff, of all.
fn flagged_text(s: &AgentSummary) -> String {
    match s.trials {
        0 => "-".into(),
        n => format!(
            "{}/{n} {}",
            s.flagged,
            percent(Some(s.flagged as f64 / n as f64))
        ),
    }
}

/// What the `false claims` column counts, said under the tables that show it.
pub(crate) const FALSE_CLAIMS_NOTE: &str = "false claims: trials the agent ended `completed` (it said the work is done) that did not pass verification, of all it ended `completed`, with a 95% Wilson interval";

#[derive(Tabled)]
struct Row {
    agent: String,
    trials: usize,
    passed: usize,
    #[tabled(rename = "pass rate")]
    pass_rate: String,
    #[tabled(rename = "95% CI")]
    interval: String,
    #[tabled(rename = "false claims")]
    false_claims: String,
    #[tabled(rename = "pass@k / pass^k")]
    at_k: String,
    invalid: usize,
    flagged: String,
    #[tabled(rename = "infra errors")]
    infra_errors: usize,
    tokens: String,
    #[tabled(rename = "mean cost")]
    cost: String,
    #[tabled(rename = "total cost")]
    total_cost: String,
    #[tabled(rename = "cost/solved")]
    cost_per_solved: String,
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
            false_claims: false_claims_text(s),
            at_k: match (s.k, s.pass_at_k, s.pass_hat_k) {
                (Some(k), Some(at), Some(all)) => {
                    format!("k={k}: {} / {}", percent(Some(at)), percent(Some(all)))
                }
                _ => "-".into(),
            },
            invalid: s.invalid,
            flagged: flagged_text(s),
            infra_errors: s.infra_errors,
            tokens: s.tokens.as_ref().map_or("-".into(), tokens_text),
            cost: dollars(s.mean_cost_usd, s.cost_estimated),
            total_cost: dollars(s.total_cost_usd, s.cost_estimated),
            cost_per_solved: dollars(s.cost_per_solved_usd, s.cost_estimated),
            median: seconds(s.median_duration_ms),
        })
        .collect()
}

/// The terminal summary: the table fitted to `width` with its legend, then the run's totals.
pub(crate) fn table(summaries: &[AgentSummary], width: usize) -> String {
    format!(
        "{}\n{}",
        terminal::summary(summaries, width),
        terminal::wrap(&totals_line(&totals(summaries)), width)
    )
}

fn agents_of(summaries: &[AgentSummary]) -> Vec<String> {
    summaries.iter().map(|s| s.agent.clone()).collect()
}

/// The tasks of `run` its suite's lock marks flaky (`validate --repeat`), by task: read from
/// the lock beside the suite file the run names, as it is now.
pub(crate) fn flaky_tasks(
    run: &StoredRun,
) -> std::collections::BTreeMap<String, crate::suite::FlakyTask> {
    let path = crate::suite::lock_path_of(std::path::Path::new(&run.manifest.suite_path));
    let Ok(Some(lock)) = crate::suite::SuiteLock::read_at(&path) else {
        return Default::default();
    };
    lock.flaky
        .into_iter()
        .filter(|(task, _)| {
            run.manifest.tasks.contains(task) || run.trials.iter().any(|r| &r.task == task)
        })
        .collect()
}

/// `t3 (reference passed 5 of 10)`, joined.
pub(crate) fn flaky_list(
    flaky: &std::collections::BTreeMap<String, crate::suite::FlakyTask>,
) -> String {
    flaky
        .iter()
        .map(|(task, f)| format!("{task} (reference passed {} of {})", f.passed, f.runs))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The tasks of `run` whose trials ran with no validated evidence (the record's
/// `unvalidated`), in plan order.
pub(crate) fn unvalidated_tasks(run: &StoredRun) -> Vec<String> {
    let mut tasks: Vec<&str> = run
        .trials
        .iter()
        .filter(|r| r.unvalidated)
        .map(|r| r.task.as_str())
        .collect();
    tasks.sort_by_key(|task| (junit::task_position(run, task), *task));
    tasks.dedup();
    tasks.into_iter().map(str::to_owned).collect()
}

/// What an unvalidated task's pass rests on, for every report.
pub(crate) const UNVALIDATED_NOTE: &str = "unvalidated: no evidence in the suite's lock, so a pass there had no evidence check and no mutation check (`deltabench validate` records it; `run --require-lock` refuses to start without it)";

/// The report's line on unvalidated tasks; empty when there are none.
fn unvalidated_line(run: &StoredRun, bullet: &str) -> String {
    let tasks = unvalidated_tasks(run);
    if tasks.is_empty() {
        return String::new();
    }
    format!("\n{bullet}Tasks {UNVALIDATED_NOTE}: {}\n", tasks.join(", "))
}

/// The report's line on flaky tasks; empty when there are none.
fn flaky_line(run: &StoredRun, bullet: &str) -> String {
    let flaky = flaky_tasks(run);
    if flaky.is_empty() {
        return String::new();
    }
    format!(
        "\n{bullet}Flaky tasks (the lock's `validate --repeat`; their trials say as much about the task as the agent, and gates leave them out unless --include-flaky): {}\n",
        flaky_list(&flaky)
    )
}

/// The terminal report fitted to `width`: the summary table, then the per-task table.
pub(crate) fn text(run: &StoredRun, summaries: &[AgentSummary], width: usize) -> String {
    let agents = agents_of(summaries);
    let mut out = format!(
        "{}\n\nPer task: {PER_TASK_NOTE}\n{}\n",
        table(summaries, width),
        per_task_table(&per_task(run, &agents), &agents, width)
    );
    out.push_str(&preparation_lines(run, ""));
    out.push_str(&flaky_line(run, ""));
    out.push_str(&unvalidated_line(run, ""));
    let explained = graded_not_passed(run);
    if !explained.is_empty() {
        let _ = writeln!(out, "\n{GRADER_NOTE}:");
        let shown = &explained[..explained.len().min(GRADER_NOTES_SHOWN)];
        write_grader_notes(&mut out, shown, "    ", |r, reason| {
            format!("{} / {} #{}: {reason}", r.task, r.agent, r.trial)
        });
        if explained.len() > GRADER_NOTES_SHOWN {
            let _ = writeln!(
                out,
                "... and {} more (each trial folder's grader.log has the whole explanation)",
                explained.len() - GRADER_NOTES_SHOWN
            );
        }
    }
    terminal::wrap(&out, width)
}

/// What preparing each task cost apart from its trials' times, one line per task after
/// `bullet`; empty when nothing was prepared.
pub(crate) fn preparation_lines(run: &StoredRun, bullet: &str) -> String {
    if run.manifest.preparation.is_empty() {
        return String::new();
    }
    let seconds = |ms: u64| format!("{:.1} s", ms as f64 / 1000.0);
    let mut out = format!(
        "\n{PREPARATION_NOTE}:\n{}",
        if bullet.is_empty() { "" } else { "\n" }
    );
    for (task, prepared) in &run.manifest.preparation {
        let parts: Vec<String> = [
            prepared
                .environment_ms
                .map(|ms| format!("image {}", seconds(ms))),
            prepared
                .template_ms
                .map(|ms| format!("template {}", seconds(ms))),
        ]
        .into_iter()
        .flatten()
        .collect();
        let _ = writeln!(out, "{bullet}{task}: {}", parts.join(", "));
    }
    out
}

const PREPARATION_NOTE: &str = "Prepared once per task, not counted in its trials' times (image built, template made or checked)";

const GRADER_NOTE: &str = "Not passed, as the grader explained";
/// The terminal report lists this many graded trials that did not pass; markdown lists all.
const GRADER_NOTES_SHOWN: usize = 10;

/// Scored trials that did not pass and carry a grader's explanation.
/// Each of `records` as `head` makes it (given the record and why it did not pass), then its
/// grader's explanation, each line after `indent`.
fn write_grader_notes(
    out: &mut String,
    records: &[&TrialRecord],
    indent: &str,
    head: impl Fn(&TrialRecord, &str) -> String,
) {
    for record in records {
        let reason = record.reason.as_deref().unwrap_or("not passed");
        let _ = writeln!(out, "{}", head(record, reason));
        for line in record.grader.as_deref().unwrap_or_default().lines() {
            let _ = writeln!(out, "{indent}{line}");
        }
    }
}

fn graded_not_passed(run: &StoredRun) -> Vec<&TrialRecord> {
    run.trials
        .iter()
        .filter(|r| matches!(r.outcome, Outcome::Fail | Outcome::Invalid) && r.grader.is_some())
        .collect()
}

/// A markdown report fit for `$GITHUB_STEP_SUMMARY`.
pub(crate) fn markdown(run: &StoredRun, summaries: &[AgentSummary]) -> String {
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
    let _ = writeln!(
        out,
        "\n\n{}.\n\n{FALSE_CLAIMS_NOTE}.",
        capitalized(&totals_line(&totals(summaries)))
    );
    let agents = agents_of(summaries);
    let _ = writeln!(
        out,
        "\n### Per task\n\n{}.\n\n{}",
        capitalized(PER_TASK_NOTE),
        per_task_markdown(&per_task(run, &agents), &agents)
    );
    out.push_str(&preparation_lines(run, "- "));
    out.push_str(&flaky_line(run, "**Note**: "));
    out.push_str(&unvalidated_line(run, "**Note**: "));
    trial_notes(
        &mut out,
        run,
        Outcome::InfraError,
        "Not scored (infrastructure errors)",
        |r| r.infra_error.as_deref(),
    );
    trial_notes(
        &mut out,
        run,
        Outcome::Invalid,
        "Invalid (the verifier gave no evidence; counted as not passed)",
        |r| r.invalid.as_deref(),
    );
    let explained = graded_not_passed(run);
    if !explained.is_empty() {
        let _ = writeln!(out, "\n### {GRADER_NOTE}\n");
        // Indented four spaces under the item: a code block no output can close.
        write_grader_notes(&mut out, &explained, "      ", |r, reason| {
            format!("- `{}` / `{}` #{}: {reason}\n", r.task, r.agent, r.trial)
        });
    }
    out
}

/// The markdown list of the trials that ended `outcome`, each with `why`; nothing when none did.
fn trial_notes(
    out: &mut String,
    run: &StoredRun,
    outcome: Outcome,
    heading: &str,
    why: fn(&TrialRecord) -> Option<&str>,
) {
    let trials: Vec<&TrialRecord> = run.trials.iter().filter(|r| r.outcome == outcome).collect();
    if trials.is_empty() {
        return;
    }
    let _ = writeln!(out, "\n### {heading}\n");
    for record in trials {
        let _ = writeln!(
            out,
            "- `{}` / `{}` #{}: {}",
            record.task,
            record.agent,
            record.trial,
            why(record).unwrap_or("unknown")
        );
    }
}

pub(super) fn capitalized(text: &str) -> String {
    let mut chars = text.chars();
    chars.next().map_or(String::new(), |first| {
        first.to_uppercase().chain(chars).collect()
    })
}

/// One CSV row per trial.
pub(crate) fn csv(run: &StoredRun) -> Result<String, csv::Error> {
    let records = &run.trials;
    let flaky = flaky_tasks(run);
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
        "tampered",
        "cost_estimated",
        "flags",
        "container_changes",
        "verify_network",
        "in_place",
        "preparation_ms",
        "flaky_task",
        "unvalidated",
    ])?;
    let opt = |v: Option<String>| v.unwrap_or_default();
    for r in records {
        writer.write_record([
            r.task.clone(),
            r.agent.clone(),
            r.trial.to_string(),
            r.outcome.as_str().to_owned(),
            r.passed().to_string(),
            opt(r.score.map(|s| s.to_string())),
            opt(r.status.map(|s| s.as_str().to_owned())),
            opt(r.error.as_ref().map(|e| e.code.as_str().to_owned())),
            opt(r.diff.map(|d| d.files.to_string())),
            opt(r.diff.map(|d| d.insertions.to_string())),
            opt(r.diff.map(|d| d.deletions.to_string())),
            opt(r
                .verify
                .as_ref()
                .and_then(|v| v.exit_code)
                .map(|c| c.to_string())),
            opt(r.verify.as_ref().map(|v| v.timed_out.to_string())),
            r.duration_ms.to_string(),
            opt(r.usage.map(|u| u.input_tokens.to_string())),
            opt(r.usage.map(|u| u.output_tokens.to_string())),
            opt(r.usage.and_then(|u| u.cost_usd).map(|c| c.to_string())),
            r.tampered.join(";"),
            opt(r.usage.map(|u| u.cost_estimated.to_string())),
            r.flags.join(";"),
            r.container_changes
                .iter()
                .filter(|l| !l.starts_with("..."))
                .count()
                .to_string(),
            r.verify_network.to_string(),
            r.in_place.to_string(),
            opt(r.preparation_ms.map(|ms| ms.to_string())),
            flaky.contains_key(&r.task).to_string(),
            r.unvalidated.to_string(),
        ])?;
    }
    let bytes = writer.into_inner().map_err(|e| e.into_error())?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// What a trial's evidence rests on beyond the workspace: the verify command's network and the
/// container's changes (none for a trial held to the defaults).
pub(crate) fn evidence_marks(r: &TrialRecord) -> Option<String> {
    let mut marks = Vec::new();
    if r.in_place {
        marks.push(
            "checked in place, in the agent's running container (weaker evidence)".to_owned(),
        );
    }
    if r.verify_network {
        marks.push("verify had the network (weaker evidence)".to_owned());
    }
    let changes = r
        .container_changes
        .iter()
        .filter(|l| !l.starts_with("..."))
        .count();
    if changes > 0 {
        marks.push(format!(
            "{changes} change(s) in the container outside the workspace"
        ));
    }
    (!marks.is_empty()).then(|| marks.join("; "))
}

/// A JSON summary: per agent, and per task (failing tasks first). `baseline` is the text of the
/// comparison with an earlier run, and the run directory it names.
pub(crate) fn json(
    run: &StoredRun,
    summaries: &[AgentSummary],
    baseline: Option<&Baseline>,
) -> String {
    let mut value = serde_json::json!({
        "suite": run.manifest.suite,
        "suite_digest": run.manifest.suite_digest,
        "trials": run.trials.len(),
        "planned_trials": run.manifest.planned_trials,
        "interrupted": run.manifest.interrupted,
        "agents": summaries,
        "totals": totals(summaries),
        "tasks": per_task(run, &agents_of(summaries)),
    });
    if !run.manifest.preparation.is_empty() {
        value["preparation"] = serde_json::json!(run.manifest.preparation);
    }
    let flaky = flaky_tasks(run);
    if !flaky.is_empty() {
        value["flaky_tasks"] = serde_json::json!(flaky);
    }
    let unvalidated = unvalidated_tasks(run);
    if !unvalidated.is_empty() {
        value["unvalidated_tasks"] = serde_json::json!(unvalidated);
    }
    if let Some(baseline) = baseline {
        value["baseline"] = serde_json::json!({
            "run_dir": baseline.run_dir,
            "comparison": baseline.text,
        });
    }
    serde_json::to_string_pretty(&value).unwrap_or_default() + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_even_and_odd() {
        assert_eq!(median(vec![3, 1, 2]), Some(2));
        assert_eq!(median(vec![4, 1, 3, 2]), Some(2));
        assert_eq!(median(vec![]), None);
    }

    #[test]
    fn the_tally_summarizes_records_as_they_come() {
        let record = |task: &str, agent: &str, outcome: Outcome, ms: u64| {
            let mut record = TrialRecord::unscored(
                task,
                agent,
                1,
                crate::store::RecordedMetric::Delta,
                String::new(),
            );
            record.outcome = outcome;
            record.status = Some(CodingStatus::Completed);
            record.duration_ms = ms;
            record
        };
        let mut priced = record("t1", "a", Outcome::Pass, 30);
        priced.usage = Some(crate::store::UsageRecord {
            input_tokens: 1,
            output_tokens: 1,
            cache_read_tokens: 0,
            cache_write_tokens: 0,
            model_calls: 1,
            cost_usd: Some(0.5),
            cost_estimated: true,
        });
        let mut flagged = record("t2", "a", Outcome::Invalid, 40);
        flagged.flags = vec!["x.py:1: something".into()];
        let records = [
            record("t1", "b", Outcome::Fail, 10),
            record("t1", "a", Outcome::Fail, 20),
            priced,
            flagged,
            record("t2", "a", Outcome::InfraError, 50),
        ];
        let mut tally = Tally::default();
        for record in &records {
            tally.add(record);
        }
        let summaries = tally.summaries(&["a".into(), "c".into()]);
        let agents: Vec<&str> = summaries.iter().map(|s| s.agent.as_str()).collect();
        assert_eq!(agents, ["a", "c", "b"]);
        let a = &summaries[0];
        assert_eq!(
            (
                a.trials,
                a.scored,
                a.passed,
                a.invalid,
                a.flagged,
                a.infra_errors
            ),
            (4, 3, 1, 1, 1, 1)
        );
        assert_eq!((a.claimed, a.false_claims), (3, 2));
        // t1 passed 1 of 2, t2 0 of 1: the mean of the per-task fractions.
        assert_eq!(a.pass_rate, Some(0.25));
        assert_eq!((a.mean_cost_usd, a.cost_estimated), (Some(0.5), true));
        assert_eq!(a.median_duration_ms, Some(35));
        assert_eq!((summaries[1].trials, summaries[1].pass_rate), (0, None));
    }
}
