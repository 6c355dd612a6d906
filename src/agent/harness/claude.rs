//! Claude Code: `claude -p PROMPT --output-format stream-json --verbose`.
//!
//! One JSON object per line (clis.md §1). `assistant` lines carry ONE content block each and a
//! partial `usage` that is never summed; the final `result` line is authoritative for usage,
//! cost, status and error. `stream_event` lines (`--include-partial-messages`) repeat what the
//! complete `assistant` lines carry and map to no event.

use super::builtin::{BuiltinCli, Doc, Facts, PROMPT, Prompt, SESSION, STREAM};
use super::cli::CliDialect;
use super::config::{HarnessConfig, Package, Registry, TurnLimit};
use super::invocation::{Invocation, RunPaths, push, set_env};
use std::collections::{HashMap, HashSet};

use serde_json::Value;

use super::{
    ParsedRun, StreamParser, exit_failure, http_error_code, json_line, push_unique, str_field,
    system, u64_field, unknown,
};
use crate::agent::{CodingError, CodingStatus, ErrorCode, StreamEvent, Usage};

const FACTS: Facts = Facts {
    program: "claude",
    description: "Claude Code, run headless (claude -p).",
    doc: Doc {
        name: "Claude Code",
        program_note: "",
        resume_note: "",
        turns: "`--max-turns`",
        modes_note: "",
        cost: "the CLI's final `result`",
    },
    package: Package {
        registry: Registry::Npm,
        name: "@anthropic-ai/claude-code",
        version: "2.1.197",
    },
    key_env: "ANTHROPIC_API_KEY",
    no_resume: None,
    permission_modes: &[
        "bypassPermissions",
        "acceptEdits",
        "default",
        "plan",
        "dontAsk",
        "auto",
    ],
    turn_limit: TurnLimit::Native,
    appends_system_prompt: true,
    reserved_flags: &[
        ("-p", PROMPT),
        ("--print", PROMPT),
        ("--output-format", STREAM),
        ("--input-format", STREAM),
        ("--session-id", SESSION),
        ("--resume", SESSION),
        ("-r", SESSION),
        ("--continue", SESSION),
        ("-c", SESSION),
        ("--model", "use `model:`"),
        ("--permission-mode", "use `permission_mode:`"),
        ("--max-turns", "use `max_turns:`"),
        ("--append-system-prompt", "use `append_system_prompt:`"),
    ],
    prompt: Prompt::AfterDashes,
};

/// Tools whose successful call wrote the file named by their input.
const WRITE_TOOLS: [(&str, &str); 4] = [
    ("Write", "file_path"),
    ("Edit", "file_path"),
    ("MultiEdit", "file_path"),
    ("NotebookEdit", "notebook_path"),
];

/// A [`StreamParser`] for Claude Code's `stream-json` stdout; the final `result` line decides usage, cost and status.
#[derive(Debug)]
pub struct ClaudeParser {
    /// The CLI's name in messages, and the tools whose calls write the file their input names:
    /// Qwen Code prints the same stream with its own tool names.
    cli: &'static str,
    write_tools: &'static [(&'static str, &'static str)],
    session_id: Option<String>,
    /// Tool name and, for write tools, the path, by tool_use id.
    tools: HashMap<String, (String, Option<String>)>,
    modified_files: Vec<String>,
    /// Distinct ids of real (non-synthetic) model messages.
    messages: HashSet<String>,
    last_text: Option<String>,
    /// The last `system/api_retry` delay, in seconds.
    last_retry_delay: Option<f64>,
    result: Option<Value>,
}

impl Default for ClaudeParser {
    fn default() -> Self {
        Self::speaking_for("claude", &WRITE_TOOLS)
    }
}

impl ClaudeParser {
    /// A parser that has seen no line yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The parser of another CLI that prints Claude Code's stream-json.
    pub fn speaking_for(
        cli: &'static str,
        write_tools: &'static [(&'static str, &'static str)],
    ) -> Self {
        Self {
            cli,
            write_tools,
            session_id: None,
            tools: HashMap::new(),
            modified_files: Vec::new(),
            messages: HashSet::new(),
            last_text: None,
            last_retry_delay: None,
            result: None,
        }
    }

