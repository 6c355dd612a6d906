//! One trial: wire the seam types for (task, agent, n), run the lifecycle, write the artifacts.
//!
//! After the lifecycle the verdict is checked against gaming: a diff touching a protected path
//! is recorded as `tampered` (and fails under every metric), a verify output that contradicts its exit
//! code makes the trial `invalid`, and secrets are redacted from every artifact and the record.

mod protect;
mod redact;

pub(crate) use redact::is_secret_name;

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use indexmap::IndexMap;
use tokio_util::sync::CancellationToken;

use crate::agent::harness::{Endpoint, HarnessAgent, HarnessConfig, HarnessKind, find_program};
use crate::agent::{
    BudgetStop, CodingAgent, CodingResult, CodingTask, CommandAgent, CommandAgentConfig, MockAgent,
    NoopAgent, OracleAgent, SANDBOX_FAILED, StreamEvent,
};
use crate::delta::{
    ContainerCapture, DiffStats, FreshWorkspace, MutationPlan, TaskProbe, commit_setup, mutate,
};
use crate::gateway::GatewayLease;
use crate::lifecycle::{
    BuildContext, BuildError, CodingAgentFactory, FnCodingAgentFactory, Lifecycle, NodeReport,
    Phase, RunCodingNode, RunNodeError, run_coding_node,
};
use crate::metric::{
    DeltaMetric, DeltaTokenMetric, ExitCodeMetric, GraderMetric, Metric, Reached, TestEvidence,
    TrialFacts, VerdictInput, settle,
};
use crate::process::{self, CommandSpec};
use crate::store::{
    RecordedPhase, TrialRecord, UsageRecord, VerifyRecord, layout, write_json_atomic,
};
use crate::suite::{AgentSpec, MetricSpec, Suite, Task};
use crate::trajectory::{Counted, TimedEvent, TrajectoryInput};
use crate::workspace::{
    BackendProvisioner, Confinement, ContainerPolicy, DeltaScope, Isolation, ModelRoute, Network,
    Prepare, PreparedSource, ProvisionError, ProvisionedWorkspace, SandboxPolicy, WorkspaceBase,
    WorkspaceProvisionError, WorkspaceProvisioner, container_started,
};

use super::environments::Environments;
use super::prepare::{SetupPreparation, setup_failed};
use super::{TrialSpec, now};
use protect::{FileVersions, Protected};
use redact::Secrets;

/// What every trial of a run shares.
pub struct TrialInputs {
    /// The suite the run loaded (its tasks, by index in [`TrialSpec::task`]).
    pub suite: Arc<Suite>,
    /// The run's agents, by the names trials use.
    pub agents: IndexMap<String, AgentSpec>,
    /// Root URLs of the run's scripted model endpoints, by script path.
    pub endpoints: HashMap<PathBuf, String>,
    /// The suite's repository, ready to provision workspaces from.
    pub source: PreparedSource,
    /// Each task's base commit, by task index.
    pub commits: Vec<String>,
    /// Shared by every trial, so backends can share their caches.
    pub provisioner: BackendProvisioner,
    /// Folders masked where an exposed tree of the sandbox covers them (the run's workspaces,
    /// its run directory, the cache, hidden tests and solutions).
    pub sandbox_hidden: Vec<PathBuf>,
    /// What `validate` saw each task's reference solution show, by task id.
    pub expected: HashMap<String, TestEvidence>,
    /// `validate`: the reference's trials find the biting mutants of the hidden tests.
    pub discover_mutants: bool,
    /// The runtime and the ready image of each task with an environment.
    pub environments: Environments,
    /// The prepared setup of each task whose setup runs once per template, by task index.
    pub preparations: HashMap<usize, Arc<SetupPreparation>>,
    /// The run's model gateway, when an agent's calls pass it.
    pub gateway: Option<Arc<crate::gateway::Gateway>>,
    /// How a sandboxed agent with `network: model` reaches the gateway.
    pub model_route: Option<ModelRoute>,
    /// Keep each gateway trial's model calls in its folder.
    pub record: bool,
    /// Keep the CLIs' own files in their homes ([`crate::agent::harness::prune_home`]).
    pub keep_homes: bool,
    /// The recorded run whose same trial answers each gateway trial's model calls.
    pub replay: Option<PathBuf>,
}

/// The mutation check of a trial: `validate`'s reference finds the biting mutants; any other
/// trial runs a fresh sample of those the lock holds.
fn mutation_plan(inputs: &TrialInputs, task: &Task, agent: &AgentSpec) -> Option<MutationPlan> {
    if task.mutants == 0 || task.tests.is_none() {
        return None;
    }
    if inputs.discover_mutants {
        return matches!(agent, AgentSpec::Oracle).then_some(MutationPlan::Discover);
    }
    let biting = &inputs.expected.get(&task.id)?.mutants;
    (!biting.is_empty())
        .then(|| MutationPlan::Check(mutate::sample(biting, task.mutants, mutate::fresh_seed())))
}

