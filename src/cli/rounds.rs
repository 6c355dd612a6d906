//! `run --until-decided` and `run --until-ci-width`: trials in rounds above the runner. Round r
//! plans r trials per task and agent and runs the ones the run directory does not hold yet
//! (round 1 through `runner::execute`, later ones through `runner::resume`), then reads the run
//! directory and applies the stopping rule. A killed run resumes at its last round.

use std::collections::BTreeSet;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

use super::exit::Exit;
use super::finish::finish_run;
use super::reporter::TerminalReporter;
use super::{CliError, ErrorKind, compare, read_run_dir};
use crate::runner;
use crate::stats::{self, SequentialDecision, SequentialSpec};
use crate::store::layout::ROUNDS;
use crate::store::rounds::{self, RoundMark, Sibling};
use crate::store::{self, RunRequest, Shard, StoppingRule, StoredRun};
use crate::suite::Suite;

/// Checks a run in rounds before anything runs: the margin, the cap, what is compared.
pub(super) fn check(
    request: &RunRequest,
    plan: &runner::Plan,
    baseline: Option<&StoredRun>,
    out: Option<&Path>,
) -> Result<(), CliError> {
    let Some(sequential) = &request.sequential else {
        return Ok(());
    };
    if let Some(shard) = request.shard {
        // The shards meet between rounds in the folder they share, each in shard-I-of-N.
        let name = store::shards::dir_name(shard);
        let Some(out) = out else {
            return Err(CliError::usage(format!(
                "--shard {shard} in rounds needs --out: the shards of a run in rounds meet between rounds in the folder they share"
            ))
            .hint(format!(
                "give every shard the same --shard auto --out DIR (each writes DIR/{name}), or --out DIR/{name}"
            )));
        };
        if out.file_name() != Some(std::ffi::OsStr::new(&name)) {
            return Err(CliError::usage(format!(
                "--shard {shard} in rounds writes {}, and its siblings cannot find it there: the shards of a run in rounds meet between rounds in the folder they share, each in its {name}",
                out.display()
            ))
            .hint(format!(
                "give --shard auto --out DIR (it writes DIR/{name}), or --out DIR/{name}"
            )));
        }
    }
    if sequential.max_trials == 0 {
        return Err(CliError::usage("--max-trials must be at least 1"));
    }
    match &sequential.rule {
        StoppingRule::Decided { margin, .. } => {
            if !(*margin > 0.0 && *margin < 1.0) {
                return Err(CliError::usage(format!(
                    "--margin {margin} is out of range: use a fraction in (0, 1), e.g. 0.1 for ten points"
                )));
            }
            match baseline {
                Some(baseline) if baseline.manifest.suite != plan.suite.name => {
                    return Err(CliError::usage(format!(
                        "{} is a run of suite '{}', and this run is of suite '{}': only runs of the same suite can be compared",
                        baseline.path.display(),
                        baseline.manifest.suite,
                        plan.suite.name
                    )));
                }
                Some(_) if plan.agents.len() == 1 => {}
                Some(_) => {
                    return Err(CliError::usage(format!(
                        "--until-decided with --baseline gates one agent, and this run has {}",
                        plan.agents.len()
                    ))
                    .hint("pick it with --agent NAME"));
                }
                None if plan.agents.len() == 2 => {}
                None => {
                    return Err(CliError::usage(format!(
                        "--until-decided compares two sides, and this run has {} agent(s) and no --baseline",
                        plan.agents.len()
                    ))
                    .hint("give --baseline RUN_DIR, or two agents (--agent BASE --agent CANDIDATE)"));
                }
            }
        }
        StoppingRule::CiWidth { width, .. } => {
            if !(*width > 0.0 && *width <= 1.0) {
                return Err(CliError::usage(format!(
                    "--until-ci-width {width} is out of range: use a width in (0, 1], e.g. 0.1"
                )));
            }
        }
    }
    Ok(())
}

