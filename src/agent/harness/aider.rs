//! aider: `aider --message PROMPT --yes-always --no-pretty …`.
//!
//! Plain text only (clis.md §6): the model's reply with SEARCH/REPLACE blocks, then
//! `Tokens: 2.3k sent, 26 received. Cost: $0.0074 message, $0.0074 session.`, `Applied edit to
//! FILE` and `Commit HASH MSG`. aider exits 0 even when the API call failed; the failure is only
//! printed (`litellm.BadRequestError: …`), so such a line makes the run an error whatever the
//! exit code. There is no session id.
//!
//! Token counts are as aider prints them (rounded: `2.3k` is 2300). `sent` includes cache hits
//! and writes, which are taken out of `input_tokens`. Cost is the last `$… session` figure.

use super::builtin::{BuiltinCli, Doc, Facts, NO_SESSION, PROMPT, Prompt};
use super::cli::CliDialect;
use super::config::{HarnessConfig, Package, Registry, TurnLimit};
use super::invocation::{Invocation, RunPaths, litellm_dialect, litellm_model, openai_env, push};
use serde_json::json;

use super::{ParsedRun, StreamParser, classify_message, exit_failure, push_unique, system};
use crate::agent::{CodingError, CodingStatus, ErrorCode, StreamEvent, Usage};

const FACTS: Facts = Facts {
    program: "aider",
    description: "aider, run headless (aider --message).",
    doc: Doc {
        name: "aider",
        program_note: "",
        resume_note: "",
        turns: "",
        modes_note: "",
        cost: "its `Cost:` line; estimated against an endpoint",
    },
    package: Package {
        registry: Registry::PyPi,
        name: "aider-chat",
        version: "0.86.2",
    },
    key_env: "OPENAI_API_KEY",
    no_resume: Some(NO_SESSION),
    permission_modes: &[],
    turn_limit: TurnLimit::Unsupported,
    appends_system_prompt: true,
    reserved_flags: &[
        ("--message", PROMPT),
        ("-m", PROMPT),
        ("--message-file", PROMPT),
        ("-f", PROMPT),
        ("--model", "use `model:`"),
        (
            "--stream",
            "deltabench needs the API's usage, which a stream lacks",
        ),
        (
            "--chat-history-file",
            "deltabench keeps the histories in the trial folder",
        ),
        (
            "--input-history-file",
            "deltabench keeps the histories in the trial folder",
        ),
        (
            "--llm-history-file",
            "deltabench keeps the histories in the trial folder",
        ),
    ],
    prompt: Prompt::InFlag,
};

/// Banner lines aider prints before the reply.
const BANNER: [&str; 9] = [
    "Aider v",
    "Model:",
    "Weak model:",
    "Git repo:",
    "Repo-map:",
    "Analytics have been",
    "Detected dumb terminal",
    "https://aider.chat/",
    "Added ",
];

/// A [`StreamParser`] for aider's plain-text stdout, read line by line; the failure of a run that exits 0 is read from its text.
#[derive(Debug, Default)]
pub struct AiderParser {
    usage: Option<Usage>,
    modified_files: Vec<String>,
    /// The last non-blank reply line before a fence: the file an edit block is for.
    candidate_file: Option<String>,
    /// The edit block being read: (file, search, replace, in_replace).
    block: Option<(String, String, String, bool)>,
    blocks: u64,
    reply: Vec<String>,
    error: Option<CodingError>,
}

impl AiderParser {
    /// A parser that has seen no line yet.
    pub fn new() -> Self {
        Self::default()
    }

