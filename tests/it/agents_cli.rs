//! `kind: cli`: a CLI described in the suite alone. The equivalence test defines Claude Code
//! through a template and the stream-json parser, and runs it beside the built-in adapter on
//! the same scripted scenario: the same diff, verdict, usage and trajectory shape. A bad
//! definition exits 2 naming the file, line and column.

use std::path::Path;

use deltabench::agent::harness::{HarnessKind, find_program};
use serde_json::Value;

use crate::agents::{WRITE_SHOW_DONE, installed};
use crate::cli::{Cli, deltabench_snapshot};
use crate::common::{git_repo, run_suite, stderr, trials, write_files, write_suite};

/// Claude Code as the built-in adapter runs it (`src/agent/harness/invocation.rs`), written
/// out as a `kind: cli` definition.
fn claude_by_definition(command: &Path) -> String {
    format!(
        "kind: cli
    command: {}
    dialect: anthropic
    endpoint: scripted:model.yaml
    model: claude-sonnet-4-5
    args: [-p, --output-format, stream-json, --verbose, --permission-mode, bypassPermissions,
           --model, '{{model}}', --session-id, '{{session}}', --, '{{instruction}}']
    env:
      CLAUDE_CONFIG_DIR: '{{home}}/.claude'
      IS_SANDBOX: '1'
      CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1'
      DISABLE_AUTOUPDATER: '1'
      DISABLE_TELEMETRY: '1'
      DISABLE_ERROR_REPORTING: '1'
      CLAUDE_CODE_MAX_RETRIES: '0'
    output: {{parser: stream-json}}",
        command.display()
    )
}

fn suite_with(root: &Path, agents: &[(&str, String)]) {
    git_repo(root, &[("README.md", "# demo\n")]);
    write_files(root, &[("model.yaml", WRITE_SHOW_DONE)]);
    let agents: String = agents
        .iter()
        .map(|(name, body)| format!("  {name}:\n    {body}\n"))
        .collect();
    write_suite(
        root,
        &format!(
            "name: cli-kind
repo: repo
tasks:
  - id: hello
    base: main
    instruction: Create hello.txt with a greeting, then show it.
    verify: grep -q 'hello from the script' hello.txt
agents:
{agents}"
        ),
    );
}

fn record_of<'a>(records: &'a [Value], agent: &str) -> &'a Value {
    records
        .iter()
        .find(|r| r["agent"] == agent)
        .unwrap_or_else(|| panic!("no trial of {agent} in {records:#?}"))
}

/// The steps of a trajectory as (source, tool names, has metrics, results) tuples: its shape,
/// without the ids and times that differ between runs.
fn shape(trajectory: &Value) -> Vec<String> {
    trajectory["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|step| {
            let tools: Vec<&str> = step["tool_calls"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| c["function_name"].as_str())
                .collect();
            let results = step["observation"]["results"]
                .as_array()
                .map_or(0, Vec::len);
            format!(
                "{} tools={tools:?} results={results} metrics={}",
                step["source"].as_str().unwrap_or("?"),
                step.get("metrics").is_some()
            )
        })
        .collect()
}

