//! Plans and runs trials: (task, agent, trial) triples, in parallel, each through the lifecycle.
//!
//! [`plan`] validates what the user asked for against the suite (agents exist, filters match,
//! `session` runs one trial) before anything runs. [`execute`] provisions the source once, runs
//! every trial with at most `jobs` in flight, and is the only writer of `trials.jsonl`: each
//! record is appended and fsynced before the observer hears of it. [`resume`] finishes a run
//! directory a killed run left: it runs the planned trials not recorded yet and appends them.
//! While a run holds workspaces it keeps a lease file in the cache (`store::HeldLease`), so
//! `gc` and `resume` can find what a dead run left.
//!
//! A `--shard I/N` ([`crate::store::Shard`]) keeps a deterministic 1/N slice of the planned
//! trials, so shards run on different machines and later merged (`store::merge_runs`) give the
//! unsharded run.

mod environments;
mod gateway;
mod plan;
mod prepare;
mod replay;
mod resume;
pub mod soundness;
mod trial;

use environments::Environments;
pub use environments::{ImageReport, build_images, runtime_for};
pub use prepare::trim_templates;
use prepare::{DEFAULT_CACHE_MAX, SetupPreparation};
use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use indexmap::IndexMap;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;

use crate::agent::harness::Endpoint;
use crate::model::{Script, ScriptedServer};
use crate::store::{HeldLease, Manifest, Outcome, RunDir, TrialRecord, layout, sanitize};
use crate::suite::{AgentSpec, Located, Suite, agent_configs};
use crate::workspace::{
    BackendProvisioner, CloneBackend, Isolation, OverlayBackend, PreparedSource, Runtime,
    SessionBackend, WorkspaceBackend, check_bubblewrap, prepare_source, resolve_commit,
};

pub use plan::{Plan, PlanError, TrialSpec, plan};
pub use replay::{NotReplayable, ReplayError, check_replayable};
pub use resume::{ResumeError, check_resumable, reap_dead_leases};
pub use trial::TrialInputs;

/// What a trial's task tells the run loop.
enum TrialEvent {
    /// `task / agent #n` began.
    Started(String),
    Finished(Box<Result<TrialRecord, RunError>>),
}

/// Hears about the run as it goes. Implemented by the terminal reporter.
pub trait RunObserver: Send {
    /// The run directory is written and its trials are about to start.
    fn started(&mut self, plan: &Plan, run_dir: &Path);
    /// A trial (`task / agent #n`) began; `trial_finished` names it the same way.
    fn trial_started(&mut self, _name: &str) {}
    /// A trial ended; `record` is what `trials.jsonl` now holds for it.
    fn trial_finished(&mut self, record: &TrialRecord);
    /// A record the run directory held before this run started (a resumed run's).
    fn recorded(&mut self, _record: &TrialRecord) {}
    /// The first interrupt: no new trials start, running ones end.
    fn interrupted(&mut self);
}

/// Why a run could not be carried out at all.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The suite's repo, a base commit, an image or the `--out` folder cannot be used: a
    /// configuration error, at a place in the suite file when it has one.
    #[error("{context}")]
    Config {
        /// What could not be done: the error's message.
        context: String,
        /// Where the faulty value is written (suite file, line, column), when known.
        at: Option<(PathBuf, u64, u64)>,
        /// What caused it, when something below did.
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },
    /// A killed or interrupted run's directory cannot be read back.
    #[error("cannot reopen {}", path.display())]
    Reopen {
        /// The run directory.
        path: PathBuf,
        /// Why reading it failed.
        #[source]
        source: Box<crate::store::ReadRunError>,
    },
    /// The model gateway, which agents' model calls pass through, could not start.
    #[error("cannot start the model gateway")]
    Gateway {
        /// Why it could not start.
        #[source]
        source: crate::gateway::GatewayError,
    },
    /// A blocking step of the run's preparation panicked or was cancelled.
    #[error("{context}")]
    Task {
        /// The step that failed.
        context: String,
        /// Its panic or cancellation.
        #[source]
        source: tokio::task::JoinError,
    },
    /// The harness could not do its part (write the run directory, start a server).
    #[error("{context}")]
    Io {
        /// What the harness was doing.
        context: String,
        /// Why it failed.
        #[source]
        source: std::io::Error,
    },
}

