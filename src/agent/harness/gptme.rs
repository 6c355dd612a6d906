//! gptme: `gptme -n --output-format json --tool-format tool --name ID ... -- PROMPT`.
//!
//! One JSON object per message on stdout (observed with 0.35.1): `{"type": "message", "role",
//! "content", "metadata", "call_id"}`, the same messages as its log's `conversation.jsonl`. An
//! assistant message has its tool calls at the end of its `content`, one `@tool(call_id): ARGS`
//! each (ARGS the model's JSON), and its call's `usage` in `metadata`; a tool's result is a
//! `system` message with that `call_id`. Output of the commands it runs is printed among them as
//! plain text, so a command could print lines that look like its messages: the run reads the
//! messages from the log instead (`HOME/.local/share/gptme/logs/<name>/conversation.jsonl`,
//! written by gptme one message a line as it goes, the same objects without `type`, plus the
//! `hide`den system prompt), and the session is that conversation's name (`--name`).
//! `GPTME_MAX_STEPS` stops it with a `system` message marked `max_steps_stop`. A failed model
//! call ends it with exit 1 and `Error code: 400 - ...` on stderr.

use super::builtin::{BuiltinCli, Doc, Facts, Prompt, SESSION, STREAM};
use super::cli::CliDialect;
use super::config::{HarnessConfig, Package, Registry, TurnLimit};
use super::invocation::{Invocation, RunPaths, push, set_env};
use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use super::{
    ParsedRun, StreamParser, classify_message, exit_failure, http_error_code, parse_line,
    push_unique, str_field, system, u64_field, unknown, unknown_text,
};
use crate::agent::{CodingError, ErrorCode, StreamEvent, Usage};

const FACTS: Facts = Facts {
    program: "gptme",
    description: "gptme, run headless (gptme -n --output-format json).",
    doc: Doc {
        name: "gptme",
        program_note: ", PyPI, in its own venv",
        resume_note: "",
        turns: "`GPTME_MAX_STEPS`",
        modes_note: " (`-n`: no confirmations)",
        cost: "estimated (it reports none)",
    },
    package: Package {
        registry: Registry::PyPi,
        name: "gptme",
        version: "0.35.1",
    },
    key_env: "OPENAI_API_KEY",
    no_resume: None,
    permission_modes: &[],
    turn_limit: TurnLimit::Native,
    appends_system_prompt: false,
    reserved_flags: &[
        ("-n", "it always runs non-interactive"),
        ("--non-interactive", "it always runs non-interactive"),
        ("-w", "it runs in the trial's workspace"),
        ("--workspace", "it runs in the trial's workspace"),
        ("--output-format", STREAM),
        ("--tool-format", STREAM),
        ("--name", SESSION),
        ("-r", SESSION),
        ("--resume", SESSION),
        ("-m", "use `model:`"),
        ("--model", "use `model:`"),
    ],
    prompt: Prompt::AfterDashes,
};

/// Tools whose successful call wrote the file named by their `path` argument.
const WRITE_TOOLS: [&str; 3] = ["save", "append", "patch"];

/// Where gptme keeps its conversations, under its HOME (`XDG_DATA_HOME/gptme/logs`).
pub const LOGS_DIR: &str = ".local/share/gptme/logs";

/// A [`StreamParser`] for gptme's `--output-format json` stdout, one message per line.
#[derive(Debug, Default)]
pub struct GptmeParser {
    usage: Option<Usage>,
    modified_files: Vec<String>,
    last_text: Option<String>,
    /// Tool name and path (write tools) by call id, for their results.
    calls: HashMap<String, (String, Option<String>)>,
    assistant_messages: usize,
    max_steps: bool,
}

impl GptmeParser {
    /// A parser that has seen no line yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// One message, as printed (with `"type": "message"`) or as logged (without).
    pub fn message(&mut self, value: &Value) -> Vec<StreamEvent> {
        match str_field(value, "role") {
            Some("assistant") => self.assistant(value),
            // The system prompt and context it logs before the task.
            Some("system") if value.get("hide").and_then(Value::as_bool) == Some(true) => {
                Vec::new()
            }
            Some("system") => self.system_message(value),
            Some("user") => vec![system(
                "user",
                str_field(value, "content").unwrap_or_default(),
                None,
            )],
            _ => vec![unknown(value.clone())],
        }
    }

