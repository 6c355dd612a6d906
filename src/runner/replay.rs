//! Checks before a run is answered from a recording (`run --replay RUN_DIR`): the recording is
//! a run of this suite, with these agents' configs, and holds every planned trial's model calls.

use std::path::Path;

use crate::store::{Manifest, layout};

use super::Plan;

/// Config keys a replay may change: where the calls would go and with which key. A replay
/// sends none of them anywhere.
const REPLAY_FREE: [&str; 2] = ["endpoint", "api_key"];

/// Why `recorded` cannot answer `plan`'s trials, as the message of an exit 2.
pub fn check_replayable(recorded: &Path, plan: &Plan) -> Result<(), String> {
    let shown = recorded.display();
    let text = std::fs::read_to_string(recorded.join(layout::MANIFEST)).map_err(|e| {
        format!(
            "--replay {shown}: not a run directory (no readable {}: {e})",
            layout::MANIFEST
        )
    })?;
    let manifest: Manifest = serde_json::from_str(&text).map_err(|e| {
        format!(
            "--replay {shown}: its {} is unreadable: {e}",
            layout::MANIFEST
        )
    })?;
    if !manifest.request.as_ref().is_some_and(|r| r.record) {
        return Err(format!(
            "--replay {shown}: that run was not made with --record: it holds no model calls to answer from"
        ));
    }
    if manifest.suite != plan.suite.name {
        return Err(format!(
            "--replay {shown}: it records suite '{}', not '{}'",
            manifest.suite, plan.suite.name
        ));
    }
    let now = super::recorded_agent_configs(&plan.agents);
    for (name, spec) in &plan.agents {
        if !super::gateway::uses_gateway(spec) {
            continue;
        }
        let Some(then) = manifest.agents.get(name) else {
            return Err(format!(
                "--replay {shown}: it records no agent '{name}' (it has {})",
                manifest
                    .agents
                    .keys()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
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
            return Err(format!(
                "--replay {shown}: agent '{name}' is configured otherwise than in the recording (only `endpoint` and `api_key` may differ)"
            ));
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
            return Err(format!(
                "--replay {shown}: no recording of trial {task} / {} #{} ({} is missing)",
                spec.agent,
                spec.trial,
                file.display()
            ));
        }
    }
    Ok(())
}
