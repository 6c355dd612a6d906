//! The `deltabench` command line: raw arguments into a typed plan, then one command.
//!
//! Exit codes: 0 success; 1 a check failed (a trial could not be scored, validate found bad
//! tasks); 2 usage or configuration error.

mod compare;
mod gc;
mod import;
mod init;
mod merge;
mod model;
mod reporter;
mod resume;
mod validate;

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand, ValueEnum};
use indexmap::IndexMap;
use tokio_util::sync::CancellationToken;

use crate::report;
use crate::runner::{self, PlanError, RunError, RunRequest};
use crate::store::{self, Outcome, TrialRecord};
use crate::suite::{self, AgentSpec, SuiteError};

use compare::{compare, plan_cmd};
use reporter::TerminalReporter;
use validate::Trial;

/// Exit code: success.
pub const EXIT_OK: u8 = 0;
/// Exit code: a verdict failed (the gate found a regression, `validate` found bad tasks).
pub const EXIT_CHECK_FAILED: u8 = 1;
/// Exit code: usage or configuration error.
pub const EXIT_USAGE: u8 = 2;
/// Exit code: some trials could not be scored (`infra_error`), or the harness itself failed.
pub const EXIT_UNSCORED: u8 = 3;
/// Exit code: interrupted (Ctrl-C, SIGTERM); what finished is recorded.
pub const EXIT_INTERRUPTED: u8 = 130;

const AFTER_HELP: &str = "\
Exit codes:
    0  ok: every trial was scored (failed trials are a result, not an error)
    1  a verdict failed: the gate found a regression, or validate found bad tasks
    2  usage or configuration error (the suite file, an agents file, a flag, an --out in use)
    3  some trials could not be scored (infra_error), or the harness failed
  130  interrupted (what finished is recorded; `deltabench resume` finishes the run)

Start with:
  deltabench init my-suite                         # a first suite of your own
  deltabench run suites/demo --workdir /dev/shm
  deltabench validate suites/demo
  deltabench run suites/smoke --workdir /dev/shm   # the six real agent CLIs, offline";

/// Evaluate coding agents on task suites, scored only on what the workspace shows.
#[derive(Debug, Parser)]
#[command(name = "deltabench", version, about, after_help = AFTER_HELP, max_term_width = 100)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run agents on a suite's tasks and write a run directory.
    ///
    /// Each trial is provisioned as a private clone of the suite's repo at the task's base
    /// commit, the agent runs in it, the diff is taken with the harness's own view of the tree,
    /// and the verify command runs in a fresh workspace holding exactly that diff and the
    /// hidden tests; the trial is scored on that evidence alone.
    ///
    /// `isolation: worktree` (the default) gives no protection from the agent: for an agent you
    /// do not trust, set `isolation: sandbox` under `defaults:` in the suite.
    Run(RunArgs),
    /// Check that every task is sound: the verify command fails on the untouched base (with
    /// the hidden tests) and passes with the reference solution, N times in a row.
    ///
    /// What the reference's verify run showed (tests run and passed, and their names) is
    /// recorded in `<suite>.lock.json` next to the suite; trials must then show at least as
    /// much to pass.
    ///
    /// A bad task's line says why from what its trials left (zero tests ran, the tests that
    /// failed, a verify command not found, the tail of verify.log), and the scratch run is kept
    /// for reading; its path is printed.
    Validate(ValidateArgs),
    /// Print a report of a run directory.
    Report(ReportArgs),
    /// Combine the run directories of `run --shard I/N` into one run directory.
    ///
    /// The inputs must be shards of the same plan (same suite, agent configs, trials per task
    /// and tasks), each shard once; the result reads like the unsharded run.
    Merge(MergeArgs),
    /// Print the JSON Schema of the suite file.
    Schema,
    /// Compare a candidate with a baseline, task by task, and say whether it regressed.
    ///
    /// Either two run directories (BASE CANDIDATE; `--agent` picks the agent when a run holds
    /// several), or one run directory and two of its agents (RUN_DIR BASE_AGENT
    /// CANDIDATE_AGENT). Only tasks both ran count. Across tasks, a paired permutation test on
    /// per-task pass fractions (exact McNemar with one trial per task), whose inversion is the
    /// interval; within tasks, an exact Fisher test on each task's trials, Holm-corrected over
    /// the tasks. The verdict is `regressed` when either finds a significant drop.
    ///
    /// Exit codes: 0 compared (with --gate: no regression beyond the tolerance); 1 with --gate,
    /// the candidate regressed; 2 usage error (runs of different suites, an unknown agent);
    /// 3 with --gate, no regression among the scored trials but some trials could not be
    /// scored, so the gate is undecided.
    Compare(CompareArgs),
    /// Say how many tasks x trials a comparison needs to detect a given effect.
    Plan(PlanArgs),
    /// Turn a task set in another format into a ready suite folder.
    ///
    /// FORMAT is swebench (JSON or JSONL rows; one suite per repository), harbor or
    /// terminal-bench (a folder of task folders), or exercism (a folder of exercises). Prints
    /// what was imported, what was skipped and why, and the `deltabench validate` to run next.
    Import(ImportArgs),
    /// Finish a run that was killed or interrupted: run the planned trials its trials.jsonl
    /// does not hold yet, after reaping what the dead run left.
    ///
    /// Refuses when the suite file or an agent's config changed since the run started
    /// (unless --force), or when the run is still running.
    Resume(ResumeArgs),
    /// Remove what dead runs left: workspaces, overlay mounts, processes still working in them.
    ///
    /// Runs leave a lease file in the cache (`CACHE/leases/`) while they hold workspaces; gc
    /// reaps every lease whose process is gone, whatever --workdir the run used.
    Gc(GcArgs),
    /// Local stand-ins for model APIs, to drive agent CLIs offline.
    Model(model::ModelArgs),
    /// Write a first suite that validates and runs as written: a small git repo with a bug,
    /// one task with hidden tests and a reference solution, a stand-in agent script, and a
    /// suite.yaml with every key commented.
    Init(init::InitArgs),
}

