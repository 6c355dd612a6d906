//! Record and replay of a trial's model calls: every request the gateway forwards and the
//! answer it passed back, one JSON line each in the trial folder's
//! [`crate::store::layout::MODEL_CALLS`], and the comparison that lets a later run be answered
//! from them.
//!
//! A request is kept as its method, its path after the trial's token, its query without a key,
//! and its body (JSON when it parses); no header is kept, so no key travels into the file. The
//! answer is kept as its status, its content type, and its body's bytes in order (a stream's
//! raw SSE text). The trial's own places (its workspace and folder) are written as
//! placeholders, so a replay, whose places differ, compares equal; in a stream, a place split
//! across events is first moved whole into one ([`super::stream`]).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::dialect::Dialect;
use super::stream::unsplit;
use crate::agent::REPLAY_MISMATCH;

/// One model call as recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Exchange {
    /// The request's place in the trial (1-based, in the order they arrived).
    pub n: usize,
    /// The HTTP method, e.g. `POST`.
    pub method: String,
    /// The path after `/t/<token>`.
    pub path: String,
    /// The query, without a `key=` (Gemini's key parameter).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<String>,
    /// The request body: JSON when it parses, else its text (`null` when empty).
    pub request: Value,
    /// The answer's HTTP status.
    pub status: u16,
    /// The answer headers a replay needs (its content type).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// The answer's body as it came (for a stream, the SSE bytes in order).
    pub response: String,
}

/// JSON keys whose values differ between two runs of the same CLI on the same task: ids of the
/// session, the user and the request, cache keys, times, and Codex's `client_metadata` (its
/// installation, thread and turn ids), and `id`, which Codex gives each input item afresh (a
/// tool call's `call_id` stays). They are left out of the comparison wherever they appear.
pub const VOLATILE_KEYS: [&str; 11] = [
    "id",
    "client_metadata",
    "user_id",
    "session_id",
    "conversation_id",
    "prompt_cache_key",
    "request_id",
    "idempotency_key",
    "timestamp",
    "created_at",
    "created",
];

/// The trial's places written as placeholders in every string of `value`.
pub fn with_placeholders(value: &mut Value, places: &[(String, String)]) {
    match value {
        Value::String(text) => {
            for (place, placeholder) in places {
                if !place.is_empty() && text.contains(place.as_str()) {
                    *text = text.replace(place.as_str(), placeholder);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| with_placeholders(v, places)),
        Value::Object(map) => map.values_mut().for_each(|v| with_placeholders(v, places)),
        _ => {}
    }
}

/// An answer's body as kept: the upstream key redacted and the trial's places as placeholders,
/// a stream's after [`unsplit`] (a place split across events is moved whole into one).
pub fn kept_answer(
    body: &str,
    stream: Option<Dialect>,
    secret: Option<&str>,
    places: &[(String, String)],
) -> String {
    let secret = secret.filter(|s| !s.is_empty());
    let mut text = match stream {
        Some(dialect) => {
            let whole: Vec<&str> = places
                .iter()
                .map(|(place, _)| place.as_str())
                .chain(secret)
                .collect();
            unsplit(dialect, body, &whole)
        }
        None => body.to_owned(),
    };
    if let Some(secret) = secret {
        text = text.replace(secret, "[REDACTED:api_key]");
    }
    for (place, placeholder) in places {
        text = text.replace(place.as_str(), placeholder);
    }
    text
}

/// A recorded answer's body with this trial's places put back for its placeholders.
pub fn with_places(recorded: &str, places: &[(String, String)]) -> String {
    let mut text = recorded.to_owned();
    for (place, placeholder) in places {
        text = text.replace(placeholder.as_str(), place);
    }
    text
}

/// A request's body as kept: JSON when it parses, with the trial's places as placeholders.
pub fn request_body(bytes: &[u8], places: &[(String, String)]) -> Value {
    let mut body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(bytes).into_owned()))
    };
    with_placeholders(&mut body, places);
    body
}

