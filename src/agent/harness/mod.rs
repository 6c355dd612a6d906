//! The real coding-agent CLIs: twelve built in, each one file holding every fact about it
//! behind [`BuiltinCli`] (program, package, keys, reserved flags, invocation, stream parser),
//! named once by the registry [`HarnessKind::cli`]; any other CLI as `kind: cli` ([`cli`]). The
//! shared parts: the config ([`config`]), what every invocation gets ([`invocation`]), cost
//! estimates ([`pricing`]) and the agent that runs any of them ([`HarnessAgent`]).
//!
//! ## Stream parsers
//!
//! Each CLI gets a [`StreamParser`]: feed it one line of the CLI's stdout at a time and it returns
//! the common [`StreamEvent`]s for that line; at the end, [`StreamParser::finish`] folds what it
//! saw, the exit code and the tail of stderr into a [`ParsedRun`]. Ground truth for every mapping
//! is the streams captured from the pinned CLI versions in `tests/fixtures/agents/`. Spawning the CLIs is the adapters' job, not this
//! module's.
//!
//! Conventions shared by every parser:
//! - For the JSON-line CLIs (Claude, Codex, Gemini, opencode) a line that is not JSON, or JSON
//!   of a shape the parser does not know, becomes [`StreamEvent::Unknown`] (the parsed value, or
//!   the line as a string). mini-swe-agent's stdout is all Unknown text (its trajectory file is
//!   the machine-readable output); aider's plain text is read line by line. Never a panic.
//! - [`Usage::input_tokens`] counts *uncached* input; cache reads and writes are in their own
//!   fields (CLIs that report input including cached tokens have the cached part taken out), so
//!   a price table can price each bucket once.
//! - The last [`StreamEvent::Usage`] a parser emits is the run total so far; the authoritative
//!   total is [`ParsedRun::usage`].
//! - `cost_usd` is only what the CLI itself reported; `None` where it reports none.
//! - `modified_files` lists the paths of write/edit tool calls that succeeded, as the CLI wrote
//!   them (often absolute); [`ParsedRun::relative_to`] makes them workspace-relative.

pub mod adapter;
pub use adapter::prune_home;
mod agent;
pub mod aider;
pub mod builtin;
pub mod claude;
pub mod cli;
pub mod cline;
pub mod codex;
pub mod config;
pub mod continue_cli;
pub mod gemini;
pub mod gptme;
pub mod grok;
pub mod invocation;
pub mod mini_swe;
pub mod opencode;
pub mod pi;
pub mod pricing;
pub mod qwen;
mod status;

use std::path::Path;

use serde_json::Value;

use crate::agent::{CodingError, CodingStatus, ErrorCode, StreamEvent, Usage};

pub use agent::{
    HarnessAgent, ProgramError, agent_tool_dir, container_mounts, find_program, image_needs,
    installed_version, is_loopback, mountable_in_container,
};
pub use aider::AiderParser;
pub use builtin::{BuiltinCli, ConfigRule, Prompt};
pub use claude::ClaudeParser;
pub use cline::ClineParser;
pub use codex::CodexParser;
pub use config::{
    Endpoint, EndpointError, HarnessConfig, HarnessKind, Package, Registry, TurnLimit,
};
pub use continue_cli::ContinueParser;
pub use gemini::GeminiParser;
pub use gptme::GptmeParser;
pub use grok::GrokParser;
pub use mini_swe::MiniSweParser;
pub use opencode::OpencodeParser;
pub use pi::PiParser;
pub use pricing::Price;
pub use qwen::QwenParser;

/// Turns one CLI's stdout, line by line, into [`StreamEvent`]s and a final [`ParsedRun`].
pub trait StreamParser {
    /// One line of stdout, without its newline. Never panics; unknown or unparseable lines
    /// come back as [`StreamEvent::Unknown`].
    fn line(&mut self, line: &str) -> Vec<StreamEvent>;

