//! `compare` and `run --baseline`: paired comparison and the noise-aware gate.

mod render;

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use super::args::{CompareArgs, CompareFormat, GateArgs};
use super::exit::Exit;
use super::{CliError, print_stdout, read_run_dir};
use crate::stats::{self, Comparison};
use crate::store::{Outcome, StoredRun};

/// Seed of every resampling, so the same runs always give the same verdict.
const SEED: u64 = 0x64_656c_7461;

pub(super) fn agents_of(run: &StoredRun) -> Vec<String> {
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
pub(super) fn pick_agent(run: &StoredRun, wanted: Option<&str>) -> Result<String, CliError> {
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
    /// Trials whose diff has the shape of an attack on the judge, of all the agent's trials.
    flagged: usize,
    trials: usize,
}

impl Side {
    fn new(run: &StoredRun, agent: &str, other: &StoredRun, confidence: f64) -> Self {
        let tasks = tasks_of(other);
        Self {
            run: run.path.display().to_string(),
            agent: agent.to_owned(),
            false_claims: if crate::report::makes_claims(run.manifest.agents.get(agent)) {
                crate::report::false_claims(&run.trials, agent, confidence)
            } else {
                crate::report::FalseClaims::of(0, 0, confidence)
            },
            flagged: run
                .trials
                .iter()
                .filter(|r| r.agent == agent && !r.flags.is_empty())
                .count(),
            trials: run.trials.iter().filter(|r| r.agent == agent).count(),
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
    /// No regression found, but the verdict is inconclusive and --require-power asks for one.
    Inconclusive,
}

impl Decision {
    fn exit(self) -> Exit {
        match self {
            Self::Failed => Exit::VerdictFailed,
            Self::Undecided => Exit::Unscored,
            Self::Inconclusive => Exit::Inconclusive,
            Self::Off | Self::Passed => Exit::Ok,
        }
    }
}

#[derive(Debug, Serialize)]
struct Gate {
    decision: Decision,
    reason: Option<String>,
    /// The rules the candidate broke, by flag: `max_broken`, `max_drop_across_tasks`,
    /// `max_drop_within_tasks`.
    failed_rules: Vec<&'static str>,
    max_drop: f64,
    max_broken: usize,
    require_power: bool,
}

/// A comparison and the gate's decision on it: what every output format shows.
#[derive(Debug, Serialize)]
struct Compared {
    baseline: Side,
    candidate: Side,
    comparison: Comparison,
    gate: Gate,
    flaky: FlakyPart,
}

/// The tasks either run's suite lock marks flaky, and whether they were counted.
#[derive(Debug, Serialize)]
struct FlakyPart {
    tasks: std::collections::BTreeMap<String, crate::suite::FlakyTask>,
    counted: bool,
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
        } else if args.require_power && cmp.verdict == stats::Finding::Inconclusive {
            let needs = cmp
                .to_decide
                .as_ref()
                .map(|plan| format!("; {}", plan.text()))
                .unwrap_or_default();
            (
                Decision::Inconclusive,
                format!(
                    "{reason}; the verdict is inconclusive and --require-power asks for a decided one{needs}"
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
        failed_rules: if decision == Decision::Failed {
            stats::failed_rules(cmp, args.max_drop)
        } else {
            Vec::new()
        },
        max_drop: args.max_drop,
        max_broken: args.max_broken,
        require_power: args.require_power,
    }
}

/// Compares `base_agent` of `base_run` with `candidate_agent` of `candidate_run`; `None` when
/// they share no scored task.
fn compared(
    (base_run, base_agent): (&StoredRun, &str),
    (candidate_run, candidate_agent): (&StoredRun, &str),
    gate: &GateArgs,
    max_broken: Option<usize>,
) -> Option<Compared> {
    let mut tasks = crate::report::flaky_tasks(base_run);
    tasks.extend(crate::report::flaky_tasks(candidate_run));
    let flaky = FlakyPart {
        tasks,
        counted: gate.include_flaky,
    };
    let kept = |run: &StoredRun, agent: &str| {
        let mut outcomes = stats::outcomes_of(&run.trials, agent);
        if !flaky.counted {
            outcomes.retain(|o| !flaky.tasks.contains_key(&o.task));
        }
        outcomes
    };
    let base = kept(base_run, base_agent);
    let candidate = kept(candidate_run, candidate_agent);
    let comparison = stats::compare(&base, &candidate, gate.confidence, max_broken, SEED)?;
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
        flaky,
    })
}

pub(super) fn compare(args: CompareArgs) -> Result<Exit, CliError> {
    check_levels(&args.gate)?;
    let (base_run, base_agent, candidate_run, candidate_agent) = match &args.targets[..] {
        [run_dir, base, candidate] => {
            let run = read_run_dir(Path::new(run_dir))?;
            let base = pick_agent(&run, Some(base))?;
            let candidate = pick_agent(&run, Some(candidate))?;
            (run.clone(), base, run, candidate)
        }
        [base, candidate] => {
            let (base_run, candidate_run) = (
                read_run_dir(Path::new(base))?,
                read_run_dir(Path::new(candidate))?,
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
        Some(args.gate.max_broken),
    ) else {
        // Both planned tasks in common (checked above), so none of them was scored on both
        // sides.
        return Err(CliError::unscored(format!(
            "'{base_agent}' and '{candidate_agent}' share no scored task: nothing to compare"
        ))
        .hint("their shared tasks' trials could not be scored (infra_error); see trials.jsonl"));
    };
    let text = match args.format {
        CompareFormat::Text => render::text(
            &format!("'{base_agent}' ({})", outcome.baseline.run),
            &format!("'{candidate_agent}' ({})", outcome.candidate.run),
            &outcome,
        ),
        CompareFormat::Json => serde_json::to_string_pretty(&outcome).unwrap_or_default() + "\n",
        CompareFormat::Markdown => render::markdown(&outcome),
    };
    print_stdout(&text);
    Ok(outcome.gate.decision.exit())
}

/// The comparison of a run in rounds, without the fixed-sample gate (its p-values do not hold
/// under optional stopping; the sequential gate decides): `None` when nothing is shared.
pub(super) fn plain_text(
    (base_run, base_agent): (&StoredRun, &str),
    (run, agent): (&StoredRun, &str),
    same_run: bool,
    confidence: f64,
    include_flaky: bool,
) -> Option<String> {
    let gate = GateArgs::report_only(confidence, include_flaky);
    // Rounds are judged by the sequential gate alone.
    let outcome = compared((base_run, base_agent), (run, agent), &gate, None)?;
    let base_label = if same_run {
        format!("'{base_agent}' (this run)")
    } else {
        format!("'{base_agent}' ({})", outcome.baseline.run)
    };
    Some(render::text(
        &base_label,
        &format!("'{agent}' (this run)"),
        &outcome,
    ))
}

/// Compares every agent of `current` with the same agent in `baseline` (or the two runs' only
/// agents). Returns the comparisons as text and the gate's outcome: ok, regressed, or undecided
/// (unscored trials).
pub(super) fn against_baseline(
    baseline: &StoredRun,
    current: &StoredRun,
    gate: &GateArgs,
) -> Result<(String, Exit), CliError> {
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
    let mut exit = Exit::Ok;
    let mut text = String::new();
    for (base_agent, agent) in pairs {
        let Some(outcome) = compared(
            (baseline, &base_agent),
            (current, &agent),
            gate,
            Some(gate.max_broken),
        ) else {
            let _ = writeln!(
                text,
                "'{agent}': no scored task in common with the baseline"
            );
            // A gate that compared nothing must not pass.
            if gate.gate {
                exit = exit.worse(Exit::Unscored);
            }
            continue;
        };
        let _ = writeln!(
            text,
            "{}",
            render::text(
                &format!("'{base_agent}' ({})", outcome.baseline.run),
                &format!("'{agent}' (this run)"),
                &outcome,
            )
        );
        exit = exit.worse(outcome.gate.decision.exit());
    }
    Ok((text, exit))
}