#[derive(Debug, clap::Args)]
struct ResumeArgs {
    /// The run directory of the run to finish.
    #[arg(value_name = "RUN_DIR")]
    run_dir: PathBuf,
    #[command(flatten)]
    options: ResumeOptions,
    /// Trials at once [default: as the run started].
    #[arg(short = 'j', long = "jobs", value_name = "N")]
    jobs: Option<usize>,
}

/// Flags shared by `resume` and `run --resume`.
#[derive(Debug, clap::Args)]
struct ResumeOptions {
    /// Resume even though the suite file or an agent's config changed since the run started.
    #[arg(long)]
    force: bool,
    /// Run an `infra_error` trial again up to N times; only the last attempt is recorded
    /// [default: 0; when resuming, as the run started].
    #[arg(long, value_name = "N")]
    retries: Option<u32>,
}

#[derive(Debug, clap::Args)]
struct GcArgs {
    /// Only print what would be removed.
    #[arg(long)]
    dry_run: bool,
    /// The cache whose leases to check [default: WORKDIR/deltabench-cache].
    #[arg(long, value_name = "DIR", env = "DELTABENCH_CACHE")]
    cache: Option<PathBuf>,
    /// Where the default cache lives [default: the system temp dir].
    #[arg(long, value_name = "DIR", env = "DELTABENCH_WORKDIR")]
    workdir: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
struct ImportArgs {
    /// swebench, harbor, terminal-bench or exercism.
    #[arg(value_name = "FORMAT")]
    format: String,
    /// A rows file (swebench), or a folder of tasks or exercises.
    #[arg(value_name = "SOURCE")]
    source: PathBuf,
    /// The suite folder to write.
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
    /// swebench: the folder of local clones, each named owner__name or owner/name
    /// [default: DIR/repos, cloned into from GitHub when missing].
    #[arg(long, value_name = "DIR")]
    repos: Option<PathBuf>,
    /// swebench: a YAML map of owner/name (or owner/name@version) to {setup, test_command,
    /// timeout}; {tests} and {test_files} in test_command stand for the instance's tests.
    #[arg(long, value_name = "FILE")]
    env: Option<PathBuf>,
    /// Replace the suite already in DIR.
    #[arg(long)]
    force: bool,
    /// harbor, terminal-bench: run each task's solution script once, here (in a scratch copy),
    /// and keep the change it makes as the task's reference patch.
    #[arg(long)]
    run_solutions: bool,
}

#[derive(Debug, clap::Args)]
struct GateArgs {
    /// Exit 1 when the candidate regressed: a significant drop (across tasks, or within one
    /// task's trials) larger than --max-drop, or more tasks broken outright than --max-broken.
    #[arg(long)]
    gate: bool,
    /// The drop in pass rate (0..1) tolerated by --gate.
    #[arg(long, value_name = "FRACTION", default_value_t = 0.0)]
    max_drop: f64,
    /// A regression, whatever the tests say: more than N tasks went from always passing (every
    /// baseline trial) to never passing (no candidate trial).
    #[arg(long, value_name = "N")]
    max_broken: Option<usize>,
    /// Confidence of the intervals and the tests.
    #[arg(long, value_name = "LEVEL", default_value_t = 0.95)]
    confidence: f64,
}

#[derive(Debug, clap::Args)]
#[command(
    override_usage = "deltabench compare [OPTIONS] <BASE> <CANDIDATE>\n       \
                            deltabench compare [OPTIONS] <RUN_DIR> <BASE_AGENT> <CANDIDATE_AGENT>"
)]
struct CompareArgs {
    /// BASE CANDIDATE: the baseline's and the candidate's run directories; or RUN_DIR
    /// BASE_AGENT CANDIDATE_AGENT: one run directory and two of its agents.
    #[arg(
        value_names = ["BASE|RUN_DIR", "CANDIDATE|BASE_AGENT", "CANDIDATE_AGENT"],
        num_args = 2..=3,
        required = true
    )]
    targets: Vec<String>,
    /// The agent to compare when a run directory holds several.
    #[arg(long, value_name = "NAME")]
    agent: Option<String>,
    /// How to print the comparison.
    #[arg(long, value_enum, default_value = "text")]
    format: CompareFormat,
    #[command(flatten)]
    gate: GateArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum CompareFormat {
    /// Lines for a terminal or a CI log.
    Text,
    /// The whole comparison, per-task counts and tests included, and the gate's decision.
    Json,
    /// For a CI summary: the rates, the changed tasks as a table, the verdict and the gate.
    Markdown,
}

