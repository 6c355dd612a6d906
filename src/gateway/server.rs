//! The gateway's HTTP server: trial registration, forwarding, metering and budgets.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use crate::model::Served;
use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::Response;
use bytes::Bytes;
use futures::Stream;
use serde_json::Value;

use super::dialect::{Dialect, ErrorKind, MAX_BODY, Meter, Provider, plain_error};
use super::record::{
    Exchange, Recorder, Tape, kept_answer, kept_query, key_of, request_body, with_places,
};
use super::{Spent, over_budget};
use crate::agent::harness::{Price, is_loopback, pricing};
use crate::agent::{Budget, BudgetStop, ModelCall, Usage};

/// Where one trial's calls go: a root URL per provider, each with the key to add (none: the
/// client's own header passes as it came, as for a local endpoint that needs no key).
#[derive(Debug, Clone, Default)]
pub struct Upstream {
    roots: HashMap<Provider, (String, Option<String>)>,
    /// For requests that name no dialect (model lists), when the provider cannot be told.
    fallback: Option<Provider>,
}

impl Upstream {
    /// Every provider's calls to one server root (an agent's `endpoint`).
    pub fn single(root: &str, key: Option<String>) -> Self {
        let root = root.trim_end_matches('/').to_owned();
        let mut upstream = Self::default();
        for provider in [Provider::Anthropic, Provider::OpenAi, Provider::Google] {
            upstream.roots.insert(provider, (root.clone(), key.clone()));
        }
        upstream.fallback = Some(Provider::OpenAi);
        upstream
    }

    /// `provider`'s calls to `root` with `key`.
    pub fn with(mut self, provider: Provider, root: &str, key: Option<String>) -> Self {
        self.roots
            .insert(provider, (root.trim_end_matches('/').to_owned(), key));
        self.fallback.get_or_insert(provider);
        self
    }

    fn root(&self, provider: Provider) -> Option<&(String, Option<String>)> {
        self.roots
            .get(&provider)
            .or_else(|| self.roots.get(&self.fallback?))
    }
}

/// What a trial registers with.
#[derive(Debug, Clone, Default)]
pub struct TrialSetup {
    /// Where the trial's calls are forwarded, and with which keys.
    pub upstream: Upstream,
    /// The trial's limits; a call past one is refused.
    pub budget: Budget,
    /// Prices every call when set (the agent's `price:`).
    pub price: Option<Price>,
    /// The model to price calls as (the agent's `model:`); else each request's own.
    pub model: Option<String>,
    /// Tripped when a call is refused for the budget (or, replaying, matches no recorded one).
    pub stop: BudgetStop,
    /// Keep every request and answer in this file (`run --record`).
    pub record: Option<std::path::PathBuf>,
    /// Answer from this recording instead of the upstream (`run --replay`).
    pub replay: Option<Arc<Tape>>,
    /// Remove the provider's own web tools from each call before it goes on (the agent's
    /// `network: model`: the model must not reach the web for it either).
    pub without_web_tools: bool,
}

struct Account {
    setup: TrialSetup,
    recorder: Option<Recorder>,
    /// Requests so far (each one's number in the recording).
    calls: AtomicUsize,
    /// The trial's places and their placeholders in a recording.
    places: Mutex<Vec<(String, String)>>,
    /// When the agent started (the `wall` budget runs from here).
    started: Mutex<Instant>,
    usage: Mutex<Totals>,
}

#[derive(Default)]
struct Totals {
    usage: Usage,
    cost: f64,
    /// A call with tokens that no price covered: the total cost is unknown.
    unpriced: bool,
    /// The model of such a call.
    unpriced_model: Option<String>,
    /// Each admitted model call, in the order admitted.
    calls: Vec<ModelCall>,
}

/// Why the gateway refuses a model call before forwarding it: the trial's budget.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum Refusal {
    /// A thread panicked holding the trial's totals.
    #[error("poisoned")]
    Poisoned,
    /// A limit is reached; the reason names it.
    #[error("{0}")]
    OverBudget(String),
    #[error(
        "deltabench budget: a `cost_usd` budget cannot be kept, since no price is known for \
         model '{model}' (set the agent's `price:`)"
    )]
    Unpriced { model: String },
}

