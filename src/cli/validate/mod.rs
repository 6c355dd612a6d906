//! `deltabench validate`: run noop and oracle on each task in a scratch run, judge each task from
//! what its trials left (`runner::soundness`), and record what the reference showed in the
//! suite's lock file.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use indexmap::IndexMap;
use tokio_util::sync::CancellationToken;

use super::args::ValidateArgs;
use super::exit::Exit;
use super::reporter::TerminalReporter;
use super::{CliError, ErrorKind, cache_dir, default_jobs, load_suite, print_stdout, workdir};
use crate::runner;
use crate::runner::soundness::{Trial, Unsound, judge, reference_evidence};
use crate::store;
use crate::store::RunRequest;
use crate::suite::{self, AgentSpec};

pub(super) async fn validate(args: ValidateArgs) -> Result<Exit, CliError> {
    let loaded = checked_suite(&args)?;
    // Each task keeps its isolation: the reference's verify run is held to the rules every
    // trial's is (under `sandbox`, no network and no home but its own).
    let workdir = workdir(&args.suite)?;
    let mut plan = runner::plan(Arc::new(loaded), check_request(&args, &workdir))?;
    // The reference is measured afresh, not held to what an earlier validate recorded.
    plan.expected.clear();
    plan.discover_mutants = true;
    let scratch = Scratch::create(&plan.request.cache, &workdir)?;
    let run_dir = scratch.path.join("run");
    let (outcome, records) = match run_checks(&plan, &run_dir).await {
        Ok(done) => done,
        Err(err) => {
            scratch.finish(false);
            return Err(err);
        }
    };
    let mut lock = suite::SuiteLock::read(&plan.suite)
        .ok()
        .flatten()
        .unwrap_or_default();
    let tally = judge_tasks(&plan, &records, &run_dir, args.repeat, &mut lock);
    if tally.changed > 0
        && let Err(e) = lock.write(&plan.suite)
    {
        scratch.finish(args.keep || tally.bad > 0);
        return Err(CliError::new(ErrorKind::Harness, e));
    }
    print_stdout(&tally.lock_note(&suite::lock_path(&plan.suite)));
    let keep = args.keep || (tally.bad > 0 && !outcome.interrupted);
    if keep {
        print_stdout(&format!(
            "kept the validate run: {} (each trial's verify.log, tests.json, diff.patch, result.json under run/trials/TASK/AGENT/N/)\n",
            scratch.path.display()
        ));
    }
    scratch.finish(keep);
    if outcome.interrupted {
        print_stdout("interrupted before every check ran\n");
        return Ok(Exit::Interrupted);
    }
    let each = args.repeat.unwrap_or(args.trials);
    print_stdout(&tally.summary(plan.tasks.len(), each));
    Ok(if tally.bad > 0 {
        Exit::VerdictFailed
    } else {
        Exit::Ok
    })
}

/// The suite to check, its agents replaced by the two the checks run.
fn checked_suite(args: &ValidateArgs) -> Result<suite::Suite, CliError> {
    let mut loaded = (*load_suite(&args.suite_path, &args.suite)?).clone();
    super::warn_uncommitted(&loaded);
    // The checks always use the real built-ins, whatever the suite calls its agents.
    loaded.agents = IndexMap::from([
        ("noop".to_owned(), AgentSpec::Noop),
        ("oracle".to_owned(), AgentSpec::Oracle),
    ]);
    Ok(loaded)
}

/// The scratch run's request: noop and oracle on each chosen task, nothing kept or recorded.
fn check_request(args: &ValidateArgs, workdir: &Path) -> RunRequest {
    RunRequest {
        agents: vec!["noop".into(), "oracle".into()],
        trials: args.repeat.unwrap_or(args.trials),
        jobs: args.suite.jobs.unwrap_or_else(default_jobs),
        tasks: args.task.clone(),
        tags: Vec::new(),
        cache: cache_dir(&args.suite, workdir),
        workdir: workdir.to_owned(),
        keep_workspaces: false,
        keep_homes: false,
        shard: None,
        agents_file: None,
        retries: 0,
        cache_max: args.suite.places.cache_max,
        record: false,
        replay: None,
        sequential: None,
    }
}