    fn assistant(&mut self, message: &Value) -> Vec<StreamEvent> {
        self.assistant_messages += 1;
        let content = str_field(message, "content").unwrap_or_default();
        let (text, calls) = split_tool_calls(content);
        let mut events = Vec::new();
        let text = text.trim();
        if !text.is_empty() {
            self.last_text = Some(text.to_owned());
            events.push(StreamEvent::Assistant {
                text: text.to_owned(),
            });
        }
        for (name, id, args) in calls {
            let path = WRITE_TOOLS
                .contains(&name.as_str())
                .then(|| str_field(&args, "path").map(str::to_owned))
                .flatten();
            self.calls.insert(id.clone(), (name.clone(), path));
            events.push(StreamEvent::ToolCall {
                id: Some(id),
                name,
                args,
            });
        }
        if let Some(reported) = message.pointer("/metadata/usage") {
            let usage = self.usage.get_or_insert_with(Usage::default);
            let cached = u64_field(reported, "cache_read_tokens");
            // Its `input_tokens` is the prompt's uncached part (cache reads are separate).
            usage.input_tokens += u64_field(reported, "input_tokens");
            usage.output_tokens += u64_field(reported, "output_tokens");
            usage.cache_read_tokens += cached;
            usage.cache_write_tokens += u64_field(reported, "cache_creation_tokens");
            usage.model_calls += 1;
            if let Some(cost) = message.pointer("/metadata/cost").and_then(Value::as_f64) {
                usage.cost_usd = Some(usage.cost_usd.unwrap_or(0.0) + cost);
            }
            events.push(StreamEvent::Usage {
                usage: usage.clone(),
            });
        }
        events
    }

    fn system_message(&mut self, value: &Value) -> Vec<StreamEvent> {
        let content = str_field(value, "content").unwrap_or_default();
        if value
            .pointer("/metadata/max_steps_stop")
            .and_then(Value::as_bool)
            == Some(true)
        {
            self.max_steps = true;
            return vec![system("max_turns", content, None)];
        }
        let Some(id) = str_field(value, "call_id") else {
            return vec![system("notice", content, None)];
        };
        // Its tools report failure in the text (`Error executing tool 'save': ...`).
        let is_error = content.trim_start().starts_with("Error");
        let call = self.calls.get(id);
        if !is_error && let Some((_, Some(path))) = call {
            push_unique(&mut self.modified_files, &path.clone());
        }
        let name = value
            .pointer("/metadata/tool")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or_else(|| call.map(|(name, _)| name.clone()));
        vec![StreamEvent::ToolResult {
            id: Some(id.to_owned()),
            name,
            result: json!(content),
            is_error,
        }]
    }
}

/// An assistant message's text and its `@tool(call_id): ARGS` calls (each at a line start; ARGS
/// the JSON value that follows, kept as a string when it is not JSON).
fn split_tool_calls(content: &str) -> (String, Vec<(String, String, Value)>) {
    let mut starts = Vec::new();
    let mut offset = 0;
    for line in content.split_inclusive('\n') {
        if let Some(head) = call_head(line) {
            starts.push((offset, head));
        }
        offset += line.len();
    }
    let text = content[..starts.first().map_or(content.len(), |(at, _)| *at)].to_owned();
    let mut calls = Vec::new();
    for (i, (at, (name, id, args_at))) in starts.iter().enumerate() {
        let end = starts.get(i + 1).map_or(content.len(), |(next, _)| *next);
        let raw = content[at + args_at..end].trim();
        let args = serde_json::Deserializer::from_str(raw)
            .into_iter::<Value>()
            .next()
            .and_then(Result::ok)
            .unwrap_or_else(|| json!(raw));
        calls.push((name.clone(), id.clone(), args));
    }
    (text, calls)
}

/// `@name(id): ` at the start of `line`: the name, the id and where the arguments start.
fn call_head(line: &str) -> Option<(String, String, usize)> {
    let rest = line.strip_prefix('@')?;
    let open = rest.find('(')?;
    let name = &rest[..open];
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
    {
        return None;
    }
    let close = open + rest[open..].find("): ")?;
    let id = &rest[open + 1..close];
    if id.is_empty() || id.contains(char::is_whitespace) {
        return None;
    }
    Some((name.to_owned(), id.to_owned(), 1 + close + 3))
}

