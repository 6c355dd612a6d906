//! The run directory: the contract later features and users read. [`layout`] names every path
//! in it; this module reads and writes the manifest and the trial records.
//!
//! [`merge_runs`] combines the run directories of a sharded run into one.

pub mod layout;
mod lease;
mod merge;
mod request;
pub mod rounds;
pub mod shards;

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::agent::{CodingError, CodingStatus};
use crate::delta::DiffStats;
use crate::metric::{Judgement, Settled, UnscoredCause};

pub use lease::{FoundLease, HeldLease, Lease, Reaped, leases, reap, registered_caches};
pub use merge::{Gathered, MergeError, Merged, gather, merge_runs, same_design};
pub use request::{RunRequest, Sequential, Shard, ShardParseError, StoppingRule};

/// A trial's outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The verifier's evidence says the task is solved.
    Pass,
    /// Scored, and not solved.
    Fail,
    /// The verifier gave no evidence (zero tests ran) or contradicted itself (a summary that
    /// claims success with a non-zero exit): counted as not passed, shown apart, never retried.
    Invalid,
    /// Not scored: provisioning, the probe, or the harness failed.
    InfraError,
}

impl From<Judgement> for Outcome {
    fn from(judgement: Judgement) -> Self {
        match judgement {
            Judgement::Pass => Self::Pass,
            Judgement::Fail => Self::Fail,
            Judgement::Invalid => Self::Invalid,
        }
    }
}

impl Outcome {
    /// The name the JSON records (`infra_error` for [`Outcome::InfraError`]).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pass => "pass",
            Self::Fail => "fail",
            Self::Invalid => "invalid",
            Self::InfraError => "infra_error",
        }
    }
}

/// The verify command's result as recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VerifyRecord {
    /// Null when the command was killed (a timeout) or ended by a signal.
    pub exit_code: Option<i32>,
    /// The command ran past the task's verify timeout and was killed.
    pub timed_out: bool,
    /// Wall time of the verify command.
    pub duration_ms: u64,
    /// The reward the test script wrote, as deltabench read it (a task with `verify.reward`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reward: Option<crate::delta::reward::Reward>,
}

impl VerifyRecord {
    /// Whether the verify command passed in time: a full reward where the test script writes
    /// one, else exit 0.
    pub fn passed(&self) -> bool {
        !self.timed_out
            && match &self.reward {
                Some(reward) => reward.passed(),
                None => self.exit_code == Some(0),
            }
    }
}

/// Where a trial record's `usage` was counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UsageSource {
    /// deltabench's model gateway, from the provider's answers.
    Gateway,
    /// The agent's own report (its CLI's stream).
    Cli,
}

/// Usage as recorded.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct UsageRecord {
    /// Uncached input.
    pub input_tokens: u64,
    /// Tokens the model generated.
    pub output_tokens: u64,
    /// Input tokens served from the provider's prompt cache.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_read_tokens: u64,
    /// Input tokens written to the provider's prompt cache.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cache_write_tokens: u64,
    /// Provider calls counted (absent when 0).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub model_calls: u64,
    /// In US dollars; null when neither the agent nor a price table gave one.
    pub cost_usd: Option<f64>,
    /// True when deltabench priced the tokens (the agent reported no cost).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cost_estimated: bool,
}

