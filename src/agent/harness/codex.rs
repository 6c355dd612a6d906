//! Codex CLI: `codex exec --json PROMPT` (and `codex exec --json resume ID PROMPT`).
//!
//! One JSON object per line (clis.md §2): `thread.started` (the session id), `turn.started`,
//! `item.started/updated/completed`, then `turn.completed` with usage or `turn.failed`.
//! `turn.completed.usage` is cumulative over the thread: after `exec resume` it includes the
//! earlier turns, so a resumed run is parsed with [`CodexParser::resuming`] and the earlier
//! total is taken off. Codex reports no cost.

use super::builtin::{BuiltinCli, ConfigRule, Doc, Facts, Prompt, STREAM};
use super::cli::CliDialect;
use super::config::{HarnessConfig, Package, Registry, TurnLimit};
use super::invocation::{Invocation, RunPaths, push, set_env, toml_string};
use std::collections::HashSet;

use serde_json::{Value, json};

use super::{
    ParsedRun, StreamParser, classify_message, exit_failure, json_line, push_unique, str_field,
    system, u64_field, unknown,
};
use crate::agent::{CodingError, CodingStatus, ErrorCode, StreamEvent, Usage};

const FACTS: Facts = Facts {
    program: "codex",
    description: "Codex CLI, run headless (codex exec --json).",
    doc: Doc {
        name: "Codex CLI",
        program_note: "",
        resume_note: "",
        turns: "",
        modes_note: " (its `sandbox_mode`)",
        cost: "estimated (it reports none)",
    },
    package: Package {
        registry: Registry::Npm,
        name: "@openai/codex",
        version: "0.171.0",
    },
    key_env: "OPENAI_API_KEY",
    no_resume: None,
    permission_modes: &["danger-full-access", "workspace-write", "read-only"],
    turn_limit: TurnLimit::Enforced,
    appends_system_prompt: true,
    reserved_flags: &[
        ("--json", STREAM),
        ("-m", "use `model:`"),
        ("--model", "use `model:`"),
        ("-s", "use `permission_mode:`"),
        ("--sandbox", "use `permission_mode:`"),
    ],
    prompt: Prompt::AfterDashes,
};

/// Item types that are tool calls (a `tool_call` on start, a `tool_result` on completion).
const TOOL_ITEMS: [&str; 5] = [
    "command_execution",
    "file_change",
    "mcp_tool_call",
    "web_search",
    "collab_tool_call",
];

/// A [`StreamParser`] for Codex's `exec --json` stdout; `turn.completed` usage is cumulative over the thread.
#[derive(Debug, Default)]
pub struct CodexParser {
    session_id: Option<String>,
    /// Usage the thread had before this run (cumulative counters are reduced by it).
    baseline: Usage,
    /// The thread's cumulative usage at the last `turn.completed`.
    cumulative: Option<Usage>,
    started: HashSet<String>,
    modified_files: Vec<String>,
    last_text: Option<String>,
    completed: bool,
    failed: Option<String>,
    last_error: Option<String>,
}

impl CodexParser {
    /// A parser that has seen no line yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// A parser for `exec resume`: `previous` is the thread's cumulative usage at the end of
    /// the earlier run (its [`CodexParser::cumulative_usage`]).
    pub fn resuming(previous: Usage) -> Self {
        Self {
            baseline: previous,
            ..Self::default()
        }
    }

    /// The thread's cumulative usage so far, as `turn.completed` reported it (to hand to
    /// [`CodexParser::resuming`] on the next resume).
    pub fn cumulative_usage(&self) -> Option<&Usage> {
        self.cumulative.as_ref()
    }

    /// This run's usage: the cumulative counters less the baseline.
    fn run_usage(&self) -> Option<Usage> {
        let total = self.cumulative.as_ref()?;
        let base = &self.baseline;
        Some(Usage {
            input_tokens: total.input_tokens.saturating_sub(base.input_tokens),
            output_tokens: total.output_tokens.saturating_sub(base.output_tokens),
            cache_read_tokens: total
                .cache_read_tokens
                .saturating_sub(base.cache_read_tokens),
            cache_write_tokens: total
                .cache_write_tokens
                .saturating_sub(base.cache_write_tokens),
            model_calls: 0,
            cost_usd: None,
            cost_estimated: false,
        })
    }