/// A failed run's error, from stderr (`Error code: 429 - {...}` when the API refused).
fn exit_error(exit_code: Option<i32>, stderr_tail: &str) -> CodingError {
    let mut error = exit_failure("gptme", exit_code, stderr_tail);
    let status = stderr_tail
        .split("Error code: ")
        .nth(1)
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse::<u64>().ok());
    error.code = match status {
        Some(status) => http_error_code(status),
        None => classify_message(stderr_tail, ErrorCode::Unknown),
    };
    error
}

impl StreamParser for GptmeParser {
    fn line(&mut self, line: &str) -> Vec<StreamEvent> {
        if line.trim().is_empty() {
            return Vec::new();
        }
        // The output of the commands it runs is printed among its messages.
        if !line.trim_start().starts_with('{') {
            return vec![unknown_text(line)];
        }
        let value = match parse_line(line) {
            Ok(value) => value,
            Err(event) => return vec![event],
        };
        if str_field(&value, "type") != Some("message") {
            return vec![unknown(value)];
        }
        self.message(&value)
    }

    fn finish(self, exit_code: Option<i32>, stderr_tail: &str) -> ParsedRun {
        let run = if exit_code == Some(0) && self.max_steps {
            ParsedRun::max_turns()
        } else if exit_code == Some(0) && self.assistant_messages > 0 {
            ParsedRun {
                text: self.last_text,
                ..ParsedRun::completed()
            }
        } else {
            ParsedRun::failed(exit_error(exit_code, stderr_tail))
        };
        run.with_stream(self.usage, None, self.modified_files)
    }
}

/// The run reads the conversation's log, not stdout; the session is that conversation.
pub struct Adapter;

impl super::adapter::CliAdapter for Adapter {
    fn begin(&self, run: &super::adapter::RunStart<'_>) -> Box<dyn super::adapter::CliRun> {
        let dir = run.home.join(LOGS_DIR);
        // A resumed conversation's earlier messages are the earlier runs'.
        let resumed = run
            .resume
            .filter(|id| !id.contains(['/', '\\']) && *id != "..");
        let seen = resumed
            .and_then(|id| std::fs::read_to_string(dir.join(id).join(CONVERSATION)).ok())
            .map_or(0, |text| complete_lines(&text).count());
        Box::new(GptmeRun {
            parser: GptmeParser::new(),
            before: conversations(&dir),
            dir,
            session: resumed.map(str::to_owned),
            seen,
        })
    }
}

impl BuiltinCli for Adapter {
    fn facts(&self) -> &'static Facts {
        &FACTS
    }

    fn invoke(&self, config: &HarnessConfig, run: &RunPaths, inv: &mut Invocation) {
        for (key, value) in [
            // No tokenizer download (offline it waits for a timeout on every count).
            ("GPTME_TIKTOKEN_TIMEOUT", "0"),
            // The task is the prompt, not a list of files or URLs to include.
            ("GPTME_DISABLE_PATH_INCLUDE", "1"),
            ("GPTME_TELEMETRY_ENABLED", "false"),
        ] {
            set_env(&mut inv.env, key, value);
        }
        if let Some(key) = run.api_key {
            set_env(&mut inv.env, "OPENAI_API_KEY", key);
        }
        if let Some(turns) = config.max_turns {
            set_env(&mut inv.env, "GPTME_MAX_STEPS", &turns.to_string());
        }
        let args = &mut inv.args;
        // Native tool calls (`--tool-format tool`): gptme's default, markdown code blocks, leaves no
        // call ids to pair a call with its result.
        push(
            args,
            &["-n", "--output-format", "json", "--tool-format", "tool"],
        );
        match run.resume {
            Some(id) => push(args, &["--name", id, "--resume"]),
            None => push(args, &["--name", run.new_session]),
        }
        match (run.endpoint, &config.model) {
            // Its `local` provider is any OpenAI-compatible server at OPENAI_BASE_URL.
            (Some(url), model) => {
                set_env(&mut inv.env, "OPENAI_BASE_URL", &format!("{url}/v1"));
                let model = model.as_deref().unwrap_or("gpt-4.1");
                let bare = model
                    .strip_prefix("openai/")
                    .or_else(|| model.strip_prefix("local/"))
                    .unwrap_or(model);
                push(args, &["-m", &format!("local/{bare}")]);
            }
            (None, Some(model)) => push(args, &["-m", model]),
            (None, None) => {}
        }
    }

    fn gateway_dialect(&self, config: &HarnessConfig) -> Option<CliDialect> {
        // Its `provider/model` names one of many providers; `openai/` and `local/` are the ones an
        // OpenAI-compatible gateway can be. Without a model it picks one from the keys it finds.
        match config.model.as_deref() {
            Some(model)
                if !model.contains('/')
                    || model.starts_with("openai/")
                    || model.starts_with("local/") =>
            {
                Some(CliDialect::Openai)
            }
            _ => None,
        }
    }
}

