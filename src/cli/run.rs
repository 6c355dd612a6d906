//! `deltabench run`: plan the trials, run them, print the summary (and the gate's verdict with
//! --baseline).

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use tokio_util::sync::CancellationToken;

use super::args::{RunArgs, ShardArg};
use super::exit::Exit;
use super::reporter::TerminalReporter;
use super::{
    CliError, ErrorKind, cache_dir, default_jobs, load_suite, read_run_dir, resume, rounds, workdir,
};
use crate::runner;
use crate::store;
use crate::store::RunRequest;
use crate::suite;

pub(super) async fn run(args: RunArgs) -> Result<Exit, CliError> {
    let suite_path = match (&args.resume, &args.suite_path) {
        (Some(run_dir), _) => {
            return resume::resume(run_dir, &args.resume_options, args.suite.jobs).await;
        }
        (None, Some(path)) => path.as_path(),
        // No SUITE: the suite in the current folder.
        (None, None) => Path::new("."),
    };
    let (shard, out) = resolve_shard(&args)?;
    if let Some(dir) = &out
        && shard.is_some()
        && dir.join(store::layout::MANIFEST).exists()
    {
        // An earlier attempt at this shard (a requeued array task, a retried pod): finish it.
        eprintln!(
            "{} holds this shard's earlier attempt: finishing it (as `deltabench resume`)",
            dir.display()
        );
        return resume::resume(dir, &args.resume_options, args.suite.jobs).await;
    }
    let suite = load_suite(suite_path, &args.suite)?;
    super::warn_uncommitted(&suite);
    let mut plan = runner::plan(suite.clone(), run_request(&args, shard)?)?;
    fit_jobs(&mut plan, args.suite.jobs);
    if args.require_lock {
        require_lock(&plan)?;
    }
    check_verify_programs(&plan)?;
    if let Some(recorded) = &args.replay {
        runner::check_replayable(recorded, &plan).map_err(|e| CliError::usage(e.to_string()))?;
    }
    if let Some(shard) = shard {
        eprintln!("{}", shard_note(shard, &plan));
    }
    let baseline = args.baseline.as_deref().map(read_run_dir).transpose()?;
    rounds::check(&plan.request, &plan, baseline.as_ref(), out.as_deref())?;
    if args.dry_run {
        let reports = out
            .as_deref()
            .and_then(Path::parent)
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("reports"));
        super::print_stdout(&super::dry_run::describe(&plan, reports));
        return Ok(Exit::Ok);
    }
    let out = out.unwrap_or_else(|| match shard {
        Some(shard) if matches!(args.shard, Some(ShardArg::Auto)) => {
            default_out(&suite.name).join(store::shards::dir_name(shard))
        }
        _ => default_out(&suite.name),
    });
    if plan.request.sequential.is_some() {
        let note = unvalidated_note(&plan);
        return rounds::run_rounds(suite, plan.request.clone(), &out, 1, note).await;
    }
    let mut reporter =
        TerminalReporter::new(std::io::stderr().is_terminal()).noting(unvalidated_note(&plan));
    let outcome = runner::execute(&plan, &out, &mut reporter, CancellationToken::new()).await?;
    reporter.finish();
    super::finish::finish_run(
        &plan,
        &outcome,
        reporter.tally(),
        baseline.as_ref().map(|b| (b, &args.gate)),
    )
}

/// What `run`'s flags ask the planner for.
fn run_request(args: &RunArgs, shard: Option<store::Shard>) -> Result<RunRequest, CliError> {
    let workdir = workdir(&args.suite)?;
    let sequential = sequential(args);
    Ok(RunRequest {
        agents: args.agent.clone(),
        // A run in rounds plans its first round.
        trials: if sequential.is_some() { 1 } else { args.trials },
        jobs: args.suite.jobs.unwrap_or_else(default_jobs),
        tasks: args.task.clone(),
        tags: args.tag.clone(),
        cache: cache_dir(&args.suite, &workdir),
        workdir,
        keep_workspaces: args.keep_workspaces,
        keep_homes: args.keep_homes,
        shard,
        agents_file: args
            .suite
            .agents
            .as_deref()
            .map(std::path::absolute)
            .transpose()
            .map_err(|e| CliError::with_cause(ErrorKind::Usage, "cannot resolve --agents", e))?,
        retries: args.resume_options.retries.unwrap_or(0),
        cache_max: args.suite.places.cache_max,
        record: args.record,
        replay: args.replay.clone(),
        sequential,
    })
}

/// Caps the run's parallelism at its trial count: more at once only reserves what nothing
/// uses. A `-j` given that high is noted.
fn fit_jobs(plan: &mut runner::Plan, asked: Option<usize>) {
    let trials = plan.trials.len().max(1);
    if plan.request.jobs > trials {
        if let Some(jobs) = asked {
            eprintln!(
                "note: -j {jobs} is more than the {trials} trial(s) planned: running {trials} at once"
            );
        }
        plan.request.jobs = trials;
    }
}

/// Which of the plan's trials this shard holds.
fn shard_note(shard: store::Shard, plan: &runner::Plan) -> String {
    match plan.trials.len() {
        0 => format!(
            "shard {shard} holds none of the plan's {} trials: writing an empty run directory",
            plan.unsharded_trials
        ),
        n => format!(
            "shard {shard}: {n} of the plan's {} trials",
            plan.unsharded_trials
        ),
    }
}

