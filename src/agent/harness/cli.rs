//! `kind: cli`: a CLI deltabench has no module for, described in the agents file. The command
//! line is a template ([`PLACEHOLDERS`]), the environment that points it at the endpoint comes
//! from its [`CliDialect`], and its stdout is read by one of the existing parsers
//! ([`OutputParser`]) or, for a CLI that prints JSON lines of its own shape, by
//! [`JsonLinesParser`] with the fields where its final answer, session id and usage are.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::adapter::{CliAdapter, CliRun, Plain, RunStart};
use super::{
    AiderParser, ClaudeParser, CodexParser, GeminiParser, OpencodeParser, ParsedRun, StreamParser,
    exit_failure, unknown, unknown_text,
};
use crate::agent::{CodingStatus, StreamEvent, Usage};

/// The placeholders a template may hold, each written `{name}`.
pub const PLACEHOLDERS: [&str; 8] = [
    "instruction",
    "model",
    "max_turns",
    "workspace",
    "home",
    "session",
    "endpoint",
    "api_key",
];

/// Which API the CLI speaks, so which variables point it at the endpoint.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    strum::VariantNames,
    strum::EnumString,
    strum::IntoStaticStr,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum CliDialect {
    /// `ANTHROPIC_BASE_URL` (the root) and `ANTHROPIC_API_KEY`.
    Anthropic,
    /// `OPENAI_BASE_URL` and `OPENAI_API_BASE` (the root + `/v1`) and `OPENAI_API_KEY`.
    Openai,
    /// `GOOGLE_GEMINI_BASE_URL` (the root) and `GEMINI_API_KEY`.
    Gemini,
}

impl CliDialect {
    /// The variables that point a client of this dialect at `url` (the endpoint's root).
    pub(super) fn env(self, url: &str) -> Vec<(&'static str, String)> {
        match self {
            Self::Anthropic => vec![("ANTHROPIC_BASE_URL", url.to_owned())],
            Self::Openai => vec![
                ("OPENAI_BASE_URL", format!("{url}/v1")),
                ("OPENAI_API_BASE", format!("{url}/v1")),
            ],
            Self::Gemini => vec![("GOOGLE_GEMINI_BASE_URL", url.to_owned())],
        }
    }

    /// The variable the API key goes in.
    pub fn key_env(self) -> &'static str {
        match self {
            Self::Anthropic => "ANTHROPIC_API_KEY",
            Self::Openai => "OPENAI_API_KEY",
            Self::Gemini => "GEMINI_API_KEY",
        }
    }
}

/// How the CLI's stdout is read.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    strum::VariantNames,
    strum::EnumString,
    strum::IntoStaticStr,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum OutputParser {
    /// Claude Code's `--output-format stream-json`.
    StreamJson,
    /// Gemini CLI's `--output-format stream-json`.
    GeminiStreamJson,
    /// Codex's `exec --json` events.
    CodexJson,
    /// opencode's `run --format json` events.
    OpencodeJson,
    /// One JSON object a line, of the CLI's own shape: `result`, `session_id` and `usage` say
    /// which fields hold the final answer, the session id and the token counts.
    JsonLines,
    /// Plain text: every line is the agent's prose, the last non-empty one its final answer.
    Text,
    /// aider's plain text (its `Tokens:` and `Applied edit` lines read).
    AiderText,
}

/// A `kind: cli` agent's definition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CliDefinition {
    /// The arguments, placeholders and all.
    pub args: Vec<String>,
    /// The API the CLI speaks: which variables point it at the endpoint.
    pub dialect: CliDialect,
    /// How its stdout is read.
    pub parser: OutputParser,
    /// `json-lines`: dotted paths (`a.b`) to the final answer, the session id and the usage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<String>,
    /// `json-lines`: the dotted path to the session id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// `json-lines`: the dotted path to the token counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<String>,
}

impl CliDefinition {
    /// Whether the template passes `max_turns` to the CLI (which then enforces it itself).
    pub fn native_turn_limit(&self) -> bool {
        self.args.iter().any(|arg| {
            placeholders(arg)
                .iter()
                .any(|(_, name)| name == "max_turns")
        })
    }
}

/// The `{name}` placeholders in `text` with their byte offsets; `{` not followed by a
/// lowercase name and `}` (JSON in an argument, say) is no placeholder.
pub fn placeholders(text: &str) -> Vec<(usize, String)> {
    let mut found = Vec::new();
    let mut rest = text;
    let mut offset = 0;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        let name_len = after
            .find(|c: char| !(c.is_ascii_lowercase() || c == '_'))
            .unwrap_or(after.len());
        if name_len > 0 && after[name_len..].starts_with('}') {
            found.push((offset + open, after[..name_len].to_owned()));
        }
        offset += open + 1;
        rest = after;
    }
    found
}