impl From<&crate::agent::Usage> for UsageRecord {
    fn from(u: &crate::agent::Usage) -> Self {
        Self {
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
            cache_read_tokens: u.cache_read_tokens,
            cache_write_tokens: u.cache_write_tokens,
            model_calls: u.model_calls,
            cost_usd: u.cost_usd,
            cost_estimated: u.cost_estimated,
        }
    }
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One line of `trials.jsonl`. Its JSON also carries `passed`, derived from `outcome` when written
/// and ignored when read, so no file can make the two disagree.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(remote = "Self")]
pub struct TrialRecord {
    /// The task's id in the suite.
    pub task: String,
    /// The agent's name in the suite (a matrix variant by its expanded name).
    pub agent: String,
    /// 1-based.
    pub trial: u32,
    /// Also written as `passed`, true only for `pass`.
    pub outcome: Outcome,
    /// Null when the trial was not scored.
    pub score: Option<f64>,
    /// The metric that scored it, as the task declared it.
    pub metric: RecordedMetric,
    /// The agent's `CodingResult` status; null when no agent ran.
    pub status: Option<CodingStatus>,
    /// What went wrong in the agent's run, as it reported; null when it ran clean.
    pub error: Option<CodingError>,
    /// Why the trial could not be scored.
    pub infra_error: Option<String>,
    /// Which fact left it unscored (absent in runs recorded before it was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unscored: Option<UnscoredCause>,
    /// The agent's session, to resume or inspect it; null when it gave none.
    pub session_id: Option<String>,
    /// The size of the workspace delta; null when the probe did not run.
    pub diff: Option<DiffStats>,
    /// Null when the verify command did not run.
    pub verify: Option<VerifyRecord>,
    /// The usage to compare trials by: the gateway's count when the agent's calls passed it,
    /// else what the agent reported (`usage_source` says which).
    pub usage: Option<UsageRecord>,
    /// Which count `usage` holds; absent when there is no usage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_source: Option<UsageSource>,
    /// What the agent (its CLI's own stream) reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cli_usage: Option<UsageRecord>,
    /// What deltabench's gateway counted from the provider's answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway_usage: Option<UsageRecord>,
    /// Wall time of the whole trial, from its own provisioning (without `preparation_ms`).
    pub duration_ms: u64,
    /// What this trial spent making (or waiting for) the template its task's trials share:
    /// a cost of the task, not of this trial.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preparation_ms: Option<u64>,
    /// Wall time of the agent's run.
    pub agent_duration_ms: Option<u64>,
    /// Microseconds per lifecycle phase, in the order they ran.
    pub phases: Vec<(RecordedPhase, u64)>,
    /// When the trial started: RFC 3339, UTC, in milliseconds.
    pub started_at: String,
    /// Protected paths (the hidden tests by default) the agent's diff touched; non-empty fails
    /// the trial under the `delta` metric.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tampered: Vec<String>,
    /// Places in the diff with the shape of an attack on the judge (`PATH:LINE: what`), for
    /// review; they never change the verdict.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub flags: Vec<String>,
    /// Why the outcome is `invalid`: what the verify output said against its exit code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invalid: Option<String>,
    /// Why a scored trial did not pass (`fail` or `invalid`), in a user's words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// A `grader` metric's explanation of its verdict: what it printed before the verdict line
    /// (the head of its `grader.log`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grader: Option<String>,
    /// The run was interrupted while this trial ran: it is not scored (`infra_error`), and
    /// `resume` runs it again, its new record superseding this one.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub interrupted: bool,
    /// Under `delta: container`: what the agent changed in its container outside the
    /// workspace, as `diff` lists it (protected paths marked: not applied), the first lines;
    /// `container-delta.txt` holds them all, `container-delta.tar` the files.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub container_changes: Vec<String>,
    /// The verify command had the host's network (the task declared its tests need one): the
    /// evidence is weaker, and every report says so.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub verify_network: bool,
    /// The verify command ran in the agent's own, still-running container (`in_place`): what
    /// the agent left running could answer it, so the evidence is weaker; every report says so.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub in_place: bool,
    /// The task had no validated evidence in the suite's lock (never validated, or changed
    /// since): the trial got no evidence check and no mutation check, only its verify output
    /// against its exit code; every report says so.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unvalidated: bool,
}

/// A lifecycle step as a record names it, or a name a run of an older deltabench wrote
/// (`agent`), kept as it was so that its records still read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum RecordedPhase {
    /// A step this version runs.
    Known(crate::lifecycle::Phase),
    /// A name this version does not write.
    Other(String),
}

/// The metric that scored a trial, as its record writes it: `delta`, `delta-token`,
/// `exit-code` or `grader:COMMAND`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum RecordedMetric {
    /// `delta`: a non-empty workspace delta and a passing verify command.
    Delta,
    /// `delta-token`: a non-empty workspace delta and no failure token in the verify output.
    DeltaToken,
    /// `exit-code`: the verify command's exit code alone.
    ExitCode,
    /// The grader's command.
    Grader(String),
}

