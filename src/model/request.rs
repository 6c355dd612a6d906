//! What every protocol needs from a request: the step it is at, the client's working
//! directory, and the HTTP answers shared by all of them.

use std::collections::HashSet;
use std::sync::LazyLock;

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use regex::Regex;
use serde_json::Value;

use super::script::{HttpError, Script};
use super::tools::{self, Answer, Outcome, Tool};

/// The number of distinct ids: resumed sessions may replay a tool result twice.
pub(crate) fn distinct<'a>(ids: impl Iterator<Item = &'a str>) -> usize {
    ids.collect::<HashSet<_>>().len()
}

/// Where the client says it works, from the text of its prompts (the last mention wins, as a
/// resumed session may have moved).
pub(crate) fn cwd(body: &Value) -> Option<String> {
    static PATTERNS: LazyLock<Vec<Regex>> = LazyLock::new(|| {
        [
            // Claude Code
            r"Primary working directory: ([^\n]+)",
            // Codex
            r"<cwd>([^<]+)</cwd>",
            // opencode
            r"Working directory: ([^\n]+)",
            // Gemini CLI
            r"Workspace Directories:\**\s*\n\s*- ([^\n]+)",
            r"I'm currently working in the directory: ([^\n]+)",
            // Cline
            r"\d\. Working Directory: ([^\n]+)",
            // Grok CLI
            r"Current working directory: ([^\n]+)",
        ]
        .iter()
        .filter_map(|p| Regex::new(p).ok())
        .collect()
    });
    let mut texts = Vec::new();
    if let Some(object) = body.as_object() {
        for (key, value) in object {
            // Tool descriptions talk about working directories in general.
            if key != "tools" {
                strings(value, &mut texts);
            }
        }
    }
    let mut found = None;
    for text in texts {
        for pattern in PATTERNS.iter() {
            if let Some(m) = pattern.captures_iter(text).last() {
                found = Some(m[1].trim().to_owned());
            }
        }
    }
    found
}

fn strings<'a>(value: &'a Value, out: &mut Vec<&'a str>) {
    match value {
        Value::String(s) => out.push(s),
        Value::Array(items) => items.iter().for_each(|v| strings(v, out)),
        Value::Object(map) => map.values().for_each(|v| strings(v, out)),
        _ => {}
    }
}

/// The answer of a main call: the step's action on the client's tools.
pub(crate) fn main_outcome(
    script: &Script,
    step: usize,
    tools: &[Tool],
    body: &Value,
    call_prefix: &str,
) -> Outcome {
    tools::answer(script.step(step), tools, cwd(body).as_deref(), call_prefix)
}

/// The answer of a side call (title, summary): short text, no usage.
pub(crate) fn side_answer(text: &str) -> Outcome {
    Outcome::Answer(Answer {
        text: Some(text.to_owned()),
        call: None,
        usage: super::script::Usage::ZERO,
    })
}

/// Text that reads as a title or summary for any side call.
pub(crate) const SIDE_TEXT: &str = "Scripted model session";

/// An SSE response from a ready body.
pub(crate) fn sse(body: String) -> Response {
    let mut response = Response::new(Body::from(body));
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// A JSON response.
pub(crate) fn json(status: StatusCode, value: &Value) -> Response {
    let mut response = Response::new(Body::from(value.to_string()));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// A scripted HTTP error with the given JSON body (each protocol shapes its own).
pub(crate) fn error(error: &HttpError, body: &Value) -> Response {
    let status = StatusCode::from_u16(error.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = json(status, body);
    if let Some(seconds) = error.retry_after {
        response.headers_mut().insert(
            header::RETRY_AFTER,
            HeaderValue::from_str(&seconds.to_string()).unwrap_or(HeaderValue::from_static("1")),
        );
    }
    response
}

/// One SSE event with a name.
pub(crate) fn event(out: &mut String, name: &str, data: &Value) {
    out.push_str("event: ");
    out.push_str(name);
    out.push_str("\ndata: ");
    out.push_str(&data.to_string());
    out.push_str("\n\n");
}

/// One unnamed SSE event.
pub(crate) fn data(out: &mut String, data: &str) {
    out.push_str("data: ");
    out.push_str(data);
    out.push_str("\n\n");
}

/// `text` in pieces of `size` characters (the script's `split`), else whole.
pub(crate) fn pieces(text: &str, size: Option<usize>) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    match size {
        Some(size) if size > 0 && chars.len() > size => {
            chars.chunks(size).map(|c| c.iter().collect()).collect()
        }
        _ => vec![text.to_owned()],
    }
}

/// Seconds since the epoch, for `created` fields.
pub(crate) fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The status word of an HTTP error in Google's error format.
pub(crate) fn google_status(status: u16) -> &'static str {
    match status {
        400 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        429 => "RESOURCE_EXHAUSTED",
        503 | 529 => "UNAVAILABLE",
        _ if status >= 500 => "INTERNAL",
        _ => "FAILED_PRECONDITION",
    }
}