/// The query as kept: `key=` (a key) left out.
pub fn kept_query(query: Option<&str>) -> Option<String> {
    let kept: Vec<&str> = query?
        .split('&')
        .filter(|pair| !pair.is_empty() && !pair.starts_with("key="))
        .collect();
    (!kept.is_empty()).then(|| kept.join("&"))
}

/// The form two requests are compared in: volatile keys gone, dates and times masked.
pub fn normalized(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(key, _)| !VOLATILE_KEYS.contains(&key.as_str()))
                .map(|(key, v)| (key.clone(), normalized(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(normalized).collect()),
        Value::String(text) => Value::String(mask_times(text)),
        other => other.clone(),
    }
}

/// What differs inside strings between two runs: dates and times (a system prompt's "today")
/// as `<date>`, the chunk id and wall time Codex heads a command's output with, and the process
/// ids Gemini CLI's shell tool reports.
fn mask_times(text: &str) -> String {
    static TIME: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?|\d{1,2}/\d{1,2}/\d{4}")
            .expect("a valid pattern")
    });
    static CLI_OUTPUT: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(
            r"(Chunk ID: |Process Group PGID: |Background PIDs: )[0-9A-Za-z, ]+|(Wall time: )[0-9.]+( seconds)",
        )
            .expect("a valid pattern")
    });
    let text = TIME.replace_all(text, "<date>");
    CLI_OUTPUT
        .replace_all(&text, "$1$2<volatile>$3")
        .into_owned()
}

/// Where two normalized values differ, as JSON paths (`/messages/3/content: "a" != "b"`), at
/// most `limit` of them.
pub fn differences(recorded: &Value, now: &Value, limit: usize) -> Vec<String> {
    let mut out = Vec::new();
    walk("", recorded, now, limit, &mut out);
    out
}

fn short(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() > 80 {
        format!("{}...", text.chars().take(77).collect::<String>())
    } else {
        text
    }
}

/// Two strings cut to where they first differ: a little before, more after.
fn around_difference(x: &str, y: &str) -> (String, String) {
    let (xs, ys): (Vec<char>, Vec<char>) = (x.chars().collect(), y.chars().collect());
    let first = xs.iter().zip(&ys).take_while(|(p, q)| p == q).count();
    let cut = |chars: &[char]| {
        let start = first.saturating_sub(20);
        let end = (first + 60).min(chars.len());
        let mut text: String = chars[start..end].iter().collect();
        if start > 0 {
            text = format!("...{text}");
        }
        if end < chars.len() {
            text.push_str("...");
        }
        text
    };
    (cut(&xs), cut(&ys))
}

fn walk(path: &str, a: &Value, b: &Value, limit: usize, out: &mut Vec<String>) {
    if out.len() >= limit || a == b {
        return;
    }
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for key in keys {
                let here = format!("{path}/{key}");
                match (x.get(key), y.get(key)) {
                    (Some(p), Some(q)) => walk(&here, p, q, limit, out),
                    (Some(p), None) => push(out, limit, format!("{here}: {} != absent", short(p))),
                    (None, Some(q)) => push(out, limit, format!("{here}: absent != {}", short(q))),
                    (None, None) => {}
                }
            }
        }
        (Value::Array(x), Value::Array(y)) => {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                walk(&format!("{path}/{i}"), p, q, limit, out);
            }
            if x.len() != y.len() {
                push(
                    out,
                    limit,
                    format!("{path}: {} items != {} items", x.len(), y.len()),
                );
            }
        }
        (Value::String(x), Value::String(y)) => {
            let (x, y) = around_difference(x, y);
            let at = if path.is_empty() { "/" } else { path };
            push(out, limit, format!("{at}: {x:?} != {y:?}"));
        }
        _ => push(
            out,
            limit,
            format!(
                "{}: {} != {}",
                if path.is_empty() { "/" } else { path },
                short(a),
                short(b)
            ),
        ),
    }
}

fn push(out: &mut Vec<String>, limit: usize, line: String) {
    if out.len() < limit {
        out.push(line);
    }
}

/// The comparable form of a request: method, path, query and normalized body.
pub fn key_of(method: &str, path: &str, query: Option<&str>, body: &Value) -> Value {
    serde_json::json!({"method": method, "path": path, "query": query, "body": normalized(body)})
}

