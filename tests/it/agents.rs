//! The six real agent CLIs, driven offline against deltabench's scripted model endpoint.
//!
//! Each CLI runs for real (the pinned versions `.ci/install-agents` installs): through
//! `deltabench run` for the pass, turn-limit and HTTP-error cases, and through the library's
//! [`HarnessAgent`] for resume (a suite has no second prompt to send). Outside CI a CLI that
//! is not installed skips its tests with a loud message; under `CI=true` it fails them.

use std::path::Path;
use std::sync::Arc;

use deltabench::agent::harness::{
    Endpoint, HarnessAgent, HarnessConfig, HarnessKind, Price, find_program,
};
use deltabench::agent::{CodingAgent, CodingStatus, CodingTask, ErrorCode};
use deltabench::model::{Script, ScriptedServer};
use serde_json::Value;

use crate::common::{
    deltabench, git_repo, run_suite, stderr, stdout, temp_dir, trials, write_files, write_suite,
};

/// Write hello.txt, show it, finish: three model calls of 1000 in / 20 out each.
pub const WRITE_SHOW_DONE: &str = "\
usage: {input_tokens: 1000, output_tokens: 20}
steps:
  - text: I'll create hello.txt.
    write: {path: hello.txt, content: \"hello from the script\\n\"}
  - shell: cat hello.txt
  - text: Done.
";

/// Never stops calling tools.
const LOOP: &str = "\
loop: true
steps:
  - shell: echo again
";

/// How each CLI is configured in the tests, and what its basic run must report.
pub struct Cli {
    model: &'static str,
    /// `price:` (input, output per MTok), for models the price table does not know.
    price: Option<(f64, f64)>,
    /// Other agent keys, one per line.
    extra: &'static [&'static str],
    /// Main model calls of the write/show/done script.
    calls: u64,
    /// Cost of those calls, and whether deltabench estimated it.
    cost: f64,
    estimated: bool,
}

pub fn cli(kind: HarnessKind) -> Cli {
    let fake = |extra, calls, cost| Cli {
        model: "fake-model",
        price: Some((3.0, 15.0)),
        extra,
        calls,
        cost,
        estimated: true,
    };
    match kind {
        // Claude Code prices claude-sonnet-4-5 itself ($3/$15 per MTok).
        HarnessKind::ClaudeCode => Cli {
            model: "claude-sonnet-4-5",
            price: None,
            extra: &["env: {CLAUDE_CODE_MAX_RETRIES: '0'}"],
            calls: 3,
            cost: 0.0099,
            estimated: false,
        },
        // gpt-5.5 is a model Codex knows, but not one in the price table.
        HarnessKind::Codex => Cli {
            model: "gpt-5.5",
            price: Some((1.25, 10.0)),
            extra: &[],
            calls: 3,
            cost: 0.00435,
            estimated: true,
        },
        // Priced from the table ($1.25/$10).
        HarnessKind::GeminiCli => Cli {
            model: "gemini-2.5-pro",
            price: None,
            extra: &[],
            calls: 3,
            cost: 0.00435,
            estimated: true,
        },
        HarnessKind::Opencode => fake(&[], 3, 0.0099),
        // The third call is mini's `echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`.
        HarnessKind::MiniSweAgent => fake(
            &["env: {MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT: '1'}"],
            3,
            0.0099,
        ),
        // One exchange: aider applies the edit block and stops.
        HarnessKind::Aider => fake(&["args: [--edit-format, diff]"], 1, 0.0033),
        HarnessKind::QwenCode => fake(&[], 3, 0.0099),
        HarnessKind::ContinueCli => fake(&[], 3, 0.0099),
        HarnessKind::Pi => fake(&[], 3, 0.0099),
        // Its text-only "Done." gets two auto-replies asking for its `complete` tool (each
        // answered "Done." again) before it stops: five calls.
        HarnessKind::Gptme => fake(&[], 5, 0.0165),
        HarnessKind::Cline => fake(&[], 3, 0.0099),
        HarnessKind::GrokCli => fake(&[], 3, 0.0099),
        HarnessKind::Cli => panic!("`kind: cli` is a definition: tests/it/agents_cli.rs"),
    }
}

impl Cli {
    /// The agent's keys besides kind and endpoint, as YAML lines under the agent.
    pub fn yaml(&self) -> String {
        let mut lines = vec![format!("model: {}", self.model)];
        if let Some((input, output)) = self.price {
            lines.push(format!("price: {{input: {input}, output: {output}}}"));
        }
        lines.extend(self.extra.iter().map(|l| l.to_string()));
        lines.join("\n    ")
    }

    fn config(&self, endpoint: &str) -> HarnessConfig {
        HarnessConfig {
            model: Some(self.model.into()),
            price: self.price.map(|(input, output)| Price {
                input,
                output,
                cache_read: None,
                cache_write: None,
            }),
            endpoint: Some(Endpoint::Url(endpoint.into())),
            ..HarnessConfig::default()
        }
    }
}

/// Whether the CLI's output reports its usage (else the gateway's count is the only one).
fn reports_usage(kind: HarnessKind) -> bool {
    !matches!(kind, HarnessKind::GrokCli)
}

/// Whether the CLI is there to test; outside CI a missing one skips loudly, under CI it fails.
pub fn installed(kind: HarnessKind) -> bool {
    let test = format!("the {kind} tests");
    match find_program(kind, None) {
        // Gemini CLI's code needs Node 20 (Debian 12's Node 18 fails to parse it).
        Ok(_) if kind == HarnessKind::GeminiCli => {
            let major = std::process::Command::new("node")
                .arg("--version")
                .output()
                .ok()
                .and_then(|o| {
                    let text = String::from_utf8_lossy(&o.stdout).into_owned();
                    text.trim()
                        .trim_start_matches('v')
                        .split('.')
                        .next()?
                        .parse::<u32>()
                        .ok()
                });
            crate::common::have_tool(&test, "Node.js 20 or newer", major.is_some_and(|m| m >= 20))
        }
        Ok(_) => true,
        Err(err) => {
            crate::common::have_tool(&test, &format!("{kind} (.ci/install-agents): {err}"), false)
        }
    }
}

