//! One agent's configuration: the keys its kind takes, each value checked.

use std::path::PathBuf;

use super::diagnostics::{Source, SuiteError};
use super::names::resolve_command;
use super::raw::{RawAgent, RawBudget, RawCliOutput, loc};
use super::types::AgentSpec;
use crate::agent::harness::cli::{
    CliDefinition, CliDialect, OutputParser, PLACEHOLDERS, placeholders,
};
use crate::agent::harness::{Endpoint, HarnessConfig, HarnessKind};
use crate::agent::{Budget, CommandAgentConfig, MockConfig};
use crate::workspace::Network;
use indexmap::IndexMap;
use serde_saphyr::Spanned;
use strum::VariantNames;

/// Agents that exist without being configured.
pub const BUILTIN_AGENTS: [&str; 2] = ["oracle", "noop"];

/// The keys a kind other than a real CLI takes; `None` for a real CLI or an unknown kind.
fn plain_kind_keys(kind: &str) -> Option<&'static [&'static str]> {
    Some(match kind {
        "noop" | "oracle" => &[],
        "mock" => &[
            "responses",
            "artifacts",
            "delay",
            "simulate_error",
            "simulate_panic",
            "apply_writes",
        ],
        "command" => &[
            "run", "timeout", "env", "network", "gateway", "endpoint", "budget",
        ],
        _ => return None,
    })
}

pub(super) fn agent_spec(
    source: &Source,
    name: &str,
    agent: &RawAgent,
) -> Result<AgentSpec, SuiteError> {
    let kind = agent.kind.value.as_str();
    let Some(allowed) = plain_kind_keys(kind) else {
        return match HarnessKind::parse(kind) {
            Some(harness) => harness_spec(source, name, agent, harness),
            None => Err(unknown_kind(source, name, agent)),
        };
    };
    check_plain_keys(source, name, agent, allowed)?;
    Ok(match kind {
        "noop" => AgentSpec::Noop,
        "oracle" => AgentSpec::Oracle,
        "mock" => AgentSpec::Mock(mock_config(source, agent)?),
        _ => AgentSpec::Command(command_config(source, name, agent)?),
    })
}

/// A `kind:` no agent has, with the valid kinds and the nearest one.
fn unknown_kind(source: &Source, name: &str, agent: &RawAgent) -> SuiteError {
    let other = agent.kind.value.as_str();
    source.at(
        &agent.kind,
        format!(
            "unknown agent kind '{other}' for agent '{name}'. Valid kinds: {}{}",
            AgentSpec::kinds().join(", "),
            crate::support::suggestion(other, AgentSpec::kinds().into_iter())
        ),
    )
}

/// Only the keys in `allowed` are set.
fn check_plain_keys(
    source: &Source,
    name: &str,
    agent: &RawAgent,
    allowed: &[&str],
) -> Result<(), SuiteError> {
    let kind = agent.kind.value.as_str();
    for (key, location) in agent.keys_set() {
        if !allowed.contains(&key) {
            let valid = if allowed.is_empty() {
                "none".to_owned()
            } else {
                allowed.join(", ")
            };
            return Err(source.error(
                location.unwrap_or(loc(&agent.kind)),
                format!("`{key}` does not apply to agent '{name}' of kind '{kind}'. Valid keys for it: {valid}"),
            ));
        }
    }
    Ok(())
}

/// A `kind: mock` agent's configuration.
fn mock_config(source: &Source, agent: &RawAgent) -> Result<MockConfig, SuiteError> {
    Ok(MockConfig {
        responses: agent.responses.clone().unwrap_or_default(),
        artifacts: agent.artifacts.clone().unwrap_or_default(),
        delay: agent
            .delay
            .as_ref()
            .map(|d| source.duration(d))
            .transpose()?,
        simulate_error: agent.simulate_error.clone(),
        simulate_panic: agent.simulate_panic,
        apply_writes: agent.apply_writes.unwrap_or(false),
    })
}