/// Runs rounds from `round` (1 for a new run; the recorded one when resuming) until the rule
/// holds or the cap; prints the summary and the rule's outcome.
pub(super) async fn run_rounds(
    suite: Arc<Suite>,
    mut request: RunRequest,
    out: &Path,
    mut round: u32,
    note: Option<String>,
) -> Result<Exit, CliError> {
    let sequential = request.sequential.clone().expect("a run in rounds");
    let baseline = match &sequential.rule {
        StoppingRule::Decided {
            baseline: Some(path),
            ..
        } => Some(read_run_dir(path)?),
        _ => None,
    };
    let cap = cap(sequential.max_trials, baseline.as_ref(), out);
    let meeting = request
        .shard
        .map(|shard| Meeting::start(out, shard, round))
        .transpose()?;
    let mut note = note;
    loop {
        request.trials = round;
        let plan = runner::plan(suite.clone(), request.clone())?;
        let fresh = !out.join(crate::store::layout::MANIFEST).exists();
        let (outcome, reporter) = if fresh {
            let mut reporter =
                TerminalReporter::new(std::io::stderr().is_terminal()).noting(note.take());
            let outcome =
                runner::execute(&plan, out, &mut reporter, CancellationToken::new()).await?;
            (outcome, reporter)
        } else {
            let recorded = read_run_dir(out)?
                .trials
                .iter()
                .filter(|r| !r.interrupted)
                .count();
            let mut reporter = TerminalReporter::new(std::io::stderr().is_terminal())
                .resuming(recorded)
                .in_round(round);
            let outcome =
                runner::resume(&plan, out, &mut reporter, CancellationToken::new()).await?;
            (outcome, reporter)
        };
        let mut reporter = reporter;
        reporter.finish();
        if outcome.interrupted {
            return finish_run(&plan, &outcome, reporter.tally(), None);
        }
        let run = match &meeting {
            None => read_run_dir(out)?,
            Some(meeting) => match meeting.meet(round).await? {
                Some(run) => run,
                None => {
                    eprintln!(
                        "interrupted while waiting for the other shards after round {round}: this shard's trials are recorded; `deltabench resume {}` goes on from there",
                        out.display()
                    );
                    return Ok(Exit::Interrupted);
                }
            },
        };
        let verdict = judge(
            &run,
            baseline.as_ref(),
            &sequential.rule,
            round,
            sequential.include_flaky,
            &plan,
        )?;
        if verdict.decided || round >= cap {
            if let Some(meeting) = &meeting {
                meeting.decided(&verdict.status)?;
            }
            let exit = finish_run(&plan, &outcome, reporter.tally(), None)?;
            super::print_stdout(&verdict.text);
            return Ok(match verdict.exit {
                Exit::Ok => exit,
                other => other,
            });
        }
        eprintln!("round {round} of at most {cap}: {}", verdict.status);
        round += 1;
    }
}

/// A shard of a run in rounds and its siblings in the folder they share: it beats its heartbeat
/// into its `rounds.json` while it runs, and after each round waits until every sibling has
/// recorded that round, then judges every shard's trials of the rounds so far. Every shard reads
/// the same records, so every shard reaches the same decision at the same round.
struct Meeting {
    out: PathBuf,
    shard: Shard,
    mark: Arc<Mutex<RoundMark>>,
    beat: tokio::task::JoinHandle<()>,
}

impl Meeting {
    /// Starts beating; a resumed shard keeps the round its mark recorded.
    fn start(out: &Path, shard: Shard, round: u32) -> Result<Self, CliError> {
        std::fs::create_dir_all(out).map_err(|e| {
            CliError::with_cause(
                ErrorKind::Usage,
                format!("cannot create {}", out.display()),
                e,
            )
        })?;
        let recorded = rounds::read_mark(out).map_or(0, |mark| mark.round);
        let mark = Arc::new(Mutex::new(RoundMark::new(recorded.min(round))));
        let meeting = Self {
            out: out.to_owned(),
            shard,
            mark: mark.clone(),
            beat: tokio::spawn(beat(out.to_owned(), mark)),
        };
        meeting.update(|_| {})?;
        Ok(meeting)
    }

    fn update(&self, change: impl FnOnce(&mut RoundMark)) -> Result<(), CliError> {
        let mut mark = self.mark.lock().unwrap_or_else(|e| e.into_inner());
        change(&mut mark);
        mark.heartbeat = rounds::now();
        rounds::write_mark(&self.out, &mark).map_err(|e| {
            CliError::with_cause(
                ErrorKind::Harness,
                format!("cannot write {}", self.out.join(ROUNDS).display()),
                e,
            )
        })
    }

