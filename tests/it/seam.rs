//! The agent seam as a library: handles, the tool form, factories and the lifecycle.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use deltabench::agent::{
    CodingAgent, CodingInput, CodingStatus, CodingTask, CodingToolOptions, ErrorCode, MockAgent,
    MockArtifact, MockConfig, NoopAgent, SimulatedError, StreamEvent, as_tool,
};
use deltabench::delta::{CommandResult, DeltaProbe, EnvironmentDelta, ProbeContext, ProbeError};
use deltabench::lifecycle::{
    BuildContext, BuildError, CodingAgentFactory, FnCodingAgentFactory, Phase, RunCodingNode,
    RunNodeError, run_coding_node,
};
use deltabench::metric::{CustomMetric, Metric};
use deltabench::workspace::{
    BackendProvisioner, ISOLATION_STRATEGIES, Isolation, ProvisionError, ProvisionedWorkspace,
    WorkspaceBackend, WorkspaceBase, WorkspaceProvisionError, WorkspaceProvisioner,
    is_isolation_strategy,
};
use futures::StreamExt;
use futures::future::BoxFuture;
use serde_json::json;
use tokio_util::sync::CancellationToken;

fn script() -> MockConfig {
    MockConfig {
        responses: vec![
            StreamEvent::Assistant {
                text: "Reading the failing test...".into(),
            },
            StreamEvent::ToolCall {
                id: None,
                name: "write".into(),
                args: json!({"path": "src/auth.ts", "content": "..."}),
            },
            StreamEvent::ToolResult {
                id: None,
                name: Some("write".into()),
                result: json!("File written"),
                is_error: false,
            },
            StreamEvent::Assistant {
                text: "Fixed.".into(),
            },
        ],
        artifacts: vec![MockArtifact {
            name: "summary.md".into(),
            content: "# Summary\nDone.".into(),
        }],
        ..MockConfig::default()
    }
}

#[tokio::test]
async fn handle_streams_then_awaits_the_same_run() {
    let mut handle = MockAgent::new(script()).run("Fix the failing test".into());
    let mut kinds = Vec::new();
    while let Some(event) = handle.next().await {
        kinds.push(match event.unwrap() {
            StreamEvent::Assistant { .. } => "assistant",
            StreamEvent::ToolCall { .. } => "tool_call",
            StreamEvent::ToolResult { .. } => "tool_result",
            _ => "other",
        });
    }
    assert_eq!(
        kinds,
        ["assistant", "tool_call", "tool_result", "assistant"]
    );
    let result = handle.await;
    assert_eq!(result.status, CodingStatus::Completed);
    assert_eq!(result.output.modified_files, ["src/auth.ts"]);
    assert_eq!(result.output.text.as_deref(), Some("Fixed."));
    assert_eq!(result.output.metadata["artifacts"][0]["name"], "summary.md");
    assert!(!result.session_id.is_empty());
}

#[tokio::test]
async fn awaiting_alone_drains_the_stream() {
    let mut config = script();
    config.responses = (0..2000)
        .map(|i| StreamEvent::Assistant {
            text: i.to_string(),
        })
        .collect();
    let result = MockAgent::new(config).run("x".into()).await;
    assert_eq!(result.status, CodingStatus::Completed);
    assert_eq!(result.output.text.as_deref(), Some("1999"));
}

fn flaky() -> MockAgent {
    MockAgent::new(MockConfig {
        responses: vec![StreamEvent::Assistant {
            text: "Starting...".into(),
        }],
        simulate_error: Some(SimulatedError {
            after: 1,
            message: "harness died".into(),
            code: ErrorCode::SdkError,
        }),
        ..MockConfig::default()
    })
}

#[tokio::test]
async fn a_failing_handle_errors_when_iterated_and_resolves_error_when_awaited() {
    let mut handle = flaky().run("x".into());
    assert!(matches!(
        handle.next().await,
        Some(Ok(StreamEvent::Assistant { .. }))
    ));
    let err = handle.next().await.unwrap().unwrap_err();
    assert_eq!(
        (err.code, err.message.as_str()),
        (ErrorCode::SdkError, "harness died")
    );
    assert!(handle.next().await.is_none());
    let result = handle.await;
    assert_eq!(result.status, CodingStatus::Error);
    assert_eq!(result.error.unwrap().message, "harness died");

    let awaited = flaky().run("x".into()).await;
    assert_eq!(awaited.status, CodingStatus::Error);
}

