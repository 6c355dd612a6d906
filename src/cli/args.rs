//! Every command-line argument, as clap parses it: the commands, their flags and help texts.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

use crate::agent::harness::HarnessKind;
use crate::{import, store};

/// Evaluate coding agents on task suites, scored only on what the workspace shows.
#[derive(Debug, Parser)]
// The closing exit-code table is added by `super::command()`, from the exit module.
#[command(name = "deltabench", version, about, max_term_width = 100)]
pub struct Cli {
    #[command(subcommand)]
    pub(super) command: Command,
}

#[derive(Debug, Subcommand)]
pub(super) enum Command {
    /// Run agents on a suite's tasks and write a run directory.
    ///
    /// Each trial is provisioned as a private clone of the suite's repo at the task's base
    /// commit, the agent runs in it, the diff is taken with the harness's own view of the tree,
    /// and the verify command runs in a fresh workspace holding exactly that diff and the
    /// hidden tests; the trial is scored on that evidence alone.
    ///
    /// `isolation: worktree` (the default) gives no protection from the agent: for an agent you
    /// do not trust, set `isolation: sandbox` under `defaults:` in the suite.
    Run(Box<RunArgs>),
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
    /// Build every environment image the suite's tasks need, once, before any run.
    ///
    /// A task's `environment: {dockerfile: ...}` is otherwise built by the first run that
    /// needs it; a build that fetches from the network (a FROM image, packages) then fails
    /// offline. Run `prepare` where there is network: later runs and validates use the built
    /// images offline. Prints each image (built, present, or FAILED with the build log's
    /// tail) and the tasks that use it. Exit 0 when every image is ready, 2 when one is not.
    Prepare(PrepareArgs),
    /// Print a report of a run directory.
    Report(ReportArgs),
    /// Combine the run directories of `run --shard I/N` into one run directory.
    ///
    /// The inputs must be shards of the same plan (same suite, agent configs, trials per task
    /// and tasks), each shard once; the result reads like the unsharded run. A shard that is
    /// missing or stopped without finishing is named (exit 3); finish it (`deltabench resume
    /// SHARD_DIR`, `deltabench submit ENGINE --resume DIR`) and merge again.
    Merge(MergeArgs),
    /// Print the JSON Schema of the suite file.
    Schema,
    /// Submit a sharded run to a cluster's job engine: a Slurm job array or a Kubernetes
    /// Indexed Job, one task per shard, and a merge once every shard has ended.
    ///
    /// Writes the job script (Slurm) or manifests (Kubernetes) into OUT, where they stay to
    /// be read and edited; submits them (`sbatch`, `kubectl apply`); prints the job ids and
    /// the command to watch (`deltabench status OUT`). Each shard runs `deltabench run SUITE
    /// --shard auto --shards N --out OUT` and writes OUT/shard-I-of-N/; the merge writes
    /// OUT/merged. OUT must be a folder every node mounts. `--resume OUT` resubmits only the
    /// shards that stopped without finishing (each finishes what it had recorded).
    ///
    /// Each node needs the deltabench binary at the same path (--deltabench), git, the
    /// container runtime the suite's environments use, and the suite's folder at the same
    /// path; `deltabench prepare SUITE` on a node builds its images ahead of the run.
    Submit(Box<SubmitArgs>),
    /// Show how far a run got: per agent planned, recorded and passed trials, running, ETA.
    ///
    /// For the shards of a submitted or sharded run: the same per shard, and the shards that
    /// stopped without finishing. DIR is a run directory (plain, a shard's, merged; running or ended), or the folder the
    /// shards share (`submit --out`, `run --shard auto --out`).
    Status(StatusArgs),
    /// List the built-in agent CLIs, their pinned versions, and whether each is installed here.
    ///
    /// The pinned version is the one each adapter was checked against; an installed CLI is
    /// shown with its path and its own version. deltabench looks for a CLI on PATH, then in $DELTABENCH_AGENT_TOOLS (default
    /// ~/.cache/deltabench/agents, which `bash .ci/install-agents` fills with the pinned
    /// versions). Any other CLI runs as `kind: cli`, described in the agents file
    /// (docs/agents.md). Exit 0 whatever is installed.
    Agents,
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
    /// scored, so the gate is undecided; 4 with --gate --require-power, an inconclusive
    /// verdict (the line says how many tasks x trials would decide it).
    Compare(CompareArgs),
    /// Say how many tasks x trials a comparison needs to detect a given effect.
    Plan(PlanArgs),
    /// Turn a task set in another format into a ready suite folder.
    ///
    /// Prints what was imported, what was skipped and why, and the `deltabench validate` to run
    /// next.
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
    /// reaps every lease whose process is gone, whatever --workdir the run used. Without --cache
    /// or --workdir it checks every cache a run registered.
    Gc(GcArgs),
    /// Local stand-ins for model APIs, to drive agent CLIs offline.
    Model(ModelArgs),
    /// Write a first suite that validates and runs as written: a small git repo with a bug,
    /// one task with hidden tests and a reference solution, a stand-in agent script, and a
    /// suite.yaml with every key commented.
    Init(InitArgs),
    /// Print a shell completion script for bash, zsh, fish, elvish or powershell.
    ///
    /// bash: `deltabench completions bash > ~/.local/share/bash-completion/completions/deltabench`;
    /// zsh: as `_deltabench` in a folder on $fpath; fish: into
    /// `~/.config/fish/completions/deltabench.fish`; elvish and powershell: source it from the
    /// shell's startup file.
    Completions(CompletionsArgs),
    /// Inside a sandbox with `network: model`: forward the gateway's port to its socket, then
    /// run the agent. Started by deltabench itself, never by hand.
    #[command(hide = true)]
    SandboxForward(SandboxForwardArgs),
}