/// A `kind: command` agent's configuration: `run` set, and the gateway on where its keys need it.
fn command_config(
    source: &Source,
    name: &str,
    agent: &RawAgent,
) -> Result<CommandAgentConfig, SuiteError> {
    let Some(run) = &agent.run else {
        return Err(source.at(
            &agent.kind,
            format!("agent '{name}' of kind 'command' needs `run`: the shell command to start"),
        ));
    };
    let gateway = agent.gateway.as_ref().is_some_and(|g| g.value);
    if !gateway {
        check_command_without_gateway(source, name, agent)?;
    }
    Ok(CommandAgentConfig {
        run: resolve_command(source, run)?,
        timeout: agent
            .timeout
            .as_ref()
            .map(|t| source.duration(t))
            .transpose()?,
        env: agent.env.clone().unwrap_or_default(),
        network: agent_network(source, agent)?,
        gateway,
        endpoint: agent_endpoint(source, agent)?,
        budget: agent_budget(source, agent)?,
    })
}

/// A command agent off the gateway sets none of the keys only the gateway can honour.
fn check_command_without_gateway(
    source: &Source,
    name: &str,
    agent: &RawAgent,
) -> Result<(), SuiteError> {
    let model_network = agent.network.as_ref().filter(|n| n.value == "model");
    let needs = [
        ("endpoint", agent.endpoint.as_ref().map(loc)),
        ("budget", agent.budget.as_ref().map(loc)),
        ("network: model", model_network.map(loc)),
    ];
    if let Some((key, Some(at))) = needs.into_iter().find(|(_, at)| at.is_some()) {
        return Err(source.error(
            at,
            format!(
                "`{key}` on agent '{name}' of kind 'command' needs `gateway: true`: \
                 only calls through deltabench's gateway are counted, limited and \
                 let through `network: model`"
            ),
        ));
    }
    Ok(())
}

/// The agent's `budget:`, each value checked to be above zero.
fn agent_budget(source: &Source, agent: &RawAgent) -> Result<Option<Budget>, SuiteError> {
    agent
        .budget
        .as_ref()
        .map(|raw| budget(source, &raw.value))
        .transpose()
}

/// A `budget:` map, each value checked to be above zero.
pub(super) fn budget(source: &Source, raw: &RawBudget) -> Result<Budget, SuiteError> {
    let bad = |key: &str, value: String, why: &str, at: (u64, u64)| {
        source.error(
            at,
            format!(
                "`budget.{key}: {value}` is not a budget: {why}. Valid keys: {} (tokens and \
                 model_calls whole numbers, cost_usd in USD, wall a duration such as `10m`)",
                Budget::KEYS.join(", ")
            ),
        )
    };
    const ABOVE_ZERO: &str = "it must be above zero";
    let whole = |key: &str, value: &Option<Spanned<i64>>| -> Result<Option<u64>, SuiteError> {
        value
            .as_ref()
            .map(|v| match u64::try_from(v.value) {
                Ok(n) if n > 0 => Ok(n),
                _ => Err(bad(key, v.value.to_string(), ABOVE_ZERO, loc(v))),
            })
            .transpose()
    };
    let cost_usd = raw
        .cost_usd
        .as_ref()
        .map(|v| {
            if v.value > 0.0 && v.value.is_finite() {
                Ok(v.value)
            } else {
                Err(bad("cost_usd", v.value.to_string(), ABOVE_ZERO, loc(v)))
            }
        })
        .transpose()?;
    let wall = raw
        .wall
        .as_ref()
        .map(|v| {
            crate::support::parse_duration(&v.value)
                .map_err(|why| bad("wall", v.value.clone(), &why.to_string(), loc(v)))
        })
        .transpose()?;
    Ok(Budget {
        tokens: whole("tokens", &raw.tokens)?,
        cost_usd,
        model_calls: whole("model_calls", &raw.model_calls)?,
        wall,
    })
}

