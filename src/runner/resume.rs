//! Checks before a run is resumed: the plan must be the one recorded, and no live process may
//! still be writing the run directory. What the dead run left is reaped first.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::store::{Manifest, Reaped, leases, reap};

use super::Plan;

/// Why a run directory cannot be resumed with this plan. Exit code 2.
#[derive(Debug, thiserror::Error)]
pub enum ResumeError {
    /// The suite file, or a file it names, is not what the run started with; `--force` resumes
    /// anyway.
    #[error(
        "suite digest changed: {suite}, or a file it names (instructions, hidden tests, solutions, model scripts), is not what the run started with ({recorded}, now {now})"
    )]
    SuiteChanged {
        /// The suite file.
        suite: PathBuf,
        /// The suite digest the manifest holds.
        recorded: String,
        /// The suite's digest now.
        now: String,
    },
    /// An agent's config changed since the run started (its name); `--force` resumes anyway.
    #[error("agent '{0}' config changed since the run started")]
    AgentChanged(String),
    /// The plan now holds other trials than the manifest's: records of the resumed run would
    /// not be trials of the run's plan, which every reader of the run directory refuses.
    #[error(
        "the {what} changed since the run started ({change}): the run directory holds another plan; start a new run instead"
    )]
    PlanChanged {
        /// What changed: `agents`, `tasks`, `trials per task` or `shard`.
        what: &'static str,
        /// The change in words: the values then and now, or the names no longer and newly
        /// planned.
        change: String,
    },
    /// A live process still holds a lease on the run directory: let it finish, or stop it.
    #[error("the run is still running (pid {pid}, lease {})", lease.display())]
    StillRunning {
        /// The process that holds the lease.
        pid: u32,
        /// Its lease file in the run directory.
        lease: PathBuf,
    },
}

impl ResumeError {
    /// Whether `--force` may override it: a changed suite file or agent config can be; other
    /// trials than the recorded ones, or a live run, never.
    pub fn forcible(&self) -> bool {
        !matches!(self, Self::StillRunning { .. } | Self::PlanChanged { .. })
    }
}

/// Checks that `plan` is what `manifest` recorded: the same trials (tasks, agents, trials per
/// task, shard), never forcible; then the same suite file (by digest) and the same agent
/// configs. Agent configs are compared first, to name the agent that changed.
pub fn check_resumable(manifest: &Manifest, plan: &Plan) -> Result<(), ResumeError> {
    let now = super::recorded_agent_configs(&plan.agents);
    let tasks = plan.tasks.iter().map(|&i| plan.suite.tasks[i].id.clone());
    same_names(
        "agents",
        manifest.agents.keys().cloned(),
        now.keys().cloned(),
    )?;
    same_names("tasks", manifest.tasks.iter().cloned(), tasks)?;
    if manifest.trials_per_task != plan.request.trials {
        return Err(ResumeError::PlanChanged {
            what: "trials per task",
            change: format!("{}, now {}", manifest.trials_per_task, plan.request.trials),
        });
    }
    if manifest.shard != plan.request.shard {
        let label =
            |shard: Option<crate::store::Shard>| shard.map_or("none".into(), |s| s.to_string());
        return Err(ResumeError::PlanChanged {
            what: "shard",
            change: format!(
                "{}, now {}",
                label(manifest.shard),
                label(plan.request.shard)
            ),
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

/// Refuses a change of the set of names (their order changes no trial).
fn same_names(
    what: &'static str,
    recorded: impl Iterator<Item = String>,
    now: impl Iterator<Item = String>,
) -> Result<(), ResumeError> {
    let (recorded, now): (BTreeSet<String>, BTreeSet<String>) = (recorded.collect(), now.collect());
    if recorded == now {
        return Ok(());
    }
    let list = |names: Vec<&String>| {
        names
            .into_iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let (gone, added) = (
        list(recorded.difference(&now).collect()),
        list(now.difference(&recorded).collect()),
    );
    let change = match (gone.is_empty(), added.is_empty()) {
        (false, false) => format!("no longer planned: {gone}; newly planned: {added}"),
        (false, true) => format!("no longer planned: {gone}"),
        _ => format!("newly planned: {added}"),
    };
    Err(ResumeError::PlanChanged { what, change })
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
    Ok(mine
        .iter()
        .filter_map(|found| reap(found, false))
        .flatten()
        .collect())
}
