//! `compare`, `plan` and `run --baseline`: paired comparison, the noise-aware gate, the planner.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use super::{
    CliError, CompareArgs, CompareFormat, EXIT_CHECK_FAILED, EXIT_OK, EXIT_UNSCORED, GateArgs,
    PlanArgs, print_stdout,
};
use crate::stats::{self, Comparison, TaskComparison, Verdict};
use crate::store::{self, Outcome, StoredRun};

/// Seed of every resampling, so the same runs always give the same verdict.
const SEED: u64 = 0x64_656c_7461;

/// Reads a run directory named on the command line; an unreadable one is a usage error.
pub(super) fn read_run_arg(path: &Path) -> Result<StoredRun, CliError> {
    store::read_run(path).map_err(|e| {
        CliError::usage(e.to_string()).hint(Some(format!(
            "{} should be a run directory written by `deltabench run`",
            path.display()
        )))
    })
}

fn agents_of(run: &StoredRun) -> Vec<String> {
    let mut agents: Vec<String> = run.manifest.agents.keys().cloned().collect();
    for record in &run.trials {
        if !agents.contains(&record.agent) {
            agents.push(record.agent.clone());
        }
    }
    agents
}

/// The tasks a run planned or holds records of.
fn tasks_of(run: &StoredRun) -> BTreeSet<&str> {
    run.manifest
        .tasks
        .iter()
        .map(String::as_str)
        .chain(run.trials.iter().map(|r| r.task.as_str()))
        .collect()
}

/// The one agent of `run` to compare: `wanted`, or the run's only agent.
fn pick_agent(run: &StoredRun, wanted: Option<&str>) -> Result<String, CliError> {
    let agents = agents_of(run);
    match wanted {
        Some(name) if agents.iter().any(|a| a == name) => Ok(name.to_owned()),
        Some(name) => Err(CliError::usage(format!(
            "{} has no agent '{name}'. Its agents: {}",
            run.path.display(),
            agents.join(", ")
        ))),
        None if agents.len() == 1 => Ok(agents[0].clone()),
        None => Err(CliError::usage(format!(
            "{} holds several agents ({}); choose one with --agent",
            run.path.display(),
            agents.join(", ")
        ))),
    }
}

/// Runs of different suites, or of one suite with no task in common, have nothing to compare:
/// a usage error, not a verdict.
fn check_comparable(base: &StoredRun, candidate: &StoredRun) -> Result<(), CliError> {
    let (a, b) = (&base.manifest.suite, &candidate.manifest.suite);
    if a != b {
        return Err(CliError::usage(format!(
            "{} is a run of suite '{a}' and {} of suite '{b}': only runs of the same suite can be compared",
            base.path.display(),
            candidate.path.display()
        )));
    }
    if tasks_of(base).is_disjoint(&tasks_of(candidate)) {
        return Err(CliError::usage(format!(
            "{} and {} share no task (were they run with different --task or --tag?)",
            base.path.display(),
            candidate.path.display()
        )));
    }
    Ok(())
}

fn check_levels(gate: &GateArgs) -> Result<(), CliError> {
    if !(0.5..1.0).contains(&gate.confidence) {
        return Err(CliError::usage(format!(
            "--confidence {} is out of range: use a level in [0.5, 1), e.g. 0.95",
            gate.confidence
        )));
    }
    if !(0.0..=1.0).contains(&gate.max_drop) {
        return Err(CliError::usage(format!(
            "--max-drop {} is out of range: use a fraction in [0, 1], e.g. 0.02 for two points",
            gate.max_drop
        )));
    }
    Ok(())
}

/// One side of a comparison: which agent of which run.
#[derive(Debug, Serialize)]
struct Side {
    run: String,
    agent: String,
    /// `infra_error` trials of this agent on tasks the other side planned: left out.
    unscored_trials: usize,
    /// Trials the agent ended `completed` that did not pass (claimed vs proven).
    false_claims: crate::report::FalseClaims,
}

