//! mini-swe-agent (v2): `mini -t TASK -y --exit-immediately -o traj.json`.
//!
//! Its stdout is rich text for humans; the machine-readable output is the trajectory file
//! (clis.md §5), rewritten after every step. Stdout lines are kept as [`StreamEvent::Unknown`];
//! hand the trajectory file's text to [`MiniSweParser::trajectory`] (as often as it changes,
//! only new messages become events). Tokens are the per-call `extra.response.usage` summed,
//! cost is `info.model_stats.instance_cost`, the verdict is `info.exit_status`: `Submitted`,
//! `LimitsExceeded` (exit 0) or an exception name (exit 1). There is no session id.

use super::builtin::{BuiltinCli, Doc, Facts, NO_SESSION, PROMPT, Prompt};
use super::cli::CliDialect;
use super::config::{HarnessConfig, Package, Registry, TurnLimit};
use super::invocation::{
    Invocation, MINI_TRAJECTORY, RunPaths, litellm_dialect, litellm_model, openai_env, push,
    set_env,
};
use serde_json::{Value, json};

use super::{
    ParsedRun, StreamParser, classify_message, exit_failure, str_field, system, u64_field, unknown,
    unknown_text,
};
use crate::agent::{CodingError, ErrorCode, StreamEvent, Usage};

const FACTS: Facts = Facts {
    program: "mini",
    description: "mini-swe-agent, run headless (mini -y).",
    doc: Doc {
        name: "mini-swe-agent",
        program_note: "",
        resume_note: "",
        turns: "`agent.step_limit`",
        modes_note: "",
        cost: "`model_stats.instance_cost`; estimated when 0",
    },
    package: Package {
        registry: Registry::PyPi,
        name: "mini-swe-agent",
        version: "2.4.6",
    },
    key_env: "OPENAI_API_KEY",
    no_resume: Some(NO_SESSION),
    permission_modes: &[],
    turn_limit: TurnLimit::Native,
    appends_system_prompt: false,
    reserved_flags: &[
        ("-t", PROMPT),
        ("--task", PROMPT),
        ("-o", "deltabench reads the trajectory from its own path"),
        (
            "--output",
            "deltabench reads the trajectory from its own path",
        ),
        ("-m", "use `model:`"),
        ("--model", "use `model:`"),
    ],
    prompt: Prompt::InFlag,
};

/// A [`StreamParser`] for mini-swe-agent: stdout stays unknown text, the
/// record comes from its trajectory file ([`MiniSweParser::trajectory`]).
#[derive(Debug, Default)]
pub struct MiniSweParser {
    /// Messages of the trajectory already turned into events.
    seen: usize,
    usage: Usage,
    info: Option<Value>,
    /// The exit message's content (the exception text on failures).
    exit_message: Option<String>,
    last_text: Option<String>,
}

impl MiniSweParser {
    /// A parser that has seen no line yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Reads the trajectory file's current text; returns the events of messages not seen
    /// before. A partly written or malformed file yields one [`StreamEvent::Unknown`] and is
    /// read again next time.
    pub fn trajectory(&mut self, json: &str) -> Vec<StreamEvent> {
        let traj: Value = match serde_json::from_str(json) {
            Ok(traj) => traj,
            Err(_) => {
                let head: String = json.chars().take(200).collect();
                return vec![unknown_text(&head)];
            }
        };
        let Some(messages) = traj.get("messages").and_then(Value::as_array) else {
            return vec![unknown(json!({ "trajectory": "no messages" }))];
        };
        if let Some(info) = traj.get("info") {
            self.info = Some(info.clone());
        }
        let fresh = messages.get(self.seen..).unwrap_or_default().to_vec();
        self.seen = self.seen.max(messages.len());
        fresh.iter().flat_map(|m| self.message(m)).collect()
    }