/// Gives every agent whose calls pass the gateway the suite's `budget:`, limit by limit where
/// its own leaves one unset.
pub(super) fn apply_default_budget(agents: &mut IndexMap<String, AgentSpec>, defaults: Budget) {
    for spec in agents.values_mut() {
        let through = match spec.as_harness() {
            Some((kind, config)) => crate::gateway::uses_gateway(kind, config),
            None => matches!(spec, AgentSpec::Command(config) if config.gateway),
        };
        if !through {
            continue;
        }
        let slot = match spec {
            AgentSpec::Command(config) => &mut config.budget,
            AgentSpec::Harness { config, .. } => &mut config.budget,
            AgentSpec::Noop | AgentSpec::Oracle | AgentSpec::Mock(_) => continue,
        };
        *slot = Some(slot.unwrap_or_default().or(defaults));
    }
}

/// The agent's `network:`, if set.
fn agent_network(source: &Source, agent: &RawAgent) -> Result<Option<Network>, SuiteError> {
    agent
        .network
        .as_ref()
        .map(|n| {
            n.value
                .parse()
                .map_err(|err| source.at(n, format!("{err}")))
        })
        .transpose()
}

/// The agent's `endpoint:`, a URL or a `scripted:` script that exists and loads.
fn agent_endpoint(source: &Source, agent: &RawAgent) -> Result<Option<Endpoint>, SuiteError> {
    agent
        .endpoint
        .as_ref()
        .map(|text| -> Result<Endpoint, SuiteError> {
            match Endpoint::parse(&text.value).map_err(|err| source.at(text, err.to_string()))? {
                Endpoint::Scripted(path) => {
                    let full = source.dir.join(&path);
                    if !full.is_file() {
                        return Err(source.at(
                            text,
                            format!("the endpoint's script {} does not exist", full.display()),
                        ));
                    }
                    let full = full.canonicalize().unwrap_or(full);
                    crate::model::Script::load(&full)
                        .map_err(|err| SuiteError::Referenced(err.to_string()))?;
                    Ok(Endpoint::Scripted(full))
                }
                url => Ok(url),
            }
        })
        .transpose()
}

/// The definition of a `kind: cli` agent: `command`, `dialect` and `output` set, a known
/// parser, and a template naming only placeholders that exist and that the agent sets.
fn cli_definition(
    source: &Source,
    name: &str,
    agent: &RawAgent,
    config: &HarnessConfig,
) -> Result<CliDefinition, SuiteError> {
    if agent.command.is_none() {
        return Err(cli_needs(
            source,
            name,
            agent,
            "command",
            "the executable, a path relative to this file or a name on PATH",
        ));
    }
    let dialect = cli_dialect(source, name, agent)?;
    let (output, parser) = cli_output(source, name, agent)?;
    let Some(args) = &agent.args else {
        return Err(cli_needs(
            source,
            name,
            agent,
            "args",
            "the arguments, with `{instruction}` where the task goes",
        ));
    };
    check_cli_args(source, name, args, config)?;
    check_cli_env(source, name, agent, config)?;
    let path = |field: &Option<Spanned<String>>| field.as_ref().map(|f| f.value.clone());
    Ok(CliDefinition {
        args: args.value.iter().map(|a| a.value.clone()).collect(),
        dialect,
        parser,
        result: path(&output.result),
        session_id: path(&output.session_id),
        usage: path(&output.usage),
    })
}

/// A `kind: cli` agent lacks `key`, which is `what`.
fn cli_needs(source: &Source, name: &str, agent: &RawAgent, key: &str, what: &str) -> SuiteError {
    source.at(
        &agent.kind,
        format!("agent '{name}' of kind 'cli' needs `{key}:` ({what})"),
    )
}

/// The `dialect:` of a `kind: cli` agent, set and known.
fn cli_dialect(source: &Source, name: &str, agent: &RawAgent) -> Result<CliDialect, SuiteError> {
    let Some(dialect) = &agent.dialect else {
        return Err(cli_needs(
            source,
            name,
            agent,
            "dialect",
            "the API it speaks, which points it at the endpoint: anthropic, openai or gemini",
        ));
    };
    dialect.value.parse::<CliDialect>().map_err(|_| {
        source.at(
            dialect,
            format!(
                "unknown dialect '{}' for agent '{name}'. Valid dialects: {}",
                dialect.value,
                CliDialect::VARIANTS.join(", ")
            ),
        )
    })
}

