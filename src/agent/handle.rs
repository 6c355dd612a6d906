//! The run handle: a stream of events that is also awaitable to the final result.

use std::collections::VecDeque;
use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use futures::future::BoxFuture;
use futures::{FutureExt, Stream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::types::{
    CodingError, CodingInput, CodingResult, CodingStatus, CodingTask, ErrorCode, StreamEvent,
    new_session_id,
};

/// Events buffered between an agent and its consumer before the agent waits.
const EVENT_BUFFER: usize = 256;

/// What an agent's run body gets: where to send events, its inputs, and its cancel token.
pub struct RunContext {
    events: mpsc::Sender<StreamEvent>,
    /// `message` and `tool_response` inputs sent through the handle.
    pub inputs: mpsc::UnboundedReceiver<CodingInput>,
    /// Fires on `abort()`, `send(Abort)`, the task's signal, or the deadline.
    pub cancel: CancellationToken,
}

impl RunContext {
    /// Sends an event to the handle. Returns false when nobody listens any more.
    pub async fn emit(&self, event: StreamEvent) -> bool {
        self.events.send(event).await.is_ok()
    }
}

/// A running agent: iterate it for events, then `.await` it (or just `.await` it) for the result.
///
/// Iterating yields `Ok(event)` for each event and, when the run failed with status `error`,
/// one final `Err(CodingError)`. Awaiting drains whatever the stream has not yet yielded and
/// resolves the [`CodingResult`], whose status then says `error`. Dropping the handle aborts the
/// run.
pub struct CodingHandle {
    events: mpsc::Receiver<StreamEvent>,
    pending: VecDeque<StreamEvent>,
    join: Option<JoinHandle<CodingResult>>,
    result: Option<CodingResult>,
    error_yielded: bool,
    inputs: mpsc::UnboundedSender<CodingInput>,
    accepts_input: bool,
    agent_name: String,
    cancel: CancellationToken,
}

impl CodingHandle {
    /// Starts `body` on the runtime and returns its handle.
    ///
    /// The wrapper threads cancellation (the task's signal, `abort`, drop), enforces the task's
    /// deadline (`max_duration`), turns a panic in `body` into an `error` result, and stamps the
    /// duration. `accepts_input` says whether `message`/`tool_response` inputs reach `body`;
    /// when false they are ignored with a warning event.
    pub fn spawn<F, Fut>(agent_name: &str, task: &CodingTask, accepts_input: bool, body: F) -> Self
    where
        F: FnOnce(RunContext) -> Fut + Send + 'static,
        Fut: Future<Output = CodingResult> + Send + 'static,
    {
        let cancel = match &task.signal {
            Some(signal) => signal.child_token(),
            None => CancellationToken::new(),
        };
        let (event_tx, event_rx) = mpsc::channel(EVENT_BUFFER);
        let (input_tx, input_rx) = mpsc::unbounded_channel();
        let ctx = RunContext {
            events: event_tx,
            inputs: input_rx,
            cancel: cancel.clone(),
        };
        let deadline = task.deadline;
        let run_cancel = cancel.clone();
        let session_hint = task.session_id.clone();
        let join = tokio::spawn(async move {
            let started = Instant::now();
            let guarded = std::panic::AssertUnwindSafe(body(ctx)).catch_unwind();
            let outcome = match deadline {
                None => guarded.await,
                Some(limit) => {
                    tokio::pin!(guarded);
                    tokio::select! {
                        out = &mut guarded => out,
                        () = tokio::time::sleep(limit) => {
                            run_cancel.cancel();
                            // The body sees the cancel and ends; its result is then relabelled.
                            let mut out = guarded.await;
                            if let Ok(result) = out.as_mut() {
                                result.status = CodingStatus::MaxDuration;
                                result.error = Some(CodingError::new(
                                    ErrorCode::Timeout,
                                    format!("agent exceeded its time limit of {}", humantime::format_duration(limit)),
                                ));
                            }
                            out
                        }
                    }
                }
            };
            let mut result = outcome.unwrap_or_else(|panic| {
                let session = session_hint.unwrap_or_else(new_session_id);
                CodingResult::failed(
                    session,
                    CodingError::new(
                        ErrorCode::SdkError,
                        format!("agent panicked: {}", crate::support::panic_message(&*panic)),
                    ),
                )
            });
            result
                .duration_ms
                .get_or_insert(started.elapsed().as_millis() as u64);
            result
        });
        Self {
            events: event_rx,
            pending: VecDeque::new(),
            join: Some(join),
            result: None,
            error_yielded: false,
            inputs: input_tx,
            accepts_input,
            agent_name: agent_name.to_owned(),
            cancel,
        }
    }

    /// Sends an input to the run. `abort` cancels it; agents that take no other input log a
    /// warning event and ignore it.
    pub fn send(&mut self, input: CodingInput) {
        match input {
            CodingInput::Abort => self.abort(),
            other if self.accepts_input => {
                let _ = self.inputs.send(other);
            }
            other => self.pending.push_back(StreamEvent::System {
                subtype: "warning".into(),
                message: format!(
                    "agent '{}' does not accept '{}' input; ignored",
                    self.agent_name,
                    other.kind()
                ),
                data: None,
            }),
        }
    }

    /// Cancels the run; it resolves with status `aborted`.
    pub fn abort(&self) {
        self.cancel.cancel();
    }

    /// A token that aborts this run when cancelled.
    pub fn abort_token(&self) -> CancellationToken {
        self.cancel.clone()
    }

    fn poll_result(&mut self, cx: &mut Context<'_>) -> Poll<&CodingResult> {
        if self.result.is_none() {
            let Some(join) = self.join.as_mut() else {
                unreachable!("a handle always has either a join handle or a result");
            };
            let joined = std::task::ready!(Pin::new(join).poll(cx));
            self.join = None;
            self.result = Some(joined.unwrap_or_else(|err| {
                CodingResult::failed(
                    new_session_id(),
                    CodingError::new(ErrorCode::SdkError, format!("agent task failed: {err}")),
                )
            }));
        }
        Poll::Ready(self.result.as_ref().expect("set above"))
    }
}

impl Stream for CodingHandle {
    type Item = Result<StreamEvent, CodingError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if let Some(event) = this.pending.pop_front() {
            return Poll::Ready(Some(Ok(event)));
        }
        if this.result.is_none() {
            match this.events.poll_recv(cx) {
                Poll::Ready(Some(event)) => return Poll::Ready(Some(Ok(event))),
                Poll::Ready(None) => {}
                Poll::Pending => return Poll::Pending,
            }
        }
        let result = std::task::ready!(this.poll_result(cx));
        let failed = (result.status == CodingStatus::Error).then(|| {
            result.error.clone().unwrap_or_else(|| {
                CodingError::new(ErrorCode::Unknown, "the run failed without an error")
            })
        });
        if let Some(error) = failed
            && !this.error_yielded
        {
            this.error_yielded = true;
            return Poll::Ready(Some(Err(error)));
        }
        Poll::Ready(None)
    }
}

impl IntoFuture for CodingHandle {
    type Output = CodingResult;
    type IntoFuture = BoxFuture<'static, CodingResult>;

    fn into_future(mut self) -> Self::IntoFuture {
        Box::pin(async move {
            // Drain the stream so the agent is never blocked on a full channel.
            while self.events.recv().await.is_some() {}
            std::future::poll_fn(|cx| self.poll_result(cx).map(Clone::clone)).await
        })
    }
}

impl Drop for CodingHandle {
    fn drop(&mut self) {
        if self.result.is_none() {
            self.cancel.cancel();
        }
    }
}
