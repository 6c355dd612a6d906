//! Cline: `cline --json --auto-approve true -- PROMPT`.
//!
//! One JSON object per line (observed with 3.0.65): `hook_event`s (`agent_start`, `tool_call`,
//! `tool_result`, `agent_end`), `agent_event`s wrapping its agent loop (`iteration_start`/`_end`,
//! `content_start` with a text delta or a tool call and its `input`, `content_update` with a
//! command's output as it comes, `content_end` with the whole text or the tool's `output`,
//! `usage` per model call with running totals, `error`, `done`), then one `run_result` with the
//! `finishReason` and the run's `aggregateUsage`. Its input token counts include cache reads.
//! The session id is not in the stream: it is the name of the folder the run adds under
//! `HOME/.cline/data/sessions/`. Its `totalCost` is 0 for a model it has no price for (any
//! model behind a custom base URL), so it is not reported as the CLI's cost.

use super::builtin::{BuiltinCli, Doc, Facts, Prompt, STREAM};
use super::cli::CliDialect;
use super::config::{HarnessConfig, Package, Registry, TurnLimit};
use super::invocation::{Invocation, RunPaths, push, set_env};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::{
    ParsedRun, StreamParser, classify_message, exit_failure, json_line, push_unique, str_field,
    system, u64_field, unknown,
};
use crate::agent::{CodingError, CodingStatus, ErrorCode, StreamEvent, Usage};

const FACTS: Facts = Facts {
    program: "cline",
    description: "Cline, run headless (cline --json).",
    doc: Doc {
        name: "Cline",
        program_note: "",
        resume_note: " (its `--id` opens its interactive UI)",
        turns: "",
        modes_note: " (always `--auto-approve true`)",
        cost: "estimated (its `totalCost` is 0 for a model it has no price for)",
    },
    package: Package {
        registry: Registry::Npm,
        name: "cline",
        version: "3.0.65",
    },
    key_env: "OPENAI_API_KEY",
    no_resume: Some("its `--id` opens its interactive UI"),
    permission_modes: &[],
    turn_limit: // It has a turn limit inside (`maxIterations`) but no flag or setting for it.
    TurnLimit::Enforced,
    appends_system_prompt: true,
    reserved_flags: &[
        ("--json", STREAM),
        (
            "--id",
            "headless Cline cannot resume: `--id` opens its interactive UI",
        ),
        ("-i", "deltabench runs it headless"),
        ("--tui", "deltabench runs it headless"),
        ("--acp", "deltabench runs it headless"),
        ("-z", "deltabench runs it headless"),
        ("--zen", "deltabench runs it headless"),
        ("-p", "it runs in act mode"),
        ("--plan", "it runs in act mode"),
        ("--auto-approve", "it runs with --auto-approve true"),
        ("-P", "deltabench points it at the endpoint"),
        ("--provider", "deltabench points it at the endpoint"),
        ("-k", "use `api_key:`"),
        ("--key", "use `api_key:`"),
        ("-m", "use `model:`"),
        ("--model", "use `model:`"),
        ("-s", "use `append_system_prompt:`"),
        ("--system", "use `append_system_prompt:`"),
        (
            "--config",
            "deltabench writes its settings into the agent's HOME",
        ),
        (
            "--data-dir",
            "deltabench reads its sessions from the agent's HOME",
        ),
        ("--worktree", "it must work in the trial's workspace"),
        ("-c", "it runs in the trial's workspace"),
        ("--cwd", "it runs in the trial's workspace"),
    ],
    prompt: Prompt::AfterDashes,
};

/// Where the CLI keeps one folder per session, under its HOME.
pub const SESSIONS_DIR: &str = ".cline/data/sessions";

/// A [`StreamParser`] for Cline's `--json` stdout (hook and agent events).
#[derive(Debug, Default)]
pub struct ClineParser {
    usage: Option<Usage>,
    modified_files: Vec<String>,
    /// Tool calls not yet answered: id to (name, input).
    calls: Vec<(String, String, Value)>,
    last_text: Option<String>,
    /// The `run_result`'s `finishReason`.
    finish: Option<String>,
    error: Option<CodingError>,
}