impl RunError {
    /// A configuration error that has no cause below it.
    pub(crate) fn config(context: impl Into<String>) -> Self {
        Self::Config {
            context: context.into(),
            at: None,
            source: None,
        }
    }

    /// A configuration error of `context` because of `source`, for `map_err`.
    pub(crate) fn config_because<E>(context: impl Into<String>) -> impl FnOnce(E) -> Self
    where
        E: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let context = context.into();
        move |source| Self::Config {
            context,
            at: None,
            source: Some(source.into()),
        }
    }

    /// `RunError::Io` with `context`, for `map_err`.
    fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> Self {
        let context = context.into();
        move |source| Self::Io { context, source }
    }
}

/// The result of a whole run.
#[derive(Debug, Clone)]
pub struct RunOutcome {
    /// The run directory the run wrote.
    pub run_dir: PathBuf,
    /// The run's records, those of an earlier run resumed included: the records themselves
    /// are in `trials.jsonl` only (the observer saw each).
    pub trials: usize,
    /// Of those, the ones that could not be scored.
    pub infra_errors: usize,
    /// The run ended before every planned trial was recorded (an interrupt); `resume` finishes it.
    pub interrupted: bool,
    /// Workspace leftovers that could not be removed.
    pub leftovers: Vec<String>,
}

/// Runs every trial of `plan`, writing `run_dir`. `cancel` stops the run gracefully.
pub async fn execute(
    plan: &Plan,
    run_dir: &Path,
    observer: &mut dyn RunObserver,
    cancel: CancellationToken,
) -> Result<RunOutcome, RunError> {
    let suite = &plan.suite;
    let store = RunDir::create(run_dir).map_err(|e| match e.kind() {
        // An --out that holds a run is the user's choice to fix, not a harness failure.
        std::io::ErrorKind::AlreadyExists => RunError::config(e.to_string()),
        _ => RunError::io(format!(
            "cannot create the run directory {}",
            run_dir.display()
        ))(e),
    })?;
    let manifest = Manifest {
        suite: suite.name.clone(),
        suite_path: suite.path.display().to_string(),
        suite_digest: suite.digest.clone(),
        agents: recorded_agent_configs(&plan.agents),
        variants: plan
            .agents
            .keys()
            .filter_map(|name| Some((name.clone(), suite.variants.get(name)?.clone())))
            .collect(),
        tasks: plan
            .tasks
            .iter()
            .map(|&i| suite.tasks[i].id.clone())
            .collect(),
        trials_per_task: plan.request.trials,
        jobs: plan.request.jobs,
        planned_trials: plan.trials.len(),
        shard: plan.request.shard,
        merged_from: Vec::new(),
        deltabench_version: env!("CARGO_PKG_VERSION").into(),
        started_at: now(),
        finished_at: None,
        host: crate::store::host_name(),
        workdir: String::new(),
        provisioning: String::new(),
        interrupted: false,
        request: Some(plan.request.clone()),
        base_images: suite.base_images.clone(),
        preparation: IndexMap::new(),
    };
    carry_out(plan, store, manifest, Vec::new(), observer, cancel).await
}

/// Finishes the run in `run_dir` (written by [`execute`] for this `plan`, then killed or
/// interrupted): runs every planned trial `trials.jsonl` does not hold yet and appends them.
/// The caller checks first that the plan is the recorded one ([`check_resumable`]).
pub async fn resume(
    plan: &Plan,
    run_dir: &Path,
    observer: &mut dyn RunObserver,
    cancel: CancellationToken,
) -> Result<RunOutcome, RunError> {
    let (store, stored) = RunDir::reopen(run_dir).map_err(|source| RunError::Reopen {
        path: run_dir.to_owned(),
        source: Box::new(source),
    })?;
    let mut manifest = stored.manifest;
    manifest.finished_at = None;
    manifest.jobs = plan.request.jobs;
    manifest.request = Some(plan.request.clone());
    // A run in rounds (cli/rounds.rs) resumes with one more trial per task each round.
    manifest.trials_per_task = plan.request.trials;
    manifest.planned_trials = plan.trials.len();
    carry_out(plan, store, manifest, stored.trials, observer, cancel).await
}