/// Runs the checks' trials into `run_dir` and reads their records back.
async fn run_checks(
    plan: &runner::Plan,
    run_dir: &Path,
) -> Result<(runner::RunOutcome, Vec<store::TrialRecord>), CliError> {
    let mut reporter = TerminalReporter::new(std::io::stderr().is_terminal());
    let outcome = runner::execute(plan, run_dir, &mut reporter, CancellationToken::new()).await;
    reporter.finish();
    let outcome = outcome?;
    // A run keeps no records: they are read back from its trials.jsonl.
    let records = store::read_run(run_dir)?.trials;
    Ok((outcome, records))
}

/// What the checks found across the tasks, and what of it went into the lock.
#[derive(Debug, Default, PartialEq)]
struct Tally {
    bad: usize,
    flaky: usize,
    /// Sound tasks with evidence.
    locked: usize,
    /// Tasks whose evidence differs from the lock's.
    changed: usize,
}

/// Judges each planned task from its trials, printing its verdict and recording in `lock` what
/// its reference showed.
fn judge_tasks(
    plan: &runner::Plan,
    records: &[store::TrialRecord],
    run_dir: &Path,
    repeat: Option<u32>,
    lock: &mut suite::SuiteLock,
) -> Tally {
    let root = suite::suite_root(&plan.suite);
    let mut tally = Tally::default();
    for task in plan.tasks.iter().map(|&i| &plan.suite.tasks[i]) {
        let of = |agent: &str| -> Vec<Trial> {
            records
                .iter()
                .filter(|r| r.task == task.id && r.agent == agent)
                .map(|r| Trial::read(run_dir, r))
                .collect()
        };
        let (noop, oracle) = (of("noop"), of("oracle"));
        match task_verdict(task, &noop, &oracle) {
            Some(Unsound {
                flaky: Some((passed, runs)),
                ..
            }) if repeat.is_some() => {
                tally.flaky += 1;
                print_stdout(&format!(
                    "FLAKY {}: the reference passed {passed} of {runs} times (the base never): recorded as flaky in the lock; run, compare and the gates report it apart and leave it out (--include-flaky keeps it)\n",
                    task.id
                ));
                tally.changed += usize::from(lock.mark_flaky(task, &root, passed, runs));
                // What the passing references showed, so its passes are still held to it.
                let passing: Vec<Trial> = oracle
                    .iter()
                    .filter(|t| t.record.passed())
                    .map(|t| Trial::read(run_dir, t.record))
                    .collect();
                if let Some(evidence) = reference_evidence(&passing) {
                    tally.changed += usize::from(lock.record(task, &root, evidence, runner::now()));
                }
            }
            Some(unsound) => {
                tally.bad += 1;
                print_stdout(&unsound.render(&task.id));
            }
            None => {
                print_stdout(&format!("ok   {}\n", task.id));
                if let Some(runs) = repeat {
                    tally.changed += usize::from(lock.mark_flaky(task, &root, runs, runs));
                }
                print_stdout(&mutation_warnings(task, &oracle));
                if let Some(evidence) = reference_evidence(&oracle) {
                    tally.changed += usize::from(lock.record(task, &root, evidence, runner::now()));
                    tally.locked += 1;
                }
            }
        }
    }
    tally
}

/// Why `task` is unsound, if it is: a task without a solution is, whatever its trials showed.
fn task_verdict<'a>(
    task: &suite::Task,
    noop: &'a [Trial<'a>],
    oracle: &'a [Trial<'a>],
) -> Option<Unsound<'a>> {
    if task.solution.is_none() && task.solution_script.is_none() {
        Some(Unsound::new(
            "has no `solution`: nothing proves the task can be solved",
            None,
        ))
    } else {
        judge(noop, oracle)
    }
}

impl Tally {
    /// What this validate did to the lock at `lock_path` (empty when it holds no evidence).
    fn lock_note(&self, lock_path: &Path) -> String {
        let (changed, locked) = (self.changed, self.locked);
        if changed > 0 {
            format!(
                "recorded what the reference's verify run showed for {changed} task(s) in {}: trials must show at least as much\n",
                lock_path.display()
            )
        } else if locked > 0 {
            format!(
                "{} already holds what the reference's verify run showed for {locked} task(s): left as it was\n",
                lock_path.display()
            )
        } else {
            String::new()
        }
    }

