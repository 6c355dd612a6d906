//! pi (`@mariozechner/pi-coding-agent`): `pi -p --mode json ... -- PROMPT`.
//!
//! One JSON object per line (observed with 0.73.1): a `session` header (the session id), then
//! the agent's lifecycle (`agent_start`, `turn_start`, `message_start`, `message_update` deltas,
//! `message_end`, `tool_execution_*`, `turn_end`, `agent_end`). Each `message_end` carries one
//! whole message: an assistant message with its text, thinking and `toolCall` blocks and that
//! call's `usage` (tokens and cost), or a `toolResult` with `isError`. Deltas and the
//! `tool_execution_*` echoes repeat what the `message_end`s hold, so only the latter are read.
//! A failed model call is an assistant message with `stopReason: "error"` and its
//! `errorMessage` (`429 ...`), after which pi may retry (`auto_retry_start`/`auto_retry_end`);
//! the process exits 0 either way, so the verdict is the last assistant message's.

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
use crate::agent::{CodingError, ErrorCode, StreamEvent, Usage};

const FACTS: Facts = Facts {
    program: "pi",
    description: "pi, run headless (pi -p --mode json).",
    doc: Doc {
        name: "pi",
        program_note: ", npm `@mariozechner/pi-coding-agent`",
        resume_note: "",
        turns: "",
        modes_note: " (its tools always run)",
        cost: "its per-call cost; estimated against an endpoint",
    },
    package: Package {
        registry: Registry::Npm,
        name: "@mariozechner/pi-coding-agent",
        version: "0.73.1",
    },
    key_env: "OPENAI_API_KEY",
    no_resume: None,
    permission_modes: &[],
    turn_limit: TurnLimit::Enforced,
    appends_system_prompt: true,
    reserved_flags: &[
        ("-p", PROMPT),
        ("--print", PROMPT),
        ("--mode", STREAM),
        ("--session", SESSION),
        ("--session-dir", SESSION),
        ("--no-session", SESSION),
        ("--fork", SESSION),
        ("-r", SESSION),
        ("--resume", SESSION),
        ("-c", SESSION),
        ("--continue", SESSION),
        ("--provider", "deltabench points it at the endpoint"),
        ("--api-key", "use `api_key:`"),
        ("--model", "use `model:`"),
        ("--append-system-prompt", "use `append_system_prompt:`"),
    ],
    prompt: Prompt::Spaced,
};

/// Tools whose successful call wrote the file named by their `path` argument.
const WRITE_TOOLS: [&str; 2] = ["write", "edit"];

/// A [`StreamParser`] for pi's `--mode json` stdout.
#[derive(Debug, Default)]
pub struct PiParser {
    session_id: Option<String>,
    usage: Option<Usage>,
    modified_files: Vec<String>,
    last_text: Option<String>,
    /// Tool name and path (write tools) by call id, for their results.
    calls: HashMap<String, (String, Option<String>)>,
    /// Whether an `agent_end` was seen: the run reached its end rather than being cut off.
    ended: bool,
    /// The last assistant message's failure, cleared by a later message that did not fail.
    error: Option<CodingError>,
}

impl PiParser {
    /// A parser that has seen no line yet.
    pub fn new() -> Self {
        Self::default()
    }

    fn message_end(&mut self, value: &Value) -> Vec<StreamEvent> {
        let Some(message) = value.get("message") else {
            return vec![unknown(value.clone())];
        };
        match str_field(message, "role") {
            Some("assistant") => self.assistant(message),
            Some("toolResult") => vec![self.tool_result(message)],
            Some("user") => vec![system("user", text_of(message), None)],
            _ => vec![unknown(value.clone())],
        }
    }

