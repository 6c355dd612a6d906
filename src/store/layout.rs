//! The run directory's layout: every path a run writes, named once.
//!
//! ```text
//! RUN_DIR/
//!   manifest.json      suite name and digest, agents and configs, the request, version, times
//!   trials.jsonl       one line per finished trial, appended and fsynced before it is reported
//!   rounds.json        a shard of a run in rounds: its last round, decision, heartbeat
//!   trials/<task>/<agent>/<n>/
//!     events.jsonl  trajectory.json  diff.patch  verify.log  agent.log  result.json  tests.json
//!     (instruction.md, agent-events.jsonl, setup.log, verify-setup.log, verify-home/, grader.log,
//!      model-calls.jsonl)
//! ```
//!
//! The probe, the command agent and a grader metric write their files into the trial folder
//! they are given, so those names are declared where they are written and re-exported here.

use std::path::{Path, PathBuf};

pub use crate::agent::harness::invocation::MINI_TRAJECTORY;
pub use crate::agent::{AGENT_EVENTS, AGENT_LOG, INSTRUCTION_FILE};
pub use crate::delta::{DIFF_PATCH, HOOK_DIR, HOOK_REPORT, VERIFY_HOME, VERIFY_LOG};
pub use crate::metric::GRADER_LOG;

use super::{TrialRecord, sanitize};

/// The run's identity: suite, agents, request, times.
pub const MANIFEST: &str = "manifest.json";
/// One JSON record per finished trial.
pub const TRIALS_LOG: &str = "trials.jsonl";
/// A shard's place in a run in rounds ([`super::rounds`]).
pub const ROUNDS: &str = "rounds.json";
/// The folder of per-trial folders.
pub const TRIALS_DIR: &str = "trials";

/// The trial's stream of agent events, one JSON object per line.
pub const EVENTS: &str = "events.jsonl";
/// The agent's run as an ATIF trajectory, built from the events and the result
/// ([`crate::trajectory`]).
pub const TRAJECTORY: &str = "trajectory.json";
/// What the agent said it did: kept for reading, never scored.
pub const RESULT: &str = "result.json";
/// What the verify output showed (tests run, passed, failed): the evidence `validate` keeps.
pub const TESTS: &str = "tests.json";
/// What the mutation check ran and found ([`crate::delta::MutationReport`]).
pub const MUTANTS: &str = "mutants.json";
/// The task's `setup:` output in the agent's workspace.
pub const SETUP_LOG: &str = "setup.log";
/// The task's `setup:` output in the verify workspace.
pub const VERIFY_SETUP_LOG: &str = "verify-setup.log";

/// The trial's model calls as the gateway passed them, one JSON object per request and answer
/// (`run --record`; [`crate::gateway::record`]).
pub const MODEL_CALLS: &str = "model-calls.jsonl";

/// `RUN_DIR/trials/<task>/<agent>/<n>/`. Records keep the real agent name; the folder gets a
/// file-safe one.
pub fn trial_path(run_dir: &Path, task: &str, agent: &str, trial: u32) -> PathBuf {
    run_dir
        .join(TRIALS_DIR)
        .join(task)
        .join(sanitize(agent))
        .join(trial.to_string())
}

/// Where the verify run's test hook reported, in a trial folder (unsandboxed verify runs).
pub fn hook_report(trial_dir: &Path) -> PathBuf {
    trial_dir.join(VERIFY_HOME).join(HOOK_DIR).join(HOOK_REPORT)
}

/// The folder of `record`'s trial in the run at `run_dir`.
pub fn record_path(run_dir: &Path, record: &TrialRecord) -> PathBuf {
    trial_path(run_dir, &record.task, &record.agent, record.trial)
}