#[derive(Debug, clap::Args)]
pub(super) struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_name = "SHELL", value_enum)]
    pub(super) shell: clap_complete::Shell,
}

#[derive(Debug, clap::Args)]
pub(super) struct SandboxForwardArgs {
    #[arg(long)]
    pub listen: std::net::SocketAddr,
    #[arg(long)]
    pub socket: PathBuf,
    #[arg(last = true, required = true)]
    pub command: Vec<std::ffi::OsString>,
}

#[derive(Debug, clap::Args)]
pub(super) struct ResumeArgs {
    /// The run directory of the run to finish.
    #[arg(value_name = "RUN_DIR")]
    pub(super) run_dir: PathBuf,
    #[command(flatten)]
    pub(super) options: ResumeOptions,
    /// Trials at once [default: as the run started].
    #[arg(short = 'j', long = "jobs", value_name = "N")]
    pub(super) jobs: Option<usize>,
}

/// Where workspaces and the cache live: for the commands that run trials, and for `gc`.
#[derive(Debug, clap::Args)]
pub(super) struct Places {
    /// Where workspaces are created (a tmpfs such as /dev/shm makes provisioning fast)
    /// [default: the system temp dir, $TMPDIR or /tmp].
    #[arg(
        long,
        value_name = "DIR",
        env = "DELTABENCH_WORKDIR",
        hide_env_values = true
    )]
    pub(super) workdir: Option<PathBuf>,
    /// Prepared sources and workspace templates, reused across runs [default: WORKDIR/deltabench-cache].
    #[arg(
        long,
        value_name = "DIR",
        env = "DELTABENCH_CACHE",
        hide_env_values = true
    )]
    pub(super) cache: Option<PathBuf>,
    /// What the cache's workspace templates may take (e.g. 20GiB, 500MB); the least recently
    /// used are removed first, never one a running run uses. `run` and `validate` trim to it
    /// when they finish [default there: 20GiB]; `gc` only when it is given.
    #[arg(
        long,
        value_name = "SIZE",
        env = "DELTABENCH_CACHE_MAX",
        hide_env_values = true,
        value_parser = parse_size
    )]
    pub(super) cache_max: Option<u64>,
}

/// `--shard`: a fixed slice, or `auto` (from the job engine's environment).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ShardArg {
    Fixed(store::Shard),
    Auto,
}

impl std::str::FromStr for ShardArg {
    type Err = store::ShardParseError;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        if value == "auto" {
            return Ok(Self::Auto);
        }
        value.parse().map(Self::Fixed)
    }
}

/// A size clap's `--cache-max` cannot read; bytesize says why only as text.
#[derive(Debug, thiserror::Error)]
#[error("{reason} (a size such as 20GiB, 500MB or 1000000)")]
struct SizeError {
    reason: String,
}

fn parse_size(value: &str) -> Result<u64, SizeError> {
    value
        .trim()
        .parse::<bytesize::ByteSize>()
        .map(|size| size.as_u64())
        .map_err(|reason| SizeError { reason })
}

impl Places {
    /// The cache folder inside a workdir, when --cache does not name one.
    pub(super) fn default_cache(workdir: &std::path::Path) -> PathBuf {
        workdir.join("deltabench-cache")
    }
}

/// Flags shared by `resume` and `run --resume`.
#[derive(Debug, clap::Args)]
pub(super) struct ResumeOptions {
    /// Resume even though the suite file or an agent's config changed since the run started.
    #[arg(long)]
    pub(super) force: bool,
    /// Run an `infra_error` trial again up to N times; only the last attempt is recorded
    /// [default: 0; when resuming, as the run started].
    #[arg(long, value_name = "N")]
    pub(super) retries: Option<u32>,
}

#[derive(Debug, clap::Args)]
pub(super) struct GcArgs {
    /// Only print what would be removed.
    #[arg(long)]
    pub(super) dry_run: bool,
    #[command(flatten)]
    pub(super) places: Places,
}

