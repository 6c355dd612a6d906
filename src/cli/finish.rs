//! The end of `run`, `resume` and a run in rounds: the summary, the gate, the exit code.

use super::args::GateArgs;
use super::exit::Exit;
use super::{CliError, compare, print_stdout, read_run_dir};
use crate::{report, runner, store};

/// Prints the summary of a finished (or interrupted) run and returns its exit code.
pub(super) fn finish_run(
    plan: &runner::Plan,
    outcome: &runner::RunOutcome,
    tally: &report::Tally,
    baseline: Option<(&store::StoredRun, &GateArgs)>,
) -> Result<Exit, CliError> {
    let agents: Vec<String> = plan.agents.keys().cloned().collect();
    let summaries = tally.summaries(&agents);
    let width = super::terminal_width();
    print_stdout(&format!(
        "{}\nrun directory: {}\n",
        report::table(&summaries, width),
        outcome.run_dir.display()
    ));
    if let Some(note) = unconfined_note(plan) {
        eprintln!("{note}");
    }
    let unvalidated = plan.unvalidated();
    if !unvalidated.is_empty() {
        print_stdout(&report::wrap(
            &format!(
                "{} of {} task(s) {}: {}\n",
                unvalidated.len(),
                plan.tasks.len(),
                report::UNVALIDATED_NOTE,
                unvalidated.join(", ")
            ),
            width,
        ));
    }
    for leftover in &outcome.leftovers {
        eprintln!("warning: could not clean up {leftover}");
    }
    let gate = match baseline {
        Some((baseline, gate)) => {
            let current = read_run_dir(&outcome.run_dir)?;
            let (text, exit) = compare::against_baseline(baseline, &current, gate)?;
            print_stdout(&format!("\n{text}"));
            exit
        }
        None => Exit::Ok,
    };
    let infra = outcome.infra_errors;
    if outcome.interrupted {
        eprintln!(
            "interrupted: {} of {} trials recorded; `deltabench resume {}` runs the rest",
            outcome.trials,
            plan.trials.len(),
            crate::support::shell_quote(&outcome.run_dir.display().to_string())
        );
        return Ok(Exit::Interrupted);
    }
    // A regression among the scored trials is a verdict, whatever else could not be scored.
    if gate == Exit::VerdictFailed {
        return Ok(Exit::VerdictFailed);
    }
    if infra > 0 {
        eprintln!("{infra} trial(s) could not be scored (infra_error); see trials.jsonl");
        return Ok(Exit::Unscored);
    }
    Ok(gate)
}

/// `worktree` on the host confines nothing: said after every run that used it, so nobody reads
/// its passes as a sandbox's.
fn unconfined_note(plan: &runner::Plan) -> Option<String> {
    let unconfined = plan
        .tasks
        .iter()
        .map(|&i| &plan.suite.tasks[i])
        .filter(|t| t.environment.is_none() && t.isolation != crate::workspace::Isolation::Sandbox)
        .count();
    let tasks = match unconfined {
        0 => return None,
        1 => "1 task".to_owned(),
        n => format!("{n} tasks"),
    };
    Some(format!(
        "note: {tasks} ran unconfined (`worktree`): the agent could read and write anything this \
         user can; for agents you do not trust use `isolation: sandbox` (docs/threat-model.md)"
    ))
}
