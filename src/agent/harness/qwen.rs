//! Qwen Code: `qwen --output-format stream-json ... -- PROMPT`.
//!
//! Its stream-json is Claude Code's (`system/init`, `assistant` and `user` lines of content
//! blocks, a final `result`), read by [`ClaudeParser`] with Qwen's own write tools. Observed
//! differences: the `result` has `usage` but no cost (deltabench estimates it), and a run that
//! reaches `--max-session-turns` prints no `result` and exits 53.

use serde_json::json;

use super::builtin::{BuiltinCli, Doc, Facts, PROMPT, Prompt, SESSION, STREAM};
use super::cli::CliDialect;
use super::config::{HarnessConfig, Package, Registry, TurnLimit};
use super::invocation::{Invocation, RunPaths, push, set_env};
use super::{ClaudeParser, ParsedRun, StreamParser};
use crate::agent::{CodingStatus, StreamEvent};

const FACTS: Facts = Facts {
    program: "qwen",
    description: "Qwen Code, run headless (qwen --output-format stream-json).",
    doc: Doc {
        name: "Qwen Code",
        program_note: "",
        resume_note: "",
        turns: "`--max-session-turns`",
        modes_note: "",
        cost: "estimated (it reports none)",
    },
    package: Package {
        registry: Registry::Npm,
        name: "@qwen-code/qwen-code",
        version: "0.24.4",
    },
    key_env: "OPENAI_API_KEY",
    no_resume: None,
    permission_modes: &["yolo", "auto-edit", "default", "plan", "auto"],
    turn_limit: TurnLimit::Native,
    appends_system_prompt: true,
    reserved_flags: &[
        ("-p", PROMPT),
        ("--prompt", PROMPT),
        ("-i", PROMPT),
        ("--prompt-interactive", PROMPT),
        ("-o", STREAM),
        ("--output-format", STREAM),
        ("--session-id", SESSION),
        ("-r", SESSION),
        ("--resume", SESSION),
        ("-c", SESSION),
        ("--continue", SESSION),
        ("-m", "use `model:`"),
        ("--model", "use `model:`"),
        ("--approval-mode", "use `permission_mode:`"),
        ("-y", "use `permission_mode:`"),
        ("--yolo", "use `permission_mode:`"),
        ("--max-session-turns", "use `max_turns:`"),
        ("--append-system-prompt", "use `append_system_prompt:`"),
        ("--auth-type", "deltabench points it at the endpoint"),
        ("--openai-base-url", "deltabench points it at the endpoint"),
        ("--openai-api-key", "use `api_key:`"),
    ],
    prompt: Prompt::InFlag,
};

/// Tools whose successful call wrote the file named by their input.
const WRITE_TOOLS: [(&str, &str); 2] = [("write_file", "file_path"), ("edit", "file_path")];

/// The exit code of a run stopped by `--max-session-turns` (as Gemini CLI's, which it forks).
const MAX_TURNS_EXIT: i32 = 53;

/// A [`StreamParser`] for Qwen Code's `stream-json` stdout: Claude Code's format, with Qwen's write tools and exit codes.
#[derive(Debug)]
pub struct QwenParser {
    inner: ClaudeParser,
}

impl Default for QwenParser {
    fn default() -> Self {
        Self {
            inner: ClaudeParser::speaking_for("qwen", &WRITE_TOOLS),
        }
    }
}

impl QwenParser {
    /// A parser that has seen no line yet.
    pub fn new() -> Self {
        Self::default()
    }
}

impl StreamParser for QwenParser {
    fn line(&mut self, line: &str) -> Vec<StreamEvent> {
        self.inner.line(line)
    }

    fn finish(self, exit_code: Option<i32>, stderr_tail: &str) -> ParsedRun {
        let turns_out = !self.inner.has_result()
            && (exit_code == Some(MAX_TURNS_EXIT)
                || stderr_tail.contains("Reached max session turns"));
        let mut run = self.inner.finish(exit_code, stderr_tail);
        if turns_out {
            run.status = CodingStatus::MaxTurns;
            run.error = None;
        }
        run
    }
}

/// Where session totals are kept between runs: a resumed session's `result.usage` counts the
/// earlier runs too (observed), so a run's own usage is the difference.
const SESSION_USAGE_FILE: &str = ".qwen/deltabench-session-usage.json";

/// Qwen Code's usage is cumulative over a resumed session: the run subtracts the session's
/// saved total and saves the new one.
pub struct Adapter;

impl super::adapter::CliAdapter for Adapter {
    fn begin(&self, run: &super::adapter::RunStart<'_>) -> Box<dyn super::adapter::CliRun> {
        let file = run.home.join(SESSION_USAGE_FILE);
        let before = run
            .resume
            .map(|id| super::adapter::saved_usage(&file, id))
            .unwrap_or_default();
        Box::new(
            super::adapter::Plain::new(QwenParser::new()).then(move |mut parsed| {
                let Some(total) = parsed.usage.clone() else {
                    return parsed.into();
                };
                parsed.usage = Some(crate::agent::Usage {
                    input_tokens: total.input_tokens.saturating_sub(before.input_tokens),
                    output_tokens: total.output_tokens.saturating_sub(before.output_tokens),
                    cache_read_tokens: total
                        .cache_read_tokens
                        .saturating_sub(before.cache_read_tokens),
                    cache_write_tokens: total
                        .cache_write_tokens
                        .saturating_sub(before.cache_write_tokens),
                    ..total.clone()
                });
                super::adapter::Finished {
                    parsed,
                    after: Some(Box::new(move |session| {
                        super::adapter::save_usage(&file, session, total)
                    })),
                }
            }),
        )
    }
}