#[derive(Debug, clap::Args)]
pub(super) struct ImportArgs {
    /// The task set's format.
    #[arg(value_name = "FORMAT", value_enum)]
    pub(super) format: import::Format,
    /// A rows file (swebench), or a folder of tasks or exercises.
    #[arg(value_name = "SOURCE")]
    pub(super) source: PathBuf,
    /// The suite folder to write.
    #[arg(long, value_name = "DIR")]
    pub(super) out: PathBuf,
    /// swebench: the folder of local clones, each named owner__name or owner/name; a missing
    /// one is listed with the command to get it and its rows skipped [default: DIR/repos,
    /// cloned into from GitHub when missing].
    #[arg(long, value_name = "DIR")]
    pub(super) repos: Option<PathBuf>,
    /// swebench: a YAML map of owner/name (or owner/name@version) to {setup, prepare,
    /// test_command, timeout, environment}; {tests} and {test_files} in test_command stand for
    /// the instance's tests. Repeatable: a later file's settings win, key by key.
    #[arg(long, value_name = "FILE")]
    pub(super) env: Vec<PathBuf>,
    /// swebench: import only this instance (repeatable).
    #[arg(long, value_name = "ID")]
    pub(super) instance: Vec<String>,
    /// swebench: import only the rows of this repository, owner/name (repeatable).
    #[arg(long, value_name = "OWNER/NAME")]
    pub(super) repo: Vec<String>,
    /// swebench: run each row in the official harness's prebuilt image
    /// (docker.io/swebench/sweb.eval.x86_64.<instance>:latest, pulled beforehand) instead of an
    /// image built from a Dockerfile written from its recipe; --env entries still win.
    #[arg(long)]
    pub(super) images: bool,
    /// Replace the suite already in DIR.
    #[arg(long)]
    pub(super) force: bool,
    /// harbor, terminal-bench: run each task's solution script once, here (in a scratch copy),
    /// and keep the change it makes as the task's reference patch.
    #[arg(long)]
    pub(super) run_solutions: bool,
}

#[derive(Debug, clap::Args)]
pub(super) struct GateArgs {
    /// Exit 1 when the candidate regressed: a significant drop (across tasks, or within one
    /// task's trials) larger than --max-drop, or more tasks broken outright than --max-broken.
    /// An inconclusive verdict passes, unless --require-power.
    #[arg(long)]
    pub(super) gate: bool,
    /// The drop in pass rate (0..1) tolerated by --gate.
    #[arg(long, value_name = "FRACTION", default_value_t = 0.0)]
    pub(super) max_drop: f64,
    /// A regression, whatever the tests say: more than N tasks not marked flaky went from
    /// always passing (every baseline trial) to never passing (no candidate trial), with at
    /// least two trials on each side.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub(super) max_broken: usize,
    /// With --gate: exit 4 when the verdict is inconclusive (the comparison has too few tasks
    /// or trials to tell a regression from noise) instead of passing.
    #[arg(long)]
    pub(super) require_power: bool,
    /// Confidence of the intervals and the tests.
    #[arg(long, value_name = "LEVEL", default_value_t = 0.95)]
    pub(super) confidence: f64,
    /// Keep the tasks the suite's lock marks flaky (`validate --repeat`) in the gate; by
    /// default they are reported apart and left out of it.
    #[arg(long)]
    pub(super) include_flaky: bool,
}

impl GateArgs {
    /// A comparison that only reports (no gate), at `confidence`.
    pub(super) fn report_only(confidence: f64, include_flaky: bool) -> Self {
        Self {
            gate: false,
            max_drop: 0.0,
            max_broken: 0,
            require_power: false,
            confidence,
            include_flaky,
        }
    }
}

#[derive(Debug, clap::Args)]
#[command(
    override_usage = "deltabench compare [OPTIONS] <BASE> <CANDIDATE>\n       \
                            deltabench compare [OPTIONS] <RUN_DIR> <BASE_AGENT> <CANDIDATE_AGENT>"
)]
pub(super) struct CompareArgs {
    /// BASE CANDIDATE: the baseline's and the candidate's run directories; or RUN_DIR
    /// BASE_AGENT CANDIDATE_AGENT: one run directory and two of its agents.
    #[arg(
        value_names = ["BASE|RUN_DIR", "CANDIDATE|BASE_AGENT", "CANDIDATE_AGENT"],
        num_args = 2..=3,
        required = true
    )]
    pub(super) targets: Vec<String>,
    /// The agent to compare when a run directory holds several.
    #[arg(long, value_name = "NAME")]
    pub(super) agent: Option<String>,
    /// How to print the comparison.
    #[arg(long, value_enum, default_value = "text")]
    pub(super) format: CompareFormat,
    #[command(flatten)]
    pub(super) gate: GateArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(super) enum CompareFormat {
    /// Lines for a terminal or a CI log.
    Text,
    /// The whole comparison, per-task counts and tests included, and the gate's decision.
    Json,
    /// For a CI summary: the rates, the changed tasks as a table, the verdict and the gate.
    Markdown,
}