/// The `output:` of a `kind: cli` agent: set, a known parser, and the json-lines fields only
/// with that parser.
fn cli_output<'a>(
    source: &Source,
    name: &str,
    agent: &'a RawAgent,
) -> Result<(&'a RawCliOutput, OutputParser), SuiteError> {
    let Some(output) = &agent.output else {
        return Err(cli_needs(
            source,
            name,
            agent,
            "output",
            "how its stdout is read, e.g. `output: {parser: text}`",
        ));
    };
    let output = &output.value;
    let parser = output.parser.value.parse::<OutputParser>().map_err(|_| {
        source.at(
            &output.parser,
            format!(
                "unknown output parser '{}' for agent '{name}'. Valid parsers: {}",
                output.parser.value,
                OutputParser::VARIANTS.join(", ")
            ),
        )
    })?;
    let fields = [
        ("result", &output.result),
        ("session_id", &output.session_id),
        ("usage", &output.usage),
    ];
    if parser != OutputParser::JsonLines
        && let Some((key, Some(at))) = fields.iter().find(|(_, at)| at.is_some())
    {
        return Err(source.at(
            at,
            format!(
                "`output.{key}` applies to the json-lines parser only: the {} parser knows where its CLI puts it",
                output.parser.value
            ),
        ));
    }
    Ok((output, parser))
}

/// Every placeholder in a `kind: cli` template exists and is set, and one passes the task.
fn check_cli_args(
    source: &Source,
    name: &str,
    args: &Spanned<Vec<Spanned<String>>>,
    config: &HarnessConfig,
) -> Result<(), SuiteError> {
    for arg in &args.value {
        for (_, placeholder) in placeholders(&arg.value) {
            if !PLACEHOLDERS.contains(&placeholder.as_str()) {
                return Err(source.at(
                    arg,
                    format!(
                        "unknown placeholder {{{placeholder}}} in the args of agent '{name}'. Valid placeholders: {}",
                        valid_placeholders()
                    ),
                ));
            }
            if !placeholder_set(config, &placeholder) {
                return Err(source.at(
                    arg,
                    format!(
                        "the args of agent '{name}' use {{{placeholder}}}, which it does not set: add `{placeholder}:` to the agent"
                    ),
                ));
            }
        }
    }
    if !args.value.iter().any(|arg| {
        placeholders(&arg.value)
            .iter()
            .any(|(_, p)| p == "instruction")
    }) {
        return Err(source.at(
            args,
            format!(
                "the args of agent '{name}' never pass the task: put `{{instruction}}` where the CLI takes its prompt"
            ),
        ));
    }
    Ok(())
}

/// Every placeholder in a `kind: cli` agent's `env:` exists.
fn check_cli_env(
    source: &Source,
    name: &str,
    agent: &RawAgent,
    config: &HarnessConfig,
) -> Result<(), SuiteError> {
    for (key, value) in config.env.iter() {
        if let Some((_, bad)) = placeholders(value)
            .into_iter()
            .find(|(_, p)| !PLACEHOLDERS.contains(&p.as_str()))
        {
            return Err(source.at(
                &agent.kind,
                format!(
                    "unknown placeholder {{{bad}}} in `env.{key}` of agent '{name}'. Valid placeholders: {}",
                    valid_placeholders()
                ),
            ));
        }
    }
    Ok(())
}

/// The placeholders a template may name, as written in it.
fn valid_placeholders() -> String {
    PLACEHOLDERS.map(|p| format!("{{{p}}}")).join(", ")
}

/// Whether the agent sets the value `placeholder` stands for; the others are always there.
fn placeholder_set(config: &HarnessConfig, placeholder: &str) -> bool {
    match placeholder {
        "model" => config.model.is_some(),
        "max_turns" => config.max_turns.is_some(),
        _ => true,
    }
}

