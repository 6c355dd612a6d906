//! Gemini CLI: `gemini -p PROMPT --output-format stream-json`.
//!
//! One JSON object per line (clis.md §3): `init` (the only line with the session id),
//! `message` (user echo; assistant text in `delta` chunks), `tool_use`, `tool_result`, `error`
//! (non-fatal notices) and the final `result` with `stats` (tokens, no cost). Exit 53 is the
//! session turn limit; other non-zero exits (possibly an HTTP status modulo 256) are failures.

use super::builtin::{BuiltinCli, Doc, Facts, PROMPT, Prompt, SESSION, STREAM};
use super::cli::CliDialect;
use super::config::{HarnessConfig, Package, Registry, TurnLimit};
use super::invocation::{Invocation, RunPaths, push, set_env};
use std::collections::HashMap;

use serde_json::{Value, json};

use super::{
    ParsedRun, StreamParser, classify_message, exit_failure, http_error_code, json_line,
    push_unique, str_field, system, u64_field, unknown,
};
use crate::agent::{CodingError, CodingStatus, ErrorCode, StreamEvent, Usage};

const FACTS: Facts = Facts {
    program: "gemini",
    description: "Gemini CLI, run headless (gemini -p).",
    doc: Doc {
        name: "Gemini CLI",
        program_note: "",
        resume_note: "",
        turns: "`model.maxSessionTurns`",
        modes_note: "",
        cost: "estimated (it reports none)",
    },
    package: Package {
        registry: Registry::Npm,
        name: "@google/gemini-cli",
        version: "0.61.0",
    },
    key_env: "GEMINI_API_KEY",
    no_resume: None,
    permission_modes: &["yolo", "auto_edit", "default", "plan"],
    turn_limit: TurnLimit::Native,
    appends_system_prompt: true,
    reserved_flags: &[
        ("-p", PROMPT),
        ("--prompt", PROMPT),
        ("-o", STREAM),
        ("--output-format", STREAM),
        ("-r", SESSION),
        ("--resume", SESSION),
        ("-m", "use `model:`"),
        ("--model", "use `model:`"),
        ("--approval-mode", "use `permission_mode:`"),
        ("-y", "use `permission_mode:`"),
        ("--yolo", "use `permission_mode:`"),
    ],
    prompt: Prompt::InFlag,
};

/// Exit code of `FatalTurnLimitedError`.
const EXIT_TURN_LIMIT: i32 = 53;
/// Exit code of a cancelled run.
const EXIT_CANCELLED: i32 = 130;

/// Tools whose successful call wrote the file named by their input.
const WRITE_TOOLS: [(&str, &str); 3] = [
    ("write_file", "file_path"),
    ("replace", "file_path"),
    ("edit", "file_path"),
];

/// A [`StreamParser`] for Gemini CLI's `stream-json` stdout.
#[derive(Debug, Default)]
pub struct GeminiParser {
    session_id: Option<String>,
    /// Tool name and, for write tools, the path, by tool_id.
    tools: HashMap<String, (String, Option<String>)>,
    modified_files: Vec<String>,
    /// The assistant text since the last tool result (the chunks of one reply).
    reply: String,
    /// Model replies seen (a reply is the text and tool calls between two inputs).
    model_calls: u64,
    in_reply: bool,
    result: Option<Value>,
}

impl GeminiParser {
    /// A parser that has seen no line yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Model output (text or a tool call) opens a reply when none is open.
    fn model_output(&mut self) {
        if !self.in_reply {
            self.in_reply = true;
            self.model_calls += 1;
            self.reply.clear();
        }
    }

    fn usage(&self) -> Option<Usage> {
        let stats = self.result.as_ref()?.get("stats")?;
        let cached = u64_field(stats, "cached");
        // `input` is the uncached input; older shapes only have `input_tokens` (with cache).
        let input = stats
            .get("input")
            .and_then(Value::as_u64)
            .unwrap_or_else(|| u64_field(stats, "input_tokens").saturating_sub(cached));
        Some(Usage {
            input_tokens: input,
            output_tokens: u64_field(stats, "output_tokens"),
            cache_read_tokens: cached,
            model_calls: self.model_calls,
            ..Usage::default()
        })
    }

