//! One trial: wire the seam types for (task, agent, n), run the lifecycle, write the artifacts.
//!
//! After the lifecycle the verdict is checked against gaming: a diff touching a protected path
//! is recorded as `tampered` (and fails under `delta`), a verify output that contradicts its exit
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

use crate::agent::harness::{Endpoint, HarnessAgent, find_program};
use crate::agent::{
    CodingAgent, CodingResult, CodingTask, CommandAgent, MockAgent, NoopAgent, OracleAgent,
    SANDBOX_FAILED, StreamEvent,
};
use crate::delta::{
    ContainerCapture, DiffStats, FreshWorkspace, MutationPlan, TaskProbe, commit_setup, mutate,
};
use crate::lifecycle::{
    BuildContext, FnCodingAgentFactory, Phase, RunCodingNode, RunNodeError, run_coding_node,
};
use crate::metric::{
    DeltaMetric, DeltaTokenMetric, ExitCodeMetric, GraderMetric, Metric, TestEvidence,
    VerdictInput, verdict,
};
use crate::process::{self, CommandSpec};
use crate::store::{TrialRecord, UsageRecord, VerifyRecord, layout, write_json_atomic};
use crate::suite::{AgentKind, AgentSpec, MetricSpec, Suite, Task};
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
    pub suite: Arc<Suite>,
    pub agents: IndexMap<String, AgentSpec>,
    /// Root URLs of the run's scripted model endpoints, by script path.
    pub endpoints: HashMap<PathBuf, String>,
    pub source: PreparedSource,
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