impl Exchange {
    fn key(&self) -> Value {
        key_of(
            &self.method,
            &self.path,
            self.query.as_deref(),
            &self.request,
        )
    }
}

/// Why a recording could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TapeError {
    /// The recording file could not be read.
    #[error("cannot read the recording {}: {source}", path.display())]
    Read {
        /// The recording file.
        path: PathBuf,
        /// The read's error.
        #[source]
        source: std::io::Error,
    },
    /// A line of the recording is not a recorded call.
    #[error("{} line {line}: not a recorded call: {source}", path.display())]
    Line {
        /// The recording file.
        path: PathBuf,
        /// The line, 1-based.
        line: usize,
        /// What the JSON parser said.
        #[source]
        source: serde_json::Error,
    },
}

/// Why a request during replay gets no recorded answer: each message starts with
/// [`REPLAY_MISMATCH`], which is how a trial's record tells a replay stop from other failures.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplayMismatch {
    /// The recording could not be used: a thread panicked while holding it.
    #[error("{REPLAY_MISMATCH}the recording is unreadable")]
    Unreadable,
    /// The recording holds no request at all.
    #[error("{REPLAY_MISMATCH}request {n} does not match the recording: it holds no request")]
    Empty {
        /// The request's place in the trial (1-based).
        n: usize,
    },
    /// The request matches no unused recorded request.
    #[error(
        "{REPLAY_MISMATCH}request {n} ({method} {path}) matches no recorded request; nearest is {nearest}, which differs at {differences}"
    )]
    NoMatch {
        /// The request's place in the trial (1-based).
        n: usize,
        /// The request's HTTP method.
        method: String,
        /// The request's path.
        path: String,
        /// The recorded request it is closest to.
        nearest: Box<Nearest>,
        /// The first few differing places, joined by `; `.
        differences: String,
    },
}

/// The recorded request a mismatched one is compared with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nearest {
    /// Its place in the recording (1-based).
    pub n: usize,
    /// How many requests the recording holds.
    pub total: usize,
    /// Its HTTP method.
    pub method: String,
    /// Its path.
    pub path: String,
}

impl std::fmt::Display for Nearest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Self {
            n,
            total,
            method,
            path,
        } = self;
        write!(f, "recorded request {n} of {total} ({method} {path})")
    }
}

/// A trial's recording, answered from in order.
#[derive(Debug, Default)]
pub struct Tape {
    /// Recorded exchanges, in the order their requests arrived, each with whether it was used.
    calls: Mutex<Vec<(Exchange, bool)>>,
}

impl Tape {
    /// Reads a trial's recording.
    pub fn load(path: &Path) -> Result<Tape, TapeError> {
        let text = std::fs::read_to_string(path).map_err(|source| TapeError::Read {
            path: path.to_owned(),
            source,
        })?;
        let mut calls = Vec::new();
        for (i, line) in text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
        {
            let exchange: Exchange =
                serde_json::from_str(line).map_err(|source| TapeError::Line {
                    path: path.to_owned(),
                    line: i + 1,
                    source,
                })?;
            calls.push((exchange, false));
        }
        calls.sort_by_key(|(e, _)| e.n);
        Ok(Tape {
            calls: Mutex::new(calls),
        })
    }