    /// Whether the stream had its final `result` line.
    pub fn has_result(&self) -> bool {
        self.result.is_some()
    }

    fn assistant(&mut self, value: &Value) -> Vec<StreamEvent> {
        let Some(message) = value.get("message") else {
            return vec![unknown(value.clone())];
        };
        let synthetic = str_field(message, "model") == Some("<synthetic>");
        if !synthetic && let Some(id) = str_field(message, "id") {
            self.messages.insert(id.to_owned());
        }
        let blocks = message
            .get("content")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let mut events = Vec::new();
        for block in blocks {
            match str_field(&block, "type") {
                Some("text") => {
                    let text = str_field(&block, "text").unwrap_or_default().to_owned();
                    if synthetic {
                        // An API failure the CLI dressed as an assistant message.
                        events.push(system("error", text, Some(value.clone())));
                    } else {
                        self.last_text = Some(text.clone());
                        events.push(StreamEvent::Assistant { text });
                    }
                }
                Some("thinking") => events.push(StreamEvent::Thinking {
                    text: str_field(&block, "thinking").unwrap_or_default().to_owned(),
                }),
                Some("redacted_thinking") => events.push(StreamEvent::Thinking {
                    text: String::new(),
                }),
                Some("tool_use") => {
                    let id = str_field(&block, "id").map(str::to_owned);
                    let name = str_field(&block, "name").unwrap_or_default().to_owned();
                    let args = block.get("input").cloned().unwrap_or(Value::Null);
                    let path = self
                        .write_tools
                        .iter()
                        .find(|(tool, _)| *tool == name)
                        .and_then(|(_, key)| str_field(&args, key))
                        .map(str::to_owned);
                    if let Some(id) = &id {
                        self.tools.insert(id.clone(), (name.clone(), path));
                    }
                    events.push(StreamEvent::ToolCall { id, name, args });
                }
                _ => events.push(unknown(block)),
            }
        }
        events
    }

    fn user(&mut self, value: &Value) -> Vec<StreamEvent> {
        let blocks = value
            .pointer("/message/content")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let mut events = Vec::new();
        for block in blocks {
            if str_field(&block, "type") != Some("tool_result") {
                continue;
            }
            let id = str_field(&block, "tool_use_id").map(str::to_owned);
            let is_error = block
                .get("is_error")
                .and_then(Value::as_bool)
                .unwrap_or(false);
            let known = id.as_ref().and_then(|id| self.tools.get(id)).cloned();
            if !is_error && let Some((_, Some(path))) = &known {
                push_unique(&mut self.modified_files, path);
            }
            events.push(StreamEvent::ToolResult {
                id,
                name: known.map(|(name, _)| name),
                result: block.get("content").cloned().unwrap_or(Value::Null),
                is_error,
            });
        }
        if events.is_empty() {
            // A replayed prompt or another user line with no tool result.
            events.push(unknown(value.clone()));
        }
        events
    }

    fn system_line(&mut self, value: &Value) -> Vec<StreamEvent> {
        let subtype = str_field(value, "subtype").unwrap_or("system");
        let message = match subtype {
            "init" => format!(
                "model {} in {} ({})",
                str_field(value, "model").unwrap_or("?"),
                str_field(value, "cwd").unwrap_or("?"),
                str_field(value, "permissionMode").unwrap_or("?"),
            ),
            "api_retry" => {
                if let Some(ms) = value.get("retry_delay_ms").and_then(Value::as_f64) {
                    self.last_retry_delay = Some(ms / 1000.0);
                }
                format!(
                    "retry {}/{} after HTTP {} ({})",
                    u64_field(value, "attempt"),
                    u64_field(value, "max_retries"),
                    u64_field(value, "error_status"),
                    str_field(value, "error").unwrap_or("?"),
                )
            }
            other => str_field(value, "status").unwrap_or(other).to_owned(),
        };
        vec![system(subtype, message, Some(value.clone()))]
    }

