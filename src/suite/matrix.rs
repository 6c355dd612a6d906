//! Ablation matrices: one agent per combination of factor levels.

use indexmap::IndexMap;
use serde_saphyr::Spanned;

use super::agents::agent_spec;
use super::diagnostics::{Errors, Source, SuiteError};
use super::names::is_safe_name;
use super::raw::{self, RawAgent, loc};
use super::read::Lost;
use super::types::{AgentSpec, AgentVariant};

/// Validates `raw` agents into `agents`, expanding each `matrix:` into one agent per combination;
/// an agent with an error is left out, its error kept.
pub(super) fn add_agents(
    source: &Source,
    raw: &IndexMap<String, RawAgent>,
    lost: &Lost,
    agents: &mut IndexMap<String, AgentSpec>,
    variants: &mut IndexMap<String, AgentVariant>,
    errors: &mut Errors,
) {
    for (name, agent) in raw {
        // An agent that lost keys for their errors would be checked without them.
        if !lost.keys_near(loc(&agent.kind)) {
            errors.keep(add_agent(source, name, agent, agents, variants));
        }
    }
}

/// One agent, or each variant of its `matrix:`, into `agents`.
fn add_agent(
    source: &Source,
    name: &str,
    agent: &RawAgent,
    agents: &mut IndexMap<String, AgentSpec>,
    variants: &mut IndexMap<String, AgentVariant>,
) -> Result<(), SuiteError> {
    if !is_safe_name(name) {
        return Err(source.at(
            &agent.kind,
            format!("agent name '{name}' is not allowed: use letters, digits, '.', '_' and '-'"),
        ));
    }
    let Some(matrix) = &agent.matrix else {
        agents.insert(name.to_owned(), agent_spec(source, name, agent)?);
        return Ok(());
    };
    let mut combinations: Vec<Vec<(&str, &str, &str)>> = vec![Vec::new()];
    for (factor, levels) in matrix {
        if levels.value.0.is_empty() {
            return Err(source.at(
                levels,
                format!("factor '{factor}' of agent '{name}' has no levels"),
            ));
        }
        combinations = combinations
            .into_iter()
            .flat_map(|combo| {
                levels.value.0.iter().map(move |(label, value)| {
                    let mut next = combo.clone();
                    next.push((factor.as_str(), label.as_str(), value.as_str()));
                    next
                })
            })
            .collect();
    }
    for combo in combinations {
        let mut variant = agent.clone();
        variant.matrix = None;
        for (factor, _, value) in &combo {
            set_factor(source, name, &mut variant, factor, value, &matrix[*factor])?;
        }
        let labels: Vec<String> = combo
            .iter()
            .map(|(f, label, _)| format!("{f}={label}"))
            .collect();
        let full = format!("{name}[{}]", labels.join(","));
        if agents.contains_key(&full) {
            return Err(source.at(
                &agent.kind,
                format!("agent '{full}' is defined twice (repeated level labels?)"),
            ));
        }
        agents.insert(full.clone(), agent_spec(source, &full, &variant)?);
        variants.insert(
            full,
            AgentVariant {
                base: name.to_owned(),
                factors: combo
                    .iter()
                    .map(|(f, label, _)| ((*f).to_owned(), (*label).to_owned()))
                    .collect(),
            },
        );
    }
    Ok(())
}

/// The keys a `matrix:` factor may vary.
pub const MATRIX_FACTORS: [&str; 8] = [
    "run",
    "timeout",
    "delay",
    "model",
    "max_turns",
    "permission_mode",
    "append_system_prompt",
    "env.NAME",
];

fn set_factor(
    source: &Source,
    name: &str,
    agent: &mut RawAgent,
    factor: &str,
    value: &str,
    at: &Spanned<raw::RawLevels>,
) -> Result<(), SuiteError> {
    let spanned = Spanned {
        value: value.to_owned(),
        referenced: at.referenced,
        defined: at.defined,
    };
    match factor {
        "run" => agent.run = Some(spanned),
        "timeout" => agent.timeout = Some(spanned),
        "delay" => agent.delay = Some(spanned),
        "model" => agent.model = Some(spanned),
        "permission_mode" => agent.permission_mode = Some(spanned),
        "append_system_prompt" => agent.append_system_prompt = Some(spanned),
        "max_turns" => {
            let turns = value.parse().map_err(|_| {
                source.at(
                    at,
                    format!("max_turns level '{value}' of agent '{name}' is not a whole number"),
                )
            })?;
            agent.max_turns = Some(Spanned {
                value: turns,
                referenced: at.referenced,
                defined: at.defined,
            });
        }
        _ => match factor.strip_prefix("env.") {
            Some(key) if !key.is_empty() => {
                agent
                    .env
                    .get_or_insert_default()
                    .insert(key.to_owned(), value.to_owned());
            }
            _ => {
                return Err(source.at(
                    at,
                    format!(
                        "factor '{factor}' of agent '{name}' is not a key an ablation can vary. Valid factors: {}",
                        MATRIX_FACTORS.join(", ")
                    ),
                ));
            }
        },
    }
    Ok(())
}