/// Runs one trial to a record: wire the seam types, run the lifecycle, write its artifacts,
/// settle (the one place its outcome is decided, [`settle`]), write the record. Never fails:
/// what went wrong is in the record.
pub(crate) async fn run_trial(
    inputs: &TrialInputs,
    spec: &TrialSpec,
    commit: &str,
    dir: &Path,
    cancel: CancellationToken,
) -> TrialRecord {
    let started = Instant::now();
    let task = &inputs.suite.tasks[spec.task];
    let mut record = TrialRecord::unscored(
        &task.id,
        &spec.agent,
        spec.trial,
        (&task.metric).into(),
        now(),
    );
    record.unvalidated = !inputs.expected.contains_key(&task.id);
    if let Some(why) = inputs.environments.failed.get(&spec.task) {
        record.settle(settle(TrialFacts::broken(why.clone())));
        return record;
    }
    let trial = wire(inputs, spec, commit, dir);
    let (ran, lifecycle, timed) = run(&trial, dir, &cancel).await;

    let (result, result_json) = record_outcome(&mut record, inputs, &trial, &ran, &lifecycle, dir);
    super::gateway::record_usage(&mut record, trial.lease.as_deref());
    record_durations(&mut record, &lifecycle, started);
    write_trajectory(dir, &trial, &spec.agent, &record, &timed, result.as_ref());
    let unredacted = tidy_folder(inputs, &trial, dir);
    let settled = settle(trial_facts(
        &record, inputs, &trial, &ran, &cancel, unredacted,
    ));
    record.settle(settled);
    write_result(&trial.secrets, record, result_json, dir)
}

/// What the lifecycle did, into the record: its phases, the delta's observations and the
/// agent's result; with the result and the lifecycle as `result.json` begins.
fn record_outcome(
    record: &mut TrialRecord,
    inputs: &TrialInputs,
    trial: &Wired<'_>,
    ran: &Result<NodeReport, RunNodeError>,
    lifecycle: &Lifecycle,
    dir: &Path,
) -> (Option<CodingResult>, serde_json::Value) {
    record.phases = lifecycle
        .steps
        .iter()
        .map(|(phase, us)| (RecordedPhase::Known(*phase), *us))
        .collect();
    record.verify_network = trial.verify_network == Network::Host;
    record.in_place = trial.task.verify.in_place;
    let mut result_json = serde_json::json!({ "lifecycle": lifecycle });
    let mut result = None;
    match ran {
        Ok(report) => {
            observe(record, inputs, trial, report, dir);
            result = Some(report.outcome.result.clone());
            result_json["summary"] =
                serde_json::to_value(&report.outcome.summary).unwrap_or_default();
        }
        Err(RunNodeError::Probe(probe)) => result = Some(*probe.result.clone()),
        Err(_) => {}
    }
    if let Some(result) = &result {
        describe_result(record, result);
        result_json["result"] = serde_json::to_value(result).unwrap_or_default();
    }
    (result, result_json)
}

/// The trial's time without its preparation, and the preparation's when it had one.
fn record_durations(record: &mut TrialRecord, lifecycle: &Lifecycle, started: Instant) {
    let preparation = Duration::from_micros(lifecycle.micros(Phase::Prepare));
    record.preparation_ms =
        (lifecycle.count(Phase::Prepare) > 0).then_some(preparation.as_millis() as u64);
    record.duration_ms = started.elapsed().saturating_sub(preparation).as_millis() as u64;
}

/// The trial's folder made fit to keep: the CLI's home pruned (unless the run keeps homes),
/// the secrets redacted; what could not be redacted, if anything.
fn tidy_folder(inputs: &TrialInputs, trial: &Wired<'_>, dir: &Path) -> Option<String> {
    if !inputs.keep_homes
        && let Some((kind, config)) = trial.agent.as_harness()
    {
        crate::agent::harness::prune_home(&dir.join("home"), config.adapter(kind).bundled());
    }
    // A secret may remain on disk: the record says so rather than the run failing.
    trial
        .secrets
        .redact_dir(dir)
        .err()
        .map(|e| format!("cannot redact secrets from {}: {e}", dir.display()))
}

/// What [`settle`] decides the trial's outcome from.
fn trial_facts<'a>(
    record: &'a TrialRecord,
    inputs: &'a TrialInputs,
    trial: &Wired<'_>,
    ran: &'a Result<NodeReport, RunNodeError>,
    cancel: &CancellationToken,
    unredacted: Option<String>,
) -> TrialFacts<'a> {
    TrialFacts {
        reached: match ran {
            Ok(report) => reached(record, inputs, trial, report),
            Err(err) => Reached::Broken(err.to_string()),
        },
        // A replay that left its recording measured nothing the recording did.
        replay_mismatch: trial
            .lease
            .as_ref()
            .and_then(|l| l.stop().tripped())
            .filter(|r| crate::agent::is_replay_mismatch(r)),
        // Cancelled while it ran: the run aborted it, or a job engine's SIGTERM (scancel,
        // preemption) reached its agent or verify command directly: its end is no verdict.
        interrupted: cancel.is_cancelled(),
        unredacted,
    }
}

/// `result.json`: the settled record, redacted, after what `result_json` holds; the record.
fn write_result(
    secrets: &Secrets,
    record: TrialRecord,
    mut result_json: serde_json::Value,
    dir: &Path,
) -> TrialRecord {
    let record = redact(secrets, record);
    result_json["record"] = serde_json::to_value(&record).unwrap_or_default();
    let _ = write_json_atomic(&dir.join(layout::RESULT), &redact(secrets, result_json));
    record
}