/// Runs the plan's trials that `done` does not hold, appending each record to `store`.
async fn carry_out(
    plan: &Plan,
    mut store: RunDir,
    mut manifest: Manifest,
    done: Vec<TrialRecord>,
    observer: &mut dyn RunObserver,
    cancel: CancellationToken,
) -> Result<RunOutcome, RunError> {
    let suite = plan.suite.clone();
    let run_dir = store.path().to_owned();
    let root = workspace_root(&plan.request.workdir, &run_dir, std::process::id());
    manifest.workdir = root.display().to_string();
    store
        .write_manifest(&manifest)
        .map_err(RunError::io("cannot write the manifest"))?;
    let mut holding = Holding {
        root: root.clone(),
        run_dir: run_dir.clone(),
        lease: None,
        recorded: !done.is_empty(),
        trials_started: false,
    };
    let runtime = environments::runtime_for(&suite, &plan.tasks)?;
    // Taken before the root exists: whatever this run leaves under it, gc can find.
    let lease = HeldLease::acquire(
        &plan.request.cache,
        &run_dir,
        &root,
        runtime.as_ref().map(|r| r.program.as_path()),
    )
    .map_err(RunError::io("cannot write a lease file"))?;
    let label = lease.id();
    holding.lease = Some(lease);
    let prepared = trial_inputs(plan, &root, &run_dir, runtime.clone(), &label).await?;
    manifest.provisioning = prepared.provisioning;
    observer.started(plan, &run_dir);

    // Interrupted trials are run again; their new record supersedes the old one.
    let done: Vec<TrialRecord> = done.into_iter().filter(|r| !r.interrupted).collect();
    let to_run = still_to_run(plan, &done);
    let scripted = ScriptedEndpoints::start(&plan.agents).await?;
    let gateway = gateway::start(&plan.agents).await?;
    let (gateway, model_route) = gateway.unzip();
    let inputs = Arc::new(TrialInputs {
        // Dropped with the inputs, after the last trial: that stops it.
        gateway,
        model_route,
        endpoints: scripted.urls.clone(),
        ..prepared.inputs
    });
    holding.trials_started = true;
    let rx = schedule(
        plan,
        inputs.clone(),
        to_run,
        run_dir.clone(),
        cancel.clone(),
    );

    for (&task, &ms) in &inputs.environments.built_ms {
        let entry = manifest.preparation.entry(suite.tasks[task].id.clone());
        entry.or_default().environment_ms = Some(ms);
    }
    let (mut trials, mut infra_errors) = (done.len(), 0);
    for record in &done {
        manifest.note_preparation(record);
        observer.recorded(record);
        infra_errors += usize::from(record.outcome == Outcome::InfraError);
    }
    drop(done);
    let collected = collect(rx, &mut store, &mut manifest, observer, &cancel).await?;
    trials += collected.trials;
    infra_errors += collected.infra_errors;

    scripted.stop().await;
    let leftovers = clean_up(plan, &runtime, &label, &root, collected.forced);
    drop(inputs);
    // A root that could not be removed keeps its lease, so `gc` can finish the job later.
    if leftovers.is_empty()
        && let Some(lease) = holding.lease.take()
    {
        lease.release();
    }
    manifest.finished_at = Some(now());
    manifest.interrupted = cancel.is_cancelled() || trials < plan.trials.len();
    store
        .write_manifest(&manifest)
        .map_err(RunError::io("cannot write the manifest"))?;
    Ok(RunOutcome {
        run_dir,
        trials,
        infra_errors,
        interrupted: manifest.interrupted,
        leftovers,
    })
}

/// Where a run's workspaces go: `WORKDIR/deltabench-RUN-PID`. The pid keeps a resumed run's
/// workspaces apart from what the dead run left.
fn workspace_root(workdir: &Path, run_dir: &Path, pid: u32) -> PathBuf {
    let run_id = run_dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "run".into());
    workdir.join(format!("deltabench-{}-{pid}", sanitize(&run_id)))
}