/// A suite folder: a one-commit repo, the script as `model.yaml`, one task and agent `a`.
fn suite(kind: HarnessKind, script: &str, extra: &str) -> tempfile::TempDir {
    let tmp = temp_dir();
    git_repo(tmp.path(), &[("README.md", "# demo\n")]);
    write_files(tmp.path(), &[("model.yaml", script)]);
    let cli = cli(kind);
    write_suite(
        tmp.path(),
        &format!(
            "name: agents
repo: repo
tasks:
  - id: hello
    base: main
    instruction: Create hello.txt with a greeting, then show it.
    verify: grep -q 'hello from the script' hello.txt
agents:
  a:
    kind: {kind}
    endpoint: scripted:model.yaml
    {}{extra}
",
            cli.yaml()
        ),
    );
    tmp
}

fn only_record(out: &Path) -> Value {
    let records = trials(out);
    assert_eq!(records.len(), 1, "{records:?}");
    records.into_iter().next().unwrap()
}

fn trial_dir(out: &Path) -> std::path::PathBuf {
    out.join("trials/hello/a/1")
}

fn events(out: &Path) -> Vec<Value> {
    std::fs::read_to_string(trial_dir(out).join("events.jsonl"))
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// The trial passes on the file the script wrote; events, usage, cost and session are there.
fn passes_on_the_delta(kind: HarnessKind) {
    if !installed(kind) {
        return;
    }
    let cli = cli(kind);
    let tmp = suite(kind, WRITE_SHOW_DONE, "");
    // A relative --out, as the default is: the CLI's HOME must still land outside the workspace.
    let work = tmp.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let output = deltabench(tmp.path())
        .args(["run", "suite.yaml", "--out", "out", "--workdir"])
        .arg(&work)
        .output()
        .unwrap();
    let out = tmp.path().join("out");
    let record = only_record(&out);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}\n{record:#}",
        stderr(&output)
    );
    assert_eq!(record["outcome"], "pass", "{record:#}");
    assert_eq!(record["status"], "completed");
    let diff = std::fs::read_to_string(trial_dir(&out).join("diff.patch")).unwrap();
    assert!(diff.contains("+hello from the script"), "{diff}");
    assert_eq!(
        record["diff"]["files"], 1,
        "only hello.txt changed:\n{diff}"
    );

    // What the CLI reported, and what the gateway counted: both the script's numbers.
    let usage = &record["cli_usage"];
    if reports_usage(kind) {
        assert_eq!(usage["input_tokens"], 1000 * cli.calls, "{usage}");
        assert_eq!(usage["output_tokens"], 20 * cli.calls, "{usage}");
        let cost = usage["cost_usd"].as_f64().expect("a cost");
        assert!(
            (cost - cli.cost).abs() < 1e-9,
            "cost {cost} != {}",
            cli.cost
        );
        assert_eq!(
            usage["cost_estimated"].as_bool().unwrap_or(false),
            cli.estimated
        );
    } else {
        assert!(usage.is_null(), "{kind} reports no usage: {record:#}");
    }
    assert_eq!(record["usage_source"], "gateway", "{record:#}");
    let counted = &record["gateway_usage"];
    assert_eq!(record["usage"], *counted);
    assert_eq!(counted["input_tokens"], 1000 * cli.calls, "{counted}");
    assert_eq!(counted["output_tokens"], 20 * cli.calls, "{counted}");
    // Side calls (titles, commit messages) are model calls too, with no tokens.
    assert!(
        counted["model_calls"].as_u64().unwrap() >= cli.calls,
        "{counted}"
    );
    let counted_cost = counted["cost_usd"].as_f64().expect("a cost");
    assert!(
        (counted_cost - cli.cost).abs() < 1e-9,
        "cost {counted_cost} != {}",
        cli.cost
    );
    assert_eq!(counted["cost_estimated"], true);
    let session = record["session_id"].as_str().unwrap();
    assert!(session.len() >= 8, "{session}");

    let events = events(&out);
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    for wanted in ["tool_call", "tool_result", "usage", "assistant"] {
        if wanted == "usage" && !reports_usage(kind) {
            continue;
        }
        assert!(kinds.contains(&wanted), "no {wanted} event in {kinds:?}");
    }
    // The write of hello.txt is a tool call, answered by its own result.
    let (at, write) = events
        .iter()
        .enumerate()
        .find(|(_, e)| e["type"] == "tool_call" && e["args"].to_string().contains("hello.txt"))
        .unwrap_or_else(|| panic!("no tool call writes hello.txt: {events:#?}"));
    assert!(
        events[at + 1..]
            .iter()
            .any(|e| e["type"] == "tool_result" && e["id"] == write["id"]),
        "no result for {write}"
    );
    // The last usage event is the run's total, as recorded.
    if reports_usage(kind) {
        let last_usage = events.iter().rev().find(|e| e["type"] == "usage").unwrap();
        assert_eq!(last_usage["usage"]["input_tokens"], usage["input_tokens"]);
    }
    // Provenance from the write/edit tool calls (mini-swe-agent writes through bash only).
    let result: Value = serde_json::from_str(
        &std::fs::read_to_string(trial_dir(&out).join("result.json")).unwrap(),
    )
    .unwrap();
    let modified = &result["result"]["output"]["modified_files"];
    if kind == HarnessKind::MiniSweAgent {
        assert_eq!(modified, &serde_json::json!([]));
    } else {
        assert_eq!(modified, &serde_json::json!(["hello.txt"]), "{kind}");
    }
    let raw = std::fs::read_to_string(trial_dir(&out).join("agent.stdout")).unwrap();
    assert!(!raw.trim().is_empty(), "the raw stream was not kept");
    let report = deltabench(tmp.path())
        .arg("report")
        .arg(&out)
        .output()
        .unwrap();
    // The summary is the gateway's count, which deltabench priced: marked `~`.
    assert!(stdout(&report).contains("~$0.0"), "{}", stdout(&report));
    // The CLI's HOME and config stayed in the trial, out of the workspace and the diff.
    assert!(trial_dir(&out).join("home").is_dir());
    assert!(!diff.contains("home/"), "{diff}");
    // The trajectory: valid ATIF by Harbor's validator, the write a call with its result, the
    // totals the record's.
    let trajectory: Value = serde_json::from_str(
        &std::fs::read_to_string(trial_dir(&out).join("trajectory.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        trajectory["agent"]["name"],
        kind.to_string(),
        "{trajectory:#}"
    );
    assert_eq!(trajectory["session_id"], record["session_id"]);
    let steps = trajectory["steps"].as_array().unwrap();
    let writes = steps
        .iter()
        .find(|s| s["tool_calls"].to_string().contains("hello.txt"))
        .unwrap_or_else(|| panic!("{kind}: no step writes hello.txt: {trajectory:#}"));
    assert_eq!(writes["source"], "agent");
    assert!(
        writes["observation"]["results"]
            .as_array()
            .is_some_and(|r| r.iter().any(|r| r["source_call_id"].is_string())),
        "{kind}: the write has no result: {writes:#}"
    );
    let prompt = counted["input_tokens"].as_u64().unwrap()
        + counted["cache_read_tokens"].as_u64().unwrap_or(0)
        + counted["cache_write_tokens"].as_u64().unwrap_or(0);
    assert_eq!(trajectory["final_metrics"]["total_prompt_tokens"], prompt);
    assert_eq!(
        trajectory["final_metrics"]["total_cost_usd"],
        counted["cost_usd"]
    );
    // Per-step metrics, whatever the CLI's stream reports: each main call of the script on the
    // step it made (from the gateway's calls, or the stream's own per-call usage).
    let metered: Vec<&Value> = steps
        .iter()
        .filter(|s| s["source"] == "agent")
        .filter_map(|s| s.get("metrics"))
        .collect();
    assert_eq!(metered.len() as u64, cli.calls, "{kind}: {trajectory:#}");
    for metrics in metered {
        assert_eq!(
            (&metrics["prompt_tokens"], &metrics["completion_tokens"]),
            (&Value::from(1000), &Value::from(20)),
            "{kind}: {metrics}"
        );
    }
    crate::trajectory::validate_with_harbor(&format!("the {kind} trajectory"), &out);
}

/// With `max_turns: 2` and a model that never stops, the run ends `max_turns`.
fn stops_at_max_turns(kind: HarnessKind) {
    if !installed(kind) {
        return;
    }
    let tmp = suite(kind, LOOP, "\n    max_turns: 2\n    timeout: 120s");
    let (output, _, out) = run_suite(tmp.path(), &[]);
    let record = only_record(&out);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(record["status"], "max_turns", "{record:#}");
    assert_eq!(record["outcome"], "fail");
}

/// With a token budget below what the looping script spends, the gateway refuses the call
/// after the budget is spent and the trial ends `budget_exceeded`, overshooting by at most the
/// one call that crossed it.
fn stops_at_its_budget(kind: HarnessKind) {
    let script = "usage: {input_tokens: 1000, output_tokens: 20}\nloop: true\nsteps:\n  - shell: echo again\n";
    stops_at_a_budget_of(kind, script, 2500, "fail");
}

/// As [`stops_at_its_budget`], with the trial scored on its delta as `outcome`.
fn stops_at_a_budget_of(kind: HarnessKind, script: &str, budget: u64, outcome: &str) {
    if !installed(kind) {
        return;
    }
    let tmp = suite(
        kind,
        script,
        &format!("\n    budget: {{tokens: {budget}}}\n    timeout: 120s"),
    );
    let (output, _, out) = run_suite(tmp.path(), &[]);
    let record = only_record(&out);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(record["status"], "budget_exceeded", "{record:#}");
    assert_eq!(record["outcome"], outcome);
    let counted = &record["gateway_usage"];
    let tokens =
        counted["input_tokens"].as_u64().unwrap() + counted["output_tokens"].as_u64().unwrap();
    assert!(
        (budget..budget + 1020).contains(&tokens),
        "{tokens} tokens: past the budget by at most one call\n{record:#}"
    );
    let events = events(&out);
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "system" && e["subtype"] == "budget_exceeded"),
        "{events:#?}"
    );
}

