//! The factory seam and the lifecycle: provision, construct, run, probe, dispose, score.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{FutureExt, StreamExt};
use tokio_util::sync::CancellationToken;

use crate::agent::harness::ProgramError;
use crate::agent::{CodingAgent, CodingResult, CodingTask, StreamEvent};
use crate::delta::{DeltaProbe, EnvironmentDelta, ProbeContext, ProbeError};
use crate::metric::{DeltaMetric, Metric, MetricError, Score};
use crate::support::panic_message;
use crate::workspace::{Isolation, ProvisionError, WorkspaceBase, WorkspaceProvisioner};

/// What a build function gets: the workspace it binds the agent to.
#[derive(Debug, Clone)]
pub struct BuildContext {
    /// The provisioned workspace the agent must work in.
    pub workspace: PathBuf,
    /// The tree-ish the workspace starts from (what the probe diffs against).
    pub base: String,
}

/// Why a build function could not construct its agent.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// The CLI's executable was not found.
    #[error(transparent)]
    Program(#[from] ProgramError),
    /// The agent names a scripted endpoint that was not started.
    #[error("no endpoint was started for {}", .0.display())]
    NoEndpoint(PathBuf),
    /// The solution script's folder could not be copied into the agent's home.
    #[error("cannot copy the solution script's folder: {0}")]
    CopySolution(std::io::Error),
    /// A build function of one's own failed.
    #[error("{0}")]
    Other(Box<dyn std::error::Error + Send + Sync>),
}

/// Builds agents bound to a workspace. It never provisions: the workspace exists already.
pub trait CodingAgentFactory: Send + Sync {
    /// The node for `workspace`, which starts from `base`; `signal` cancels its runs unless a
    /// task brings its own.
    fn create(
        &self,
        workspace: &Path,
        base: &str,
        signal: Option<CancellationToken>,
    ) -> Result<CodingNode, BuildError>;
}

/// A factory from any build function (bring your own harness) and a delta probe.
pub struct FnCodingAgentFactory<F> {
    build: F,
    probe: Arc<dyn DeltaProbe>,
}

impl<F> FnCodingAgentFactory<F>
where
    F: Fn(&BuildContext) -> Result<Arc<dyn CodingAgent>, BuildError> + Send + Sync,
{
    /// A factory calling `build` for each node and probing its workspace with `probe`.
    pub fn new(build: F, probe: Arc<dyn DeltaProbe>) -> Self {
        Self { build, probe }
    }
}

impl<F> CodingAgentFactory for FnCodingAgentFactory<F>
where
    F: Fn(&BuildContext) -> Result<Arc<dyn CodingAgent>, BuildError> + Send + Sync,
{
    fn create(
        &self,
        workspace: &Path,
        base: &str,
        signal: Option<CancellationToken>,
    ) -> Result<CodingNode, BuildError> {
        let agent = (self.build)(&BuildContext {
            workspace: workspace.to_owned(),
            base: base.to_owned(),
        })?;
        Ok(CodingNode {
            workspace: workspace.to_owned(),
            base: base.to_owned(),
            changes: None,
            agent,
            probe: self.probe.clone(),
            signal,
        })
    }
}

/// A coding agent already bound to its workspace.
pub struct CodingNode {
    workspace: PathBuf,
    base: String,
    /// Where the workspace records its changes, when it knows (an overlay's upper dir).
    changes: Option<PathBuf>,
    agent: Arc<dyn CodingAgent>,
    probe: Arc<dyn DeltaProbe>,
    signal: Option<CancellationToken>,
}

/// What one node run produced. `delta` is the scoring surface; `summary` is display only.
#[derive(Debug, Clone)]
pub struct CodingNodeOutcome {
    /// The workspace the agent ran in.
    pub workspace: PathBuf,
    /// The brief the agent was given.
    pub task: String,
    /// What changed in the workspace, as the probe saw it.
    pub delta: EnvironmentDelta,
    /// The agent's final text; `None` when it gave none.
    pub summary: Option<String>,
    /// The agent's own verdict.
    pub result: CodingResult,
}

impl CodingNode {
    /// The workspace the agent is bound to.
    pub fn workspace(&self) -> &Path {
        &self.workspace
    }

