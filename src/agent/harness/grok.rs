//! Grok CLI: `grok --prompt=PROMPT [--max-tool-rounds N]`.
//!
//! Headless it prints the conversation once the run is over (observed with 0.0.34): one JSON
//! object per line, in Chat Completions' message shape: the `user` prompt, each `assistant`
//! message with its `tool_calls` (arguments as a JSON string), each `tool` result by
//! `tool_call_id`, and a last `assistant` message. It reports no usage (the gateway's count is
//! the only one), keeps no session, and exits 0 on an API error, whose last message then reads
//! `Sorry, I encountered an error: ...` (and drops the messages before it); at
//! `--max-tool-rounds` the last message is `Maximum tool execution rounds reached. ...`.

use super::builtin::{BuiltinCli, Doc, Facts, NO_SESSION, PROMPT, Prompt};
use super::cli::CliDialect;
use super::config::{HarnessConfig, Package, Registry, TurnLimit};
use super::invocation::{Invocation, RunPaths, push, set_env};
use std::collections::HashMap;

use serde_json::Value;

use super::{
    ParsedRun, StreamParser, classify_message, exit_failure, http_error_code, json_line,
    push_unique, str_field, system, unknown,
};
use crate::agent::{CodingError, ErrorCode, StreamEvent};

const FACTS: Facts = Facts {
    program: "grok",
    description: "Grok CLI, run headless (grok --prompt).",
    doc: Doc {
        name: "Grok CLI",
        program_note: "",
        resume_note: " (it keeps no session)",
        turns: "`--max-tool-rounds`",
        modes_note: " (headless approves everything)",
        cost: "estimated (it reports no usage: the gateway's count only)",
    },
    package: Package {
        registry: Registry::Npm,
        name: "@vibe-kit/grok-cli",
        version: "0.0.34",
    },
    key_env: "GROK_API_KEY",
    no_resume: Some(NO_SESSION),
    permission_modes: &[],
    turn_limit: TurnLimit::Native,
    appends_system_prompt: true,
    reserved_flags: &[
        ("-p", PROMPT),
        ("--prompt", PROMPT),
        ("-m", "use `model:`"),
        ("--model", "use `model:`"),
        ("-u", "deltabench points it at the endpoint"),
        ("--base-url", "deltabench points it at the endpoint"),
        ("-k", "use `api_key:`"),
        ("--api-key", "use `api_key:`"),
        ("--max-tool-rounds", "use `max_turns:`"),
        ("-d", "it runs in the trial's workspace"),
        ("--directory", "it runs in the trial's workspace"),
    ],
    prompt: Prompt::InFlag,
};

/// The last message of a run that failed on an API or tool-loop error.
const ERROR_PREFIX: &str = "Sorry, I encountered an error: ";
/// The last message of a run stopped by `--max-tool-rounds`.
const MAX_ROUNDS: &str = "Maximum tool execution rounds reached.";

/// A [`StreamParser`] for Grok CLI's stdout: the conversation as Chat Completions messages, printed at the end.
#[derive(Debug, Default)]
pub struct GrokParser {
    /// Tool calls by id: name and arguments.
    calls: HashMap<String, (String, Value)>,
    modified_files: Vec<String>,
    /// The last assistant message without tool calls.
    last_text: Option<String>,
}

impl GrokParser {
    /// A parser that has seen no line yet.
    pub fn new() -> Self {
        Self::default()
    }

    fn assistant(&mut self, value: &Value) -> Vec<StreamEvent> {
        let text = str_field(value, "content").unwrap_or_default().to_owned();
        let calls = value
            .get("tool_calls")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let mut events = Vec::new();
        // "Using tools to help you..." stands in for an empty message with calls.
        if !text.is_empty() && (calls.is_empty() || text != "Using tools to help you...") {
            events.push(StreamEvent::Assistant { text: text.clone() });
        }
        if calls.is_empty() {
            self.last_text = Some(text);
        }
        for call in calls {
            let id = str_field(&call, "id").unwrap_or_default().to_owned();
            let name = call
                .pointer("/function/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let args = call
                .pointer("/function/arguments")
                .and_then(Value::as_str)
                .and_then(|a| serde_json::from_str(a).ok())
                .unwrap_or(Value::Null);
            self.calls.insert(id.clone(), (name.clone(), args.clone()));
            events.push(StreamEvent::ToolCall {
                id: Some(id).filter(|id| !id.is_empty()),
                name,
                args,
            });
        }
        events
    }

    fn tool(&mut self, value: &Value) -> Vec<StreamEvent> {
        let id = str_field(value, "tool_call_id")
            .unwrap_or_default()
            .to_owned();
        let content = str_field(value, "content").unwrap_or_default().to_owned();
        let (name, args) = self.calls.get(&id).cloned().unwrap_or_default();
        // Its output has no success flag; a file it created says so.
        if matches!(name.as_str(), "create_file" | "str_replace_editor")
            && let Some(path) = str_field(&args, "path")
            && (content.starts_with("Created ") || content.starts_with("Updated "))
        {
            push_unique(&mut self.modified_files, path);
        }
        vec![StreamEvent::ToolResult {
            id: Some(id).filter(|id| !id.is_empty()),
            name: Some(name).filter(|n| !n.is_empty()),
            result: Value::String(content),
            is_error: false,
        }]
    }
}

impl StreamParser for GrokParser {
    fn line(&mut self, line: &str) -> Vec<StreamEvent> {
        let value = match json_line(line) {
            Ok(value) => value,
            Err(events) => return events,
        };
        match str_field(&value, "role") {
            Some("user") => vec![system(
                "user",
                str_field(&value, "content").unwrap_or_default(),
                None,
            )],
            Some("assistant") => self.assistant(&value),
            Some("tool") => self.tool(&value),
            _ => vec![unknown(value)],
        }
    }

