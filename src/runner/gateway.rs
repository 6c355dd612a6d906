//! The run's model gateway: started when an agent's calls pass it, one lease per trial, and
//! the trial record's usage from both sides.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use indexmap::IndexMap;

use crate::agent::harness::Endpoint;
use crate::gateway::{
    Gateway, GatewayLease, Tape, TrialSetup, Upstream, command_upstream, upstream_for,
};
use crate::store::{TrialRecord, UsageRecord, UsageSource};
use crate::suite::{AgentSpec, Task};
use crate::workspace::{Isolation, ModelRoute, Network};

use super::RunError;

/// Whether `spec`'s model calls pass the gateway.
pub(crate) fn uses_gateway(spec: &AgentSpec) -> bool {
    match spec {
        AgentSpec::Command(config) => config.gateway,
        spec => spec
            .as_harness()
            .is_some_and(|(kind, config)| crate::gateway::uses_gateway(kind, config)),
    }
}

/// The run's gateway, when any of `agents` uses it, and how a sandbox with `network: model`
/// reaches it: through deltabench itself as the forwarder (a program embedding the runner
/// must hand `sandbox-forward` to [`crate::workspace::forward_then_exec`] first thing, as
/// `deltabench`'s `main` does).
pub(crate) async fn start(
    agents: &IndexMap<String, AgentSpec>,
) -> Result<Option<(Arc<Gateway>, ModelRoute)>, RunError> {
    if !agents.values().any(uses_gateway) {
        return Ok(None);
    }
    let gateway = Gateway::start()
        .await
        .map_err(|source| RunError::Gateway { source })?;
    let route = ModelRoute {
        socket: gateway.socket().to_owned(),
        port: gateway.port(),
        forwarder: std::env::current_exe()
            .map_err(RunError::io("cannot find deltabench's own executable"))?,
    };
    Ok(Some((Arc::new(gateway), route)))
}

/// A trial's recording: where to keep its model calls, and the recording to answer them from.
#[derive(Debug, Default)]
pub(crate) struct Taping {
    pub record: Option<PathBuf>,
    pub replay: Option<PathBuf>,
}

/// The network `spec`'s agent gets for `task`: its own in the sandbox or the task's container
/// ([`Network::for_agent`], [`Network::in_container`]); `None` on this machine's.
pub(crate) fn agent_network(task: &Task, spec: &AgentSpec) -> Option<Network> {
    match (&task.environment, task.isolation) {
        (Some(environment), _) => Some(Network::in_container(
            environment.network,
            spec.network(),
            uses_gateway(spec),
        )),
        (None, Isolation::Sandbox) => Some(Network::for_agent(spec.network(), uses_gateway(spec))),
        (None, _) => None,
    }
}

/// Registers one trial of `spec` (`None` when its calls do not pass the gateway), whose agent
/// has `network`. Replaying, the trial has no upstream at all: every answer comes from the
/// recording.
pub(crate) fn lease(
    gateway: Option<&Arc<Gateway>>,
    spec: &AgentSpec,
    network: Option<Network>,
    endpoints: &HashMap<PathBuf, String>,
    taping: Taping,
) -> Option<Arc<GatewayLease>> {
    let gateway = gateway?;
    if !uses_gateway(spec) {
        return None;
    }
    let replay = taping.replay.map(|path| {
        // Checked before the run began; a recording unreadable since answers nothing.
        Arc::new(Tape::load(&path).unwrap_or_else(|why| {
            eprintln!("warning: {why}");
            Tape::default()
        }))
    });
    let scripted = |endpoint: Option<&Endpoint>| match endpoint {
        Some(Endpoint::Scripted(path)) => endpoints.get(path).cloned(),
        Some(Endpoint::Url(url)) => Some(url.clone()),
        None => None,
    };
    let setup = match spec {
        AgentSpec::Command(config) if config.gateway => TrialSetup {
            upstream: command_upstream(scripted(config.endpoint.as_ref()).as_deref()),
            budget: config.budget.unwrap_or_default(),
            ..TrialSetup::default()
        },
        spec => {
            let (kind, config) = spec.as_harness()?;
            let url = scripted(config.endpoint.as_ref());
            let upstream = match &replay {
                Some(_) => Upstream::default(),
                None => upstream_for(kind, config, url.as_deref())?,
            };
            TrialSetup {
                upstream,
                budget: config.budget.unwrap_or_default(),
                price: config.price,
                model: config.model.clone(),
                ..TrialSetup::default()
            }
        }
    };
    let setup = TrialSetup {
        upstream: if replay.is_some() {
            Upstream::default()
        } else {
            setup.upstream
        },
        record: taping.record,
        replay,
        without_web_tools: network == Some(Network::Model),
        ..setup
    };
    Some(Arc::new(gateway.register(setup)))
}

/// For a trial through the gateway, the record's usage from both sides: what the agent
/// reported (`cli_usage`) and what the gateway counted (`gateway_usage`, now the summary).
pub(crate) fn record_usage(record: &mut TrialRecord, lease: Option<&GatewayLease>) {
    // Without the gateway the record stays as it always was: `usage` is the agent's.
    let Some(lease) = lease else {
        return;
    };
    let counted = UsageRecord::from(&lease.usage());
    record.cli_usage = record.usage.take();
    record.gateway_usage = Some(counted);
    record.usage = Some(counted);
    record.usage_source = Some(UsageSource::Gateway);
}