/// The shard to run and the run directory: `--shard auto` reads the engine's variables and
/// puts the shard's run in `OUT/shard-I-of-N`.
fn resolve_shard(args: &RunArgs) -> Result<(Option<store::Shard>, Option<PathBuf>), CliError> {
    let total_from = || {
        let from = if std::env::var_os("DELTABENCH_SHARDS").is_some() {
            "DELTABENCH_SHARDS"
        } else {
            "--shards"
        };
        args.shards.map(|n| (n, from))
    };
    match args.shard {
        None => Ok((None, args.out.clone())),
        Some(ShardArg::Fixed(shard)) => {
            if let Some((n, from)) = total_from()
                && n != shard.total
            {
                return Err(CliError::usage(format!(
                    "--shard {shard} and {from} {n} disagree on the number of shards"
                )));
            }
            Ok((Some(shard), args.out.clone()))
        }
        Some(ShardArg::Auto) => {
            let shard = store::shards::resolve_auto(|name| std::env::var(name).ok(), total_from())
                .map_err(|e| {
                    CliError::new(ErrorKind::Usage, e).hint(
                        "`--shard auto` is for a job engine's tasks; elsewhere give the slice, e.g. --shard 2/4",
                    )
                })?;
            let out = args
                .out
                .as_ref()
                .map(|dir| dir.join(store::shards::dir_name(shard)));
            Ok((Some(shard), out))
        }
    }
}

/// The stopping rule of a run in rounds, when asked for.
fn sequential(args: &RunArgs) -> Option<store::Sequential> {
    let rule = if args.rounds.until_decided {
        store::StoppingRule::Decided {
            baseline: args
                .baseline
                .as_deref()
                .map(|p| std::path::absolute(p).unwrap_or_else(|_| p.to_owned())),
            margin: args.rounds.margin,
            max_drop: args.gate.max_drop,
            confidence: args.gate.confidence,
        }
    } else {
        store::StoppingRule::CiWidth {
            width: args.rounds.until_ci_width?,
            confidence: args.gate.confidence,
        }
    };
    Some(store::Sequential {
        rule,
        max_trials: args.rounds.max_trials,
        include_flaky: args.gate.include_flaky,
    })
}

/// `--require-lock`: every planned task has validated evidence, or nothing runs.
fn require_lock(plan: &runner::Plan) -> Result<(), CliError> {
    let unvalidated = plan.unvalidated();
    if unvalidated.is_empty() {
        return Ok(());
    }
    Err(CliError::usage(format!(
        "--require-lock: {} of {} task(s) have no validated evidence in {} ({}): their passes would get no evidence check and no mutation check",
        unvalidated.len(),
        plan.tasks.len(),
        suite::lock_path(&plan.suite).display(),
        unvalidated.join(", ")
    ))
    .hint(format!(
        "run `deltabench validate {}` and keep the lock file it writes beside the suite (a task changed since its validation needs it again)",
        plan.suite.path.display()
    )))
}

/// Before the first trial: every planned task's verify program resolves where it runs, or no
/// trial would be scored on it (each would end `infra_error`). Only a plain name on this
/// machine's PATH is checked: a path may be the workspace's, and a task in a container looks
/// its program up in the image, which is not started for this.
fn check_verify_programs(plan: &runner::Plan) -> Result<(), CliError> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut missing = Vec::new();
    for &index in &plan.tasks {
        let task = &plan.suite.tasks[index];
        if task.environment.is_some() {
            continue;
        }
        let Some(program) = crate::metric::verify_program(&task.verify.run) else {
            continue;
        };
        let found = std::env::split_paths(&path).any(|dir| {
            let file = dir.join(program);
            std::fs::metadata(&file).is_ok_and(|m| {
                use std::os::unix::fs::PermissionsExt as _;
                m.is_file() && m.permissions().mode() & 0o111 != 0
            })
        });
        if !found {
            missing.push(format!(
                "task '{}': verify program `{program}` is not on PATH (verify: `{}`)",
                task.id,
                task.verify.run.trim()
            ));
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    Err(CliError::usage(format!(
        "{} task(s) have a verify command that cannot run here, so none of their trials could be scored:\n  {}",
        missing.len(),
        missing.join("\n  ")
    ))
    .hint(format!(
        "fix the verify command in {} (a typo?) or install the program; `deltabench validate` checks every task",
        plan.suite.path.display()
    )))
}

/// Which tasks run without validated evidence: their trials get the output checks only.
fn unvalidated_note(plan: &runner::Plan) -> Option<String> {
    let unvalidated = plan.unvalidated();
    if unvalidated.is_empty() {
        return None;
    }
    let shown: Vec<&str> = unvalidated.iter().take(5).copied().collect();
    let more = unvalidated.len() - shown.len();
    Some(format!(
        "note: {} of {} task(s) have no validated evidence in {} ({}{}): a pass there is checked against the verify output only; run `deltabench validate {}` to record what the reference solution shows",
        unvalidated.len(),
        plan.tasks.len(),
        suite::lock_path(&plan.suite).display(),
        shown.join(", "),
        if more > 0 {
            format!(", +{more} more")
        } else {
            String::new()
        },
        plan.suite.path.display()
    ))
}

fn default_out(suite: &str) -> PathBuf {
    let stamp = chrono::Utc::now().format("%Y%m%dT%H%M%SZ");
    let base = Path::new("reports").join(format!("{}-{stamp}", crate::store::sanitize(suite)));
    let mut candidate = base.clone();
    let mut n = 2;
    while candidate.exists() {
        candidate = PathBuf::from(format!("{}-{n}", base.display()));
        n += 1;
    }
    candidate
}
