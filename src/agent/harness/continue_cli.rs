//! Continue's CLI: `cn -p --config FILE --auto --format json PROMPT`.
//!
//! Headless, its stdout is only the final answer (`{"response": ...}`, observed with 1.5.47);
//! the machine-readable record is the session file it writes under
//! `HOME/.continue/sessions/<id>.json` (its name is the session id): a `history` of chat
//! messages, each assistant message with its `usage`, `toolCallStates` with each call's status
//! and output, and the session's `usage` total. The run reads the one session file that was not
//! there when it started, polled while the CLI runs (1.5.47 writes it only at exit, hence no
//! turn limit). Its `totalCost` is Continue's own guess for a model it may not know, so it is
//! not reported as the CLI's cost.

use super::builtin::{BuiltinCli, Doc, Facts, PROMPT, Prompt, SESSION, STREAM};
use super::cli::CliDialect;
use super::config::{HarnessConfig, Package, Registry, TurnLimit};
use super::invocation::{Invocation, RunPaths, push, set_env};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::{ParsedRun, StreamParser, exit_failure, push_unique, str_field, system, u64_field};
use crate::agent::{CodingError, StreamEvent, Usage};

const FACTS: Facts = Facts {
    program: "cn",
    description: "Continue's CLI, run headless (cn -p --auto).",
    doc: Doc {
        name: "Continue's CLI",
        program_note: "",
        resume_note: " (the newest session of its HOME)",
        turns: "",
        modes_note: " (always `--auto`)",
        cost: "estimated (its own `totalCost` is a guess for an unknown model)",
    },
    package: Package {
        registry: Registry::Npm,
        name: "@continuedev/cli",
        version: "1.5.47",
    },
    key_env: "OPENAI_API_KEY",
    no_resume: None,
    permission_modes: &[],
    turn_limit: // It writes its session (deltabench's view of its calls) only at exit.
    TurnLimit::Unsupported,
    appends_system_prompt: true,
    reserved_flags: &[
        ("-p", PROMPT),
        ("--print", PROMPT),
        ("--format", STREAM),
        (
            "--config",
            "deltabench writes the config that points it at the endpoint",
        ),
        ("--resume", SESSION),
        ("--fork", SESSION),
        ("--model", "use `model:`"),
        ("--readonly", "it runs with --auto"),
        ("--auto", "it runs with --auto"),
    ],
    prompt: Prompt::AfterDashes,
};

/// Tools whose successful call wrote the file named by their `filepath` argument.
const WRITE_TOOLS: [&str; 3] = ["Write", "Edit", "MultiEdit"];

/// Where the CLI keeps its sessions, under its HOME.
pub const SESSIONS_DIR: &str = ".continue/sessions";

/// A [`StreamParser`] for Continue's session file (its stdout holds only the final answer).
#[derive(Debug, Default)]
pub struct ContinueParser {
    /// History entries already turned into events.
    seen: usize,
    session_id: Option<String>,
    usage: Option<Usage>,
    last_text: Option<String>,
    /// The final answer on stdout.
    response: Option<String>,
    modified_files: Vec<String>,
    /// The session's totals before this run, when it resumes one (its `usage` is cumulative).
    base: Usage,
    /// The session resumed, and how many history entries it had: a run that adds none to it
    /// did not continue it.
    resumed: Option<(String, usize)>,
}

impl ContinueParser {
    /// A parser that has seen no line yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// A parser for a run that continues the session saved as `json`: its entries and totals
    /// are the earlier runs'.
    pub fn resuming(id: &str, json: &str) -> Self {
        let mut earlier = Self::new();
        earlier.session(json);
        Self {
            seen: earlier.seen,
            base: earlier.usage.unwrap_or_default(),
            resumed: Some((id.to_owned(), earlier.seen)),
            session_id: earlier.session_id,
            usage: Some(Usage::default()),
            ..Self::new()
        }
    }