impl From<&crate::suite::MetricSpec> for RecordedMetric {
    fn from(spec: &crate::suite::MetricSpec) -> Self {
        use crate::suite::MetricSpec;
        match spec {
            MetricSpec::Delta => Self::Delta,
            MetricSpec::DeltaToken => Self::DeltaToken,
            MetricSpec::ExitCode => Self::ExitCode,
            MetricSpec::Grader { command, .. } => Self::Grader(command.clone()),
        }
    }
}

impl From<RecordedMetric> for String {
    fn from(metric: RecordedMetric) -> Self {
        match metric {
            RecordedMetric::Delta => "delta".into(),
            RecordedMetric::DeltaToken => "delta-token".into(),
            RecordedMetric::ExitCode => "exit-code".into(),
            RecordedMetric::Grader(command) => format!("grader:{command}"),
        }
    }
}

/// A record's metric that names none of deltabench's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown metric {0:?}: expected delta, delta-token, exit-code or grader:COMMAND")]
pub struct UnknownMetric(String);

impl TryFrom<String> for RecordedMetric {
    type Error = UnknownMetric;

    fn try_from(name: String) -> Result<Self, Self::Error> {
        match name.as_str() {
            "delta" => Ok(Self::Delta),
            "delta-token" => Ok(Self::DeltaToken),
            "exit-code" => Ok(Self::ExitCode),
            _ => match name.strip_prefix("grader:") {
                Some(command) => Ok(Self::Grader(command.to_owned())),
                None => Err(UnknownMetric(name)),
            },
        }
    }
}

impl TrialRecord {
    /// The trial's key in a run: (task, agent, trial).
    pub fn key(&self) -> (&str, &str, u32) {
        (&self.task, &self.agent, self.trial)
    }

    /// A trial not scored yet (`infra_error` until a verdict says otherwise).
    pub fn unscored(
        task: &str,
        agent: &str,
        trial: u32,
        metric: RecordedMetric,
        started_at: String,
    ) -> Self {
        Self {
            task: task.to_owned(),
            agent: agent.to_owned(),
            trial,
            outcome: Outcome::InfraError,
            score: None,
            metric,
            status: None,
            error: None,
            infra_error: None,
            unscored: None,
            session_id: None,
            diff: None,
            verify: None,
            usage: None,
            usage_source: None,
            cli_usage: None,
            gateway_usage: None,
            duration_ms: 0,
            preparation_ms: None,
            agent_duration_ms: None,
            phases: Vec::new(),
            started_at,
            tampered: Vec::new(),
            flags: Vec::new(),
            invalid: None,
            reason: None,
            grader: None,
            interrupted: false,
            container_changes: Vec::new(),
            verify_network: false,
            in_place: false,
            unvalidated: false,
        }
    }

    /// Records how the trial ended ([`crate::metric::settle`] decides it): the outcome, score,
    /// reason and, when unscored, why.
    pub fn settle(&mut self, settled: Settled) {
        let (judgement, score, reason, why, interrupted) = match settled {
            Settled::Scored(verdict) => (
                Some(verdict.judgement),
                Some(verdict.score),
                verdict.reason,
                None,
                false,
            ),
            Settled::Unscored {
                cause,
                why,
                interrupted,
            } => (None, None, None, Some((cause, why)), interrupted),
        };
        self.outcome = judgement.map_or(Outcome::InfraError, Outcome::from);
        self.score = score;
        self.invalid = (judgement == Some(Judgement::Invalid))
            .then(|| reason.clone())
            .flatten();
        self.reason = reason;
        (self.unscored, self.infra_error) = why.unzip();
        self.interrupted = interrupted;
    }

    /// Whether the trial passed: its outcome, never a second field.
    pub fn passed(&self) -> bool {
        self.outcome == Outcome::Pass
    }
}

