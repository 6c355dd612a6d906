//! Checks before a run is resumed: the plan must be the one recorded, and no live process may
//! still be writing the run directory. What the dead run left is reaped first.

use std::path::{Path, PathBuf};

use crate::store::{Manifest, Reaped, leases, reap};

use super::Plan;

/// Why a run directory cannot be resumed with this plan. Exit code 2.
#[derive(Debug, thiserror::Error)]
pub enum ResumeError {
    #[error(
        "suite digest changed: {suite}, or a file it names (instructions, hidden tests, solutions, model scripts), is not what the run started with ({recorded}, now {now})"
    )]
    SuiteChanged {
        suite: PathBuf,
        recorded: String,
        now: String,
    },
    #[error("agent '{0}' config changed since the run started")]
    AgentChanged(String),
    #[error("the agents changed since the run started: {recorded:?}, now {now:?}")]
    AgentsChanged {
        recorded: Vec<String>,
        now: Vec<String>,
    },
    #[error("the run is still running (pid {pid}, lease {})", lease.display())]
    StillRunning { pid: u32, lease: PathBuf },
}

impl ResumeError {
    /// Whether `--force` may override it: a changed plan can be, a live run never.
    pub fn forcible(&self) -> bool {
        !matches!(self, Self::StillRunning { .. })
    }
}

/// Checks that `plan` is what `manifest` recorded: the same suite file (by digest) and the
/// same agent configs. Agent configs are compared first, to name the agent that changed.
pub fn check_resumable(manifest: &Manifest, plan: &Plan) -> Result<(), ResumeError> {
    let now = super::recorded_agent_configs(&plan.agents);
    let (recorded_names, now_names): (Vec<String>, Vec<String>) = (
        manifest.agents.keys().cloned().collect(),
        now.keys().cloned().collect(),
    );
    if recorded_names != now_names {
        return Err(ResumeError::AgentsChanged {
            recorded: recorded_names,
            now: now_names,
        });
    }
    if let Some((name, _)) = now
        .iter()
        .find(|(name, config)| manifest.agents.get(*name) != Some(*config))
    {
        return Err(ResumeError::AgentChanged(name.clone()));
    }
    if manifest.suite_digest != plan.suite.digest {
        return Err(ResumeError::SuiteChanged {
            suite: plan.suite.path.clone(),
            recorded: manifest.suite_digest.clone(),
            now: plan.suite.digest.clone(),
        });
    }
    Ok(())
}

/// Reaps the leases the dead runs of `run_dir` left under `cache` (workspaces, mounts,
/// processes still inside them). Refuses when a live process still holds one.
pub fn reap_dead_leases(cache: &Path, run_dir: &Path) -> Result<Vec<Reaped>, ResumeError> {
    let run_dir = run_dir
        .canonicalize()
        .unwrap_or_else(|_| run_dir.to_owned());
    let mine: Vec<_> = leases(cache)
        .into_iter()
        .filter(|found| found.lease.run_dir == run_dir)
        .collect();
    if let Some(live) = mine.iter().find(|found| found.is_alive()) {
        return Err(ResumeError::StillRunning {
            pid: live.lease.pid,
            lease: live.path.clone(),
        });
    }
    Ok(mine.iter().flat_map(|found| reap(found, false)).collect())
}