#[test]
fn claude_code_stops_at_its_budget() {
    stops_at_its_budget(HarnessKind::ClaudeCode);
}

#[test]
fn codex_stops_at_its_budget() {
    stops_at_its_budget(HarnessKind::Codex);
}

#[test]
fn gemini_cli_stops_at_its_budget() {
    stops_at_its_budget(HarnessKind::GeminiCli);
}

#[test]
fn opencode_stops_at_its_budget() {
    stops_at_its_budget(HarnessKind::Opencode);
}

#[test]
fn mini_swe_agent_stops_at_its_budget() {
    stops_at_its_budget(HarnessKind::MiniSweAgent);
}

/// aider runs no shell command the model names, so it does not loop: its one exchange edits
/// the file, and the commit-message call after it is the one past the budget. The edit is in the
/// workspace, and the trial is scored on it: a pass.
#[test]
fn aider_stops_at_its_budget() {
    stops_at_a_budget_of(HarnessKind::Aider, WRITE_SHOW_DONE, 500, "pass");
}

/// An HTTP error from the model ends the run `error` with the matching code (and the
/// server's `retry-after`, where the CLI passes it on).
fn fails_on_an_http_error(
    kind: HarnessKind,
    status: u16,
    code: ErrorCode,
    retry_after: Option<f64>,
) {
    if !installed(kind) {
        return;
    }
    let script = format!(
        "steps:\n  - error: {{status: {status}, message: scripted failure, retry_after: 2}}\n"
    );
    let tmp = suite(kind, &script, "\n    timeout: 120s");
    let (output, _, out) = run_suite(tmp.path(), &[]);
    let record = only_record(&out);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(record["status"], "error", "{record:#}");
    assert_eq!(record["error"]["code"], code.as_str(), "{record:#}");
    assert_eq!(
        record["error"]["retry_after"].as_f64(),
        retry_after,
        "{record:#}"
    );
    assert_eq!(record["outcome"], "fail");
}