impl ClineParser {
    /// A parser that has seen no line yet.
    pub fn new() -> Self {
        Self::default()
    }

    fn agent_event(&mut self, event: &Value, line: Value) -> Vec<StreamEvent> {
        match str_field(event, "type") {
            Some("iteration_start") => vec![system(
                "step_start",
                format!("iteration {}", u64_field(event, "iteration")),
                None,
            )],
            // The end of an iteration says nothing its content events did not.
            Some("iteration_end") => Vec::new(),
            Some("content_start") => self.content_start(event, line),
            // A command's output as it comes: its `content_end` has all of it.
            Some("content_update") => Vec::new(),
            Some("content_end") => self.content_end(event, line),
            Some("usage") => self.usage(event),
            Some("error") => {
                let message = event
                    .pointer("/error/message")
                    .and_then(Value::as_str)
                    .unwrap_or("error")
                    .to_owned();
                let code = classify_message(&message, ErrorCode::SdkError);
                self.error = Some(CodingError::new(code, message.clone()));
                vec![system("error", message, Some(line))]
            }
            Some("done") => {
                let text = str_field(event, "text").map(str::to_owned);
                if text.is_some() {
                    self.last_text = text.clone();
                }
                let status = match str_field(event, "reason") {
                    Some("completed") => CodingStatus::Completed,
                    _ => CodingStatus::Error,
                };
                vec![StreamEvent::Result { status, text }]
            }
            _ => vec![unknown(line)],
        }
    }

    fn content_start(&mut self, event: &Value, line: Value) -> Vec<StreamEvent> {
        match str_field(event, "contentType") {
            // A text delta: the whole text comes with `content_end`.
            Some("text" | "reasoning") => Vec::new(),
            Some("tool") => {
                let id = str_field(event, "toolCallId")
                    .unwrap_or_default()
                    .to_owned();
                let name = str_field(event, "toolName").unwrap_or_default().to_owned();
                let args = event.get("input").cloned().unwrap_or(Value::Null);
                self.calls.push((id.clone(), name.clone(), args.clone()));
                vec![StreamEvent::ToolCall {
                    id: Some(id).filter(|id| !id.is_empty()),
                    name,
                    args,
                }]
            }
            _ => vec![unknown(line)],
        }
    }

    fn content_end(&mut self, event: &Value, line: Value) -> Vec<StreamEvent> {
        let text = || str_field(event, "text").unwrap_or_default().to_owned();
        match str_field(event, "contentType") {
            Some("text") => {
                let text = text();
                self.last_text = Some(text.clone());
                vec![StreamEvent::Assistant { text }]
            }
            Some("reasoning") => vec![StreamEvent::Thinking { text: text() }],
            Some("tool") => {
                let id = str_field(event, "toolCallId")
                    .unwrap_or_default()
                    .to_owned();
                let name = str_field(event, "toolName").unwrap_or_default().to_owned();
                let output = event.get("output").cloned().unwrap_or(Value::Null);
                // One result, or one per command of a `run_commands` batch.
                let failed = |o: &Value| {
                    o.get("success") == Some(&Value::Bool(false)) || o.get("error").is_some()
                };
                let is_error = event.get("error").is_some()
                    || match &output {
                        Value::Array(items) => items.iter().any(failed),
                        other => failed(other),
                    };
                let call = self.calls.iter().position(|(c, _, _)| *c == id);
                if let Some(at) = call {
                    let (_, called, args) = self.calls.remove(at);
                    if !is_error
                        && called == "editor"
                        && let Some(path) = str_field(&args, "path")
                    {
                        push_unique(&mut self.modified_files, path);
                    }
                }
                let result = match &output {
                    Value::Array(items) => Value::String(
                        items
                            .iter()
                            .map(|o| str_field(o, "result").unwrap_or_default())
                            .collect::<Vec<_>>()
                            .join("\n"),
                    ),
                    Value::Object(_) => str_field(&output, "result")
                        .map(|r| Value::String(r.to_owned()))
                        .unwrap_or(output.clone()),
                    _ => event.get("error").cloned().unwrap_or(output.clone()),
                };
                vec![StreamEvent::ToolResult {
                    id: Some(id).filter(|id| !id.is_empty()),
                    name: Some(name),
                    result,
                    is_error,
                }]
            }
            _ => vec![unknown(line)],
        }
    }