/// What a trial's steps share once wired.
struct Wired<'a> {
    task: &'a Task,
    agent: &'a AgentSpec,
    base: WorkspaceBase,
    provisioner: SetupProvisioner,
    factory: Box<dyn CodingAgentFactory + 'a>,
    metric: Box<dyn Metric>,
    lease: Option<Arc<GatewayLease>>,
    protected: std::io::Result<Protected>,
    secrets: Secrets,
    history: &'a Path,
    verify_network: Network,
}

/// The seam types of one trial: its workspace base and provisioner, the factory of its agent
/// and the probe of its delta, its metric, its gateway lease, the paths it must not touch.
fn wire<'a>(inputs: &'a TrialInputs, spec: &'a TrialSpec, commit: &str, dir: &Path) -> Wired<'a> {
    let task = &inputs.suite.tasks[spec.task];
    let agent_spec = &inputs.agents[&spec.agent];
    let (agent_env, api_key) = agent_spec.secrets();
    let protected = Protected::for_task(
        task.protected.as_deref(),
        task.tests.as_ref(),
        &task.verify.run,
    );
    // Only the base commit's history, so no later commit is readable from the workspace.
    let history = inputs.source.repo_for(commit);
    let base = workspace_base(inputs, spec, commit, history);
    let places = Places::of(inputs, spec, dir, history);
    let agent_confinement = places.agent();
    let verify_network = task
        .environment
        .as_ref()
        .map_or(Network::None, |e| e.verify_network);
    let probe = Arc::new(task_probe(
        &places,
        commit,
        &base,
        &agent_confinement,
        &protected,
        verify_network,
    ));
    let lease = super::gateway::lease(
        inputs.gateway.as_ref(),
        agent_spec,
        super::gateway::agent_network(task, agent_spec),
        &inputs.endpoints,
        taping(inputs, spec, dir),
    );
    Wired {
        task,
        agent: agent_spec,
        factory: agent_factory(inputs, spec, dir, agent_confinement, lease.clone(), probe),
        provisioner: places.setup(layout::SETUP_LOG, "home"),
        metric: metric_for(task, &inputs.suite, dir),
        secrets: Secrets::of_trial(agent_env, api_key),
        base,
        lease,
        protected,
        history,
        verify_network,
    }
}

/// The agent's workspace base: the task's base commit, from the session's work tree or the
/// trial's history, named after the trial and prepared by the task's prepared setup if any.
fn workspace_base(
    inputs: &TrialInputs,
    spec: &TrialSpec,
    commit: &str,
    history: &Path,
) -> WorkspaceBase {
    let task = &inputs.suite.tasks[spec.task];
    let preparation = inputs.preparations.get(&spec.task);
    WorkspaceBase::new(
        match (task.isolation, &inputs.source.work_tree) {
            (Isolation::Session, Some(tree)) => tree.clone(),
            _ => history.to_owned(),
        },
        commit.to_owned(),
        format!(
            "{}--{}--{}",
            task.id,
            crate::store::sanitize(&spec.agent),
            spec.trial
        ),
    )
    .prepared_by(preparation.map(|p| p.clone() as Arc<dyn Prepare>))
}

/// The probe of the trial's delta: verify in a fresh workspace of its own, confined where
/// [`Places::verify`] says, with the mutation check and the container's delta where they apply.
fn task_probe(
    places: &Places<'_>,
    commit: &str,
    base: &WorkspaceBase,
    agent_confinement: &Confinement,
    protected: &std::io::Result<Protected>,
    verify_network: Network,
) -> TaskProbe {
    let (inputs, task, history) = (places.inputs, places.task, places.history);
    let agent_spec = &inputs.agents[&places.spec.agent];
    let in_place = agent_confinement.container().filter(|p| p.live).cloned();
    TaskProbe {
        hidden_tests: task.tests.clone(),
        verify: task.verify.clone(),
        artifacts: Some(places.dir.to_owned()),
        confinement: places.verify(verify_network),
        objects: history.to_owned(),
        max_diff: inputs.suite.max_diff,
        // The verify command runs in a workspace of its own, never the agent's.
        fresh: FreshWorkspace {
            provisioner: Arc::new(places.setup(layout::VERIFY_SETUP_LOG, layout::VERIFY_HOME)),
            base: WorkspaceBase::new(
                history.to_owned(),
                commit.to_owned(),
                format!("{}--verify", base.name),
            )
            .prepared_by(base.prepare.clone()),
            isolation: Isolation::Worktree,
        },
        mutation: mutation_plan(inputs, task, agent_spec).filter(|_| in_place.is_none()),
        container_delta: container_capture(task, agent_confinement, protected),
        in_place,
    }
}

/// Under `delta: container`, what the probe reads of the agent's kept container.
fn container_capture(
    task: &Task,
    agent_confinement: &Confinement,
    protected: &std::io::Result<Protected>,
) -> Option<ContainerCapture> {
    match (agent_confinement.container(), protected) {
        (Some(policy), Ok(protected)) => policy.keep.as_ref().map(|name| ContainerCapture {
            runtime: policy.runtime.clone(),
            container: name.clone(),
            image: policy.image.clone(),
            label: policy.label.clone(),
            toolchain: Arc::new(toolchain(task, protected)),
        }),
        _ => None,
    }
}

