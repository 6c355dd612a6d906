//! `deltabench report`: a run directory as a table, Markdown, CSV, JSON, JUnit XML or HTML.

use clap::ValueEnum;

use super::args::{GateArgs, OutcomeFilter, ReportArgs, ReportFormat};
use super::exit::Exit;
use super::{CliError, ErrorKind, compare, print_stdout, read_run_dir};
use crate::report;
use crate::store;

/// `--task GLOB` and `--outcome`: the trials (and planned tasks) every format then shows.
fn select_trials(
    mut run: store::StoredRun,
    globs: &[String],
    outcomes: &[OutcomeFilter],
) -> Result<store::StoredRun, CliError> {
    let patterns: Vec<regex::Regex> = globs
        .iter()
        .map(|glob| {
            let pattern = regex::escape(glob).replace(r"\*", ".*").replace(r"\?", ".");
            regex::Regex::new(&format!("^{pattern}$"))
                .map_err(|e| CliError::usage(format!("--task {glob}: {e}")))
        })
        .collect::<Result<_, _>>()?;
    let task_kept = |task: &str| patterns.is_empty() || patterns.iter().any(|p| p.is_match(task));
    if !globs.is_empty() && !run.manifest.tasks.iter().any(|t| task_kept(t)) {
        let ids: Vec<&str> = run.manifest.tasks.iter().map(String::as_str).collect();
        return Err(CliError::usage(format!(
            "--task {}: no task of the run matches (its tasks: {}){}",
            globs.join(", --task "),
            ids.join(", "),
            crate::support::suggestion(&globs[0], ids.iter().copied())
        )));
    }
    let outcome_kept = |outcome: store::Outcome| {
        outcomes.is_empty()
            || outcomes.iter().any(|filter| match filter {
                OutcomeFilter::Pass => outcome == store::Outcome::Pass,
                OutcomeFilter::Fail => {
                    matches!(outcome, store::Outcome::Fail | store::Outcome::Invalid)
                }
                OutcomeFilter::Infra => outcome == store::Outcome::InfraError,
            })
    };
    run.trials
        .retain(|r| task_kept(&r.task) && outcome_kept(r.outcome));
    run.manifest.tasks.retain(|t| task_kept(t));
    Ok(run)
}

pub(super) fn report(args: ReportArgs) -> Result<Exit, CliError> {
    check_flags(&args)?;
    let run = if super::merge::is_shard_parent(&args.run_dir) {
        shards_so_far(&args.run_dir)?
    } else {
        let run = read_run_dir(&args.run_dir)?;
        eprint!("{}", partial_note(&args.run_dir, &run));
        run
    };
    let run =
        report::select_agents(&run, &args.agent).map_err(|e| CliError::new(ErrorKind::Usage, e))?;
    let run = select_trials(run, &args.task, &args.outcome)?;
    let agents: Vec<String> = run.manifest.agents.keys().cloned().collect();
    let summaries = report::summarize(&run.trials, &agents, &run.manifest.agents);
    let baseline = match &args.baseline {
        Some(path) => Some(baseline(path, &run, args.confidence)?),
        None => None,
    };
    let text = render(&args, &run, &summaries, baseline.as_ref())?;
    match args.output {
        Some(path) => std::fs::write(&path, text).map_err(|e| {
            CliError::with_cause(
                ErrorKind::Harness,
                format!("cannot write {}", path.display()),
                e,
            )
        })?,
        None => print_stdout(&text),
    }
    Ok(Exit::Ok)
}

/// The flag combinations no format can show, refused before any run is read.
fn check_flags(args: &ReportArgs) -> Result<(), CliError> {
    if !(0.5..1.0).contains(&args.confidence) {
        return Err(CliError::usage(format!(
            "--confidence {} is out of range: use a level in [0.5, 1), e.g. 0.95",
            args.confidence
        )));
    }
    let format = args
        .format
        .to_possible_value()
        .map(|value| value.get_name().to_owned())
        .unwrap_or_default();
    // CSV and JUnit hold one row or test case per trial: neither has room for either.
    if matches!(args.format, ReportFormat::Csv | ReportFormat::Junit) {
        for (given, flag) in [
            (args.ablation, "--ablation"),
            (args.baseline.is_some(), "--baseline"),
        ] {
            if given {
                return Err(CliError::usage(format!(
                    "{flag} has no {format} form (one row per trial): use --format table, markdown, json or html"
                )));
            }
        }
    }
    if args.ablation && args.baseline.is_some() && !matches!(args.format, ReportFormat::Html) {
        return Err(CliError::usage(
            "--ablation replaces the summary the --baseline comparison goes with: use one at a time, or --format html for both",
        ));
    }
    Ok(())
}

