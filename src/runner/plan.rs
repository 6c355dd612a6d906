//! The plan: what the user asked for, checked against the suite before anything runs (agents
//! exist, filters match, `session` runs one trial, real CLIs are installed and can reach their
//! endpoints), expanded into trials and cut to the request's shard.

use std::collections::HashMap;
use std::sync::Arc;

use indexmap::IndexMap;

use crate::agent::harness::{Endpoint, HarnessConfig, HarnessKind, find_program, is_loopback};
use crate::metric::TestEvidence;
use crate::store::{RunRequest, sanitize};
use crate::suite::{AgentSpec, Suite, SuiteLock};
use crate::workspace::{Isolation, Network, check_bubblewrap};

/// A plan error: the request does not fit the suite. Exit code 2.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct PlanError {
    /// What does not fit: the error's message.
    pub message: String,
    /// What to do about it, printed as `hint:`; `None` when there is nothing to add.
    pub hint: Option<String>,
}

impl PlanError {
    fn new(message: impl Into<String>, hint: Option<String>) -> Self {
        Self {
            message: message.into(),
            hint,
        }
    }
}

/// One planned trial.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrialSpec {
    /// Index of the task in the plan's `suite.tasks`.
    pub task: usize,
    /// The agent's name, a key of [`Plan::agents`].
    pub agent: String,
    /// The trial's number for its task and agent, from 1 (the `#n` of `task / agent #n`).
    pub trial: u32,
}

/// A validated run plan.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The validated suite the plan was made from.
    pub suite: Arc<Suite>,
    /// The agents the trials run, by name.
    pub agents: IndexMap<String, AgentSpec>,
    /// The planned tasks (`--task` and `--tag` applied), as indices into `suite.tasks`.
    pub tasks: Vec<usize>,
    /// The trials to run: the whole plan, or the shard's slice of it.
    pub trials: Vec<TrialSpec>,
    /// Trials in the whole plan, before `--shard` took its slice.
    pub unsharded_trials: usize,
    /// What the user asked for, as the manifest records it: `resume` plans from it again.
    pub request: RunRequest,
    /// What `validate` saw each task's reference solution show (the suite's lock file).
    pub expected: HashMap<String, TestEvidence>,
    /// The planned tasks the lock marks flaky (`validate --repeat`), with their counts.
    pub flaky: std::collections::BTreeMap<String, crate::suite::FlakyTask>,
    /// `validate`: the reference's trials find which mutants of the hidden tests bite.
    pub discover_mutants: bool,
}

impl Plan {
    /// The planned tasks with no validated evidence: they get the output checks only.
    pub fn unvalidated(&self) -> Vec<&str> {
        self.tasks
            .iter()
            .map(|&i| self.suite.tasks[i].id.as_str())
            .filter(|id| !self.expected.contains_key(*id))
            .collect()
    }
}

/// Checks `request` against `suite` and expands it into trials (task-major order), keeping only
/// the request's shard, if any.
pub fn plan(suite: Arc<Suite>, request: RunRequest) -> Result<Plan, PlanError> {
    if request.trials == 0 {
        return Err(PlanError::new("--trials must be at least 1", None));
    }
    if request.jobs == 0 {
        return Err(PlanError::new("-j must be at least 1", None));
    }
    let agents = select_agents(&suite, &request)?;
    let tasks = select_tasks(&suite, &request)?;
    check_cli_agents(&suite, &agents, &tasks)?;
    let mut trials = Vec::new();
    for &task in &tasks {
        for agent in agents.keys() {
            for trial in 1..=request.trials {
                trials.push(TrialSpec {
                    task,
                    agent: agent.clone(),
                    trial,
                });
            }
        }
    }
    check_isolation(&suite, &tasks, trials.len())?;
    // Sliced after the checks above, so a plan is valid or not whatever the shard.
    let unsharded_trials = trials.len();
    if let Some(shard) = request.shard {
        trials.retain(|t| shard.contains(&suite.tasks[t.task].id, &t.agent, t.trial));
    }
    let (expected, flaky) = lock_readings(&suite, &tasks)?;
    Ok(Plan {
        suite,
        agents,
        tasks,
        trials,
        unsharded_trials,
        request,
        expected,
        flaky,
        discover_mutants: false,
    })
}

