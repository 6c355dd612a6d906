//! `run --record` and `run --replay`: real CLIs recorded against the scripted endpoint, then
//! answered from the recording with their endpoint pointed at a port that must never be called.

use std::net::TcpListener;
use std::path::Path;

use deltabench::agent::harness::HarnessKind;
use serde_json::Value;

use crate::agents::{WRITE_SHOW_DONE, cli, installed};
use crate::common::{deltabench, git_repo, stderr, temp_dir, trials, write_files};

fn suite_yaml(instruction: &str) -> String {
    format!(
        "name: replay
repo: repo
tasks:
  - id: hello
    base: main
    instruction: {instruction}
    verify: grep -q 'hello from the script' hello.txt
"
    )
}

const INSTRUCTION: &str = "Create hello.txt with a greeting, then show it.";

/// The model says the workspace path (in its text, a tool call's arguments and a command) in
/// streams of one character a piece, so the path is split at every position, as a provider may
/// split it anywhere.
const SPLIT_PATH: &str = "\
split: 1
steps:
  - text: I'll create hello.txt in {cwd}.
    write: {path: hello.txt, content: \"hello from the script\\n\"}
  - shell: cat {cwd}/hello.txt
  - text: Done in {cwd}.
";

/// A suite folder with `agents.yaml` (the scripted endpoint following `script`) and
/// `offline.yaml` (the same agent pointed at `dead`).
fn setup(kind: HarnessKind, script: &str, dead: &str) -> tempfile::TempDir {
    let tmp = temp_dir();
    git_repo(tmp.path(), &[("README.md", "# demo\n")]);
    let agent = |endpoint: &str| {
        format!(
            "agents:\n  a:\n    kind: {kind}\n    endpoint: {endpoint}\n    {}\n",
            cli(kind).yaml()
        )
    };
    write_files(
        tmp.path(),
        &[
            ("model.yaml", script),
            ("suite.yaml", &suite_yaml(INSTRUCTION)),
            ("agents.yaml", &agent("scripted:model.yaml")),
            ("offline.yaml", &agent(dead)),
        ],
    );
    tmp
}

fn run(root: &Path, args: &[&str]) -> std::process::Output {
    let work = root.join("work");
    std::fs::create_dir_all(&work).unwrap();
    deltabench(root)
        .args(["run", "--workdir"])
        .arg(&work)
        .args(args)
        .output()
        .unwrap()
}

/// Replays the recording `rec` with the agent of `offline.yaml` into `out`.
/// Runs the suite with `agents.yaml` (the endpoint up), recording into `rec`.
fn record(root: &Path) -> std::process::Output {
    run(
        root,
        &[
            "suite.yaml",
            "--agents",
            "agents.yaml",
            "--record",
            "--out",
            "rec",
        ],
    )
}

fn replay_offline(root: &Path, out: &str) -> std::process::Output {
    run(
        root,
        &[
            "suite.yaml",
            "--agents",
            "offline.yaml",
            "--replay",
            "rec",
            "--out",
            out,
        ],
    )
}

fn only(out: &Path) -> Value {
    let records = trials(out);
    assert_eq!(records.len(), 1, "{records:?}");
    records.into_iter().next().unwrap()
}

fn read(path: impl AsRef<Path>) -> String {
    std::fs::read_to_string(path.as_ref())
        .unwrap_or_else(|e| panic!("{}: {e}", path.as_ref().display()))
}

/// Records a trial, replays it offline (same diff, verdict and counted usage, the endpoint
/// never called), then replays it with another instruction: the first request differs.
fn records_and_replays(kind: HarnessKind) {
    if !installed(kind) {
        return;
    }
    let (tmp, dead) = recorded_and_replayed(kind, WRITE_SHOW_DONE);
    let root = tmp.path();

    // Another instruction: the first request is not the recorded one.
    write_files(
        root,
        &[(
            "suite.yaml",
            &suite_yaml("Create hello.txt with a farewell."),
        )],
    );
    let mismatch = replay_offline(root, "bad");
    let bad = only(&root.join("bad"));
    // Not scored: the run left its recording, so its delta measures nothing recorded.
    assert_eq!(bad["outcome"], "infra_error", "{bad:#}");
    assert_eq!(mismatch.status.code(), Some(3), "{}", stderr(&mismatch));
    assert_eq!(bad["status"], "error", "{bad:#}\n{}", stderr(&mismatch));
    let error = bad["error"].to_string();
    // The first request that holds the instruction (a CLI's side calls may come before it).
    assert!(error.contains("replay: request "), "{error}");
    assert!(error.contains("nearest is recorded request "), "{error}");
    assert!(
        error.contains("with a greeting, then show it.") && error.contains("with a farewell."),
        "the diff shows what differs: {error}"
    );
    assert!(
        dead.accept().is_err(),
        "the replay called the agent's endpoint"
    );
}

/// A workspace path split across a stream's events is recorded whole as a placeholder and
/// replayed as the replay's own path: same diff and verdict with the endpoint stopped.
fn replays_a_split_path(kind: HarnessKind) {
    if !installed(kind) {
        return;
    }
    let (tmp, _dead) = recorded_and_replayed(kind, SPLIT_PATH);
    let calls = read(tmp.path().join("rec/trials/hello/a/1/model-calls.jsonl"));
    // The model's text, as the CLI sends it back, and a streamed piece: the path whole.
    assert!(
        calls.contains("I'll create hello.txt in <workspace>."),
        "{calls}"
    );
    let pieces = calls
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|c| c["response"].as_str().unwrap().contains("\"<workspace>\""))
        .count();
    assert!(pieces > 0, "{calls}");
}