    fn message(&mut self, message: &Value) -> Vec<StreamEvent> {
        let content = str_field(message, "content").unwrap_or_default().to_owned();
        match str_field(message, "role") {
            Some("system") => vec![system("system_prompt", content, None)],
            Some("user") => vec![system("user", content, None)],
            Some("assistant") => self.assistant(message, content),
            Some("tool") => {
                let extra = message.get("extra").cloned().unwrap_or(Value::Null);
                let returncode = extra.get("returncode").and_then(Value::as_i64);
                let exception = str_field(&extra, "exception_info").unwrap_or_default();
                vec![StreamEvent::ToolResult {
                    id: str_field(message, "tool_call_id").map(str::to_owned),
                    name: Some("bash".to_owned()),
                    result: json!({
                        "returncode": returncode,
                        "output": extra.get("raw_output").cloned().unwrap_or(Value::String(content)),
                        "exception_info": exception,
                    }),
                    is_error: returncode.is_some_and(|c| c != 0) || !exception.is_empty(),
                }]
            }
            Some("exit") => {
                self.exit_message = Some(content.clone());
                let status = message
                    .pointer("/extra/exit_status")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned();
                vec![system(
                    "exit_status",
                    format!("{status} {content}").trim().to_owned(),
                    None,
                )]
            }
            _ => vec![unknown(message.clone())],
        }
    }

    fn assistant(&mut self, message: &Value, content: String) -> Vec<StreamEvent> {
        let mut events = Vec::new();
        if let Some(reasoning) = str_field(message, "reasoning_content").filter(|r| !r.is_empty()) {
            events.push(StreamEvent::Thinking {
                text: reasoning.to_owned(),
            });
        }
        if !content.is_empty() {
            self.last_text = Some(content.clone());
            events.push(StreamEvent::Assistant { text: content });
        }
        for call in message
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let function = call.get("function").cloned().unwrap_or(Value::Null);
            let args = str_field(&function, "arguments")
                .and_then(|a| serde_json::from_str(a).ok())
                .unwrap_or_else(|| function.get("arguments").cloned().unwrap_or(Value::Null));
            events.push(StreamEvent::ToolCall {
                id: str_field(call, "id").map(str::to_owned),
                name: str_field(&function, "name").unwrap_or("bash").to_owned(),
                args,
            });
        }
        if let Some(raw) = message.pointer("/extra/response/usage") {
            let cached = raw
                .pointer("/prompt_tokens_details/cached_tokens")
                .and_then(Value::as_u64)
                .unwrap_or(0);
            self.usage.input_tokens += u64_field(raw, "prompt_tokens").saturating_sub(cached);
            self.usage.output_tokens += u64_field(raw, "completion_tokens");
            self.usage.cache_read_tokens += cached;
            events.push(StreamEvent::Usage {
                usage: self.usage.clone(),
            });
        }
        events
    }

    fn exit_status(&self) -> Option<&str> {
        self.info.as_ref()?.get("exit_status")?.as_str()
    }
}

impl StreamParser for MiniSweParser {
    /// Stdout is text for humans: kept verbatim, not interpreted.
    fn line(&mut self, line: &str) -> Vec<StreamEvent> {
        if line.trim().is_empty() {
            Vec::new()
        } else {
            vec![unknown_text(line)]
        }
    }

    fn finish(self, exit_code: Option<i32>, stderr_tail: &str) -> ParsedRun {
        let mut run = match self.exit_status() {
            Some("Submitted") => ParsedRun {
                text: self.last_text.clone(),
                ..ParsedRun::completed()
            },
            Some("LimitsExceeded") => ParsedRun::max_turns(),
            Some("TimeExceeded") => {
                ParsedRun::failed(CodingError::new(ErrorCode::Timeout, "TimeExceeded"))
            }
            Some(exception) => {
                let message = self
                    .exit_message
                    .clone()
                    .filter(|m| !m.is_empty())
                    .unwrap_or_else(|| exception.to_owned());
                let fallback = match exception {
                    "RateLimitError" => ErrorCode::RateLimited,
                    "ContextWindowExceededError" => ErrorCode::ContextExhausted,
                    "Timeout" => ErrorCode::Timeout,
                    _ => ErrorCode::SdkError,
                };
                let code = if fallback == ErrorCode::SdkError {
                    classify_message(&message, fallback)
                } else {
                    fallback
                };
                ParsedRun::failed(CodingError::new(code, message))
            }
            None => ParsedRun::failed(exit_failure("mini", exit_code, stderr_tail)),
        };
        if let Some(info) = &self.info {
            let mut usage = self.usage.clone();
            let stats = info.get("model_stats").cloned().unwrap_or(Value::Null);
            usage.model_calls = u64_field(&stats, "api_calls");
            usage.cost_usd = stats.get("instance_cost").and_then(Value::as_f64);
            run.usage = Some(usage);
        }
        run
    }
}