impl Serialize for TrialRecord {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Written<'a> {
            #[serde(flatten, serialize_with = "fields")]
            record: &'a TrialRecord,
            passed: bool,
        }
        fn fields<S: serde::Serializer>(record: &&TrialRecord, s: S) -> Result<S::Ok, S::Error> {
            TrialRecord::serialize(record, s)
        }
        Written {
            record: self,
            passed: self.passed(),
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for TrialRecord {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        TrialRecord::deserialize(deserializer)
    }
}

/// The manifest of a run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    /// The suite's name.
    pub suite: String,
    /// The suite file the run was planned from, as given.
    pub suite_path: String,
    /// The suite's digest when the run started; `resume` refuses a suite changed since.
    pub suite_digest: String,
    /// Agent configurations, in the run's order.
    pub agents: indexmap::IndexMap<String, serde_json::Value>,
    /// Agents expanded from an ablation `matrix:`, with their base and factor levels.
    #[serde(default)]
    pub variants: indexmap::IndexMap<String, crate::suite::AgentVariant>,
    /// Task ids, in the run's order.
    pub tasks: Vec<String>,
    /// Trials per (task, agent) pair.
    pub trials_per_task: u32,
    /// Trials run at once (`--jobs`).
    pub jobs: usize,
    /// Trials this run directory was meant to hold: its shard's slice when sharded.
    pub planned_trials: usize,
    /// The slice of the plan this run holds (`--shard I/N`); null for a whole plan.
    #[serde(default)]
    pub shard: Option<Shard>,
    /// The run directories `deltabench merge` combined into this one, as given.
    #[serde(default)]
    pub merged_from: Vec<String>,
    /// The version of deltabench that wrote the run.
    pub deltabench_version: String,
    /// RFC 3339, UTC, in milliseconds; after a merge, the earliest of the runs.
    pub started_at: String,
    /// Null until the run ends (and while a `resume` runs); after a merge, the latest.
    pub finished_at: Option<String>,
    /// The host that ran it (see [`host_name`]); after a merge, the distinct hosts joined by `, `.
    pub host: String,
    /// The run's workspace root; empty until trials start; after a merge, the distinct roots joined by `, `.
    pub workdir: String,
    /// How `worktree` workspaces were made: overlay mounts or clones, and why.
    #[serde(default)]
    pub provisioning: String,
    /// True when the run was interrupted before every planned trial ran.
    #[serde(default)]
    pub interrupted: bool,
    /// What was asked for, so `resume` can finish the same plan; null in older run directories.
    #[serde(default)]
    pub request: Option<RunRequest>,
    /// The `FROM` images environments were built from instead of their Dockerfiles' own.
    #[serde(default, skip_serializing_if = "indexmap::IndexMap::is_empty")]
    pub base_images: indexmap::IndexMap<String, String>,
    /// Per task, what preparing it cost apart from its trials: the environment image this run
    /// built, and the template its trials share (made, or checked, once per run).
    #[serde(default, skip_serializing_if = "indexmap::IndexMap::is_empty")]
    pub preparation: indexmap::IndexMap<String, TaskPreparation>,
}

/// What preparing one task cost, in milliseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct TaskPreparation {
    /// Building its environment's image (shared by the tasks that use it), when this run built it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub environment_ms: Option<u64>,
    /// Making or checking the template its trials' workspaces are views of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub template_ms: Option<u64>,
}

impl Manifest {
    /// Adds what `record` spent on its task's template, if anything.
    pub fn note_preparation(&mut self, record: &TrialRecord) {
        if record.preparation_ms.is_some() {
            let entry = self.preparation.entry(record.task.clone());
            entry.or_default().add_trial(record);
        }
    }
}

impl TaskPreparation {
    /// Adds what a trial spent on the task's template.
    pub fn add_trial(&mut self, record: &TrialRecord) {
        if let Some(ms) = record.preparation_ms {
            *self.template_ms.get_or_insert(0) += ms;
        }
    }
}

/// A run directory being written.
#[derive(Debug)]
pub struct RunDir {
    path: PathBuf,
    trials: File,
}