#[derive(Debug, clap::Args)]
pub(super) struct PlanArgs {
    /// A run directory whose per-task variance the plan uses.
    #[arg(value_name = "RUN_DIR")]
    pub(super) run_dir: PathBuf,
    /// The difference in pass rate (0..1) to detect, e.g. 0.05 for five points.
    #[arg(long, value_name = "FRACTION", default_value_t = 0.05)]
    pub(super) effect: f64,
    /// The chance of detecting an effect of that size.
    #[arg(long, value_name = "FRACTION", default_value_t = 0.8)]
    pub(super) power: f64,
    #[arg(long, value_name = "LEVEL", default_value_t = 0.95)]
    pub(super) confidence: f64,
    /// The agent whose results the plan uses [default: all agents of the run].
    #[arg(long, value_name = "NAME")]
    pub(super) agent: Option<String>,
}

#[derive(Debug, clap::Args)]
pub(super) struct SuiteArgs {
    /// A YAML file with a top-level `agents:` map: its agents run instead of the suite's (a
    /// suite agent runs when named with --agent; a file agent of the same name replaces it).
    #[arg(long, value_name = "FILE")]
    pub(super) agents: Option<PathBuf>,
    #[command(flatten)]
    pub(super) places: Places,
    /// Trials at once [default: the number of cores].
    #[arg(short = 'j', long = "jobs", value_name = "N")]
    pub(super) jobs: Option<usize>,
    /// Build environments FROM this local image instead of the one a Dockerfile names, e.g.
    /// `ubuntu:24.04=localhost/my-ubuntu:24.04` (repeatable; over the suite's `base_images:`).
    #[arg(long = "base-image", value_name = "FROM=IMAGE", value_parser = base_image)]
    pub(super) base_images: Vec<(String, String)>,
}

/// A `--base-image` that is not `FROM=IMAGE`.
#[derive(Debug, thiserror::Error)]
#[error("'{text}': give FROM=IMAGE, e.g. ubuntu:24.04=localhost/my-ubuntu:24.04")]
struct BaseImageError {
    text: String,
}

fn base_image(text: &str) -> Result<(String, String), BaseImageError> {
    match text.split_once('=') {
        Some((from, image)) if !from.trim().is_empty() && !image.trim().is_empty() => {
            Ok((from.trim().to_owned(), image.trim().to_owned()))
        }
        _ => Err(BaseImageError {
            text: text.to_owned(),
        }),
    }
}