#[derive(Debug, clap::Args)]
struct PlanArgs {
    /// A run directory whose per-task variance the plan uses.
    #[arg(value_name = "RUN_DIR")]
    run_dir: PathBuf,
    /// The difference in pass rate (0..1) to detect, e.g. 0.05 for five points.
    #[arg(long, value_name = "FRACTION", default_value_t = 0.05)]
    effect: f64,
    /// The chance of detecting an effect of that size.
    #[arg(long, value_name = "FRACTION", default_value_t = 0.8)]
    power: f64,
    #[arg(long, value_name = "LEVEL", default_value_t = 0.95)]
    confidence: f64,
    /// The agent whose results the plan uses [default: all agents of the run].
    #[arg(long, value_name = "NAME")]
    agent: Option<String>,
}

#[derive(Debug, clap::Args)]
struct SuiteArgs {
    /// A YAML file with a top-level `agents:` map; its agents override the suite's.
    #[arg(long, value_name = "FILE")]
    agents: Option<PathBuf>,
    /// Where workspaces are created (a tmpfs such as /dev/shm makes provisioning fast)
    /// [default: the system temp dir, $TMPDIR or /tmp].
    #[arg(long, value_name = "DIR", env = "DELTABENCH_WORKDIR")]
    workdir: Option<PathBuf>,
    /// Prepared sources and workspace templates, reused across runs [default: WORKDIR/deltabench-cache].
    #[arg(long, value_name = "DIR", env = "DELTABENCH_CACHE")]
    cache: Option<PathBuf>,
    /// Trials at once [default: the number of cores].
    #[arg(short = 'j', long = "jobs", value_name = "N")]
    jobs: Option<usize>,
}

/// `run --help`'s closing part: the agent kinds an agents file can name.
const RUN_AFTER_HELP: &str = "\
Agent kinds (in the suite's `agents:` or an --agents file):
  noop, oracle              built in: change nothing / apply the task's solution
  mock                      replay a scripted event stream
  command                   your own harness: `sh -c RUN` in the workspace
  claude-code, codex, gemini-cli, opencode, mini-swe-agent, aider
                            the real CLIs, headless, each with its own HOME; keys: model,
                            max_turns, permission_mode, append_system_prompt, args, env,
                            binary, endpoint (URL or scripted:FILE), api_key, timeout,
                            network, price
  `deltabench schema` prints every key; `deltabench model serve --help` the scripted endpoint.";

#[derive(Debug, clap::Args)]
#[command(after_long_help = RUN_AFTER_HELP)]
struct RunArgs {
    /// A suite file, or a folder holding suite.yaml.
    #[arg(value_name = "SUITE", required_unless_present = "resume")]
    suite_path: Option<PathBuf>,
    #[command(flatten)]
    suite: SuiteArgs,
    /// Run only this agent (repeatable) [default: the suite's agents, or oracle and noop].
    #[arg(long = "agent", value_name = "NAME")]
    agent: Vec<String>,
    /// Trials per (task, agent).
    #[arg(long, value_name = "N", default_value_t = 1)]
    trials: u32,
    /// Run only this task (repeatable).
    #[arg(long = "task", value_name = "ID")]
    task: Vec<String>,
    /// Run only tasks with this tag (repeatable; any tag matches).
    #[arg(long = "tag", value_name = "TAG")]
    tag: Vec<String>,
    /// Run only shard I of N (1-based): a fixed slice of the trials, chosen by a hash of
    /// (task, agent, trial). Combine the shards with `deltabench merge`.
    #[arg(long, value_name = "I/N")]
    shard: Option<runner::Shard>,
    /// The run directory [default: reports/<suite>-<UTC timestamp>].
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Keep the workspaces after the run (for inspection).
    #[arg(long)]
    keep_workspaces: bool,
    /// After the run, compare each agent with the same agent in this earlier run directory.
    #[arg(long, value_name = "RUN_DIR")]
    baseline: Option<PathBuf>,
    #[command(flatten)]
    gate: GateArgs,
    /// Finish the run in RUN_DIR instead (as `deltabench resume RUN_DIR`); the plan is the
    /// recorded one.
    #[arg(
        long,
        value_name = "RUN_DIR",
        help_heading = "Retries and resuming",
        conflicts_with_all = ["suite_path", "out", "shard", "baseline", "agent", "task", "tag", "trials", "keep_workspaces"]
    )]
    resume: Option<PathBuf>,
    #[command(flatten, next_help_heading = "Retries and resuming")]
    resume_options: ResumeOptions,
}