    /// The closing line for `total` tasks checked with `each` trials per agent.
    fn summary(&self, total: usize, each: u32) -> String {
        let (bad, flaky) = (self.bad, self.flaky);
        if bad > 0 {
            format!("{bad} of {total} tasks are unsound\n")
        } else if flaky > 0 {
            format!(
                "{} of {total} tasks are sound and {flaky} flaky ({each} trial(s) each way)\n",
                total - flaky
            )
        } else {
            format!("all {total} tasks are sound ({each} trial(s) each way)\n")
        }
    }
}

/// What a sound task's reference showed of its mutants, when it needs saying: the files the
/// lister could not read, and a task whose assertions no mutant bites (its passes then rest on
/// the other checks only).
fn mutation_warnings(task: &suite::Task, oracle: &[Trial]) -> String {
    let Some(trial) = oracle.first() else {
        return String::new();
    };
    let Ok(bytes) = std::fs::read(trial.dir.join(store::layout::MUTANTS)) else {
        return String::new();
    };
    let Ok(report) = serde_json::from_slice::<crate::delta::MutationReport>(&bytes) else {
        return String::new();
    };
    let mut text = String::new();
    for note in &report.notes {
        text.push_str(&format!("     warning: {note}\n"));
    }
    if report.tried == 0 && report.notes.is_empty() {
        text.push_str(&format!(
            "     warning: no mutants for {}: its hidden tests hold no assertion in a Python or Rust test function (the languages with a mutator)\n",
            task.id
        ));
    } else if report.biting.is_empty() {
        text.push_str(&format!(
            "     warning: no mutant of {}'s hidden tests bites ({} tried): nothing shows that their assertions still bite in a trial's run\n",
            task.id, report.tried
        ));
    } else {
        text.push_str(&format!(
            "     mutants: {} of {} bite; {} run with each passing trial\n",
            report.biting.len(),
            report.tried,
            task.mutants.min(report.biting.len() as u32)
        ));
    }
    text
}

/// `validate`'s scratch folder (`WORKDIR/deltabench-validate-*`), held under a lease of its own
/// for its whole life: a validate that dies (kill -9, a closed pipe) leaves it to `gc`.
struct Scratch {
    path: PathBuf,
    lease: store::HeldLease,
}

impl Scratch {
    fn create(cache: &Path, workdir: &Path) -> Result<Self, CliError> {
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let path = workdir.join(format!(
            "deltabench-validate-{}-{stamp:08x}",
            std::process::id()
        ));
        let cannot = |e: std::io::Error| {
            CliError::with_cause(
                ErrorKind::Harness,
                format!("cannot create the scratch run directory {}", path.display()),
                e,
            )
        };
        // Taken before the folder exists: whatever this validate leaves, gc can find.
        let lease = store::HeldLease::acquire(cache, &path, &path, None).map_err(cannot)?;
        if let Err(e) = std::fs::create_dir(&path) {
            lease.release();
            return Err(cannot(e));
        }
        Ok(Self { path, lease })
    }

    /// Removes the folder unless `keep`; a kept folder is the user's, so gc leaves it alone.
    fn finish(self, keep: bool) {
        if !keep && let Err(err) = crate::workspace::remove_tree(&self.path) {
            for left in &err.left {
                eprintln!("warning: could not clean up {left}");
            }
            // The lease stays, so `gc` can finish the job.
            return;
        }
        self.lease.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_names_unsound_then_flaky_then_sound() {
        let tally = |bad, flaky| Tally {
            bad,
            flaky,
            ..Tally::default()
        };
        assert_eq!(tally(1, 1).summary(3, 2), "1 of 3 tasks are unsound\n");
        assert_eq!(
            tally(0, 1).summary(3, 2),
            "2 of 3 tasks are sound and 1 flaky (2 trial(s) each way)\n"
        );
        assert_eq!(
            tally(0, 0).summary(3, 1),
            "all 3 tasks are sound (1 trial(s) each way)\n"
        );
    }

    #[test]
    fn lock_note_says_nothing_without_evidence() {
        let path = Path::new("suite.lock");
        assert_eq!(Tally::default().lock_note(path), "");
        let kept = Tally {
            locked: 2,
            ..Tally::default()
        };
        assert!(kept.lock_note(path).starts_with("suite.lock already holds"));
        let changed = Tally {
            changed: 1,
            locked: 2,
            ..Tally::default()
        };
        assert!(changed.lock_note(path).starts_with("recorded what"));
    }
}