    /// Reads the session file's current text; returns the events of history entries not seen
    /// before. A partly written file yields nothing and is read again next time.
    pub fn session(&mut self, json: &str) -> Vec<StreamEvent> {
        let Ok(session) = serde_json::from_str::<Value>(json) else {
            return Vec::new();
        };
        let mut events = Vec::new();
        if self.session_id.is_none()
            && let Some(id) = str_field(&session, "sessionId")
        {
            self.session_id = Some(id.to_owned());
            events.push(system("init", format!("session {id}"), None));
        }
        let history = session
            .get("history")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        // The last entry may still be growing (its tool calls not yet run): it waits until
        // every call has a final state (a run killed mid-call leaves that entry out).
        let ready = match history.last() {
            Some(last) if !settled(last) => history.len() - 1,
            _ => history.len(),
        };
        for item in history.get(self.seen..ready).unwrap_or_default() {
            events.extend(self.item(item));
        }
        self.seen = self.seen.max(ready);
        if let Some(total) = session.get("usage") {
            let cached = total
                .pointer("/promptTokensDetails/cachedTokens")
                .and_then(Value::as_u64)
                .unwrap_or(0);
            let base = &self.base;
            let usage = Usage {
                input_tokens: u64_field(total, "promptTokens")
                    .saturating_sub(cached)
                    .saturating_sub(base.input_tokens),
                output_tokens: u64_field(total, "completionTokens")
                    .saturating_sub(base.output_tokens),
                cache_read_tokens: cached.saturating_sub(base.cache_read_tokens),
                cache_write_tokens: total
                    .pointer("/promptTokensDetails/cacheWriteTokens")
                    .and_then(Value::as_u64)
                    .unwrap_or(0)
                    .saturating_sub(base.cache_write_tokens),
                ..Usage::default()
            };
            // The session's running total, as a usage event whenever it grows.
            if self.usage.as_ref() != Some(&usage) {
                events.push(StreamEvent::Usage {
                    usage: usage.clone(),
                });
                self.usage = Some(usage);
            }
        }
        events
    }

    fn item(&mut self, item: &Value) -> Vec<StreamEvent> {
        let message = item.get("message").cloned().unwrap_or(Value::Null);
        let content = match message.get("content") {
            Some(Value::String(text)) => text.clone(),
            Some(Value::Array(parts)) => parts
                .iter()
                .filter_map(|p| str_field(p, "text"))
                .collect::<Vec<_>>()
                .join(""),
            _ => String::new(),
        };
        match str_field(&message, "role") {
            Some("user") => vec![system("user", content, None)],
            Some("system") => vec![system("system_prompt", content, None)],
            Some("assistant") => {
                let mut events = Vec::new();
                if !content.is_empty() {
                    self.last_text = Some(content.clone());
                    events.push(StreamEvent::Assistant { text: content });
                }
                for call in message
                    .get("toolCalls")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    events.push(StreamEvent::ToolCall {
                        id: str_field(call, "id").map(str::to_owned),
                        name: call
                            .pointer("/function/name")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_owned(),
                        args: call
                            .pointer("/function/arguments")
                            .and_then(Value::as_str)
                            .and_then(|a| serde_json::from_str(a).ok())
                            .unwrap_or(Value::Null),
                    });
                }
                for state in item
                    .get("toolCallStates")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    events.push(self.tool_result(state));
                }
                events
            }
            _ => vec![super::unknown(item.clone())],
        }
    }

    fn tool_result(&mut self, state: &Value) -> StreamEvent {
        let name = state
            .pointer("/toolCall/function/name")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let is_error = str_field(state, "status") != Some("done");
        if !is_error
            && WRITE_TOOLS.contains(&name)
            && let Some(path) = state
                .pointer("/parsedArgs/filepath")
                .and_then(Value::as_str)
        {
            push_unique(&mut self.modified_files, path);
        }
        let output: Vec<&str> = state
            .get("output")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|o| str_field(o, "content"))
            .collect();
        StreamEvent::ToolResult {
            id: str_field(state, "toolCallId").map(str::to_owned),
            name: Some(name.to_owned()),
            result: json!(output.join("\n")),
            is_error,
        }
    }
}