/// `text` with its placeholders filled; an unset value becomes empty (the suite loader makes
/// sure a template only names values the agent sets).
pub(super) fn fill(text: &str, values: &[(&str, Option<String>)]) -> String {
    let mut out = text.to_owned();
    for (name, value) in values {
        let key = format!("{{{name}}}");
        if out.contains(&key) {
            out = out.replace(&key, value.as_deref().unwrap_or_default());
        }
    }
    out
}

/// The adapter of a `kind: cli` agent without a definition, which the suite loader never
/// builds: its output is read as plain text.
pub(crate) struct NoDefinition;

pub(crate) const NO_DEFINITION: NoDefinition = NoDefinition;

impl CliAdapter for NoDefinition {
    fn begin(&self, _: &RunStart<'_>) -> Box<dyn CliRun> {
        Plain::boxed(TextParser::default())
    }
}

impl CliAdapter for CliDefinition {
    fn begin(&self, _: &RunStart<'_>) -> Box<dyn CliRun> {
        match self.parser {
            OutputParser::StreamJson => Plain::boxed(ClaudeParser::new()),
            OutputParser::GeminiStreamJson => Plain::boxed(GeminiParser::new()),
            OutputParser::CodexJson => Plain::boxed(CodexParser::new()),
            OutputParser::OpencodeJson => Plain::boxed(OpencodeParser::new()),
            OutputParser::AiderText => Plain::boxed(AiderParser::new()),
            OutputParser::JsonLines => Plain::boxed(JsonLinesParser {
                result: self.result.clone(),
                session_id: self.session_id.clone(),
                usage: self.usage.clone(),
                ..JsonLinesParser::default()
            }),
            OutputParser::Text => Plain::boxed(TextParser::default()),
        }
    }
}

/// The value at a dotted path (`a.b.0`) in `value`.
fn at_path<'a>(value: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(value, |v, key| match v {
        Value::Array(items) => items.get(key.parse::<usize>().ok()?),
        _ => v.get(key),
    })
}

/// Token counts from an object in any of the usual namings (Anthropic, OpenAI, Gemini).
fn read_usage(value: &Value) -> Option<Usage> {
    let obj = value.as_object()?;
    let field = |names: &[&str]| {
        names
            .iter()
            .find_map(|n| obj.get(*n).and_then(Value::as_u64))
    };
    let input = field(&["input_tokens", "prompt_tokens", "promptTokenCount"]);
    let output = field(&["output_tokens", "completion_tokens", "candidatesTokenCount"]);
    if input.is_none() && output.is_none() {
        return None;
    }
    let cache_read = field(&[
        "cache_read_input_tokens",
        "cached_tokens",
        "cachedContentTokenCount",
    ])
    .unwrap_or(0);
    Some(Usage {
        // Input that counts its cached part has it taken out (see the module docs of `harness`).
        input_tokens: input.unwrap_or(0).saturating_sub(
            if obj.contains_key("cache_read_input_tokens") {
                0
            } else {
                cache_read
            },
        ),
        output_tokens: output.unwrap_or(0),
        cache_read_tokens: cache_read,
        cache_write_tokens: field(&["cache_creation_input_tokens"]).unwrap_or(0),
        cost_usd: ["total_cost_usd", "cost_usd", "cost"]
            .iter()
            .find_map(|n| obj.get(*n).and_then(Value::as_f64)),
        ..Usage::default()
    })
}

/// JSON lines of a CLI's own shape, read at the fields its definition names.
#[derive(Debug, Default)]
pub struct JsonLinesParser {
    result: Option<String>,
    session_id: Option<String>,
    usage: Option<String>,
    text: Option<String>,
    session: Option<String>,
    total: Option<Usage>,
}

impl StreamParser for JsonLinesParser {
    fn line(&mut self, line: &str) -> Vec<StreamEvent> {
        let value = match serde_json::from_str::<Value>(line.trim()) {
            Ok(value @ Value::Object(_)) => value,
            Ok(other) => return vec![unknown(other)],
            Err(_) => return vec![unknown_text(line)],
        };
        let mut events = Vec::new();
        if self.session.is_none()
            && let Some(id) = self
                .session_id
                .as_deref()
                .and_then(|p| at_path(&value, p))
                .and_then(Value::as_str)
        {
            self.session = Some(id.to_owned());
        }
        if let Some(usage) = self
            .usage
            .as_deref()
            .and_then(|p| at_path(&value, p))
            .and_then(read_usage)
        {
            // The last usage the CLI printed is its run total.
            self.total = Some(usage.clone());
            events.push(StreamEvent::Usage { usage });
        }
        if let Some(text) = self
            .result
            .as_deref()
            .and_then(|p| at_path(&value, p))
            .and_then(Value::as_str)
        {
            self.text = Some(text.to_owned());
            events.push(StreamEvent::Assistant {
                text: text.to_owned(),
            });
        }
        if events.is_empty() {
            events.push(unknown(value));
        }
        events
    }