/// mini-swe-agent's machine-readable output is its trajectory file, re-read while it runs; it
/// prices with litellm from the config deltabench writes.
pub struct Adapter;

impl super::adapter::CliAdapter for Adapter {
    fn begin(&self, run: &super::adapter::RunStart<'_>) -> Box<dyn super::adapter::CliRun> {
        Box::new(MiniRun {
            parser: MiniSweParser::new(),
            trajectory: run.trajectory.map(std::path::Path::to_owned),
        })
    }
}

impl BuiltinCli for Adapter {
    fn facts(&self) -> &'static Facts {
        &FACTS
    }

    fn invoke(&self, config: &HarnessConfig, run: &RunPaths, inv: &mut Invocation) {
        let trajectory = run.scratch.join(MINI_TRAJECTORY);
        openai_env(run, inv, "OPENAI_BASE_URL");
        for (key, value) in [
            (
                "MSWEA_GLOBAL_CONFIG_DIR",
                format!("{}/.config/mini-swe-agent", run.home.display()),
            ),
            ("MSWEA_CONFIGURED", "true".into()),
            ("MSWEA_SILENT_STARTUP", "1".into()),
            // An unpriced model must not end the run; deltabench estimates the cost instead.
            ("MSWEA_COST_TRACKING", "ignore_errors".into()),
        ] {
            set_env(&mut inv.env, key, &value);
        }
        let args = &mut inv.args;
        if let Some(model) = litellm_model(config, run) {
            push(args, &["-m", &model]);
        }
        args.push(format!("--task={}", run.task));
        push(args, &["-y", "--exit-immediately", "-o"]);
        args.push(trajectory.display().to_string());
        if let Some(turns) = config.max_turns
            && self.turn_limit() == TurnLimit::Native
        {
            // Any -c replaces the default config, so the default comes first.
            push(args, &["-c", "mini.yaml", "-c"]);
            args.push(format!("agent.step_limit={turns}"));
        }
        inv.trajectory = Some(trajectory);
    }

    fn gateway_dialect(&self, config: &HarnessConfig) -> Option<CliDialect> {
        litellm_dialect(config)
    }
}

struct MiniRun {
    parser: MiniSweParser,
    trajectory: Option<std::path::PathBuf>,
}

impl super::adapter::CliRun for MiniRun {
    fn line(&mut self, line: &str) -> Vec<StreamEvent> {
        self.parser.line(line)
    }