    /// The verdict, from what the stream showed, the exit code (`None` when killed by a signal)
    /// and the tail of stderr.
    fn finish(self, exit_code: Option<i32>, stderr_tail: &str) -> ParsedRun;
}

/// What a CLI's run amounted to, as its own output tells it.
#[derive(Debug, Clone, PartialEq)]
pub struct ParsedRun {
    /// How the run ended.
    pub status: CodingStatus,
    /// Why it failed; `None` when it did not.
    pub error: Option<CodingError>,
    /// The run's total; `None` when the CLI reported none.
    pub usage: Option<Usage>,
    /// The session to resume; `None` when the CLI showed none.
    pub session_id: Option<String>,
    /// The agent's final text, display only.
    pub text: Option<String>,
    /// Paths of successful write/edit tool calls, as the CLI wrote them.
    pub modified_files: Vec<String>,
}

impl ParsedRun {
    fn completed() -> Self {
        Self {
            status: CodingStatus::Completed,
            error: None,
            usage: None,
            session_id: None,
            text: None,
            modified_files: Vec::new(),
        }
    }

    fn failed(error: CodingError) -> Self {
        Self {
            status: status_for(error.code),
            error: Some(error),
            ..Self::completed()
        }
    }

    fn max_turns() -> Self {
        Self {
            status: CodingStatus::MaxTurns,
            ..Self::completed()
        }
    }

    /// The run with what the stream showed beside its verdict: its usage and session (the
    /// verdict's where the stream has none) and the files it saw written.
    fn with_stream(
        mut self,
        usage: Option<Usage>,
        session_id: Option<String>,
        modified_files: Vec<String>,
    ) -> Self {
        self.usage = usage.or(self.usage);
        self.session_id = session_id.or(self.session_id);
        self.modified_files = modified_files;
        self
    }

    /// Rewrites `modified_files` under `workspace` as paths relative to it (others stay as is).
    pub fn relative_to(mut self, workspace: &Path) -> Self {
        for file in &mut self.modified_files {
            if let Ok(rel) = Path::new(file.as_str()).strip_prefix(workspace) {
                *file = rel.to_string_lossy().into_owned();
            }
        }
        let mut seen = std::collections::HashSet::new();
        self.modified_files.retain(|f| seen.insert(f.clone()));
        self
    }
}

/// The status a failure with `code` resolves to (as [`crate::agent::CodingResult::failed`]).
fn status_for(code: ErrorCode) -> CodingStatus {
    match code {
        ErrorCode::Aborted => CodingStatus::Aborted,
        ErrorCode::Timeout => CodingStatus::MaxDuration,
        _ => CodingStatus::Error,
    }
}

/// Parses a line as JSON, or returns the [`StreamEvent::Unknown`] that stands for it.
fn parse_line(line: &str) -> Result<Value, StreamEvent> {
    serde_json::from_str::<Value>(line.trim()).map_err(|_| unknown_text(line))
}

/// A line of a JSON-lines stream as JSON, or what stands for it instead: nothing for a blank
/// line, [`StreamEvent::Unknown`] for one that is not JSON.
fn json_line(line: &str) -> Result<Value, Vec<StreamEvent>> {
    if line.trim().is_empty() {
        return Err(Vec::new());
    }
    parse_line(line).map_err(|event| vec![event])
}

fn unknown_text(line: &str) -> StreamEvent {
    StreamEvent::Unknown {
        raw: Value::String(line.to_owned()),
    }
}

fn unknown(value: Value) -> StreamEvent {
    StreamEvent::Unknown { raw: value }
}

fn system(subtype: &str, message: impl Into<String>, data: Option<Value>) -> StreamEvent {
    StreamEvent::System {
        subtype: subtype.into(),
        message: message.into(),
        data,
    }
}

fn str_field<'a>(value: &'a Value, key: &str) -> Option<&'a str> {
    value.get(key).and_then(Value::as_str)
}

fn u64_field(value: &Value, key: &str) -> u64 {
    value.get(key).and_then(Value::as_u64).unwrap_or(0)
}