impl RunDir {
    /// Creates the directory; refuses one that already holds a run.
    pub fn create(path: &Path) -> io::Result<Self> {
        // Absolute: agents run in their workspace, where a relative trial folder (their HOME,
        // their logs) would resolve inside the workspace and count as their change.
        let path = &std::path::absolute(path)?;
        if path.join(layout::TRIALS_LOG).exists() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!(
                    "{} already holds a run; choose another --out",
                    path.display()
                ),
            ));
        }
        // A folder of the user's own (notes, another tool's output): run files would mix in.
        // A shard in rounds writes its round mark before its run starts: that one is ours.
        if let Ok(entries) = fs::read_dir(path)
            && entries
                .flatten()
                .any(|entry| entry.file_name() != layout::ROUNDS)
            && !path.join(layout::MANIFEST).exists()
        {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                format!(
                    "{} is not empty and holds no run: the run's files would mix with what is there; choose a new or empty folder for --out",
                    path.display()
                ),
            ));
        }
        fs::create_dir_all(path.join(layout::TRIALS_DIR))?;
        let trials = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path.join(layout::TRIALS_LOG))?;
        Ok(Self {
            path: path.to_owned(),
            trials,
        })
    }

    /// Opens a run directory to finish it: reads it back, cuts a torn last line (a crash
    /// mid-append) off `trials.jsonl` so the next record starts on a line of its own, and
    /// appends from there.
    pub fn reopen(path: &Path) -> Result<(Self, StoredRun), ReadRunError> {
        let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
        let path = absolute.as_path();
        let stored = read_run(path)?;
        let trials_path = path.join(layout::TRIALS_LOG);
        let io_err = |source| ReadRunError::Io {
            path: trials_path.clone(),
            source,
        };
        let bytes = fs::read(&trials_path).map_err(io_err)?;
        let whole = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        let trials = OpenOptions::new()
            .append(true)
            .open(&trials_path)
            .map_err(io_err)?;
        if whole < bytes.len() {
            trials.set_len(whole as u64).map_err(io_err)?;
            trials.sync_data().map_err(io_err)?;
        }
        let run = Self {
            path: path.to_owned(),
            trials,
        };
        Ok((run, stored))
    }

    /// The run directory, absolute.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `trials/<task>/<agent>/<n>/`, created.
    pub fn trial_dir(&self, task: &str, agent: &str, trial: u32) -> io::Result<PathBuf> {
        let dir = layout::trial_path(&self.path, task, agent, trial);
        fs::create_dir_all(&dir)?;
        Ok(dir)
    }

    /// Writes the manifest atomically (temp file + rename).
    pub fn write_manifest(&self, manifest: &Manifest) -> io::Result<()> {
        write_json_atomic(&self.path.join(layout::MANIFEST), manifest)
    }

    /// Appends one record and fsyncs it, so a crash never loses a reported trial.
    pub fn append(&mut self, record: &TrialRecord) -> io::Result<()> {
        let mut line = serde_json::to_vec(record).map_err(io::Error::other)?;
        line.push(b'\n');
        self.trials.write_all(&line)?;
        self.trials.sync_data()
    }
}

/// This machine's host name, as manifests and shard marks record it ("" when unknown).
pub fn host_name() -> String {
    hostname::get()
        .map(|h| h.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// A name made safe for a path component: anything but `[A-Za-z0-9._-]` becomes `_`.
pub fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Writes pretty JSON through a temp file and a rename.
pub fn write_json_atomic(path: &Path, value: &impl Serialize) -> io::Result<()> {
    let tmp = path.with_extension("json.tmp");
    let mut bytes = serde_json::to_vec_pretty(value).map_err(io::Error::other)?;
    bytes.push(b'\n');
    fs::write(&tmp, bytes)?;
    fs::rename(tmp, path)
}

/// A finished (or interrupted) run read back from disk.
#[derive(Debug, Clone)]
pub struct StoredRun {
    /// The run directory.
    pub path: PathBuf,
    /// Its `manifest.json`.
    pub manifest: Manifest,
    /// The records of `trials.jsonl`, in file order.
    pub trials: Vec<TrialRecord>,
}

/// Why a run directory cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadRunError {
    /// The manifest or `trials.jsonl` could not be read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file read.
        path: PathBuf,
        /// The read's error.
        source: io::Error,
    },
    /// A line is not valid JSON for its record.
    #[error("{}:{line}: {message}", path.display())]
    Parse {
        /// The file read.
        path: PathBuf,
        /// The line, 1-based.
        line: usize,
        /// What the JSON parser said.
        message: String,
    },
    /// A well-formed record the run cannot have written: `line` is 1-based.
    #[error("{}:{line}: {reason}", path.display())]
    Record {
        /// The file read.
        path: PathBuf,
        /// The line, 1-based.
        line: usize,
        /// What the record has that the plan does not.
        reason: BadRecord,
    },
}