/// Validates a real CLI agent: only the keys its kind supports, a known permission mode, a
/// parseable endpoint whose script exists, the CLI's own rules.
fn harness_spec(
    source: &Source,
    name: &str,
    agent: &RawAgent,
    kind: HarnessKind,
) -> Result<AgentSpec, SuiteError> {
    check_harness_keys(source, name, agent, kind)?;
    let mut config = HarnessConfig {
        model: agent.model.as_ref().map(|m| m.value.clone()),
        max_turns: agent.max_turns.as_ref().map(|t| t.value),
        permission_mode: agent.permission_mode.as_ref().map(|m| m.value.clone()),
        append_system_prompt: agent.append_system_prompt.as_ref().map(|p| p.value.clone()),
        args: agent
            .args
            .as_ref()
            .map(|a| a.value.iter().map(|arg| arg.value.clone()).collect())
            .unwrap_or_default(),
        env: agent.env.clone().unwrap_or_default(),
        endpoint: agent_endpoint(source, agent)?,
        api_key: agent.api_key.clone(),
        price: agent.price,
        ..HarnessConfig::default()
    };
    if let Some(rule) = kind.cli().and_then(|cli| cli.config_error(&config)) {
        let at = agent
            .keys_set()
            .into_iter()
            .find(|(key, _)| *key == rule.key)
            .and_then(|(_, at)| at);
        return Err(source.error(at.unwrap_or(loc(&agent.kind)), rule.message));
    }
    config.binary = agent_binary(source, agent, kind)?;
    config.timeout = agent
        .timeout
        .as_ref()
        .map(|t| source.duration(t))
        .transpose()?;
    config.network = agent_network(source, agent)?;
    config.budget = agent_budget(source, agent)?;
    if kind == HarnessKind::Cli {
        let definition = cli_definition(source, name, agent, &config)?;
        // The template is the command line: `args` is not appended again.
        config.args.clear();
        config.cli = Some(definition);
    }
    check_gateway_needs(source, name, agent, kind, &config)?;
    check_cost_budget(source, name, agent, &config)?;
    Ok(AgentSpec::harness(kind, config))
}

/// Only the keys `kind` takes, a permission mode it has, no flag deltabench passes itself, and
/// a turn limit of at least 1.
fn check_harness_keys(
    source: &Source,
    name: &str,
    agent: &RawAgent,
    kind: HarnessKind,
) -> Result<(), SuiteError> {
    let allowed = kind.keys();
    if let Some((key, location)) = agent
        .keys_set()
        .into_iter()
        .find(|(key, _)| !allowed.contains(key))
    {
        let why = match key {
            "max_turns" => format!(" ({kind} has no turn limit to set)"),
            "permission_mode" => format!(" ({kind} has one headless mode, always used)"),
            "append_system_prompt" => format!(" ({kind} has no system prompt to add to)"),
            _ => String::new(),
        };
        return Err(source.error(
            location.unwrap_or(loc(&agent.kind)),
            format!(
                "`{key}` does not apply to agent '{name}' of kind '{kind}'{why}. Valid keys for it: {}",
                allowed.join(", ")
            ),
        ));
    }
    if let Some(mode) = &agent.permission_mode
        && !kind.permission_modes().contains(&mode.value.as_str())
    {
        return Err(source.at(
            mode,
            format!(
                "unknown permission_mode '{}' for {kind}. Valid modes: {}",
                mode.value,
                kind.permission_modes().join(", ")
            ),
        ));
    }
    if let Some(args) = &agent.args
        && let Some((arg, (flag, instead))) = args
            .value
            .iter()
            .find_map(|arg| Some((arg, kind.reserved_flag(&arg.value)?)))
    {
        let arg = &arg.value;
        return Err(source.at(
            args,
            format!(
                "`args` may not hold '{arg}': deltabench passes {flag} to {kind} itself ({instead})"
            ),
        ));
    }
    if let Some(turns) = &agent.max_turns
        && turns.value == 0
    {
        return Err(source.at(turns, "max_turns must be at least 1"));
    }
    Ok(())
}