    /// The agent the node runs.
    pub fn agent(&self) -> &Arc<dyn CodingAgent> {
        &self.agent
    }

    /// Runs the agent, then probes the workspace. The task's own signal wins over the node's.
    pub async fn run(
        &self,
        task: impl Into<CodingTask>,
    ) -> Result<CodingNodeOutcome, NodeProbeError> {
        self.run_observed(task.into(), &mut |_| {}, &mut Lifecycle::default())
            .await
    }

    async fn run_observed(
        &self,
        mut task: CodingTask,
        on_event: &mut (dyn FnMut(&StreamEvent) + Send),
        lifecycle: &mut Lifecycle,
    ) -> Result<CodingNodeOutcome, NodeProbeError> {
        if task.signal.is_none() {
            task.signal = self.signal.clone();
        }
        let signal = task.signal.clone();
        let text = task.task.clone();
        let started = Instant::now();
        let mut handle = self.agent.run(task);
        while let Some(item) = handle.next().await {
            // The stream's final `Err` repeats the result's error; the result keeps it.
            if let Ok(event) = item {
                on_event(&event);
            }
        }
        let result = handle.await;
        lifecycle.record(Phase::Run, started.elapsed());

        let started = Instant::now();
        let ctx = ProbeContext {
            workspace: &self.workspace,
            task: &text,
            base: &self.base,
            signal: signal.as_ref(),
            changes: self.changes.as_deref(),
        };
        let delta = self.probe.probe(&ctx).await;
        lifecycle.record(Phase::Probe, started.elapsed());
        let delta = delta.map_err(|error| NodeProbeError {
            error,
            result: Box::new(result.clone()),
        })?;
        Ok(CodingNodeOutcome {
            workspace: self.workspace.clone(),
            task: text,
            delta,
            summary: result.output.text.clone(),
            result,
        })
    }
}

/// A lifecycle step, in the order they run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Making the template the workspace is a view of: shared by every trial on that base.
    Prepare,
    /// Making the trial's own workspace.
    Provision,
    /// Building the agent bound to it.
    Construct,
    /// The agent's run, until its result resolves.
    Run,
    /// Reading the workspace's change.
    Probe,
    /// Removing the workspace.
    Dispose,
    /// Scoring the change with the metric.
    Score,
}

/// Which steps ran, in order, and how long each took.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Lifecycle {
    /// Each step and its duration in microseconds.
    pub steps: Vec<(Phase, u64)>,
    /// Set when dispose ran but could not remove everything.
    pub dispose_error: Option<String>,
}

impl Lifecycle {
    fn record(&mut self, phase: Phase, took: Duration) {
        self.steps.push((phase, took.as_micros() as u64));
    }

    /// How many times `phase` ran.
    pub fn count(&self, phase: Phase) -> usize {
        self.steps.iter().filter(|(p, _)| *p == phase).count()
    }

    /// The time spent in `phase`, summed over its runs, in microseconds.
    pub fn micros(&self, phase: Phase) -> u64 {
        self.steps
            .iter()
            .filter(|(p, _)| *p == phase)
            .map(|(_, us)| us)
            .sum()
    }
}

/// Everything [`run_coding_node`] needs.
pub struct RunCodingNode<'a> {
    /// Builds the agent once the workspace exists.
    pub factory: &'a dyn CodingAgentFactory,
    /// Makes (and later disposes) the workspace.
    pub provisioner: &'a dyn WorkspaceProvisioner,
    /// What the workspace starts from.
    pub base: &'a WorkspaceBase,
    /// Which workspace to provision: the suite's tree, a clone, or a sandboxed clone.
    pub isolation: Isolation,
    /// The agent's task.
    pub task: CodingTask,
    /// Used when the task carries no signal of its own.
    pub signal: Option<CancellationToken>,
    /// Defaults to [`DeltaMetric`].
    pub metric: Option<&'a dyn Metric>,
    /// Sees every event as it arrives.
    pub on_event: Option<&'a mut (dyn FnMut(&StreamEvent) + Send)>,
}

