//! Every trial's `trajectory.json` is valid ATIF by Harbor's own validator, for the built-in
//! agents here and for the real CLIs in `agents.rs`; a `command` agent's `$DELTABENCH_EVENTS`
//! reaches the events, usage and trajectory, and never the verdict.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

use crate::common::{git_repo, have_tool, run_suite, stderr, temp_dir, trials, write_files};

/// The Python with Harbor's trajectory validator: `$DELTABENCH_HARBOR_PYTHON`, the venv
/// `.ci/install` makes, or `python3`.
fn harbor_python() -> Option<PathBuf> {
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".cache")));
    let candidates = [
        std::env::var_os("DELTABENCH_HARBOR_PYTHON").map(PathBuf::from),
        cache.map(|dir| dir.join("deltabench/harbor/bin/python")),
        Some(PathBuf::from("python3")),
    ];
    candidates.into_iter().flatten().find(|python| {
        Command::new(python)
            .args(["-c", "import harbor.utils.trajectory_validator"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    })
}

/// Runs Harbor's `TrajectoryValidator` on every trial's `trajectory.json` under `out` and fails
/// with its errors. Returns false (after [`have_tool`]) when Harbor is not installed.
pub fn validate_with_harbor(test: &str, out: &Path) -> bool {
    let Some(python) = harbor_python() else {
        return have_tool(
            test,
            "the `harbor` package's ATIF validator (.ci/install puts harbor==0.26.0 in a venv under ~/.cache/deltabench/harbor; or set DELTABENCH_HARBOR_PYTHON)",
            false,
        );
    };
    let files: Vec<PathBuf> = trials(out)
        .iter()
        .map(|record| {
            out.join("trials")
                .join(record["task"].as_str().unwrap())
                .join(record["agent"].as_str().unwrap())
                .join(record["trial"].to_string())
                .join("trajectory.json")
        })
        .collect();
    assert!(!files.is_empty(), "no trials under {}", out.display());
    let script = "\
import sys
from harbor.utils.trajectory_validator import TrajectoryValidator
bad = 0
for path in sys.argv[1:]:
    validator = TrajectoryValidator()
    if not validator.validate(path):
        bad += 1
        print(path)
        for error in validator.get_errors():
            print('  ' + error)
print(f'{len(sys.argv) - 1 - bad} valid, {bad} invalid')
sys.exit(1 if bad else 0)
";
    let done = Command::new(&python)
        .arg("-c")
        .arg(script)
        .args(&files)
        .output()
        .unwrap();
    assert!(
        done.status.success(),
        "Harbor's validator rejected trajectories:\n{}{}",
        String::from_utf8_lossy(&done.stdout),
        String::from_utf8_lossy(&done.stderr)
    );
    true
}

fn json_file(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

/// A command agent that fixes the file and reports a model, a turn, a malformed line and usage.
const REPORTER: &str = r#"#!/bin/sh
echo fixed > a.txt
cat >> "$DELTABENCH_EVENTS" <<'EOF'
{"type": "model", "name": "scripted-1"}
{"type": "message", "text": "I'll fix a.txt.", "reasoning": "it says broken"}
{"type": "tool_call", "id": "c1", "name": "bash", "args": {"command": "echo fixed > a.txt"}}
{"type": "tool_result", "id": "c1", "output": ""}
{"type": "usage", "input_tokens": 1200, "output_tokens": 40, "cache_read_tokens": 1000, "cost_usd": 0.25}
{"type": "message", "txt": "typo"}
{"type": "message", "text": "Done."}
{"type": "usage", "input_tokens": 300, "output_tokens": 10, "cost_usd": 0.05}
EOF
"#;

/// A command agent that changes nothing and claims every test passed, then swaps its events
/// file for a link to a file it should not be able to have read for it.
const LIAR: &str = r#"#!/bin/sh
cat >> "$DELTABENCH_EVENTS" <<'EOF'
{"type": "message", "text": "All tests pass. The task is complete."}
{"type": "tool_result", "output": "PASSED 100/100", "is_error": false}
{"type": "usage", "input_tokens": 99999999, "output_tokens": 1, "cost_usd": 1e308}
{"type": "usage", "input_tokens": 1, "cost_usd": 1e308}
EOF
"#;

const LINKER: &str = r#"#!/bin/sh
echo fixed > a.txt
rm -f "$DELTABENCH_EVENTS"
ln -s "$SECRET_EVENTS" "$DELTABENCH_EVENTS"
"#;

#[test]
fn every_built_in_agents_trajectory_is_valid_atif() {
    let test = "every_built_in_agents_trajectory_is_valid_atif";
    let tmp = temp_dir();
    let root = tmp.path();
    git_repo(root, &[("a.txt", "broken\n")]);
    let secret = root.join("secret-events.jsonl");
    write_files(
        root,
        &[
            ("reporter.sh", REPORTER),
            ("liar.sh", LIAR),
            ("linker.sh", LINKER),
            (
                "fix.patch",
                "--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-broken\n+fixed\n",
            ),
            (
                "secret-events.jsonl",
                "{\"type\": \"message\", \"text\": \"read through a symlink\"}\n",
            ),
        ],
    );
    let yaml = format!(
        r#"name: atif
repo: repo
agents:
  noop: {{kind: noop}}
  oracle: {{kind: oracle}}
  mock:
    kind: mock
    apply_writes: true
    responses:
      - {{type: system, subtype: init, message: "model m", data: {{model: mock-model}}}}
      - {{type: thinking, text: "a.txt is broken"}}
      - {{type: assistant, text: "fixing"}}
      - {{type: tool_call, id: w1, name: write, args: {{path: a.txt, content: "fixed\n"}}}}
      - {{type: tool_result, id: w1, name: write, result: {{ok: true}}}}
      - {{type: usage, usage: {{input_tokens: 10, output_tokens: 5, model_calls: 1, cost_usd: 0.001}}}}
      - {{type: unknown, raw: "raw noise"}}
      - {{type: result, status: completed, text: "fixed it"}}
  reporter: {{kind: command, run: ./reporter.sh}}
  liar: {{kind: command, run: ./liar.sh}}
  linker: {{kind: command, run: ./linker.sh, env: {{SECRET_EVENTS: "{}"}}}}
  silent: {{kind: command, run: "echo fixed > a.txt"}}
tasks:
  - id: fix
    instruction: write fixed into a.txt
    verify: "grep -q fixed a.txt"
    solution: fix.patch
"#,
        secret.display()
    );
    std::fs::write(root.join("suite.yaml"), yaml).unwrap();
    for script in ["reporter.sh", "liar.sh", "linker.sh"] {
        let status = Command::new("chmod")
            .arg("+x")
            .arg(root.join(script))
            .status()
            .unwrap();
        assert!(status.success());
    }
    let (output, _, out) = run_suite(root, &[]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let records = trials(&out);
    let record = |agent: &str| -> &Value {
        records
            .iter()
            .find(|r| r["agent"] == agent)
            .unwrap_or_else(|| panic!("no {agent} in {records:?}"))
    };
    let dir = |agent: &str| out.join("trials/fix").join(agent).join("1");
    for (agent, outcome) in [
        ("noop", "fail"),
        ("oracle", "pass"),
        ("mock", "pass"),
        ("reporter", "pass"),
        ("liar", "fail"),
        ("linker", "pass"),
        ("silent", "pass"),
    ] {
        assert_eq!(
            record(agent)["outcome"],
            outcome,
            "{agent}: {:#}",
            record(agent)
        );
        let trajectory = json_file(&dir(agent).join("trajectory.json"));
        assert_eq!(trajectory["schema_version"], "ATIF-v1.7");
        assert_eq!(trajectory["steps"][0]["source"], "user");
        assert_eq!(trajectory["steps"][0]["message"], "write fixed into a.txt");
        assert_eq!(trajectory["session_id"], record(agent)["session_id"]);
        assert_eq!(trajectory["agent"]["extra"]["deltabench_agent"], agent);
    }

    // noop: no events at all, still the instruction and final metrics.
    let noop = json_file(&dir("noop").join("trajectory.json"));
    assert_eq!(noop["steps"].as_array().unwrap().len(), 1, "{noop:#}");
    assert_eq!(noop["final_metrics"]["total_steps"], 1);

    // mock: one agent turn with its reasoning, call, result and metrics; the closing text.
    let mock = json_file(&dir("mock").join("trajectory.json"));
    assert_eq!(mock["agent"]["model_name"], "mock-model");
    let turn = mock["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["source"] == "agent")
        .unwrap();
    assert_eq!(turn["reasoning_content"], "a.txt is broken");
    assert_eq!(turn["tool_calls"][0]["tool_call_id"], "w1");
    assert_eq!(turn["observation"]["results"][0]["source_call_id"], "w1");
    assert_eq!(turn["metrics"]["prompt_tokens"], 10);
    assert!(mock["notes"].as_str().unwrap().contains("1 event(s)"));

    // reporter: its events reach events.jsonl, the usage and the trajectory; the bad line is
    // named in a warning and in result.json, and the trial still passes on its delta.
    let reporter = record("reporter");
    assert_eq!(reporter["usage"]["input_tokens"], 1500);
    assert_eq!(reporter["usage"]["output_tokens"], 50);
    assert_eq!(reporter["usage"]["cache_read_tokens"], 1000);
    assert_eq!(reporter["usage"]["model_calls"], 2);
    assert!((reporter["usage"]["cost_usd"].as_f64().unwrap() - 0.30).abs() < 1e-9);
    assert!(
        !reporter["usage"]["cost_estimated"]
            .as_bool()
            .unwrap_or(false)
    );
    let events = std::fs::read_to_string(dir("reporter").join("events.jsonl")).unwrap();
    assert!(events.contains("\"type\":\"tool_call\""), "{events}");
    assert!(
        events.contains("$DELTABENCH_EVENTS (agent-events.jsonl): line 6: unknown field `txt`"),
        "{events}"
    );
    let result = json_file(&dir("reporter").join("result.json"));
    let problems = &result["result"]["output"]["metadata"]["agent_events_problems"];
    assert!(
        problems[0].as_str().unwrap().starts_with("line 6:"),
        "{problems}"
    );
    let traj = json_file(&dir("reporter").join("trajectory.json"));
    assert_eq!(traj["agent"]["model_name"], "scripted-1");
    let agent_steps: Vec<&Value> = traj["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["source"] == "agent")
        .collect();
    assert_eq!(agent_steps.len(), 2, "{traj:#}");
    assert_eq!(agent_steps[0]["metrics"]["prompt_tokens"], 2200);
    assert_eq!(agent_steps[1]["message"], "Done.");
    assert_eq!(traj["final_metrics"]["total_prompt_tokens"], 2500);
    assert_eq!(traj["final_metrics"]["total_completion_tokens"], 50);

    // liar: its claims are in the trajectory, its verdict is the workspace's; a cost that does
    // not sum to a number is refused.
    let liar = record("liar");
    assert_eq!(liar["reason"], "verify exited 1", "{liar:#}");
    assert_eq!(liar["diff"]["files"], 0);
    assert!(liar["usage"]["cost_usd"].as_f64().unwrap() <= 1e308);
    let events = std::fs::read_to_string(dir("liar").join("events.jsonl")).unwrap();
    assert!(events.contains("is not a finite number"), "{events}");

    // linker: the symlink is refused, never followed.
    let events = std::fs::read_to_string(dir("linker").join("events.jsonl")).unwrap();
    assert!(!events.contains("read through a symlink"), "{events}");
    assert!(events.contains("a symlink is refused"), "{events}");
    // silent: nothing reported, no file left behind.
    assert!(!dir("silent").join("agent-events.jsonl").exists());

    validate_with_harbor(test, &out);
}

/// Confined (`task` holds the task's isolation or environment keys), a command agent still
/// reports through `$DELTABENCH_EVENTS`: the file is in its home, the one trial folder it can
/// write.
fn reports_when_confined(test: &str, task: &str) {
    let tmp = temp_dir();
    let root = tmp.path();
    git_repo(root, &[("a.txt", "broken\n")]);
    write_files(
        root,
        &[(
            "report.sh",
            "#!/bin/sh\necho fixed > a.txt\n\
             echo '{\"type\": \"message\", \"text\": \"from inside\"}' >> \"$DELTABENCH_EVENTS\"\n\
             echo '{\"type\": \"usage\", \"input_tokens\": 5, \"output_tokens\": 1}' >> \"$DELTABENCH_EVENTS\"\n",
        )],
    );
    let status = Command::new("chmod")
        .arg("+x")
        .arg(root.join("report.sh"))
        .status()
        .unwrap();
    assert!(status.success());
    std::fs::write(
        root.join("suite.yaml"),
        format!(
            "name: confined\nrepo: repo\nagents:\n  reporter: {{kind: command, run: ./report.sh, timeout: 2m}}\ntasks:\n  - id: fix\n    instruction: write fixed into a.txt\n    verify: \"grep -q fixed a.txt\"\n{task}"
        ),
    )
    .unwrap();
    let (output, _, out) = run_suite(root, &[]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let record = &trials(&out)[0];
    assert_eq!(record["outcome"], "pass", "{record:#}");
    assert_eq!(record["usage"]["input_tokens"], 5, "{record:#}");
    let dir = out.join("trials/fix/reporter/1");
    assert!(dir.join("home/agent-events.jsonl").is_file());
    let trajectory = json_file(&dir.join("trajectory.json"));
    assert!(
        trajectory["steps"].to_string().contains("from inside"),
        "{trajectory:#}"
    );
    validate_with_harbor(test, &out);
}

#[test]
fn a_sandboxed_command_agent_reports_its_events() {
    let test = "a_sandboxed_command_agent_reports_its_events";
    if crate::common::have_bwrap(test) {
        reports_when_confined(test, "    isolation: sandbox\n");
    }
}

#[test]
fn a_contained_command_agent_reports_its_events() {
    let test = "a_contained_command_agent_reports_its_events";
    if crate::environments::have_podman_image(test) {
        reports_when_confined(
            test,
            &format!(
                "    environment: {{image: {}}}\n",
                crate::environments::BASE
            ),
        );
    }
}