    fn assistant(&mut self, message: &Value) -> Vec<StreamEvent> {
        let mut events = Vec::new();
        for block in message
            .get("content")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            match str_field(block, "type") {
                Some("text") => {
                    let text = str_field(block, "text").unwrap_or_default().to_owned();
                    if !text.is_empty() {
                        self.last_text = Some(text.clone());
                        events.push(StreamEvent::Assistant { text });
                    }
                }
                Some("thinking") => events.push(StreamEvent::Thinking {
                    text: str_field(block, "thinking").unwrap_or_default().to_owned(),
                }),
                Some("toolCall") => {
                    let id = str_field(block, "id").map(str::to_owned);
                    let name = str_field(block, "name").unwrap_or_default().to_owned();
                    let args = block.get("arguments").cloned().unwrap_or(Value::Null);
                    if let Some(id) = &id {
                        let path = WRITE_TOOLS
                            .contains(&name.as_str())
                            .then(|| str_field(&args, "path").map(str::to_owned))
                            .flatten();
                        self.calls.insert(id.clone(), (name.clone(), path));
                    }
                    events.push(StreamEvent::ToolCall { id, name, args });
                }
                _ => events.push(unknown(block.clone())),
            }
        }
        match str_field(message, "stopReason") {
            Some("error" | "aborted") => {
                let text = str_field(message, "errorMessage").unwrap_or("model call failed");
                let error = api_error(text);
                events.push(system("error", error.message.clone(), None));
                self.error = Some(error);
            }
            _ => self.error = None,
        }
        if let Some(reported) = message.get("usage") {
            let usage = self.usage.get_or_insert_with(Usage::default);
            usage.input_tokens += u64_field(reported, "input");
            usage.output_tokens += u64_field(reported, "output");
            usage.cache_read_tokens += u64_field(reported, "cacheRead");
            usage.cache_write_tokens += u64_field(reported, "cacheWrite");
            usage.model_calls += 1;
            if let Some(cost) = reported.pointer("/cost/total").and_then(Value::as_f64) {
                usage.cost_usd = Some(usage.cost_usd.unwrap_or(0.0) + cost);
            }
            events.push(StreamEvent::Usage {
                usage: usage.clone(),
            });
        }
        events
    }

    fn tool_result(&mut self, message: &Value) -> StreamEvent {
        let id = str_field(message, "toolCallId").map(str::to_owned);
        let is_error = message
            .get("isError")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let call = id.as_ref().and_then(|id| self.calls.get(id));
        if !is_error && let Some((_, Some(path))) = call {
            push_unique(&mut self.modified_files, &path.clone());
        }
        let name = str_field(message, "toolName")
            .map(str::to_owned)
            .or_else(|| call.map(|(name, _)| name.clone()));
        StreamEvent::ToolResult {
            id,
            name,
            result: json!(text_of(message)),
            is_error,
        }
    }
}