    fn verdict(&self, exit_code: Option<i32>, stderr_tail: &str) -> ParsedRun {
        let error_type = self
            .result
            .as_ref()
            .and_then(|r| r.pointer("/error/type"))
            .and_then(Value::as_str);
        if exit_code == Some(EXIT_TURN_LIMIT) || error_type == Some("FatalTurnLimitedError") {
            return ParsedRun::max_turns();
        }
        if exit_code == Some(EXIT_CANCELLED) {
            return ParsedRun::failed(CodingError::new(ErrorCode::Aborted, "gemini was cancelled"));
        }
        let Some(result) = &self.result else {
            let mut error = exit_failure("gemini", exit_code, stderr_tail);
            if let Some(what) = exit_code.and_then(fatal_exit) {
                error.code = ErrorCode::SdkError;
                error.message = format!("{what}: {}", error.message);
            }
            return ParsedRun::failed(error);
        };
        let success = str_field(result, "status") == Some("success");
        match (success, exit_code) {
            (true, Some(0) | None) => ParsedRun::completed(),
            (true, _) => ParsedRun::failed(exit_failure("gemini", exit_code, stderr_tail)),
            (false, _) => {
                let message = result
                    .pointer("/error/message")
                    .and_then(Value::as_str)
                    .unwrap_or("gemini reported an error")
                    .to_owned();
                ParsedRun::failed(CodingError::new(api_error_code(&message), message))
            }
        }
    }
}

/// What gemini's own fatal exit codes mean (clis.md §3, `FatalError` classes).
fn fatal_exit(code: i32) -> Option<&'static str> {
    Some(match code {
        41 => "authentication failed",
        42 => "invalid input",
        44 => "sandbox error",
        52 => "configuration error",
        54 => "tool execution failed",
        55 => "untrusted workspace",
        _ => return None,
    })
}

/// `[API Error: {"error":{"code":429,…}}]` carries the HTTP status; otherwise the wording.
fn api_error_code(message: &str) -> ErrorCode {
    let status = message
        .find('{')
        .and_then(|start| {
            let end = message.rfind('}')?;
            serde_json::from_str::<Value>(message.get(start..=end)?).ok()
        })
        .and_then(|body| body.pointer("/error/code").and_then(Value::as_u64));
    match status {
        Some(status) => classify_message(message, http_error_code(status)),
        None if message.contains("API Error") => classify_message(message, ErrorCode::SdkError),
        None => classify_message(message, ErrorCode::Unknown),
    }
}

impl StreamParser for GeminiParser {
    fn line(&mut self, line: &str) -> Vec<StreamEvent> {
        let value = match json_line(line) {
            Ok(value) => value,
            Err(events) => return events,
        };
        match str_field(&value, "type") {
            Some("init") => {
                if let Some(id) = str_field(&value, "session_id") {
                    self.session_id = Some(id.to_owned());
                }
                let message = format!("model {}", str_field(&value, "model").unwrap_or("?"));
                vec![system("init", message, Some(value))]
            }
            Some("message") if str_field(&value, "role") == Some("assistant") => {
                self.model_output();
                let text = str_field(&value, "content").unwrap_or_default().to_owned();
                self.reply.push_str(&text);
                vec![StreamEvent::Assistant { text }]
            }
            Some("message") if str_field(&value, "role") == Some("user") => {
                self.in_reply = false;
                let text = str_field(&value, "content").unwrap_or_default();
                vec![system("user", text, None)]
            }
            Some("tool_use") => {
                self.model_output();
                let id = str_field(&value, "tool_id").map(str::to_owned);
                let name = str_field(&value, "tool_name")
                    .unwrap_or_default()
                    .to_owned();
                let args = value.get("parameters").cloned().unwrap_or(Value::Null);
                let path = WRITE_TOOLS
                    .iter()
                    .find(|(tool, _)| *tool == name)
                    .and_then(|(_, key)| str_field(&args, key))
                    .map(str::to_owned);
                if let Some(id) = &id {
                    self.tools.insert(id.clone(), (name.clone(), path));
                }
                vec![StreamEvent::ToolCall { id, name, args }]
            }
            Some("tool_result") => {
                self.in_reply = false;
                let id = str_field(&value, "tool_id").map(str::to_owned);
                let is_error = str_field(&value, "status") != Some("success");
                let known = id.as_ref().and_then(|id| self.tools.get(id)).cloned();
                if !is_error && let Some((_, Some(path))) = &known {
                    push_unique(&mut self.modified_files, path);
                }
                let result = value
                    .get("output")
                    .or_else(|| value.get("error"))
                    .cloned()
                    .unwrap_or(Value::Null);
                vec![StreamEvent::ToolResult {
                    id,
                    name: known.map(|(name, _)| name),
                    result,
                    is_error,
                }]
            }
            Some("error") => {
                let severity = str_field(&value, "severity").unwrap_or("error");
                let message = str_field(&value, "message").unwrap_or_default().to_owned();
                vec![system(severity, message, None)]
            }
            Some("result") => {
                self.result = Some(value.clone());
                let mut events = Vec::new();
                if let Some(usage) = self.usage() {
                    events.push(StreamEvent::Usage { usage });
                }
                let success = str_field(&value, "status") == Some("success");
                events.push(StreamEvent::Result {
                    status: if success {
                        CodingStatus::Completed
                    } else {
                        CodingStatus::Error
                    },
                    text: (success && !self.reply.is_empty()).then(|| self.reply.clone()),
                });
                events
            }
            _ => vec![unknown(value)],
        }
    }