    fn tokens_line(&mut self, line: &str) -> Vec<StreamEvent> {
        let mut sent = 0;
        let mut received = 0;
        let mut cache_write = 0;
        let mut cache_hit = 0;
        let mut session_cost = None;
        let (tokens, cost) = match line.find("Cost:") {
            Some(at) => (&line[..at], Some(&line[at..])),
            None => (line, None),
        };
        let tokens = tokens.trim_start_matches("Tokens:");
        for part in tokens.split(',') {
            let part = part.trim().trim_end_matches('.');
            let (count, what) = part.split_once(' ').unwrap_or((part, ""));
            let count = parse_count(count);
            match what.trim() {
                "sent" => sent = count,
                "received" => received = count,
                "cache write" => cache_write = count,
                "cache hit" => cache_hit = count,
                _ => {}
            }
        }
        if let Some(cost) = cost {
            for part in cost.trim_start_matches("Cost:").split(',') {
                let part = part.trim().trim_end_matches('.');
                if let Some(value) = part.strip_suffix(" session") {
                    session_cost = value.trim().trim_start_matches('$').parse::<f64>().ok();
                }
            }
        }
        let usage = self.usage.get_or_insert_with(Usage::default);
        usage.input_tokens += sent.saturating_sub(cache_hit + cache_write);
        usage.output_tokens += received;
        usage.cache_read_tokens += cache_hit;
        usage.cache_write_tokens += cache_write;
        usage.model_calls += 1;
        if session_cost.is_some() {
            usage.cost_usd = session_cost;
        }
        vec![StreamEvent::Usage {
            usage: usage.clone(),
        }]
    }

    /// A line inside an edit block, or one that opens or closes it.
    fn block_line(&mut self, line: &str) -> Option<Vec<StreamEvent>> {
        let trimmed = line.trim_end();
        if trimmed.starts_with("<<<<<<< SEARCH") {
            let file = self.candidate_file.clone().unwrap_or_default();
            self.block = Some((file, String::new(), String::new(), false));
            return Some(Vec::new());
        }
        let (file, search, replace, in_replace) = self.block.as_mut()?;
        if trimmed == "=======" {
            *in_replace = true;
        } else if trimmed.starts_with(">>>>>>> REPLACE") {
            let event = StreamEvent::ToolCall {
                id: Some(format!("edit-{}", self.blocks)),
                name: "edit".to_owned(),
                args: json!({ "path": file, "search": search, "replace": replace }),
            };
            self.blocks += 1;
            self.block = None;
            return Some(vec![event]);
        } else {
            let target = if *in_replace { replace } else { search };
            target.push_str(line);
            target.push('\n');
        }
        Some(Vec::new())
    }

    fn is_error_line(line: &str) -> bool {
        let head = line.split(':').next().unwrap_or_default();
        line.contains(':')
            && !head.contains(' ')
            && (head.starts_with("litellm.")
                || head.ends_with("Error")
                || head.ends_with("Exception"))
    }
}

/// `26`, `2.3k`, `12k`, `1.2M` as aider's `format_tokens` prints them.
fn parse_count(text: &str) -> u64 {
    let text = text.trim();
    let (number, scale) = if let Some(n) = text.strip_suffix('k') {
        (n, 1_000.0)
    } else if let Some(n) = text.strip_suffix('M') {
        (n, 1_000_000.0)
    } else {
        (text, 1.0)
    };
    number
        .parse::<f64>()
        .map(|n| (n * scale).round() as u64)
        .unwrap_or(0)
}

impl StreamParser for AiderParser {
    fn line(&mut self, line: &str) -> Vec<StreamEvent> {
        if let Some(events) = self.block_line(line) {
            return events;
        }
        let trimmed = line.trim();
        if trimmed.is_empty() {
            return Vec::new();
        }
        if trimmed.starts_with("```") {
            return Vec::new();
        }
        if trimmed.starts_with("Tokens:") {
            return self.tokens_line(trimmed);
        }
        if let Some(file) = trimmed.strip_prefix("Applied edit to ") {
            push_unique(&mut self.modified_files, file);
            let id = self.blocks.checked_sub(1).map(|n| format!("edit-{n}"));
            return vec![StreamEvent::ToolResult {
                id,
                name: Some("edit".to_owned()),
                result: json!(trimmed),
                is_error: false,
            }];
        }
        if trimmed.starts_with("Retrying in ") {
            return vec![system("retry", trimmed, None)];
        }
        if trimmed.starts_with("Commit ") {
            return vec![system("commit", trimmed, None)];
        }
        if BANNER.iter().any(|b| trimmed.starts_with(b)) {
            return vec![system("banner", trimmed, None)];
        }
        if Self::is_error_line(trimmed) {
            let code = classify_message(trimmed, ErrorCode::SdkError);
            self.error = Some(CodingError::new(code, trimmed));
            return vec![system("error", trimmed, None)];
        }
        self.candidate_file = Some(trimmed.to_owned());
        self.reply.push(trimmed.to_owned());
        vec![StreamEvent::Assistant {
            text: trimmed.to_owned(),
        }]
    }