/// The suite of `script` recorded with `kind`, then replayed offline (its endpoint a port that
/// must not be called): same diff, verdict and counted usage. The suite folder and the port.
fn recorded_and_replayed(kind: HarnessKind, script: &str) -> (tempfile::TempDir, TcpListener) {
    // A listener nobody answers: a call to it would be seen as a pending connection.
    let dead = TcpListener::bind("127.0.0.1:0").unwrap();
    dead.set_nonblocking(true).unwrap();
    let dead_url = format!("http://{}", dead.local_addr().unwrap());
    let tmp = setup(kind, script, &dead_url);
    let root = tmp.path();

    let recorded = record(root);
    let rec = only(&root.join("rec"));
    assert_eq!(
        recorded.status.code(),
        Some(0),
        "{}\n{rec:#}",
        stderr(&recorded)
    );
    assert_eq!(rec["outcome"], "pass", "{rec:#}");
    let calls_file = root.join("rec/trials/hello/a/1/model-calls.jsonl");
    let calls: Vec<Value> = read(&calls_file)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(!calls.is_empty(), "{calls:#?}");
    let text = read(&calls_file);
    assert!(!text.contains("sk-deltabench-local"), "a key was recorded");
    // Claude Code and Codex state their working directory in the prompt.
    assert!(
        !matches!(kind, HarnessKind::ClaudeCode | HarnessKind::Codex)
            || text.contains("<workspace>"),
        "the workspace is a placeholder"
    );
    assert!(
        calls
            .iter()
            .all(|c| c["status"] == 200 && c["response"].is_string())
    );

    // Recording the replay too: it records the same calls again.
    let replayed = run(
        root,
        &[
            "suite.yaml",
            "--agents",
            "offline.yaml",
            "--replay",
            "rec",
            "--record",
            "--out",
            "rep",
        ],
    );
    let rep = only(&root.join("rep"));
    let again = read(root.join("rep/trials/hello/a/1/model-calls.jsonl"));
    assert_eq!(again.lines().count(), calls.len(), "{again}");
    assert_eq!(
        replayed.status.code(),
        Some(0),
        "{}\n{rep:#}",
        stderr(&replayed)
    );
    assert_eq!(rep["outcome"], rec["outcome"], "{rep:#}");
    assert_eq!(rep["status"], rec["status"], "{rep:#}");
    assert_eq!(
        read(root.join("rep/trials/hello/a/1/diff.patch")),
        read(root.join("rec/trials/hello/a/1/diff.patch"))
    );
    assert_eq!(rep["gateway_usage"], rec["gateway_usage"]);
    assert!(
        dead.accept()
            .is_err_and(|e| e.kind() == std::io::ErrorKind::WouldBlock),
        "the replay called the agent's endpoint"
    );
    (tmp, dead)
}

#[test]
fn claude_code_is_recorded_and_replayed_offline() {
    records_and_replays(HarnessKind::ClaudeCode);
}

#[test]
fn codex_is_recorded_and_replayed_offline() {
    records_and_replays(HarnessKind::Codex);
}

#[test]
fn claude_code_replays_a_workspace_path_split_across_events() {
    replays_a_split_path(HarnessKind::ClaudeCode);
}

#[test]
fn codex_replays_a_workspace_path_split_across_events() {
    replays_a_split_path(HarnessKind::Codex);
}

#[test]
fn gemini_cli_replays_a_workspace_path_split_across_events() {
    replays_a_split_path(HarnessKind::GeminiCli);
}

#[test]
fn opencode_replays_a_workspace_path_split_across_events() {
    replays_a_split_path(HarnessKind::Opencode);
}

#[test]
fn gemini_cli_is_recorded_and_replayed_offline() {
    records_and_replays(HarnessKind::GeminiCli);
}

#[test]
fn opencode_is_recorded_and_replayed_offline() {
    records_and_replays(HarnessKind::Opencode);
}

#[test]
fn mini_swe_agent_is_recorded_and_replayed_offline() {
    records_and_replays(HarnessKind::MiniSweAgent);
}

#[test]
fn aider_is_recorded_and_replayed_offline() {
    records_and_replays(HarnessKind::Aider);
}