macro_rules! cli_tests {
    ($($module:ident: $kind:expr, $status:expr, $code:expr, $retry_after:expr;)*) => {$(
        mod $module {
            use super::*;

            #[test]
            fn passes_on_the_delta_with_events_usage_cost_and_session() {
                passes_on_the_delta($kind);
            }

            #[test]
            fn an_http_error_ends_in_error_with_its_code() {
                fails_on_an_http_error($kind, $status, $code, $retry_after);
            }
        }
    )*};
}

// 429 where the CLI's retries are bounded or quick; Gemini CLI, mini-swe-agent and aider back
// off for minutes on a 429, so they get a 400.
cli_tests! {
    claude_code: HarnessKind::ClaudeCode, 429, ErrorCode::RateLimited, None;
    codex: HarnessKind::Codex, 429, ErrorCode::RateLimited, None;
    gemini_cli: HarnessKind::GeminiCli, 400, ErrorCode::SdkError, None;
    opencode: HarnessKind::Opencode, 429, ErrorCode::RateLimited, Some(2.0);
    mini_swe_agent: HarnessKind::MiniSweAgent, 400, ErrorCode::SdkError, None;
    aider: HarnessKind::Aider, 400, ErrorCode::SdkError, None;
    qwen_code: HarnessKind::QwenCode, 400, ErrorCode::SdkError, None;
}

/// Continue's CLI: no http-error test (its retries back off for long).
mod continue_cli {
    use super::*;

    #[test]
    fn passes_on_the_delta_with_events_usage_cost_and_session() {
        passes_on_the_delta(HarnessKind::ContinueCli);
    }

    #[test]
    fn stops_at_its_budget() {
        super::stops_at_its_budget(HarnessKind::ContinueCli);
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn resumes_its_session() {
        resumes(HarnessKind::ContinueCli).await;
    }

    /// It has no turn limit, and writes its session file only when it exits, so deltabench
    /// cannot count its calls while it runs either: `max_turns` is refused before anything runs.
    #[test]
    fn has_no_turn_limit_to_set() {
        let tmp = suite(
            HarnessKind::ContinueCli,
            WRITE_SHOW_DONE,
            "\n    max_turns: 2",
        );
        let (output, _, out) = run_suite(tmp.path(), &[]);
        assert_eq!(output.status.code(), Some(2));
        let err = stderr(&output);
        assert!(
            err.contains("`max_turns` does not apply to agent 'a' of kind 'continue-cli' (continue-cli has no turn limit to set)"),
            "{err}"
        );
        assert!(!out.join("trials.jsonl").exists());
    }

    /// In the sandbox with `network: model` written out: the gateway is the only address it has.
    #[test]
    fn runs_inside_the_sandbox_with_network_model() {
        if !crate::common::have_bwrap("continue_cli::runs_inside_the_sandbox_with_network_model") {
            return;
        }
        runs_inside_the_sandbox_with(HarnessKind::ContinueCli, "\n    network: model");
    }
}

/// pi: its http-error test takes a 400 (it retries a 429 for 14 s).
mod pi {
    use super::*;

    #[test]
    fn passes_on_the_delta_with_events_usage_cost_and_session() {
        passes_on_the_delta(HarnessKind::Pi);
    }

    /// pi exits 0 after a failed model call: the error is read from its stream.
    #[test]
    fn an_http_error_ends_in_error_with_its_code() {
        fails_on_an_http_error(HarnessKind::Pi, 400, ErrorCode::SdkError, None);
    }

    #[test]
    fn stops_at_its_budget() {
        super::stops_at_its_budget(HarnessKind::Pi);
    }

    /// It has no turn limit of its own: deltabench stops it at its third tool call.
    #[test]
    fn is_stopped_by_deltabench_at_max_turns() {
        stops_at_max_turns(HarnessKind::Pi);
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn resumes_its_session() {
        resumes(HarnessKind::Pi).await;
    }

    /// In the sandbox with `network: model` written out: the gateway is the only address it has.
    #[test]
    fn runs_inside_the_sandbox_with_network_model() {
        if !crate::common::have_bwrap("pi::runs_inside_the_sandbox_with_network_model") {
            return;
        }
        runs_inside_the_sandbox_with(HarnessKind::Pi, "\n    network: model");
    }
}

/// gptme: its http-error test takes a 400 (it retries a 429).
mod gptme {
    use super::*;

    #[test]
    fn passes_on_the_delta_with_events_usage_cost_and_session() {
        passes_on_the_delta(HarnessKind::Gptme);
    }

    #[test]
    fn an_http_error_ends_in_error_with_its_code() {
        fails_on_an_http_error(HarnessKind::Gptme, 400, ErrorCode::SdkError, None);
    }

    #[test]
    fn stops_at_its_budget() {
        super::stops_at_its_budget(HarnessKind::Gptme);
    }