/// The note that `run` holds fewer trials than it planned (empty when it holds them all).
fn partial_note(run_dir: &std::path::Path, run: &store::StoredRun) -> String {
    let done = run.trials.iter().filter(|r| !r.interrupted).count();
    if done >= run.manifest.planned_trials {
        return String::new();
    }
    format!(
        "note: {} holds {done} of its {} planned trials ({}): this report covers those only; `deltabench resume {}` runs the rest\n",
        run_dir.display(),
        run.manifest.planned_trials,
        if run.manifest.finished_at.is_some() {
            "the run was interrupted"
        } else {
            "the run is still running or died"
        },
        run_dir.display()
    )
}

/// `--baseline`: the comparison of `run` with the run at `path`, as `compare` words it.
fn baseline(
    path: &std::path::Path,
    run: &store::StoredRun,
    confidence: f64,
) -> Result<report::Baseline, CliError> {
    let gate = GateArgs::report_only(confidence, false);
    let (text, _) = compare::against_baseline(&read_run_dir(path)?, run, &gate)?;
    Ok(report::Baseline {
        run_dir: path.display().to_string(),
        text,
    })
}

/// The report in the format asked for.
fn render(
    args: &ReportArgs,
    run: &store::StoredRun,
    summaries: &[report::AgentSummary],
    baseline: Option<&report::Baseline>,
) -> Result<String, CliError> {
    Ok(match args.format {
        ReportFormat::Table if args.ablation => report::ablation(run, args.confidence),
        ReportFormat::Markdown if args.ablation => report::ablation_markdown(run, args.confidence),
        ReportFormat::Json if args.ablation => report::ablation_json(run, args.confidence),
        ReportFormat::Table => {
            let mut text = report::text(run, summaries, super::terminal_width());
            if let Some(baseline) = baseline {
                text.push_str(&format!(
                    "\nAgainst the baseline {}:\n{}",
                    baseline.run_dir, baseline.text
                ));
            }
            text
        }
        ReportFormat::Markdown => {
            let mut text = report::markdown(run, summaries);
            if let Some(baseline) = baseline {
                text.push_str(&format!(
                    "\n### Against the baseline `{}`\n\n```\n{}```\n",
                    baseline.run_dir, baseline.text
                ));
            }
            text
        }
        ReportFormat::Csv => report::csv(run).map_err(|e| CliError::new(ErrorKind::Harness, e))?,
        ReportFormat::Json => report::json(run, summaries, baseline),
        ReportFormat::Junit => {
            report::junit(run, summaries).map_err(|e| CliError::new(ErrorKind::Harness, e))?
        }
        ReportFormat::Html => {
            let options = report::HtmlOptions {
                baseline,
                confidence: args.confidence,
                ablation: args.ablation,
            };
            report::html(run, summaries, &options)
                .map_err(|e| CliError::new(ErrorKind::Harness, e))?
        }
    })
}

/// A folder of shard folders, some unfinished: the trials recorded so far, as one run (nothing
/// written), and a note on stderr of what is missing.
fn shards_so_far(parent: &std::path::Path) -> Result<store::StoredRun, CliError> {
    let inputs = super::merge::inputs(&[parent.to_owned()])?;
    let progress = inputs
        .shards
        .as_ref()
        .map(|(_, p)| p.as_slice())
        .unwrap_or(&[]);
    let missing = super::merge::unfinished_lines(progress);
    if inputs.dirs.is_empty() {
        return Err(CliError::usage(format!(
            "{}: no shard has written a run yet:\n  {}",
            parent.display(),
            missing.join("\n  ")
        )));
    }
    let gathered = store::gather(&inputs.dirs).map_err(super::merge::merge_error)?;
    let mut manifest = gathered.manifest;
    let trials: Vec<_> = gathered.records.into_iter().map(|(_, r)| r).collect();
    let done = trials.iter().filter(|r| !r.interrupted).count();
    if !missing.is_empty() || done < manifest.planned_trials {
        eprintln!(
            "note: {} holds {done} of the plan's {} trials so far; this report covers those only. Missing:\n  {}",
            parent.display(),
            manifest.planned_trials,
            missing.join("\n  ")
        );
    }
    manifest.interrupted = !missing.is_empty();
    Ok(store::StoredRun {
        path: parent.to_owned(),
        manifest,
        trials,
    })
}