const CONVERSATION: &str = "conversation.jsonl";

fn conversations(dir: &Path) -> BTreeSet<String> {
    super::adapter::entries(dir, |path| path.join(CONVERSATION).is_file())
        .iter()
        .filter_map(|path| Some(path.file_name()?.to_string_lossy().into_owned()))
        .collect()
}

/// The lines of `text` that end in a newline (the last may still be being written).
fn complete_lines(text: &str) -> impl Iterator<Item = &str> {
    text.split_inclusive('\n')
        .filter(|line| line.ends_with('\n'))
}

struct GptmeRun {
    parser: GptmeParser,
    dir: PathBuf,
    /// Conversations of earlier runs in the same HOME.
    before: BTreeSet<String>,
    /// The conversation: the resumed one, or the one this run made once it appears.
    session: Option<String>,
    /// Log lines already read.
    seen: usize,
}

impl super::adapter::CliRun for GptmeRun {
    /// Stdout holds the same messages among the raw output of the commands gptme runs, which
    /// the agent controls: it is kept (agent.stdout) but not read.
    fn line(&mut self, _line: &str) -> Vec<StreamEvent> {
        Vec::new()
    }

    fn poll(&mut self) -> Vec<StreamEvent> {
        if self.session.is_none() {
            self.session = conversations(&self.dir)
                .into_iter()
                .find(|name| !self.before.contains(name));
        }
        let Some(session) = &self.session else {
            return Vec::new();
        };
        let Ok(text) = std::fs::read_to_string(self.dir.join(session).join(CONVERSATION)) else {
            return Vec::new();
        };
        let mut events = Vec::new();
        for line in complete_lines(&text).skip(self.seen) {
            self.seen += 1;
            events.extend(match serde_json::from_str::<Value>(line) {
                Ok(value) => self.parser.message(&value),
                Err(_) => vec![unknown_text(line.trim_end())],
            });
        }
        events
    }