#[derive(Debug, clap::Args)]
struct ValidateArgs {
    /// A suite file, or a folder holding suite.yaml.
    #[arg(value_name = "SUITE")]
    suite_path: PathBuf,
    #[command(flatten)]
    suite: SuiteArgs,
    /// Times each check must hold (more catches flaky tasks).
    #[arg(long, value_name = "N", default_value_t = 1)]
    trials: u32,
    /// Check only this task (repeatable).
    #[arg(long = "task", value_name = "ID")]
    task: Vec<String>,
    /// Keep the scratch run (each trial's verify.log, tests.json, diff.patch) even when every
    /// task is sound; it is always kept when one is not.
    #[arg(long)]
    keep: bool,
}

#[derive(Debug, clap::Args)]
struct MergeArgs {
    /// Run directories written by `deltabench run --shard I/N`.
    #[arg(value_name = "RUN_DIR", required = true)]
    inputs: Vec<PathBuf>,
    /// The merged run directory (must not hold a run yet).
    #[arg(long, value_name = "DIR")]
    out: PathBuf,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Format {
    Table,
    Markdown,
    Csv,
    Json,
    /// JUnit XML: one testsuite per agent, one testcase per trial.
    Junit,
    /// One self-contained HTML page: charts, heat map and per-trial drill-down.
    Html,
}

#[derive(Debug, clap::Args)]
struct ReportArgs {
    /// A run directory written by `deltabench run`.
    #[arg(value_name = "RUN_DIR")]
    run_dir: PathBuf,
    /// table and markdown: the per-agent summary (with each agent's false claims), then a
    /// task x agent table of passed/scored trials, failing tasks first.
    #[arg(long, value_enum, default_value = "table")]
    format: Format,
    /// Write the report to FILE instead of stdout.
    #[arg(short = 'o', long, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Report only this agent (repeatable); the name of a `matrix:` selects all its combinations.
    #[arg(long, value_name = "NAME")]
    agent: Vec<String>,
    /// Instead of the summary: each `matrix:` factor's main effect on pass rate, cost and time,
    /// the two-factor interaction, and the Pareto front (table, markdown, json; the html page
    /// shows them whenever the run has a matrix).
    #[arg(long)]
    ablation: bool,
    /// Confidence of the intervals in --ablation and of the comparison with --baseline.
    #[arg(long, value_name = "LEVEL", default_value_t = 0.95)]
    confidence: f64,
    /// Add each agent's per-task flips and verdict against this earlier run (table, markdown,
    /// json, html).
    #[arg(long, value_name = "RUN_DIR")]
    baseline: Option<PathBuf>,
}

/// An error as the user sees it: a message, maybe a snippet and a hint, and an exit code.
#[derive(Debug)]
pub struct CliError {
    pub code: u8,
    pub message: String,
    pub snippet: Option<String>,
    pub hint: Option<String>,
}

impl CliError {
    fn usage(message: impl Into<String>) -> Self {
        Self {
            code: EXIT_USAGE,
            message: message.into(),
            snippet: None,
            hint: None,
        }
    }

    fn failed(message: impl Into<String>) -> Self {
        Self {
            code: EXIT_UNSCORED,
            message: message.into(),
            snippet: None,
            hint: None,
        }
    }

    fn hint(mut self, hint: Option<String>) -> Self {
        self.hint = hint;
        self
    }
}

impl From<SuiteError> for CliError {
    fn from(err: SuiteError) -> Self {
        Self {
            code: EXIT_USAGE,
            snippet: err.snippet().map(str::to_owned),
            hint: Some(match err {
                SuiteError::Referenced(_) => {
                    "`deltabench model serve --help` describes the script format".into()
                }
                _ => "`deltabench schema` prints every key the suite file accepts".into(),
            }),
            message: err.to_string(),
        }
    }
}

impl From<PlanError> for CliError {
    fn from(err: PlanError) -> Self {
        Self::usage(err.message).hint(err.hint)
    }
}

impl From<RunError> for CliError {
    fn from(err: RunError) -> Self {
        match err {
            RunError::Config { message, at } => {
                let message = match at {
                    Some((path, line, column)) => {
                        format!("{}:{line}:{column}: {message}", path.display())
                    }
                    None => message,
                };
                Self::usage(message)
            }
            RunError::Io(message) => Self::failed(message),
        }
    }
}

/// Parses the arguments, runs the command, prints any error, and returns the exit code.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            let _ = err.print();
            return ExitCode::from(if err.use_stderr() {
                EXIT_USAGE
            } else {
                EXIT_OK
            });
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("error: cannot start the async runtime: {err}");
            return ExitCode::from(EXIT_UNSCORED);
        }
    };
    let result = runtime.block_on(dispatch(cli));
    // The run's parent cgroup is empty once every child is gone.
    crate::process::cleanup();
    match result {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            eprintln!("error: {}", err.message);
            if let Some(snippet) = &err.snippet {
                eprintln!("{snippet}");
            }
            if let Some(hint) = &err.hint {
                eprintln!("hint: {hint}");
            }
            ExitCode::from(err.code)
        }
    }
}