    fn decided(&self, outcome: &str) -> Result<(), CliError> {
        self.update(|mark| mark.decided = Some(outcome.to_owned()))
    }

    /// Records that this shard finished `round`, waits for its siblings to finish it too, and
    /// returns every shard's trials of rounds 1..=`round` as one run.
    /// `None` when interrupted (SIGINT, SIGTERM: a Ctrl-C, an `scancel`) while it waits.
    async fn meet(&self, round: u32) -> Result<Option<StoredRun>, CliError> {
        // The runner's handlers stay installed after a round, so the signals are caught here too.
        let signal = |kind| {
            tokio::signal::unix::signal(kind)
                .map_err(|e| CliError::with_cause(ErrorKind::Harness, "cannot handle signals", e))
        };
        let mut sigint = signal(tokio::signal::unix::SignalKind::interrupt())?;
        let mut sigterm = signal(tokio::signal::unix::SignalKind::terminate())?;
        // Listening before the mark says the round is done: a signal sent on seeing it is caught.
        self.update(|mark| mark.round = round)?;
        let parent = self.out.parent().unwrap_or(Path::new("."));
        let siblings: Vec<(Shard, PathBuf)> = (1..=self.shard.total)
            .filter(|&index| index != self.shard.index)
            .map(|index| {
                let shard = Shard {
                    index,
                    total: self.shard.total,
                };
                (shard, parent.join(store::shards::dir_name(shard)))
            })
            .collect();
        let mut said = String::new();
        loop {
            let now = rounds::now();
            let mut waiting = Vec::new();
            for (shard, dir) in &siblings {
                match rounds::sibling(rounds::read_mark(dir).as_ref(), round, now) {
                    Sibling::Ready => {}
                    Sibling::NotStarted => waiting.push(format!("{shard} (not started)")),
                    Sibling::Behind { round } => {
                        waiting.push(format!("{shard} (finished round {round})"))
                    }
                    Sibling::Gone {
                        round: at,
                        silent,
                        host,
                    } => {
                        return Err(CliError::unscored(format!(
                            "shard {shard} stopped after round {at} (no heartbeat for {silent} s, last on host '{host}'): round {round} cannot be judged without its trials"
                        ))
                        .hint(format!(
                            "resume it (`deltabench resume {}`, or `deltabench submit ENGINE --resume {}`); resume this shard too ({}): it goes on at round {round}",
                            dir.display(),
                            parent.display(),
                            self.out.display()
                        )));
                    }
                }
            }
            if waiting.is_empty() {
                break;
            }
            let now_said = waiting.join(", ");
            if now_said != said {
                eprintln!("round {round}: waiting for shard {now_said}");
                said = now_said;
            }
            tokio::select! {
                _ = tokio::time::sleep(std::time::Duration::from_millis(200)) => {}
                _ = sigint.recv() => return Ok(None),
                _ = sigterm.recv() => return Ok(None),
            }
        }
        let mut run = read_run_dir(&self.out)?;
        complete(self.shard, &run, round)?;
        for (shard, dir) in &siblings {
            let sibling = read_run_dir(dir)?;
            store::same_design(&run, &sibling).map_err(|e| {
                CliError::usage(format!(
                    "{} is not shard {shard} of this run in rounds: {e}",
                    dir.display()
                ))
            })?;
            if sibling.manifest.shard != Some(*shard) {
                return Err(CliError::usage(format!(
                    "{} holds shard {}, not {shard}",
                    dir.display(),
                    sibling
                        .manifest
                        .shard
                        .map_or("(unsharded)".to_owned(), |s| s.to_string())
                )));
            }
            complete(*shard, &sibling, round)?;
            run.trials.extend(sibling.trials);
        }
        // A sibling may already be a round ahead: judge the rounds all have recorded.
        run.trials.retain(|r| !r.interrupted && r.trial <= round);
        Ok(Some(run))
    }
}