impl BuiltinCli for Adapter {
    fn facts(&self) -> &'static Facts {
        &FACTS
    }

    fn invoke(&self, config: &HarnessConfig, run: &RunPaths, inv: &mut Invocation) {
        let settings = json!({
            "privacy": {"usageStatisticsEnabled": false},
            "telemetry": {"enabled": false},
            "general": {"disableAutoUpdate": true, "disableUpdateNag": true},
            "security": {"folderTrust": {"enabled": false}},
        });
        inv.files.push((
            run.home.join(".qwen/settings.json"),
            serde_json::to_string_pretty(&settings).expect("settings serialize"),
        ));
        set_env(&mut inv.env, "QWEN_CODE_SUPPRESS_YOLO_WARNING", "1");
        if let Some(url) = run.endpoint {
            set_env(&mut inv.env, "OPENAI_BASE_URL", &format!("{url}/v1"));
        }
        if let Some(key) = run.api_key {
            set_env(&mut inv.env, "OPENAI_API_KEY", key);
        }
        let args = &mut inv.args;
        // Its positional prompt is not read after `--` (it then waits for stdin); `--prompt=` keeps
        // a task starting with `-` a value.
        args.push(format!("--prompt={}", run.task));
        push(
            args,
            &["--auth-type", "openai", "--output-format", "stream-json"],
        );
        if let Some(mode) = config.permission_mode_of(self) {
            push(args, &["--approval-mode", mode]);
        }
        if let Some(model) = &config.model {
            push(args, &["--model", model]);
        }
        if let Some(turns) = config.max_turns {
            push(args, &["--max-session-turns", &turns.to_string()]);
        }
        if let Some(prompt) = &config.append_system_prompt {
            push(args, &["--append-system-prompt", prompt]);
        }
        match run.resume {
            Some(id) => push(args, &["--resume", id]),
            None => push(args, &["--session-id", run.new_session]),
        }
    }

    fn gateway_dialect(&self, config: &HarnessConfig) -> Option<CliDialect> {
        // Without a model it uses its own OAuth backend, which the gateway cannot be.
        config.model.as_ref().map(|_| CliDialect::Openai)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::harness::tests::{assert_call_then_result, assert_survives_garbage, feed};

    /// Lines as Qwen Code 0.24.4 printed them against the scripted endpoint (trimmed).
    const BASIC: &str = r#"{"type":"system","subtype":"init","session_id":"41c6867e","cwd":"/ws","model":"fake-model","permission_mode":"yolo"}
{"type":"stream_event","session_id":"41c6867e","event":{"type":"goal_state"}}
{"type":"assistant","session_id":"41c6867e","message":{"id":"m1","model":"fake-model","content":[{"type":"tool_use","id":"call_1","name":"write_file","input":{"content":"hi\n","file_path":"/ws/hello.txt"}}],"usage":{"input_tokens":1000,"output_tokens":20}}}
{"type":"user","session_id":"41c6867e","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"call_1","is_error":false,"content":"Successfully created"}]}}
{"type":"assistant","session_id":"41c6867e","message":{"id":"m2","model":"fake-model","content":[{"type":"text","text":"Done."}]}}
{"type":"result","subtype":"success","session_id":"41c6867e","is_error":false,"num_turns":2,"result":"Done.","usage":{"input_tokens":2000,"output_tokens":40,"cache_read_input_tokens":0,"total_tokens":2040}}"#;

    #[test]
    fn reads_the_claude_shaped_stream_with_qwens_tools() {
        let mut parser = QwenParser::new();
        let events = feed(&mut parser, BASIC);
        assert_call_then_result(&events, "write_file");
        let run = parser
            .finish(Some(0), "")
            .relative_to(std::path::Path::new("/ws"));
        assert_eq!(run.status, CodingStatus::Completed);
        assert_eq!(run.session_id.as_deref(), Some("41c6867e"));
        assert_eq!(run.modified_files, ["hello.txt"]);
        let usage = run.usage.unwrap();
        assert_eq!((usage.input_tokens, usage.output_tokens), (2000, 40));
        assert_eq!(usage.cost_usd, None);
        assert_eq!(run.text.as_deref(), Some("Done."));
    }

    #[test]
    fn exit_53_without_a_result_is_the_turn_limit() {
        let mut parser = QwenParser::new();
        feed(
            &mut parser,
            BASIC
                .lines()
                .take(4)
                .collect::<Vec<_>>()
                .join("\n")
                .as_str(),
        );
        let run = parser.finish(Some(53), "Reached max session turns for this session.");
        assert_eq!(run.status, CodingStatus::MaxTurns);
        assert_eq!(run.error, None);
        let failed = QwenParser::new().finish(Some(1), "boom");
        assert_eq!(failed.status, CodingStatus::Error);
        assert!(
            failed
                .error
                .unwrap()
                .message
                .contains("qwen exited with code 1")
        );
        assert_survives_garbage(QwenParser::new(), "{\"type\":\"assist");
    }
}