/// The agents the run names (`--agent`, else the suite's defaults, else `oracle` and `noop`),
/// each known, no two sharing a folder of the run directory.
fn select_agents(
    suite: &Suite,
    request: &RunRequest,
) -> Result<IndexMap<String, AgentSpec>, PlanError> {
    let names: Vec<String> = if !request.agents.is_empty() {
        request.agents.clone()
    } else if !suite.agents.is_empty() {
        suite.default_agents()
    } else {
        vec!["oracle".into(), "noop".into()]
    };
    let mut agents = IndexMap::new();
    for name in names {
        let selected = suite.select(&name);
        if selected.is_empty() {
            let mut known: Vec<String> = suite
                .agents
                .keys()
                .filter(|agent| !suite.variants.contains_key(*agent))
                .cloned()
                .collect();
            known.extend(suite.variants.values().map(|v| v.base.clone()));
            known.dedup();
            for builtin in crate::suite::BUILTIN_AGENTS {
                if !known.iter().any(|k| k == builtin) {
                    known.push(builtin.into());
                }
            }
            return Err(PlanError::new(
                format!(
                    "unknown agent '{name}'. Available agents: {}{}",
                    known.join(", "),
                    crate::support::suggestion(&name, known.iter().map(String::as_str))
                ),
                Some(
                    "define it under `agents:` in the suite or in a file passed with --agents"
                        .into(),
                ),
            ));
        }
        agents.extend(selected);
    }
    let mut dirs: IndexMap<String, &str> = IndexMap::new();
    for name in agents.keys() {
        if let Some(other) = dirs.insert(sanitize(name), name) {
            return Err(PlanError::new(
                format!(
                    "agents '{other}' and '{name}' would share the folder '{}' in the run directory",
                    sanitize(name)
                ),
                Some("rename one of them".into()),
            ));
        }
    }
    Ok(agents)
}

/// The indexes of the tasks `--task` and `--tag` select: each named task known, one at least.
fn select_tasks(suite: &Suite, request: &RunRequest) -> Result<Vec<usize>, PlanError> {
    for id in &request.tasks {
        if !suite.tasks.iter().any(|t| &t.id == id) {
            let ids: Vec<&str> = suite.tasks.iter().map(|t| t.id.as_str()).collect();
            return Err(PlanError::new(
                format!(
                    "unknown task '{id}'. Tasks in suite '{}': {}{}",
                    suite.name,
                    ids.join(", "),
                    crate::support::suggestion(id, ids.iter().copied())
                ),
                None,
            ));
        }
    }
    let tasks: Vec<usize> = suite
        .tasks
        .iter()
        .enumerate()
        .filter(|(_, t)| request.tasks.is_empty() || request.tasks.contains(&t.id))
        .filter(|(_, t)| {
            request.tags.is_empty() || t.tags.iter().any(|tag| request.tags.contains(tag))
        })
        .map(|(i, _)| i)
        .collect();
    if tasks.is_empty() {
        return Err(PlanError::new(
            format!(
                "no task matches the filters (--tag {})",
                request.tags.join(", --tag ")
            ),
            None,
        ));
    }
    Ok(tasks)
}

/// Each task's isolation can hold this plan: bubblewrap for a sandbox, one trial and no setup
/// for a session.
fn check_isolation(suite: &Suite, tasks: &[usize], trials: usize) -> Result<(), PlanError> {
    for &task in tasks {
        let t = &suite.tasks[task];
        match t.isolation {
            // With an environment the container is the sandbox: bubblewrap is not used.
            Isolation::Sandbox if t.environment.is_none() => {
                if let Err(err) = check_bubblewrap() {
                    return Err(PlanError::new(format!("task '{}': {err}", t.id), None));
                }
            }
            Isolation::Session if t.setup.is_some() => {
                return Err(PlanError::new(
                    format!(
                        "task '{}' combines `isolation: session` with `setup`: the setup's result would be committed into your own work tree",
                        t.id
                    ),
                    Some("run the setup yourself before a session run, or use `worktree`".into()),
                ));
            }
            Isolation::Session if trials > 1 => {
                return Err(PlanError::new(
                    format!(
                        "task '{}' uses `isolation: session`, which runs a single trial (one task, one agent, one trial), but this plan has {} trials",
                        t.id, trials
                    ),
                    Some(
                        "narrow the run with --task ID --agent NAME --trials 1, or use `worktree`"
                            .into(),
                    ),
                ));
            }
            _ => {}
        }
    }
    Ok(())
}

/// Each task's reference evidence, by task id.
type Expected = HashMap<String, TestEvidence>;
/// The flaky tasks, by id.
type Flaky = std::collections::BTreeMap<String, crate::suite::FlakyTask>;

/// What the suite's lock says each task's reference and flaky tests are.
fn lock_readings(suite: &Suite, tasks: &[usize]) -> Result<(Expected, Flaky), PlanError> {
    let lock = SuiteLock::read(suite).map_err(|e| {
        PlanError::new(
            e.to_string(),
            Some("delete it, or run `deltabench validate` again to rewrite it".into()),
        )
    })?;
    let root = crate::suite::suite_root(suite);
    let expected = lock
        .as_ref()
        .map(|lock| {
            suite
                .tasks
                .iter()
                .filter_map(|task| Some((task.id.clone(), lock.expected(task, &root)?.clone())))
                .collect()
        })
        .unwrap_or_default();
    let flaky = lock
        .map(|lock| {
            tasks
                .iter()
                .filter_map(|&i| {
                    let task = &suite.tasks[i];
                    Some((task.id.clone(), lock.flaky(task, &root)?.clone()))
                })
                .collect()
        })
        .unwrap_or_default();
    Ok((expected, flaky))
}

const UNREACHABLE_GATEWAY_HINT: &str = "drop `network: none` from the agent: its calls then reach the gateway and nothing else (`network: model`)";