#[test]
fn claude_code_defined_as_kind_cli_matches_the_built_in_adapter() {
    if !installed(HarnessKind::ClaudeCode) {
        return;
    }
    let program = find_program(HarnessKind::ClaudeCode, None).unwrap();
    let tmp = crate::common::temp_dir();
    suite_with(
        tmp.path(),
        &[
            (
                "builtin",
                "kind: claude-code
    endpoint: scripted:model.yaml
    model: claude-sonnet-4-5
    env: {CLAUDE_CODE_MAX_RETRIES: '0'}"
                    .to_owned(),
            ),
            ("declared", claude_by_definition(&program)),
        ],
    );
    let (output, _, out) = run_suite(tmp.path(), &[]);
    let records = trials(&out);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}\n{records:#?}",
        stderr(&output)
    );
    let (builtin, declared) = (
        record_of(&records, "builtin"),
        record_of(&records, "declared"),
    );
    for record in [builtin, declared] {
        assert_eq!(record["outcome"], "pass", "{record:#}");
        assert_eq!(record["status"], "completed", "{record:#}");
    }
    let trial = |agent: &str, file: &str| {
        std::fs::read_to_string(out.join("trials/hello").join(agent).join("1").join(file))
            .unwrap_or_else(|err| panic!("{agent}'s {file}: {err}"))
    };
    // The same change, byte for byte.
    assert_eq!(
        trial("builtin", "diff.patch"),
        trial("declared", "diff.patch")
    );
    assert!(trial("declared", "diff.patch").contains("+hello from the script"));
    // The same usage: the gateway's count and what the CLI itself reported (priced by it).
    for key in [
        "usage",
        "gateway_usage",
        "cli_usage",
        "usage_source",
        "diff",
    ] {
        assert_eq!(builtin[key], declared[key], "{key}");
    }
    assert_eq!(declared["cli_usage"]["input_tokens"], 3000, "{declared:#}");
    assert_eq!(declared["cli_usage"]["output_tokens"], 60, "{declared:#}");
    // The session is the one the template passed ({session}), as the CLI reported it.
    let session = declared["session_id"].as_str().unwrap();
    assert!(
        session.len() >= 8 && session != builtin["session_id"],
        "{session}"
    );
    // The same events, kind for kind, and the same trajectory shape.
    let kinds = |agent: &str| -> Vec<String> {
        trial(agent, "events.jsonl")
            .lines()
            .map(|line| serde_json::from_str::<Value>(line).unwrap())
            .filter(|e| e["type"] != "system")
            .map(|e| e["type"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(kinds("builtin"), kinds("declared"));
    let trajectory =
        |agent: &str| -> Value { serde_json::from_str(&trial(agent, "trajectory.json")).unwrap() };
    let (a, b) = (trajectory("builtin"), trajectory("declared"));
    assert_eq!(shape(&a), shape(&b));
    assert!(shape(&b).iter().any(|s| s.contains("Write")), "{b:#}");
    assert_eq!(a["final_metrics"], b["final_metrics"]);
    assert_eq!(b["session_id"], declared["session_id"]);
    crate::trajectory::validate_with_harbor("the kind: cli trajectory", &out);
}

/// A CLI of its own shape: a shell script that edits the workspace and prints JSON lines,
/// read at the fields its definition names, against the scripted endpoint through the gateway.
#[test]
fn a_json_lines_cli_reports_its_answer_session_and_usage() {
    let tmp = crate::common::temp_dir();
    write_files(
        tmp.path(),
        &[(
            "tool.sh",
            "#!/bin/sh\n\
             # Checks the template and the dialect's variables, then answers as JSON lines.\n\
             test \"$1\" = --task || exit 9\n\
             case \"$OPENAI_BASE_URL\" in http://127.0.0.1:*/v1) ;; *) echo \"bad url $OPENAI_BASE_URL\" >&2; exit 8;; esac\n\
             test -n \"$OPENAI_API_KEY\" || exit 7\n\
             echo 'hello from the script' > \"$4/hello.txt\"\n\
             echo '{\"event\":\"start\",\"meta\":{\"sid\":\"run-42\"}}'\n\
             echo 'progress text'\n\
             echo '{\"event\":\"end\",\"stats\":{\"prompt_tokens\":1500,\"completion_tokens\":30},\"answer\":\"wrote it\"}'\n",
        )],
    );
    let tool = tmp.path().join("tool.sh");
    std::process::Command::new("chmod")
        .arg("+x")
        .arg(&tool)
        .status()
        .unwrap();
    suite_with(
        tmp.path(),
        &[(
            "a",
            "kind: cli
    command: ./tool.sh
    dialect: openai
    endpoint: scripted:model.yaml
    args: [--task, '{instruction}', --dir, '{workspace}']
    price: {input: 3, output: 15}
    output: {parser: json-lines, result: answer, session_id: meta.sid, usage: stats}"
                .to_owned(),
        )],
    );
    let (output, _, out) = run_suite(tmp.path(), &[]);
    let records = trials(&out);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}\n{records:#?}",
        stderr(&output)
    );
    let record = record_of(&records, "a");
    assert_eq!(record["outcome"], "pass", "{record:#}");
    assert_eq!(record["session_id"], "run-42");
    assert_eq!(record["cli_usage"]["input_tokens"], 1500, "{record:#}");
    assert_eq!(record["cli_usage"]["output_tokens"], 30);
    let cost = record["cli_usage"]["cost_usd"].as_f64().unwrap();
    assert!((cost - 0.00495).abs() < 1e-9, "{cost}");
    let result: Value = serde_json::from_str(
        &std::fs::read_to_string(out.join("trials/hello/a/1/result.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(result["result"]["output"]["text"], "wrote it");
    crate::trajectory::validate_with_harbor("the json-lines kind: cli trajectory", &out);
}

/// Bad definitions stop before anything runs, exit 2, and name file:line:col.
#[test]
fn bad_cli_definitions_exit_2_with_the_location() {
    let cases = [
        (
            "cli_unknown_parser",
            "kind: cli\n    command: sh\n    dialect: openai\n    args: ['{instruction}']\n    output: {parser: xml}",
        ),
        (
            "cli_missing_command",
            "kind: cli\n    dialect: openai\n    args: ['{instruction}']\n    output: {parser: text}",
        ),
        (
            "cli_unknown_placeholder",
            "kind: cli\n    command: sh\n    dialect: openai\n    args: [-c, '{instruction}', '--in={worktree}']\n    output: {parser: text}",
        ),
        (
            "cli_unset_placeholder",
            "kind: cli\n    command: sh\n    dialect: openai\n    args: ['{instruction}', '--model={model}']\n    output: {parser: text}",
        ),
        (
            "cli_unknown_dialect",
            "kind: cli\n    command: sh\n    dialect: cohere\n    args: ['{instruction}']\n    output: {parser: text}",
        ),
        (
            "cli_field_of_another_parser",
            "kind: cli\n    command: sh\n    dialect: openai\n    args: ['{instruction}']\n    output: {parser: stream-json, result: text}",
        ),
        (
            "cli_no_instruction",
            "kind: cli\n    command: sh\n    dialect: openai\n    args: [-c, true]\n    output: {parser: text}",
        ),
    ];
    for (name, agent) in cases {
        let cli = Cli::new();
        std::fs::write(
            cli.path("suite.yaml"),
            format!(
                "name: bad\nrepo: .\ntasks:\n  - id: t\n    base: main\n    instruction: x\n    verify: 'true'\nagents:\n  a:\n    {agent}\n"
            ),
        )
        .unwrap();
        let output = deltabench_snapshot!(cli, name, &mut cli.command(&["run", "suite.yaml"]));
        assert_eq!(output.status.code(), Some(2), "{name}");
    }
}

/// `deltabench agents` on a tool dir holding the pinned Claude Code, an older Codex and the
/// pinned aider in a virtualenv: each kind's pin, and what is installed, where.
#[test]
fn agents_lists_the_pins_and_what_is_installed() {
    let cli = Cli::new();
    let tools = cli.path("tools");
    let npm = tools.join("npm/node_modules");
    let launcher = |path: &Path| {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, "#!/bin/sh\n").unwrap();
        std::process::Command::new("chmod")
            .arg("+x")
            .arg(path)
            .status()
            .unwrap();
    };
    for (package, program, version) in [
        ("@anthropic-ai/claude-code", "claude", "2.1.197"),
        ("@openai/codex", "codex", "0.170.2"),
    ] {
        std::fs::create_dir_all(npm.join(package)).unwrap();
        std::fs::write(
            npm.join(package).join("package.json"),
            format!("{{\"name\":\"{package}\",\"version\":\"{version}\"}}"),
        )
        .unwrap();
        launcher(&npm.join(".bin").join(program));
    }
    let venv = tools.join("venv");
    std::fs::create_dir_all(venv.join("lib/python3.11/site-packages/aider_chat-0.86.2.dist-info"))
        .unwrap();
    std::fs::write(venv.join("pyvenv.cfg"), "home = /usr/bin\n").unwrap();
    launcher(&venv.join("bin/aider"));
    let mut command = cli.command(&["agents"]);
    command
        .env("DELTABENCH_AGENT_TOOLS", &tools)
        .env("PATH", "/usr/bin:/bin");
    let output = deltabench_snapshot!(cli, "agents", &mut command);
    assert_eq!(output.status.code(), Some(0));
}

/// The pins `deltabench agents` shows are the ones `.ci/install-agents` installs.
#[test]
fn install_agents_installs_every_pinned_version() {
    let script =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(".ci/install-agents"))
            .unwrap();
    for &kind in HarnessKind::ALL {
        let package = kind.package().unwrap();
        let pin = match package.registry {
            deltabench::agent::harness::Registry::Npm => {
                format!("{}@{}", package.name, package.version)
            }
            deltabench::agent::harness::Registry::PyPi => {
                format!("{}=={}", package.name, package.version)
            }
        };
        assert!(
            script.contains(&pin),
            "{kind}: .ci/install-agents lacks {pin}"
        );
    }
}