    fn finish(self, exit_code: Option<i32>, stderr_tail: &str) -> ParsedRun {
        let last = self.last_text.clone().unwrap_or_default();
        let run = if let Some(message) = last.strip_prefix(ERROR_PREFIX) {
            ParsedRun::failed(api_error(message))
        } else if last.trim_start().starts_with(MAX_ROUNDS) {
            ParsedRun::max_turns()
        } else if exit_code == Some(0) && self.last_text.is_some() {
            ParsedRun {
                text: self.last_text,
                ..ParsedRun::completed()
            }
        } else if let Some(message) = last.strip_prefix("Error: ") {
            ParsedRun::failed(CodingError::new(
                classify_message(message, ErrorCode::SdkError),
                format!("grok: {message}"),
            ))
        } else {
            ParsedRun::failed(exit_failure("grok", exit_code, stderr_tail))
        };
        run.with_stream(None, None, self.modified_files)
    }
}

/// `Grok API error: 429 ...`: the HTTP status's code, else the message's.
fn api_error(message: &str) -> CodingError {
    let status = message
        .strip_prefix("Grok API error: ")
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|s| s.parse::<u64>().ok());
    let code = match status {
        Some(status) => http_error_code(status),
        None => classify_message(message, ErrorCode::SdkError),
    };
    CodingError::new(code, format!("grok: {message}"))
}

/// The project settings file it writes in its working directory on every start.
const PROJECT_SETTINGS: &str = ".grok/settings.json";
/// What that file holds when the CLI wrote it (0.0.34's default project settings).
const DEFAULT_PROJECT_SETTINGS: &str = "{\n  \"model\": \"grok-code-fast-1\"\n}";

/// Grok CLI creates `.grok/settings.json` in the workspace whenever it starts (with its default
/// model): the harness's file, not the agent's change, so one the run created with exactly
/// that content is removed after it.
pub struct Adapter;

