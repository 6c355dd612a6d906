//! `deltabench prepare`: build every environment image a suite's tasks need, once, before any
//! run, so that later runs and validates need no network.

use super::args::PrepareArgs;
use super::exit::Exit;
use super::{CliError, cache_dir, load_suite, print_stdout, workdir};
use crate::runner;

pub(super) fn prepare(args: PrepareArgs) -> Result<Exit, CliError> {
    let suite = load_suite(&args.suite_path, &args.suite)?;
    let mut tasks = Vec::new();
    for id in &args.task {
        match suite.tasks.iter().position(|t| &t.id == id) {
            Some(i) => tasks.push(i),
            None => {
                let ids: Vec<&str> = suite.tasks.iter().map(|t| t.id.as_str()).collect();
                return Err(CliError::usage(format!(
                    "--task {id}: no such task in {}; its tasks: {}",
                    suite.path.display(),
                    ids.join(", ")
                )));
            }
        }
    }
    if tasks.is_empty() {
        tasks = (0..suite.tasks.len()).collect();
    }
    let Some(runtime) = runner::runtime_for(&suite, &tasks)? else {
        print_stdout(&format!(
            "no task of {} has an environment: nothing to prepare\n",
            suite.path.display()
        ));
        return Ok(Exit::Ok);
    };
    runtime
        .check()
        .map_err(|crate::workspace::ContainerError(message)| CliError::usage(message))?;
    let cache = cache_dir(&args.suite, &workdir(&args.suite)?);
    let reports = runner::build_images(&suite, &tasks, &runtime, &cache, |image| {
        eprintln!("building {image} ...");
    });
    for report in &reports {
        let tasks = report.tasks.join(", ");
        let seconds = report.duration.as_secs_f64();
        let line = match &report.outcome {
            Ok(true) => format!("built   {} ({tasks}) in {seconds:.1}s\n", report.image),
            Ok(false) => format!("present {} ({tasks})\n", report.image),
            Err(why) => format!(
                "FAILED  {} ({tasks}):\n  {}\n",
                report.image,
                why.to_string().replace('\n', "\n  ")
            ),
        };
        print_stdout(&line);
    }
    let failed = reports.iter().filter(|r| r.outcome.is_err()).count();
    print_stdout(&format!(
        "{} image(s) ready, {failed} failed; later runs use them without building\n",
        reports.len() - failed
    ));
    Ok(if failed == 0 { Exit::Ok } else { Exit::Usage })
}