    fn result_line(&mut self, value: &Value) -> Vec<StreamEvent> {
        self.result = Some(value.clone());
        let mut events = Vec::new();
        if let Some(usage) = result_usage(value, self.messages.len() as u64) {
            events.push(StreamEvent::Usage { usage });
        }
        let (status, _) = verdict(value, self.last_retry_delay);
        events.push(StreamEvent::Result {
            status,
            text: str_field(value, "result").map(str::to_owned),
        });
        events
    }
}

/// Usage from the `result` line: the per-model `modelUsage` totals when present (they agree
/// with `total_cost_usd`; in the max-budget capture `result.usage` holds only the first call),
/// else `result.usage`. Cost is `total_cost_usd`.
fn result_usage(result: &Value, model_calls: u64) -> Option<Usage> {
    let cost_usd = result.get("total_cost_usd").and_then(Value::as_f64);
    let models = result
        .get("modelUsage")
        .and_then(Value::as_object)
        .filter(|m| !m.is_empty());
    let mut usage = if let Some(models) = models {
        let mut usage = Usage::default();
        for model in models.values() {
            usage.input_tokens += u64_field(model, "inputTokens");
            usage.output_tokens += u64_field(model, "outputTokens");
            usage.cache_read_tokens += u64_field(model, "cacheReadInputTokens");
            usage.cache_write_tokens += u64_field(model, "cacheCreationInputTokens");
        }
        usage
    } else {
        let raw = result.get("usage")?;
        Usage {
            input_tokens: u64_field(raw, "input_tokens"),
            output_tokens: u64_field(raw, "output_tokens"),
            cache_read_tokens: u64_field(raw, "cache_read_input_tokens"),
            cache_write_tokens: u64_field(raw, "cache_creation_input_tokens"),
            ..Usage::default()
        }
    };
    usage.model_calls = model_calls;
    usage.cost_usd = cost_usd;
    Some(usage)
}

/// Status and error from the `result` line (clis.md §1 table): `is_error` and
/// `api_error_status` win over `subtype`, which says `success` on API failures.
fn verdict(result: &Value, retry_delay: Option<f64>) -> (CodingStatus, Option<CodingError>) {
    let subtype = str_field(result, "subtype").unwrap_or_default();
    let is_error = result
        .get("is_error")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    if subtype == "error_max_turns" {
        return (CodingStatus::MaxTurns, None);
    }
    if !is_error && subtype == "success" {
        return (CodingStatus::Completed, None);
    }
    let errors = result
        .get("errors")
        .and_then(Value::as_array)
        .map(|errors| {
            errors
                .iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join("; ")
        })
        .filter(|e| !e.is_empty());
    let message = str_field(result, "result")
        .map(str::to_owned)
        .or(errors)
        .unwrap_or_else(|| format!("claude ended with {subtype}"));
    let mut error = match result.get("api_error_status").and_then(Value::as_u64) {
        Some(status) => CodingError::new(http_error_code(status), message),
        None => CodingError::new(
            super::classify_message(&message, ErrorCode::SdkError),
            message,
        ),
    };
    if error.code == ErrorCode::RateLimited {
        error.retry_after = result
            .get("retry_after")
            .and_then(Value::as_f64)
            .or(retry_delay);
    }
    (super::status_for(error.code), Some(error))
}

impl StreamParser for ClaudeParser {
    fn line(&mut self, line: &str) -> Vec<StreamEvent> {
        let value = match json_line(line) {
            Ok(value) => value,
            Err(events) => return events,
        };
        if let Some(id) = str_field(&value, "session_id") {
            self.session_id = Some(id.to_owned());
        }
        match str_field(&value, "type") {
            Some("system") => self.system_line(&value),
            Some("assistant") => self.assistant(&value),
            Some("user") => self.user(&value),
            Some("result") => self.result_line(&value),
            Some("stream_event") => Vec::new(),
            _ => vec![unknown(value)],
        }
    }