impl Account {
    /// Counts a model call about to be forwarded (its number among the trial's calls), or says
    /// why the budget refuses it.
    fn admit(&self) -> Result<usize, Refusal> {
        let mut totals = self.usage.lock().map_err(|_| Refusal::Poisoned)?;
        let u = &totals.usage;
        let spent = Spent {
            tokens: u.input_tokens + u.output_tokens + u.cache_read_tokens + u.cache_write_tokens,
            cost_usd: totals.cost,
            model_calls: u.model_calls,
            wall: self.started.lock().map_or(Duration::ZERO, |t| t.elapsed()),
        };
        if let Some(why) = over_budget(&self.setup.budget, &spent) {
            return Err(Refusal::OverBudget(why));
        }
        if self.setup.budget.cost_usd.is_some() && totals.unpriced {
            return Err(Refusal::Unpriced {
                model: totals
                    .unpriced_model
                    .as_deref()
                    .unwrap_or("unnamed")
                    .to_owned(),
            });
        }
        totals.usage.model_calls += 1;
        totals.calls.push(ModelCall {
            started_at: chrono::Utc::now(),
            usage: Usage {
                model_calls: 1,
                ..Usage::default()
            },
        });
        Ok(totals.calls.len() - 1)
    }

    /// Adds the answer to call `index`'s usage to the totals and to the call.
    fn record(&self, index: usize, mut call: Usage, request_model: Option<&str>) {
        let model = self.setup.model.as_deref().or(request_model);
        let priced = pricing::estimate(&mut call, model, self.setup.price);
        let Ok(mut totals) = self.usage.lock() else {
            return;
        };
        let tokens = call.input_tokens
            + call.output_tokens
            + call.cache_read_tokens
            + call.cache_write_tokens;
        if priced {
            totals.cost += call.cost_usd.unwrap_or(0.0);
        } else if tokens > 0 {
            totals.unpriced = true;
            totals.unpriced_model = model.map(str::to_owned);
        }
        let u = &mut totals.usage;
        u.input_tokens += call.input_tokens;
        u.output_tokens += call.output_tokens;
        u.cache_read_tokens += call.cache_read_tokens;
        u.cache_write_tokens += call.cache_write_tokens;
        if let Some(logged) = totals.calls.get_mut(index) {
            logged.usage = Usage {
                model_calls: 1,
                cost_usd: call.cost_usd.filter(|_| priced),
                cost_estimated: priced,
                ..call
            };
        }
    }

    fn calls(&self) -> Vec<ModelCall> {
        self.usage
            .lock()
            .map(|t| t.calls.clone())
            .unwrap_or_default()
    }

    fn total(&self) -> Usage {
        let Ok(totals) = self.usage.lock() else {
            return Usage::default();
        };
        let mut usage = totals.usage.clone();
        usage.cost_usd = (!totals.unpriced).then_some(totals.cost);
        usage.cost_estimated = usage.cost_usd.is_some();
        usage
    }
}

struct Shared {
    trials: Mutex<HashMap<String, Arc<Account>>>,
    /// For remote upstreams: honours the proxy variables.
    client: reqwest::Client,
    /// For loopback upstreams: never through a proxy.
    direct: reqwest::Client,
}

