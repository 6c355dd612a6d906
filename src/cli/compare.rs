//! `compare`, `plan` and `run --baseline`: paired comparison, the noise-aware gate, the planner.

use std::fmt::Write as _;
use std::path::Path;

use super::{CliError, CompareArgs, EXIT_CHECK_FAILED, EXIT_OK, GateArgs, PlanArgs, print_stdout};
use crate::stats::{self, Comparison, Verdict};
use crate::store::{self, StoredRun};

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
    let base = stats::outcomes_of(&base_run.trials, &base_agent);
    let candidate = stats::outcomes_of(&candidate_run.trials, &candidate_agent);
    let Some(comparison) = stats::compare(&base, &candidate, args.gate.confidence, SEED) else {
        return Err(CliError::failed(format!(
            "'{base_agent}' and '{candidate_agent}' share no scored task: nothing to compare"
        )));
    };
    let (text, failed) = describe(
        &format!("'{base_agent}' ({})", base_run.path.display()),
        &format!("'{candidate_agent}' ({})", candidate_run.path.display()),
        &comparison,
        &args.gate,
    );
    print_stdout(&text);
    Ok(if failed { EXIT_CHECK_FAILED } else { EXIT_OK })
}

/// Compares every agent of `current` with the same agent in `baseline` (or the two runs' only
/// agents). Returns the comparisons as text and whether the gate failed.
pub(super) fn against_baseline(
    baseline: &StoredRun,
    current: &StoredRun,
    gate: &GateArgs,
) -> Result<(String, bool), CliError> {
    check_levels(gate)?;
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
    let mut failed = false;
    let mut text = String::new();
    for (base_agent, agent) in pairs {
        let base = stats::outcomes_of(&baseline.trials, &base_agent);
        let now = stats::outcomes_of(&current.trials, &agent);
        let Some(comparison) = stats::compare(&base, &now, gate.confidence, SEED) else {
            let _ = writeln!(
                text,
                "'{agent}': no scored task in common with the baseline"
            );
            // A gate that compared nothing must not pass.
            failed |= gate.gate;
            continue;
        };
        let (described, this_failed) = describe(
            &format!("baseline '{base_agent}'"),
            &format!("'{agent}'"),
            &comparison,
            gate,
        );
        let _ = writeln!(text, "{described}");
        failed |= this_failed;
    }
    Ok((text, failed))
}

fn pct(v: f64) -> String {
    format!("{:.1}%", v * 100.0)
}

fn pts(v: f64) -> String {
    format!("{:+.1}", v * 100.0)
}

fn list(tasks: &[String]) -> String {
    if tasks.is_empty() {
        "-".into()
    } else {
        tasks.join(", ")
    }
}

/// The human account of a comparison, and whether the gate (when on) failed.
fn describe(base: &str, candidate: &str, cmp: &Comparison, gate: &GateArgs) -> (String, bool) {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "candidate {candidate} vs baseline {base}: {} shared tasks",
        cmp.tasks
    );
    let flips = &cmp.flips;
    let _ = writeln!(
        out,
        "  fixed  (fail -> pass) {:>3}: {}",
        flips.fixed.len(),
        list(&flips.fixed)
    );
    let _ = writeln!(
        out,
        "  broken (pass -> fail) {:>3}: {}",
        flips.broken.len(),
        list(&flips.broken)
    );
    let _ = writeln!(
        out,
        "  both pass {}, both fail {}",
        flips.both_pass.len(),
        flips.both_fail.len()
    );
    let _ = writeln!(
        out,
        "pass rate: baseline {}, candidate {}, difference {} points ({:.0}% CI {} to {})",
        pct(cmp.base_rate),
        pct(cmp.candidate_rate),
        pts(cmp.diff),
        cmp.confidence * 100.0,
        pts(cmp.interval.lo),
        pts(cmp.interval.hi)
    );
    let _ = writeln!(out, "test: {}, p = {:.4}", cmp.test, cmp.p_value);
    let verdict = match cmp.verdict {
        Verdict::Regressed => "regressed".to_owned(),
        Verdict::Improved => "improved".to_owned(),
        Verdict::Inconclusive => format!(
            "inconclusive (with {} tasks, the smallest difference this comparison can reliably detect is {:.1} points)",
            cmp.tasks,
            cmp.mde * 100.0
        ),
    };
    let _ = writeln!(out, "verdict: {verdict}");
    let mut failed = false;
    if gate.gate {
        let (gate_failed, reason) = stats::gate(cmp, gate.max_drop);
        failed = gate_failed;
        let _ = writeln!(
            out,
            "gate: {}: {reason}",
            if failed { "FAILED" } else { "passed" }
        );
    }
    (out, failed)
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
