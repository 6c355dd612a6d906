//! opencode: `opencode run --format json PROMPT`.
//!
//! One JSON object per line, each with `sessionID` (clis.md §4): `step_start`, `text`,
//! `reasoning`, `tool_use` (call and result in one event, emitted when the tool settles),
//! `step_finish` (one per model call, with that call's `tokens` and `cost`) and `error`. There is
//! no result event: the run ends on a `step_finish` with `reason:"stop"`, and usage and cost are
//! the sums over all steps.

use super::builtin::{BuiltinCli, Doc, Facts, Prompt, SESSION, STREAM};
use super::cli::CliDialect;
use super::config::{HarnessConfig, Package, Registry, TurnLimit};
use super::invocation::{DUMMY_API_KEY, Invocation, RunPaths, push, set_env};
use serde_json::{Value, json};

use super::{
    ParsedRun, StreamParser, classify_message, exit_failure, http_error_code, json_line,
    push_unique, str_field, system, u64_field, unknown,
};
use crate::agent::{CodingError, CodingStatus, ErrorCode, StreamEvent, Usage};

const FACTS: Facts = Facts {
    program: "opencode",
    description: "opencode, run headless (opencode run --format json).",
    doc: Doc {
        name: "opencode",
        program_note: "",
        resume_note: "",
        turns: "",
        modes_note: " (edit, bash, webfetch)",
        cost: "its per-step cost; estimated against an endpoint",
    },
    package: Package {
        registry: Registry::Npm,
        name: "opencode-ai",
        version: "1.18.33",
    },
    key_env: "OPENAI_API_KEY",
    no_resume: None,
    permission_modes: &["allow", "ask", "deny"],
    turn_limit: TurnLimit::Enforced,
    appends_system_prompt: true,
    reserved_flags: &[
        ("--format", STREAM),
        ("--session", SESSION),
        ("-s", SESSION),
        ("--continue", SESSION),
        ("-c", SESSION),
        ("-m", "use `model:`"),
        ("--model", "use `model:`"),
    ],
    prompt: Prompt::AfterDashes,
};

/// Tools whose completed call wrote the file named by `state.input.filePath`.
const WRITE_TOOLS: [&str; 4] = ["write", "edit", "multiedit", "patch"];

/// A [`StreamParser`] for opencode's `run --format json` stdout; one `step_finish` per model call.
#[derive(Debug, Default)]
pub struct OpencodeParser {
    session_id: Option<String>,
    usage: Option<Usage>,
    modified_files: Vec<String>,
    last_text: Option<String>,
    stopped: bool,
    error: Option<CodingError>,
}

impl OpencodeParser {
    /// A parser that has seen no line yet.
    pub fn new() -> Self {
        Self::default()
    }

    fn tool_use(&mut self, value: &Value) -> Vec<StreamEvent> {
        let Some(part) = value.get("part") else {
            return vec![unknown(value.clone())];
        };
        let id = str_field(part, "callID").map(str::to_owned);
        let name = str_field(part, "tool").unwrap_or_default().to_owned();
        let state = part.get("state").cloned().unwrap_or(Value::Null);
        let args = state.get("input").cloned().unwrap_or(Value::Null);
        let status = str_field(&state, "status").unwrap_or_default();
        let is_error = status == "error";
        if status == "completed"
            && WRITE_TOOLS.contains(&name.as_str())
            && let Some(path) = str_field(&args, "filePath")
        {
            push_unique(&mut self.modified_files, path);
        }
        let result = state
            .get("output")
            .or_else(|| state.get("error"))
            .cloned()
            .unwrap_or(Value::Null);
        vec![
            StreamEvent::ToolCall {
                id: id.clone(),
                name: name.clone(),
                args,
            },
            StreamEvent::ToolResult {
                id,
                name: Some(name),
                result,
                is_error,
            },
        ]
    }