async fn dispatch(cli: Cli) -> Result<u8, CliError> {
    match cli.command {
        Command::Run(args) => run(args).await,
        Command::Validate(args) => validate(args).await,
        Command::Report(args) => report_cmd(args),
        Command::Merge(args) => merge::merge(args),
        Command::Schema => {
            let schema = serde_json::to_string_pretty(&suite::json_schema()).unwrap_or_default();
            print_stdout(&format!("{schema}\n"));
            Ok(EXIT_OK)
        }
        Command::Compare(args) => compare(args),
        Command::Plan(args) => plan_cmd(args),
        Command::Import(args) => import::import_cmd(args).await,
        Command::Resume(args) => resume::resume(&args.run_dir, &args.options, args.jobs).await,
        Command::Gc(args) => gc::gc(&args),
        Command::Model(args) => model::model_cmd(args).await,
        Command::Init(args) => init::init(&args),
    }
}

/// Writes to stdout; a closed pipe (`| head`) is not an error, as in ripgrep.
fn print_stdout(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
}

fn default_jobs() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}

fn workdir(args: &SuiteArgs) -> Result<PathBuf, CliError> {
    let dir = args.workdir.clone().unwrap_or_else(std::env::temp_dir);
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
        .cache
        .clone()
        .unwrap_or_else(|| workdir.join("deltabench-cache"));
    std::path::absolute(&dir).unwrap_or(dir)
}

fn load_suite(path: &Path, args: &SuiteArgs) -> Result<Arc<suite::Suite>, CliError> {
    Ok(Arc::new(suite::load(path, args.agents.as_deref())?))
}

async fn run(args: RunArgs) -> Result<u8, CliError> {
    let suite_path = match (&args.resume, &args.suite_path) {
        (Some(run_dir), _) => {
            return resume::resume(run_dir, &args.resume_options, args.suite.jobs).await;
        }
        (None, Some(path)) => path,
        // clap requires SUITE unless --resume is given.
        (None, None) => return Err(CliError::usage("name a SUITE to run")),
    };
    let suite = load_suite(suite_path, &args.suite)?;
    let workdir = workdir(&args.suite)?;
    let request = RunRequest {
        agents: args.agent,
        trials: args.trials,
        jobs: args.suite.jobs.unwrap_or_else(default_jobs),
        tasks: args.task,
        tags: args.tag,
        cache: cache_dir(&args.suite, &workdir),
        workdir,
        keep_workspaces: args.keep_workspaces,
        shard: args.shard,
        agents_file: args
            .suite
            .agents
            .as_deref()
            .map(std::path::absolute)
            .transpose()
            .map_err(|e| CliError::usage(format!("--agents: {e}")))?,
        retries: args.resume_options.retries.unwrap_or(0),
    };
    let plan = runner::plan(suite.clone(), request)?;
    if let Some(shard) = args.shard {
        match plan.trials.len() {
            0 => eprintln!(
                "shard {shard} holds none of the plan's {} trials: writing an empty run directory",
                plan.unsharded_trials
            ),
            n => eprintln!(
                "shard {shard}: {n} of the plan's {} trials",
                plan.unsharded_trials
            ),
        }
    }
    let baseline = args
        .baseline
        .as_deref()
        .map(compare::read_run_arg)
        .transpose()?;
    let out = args.out.unwrap_or_else(|| default_out(&suite.name));
    note_unvalidated(&plan);
    let mut reporter = TerminalReporter::new(std::io::stderr().is_terminal());
    let outcome = runner::execute(&plan, &out, &mut reporter, CancellationToken::new()).await?;
    reporter.finish();
    finish_run(&plan, &outcome, baseline.as_ref().map(|b| (b, &args.gate)))
}

/// Says which tasks run without validated evidence: their trials get the output checks only.
fn note_unvalidated(plan: &runner::Plan) {
    let unvalidated = plan.unvalidated();
    if unvalidated.is_empty() {
        return;
    }
    let shown: Vec<&str> = unvalidated.iter().take(5).copied().collect();
    let more = unvalidated.len() - shown.len();
    eprintln!(
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
    );
}