/// Why the run's gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// The loopback port or the Unix socket (or its folder) could not be had.
    #[error(transparent)]
    Listen(#[from] std::io::Error),
    /// The HTTP client that forwards to the upstreams could not be built (TLS setup).
    #[error(transparent)]
    Client(#[from] reqwest::Error),
}

/// The run's gateway, serving from the current tokio runtime on 127.0.0.1.
pub struct Gateway {
    addr: SocketAddr,
    shared: Arc<Shared>,
    served: Served,
    /// The same service on a Unix socket, for sandboxes with `network: model`.
    socket: PathBuf,
    served_on_socket: Served,
    /// Holds only the socket; removed with the gateway.
    _socket_dir: tempfile::TempDir,
}

impl Gateway {
    /// Binds any free loopback port and starts serving.
    pub async fn start() -> Result<Gateway, GatewayError> {
        let listener = tokio::net::TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
        let addr = listener.local_addr()?;
        let listener = crate::model::without_delay(listener);
        let build = |proxied: bool| {
            let builder = reqwest::Client::builder().connect_timeout(Duration::from_secs(30));
            let builder = if proxied { builder } else { builder.no_proxy() };
            builder.build()
        };
        let shared = Arc::new(Shared {
            trials: Mutex::new(HashMap::new()),
            client: build(true)?,
            direct: build(false)?,
        });
        let router = Router::new().fallback(handle).with_state(shared.clone());
        let socket_dir = socket_dir()?;
        let socket = socket_dir.path().join("gateway.sock");
        let unix = tokio::net::UnixListener::bind(&socket)?;
        Ok(Gateway {
            addr,
            shared,
            served: Served::start(listener, router.clone()),
            socket,
            served_on_socket: Served::start(unix, router),
            _socket_dir: socket_dir,
        })
    }

    /// The loopback port the trials' URLs name.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// The Unix socket serving the same as [`Self::url`].
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Registers a trial; its calls are accounted while the lease lives.
    pub fn register(&self, setup: TrialSetup) -> GatewayLease {
        let token = uuid::Uuid::new_v4().simple().to_string();
        let recorder = setup.record.as_deref().and_then(|path| {
            Recorder::create(path)
                .map_err(|e| eprintln!("warning: cannot record into {}: {e}", path.display()))
                .ok()
        });
        let account = Arc::new(Account {
            setup,
            recorder,
            calls: AtomicUsize::new(0),
            places: Mutex::new(Vec::new()),
            started: Mutex::new(Instant::now()),
            usage: Mutex::new(Totals::default()),
        });
        if let Ok(mut trials) = self.shared.trials.lock() {
            trials.insert(token.clone(), account.clone());
        }
        GatewayLease {
            url: format!("{}/t/{token}", self.url()),
            token,
            account,
            shared: self.shared.clone(),
            wall_timer: Mutex::new(None),
        }
    }
}

impl Drop for Gateway {
    /// Stops serving; the run's trials are over by then.
    fn drop(&mut self) {
        self.served.abort();
        self.served_on_socket.abort();
    }
}

/// One trial's registration; dropping it forgets the trial (later calls get a 404).
pub struct GatewayLease {
    url: String,
    token: String,
    account: Arc<Account>,
    shared: Arc<Shared>,
    /// Trips the stop when the `wall` budget runs out, calls or not.
    wall_timer: Mutex<Option<tokio::task::AbortHandle>>,
}

impl GatewayLease {
    /// The root URL the trial's client is pointed at (`/v1` etc. are added as for an endpoint).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The trial's usage so far, counted from the providers' answers.
    pub fn usage(&self) -> Usage {
        self.account.total()
    }

    /// The trial's model calls so far, each with its own usage.
    pub fn calls(&self) -> Vec<ModelCall> {
        self.account.calls()
    }

    /// Starts the `wall` budget's clock again: the agent starts now (provisioning and setup,
    /// which ran since the trial registered, are not the agent's time). When the budget runs
    /// out the trial's stop trips, whether or not a call comes (an agent busy with a long tool
    /// call is stopped too). Call it from the runtime serving the gateway.
    pub fn start_clock(&self) {
        if let Ok(mut started) = self.account.started.lock() {
            *started = Instant::now();
        }
        let (Some(limit), Ok(runtime)) = (
            self.account.setup.budget.wall,
            tokio::runtime::Handle::try_current(),
        ) else {
            return;
        };
        let stop = self.account.setup.stop.clone();
        let budget = Budget {
            wall: Some(limit),
            ..Budget::default()
        };
        let timer = runtime.spawn(async move {
            tokio::time::sleep(limit).await;
            let spent = Spent {
                wall: limit,
                ..Spent::default()
            };
            if let Some(why) = over_budget(&budget, &spent) {
                stop.trip(why);
            }
        });
        if let Ok(mut slot) = self.wall_timer.lock()
            && let Some(earlier) = slot.replace(timer.abort_handle())
        {
            earlier.abort();
        }
    }

    /// The trial's places (its workspace, its folder), written as placeholders in a recording
    /// and in the requests a replay compares.
    pub fn set_places(&self, places: Vec<(String, String)>) {
        let mut places: Vec<(String, String)> =
            places.into_iter().filter(|(p, _)| p.len() > 1).collect();
        // The longest first: one place may hold another.
        places.sort_by_key(|(p, _)| std::cmp::Reverse(p.len()));
        if let Ok(mut slot) = self.account.places.lock() {
            *slot = places;
        }
    }

    /// The trial's budget stop.
    pub fn stop(&self) -> BudgetStop {
        self.account.setup.stop.clone()
    }
}

impl Drop for GatewayLease {
    fn drop(&mut self) {
        if let Some(timer) = self.wall_timer.lock().ok().and_then(|mut t| t.take()) {
            timer.abort();
        }
        if let Ok(mut trials) = self.shared.trials.lock() {
            trials.remove(&self.token);
        }
    }
}

/// `body` without the provider's web tools, re-encoded only when it had some.
fn without_web_tools(dialect: Dialect, body: &Bytes) -> Bytes {
    let Ok(mut request) = serde_json::from_slice::<Value>(body) else {
        return body.clone();
    };
    if dialect.remove_web_tools(&mut request) == 0 {
        return body.clone();
    }
    serde_json::to_vec(&request).map_or_else(|_| body.clone(), Bytes::from)
}

/// A private folder for the gateway's socket, with a path short enough for one (at most 108
/// bytes): under the temporary folder, else `/tmp`.
fn socket_dir() -> std::io::Result<tempfile::TempDir> {
    let made = tempfile::Builder::new()
        .prefix("deltabench-gateway-")
        .tempdir()?;
    if made.path().as_os_str().len() < 80 {
        return Ok(made);
    }
    tempfile::Builder::new()
        .prefix("deltabench-gateway-")
        .tempdir_in("/tmp")
}

fn json_response(status: u16, body: &Value) -> Response {
    let mut response = Response::new(Body::from(body.to_string()));
    *response.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_GATEWAY);
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// Headers that describe one connection, not the message.
const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
    "te",
    "trailer",
    "host",
    "content-length",
];