/// Where the trial's model calls are recorded to and replayed from, when the run says.
fn taping(inputs: &TrialInputs, spec: &TrialSpec, dir: &Path) -> super::gateway::Taping {
    let task = &inputs.suite.tasks[spec.task];
    super::gateway::Taping {
        record: inputs.record.then(|| dir.join(layout::MODEL_CALLS)),
        replay: inputs.replay.as_deref().map(|run| {
            layout::trial_path(run, &task.id, &spec.agent, spec.trial).join(layout::MODEL_CALLS)
        }),
    }
}

/// Where a task's container mounts the oracle's solution script folder, if it says.
fn solution_at(task: &Task) -> Option<&Path> {
    task.environment.as_ref()?.solution_at.as_deref()
}

/// What of the agent's container reaches its verifier: the toolchain rule for this task, with
/// the places its workspace and tests are at inside.
fn toolchain(task: &Task, protected: &Protected) -> crate::delta::toolchain::Toolchain {
    let Some(env) = &task.environment else {
        return protected.toolchain(&[], &[]);
    };
    let mut places = vec![env.workdir.to_string_lossy().into_owned()];
    places.extend(
        env.verify_mounts
            .iter()
            .map(|(inside, _)| inside.to_string_lossy().into_owned()),
    );
    let places: Vec<&str> = places.iter().map(String::as_str).collect();
    protected.toolchain(&env.outputs, &places)
}

/// Where a trial's commands run: with an environment every command runs in a container,
/// which is then the sandbox too (only the workspace, its home and the borrowed objects are
/// mounted); a `sandbox` task's in bubblewrap; else on this machine. Chosen here once; each
/// command gets a home of its own, kept with the trial's files.
struct Places<'a> {
    inputs: &'a TrialInputs,
    task: &'a Task,
    spec: &'a TrialSpec,
    dir: &'a Path,
    history: &'a Path,
}

impl<'a> Places<'a> {
    fn of(inputs: &'a TrialInputs, spec: &'a TrialSpec, dir: &'a Path, history: &'a Path) -> Self {
        let task = &inputs.suite.tasks[spec.task];
        Self {
            inputs,
            task,
            spec,
            dir,
            history,
        }
    }

    /// The task's container, if it has an environment; a prepared setup's commands run in
    /// the image it was committed as.
    fn container(&self, home: &str) -> Option<ContainerPolicy> {
        let policy = self.inputs.environments.policy(
            self.spec.task,
            self.task,
            self.dir.join(home),
            self.history,
        )?;
        let prepared = self.inputs.preparations.get(&self.spec.task);
        Some(match prepared.and_then(|p| p.image()) {
            Some(image) => policy.image(image),
            None => policy,
        })
    }

    fn confinement(&self, home: &str) -> Confinement {
        match self.container(home) {
            Some(policy) => Confinement::Container(policy),
            None if self.task.isolation == Isolation::Sandbox => Confinement::Sandbox(
                SandboxPolicy::new(self.dir.join(home))
                    .hiding(self.inputs.sandbox_hidden.clone())
                    .borrowing_objects_of(self.history),
            ),
            None => Confinement::Host,
        }
    }

    /// The agent's: the gateway's route for `network: model`; under `delta: container` its
    /// container is kept for the probe to read, and under `in_place` kept running for verify.
    fn agent(&self) -> Confinement {
        let route = self.inputs.model_route.clone();
        match self.confinement("home") {
            Confinement::Container(policy) => {
                let policy = match route {
                    Some(route) => policy.model_route(route),
                    None => policy,
                };
                Confinement::Container(match self.task.environment.as_ref().map(|e| e.delta) {
                    _ if self.task.verify.in_place => policy.kept_live(),
                    Some(DeltaScope::Container) => policy.kept(),
                    _ => policy,
                })
            }
            Confinement::Sandbox(policy) => Confinement::Sandbox(match route {
                Some(route) => policy.model_route(route),
                None => policy,
            }),
            Confinement::Host => Confinement::Host,
        }
    }

    /// The verify command's: no network unless the task declares its tests need one (a host
    /// answering any address fails tests), and the task's verify mounts.
    fn verify(&self, network: Network) -> Confinement {
        match self.confinement(layout::VERIFY_HOME) {
            Confinement::Container(policy) => Confinement::Container(
                policy.network(network).workspace_mounts(
                    self.task
                        .environment
                        .as_ref()
                        .map_or(&[][..], |e| &e.verify_mounts),
                ),
            ),
            confinement => confinement,
        }
    }

    /// Provisions the workspace and runs the task's setup in it, logging to `log`, a
    /// container's commands with their home at `home`.
    fn setup(&self, log: &str, home: &str) -> SetupProvisioner {
        SetupProvisioner {
            inner: self.inputs.provisioner.clone(),
            setup: self.task.setup.clone(),
            timeout: self.task.timeout,
            log: self.dir.join(log),
            history: self.history.to_owned(),
            container: self.container(home),
        }
    }
}