#[tokio::test]
async fn tool_form_rejects_where_run_resolves() {
    let err = flaky()
        .execute(deltabench::agent::CodingToolInput {
            task: "x".into(),
            session_id: None,
        })
        .await;
    assert_eq!(err.unwrap_err().message, "harness died");

    let tool = as_tool(
        Arc::new(NoopAgent::default()),
        CodingToolOptions {
            name: Some("code".into()),
            description: Some("Delegates coding.".into()),
        },
    );
    assert_eq!(
        (tool.name.as_str(), tool.description.as_str()),
        ("code", "Delegates coding.")
    );
    assert_eq!(tool.schema["required"], json!(["task"]));
    assert!(tool.schema["properties"]["sessionId"].is_object());
    let ok = tool
        .execute(json!({"task": "do it", "sessionId": "s-1"}))
        .await
        .unwrap();
    assert_eq!(
        (ok.status, ok.session_id.as_str()),
        (CodingStatus::Completed, "s-1")
    );
    assert!(ok.output.modified_files.is_empty());
    assert!(
        tool.execute(json!({"prompt": "missing task"}))
            .await
            .is_err()
    );
}

fn slow_mock() -> MockAgent {
    MockAgent::new(MockConfig {
        responses: (0..100)
            .map(|i| StreamEvent::Assistant {
                text: i.to_string(),
            })
            .collect(),
        delay: Some(Duration::from_millis(20)),
        ..MockConfig::default()
    })
}

#[tokio::test]
async fn abort_send_abort_signal_and_deadline_all_stop_the_mock() {
    let handle = slow_mock().run("x".into());
    handle.abort();
    assert_eq!(handle.await.status, CodingStatus::Aborted);

    let mut handle = slow_mock().run("x".into());
    handle.send(CodingInput::Abort);
    assert_eq!(handle.await.status, CodingStatus::Aborted);

    let signal = CancellationToken::new();
    let handle = slow_mock().run(CodingTask {
        task: "x".into(),
        signal: Some(signal.clone()),
        ..CodingTask::default()
    });
    signal.cancel();
    assert_eq!(handle.await.status, CodingStatus::Aborted);

    let result = slow_mock()
        .run(CodingTask {
            task: "x".into(),
            deadline: Some(Duration::from_millis(100)),
            ..CodingTask::default()
        })
        .await;
    assert_eq!(result.status, CodingStatus::MaxDuration);
    assert_eq!(result.error.unwrap().code, ErrorCode::Timeout);
}

#[tokio::test]
async fn unsupported_inputs_are_ignored_with_a_warning() {
    let mut handle = slow_mock().run("x".into());
    handle.send(CodingInput::Message {
        text: "hurry".into(),
    });
    let first = handle.next().await.unwrap().unwrap();
    assert!(
        matches!(&first, StreamEvent::System { subtype, message, .. } if subtype == "warning" && message.contains("'message'")),
        "{first:?}"
    );
    handle.abort();
}

#[test]
fn isolation_strategies_are_named_and_checked() {
    assert_eq!(ISOLATION_STRATEGIES, ["session", "worktree", "sandbox"]);
    assert!(is_isolation_strategy("worktree") && !is_isolation_strategy("container"));
    let err = "container".parse::<Isolation>().unwrap_err();
    assert_eq!(
        err.to_string(),
        "unknown isolation strategy: 'container'. Valid strategies: session, worktree, sandbox"
    );
}

/// A backend that hands out a temp dir and counts disposals.
struct CountingBackend {
    root: PathBuf,
    disposed: Arc<AtomicUsize>,
}