/// The headers a key travels in.
const AUTH: [&str; 4] = ["authorization", "x-api-key", "x-goog-api-key", "api-key"];

/// The provider a request that names no dialect is for, from its headers and path.
fn guess_provider(headers: &HeaderMap, path: &str) -> Option<Provider> {
    if headers.contains_key("x-api-key") || headers.contains_key("anthropic-version") {
        Some(Provider::Anthropic)
    } else if headers.contains_key("x-goog-api-key") || path.starts_with("/v1beta") {
        Some(Provider::Google)
    } else if headers.contains_key(header::AUTHORIZATION) {
        Some(Provider::OpenAi)
    } else {
        None
    }
}

/// The model a request names: its body's `model`, or Gemini's path segment.
fn request_model(dialect: Dialect, path: &str, body: &[u8]) -> Option<String> {
    if dialect == Dialect::Gemini {
        let last = path.rsplit("/models/").next()?;
        return last.split(':').next().map(str::to_owned);
    }
    serde_json::from_slice::<Value>(body)
        .ok()?
        .get("model")?
        .as_str()
        .map(str::to_owned)
}

/// What the gateway answers itself, in place of the upstream's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Failure {
    NotATrial,
    NoSuchTrial,
    Websocket,
    TooLarge,
    /// The trial's budget, or a replay without a matching recording (the trial's stop trips).
    Refused(String),
    NoUpstream,
    /// The upstream at this root cannot be reached.
    Unreachable {
        root: String,
        error: String,
    },
    BadAnswer,
    BadRecording,
}

impl Failure {
    fn status(&self) -> u16 {
        match self {
            Self::NotATrial | Self::NoSuchTrial => 404,
            Self::Websocket => 426,
            Self::TooLarge => 413,
            Self::Refused(_) => 400,
            Self::NoUpstream | Self::Unreachable { .. } | Self::BadAnswer | Self::BadRecording => {
                502
            }
        }
    }

    fn message(&self) -> String {
        match self {
            Self::NotATrial => "not a trial's path".into(),
            Self::NoSuchTrial => "no such trial".into(),
            Self::Websocket => "the gateway does not carry websockets; use SSE".into(),
            Self::TooLarge => "request body too large".into(),
            Self::Refused(why) => why.clone(),
            Self::NoUpstream => "no upstream for this API".into(),
            Self::Unreachable { root, error } => {
                format!("deltabench gateway: cannot reach {root}: {error}")
            }
            Self::BadAnswer => "bad answer".into(),
            Self::BadRecording => "bad recording".into(),
        }
    }

    /// The answer to a request of `dialect`: a refused call and an unreachable upstream in the
    /// API's own shape, the gateway's own errors plain.
    fn response(&self, dialect: Option<Dialect>) -> Response {
        let kind = match self {
            Self::Refused(_) => Some(ErrorKind::Refused),
            Self::Unreachable { .. } => Some(ErrorKind::Unreachable),
            _ => None,
        };
        let message = self.message();
        let body = match (dialect, kind) {
            (Some(dialect), Some(kind)) => dialect.error_body(kind, &message),
            _ => plain_error(&message),
        };
        json_response(self.status(), &body)
    }
}