/// Prints the summary of a finished (or interrupted) run and returns its exit code.
fn finish_run(
    plan: &runner::Plan,
    outcome: &runner::RunOutcome,
    baseline: Option<(&store::StoredRun, &GateArgs)>,
) -> Result<u8, CliError> {
    let agents: Vec<String> = plan.agents.keys().cloned().collect();
    let summaries = report::summarize(&outcome.records, &agents);
    print_stdout(&format!(
        "{}\nrun directory: {}\n",
        report::table(&summaries),
        outcome.run_dir.display()
    ));
    for leftover in &outcome.leftovers {
        eprintln!("warning: could not clean up {leftover}");
    }
    let gate_code = match baseline {
        Some((baseline, gate)) => {
            let current = compare::read_run_arg(&outcome.run_dir)?;
            let (text, code) = compare::against_baseline(baseline, &current, gate)?;
            print_stdout(&format!("\n{text}"));
            code
        }
        None => EXIT_OK,
    };
    let infra = outcome
        .records
        .iter()
        .filter(|r| r.outcome == Outcome::InfraError)
        .count();
    if outcome.interrupted {
        eprintln!(
            "interrupted: {} of {} trials recorded",
            outcome.records.len(),
            plan.trials.len()
        );
        return Ok(EXIT_INTERRUPTED);
    }
    // A regression among the scored trials is a verdict, whatever else could not be scored.
    if gate_code == EXIT_CHECK_FAILED {
        return Ok(EXIT_CHECK_FAILED);
    }
    if infra > 0 {
        eprintln!("{infra} trial(s) could not be scored (infra_error); see trials.jsonl");
        return Ok(EXIT_UNSCORED);
    }
    Ok(gate_code)
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

/// Why a task is unsound, with what shows it.
struct Unsound<'a> {
    reason: String,
    /// Lines shown under the reason (the tests that failed or passed).
    details: Vec<String>,
    /// The trial whose verify output is shown.
    shown: Option<&'a Trial<'a>>,
}

impl<'a> Unsound<'a> {
    fn new(reason: impl Into<String>, shown: Option<&'a Trial<'a>>) -> Self {
        Self {
            reason: reason.into(),
            details: Vec::new(),
            shown,
        }
    }
}

