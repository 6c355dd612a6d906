//! The four model APIs as the gateway sees them: which requests are model calls, the usage
//! their answers report (streamed or not), and the error each API answers with.

use serde_json::{Value, json};

use crate::agent::Usage;

/// A model API, told from the request's path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// Anthropic Messages (`/v1/messages`).
    Anthropic,
    /// OpenAI Responses (`/v1/responses`).
    Responses,
    /// OpenAI Chat Completions (`/v1/chat/completions`).
    Chat,
    /// Gemini (`/v1beta/models/M:generateContent`, `:streamGenerateContent`).
    Gemini,
}

/// The provider whose server answers a dialect (and whose key it takes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Provider {
    /// Anthropic's API (the Messages dialect).
    Anthropic,
    /// OpenAI's API (the Responses and Chat Completions dialects).
    OpenAi,
    /// Google's Gemini API.
    Google,
}

impl Dialect {
    /// The dialect of a model call to `path` (no query), or `None` for anything else (token
    /// counts, model lists), which is forwarded uncounted.
    pub fn of_call(path: &str) -> Option<Dialect> {
        let last = path.rsplit('/').next().unwrap_or("");
        if path.ends_with("/messages") {
            Some(Self::Anthropic)
        } else if path.ends_with("/responses") {
            Some(Self::Responses)
        } else if path.ends_with("/chat/completions") {
            Some(Self::Chat)
        } else if path.contains("/models/")
            && (last.ends_with(":generateContent") || last.ends_with(":streamGenerateContent"))
        {
            Some(Self::Gemini)
        } else {
            None
        }
    }

    /// The provider whose server answers this dialect.
    pub fn provider(self) -> Provider {
        match self {
            Self::Anthropic => Provider::Anthropic,
            Self::Responses | Self::Chat => Provider::OpenAi,
            Self::Gemini => Provider::Google,
        }
    }

    /// The usage one answer reports, from its whole JSON body (Gemini's non-SSE stream is an
    /// array of chunks).
    pub fn usage_of_body(self, body: &Value) -> Option<Usage> {
        match body {
            Value::Array(chunks) => chunks.iter().rev().find_map(|c| self.usage_of_body(c)),
            _ => match self {
                Self::Anthropic => body.get("usage").map(anthropic_usage),
                Self::Responses => body
                    .get("usage")
                    .filter(|u| u.is_object())
                    .map(responses_usage),
                Self::Chat => body.get("usage").filter(|u| u.is_object()).map(chat_usage),
                Self::Gemini => body.get("usageMetadata").map(gemini_usage),
            },
        }
    }

    /// The error body this API answers with when the gateway answers for the upstream: a
    /// refused call (the budget, a replay's mismatch) or an upstream it cannot reach.
    pub fn error_body(self, kind: ErrorKind, message: &str) -> Value {
        match (self, kind) {
            (Self::Anthropic, ErrorKind::Refused) => {
                json!({"type": "error", "error": {"type": "invalid_request_error", "message": message}})
            }
            (Self::Anthropic, ErrorKind::Unreachable) => {
                json!({"type": "error", "error": {"type": "api_error", "message": message}})
            }
            (Self::Responses | Self::Chat, ErrorKind::Refused) => {
                json!({"error": {"message": message, "type": "invalid_request_error",
                    "param": null, "code": "budget_exceeded"}})
            }
            (Self::Gemini, ErrorKind::Refused) => {
                json!({"error": {"code": 400, "message": message, "status": "FAILED_PRECONDITION"}})
            }
            (Self::Responses | Self::Chat | Self::Gemini, ErrorKind::Unreachable) => {
                plain_error(message)
            }
        }
    }
}

/// What an error the gateway answers in an API's own shape is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The call is refused (400): the trial's budget, or no recorded answer matches it.
    Refused,
    /// The upstream could not be reached (502).
    Unreachable,
}

/// The error body of a request no API's shape applies to: `{"error": {"message": ...}}`.
pub(super) fn plain_error(message: &str) -> Value {
    json!({"error": {"message": message}})
}