    fn finish(self, exit_code: Option<i32>, stderr_tail: &str) -> ParsedRun {
        let mut run = if exit_code == Some(0) {
            ParsedRun::completed()
        } else {
            ParsedRun::failed(exit_failure("the CLI", exit_code, stderr_tail))
        };
        run.text = self.text;
        run.session_id = self.session;
        run.usage = self.total;
        run
    }
}

/// Plain text: each non-empty line is the agent's prose.
#[derive(Debug, Default)]
pub struct TextParser {
    last: Option<String>,
}

impl StreamParser for TextParser {
    fn line(&mut self, line: &str) -> Vec<StreamEvent> {
        let text = line.trim_end();
        if text.trim().is_empty() {
            return Vec::new();
        }
        self.last = Some(text.to_owned());
        vec![StreamEvent::Assistant {
            text: text.to_owned(),
        }]
    }

    fn finish(self, exit_code: Option<i32>, stderr_tail: &str) -> ParsedRun {
        let mut run = if exit_code == Some(0) {
            ParsedRun::completed()
        } else {
            ParsedRun::failed(exit_failure("the CLI", exit_code, stderr_tail))
        };
        if run.status == CodingStatus::Completed {
            run.text = self.last;
        }
        run
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::harness::tests::{assert_survives_garbage, feed, kinds};

    #[test]
    fn placeholders_are_lowercase_names_in_braces() {
        assert_eq!(
            placeholders("--model={model} {\"a\":1} {Nope} {max_turns}"),
            [(8, "model".to_owned()), (31, "max_turns".to_owned())]
        );
        assert!(placeholders("{}").is_empty());
    }

    #[test]
    fn json_lines_read_the_named_fields() {
        let mut parser = JsonLinesParser {
            result: Some("final.text".into()),
            session_id: Some("sid".into()),
            usage: Some("stats.usage".into()),
            ..JsonLinesParser::default()
        };
        let events = feed(
            &mut parser,
            "{\"sid\":\"s-1\",\"type\":\"start\"}\nnot json\n{\"stats\":{\"usage\":{\"prompt_tokens\":120,\"completion_tokens\":7,\"cached_tokens\":20}}}\n{\"final\":{\"text\":\"done\"}}\n",
        );
        assert_eq!(kinds(&events), ["unknown", "unknown", "usage", "assistant"]);
        let run = parser.finish(Some(0), "");
        assert_eq!(run.status, CodingStatus::Completed);
        assert_eq!(run.session_id.as_deref(), Some("s-1"));
        assert_eq!(run.text.as_deref(), Some("done"));
        let usage = run.usage.unwrap();
        assert_eq!(
            (
                usage.input_tokens,
                usage.output_tokens,
                usage.cache_read_tokens
            ),
            (100, 7, 20)
        );
    }

    #[test]
    fn json_lines_and_text_survive_garbage_and_fail_on_a_bad_exit() {
        assert_survives_garbage(JsonLinesParser::default(), "{\"type\":\"trunc");
        let mut text = TextParser::default();
        assert_eq!(
            kinds(&feed(&mut text, "hello\n\n  \nbye\n")),
            ["assistant", "assistant"]
        );
        let run = text.finish(Some(2), "boom");
        assert_eq!(run.status, CodingStatus::Error);
        assert!(run.error.unwrap().message.contains("code 2"));
    }

    #[test]
    fn the_template_is_filled_and_the_dialect_points_at_the_endpoint() {
        let definition = CliDefinition {
            args: vec![
                "-p".into(),
                "--model={model}".into(),
                "--cwd".into(),
                "{workspace}".into(),
                "--".into(),
                "{instruction}".into(),
            ],
            dialect: CliDialect::Openai,
            parser: OutputParser::Text,
            result: None,
            session_id: None,
            usage: None,
        };
        let config = super::super::HarnessConfig {
            model: Some("m1".into()),
            env: [("MY_URL".to_owned(), "{endpoint}/x".to_owned())].into(),
            cli: Some(definition.clone()),
            ..Default::default()
        };
        let home = std::path::Path::new("/h");
        let inv = super::super::invocation::invocation(
            super::super::HarnessKind::Cli,
            &config,
            &super::super::invocation::RunPaths {
                task: "-fix it",
                resume: None,
                new_session: "s",
                home,
                workspace: std::path::Path::new("/w"),
                scratch: std::path::Path::new("/s"),
                endpoint: Some("http://127.0.0.1:9"),
                api_key: Some("k"),
            },
        );
        assert_eq!(
            inv.args,
            ["-p", "--model=m1", "--cwd", "/w", "--", "-fix it"]
        );
        let env = |key: &str| {
            inv.env
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.as_str())
        };
        assert_eq!(env("OPENAI_BASE_URL"), Some("http://127.0.0.1:9/v1"));
        assert_eq!(env("OPENAI_API_KEY"), Some("k"));
        assert_eq!(env("MY_URL"), Some("http://127.0.0.1:9/x"));
        assert_eq!(env("HOME"), Some("/h"));
        assert!(!definition.native_turn_limit());
    }
}