/// Why a record of `trials.jsonl` is not one the run's plan holds. Such a record would count in
/// every report, so a tampered or foreign line is refused instead of scored.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadRecord {
    /// The record's task is not one the run planned.
    #[error("task '{task}' is not in the run's plan (tasks: {valid})")]
    Task {
        /// The record's task.
        task: String,
        /// The planned tasks, the first 20 joined by `, `.
        valid: String,
    },
    /// The record's agent is not one the run planned.
    #[error("agent '{agent}' is not in the run's plan (agents: {valid})")]
    Agent {
        /// The record's agent.
        agent: String,
        /// The planned agents, the first 20 joined by `, `.
        valid: String,
    },
    /// The record's trial number is outside `1..=trials_per_task`.
    #[error("trial {trial} is not in the run's plan (trials: {valid})")]
    Trial {
        /// The record's trial number.
        trial: u32,
        /// The planned numbers (`1 to N`).
        valid: String,
    },
    /// The record's trial belongs to another shard of the plan.
    #[error(
        "trial {task} / {agent} #{trial} belongs to shard {owner}, not to this run's shard {shard}"
    )]
    Shard {
        /// The record's task.
        task: String,
        /// The record's agent.
        agent: String,
        /// The record's trial number.
        trial: u32,
        /// This run directory's shard.
        shard: Shard,
        /// The shard that trial belongs to.
        owner: Shard,
    },
    /// Only a record of an interrupted trial is followed by another: the one `resume` writes.
    #[error(
        "trial {task} / {agent} #{trial} is already recorded on line {first}; a trial is recorded again only after it was interrupted"
    )]
    Duplicate {
        /// The record's task.
        task: String,
        /// The record's agent.
        agent: String,
        /// The record's trial number.
        trial: u32,
        /// The line (1-based) of the trial's first record.
        first: usize,
    },
}

impl Manifest {
    /// Checks that `record` is one of the trials this run directory was planned to hold: a
    /// planned task and agent (matrix variants by their expanded names), a trial number in
    /// `1..=trials_per_task`, and, for a shard, a trial of that shard.
    pub fn check_record(&self, record: &TrialRecord) -> Result<(), BadRecord> {
        if !self.tasks.contains(&record.task) {
            return Err(BadRecord::Task {
                task: record.task.clone(),
                valid: listing(&self.tasks),
            });
        }
        if !self.agents.contains_key(&record.agent) {
            return Err(BadRecord::Agent {
                agent: record.agent.clone(),
                valid: listing(self.agents.keys()),
            });
        }
        if !(1..=self.trials_per_task).contains(&record.trial) {
            return Err(BadRecord::Trial {
                trial: record.trial,
                valid: match self.trials_per_task {
                    1 => "1".into(),
                    n => format!("1 to {n}"),
                },
            });
        }
        if let Some(shard) = self.shard
            && !shard.contains(&record.task, &record.agent, record.trial)
        {
            let owner = (1..=shard.total)
                .map(|index| Shard { index, ..shard })
                .find(|s| s.contains(&record.task, &record.agent, record.trial))
                .unwrap_or(shard);
            return Err(BadRecord::Shard {
                task: record.task.clone(),
                agent: record.agent.clone(),
                trial: record.trial,
                shard,
                owner,
            });
        }
        Ok(())
    }
}

/// Names joined with ", ", the first 20 of a longer list and how many more.
fn listing<T: AsRef<str>>(names: impl IntoIterator<Item = T>) -> String {
    const SHOWN: usize = 20;
    let names: Vec<T> = names.into_iter().collect();
    let mut text = names
        .iter()
        .take(SHOWN)
        .map(AsRef::as_ref)
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > SHOWN {
        text.push_str(&format!(" and {} more", names.len() - SHOWN));
    }
    text
}