impl Dialect {
    /// Removes from a request the tools the provider runs itself on the web (Anthropic's
    /// `web_search_*` and `web_fetch_*`, the Responses API's `web_search*`, Chat Completions'
    /// `web_search_options`, Gemini's `googleSearch`, `googleSearchRetrieval` and `urlContext`):
    /// through them a model reaches the internet that `network: model` keeps the agent from.
    /// Returns how many were removed.
    pub fn remove_web_tools(self, body: &mut Value) -> usize {
        const GEMINI_WEB: [&str; 6] = [
            "googleSearch",
            "google_search",
            "googleSearchRetrieval",
            "google_search_retrieval",
            "urlContext",
            "url_context",
        ];
        let Some(request) = body.as_object_mut() else {
            return 0;
        };
        let mut removed = 0;
        if self == Dialect::Chat && request.remove("web_search_options").is_some() {
            removed += 1;
        }
        let Some(tools) = request.get_mut("tools").and_then(Value::as_array_mut) else {
            return removed;
        };
        let before = tools.len();
        match self {
            Dialect::Gemini => {
                for tool in tools.iter_mut().filter_map(Value::as_object_mut) {
                    for key in GEMINI_WEB {
                        removed += usize::from(tool.remove(key).is_some());
                    }
                }
                tools.retain(|tool| tool.as_object().is_none_or(|t| !t.is_empty()));
            }
            _ => {
                let web =
                    |kind: &str| kind.starts_with("web_search") || kind.starts_with("web_fetch");
                tools.retain(|tool| !tool["type"].as_str().is_some_and(web));
                removed += before - tools.len();
            }
        }
        removed
    }
}

fn n(value: &Value, pointer: &str) -> u64 {
    value.pointer(pointer).and_then(Value::as_u64).unwrap_or(0)
}

fn anthropic_usage(u: &Value) -> Usage {
    Usage {
        input_tokens: n(u, "/input_tokens"),
        output_tokens: n(u, "/output_tokens"),
        cache_read_tokens: n(u, "/cache_read_input_tokens"),
        cache_write_tokens: n(u, "/cache_creation_input_tokens"),
        ..Usage::default()
    }
}

/// OpenAI counts cached tokens inside `input_tokens`.
fn responses_usage(u: &Value) -> Usage {
    let cached = n(u, "/input_tokens_details/cached_tokens");
    Usage {
        input_tokens: n(u, "/input_tokens").saturating_sub(cached),
        output_tokens: n(u, "/output_tokens"),
        cache_read_tokens: cached,
        cache_write_tokens: n(u, "/input_tokens_details/cache_write_tokens"),
        ..Usage::default()
    }
}

fn chat_usage(u: &Value) -> Usage {
    let cached = n(u, "/prompt_tokens_details/cached_tokens");
    Usage {
        input_tokens: n(u, "/prompt_tokens").saturating_sub(cached),
        output_tokens: n(u, "/completion_tokens"),
        cache_read_tokens: cached,
        ..Usage::default()
    }
}

/// Gemini counts cached tokens inside `promptTokenCount`, and thinking apart from the answer.
fn gemini_usage(u: &Value) -> Usage {
    let cached = n(u, "/cachedContentTokenCount");
    Usage {
        input_tokens: n(u, "/promptTokenCount").saturating_sub(cached),
        output_tokens: n(u, "/candidatesTokenCount") + n(u, "/thoughtsTokenCount"),
        cache_read_tokens: cached,
        ..Usage::default()
    }
}

/// Reads an answer's usage as its bytes pass: SSE events one at a time (nothing kept but the
/// line being read), a plain JSON body whole (up to [`MAX_BODY`]).
#[derive(Debug)]
pub struct Meter {
    dialect: Dialect,
    sse: bool,
    /// The unfinished line (SSE) or the body so far (JSON).
    buffer: Vec<u8>,
    usage: Option<Usage>,
    overflow: bool,
}

/// The most of a non-streamed answer kept to read its usage.
pub const MAX_BODY: usize = 64 * 1024 * 1024;

impl Meter {
    /// A meter for an answer in `dialect`; `sse` when it is an event stream.
    pub fn new(dialect: Dialect, sse: bool) -> Self {
        Self {
            dialect,
            sse,
            buffer: Vec::new(),
            usage: None,
            overflow: false,
        }
    }

    /// Reads the next bytes of the answer (`finish` gives its usage); a plain JSON body past
    /// [`MAX_BODY`] is not counted.
    pub fn feed(&mut self, bytes: &[u8]) {
        if !self.sse {
            if self.buffer.len() + bytes.len() > MAX_BODY {
                self.overflow = true;
            } else {
                self.buffer.extend_from_slice(bytes);
            }
            return;
        }
        for &byte in bytes {
            if byte == b'\n' {
                let line = std::mem::take(&mut self.buffer);
                self.line(&line);
            } else if self.buffer.len() < MAX_BODY {
                self.buffer.push(byte);
            }
        }
    }