impl WorkspaceBackend for CountingBackend {
    fn provision(
        &self,
        base: &WorkspaceBase,
    ) -> Result<ProvisionedWorkspace, WorkspaceProvisionError> {
        let path = self.root.join(&base.name);
        std::fs::create_dir_all(&path).unwrap();
        let disposed = self.disposed.clone();
        let gone = path.clone();
        Ok(ProvisionedWorkspace::new(
            path,
            Isolation::Worktree,
            base.commit.clone(),
            move || {
                disposed.fetch_add(1, Ordering::SeqCst);
                std::fs::remove_dir_all(gone)
            },
        ))
    }
}

/// A probe that records whether the workspace still existed when it ran.
struct ExistsProbe;

impl DeltaProbe for ExistsProbe {
    fn probe<'a>(
        &'a self,
        ctx: &'a ProbeContext<'a>,
    ) -> BoxFuture<'a, Result<EnvironmentDelta, ProbeError>> {
        let exists = ctx.workspace.is_dir();
        Box::pin(async move {
            Ok(EnvironmentDelta {
                diff: if exists {
                    "+probed before dispose".into()
                } else {
                    String::new()
                },
                command_result: CommandResult {
                    command: "true".into(),
                    exit_code: Some(0),
                    ..CommandResult::default()
                },
                ..EnvironmentDelta::default()
            })
        })
    }
}

struct Fixture {
    _dir: tempfile::TempDir,
    provisioner: BackendProvisioner,
    disposed: Arc<AtomicUsize>,
    base: WorkspaceBase,
}

fn fixture() -> Fixture {
    let dir = crate::common::temp_dir();
    let disposed = Arc::new(AtomicUsize::new(0));
    let provisioner = BackendProvisioner::new().with(
        Isolation::Worktree,
        CountingBackend {
            root: dir.path().to_owned(),
            disposed: disposed.clone(),
        },
    );
    Fixture {
        provisioner,
        disposed,
        base: WorkspaceBase::new(dir.path().to_owned(), "base".into(), "ws".into()),
        _dir: dir,
    }
}

fn factory_of(agent: MockAgent, built: Arc<AtomicUsize>) -> impl CodingAgentFactory {
    FnCodingAgentFactory::new(
        move |_ctx: &BuildContext| -> Result<Arc<dyn CodingAgent>, BuildError> {
            built.fetch_add(1, Ordering::SeqCst);
            Ok(Arc::new(agent.clone()))
        },
        Arc::new(ExistsProbe),
    )
}

async fn lifecycle(
    agent: MockAgent,
    task: CodingTask,
    isolation: Isolation,
) -> (
    Fixture,
    usize,
    Result<deltabench::lifecycle::NodeReport, RunNodeError>,
    deltabench::lifecycle::Lifecycle,
) {
    let fx = fixture();
    let built = Arc::new(AtomicUsize::new(0));
    let factory = factory_of(agent, built.clone());
    let (result, trace) = run_coding_node(RunCodingNode {
        factory: &factory,
        provisioner: &fx.provisioner,
        base: &fx.base,
        isolation,
        task,
        signal: None,
        metric: None,
        on_event: None,
    })
    .await;
    let built = built.load(Ordering::SeqCst);
    (fx, built, result, trace)
}