    fn step_finish(&mut self, value: &Value) -> Vec<StreamEvent> {
        let Some(part) = value.get("part") else {
            return vec![unknown(value.clone())];
        };
        let tokens = part.get("tokens").cloned().unwrap_or(Value::Null);
        let usage = self.usage.get_or_insert_with(Usage::default);
        usage.input_tokens += u64_field(&tokens, "input");
        usage.output_tokens += u64_field(&tokens, "output");
        usage.cache_read_tokens += tokens
            .pointer("/cache/read")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        usage.cache_write_tokens += tokens
            .pointer("/cache/write")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        usage.model_calls += 1;
        if let Some(cost) = part.get("cost").and_then(Value::as_f64) {
            usage.cost_usd = Some(usage.cost_usd.unwrap_or(0.0) + cost);
        }
        let mut events = vec![StreamEvent::Usage {
            usage: usage.clone(),
        }];
        if str_field(part, "reason") == Some("stop") {
            self.stopped = true;
            events.push(StreamEvent::Result {
                status: CodingStatus::Completed,
                text: self.last_text.clone(),
            });
        }
        events
    }

    fn error_line(&mut self, value: &Value) -> Vec<StreamEvent> {
        let error = value.get("error").cloned().unwrap_or(Value::Null);
        let name = str_field(&error, "name").unwrap_or("error");
        let data = error.get("data").cloned().unwrap_or(Value::Null);
        let message = str_field(&data, "message")
            .or_else(|| str_field(&error, "message"))
            .unwrap_or(name)
            .to_owned();
        let mut coding = match data.get("statusCode").and_then(Value::as_u64) {
            Some(status) => CodingError::new(http_error_code(status), format!("{name}: {message}")),
            None => CodingError::new(
                classify_message(&message, ErrorCode::SdkError),
                format!("{name}: {message}"),
            ),
        };
        if coding.code == ErrorCode::RateLimited {
            coding.retry_after = data
                .get("responseHeaders")
                .and_then(Value::as_object)
                .and_then(|headers| {
                    headers
                        .iter()
                        .find(|(k, _)| k.eq_ignore_ascii_case("retry-after"))
                })
                .and_then(|(_, v)| v.as_str())
                .and_then(|v| v.trim().parse::<f64>().ok());
        }
        let event = system("error", coding.message.clone(), Some(value.clone()));
        self.error = Some(coding);
        vec![
            event,
            StreamEvent::Result {
                status: CodingStatus::Error,
                text: None,
            },
        ]
    }
}

impl StreamParser for OpencodeParser {
    fn line(&mut self, line: &str) -> Vec<StreamEvent> {
        let value = match json_line(line) {
            Ok(value) => value,
            Err(events) => return events,
        };
        if let Some(id) = str_field(&value, "sessionID") {
            self.session_id = Some(id.to_owned());
        }
        let part_text = |value: &Value| {
            value
                .pointer("/part/text")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        };
        match str_field(&value, "type") {
            Some("step_start") => vec![system("step_start", "step started", None)],
            Some("text") => {
                let text = part_text(&value);
                self.last_text = Some(text.clone());
                vec![StreamEvent::Assistant { text }]
            }
            Some("reasoning") => vec![StreamEvent::Thinking {
                text: part_text(&value),
            }],
            Some("tool_use") => self.tool_use(&value),
            Some("step_finish") => self.step_finish(&value),
            Some("error") => self.error_line(&value),
            Some("permission_denied") => vec![system(
                "permission_denied",
                str_field(&value, "permission").unwrap_or("permission denied"),
                Some(value.clone()),
            )],
            _ => vec![unknown(value)],
        }
    }

    fn finish(self, exit_code: Option<i32>, stderr_tail: &str) -> ParsedRun {
        let run = if let Some(error) = self.error {
            ParsedRun::failed(error)
        } else if self.stopped && exit_code.is_none_or(|c| c == 0) {
            ParsedRun {
                text: self.last_text,
                ..ParsedRun::completed()
            }
        } else {
            ParsedRun::failed(exit_failure("opencode", exit_code, stderr_tail))
        };
        run.with_stream(self.usage, self.session_id, self.modified_files)
    }
}

/// opencode prices from the config deltabench writes (zero), so its cost is estimated instead.
pub struct Adapter;

impl super::adapter::CliAdapter for Adapter {
    fn begin(&self, _: &super::adapter::RunStart<'_>) -> Box<dyn super::adapter::CliRun> {
        super::adapter::Plain::locally_priced(OpencodeParser::new())
    }

    /// Its plugin SDK, installed from npm into its config folder on every start (~63 MB).
    fn bundled(&self) -> &'static [&'static str] {
        &[".config/opencode/node_modules"]
    }
}