    /// One model call: its numbers, added to the run's total.
    fn usage(&mut self, event: &Value) -> Vec<StreamEvent> {
        let cache_read = u64_field(event, "cacheReadTokens");
        let cache_write = u64_field(event, "cacheWriteTokens");
        let usage = self.usage.get_or_insert_with(Usage::default);
        usage.input_tokens += u64_field(event, "inputTokens")
            .saturating_sub(cache_read)
            .saturating_sub(cache_write);
        usage.output_tokens += u64_field(event, "outputTokens");
        usage.cache_read_tokens += cache_read;
        usage.cache_write_tokens += cache_write;
        usage.model_calls += 1;
        vec![StreamEvent::Usage {
            usage: usage.clone(),
        }]
    }

    fn run_result(&mut self, value: &Value) -> Vec<StreamEvent> {
        let reason = str_field(value, "finishReason")
            .unwrap_or("unknown")
            .to_owned();
        if let Some(text) = str_field(value, "text") {
            self.last_text = Some(text.to_owned());
        }
        // The whole run's totals (subagents included) over the per-call sum.
        if let Some(total) = value.get("aggregateUsage").or_else(|| value.get("usage")) {
            let cache_read = u64_field(total, "cacheReadTokens");
            let cache_write = u64_field(total, "cacheWriteTokens");
            let calls = self.usage.as_ref().map_or(0, |u| u.model_calls);
            let usage = Usage {
                input_tokens: u64_field(total, "inputTokens")
                    .saturating_sub(cache_read)
                    .saturating_sub(cache_write),
                output_tokens: u64_field(total, "outputTokens"),
                cache_read_tokens: cache_read,
                cache_write_tokens: cache_write,
                model_calls: calls,
                ..Usage::default()
            };
            if calls > 0 || usage != Usage::default() {
                self.usage = Some(usage);
            }
        }
        let mut events = vec![system(
            "run_result",
            format!("finish reason: {reason}"),
            Some(value.clone()),
        )];
        if let Some(usage) = &self.usage {
            events.push(StreamEvent::Usage {
                usage: usage.clone(),
            });
        }
        self.finish = Some(reason);
        events
    }
}

impl StreamParser for ClineParser {
    fn line(&mut self, line: &str) -> Vec<StreamEvent> {
        let value = match json_line(line) {
            Ok(value) => value,
            Err(events) => return events,
        };
        match str_field(&value, "type") {
            Some("agent_event") => match value.get("event").cloned() {
                Some(event) => self.agent_event(&event, value),
                None => vec![unknown(value)],
            },
            Some("hook_event") => {
                let name = str_field(&value, "hookEventName").unwrap_or("hook");
                vec![system("hook", name.to_owned(), Some(value.clone()))]
            }
            Some("run_result") => self.run_result(&value),
            Some("error") => {
                let message = str_field(&value, "message").unwrap_or("error").to_owned();
                if self.error.is_none() {
                    let code = classify_message(&message, ErrorCode::SdkError);
                    self.error = Some(CodingError::new(code, message.clone()));
                }
                vec![system("error", message, Some(value))]
            }
            _ => vec![unknown(value)],
        }
    }

