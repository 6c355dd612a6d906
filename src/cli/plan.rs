//! `deltabench plan`: how many tasks x trials a comparison needs, from a run's per-task variance.

use std::fmt::Write as _;

use super::args::PlanArgs;
use super::compare::{agents_of, pick_agent};
use super::exit::Exit;
use super::{CliError, print_stdout, read_run_dir};
use crate::stats;

pub(super) fn plan(args: PlanArgs) -> Result<Exit, CliError> {
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
    let run = read_run_dir(&args.run_dir)?;
    let agents = match &args.agent {
        Some(agent) => vec![pick_agent(&run, Some(agent))?],
        None => agents_of(&run),
    };
    let mut outcomes = Vec::new();
    for agent in &agents {
        outcomes.extend(stats::outcomes_of(&run.trials, agent));
    }
    if outcomes.is_empty() {
        return Err(CliError::unscored(
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
    Ok(Exit::Ok)
}