impl Side {
    fn new(run: &StoredRun, agent: &str, other: &StoredRun, confidence: f64) -> Self {
        let tasks = tasks_of(other);
        Self {
            run: run.path.display().to_string(),
            agent: agent.to_owned(),
            false_claims: crate::report::false_claims(&run.trials, agent, confidence),
            unscored_trials: run
                .trials
                .iter()
                .filter(|r| {
                    r.agent == agent
                        && r.outcome == Outcome::InfraError
                        && tasks.contains(r.task.as_str())
                })
                .count(),
        }
    }
}

/// What the gate decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum Decision {
    /// No --gate.
    Off,
    Passed,
    Failed,
    /// No regression among the scored trials, but some trials could not be scored.
    Undecided,
}

impl Decision {
    fn exit_code(self) -> u8 {
        match self {
            Self::Failed => EXIT_CHECK_FAILED,
            Self::Undecided => EXIT_UNSCORED,
            Self::Off | Self::Passed => EXIT_OK,
        }
    }
}

#[derive(Debug, Serialize)]
struct Gate {
    decision: Decision,
    reason: Option<String>,
    max_drop: f64,
    max_broken: Option<usize>,
}

/// A comparison and the gate's decision on it: what every output format shows.
#[derive(Debug, Serialize)]
struct Compared {
    baseline: Side,
    candidate: Side,
    comparison: Comparison,
    gate: Gate,
}

fn decide(cmp: &Comparison, args: &GateArgs, unscored: usize) -> Gate {
    let (decision, reason) = if args.gate {
        let (failed, reason) = stats::gate(cmp, args.max_drop);
        if failed {
            (Decision::Failed, reason)
        } else if unscored > 0 {
            (
                Decision::Undecided,
                format!(
                    "{reason}; but {unscored} trial(s) could not be scored (infra_error), and they could change that"
                ),
            )
        } else {
            (Decision::Passed, reason)
        }
    } else {
        (Decision::Off, String::new())
    };
    Gate {
        decision,
        reason: (decision != Decision::Off).then_some(reason),
        max_drop: args.max_drop,
        max_broken: args.max_broken,
    }
}

/// Compares `base_agent` of `base_run` with `candidate_agent` of `candidate_run`; `None` when
/// they share no scored task.
fn compared(
    (base_run, base_agent): (&StoredRun, &str),
    (candidate_run, candidate_agent): (&StoredRun, &str),
    gate: &GateArgs,
) -> Option<Compared> {
    let base = stats::outcomes_of(&base_run.trials, base_agent);
    let candidate = stats::outcomes_of(&candidate_run.trials, candidate_agent);
    let comparison = stats::compare(&base, &candidate, gate.confidence, gate.max_broken, SEED)?;
    let baseline = Side::new(base_run, base_agent, candidate_run, gate.confidence);
    let candidate = Side::new(candidate_run, candidate_agent, base_run, gate.confidence);
    let gate = decide(
        &comparison,
        gate,
        baseline.unscored_trials + candidate.unscored_trials,
    );
    Some(Compared {
        baseline,
        candidate,
        comparison,
        gate,
    })
}

pub(super) fn compare(args: CompareArgs) -> Result<u8, CliError> {
    check_levels(&args.gate)?;
    let (base_run, base_agent, candidate_run, candidate_agent) = match &args.targets[..] {
        [run_dir, base, candidate] => {
            let run = read_run_arg(Path::new(run_dir))?;
            let base = pick_agent(&run, Some(base))?;
            let candidate = pick_agent(&run, Some(candidate))?;
            (run.clone(), base, run, candidate)
        }
        [base, candidate] => {
            let (base_run, candidate_run) = (
                read_run_arg(Path::new(base))?,
                read_run_arg(Path::new(candidate))?,
            );
            check_comparable(&base_run, &candidate_run)?;
            let base_agent = pick_agent(&base_run, args.agent.as_deref())?;
            let candidate_agent = pick_agent(&candidate_run, args.agent.as_deref())?;
            (base_run, base_agent, candidate_run, candidate_agent)
        }
        _ => {
            return Err(CliError::usage(
                "compare takes BASE CANDIDATE, or RUN_DIR BASE_AGENT CANDIDATE_AGENT",
            ));
        }
    };
    let Some(outcome) = compared(
        (&base_run, &base_agent),
        (&candidate_run, &candidate_agent),
        &args.gate,
    ) else {
        // Both planned tasks in common (checked above), so none of them was scored on both
        // sides.
        return Err(CliError {
            code: EXIT_UNSCORED,
            message: format!(
                "'{base_agent}' and '{candidate_agent}' share no scored task: nothing to compare"
            ),
            snippet: None,
            hint: Some(
                "their shared tasks' trials could not be scored (infra_error); see trials.jsonl"
                    .into(),
            ),
        });
    };
    let text = match args.format {
        CompareFormat::Text => text(
            &format!("'{base_agent}' ({})", outcome.baseline.run),
            &format!("'{candidate_agent}' ({})", outcome.candidate.run),
            &outcome,
        ),
        CompareFormat::Json => serde_json::to_string_pretty(&outcome).unwrap_or_default() + "\n",
        CompareFormat::Markdown => markdown(&outcome),
    };
    print_stdout(&text);
    Ok(outcome.gate.decision.exit_code())
}