    fn poll(&mut self) -> Vec<StreamEvent> {
        match self.trajectory.as_deref().map(std::fs::read_to_string) {
            Some(Ok(text)) if !text.trim().is_empty() => self.parser.trajectory(&text),
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

    fn echoes_local_price(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    use crate::agent::CodingStatus;
    use crate::agent::harness::HarnessKind;
    use crate::agent::harness::invocation::invocation;
    use crate::agent::harness::invocation::tests::{env, paths};
    use crate::agent::harness::tests::*;

    const BASIC: &str = fixture!("mini-basic.traj.json");
    const BASIC_STDOUT: &str = fixture!("mini-basic.stdout");
    const STEP_LIMIT: &str = fixture!("mini-step-limit.traj.json");
    const API_ERROR: &str = fixture!("mini-api-error.traj.json");

    fn run(traj: &str, exit: i32) -> (Vec<StreamEvent>, ParsedRun) {
        let mut parser = MiniSweParser::new();
        let events = parser.trajectory(traj);
        (events, parser.finish(Some(exit), ""))
    }

    #[test]
    fn mini_basic() {
        let (events, run) = run(BASIC, 0);
        assert_eq!(
            kinds(&events),
            [
                "system",
                "system",
                "assistant",
                "tool_call",
                "usage",
                "tool_result",
                "assistant",
                "tool_call",
                "usage",
                "tool_result",
                "assistant",
                "tool_call",
                "usage",
                "tool_result",
                "system"
            ]
        );
        assert_call_then_result(&events, "bash");
        assert_eq!(run.status, CodingStatus::Completed);
        assert_eq!(run.error, None);
        assert_eq!(run.usage, Some(usage(3300, 63, 3, 0.010845)));
        assert_eq!(run.session_id, None);
        assert!(run.modified_files.is_empty());
    }

    #[test]
    fn mini_trajectory_rereads_emit_only_new_messages() {
        let mut parser = MiniSweParser::new();
        assert_eq!(parser.trajectory(BASIC).len(), 15);
        assert!(parser.trajectory(BASIC).is_empty());
        assert_eq!(kinds(&parser.trajectory(&BASIC[..500])), ["unknown"]);
        // Usage is not counted twice.
        assert_eq!(
            parser.finish(Some(0), "").usage,
            Some(usage(3300, 63, 3, 0.010845))
        );
    }

    #[test]
    fn mini_step_limit_is_max_turns() {
        let (events, run) = run(STEP_LIMIT, 0);
        assert_call_then_result(&events, "bash");
        assert_eq!(run.status, CodingStatus::MaxTurns);
        assert_eq!(run.error, None);
        assert_eq!(run.usage, Some(usage(2100, 41, 2, 0.006915)));
    }

    #[test]
    fn mini_api_error() {
        let (_, run) = run(API_ERROR, 1);
        assert_eq!(run.status, CodingStatus::Error);
        let error = run.error.expect("error");
        assert_eq!(error.code, ErrorCode::SdkError);
        assert_eq!(
            error.message,
            "litellm.BadRequestError: OpenAIException - scripted failure"
        );
        assert_eq!(run.usage, Some(usage(0, 0, 1, 0.0)));
    }

    #[test]
    fn mini_stdout_is_kept_and_no_trajectory_is_an_error() {
        let mut parser = MiniSweParser::new();
        let events: Vec<_> = BASIC_STDOUT.lines().flat_map(|l| parser.line(l)).collect();
        assert!(!events.is_empty());
        assert!(
            events
                .iter()
                .all(|e| matches!(e, StreamEvent::Unknown { .. }))
        );
        let run = parser.finish(Some(1), "BadRequestError: boom");
        assert_eq!(run.status, CodingStatus::Error);
        assert_eq!(run.usage, None);
    }

    #[test]
    fn mini_garbage_and_truncated_lines_are_unknown() {
        let mut parser = MiniSweParser::new();
        assert_eq!(kinds(&parser.line("garbage {")), ["unknown"]);
        assert_eq!(kinds(&parser.trajectory("{\"info\": {")), ["unknown"]);
        assert_eq!(kinds(&parser.trajectory("[1, 2]")), ["unknown"]);
        let _ = parser.finish(None, "");
    }

    #[test]
    fn mini_swe_agent_writes_its_trajectory_to_scratch() {
        let config = HarnessConfig {
            model: Some("fake-model".into()),
            max_turns: Some(2),
            ..HarnessConfig::default()
        };
        let inv = invocation(
            HarnessKind::MiniSweAgent,
            &config,
            &paths(None, Some("http://127.0.0.1:9")),
        );
        assert_eq!(
            inv.args.join(" "),
            "-m openai/fake-model --task=-fix the bug -y --exit-immediately -o /t/mini-trajectory.json \
             -c mini.yaml -c agent.step_limit=2"
        );
        assert_eq!(env(&inv, "OPENAI_BASE_URL"), Some("http://127.0.0.1:9/v1"));
        assert_eq!(
            inv.trajectory.as_deref(),
            Some(Path::new("/t/mini-trajectory.json"))
        );
    }

    #[test]
    fn it_has_no_permission_mode() {
        assert!(
            !HarnessKind::MiniSweAgent
                .keys()
                .contains(&"permission_mode")
        );
    }
}