/// The factory of the trial's agent, confined where [`Places::agent`] says, its model calls
/// through the trial's gateway lease.
fn agent_factory<'a>(
    inputs: &'a TrialInputs,
    spec: &TrialSpec,
    dir: &Path,
    confinement: Confinement,
    lease: Option<Arc<GatewayLease>>,
    probe: Arc<TaskProbe>,
) -> Box<dyn CodingAgentFactory + 'a> {
    let builder = AgentBuilder {
        inputs,
        task: &inputs.suite.tasks[spec.task],
        spec: &inputs.agents[&spec.agent],
        name: spec.agent.clone(),
        scratch: dir.to_owned(),
        trial_folder: std::path::absolute(dir).unwrap_or_else(|_| dir.to_owned()),
        confinement,
        through: lease.map(|l| (l.url().to_owned(), l.stop(), l)),
    };
    Box::new(FnCodingAgentFactory::new(
        move |ctx: &BuildContext| builder.build(ctx),
        probe,
    ))
}

/// What the trial's agent is built from once its workspace exists.
struct AgentBuilder<'a> {
    inputs: &'a TrialInputs,
    task: &'a Task,
    spec: &'a AgentSpec,
    name: String,
    /// The trial's folder, as given: the agent's scratch space and home.
    scratch: PathBuf,
    /// The trial's folder, absolute: a place a recording names.
    trial_folder: PathBuf,
    confinement: Confinement,
    /// The gateway lease's URL and stop, when the agent's calls pass it.
    through: Option<(String, BudgetStop, Arc<GatewayLease>)>,
}

impl AgentBuilder<'_> {
    fn build(&self, ctx: &BuildContext) -> Result<Arc<dyn CodingAgent>, BuildError> {
        let name = &self.name;
        Ok(match self.spec {
            AgentSpec::Noop => Arc::new(NoopAgent::named(name)),
            AgentSpec::Oracle => match &self.task.solution_script {
                Some(script) => Arc::new(self.solution_script(script, ctx)?),
                None => Arc::new(OracleAgent::new(
                    ctx.workspace.clone(),
                    ctx.base.clone(),
                    self.task.solution.clone(),
                )),
            },
            AgentSpec::Mock(config) => Arc::new(
                MockAgent::new(config.clone())
                    .named(name)
                    .in_workspace(ctx.workspace.clone()),
            ),
            AgentSpec::Command(config) => {
                let mut agent = self.command(config.clone(), ctx);
                if let Some((url, stop)) = self.gateway(&ctx.workspace) {
                    agent = agent.through_gateway(url, stop);
                }
                Arc::new(agent.confined(self.confinement.clone()))
            }
            AgentSpec::Harness { kind, config } => {
                let mut agent =
                    harness_agent(self.inputs, name, *kind, config, ctx, &self.scratch)?;
                if let Some((url, stop)) = self.gateway(&ctx.workspace) {
                    agent = agent.through_gateway(url, stop);
                }
                Arc::new(agent.confined(self.confinement.clone()))
            }
        })
    }

    fn command(&self, config: CommandAgentConfig, ctx: &BuildContext) -> CommandAgent {
        CommandAgent::new(
            &self.name,
            config,
            ctx.workspace.clone(),
            self.scratch.clone(),
        )
    }

    /// The gateway's URL and stop for an agent in `workspace`, its clock started and the
    /// trial's places set for the recording.
    fn gateway(&self, workspace: &Path) -> Option<(String, BudgetStop)> {
        self.through.as_ref().map(|(url, stop, lease)| {
            lease.start_clock();
            lease.set_places(places(workspace, &self.trial_folder));
            (url.clone(), stop.clone())
        })
    }

    /// A script solution runs as an agent would: in the task's container or sandbox, from a
    /// copy of its folder in the agent's home (the suite's folder is hidden).
    fn solution_script(
        &self,
        script: &Path,
        ctx: &BuildContext,
    ) -> Result<CommandAgent, BuildError> {
        let copy = self.scratch.join("home").join(".deltabench-solution");
        let folder = script.parent().unwrap_or(Path::new("/"));
        crate::support::copy_folder(folder, &copy).map_err(BuildError::CopySolution)?;
        let name = script.file_name().unwrap_or_default();
        // Where the task's container expects it (`solution_at`), so it runs as authored.
        let (at, confinement) = match (&self.confinement, solution_at(self.task)) {
            (Confinement::Container(policy), Some(at)) => (
                at.to_owned(),
                Confinement::Container(policy.clone().bind(copy.clone(), at.to_owned(), false)),
            ),
            _ => (copy.clone(), self.confinement.clone()),
        };
        let config = solution_command(&at.join(name), &at, self.task.timeout);
        Ok(self.command(config, ctx).confined(confinement))
    }
}

/// The command that runs the solution `script` from its folder `at`, within `timeout`.
fn solution_command(script: &Path, at: &Path, timeout: Option<Duration>) -> CommandAgentConfig {
    CommandAgentConfig {
        run: format!(
            "bash {}",
            crate::support::shell_quote(&script.to_string_lossy())
        ),
        timeout,
        env: [(
            "DELTABENCH_SOLUTION".to_owned(),
            at.to_string_lossy().into_owned(),
        )]
        .into(),
        network: None,
        gateway: false,
        endpoint: None,
        budget: None,
    }
}