/// The text blocks of a message's content, joined.
fn text_of(message: &Value) -> String {
    match message.get("content") {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| str_field(p, "text"))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// A failed model call, from pi's `errorMessage` (`"429 slow down"`: the HTTP status first,
/// when there was one).
fn api_error(text: &str) -> CodingError {
    let status = text
        .split_whitespace()
        .next()
        .filter(|word| word.len() == 3)
        .and_then(|word| word.parse::<u64>().ok())
        .filter(|status| (400..600).contains(status));
    let code = match status {
        Some(status) => http_error_code(status),
        None => classify_message(text, ErrorCode::SdkError),
    };
    CodingError::new(code, format!("pi: {text}"))
}

impl StreamParser for PiParser {
    fn line(&mut self, line: &str) -> Vec<StreamEvent> {
        let value = match json_line(line) {
            Ok(value) => value,
            Err(events) => return events,
        };
        match str_field(&value, "type") {
            Some("session") => match str_field(&value, "id") {
                Some(id) => {
                    self.session_id = Some(id.to_owned());
                    vec![system("init", format!("session {id}"), Some(value.clone()))]
                }
                None => vec![unknown(value)],
            },
            Some("message_end") => self.message_end(&value),
            Some("agent_end") => {
                self.ended = true;
                Vec::new()
            }
            // Deltas and echoes of what the `message_end`s hold.
            Some(
                "agent_start"
                | "turn_start"
                | "turn_end"
                | "message_start"
                | "message_update"
                | "tool_execution_start"
                | "tool_execution_update"
                | "tool_execution_end"
                | "queue_update",
            ) => Vec::new(),
            Some("auto_retry_start") => vec![system(
                "retry",
                str_field(&value, "errorMessage").unwrap_or("retrying"),
                Some(value.clone()),
            )],
            Some(kind @ ("auto_retry_end" | "compaction_start" | "compaction_end")) => {
                vec![system(kind, kind.replace('_', " "), Some(value.clone()))]
            }
            _ => vec![unknown(value)],
        }
    }

    fn finish(self, exit_code: Option<i32>, stderr_tail: &str) -> ParsedRun {
        let run = if let Some(error) = self.error {
            ParsedRun::failed(error)
        } else if self.ended && exit_code == Some(0) {
            ParsedRun {
                text: self.last_text,
                ..ParsedRun::completed()
            }
        } else {
            ParsedRun::failed(exit_failure("pi", exit_code, stderr_tail))
        };
        run.with_stream(self.usage, self.session_id, self.modified_files)
    }
}

/// pi prices from the model entry deltabench writes (zero), so its cost is estimated instead.
pub struct Adapter;

impl super::adapter::CliAdapter for Adapter {
    fn begin(&self, _: &super::adapter::RunStart<'_>) -> Box<dyn super::adapter::CliRun> {
        super::adapter::Plain::locally_priced(PiParser::new())
    }
}

impl BuiltinCli for Adapter {
    fn facts(&self) -> &'static Facts {
        &FACTS
    }

    fn invoke(&self, config: &HarnessConfig, run: &RunPaths, inv: &mut Invocation) {
        let agent_dir = run.home.join(".pi/agent");
        // Its agent dir holds the settings and the models; sessions go where a resume finds them.
        set_env(
            &mut inv.env,
            "PI_CODING_AGENT_DIR",
            &agent_dir.display().to_string(),
        );
        // No update check, package check or install ping: the sandbox has no network for them.
        set_env(&mut inv.env, "PI_OFFLINE", "1");
        set_env(&mut inv.env, "PI_SKIP_VERSION_CHECK", "1");
        let settings = json!({"enableInstallTelemetry": false, "quietStartup": true});
        inv.files.push((
            agent_dir.join("settings.json"),
            serde_json::to_string_pretty(&settings).expect("settings serialize"),
        ));
        if let Some(key) = run.api_key {
            set_env(&mut inv.env, "OPENAI_API_KEY", key);
        }
        let args = &mut inv.args;
        push(
            args,
            &["-p", "--mode", "json", "--offline", "--session-dir"],
        );
        args.push(run.home.join(".pi/sessions").display().to_string());
        match run.endpoint {
            // One OpenAI-compatible provider with the model: its key is read from OPENAI_API_KEY.
            // No `cost` in the entry, so pi prices at zero and deltabench estimates.
            Some(url) => {
                let model = config.model.clone().unwrap_or_else(|| "gpt-4.1".into());
                let models = json!({"providers": {"deltabench": {
                    "baseUrl": format!("{url}/v1"),
                    "api": "openai-completions",
                    "apiKey": "OPENAI_API_KEY",
                    "compat": {"supportsDeveloperRole": false, "supportsReasoningEffort": false},
                    "models": [{"id": model}],
                }}});
                inv.files.push((
                    agent_dir.join("models.json"),
                    serde_json::to_string_pretty(&models).expect("models serialize"),
                ));
                push(args, &["--provider", "deltabench", "--model", &model]);
            }
            None => {
                if let Some(model) = &config.model {
                    push(args, &["--model", model]);
                }
            }
        }
        if let Some(prompt) = &config.append_system_prompt {
            push(args, &["--append-system-prompt", prompt]);
        }
        if let Some(id) = run.resume {
            push(args, &["--session", id]);
        }
    }

    fn gateway_dialect(&self, config: &HarnessConfig) -> Option<CliDialect> {
        config.model.as_ref().map(|_| CliDialect::Openai)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::CodingStatus;
    use crate::agent::harness::HarnessKind;
    use crate::agent::harness::invocation::tests::{env, file, paths};
    use crate::agent::harness::invocation::{DUMMY_API_KEY, invocation};
    use crate::agent::harness::tests::{assert_call_then_result, assert_survives_garbage, feed};

    /// Lines as pi 0.73.1 printed them against the scripted endpoint (trimmed; deltas left out).
    const BASIC: &str = r#"{"type":"session","version":3,"id":"01a2432d-eb51-73f0","timestamp":"2026-12-04T22:30:12.562Z","cwd":"/ws"}
{"type":"agent_start"}
{"type":"turn_start"}
{"type":"message_end","message":{"role":"user","content":[{"type":"text","text":"Create hello.txt"}]}}
{"type":"message_start","message":{"role":"assistant","content":[],"usage":{"input":0,"output":0}}}
{"type":"message_update","message":{},"assistantMessageEvent":{"type":"text_delta","delta":"I'll"}}
{"type":"message_end","message":{"role":"assistant","content":[{"type":"text","text":"I'll create hello.txt."},{"type":"toolCall","id":"call_1","name":"write","arguments":{"path":"/ws/hello.txt","content":"hi\n"}}],"usage":{"input":1000,"output":20,"cacheRead":0,"cacheWrite":0,"totalTokens":1020,"cost":{"total":0}},"stopReason":"toolUse"}}
{"type":"tool_execution_start","toolCallId":"call_1","toolName":"write","args":{}}
{"type":"tool_execution_end","toolCallId":"call_1","toolName":"write","result":{},"isError":false}
{"type":"message_end","message":{"role":"toolResult","toolCallId":"call_1","toolName":"write","content":[{"type":"text","text":"Successfully wrote 3 bytes"}],"isError":false}}
{"type":"message_end","message":{"role":"assistant","content":[{"type":"toolCall","id":"call_2","name":"edit","arguments":{"path":"/ws/nope.txt","edits":[]}}],"usage":{"input":1000,"output":20,"cacheRead":500,"cacheWrite":0,"cost":{"total":0.001}},"stopReason":"toolUse"}}
{"type":"message_end","message":{"role":"toolResult","toolCallId":"call_2","toolName":"edit","content":[{"type":"text","text":"File not found"}],"isError":true}}
{"type":"message_end","message":{"role":"assistant","content":[{"type":"text","text":"Done."}],"usage":{"input":1000,"output":20,"cacheRead":0,"cacheWrite":0,"cost":{"total":0}},"stopReason":"stop"}}
{"type":"turn_end","message":{},"toolResults":[]}
{"type":"agent_end","messages":[]}"#;

    #[test]
    fn reads_the_message_ends_with_their_usage() {
        let mut parser = PiParser::new();
        let events = feed(&mut parser, BASIC);
        assert_call_then_result(&events, "write");
        let usages = events
            .iter()
            .filter(|e| matches!(e, StreamEvent::Usage { .. }))
            .count();
        assert_eq!(usages, 3);
        let run = parser
            .finish(Some(0), "")
            .relative_to(std::path::Path::new("/ws"));
        assert_eq!(run.status, CodingStatus::Completed);
        assert_eq!(run.session_id.as_deref(), Some("01a2432d-eb51-73f0"));
        // The failed edit wrote nothing.
        assert_eq!(run.modified_files, ["hello.txt"]);
        let usage = run.usage.unwrap();
        assert_eq!(
            (
                usage.input_tokens,
                usage.output_tokens,
                usage.cache_read_tokens,
                usage.model_calls
            ),
            (3000, 60, 500, 3)
        );
        assert_eq!(usage.cost_usd, Some(0.001));
        assert_eq!(run.text.as_deref(), Some("Done."));
    }

    #[test]
    fn a_failed_last_call_is_an_error_though_pi_exits_0() {
        let failed = r#"{"type":"session","id":"s1"}
{"type":"message_end","message":{"role":"assistant","content":[],"usage":{"input":0,"output":0},"stopReason":"error","errorMessage":"429 slow down"}}
{"type":"auto_retry_start","attempt":1,"maxAttempts":3,"delayMs":2000,"errorMessage":"429 slow down"}
{"type":"message_end","message":{"role":"assistant","content":[],"usage":{"input":0,"output":0},"stopReason":"error","errorMessage":"429 slow down"}}
{"type":"agent_end","messages":[]}
{"type":"auto_retry_end","success":false,"attempt":3,"finalError":"429 slow down"}"#;
        let mut parser = PiParser::new();
        feed(&mut parser, failed);
        let run = parser.finish(Some(0), "");
        assert_eq!(run.status, CodingStatus::Error);
        let error = run.error.unwrap();
        assert_eq!(error.code, ErrorCode::RateLimited);
        assert!(error.message.contains("429 slow down"), "{}", error.message);
        // A retry that succeeds clears the failure.
        let mut parser = PiParser::new();
        let recovered = failed.lines().take(3).collect::<Vec<_>>().join("\n")
            + "\n"
            + BASIC.lines().nth(12).unwrap()
            + "\n{\"type\":\"agent_end\"}";
        feed(&mut parser, &recovered);
        assert_eq!(parser.finish(Some(0), "").status, CodingStatus::Completed);
        assert_eq!(api_error("400 scripted failure").code, ErrorCode::SdkError);
    }

    #[test]
    fn a_run_cut_off_before_its_end_is_no_completion() {
        let mut parser = PiParser::new();
        feed(
            &mut parser,
            &BASIC.lines().take(7).collect::<Vec<_>>().join("\n"),
        );
        let run = parser.finish(Some(0), "");
        assert_eq!(run.status, CodingStatus::Error);
        let killed = PiParser::new().finish(None, "");
        assert!(killed.error.unwrap().message.contains("pi was killed"));
        assert_survives_garbage(PiParser::new(), "{\"type\":\"message_e");
    }

    #[test]
    fn pi_gets_a_provider_for_the_endpoint_and_a_session_dir_in_its_home() {
        let config = HarnessConfig {
            model: Some("fake-model".into()),
            append_system_prompt: Some("Be brief.".into()),
            args: vec!["--thinking".into(), "off".into()],
            ..HarnessConfig::default()
        };
        let local = "http://127.0.0.1:9";
        let inv = invocation(HarnessKind::Pi, &config, &paths(Some("s-1"), Some(local)));
        assert_eq!(
            inv.args.join(" "),
            "-p --mode json --offline --session-dir /t/home/.pi/sessions --provider deltabench \
             --model fake-model --append-system-prompt Be brief. --session s-1 --thinking off  \
             -fix the bug"
        );
        // The task is one argument, its leading `-` kept from being read as an option.
        assert_eq!(inv.args.last().unwrap(), " -fix the bug");
        let models: serde_json::Value =
            serde_json::from_str(file(&inv, ".pi/agent/models.json")).unwrap();
        let provider = &models["providers"]["deltabench"];
        assert_eq!(provider["baseUrl"], "http://127.0.0.1:9/v1");
        assert_eq!(provider["apiKey"], "OPENAI_API_KEY");
        assert_eq!(provider["models"][0]["id"], "fake-model");
        assert_eq!(env(&inv, "OPENAI_API_KEY"), Some(DUMMY_API_KEY));
        assert_eq!(env(&inv, "PI_CODING_AGENT_DIR"), Some("/t/home/.pi/agent"));
        assert_eq!(env(&inv, "PI_OFFLINE"), Some("1"));
        // Without an endpoint: pi's own providers, no models file.
        let own = invocation(HarnessKind::Pi, &config, &paths(None, None));
        assert!(own.args.join(" ").contains("--model fake-model"));
        assert!(!own.args.contains(&"--provider".to_owned()));
        assert!(!own.files.iter().any(|(p, _)| p.ends_with("models.json")));
    }

    #[test]
    fn its_session_flags_are_reserved_with_a_value_too() {
        assert_eq!(
            HarnessKind::Pi.reserved_flag("--session-dir=/tmp"),
            Some(("--session-dir", "resume through CodingTask.session_id"))
        );
        assert_eq!(HarnessKind::Pi.reserved_flag("--thinking"), None);
    }
}