/// `run --help`'s closing part: the agent kinds an agents file can name, the built-in CLIs
/// listed from [`HarnessKind::ALL`].
fn run_after_help() -> String {
    let mut kinds = String::new();
    let mut line = String::from(" ");
    for (i, kind) in HarnessKind::ALL.iter().enumerate() {
        let word = if i + 1 < HarnessKind::ALL.len() {
            format!(" {kind},")
        } else {
            format!(" {kind}")
        };
        if line.len() + word.len() > 90 {
            kinds += &line;
            kinds.push('\n');
            line = String::from(" ");
        }
        line += &word;
    }
    kinds += &line;
    format!(
        "\
Agent kinds (in the suite's `agents:` or an --agents file):
  noop, oracle              built in: change nothing / apply the task's solution
  mock                      replay a scripted event stream
  command                   your own harness: `sh -c RUN` in the workspace
{kinds}
                            the {} real CLIs, headless, each with its own HOME; keys: model,
                            max_turns, permission_mode, append_system_prompt, args, env,
                            binary, endpoint (URL or scripted:FILE), api_key, timeout,
                            network, price, budget ({{tokens, cost_usd, model_calls,
                            wall}}, enforced at deltabench's model gateway)
  cli                       any other CLI: its command template, dialect and output parser
  `deltabench schema` prints every key; `deltabench model serve --help` the scripted endpoint.",
        HarnessKind::ALL.len()
    )
}

#[derive(Debug, clap::Args)]
#[command(after_long_help = run_after_help())]
pub(super) struct RunArgs {
    /// A suite file, or a folder holding suite.yaml [default: the suite in the current folder].
    #[arg(value_name = "SUITE")]
    pub(super) suite_path: Option<PathBuf>,
    #[command(flatten)]
    pub(super) suite: SuiteArgs,
    /// Run only this agent (repeatable) [default: the suite's agents (an --agents file's, when
    /// given), or oracle and noop].
    #[arg(long = "agent", value_name = "NAME")]
    pub(super) agent: Vec<String>,
    /// Trials per (task, agent).
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub(super) trials: u32,
    /// Run only this task (repeatable).
    #[arg(long = "task", value_name = "ID")]
    pub(super) task: Vec<String>,
    /// Run only tasks with this tag (repeatable; any tag matches).
    #[arg(long = "tag", value_name = "TAG")]
    pub(super) tag: Vec<String>,
    /// Run only shard I of N (1-based): a fixed slice of the trials, chosen by a hash of
    /// (task, agent, trial). Combine the shards with `deltabench merge`.
    ///
    /// `auto` reads the slice from the job engine: a Slurm array task
    /// (SLURM_ARRAY_TASK_ID relative to SLURM_ARRAY_TASK_MIN, of SLURM_ARRAY_TASK_COUNT), a
    /// Kubernetes Indexed Job's pod (JOB_COMPLETION_INDEX + 1, of --shards N), or
    /// DELTABENCH_SHARD=I/N (a CI matrix). With auto, --out DIR is the folder every shard
    /// shares: the shard writes DIR/shard-I-of-N/ (and finishes it, as `resume`, when an
    /// earlier attempt left it unfinished); `deltabench merge DIR` merges them.
    #[arg(long, value_name = "I/N|auto")]
    pub(super) shard: Option<ShardArg>,
    /// With --shard auto: the number of shards, where the engine does not say it (a
    /// Kubernetes Indexed Job); with it, a Slurm array's task ids are the shard numbers 1..N.
    #[arg(
        long,
        value_name = "N",
        env = "DELTABENCH_SHARDS",
        requires = "shard",
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub(super) shards: Option<u32>,
    /// The run directory [default: reports/<suite>-<UTC timestamp>].
    #[arg(long, value_name = "DIR")]
    pub(super) out: Option<PathBuf>,
    /// Keep the workspaces after the run (for inspection).
    #[arg(long)]
    pub(super) keep_workspaces: bool,
    /// Keep each agent CLI's home whole in its trial folder: by default what the CLI writes
    /// of its own there (bundled skills, plugin installs, npm caches, telemetry) is removed
    /// after the trial; its sessions, settings and logs stay.
    #[arg(long)]
    pub(super) keep_homes: bool,
    /// Print the plan (tasks x agents x trials, isolation, images to build, an estimate of time
    /// and cost from the lock and earlier runs) and run nothing, write nothing.
    #[arg(long)]
    pub(super) dry_run: bool,
    /// Refuse to start (exit 2) when a planned task has no validated evidence in the suite's
    /// lock (never validated, or changed since): its passes would get no evidence check and no
    /// mutation check. For CI.
    #[arg(long)]
    pub(super) require_lock: bool,
    /// After the run, compare each agent with the same agent in this earlier run directory.
    #[arg(long, value_name = "RUN_DIR")]
    pub(super) baseline: Option<PathBuf>,
    #[command(flatten)]
    pub(super) gate: GateArgs,
    #[command(flatten, next_help_heading = "Stopping when the answer is known")]
    pub(super) rounds: RoundArgs,
    /// Keep every model call that passes the gateway (request and answer, no key) in each
    /// trial's model-calls.jsonl, for --replay.
    #[arg(long, help_heading = "Record and replay")]
    pub(super) record: bool,
    /// Answer each trial's model calls from the same trial's recording in RUN_DIR (a run made
    /// with --record of this suite and these agents), offline: the agents' endpoints are never
    /// called. A request that differs from the recorded one fails its trial.
    #[arg(long, value_name = "RUN_DIR", help_heading = "Record and replay")]
    pub(super) replay: Option<PathBuf>,
    /// Finish the run in RUN_DIR instead (as `deltabench resume RUN_DIR`); the plan is the
    /// recorded one.
    #[arg(
        long,
        value_name = "RUN_DIR",
        help_heading = "Retries and resuming",
        conflicts_with_all = ["suite_path", "out", "shard", "shards", "baseline", "agent", "task", "tag", "trials", "keep_workspaces", "keep_homes", "dry_run", "record", "replay", "until_decided", "until_ci_width"]
    )]
    pub(super) resume: Option<PathBuf>,
    #[command(flatten, next_help_heading = "Retries and resuming")]
    pub(super) resume_options: ResumeOptions,
}

/// `run` in rounds: one more trial per task and agent each round, until the answer is known.
#[derive(Debug, clap::Args)]
pub(super) struct RoundArgs {
    /// Run trials in rounds and stop as soon as the sequential gate decides: `regressed`
    /// (exit 1), `not regressed` within --margin (exit 0), or `undecided` at --max-trials
    /// (exit 4). Compares with --baseline's same agent, or else the run's first agent (the
    /// baseline) with its second (the candidate). The test (a betting e-process on the paired
    /// per-task differences, see docs/measurement.md) keeps each false claim under
    /// 1 − --confidence however many rounds it looks at. Implies --gate. With --shard, the
    /// shards wait for each other after every round in the folder they share (--shard auto
    /// --out DIR) and all reach the same decision.
    #[arg(long, conflicts_with_all = ["trials", "until_ci_width"])]
    pub(super) until_decided: bool,
    /// Run trials in rounds until every agent's pass-rate interval (at --confidence) is at
    /// most this wide, e.g. 0.1 for ±5 points, or --max-trials (then exit 4).
    #[arg(long, value_name = "WIDTH", conflicts_with = "trials")]
    pub(super) until_ci_width: Option<f64>,
    /// Rounds at most (trials per task and agent) for --until-decided / --until-ci-width.
    #[arg(long, value_name = "K", default_value_t = 20)]
    pub(super) max_trials: u32,
    /// --until-decided: `not regressed` means the candidate is not worse by this much (a
    /// fraction in (0, 1): 0.1 is ten points).
    #[arg(long, value_name = "FRACTION", default_value_t = 0.1)]
    pub(super) margin: f64,
}