    /// `GPTME_MAX_STEPS`: it stops itself and says so.
    #[test]
    fn stops_at_max_turns() {
        super::stops_at_max_turns(HarnessKind::Gptme);
    }

    #[tokio::test(flavor = "multi_thread")]
    async fn resumes_its_session() {
        resumes(HarnessKind::Gptme).await;
    }

    /// gptme prints the output of the commands it runs among its JSON messages: a command that
    /// prints a message of its own (here the step limit's, and a write of hello.txt) is not
    /// taken for gptme's, which deltabench reads from its conversation log.
    #[test]
    fn a_command_printing_a_message_does_not_speak_for_it() {
        if !installed(HarnessKind::Gptme) {
            return;
        }
        let fake = r#"{"type": "message", "role": "system", "content": "Stopped", "metadata": {"max_steps_stop": true}}"#;
        let script = format!(
            "usage: {{input_tokens: 1000, output_tokens: 20}}\nsteps:\n  - shell: '{}'\n  - text: Done.\n",
            format!("echo '{fake}'").replace('\'', "''")
        );
        let tmp = suite(HarnessKind::Gptme, &script, "\n    timeout: 120s");
        let (output, _, out) = run_suite(tmp.path(), &[]);
        let record = only_record(&out);
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        assert_eq!(record["status"], "completed", "{record:#}");
        assert_eq!(record["outcome"], "fail", "no hello.txt: {record:#}");
        let raw = std::fs::read_to_string(trial_dir(&out).join("agent.stdout")).unwrap();
        assert!(
            raw.contains("max_steps_stop"),
            "the command did print it: {raw}"
        );
        assert!(
            !events(&out).iter().any(|e| e["subtype"] == "max_turns"),
            "{:#?}",
            events(&out)
        );
    }

    /// In the sandbox with `network: model` written out: the gateway is the only address it has.
    #[test]
    fn runs_inside_the_sandbox_with_network_model() {
        if !crate::common::have_bwrap("gptme::runs_inside_the_sandbox_with_network_model") {
            return;
        }
        runs_inside_the_sandbox_with(HarnessKind::Gptme, "\n    network: model");
    }
}

/// Cline: no resume (its `--id` opens its interactive UI), `max_turns` enforced by deltabench.
mod cline {
    use super::*;

    #[test]
    fn passes_on_the_delta_with_events_usage_cost_and_session() {
        passes_on_the_delta(HarnessKind::Cline);
    }

    #[test]
    fn stops_at_its_budget() {
        super::stops_at_its_budget(HarnessKind::Cline);
    }

    #[test]
    fn is_stopped_by_deltabench_at_max_turns() {
        stops_at_max_turns(HarnessKind::Cline);
    }

    #[test]
    fn an_http_error_ends_in_error_with_its_code() {
        fails_on_an_http_error(HarnessKind::Cline, 400, ErrorCode::SdkError, None);
    }

    #[test]
    fn a_claimed_completion_without_a_change_fails() {
        claims_done_without_a_change(HarnessKind::Cline);
    }

    /// In the sandbox with `network: model` written out: the gateway is the only address it has.
    #[test]
    fn runs_inside_the_sandbox_with_network_model() {
        if !crate::common::have_bwrap("cline::runs_inside_the_sandbox_with_network_model") {
            return;
        }
        runs_inside_the_sandbox_with(HarnessKind::Cline, "\n    network: model");
    }
}

/// Grok CLI: no session, no usage of its own (the gateway's count is the record's), its
/// conversation printed only when it ends; `max_turns` is its `--max-tool-rounds`.
mod grok_cli {
    use super::*;

    #[test]
    fn passes_on_the_delta_with_events_usage_cost_and_session() {
        passes_on_the_delta(HarnessKind::GrokCli);
    }

    #[test]
    fn stops_at_its_budget() {
        super::stops_at_its_budget(HarnessKind::GrokCli);
    }

    #[test]
    fn stops_at_max_turns() {
        super::stops_at_max_turns(HarnessKind::GrokCli);
    }

    /// It exits 0 on an API error: the error is read from its last message.
    #[test]
    fn an_http_error_ends_in_error_with_its_code() {
        fails_on_an_http_error(HarnessKind::GrokCli, 400, ErrorCode::SdkError, None);
    }

    #[test]
    fn a_claimed_completion_without_a_change_fails() {
        claims_done_without_a_change(HarnessKind::GrokCli);
    }