/// The worse of two exit codes: a regression over an undecided gate over a pass.
fn worse(a: u8, b: u8) -> u8 {
    let rank = |code| match code {
        EXIT_CHECK_FAILED => 2,
        EXIT_UNSCORED => 1,
        _ => 0,
    };
    if rank(b) > rank(a) { b } else { a }
}

/// Compares every agent of `current` with the same agent in `baseline` (or the two runs' only
/// agents). Returns the comparisons as text and the gate's exit code: 0, 1 (regressed) or 3
/// (undecided: unscored trials).
pub(super) fn against_baseline(
    baseline: &StoredRun,
    current: &StoredRun,
    gate: &GateArgs,
) -> Result<(String, u8), CliError> {
    check_levels(gate)?;
    check_comparable(baseline, current)?;
    let (base_agents, current_agents) = (agents_of(baseline), agents_of(current));
    let pairs: Vec<(String, String)> = if base_agents.len() == 1 && current_agents.len() == 1 {
        vec![(base_agents[0].clone(), current_agents[0].clone())]
    } else {
        current_agents
            .iter()
            .filter(|a| base_agents.contains(a))
            .map(|a| (a.clone(), a.clone()))
            .collect()
    };
    if pairs.is_empty() {
        return Err(CliError::usage(format!(
            "the baseline {} has none of this run's agents ({})",
            baseline.path.display(),
            current_agents.join(", ")
        )));
    }
    let mut code = EXIT_OK;
    let mut text = String::new();
    for (base_agent, agent) in pairs {
        let Some(outcome) = compared((baseline, &base_agent), (current, &agent), gate) else {
            let _ = writeln!(
                text,
                "'{agent}': no scored task in common with the baseline"
            );
            // A gate that compared nothing must not pass.
            if gate.gate {
                code = worse(code, EXIT_UNSCORED);
            }
            continue;
        };
        let _ = writeln!(
            text,
            "{}",
            self::text(
                &format!("'{base_agent}' ({})", outcome.baseline.run),
                &format!("'{agent}' (this run)"),
                &outcome,
            )
        );
        code = worse(code, outcome.gate.decision.exit_code());
    }
    Ok((text, code))
}

fn pct(v: f64) -> String {
    format!("{:.1}%", v * 100.0)
}

/// Signed points; never "-0.0".
fn pts(v: f64) -> String {
    format!("{:+.1}", v * 100.0 + 0.0)
}

/// 95, 80, 97.5.
fn level(confidence: f64) -> String {
    format!("{}", (confidence * 1000.0).round() / 10.0)
}

/// `46.7% (95% CI 11.0% to 86.1%)`.
fn rate_ci(rate: f64, interval: &stats::Interval, level: &str) -> String {
    format!(
        "{} ({level}% CI {} to {})",
        pct(rate),
        pct(interval.lo),
        pct(interval.hi)
    )
}

/// `t1 5/5 -> 0/5, t2 5/5 -> 2/5`, or `-`.
fn counts(cmp: &Comparison, tasks: &[String]) -> String {
    if tasks.is_empty() {
        return "-".into();
    }
    tasks
        .iter()
        .filter_map(|task| cmp.task(task))
        .map(TaskComparison::counts)
        .collect::<Vec<_>>()
        .join(", ")
}

