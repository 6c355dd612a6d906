//! `report --agent NAME`: a run narrowed to some of its agents.

use crate::store::StoredRun;

/// A name given to `--agent` that is neither an agent of the run nor a matrix of it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("this run has no agent '{name}'. Its agents: {}{}", agents.join(", "), matrices_text(matrices))]
pub(crate) struct UnknownAgent {
    pub name: String,
    pub agents: Vec<String>,
    /// Bases of the run's `matrix:` agents; each selects all its combinations.
    pub matrices: Vec<String>,
}

fn matrices_text(matrices: &[String]) -> String {
    if matrices.is_empty() {
        String::new()
    } else {
        format!(
            "; its matrices (each selects all its combinations): {}",
            matrices.join(", ")
        )
    }
}

/// The agents of `run`: its manifest's, then any only the records name.
fn agents_of(run: &StoredRun) -> Vec<String> {
    let mut agents: Vec<String> = run.manifest.agents.keys().cloned().collect();
    for record in &run.trials {
        if !agents.contains(&record.agent) {
            agents.push(record.agent.clone());
        }
    }
    agents
}

/// `run` restricted to the agents `names` select, in the run's order: an agent by its name, or
/// every combination of a `matrix:` by the base's name (as `run --agent` selects them). No names
/// keep every agent.
pub(crate) fn select_agents(run: &StoredRun, names: &[String]) -> Result<StoredRun, UnknownAgent> {
    if names.is_empty() {
        return Ok(run.clone());
    }
    let all = agents_of(run);
    let base_of = |agent: &str| run.manifest.variants.get(agent).map(|v| v.base.as_str());
    for name in names {
        if !all.iter().any(|a| a == name || base_of(a) == Some(name)) {
            let mut matrices: Vec<String> = Vec::new();
            for variant in run.manifest.variants.values() {
                if !matrices.contains(&variant.base) {
                    matrices.push(variant.base.clone());
                }
            }
            return Err(UnknownAgent {
                name: name.clone(),
                agents: all,
                matrices,
            });
        }
    }
    let keep = |agent: &str| {
        names
            .iter()
            .any(|n| n == agent || base_of(agent) == Some(n.as_str()))
    };
    let mut selected = run.clone();
    selected.trials.retain(|r| keep(&r.agent));
    selected.manifest.agents.retain(|a, _| keep(a));
    selected.manifest.variants.retain(|a, _| keep(a));
    // An unsharded plan is tasks x trials x agents: scale it to the agents kept. A shard's slice
    // need not split evenly by agent; it is left as recorded.
    let (before, after) = (run.manifest.agents.len(), selected.manifest.agents.len());
    if run.manifest.shard.is_none() && before > 0 {
        selected.manifest.planned_trials = run.manifest.planned_trials / before * after;
    }
    Ok(selected)
}