    /// The recorded answer to request number `n` (1-based), whose comparable form is `key`:
    /// the `n`th recorded request when it is the same, else the first unused one that is (calls
    /// made in parallel may arrive in another order). Otherwise why not: the nearest recorded
    /// request (the `n`th, else the last) and what differs.
    pub fn answer(&self, n: usize, key: &Value) -> Result<Exchange, ReplayMismatch> {
        let Ok(mut calls) = self.calls.lock() else {
            return Err(ReplayMismatch::Unreadable);
        };
        let same = |(e, used): &(Exchange, bool)| !used && e.key() == *key;
        let found = calls
            .get(n.wrapping_sub(1))
            .filter(|c| same(c))
            .map(|_| n - 1)
            .or_else(|| calls.iter().position(same));
        if let Some(i) = found {
            calls[i].1 = true;
            return Ok(calls[i].0.clone());
        }
        let total = calls.len();
        let Some((nearest, _)) = calls.get(n.wrapping_sub(1)).or(calls.last()) else {
            return Err(ReplayMismatch::Empty { n });
        };
        let what = differences(&nearest.key(), key, 5);
        Err(ReplayMismatch::NoMatch {
            n,
            method: key["method"].as_str().unwrap_or("").to_owned(),
            path: key["path"].as_str().unwrap_or("").to_owned(),
            nearest: Box::new(Nearest {
                n: nearest.n,
                total,
                method: nearest.method.clone(),
                path: nearest.path.clone(),
            }),
            differences: what.join("; "),
        })
    }
}

/// Appends a trial's exchanges to its recording as they finish.
#[derive(Debug)]
pub struct Recorder {
    file: Mutex<std::fs::File>,
}

impl Recorder {
    /// Opens (or creates) the recording at `path` to append to.
    pub fn create(path: &Path) -> std::io::Result<Recorder> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        Ok(Recorder {
            file: Mutex::new(file),
        })
    }

    /// Appends one exchange as a JSON line; a failed write is ignored (the trial goes on
    /// unrecorded).
    pub fn write(&self, exchange: &Exchange) {
        if let (Ok(line), Ok(mut file)) = (serde_json::to_string(exchange), self.file.lock()) {
            let _ = writeln!(file, "{line}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn exchange(n: usize, body: Value) -> Exchange {
        Exchange {
            n,
            method: "POST".into(),
            path: "/v1/messages".into(),
            query: None,
            request: body,
            status: 200,
            headers: BTreeMap::new(),
            response: format!("answer {n}"),
        }
    }

    #[test]
    fn volatile_fields_and_dates_do_not_count_and_places_are_placeholders() {
        let mut body =
            json!({"metadata": {"user_id": "u1"}, "system": "cwd /tmp/ws/a, today 2026-12-03"});
        with_placeholders(&mut body, &[("/tmp/ws/a".into(), "<workspace>".into())]);
        let other =
            json!({"metadata": {"user_id": "u2"}, "system": "cwd <workspace>, today 2027-01-01"});
        assert_eq!(normalized(&body), normalized(&other));
        assert_eq!(
            mask_times("Chunk ID: fd5770\nWall time: 0.0012 seconds\n"),
            "Chunk ID: <volatile>\nWall time: <volatile> seconds\n"
        );
        assert_eq!(
            kept_query(Some("alt=sse&key=SECRET")),
            Some("alt=sse".into())
        );
        assert_eq!(kept_query(Some("key=SECRET")), None);
    }

    #[test]
    fn the_nth_request_answers_and_a_mismatch_says_where() {
        let tape = Tape {
            calls: Mutex::new(vec![
                (exchange(1, json!({"messages": ["a"]})), false),
                (exchange(2, json!({"messages": ["a", "b"]})), false),
            ]),
        };
        let key = |body: Value| key_of("POST", "/v1/messages", None, &body);
        // Out of order (parallel calls): still answered, each once.
        assert_eq!(
            tape.answer(1, &key(json!({"messages": ["a", "b"]})))
                .unwrap()
                .n,
            2
        );
        assert_eq!(
            tape.answer(2, &key(json!({"messages": ["a"]}))).unwrap().n,
            1
        );
        let err = tape
            .answer(3, &key(json!({"messages": ["a", "c"]})))
            .unwrap_err()
            .to_string();
        assert!(err.contains("request 3"), "{err}");
        assert!(err.contains("recorded request 2 of 2"), "{err}");
        assert!(err.contains("/body/messages/1: \"b\" != \"c\""), "{err}");
        let (x, y) = around_difference(
            &format!("{}the end", "a".repeat(100)),
            &format!("{}an end", "a".repeat(100)),
        );
        assert!(x.starts_with("...") && x.ends_with("the end"), "{x}");
        assert!(y.ends_with("an end"), "{y}");
    }
}