/// One request on its way through a trial's gateway: what the agent sent, and what a
/// recording keeps of it.
struct Call {
    account: Arc<Account>,
    /// The path after the trial's token.
    rest: String,
    dialect: Option<Dialect>,
    /// A model call's number among the trial's admitted calls; `None` for other requests.
    admitted: Option<usize>,
    model: Option<String>,
    /// The request's number in the recording (every request counts).
    n: usize,
    places: Vec<(String, String)>,
    /// The exchange to record or to match in a replay, its answer still empty.
    kept: Option<Exchange>,
    /// The body as it goes upstream (without the web tools, when the trial asks).
    forwarded: Bytes,
}

async fn handle(State(shared): State<Arc<Shared>>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let (account, rest) = match route(&shared, &parts) {
        Ok(routed) => routed,
        Err(failure) => return failure.response(None),
    };
    let dialect = Dialect::of_call(&rest);
    let call = match admit(account, rest, dialect, &parts, body).await {
        Ok(call) => call,
        Err(failure) => return failure.response(dialect),
    };
    if let (Some(tape), Some(kept)) = (&call.account.setup.replay, &call.kept) {
        return replay(&call, tape, kept);
    }
    match forward(&shared, &call, &parts).await {
        Ok((answer, key)) => metered(call, answer, key),
        Err(failure) => failure.response(dialect),
    }
}

/// Sends the request to its provider's upstream with the trial's key; returns the answer and
/// the key (which a recording redacts).
async fn forward(
    shared: &Shared,
    call: &Call,
    parts: &Parts,
) -> Result<(reqwest::Response, Option<String>), Failure> {
    let provider = call
        .dialect
        .map(Dialect::provider)
        .or_else(|| guess_provider(&parts.headers, &call.rest))
        .unwrap_or(Provider::OpenAi);
    let (root, key) = call
        .account
        .setup
        .upstream
        .root(provider)
        .cloned()
        .ok_or(Failure::NoUpstream)?;
    let client = if is_loopback(&root) {
        &shared.direct
    } else {
        &shared.client
    };
    let (url, headers) = keyed(&root, &call.rest, parts, key.as_deref());
    let mut request = client.request(parts.method.clone(), &url);
    for (name, value) in &headers {
        request = request.header(name, value);
    }
    match request.body(call.forwarded.clone()).send().await {
        Ok(answer) => Ok((answer, key)),
        Err(err) => Err(Failure::Unreachable {
            root,
            error: err.to_string(),
        }),
    }
}

/// The trial a request's path names, and the path after its token; a websocket is refused.
fn route(shared: &Shared, parts: &Parts) -> Result<(Arc<Account>, String), Failure> {
    let (token, rest) = parts
        .uri
        .path()
        .strip_prefix("/t/")
        .map(|p| p.split_once('/').unwrap_or((p, "")))
        .ok_or(Failure::NotATrial)?;
    let account = shared
        .trials
        .lock()
        .ok()
        .and_then(|trials| trials.get(token).cloned())
        .ok_or(Failure::NoSuchTrial)?;
    let upgrade = parts
        .headers
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    if upgrade {
        return Err(Failure::Websocket);
    }
    Ok((account, format!("/{rest}")))
}