/// The plan's trials that `done` holds no record of, in the plan's order.
fn still_to_run(plan: &Plan, done: &[TrialRecord]) -> Vec<TrialSpec> {
    let recorded: HashSet<(&str, &str, u32)> = done
        .iter()
        .map(|r| (r.task.as_str(), r.agent.as_str(), r.trial))
        .collect();
    plan.trials
        .iter()
        .filter(|t| {
            let key = (
                plan.suite.tasks[t.task].id.as_str(),
                t.agent.as_str(),
                t.trial,
            );
            !recorded.contains(&key)
        })
        .cloned()
        .collect()
}

/// What a run holds while it runs. Dropped before any trial started (an error preparing), it
/// gives back the workspace root, the lease and the run directory when it recorded nothing, so
/// the user can fix the suite and rerun with the same `--out`. Once trials started, what they
/// hold stays under the lease for `deltabench gc`.
struct Holding {
    root: PathBuf,
    run_dir: PathBuf,
    lease: Option<HeldLease>,
    /// The run directory holds records of an earlier run (a resume): it stays.
    recorded: bool,
    trials_started: bool,
}

impl Drop for Holding {
    fn drop(&mut self) {
        if self.trials_started {
            return;
        }
        let _ = std::fs::remove_dir_all(&self.root);
        if let Some(lease) = self.lease.take() {
            lease.release();
        }
        if !self.recorded {
            remove_empty_run(&self.run_dir);
        }
    }
}

/// The trial inputs but for the model servers, and the manifest's provisioning line.
struct Prepared {
    inputs: TrialInputs,
    provisioning: String,
}

/// Prepares what every trial shares: the images, the source and each task's base commit, the
/// workspace backends and templates.
async fn trial_inputs(
    plan: &Plan,
    root: &Path,
    run_dir: &Path,
    runtime: Option<Runtime>,
    label: &str,
) -> Result<Prepared, RunError> {
    let suite = plan.suite.clone();
    let (source, commits, environments) = {
        let (suite, staging) = (suite.clone(), root.to_owned());
        let (cache, tasks, agents) = (
            plan.request.cache.clone(),
            plan.tasks.clone(),
            plan.agents.clone(),
        );
        let label = label.to_owned();
        tokio::task::spawn_blocking(move || {
            // Containers before the source: a missing image stops the run soonest.
            let environments =
                environments::prepare(&suite, &tasks, &agents, runtime.as_ref(), &label, &cache)?;
            let (source, commits) = prepare(&suite, &staging, &cache.join("sources"), &tasks)?;
            Ok((source, commits, environments))
        })
        .await
        .map_err(|source| RunError::Task {
            context: "the source preparation failed".into(),
            source,
        })??
    };
    let (worktree, provisioning, templates) = worktree_backend(plan, &commits, &root.join("ws"));
    let (preparations, provisioning) = preparations(
        plan,
        &suite,
        &source,
        &commits,
        &environments,
        templates,
        provisioning,
    );
    let sandboxed = plan
        .tasks
        .iter()
        .any(|&i| suite.tasks[i].isolation == Isolation::Sandbox);
    let provisioning = if sandboxed {
        // `plan` checked bubblewrap; this reads the cached version.
        format!(
            "{provisioning}; `sandbox` tasks run their agent and verify commands in bubblewrap ({})",
            check_bubblewrap().unwrap_or_default()
        )
    } else {
        provisioning
    };
    Ok(Prepared {
        inputs: TrialInputs {
            gateway: None,
            model_route: None,
            endpoints: HashMap::new(),
            agents: plan.agents.clone(),
            source,
            commits,
            provisioner: BackendProvisioner::new()
                .with(Isolation::Session, SessionBackend)
                .with_shared(Isolation::Worktree, worktree.clone())
                // The same workspaces: the sandbox is in how the agent and verify commands run.
                .with_shared(Isolation::Sandbox, worktree),
            sandbox_hidden: sandbox_hidden(&suite, root, run_dir, &plan.request.cache),
            expected: plan.expected.clone(),
            discover_mutants: plan.discover_mutants,
            record: plan.request.record,
            keep_homes: plan.request.keep_homes,
            replay: plan.request.replay.clone(),
            environments,
            preparations,
            suite,
        },
        provisioning,
    })
}

