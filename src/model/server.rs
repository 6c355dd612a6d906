//! The HTTP server: one catch-all handler that records each request and routes it by path to
//! the protocol that answers it.

use std::collections::VecDeque;
use std::io::Write;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::Response;
use serde_json::{Map, Value, json};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::script::Script;
use super::{anthropic, chat, gemini, request, responses};

/// How many requests [`ScriptedServer::requests`] keeps; `--log` writes them all.
pub(super) const RECORDED_REQUESTS: usize = 1000;

/// Where each request is also written, as one JSON line.
pub type RequestLog = Box<dyn Write + Send>;

struct Shared {
    script: Script,
    /// The latest requests, at most [`RECORDED_REQUESTS`] (a long run must not grow without end).
    requests: Mutex<VecDeque<Value>>,
    log: Option<Mutex<RequestLog>>,
}

/// A scripted model endpoint on a local port, serving from the current tokio runtime.
pub struct ScriptedServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    served: Served,
}

/// A router served on a listener from the current tokio runtime, until stopped or dropped.
pub struct Served {
    shutdown: CancellationToken,
    task: JoinHandle<()>,
}

/// `listener` with Nagle's algorithm off on every connection: else a streamed answer's small
/// writes wait for the client's delayed ACK, about 40 ms at a stream's start.
pub fn without_delay(
    listener: tokio::net::TcpListener,
) -> impl axum::serve::Listener<Addr = SocketAddr> {
    use axum::serve::ListenerExt;
    listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    })
}

impl Served {
    /// Serves `router` on `listener` until stopped or dropped.
    pub fn start<L>(listener: L, router: Router) -> Self
    where
        L: axum::serve::Listener,
        L::Addr: std::fmt::Debug,
    {
        let shutdown = CancellationToken::new();
        let stopped = shutdown.clone().cancelled_owned();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, router)
                .with_graceful_shutdown(stopped)
                .await;
        });
        Self { shutdown, task }
    }

    /// Stops accepting, lets answers in flight finish for at most `grace`, then drops them
    /// (keep-alive connections of a client still running would hold a graceful shutdown open).
    pub async fn stop(self, grace: Duration) {
        self.shutdown.cancel();
        let mut task = self.task;
        if tokio::time::timeout(grace, &mut task).await.is_err() {
            task.abort();
        }
    }

    /// Stops at once, dropping what is in flight.
    pub fn abort(&self) {
        self.shutdown.cancel();
        self.task.abort();
    }
}

impl ScriptedServer {
    /// Binds `addr` (port 0: any free port) and starts answering with `script`.
    pub async fn start(script: Script, addr: SocketAddr) -> std::io::Result<ScriptedServer> {
        Self::start_with_log(script, addr, None).await
    }

    /// As [`Self::start`], also writing every request to `log` as a JSON line.
    pub async fn start_with_log(
        script: Script,
        addr: SocketAddr,
        log: Option<RequestLog>,
    ) -> std::io::Result<ScriptedServer> {
        let listener = tokio::net::TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let listener = without_delay(listener);
        let shared = Arc::new(Shared {
            script,
            requests: Mutex::new(VecDeque::new()),
            log: log.map(Mutex::new),
        });
        let router = Router::new().fallback(handle).with_state(shared.clone());
        Ok(ScriptedServer {
            addr,
            shared,
            served: Served::start(listener, router),
        })
    }