/// Takes a request into the trial: a model call is counted against the budget (or refused,
/// which trips the trial's stop; other requests pass uncounted), its body read whole up to
/// [`MAX_BODY`], and what a recording keeps of it made.
async fn admit(
    account: Arc<Account>,
    rest: String,
    dialect: Option<Dialect>,
    parts: &Parts,
    body: Body,
) -> Result<Call, Failure> {
    let admitted = match dialect {
        Some(_) => Some(account.admit().map_err(|why| {
            let why = why.to_string();
            account.setup.stop.trip(why.clone());
            Failure::Refused(why)
        })?),
        None => None,
    };
    let bytes = axum::body::to_bytes(body, MAX_BODY)
        .await
        .map_err(|_| Failure::TooLarge)?;
    let model = dialect.and_then(|d| request_model(d, &rest, &bytes));
    // What the agent sent is what a recording keeps and a replay matches; only the forwarded
    // copy loses the web tools.
    let forwarded = match dialect.filter(|_| account.setup.without_web_tools) {
        Some(dialect) => without_web_tools(dialect, &bytes),
        None => bytes.clone(),
    };
    let n = account.calls.fetch_add(1, Ordering::SeqCst) + 1;
    let places = account.places.lock().map(|p| p.clone()).unwrap_or_default();
    let kept = (account.recorder.is_some() || account.setup.replay.is_some()).then(|| Exchange {
        n,
        method: parts.method.to_string(),
        path: rest.clone(),
        query: kept_query(parts.uri.query()),
        request: request_body(&bytes, &places),
        status: 0,
        headers: Default::default(),
        response: String::new(),
    });
    Ok(Call {
        account,
        rest,
        dialect,
        admitted,
        model,
        n,
        places,
        kept,
        forwarded,
    })
}

/// The URL and headers a request goes upstream with: `root` and the path after the trial's
/// token, the client's query, and its headers, with `key` in place of any key the client sent
/// (Gemini's `key=`, each of [`AUTH`]); with no key the client's own pass as they came. The
/// connection's headers and `accept-encoding` stay behind (the meter reads the body as sent).
fn keyed(root: &str, rest: &str, parts: &Parts, key: Option<&str>) -> (String, HeaderMap) {
    let mut url = format!("{root}{rest}");
    if let Some(query) = parts.uri.query() {
        let query: Vec<String> = query
            .split('&')
            .map(|pair| match (key, pair.split_once('=')) {
                (Some(key), Some(("key", _))) => format!("key={key}"),
                _ => pair.to_owned(),
            })
            .collect();
        url = format!("{url}?{}", query.join("&"));
    }
    let mut headers = HeaderMap::new();
    for (name, value) in &parts.headers {
        let lower = name.as_str();
        if HOP_BY_HOP.contains(&lower) || lower == "accept-encoding" {
            continue;
        }
        let value = match key.filter(|_| AUTH.contains(&lower)) {
            Some(key) if lower == "authorization" => {
                HeaderValue::from_str(&format!("Bearer {key}"))
            }
            Some(key) => HeaderValue::from_str(key),
            None => Ok(value.clone()),
        };
        if let Ok(value) = value {
            headers.append(name, value);
        }
    }
    (url, headers)
}

/// The answer of a replay to the request `kept`: the recorded one, or the trial's stop tripped
/// when none matches.
fn replay(call: &Call, tape: &Tape, kept: &Exchange) -> Response {
    let key = key_of(
        &kept.method,
        &kept.path,
        kept.query.as_deref(),
        &kept.request,
    );
    match tape.answer(call.n, &key) {
        Ok(recorded) => replayed(call, recorded),
        Err(why) => {
            let why = why.to_string();
            call.account.setup.stop.trip(why.clone());
            Failure::Refused(why).response(call.dialect)
        }
    }
}

/// The upstream's answer passed to the client as it comes, metered (and recorded) on the way.
fn metered(call: Call, answer: reqwest::Response, key: Option<String>) -> Response {
    let status = answer.status().as_u16();
    let mut response = Response::builder().status(status);
    let sse = answer
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    for (name, value) in answer.headers() {
        // The body passes unchanged (no encoding is asked for), so its length holds.
        if HOP_BY_HOP.contains(&name.as_str()) && name != header::CONTENT_LENGTH {
            continue;
        }
        if let Ok(name) = HeaderName::from_bytes(name.as_str().as_bytes()) {
            response = response.header(name, value.as_bytes());
        }
    }
    let recording = call
        .kept
        .filter(|_| call.account.recorder.is_some())
        .map(|mut exchange| {
            exchange.status = status;
            exchange.headers = kept_headers(answer.headers());
            Recording {
                exchange,
                bytes: Vec::new(),
                secret: key,
                stream: call.dialect.filter(|_| sse),
                places: call.places,
            }
        });
    let stream = Metered {
        inner: Box::pin(answer.bytes_stream()),
        meter: call
            .admitted
            .zip(call.dialect)
            .map(|(index, d)| (index, Meter::new(d, sse))),
        account: call.account,
        model: call.model,
        recording,
    };
    response
        .body(Body::from_stream(stream))
        .unwrap_or_else(|_| Failure::BadAnswer.response(None))
}

