//! The `deltabench` command line: raw arguments into a typed plan, then one command.
//!
//! `args` holds what clap parses, `error` the error a command ends with, `exit` the exit codes;
//! each command has a file of its own.

mod agents;
mod args;
mod compare;
mod dry_run;
mod error;
pub mod exit;
mod finish;
mod gc;
mod import;
mod init;
mod merge;
mod model;
mod plan;
mod prepare;
mod report;
mod reporter;
mod resume;
mod rounds;
mod run;
mod status;
mod submit;
mod validate;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::{CommandFactory, FromArgMatches};

pub use args::Cli;
use args::{Command, Places, SuiteArgs};
pub(crate) use error::{CliError, ErrorKind};
use exit::Exit;

use crate::store::{self, StoredRun};
use crate::suite::{self, SuiteError};

/// The command line as clap reads it, `--help`'s exit-code table included.
pub fn command() -> clap::Command {
    Cli::command().after_help(exit::after_help())
}

/// Parses the arguments, runs the command, prints any error, and returns the exit code.
pub fn main() -> ExitCode {
    let mut command = command();
    let cli = match command
        .try_get_matches_from_mut(std::env::args_os())
        .and_then(|matches| Cli::from_arg_matches(&matches))
    {
        Ok(cli) => cli,
        Err(err) => {
            let err = err.format(&mut command);
            let _ = err.print();
            // `--help` and `--version` come this way too, and are no error.
            return if err.use_stderr() {
                Exit::Usage
            } else {
                Exit::Ok
            }
            .into();
        }
    };
    // Before the runtime starts a thread: it forks.
    if let Command::SandboxForward(args) = &cli.command {
        let err = crate::workspace::forward_then_exec(args.listen, &args.socket, &args.command);
        // Seen by the run as the agent's failure, with this line in its log's tail.
        eprintln!("deltabench: network `model`: {err}");
        return ExitCode::from(exit::FORWARDER_FAILED);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            let err =
                CliError::with_cause(ErrorKind::Harness, "cannot start the async runtime", err);
            eprint!("{}", err.render());
            return err.kind().exit().into();
        }
    };
    let result = runtime.block_on(dispatch(cli));
    // The run's parent cgroup is empty once every child is gone.
    crate::process::cleanup();
    match result {
        Ok(exit) => exit.into(),
        Err(err) => {
            eprint!("{}", err.render());
            err.kind().exit().into()
        }
    }
}

async fn dispatch(cli: Cli) -> Result<Exit, CliError> {
    match cli.command {
        Command::Run(args) => run::run(*args).await,
        Command::Validate(args) => validate::validate(args).await,
        Command::Prepare(args) => prepare::prepare(args),
        Command::Report(args) => report::report(args),
        Command::Merge(args) => merge::merge(args),
        Command::Submit(args) => submit::submit(*args),
        Command::Status(args) => {
            status::status_watch(
                &args.dir,
                args.watch
                    .map(|secs| std::time::Duration::from_secs(secs.max(1))),
            )
            .await
        }
        Command::Schema => {
            let schema = serde_json::to_string_pretty(&suite::json_schema()).unwrap_or_default();
            print_stdout(&format!("{schema}\n"));
            Ok(Exit::Ok)
        }
        Command::Agents => {
            print_stdout(&agents::list());
            Ok(Exit::Ok)
        }
        Command::Compare(args) => compare::compare(args),
        Command::Plan(args) => plan::plan(args),
        Command::Import(args) => import::import(args).await,
        Command::Resume(args) => resume::resume(&args.run_dir, &args.options, args.jobs).await,
        Command::Gc(args) => gc::gc(&args),
        Command::Model(args) => model::model(args).await,
        Command::Init(args) => init::init(&args),
        Command::Completions(args) => {
            let mut buffer = Vec::new();
            clap_complete::generate(args.shell, &mut command(), "deltabench", &mut buffer);
            print_stdout(&String::from_utf8_lossy(&buffer));
            Ok(Exit::Ok)
        }
        Command::SandboxForward(_) => unreachable!("handled before the runtime starts"),
    }
}

/// Writes to stdout; a closed pipe (`| head`) is not an error, as in ripgrep.
fn print_stdout(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
}