    fn finish(
        self: Box<Self>,
        exit_code: Option<i32>,
        stderr_tail: &str,
    ) -> super::adapter::Finished {
        let mut parsed = self.parser.finish(exit_code, stderr_tail);
        parsed.session_id = self.session;
        parsed.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::CodingStatus;
    use crate::agent::harness::HarnessKind;
    use crate::agent::harness::invocation::tests::{env, paths};
    use crate::agent::harness::invocation::{DUMMY_API_KEY, invocation};
    use crate::agent::harness::tests::*;

    /// Lines as gptme 0.35.1 printed them against the scripted endpoint (metadata trimmed).
    const BASIC: &str = r#"{"type": "message", "role": "user", "content": "Create hello.txt", "timestamp": "t"}
{"type": "message", "role": "assistant", "content": "I'll create hello.txt.\n@save(call_1): {\"path\":\"hello.txt\",\"content\":\"hi\\n\"}", "metadata": {"model": "local/fake-model", "usage": {"input_tokens": 1000, "output_tokens": 20, "cache_read_tokens": 0}}}
{"type": "message", "role": "system", "content": "Saved to hello.txt", "call_id": "call_1", "metadata": {"tool": "save"}}
{"type": "message", "role": "assistant", "content": "\n@shell(call_2): {\"command\":\"cat hello.txt\"}\n@patch(call_3): {\"path\":\"nope.txt\",\n \"patch\":\"x\"}", "metadata": {"usage": {"input_tokens": 1000, "output_tokens": 20, "cache_read_tokens": 500}}}
hi
{"type": "message", "role": "system", "content": "Ran allowlisted command: `cat hello.txt`\n\n`hi`\n\n", "call_id": "call_2", "metadata": {"tool": "shell"}}
{"type": "message", "role": "system", "content": "Error executing tool 'patch': no such file", "call_id": "call_3", "metadata": {"tool": "patch"}}
{"type": "message", "role": "assistant", "content": "Done.", "metadata": {"usage": {"input_tokens": 1000, "output_tokens": 20, "cache_read_tokens": 0}}}"#;

    #[test]
    fn reads_its_messages_and_the_calls_in_their_text() {
        let mut parser = GptmeParser::new();
        let events = feed(&mut parser, BASIC);
        assert_call_then_result(&events, "save");
        assert_call_then_result(&events, "patch");
        let calls: Vec<_> = events
            .iter()
            .filter_map(|e| match e {
                StreamEvent::ToolCall { name, args, .. } => Some((name.as_str(), args.clone())),
                _ => None,
            })
            .collect();
        assert_eq!(calls[1], ("shell", json!({"command": "cat hello.txt"})));
        // Arguments spanning lines are still one JSON value.
        assert_eq!(calls[2].1["path"], "nope.txt");
        let errors = tool_errors(&events);
        assert_eq!(errors, [false, false, true]);
        let run = parser.finish(Some(0), "");
        assert_eq!(run.status, CodingStatus::Completed);
        // The failed patch wrote nothing.
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
        assert_eq!(usage.cost_usd, None);
        assert_eq!(run.text.as_deref(), Some("Done."));
    }

    #[test]
    fn the_step_limit_and_a_failed_call_end_the_run() {
        let mut parser = GptmeParser::new();
        feed(
            &mut parser,
            &(BASIC.lines().take(3).collect::<Vec<_>>().join("\n")
                + "\n{\"type\": \"message\", \"role\": \"system\", \"content\": \"Stopped: reached max steps limit (2)\", \"metadata\": {\"max_steps_stop\": true}}"),
        );
        assert_eq!(parser.finish(Some(0), "").status, CodingStatus::MaxTurns);
        let failed = GptmeParser::new().finish(
            Some(1),
            "ERROR    Fatal error occurred\nERROR    Error code: 429 - {'error': 'slow'}",
        );
        assert_eq!(failed.status, CodingStatus::Error);
        let error = failed.error.unwrap();
        assert_eq!(error.code, ErrorCode::RateLimited);
        assert!(error.message.contains("gptme exited with code 1"));
        // A zero exit with no answer is no completion.
        assert_eq!(
            GptmeParser::new().finish(Some(0), "").status,
            CodingStatus::Error
        );
        assert_survives_garbage(GptmeParser::new(), "{\"type\": \"mess");
    }

    /// Logged lines: the `hide`den prompt, then the messages (no `type`).
    const LOGGED: &str = r#"{"role": "system", "content": "You are gptme", "hide": true, "pinned": true}
{"role": "user", "content": "Create hello.txt"}
{"role": "assistant", "content": "@save(call_1): {\"path\":\"hello.txt\",\"content\":\"hi\"}", "metadata": {"usage": {"input_tokens": 1000, "output_tokens": 20}}}
{"role": "system", "content": "Saved to hello.txt", "call_id": "call_1", "metadata": {"tool": "save"}}
"#;

    fn start(home: &Path, resume: Option<&str>) -> Box<dyn super::super::adapter::CliRun> {
        use super::super::adapter::{CliAdapter, RunStart};
        Adapter.begin(&RunStart {
            home,
            workspace: Path::new("/ws"),
            resume,
            trajectory: None,
        })
    }

    #[test]
    fn the_run_reads_the_conversation_log_not_stdout() {
        let home = tempfile::tempdir().unwrap();
        let log = home.path().join(LOGS_DIR).join("c1");
        let mut run = start(home.path(), None);
        // A command printing what looks like a message on stdout is not read.
        assert!(
            run.line(r#"{"type": "message", "role": "assistant", "content": "Done."}"#)
                .is_empty()
        );
        std::fs::create_dir_all(&log).unwrap();
        // A line still being written waits.
        std::fs::write(log.join(CONVERSATION), &LOGGED[..LOGGED.len() - 20]).unwrap();
        let first = run.poll();
        assert!(
            !first
                .iter()
                .any(|e| matches!(e, StreamEvent::ToolResult { .. }))
        );
        std::fs::write(log.join(CONVERSATION), LOGGED).unwrap();
        let rest = run.poll();
        assert!(
            rest.iter()
                .any(|e| matches!(e, StreamEvent::ToolResult { .. }))
        );
        let events: Vec<_> = first.into_iter().chain(rest).collect();
        assert!(
            !events
                .iter()
                .any(|e| matches!(e, StreamEvent::System { message, .. } if message.contains("You are gptme")))
        );
        let finished = run.finish(Some(0), "").parsed;
        assert_eq!(finished.status, CodingStatus::Completed);
        assert_eq!(finished.session_id.as_deref(), Some("c1"));
        assert_eq!(finished.modified_files, ["hello.txt"]);

        // Resumed: only what this run adds counts; adding nothing is no completion.
        let mut resumed = start(home.path(), Some("c1"));
        assert!(resumed.poll().is_empty());
        assert_eq!(
            resumed.finish(Some(0), "").parsed.status,
            CodingStatus::Error
        );
        let mut resumed = start(home.path(), Some("c1"));
        let more = LOGGED.to_owned() + LOGGED.lines().nth(2).unwrap() + "\n";
        std::fs::write(log.join(CONVERSATION), more).unwrap();
        let events = resumed.poll();
        assert_eq!(
            events
                .iter()
                .filter(|e| matches!(e, StreamEvent::ToolCall { .. }))
                .count(),
            1
        );
        let usage = resumed.finish(Some(0), "").parsed.usage.unwrap();
        assert_eq!((usage.input_tokens, usage.model_calls), (1000, 1));
    }

    #[test]
    fn text_that_only_looks_like_a_call_stays_text() {
        let (text, calls) = split_tool_calls("Mail me @ noon\n@ home(x): no\n@shell(): {}");
        assert!(calls.is_empty(), "{calls:?}");
        assert!(text.contains("noon"));
    }

    #[test]
    fn gptme_runs_its_local_provider_at_the_endpoint_with_a_named_conversation() {
        let config = HarnessConfig {
            model: Some("openai/fake-model".into()),
            max_turns: Some(4),
            ..HarnessConfig::default()
        };
        let local = "http://127.0.0.1:9";
        let inv = invocation(HarnessKind::Gptme, &config, &paths(None, Some(local)));
        assert_eq!(
            inv.args.join(" "),
            "-n --output-format json --tool-format tool \
             --name 0f0e0d0c-0b0a-4908-8706-050403020100 -m local/fake-model -- -fix the bug"
        );
        assert_eq!(env(&inv, "OPENAI_BASE_URL"), Some("http://127.0.0.1:9/v1"));
        assert_eq!(env(&inv, "OPENAI_API_KEY"), Some(DUMMY_API_KEY));
        assert_eq!(env(&inv, "GPTME_MAX_STEPS"), Some("4"));
        assert_eq!(env(&inv, "GPTME_DISABLE_PATH_INCLUDE"), Some("1"));
        let resumed = invocation(HarnessKind::Gptme, &config, &paths(Some("c-1"), None));
        assert!(
            resumed
                .args
                .join(" ")
                .contains("--name c-1 --resume -m openai/fake-model -- -fix")
        );
        assert_eq!(env(&resumed, "OPENAI_BASE_URL"), None);
    }

    #[test]
    fn it_has_a_turn_limit_but_no_system_prompt_to_add_to() {
        assert!(HarnessKind::Gptme.reserved_flag("--tool-format").is_some());
        assert!(HarnessKind::Gptme.keys().contains(&"max_turns"));
        assert!(!HarnessKind::Gptme.keys().contains(&"append_system_prompt"));
    }
}