/// Refuses a shard whose records lack a trial of its slice of rounds 1..=`round` (a mark
/// written ahead of its records, a record deleted): the rounds would judge fewer trials than the
/// plan's. (A record of another shard's slice is refused when the run is read.)
fn complete(shard: Shard, run: &StoredRun, round: u32) -> Result<(), CliError> {
    let held: BTreeSet<(&str, &str, u32)> = run
        .trials
        .iter()
        .filter(|r| !r.interrupted && r.trial <= round)
        .map(|r| r.key())
        .collect();
    let manifest = &run.manifest;
    let missing = manifest.tasks.iter().find_map(|task| {
        manifest.agents.keys().find_map(|agent| {
            (1..=round).find_map(|trial| {
                (shard.contains(task, agent, trial) && !held.contains(&(task, agent, trial)))
                    .then_some((task, agent, trial))
            })
        })
    });
    match missing {
        None => Ok(()),
        Some((task, agent, trial)) => Err(CliError::unscored(format!(
            "shard {shard} ({}) says it finished round {round} but holds no record of '{task}' / '{agent}' #{trial}: round {round} cannot be judged on it",
            run.path.display()
        ))
        .hint("resume that shard (`deltabench resume SHARD_DIR`) or run it again in a new folder")),
    }
}

impl Drop for Meeting {
    /// Leaving undecided (a dead sibling, an interrupt, an error) says so at once: a heartbeat
    /// of 0 tells the siblings and `status` that this shard stopped, without their waiting for it
    /// to go stale.
    fn drop(&mut self) {
        self.beat.abort();
        let mut mark = self.mark.lock().unwrap_or_else(|e| e.into_inner());
        if mark.decided.is_none() {
            mark.heartbeat = 0;
            let _ = rounds::write_mark(&self.out, &mark);
        }
    }
}

async fn beat(out: PathBuf, mark: Arc<Mutex<RoundMark>>) {
    loop {
        tokio::time::sleep(std::time::Duration::from_secs(rounds::HEARTBEAT_SECS)).await;
        // Written under the lock, so a last word from `Drop` is never overwritten by a beat.
        let mut mark = mark.lock().unwrap_or_else(|e| e.into_inner());
        mark.heartbeat = rounds::now();
        // A missed beat is retried at the next; siblings allow twelve.
        let _ = rounds::write_mark(&out, &mark);
    }
}

/// The rounds at most: --max-trials, and no more than the baseline run's trials per task (round
/// r pairs with the baseline's trial r).
fn cap(max_trials: u32, baseline: Option<&StoredRun>, out: &Path) -> u32 {
    let Some(baseline) = baseline else {
        return max_trials;
    };
    let held = baseline.manifest.trials_per_task;
    if held < max_trials {
        eprintln!(
            "note: the baseline {} holds {held} trial(s) per task; round r is paired with its trial r, so {} stops after {held} round(s)",
            baseline.path.display(),
            out.display()
        );
    }
    held.min(max_trials)
}

struct Judged {
    decided: bool,
    /// The exit the rule asks for (`Ok` leaves the run's own exit).
    exit: Exit,
    /// For the progress line.
    status: String,
    /// The closing lines.
    text: String,
}

/// The lock's flaky tasks the gate leaves out, unless told to keep them.
fn left_out(plan: &runner::Plan, include_flaky: bool) -> BTreeSet<String> {
    if include_flaky {
        return BTreeSet::new();
    }
    plan.flaky.keys().cloned().collect()
}