/// Starts `to_run`'s trials as permits free up, not all at once, so memory stays flat in the
/// number of trials; a harness failure is run again up to `--retries` times.
fn schedule(
    plan: &Plan,
    inputs: Arc<TrialInputs>,
    to_run: Vec<TrialSpec>,
    run_dir: PathBuf,
    cancel: CancellationToken,
) -> mpsc::UnboundedReceiver<TrialEvent> {
    let semaphore = Arc::new(Semaphore::new(plan.request.jobs));
    let retries = plan.request.retries;
    let (tx, rx) = mpsc::unbounded_channel::<TrialEvent>();
    tokio::spawn(async move {
        for spec in to_run {
            let Ok(permit) = semaphore.clone().acquire_owned().await else {
                return;
            };
            if cancel.is_cancelled() {
                return;
            }
            let task_id = &inputs.suite.tasks[spec.task].id;
            let trial_dir = match fresh_trial_dir(&run_dir, task_id, &spec) {
                Ok(dir) => dir,
                Err(err) => {
                    let _ = tx.send(TrialEvent::Finished(Box::new(Err(err))));
                    return;
                }
            };
            let name = format!("{task_id} / {} #{}", spec.agent, spec.trial);
            let _ = tx.send(TrialEvent::Started(name));
            let (inputs, tx, cancel) = (inputs.clone(), tx.clone(), cancel.clone());
            tokio::spawn(async move {
                let _permit = permit;
                let commit = &inputs.commits[spec.task];
                let mut record =
                    trial::run_trial(&inputs, &spec, commit, &trial_dir, cancel.clone()).await;
                for _ in 0..retries {
                    if record.outcome != Outcome::InfraError || cancel.is_cancelled() {
                        break;
                    }
                    // Only the last attempt's artifacts and record are kept.
                    if std::fs::remove_dir_all(&trial_dir)
                        .and_then(|()| std::fs::create_dir_all(&trial_dir))
                        .is_err()
                    {
                        break;
                    }
                    record =
                        trial::run_trial(&inputs, &spec, commit, &trial_dir, cancel.clone()).await;
                }
                let _ = tx.send(TrialEvent::Finished(Box::new(Ok(record))));
            });
        }
    });
    rx
}

/// What the run loop saw.
struct Collected {
    trials: usize,
    infra_errors: usize,
    /// A second interrupt killed everything.
    forced: bool,
}

/// Appends each finished trial's record and tells the observer, until every trial ended; the
/// first SIGINT or SIGTERM stops the run gracefully, a second kills everything.
async fn collect(
    mut rx: mpsc::UnboundedReceiver<TrialEvent>,
    store: &mut RunDir,
    manifest: &mut Manifest,
    observer: &mut dyn RunObserver,
    cancel: &CancellationToken,
) -> Result<Collected, RunError> {
    let mut collected = Collected {
        trials: 0,
        infra_errors: 0,
        forced: false,
    };
    let mut interrupts = 0;
    let mut sigint =
        signal(SignalKind::interrupt()).map_err(RunError::io("cannot handle SIGINT"))?;
    let mut sigterm =
        signal(SignalKind::terminate()).map_err(RunError::io("cannot handle SIGTERM"))?;
    // A closed terminal (SIGHUP) or SIGQUIT ends the run as SIGINT does: recorded, finished_at
    // and `interrupted: true` written. SIGPIPE stays ignored (Rust's default): a closed pipe
    // only loses output.
    let mut sighup = signal(SignalKind::hangup()).map_err(RunError::io("cannot handle SIGHUP"))?;
    let mut sigquit = signal(SignalKind::quit()).map_err(RunError::io("cannot handle SIGQUIT"))?;
    loop {
        tokio::select! {
            event = rx.recv() => {
                let record = match event {
                    None => break,
                    Some(TrialEvent::Started(name)) => {
                        observer.trial_started(&name);
                        continue;
                    }
                    Some(TrialEvent::Finished(record)) => (*record)?,
                };
                store.append(&record).map_err(RunError::io("cannot append to trials.jsonl"))?;
                manifest.note_preparation(&record);
                observer.trial_finished(&record);
                collected.trials += 1;
                collected.infra_errors += usize::from(record.outcome == Outcome::InfraError);
            }
            _ = async {
                tokio::select! {
                    _ = sigint.recv() => {},
                    _ = sigterm.recv() => {},
                    _ = sighup.recv() => {},
                    _ = sigquit.recv() => {},
                }
            } => {
                interrupts += 1;
                if interrupts == 1 {
                    cancel.cancel();
                    observer.interrupted();
                } else {
                    // A second interrupt: kill everything and return; the CLI exits 130.
                    crate::process::kill_all_live_groups();
                    collected.forced = true;
                    break;
                }
            }
        }
    }
    Ok(collected)
}