    fn finish(self, exit_code: Option<i32>, stderr_tail: &str) -> ParsedRun {
        let completed = self.finish.as_deref() == Some("completed") && exit_code == Some(0);
        let run = if completed {
            ParsedRun {
                text: self.last_text,
                ..ParsedRun::completed()
            }
        } else if let Some(error) = self.error {
            ParsedRun::failed(error)
        } else if let Some(reason) = self.finish.filter(|r| r != "completed") {
            ParsedRun::failed(CodingError::new(
                ErrorCode::Unknown,
                format!("cline ended with finish reason '{reason}'"),
            ))
        } else {
            ParsedRun::failed(exit_failure("cline", exit_code, stderr_tail))
        };
        run.with_stream(self.usage, None, self.modified_files)
    }
}

/// The session id is the folder the run adds under the HOME's sessions.
pub struct Adapter;

impl super::adapter::CliAdapter for Adapter {
    fn begin(&self, run: &super::adapter::RunStart<'_>) -> Box<dyn super::adapter::CliRun> {
        let dir = run.home.join(SESSIONS_DIR);
        // Sessions of earlier runs in the same HOME.
        let before = sessions(&dir);
        Box::new(
            super::adapter::Plain::new(ClineParser::new()).then(move |mut parsed| {
                // One new folder is this run's session; none or several (a subagent's) name no one.
                let new: Vec<PathBuf> = sessions(&dir)
                    .into_iter()
                    .filter(|s| !before.contains(s))
                    .collect();
                if let [session] = new.as_slice() {
                    parsed.session_id = session
                        .file_name()
                        .map(|name| name.to_string_lossy().into_owned());
                }
                parsed.into()
            }),
        )
    }
}

impl BuiltinCli for Adapter {
    fn facts(&self) -> &'static Facts {
        &FACTS
    }

    fn invoke(&self, config: &HarnessConfig, run: &RunPaths, inv: &mut Invocation) {
        let data = run.home.join(".cline/data/settings");
        // Its OpenAI-compatible provider, as `cline auth -p openai -b URL -k KEY -m MODEL` saves it
        // (observed with 3.0.65), so the key stays off the command line. Without a model it has no
        // provider but its own account, which needs `cline auth`.
        if let Some(model) = &config.model {
            let mut settings = json!({"provider": "openai-compatible", "model": model});
            if let Some(url) = run.endpoint {
                settings["baseUrl"] = json!(format!("{url}/v1"));
            }
            if let Some(key) = run.api_key {
                settings["apiKey"] = json!(key);
            }
            let providers = json!({
                "version": 1,
                "lastUsedProvider": "openai-compatible",
                "modes": {},
                // A file without `modes` or `updatedAt` is replaced by its default (its own backend).
                "providers": {"openai-compatible": {
                    "settings": settings,
                    "updatedAt": "1970-01-01T00:00:00.000Z",
                    "tokenSource": "manual",
                }},
            });
            inv.files.push((
                data.join("providers.json"),
                serde_json::to_string_pretty(&providers).expect("settings serialize"),
            ));
        }
        inv.files.push((
            data.join("global-settings.json"),
            serde_json::to_string_pretty(
                &json!({"telemetryOptOut": true, "autoUpdateEnabled": false}),
            )
            .expect("settings serialize"),
        ));
        // A global rule file is appended to its system prompt (`-s` would replace it).
        if let Some(prompt) = &config.append_system_prompt {
            inv.files.push((
                run.home.join("Documents/Cline/Rules/deltabench.md"),
                prompt.clone(),
            ));
        }
        // Without this it starts a hub daemon that outlives the run.
        set_env(&mut inv.env, "CLINE_SESSION_BACKEND_MODE", "local");
        set_env(&mut inv.env, "DO_NOT_TRACK", "1");
        push(&mut inv.args, &["--json", "--auto-approve", "true"]);
    }

    fn gateway_dialect(&self, config: &HarnessConfig) -> Option<CliDialect> {
        config.model.as_ref().map(|_| CliDialect::Openai)
    }
}