    fn finish(self, exit_code: Option<i32>, stderr_tail: &str) -> ParsedRun {
        let mut run = match (self.error, exit_code) {
            // aider exits 0 on API errors: the printed error wins.
            (Some(error), _) => ParsedRun::failed(error),
            (None, Some(0)) => ParsedRun {
                text: (!self.reply.is_empty()).then(|| self.reply.join("\n")),
                ..ParsedRun::completed()
            },
            (None, _) => ParsedRun::failed(exit_failure("aider", exit_code, stderr_tail)),
        };
        if run.status != CodingStatus::Completed {
            run.text = None;
        }
        run.with_stream(self.usage, None, self.modified_files)
    }
}

/// aider leaves repo-map caches (`.aider.tags.cache.v4`, ...) in the workspace root: the
/// harness's files, not the agent's change, so the ones a run created are removed after it.
pub struct Adapter;

impl super::adapter::CliAdapter for Adapter {
    fn begin(&self, run: &super::adapter::RunStart<'_>) -> Box<dyn super::adapter::CliRun> {
        let workspace = run.workspace.to_owned();
        let before = repo_map_caches(&workspace);
        Box::new(
            super::adapter::Plain::new(AiderParser::new())
                .priced_locally()
                .then(move |parsed| {
                    for cache in repo_map_caches(&workspace) {
                        if !before.contains(&cache) {
                            let _ = std::fs::remove_dir_all(&cache)
                                .or_else(|_| std::fs::remove_file(&cache));
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
        openai_env(run, inv, "OPENAI_API_BASE");
        let model = litellm_model(config, run);
        // Without it aider fetches litellm's price list from GitHub at every start.
        inv.files.push((
            run.home
                .join(".aider/caches/model_prices_and_context_window.json"),
            "{}".into(),
        ));
        let args = &mut inv.args;
        if let Some(model) = &model {
            push(args, &["--model", model, "--weak-model", model]);
            if run.endpoint.is_some() {
                let metadata = run.home.join(".aider/model-metadata.json");
                let entry = json!({ model.clone(): {
                    "max_input_tokens": 200000, "max_output_tokens": 8192,
                    "input_cost_per_token": 0.0, "output_cost_per_token": 0.0,
                    "litellm_provider": "openai", "mode": "chat",
                }});
                inv.files.push((metadata.clone(), entry.to_string()));
                args.push(format!("--model-metadata-file={}", metadata.display()));
            }
        }
        args.push(format!("--message={}", run.task));
        push(
            args,
            &[
                "--yes-always",
                "--no-check-update",
                "--analytics-disable",
                "--no-show-model-warnings",
                "--no-pretty",
                "--no-fancy-input",
                "--no-detect-urls",
                "--no-gitignore",
                // A streamed reply carries no usage, and aider then counts tokens itself.
                "--no-stream",
            ],
        );
        if let Some(prompt) = &config.append_system_prompt {
            let path = run.scratch.join("aider-conventions.md");
            inv.files.push((path.clone(), prompt.clone()));
            args.push(format!("--read={}", path.display()));
        }
        // Its history files default to the repo root, where they would count as the agent's change.
        for (flag, name) in [
            ("--chat-history-file", "aider.chat.history.md"),
            ("--input-history-file", "aider.input.history"),
            ("--llm-history-file", "aider.llm.history"),
        ] {
            args.push(format!("{flag}={}", run.scratch.join(name).display()));
        }
    }

    fn gateway_dialect(&self, config: &HarnessConfig) -> Option<CliDialect> {
        litellm_dialect(config)
    }
}

/// aider's repo-map caches in the workspace root.
fn repo_map_caches(workspace: &std::path::Path) -> Vec<std::path::PathBuf> {
    std::fs::read_dir(workspace)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with(".aider.tags.cache")
        })
        .map(|e| e.path())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::harness::HarnessKind;
    use crate::agent::harness::invocation::invocation;
    use crate::agent::harness::invocation::tests::{env, file, paths};
    use crate::agent::harness::tests::*;

    const BASIC: &str = fixture!("aider-basic.stdout");
    const API_ERROR: &str = fixture!("aider-api-error.stdout");

    fn run(text: &str, exit: i32) -> (Vec<StreamEvent>, ParsedRun) {
        crate::agent::harness::tests::parse(AiderParser::new(), text, exit)
    }

    #[test]
    fn aider_basic() {
        let (events, run) = run(BASIC, 0);
        assert_eq!(
            kinds(&events),
            [
                "system",
                "system",
                "system",
                "system",
                "system",
                "system",
                "system",
                "assistant",
                "assistant",
                "tool_call",
                "usage",
                "assistant",
                "tool_result",
                "system"
            ]
        );
        assert_call_then_result(&events, "edit");
        assert!(events.contains(&StreamEvent::ToolCall {
            id: Some("edit-0".into()),
            name: "edit".into(),
            args: json!({
                "path": "hello.txt",
                "search": "",
                "replace": "hello from the scripted model\n"
            }),
        }));
        assert_eq!(run.status, CodingStatus::Completed);
        assert_eq!(run.error, None);
        assert_eq!(
            run.usage,
            Some(Usage {
                input_tokens: 2300,
                output_tokens: 26,
                model_calls: 1,
                cost_usd: Some(0.0074),
                ..Usage::default()
            })
        );
        assert_eq!(run.session_id, None);
        assert_eq!(run.modified_files, ["hello.txt"]);
    }

    #[test]
    fn aider_api_error_exits_0_and_is_an_error() {
        let (events, run) = run(API_ERROR, 0);
        assert!(!kinds(&events).contains(&"tool_call"));
        assert_eq!(run.status, CodingStatus::Error);
        let error = run.error.expect("error");
        assert_eq!(error.code, ErrorCode::SdkError);
        assert_eq!(
            error.message,
            "litellm.BadRequestError: OpenAIException - scripted failure"
        );
        assert_eq!(run.usage, None);
        assert!(run.modified_files.is_empty());
    }

    #[test]
    fn aider_rate_limit_and_cache_tokens() {
        let mut parser = AiderParser::new();
        parser.line(
            "Tokens: 12k sent, 1.0k cache write, 8.5k cache hit, 312 received. \
             Cost: $0.01 message, $0.03 session.",
        );
        parser.line("litellm.RateLimitError: rate limit exceeded");
        let run = parser.finish(Some(0), "");
        assert_eq!(run.error.expect("error").code, ErrorCode::RateLimited);
        assert_eq!(
            run.usage,
            Some(Usage {
                input_tokens: 2500,
                output_tokens: 312,
                cache_read_tokens: 8500,
                cache_write_tokens: 1000,
                model_calls: 1,
                cost_usd: Some(0.03),
                ..Usage::default()
            })
        );
    }

    #[test]
    fn aider_garbage_never_panics() {
        let mut parser = AiderParser::new();
        for line in [
            "Tokens:",
            "Tokens: x sent, received.",
            "<<<<<<< SEARCH",
            "\u{0}",
            "{\"a\":",
        ] {
            let _ = parser.line(line);
        }
        let _ = parser.finish(None, "");
    }

    #[test]
    fn aider_keeps_its_history_files_out_of_the_workspace() {
        let config = HarnessConfig {
            model: Some("fake-model".into()),
            env: [("AIDER_X".to_owned(), "1".to_owned())].into(),
            ..HarnessConfig::default()
        };
        let inv = invocation(
            HarnessKind::Aider,
            &config,
            &paths(None, Some("http://127.0.0.1:9")),
        );
        let args = inv.args.join(" ");
        assert!(args.starts_with("--model openai/fake-model --weak-model openai/fake-model"));
        assert!(args.contains("--message=-fix the bug"));
        assert!(args.contains("--chat-history-file=/t/aider.chat.history.md"));
        assert!(args.contains("--llm-history-file=/t/aider.llm.history"));
        assert_eq!(env(&inv, "OPENAI_API_BASE"), Some("http://127.0.0.1:9/v1"));
        assert_eq!(env(&inv, "AIDER_X"), Some("1"));
        file(&inv, "model_prices_and_context_window.json");
    }

    #[test]
    fn it_takes_no_turn_limit_and_leaves_its_own_flags_free() {
        assert!(!HarnessKind::Aider.keys().contains(&"max_turns"));
        assert_eq!(HarnessKind::Aider.reserved_flag("--edit-format"), None);
    }
}