/// Removes what the run's trials left (its containers, its workspace root) and trims the
/// template cache; returns what could not be removed.
fn clean_up(
    plan: &Plan,
    runtime: &Option<Runtime>,
    label: &str,
    root: &Path,
    forced: bool,
) -> Vec<String> {
    let mut leftovers = Vec::new();
    // Each command removes its container; a forced stop can leave some running.
    if let Some(runtime) = runtime
        && let Err(err) = runtime.remove_labelled(label, false)
    {
        leftovers.push(format!(
            "the containers labelled {}={label} ({err}; `deltabench gc` retries)",
            crate::workspace::RUN_LABEL
        ));
    }
    if forced {
        // Trials still stopping may hold their workspaces: gc removes them later.
        leftovers.push(format!(
            "{} (a forced stop leaves it to `deltabench gc`)",
            root.display()
        ));
        return leftovers;
    }
    if !plan.request.keep_workspaces
        && let Err(err) = crate::workspace::remove_tree(root)
    {
        leftovers.extend(err.left.iter().map(ToString::to_string));
    }
    // The run's own templates are in use until the trial inputs go: they stay.
    let max = plan.request.cache_max.unwrap_or(DEFAULT_CACHE_MAX);
    if let Err(err) = trim_templates(&plan.request.cache, max, false) {
        eprintln!(
            "warning: cannot trim the templates in {} to {}: {err}",
            plan.request.cache.display(),
            bytesize::ByteSize::b(max).display().iec()
        );
    }
    leftovers
}

/// The scripted model endpoints a run's agents asked for (`endpoint: scripted:PATH`): one
/// server per script, up for the whole run.
struct ScriptedEndpoints {
    servers: Vec<ScriptedServer>,
    /// Script path to the server's root URL.
    urls: HashMap<PathBuf, String>,
}

impl ScriptedEndpoints {
    async fn start(agents: &IndexMap<String, AgentSpec>) -> Result<Self, RunError> {
        let mut started = Self {
            servers: Vec::new(),
            urls: HashMap::new(),
        };
        for spec in agents.values() {
            let endpoint = match spec {
                AgentSpec::Command(config) => config.endpoint.as_ref(),
                spec => spec
                    .as_harness()
                    .and_then(|(_, config)| config.endpoint.as_ref()),
            };
            let Some(Endpoint::Scripted(path)) = endpoint else {
                continue;
            };
            if started.urls.contains_key(path) {
                continue;
            }
            let script = Script::load(path).map_err(|err| RunError::config(err.to_string()))?;
            let server = ScriptedServer::start(script, SocketAddr::from(([127, 0, 0, 1], 0)))
                .await
                .map_err(RunError::io("cannot start the scripted model endpoint"))?;
            started.urls.insert(path.clone(), server.url());
            started.servers.push(server);
        }
        Ok(started)
    }

    async fn stop(self) {
        for server in self.servers {
            server.stop().await;
        }
    }
}

/// The trial's folder, emptied: a run killed mid-trial may have left part of its artifacts.
fn fresh_trial_dir(run_dir: &Path, task: &str, spec: &TrialSpec) -> Result<PathBuf, RunError> {
    let dir = layout::trial_path(run_dir, task, &spec.agent, spec.trial);
    std::fs::create_dir_all(&dir).map_err(RunError::io(format!(
        "cannot create the folder of {task} / {} #{}",
        spec.agent, spec.trial
    )))?;
    if std::fs::read_dir(&dir).is_ok_and(|mut entries| entries.next().is_some()) {
        std::fs::remove_dir_all(&dir)
            .and_then(|()| std::fs::create_dir_all(&dir))
            .map_err(RunError::io(format!("cannot clear {}", dir.display())))?;
    }
    Ok(dir)
}