fn push_unique(files: &mut Vec<String>, path: &str) {
    if !path.is_empty() && !files.iter().any(|f| f == path) {
        files.push(path.to_owned());
    }
}

/// The error code an HTTP status from the model API stands for.
///
/// A 408 or 504 is the API's failure, not the run's deadline: `timeout` (and `max_duration`)
/// stay for the limits deltabench itself enforces.
fn http_error_code(status: u64) -> ErrorCode {
    match status {
        429 => ErrorCode::RateLimited,
        _ => ErrorCode::SdkError,
    }
}

/// The error code an error message reads as: rate limits and context overflows by their usual
/// wording, `fallback` otherwise.
fn classify_message(message: &str, fallback: ErrorCode) -> ErrorCode {
    let lower = message.to_ascii_lowercase();
    if lower.contains("rate limit")
        || lower.contains("rate_limit")
        || lower.contains("ratelimit")
        || lower.contains("too many requests")
        || lower.contains("resource_exhausted")
    {
        ErrorCode::RateLimited
    } else if lower.contains("context_length_exceeded")
        || lower.contains("context window")
        || lower.contains("contextwindowexceeded")
        || lower.contains("context length")
        || lower.contains("prompt is too long")
        || lower.contains("maximum context")
    {
        ErrorCode::ContextExhausted
    } else {
        fallback
    }
}

/// The failure of a run whose stream held no verdict: the exit code and the last stderr lines.
fn exit_failure(cli: &str, exit_code: Option<i32>, stderr_tail: &str) -> CodingError {
    let tail = last_lines(stderr_tail, 5);
    let how = match exit_code {
        Some(code) => format!("{cli} exited with code {code}"),
        None => format!("{cli} was killed by a signal"),
    };
    let message = if tail.is_empty() {
        format!("{how} without a final result")
    } else {
        format!("{how} without a final result: {tail}")
    };
    let code = classify_message(stderr_tail, ErrorCode::Unknown);
    CodingError::new(code, message)
}

fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    lines[lines.len().saturating_sub(n)..].join(" | ")
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A stream captured from a pinned CLI, in `tests/fixtures/agents/`.
    macro_rules! fixture {
        ($name:literal) => {
            include_str!(concat!("../../../tests/fixtures/agents/", $name))
        };
    }
    pub(crate) use fixture;

    /// Feeds every line of `text` to `parser`, returning all events.
    pub(crate) fn feed<P: StreamParser>(parser: &mut P, text: &str) -> Vec<StreamEvent> {
        text.lines().flat_map(|l| parser.line(l)).collect()
    }

    /// Feeds `text` to `parser`, then finishes it as a CLI exiting `exit` with no stderr.
    pub(crate) fn parse<P: StreamParser>(
        mut parser: P,
        text: &str,
        exit: i32,
    ) -> (Vec<StreamEvent>, ParsedRun) {
        let events = feed(&mut parser, text);
        (events, parser.finish(Some(exit), ""))
    }

    /// The `type` of each event, in order.
    pub(crate) fn kinds(events: &[StreamEvent]) -> Vec<&'static str> {
        events
            .iter()
            .map(|e| match e {
                StreamEvent::System { .. } => "system",
                StreamEvent::Assistant { .. } => "assistant",
                StreamEvent::Thinking { .. } => "thinking",
                StreamEvent::ToolCall { .. } => "tool_call",
                StreamEvent::ToolResult { .. } => "tool_result",
                StreamEvent::Usage { .. } => "usage",
                StreamEvent::Result { .. } => "result",
                StreamEvent::Unknown { .. } => "unknown",
            })
            .collect()
    }

    /// Asserts the events are the `opening` notices, then a basic run's turns: say, write a
    /// file, say, run a command, say, and the totals.
    pub(crate) fn assert_basic_turns(events: &[StreamEvent], opening: &[&str]) {
        let turns = [
            "assistant",
            "tool_call",
            "tool_result",
            "assistant",
            "tool_call",
            "tool_result",
            "assistant",
            "usage",
            "result",
        ];
        assert_eq!(kinds(events), [opening, &turns[..]].concat());
    }

    /// Whether each tool result is an error, in order.
    pub(crate) fn tool_errors(events: &[StreamEvent]) -> Vec<bool> {
        events
            .iter()
            .filter_map(|e| match e {
                StreamEvent::ToolResult { is_error, .. } => Some(*is_error),
                _ => None,
            })
            .collect()
    }

    /// A usage of `input` and `output` tokens over `calls` model calls costing `cost`.
    pub(crate) fn usage(input: u64, output: u64, calls: u64, cost: f64) -> Usage {
        Usage {
            input_tokens: input,
            output_tokens: output,
            model_calls: calls,
            cost_usd: Some(cost),
            ..Usage::default()
        }
    }

    /// Asserts a tool call named `name` is followed by a result with the same id.
    pub(crate) fn assert_call_then_result(events: &[StreamEvent], name: &str) {
        let (pos, id) = events
            .iter()
            .enumerate()
            .find_map(|(i, e)| match e {
                StreamEvent::ToolCall { id, name: n, .. } if n == name => Some((i, id.clone())),
                _ => None,
            })
            .unwrap_or_else(|| panic!("no tool_call {name} in {events:#?}"));
        assert!(
            events[pos + 1..].iter().any(|e| matches!(
                e,
                StreamEvent::ToolResult { id: rid, .. } if *rid == id
            )),
            "no tool_result for {name} ({id:?})"
        );
    }

    /// The garbage and truncated-JSON lines every parser must survive.
    pub(crate) fn assert_survives_garbage<P: StreamParser>(mut parser: P, truncated: &str) {
        for line in [
            "garbage \u{0} not json {",
            truncated,
            "",
            "[1,2",
            "{}",
            "null",
            "42",
        ] {
            let events = parser.line(line);
            for event in &events {
                assert!(
                    matches!(event, StreamEvent::Unknown { .. }),
                    "{line:?} gave {event:?}"
                );
            }
        }
        let events = parser.line(truncated);
        assert_eq!(kinds(&events), ["unknown"], "{truncated}");
        let _ = parser.finish(Some(1), "boom");
    }

    #[test]
    fn gateway_timeouts_are_api_errors_not_the_run_deadline() {
        assert_eq!(http_error_code(504), ErrorCode::SdkError);
        assert_eq!(http_error_code(408), ErrorCode::SdkError);
        assert_eq!(http_error_code(429), ErrorCode::RateLimited);
    }

    #[test]
    fn classify_message_reads_rate_limits_and_context() {
        assert_eq!(
            classify_message("429 Too Many Requests", ErrorCode::Unknown),
            ErrorCode::RateLimited
        );
        assert_eq!(
            classify_message("prompt is too long: 300000 tokens", ErrorCode::Unknown),
            ErrorCode::ContextExhausted
        );
        assert_eq!(
            classify_message("scripted failure", ErrorCode::SdkError),
            ErrorCode::SdkError
        );
    }

    #[test]
    fn parsers_box_as_trait_objects() {
        let parsers: Vec<Box<dyn StreamParser>> = vec![
            Box::new(AiderParser::new()),
            Box::new(ClaudeParser::new()),
            Box::new(CodexParser::new()),
            Box::new(GeminiParser::new()),
            Box::new(MiniSweParser::new()),
            Box::new(OpencodeParser::new()),
        ];
        for mut parser in parsers {
            let _ = parser.line("not json");
        }
    }

    #[test]
    fn relative_to_strips_the_workspace() {
        let run = ParsedRun {
            modified_files: vec![
                "/ws/a/hello.txt".into(),
                "b.txt".into(),
                "/ws/a/hello.txt".into(),
            ],
            ..ParsedRun::completed()
        };
        let run = run.relative_to(Path::new("/ws/a"));
        assert_eq!(run.modified_files, ["hello.txt", "b.txt"]);
    }
}