    fn item(&mut self, kind: &str, value: &Value) -> Vec<StreamEvent> {
        let Some(item) = value.get("item") else {
            return vec![unknown(value.clone())];
        };
        let id = str_field(item, "id").map(str::to_owned);
        let item_type = str_field(item, "type").unwrap_or_default();
        match (kind, item_type) {
            ("item.completed", "agent_message") => {
                let text = str_field(item, "text").unwrap_or_default().to_owned();
                self.last_text = Some(text.clone());
                vec![StreamEvent::Assistant { text }]
            }
            ("item.completed", "reasoning") => vec![StreamEvent::Thinking {
                text: str_field(item, "text").unwrap_or_default().to_owned(),
            }],
            ("item.completed", "error") => vec![system(
                "warning",
                str_field(item, "message").unwrap_or_default(),
                Some(value.clone()),
            )],
            ("item.started", t) if TOOL_ITEMS.contains(&t) => {
                if let Some(id) = &id {
                    self.started.insert(id.clone());
                }
                vec![tool_call(id, t, item)]
            }
            ("item.completed", t) if TOOL_ITEMS.contains(&t) => {
                let mut events = Vec::new();
                let seen = id.as_ref().is_some_and(|id| self.started.contains(id));
                if !seen {
                    // Some items (web_search) may complete without a start.
                    events.push(tool_call(id.clone(), t, item));
                }
                let status = str_field(item, "status").unwrap_or("completed");
                let exit_ok = item
                    .get("exit_code")
                    .and_then(Value::as_i64)
                    .is_none_or(|c| c == 0);
                let is_error = status != "completed"
                    || !exit_ok
                    || item.get("error").is_some_and(|e| !e.is_null());
                if t == "file_change" && status == "completed" {
                    for change in item
                        .get("changes")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                    {
                        if let Some(path) = str_field(change, "path") {
                            push_unique(&mut self.modified_files, path);
                        }
                    }
                }
                events.push(StreamEvent::ToolResult {
                    id,
                    name: Some(tool_name(t, item)),
                    result: tool_result(t, item),
                    is_error,
                });
                events
            }
            _ => vec![unknown(value.clone())],
        }
    }

    fn verdict(&self) -> Option<(CodingStatus, Option<CodingError>)> {
        if let Some(message) = &self.failed {
            let code = classify_message(message, ErrorCode::SdkError);
            let status = super::status_for(code);
            return Some((status, Some(CodingError::new(code, message.clone()))));
        }
        self.completed.then_some((CodingStatus::Completed, None))
    }
}

fn tool_name(item_type: &str, item: &Value) -> String {
    match item_type {
        "mcp_tool_call" => format!(
            "{}.{}",
            str_field(item, "server").unwrap_or("mcp"),
            str_field(item, "tool").unwrap_or("?")
        ),
        other => other.to_owned(),
    }
}

fn tool_call(id: Option<String>, item_type: &str, item: &Value) -> StreamEvent {
    let args = match item_type {
        "command_execution" => json!({ "command": item.get("command") }),
        "file_change" => json!({ "changes": item.get("changes") }),
        "mcp_tool_call" => item.get("arguments").cloned().unwrap_or(Value::Null),
        "web_search" => json!({ "query": item.get("query") }),
        _ => item.clone(),
    };
    StreamEvent::ToolCall {
        id,
        name: tool_name(item_type, item),
        args,
    }
}

fn tool_result(item_type: &str, item: &Value) -> Value {
    match item_type {
        "command_execution" => json!({
            "output": item.get("aggregated_output"),
            "exit_code": item.get("exit_code"),
            "status": item.get("status"),
        }),
        "file_change" => json!({
            "changes": item.get("changes"),
            "status": item.get("status"),
        }),
        "mcp_tool_call" => json!({
            "result": item.get("result"),
            "error": item.get("error"),
            "status": item.get("status"),
        }),
        _ => item.clone(),
    }
}

/// `turn.completed.usage`: `input_tokens` includes `cached_input_tokens` (OpenAI's
/// convention); the cached part goes to `cache_read_tokens`.
fn cumulative_usage(raw: &Value) -> Usage {
    let cached = u64_field(raw, "cached_input_tokens");
    Usage {
        input_tokens: u64_field(raw, "input_tokens").saturating_sub(cached),
        output_tokens: u64_field(raw, "output_tokens"),
        cache_read_tokens: cached,
        cache_write_tokens: u64_field(raw, "cache_write_input_tokens"),
        ..Usage::default()
    }
}