/// The answer headers a recording keeps: its content type (nothing that could hold a key).
fn kept_headers(headers: &HeaderMap) -> std::collections::BTreeMap<String, String> {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| ("content-type".to_owned(), v.to_owned()))
        .into_iter()
        .collect()
}

/// The recorded answer to a request, as recorded (the trial's places back in), counted as the
/// upstream's would be, and kept again when this run records too.
fn replayed(call: &Call, mut recorded: Exchange) -> Response {
    let text = with_places(&recorded.response, &call.places);
    let content_type = recorded
        .headers
        .get("content-type")
        .cloned()
        .unwrap_or_else(|| "application/json".into());
    if let Some((index, dialect)) = call.admitted.zip(call.dialect) {
        let mut meter = Meter::new(dialect, content_type.starts_with("text/event-stream"));
        meter.feed(text.as_bytes());
        if let Some(usage) = meter.finish() {
            call.account.record(index, usage, call.model.as_deref());
        }
    }
    if let Some(recorder) = &call.account.recorder {
        recorded.n = call.n;
        recorder.write(&recorded);
    }
    Response::builder()
        .status(recorded.status)
        .header(header::CONTENT_TYPE, content_type)
        .body(Body::from(text))
        .unwrap_or_else(|_| Failure::BadRecording.response(None))
}

/// An answer being recorded as it passes.
struct Recording {
    exchange: Exchange,
    bytes: Vec<u8>,
    /// The upstream key, never written.
    secret: Option<String>,
    /// A stream's dialect: its fragments are reassembled before places are replaced.
    stream: Option<Dialect>,
    places: Vec<(String, String)>,
}

impl Recording {
    fn finish(mut self, recorder: &Recorder) {
        self.exchange.response = kept_answer(
            &String::from_utf8_lossy(&self.bytes),
            self.stream,
            self.secret.as_deref(),
            &self.places,
        );
        recorder.write(&self.exchange);
    }
}

type ByteStream = Pin<Box<dyn Stream<Item = reqwest::Result<Bytes>> + Send>>;

/// An answer's body on its way to the client, read by a [`Meter`] as it passes; the usage is
/// recorded when it ends, or when the client hangs up.
struct Metered {
    inner: ByteStream,
    /// The model call's number in the account, and its meter.
    meter: Option<(usize, Meter)>,
    account: Arc<Account>,
    model: Option<String>,
    recording: Option<Recording>,
}

impl Metered {
    fn finish(&mut self) {
        if let (Some(recording), Some(recorder)) =
            (self.recording.take(), self.account.recorder.as_ref())
        {
            recording.finish(recorder);
        }
        if let Some((call, meter)) = self.meter.take()
            && let Some(usage) = meter.finish()
        {
            self.account.record(call, usage, self.model.as_deref());
        }
    }
}

impl Stream for Metered {
    type Item = reqwest::Result<Bytes>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let polled = self.inner.as_mut().poll_next(cx);
        match &polled {
            Poll::Ready(Some(Ok(bytes))) => {
                let bytes = bytes.clone();
                if let Some((_, meter)) = self.meter.as_mut() {
                    meter.feed(&bytes);
                }
                if let Some(recording) = self.recording.as_mut() {
                    recording.bytes.extend_from_slice(&bytes);
                }
            }
            Poll::Ready(None) => self.finish(),
            _ => {}
        }
        polled
    }
}

impl Drop for Metered {
    fn drop(&mut self) {
        self.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Script, ScriptedServer};
    use serde_json::json;

    fn parts(uri: &str, headers: &[(&str, &str)]) -> Parts {
        let mut request = axum::http::Request::post(uri);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request.body(()).unwrap().into_parts().0
    }

    const CLIENT: [(&str, &str); 6] = [
        ("authorization", "Bearer sk-placeholder"),
        ("x-api-key", "sk-placeholder"),
        ("x-goog-api-key", "sk-placeholder"),
        ("host", "127.0.0.1:1"),
        ("accept-encoding", "gzip"),
        ("content-type", "application/json"),
    ];