/// `5 trials per task`, or `1-5 trials per task`.
fn trials_per_task(cmp: &Comparison) -> String {
    let all = cmp
        .per_task
        .iter()
        .flat_map(|t| [t.base_trials, t.candidate_trials]);
    let (min, max) = all.fold((usize::MAX, 0), |(lo, hi), n| (lo.min(n), hi.max(n)));
    match (min, max) {
        (1, 1) => "1 trial per task".into(),
        (a, b) if a == b => format!("{a} trials per task"),
        (a, b) => format!("{a}-{b} trials per task"),
    }
}

/// The test across tasks in a sentence, and, when it cannot decide on this many tasks, why.
fn across(cmp: &Comparison) -> (String, Option<String>) {
    let significant = cmp.p_value < 1.0 - cmp.confidence;
    let sentence = format!(
        "{} points ({}% CI {} to {}); {} ({}), p = {:.4}: {}",
        pts(cmp.diff),
        level(cmp.confidence),
        pts(cmp.interval.lo),
        pts(cmp.interval.hi),
        cmp.test,
        if cmp.exact {
            "exact"
        } else {
            "10000 seeded resamples"
        },
        cmp.p_value,
        if significant {
            "significant"
        } else {
            "not significant"
        }
    );
    let note = cmp.powerless.then(|| {
        format!(
            "with {} tasks this test cannot reach {}% confidence (its smallest p is {:.4}): the interval only spans the per-task differences and 0",
            cmp.tasks,
            level(cmp.confidence),
            cmp.min_p
        )
    });
    (sentence, note)
}

/// What the verdict rests on, for its line.
fn verdict_text(cmp: &Comparison) -> String {
    let within = |tasks: &[String]| format!("within tasks: {}", tasks.join(", "));
    let mut why = Vec::new();
    match cmp.verdict {
        Verdict::Regressed => {
            if cmp.paired_drop() {
                why.push(format!("across tasks, {}", stats::p_text(cmp.p_value)));
            }
            if !cmp.dropped.is_empty() {
                why.push(within(&cmp.dropped));
            }
            if cmp.too_many_broken() {
                why.push(format!(
                    "{} task(s) broken outright, more than --max-broken {}",
                    cmp.broken_outright.len(),
                    cmp.max_broken.unwrap_or_default()
                ));
            }
            if !cmp.paired_drop() {
                why.push("the test across tasks alone does not show it".into());
            }
            format!("regressed ({})", why.join("; "))
        }
        Verdict::Improved => {
            if cmp.paired_gain() {
                why.push(format!("across tasks, {}", stats::p_text(cmp.p_value)));
            }
            if !cmp.gained.is_empty() {
                why.push(within(&cmp.gained));
            }
            format!("improved ({})", why.join("; "))
        }
        Verdict::Inconclusive => format!(
            "inconclusive (with {} tasks, the smallest difference this comparison can reliably detect is {:.1} points)",
            cmp.tasks,
            cmp.mde * 100.0
        ),
    }
}

/// The within-task tests in a line: the significant tasks, or the closest call.
fn within_summary(cmp: &Comparison) -> String {
    let significant: Vec<&TaskComparison> = cmp
        .per_task
        .iter()
        .filter(|t| cmp.dropped.contains(&t.task) || cmp.gained.contains(&t.task))
        .collect();
    let head = format!(
        "Fisher exact on each task's trials, Holm-corrected over {} tasks",
        cmp.tasks
    );
    if !significant.is_empty() {
        return format!(
            "{head}: {} significant ({})",
            significant.len(),
            significant
                .iter()
                .map(|t| format!(
                    "{}, p = {:.4}, adjusted {:.4}",
                    t.counts(),
                    t.p_value,
                    t.adjusted_p
                ))
                .collect::<Vec<_>>()
                .join("; ")
        );
    }
    let closest = cmp
        .per_task
        .iter()
        .filter(|t| t.diff() != 0.0)
        .min_by(|a, b| a.adjusted_p.total_cmp(&b.adjusted_p));
    match closest {
        Some(t) => format!(
            "{head}: none significant (closest {}, adjusted p = {:.4})",
            t.counts(),
            t.adjusted_p
        ),
        None => format!("{head}: no task's pass fraction changed"),
    }
}