impl StreamParser for CodexParser {
    fn line(&mut self, line: &str) -> Vec<StreamEvent> {
        let value = match json_line(line) {
            Ok(value) => value,
            Err(events) => return events,
        };
        let kind = str_field(&value, "type").unwrap_or_default().to_owned();
        match kind.as_str() {
            "thread.started" => {
                let id = str_field(&value, "thread_id")
                    .unwrap_or_default()
                    .to_owned();
                if !id.is_empty() {
                    self.session_id = Some(id.clone());
                }
                vec![system("init", format!("thread {id}"), Some(value))]
            }
            "turn.started" => vec![system("turn_started", "turn started", None)],
            "item.started" | "item.completed" => self.item(&kind, &value),
            "turn.completed" => {
                self.completed = true;
                self.cumulative = value.get("usage").map(cumulative_usage);
                let mut events = Vec::new();
                if let Some(usage) = self.run_usage() {
                    events.push(StreamEvent::Usage { usage });
                }
                events.push(StreamEvent::Result {
                    status: CodingStatus::Completed,
                    text: self.last_text.clone(),
                });
                events
            }
            "turn.failed" => {
                let message = value
                    .pointer("/error/message")
                    .and_then(Value::as_str)
                    .or(self.last_error.as_deref())
                    .unwrap_or("turn failed")
                    .to_owned();
                self.failed = Some(message);
                vec![StreamEvent::Result {
                    status: CodingStatus::Error,
                    text: None,
                }]
            }
            "error" => {
                let message = str_field(&value, "message").unwrap_or_default().to_owned();
                self.last_error = Some(message.clone());
                vec![system("error", message, None)]
            }
            _ => vec![unknown(value)],
        }
    }

    fn finish(self, exit_code: Option<i32>, stderr_tail: &str) -> ParsedRun {
        let mut run = match self.verdict() {
            // Exit 1 with no turn.failed (or a completed turn with a failing exit) is an error.
            Some((CodingStatus::Completed, _)) if exit_code.is_some_and(|c| c != 0) => {
                ParsedRun::failed(exit_failure("codex", exit_code, stderr_tail))
            }
            Some((status, error)) => ParsedRun {
                status,
                error,
                ..ParsedRun::completed()
            },
            None => {
                let mut error = exit_failure("codex", exit_code, stderr_tail);
                if let Some(last) = &self.last_error {
                    error.message = format!("{}: {last}", error.message);
                    error.code = classify_message(last, error.code);
                }
                ParsedRun::failed(error)
            }
        };
        run.usage = self.run_usage();
        if run.status == CodingStatus::Completed {
            run.text = self.last_text;
        }
        run.with_stream(None, self.session_id, self.modified_files)
    }
}

/// Where Codex thread totals are kept between runs (its usage is cumulative per thread).
const THREAD_USAGE_FILE: &str = ".codex/deltabench-thread-usage.json";

/// Codex reports usage cumulative over a resumed thread: the run starts from the thread's
/// saved total, and saves the new one once the thread id is known.
pub struct Adapter;

impl super::adapter::CliAdapter for Adapter {
    fn begin(&self, run: &super::adapter::RunStart<'_>) -> Box<dyn super::adapter::CliRun> {
        let file = run.home.join(THREAD_USAGE_FILE);
        let parser = match run.resume {
            Some(id) => CodexParser::resuming(super::adapter::saved_usage(&file, id)),
            None => CodexParser::new(),
        };
        Box::new(CodexRun { parser, file })
    }

    /// The system skills it unpacks into its home on every start.
    fn bundled(&self) -> &'static [&'static str] {
        &[".codex/skills/.system"]
    }
}