/// Reads `manifest.json` and `trials.jsonl`. A torn last line (a crash mid-write) is skipped.
/// Every record must be a trial of the manifest's plan ([`Manifest::check_record`]), recorded
/// once, or again after an interrupted record, which the newer record supersedes.
pub fn read_run(path: &Path) -> Result<StoredRun, ReadRunError> {
    let manifest_path = path.join(layout::MANIFEST);
    let io_err = |path: &Path| {
        let path = path.to_owned();
        move |source| ReadRunError::Io { path, source }
    };
    let manifest_text = fs::read_to_string(&manifest_path).map_err(io_err(&manifest_path))?;
    let manifest: Manifest =
        serde_json::from_str(&manifest_text).map_err(|e| ReadRunError::Parse {
            path: manifest_path.clone(),
            line: e.line(),
            message: e.to_string(),
        })?;
    let trials_path = path.join(layout::TRIALS_LOG);
    let file = File::open(&trials_path).map_err(io_err(&trials_path))?;
    let lines: Vec<String> = BufReader::new(file)
        .lines()
        .collect::<Result<_, _>>()
        .map_err(io_err(&trials_path))?;
    let mut trials: Vec<TrialRecord> = Vec::with_capacity(lines.len());
    // Each trial's slot in `trials` and the line its record came from.
    let mut at: HashMap<(String, String, u32), (usize, usize)> = HashMap::new();
    let last = lines.len();
    for (index, line) in lines.iter().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let record = match serde_json::from_str::<TrialRecord>(line) {
            Ok(record) => record,
            Err(_) if index + 1 == last => continue,
            Err(e) => {
                return Err(ReadRunError::Parse {
                    path: trials_path.clone(),
                    line: index + 1,
                    message: e.to_string(),
                });
            }
        };
        let bad = |reason| ReadRunError::Record {
            path: trials_path.clone(),
            line: index + 1,
            reason,
        };
        manifest.check_record(&record).map_err(bad)?;
        match at.entry((record.task.clone(), record.agent.clone(), record.trial)) {
            // A resumed trial's record supersedes its interrupted one, and only that one.
            Entry::Occupied(mut slot) => {
                let (i, first) = *slot.get();
                if !trials[i].interrupted {
                    return Err(bad(BadRecord::Duplicate {
                        task: record.task,
                        agent: record.agent,
                        trial: record.trial,
                        first,
                    }));
                }
                slot.insert((i, index + 1));
                trials[i] = record;
            }
            Entry::Vacant(slot) => {
                slot.insert((trials.len(), index + 1));
                trials.push(record);
            }
        }
    }
    Ok(StoredRun {
        path: path.to_owned(),
        manifest,
        trials,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn manifest(tasks: usize, shard: Option<Shard>) -> Manifest {
        serde_json::from_value(serde_json::json!({
            "suite": "s", "suite_path": "s.yaml", "suite_digest": "sha256:0",
            "agents": {"oracle": {"kind": "oracle"}, "a[x=1]": {"kind": "noop"}},
            "tasks": (0..tasks).map(|i| format!("t{i}")).collect::<Vec<_>>(),
            "trials_per_task": 2, "jobs": 1, "planned_trials": 0, "shard": shard,
            "deltabench_version": "0", "started_at": "", "finished_at": null,
            "host": "", "workdir": "",
        }))
        .unwrap()
    }

    fn record(task: &str, agent: &str, trial: u32) -> TrialRecord {
        serde_json::from_value(serde_json::json!({
            "task": task, "agent": agent, "trial": trial, "outcome": "pass", "passed": true,
            "score": 1.0, "metric": "delta", "status": null, "error": null, "infra_error": null,
            "session_id": null, "diff": null, "verify": null, "usage": null, "duration_ms": 1,
            "agent_duration_ms": null, "phases": [], "started_at": "",
        }))
        .unwrap()
    }

    #[test]
    fn metric_keeps_its_json_name() {
        use crate::suite::MetricSpec;
        for (metric, name) in [
            (RecordedMetric::Delta, "delta"),
            (RecordedMetric::DeltaToken, "delta-token"),
            (RecordedMetric::ExitCode, "exit-code"),
            (
                RecordedMetric::Grader("./grade.sh a".into()),
                "grader:./grade.sh a",
            ),
        ] {
            assert_eq!(serde_json::to_value(&metric).unwrap(), name);
            assert_eq!(
                serde_json::from_value::<RecordedMetric>(name.into()).unwrap(),
                metric
            );
        }
        for spec in [
            MetricSpec::Delta,
            MetricSpec::DeltaToken,
            MetricSpec::ExitCode,
        ] {
            assert_eq!(String::from(RecordedMetric::from(&spec)), spec.name());
        }
        assert!(serde_json::from_value::<RecordedMetric>("pass-rate".into()).is_err());
    }

    #[test]
    fn phases_are_named_as_before_and_an_older_runs_names_still_read() {
        let read: Vec<(RecordedPhase, u64)> =
            serde_json::from_str(r#"[["provision", 1], ["agent", 2], ["probe", 3]]"#).unwrap();
        assert_eq!(
            read,
            [
                (RecordedPhase::Known(crate::lifecycle::Phase::Provision), 1),
                (RecordedPhase::Other("agent".into()), 2),
                (RecordedPhase::Known(crate::lifecycle::Phase::Probe), 3)
            ]
        );
        assert_eq!(
            serde_json::to_string(&read).unwrap(),
            r#"[["provision",1],["agent",2],["probe",3]]"#
        );
    }

    #[test]
    fn passed_is_written_from_the_outcome_and_never_read_back() {
        let mut forged = serde_json::to_value(record("t1", "a", 1)).unwrap();
        assert_eq!(forged["passed"], true);
        forged["outcome"] = "fail".into();
        let read: TrialRecord = serde_json::from_value(forged).unwrap();
        assert!(!read.passed());
        assert_eq!(serde_json::to_value(&read).unwrap()["passed"], false);
        let mut unscored = read;
        unscored.settle(Settled::Unscored {
            cause: UnscoredCause::HarnessFailed,
            why: "the sandbox failed".into(),
            interrupted: false,
        });
        let json = serde_json::to_value(&unscored).unwrap();
        assert_eq!(
            (&json["outcome"], &json["passed"], &json["unscored"]),
            (
                &"infra_error".into(),
                &false.into(),
                &"harness_failed".into()
            )
        );
        assert_eq!(json["score"], serde_json::Value::Null);
    }

    #[test]
    fn check_record_names_the_bad_value_and_the_valid_set() {
        let m = manifest(25, None);
        assert_eq!(m.check_record(&record("t24", "a[x=1]", 2)), Ok(()));
        let err = |r| m.check_record(&r).unwrap_err().to_string();
        assert_eq!(
            err(record("t1", "a", 1)),
            "agent 'a' is not in the run's plan (agents: a[x=1], oracle)"
        );
        assert_eq!(
            err(record("t25", "oracle", 1)),
            "task 't25' is not in the run's plan (tasks: t0, t1, t2, t3, t4, t5, t6, t7, t8, t9, \
             t10, t11, t12, t13, t14, t15, t16, t17, t18, t19 and 5 more)"
        );
        assert_eq!(
            err(record("t0", "oracle", 3)),
            "trial 3 is not in the run's plan (trials: 1 to 2)"
        );
    }

    #[test]
    fn a_shard_holds_only_its_own_trials() {
        let shard = Shard { index: 1, total: 3 };
        let m = manifest(1, Some(shard));
        for trial in 1..=2 {
            let r = record("t0", "oracle", trial);
            match m.check_record(&r) {
                Ok(()) => assert!(shard.contains("t0", "oracle", trial)),
                Err(BadRecord::Shard { owner, .. }) => {
                    assert_ne!(owner.index, 1);
                    assert!(owner.contains("t0", "oracle", trial));
                }
                Err(other) => panic!("{other}"),
            }
        }
    }
}