/// Runs one trial to a record. Never fails: what went wrong is in the record.
pub async fn run_trial(
    inputs: &TrialInputs,
    spec: &TrialSpec,
    commit: &str,
    dir: &Path,
    cancel: CancellationToken,
) -> TrialRecord {
    let started_at = now();
    let started = Instant::now();
    let task = &inputs.suite.tasks[spec.task];
    let unscored = |started_at| {
        TrialRecord::unscored(
            &task.id,
            &spec.agent,
            spec.trial,
            task.metric.name(),
            started_at,
        )
    };
    if let Some(why) = inputs.environments.failed.get(&spec.task) {
        let mut record = unscored(started_at);
        record.infra_error = Some(why.clone());
        return record;
    }
    let agent_spec = inputs.agents[&spec.agent].clone();
    let (agent_env, api_key) = agent_spec.secrets();
    let secrets = Secrets::of_trial(agent_env, api_key);
    let protected = Protected::for_task(
        task.protected.as_deref(),
        task.tests.as_ref(),
        &task.verify.run,
    );
    // Only the base commit's history, so no later commit is readable from the workspace.
    let history = inputs.source.repo_for(commit);
    let preparation = inputs.preparations.get(&spec.task);
    let base = WorkspaceBase::new(
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
    .prepared_by(preparation.map(|p| p.clone() as Arc<dyn Prepare>));
    // With an environment every command runs in a container, which is then the sandbox too:
    // only the workspace, its home and the borrowed objects are mounted. A prepared setup's
    // commands run in the image it was committed as.
    let container = |home: &str| -> Option<ContainerPolicy> {
        let policy = inputs
            .environments
            .policy(spec.task, task, dir.join(home), history)?;
        Some(match preparation.and_then(|p| p.image()) {
            Some(image) => policy.image(image),
            None => policy,
        })
    };
    let provisioner = SetupProvisioner {
        inner: inputs.provisioner.clone(),
        setup: task.setup.clone(),
        timeout: task.timeout,
        log: dir.join(layout::SETUP_LOG),
        history: history.to_owned(),
        container: container("home"),
    };
    // Where the agent and the verify command run, chosen here once; each gets a home of its
    // own, kept with the trial's files.
    let confinement = |home: &str| match container(home) {
        Some(policy) => Confinement::Container(policy),
        None if task.isolation == Isolation::Sandbox => Confinement::Sandbox(
            SandboxPolicy::new(dir.join(home))
                .hiding(inputs.sandbox_hidden.clone())
                .borrowing_objects_of(history),
        ),
        None => Confinement::Host,
    };
    let verify_provisioner = SetupProvisioner {
        inner: inputs.provisioner.clone(),
        setup: task.setup.clone(),
        timeout: task.timeout,
        log: dir.join(layout::VERIFY_SETUP_LOG),
        history: history.to_owned(),
        container: container(layout::VERIFY_HOME),
    };
    // The gateway's route for `network: model`; under `delta: container` the agent's container
    // is kept for the probe to read, and under `in_place` kept running for verify.
    let agent_confinement = match confinement("home") {
        Confinement::Container(policy) => {
            let policy = match &inputs.model_route {
                Some(route) => policy.model_route(route.clone()),
                None => policy,
            };
            Confinement::Container(match task.environment.as_ref().map(|e| e.delta) {
                _ if task.verify.in_place => policy.kept_live(),
                Some(DeltaScope::Container) => policy.kept(),
                _ => policy,
            })
        }
        Confinement::Sandbox(policy) => Confinement::Sandbox(match &inputs.model_route {
            Some(route) => policy.model_route(route.clone()),
            None => policy,
        }),
        Confinement::Host => Confinement::Host,
    };
    let in_place = agent_confinement.container().filter(|p| p.live).cloned();
    let container_delta = match (agent_confinement.container(), &protected) {
        (Some(policy), Ok(protected)) => policy.keep.as_ref().map(|name| ContainerCapture {
            runtime: policy.runtime.clone(),
            container: name.clone(),
            image: policy.image.clone(),
            label: policy.label.clone(),
            protected: protected.container_path(),
        }),
        _ => None,
    };
    let verify_network = task
        .environment
        .as_ref()
        .map_or(Network::None, |e| e.verify_network);
    let probe = Arc::new(TaskProbe {
        hidden_tests: task.tests.clone(),
        verify: task.verify.clone(),
        artifacts: Some(dir.to_owned()),
        // No network unless the task declares its tests need one (a host answering any
        // address fails tests).
        confinement: match confinement(layout::VERIFY_HOME) {
            Confinement::Container(policy) => {
                Confinement::Container(policy.network(verify_network))
            }
            confinement => confinement,
        },
        objects: history.to_owned(),
        max_diff: inputs.suite.max_diff,
        // The verify command runs in a workspace of its own, never the agent's.
        fresh: FreshWorkspace {
            provisioner: Arc::new(verify_provisioner),
            base: WorkspaceBase::new(
                history.to_owned(),
                commit.to_owned(),
                format!("{}--verify", base.name),
            )
            .prepared_by(base.prepare.clone()),
            isolation: Isolation::Worktree.as_str().to_owned(),
        },
        mutation: mutation_plan(inputs, task, &agent_spec).filter(|_| in_place.is_none()),
        container_delta,
        in_place,
    });
    let (agent_name, scratch, solution) =
        (spec.agent.clone(), dir.to_owned(), task.solution.clone());
    let solution_script = task.solution_script.clone();
    let timeout = task.timeout;
    let endpoints = inputs.endpoints.clone();
    let tape = super::gateway::Taping {
        record: inputs.record.then(|| dir.join(layout::MODEL_CALLS)),
        replay: inputs.replay.as_deref().map(|run| {
            layout::trial_path(run, &task.id, &spec.agent, spec.trial).join(layout::MODEL_CALLS)
        }),
    };
    let lease = super::gateway::lease(
        inputs.gateway.as_ref(),
        &agent_spec,
        super::gateway::agent_network(task, &agent_spec),
        &endpoints,
        tape,
    );
    let through = lease.clone().map(|l| (l.url().to_owned(), l.stop(), l));
    let trial_folder = std::path::absolute(dir).unwrap_or_else(|_| dir.to_owned());
    let factory = FnCodingAgentFactory::new(
        move |ctx: &BuildContext| -> Result<Arc<dyn CodingAgent>, anyhow::Error> {
            let contain = |agent: CommandAgent| agent.confined(agent_confinement.clone());
            Ok(match &agent_spec {
                AgentSpec::Noop => Arc::new(NoopAgent::named(&agent_name)),
                // A script solution runs as an agent would: in the task's container or
                // sandbox, from a copy of its folder in the agent's home (the suite's folder
                // is hidden there).
                AgentSpec::Oracle if solution_script.is_some() => {
                    let script = solution_script.clone().unwrap_or_default();
                    let copy = scratch.join("home").join(".deltabench-solution");
                    let folder = script.parent().unwrap_or(Path::new("/"));
                    crate::support::copy_folder(folder, &copy).map_err(|e| {
                        anyhow::anyhow!("cannot copy the solution script's folder: {e}")
                    })?;
                    let name = script.file_name().unwrap_or_default();
                    let config = crate::agent::CommandAgentConfig {
                        run: format!(
                            "bash {}",
                            crate::support::shell_quote(&copy.join(name).to_string_lossy())
                        ),
                        timeout,
                        env: [(
                            "DELTABENCH_SOLUTION".to_owned(),
                            copy.to_string_lossy().into_owned(),
                        )]
                        .into(),
                        network: None,
                        gateway: false,
                        endpoint: None,
                        budget: None,
                    };
                    Arc::new(contain(CommandAgent::new(
                        &agent_name,
                        config,
                        ctx.workspace.clone(),
                        scratch.clone(),
                    )))
                }
                AgentSpec::Oracle => Arc::new(OracleAgent::new(
                    ctx.workspace.clone(),
                    ctx.base.clone(),
                    solution.clone(),
                )),
                AgentSpec::Mock(config) => Arc::new(
                    MockAgent::new(config.clone())
                        .named(&agent_name)
                        .in_workspace(ctx.workspace.clone()),
                ),
                AgentSpec::Command(config) => {
                    let mut agent = CommandAgent::new(
                        &agent_name,
                        config.clone(),
                        ctx.workspace.clone(),
                        scratch.clone(),
                    );
                    if let Some((url, stop, lease)) = &through {
                        lease.start_clock();
                        lease.set_places(places(&ctx.workspace, &trial_folder));
                        agent = agent.through_gateway(url.clone(), stop.clone());
                    }
                    Arc::new(contain(agent))
                }
                spec => {
                    let (kind, config) = spec.as_harness().expect("the other kinds are above");
                    let program =
                        find_program(kind, config.binary.as_deref()).map_err(anyhow::Error::msg)?;
                    let endpoint = match &config.endpoint {
                        Some(Endpoint::Url(url)) => Some(url.clone()),
                        Some(Endpoint::Scripted(path)) => {
                            Some(endpoints.get(path).cloned().ok_or_else(|| {
                                anyhow::anyhow!("no endpoint was started for {}", path.display())
                            })?)
                        }
                        None => None,
                    };
                    let mut agent = HarnessAgent::new(
                        &agent_name,
                        kind,
                        config.clone(),
                        program,
                        ctx.workspace.clone(),
                        scratch.clone(),
                        endpoint,
                    );
                    if let Some((url, stop, lease)) = &through {
                        lease.start_clock();
                        lease.set_places(places(&ctx.workspace, &trial_folder));
                        agent = agent.through_gateway(url.clone(), stop.clone());
                    }
                    Arc::new(agent.confined(agent_confinement.clone()))
                }
            })
        },
        probe,
    );
    let metric = metric_for(task, &inputs.suite, dir);
    let mut events = match File::create(dir.join(layout::EVENTS)) {
        Ok(file) => Some(BufWriter::new(file)),
        Err(_) => None,
    };
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
    let (ran, lifecycle) = run_coding_node(RunCodingNode {
        factory: &factory,
        provisioner: &provisioner,
        base: &base,
        isolation: task.isolation.as_str(),
        task: CodingTask {
            task: task.instruction.clone(),
            session_id: None,
            signal: Some(cancel.clone()),
            deadline: task.timeout,
        },
        signal: Some(cancel.clone()),
        metric: Some(metric.as_ref()),
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

    let mut record = unscored(started_at);
    record.phases = lifecycle
        .steps
        .iter()
        .map(|(phase, us)| (format!("{phase:?}").to_lowercase(), *us))
        .collect();
    record.verify_network = verify_network == Network::Host;
    record.in_place = task.verify.in_place;
    let mut result_json = serde_json::json!({ "lifecycle": lifecycle });
    match ran {
        Ok(report) => {
            let outcome = &report.outcome;
            let delta = &outcome.delta;
            record.diff = Some(DiffStats::from_patch(&delta.diff));
            let verify = &delta.command_result;
            if delta.rejected.is_none() {
                record.verify = Some(VerifyRecord {
                    exit_code: verify.exit_code,
                    timed_out: verify.timed_out,
                    duration_ms: verify.duration_ms,
                });
                let mut evidence = TestEvidence::of(verify);
                if inputs.discover_mutants
                    && let Some(report) = &delta.mutation
                {
                    evidence.mutants = report.biting.clone();
                }
                let _ = write_json_atomic(&dir.join(layout::TESTS), &evidence);
            }
            describe_result(&mut record, &outcome.result);
            let sandbox_failed = outcome.result.output.metadata.contains_key(SANDBOX_FAILED);
            match &protected {
                _ if sandbox_failed => {
                    // The harness's failure, not the agent's: unscored, and retried.
                    record.infra_error = outcome.result.error.as_ref().map(|e| e.message.clone());
                }
                Ok(protected) => {
                    record.tampered = protected.touched(&delta.diff, &|path| {
                        file_versions(history, &base.commit, &delta.diff, path)
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
                    let verdict = verdict(VerdictInput {
                        delta,
                        score: report.score,
                        tampered: &record.tampered,
                        tamper_fails: matches!(task.metric, MetricSpec::Delta),
                        expected: inputs.expected.get(&task.id),
                    });
                    record.apply(&verdict);
                    if matches!(task.metric, MetricSpec::Grader { .. }) {
                        record.grader = grader_explanation(&dir.join(layout::GRADER_LOG));
                    }
                }
                Err(e) => {
                    record.infra_error =
                        Some(format!("cannot list the hidden tests to protect them: {e}"));
                }
            }
            result_json["result"] = serde_json::to_value(&outcome.result).unwrap_or_default();
            result_json["summary"] = serde_json::to_value(&outcome.summary).unwrap_or_default();
        }
        Err(err) => {
            if let RunNodeError::Probe(probe) = &err
                && let Some(result) = &probe.result
            {
                describe_result(&mut record, result);
                result_json["result"] = serde_json::to_value(result).unwrap_or_default();
            }
            record.infra_error = Some(err.to_string());
        }
    }
    super::gateway::record_usage(&mut record, lease.as_deref());
    // A replay that left its recording measured nothing the recording did: not scored.
    if let Some(reason) = lease
        .as_ref()
        .and_then(|l| l.stop().tripped())
        .filter(|r| crate::agent::is_replay_mismatch(r))
    {
        record.unscore(reason);
    }
    let preparation = Duration::from_micros(lifecycle.micros(Phase::Prepare));
    record.preparation_ms =
        (lifecycle.count(Phase::Prepare) > 0).then_some(preparation.as_millis() as u64);
    record.duration_ms = started.elapsed().saturating_sub(preparation).as_millis() as u64;
    // Cancelled while it ran: the run aborted it, or a job engine's SIGTERM (scancel,
    // preemption) reached its agent or verify command directly, so its end is no verdict.
    if cancel.is_cancelled() {
        record.mark_interrupted();
    }
    let result: Option<CodingResult> = result_json
        .get("result")
        .and_then(|r| serde_json::from_value(r.clone()).ok());
    let counted = lease.as_ref().map(|l| (l.calls(), l.usage()));
    let agent = &inputs.agents[&spec.agent];
    write_trajectory(
        dir,
        &TrajectoryInput {
            agent: &spec.agent,
            kind: AgentKind::from(agent).into(),
            model: agent.as_harness().and_then(|(_, c)| c.model.as_deref()),
            instruction: &task.instruction,
            started_at: &record.started_at,
            events: &timed,
            result: result.as_ref(),
            gateway: counted
                .as_ref()
                .map(|(calls, total)| Counted { calls, total }),
        },
    );
    let record = redact_record(&secrets, record);
    result_json["record"] = serde_json::to_value(&record).unwrap_or_default();
    let _ = write_json_atomic(&dir.join(layout::RESULT), &result_json);
    if let Err(e) = secrets.redact_dir(dir) {
        // A secret may remain on disk: the record says so rather than the run failing.
        let mut record = record;
        record.unscore(format!("cannot redact secrets from {}: {e}", dir.display()));
        return record;
    }
    record
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
fn write_trajectory(dir: &Path, input: &TrajectoryInput) {
    let trajectory = crate::trajectory::trajectory(input);
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

/// The record with every secret replaced, through its JSON form so no text field is missed.
fn redact_record(secrets: &Secrets, record: TrialRecord) -> TrialRecord {
    if secrets.is_empty() {
        return record;
    }
    let Ok(json) = serde_json::to_string(&record) else {
        return record;
    };
    match secrets.redact(&json) {
        std::borrow::Cow::Borrowed(_) => record,
        std::borrow::Cow::Owned(redacted) => serde_json::from_str(&redacted).unwrap_or(record),
    }
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
        MetricSpec::Grader { command, timeout } => Box::new(GraderMetric {
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
        isolation: &'a str,
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