/// Why a task is unsound, from its noop and oracle trials and what their folders hold.
fn judge<'a>(noop: &'a [Trial<'a>], oracle: &'a [Trial<'a>]) -> Option<Unsound<'a>> {
    if let Some(t) = noop
        .iter()
        .chain(oracle)
        .find(|t| t.record.outcome == Outcome::InfraError)
    {
        let why = t.record.infra_error.as_deref().unwrap_or("unknown");
        return Some(Unsound::new(
            format!("could not be checked: {why}"),
            Some(t),
        ));
    }
    if let Some(t) = oracle
        .iter()
        .find(|t| t.record.status != Some(crate::agent::CodingStatus::Completed))
    {
        let why = t
            .record
            .error
            .as_ref()
            .map_or("unknown".to_owned(), |e| e.message.clone());
        return Some(Unsound::new(
            format!("reference solution could not be applied: {why}"),
            None,
        ));
    }
    // A shell's "command not found" (127) or "not executable" (126), not a test verdict. Only
    // the reference's counts: on the base, a tool the solution adds is rightly missing.
    if let Some(t) = oracle
        .iter()
        .find(|t| matches!(t.verify_exit(), Some(126 | 127)))
    {
        let reason = match t.verify_exit() {
            Some(127) => "the verify command was not found: exit 127 (with the solution applied)",
            _ => "the verify command could not be executed: exit 126 (with the solution applied)",
        };
        return Some(Unsound::new(reason, Some(t)));
    }
    const WHERE_TESTS_GO: &str = "check that it runs the hidden tests where `tests:` puts them (its folder is copied onto the workspace root)";
    if let Some((t, runners)) = oracle.iter().find_map(|t| Some((t, t.zero_tests()?))) {
        return Some(Unsound::new(
            format!(
                "zero tests ran: with the solution applied, the test runner ({runners}) ran no test; {WHERE_TESTS_GO}"
            ),
            Some(t),
        ));
    }
    let n = noop.len();
    let base_passes: Vec<&Trial> = noop.iter().filter(|t| t.verify_passed()).collect();
    let reference_passes = oracle.iter().filter(|t| t.record.passed()).count();
    if base_passes.len() == n
        && let Some(&t) = base_passes.first()
    {
        if let Some(runners) = t.zero_tests() {
            return Some(Unsound::new(
                format!(
                    "zero tests ran: the verify command succeeds on the untouched base, but the test runner ({runners}) ran no test; {WHERE_TESTS_GO}"
                ),
                Some(t),
            ));
        }
        let mut unsound = Unsound::new(
            "passes without change: the verify command succeeds on the untouched base",
            Some(t),
        );
        if let Some(tests) = t.tests.as_ref().filter(|tests| !tests.names.is_empty()) {
            unsound.details.push(format!(
                "passed on the base: {}",
                validate::name_list(&tests.names)
            ));
        }
        return Some(unsound);
    }
    if reference_passes == 0
        && let Some(t) = oracle.first()
    {
        let why = t.record.reason.as_deref().unwrap_or("it did not pass");
        let mut unsound = Unsound::new(
            format!("reference fails: the verify command fails with the solution applied ({why})"),
            Some(t),
        );
        let failed = t.failed_tests();
        if !failed.is_empty() {
            unsound
                .details
                .push(format!("failed: {}", validate::name_list(&failed)));
        }
        return Some(unsound);
    }
    if !base_passes.is_empty() || reference_passes < oracle.len() {
        // Show the trial that broke the pattern.
        let odd = base_passes
            .first()
            .copied()
            .or_else(|| oracle.iter().find(|t| !t.record.passed()));
        return Some(Unsound::new(
            format!(
                "flaky: base passed {} of {n} times, reference passed {reference_passes} of {} times",
                base_passes.len(),
                oracle.len()
            ),
            odd,
        ));
    }
    None
}

impl Unsound<'_> {
    /// The task's `BAD` line and the evidence under it.
    fn render(&self, task: &str) -> String {
        let mut text = format!(
            "BAD  {task}: {}
",
            self.reason
        );
        for line in &self.details {
            text.push_str(&format!("       {line}\n"));
        }
        if let Some(t) = self.shown
            && t.dir.join("verify.log").exists()
        {
            text.push_str(&t.log_tail("       "));
        }
        text
    }
}

/// What every oracle trial's verify run showed (`tests.json` in its folder): the least of them,
/// so a trial is held only to what the reference always shows.
fn reference_evidence(
    run_dir: &Path,
    task: &str,
    oracle: &[&TrialRecord],
) -> Option<crate::metric::TestEvidence> {
    let mut least: Option<crate::metric::TestEvidence> = None;
    for record in oracle {
        let file = run_dir
            .join("trials")
            .join(task)
            .join(store::sanitize(&record.agent))
            .join(record.trial.to_string())
            .join("tests.json");
        let seen: crate::metric::TestEvidence =
            serde_json::from_slice(&std::fs::read(file).ok()?).ok()?;
        least = Some(match least {
            None => seen,
            Some(mut least) => {
                least.ran = least.ran.min(seen.ran);
                least.passed = least.passed.min(seen.passed);
                least.names.retain(|name| seen.names.contains(name));
                least.runners.retain(|name| seen.runners.contains(name));
                least
            }
        });
    }
    least
}

async fn validate(args: ValidateArgs) -> Result<u8, CliError> {
    let mut loaded = (*load_suite(&args.suite_path, &args.suite)?).clone();
    // The checks always use the real built-ins, whatever the suite calls its agents.
    loaded.agents = IndexMap::from([
        ("noop".to_owned(), AgentSpec::Noop),
        ("oracle".to_owned(), AgentSpec::Oracle),
    ]);
    for task in &mut loaded.tasks {
        task.isolation = crate::workspace::Isolation::Worktree;
    }
    let workdir = workdir(&args.suite)?;
    let request = RunRequest {
        agents: vec!["noop".into(), "oracle".into()],
        trials: args.trials,
        jobs: args.suite.jobs.unwrap_or_else(default_jobs),
        tasks: args.task.clone(),
        tags: Vec::new(),
        cache: cache_dir(&args.suite, &workdir),
        workdir: workdir.clone(),
        keep_workspaces: false,
        shard: None,
        agents_file: None,
        retries: 0,
    };
    let mut plan = runner::plan(Arc::new(loaded), request)?;
    // The reference is measured afresh, not held to what an earlier validate recorded.
    plan.expected.clear();
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

    let mut bad = 0;
    let mut lock = suite::SuiteLock::read(&plan.suite)
        .ok()
        .flatten()
        .unwrap_or_default();
    let (mut locked, mut changed) = (0, false);
    for task in plan.tasks.iter().map(|&i| &plan.suite.tasks[i]) {
        let of = |agent: &str| -> Vec<Trial> {
            outcome
                .records
                .iter()
                .filter(|r| r.task == task.id && r.agent == agent)
                .map(|r| Trial::read(&run_dir, r))
                .collect()
        };
        let (noop, oracle) = (of("noop"), of("oracle"));
        let verdict = if task.solution.is_none() {
            Some(Unsound::new(
                "has no `solution`: nothing proves the task can be solved",
                None,
            ))
        } else {
            judge(&noop, &oracle)
        };
        match verdict {
            Some(unsound) => {
                bad += 1;
                print_stdout(&unsound.render(&task.id));
            }
            None => {
                print_stdout(&format!("ok   {}\n", task.id));
                let records: Vec<&TrialRecord> = oracle.iter().map(|t| t.record).collect();
                if let Some(evidence) = reference_evidence(&run_dir, &task.id, &records) {
                    changed |= lock.record(task, evidence, runner::now());
                    locked += 1;
                }
            }
        }
    }
    if changed && let Err(e) = lock.write(&plan.suite) {
        scratch.finish(args.keep || bad > 0);
        return Err(CliError::failed(e.to_string()));
    }
    if locked > 0 {
        print_stdout(&format!(
            "recorded what the reference's verify run showed for {locked} task(s) in {}: trials must show at least as much\n",
            suite::lock_path(&plan.suite).display()
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
        return Ok(EXIT_INTERRUPTED);
    }
    if bad > 0 {
        print_stdout(&format!("{bad} of {total} tasks are unsound\n"));
        Ok(EXIT_CHECK_FAILED)
    } else {
        print_stdout(&format!(
            "all {total} tasks are sound ({} trial(s) each way)\n",
            args.trials
        ));
        Ok(EXIT_OK)
    }
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
            CliError::failed(format!(
                "cannot create the scratch run directory {}: {e}",
                path.display()
            ))
        };
        // Taken before the folder exists: whatever this validate leaves, gc can find.
        let lease = store::HeldLease::acquire(cache, &path, &path).map_err(cannot)?;
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

fn report_cmd(args: ReportArgs) -> Result<u8, CliError> {
    if !(0.5..1.0).contains(&args.confidence) {
        return Err(CliError::usage(format!(
            "--confidence {} is out of range: use a level in [0.5, 1), e.g. 0.95",
            args.confidence
        )));
    }
    let format = match args.format {
        Format::Table => "table",
        Format::Markdown => "markdown",
        Format::Csv => "csv",
        Format::Json => "json",
        Format::Junit => "junit",
        Format::Html => "html",
    };
    // CSV and JUnit hold one row or test case per trial: neither has room for either.
    if matches!(args.format, Format::Csv | Format::Junit) {
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
    if args.ablation && args.baseline.is_some() && !matches!(args.format, Format::Html) {
        return Err(CliError::usage(
            "--ablation replaces the summary the --baseline comparison goes with: use one at a time, or --format html for both",
        ));
    }
    let run = store::read_run(&args.run_dir).map_err(|e| {
        CliError::usage(e.to_string()).hint(Some(
            "RUN_DIR is a folder written by `deltabench run`".into(),
        ))
    })?;
    let run =
        report::select_agents(&run, &args.agent).map_err(|e| CliError::usage(e.to_string()))?;
    let agents: Vec<String> = run.manifest.agents.keys().cloned().collect();
    let summaries = report::summarize(&run.trials, &agents);
    let baseline = match &args.baseline {
        Some(path) => {
            let gate = GateArgs {
                gate: false,
                max_drop: 0.0,
                max_broken: None,
                confidence: args.confidence,
            };
            let (text, _) = compare::against_baseline(&compare::read_run_arg(path)?, &run, &gate)?;
            Some(report::Baseline {
                run_dir: path.display().to_string(),
                text,
            })
        }
        None => None,
    };
    let text = match args.format {
        Format::Table if args.ablation => report::ablation(&run, args.confidence),
        Format::Markdown if args.ablation => report::ablation_markdown(&run, args.confidence),
        Format::Json if args.ablation => report::ablation_json(&run, args.confidence),
        Format::Table => {
            let mut text = report::text(&run, &summaries);
            if let Some(baseline) = &baseline {
                text.push_str(&format!(
                    "\nAgainst the baseline {}:\n{}",
                    baseline.run_dir, baseline.text
                ));
            }
            text
        }
        Format::Markdown => {
            let mut text = report::markdown(&run, &summaries);
            if let Some(baseline) = &baseline {
                text.push_str(&format!(
                    "\n### Against the baseline `{}`\n\n```\n{}```\n",
                    baseline.run_dir, baseline.text
                ));
            }
            text
        }
        Format::Csv => report::csv(&run.trials).map_err(|e| CliError::failed(e.to_string()))?,
        Format::Json => report::json(&run, &summaries, baseline.as_ref()),
        Format::Junit => {
            report::junit(&run, &summaries).map_err(|e| CliError::failed(e.to_string()))?
        }
        Format::Html => {
            let options = report::HtmlOptions {
                baseline: baseline.as_ref(),
                confidence: args.confidence,
                ablation: args.ablation,
            };
            report::html(&run, &summaries, &options).map_err(|e| CliError::failed(e.to_string()))?
        }
    };
    match args.output {
        Some(path) => std::fs::write(&path, text)
            .map_err(|e| CliError::failed(format!("cannot write {}: {e}", path.display())))?,
        None => print_stdout(&text),
    }
    Ok(EXIT_OK)
}