/// A real CLI agent: its program found, its scripted endpoint's URL looked up.
fn harness_agent(
    inputs: &TrialInputs,
    name: &str,
    kind: HarnessKind,
    config: &HarnessConfig,
    ctx: &BuildContext,
    scratch: &Path,
) -> Result<HarnessAgent, BuildError> {
    let program = find_program(kind, config.binary.as_deref())?;
    let endpoint = match &config.endpoint {
        Some(Endpoint::Url(url)) => Some(url.clone()),
        Some(Endpoint::Scripted(path)) => Some(
            inputs
                .endpoints
                .get(path)
                .cloned()
                .ok_or_else(|| BuildError::NoEndpoint(path.clone()))?,
        ),
        None => None,
    };
    Ok(HarnessAgent::new(
        name,
        kind,
        config.clone(),
        program,
        ctx.workspace.clone(),
        scratch.to_owned(),
        endpoint,
    ))
}

/// Runs the lifecycle, writing the event stream (`events.jsonl`, and `agent.log` for agents
/// without output of their own) as it arrives.
async fn run(
    trial: &Wired<'_>,
    dir: &Path,
    cancel: &CancellationToken,
) -> (Result<NodeReport, RunNodeError>, Lifecycle, Vec<TimedEvent>) {
    let mut events = File::create(dir.join(layout::EVENTS))
        .ok()
        .map(BufWriter::new);
    let mut transcript: Vec<String> = Vec::new();
    let mut timed: Vec<TimedEvent> = Vec::new();
    let mut on_event = |event: &StreamEvent| {
        transcript.push(describe_event(event));
        timed.push(TimedEvent {
            at: now(),
            event: event.clone(),
        });
        if let Some(out) = events.as_mut()
            && let Ok(line) = serde_json::to_string(event)
        {
            let _ = writeln!(out, "{line}");
        }
    };
    let task = trial.task;
    let (ran, lifecycle) = run_coding_node(RunCodingNode {
        factory: trial.factory.as_ref(),
        provisioner: &trial.provisioner,
        base: &trial.base,
        isolation: task.isolation,
        task: CodingTask {
            task: task.instruction.clone(),
            session_id: None,
            signal: Some(cancel.clone()),
            deadline: task.timeout,
        },
        signal: Some(cancel.clone()),
        metric: Some(trial.metric.as_ref()),
        on_event: Some(&mut on_event),
    })
    .await;
    if let Some(mut out) = events.take() {
        let _ = out.flush();
    }
    if !dir.join(layout::AGENT_LOG).exists() {
        // In-process agents have no output of their own: their log is their event stream.
        let _ = std::fs::write(dir.join(layout::AGENT_LOG), transcript.join(""));
    }
    (ran, lifecycle, timed)
}

/// What the delta shows, into the record and the trial's files: the diff's size, the verify
/// result and its evidence, the protected paths touched, the flags, the mutation report.
fn observe(
    record: &mut TrialRecord,
    inputs: &TrialInputs,
    trial: &Wired<'_>,
    report: &NodeReport,
    dir: &Path,
) {
    let delta = &report.outcome.delta;
    record.diff = Some(DiffStats::from_patch(&delta.diff));
    if delta.rejected.is_none() {
        let verify = &delta.command_result;
        record.verify = Some(VerifyRecord {
            exit_code: verify.exit_code,
            timed_out: verify.timed_out,
            duration_ms: verify.duration_ms,
            reward: verify.reward.clone(),
        });
        let mut evidence = TestEvidence::of(verify);
        if inputs.discover_mutants
            && let Some(report) = &delta.mutation
        {
            evidence.mutants = report.biting.clone();
        }
        let _ = write_json_atomic(&dir.join(layout::TESTS), &evidence);
    }
    let sandbox_failed = report
        .outcome
        .result
        .output
        .metadata
        .contains_key(SANDBOX_FAILED);
    let (false, Ok(protected)) = (sandbox_failed, &trial.protected) else {
        return;
    };
    let workspace_diff = delta.workspace_diff();
    record.tampered = protected.touched(workspace_diff, &|path| {
        file_versions(trial.history, &trial.base.commit, workspace_diff, path)
    });
    if let Some(container) = &delta.container {
        record.tampered.extend(container.tampered());
        record.container_changes = container_listing(container);
    }
    for path in &delta.changed_tests {
        if !record.tampered.contains(path) {
            record
                .tampered
                .push(format!("{path} (rewritten while verify ran)"));
        }
    }
    record.flags = crate::delta::flags::scan(&delta.diff);
    if let Some(report) = &delta.mutation {
        let _ = write_json_atomic(&dir.join(layout::MUTANTS), report);
    }
    if matches!(trial.task.metric, MetricSpec::Grader { .. }) {
        record.grader = grader_explanation(&dir.join(layout::GRADER_LOG));
    }
}

/// Whether a lifecycle that ran reached a verdict: not when the sandbox failed (the harness's
/// failure, not the agent's: unscored, and retried) or the hidden tests could not be listed.
fn reached<'a>(
    record: &'a TrialRecord,
    inputs: &'a TrialInputs,
    trial: &Wired<'_>,
    report: &'a NodeReport,
) -> Reached<'a> {
    let outcome = &report.outcome;
    if outcome.result.output.metadata.contains_key(SANDBOX_FAILED) {
        let why = outcome.result.error.as_ref().map(|e| e.message.clone());
        return Reached::Broken(why.unwrap_or_else(|| "the sandbox failed".to_owned()));
    }
    if let Err(e) = &trial.protected {
        return Reached::Broken(format!("cannot list the hidden tests to protect them: {e}"));
    }
    Reached::Verdict(VerdictInput {
        delta: &outcome.delta,
        score: report.score.clone(),
        tampered: &record.tampered,
        expected: inputs.expected.get(&trial.task.id),
    })
}

