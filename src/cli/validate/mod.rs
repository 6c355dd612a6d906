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
    let mut loaded = (*load_suite(&args.suite_path, &args.suite)?).clone();
    super::warn_uncommitted(&loaded);
    // The checks always use the real built-ins, whatever the suite calls its agents.
    loaded.agents = IndexMap::from([
        ("noop".to_owned(), AgentSpec::Noop),
        ("oracle".to_owned(), AgentSpec::Oracle),
    ]);
    // Each task keeps its isolation: the reference's verify run is held to the rules every
    // trial's is (under `sandbox`, no network and no home but its own).
    let workdir = workdir(&args.suite)?;
    let request = RunRequest {
        agents: vec!["noop".into(), "oracle".into()],
        trials: args.repeat.unwrap_or(args.trials),
        jobs: args.suite.jobs.unwrap_or_else(default_jobs),
        tasks: args.task.clone(),
        tags: Vec::new(),
        cache: cache_dir(&args.suite, &workdir),
        workdir: workdir.clone(),
        keep_workspaces: false,
        keep_homes: false,
        shard: None,
        agents_file: None,
        retries: 0,
        cache_max: args.suite.places.cache_max,
        record: false,
        replay: None,
        sequential: None,
    };
    let mut plan = runner::plan(Arc::new(loaded), request)?;
    // The reference is measured afresh, not held to what an earlier validate recorded.
    plan.expected.clear();
    plan.discover_mutants = true;
    let scratch = Scratch::create(&plan.request.cache, &workdir)?;
    let run_dir = scratch.path.join("run");
    let mut reporter = TerminalReporter::new(std::io::stderr().is_terminal());
    let outcome = runner::execute(&plan, &run_dir, &mut reporter, CancellationToken::new()).await;
    reporter.finish();
    let outcome = match outcome {
        Ok(outcome) => outcome,
        Err(err) => {
            scratch.finish(false);
            return Err(err.into());
        }
    };
    // A run keeps no records: they are read back from its trials.jsonl.
    let records = match store::read_run(&run_dir) {
        Ok(run) => run.trials,
        Err(err) => {
            scratch.finish(false);
            return Err(err.into());
        }
    };

    let (mut bad, mut flaky) = (0, 0);
    let mut lock = suite::SuiteLock::read(&plan.suite)
        .ok()
        .flatten()
        .unwrap_or_default();
    let root = suite::suite_root(&plan.suite);
    // Sound tasks with evidence, and those whose evidence differs from the lock's.
    let (mut locked, mut changed) = (0, 0);
    for task in plan.tasks.iter().map(|&i| &plan.suite.tasks[i]) {
        let of = |agent: &str| -> Vec<Trial> {
            records
                .iter()
                .filter(|r| r.task == task.id && r.agent == agent)
                .map(|r| Trial::read(&run_dir, r))
                .collect()
        };
        let (noop, oracle) = (of("noop"), of("oracle"));
        let verdict = if task.solution.is_none() && task.solution_script.is_none() {
            Some(Unsound::new(
                "has no `solution`: nothing proves the task can be solved",
                None,
            ))
        } else {
            judge(&noop, &oracle)
        };
        match verdict {
            Some(Unsound {
                flaky: Some((passed, runs)),
                ..
            }) if args.repeat.is_some() => {
                flaky += 1;
                print_stdout(&format!(
                    "FLAKY {}: the reference passed {passed} of {runs} times (the base never): recorded as flaky in the lock; run, compare and the gates report it apart and leave it out (--include-flaky keeps it)\n",
                    task.id
                ));
                changed += usize::from(lock.mark_flaky(task, &root, passed, runs));
                // What the passing references showed, so its passes are still held to it.
                let passing: Vec<Trial> = oracle
                    .iter()
                    .filter(|t| t.record.passed())
                    .map(|t| Trial::read(&run_dir, t.record))
                    .collect();
                if let Some(evidence) = reference_evidence(&passing) {
                    changed += usize::from(lock.record(task, &root, evidence, runner::now()));
                }
            }
            Some(unsound) => {
                bad += 1;
                print_stdout(&unsound.render(&task.id));
            }
            None => {
                print_stdout(&format!("ok   {}\n", task.id));
                if let Some(runs) = args.repeat {
                    changed += usize::from(lock.mark_flaky(task, &root, runs, runs));
                }
                print_stdout(&mutation_warnings(task, &oracle));
                if let Some(evidence) = reference_evidence(&oracle) {
                    changed += usize::from(lock.record(task, &root, evidence, runner::now()));
                    locked += 1;
                }
            }
        }
    }
    if changed > 0
        && let Err(e) = lock.write(&plan.suite)
    {
        scratch.finish(args.keep || bad > 0);
        return Err(CliError::new(ErrorKind::Harness, e));
    }
    let lock_path = suite::lock_path(&plan.suite);
    if changed > 0 {
        print_stdout(&format!(
            "recorded what the reference's verify run showed for {changed} task(s) in {}: trials must show at least as much\n",
            lock_path.display()
        ));
    } else if locked > 0 {
        print_stdout(&format!(
            "{} already holds what the reference's verify run showed for {locked} task(s): left as it was\n",
            lock_path.display()
        ));
    }
    let total = plan.tasks.len();
    let keep = args.keep || (bad > 0 && !outcome.interrupted);
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
    if bad > 0 {
        print_stdout(&format!("{bad} of {total} tasks are unsound\n"));
        Ok(Exit::VerdictFailed)
    } else {
        let each = args.repeat.unwrap_or(args.trials);
        if flaky > 0 {
            print_stdout(&format!(
                "{} of {total} tasks are sound and {flaky} flaky ({each} trial(s) each way)\n",
                total - flaky
            ));
        } else {
            print_stdout(&format!(
                "all {total} tasks are sound ({each} trial(s) each way)\n"
            ));
        }
        Ok(Exit::Ok)
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
