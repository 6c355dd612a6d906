//! The model gateway: a local HTTP server between every real CLI agent and its model provider.
//!
//! One gateway serves a run; each trial registers and gets its own path prefix
//! (`http://127.0.0.1:PORT/t/TOKEN`), which the adapters hand the CLI as its endpoint, with a
//! placeholder key. Requests are forwarded as they came (the four dialects of [`Dialect`],
//! streamed answers passed through as they arrive) to the trial's upstream, the agent's real
//! `endpoint` or the provider's own URL, with the real key put in the header the client used.
//! The agent process never sees that key.
//!
//! On the way back each model call's usage is read from the provider's answer ([`Meter`]) and
//! added to the trial's account, priced from the same table as the CLIs' usage. Before a model
//! call is forwarded the account's [`Budget`] is checked: a call made when the budget is already
//! spent (or one call past `model_calls`) is refused in the dialect's own error shape and the
//! trial's [`crate::agent::BudgetStop`] is tripped, so the agent stops its CLI. A budget is overshot by at
//! most the calls in flight when it was crossed (one, for a CLI that calls the model in turn).
//!
//! With `run --record` the handler keeps each request and the answer's bytes in the trial's
//! folder; with `run --replay` it answers from such a recording and never calls upstream
//! ([`record`]).

mod dialect;
pub mod record;
mod server;
mod stream;

pub use dialect::{Dialect, MAX_BODY, Meter, Provider};
pub use record::{ReplayMismatch, Tape, TapeError};
pub use server::{Gateway, GatewayError, GatewayLease, TrialSetup, Upstream};

use crate::agent::Budget;
use crate::agent::harness::cli::CliDialect;
use crate::agent::harness::{Endpoint, HarnessConfig, HarnessKind, is_loopback};

/// The provider a real CLI talks to when the agent names no endpoint, when the gateway can
/// stand in for it: each built-in CLI says so ([`BuiltinCli::gateway_dialect`]), a definition by
/// its `dialect:`. `None`: its calls run direct.
///
/// [`BuiltinCli::gateway_dialect`]: crate::agent::harness::BuiltinCli::gateway_dialect
pub fn default_provider(kind: HarnessKind, config: &HarnessConfig) -> Option<Provider> {
    let dialect = match kind.cli() {
        Some(cli) => cli.gateway_dialect(config),
        None => config.cli.as_ref().map(|cli| cli.dialect),
    };
    dialect.map(|dialect| match dialect {
        CliDialect::Anthropic => Provider::Anthropic,
        CliDialect::Openai => Provider::OpenAi,
        CliDialect::Gemini => Provider::Google,
    })
}

/// Whether a real CLI agent's model calls go through the gateway: always with an `endpoint`,
/// else when [`default_provider`] knows where they go.
pub fn uses_gateway(kind: HarnessKind, config: &HarnessConfig) -> bool {
    config.endpoint.is_some() || default_provider(kind, config).is_some()
}

/// Where a real CLI agent's calls go on from the gateway, with the real key: its endpoint
/// (`scripted` resolves a `scripted:` one to the started server's root) or its provider's own
/// API. `None` when the agent runs without the gateway.
pub fn upstream_for(
    kind: HarnessKind,
    config: &HarnessConfig,
    scripted: Option<&str>,
) -> Option<Upstream> {
    let env_key = |name: &str| {
        config
            .env
            .get(name)
            .cloned()
            .or_else(|| std::env::var(name).ok())
    };
    match &config.endpoint {
        Some(Endpoint::Scripted(_)) => Some(Upstream::single(scripted?, config.api_key.clone())),
        Some(Endpoint::Url(url)) => {
            let key = config.api_key.clone().or_else(|| {
                if is_loopback(url) {
                    None
                } else {
                    env_key(config.key_env(kind))
                }
            });
            Some(Upstream::single(url, key))
        }
        None => {
            let provider = default_provider(kind, config)?;
            let key = config
                .api_key
                .clone()
                .or_else(|| env_key(key_env(provider)));
            Some(Upstream::default().with(provider, default_root(provider), key))
        }
    }
}