fn sessions(dir: &Path) -> BTreeSet<PathBuf> {
    super::adapter::entries(dir, Path::is_dir)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::harness::HarnessKind;
    use crate::agent::harness::invocation::tests::{env, file, paths};
    use crate::agent::harness::invocation::{DUMMY_API_KEY, invocation};
    use crate::agent::harness::tests::*;

    const BASIC: &str = fixture!("cline-basic.jsonl");
    const API_ERROR: &str = fixture!("cline-api-error.jsonl");

    fn run(text: &str, exit: i32) -> (Vec<StreamEvent>, ParsedRun) {
        crate::agent::harness::tests::parse(ClineParser::new(), text, exit)
    }

    #[test]
    fn cline_basic_reads_calls_results_usage_and_the_answer() {
        let (events, run) = run(BASIC, 0);
        assert_call_then_result(&events, "editor");
        assert_call_then_result(&events, "run_commands");
        // Text deltas are one assistant event per message.
        let texts: Vec<&str> = events
            .iter()
            .filter_map(|e| match e {
                StreamEvent::Assistant { text } => Some(text.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(texts, ["I'll create hello.txt now.", "Done, all good."]);
        // The failing `cat` is an error result, the editor's a success.
        let errors = tool_errors(&events);
        assert_eq!(errors, [false, true]);
        assert_eq!(run.status, CodingStatus::Completed);
        assert_eq!(run.text.as_deref(), Some("Done, all good."));
        // 1300 in per call, 300 of them cache reads.
        let usage = run.usage.expect("usage");
        assert_eq!(
            (
                usage.input_tokens,
                usage.output_tokens,
                usage.cache_read_tokens,
                usage.model_calls
            ),
            (3000, 60, 900, 3)
        );
        assert_eq!(usage.cost_usd, None);
        assert_eq!(run.modified_files, ["<lab>/ws/cline-basic/hello.txt"]);
        assert!(kinds(&events).contains(&"result"));
    }

    #[test]
    fn cline_api_error_is_an_error_with_its_message() {
        let (events, run) = run(API_ERROR, 1);
        assert!(kinds(&events).contains(&"system"));
        assert_eq!(run.status, CodingStatus::Error);
        let error = run.error.expect("error");
        assert_eq!(error.code, ErrorCode::SdkError);
        assert_eq!(error.message, "bad request here");
    }

    #[test]
    fn a_claimed_completion_without_exit_zero_or_a_result_is_no_pass() {
        // Cut before `run_result`: killed, or exited without its verdict.
        let cut: String = BASIC
            .lines()
            .filter(|l| !l.contains("\"run_result\""))
            .collect::<Vec<_>>()
            .join("\n");
        let (_, run) = run(&cut, 0);
        assert_eq!(run.status, CodingStatus::Error);
        let (_, run) = self::run(BASIC, 1);
        assert_eq!(run.status, CodingStatus::Error);
    }

    #[test]
    fn cline_garbage_and_truncated_lines_are_unknown() {
        let truncated = &BASIC.lines().nth(3).unwrap_or_default()[..60];
        assert_survives_garbage(ClineParser::new(), truncated);
    }

    #[test]
    fn cline_gets_its_provider_in_a_settings_file_not_on_the_command_line() {
        let config = HarnessConfig {
            model: Some("fake-model".into()),
            append_system_prompt: Some("Be brief.".into()),
            ..HarnessConfig::default()
        };
        let inv = invocation(
            HarnessKind::Cline,
            &config,
            &paths(None, Some("http://127.0.0.1:9")),
        );
        assert_eq!(
            inv.args.join(" "),
            "--json --auto-approve true -- -fix the bug"
        );
        let providers: serde_json::Value =
            serde_json::from_str(file(&inv, "providers.json")).unwrap();
        let settings = &providers["providers"]["openai-compatible"]["settings"];
        assert_eq!(settings["baseUrl"], "http://127.0.0.1:9/v1");
        assert_eq!(settings["apiKey"], DUMMY_API_KEY);
        assert_eq!(settings["model"], "fake-model");
        assert_eq!(file(&inv, "deltabench.md"), "Be brief.");
        assert_eq!(env(&inv, "CLINE_SESSION_BACKEND_MODE"), Some("local"));
    }
}