impl BuiltinCli for Adapter {
    fn facts(&self) -> &'static Facts {
        &FACTS
    }

    fn invoke(&self, config: &HarnessConfig, run: &RunPaths, inv: &mut Invocation) {
        let codex_home = run.home.join(".codex");
        set_env(
            &mut inv.env,
            "CODEX_HOME",
            &codex_home.display().to_string(),
        );
        let mut toml = String::new();
        if let Some(model) = &config.model {
            toml += &format!("model = {}\n", toml_string(model));
        }
        toml += "approval_policy = \"never\"\n";
        let sandbox = config
            .permission_mode_of(self)
            .unwrap_or("danger-full-access");
        toml += &format!("sandbox_mode = {}\n", toml_string(sandbox));
        toml += "check_for_update_on_startup = false\n";
        if let Some(prompt) = &config.append_system_prompt {
            toml += &format!("developer_instructions = {}\n", toml_string(prompt));
        }
        if run.endpoint.is_some() {
            toml += "model_provider = \"deltabench\"\n";
        }
        toml += "\n[analytics]\nenabled = false\n\n[feedback]\nenabled = false\n";
        match run.endpoint {
            Some(url) => {
                // A custom provider: the built-in one ignores OPENAI_BASE_URL and tries WebSockets.
                toml += &format!(
                    "\n[model_providers.deltabench]\nname = \"deltabench endpoint\"\nbase_url = {}\nenv_key = \"DELTABENCH_CODEX_API_KEY\"\nwire_api = \"responses\"\n",
                    toml_string(&format!("{url}/v1"))
                );
                if let Some(key) = run.api_key {
                    set_env(&mut inv.env, "DELTABENCH_CODEX_API_KEY", key);
                }
            }
            None => {
                if let Some(key) = run.api_key {
                    set_env(&mut inv.env, "OPENAI_API_KEY", key);
                }
            }
        }
        inv.files.push((codex_home.join("config.toml"), toml));
        push(&mut inv.args, &["exec", "--json", "--skip-git-repo-check"]);
        if let Some(id) = run.resume {
            push(&mut inv.args, &["resume", id]);
        }
    }

    fn gateway_dialect(&self, config: &HarnessConfig) -> Option<CliDialect> {
        config.model.as_ref().map(|_| CliDialect::Openai)
    }

    fn gateway_bypass(&self) -> &'static str {
        "codex without `model:`"
    }

    fn config_error(&self, config: &HarnessConfig) -> Option<ConfigRule> {
        (config.endpoint.is_some() && config.model.is_none()).then_some(ConfigRule {
            key: "endpoint",
            message: "codex with an `endpoint:` needs `model:` too: its provider for the endpoint has no default model",
        })
    }
}

struct CodexRun {
    parser: CodexParser,
    file: std::path::PathBuf,
}

impl super::adapter::CliRun for CodexRun {
    fn line(&mut self, line: &str) -> Vec<StreamEvent> {
        self.parser.line(line)
    }