/// The scored outcome of one lifecycle.
#[derive(Debug, Clone)]
pub struct NodeReport {
    /// What the run produced.
    pub outcome: CodingNodeOutcome,
    /// The metric's score of its delta.
    pub score: Score,
}

/// The probe failed after the agent ran: why, and the agent's result, kept so the failure
/// record still says what the agent did.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct NodeProbeError {
    /// Why the probe failed.
    pub error: ProbeError,
    /// The agent's result from the run before it.
    pub result: Box<CodingResult>,
}

/// Why a lifecycle produced no score. The workspace is disposed in every case but `Provision`.
#[derive(Debug, thiserror::Error)]
pub enum RunNodeError {
    /// Unchanged from the provisioner; no agent was constructed.
    #[error(transparent)]
    Provision(#[from] ProvisionError),
    /// The factory could not build the agent.
    #[error("cannot construct the agent: {0}")]
    Construct(BuildError),
    /// The agent's run panicked; holds the panic's message.
    #[error("the agent panicked: {0}")]
    AgentPanicked(String),
    /// The probe failed after the agent ran.
    #[error(transparent)]
    Probe(#[from] NodeProbeError),
    /// The metric could not score the delta.
    #[error(transparent)]
    Metric(#[from] MetricError),
}

/// Provision, construct, run, probe, dispose (exactly once, on every path), then score.
///
/// Returns the lifecycle trace beside the result so callers can see what ran and for how long.
pub async fn run_coding_node(
    opts: RunCodingNode<'_>,
) -> (Result<NodeReport, RunNodeError>, Lifecycle) {
    let mut lifecycle = Lifecycle::default();
    let result = run_inner(opts, &mut lifecycle).await;
    (result, lifecycle)
}

async fn run_inner(
    opts: RunCodingNode<'_>,
    lifecycle: &mut Lifecycle,
) -> Result<NodeReport, RunNodeError> {
    let RunCodingNode {
        factory,
        provisioner,
        base,
        isolation,
        mut task,
        signal,
        metric,
        on_event,
    } = opts;
    let started = Instant::now();
    let workspace = provisioner.provision(base, isolation).await;
    let took = started.elapsed();
    match workspace.as_ref().ok().and_then(|w| w.preparation) {
        Some(preparation) => {
            lifecycle.record(Phase::Prepare, preparation);
            lifecycle.record(Phase::Provision, took.saturating_sub(preparation));
        }
        None => lifecycle.record(Phase::Provision, took),
    }
    let workspace = workspace?;

    if task.signal.is_none() {
        task.signal = signal.clone();
    }
    let mut ignore = |_: &StreamEvent| {};
    let on_event: &mut (dyn FnMut(&StreamEvent) + Send) = match on_event {
        Some(f) => f,
        None => &mut ignore,
    };
    let body = async {
        let started = Instant::now();
        // Construction is never cancelled; the run is.
        let node = factory.create(&workspace.path, &workspace.base, signal);
        lifecycle.record(Phase::Construct, started.elapsed());
        let mut node = node.map_err(RunNodeError::Construct)?;
        node.changes = workspace.changes.clone();
        node.run_observed(task, on_event, lifecycle)
            .await
            .map_err(RunNodeError::from)
    };
    let ran = std::panic::AssertUnwindSafe(body).catch_unwind().await;

    let started = Instant::now();
    let disposed = tokio::task::spawn_blocking(move || workspace.dispose()).await;
    lifecycle.record(Phase::Dispose, started.elapsed());
    let outcome = match ran {
        Ok(outcome) => outcome?,
        Err(panic) => return Err(RunNodeError::AgentPanicked(panic_message(&*panic))),
    };
    if let Ok(Err(err)) | Err(err) = disposed.map_err(std::io::Error::other) {
        // A failed dispose must not cost the trial its verdict; the caller sees it in the trace.
        lifecycle.dispose_error = Some(err.to_string());
    }

    let started = Instant::now();
    let default_metric = DeltaMetric;
    let metric = metric.unwrap_or(&default_metric);
    let score = metric.score(&outcome.delta).await;
    lifecycle.record(Phase::Score, started.elapsed());
    Ok(NodeReport {
        outcome,
        score: score?,
    })
}