    /// In the sandbox with `network: model` written out: the gateway is the only address it has.
    #[test]
    fn runs_inside_the_sandbox_with_network_model() {
        if !crate::common::have_bwrap("grok_cli::runs_inside_the_sandbox_with_network_model") {
            return;
        }
        runs_inside_the_sandbox_with(HarnessKind::GrokCli, "\n    network: model");
    }
}

/// A model that only says it is done: the CLI completes, the workspace has no change, and the
/// trial fails on its delta.
fn claims_done_without_a_change(kind: HarnessKind) {
    if !installed(kind) {
        return;
    }
    let script = "usage: {input_tokens: 1000, output_tokens: 20}\nsteps:\n  - text: Done, hello.txt is created and verified.\n";
    let tmp = suite(kind, script, "");
    let (output, _, out) = run_suite(tmp.path(), &[]);
    let record = only_record(&out);
    // A failed trial is no failed verdict: the run itself exits 0.
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(record["status"], "completed", "{record:#}");
    assert_eq!(record["outcome"], "fail", "{record:#}");
    assert_eq!(record["diff"]["files"], 0, "{record:#}");
}

#[test]
fn qwen_code_stops_at_its_budget() {
    stops_at_its_budget(HarnessKind::QwenCode);
}

#[test]
fn qwen_code_stops_at_max_turns() {
    stops_at_max_turns(HarnessKind::QwenCode);
}

#[tokio::test(flavor = "multi_thread")]
async fn qwen_code_resumes_its_session() {
    resumes(HarnessKind::QwenCode).await;
}

/// In the sandbox with `network: model` written out: the gateway is the only address it has.
#[test]
fn qwen_code_runs_inside_the_sandbox_with_network_model() {
    if !crate::common::have_bwrap("qwen_code_runs_inside_the_sandbox_with_network_model") {
        return;
    }
    runs_inside_the_sandbox_with(HarnessKind::QwenCode, "\n    network: model");
}

#[test]
fn claude_code_stops_at_max_turns() {
    stops_at_max_turns(HarnessKind::ClaudeCode);
}

#[test]
fn gemini_cli_stops_at_max_turns() {
    stops_at_max_turns(HarnessKind::GeminiCli);
}

#[test]
fn mini_swe_agent_stops_at_its_step_limit() {
    stops_at_max_turns(HarnessKind::MiniSweAgent);
}

#[test]
fn codex_is_stopped_by_deltabench_at_max_turns() {
    stops_at_max_turns(HarnessKind::Codex);
}

#[test]
fn opencode_is_stopped_by_deltabench_at_max_turns() {
    stops_at_max_turns(HarnessKind::Opencode);
}

#[test]
fn aider_has_no_turn_limit_to_set() {
    let tmp = suite(HarnessKind::Aider, WRITE_SHOW_DONE, "\n    max_turns: 2");
    let (output, _, out) = run_suite(tmp.path(), &[]);
    assert_eq!(output.status.code(), Some(2));
    let err = stderr(&output);
    assert!(
        err.contains("`max_turns` does not apply to agent 'a' of kind 'aider' (aider has no turn limit to set)"),
        "{err}"
    );
    assert!(!out.join("trials.jsonl").exists());
}

/// Runs a task, then resumes its session with a second prompt, through the library.
async fn resumes(kind: HarnessKind) {
    if !installed(kind) {
        return;
    }
    let tmp = temp_dir();
    let (workspace, _) = git_repo(tmp.path(), &[("README.md", "# demo\n")]);
    let scratch = tmp.path().join("scratch");
    std::fs::create_dir_all(&scratch).unwrap();
    let script = Script::parse(WRITE_SHOW_DONE, Path::new("model.yaml")).unwrap();
    let server = ScriptedServer::start(script, "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let config = cli(kind).config(&server.url());
    let agent: Arc<dyn CodingAgent> = Arc::new(HarnessAgent::new(
        "a",
        kind,
        config,
        find_program(kind, None).unwrap(),
        workspace.clone(),
        scratch.clone(),
        Some(server.url()),
    ));
    let first = agent
        .run(CodingTask::from(
            "Create hello.txt with a greeting, then show it.",
        ))
        .await;
    assert_eq!(first.status, CodingStatus::Completed, "{:?}", first.error);
    assert!(workspace.join("hello.txt").is_file());
    let requests_before = server.requests().len();

    let second = agent
        .run(CodingTask {
            task: "Now summarise what you did.".into(),
            session_id: Some(first.session_id.clone()),
            ..CodingTask::default()
        })
        .await;
    assert_eq!(second.status, CodingStatus::Completed, "{:?}", second.error);
    assert_eq!(
        second.session_id, first.session_id,
        "resume kept the session"
    );
    // The resumed session sent the first run's history back to the model.
    let resumed: Vec<Value> = server.requests()[requests_before..].to_vec();
    assert!(
        resumed
            .iter()
            .any(|r| r["body"].to_string().contains("hello from the script")),
        "no request of the resumed run carried the earlier tool output"
    );
    // Only this run's calls count, even where the CLI reports session totals (Codex, Qwen
    // Code). Against this script Qwen Code's resumed run makes two model calls, gptme's three
    // (its two auto-replies), the others one.
    let calls = match kind {
        HarnessKind::QwenCode | HarnessKind::Gptme => resumed.len() as u64,
        _ => 1,
    };
    let usage = second.usage.expect("usage");
    assert_eq!(
        (usage.input_tokens, usage.output_tokens),
        (1000 * calls, 20 * calls),
        "{} model requests: {resumed:#?}",
        resumed.len()
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn claude_code_resumes_its_session() {
    resumes(HarnessKind::ClaudeCode).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn codex_resumes_its_thread_and_counts_only_the_new_turn() {
    resumes(HarnessKind::Codex).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn gemini_cli_resumes_its_session() {
    resumes(HarnessKind::GeminiCli).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn opencode_resumes_its_session() {
    resumes(HarnessKind::Opencode).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mini_swe_agent_and_aider_refuse_to_resume_clearly() {
    let tmp = temp_dir();
    for kind in [
        HarnessKind::MiniSweAgent,
        HarnessKind::Aider,
        HarnessKind::Cline,
        HarnessKind::GrokCli,
    ] {
        let agent = HarnessAgent::new(
            "a",
            kind,
            HarnessConfig::default(),
            "/bin/false".into(),
            tmp.path().to_owned(),
            tmp.path().to_owned(),
            None,
        );
        let result = agent
            .run(CodingTask {
                task: "go on".into(),
                session_id: Some("earlier".into()),
                ..CodingTask::default()
            })
            .await;
        assert_eq!(result.status, CodingStatus::Error);
        let error = result.error.unwrap();
        assert_eq!(error.code, ErrorCode::SdkError);
        assert!(
            error
                .message
                .starts_with(&format!("{kind} cannot resume a session")),
            "{}",
            error.message
        );
    }
}

/// No process whose command line holds `marker` is left.
fn assert_no_process(marker: &str) {
    let left: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .map(|cmd| String::from_utf8_lossy(&cmd).replace('\0', " "))
        .filter(|cmd| cmd.contains(marker))
        .collect();
    assert!(left.is_empty(), "still running: {left:?}");
}

/// A `timeout:` shorter than the agent's shell command ends `max_duration` and kills the CLI
/// and the command it started.
fn times_out_and_kills_the_tree(kind: HarnessKind, marker: &str) {
    if !installed(kind) {
        return;
    }
    let script = format!("steps:\n  - shell: {marker}; echo late\n");
    let tmp = suite(kind, &script, "\n    timeout: 4s");
    let (output, _, out) = run_suite(tmp.path(), &[]);
    let record = only_record(&out);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(record["status"], "max_duration", "{record:#}");
    assert_eq!(record["error"]["code"], "timeout");
    assert_no_process(marker);
}

#[test]
fn claude_code_timeout_kills_its_whole_tree() {
    times_out_and_kills_the_tree(HarnessKind::ClaudeCode, "sleep 47.1");
}

/// What Codex unpacks into its home of its own (its system skills) is gone from the trial
/// folder after the trial; its session stays; `--keep-homes` keeps the whole home.
#[test]
fn codex_home_is_pruned_of_its_bundled_skills_unless_kept() {
    if !installed(HarnessKind::Codex) {
        return;
    }
    let tmp = suite(HarnessKind::Codex, WRITE_SHOW_DONE, "");
    let work = tmp.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    for (out, keep) in [("pruned", false), ("kept", true)] {
        let mut command = deltabench(tmp.path());
        command.args(["run", "suite.yaml", "--out", out, "--workdir"]);
        command.arg(&work);
        if keep {
            command.arg("--keep-homes");
        }
        let output = command.output().unwrap();
        let out = tmp.path().join(out);
        assert_eq!(only_record(&out)["outcome"], "pass", "{}", stderr(&output));
        let home = trial_dir(&out).join("home/.codex");
        assert_eq!(home.join("skills/.system").exists(), keep, "{out:?}");
        assert!(home.join("sessions").is_dir(), "the session stays: {out:?}");
    }
}

#[test]
fn codex_timeout_kills_its_whole_tree() {
    times_out_and_kills_the_tree(HarnessKind::Codex, "sleep 47.2");
}

#[test]
fn gemini_cli_timeout_kills_its_whole_tree() {
    times_out_and_kills_the_tree(HarnessKind::GeminiCli, "sleep 47.3");
}

#[test]
fn opencode_timeout_kills_its_whole_tree() {
    times_out_and_kills_the_tree(HarnessKind::Opencode, "sleep 47.4");
}

#[test]
fn mini_swe_agent_timeout_kills_its_whole_tree() {
    times_out_and_kills_the_tree(HarnessKind::MiniSweAgent, "sleep 47.5");
}

/// Aborting the handle while the CLI's shell command runs resolves `aborted`, tree gone.
#[tokio::test(flavor = "multi_thread")]
async fn aborting_a_real_cli_mid_tool_call_kills_its_tree() {
    use futures::StreamExt;
    let kind = HarnessKind::GeminiCli;
    if !installed(kind) {
        return;
    }
    let tmp = temp_dir();
    let (workspace, _) = git_repo(tmp.path(), &[("README.md", "# demo\n")]);
    let marker = "sleep 53.3";
    let script = Script::parse(
        &format!("steps:\n  - shell: {marker}; echo late\n"),
        Path::new("model.yaml"),
    )
    .unwrap();
    let server = ScriptedServer::start(script, "127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let agent = HarnessAgent::new(
        "a",
        kind,
        cli(kind).config(&server.url()),
        find_program(kind, None).unwrap(),
        workspace,
        tmp.path().to_owned(),
        Some(server.url()),
    );
    let mut handle = agent.run(CodingTask::from("Wait for a while."));
    while let Some(event) = handle.next().await {
        if let Ok(deltabench::agent::StreamEvent::ToolCall { .. }) = event {
            // The plug is pulled once the shell command runs.
            crate::common::wait_until_async(
                std::time::Duration::from_secs(60),
                "the agent's shell command running",
                || crate::common::descendant_running(std::process::id(), &["sleep", "53.3"]),
            )
            .await;
            handle.abort();
        }
    }
    let result = handle.await;
    assert_eq!(result.status, CodingStatus::Aborted, "{:?}", result.error);
    assert_no_process(marker);
    server.stop().await;
}

/// Under `isolation: sandbox` the CLI runs in bubblewrap, its installation readable (a venv's
/// Python too), and reaches its model through the gateway with nothing else on the network
/// (`network: model`, the default for an agent whose calls pass the gateway).
fn runs_inside_the_sandbox(kind: HarnessKind) {
    runs_inside_the_sandbox_with(kind, "");
}

/// [`runs_inside_the_sandbox`] with more agent keys (`extra`).
fn runs_inside_the_sandbox_with(kind: HarnessKind, extra: &str) {
    if !installed(kind) {
        return;
    }
    let tmp = suite(kind, WRITE_SHOW_DONE, extra);
    let path = tmp.path().join("suite.yaml");
    let yaml = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        yaml.replace("    verify:", "    isolation: sandbox\n    verify:"),
    )
    .unwrap();
    let (output, _, out) = run_suite(tmp.path(), &[]);
    let record = only_record(&out);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(record["outcome"], "pass", "{record:#}");
    let spawn = &events(&out)[0];
    assert!(
        spawn["message"]
            .as_str()
            .unwrap()
            .starts_with("in the sandbox: "),
        "{spawn}"
    );
    // Every model call went through the gateway, the only address the CLI had.
    assert_eq!(record["usage_source"], "gateway", "{record:#}");
    assert!(
        record["gateway_usage"]["model_calls"].as_u64().unwrap() >= 2,
        "{kind}: {record:#}"
    );
}

#[test]
fn every_cli_runs_inside_the_sandbox() {
    if !crate::common::have_bwrap("every_cli_runs_inside_the_sandbox") {
        return;
    }
    for &kind in HarnessKind::ALL {
        runs_inside_the_sandbox(kind);
    }
}

/// Config errors in a CLI agent stop the run before anything starts, naming the place.
#[test]
fn bad_cli_agent_configs_exit_2_with_the_location() {
    let cases: [(&str, &str, &str); 9] = [
        (
            "kind: claude-code\n    permission_mode: yolo",
            "",
            "suite.yaml:11:22: unknown permission_mode 'yolo' for claude-code. Valid modes: bypassPermissions, acceptEdits, default, plan, dontAsk, auto",
        ),
        (
            "kind: codex\n    endpoint: localhost:8765",
            "",
            "suite.yaml:11:15: endpoint 'localhost:8765' is neither a URL (http://HOST:PORT, the server root) nor `scripted:PATH`",
        ),
        (
            "kind: opencode\n    endpoint: scripted:missing.yaml",
            "",
            "missing.yaml does not exist",
        ),
        (
            "kind: gemini-cli\n    endpoint: scripted:model.yaml",
            "steps:\n  - text: hi\n    write: {path: a, content: b}\n    shell: ls\n",
            "model.yaml:4:12: step 0: a step takes at most one action",
        ),
        (
            "kind: mini-swe-agent\n    binary: /nonexistent/mini",
            "",
            "suite.yaml:11:13: `binary: /nonexistent/mini`: /nonexistent/mini is not a file",
        ),
        (
            "kind: claude-code\n    args: [--bare, --output-format=text]",
            "",
            "suite.yaml:11:11: `args` may not hold '--output-format=text': deltabench passes --output-format to claude-code itself (deltabench reads this output format)",
        ),
        (
            "kind: mini-swe-agent\n    append_system_prompt: Be brief.",
            "",
            "suite.yaml:11:27: `append_system_prompt` does not apply to agent 'a' of kind 'mini-swe-agent' (mini-swe-agent has no system prompt to add to)",
        ),
        (
            "kind: codex\n    endpoint: http://127.0.0.1:9",
            "",
            "suite.yaml:11:15: codex with an `endpoint:` needs `model:` too",
        ),
        (
            "kind: gemini-cli\n    endpoint: https://llm.example.invalid",
            "",
            "agent 'a' (gemini-cli) has no API key for https://llm.example.invalid",
        ),
    ];
    // A CLI's config is checked once its program is found.
    let kinds = [
        HarnessKind::ClaudeCode,
        HarnessKind::Codex,
        HarnessKind::Opencode,
        HarnessKind::GeminiCli,
        HarnessKind::MiniSweAgent,
    ];
    let missing = kinds.into_iter().filter(|&kind| !installed(kind)).count();
    if missing > 0 {
        return;
    }
    for (agent, script, wanted) in cases {
        if agent.contains("example.invalid") && std::env::var_os("GEMINI_API_KEY").is_some() {
            continue;
        }
        let tmp = temp_dir();
        git_repo(tmp.path(), &[("README.md", "# demo\n")]);
        if !script.is_empty() {
            write_files(tmp.path(), &[("model.yaml", script)]);
        }
        write_suite(
            tmp.path(),
            &format!(
                "name: agents
repo: repo
tasks:
  - id: hello
    base: main
    instruction: Create hello.txt.
    verify: test -f hello.txt
agents:
  a:
    {agent}
"
            ),
        );
        // `kind:` is on line 10, the key under test on line 11.
        let (output, _, out) = run_suite(tmp.path(), &[]);
        let err = stderr(&output);
        assert_eq!(output.status.code(), Some(2), "{agent}: {err}");
        if wanted.starts_with("agent 'a'") {
            assert!(err.contains("hint: set `api_key:`"), "{err}");
        }
        assert!(err.contains(wanted), "{agent}: wanted {wanted:?} in\n{err}");
        if !script.is_empty() {
            assert!(
                err.contains("hint: `deltabench model serve --help`"),
                "{err}"
            );
        }
        assert!(!out.join("trials.jsonl").exists(), "{agent}: a trial ran");
    }
}

/// A sandboxed agent told `network: none` cannot reach its model: refused before any trial.
#[test]
fn a_sandboxed_cli_with_no_network_cannot_reach_its_model() {
    let tmp = suite(
        HarnessKind::ClaudeCode,
        WRITE_SHOW_DONE,
        "\n    network: none",
    );
    let path = tmp.path().join("suite.yaml");
    let yaml = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        yaml.replace("    verify:", "    isolation: sandbox\n    verify:"),
    )
    .unwrap();
    let (output, _, out) = run_suite(tmp.path(), &[]);
    let err = stderr(&output);
    if !installed(HarnessKind::ClaudeCode) {
        return;
    }
    assert_eq!(output.status.code(), Some(2), "{err}");
    crate::common::assert_tmp_snapshot!(
        "network_none_cannot_reach_the_scripted_model",
        tmp.path(),
        err
    );
    assert!(!out.join("trials.jsonl").exists());
}

/// The shipped smoke suite: every CLI against the scripted model, all pass.
#[test]
fn the_smoke_suite_passes_with_every_cli() {
    if !HarnessKind::ALL.iter().copied().all(installed) {
        return;
    }
    let tmp = temp_dir();
    let suite = Path::new(env!("CARGO_MANIFEST_DIR")).join("suites/smoke");
    let output = deltabench(tmp.path())
        .arg("run")
        .arg(&suite)
        .args(["--workdir", "."])
        .args(["--out", "out"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let records = trials(&tmp.path().join("out"));
    assert_eq!(records.len(), HarnessKind::ALL.len());
    for record in &records {
        assert_eq!(record["outcome"], "pass", "{record:#}");
    }
}