/// The `worktree` backend for this plan, how the manifest describes it, and whether it makes
/// templates: overlay mounts over cached templates for the base commits provisioned more than
/// once, when the machine allows mounting; plain clones otherwise.
fn worktree_backend(
    plan: &Plan,
    commits: &[String],
    workspaces: &Path,
) -> (Arc<dyn WorkspaceBackend>, String, bool) {
    let keep = plan.request.keep_workspaces;
    let clone =
        || Arc::new(CloneBackend::new(workspaces).keeping(keep)) as Arc<dyn WorkspaceBackend>;
    let mut uses: HashMap<&str, usize> = HashMap::new();
    // Each trial provisions its commit twice: the agent's workspace and the one it is
    // verified in.
    for trial in &plan.trials {
        *uses.entry(commits[trial.task].as_str()).or_default() += 2;
    }
    let reused: HashSet<String> = uses
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(commit, _)| (*commit).to_owned())
        .collect();
    if reused.is_empty() {
        return (
            clone(),
            "clone (every base commit is provisioned once)".into(),
            false,
        );
    }
    match OverlayBackend::probe(workspaces) {
        Ok(()) => {
            let templates = plan.request.cache.join("templates");
            let described = format!(
                "overlay over cached templates for {} of {} base commits ({}), clone for the rest",
                reused.len(),
                uses.len(),
                templates.display()
            );
            (
                Arc::new(OverlayBackend::new(workspaces, &templates, reused, keep)),
                described,
                true,
            )
        }
        Err(reason) => (
            clone(),
            format!("clone (overlay unavailable: {reason})"),
            false,
        ),
    }
}

/// The prepared setup of each planned task that asks for one, and the provisioning described
/// with it. Without templates every setup runs in each trial, as the description then says.
fn preparations(
    plan: &Plan,
    suite: &Suite,
    source: &PreparedSource,
    commits: &[String],
    environments: &Environments,
    templates: bool,
    provisioning: String,
) -> (HashMap<usize, Arc<SetupPreparation>>, String) {
    let wanted: Vec<usize> = plan
        .tasks
        .iter()
        .copied()
        .filter(|&i| {
            let task = &suite.tasks[i];
            task.prepare && task.setup.is_some() && task.isolation != Isolation::Session
        })
        .collect();
    if wanted.is_empty() {
        return (HashMap::new(), provisioning);
    }
    if !templates {
        return (
            HashMap::new(),
            format!(
                "{provisioning}; setup runs in every trial (preparing it once needs overlay mounts)"
            ),
        );
    }
    let prepared = wanted
        .iter()
        .map(|&i| {
            let task = &suite.tasks[i];
            let history = source.repo_for(&commits[i]);
            let container = environments.policy(i, task, PathBuf::new(), history);
            let preparation = SetupPreparation::new(
                task.setup.as_deref().unwrap_or_default(),
                task.timeout,
                history,
                &commits[i],
                container,
                environments.ids.get(&i).map(String::as_str),
            );
            (i, Arc::new(preparation))
        })
        .collect();
    (
        prepared,
        format!(
            "{provisioning}; setup prepared once per template for {} of {} tasks",
            wanted.len(),
            plan.tasks.len()
        ),
    )
}

/// Removes what a fresh run directory holds before its first trial (the manifest, an empty
/// `trials.jsonl`, empty trial folders), and the directory itself when nothing else is in it.
fn remove_empty_run(run_dir: &Path) {
    let _ = std::fs::remove_file(run_dir.join(layout::MANIFEST));
    if std::fs::metadata(run_dir.join(layout::TRIALS_LOG)).is_ok_and(|m| m.len() == 0) {
        let _ = std::fs::remove_file(run_dir.join(layout::TRIALS_LOG));
    }
    remove_empty_dirs(&run_dir.join(layout::TRIALS_DIR));
    let _ = std::fs::remove_dir(run_dir);
}

fn remove_empty_dirs(dir: &Path) {
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                remove_empty_dirs(&entry.path());
            }
        }
    }
    let _ = std::fs::remove_dir(dir);
}