impl BuiltinCli for Adapter {
    fn facts(&self) -> &'static Facts {
        &FACTS
    }

    fn invoke(&self, config: &HarnessConfig, run: &RunPaths, inv: &mut Invocation) {
        let permission = config.permission_mode_of(self).unwrap_or("allow");
        let mut file = json!({
            "$schema": "https://opencode.ai/config.json",
            "autoupdate": false,
            "share": "disabled",
            "permission": {"edit": permission, "bash": permission, "webfetch": permission},
        });
        let model = match (run.endpoint, &config.model) {
            (Some(url), model) => {
                let id = model.clone().unwrap_or_else(|| "default".into());
                // A custom endpoint is one provider, named deltabench, serving the configured model.
                file["provider"] = json!({"deltabench": {
                    "npm": "@ai-sdk/openai-compatible",
                    "name": "deltabench endpoint",
                    "options": {"baseURL": format!("{url}/v1"), "apiKey": run.api_key.unwrap_or(DUMMY_API_KEY)},
                    "models": {id.clone(): {"name": id, "tool_call": true, "limit": {"context": 200000, "output": 8192}}},
                }});
                Some(format!("deltabench/{id}"))
            }
            (None, model) => model.clone(),
        };
        if let Some(model) = &model {
            file["model"] = json!(model);
            file["small_model"] = json!(model);
        }
        if let Some(prompt) = &config.append_system_prompt {
            let path = run.home.join(".config/opencode/deltabench-instructions.md");
            file["instructions"] = json!([path.display().to_string()]);
            inv.files.push((path, prompt.clone()));
        }
        inv.files.push((
            run.home.join(".config/opencode/opencode.json"),
            serde_json::to_string_pretty(&file).expect("config serializes"),
        ));
        if run.endpoint.is_none()
            && let Some(key) = run.api_key
        {
            set_env(&mut inv.env, "OPENAI_API_KEY", key);
        }
        for key in [
            "OPENCODE_DISABLE_AUTOUPDATE",
            "OPENCODE_DISABLE_MODELS_FETCH",
            "OPENCODE_DISABLE_LSP_DOWNLOAD",
            "OPENCODE_DISABLE_SHARE",
            "OPENCODE_DISABLE_DEFAULT_PLUGINS",
        ] {
            set_env(&mut inv.env, key, "1");
        }
        // The stored model id is bare for a custom endpoint; price it by what the user named.
        inv.model = config.model.clone();
        push(&mut inv.args, &["run", "--pure", "--format", "json"]);
        if let Some(id) = run.resume {
            push(&mut inv.args, &["--session", id]);
        }
    }

    fn gateway_dialect(&self, _config: &HarnessConfig) -> Option<CliDialect> {
        // Its `provider/model` picks one of many providers.
        None
    }

    fn gateway_bypass(&self) -> &'static str {
        "opencode without `endpoint:`"
    }

    // Its own providers each read their own variable: nothing to check for them.
    fn needs_key(&self, config: &HarnessConfig) -> bool {
        config.endpoint.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::harness::HarnessKind;
    use crate::agent::harness::invocation::invocation;
    use crate::agent::harness::invocation::tests::{file, paths};
    use crate::agent::harness::tests::*;

    const BASIC: &str = fixture!("opencode-basic.jsonl");
    const THINKING: &str = fixture!("opencode-thinking.jsonl");
    const API_ERROR: &str = fixture!("opencode-api-error.jsonl");

    fn run(text: &str, exit: i32) -> (Vec<StreamEvent>, ParsedRun) {
        crate::agent::harness::tests::parse(OpencodeParser::new(), text, exit)
    }

    fn assert_usage(usage: Option<Usage>, input: u64, output: u64, calls: u64, cost: f64) {
        let usage = usage.expect("usage");
        assert_eq!(
            (usage.input_tokens, usage.output_tokens, usage.model_calls),
            (input, output, calls)
        );
        assert_eq!((usage.cache_read_tokens, usage.cache_write_tokens), (0, 0));
        let got = usage.cost_usd.expect("cost");
        // A sum of the per-step costs, so equal up to float rounding.
        assert!((got - cost).abs() < 1e-12, "{got} != {cost}");
    }

    #[test]
    fn opencode_basic_sums_the_steps() {
        let (events, run) = run(BASIC, 0);
        assert_eq!(
            kinds(&events),
            [
                "system",
                "assistant",
                "tool_call",
                "tool_result",
                "usage",
                "system",
                "assistant",
                "tool_call",
                "tool_result",
                "usage",
                "system",
                "assistant",
                "usage",
                "result"
            ]
        );
        assert_call_then_result(&events, "write");
        assert_call_then_result(&events, "bash");
        assert_eq!(run.status, CodingStatus::Completed);
        assert_eq!(run.error, None);
        // 1000+1100+1200 in, 20+21+22 out, $0.0033 + $0.003615 + $0.00393.
        assert_usage(run.usage, 3300, 63, 3, 0.010845);
        assert_eq!(
            run.session_id.as_deref(),
            Some("ses_dc9c26e5fffej1POM70YnazBdU")
        );
        assert_eq!(
            run.text.as_deref(),
            Some("Done: I created hello.txt and checked its contents.")
        );
        assert_eq!(run.modified_files, ["<lab>/ws/opencode-basic/hello.txt"]);
    }

    #[test]
    fn opencode_thinking() {
        let (events, run) = run(THINKING, 0);
        assert_eq!(kinds(&events)[1], "thinking");
        assert_call_then_result(&events, "write");
        assert_eq!(run.status, CodingStatus::Completed);
        assert_usage(run.usage, 2100, 41, 2, 0.006915);
        assert_eq!(
            run.session_id.as_deref(),
            Some("ses_dc9c23f54ffenUumYo5VlY9RRb")
        );
    }

    #[test]
    fn opencode_api_error() {
        let (events, run) = run(API_ERROR, 1);
        assert_eq!(kinds(&events), ["system", "result"]);
        assert_eq!(run.status, CodingStatus::Error);
        let error = run.error.expect("error");
        assert_eq!(error.code, ErrorCode::SdkError);
        assert_eq!(error.message, "APIError: scripted failure");
        assert_eq!(run.usage, None);
        assert_eq!(
            run.session_id.as_deref(),
            Some("ses_dc9c227c2ffe5hEH5GErzE7tUK")
        );
    }

    #[test]
    fn opencode_429_is_rate_limited_with_retry_after() {
        let stream = API_ERROR
            .replace("\"statusCode\":400", "\"statusCode\":429")
            .replace(
                "\"content-length\"",
                "\"retry-after\":\"7\",\"content-length\"",
            );
        let (_, run) = run(&stream, 1);
        let error = run.error.expect("error");
        assert_eq!(error.code, ErrorCode::RateLimited);
        assert_eq!(error.retry_after, Some(7.0));
    }

    #[test]
    fn opencode_without_a_stop_step_is_an_error() {
        let cut: String = BASIC.lines().take(4).collect::<Vec<_>>().join("\n");
        let (_, run) = run(&cut, 0);
        assert_eq!(run.status, CodingStatus::Error);
        assert_eq!(run.error.expect("error").code, ErrorCode::Unknown);
    }

    #[test]
    fn opencode_garbage_and_truncated_lines_are_unknown() {
        let truncated = &BASIC.lines().nth(2).unwrap_or_default()[..100];
        assert_survives_garbage(OpencodeParser::new(), truncated);
    }

    #[test]
    fn opencode_serves_the_model_from_a_deltabench_provider() {
        let config = HarnessConfig {
            model: Some("fake-model".into()),
            ..HarnessConfig::default()
        };
        let inv = invocation(
            HarnessKind::Opencode,
            &config,
            &paths(None, Some("http://127.0.0.1:9")),
        );
        assert_eq!(
            inv.args.join(" "),
            "run --pure --format json -- -fix the bug"
        );
        let file: serde_json::Value = serde_json::from_str(file(&inv, "opencode.json")).unwrap();
        assert_eq!(file["model"], "deltabench/fake-model");
        assert_eq!(
            file["provider"]["deltabench"]["options"]["baseURL"],
            "http://127.0.0.1:9/v1"
        );
        assert_eq!(file["permission"]["bash"], "allow");
        assert_eq!(inv.model.as_deref(), Some("fake-model"));
    }
}