#[derive(Debug, clap::Args)]
pub(super) struct ValidateArgs {
    /// A suite file, or a folder holding suite.yaml [default: the suite in the current folder].
    #[arg(value_name = "SUITE", default_value = ".", hide_default_value = true)]
    pub(super) suite_path: PathBuf,
    #[command(flatten)]
    pub(super) suite: SuiteArgs,
    /// Times each check must hold (more catches flaky tasks).
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub(super) trials: u32,
    /// Run the reference and the base N times each, and record a task whose reference passes
    /// fewer than N of N (and whose base never does) as flaky in the lock, with its count,
    /// instead of failing it: `run`, `compare` and the gates then report it apart and leave it
    /// out (`--include-flaky` keeps it).
    #[arg(long, value_name = "N", conflicts_with = "trials")]
    pub(super) repeat: Option<u32>,
    /// Check only this task (repeatable).
    #[arg(long = "task", value_name = "ID")]
    pub(super) task: Vec<String>,
    /// Keep the scratch run (each trial's verify.log, tests.json, diff.patch) even when every
    /// task is sound; it is always kept when one is not.
    #[arg(long)]
    pub(super) keep: bool,
}

#[derive(Debug, clap::Args)]
pub(super) struct PrepareArgs {
    /// A suite file, or a folder holding suite.yaml [default: the suite in the current folder].
    #[arg(value_name = "SUITE", default_value = ".", hide_default_value = true)]
    pub(super) suite_path: PathBuf,
    #[command(flatten)]
    pub(super) suite: SuiteArgs,
    /// Prepare only this task's environment (repeatable).
    #[arg(long = "task", value_name = "ID")]
    pub(super) task: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum Engine {
    /// A Slurm job array (`sbatch --array=1-N`) and a merge job `--dependency=afterany`.
    Slurm,
    /// A Kubernetes Indexed Job (`completionMode: Indexed`) and a merge Job.
    K8s,
}

#[derive(Debug, clap::Args)]
#[command(
    override_usage = "deltabench submit <ENGINE> <SUITE> --shards <N> --out <DIR> [RUN OPTIONS] [ENGINE OPTIONS]\n       \
                      deltabench submit <ENGINE> --resume <DIR>"
)]
pub(super) struct SubmitArgs {
    #[arg(value_name = "ENGINE", value_enum)]
    pub(super) engine: Engine,
    /// A suite file, or a folder holding suite.yaml (Kubernetes: its path inside the image is
    /// --k8s-suite).
    #[arg(value_name = "SUITE", required_unless_present = "resume")]
    pub(super) suite_path: Option<PathBuf>,
    /// The number of shards: one array task or pod each.
    #[arg(long, value_name = "N", required_unless_present = "resume", value_parser = clap::value_parser!(u32).range(1..))]
    pub(super) shards: Option<u32>,
    /// The folder the shards share: job scripts, logs, shard-I-of-N/ and merged/. Slurm: a
    /// folder every node mounts at the same path.
    #[arg(long, value_name = "DIR", required_unless_present = "resume")]
    pub(super) out: Option<PathBuf>,
    /// Resubmit the shards of the run submitted into DIR that stopped without finishing
    /// (never started, cancelled, died), then a merge; the others are left alone.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["suite_path", "shards", "out"])]
    pub(super) resume: Option<PathBuf>,
    /// Write the job script or manifests without submitting them.
    #[arg(long)]
    pub(super) dry_run: bool,
    /// A YAML file with a top-level `agents:` map (passed to each shard's `run`).
    #[arg(long, value_name = "FILE", help_heading = "Run options")]
    pub(super) agents: Option<PathBuf>,
    /// Run only this agent (repeatable).
    #[arg(long = "agent", value_name = "NAME", help_heading = "Run options")]
    pub(super) agent: Vec<String>,
    /// Trials per (task, agent).
    #[arg(long, value_name = "N", help_heading = "Run options")]
    pub(super) trials: Option<u32>,
    /// Run only this task (repeatable).
    #[arg(long = "task", value_name = "ID", help_heading = "Run options")]
    pub(super) task: Vec<String>,
    /// Run only tasks with this tag (repeatable).
    #[arg(long = "tag", value_name = "TAG", help_heading = "Run options")]
    pub(super) tag: Vec<String>,
    /// With --until-decided: the earlier run whose same agent is the gate's baseline (a path
    /// every node reads).
    #[arg(
        long,
        value_name = "RUN_DIR",
        requires = "until_decided",
        help_heading = "Run options"
    )]
    pub(super) baseline: Option<PathBuf>,
    /// Run in rounds (`run --until-decided`, `--until-ci-width`): the shards meet after every
    /// round in --out and stop together, so all of them must run at once.
    #[command(flatten, next_help_heading = "Stopping when the answer is known")]
    pub(super) rounds: RoundArgs,
    /// For a run in rounds: the confidence of its test or interval [default: 0.95].
    #[arg(
        long,
        value_name = "LEVEL",
        help_heading = "Stopping when the answer is known"
    )]
    pub(super) confidence: Option<f64>,
    /// --until-decided: the drop in pass rate (0..1) tolerated [default: 0].
    #[arg(
        long,
        value_name = "FRACTION",
        requires = "until_decided",
        help_heading = "Stopping when the answer is known"
    )]
    pub(super) max_drop: Option<f64>,
    /// --until-decided: keep the tasks the suite's lock marks flaky in the gate.
    #[arg(
        long,
        requires = "until_decided",
        help_heading = "Stopping when the answer is known"
    )]
    pub(super) include_flaky: bool,
    /// Trials at once in each shard [default: the node's cores].
    #[arg(
        short = 'j',
        long = "jobs",
        value_name = "N",
        help_heading = "Run options"
    )]
    pub(super) jobs: Option<usize>,
    /// Run an `infra_error` trial again up to N times.
    #[arg(long, value_name = "N", help_heading = "Run options")]
    pub(super) retries: Option<u32>,
    /// Each node's workspace folder (node-local; a tmpfs is fastest) [default: the node's
    /// temp dir].
    #[arg(long, value_name = "DIR", help_heading = "Run options")]
    pub(super) workdir: Option<PathBuf>,
    /// Each node's cache of prepared sources and templates [default: WORKDIR/deltabench-cache].
    #[arg(long, value_name = "DIR", help_heading = "Run options")]
    pub(super) cache: Option<PathBuf>,
    /// The deltabench binary on the nodes [default: this binary's path].
    #[arg(long, value_name = "PATH", help_heading = "Engine options")]
    pub(super) deltabench: Option<PathBuf>,
    /// CPUs per shard (Slurm --cpus-per-task; Kubernetes requests.cpu).
    #[arg(long, value_name = "N", help_heading = "Engine options")]
    pub(super) cpus: Option<u32>,
    /// Memory per shard, e.g. 8G (Slurm --mem; Kubernetes requests and limits, as 8Gi).
    #[arg(long, value_name = "SIZE", help_heading = "Engine options")]
    pub(super) memory: Option<String>,
    /// Slurm: an option for both sbatch calls, e.g. --sbatch-arg=--partition=gpu (repeatable).
    #[arg(
        long = "sbatch-arg",
        value_name = "ARG",
        allow_hyphen_values = true,
        help_heading = "Engine options"
    )]
    pub(super) sbatch_args: Vec<String>,
    /// Kubernetes: the image holding deltabench, git and the suite (required for k8s).
    #[arg(long, value_name = "IMAGE", help_heading = "Engine options")]
    pub(super) k8s_image: Option<String>,
    /// Kubernetes: the suite's path inside the image.
    #[arg(
        long,
        value_name = "PATH",
        default_value = "/suite",
        help_heading = "Engine options"
    )]
    pub(super) k8s_suite: String,
    /// Kubernetes: the namespace of the Jobs.
    #[arg(long, value_name = "NS", help_heading = "Engine options")]
    pub(super) namespace: Option<String>,
    /// Kubernetes: the ReadWriteMany volume claim every pod mounts for the results.
    #[arg(
        long,
        value_name = "NAME",
        default_value = "deltabench-results",
        help_heading = "Engine options"
    )]
    pub(super) claim: String,
    /// Kubernetes: where the claim is mounted in the pods (the shards' --out).
    #[arg(
        long,
        value_name = "PATH",
        default_value = "/results",
        help_heading = "Engine options"
    )]
    pub(super) mount: String,
    /// Kubernetes: pods at once [default: all shards].
    #[arg(long, value_name = "N", help_heading = "Engine options")]
    pub(super) parallelism: Option<u32>,
}