/// `--replay` of what holds no recording, or of another suite or agent config: exit 2 before
/// any trial.
#[test]
fn a_replay_without_a_matching_recording_exits_2() {
    let tmp = temp_dir();
    let root = tmp.path();
    git_repo(root, &[("README.md", "# demo\n")]);
    let command = |run: &str| {
        format!("agents:\n  c:\n    kind: command\n    run: {run}\n    gateway: true\n")
    };
    write_files(
        root,
        &[
            ("model.yaml", WRITE_SHOW_DONE),
            ("suite.yaml", &suite_yaml(INSTRUCTION)),
            ("agents.yaml", &command("'true'")),
            ("other.yaml", &command("'echo other'")),
        ],
    );
    let exits = |args: &[String], wanted: &str| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let output = run(root, &args);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{args:?}: {}",
            stderr(&output)
        );
        assert!(
            stderr(&output).contains(wanted),
            "{args:?}: {}",
            stderr(&output)
        );
        assert!(!root.join("out").exists(), "{args:?} ran a trial");
    };
    let replay = |from: &str, agents: &str| {
        vec![
            "suite.yaml",
            "--agents",
            agents,
            "--replay",
            from,
            "--out",
            "out",
        ]
        .into_iter()
        .map(str::to_owned)
        .collect::<Vec<_>>()
    };
    exits(&replay("repo", "agents.yaml"), "not a run directory");

    // A run without --record.
    let plain = run(
        root,
        &["suite.yaml", "--agents", "agents.yaml", "--out", "plain"],
    );
    assert!(
        root.join("plain/manifest.json").is_file(),
        "{}",
        stderr(&plain)
    );
    exits(&replay("plain", "agents.yaml"), "not made with --record");

    let rec = record(root);
    assert!(
        root.join("rec/trials/hello/c/1/model-calls.jsonl")
            .is_file(),
        "{}",
        stderr(&rec)
    );
    exits(
        &replay("rec", "other.yaml"),
        "agent 'c' is configured otherwise",
    );
    write_files(
        root,
        &[(
            "renamed.yaml",
            &suite_yaml(INSTRUCTION).replace("name: replay", "name: other"),
        )],
    );
    let mut args = replay("rec", "agents.yaml");
    args[0] = "renamed.yaml".into();
    exits(&args, "records suite 'replay', not 'other'");
}

/// A `command` agent through the gateway: its call is recorded and replayed; with another
/// instruction, request 1 differs and the trial ends `error` saying where.
#[test]
fn a_command_agents_calls_are_replayed_and_a_changed_instruction_is_its_error() {
    let test = "replay::a_command_agents_calls_are_replayed_and_a_changed_instruction_is_its_error";
    if !crate::common::have_command(test, "curl") {
        return;
    }
    let tmp = temp_dir();
    let root = tmp.path();
    git_repo(root, &[("README.md", "# demo\n")]);
    let run_line = r#"curl -sf -X POST "$ANTHROPIC_BASE_URL/v1/messages" -H 'content-type: application/json' -H 'anthropic-version: 2023-06-01' -d "{\"model\":\"m\",\"max_tokens\":100,\"messages\":[{\"role\":\"user\",\"content\":\"$DELTABENCH_INSTRUCTION\"}]}" > answer.json"#;
    let agent = |endpoint: &str| {
        format!(
            "agents:\n  c:\n    kind: command\n    gateway: true\n    endpoint: {endpoint}\n    run: {}\n",
            serde_json::to_string(run_line).unwrap()
        )
    };
    let dead = TcpListener::bind("127.0.0.1:0").unwrap();
    dead.set_nonblocking(true).unwrap();
    write_files(
        root,
        &[
            ("model.yaml", "steps:\n  - text: Done.\n"),
            ("suite.yaml", &suite_yaml(INSTRUCTION)),
            ("agents.yaml", &agent("scripted:model.yaml")),
            (
                "offline.yaml",
                &agent(&format!("http://{}", dead.local_addr().unwrap())),
            ),
        ],
    );
    let recorded = record(root);
    let rec = only(&root.join("rec"));
    assert_eq!(rec["status"], "completed", "{rec:#}\n{}", stderr(&recorded));
    let replayed = replay_offline(root, "rep");
    let rep = only(&root.join("rep"));
    assert_eq!(rep["status"], "completed", "{rep:#}\n{}", stderr(&replayed));
    assert_eq!(
        read(root.join("rep/trials/hello/c/1/diff.patch")),
        read(root.join("rec/trials/hello/c/1/diff.patch"))
    );
    let diff = read(root.join("rep/trials/hello/c/1/diff.patch"));
    assert!(diff.contains("answer.json"), "{diff}");
    write_files(root, &[("suite.yaml", &suite_yaml("Say farewell."))]);
    replay_offline(root, "bad");
    let bad = only(&root.join("bad"));
    assert_eq!(bad["status"], "error", "{bad:#}");
    assert_eq!(bad["outcome"], "infra_error", "{bad:#}");
    assert!(
        bad["infra_error"]
            .as_str()
            .unwrap()
            .starts_with("replay: request 1")
    );
    let error = bad["error"]["message"].as_str().unwrap();
    assert!(
        error.starts_with("replay: request 1 (POST /v1/messages) matches no recorded request; nearest is recorded request 1 of 1"),
        "{error}"
    );
    assert!(
        error.contains("/body/messages/0/content: \"Create hello.txt")
            && error.contains("\"Say farewell.\""),
        "{error}"
    );
    assert!(
        dead.accept()
            .is_err_and(|e| e.kind() == std::io::ErrorKind::WouldBlock)
    );
}