#[tokio::test]
async fn run_coding_node_disposes_exactly_once_on_every_path() {
    let panicking = MockAgent::new(MockConfig {
        simulate_panic: Some(0),
        ..script()
    });
    let cases: Vec<(&str, MockAgent, CodingTask, CodingStatus)> = vec![
        (
            "ok",
            MockAgent::new(script()),
            "x".into(),
            CodingStatus::Completed,
        ),
        ("error", flaky(), "x".into(), CodingStatus::Error),
        ("panic", panicking, "x".into(), CodingStatus::Error),
        (
            "timeout",
            slow_mock(),
            CodingTask {
                task: "x".into(),
                deadline: Some(Duration::from_millis(50)),
                ..CodingTask::default()
            },
            CodingStatus::MaxDuration,
        ),
        (
            "abort",
            slow_mock(),
            CodingTask {
                task: "x".into(),
                signal: Some(cancelled_soon()),
                ..CodingTask::default()
            },
            CodingStatus::Aborted,
        ),
    ];
    for (name, agent, task, status) in cases {
        let (fx, built, result, trace) = lifecycle(agent, task, Isolation::Worktree).await;
        assert_eq!(
            fx.disposed.load(Ordering::SeqCst),
            1,
            "{name}: dispose count"
        );
        assert_eq!(built, 1, "{name}");
        assert_eq!(trace.count(Phase::Dispose), 1, "{name}");
        let order: Vec<Phase> = trace.steps.iter().map(|(p, _)| *p).collect();
        assert_eq!(
            order,
            [
                Phase::Provision,
                Phase::Construct,
                Phase::Run,
                Phase::Probe,
                Phase::Dispose,
                Phase::Score
            ],
            "{name}"
        );
        let report = result.unwrap();
        assert_eq!(report.outcome.result.status, status, "{name}");
        // The probe ran before dispose: it saw the workspace.
        assert!(
            report.score.passed,
            "{name}: scored on the delta, not on the status"
        );
        assert!(
            !fx.base.repo.join("ws").exists(),
            "{name}: workspace left behind"
        );
    }
}

fn cancelled_soon() -> CancellationToken {
    let token = CancellationToken::new();
    let later = token.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        later.cancel();
    });
    token
}

#[tokio::test]
async fn provisioning_errors_surface_unchanged_before_any_agent_is_built() {
    // An unknown strategy is refused where it is read (the suite file, `Isolation::from_str`,
    // tested above); a strategy without a backend fails at provisioning.
    let (fx, built, result, trace) =
        lifecycle(MockAgent::new(script()), "x".into(), Isolation::Sandbox).await;
    let err = result.unwrap_err();
    assert!(matches!(
        &err,
        RunNodeError::Provision(ProvisionError::Provision(_))
    ));
    assert!(
        err.to_string()
            .contains("no backend is registered for the `sandbox` strategy"),
        "{err}"
    );
    assert_eq!((built, fx.disposed.load(Ordering::SeqCst)), (0, 0));
    assert_eq!(trace.count(Phase::Construct), 0);
}

#[tokio::test]
async fn the_tasks_own_signal_wins_over_the_nodes() {
    let fx = fixture();
    let workspace = fx
        .provisioner
        .provision(&fx.base, Isolation::Worktree)
        .await
        .unwrap();
    let factory = factory_of(slow_mock(), Arc::new(AtomicUsize::new(0)));
    let node_signal = CancellationToken::new();
    let node = factory
        .create(&workspace.path, &workspace.base, Some(node_signal.clone()))
        .unwrap();
    node_signal.cancel();
    // The task carries its own (live) token, so the cancelled node signal does not apply.
    let own = CancellationToken::new();
    let outcome = node
        .run(CodingTask {
            task: "x".into(),
            signal: Some(own),
            deadline: Some(Duration::from_millis(200)),
            ..CodingTask::default()
        })
        .await
        .unwrap();
    assert_eq!(outcome.result.status, CodingStatus::MaxDuration);
    // Without one, the node's signal applies.
    let outcome = node.run("x").await.unwrap();
    assert_eq!(outcome.result.status, CodingStatus::Aborted);
    workspace.dispose().unwrap();
}

#[tokio::test]
async fn a_custom_metric_sees_only_the_delta() {
    let seen = Arc::new(Mutex::new(String::new()));
    let record = seen.clone();
    let metric = CustomMetric::new("saw", move |delta: &EnvironmentDelta| {
        *record.lock().unwrap() = serde_json::to_string(delta).unwrap();
        false
    });
    let delta = EnvironmentDelta {
        diff: "+x".into(),
        command_result: CommandResult::default(),
        ..EnvironmentDelta::default()
    };
    let score = metric.score(&delta).await.unwrap();
    assert!(!score.passed);
    let fields: serde_json::Value = serde_json::from_str(&seen.lock().unwrap()).unwrap();
    let mut keys: Vec<_> = fields.as_object().unwrap().keys().cloned().collect();
    keys.sort();
    assert_eq!(keys, ["command_result", "diff"]);
}
