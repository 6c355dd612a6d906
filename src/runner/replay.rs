//! Checks before a run is answered from a recording (`run --replay RUN_DIR`): the recording is
//! a run of this suite, with these agents' configs, and holds every planned trial's model calls.

use std::path::{Path, PathBuf};

use crate::store::{Manifest, layout};

use super::Plan;

/// Config keys a replay may change: where the calls would go and with which key. A replay
/// sends none of them anywhere.
const REPLAY_FREE: [&str; 2] = ["endpoint", "api_key"];

/// Why a recording cannot answer a plan's trials: the message of an exit 2.
#[derive(Debug, thiserror::Error)]
#[error("--replay {}: {why}", recorded.display())]
pub struct ReplayError {
    /// The run directory given to `--replay`.
    pub recorded: PathBuf,
    /// Why it cannot answer the plan.
    pub why: NotReplayable,
}

/// Why a recording cannot answer a plan's trials.
#[derive(Debug, thiserror::Error)]
pub enum NotReplayable {
    /// Its manifest cannot be read (no run directory there): the I/O error.
    #[error("not a run directory (no readable {manifest}: {0})", manifest = layout::MANIFEST)]
    NotARun(std::io::Error),
    /// Its manifest is no manifest this deltabench reads: the JSON error.
    #[error("its {manifest} is unreadable: {0}", manifest = layout::MANIFEST)]
    Unreadable(serde_json::Error),
    /// The run was made without `--record`, so it holds no model calls.
    #[error("that run was not made with --record: it holds no model calls to answer from")]
    NotRecorded,
    /// The recording is a run of another suite.
    #[error("it records suite '{recorded}', not '{planned}'")]
    OtherSuite {
        /// The suite name the recording's manifest holds.
        recorded: String,
        /// The plan's suite name.
        planned: String,
    },
    /// The plan runs an agent that uses the gateway, and the recording has none of its name.
    #[error("it records no agent '{name}' (it has {})", has.join(", "))]
    NoAgent {
        /// The planned agent, one that uses the gateway.
        name: String,
        /// The agents the recording holds.
        has: Vec<String>,
    },
    /// An agent that uses the gateway is configured otherwise than in the recording, beyond
    /// `endpoint` and `api_key`: the agent's name.
    #[error(
        "agent '{0}' is configured otherwise than in the recording (only `endpoint` and `api_key` may differ)"
    )]
    Reconfigured(String),
    /// A planned trial of an agent that uses the gateway has no recorded model calls.
    #[error("no recording of trial {task} / {agent} #{trial} ({} is missing)", file.display())]
    Missing {
        /// The trial's task id.
        task: String,
        /// The trial's agent.
        agent: String,
        /// The trial's number, from 1.
        trial: u32,
        /// The file of model calls that should be there.
        file: PathBuf,
    },
}

/// Checks that `recorded` can answer `plan`'s trials.
pub fn check_replayable(recorded: &Path, plan: &Plan) -> Result<(), ReplayError> {
    check(recorded, plan).map_err(|why| ReplayError {
        recorded: recorded.to_owned(),
        why,
    })
}

fn check(recorded: &Path, plan: &Plan) -> Result<(), NotReplayable> {
    let text =
        std::fs::read_to_string(recorded.join(layout::MANIFEST)).map_err(NotReplayable::NotARun)?;
    let manifest: Manifest = serde_json::from_str(&text).map_err(NotReplayable::Unreadable)?;
    if !manifest.request.as_ref().is_some_and(|r| r.record) {
        return Err(NotReplayable::NotRecorded);
    }
    if manifest.suite != plan.suite.name {
        return Err(NotReplayable::OtherSuite {
            recorded: manifest.suite,
            planned: plan.suite.name.clone(),
        });
    }
    let now = super::recorded_agent_configs(&plan.agents);
    for (name, spec) in &plan.agents {
        if !super::gateway::uses_gateway(spec) {
            continue;
        }
        let Some(then) = manifest.agents.get(name) else {
            return Err(NotReplayable::NoAgent {
                name: name.clone(),
                has: manifest.agents.keys().cloned().collect(),
            });
        };
        let strip = |config: &serde_json::Value| {
            let mut config = config.clone();
            if let Some(map) = config.as_object_mut() {
                for key in REPLAY_FREE {
                    map.remove(key);
                }
            }
            config
        };
        if strip(then) != strip(&now[name]) {
            return Err(NotReplayable::Reconfigured(name.clone()));
        }
    }
    for spec in &plan.trials {
        if !super::gateway::uses_gateway(&plan.agents[&spec.agent]) {
            continue;
        }
        let task = &plan.suite.tasks[spec.task].id;
        let file =
            layout::trial_path(recorded, task, &spec.agent, spec.trial).join(layout::MODEL_CALLS);
        if !file.is_file() {
            return Err(NotReplayable::Missing {
                task: task.clone(),
                agent: spec.agent.clone(),
                trial: spec.trial,
                file,
            });
        }
    }
    Ok(())
}