    fn finish(
        self: Box<Self>,
        exit_code: Option<i32>,
        stderr_tail: &str,
    ) -> super::adapter::Finished {
        let cumulative = self.parser.cumulative_usage().cloned();
        let parsed = self.parser.finish(exit_code, stderr_tail);
        let file = self.file;
        super::adapter::Finished {
            parsed,
            after: cumulative.map(|total| -> super::adapter::AfterSession {
                Box::new(move |session| super::adapter::save_usage(&file, session, total))
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::harness::HarnessKind;
    use crate::agent::harness::invocation::tests::{env, file, paths};
    use crate::agent::harness::invocation::{DUMMY_API_KEY, invocation};
    use crate::agent::harness::tests::*;

    const BASIC: &str = fixture!("codex-basic.jsonl");
    const RESUME: &str = fixture!("codex-resume.jsonl");
    const REASONING: &str = fixture!("codex-reasoning.jsonl");
    const API_ERROR: &str = fixture!("codex-api-error.jsonl");
    const UNKNOWN_MODEL: &str = fixture!("codex-unknown-model.jsonl");

    fn usage(input: u64, output: u64) -> Usage {
        Usage {
            input_tokens: input,
            output_tokens: output,
            ..Usage::default()
        }
    }

    fn run(parser: &mut CodexParser, text: &str) -> Vec<StreamEvent> {
        feed(parser, text)
    }

    #[test]
    fn codex_basic() {
        let mut parser = CodexParser::new();
        let events = run(&mut parser, BASIC);
        assert_basic_turns(&events, &["system", "system"]);
        assert_call_then_result(&events, "file_change");
        assert_call_then_result(&events, "command_execution");
        assert_eq!(parser.cumulative_usage(), Some(&usage(3300, 63)));
        let run = parser.finish(Some(0), "");
        assert_eq!(run.status, CodingStatus::Completed);
        assert_eq!(run.error, None);
        assert_eq!(run.usage, Some(usage(3300, 63)));
        assert_eq!(run.usage.as_ref().and_then(|u| u.cost_usd), None);
        assert_eq!(
            run.session_id.as_deref(),
            Some("01a2363d-38a9-7472-a93e-48258f144862")
        );
        assert_eq!(
            run.text.as_deref(),
            Some("Done: I created hello.txt and checked its contents.")
        );
        assert_eq!(run.modified_files, ["<lab>/ws/codex-basic/hello.txt"]);
    }

    #[test]
    fn codex_resume_takes_off_the_earlier_turns() {
        let mut first = CodexParser::new();
        run(&mut first, BASIC);
        let previous = first.cumulative_usage().cloned().expect("usage");
        let mut parser = CodexParser::resuming(previous);
        let events = run(&mut parser, RESUME);
        // The stream itself shows the thread total (3300 + 1200).
        assert_eq!(parser.cumulative_usage(), Some(&usage(4500, 85)));
        assert!(events.contains(&StreamEvent::Usage {
            usage: usage(1200, 22)
        }));
        let run = parser.finish(Some(0), "");
        assert_eq!(run.status, CodingStatus::Completed);
        assert_eq!(run.usage, Some(usage(1200, 22)));
        assert_eq!(
            run.session_id.as_deref(),
            Some("01a2363d-38a9-7472-a93e-48258f144862")
        );
    }

    #[test]
    fn codex_reasoning_is_thinking() {
        let mut parser = CodexParser::new();
        let events = run(&mut parser, REASONING);
        assert_eq!(kinds(&events)[2], "thinking");
        assert_call_then_result(&events, "file_change");
        let run = parser.finish(Some(0), "");
        assert_eq!(run.status, CodingStatus::Completed);
        assert_eq!(run.usage, Some(usage(2100, 41)));
        assert_eq!(
            run.session_id.as_deref(),
            Some("01a2363d-3eb3-71b0-8102-f9a3a8e0b9ae")
        );
    }

    #[test]
    fn codex_api_error() {
        let mut parser = CodexParser::new();
        let events = run(&mut parser, API_ERROR);
        assert_eq!(kinds(&events), ["system", "system", "system", "result"]);
        let run = parser.finish(Some(1), "");
        assert_eq!(run.status, CodingStatus::Error);
        let error = run.error.expect("error");
        assert_eq!(error.code, ErrorCode::SdkError);
        assert!(
            error.message.contains("scripted failure"),
            "{}",
            error.message
        );
        assert_eq!(run.usage, None);
        assert_eq!(
            run.session_id.as_deref(),
            Some("01a2363d-422a-7820-8350-ca3ce3cb5e8c")
        );
    }

    #[test]
    fn codex_unknown_model_warns_and_runs_commands() {
        let mut parser = CodexParser::new();
        let events = run(&mut parser, UNKNOWN_MODEL);
        assert_eq!(kinds(&events)[1], "system");
        assert_call_then_result(&events, "command_execution");
        let run = parser.finish(Some(0), "");
        assert_eq!(run.status, CodingStatus::Completed);
        assert_eq!(run.usage, Some(usage(3300, 63)));
        // Edits through shell commands leave no file_change to attribute.
        assert!(run.modified_files.is_empty());
    }

    #[test]
    fn codex_rate_limit_failure() {
        let mut parser = CodexParser::new();
        let stream = API_ERROR.replace(
            "scripted failure",
            "exceeded retry limit, last status: 429 Too Many Requests",
        );
        run(&mut parser, &stream);
        let run = parser.finish(Some(1), "");
        assert_eq!(run.error.expect("error").code, ErrorCode::RateLimited);
    }

    #[test]
    fn codex_garbage_and_truncated_lines_are_unknown() {
        let truncated = &BASIC.lines().nth(3).unwrap_or_default()[..60];
        assert_survives_garbage(CodexParser::new(), truncated);
    }

    #[test]
    fn codex_gets_a_custom_provider_in_its_config() {
        let config = HarnessConfig {
            model: Some("gpt-5.5".into()),
            append_system_prompt: Some("Say \"hi\".".into()),
            ..HarnessConfig::default()
        };
        let inv = invocation(
            HarnessKind::Codex,
            &config,
            &paths(Some("t-1"), Some("http://127.0.0.1:9")),
        );
        assert_eq!(
            inv.args.join(" "),
            "exec --json --skip-git-repo-check resume t-1 -- -fix the bug"
        );
        let toml = file(&inv, "config.toml");
        assert!(toml.contains("model = \"gpt-5.5\""), "{toml}");
        assert!(toml.contains("sandbox_mode = \"danger-full-access\""));
        assert!(toml.contains("developer_instructions = \"Say \\\"hi\\\".\""));
        assert!(toml.contains("base_url = \"http://127.0.0.1:9/v1\""));
        assert_eq!(env(&inv, "DELTABENCH_CODEX_API_KEY"), Some(DUMMY_API_KEY));
        assert_eq!(env(&inv, "CODEX_HOME"), Some("/t/home/.codex"));
    }

    #[test]
    fn its_turn_limit_is_enforced_so_the_key_applies() {
        assert!(HarnessKind::Codex.keys().contains(&"max_turns"));
    }
}