/// `value` with every secret replaced, through its JSON text so no text field is missed.
fn redact<T: serde::Serialize + serde::de::DeserializeOwned>(secrets: &Secrets, value: T) -> T {
    if secrets.is_empty() {
        return value;
    }
    let Ok(json) = serde_json::to_string(&value) else {
        return value;
    };
    match secrets.redact(&json) {
        std::borrow::Cow::Borrowed(_) => value,
        std::borrow::Cow::Owned(redacted) => serde_json::from_str(&redacted).unwrap_or(value),
    }
}
/// The most lines of a container's changes a record keeps.
const CONTAINER_LINES: usize = 50;

/// The first lines of a container delta's listing, and how many more `container-delta.txt` has.
fn container_listing(delta: &crate::delta::ContainerDelta) -> Vec<String> {
    let listing = delta.listing();
    let mut lines: Vec<String> = listing.lines().map(str::to_owned).collect();
    if lines.len() > CONTAINER_LINES {
        let more = lines.len() - CONTAINER_LINES;
        lines.truncate(CONTAINER_LINES);
        lines.push(format!(
            "... and {more} more ({})",
            crate::delta::CONTAINER_CHANGES
        ));
    }
    lines
}

/// A trial's places as a recording writes them: its workspace and its folder (which holds the
/// CLI's HOME), each as given and as resolved, and the workspace as a file name the way Claude
/// Code names a project's folder (every other character than a letter or digit a `-`).
fn places(workspace: &Path, folder: &Path) -> Vec<(String, String)> {
    let mut places = Vec::new();
    for (path, placeholder) in [(workspace, "<workspace>"), (folder, "<trial>")] {
        let mut forms = vec![path.display().to_string()];
        forms.extend(path.canonicalize().ok().map(|p| p.display().to_string()));
        for form in forms {
            if placeholder == "<workspace>" {
                let mangled: String = form
                    .chars()
                    .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
                    .collect();
                places.push((mangled, "<workspace-name>".to_owned()));
            }
            places.push((form, placeholder.to_owned()));
        }
    }
    places
}

/// `trajectory.json`: the run in ATIF, built from the events, the result and the gateway's
/// count (before the trial folder's secrets are redacted, which covers it).
fn write_trajectory(
    dir: &Path,
    trial: &Wired<'_>,
    name: &str,
    record: &TrialRecord,
    events: &[TimedEvent],
    result: Option<&CodingResult>,
) {
    let counted = trial.lease.as_ref().map(|l| (l.calls(), l.usage()));
    let trajectory = crate::trajectory::trajectory(&TrajectoryInput {
        agent: name,
        kind: trial.agent.kind(),
        model: trial
            .agent
            .as_harness()
            .and_then(|(_, c)| c.model.as_deref()),
        instruction: &trial.task.instruction,
        started_at: &record.started_at,
        events,
        result,
        gateway: counted
            .as_ref()
            .map(|(calls, total)| Counted { calls, total }),
    });
    let _ = write_json_atomic(&dir.join(layout::TRAJECTORY), &trajectory);
}

/// A file's content at the base and after `patch`, for the protected config sections;
/// `None` when it cannot be told (the caller then counts the file as changed).
fn file_versions(history: &Path, base: &str, patch: &str, path: &str) -> FileVersions {
    let repo = git2::Repository::open_bare(history).ok()?;
    let tree = repo.revparse_single(base).ok()?.peel_to_tree().ok()?;
    let blob = |id| repo.find_blob(id).ok().map(|b| b.content().to_vec());
    let before = match tree.get_path(Path::new(path)) {
        Ok(entry) => Some(blob(entry.id())?),
        Err(_) => None,
    };
    // As the verify workspace gets it (an empty file added with no hunk included).
    let files = crate::workspace::patched_files(&repo, &tree, patch.as_bytes()).ok()?;
    let after = match files.iter().find(|file| file.path == Path::new(path)) {
        Some(file) => file.content.as_ref().map(|(bytes, _)| bytes.clone()),
        None => before.clone(),
    };
    Some((before, after))
}

/// One human-readable line per event, for `agent.log`.
fn describe_event(event: &StreamEvent) -> String {
    match event {
        StreamEvent::System {
            subtype, message, ..
        } => format!("[{subtype}] {message}\n"),
        StreamEvent::Assistant { text } => format!("{text}\n"),
        StreamEvent::Thinking { text } => format!("(thinking) {text}\n"),
        StreamEvent::ToolCall { name, args, .. } => format!("-> {name} {args}\n"),
        StreamEvent::ToolResult { name, result, .. } => {
            format!("<- {} {result}\n", name.as_deref().unwrap_or("tool"))
        }
        StreamEvent::Usage { usage } => format!(
            "[usage] {} in / {} out\n",
            usage.input_tokens, usage.output_tokens
        ),
        StreamEvent::Result { status, .. } => format!("[result] {status}\n"),
        StreamEvent::Unknown { raw } => format!("[unknown] {raw}\n"),
    }
}