/// The terminal's width for reports: `COLUMNS`, else 100.
fn terminal_width() -> usize {
    std::env::var("COLUMNS")
        .ok()
        .and_then(|columns| columns.trim().parse().ok())
        .filter(|&columns: &usize| columns > 0)
        .unwrap_or(crate::report::DEFAULT_WIDTH)
}

/// Reads a run directory named on the command line; one that cannot be read is a usage error.
fn read_run_dir(path: &Path) -> Result<StoredRun, CliError> {
    Ok(store::read_run(path)?)
}

fn default_jobs() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}

fn workdir(args: &SuiteArgs) -> Result<PathBuf, CliError> {
    let dir = args
        .places
        .workdir
        .clone()
        .unwrap_or_else(std::env::temp_dir);
    if !dir.is_dir() {
        return Err(CliError::usage(format!(
            "--workdir {}: no such directory",
            dir.display()
        )));
    }
    Ok(dir.canonicalize().unwrap_or(dir))
}

fn cache_dir(args: &SuiteArgs, workdir: &Path) -> PathBuf {
    let dir = args
        .places
        .cache
        .clone()
        .unwrap_or_else(|| Places::default_cache(workdir));
    std::path::absolute(&dir).unwrap_or(dir)
}

/// Warns, on stderr, when the suite's repo (a git work tree) has changes not committed: trials
/// clone commits, so an edit left in the work tree is not what any agent sees or is verified on.
fn warn_uncommitted(suite: &suite::Suite) {
    if let Some(warning) = uncommitted(&suite.repo) {
        eprintln!("{warning}");
    }
}

fn uncommitted(repo: &crate::workspace::RepoSource) -> Option<String> {
    if repo.kind != crate::workspace::RepoKind::WorkTree {
        return None;
    }
    let git = git2::Repository::open(&repo.path).ok()?;
    let mut options = git2::StatusOptions::new();
    options
        .include_untracked(true)
        .recurse_untracked_dirs(true)
        .include_ignored(false);
    let statuses = git.statuses(Some(&mut options)).ok()?;
    let changed: Vec<String> = statuses
        .iter()
        .filter(|entry| entry.status() != git2::Status::CURRENT)
        .filter_map(|entry| entry.path().ok().map(str::to_owned))
        .collect();
    if changed.is_empty() {
        return None;
    }
    let head = git
        .head()
        .ok()
        .and_then(|head| head.peel_to_commit().ok())
        .map_or("no commit yet".to_owned(), |commit| {
            let id = commit.id().to_string();
            let summary = commit
                .summary()
                .ok()
                .flatten()
                .unwrap_or_default()
                .to_owned();
            format!("{} ({summary})", &id[..12])
        });
    const SHOWN: usize = 10;
    let more = changed.len().saturating_sub(SHOWN);
    Some(format!(
        "warning: {} has {} uncommitted change(s) that no trial sees ({}{}): trials clone the committed tree, HEAD {head} (a task's `base:` its own commit); commit them to have them tested",
        repo.path.display(),
        changed.len(),
        changed
            .into_iter()
            .take(SHOWN)
            .collect::<Vec<_>>()
            .join(", "),
        if more > 0 {
            format!(", +{more} more")
        } else {
            String::new()
        }
    ))
}

/// Loads the suite at SUITE (with --agents). A SUITE that is not there gets a hint at `init`.
fn load_suite(path: &Path, args: &SuiteArgs) -> Result<Arc<suite::Suite>, CliError> {
    match suite::load(path, args.agents.as_deref()) {
        Ok(mut suite) => {
            suite.base_images.extend(args.base_images.iter().cloned());
            Ok(Arc::new(suite))
        }
        Err(err @ SuiteError::NotFound { .. }) => {
            Err(CliError::from(err).hint(if path == Path::new(".") {
                "no SUITE was given, so the current folder was looked in; name one (a suite file, or a folder holding suite.yaml), or `deltabench init DIR` writes a first suite"
            } else {
                "SUITE is a suite file, or a folder holding suite.yaml; `deltabench init DIR` writes a first suite"
            }))
        }
        Err(err) => Err(err.into()),
    }
}