    fn finish(self, exit_code: Option<i32>, stderr_tail: &str) -> ParsedRun {
        let mut run = match &self.result {
            Some(result) => {
                let (status, error) = verdict(result, self.last_retry_delay);
                ParsedRun {
                    status,
                    error,
                    usage: result_usage(result, self.messages.len() as u64),
                    text: str_field(result, "result").map(str::to_owned),
                    ..ParsedRun::completed()
                }
            }
            None => ParsedRun::failed(exit_failure(self.cli, exit_code, stderr_tail)),
        };
        if run.status == CodingStatus::Completed && run.text.is_none() {
            run.text = self.last_text;
        }
        run.with_stream(None, self.session_id, self.modified_files)
    }
}

/// Claude Code needs nothing beside its stream.
pub struct Adapter;

impl super::adapter::CliAdapter for Adapter {
    fn begin(&self, _: &super::adapter::RunStart<'_>) -> Box<dyn super::adapter::CliRun> {
        super::adapter::Plain::boxed(ClaudeParser::new())
    }

    /// Telemetry it queues for sending (never sent offline).
    fn bundled(&self) -> &'static [&'static str] {
        &[".claude/telemetry"]
    }
}

impl BuiltinCli for Adapter {
    fn facts(&self) -> &'static Facts {
        &FACTS
    }

    fn invoke(&self, config: &HarnessConfig, run: &RunPaths, inv: &mut Invocation) {
        let env = &mut inv.env;
        for (key, value) in [
            (
                "CLAUDE_CONFIG_DIR",
                format!("{}/.claude", run.home.display()),
            ),
            // Root may use bypassPermissions only inside a declared sandbox: the workspace is one.
            ("IS_SANDBOX", "1".into()),
            ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".into()),
            ("DISABLE_AUTOUPDATER", "1".into()),
            ("DISABLE_TELEMETRY", "1".into()),
            ("DISABLE_ERROR_REPORTING", "1".into()),
        ] {
            set_env(env, key, &value);
        }
        if let Some(url) = run.endpoint {
            set_env(env, "ANTHROPIC_BASE_URL", url);
        }
        if let Some(key) = run.api_key {
            set_env(env, "ANTHROPIC_API_KEY", key);
        }
        let args = &mut inv.args;
        push(args, &["-p", "--output-format", "stream-json", "--verbose"]);
        if let Some(mode) = config.permission_mode_of(self) {
            push(args, &["--permission-mode", mode]);
        }
        if let Some(model) = &config.model {
            push(args, &["--model", model]);
        }
        if let Some(turns) = config.max_turns {
            push(args, &["--max-turns", &turns.to_string()]);
        }
        if let Some(prompt) = &config.append_system_prompt {
            push(args, &["--append-system-prompt", prompt]);
        }
        match run.resume {
            Some(id) => push(args, &["--resume", id]),
            None => push(args, &["--session-id", run.new_session]),
        }
    }

    fn gateway_dialect(&self, _config: &HarnessConfig) -> Option<CliDialect> {
        Some(CliDialect::Anthropic)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::harness::HarnessKind;
    use crate::agent::harness::invocation::invocation;
    use crate::agent::harness::invocation::tests::{env, paths};
    use crate::agent::harness::tests::*;

    const BASIC: &str = fixture!("claude-basic.jsonl");
    const MAX_TURNS: &str = fixture!("claude-max-turns.jsonl");
    const API_ERROR: &str = fixture!("claude-api-error.jsonl");
    const API_RETRY: &str = fixture!("claude-api-retry.jsonl");
    const MAX_BUDGET: &str = fixture!("claude-max-budget.jsonl");
    const PARTIAL: &str = fixture!("claude-partial-thinking.jsonl");
    const DENIED: &str = fixture!("claude-permission-denied.jsonl");
    const RESUME: &str = fixture!("claude-resume.jsonl");

    fn run(text: &str, exit: i32) -> (Vec<StreamEvent>, ParsedRun) {
        crate::agent::harness::tests::parse(ClaudeParser::new(), text, exit)
    }

    #[test]
    fn claude_basic() {
        let (events, run) = run(BASIC, 0);
        assert_basic_turns(&events, &["system"]);
        assert_call_then_result(&events, "Write");
        assert_call_then_result(&events, "Bash");
        assert_eq!(run.status, CodingStatus::Completed);
        assert_eq!(run.error, None);
        assert_eq!(run.usage, Some(usage(3300, 63, 3, 0.010845)));
        assert_eq!(
            run.session_id.as_deref(),
            Some("0f0e0d0c-0b0a-4908-8706-050403020100")
        );
        assert_eq!(
            run.text.as_deref(),
            Some("Done: I created hello.txt and checked its contents.")
        );
        assert_eq!(run.modified_files, ["<lab>/ws/claude-basic/hello.txt"]);
        let run = run.relative_to(std::path::Path::new("<lab>/ws/claude-basic"));
        assert_eq!(run.modified_files, ["hello.txt"]);
    }

    #[test]
    fn claude_max_turns() {
        let (events, run) = run(MAX_TURNS, 1);
        assert_call_then_result(&events, "Bash");
        assert_eq!(run.status, CodingStatus::MaxTurns);
        assert_eq!(run.error, None);
        assert_eq!(run.usage, Some(usage(2100, 41, 2, 0.006915)));
        assert_eq!(
            run.session_id.as_deref(),
            Some("f90ebc4d-82bd-45ba-93c3-6d1e6a03fd17")
        );
        assert!(run.modified_files.is_empty());
    }

    #[test]
    fn claude_api_error() {
        let (events, run) = run(API_ERROR, 1);
        assert_eq!(kinds(&events), ["system", "system", "usage", "result"]);
        assert_eq!(run.status, CodingStatus::Error);
        let error = run.error.expect("error");
        assert_eq!(error.code, ErrorCode::SdkError);
        assert_eq!(error.message, "API Error: 400 scripted failure");
        assert_eq!(error.retry_after, None);
        assert_eq!(run.usage, Some(usage(0, 0, 0, 0.0)));
        assert_eq!(
            run.session_id.as_deref(),
            Some("24cfe7ac-acde-43b6-9758-d81b4b2faebd")
        );
    }

    #[test]
    fn claude_api_retry_529_is_an_sdk_error() {
        let (events, run) = run(API_RETRY, 1);
        assert_eq!(
            kinds(&events),
            ["system", "system", "system", "system", "usage", "result"]
        );
        assert_eq!(run.status, CodingStatus::Error);
        let error = run.error.expect("error");
        assert_eq!(error.code, ErrorCode::SdkError);
        assert!(error.message.starts_with("API Error: 529 scripted failure"));
        assert_eq!(run.usage, Some(usage(0, 0, 0, 0.0)));
        assert_eq!(
            run.session_id.as_deref(),
            Some("a25f0c19-ece9-4ab9-b5d4-7ded651242ef")
        );
    }

    /// No capture has a 429; this is the 529 capture with the status changed, which the
    /// CLI's retry lines and result carry the same way.
    #[test]
    fn claude_429_is_rate_limited_with_retry_after() {
        let (_, run) = run(&API_RETRY.replace("529", "429"), 1);
        assert_eq!(run.status, CodingStatus::Error);
        let error = run.error.expect("error");
        assert_eq!(error.code, ErrorCode::RateLimited);
        // The last `api_retry` delay (1195.41… ms), in seconds.
        let retry_after = error.retry_after.expect("retry_after");
        assert!(
            (retry_after - 1.195_416_818_903_765).abs() < 1e-9,
            "{retry_after}"
        );
    }

    #[test]
    fn claude_max_budget_takes_model_usage() {
        let (_, run) = run(MAX_BUDGET, 1);
        assert_eq!(run.status, CodingStatus::Error);
        let error = run.error.expect("error");
        assert_eq!(error.code, ErrorCode::SdkError);
        assert_eq!(error.message, "Reached maximum budget ($0.005)");
        assert_eq!(run.usage, Some(usage(2100, 41, 2, 0.006915)));
    }

    #[test]
    fn claude_partial_messages_map_once() {
        let (events, run) = run(PARTIAL, 0);
        assert_eq!(
            kinds(&events),
            [
                "system",
                "system",
                "system",
                "thinking",
                "assistant",
                "tool_call",
                "tool_result",
                "system",
                "assistant",
                "usage",
                "result"
            ]
        );
        assert_call_then_result(&events, "Write");
        assert_eq!(run.status, CodingStatus::Completed);
        assert_eq!(run.usage, Some(usage(2100, 41, 2, 0.006915)));
        assert_eq!(
            run.modified_files,
            ["<lab>/ws/claude-partial-thinking/hello.txt"]
        );
    }

    #[test]
    fn claude_denied_write_is_not_a_modified_file() {
        let (events, run) = run(DENIED, 0);
        assert!(events.iter().any(|e| matches!(
            e,
            StreamEvent::ToolResult { name: Some(n), is_error: true, .. } if n == "Write"
        )));
        assert_eq!(run.status, CodingStatus::Completed);
        assert!(run.modified_files.is_empty());
        assert_eq!(run.usage, Some(usage(3300, 63, 3, 0.010845)));
    }

    #[test]
    fn claude_resume_keeps_the_session() {
        let (_, run) = run(RESUME, 0);
        assert_eq!(run.status, CodingStatus::Completed);
        assert_eq!(
            run.session_id.as_deref(),
            Some("0f0e0d0c-0b0a-4908-8706-050403020100")
        );
        assert_eq!(run.usage, Some(usage(1200, 22, 1, 0.0039299999999999995)));
    }

    #[test]
    fn claude_no_result_is_an_error_from_the_exit() {
        let mut parser = ClaudeParser::new();
        feed(&mut parser, BASIC.lines().next().unwrap_or_default());
        let run = parser.finish(Some(1), "Error: rate limit exceeded\n");
        assert_eq!(run.status, CodingStatus::Error);
        assert_eq!(run.error.expect("error").code, ErrorCode::RateLimited);
        assert_eq!(
            run.session_id.as_deref(),
            Some("0f0e0d0c-0b0a-4908-8706-050403020100")
        );
    }

    #[test]
    fn claude_garbage_and_truncated_lines_are_unknown() {
        let truncated = &BASIC.lines().nth(2).unwrap_or_default()[..120];
        assert_survives_garbage(ClaudeParser::new(), truncated);
    }

    #[test]
    fn claude_runs_headless_with_a_preset_or_resumed_session() {
        let config = HarnessConfig {
            model: Some("claude-sonnet-4-5".into()),
            max_turns: Some(3),
            append_system_prompt: Some("Be brief.".into()),
            args: vec!["--bare".into()],
            ..HarnessConfig::default()
        };
        let local = "http://127.0.0.1:9";
        let inv = invocation(HarnessKind::ClaudeCode, &config, &paths(None, Some(local)));
        assert_eq!(
            inv.args.join(" "),
            "-p --output-format stream-json --verbose --permission-mode bypassPermissions \
             --model claude-sonnet-4-5 --max-turns 3 --append-system-prompt Be brief. \
             --session-id 0f0e0d0c-0b0a-4908-8706-050403020100 --bare -- -fix the bug"
        );
        assert_eq!(env(&inv, "ANTHROPIC_BASE_URL"), Some(local));
        assert_eq!(env(&inv, "HOME"), Some("/t/home"));
        assert_eq!(env(&inv, "IS_SANDBOX"), Some("1"));
        let resumed = invocation(
            HarnessKind::ClaudeCode,
            &HarnessConfig::default(),
            &paths(Some("abc"), None),
        );
        assert!(resumed.args.join(" ").contains("--resume abc -- -fix"));
        assert_eq!(env(&resumed, "ANTHROPIC_BASE_URL"), None);
    }

    #[test]
    fn its_reserved_flags_match_with_a_value_and_its_default_mode_comes_first() {
        assert_eq!(
            HarnessKind::ClaudeCode.reserved_flag("--output-format=text"),
            Some(("--output-format", "deltabench reads this output format"))
        );
        assert_eq!(HarnessKind::ClaudeCode.reserved_flag("--bare"), None);
        assert_eq!(
            HarnessConfig::default().permission_mode(HarnessKind::ClaudeCode),
            Some("bypassPermissions")
        );
    }
}