/// Whether every tool call of a history entry has its final state.
fn settled(item: &Value) -> bool {
    let calls = item
        .pointer("/message/toolCalls")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    let done = item
        .get("toolCallStates")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|s| {
            matches!(
                str_field(s, "status"),
                Some("done" | "errored" | "canceled")
            )
        })
        .count();
    done >= calls
}

impl StreamParser for ContinueParser {
    /// Stdout is the final answer (`--format json`), or text when it is not JSON. The answer
    /// is the run's text, not an event: the session file, read after it, has the same text as
    /// the last assistant message.
    fn line(&mut self, line: &str) -> Vec<StreamEvent> {
        if line.trim().is_empty() {
            return Vec::new();
        }
        match serde_json::from_str::<Value>(line.trim()) {
            Ok(value) if value.get("response").is_some() => {
                self.response = value
                    .get("response")
                    .map(|r| r.as_str().map_or_else(|| r.to_string(), str::to_owned));
                Vec::new()
            }
            _ => vec![super::unknown_text(line)],
        }
    }

    fn finish(self, exit_code: Option<i32>, stderr_tail: &str) -> ParsedRun {
        let run = if let Some((id, had)) = &self.resumed
            && self.seen == *had
            && exit_code == Some(0)
        {
            // `--resume` continues the newest session in its HOME, which may not be this one.
            ParsedRun::failed(CodingError::new(
                crate::agent::ErrorCode::Unknown,
                format!(
                    "cn added nothing to session {id}: it resumes only the newest session of its HOME"
                ),
            ))
        } else if exit_code == Some(0) && self.response.is_some() {
            ParsedRun {
                text: self.response.clone().or(self.last_text.clone()),
                ..ParsedRun::completed()
            }
        } else {
            let error: CodingError = exit_failure("cn", exit_code, stderr_tail);
            ParsedRun::failed(error)
        };
        run.with_stream(self.usage, self.session_id, self.modified_files)
    }
}

/// The CLI's record is its session file: the run finds the new one and reads it.
pub struct Adapter;

impl super::adapter::CliAdapter for Adapter {
    fn begin(&self, run: &super::adapter::RunStart<'_>) -> Box<dyn super::adapter::CliRun> {
        let dir = run.home.join(SESSIONS_DIR);
        // A resumed run appends to its session's file; a new one writes a new file.
        let resumed = run
            .resume
            .filter(|id| !id.contains(['/', '\\']))
            .map(|id| dir.join(format!("{id}.json")));
        let parser = match (run.resume, resumed.as_deref().map(std::fs::read_to_string)) {
            (Some(id), Some(Ok(json))) => ContinueParser::resuming(id, &json),
            _ => ContinueParser::new(),
        };
        Box::new(ContinueRun {
            parser,
            before: session_files(&dir),
            dir,
            file: resumed,
        })
    }
}