#[derive(Debug, clap::Args)]
pub(super) struct StatusArgs {
    /// A run directory, or the folder the shards share.
    #[arg(value_name = "DIR")]
    pub(super) dir: PathBuf,
    /// Print the status again every SECS seconds (default 2) until the run ends or Ctrl-C.
    #[arg(long, value_name = "SECS", num_args = 0..=1, default_missing_value = "2")]
    pub(super) watch: Option<u64>,
}

#[derive(Debug, clap::Args)]
pub(super) struct MergeArgs {
    /// Run directories written by `deltabench run --shard I/N`; or one folder holding
    /// shard-I-of-N folders (`run --shard auto --out DIR`, `deltabench submit`).
    #[arg(value_name = "RUN_DIR", required = true)]
    pub(super) inputs: Vec<PathBuf>,
    /// The merged run directory: one that holds no run, or an earlier merge of the same plan
    /// holding no trial the new merge lacks, which is replaced (merging again is safe)
    /// [default with a shard folder DIR: DIR/merged].
    #[arg(long, value_name = "DIR")]
    pub(super) out: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(super) enum OutcomeFilter {
    Pass,
    Fail,
    Infra,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub(super) enum ReportFormat {
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
pub(super) struct ReportArgs {
    /// A run directory written by `deltabench run`.
    #[arg(value_name = "RUN_DIR")]
    pub(super) run_dir: PathBuf,
    /// table and markdown: the per-agent summary (with each agent's false claims), then a
    /// task x agent table of passed/scored trials, failing tasks first.
    #[arg(long, value_enum, default_value = "table")]
    pub(super) format: ReportFormat,
    /// Write the report to FILE instead of stdout.
    #[arg(short = 'o', long, value_name = "FILE")]
    pub(super) output: Option<PathBuf>,
    /// Report only this agent (repeatable); the name of a `matrix:` selects all its combinations.
    #[arg(long, value_name = "NAME")]
    pub(super) agent: Vec<String>,
    /// Report only the tasks whose id matches this glob (`*` and `?`; repeatable).
    #[arg(long, value_name = "GLOB")]
    pub(super) task: Vec<String>,
    /// Report only the trials of this outcome (repeatable): pass, fail (fail or invalid) or infra
    /// (infra_error).
    #[arg(long, value_enum, value_name = "OUTCOME")]
    pub(super) outcome: Vec<OutcomeFilter>,
    /// Instead of the summary: each `matrix:` factor's main effect on pass rate, cost and time,
    /// the two-factor interaction, and the Pareto front (table, markdown, json; the html page
    /// shows them whenever the run has a matrix).
    #[arg(long)]
    pub(super) ablation: bool,
    /// Confidence of the intervals in --ablation and of the comparison with --baseline.
    #[arg(long, value_name = "LEVEL", default_value_t = 0.95)]
    pub(super) confidence: f64,
    /// Add each agent's per-task flips and verdict against this earlier run (table, markdown,
    /// json, html).
    #[arg(long, value_name = "RUN_DIR")]
    pub(super) baseline: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
pub(super) struct InitArgs {
    /// The folder to write the suite into (created when missing); must not hold a suite.yaml.
    #[arg(value_name = "DIR", default_value = ".")]
    pub(super) dir: PathBuf,
}

/// `model serve --help`'s closing part: the script format.
const SCRIPT_HELP: &str = "\
The script (YAML) says what the model answers, step by step:

  usage: {input_tokens: 1000, output_tokens: 20, cache_read_tokens: 0, cache_write_tokens: 0}
  loop: false            # true: past the last step, repeat it forever
  split: 5               # stream text and tool arguments in pieces of 5 characters
  steps:
    - text: I'll create hello.txt.
      write: {path: hello.txt, content: \"hello\\n\"}   # at most one action: write or shell
    - shell: cat hello.txt
      usage: {input_tokens: 1200}                    # per-step override
    - text: Done.                                    # no action: the turn ends
    - error: {status: 429, message: slow down, retry_after: 2}

A request's step is the number of distinct tool results in its history. Past the last step
the answer is \"Done.\". `write` and `shell` become the client's own tools (Claude Write/Bash,
Codex apply_patch/exec_command, Gemini CLI and Qwen Code write_file/run_shell_command,
opencode write/bash, Continue Write/Bash, pi write/bash, gptme save/shell, Cline
editor/run_commands, Grok CLI create_file/bash, mini-swe-agent bash, aider a SEARCH/REPLACE
block); `{cwd}` in a step is the client's working directory. Side calls (titles, commit
messages) report zero usage.

Point clients at the printed root URL: ANTHROPIC_BASE_URL=URL, GOOGLE_GEMINI_BASE_URL=URL,
and URL/v1 for OpenAI-style clients (Codex, opencode, mini-swe-agent, aider, Qwen Code,
Continue, pi, gptme, Cline, Grok CLI).";

#[derive(Debug, clap::Args)]
pub(super) struct ModelArgs {
    #[command(subcommand)]
    pub(super) command: ModelCommand,
}

#[derive(Debug, Subcommand)]
pub(super) enum ModelCommand {
    /// Serve a scripted model on 127.0.0.1 for agent CLIs (Anthropic, OpenAI Responses and
    /// Chat Completions, Gemini), until SIGINT or SIGTERM.
    ///
    /// Prints `listening on http://127.0.0.1:PORT` once ready.
    #[command(after_help = SCRIPT_HELP)]
    Serve(ServeArgs),
}

#[derive(Debug, clap::Args)]
pub(super) struct ServeArgs {
    /// The script file (YAML).
    #[arg(value_name = "SCRIPT")]
    pub(super) script: PathBuf,
    /// The port on 127.0.0.1 [default: any free port].
    #[arg(long, value_name = "N")]
    pub(super) port: Option<u16>,
    /// Also write each request (auth headers redacted) as a JSON line to FILE.
    #[arg(long, value_name = "FILE")]
    pub(super) log: Option<PathBuf>,
}