fn unscored_text(outcome: &Compared) -> Option<String> {
    let (b, c) = (
        outcome.baseline.unscored_trials,
        outcome.candidate.unscored_trials,
    );
    (b + c > 0).then(|| {
        format!(
            "{} trial(s) could not be scored (infra_error; baseline {b}, candidate {c}) and are left out",
            b + c
        )
    })
}

fn gate_label(decision: Decision) -> &'static str {
    match decision {
        Decision::Failed => "FAILED",
        Decision::Undecided => "UNDECIDED",
        Decision::Passed | Decision::Off => "passed",
    }
}

/// `2/4 50.0%`, or `-` when the agent never ended `completed`.
fn claims(claims: &crate::report::FalseClaims) -> String {
    match claims.rate {
        Some(rate) => format!(
            "{}/{} {:.1}%",
            claims.false_claims,
            claims.claimed,
            rate * 100.0
        ),
        None => "-".to_owned(),
    }
}

/// The human account of a comparison.
fn text(base: &str, candidate: &str, outcome: &Compared) -> String {
    let cmp = &outcome.comparison;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "candidate {candidate} vs baseline {base}: {} shared tasks, {}",
        cmp.tasks,
        trials_per_task(cmp)
    );
    let flips = &cmp.flips;
    let _ = writeln!(
        out,
        "  fixed  (fail -> pass) {:>3}: {}",
        flips.fixed.len(),
        counts(cmp, &flips.fixed)
    );
    let _ = writeln!(
        out,
        "  broken (pass -> fail) {:>3}: {}",
        flips.broken.len(),
        counts(cmp, &flips.broken)
    );
    let _ = writeln!(
        out,
        "  both pass {}, both fail {}",
        flips.both_pass.len(),
        flips.both_fail.len()
    );
    if let Some(max) = cmp.max_broken {
        let _ = writeln!(
            out,
            "  always -> never passing {:>3}: {} (--max-broken {max})",
            cmp.broken_outright.len(),
            counts(cmp, &cmp.broken_outright)
        );
    }
    let level = level(cmp.confidence);
    let _ = writeln!(
        out,
        "pass rate: baseline {}, candidate {}",
        rate_ci(cmp.base_rate, &cmp.base_interval, &level),
        rate_ci(cmp.candidate_rate, &cmp.candidate_interval, &level),
    );
    let _ = writeln!(
        out,
        "false claims (ended `completed`, did not pass): baseline {}, candidate {}{}",
        claims(&outcome.baseline.false_claims),
        claims(&outcome.candidate.false_claims),
        match (
            outcome.baseline.false_claims.rate,
            outcome.candidate.false_claims.rate
        ) {
            (Some(base), Some(cand)) => format!(" ({:+.1} points)", (cand - base) * 100.0),
            _ => String::new(),
        }
    );
    let (sentence, note) = across(cmp);
    let _ = writeln!(out, "across tasks: {sentence}");
    if let Some(note) = note {
        let _ = writeln!(out, "  {note}");
    }
    if cmp.within_tested() {
        let _ = writeln!(out, "within tasks: {}", within_summary(cmp));
    }
    if let Some(unscored) = unscored_text(outcome) {
        let _ = writeln!(out, "unscored: {unscored}");
    }
    let _ = writeln!(out, "verdict: {}", verdict_text(cmp));
    if let Some(reason) = &outcome.gate.reason {
        let _ = writeln!(out, "gate: {}: {reason}", gate_label(outcome.gate.decision));
    }
    out
}