    #[test]
    fn the_trials_key_replaces_the_clients_in_the_query_and_each_key_header() {
        let request = parts(
            "/t/x/v1beta/models/m:streamGenerateContent?alt=sse&key=sk-placeholder",
            &CLIENT,
        );
        let rest = "/v1beta/models/m:streamGenerateContent";
        let (url, headers) = keyed("http://up", rest, &request, Some("REAL"));
        assert_eq!(url, format!("http://up{rest}?alt=sse&key=REAL"));
        let shown: Vec<(&str, &str)> = headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.to_str().unwrap()))
            .collect();
        assert_eq!(
            shown,
            [
                ("authorization", "Bearer REAL"),
                ("x-api-key", "REAL"),
                ("x-goog-api-key", "REAL"),
                ("content-type", "application/json"),
            ]
        );
        // No key of the trial's (a local endpoint): the client's own pass as they came.
        let (url, headers) = keyed("http://up", rest, &request, None);
        assert!(url.ends_with("?alt=sse&key=sk-placeholder"), "{url}");
        assert_eq!(headers["authorization"], "Bearer sk-placeholder");
        assert_eq!(headers.len(), 4);
    }

    #[test]
    fn refused_and_unreachable_calls_wear_the_apis_shape_and_the_gateways_own_errors_are_plain() {
        let body = |response: Response| {
            let status = response.status().as_u16();
            let bytes =
                futures::executor::block_on(axum::body::to_bytes(response.into_body(), usize::MAX))
                    .unwrap();
            (status, serde_json::from_slice::<Value>(&bytes).unwrap())
        };
        let refused = Failure::Refused("spent".into());
        assert_eq!(
            body(refused.response(Some(Dialect::Gemini))),
            (400, Dialect::Gemini.error_body(ErrorKind::Refused, "spent"))
        );
        assert_eq!(body(refused.response(None)), (400, plain_error("spent")));
        let unreachable = Failure::Unreachable {
            root: "http://up".into(),
            error: "refused".into(),
        };
        let (status, anthropic) = body(unreachable.response(Some(Dialect::Anthropic)));
        assert_eq!(status, 502);
        assert_eq!(anthropic["error"]["type"], "api_error");
        assert_eq!(
            anthropic["error"]["message"],
            "deltabench gateway: cannot reach http://up: refused"
        );
        assert_eq!(
            body(Failure::TooLarge.response(Some(Dialect::Anthropic))),
            (413, plain_error("request body too large"))
        );
        assert_eq!(Failure::NoSuchTrial.status(), 404);
        assert_eq!(Failure::Websocket.status(), 426);
    }

    /// The real key goes upstream, and neither it nor the client's placeholder reaches the
    /// recording (its query keeps the rest).
    #[tokio::test]
    async fn the_upstream_key_never_reaches_a_recording() {
        let script = Script::parse(
            "usage: {input_tokens: 3, output_tokens: 4}\nsteps:\n  - text: Done.\n",
            Path::new("model.yaml"),
        )
        .unwrap();
        let upstream = ScriptedServer::start(script, SocketAddr::from(([127, 0, 0, 1], 0)))
            .await
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let recording = dir.path().join("model-calls.jsonl");
        let gateway = Gateway::start().await.unwrap();
        let lease = gateway.register(TrialSetup {
            upstream: Upstream::single(&upstream.url(), Some("the-real-key-31".into())),
            record: Some(recording.clone()),
            ..TrialSetup::default()
        });
        let path = "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse&key=sk-placeholder";
        let mut request = reqwest::Client::new().post(format!("{}{path}", lease.url()));
        for (name, value) in CLIENT.iter().filter(|(n, _)| *n != "host") {
            request = request.header(*name, *value);
        }
        // With a tool: the scripted model's main calls are the ones with tools.
        let body = json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}],
            "tools": [{"functionDeclarations": [{"name": "shell", "parameters": {"type": "object"}}]}]});
        let answer = request.body(body.to_string()).send().await.unwrap();
        assert_eq!(answer.status(), 200);
        let text = answer.text().await.unwrap();
        assert!(text.contains("Done."), "{text}");
        assert_eq!(lease.usage().model_calls, 1);
        drop(lease);
        let seen = upstream.requests();
        assert!(
            seen[0]["path"]
                .as_str()
                .unwrap()
                .ends_with("key=the-real-key-31"),
            "{seen:?}"
        );
        let recorded = std::fs::read_to_string(&recording).unwrap();
        assert!(recorded.contains("\"query\":\"alt=sse\""), "{recorded}");
        for key in ["the-real-key-31", "sk-placeholder"] {
            assert!(!recorded.contains(key), "{key} recorded: {recorded}");
        }
        upstream.stop().await;
    }
}