/// Where a `command` agent's calls go on from the gateway: its `endpoint` for every dialect,
/// else each provider's own API with its key from deltabench's environment.
pub fn command_upstream(endpoint: Option<&str>) -> Upstream {
    match endpoint {
        Some(url) => Upstream::single(url, None),
        None => [Provider::Anthropic, Provider::OpenAi, Provider::Google]
            .into_iter()
            .fold(Upstream::default(), |upstream, provider| {
                upstream.with(
                    provider,
                    default_root(provider),
                    std::env::var(key_env(provider)).ok(),
                )
            }),
    }
}

/// The provider's own API root, where a dialect's calls go when the agent names no endpoint.
pub fn default_root(provider: Provider) -> &'static str {
    match provider {
        Provider::Anthropic => "https://api.anthropic.com",
        Provider::OpenAi => "https://api.openai.com",
        Provider::Google => "https://generativelanguage.googleapis.com",
    }
}

/// The variable a provider's key is read from in deltabench's own environment.
pub fn key_env(provider: Provider) -> &'static str {
    match provider {
        Provider::Anthropic => "ANTHROPIC_API_KEY",
        Provider::OpenAi => "OPENAI_API_KEY",
        Provider::Google => "GEMINI_API_KEY",
    }
}

/// Why a model call is refused, when `spent` (tokens, cost, model calls so far, seconds since
/// the trial registered) has reached `budget`.
pub fn over_budget(budget: &Budget, spent: &Spent) -> Option<String> {
    if let Some(limit) = budget.tokens
        && spent.tokens >= limit
    {
        return Some(format!(
            "deltabench budget exceeded: {} tokens used of a budget of {limit}",
            spent.tokens
        ));
    }
    if let Some(limit) = budget.cost_usd
        && spent.cost_usd >= limit
    {
        return Some(format!(
            "deltabench budget exceeded: ${:.4} spent of a budget of ${limit}",
            spent.cost_usd
        ));
    }
    if let Some(limit) = budget.model_calls
        && spent.model_calls >= limit
    {
        return Some(format!(
            "deltabench budget exceeded: {} model calls made, the budget allows {limit}",
            spent.model_calls
        ));
    }
    if let Some(limit) = budget.wall
        && spent.wall >= limit
    {
        return Some(format!(
            "deltabench budget exceeded: {} since the trial started, the budget allows {}",
            humantime::format_duration(std::time::Duration::from_secs(spent.wall.as_secs())),
            humantime::format_duration(limit)
        ));
    }
    None
}

/// What a trial has used so far, as a budget counts it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Spent {
    /// Every token counted: input, output, cache reads and cache writes.
    pub tokens: u64,
    /// In US dollars, as priced so far.
    pub cost_usd: f64,
    /// Model calls answered so far.
    pub model_calls: u64,
    /// Since the agent started (`start_clock`), else since the trial registered.
    pub wall: std::time::Duration,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_budget_refuses_once_reached_and_model_calls_one_past() {
        let budget = Budget {
            tokens: Some(100),
            model_calls: Some(2),
            ..Budget::default()
        };
        let mut spent = Spent {
            tokens: 99,
            model_calls: 1,
            ..Spent::default()
        };
        assert_eq!(over_budget(&budget, &spent), None);
        spent.tokens = 100;
        assert!(over_budget(&budget, &spent).unwrap().contains("100 tokens"));
        spent.tokens = 0;
        spent.model_calls = 2;
        assert!(over_budget(&budget, &spent).unwrap().contains("allows 2"));
        let cost = Budget {
            cost_usd: Some(0.01),
            ..Budget::default()
        };
        spent.cost_usd = 0.009;
        assert_eq!(over_budget(&cost, &spent), None);
        spent.cost_usd = 0.0101;
        assert!(
            over_budget(&cost, &spent)
                .unwrap()
                .contains("$0.0101 spent")
        );
        let wall = Budget {
            wall: Some(Duration::from_secs(1)),
            ..Budget::default()
        };
        spent.wall = Duration::from_secs(2);
        assert!(over_budget(&wall, &spent).is_some());
    }
}