/// The comparison for a CI summary: rates, changed tasks as a table, verdict, gate.
fn markdown(outcome: &Compared) -> String {
    let cmp = &outcome.comparison;
    let (base, candidate) = (&outcome.baseline, &outcome.candidate);
    let level = level(cmp.confidence);
    let mut out = format!(
        "### Candidate `{}` vs baseline `{}`\n\n| | baseline | candidate |\n|---|---|---|\n",
        candidate.agent, base.agent
    );
    let _ = writeln!(out, "| run | `{}` | `{}` |", base.run, candidate.run);
    let _ = writeln!(
        out,
        "| pass rate | {} | {} |",
        rate_ci(cmp.base_rate, &cmp.base_interval, &level),
        rate_ci(cmp.candidate_rate, &cmp.candidate_interval, &level),
    );
    let _ = writeln!(
        out,
        "| unscored trials | {} | {} |",
        base.unscored_trials, candidate.unscored_trials
    );
    let (sentence, note) = across(cmp);
    let _ = write!(
        out,
        "\n**Across tasks** ({} shared tasks, {}): {sentence}.",
        cmp.tasks,
        trials_per_task(cmp)
    );
    if let Some(note) = note {
        let _ = write!(out, " {}{}.", note[..1].to_uppercase(), &note[1..]);
    }
    out.push('\n');
    let within = cmp.within_tested();
    if within {
        let _ = writeln!(out, "\n**Within tasks**: {}.", within_summary(cmp));
    }
    let changed: Vec<&TaskComparison> = cmp.per_task.iter().filter(|t| t.diff() != 0.0).collect();
    if changed.is_empty() {
        let _ = writeln!(out, "\nNo task's pass fraction changed.");
    } else {
        out.push_str(if within {
            "\n| task | baseline | candidate | change | p | adjusted p |\n|---|---|---|---|---|---|\n"
        } else {
            "\n| task | baseline | candidate | change |\n|---|---|---|---|\n"
        });
        for t in &changed {
            let change = if cmp.flips.broken.contains(&t.task) {
                "broken"
            } else if cmp.flips.fixed.contains(&t.task) {
                "fixed"
            } else if t.diff() < 0.0 {
                "worse"
            } else {
                "better"
            };
            let _ = write!(
                out,
                "| {} | {}/{} | {}/{} | {change} |",
                t.task, t.base_passed, t.base_trials, t.candidate_passed, t.candidate_trials
            );
            if within {
                let significant = t.adjusted_p < 1.0 - cmp.confidence;
                let _ = write!(
                    out,
                    " {:.4} | {} |",
                    t.p_value,
                    if significant {
                        format!("**{:.4}**", t.adjusted_p)
                    } else {
                        format!("{:.4}", t.adjusted_p)
                    }
                );
            }
            out.push('\n');
        }
        let _ = writeln!(
            out,
            "\n{} of {} tasks unchanged.",
            cmp.tasks - changed.len(),
            cmp.tasks
        );
    }
    let _ = writeln!(out, "\n**Verdict**: {}", verdict_text(cmp));
    if let Some(reason) = &outcome.gate.reason {
        let _ = writeln!(
            out,
            "\n**Gate**: {}: {reason}",
            gate_label(outcome.gate.decision)
        );
    }
    out
}

pub(super) fn plan_cmd(args: PlanArgs) -> Result<u8, CliError> {
    if !(0.0 < args.effect && args.effect <= 1.0) {
        return Err(CliError::usage(format!(
            "--effect {} is out of range: use a fraction in (0, 1], e.g. 0.05 for five points",
            args.effect
        )));
    }
    if !(0.5..1.0).contains(&args.power) || !(0.5..1.0).contains(&args.confidence) {
        return Err(CliError::usage(
            "--power and --confidence take levels in [0.5, 1), e.g. 0.8 and 0.95",
        ));
    }
    let run = read_run_arg(&args.run_dir)?;
    let agents = match &args.agent {
        Some(agent) => vec![pick_agent(&run, Some(agent))?],
        None => agents_of(&run),
    };
    let mut outcomes = Vec::new();
    for agent in &agents {
        outcomes.extend(stats::outcomes_of(&run.trials, agent));
    }
    if outcomes.is_empty() {
        return Err(CliError::failed(
            "the run has no scored trial to estimate variance from",
        ));
    }
    let rows = stats::plan(&outcomes, args.effect, args.power, args.confidence);
    let mut out = format!(
        "to detect a {:.1}-point difference in pass rate with {:.0}% power at {:.0}% confidence\n\
         (variance from {} task results of {}):\n\n  trials per task   tasks needed   total trials per agent\n",
        args.effect * 100.0,
        args.power * 100.0,
        args.confidence * 100.0,
        outcomes.len(),
        agents.join(", ")
    );
    for row in rows {
        let _ = writeln!(
            out,
            "  {:>15}   {:>12}   {:>22}",
            row.trials,
            row.tasks,
            row.trials * row.tasks
        );
    }
    print_stdout(&out);
    Ok(EXIT_OK)
}