/// Prepares the source once and resolves every planned task's base commit.
fn prepare(
    suite: &Suite,
    root: &Path,
    cache: &Path,
    tasks: &[usize],
) -> Result<(PreparedSource, Vec<String>), RunError> {
    std::fs::create_dir_all(root)
        .map_err(RunError::io(format!("cannot create {}", root.display())))?;
    let mut source = prepare_source(&suite.repo, cache).map_err(RunError::config_because(
        format!("repo {} ({})", suite.repo.path.display(), suite.repo.kind),
    ))?;
    let mut commits = vec![String::new(); suite.tasks.len()];
    let mut resolved: IndexMap<String, String> = IndexMap::new();
    for &i in tasks {
        let base: &Located<String> = &suite.tasks[i].base;
        let commit = match resolved.get(&base.value) {
            Some(commit) => commit.clone(),
            None => {
                let commit = resolve_commit(&source.git_dir, &base.value).map_err(|message| {
                    RunError::Config {
                        context: format!("base '{}' of task '{}'", base.value, suite.tasks[i].id),
                        at: Some((suite.path.clone(), base.line, base.column)),
                        source: Some(message.into()),
                    }
                })?;
                resolved.insert(base.value.clone(), commit.clone());
                commit
            }
        };
        commits[i] = commit;
    }
    // Workspaces borrow objects from per-commit history repos, never the whole source.
    source
        .prepare_histories(resolved.values().map(String::as_str), cache)
        .map_err(|message| {
            RunError::io("cannot prepare the base commits' histories")(std::io::Error::other(
                message,
            ))
        })?;
    Ok((source, commits))
}

/// Now, as RFC 3339 UTC.
pub fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// Agent configurations as the manifest records them: values of `env:` entries whose names look
/// secret (API keys, tokens, passwords) are replaced, so the run directory never holds them.
pub(crate) fn recorded_agent_configs(
    agents: &IndexMap<String, AgentSpec>,
) -> IndexMap<String, serde_json::Value> {
    let mut configs = agent_configs(agents);
    for config in configs.values_mut() {
        if let Some(key) = config.get_mut("api_key") {
            *key = serde_json::Value::String("[REDACTED:api_key]".into());
        }
        if let Some(env) = config.get_mut("env").and_then(|e| e.as_object_mut()) {
            for (name, value) in env.iter_mut() {
                if trial::is_secret_name(name) {
                    *value = serde_json::Value::String(format!("[REDACTED:{name}]"));
                }
            }
        }
    }
    configs
}

/// What a sandboxed agent must not see even where a tree the sandbox exposes covers it (a CLI
/// installed in the suite's folder exposes that folder): the run's other workspaces, the run
/// directory and the `reports/` folder it sits in (earlier runs' diffs hold answers), the
/// suite's folder, the source repo, every hidden-test and solution path, and the cache
/// (prepared sources and later commits' histories). The sandbox is an allow-list, so none of it
/// is there otherwise. Nothing that is the file system's root is listed.
fn sandbox_hidden(suite: &Suite, root: &Path, run_dir: &Path, cache: &Path) -> Vec<PathBuf> {
    let mut hidden = vec![
        root.to_owned(),
        run_dir.to_owned(),
        cache.to_owned(),
        suite.repo.path.clone(),
    ];
    let run_dir = run_dir
        .canonicalize()
        .unwrap_or_else(|_| run_dir.to_owned());
    if let Some(reports) = run_dir
        .parent()
        .filter(|p| p.file_name().is_some_and(|n| n == "reports"))
    {
        hidden.push(reports.to_owned());
    }
    hidden.extend(suite.path.parent().map(Path::to_owned));
    for task in &suite.tasks {
        hidden.extend(
            task.tests
                .iter()
                .chain(&task.solution)
                .map(|o| o.path().to_owned())
                .chain(task.solution_script.clone()),
        );
    }
    hidden.retain(|dir| dir.parent().is_some());
    hidden.sort();
    hidden.dedup();
    hidden
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workspace_root_names_the_run_and_the_process() {
        let root = workspace_root(Path::new("/w"), Path::new("/runs/my run"), 42);
        assert_eq!(
            root,
            Path::new("/w").join(format!("deltabench-{}-42", sanitize("my run")))
        );
        assert_eq!(
            workspace_root(Path::new("/w"), Path::new("/"), 7),
            Path::new("/w/deltabench-run-7")
        );
    }
}