    fn finish(self, exit_code: Option<i32>, stderr_tail: &str) -> ParsedRun {
        let mut run = self.verdict(exit_code, stderr_tail);
        run.usage = self.usage();
        if run.status == CodingStatus::Completed && !self.reply.is_empty() {
            run.text = Some(self.reply);
        }
        run.with_stream(None, self.session_id, self.modified_files)
    }
}

/// Gemini CLI needs nothing beside its stream.
pub struct Adapter;

impl super::adapter::CliAdapter for Adapter {
    fn begin(&self, _: &super::adapter::RunStart<'_>) -> Box<dyn super::adapter::CliRun> {
        super::adapter::Plain::boxed(GeminiParser::new())
    }
}

impl BuiltinCli for Adapter {
    fn facts(&self) -> &'static Facts {
        &FACTS
    }

    fn invoke(&self, config: &HarnessConfig, run: &RunPaths, inv: &mut Invocation) {
        let gemini_dir = run.home.join(".gemini");
        let mut settings = json!({
            "privacy": {"usageStatisticsEnabled": false},
            "telemetry": {"enabled": false},
            "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": false}},
            "general": {"disableAutoUpdate": true, "disableUpdateNag": true},
        });
        if let Some(turns) = config.max_turns {
            settings["model"] = json!({ "maxSessionTurns": turns });
        }
        inv.files.push((
            gemini_dir.join("settings.json"),
            serde_json::to_string_pretty(&settings).expect("settings serialize"),
        ));
        if let Some(prompt) = &config.append_system_prompt {
            // The global context file is added to the system instruction of every session.
            inv.files
                .push((gemini_dir.join("GEMINI.md"), prompt.clone()));
        }
        set_env(&mut inv.env, "GEMINI_CLI_TRUST_WORKSPACE", "true");
        if let Some(url) = run.endpoint {
            set_env(&mut inv.env, "GOOGLE_GEMINI_BASE_URL", url);
        }
        if let Some(key) = run.api_key {
            set_env(&mut inv.env, "GEMINI_API_KEY", key);
        }
        let args = &mut inv.args;
        args.push(format!("--prompt={}", run.task));
        push(args, &["--output-format", "stream-json"]);
        if let Some(mode) = config.permission_mode_of(self) {
            push(args, &["--approval-mode", mode]);
        }
        if let Some(model) = &config.model {
            push(args, &["-m", model]);
        }
        if let Some(id) = run.resume {
            push(args, &["-r", id]);
        }
    }

    fn gateway_dialect(&self, _config: &HarnessConfig) -> Option<CliDialect> {
        Some(CliDialect::Gemini)
    }

    fn min_node(&self) -> Option<u32> {
        Some(20)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::harness::HarnessKind;
    use crate::agent::harness::invocation::invocation;
    use crate::agent::harness::invocation::tests::{env, file, paths};
    use crate::agent::harness::tests::*;

    const BASIC: &str = fixture!("gemini-basic.jsonl");
    const RESUME: &str = fixture!("gemini-resume.jsonl");
    const MAX_TURNS: &str = fixture!("gemini-max-turns.jsonl");
    const API_ERROR: &str = fixture!("gemini-api-error.jsonl");
    const API_ERROR_STDERR: &str = fixture!("gemini-api-error.stderr");

    fn run(text: &str, exit: i32, stderr: &str) -> (Vec<StreamEvent>, ParsedRun) {
        let mut parser = GeminiParser::new();
        let events = feed(&mut parser, text);
        (events, parser.finish(Some(exit), stderr))
    }

    fn usage(input: u64, output: u64, calls: u64) -> Usage {
        Usage {
            input_tokens: input,
            output_tokens: output,
            model_calls: calls,
            ..Usage::default()
        }
    }

    #[test]
    fn gemini_basic() {
        let (events, run) = run(BASIC, 0, "");
        assert_basic_turns(&events, &["system", "system"]);
        assert_call_then_result(&events, "write_file");
        assert_call_then_result(&events, "run_shell_command");
        assert_eq!(run.status, CodingStatus::Completed);
        assert_eq!(run.error, None);
        assert_eq!(run.usage, Some(usage(3300, 63, 3)));
        assert_eq!(
            run.session_id.as_deref(),
            Some("fdda4454-4559-4511-8bcd-69b0e2c2d6e9")
        );
        assert_eq!(
            run.text.as_deref(),
            Some("Done: I created hello.txt and checked its contents.")
        );
        // Gemini's write_file takes a relative path.
        assert_eq!(run.modified_files, ["hello.txt"]);
    }

    #[test]
    fn gemini_resume_keeps_the_session() {
        let (_, run) = run(RESUME, 0, "");
        assert_eq!(run.status, CodingStatus::Completed);
        assert_eq!(run.usage, Some(usage(1200, 22, 1)));
        assert_eq!(
            run.session_id.as_deref(),
            Some("fdda4454-4559-4511-8bcd-69b0e2c2d6e9")
        );
    }

    #[test]
    fn gemini_max_turns_is_exit_53() {
        let (events, run) = run(MAX_TURNS, 53, "");
        assert_call_then_result(&events, "run_shell_command");
        assert_eq!(run.status, CodingStatus::MaxTurns);
        assert_eq!(run.error, None);
        assert_eq!(run.usage, Some(usage(2100, 41, 2)));
        assert_eq!(
            run.session_id.as_deref(),
            Some("7c12f63f-f2eb-4331-b111-286bf52fbbd2")
        );
        assert!(run.modified_files.is_empty());
        // Exit 53 alone, with no result line, is the turn limit too.
        let mut parser = GeminiParser::new();
        feed(&mut parser, BASIC.lines().next().unwrap_or_default());
        assert_eq!(parser.finish(Some(53), "").status, CodingStatus::MaxTurns);
    }

    #[test]
    fn gemini_api_error_exit_144() {
        let (events, run) = run(API_ERROR, 144, API_ERROR_STDERR);
        assert_eq!(kinds(&events), ["system", "system", "usage", "result"]);
        assert_eq!(run.status, CodingStatus::Error);
        let error = run.error.expect("error");
        assert_eq!(error.code, ErrorCode::SdkError);
        assert!(
            error.message.contains("scripted failure"),
            "{}",
            error.message
        );
        assert_eq!(run.usage, Some(usage(0, 0, 0)));
        assert_eq!(
            run.session_id.as_deref(),
            Some("fff2339e-bbcd-4bb2-a721-1c3f886652df")
        );
    }

    #[test]
    fn gemini_429_is_rate_limited() {
        let stream = API_ERROR
            .replace("\\\"code\\\":400", "\\\"code\\\":429")
            .replace("INVALID_ARGUMENT", "RESOURCE_EXHAUSTED");
        assert_ne!(stream, API_ERROR);
        let (_, run) = run(&stream, 173, "");
        assert_eq!(run.error.expect("error").code, ErrorCode::RateLimited);
    }

    #[test]
    fn gemini_fatal_exit_without_result() {
        let mut parser = GeminiParser::new();
        feed(&mut parser, BASIC.lines().next().unwrap_or_default());
        let run = parser.finish(Some(55), "");
        assert_eq!(run.status, CodingStatus::Error);
        let error = run.error.expect("error");
        assert_eq!(error.code, ErrorCode::SdkError);
        assert!(
            error.message.starts_with("untrusted workspace"),
            "{}",
            error.message
        );
        let mut parser = GeminiParser::new();
        feed(&mut parser, BASIC.lines().next().unwrap_or_default());
        assert_eq!(parser.finish(Some(130), "").status, CodingStatus::Aborted);
    }

    #[test]
    fn gemini_garbage_and_truncated_lines_are_unknown() {
        let truncated = &BASIC.lines().nth(3).unwrap_or_default()[..80];
        assert_survives_garbage(GeminiParser::new(), truncated);
    }

    #[test]
    fn gemini_turn_limit_and_prompt_go_to_its_settings() {
        let config = HarnessConfig {
            max_turns: Some(2),
            append_system_prompt: Some("Be brief.".into()),
            ..HarnessConfig::default()
        };
        let inv = invocation(
            HarnessKind::GeminiCli,
            &config,
            &paths(Some("s-1"), Some("http://127.0.0.1:9")),
        );
        assert_eq!(
            inv.args.join(" "),
            "--prompt=-fix the bug --output-format stream-json --approval-mode yolo -r s-1"
        );
        let settings: serde_json::Value =
            serde_json::from_str(file(&inv, "settings.json")).unwrap();
        assert_eq!(settings["model"]["maxSessionTurns"], 2);
        assert_eq!(file(&inv, "GEMINI.md"), "Be brief.");
        assert_eq!(
            env(&inv, "GOOGLE_GEMINI_BASE_URL"),
            Some("http://127.0.0.1:9")
        );
    }
}
