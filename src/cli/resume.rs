//! `deltabench resume RUN_DIR` (and `run --resume RUN_DIR`): finish a killed run.

use std::io::IsTerminal;
use std::path::Path;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::args::ResumeOptions;
use super::exit::Exit;
use super::finish::finish_run;
use super::reporter::TerminalReporter;
use super::{CliError, read_run_dir};
use crate::runner;
use crate::suite;

pub(super) async fn resume(
    run_dir: &Path,
    options: &ResumeOptions,
    jobs: Option<usize>,
) -> Result<Exit, CliError> {
    let stored = read_run_dir(run_dir)?;
    let manifest = stored.manifest;
    let Some(mut request) = manifest.request.clone() else {
        return Err(CliError::usage(format!(
            "{}: the manifest does not record the run's request (written by an older deltabench): it cannot be resumed",
            run_dir.display()
        )));
    };
    if let Some(retries) = options.retries {
        request.retries = retries;
    }
    if let Some(jobs) = jobs {
        request.jobs = jobs;
    }
    if !request.workdir.is_dir() {
        return Err(CliError::usage(format!(
            "the run's workdir {} is gone: cannot resume",
            request.workdir.display()
        )));
    }
    let suite = suite::load(
        Path::new(&manifest.suite_path),
        request.agents_file.as_deref(),
    )?;
    for reaped in runner::reap_dead_leases(&request.cache, run_dir)? {
        eprintln!("reaped what the dead run left: {reaped}");
    }
    let suite = Arc::new(suite);
    let plan = runner::plan(suite.clone(), request)?;
    if let Err(err) = runner::check_resumable(&manifest, &plan) {
        if !(options.force && err.forcible()) {
            return Err(err.into());
        }
        eprintln!("warning: {err}; resuming anyway (--force)");
    }
    if plan.request.sequential.is_some() {
        // A run in rounds goes on from the round it was in, then decides as it would have.
        let round = plan.request.trials;
        eprintln!("resuming the run in rounds at round {round}");
        return super::rounds::run_rounds(suite, plan.request.clone(), run_dir, round, None).await;
    }
    // An interrupted trial is run again: it does not count as recorded.
    let recorded = stored.trials.iter().filter(|r| !r.interrupted).count();
    let finished = manifest.finished_at.is_some() && !manifest.interrupted;
    if finished && recorded >= plan.trials.len() {
        eprintln!(
            "nothing to run: all {} planned trials of {} are recorded",
            plan.trials.len(),
            run_dir.display()
        );
        return Ok(Exit::Ok);
    }
    let mut reporter = TerminalReporter::new(std::io::stderr().is_terminal()).resuming(recorded);
    let outcome = runner::resume(&plan, run_dir, &mut reporter, CancellationToken::new()).await?;
    reporter.finish();
    finish_run(&plan, &outcome, reporter.tally(), None)
}