    /// The root URL, `http://127.0.0.1:PORT` (OpenAI-style clients want `<url>/v1`).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The requests seen so far, oldest first (the latest [`RECORDED_REQUESTS`]):
    /// `{method, path, headers (auth redacted), body}`.
    pub fn requests(&self) -> Vec<Value> {
        self.shared
            .requests
            .lock()
            .map(|r| r.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Stops accepting, lets answers in flight finish (for a moment), and returns.
    pub async fn stop(self) {
        self.served.stop(Duration::from_secs(2)).await;
    }
}

/// Headers as JSON, with credentials replaced by their length.
fn headers_json(headers: &HeaderMap) -> Value {
    const SECRET: [&str; 5] = [
        "authorization",
        "proxy-authorization",
        "x-api-key",
        "x-goog-api-key",
        "api-key",
    ];
    let mut out = Map::new();
    for (name, value) in headers {
        let text = String::from_utf8_lossy(value.as_bytes()).into_owned();
        let shown = if SECRET.contains(&name.as_str()) {
            format!("<redacted len={}>", text.len())
        } else {
            text
        };
        out.insert(name.as_str().to_owned(), json!(shown));
    }
    Value::Object(out)
}

async fn handle(State(shared): State<Arc<Shared>>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let bytes = axum::body::to_bytes(body, usize::MAX)
        .await
        .unwrap_or_default();
    let body: Value = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).unwrap_or_else(|_| json!(String::from_utf8_lossy(&bytes)))
    };
    let path = parts
        .uri
        .path_and_query()
        .map_or(parts.uri.path(), |p| p.as_str())
        .to_owned();
    let (response, note) = route(&shared.script, &parts.method, &parts.headers, &path, &body);
    let mut record = json!({
        "method": parts.method.as_str(),
        "path": path,
        "headers": headers_json(&parts.headers),
        "body": body,
        "status": response.status().as_u16(),
    });
    if let Some(note) = note {
        record["note"] = json!(note);
    }
    if let Some(log) = &shared.log
        && let Ok(mut log) = log.lock()
    {
        let _ = writeln!(log, "{record}").and_then(|()| log.flush());
    }
    if let Ok(mut requests) = shared.requests.lock() {
        if requests.len() == RECORDED_REQUESTS {
            requests.pop_front();
        }
        requests.push_back(record);
    }
    response
}

/// Answers one request; the note marks requests no protocol here knows.
fn route(
    script: &Script,
    method: &Method,
    headers: &HeaderMap,
    path_and_query: &str,
    body: &Value,
) -> (Response, Option<&'static str>) {
    let path = path_and_query.split('?').next().unwrap_or("");
    if method == Method::HEAD {
        return (Response::new(Body::empty()), None);
    }
    let upgrade = headers
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    if upgrade {
        // Codex's built-in provider then falls back to SSE at once.
        let mut response = request::json(
            StatusCode::UPGRADE_REQUIRED,
            &json!({"error": {"message": "websockets are not supported; use SSE"}}),
        );
        *response.status_mut() = StatusCode::UPGRADE_REQUIRED;
        return (response, Some("websocket refused"));
    }
    let last = path.rsplit('/').next().unwrap_or("");
    if method == Method::POST {
        if path.ends_with("/messages/count_tokens") {
            return (anthropic::count_tokens(script), None);
        }
        if path.ends_with("/messages") {
            return (anthropic::respond(script, body), None);
        }
        if path.ends_with("/responses") {
            return (responses::respond(script, body), None);
        }
        if path.ends_with("/chat/completions") {
            return (chat::respond(script, body), None);
        }
        if path.contains("/models/") && last.contains(':') {
            return (gemini::respond(script, last, body), None);
        }
    }
    if method == Method::GET && path.ends_with("/models") {
        return (request::json(StatusCode::OK, &models()), None);
    }
    (request::json(StatusCode::OK, &json!({})), Some("unknown"))
}

/// A model list every client reads: OpenAI/Anthropic `data` and Gemini `models`.
fn models() -> Value {
    let ids = [
        "claude-sonnet-4-5",
        "gpt-5.5",
        "gemini-2.5-pro",
        "gemini-2.5-flash",
        "fake-model",
    ];
    json!({
        "object": "list",
        "data": ids.iter().map(|id| json!({"id": id, "object": "model", "type": "model",
            "display_name": id, "created": 0, "created_at": "2025-01-01T00:00:00Z",
            "owned_by": "deltabench"})).collect::<Vec<_>>(),
        "has_more": false,
        "models": ids.iter().map(|id| json!({"name": format!("models/{id}"),
            "displayName": id, "supportedGenerationMethods": ["generateContent", "streamGenerateContent", "countTokens"]}))
            .collect::<Vec<_>>(),
    })
}