    fn line(&mut self, line: &[u8]) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let Some(data) = line.strip_prefix(b"data:") else {
            return;
        };
        let Ok(event) = serde_json::from_slice::<Value>(data.trim_ascii()) else {
            return;
        };
        match self.dialect {
            Dialect::Anthropic => {
                let found = match event.get("type").and_then(Value::as_str) {
                    Some("message_start") => event.pointer("/message/usage"),
                    Some("message_delta") => event.get("usage"),
                    _ => None,
                };
                if let Some(found) = found.and_then(Value::as_object) {
                    // message_delta's counts are cumulative and win over message_start's.
                    let usage = self.usage.get_or_insert_with(Usage::default);
                    let get = |key: &str, slot: &mut u64| {
                        if let Some(v) = found.get(key).and_then(Value::as_u64) {
                            *slot = v;
                        }
                    };
                    get("input_tokens", &mut usage.input_tokens);
                    get("output_tokens", &mut usage.output_tokens);
                    get("cache_read_input_tokens", &mut usage.cache_read_tokens);
                    get("cache_creation_input_tokens", &mut usage.cache_write_tokens);
                }
            }
            Dialect::Responses => {
                if let Some(usage) = event
                    .pointer("/response/usage")
                    .filter(|u| u.is_object())
                    .map(responses_usage)
                {
                    self.usage = Some(usage);
                }
            }
            Dialect::Chat | Dialect::Gemini => {
                if let Some(usage) = self.dialect.usage_of_body(&event) {
                    self.usage = Some(usage);
                }
            }
        }
    }

    /// The answer's usage; `None` when it reported none (or was too large to read).
    pub fn finish(mut self) -> Option<Usage> {
        if self.sse {
            let rest = std::mem::take(&mut self.buffer);
            self.line(&rest);
            return self.usage;
        }
        if self.overflow {
            return None;
        }
        serde_json::from_slice::<Value>(&self.buffer)
            .ok()
            .and_then(|body| self.dialect.usage_of_body(&body))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metered(dialect: Dialect, sse: bool, text: &str, chunk: usize) -> Option<Usage> {
        let mut meter = Meter::new(dialect, sse);
        for piece in text.as_bytes().chunks(chunk) {
            meter.feed(piece);
        }
        meter.finish()
    }

    fn usage(input: u64, output: u64, read: u64, write: u64) -> Usage {
        Usage {
            input_tokens: input,
            output_tokens: output,
            cache_read_tokens: read,
            cache_write_tokens: write,
            ..Usage::default()
        }
    }

    #[test]
    fn calls_are_told_by_their_path() {
        assert_eq!(Dialect::of_call("/v1/messages"), Some(Dialect::Anthropic));
        assert_eq!(Dialect::of_call("/v1/messages/count_tokens"), None);
        assert_eq!(Dialect::of_call("/v1/responses"), Some(Dialect::Responses));
        assert_eq!(
            Dialect::of_call("/v1/chat/completions"),
            Some(Dialect::Chat)
        );
        assert_eq!(
            Dialect::of_call("/v1beta/models/gemini-2.5-pro:streamGenerateContent"),
            Some(Dialect::Gemini)
        );
        assert_eq!(
            Dialect::of_call("/v1beta/models/gemini-2.5-pro:countTokens"),
            None
        );
        assert_eq!(Dialect::of_call("/v1/models"), None);
    }

    #[test]
    fn anthropic_streams_sum_start_and_delta_in_any_chunking() {
        let text = "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":1000,\"cache_read_input_tokens\":5,\"cache_creation_input_tokens\":7,\"output_tokens\":1}}}\n\nevent: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":20}}\n\n";
        for chunk in [1, 7, 4096] {
            assert_eq!(
                metered(Dialect::Anthropic, true, text, chunk),
                Some(usage(1000, 20, 5, 7))
            );
        }
        let body = r#"{"usage":{"input_tokens":3,"output_tokens":4}}"#;
        assert_eq!(
            metered(Dialect::Anthropic, false, body, 5),
            Some(usage(3, 4, 0, 0))
        );
    }

    #[test]
    fn openai_and_gemini_take_cached_tokens_out_of_input() {
        let responses = "data: {\"type\":\"response.created\",\"response\":{\"usage\":null}}\n\ndata: {\"type\":\"response.completed\",\"response\":{\"usage\":{\"input_tokens\":1010,\"input_tokens_details\":{\"cached_tokens\":10},\"output_tokens\":20}}}\n\n";
        assert_eq!(
            metered(Dialect::Responses, true, responses, 3),
            Some(usage(1000, 20, 10, 0))
        );
        let chat = "data: {\"choices\":[]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":1000,\"completion_tokens\":20}}\n\ndata: [DONE]\n\n";
        assert_eq!(
            metered(Dialect::Chat, true, chat, 9),
            Some(usage(1000, 20, 0, 0))
        );
        let gemini = r#"[{"candidates":[]},{"usageMetadata":{"promptTokenCount":1002,"cachedContentTokenCount":2,"candidatesTokenCount":15,"thoughtsTokenCount":5}}]"#;
        assert_eq!(
            metered(Dialect::Gemini, false, gemini, 2),
            Some(usage(1000, 20, 2, 0))
        );
        assert_eq!(metered(Dialect::Chat, false, "not json", 2), None);
    }

    #[test]
    fn the_providers_web_tools_are_removed_and_nothing_else() {
        let mut anthropic = json!({"tools": [{"name": "Bash", "input_schema": {}},
            {"type": "web_search_20250305", "name": "web_search"},
            {"type": "web_fetch_20250910", "name": "web_fetch"}]});
        assert_eq!(Dialect::Anthropic.remove_web_tools(&mut anthropic), 2);
        assert_eq!(
            anthropic["tools"],
            json!([{"name": "Bash", "input_schema": {}}])
        );
        let mut responses = json!({"tools": [{"type": "function", "name": "shell"},
            {"type": "web_search"}, {"type": "web_search_preview"}, {"type": "custom", "name": "apply_patch"}]});
        assert_eq!(Dialect::Responses.remove_web_tools(&mut responses), 2);
        assert_eq!(responses["tools"].as_array().unwrap().len(), 2);
        let mut chat = json!({"web_search_options": {}, "tools": [{"type": "function"}]});
        assert_eq!(Dialect::Chat.remove_web_tools(&mut chat), 1);
        assert_eq!(chat, json!({"tools": [{"type": "function"}]}));
        let mut gemini = json!({"tools": [{"functionDeclarations": [{"name": "web_fetch"}]},
            {"googleSearch": {}}, {"urlContext": {}, "codeExecution": {}}]});
        assert_eq!(Dialect::Gemini.remove_web_tools(&mut gemini), 2);
        // A client-side tool named like one is the agent's own, run in its sandbox: kept.
        assert_eq!(
            gemini["tools"],
            json!([{"functionDeclarations": [{"name": "web_fetch"}]}, {"codeExecution": {}}])
        );
        let mut none = json!({"messages": []});
        assert_eq!(Dialect::Anthropic.remove_web_tools(&mut none), 0);
    }

    #[test]
    fn refusals_wear_each_apis_error_shape() {
        let refusal = |dialect: Dialect, message| dialect.error_body(ErrorKind::Refused, message);
        let body = refusal(Dialect::Anthropic, "spent");
        assert_eq!(body["type"], "error");
        assert_eq!(body["error"]["type"], "invalid_request_error");
        assert_eq!(body["error"]["message"], "spent");
        assert_eq!(
            refusal(Dialect::Gemini, "x")["error"],
            json!({"code": 400, "message": "x", "status": "FAILED_PRECONDITION"})
        );
        for dialect in [Dialect::Chat, Dialect::Responses] {
            assert_eq!(
                refusal(dialect, "x")["error"],
                json!({"message": "x", "type": "invalid_request_error", "param": null,
                    "code": "budget_exceeded"})
            );
        }
    }

    #[test]
    fn an_unreachable_upstream_is_anthropics_api_error_and_plain_elsewhere() {
        let unreachable = |dialect: Dialect| dialect.error_body(ErrorKind::Unreachable, "down");
        assert_eq!(
            unreachable(Dialect::Anthropic),
            json!({"type": "error", "error": {"type": "api_error", "message": "down"}})
        );
        for dialect in [Dialect::Chat, Dialect::Responses, Dialect::Gemini] {
            assert_eq!(unreachable(dialect), plain_error("down"));
        }
        assert_eq!(plain_error("down"), json!({"error": {"message": "down"}}));
    }
}