impl super::adapter::CliAdapter for Adapter {
    fn begin(&self, run: &super::adapter::RunStart<'_>) -> Box<dyn super::adapter::CliRun> {
        let settings = run.workspace.join(PROJECT_SETTINGS);
        let existed = std::fs::symlink_metadata(&settings).is_ok();
        Box::new(
            super::adapter::Plain::new(GrokParser::new()).then(move |parsed| {
                let regular = std::fs::symlink_metadata(&settings).is_ok_and(|m| m.is_file());
                if !existed
                    && regular
                    && std::fs::read_to_string(&settings)
                        .is_ok_and(|t| t == DEFAULT_PROJECT_SETTINGS)
                {
                    let _ = std::fs::remove_file(&settings);
                    // The folder too, when nothing else is in it.
                    if let Some(dir) = settings.parent() {
                        let _ = std::fs::remove_dir(dir);
                    }
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
        // Through the environment, not `-u`/`-k`, which it would also save to its settings file.
        if let Some(url) = run.endpoint {
            set_env(&mut inv.env, "GROK_BASE_URL", &format!("{url}/v1"));
        }
        if let Some(key) = run.api_key {
            set_env(&mut inv.env, "GROK_API_KEY", key);
        }
        // Its global instructions file (a workspace's own `.grok/GROK.md` takes precedence).
        if let Some(prompt) = &config.append_system_prompt {
            inv.files
                .push((run.home.join(".grok/GROK.md"), prompt.clone()));
        }
        let args = &mut inv.args;
        // `--prompt=` keeps a task starting with `-` a value.
        args.push(format!("--prompt={}", run.task));
        if let Some(model) = &config.model {
            push(args, &["--model", model]);
        }
        if let Some(turns) = config.max_turns {
            push(args, &["--max-tool-rounds", &turns.to_string()]);
        }
    }

    fn gateway_dialect(&self, _config: &HarnessConfig) -> Option<CliDialect> {
        // Its own provider is xAI's API, which the gateway does not stand in for.
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::CodingStatus;
    use crate::agent::harness::HarnessKind;
    use crate::agent::harness::invocation::tests::{env, file, paths};
    use crate::agent::harness::invocation::{DUMMY_API_KEY, invocation};
    use crate::agent::harness::tests::*;

    const BASIC: &str = fixture!("grok-basic.jsonl");

    fn run(text: &str, exit: i32) -> (Vec<StreamEvent>, ParsedRun) {
        crate::agent::harness::tests::parse(GrokParser::new(), text, exit)
    }

    #[test]
    fn grok_basic_reads_calls_results_and_the_answer() {
        let (events, run) = run(BASIC, 0);
        assert_call_then_result(&events, "create_file");
        assert_call_then_result(&events, "bash");
        assert_eq!(run.status, CodingStatus::Completed);
        assert_eq!(run.text.as_deref(), Some("Done."));
        assert_eq!(run.usage, None);
        assert_eq!(run.modified_files, ["<lab>/ws/grok-basic/hello.txt"]);
        // The placeholder text of a message with calls is not the agent's.
        assert!(!events.iter().any(
            |e| matches!(e, StreamEvent::Assistant { text } if text.starts_with("Using tools"))
        ));
    }

    #[test]
    fn an_api_error_with_exit_zero_is_an_error_with_its_status() {
        let stream = "{\"role\":\"user\",\"content\":\"go\"}\n\
            {\"role\":\"assistant\",\"content\":\"Sorry, I encountered an error: Grok API error: 429 slow down\"}";
        let (_, run) = run(stream, 0);
        assert_eq!(run.status, CodingStatus::Error);
        let error = run.error.expect("error");
        assert_eq!(error.code, ErrorCode::RateLimited);
        assert_eq!(error.message, "grok: Grok API error: 429 slow down");
    }

    #[test]
    fn the_tool_round_limit_is_max_turns() {
        let cut: Vec<&str> = BASIC.lines().take(5).collect();
        let stream = format!(
            "{}\n{{\"role\":\"assistant\",\"content\":\"Maximum tool execution rounds reached. Stopping to prevent infinite loops.\"}}",
            cut.join("\n")
        );
        let (_, run) = run(&stream, 0);
        assert_eq!(run.status, CodingStatus::MaxTurns);
    }

    #[test]
    fn no_final_message_or_a_failed_exit_is_no_pass() {
        assert_eq!(run("", 0).1.status, CodingStatus::Error);
        assert_eq!(run(BASIC, 1).1.status, CodingStatus::Error);
    }

    #[test]
    fn only_the_settings_file_it_writes_itself_is_removed() {
        use super::super::adapter::{CliAdapter, RunStart};
        let dir = tempfile::tempdir().unwrap();
        let start = |workspace| RunStart {
            home: dir.path(),
            workspace,
            resume: None,
            trajectory: None,
        };
        // Written during the run with its default: removed, and its empty folder.
        let ws = dir.path().join("a");
        std::fs::create_dir_all(&ws).unwrap();
        let run = Adapter.begin(&start(&ws));
        std::fs::create_dir_all(ws.join(".grok")).unwrap();
        std::fs::write(ws.join(PROJECT_SETTINGS), DEFAULT_PROJECT_SETTINGS).unwrap();
        let _ = run.finish(Some(0), "");
        assert!(!ws.join(".grok").exists());
        // Other content is the agent's change; so is a file that was there before the run.
        let ws = dir.path().join("b");
        std::fs::create_dir_all(ws.join(".grok")).unwrap();
        let run = Adapter.begin(&start(&ws));
        std::fs::write(ws.join(PROJECT_SETTINGS), "{\"model\": \"mine\"}").unwrap();
        let _ = run.finish(Some(0), "");
        assert!(ws.join(PROJECT_SETTINGS).is_file());
        std::fs::write(ws.join(PROJECT_SETTINGS), DEFAULT_PROJECT_SETTINGS).unwrap();
        let run = Adapter.begin(&start(&ws));
        let _ = run.finish(Some(0), "");
        assert!(ws.join(PROJECT_SETTINGS).is_file());
    }

    #[test]
    fn grok_garbage_and_truncated_lines_are_unknown() {
        let truncated = &BASIC.lines().nth(1).unwrap_or_default()[..40];
        assert_survives_garbage(GrokParser::new(), truncated);
    }

    #[test]
    fn grok_gets_the_endpoint_and_key_from_its_environment() {
        let config = HarnessConfig {
            model: Some("fake-model".into()),
            max_turns: Some(3),
            append_system_prompt: Some("Be brief.".into()),
            ..HarnessConfig::default()
        };
        let inv = invocation(
            HarnessKind::GrokCli,
            &config,
            &paths(None, Some("http://127.0.0.1:9")),
        );
        assert_eq!(
            inv.args.join(" "),
            "--prompt=-fix the bug --model fake-model --max-tool-rounds 3"
        );
        assert_eq!(env(&inv, "GROK_BASE_URL"), Some("http://127.0.0.1:9/v1"));
        assert_eq!(env(&inv, "GROK_API_KEY"), Some(DUMMY_API_KEY));
        assert_eq!(file(&inv, "GROK.md"), "Be brief.");
    }
}