impl BuiltinCli for Adapter {
    fn facts(&self) -> &'static Facts {
        &FACTS
    }

    fn invoke(&self, config: &HarnessConfig, run: &RunPaths, inv: &mut Invocation) {
        // One OpenAI-compatible model: the endpoint's, or OpenAI's own without one.
        let mut model = json!({
            "name": "deltabench",
            "provider": "openai",
            "model": config.model.clone().unwrap_or_else(|| "gpt-4.1".into()),
            "roles": ["chat", "edit", "apply"],
        });
        if let Some(url) = run.endpoint {
            model["apiBase"] = json!(format!("{url}/v1"));
        }
        if let Some(key) = run.api_key {
            model["apiKey"] = json!(key);
        } else if let Ok(key) = std::env::var("OPENAI_API_KEY") {
            model["apiKey"] = json!(key);
        }
        let mut file = json!({
            "name": "deltabench",
            "version": "0.0.1",
            "schema": "v1",
            "models": [model],
        });
        if let Some(prompt) = &config.append_system_prompt {
            file["rules"] = json!([prompt]);
        }
        let path = run.home.join(".continue/deltabench.yaml");
        // JSON is YAML: the config needs no YAML writer.
        inv.files.push((
            path.clone(),
            serde_json::to_string_pretty(&file).expect("config serializes"),
        ));
        set_env(&mut inv.env, "CONTINUE_CLI_ENABLE_TELEMETRY", "0");
        set_env(&mut inv.env, "CONTINUE_METRICS_ENABLED", "0");
        let args = &mut inv.args;
        push(args, &["-p", "--auto", "--format", "json", "--config"]);
        args.push(path.display().to_string());
        // It resumes the newest session of its HOME; the run checks that it was this one.
        if run.resume.is_some() {
            args.push("--resume".into());
        }
    }

    fn gateway_dialect(&self, config: &HarnessConfig) -> Option<CliDialect> {
        config.model.as_ref().map(|_| CliDialect::Openai)
    }
}

/// The session files in `dir` (`sessions.json` is its index, not a session).
fn session_files(dir: &Path) -> BTreeSet<PathBuf> {
    super::adapter::entries(dir, |path| {
        path.extension().is_some_and(|e| e == "json")
            && path.file_name().is_some_and(|n| n != "sessions.json")
    })
}

struct ContinueRun {
    parser: ContinueParser,
    dir: PathBuf,
    /// Sessions of earlier runs in the same HOME.
    before: BTreeSet<PathBuf>,
    file: Option<PathBuf>,
}

impl super::adapter::CliRun for ContinueRun {
    fn line(&mut self, line: &str) -> Vec<StreamEvent> {
        self.parser.line(line)
    }

    fn poll(&mut self) -> Vec<StreamEvent> {
        if self.file.is_none() {
            self.file = session_files(&self.dir)
                .into_iter()
                .find(|f| !self.before.contains(f));
        }
        match self.file.as_deref().map(std::fs::read_to_string) {
            Some(Ok(text)) => self.parser.session(&text),
            _ => Vec::new(),
        }
    }