/// The error of an agent with no API key for a remote endpoint (or its CLI's own API), unless
/// its `env:` or deltabench's environment has one or its CLI needs none deltabench can check.
fn missing_key(
    name: &str,
    kind: HarnessKind,
    config: &HarnessConfig,
    local: bool,
) -> Option<PlanError> {
    let key_env = config.key_env(kind);
    let needs_key = !local
        && config.api_key.is_none()
        && kind.cli().is_none_or(|cli| cli.needs_key(config))
        && !config
            .env
            .keys()
            .any(|k| k == key_env || k.ends_with("_API_KEY") || k.ends_with("_AUTH_TOKEN"))
        && std::env::var_os(key_env).is_none();
    if !needs_key {
        return None;
    }
    let place = match &config.endpoint {
        Some(Endpoint::Url(url)) => url.clone(),
        _ => format!("{kind}'s own API"),
    };
    Some(PlanError::new(
        format!("agent '{name}' ({kind}) has no API key for {place}"),
        Some(format!(
            "set `api_key:` on the agent, or {key_env} in deltabench's environment"
        )),
    ))
}

/// What can be known about the real CLI agents before anything runs: the CLI is installed, it
/// has a key for a remote endpoint, and a sandboxed or contained one can reach a loopback
/// endpoint. (What the CLI needs from a task's image is checked in the image, before any
/// trial: `environments::prepare`.)
fn check_cli_agents(
    suite: &Suite,
    agents: &IndexMap<String, AgentSpec>,
    tasks: &[usize],
) -> Result<(), PlanError> {
    let sandboxed = tasks
        .iter()
        .map(|&i| &suite.tasks[i])
        // With an environment the container is the sandbox (checked below).
        .any(|t| t.isolation == Isolation::Sandbox && t.environment.is_none());
    for (name, spec) in agents {
        check_command_gateway(name, spec, sandboxed)?;
        if let Some((kind, config)) = spec.as_harness() {
            check_harness_agent(suite, tasks, name, kind, config, sandboxed)?;
        }
    }
    Ok(())
}

/// A command agent on the gateway cannot reach it from a sandbox without a network.
fn check_command_gateway(name: &str, spec: &AgentSpec, sandboxed: bool) -> Result<(), PlanError> {
    if let AgentSpec::Command(config) = spec
        && config.gateway
        && sandboxed
        && config.network == Some(Network::None)
    {
        return Err(PlanError::new(
            format!(
                "agent '{name}' (command, gateway: true) talks to deltabench's model gateway on this machine, which a sandboxed task (network `none`) cannot reach"
            ),
            Some(UNREACHABLE_GATEWAY_HINT.into()),
        ));
    }
    Ok(())
}

/// A CLI agent's program is installed, its key is set unless its model is local, and what it
/// talks to on this machine is reachable from every task's sandbox or container.
fn check_harness_agent(
    suite: &Suite,
    tasks: &[usize],
    name: &str,
    kind: HarnessKind,
    config: &HarnessConfig,
    sandboxed: bool,
) -> Result<(), PlanError> {
    if let Err(err) = find_program(kind, config.binary.as_deref()) {
        return Err(PlanError::new(
            format!("agent '{name}' ({kind}): {err}"),
            Some(
                "docs/agents.md (\"Real agent CLIs\") lists the versions deltabench is tested with"
                    .into(),
            ),
        ));
    }
    let local = match &config.endpoint {
        Some(Endpoint::Scripted(_)) => Some("the scripted endpoint".to_owned()),
        Some(Endpoint::Url(url)) if is_loopback(url) => Some(url.clone()),
        _ => None,
    };
    if let Some(err) = missing_key(name, kind, config, local.is_some()) {
        return Err(err);
    }
    // The gateway is on this machine too, whatever the endpoint.
    let through_gateway = crate::gateway::uses_gateway(kind, config);
    let local = local.or_else(|| through_gateway.then(|| "deltabench's model gateway".to_owned()));
    if sandboxed
        && Network::for_agent(config.network, through_gateway).is_none()
        && let Some(local) = local.clone()
    {
        return Err(PlanError::new(
            format!(
                "agent '{name}' ({kind}) talks to {local} on this machine, which a sandboxed task (network `none`) cannot reach"
            ),
            Some(UNREACHABLE_GATEWAY_HINT.into()),
        ));
    }
    // A container with network `none` has its own loopback only.
    if let Some(local) = local
        && let Some(task) = tasks.iter().map(|&i| &suite.tasks[i]).find(|t| {
            t.environment.as_ref().is_some_and(|environment| {
                Network::in_container(environment.network, config.network, through_gateway)
                    .is_none()
            })
        })
    {
        return Err(PlanError::new(
            format!(
                "{}: agent '{name}' ({kind}) talks to {local} on this machine, which task '{}' cannot reach from its container (its environment's network is `none`)",
                suite.path.display(),
                task.id
            ),
            Some(format!(
                "add `network: host` to the `environment:` of task '{}' (or set `network: host` on the agent)",
                task.id
            )),
        ));
    }
    Ok(())
}