fn judge(
    run: &StoredRun,
    baseline: Option<&StoredRun>,
    rule: &StoppingRule,
    round: u32,
    include_flaky: bool,
    plan: &runner::Plan,
) -> Result<Judged, CliError> {
    let agents: Vec<String> = plan.agents.keys().cloned().collect();
    match rule {
        StoppingRule::CiWidth { width, confidence } => Ok(judge_widths(
            &stats::interval_widths(&run.trials, &agents, *confidence, *width),
            *width,
            round,
        )),
        StoppingRule::Decided {
            margin,
            max_drop,
            confidence,
            ..
        } => {
            let base_agents = baseline.map(compare::agents_of);
            let (base_agent, candidate_agent) = stats::gate_sides(&agents, base_agents.as_deref());
            let base_run = baseline.unwrap_or(run);
            let skip = left_out(plan, include_flaky);
            let spec = SequentialSpec {
                alpha: 1.0 - confidence,
                max_drop: *max_drop,
                margin: *margin,
            };
            let reading = stats::gate_after(
                (&base_run.trials, &base_agent),
                (&run.trials, &candidate_agent),
                round,
                &skip,
                spec,
            );
            let mut text = String::from("\n");
            if let Some(cmp) = compare::plain_text(
                (base_run, &base_agent),
                (run, &candidate_agent),
                baseline.is_none(),
                *confidence,
                include_flaky,
            ) {
                text.push_str(&cmp);
                text.push('\n');
            }
            let sides = (base_agent.as_str(), candidate_agent.as_str());
            let levels = (*margin, *confidence);
            Ok(judge_gate(&reading, sides, levels, round, &skip, text))
        }
    }
}

/// `--until-ci-width`'s closing lines after `round` rounds, from each agent's interval width.
fn judge_widths((widths, met): &(Vec<(String, f64)>, bool), target: f64, round: u32) -> Judged {
    let lines: Vec<String> = widths
        .iter()
        .map(|(agent, w)| format!("'{agent}' {:.1} points", w * 100.0))
        .collect();
    let status = format!("interval widths {}", lines.join(", "));
    let text = format!(
        "\nstopping rule: {} after {round} trial(s) per task: {status} (target {:.1})\n",
        if *met {
            "met"
        } else {
            "NOT met (the --max-trials cap)"
        },
        target * 100.0
    );
    Judged {
        decided: *met,
        exit: if *met { Exit::Ok } else { Exit::Inconclusive },
        status,
        text,
    }
}

/// `--until-decided`'s closing lines after `round` rounds: `text` (the comparison) followed by
/// the gate's reading of `(base, candidate)` at the rule's `(margin, confidence)`.
fn judge_gate(
    reading: &stats::GateReading,
    (base_agent, candidate_agent): (&str, &str),
    (margin, confidence): (f64, f64),
    round: u32,
    skip: &BTreeSet<String>,
    mut text: String,
) -> Judged {
    let state = &reading.state;
    let threshold = 1.0 / (1.0 - confidence);
    let used = state.rounds;
    let (decided, exit, what) = match state.decision {
        SequentialDecision::Regressed => (
            true,
            Exit::VerdictFailed,
            format!(
                "regressed after round {used} (evidence {:.1} against no regression reached 1/alpha = {threshold:.0})",
                state.regression_evidence
            ),
        ),
        SequentialDecision::NotRegressed => (
            true,
            Exit::Ok,
            format!(
                "not regressed by {:.1} points or more after round {used} (evidence {:.1} against such a regression reached 1/alpha = {threshold:.0})",
                margin * 100.0,
                state.no_regression_evidence
            ),
        ),
        SequentialDecision::Undecided => (
            false,
            Exit::Inconclusive,
            format!(
                "undecided after {round} round(s) (evidence {:.1} for a regression, {:.1} against one of {:.1} points; either must reach {threshold:.0})",
                state.regression_evidence,
                state.no_regression_evidence,
                margin * 100.0
            ),
        ),
    };
    text.push_str(&format!(
        "sequential gate ('{candidate_agent}' against '{base_agent}', e-process at {}%, valid at every round): {}{}\n",
        (confidence * 1000.0).round() / 10.0,
        if decided { "" } else { "UNDECIDED at the cap: " },
        what
    ));
    text.push_str(&format!(
        "trials used: {used} per task and side ({} paired trials); a fixed design (`plan`, 80% power to find a drop of {:.1} points) would ask for {} per task\n",
        reading.paired_trials,
        margin * 100.0,
        reading.fixed_trials.map_or("-".into(), |n| n.to_string())
    ));
    if !skip.is_empty() {
        text.push_str(&format!(
            "flaky tasks left out of the gate (the lock's `validate --repeat`; --include-flaky keeps them): {}\n",
            skip.iter().cloned().collect::<Vec<_>>().join(", ")
        ));
    }
    Judged {
        decided: reading.stop,
        exit,
        status: what,
        text,
    }
}