    fn finish(
        self: Box<Self>,
        exit_code: Option<i32>,
        stderr_tail: &str,
    ) -> super::adapter::Finished {
        self.parser.finish(exit_code, stderr_tail).into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::CodingStatus;
    use crate::agent::harness::tests::tool_errors;

    /// The session file Continue 1.5.47 wrote against the scripted endpoint (trimmed).
    const SESSION: &str = r#"{"sessionId":"528b39dc","workspaceDirectory":"/ws","history":[
{"message":{"role":"user","content":"Create hello.txt"}},
{"message":{"role":"assistant","content":"I'll create hello.txt.","toolCalls":[{"id":"call_1","type":"function","function":{"name":"Write","arguments":"{\"content\":\"hi\\n\",\"filepath\":\"/ws/hello.txt\"}"}}],"usage":{"completion_tokens":20,"prompt_tokens":1000}},
 "toolCallStates":[{"toolCallId":"call_1","toolCall":{"id":"call_1","function":{"name":"Write","arguments":"{}"}},"status":"done","parsedArgs":{"content":"hi\n","filepath":"/ws/hello.txt"},"output":[{"content":"Successfully created","name":"Tool Result"}]}]},
{"message":{"role":"assistant","content":"","toolCalls":[{"id":"call_2","type":"function","function":{"name":"Bash","arguments":"{\"command\":\"cat nope\"}"}}]},
 "toolCallStates":[{"toolCallId":"call_2","toolCall":{"id":"call_2","function":{"name":"Bash"}},"status":"errored","parsedArgs":{"command":"cat nope"},"output":[{"content":"No such file"}]}]},
{"message":{"role":"assistant","content":"Done."}}],
"usage":{"totalCost":0.003,"promptTokens":3000,"completionTokens":60,"promptTokensDetails":{"cachedTokens":500,"cacheWriteTokens":0}}}"#;

    #[test]
    fn reads_the_session_file_and_the_final_answer() {
        let mut parser = ContinueParser::new();
        let events = parser.session(SESSION);
        // Read again (as the poll does): nothing new.
        assert!(parser.session(SESSION).is_empty());
        let names: Vec<_> = events
            .iter()
            .filter_map(|e| match e {
                StreamEvent::ToolCall { name, .. } => Some(name.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(names, ["Write", "Bash"]);
        let errors = tool_errors(&events);
        assert_eq!(errors, [false, true]);
        parser.line(r#"{"response":"Done.","status":"success"}"#);
        let run = parser
            .finish(Some(0), "")
            .relative_to(std::path::Path::new("/ws"));
        assert_eq!(run.status, CodingStatus::Completed);
        assert_eq!(run.session_id.as_deref(), Some("528b39dc"));
        assert_eq!(run.modified_files, ["hello.txt"]);
        let usage = run.usage.unwrap();
        assert_eq!(
            (
                usage.input_tokens,
                usage.output_tokens,
                usage.cache_read_tokens
            ),
            (2500, 60, 500)
        );
        assert_eq!(usage.cost_usd, None);
        assert_eq!(run.text.as_deref(), Some("Done."));
    }

    #[test]
    fn a_last_entry_with_a_pending_call_waits_for_its_result() {
        let pending = SESSION.replacen(r#""status":"errored""#, r#""status":"calling""#, 1);
        let cut = pending
            .find(r#"{"message":{"role":"assistant","content":"Done."}}"#)
            .unwrap();
        let growing = format!("{}]}}", pending[..cut].trim_end().trim_end_matches(','));
        let mut parser = ContinueParser::new();
        let first = parser.session(&growing);
        assert!(
            !first
                .iter()
                .any(|e| matches!(e, StreamEvent::ToolCall { name, .. } if name == "Bash"))
        );
        let rest = parser.session(SESSION);
        assert!(
            rest.iter()
                .any(|e| matches!(e, StreamEvent::ToolCall { name, .. } if name == "Bash"))
        );
    }

    #[test]
    fn a_resumed_run_counts_only_its_own_entries_and_usage() {
        let mut parser = ContinueParser::resuming("528b39dc", SESSION);
        // Nothing added: that was another session's run.
        assert!(parser.session(SESSION).is_empty());
        let grown = SESSION
            .replace(
                r#""content":"Done."}}]"#,
                r#""content":"Done."}},{"message":{"role":"assistant","content":"Summary."}}]"#,
            )
            .replace(
                r#""promptTokens":3000,"completionTokens":60"#,
                r#""promptTokens":4000,"completionTokens":80"#,
            );
        let events = parser.session(&grown);
        assert!(matches!(&events[0], StreamEvent::Assistant { text } if text == "Summary."));
        parser.line(r#"{"response":"Summary."}"#);
        let run = parser.finish(Some(0), "");
        assert_eq!(run.status, CodingStatus::Completed);
        let usage = run.usage.unwrap();
        assert_eq!((usage.input_tokens, usage.output_tokens), (1000, 20));
        let mut other = ContinueParser::resuming("528b39dc", SESSION);
        other.session(SESSION);
        other.line(r#"{"response":"Done."}"#);
        let run = other.finish(Some(0), "");
        assert_eq!(run.status, CodingStatus::Error);
    }

    #[test]
    fn a_failed_run_or_a_torn_file_is_no_pass() {
        let mut parser = ContinueParser::new();
        assert!(parser.session(&SESSION[..200]).is_empty());
        let run = parser.finish(Some(1), "Error: 400 scripted failure");
        assert_eq!(run.status, CodingStatus::Error);
        assert!(run.error.unwrap().message.contains("cn exited with code 1"));
        // A zero exit without the final answer is no completion either.
        let silent = ContinueParser::new().finish(Some(0), "");
        assert_eq!(silent.status, CodingStatus::Error);
    }
}