fn describe_result(record: &mut TrialRecord, result: &CodingResult) {
    record.status = Some(result.status);
    record.error = result.error.clone();
    record.session_id = Some(result.session_id.clone());
    record.agent_duration_ms = result.duration_ms;
    record.usage = result.usage.as_ref().map(UsageRecord::from);
}

/// The most of a grader's explanation a record keeps; the whole is in `grader.log`.
const EXPLANATION_MAX_LINES: usize = 12;
const EXPLANATION_MAX_BYTES: usize = 2000;

/// What a grader printed before its verdict line, its first lines and bytes at most.
fn grader_explanation(log: &Path) -> Option<String> {
    let text = std::fs::read_to_string(log).ok()?;
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim_end)
        .filter(|line| !line.trim().is_empty())
        .collect();
    // The verdict is the last JSON line; what follows it is not the explanation either.
    let verdict = lines
        .iter()
        .rposition(|line| line.trim_start().starts_with('{'))
        .unwrap_or(lines.len());
    let mut kept: Vec<&str> = lines[..verdict]
        .iter()
        .take(EXPLANATION_MAX_LINES)
        .copied()
        .collect();
    if verdict > EXPLANATION_MAX_LINES {
        kept.push("...");
    }
    let mut explanation = kept.join("\n");
    if explanation.len() > EXPLANATION_MAX_BYTES {
        let cut = (0..=EXPLANATION_MAX_BYTES)
            .rev()
            .find(|&i| explanation.is_char_boundary(i))
            .unwrap_or(0);
        explanation.truncate(cut);
        explanation.push_str("...");
    }
    (!explanation.is_empty()).then_some(explanation)
}

fn metric_for(task: &Task, suite: &Suite, dir: &Path) -> Box<dyn Metric> {
    match &task.metric {
        MetricSpec::Delta => Box::new(DeltaMetric),
        MetricSpec::DeltaToken => Box::new(DeltaTokenMetric),
        MetricSpec::ExitCode => Box::new(ExitCodeMetric),
        MetricSpec::Grader {
            command, timeout, ..
        } => Box::new(GraderMetric {
            command: command.clone(),
            cwd: suite.path.parent().map(Path::to_owned).unwrap_or_default(),
            timeout: timeout.unwrap_or(Duration::from_secs(60)),
            verify_log: Some(dir.join(layout::VERIFY_LOG)),
            log: Some(dir.join(layout::GRADER_LOG)),
        }),
    }
}

/// Provisions through `inner`, then runs the task's setup command unless the workspace is a view
/// of a template it already ran in; the tree it leaves is the base the probe diffs against, and
/// its objects are kept in `history`.
struct SetupProvisioner {
    inner: BackendProvisioner,
    setup: Option<String>,
    timeout: Option<Duration>,
    log: PathBuf,
    history: PathBuf,
    /// Runs the setup command in this container, when set.
    container: Option<ContainerPolicy>,
}

impl WorkspaceProvisioner for SetupProvisioner {
    fn provision<'a>(
        &'a self,
        base: &'a WorkspaceBase,
        isolation: Isolation,
    ) -> BoxFuture<'a, Result<ProvisionedWorkspace, ProvisionError>> {
        Box::pin(async move {
            let mut workspace = self.inner.provision(base, isolation).await?;
            let Some(setup) = self.setup.as_ref().filter(|_| !workspace.prepared) else {
                return Ok(workspace);
            };
            let fail = |reason: String| WorkspaceProvisionError {
                isolation: workspace.isolation,
                base: base.repo.clone(),
                reason,
            };
            let mut spec = CommandSpec::shell(setup, &workspace.path)
                .timeout(self.timeout)
                .log_path(Some(self.log.clone()));
            if let Some(container) = &self.container {
                spec = container
                    .wrap(&workspace.path, spec)
                    .map_err(|e| fail(format!("cannot prepare the setup's container: {e}")))?;
            }
            let ended = process::run(&spec, &CancellationToken::new())
                .await
                .map_err(|e| fail(format!("cannot start the setup command: {e}")))?;
            if self.container.is_some() && !container_started(&ended) {
                return Err(fail(format!(
                    "the container runtime could not run the setup command: {}",
                    ended.last_line()
                ))
                .into());
            }
            if !ended.success() {
                return Err(fail(setup_failed(&ended, setup, &self.log)).into());
            }
            let (path, history) = (workspace.path.clone(), self.history.clone());
            let tree = tokio::task::spawn_blocking(move || commit_setup(&path, &history))
                .await
                .map_err(|e| fail(e.to_string()))?
                .map_err(|e| {
                    fail(format!(
                        "cannot record the tree after setup: {}",
                        e.message()
                    ))
                })?;
            workspace.rebase(tree);
            Ok(workspace)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_solution_script_runs_under_bash_quoted_and_knows_its_folder() {
        let at = Path::new("/solution dir");
        let config = solution_command(&at.join("solve.sh"), at, Some(Duration::from_secs(5)));
        assert_eq!(config.run, "bash '/solution dir/solve.sh'");
        assert_eq!(config.timeout, Some(Duration::from_secs(5)));
        assert_eq!(
            config.env.get("DELTABENCH_SOLUTION").map(String::as_str),
            Some("/solution dir")
        );
        assert!(!config.gateway && config.network.is_none() && config.budget.is_none());
    }
}