/// The agent's `binary:` (`command:` for `kind: cli`): a name looked up on PATH when the run
/// starts, or a path (relative to this file) that must be there now.
fn agent_binary(
    source: &Source,
    agent: &RawAgent,
    kind: HarnessKind,
) -> Result<Option<PathBuf>, SuiteError> {
    let Some(binary) = agent.binary.as_ref().or(agent.command.as_ref()) else {
        return Ok(None);
    };
    let path = PathBuf::from(&binary.value);
    let path = if binary.value.starts_with("./") || binary.value.starts_with("../") {
        source.dir.join(path)
    } else {
        path
    };
    if path.components().count() > 1 && !path.is_file() {
        let key = if kind == HarnessKind::Cli {
            "command"
        } else {
            "binary"
        };
        return Err(source.at(
            binary,
            format!(
                "`{key}: {}`: {} is not a file",
                binary.value,
                path.display()
            ),
        ));
    }
    Ok(Some(path))
}

/// `budget:` and `network: model` need the agent's calls to pass the gateway.
fn check_gateway_needs(
    source: &Source,
    name: &str,
    agent: &RawAgent,
    kind: HarnessKind,
    config: &HarnessConfig,
) -> Result<(), SuiteError> {
    let model_network = agent
        .network
        .as_ref()
        .filter(|_| config.network == Some(Network::Model));
    let needs_gateway = [
        ("budget", agent.budget.as_ref().map(loc)),
        ("network: model", model_network.map(loc)),
    ];
    for (key, at) in needs_gateway {
        if let Some(at) = at
            && !crate::gateway::uses_gateway(kind, config)
        {
            let why = kind.cli().map_or(
                "a model of a provider other than OpenAI without `endpoint:`",
                |cli| cli.gateway_bypass(),
            );
            return Err(source.error(
                at,
                format!(
                    "`{key}` on agent '{name}' needs its calls to pass deltabench's gateway, \
                     which {why} bypasses: set `endpoint:`"
                ),
            ));
        }
    }
    Ok(())
}

/// A cost budget needs a price; the CLI's default model is checked when it answers.
fn check_cost_budget(
    source: &Source,
    name: &str,
    agent: &RawAgent,
    config: &HarnessConfig,
) -> Result<(), SuiteError> {
    if let (Some(raw), Some(model)) = (&agent.budget, &config.model)
        && config.budget.is_some_and(|b| b.cost_usd.is_some())
        && config.price.is_none()
        && crate::agent::harness::pricing::price_table()
            .lookup(model)
            .is_none()
    {
        return Err(source.at(
            raw,
            format!(
                "`budget.cost_usd` on agent '{name}' needs the price of model '{model}', which \
                 deltabench's price table does not have: set `price: {{input: USD, output: USD}}` \
                 (per million tokens) on the agent"
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_kinds_take_their_own_keys_and_real_clis_none() {
        assert_eq!(plain_kind_keys("noop"), Some(&[][..]));
        assert_eq!(plain_kind_keys("oracle"), Some(&[][..]));
        assert!(plain_kind_keys("mock").is_some_and(|keys| keys.contains(&"delay")));
        assert!(plain_kind_keys("command").is_some_and(|keys| keys.contains(&"run")));
        assert_eq!(plain_kind_keys("nonsense"), None);
        for kind in HarnessKind::ALL {
            assert_eq!(plain_kind_keys(kind.as_str()), None, "{kind}");
        }
    }

    #[test]
    fn only_model_and_max_turns_can_be_unset() {
        let unset = HarnessConfig::default();
        assert!(!placeholder_set(&unset, "model"));
        assert!(!placeholder_set(&unset, "max_turns"));
        assert!(placeholder_set(&unset, "instruction"));
        let set = HarnessConfig {
            model: Some("m".to_owned()),
            max_turns: Some(3),
            ..HarnessConfig::default()
        };
        assert!(placeholder_set(&set, "model"));
        assert!(placeholder_set(&set, "max_turns"));
    }
}
