//! `deltabench report` reads a run directory alone: every format from a hand-written run, the
//! error paths, a torn last line, and one real run end to end.

use std::path::Path;
use std::process::Output;

use serde_json::{Value, json};

use crate::common::{
    deltabench, git_repo, run_suite, stderr, stdout, temp_dir, write_files, write_suite,
};

const AGENTS: [&str; 2] = ["alpha", "beta"];
const TASKS: [&str; 3] = ["t1", "t2", "t3"];

#[derive(Clone, Copy)]
enum Kind {
    Pass,
    Fail,
    /// A fail whose agent ended in an error (rate limited).
    AgentError,
    Infra,
}

/// One `trials.jsonl` record in the shape of `TrialRecord`, with fixed values.
fn record(task: &str, agent: &str, trial: u32, kind: Kind, duration_ms: u64) -> Value {
    let (outcome, passed, score, status, error, infra_error, verify_exit) = match kind {
        Kind::Pass => (
            "pass",
            true,
            json!(1.0),
            json!("completed"),
            Value::Null,
            Value::Null,
            json!(0),
        ),
        Kind::Fail => (
            "fail",
            false,
            json!(0.0),
            json!("completed"),
            Value::Null,
            Value::Null,
            json!(1),
        ),
        Kind::AgentError => (
            "fail",
            false,
            json!(0.0),
            json!("error"),
            json!({"message": "429 from the provider", "code": "rate_limited", "retry_after": 2.5}),
            Value::Null,
            json!(1),
        ),
        Kind::Infra => (
            "infra_error",
            false,
            Value::Null,
            Value::Null,
            Value::Null,
            json!("cannot provision a worktree workspace: no space left on device"),
            Value::Null,
        ),
    };
    let scored = !matches!(kind, Kind::Infra);
    // alpha reports usage and cost, beta does not.
    let usage = if scored && agent == "alpha" {
        json!({"input_tokens": 1200, "output_tokens": 340, "cost_usd": 0.0125})
    } else {
        Value::Null
    };
    json!({
        "task": task,
        "agent": agent,
        "trial": trial,
        "outcome": outcome,
        "passed": passed,
        "score": score,
        "metric": "delta",
        "status": status,
        "error": error,
        "infra_error": infra_error,
        "session_id": if scored { json!(format!("{agent}-{task}-{trial}")) } else { Value::Null },
        "diff": if scored { json!({"files": 1, "insertions": 2, "deletions": 1, "bytes": 120}) } else { Value::Null },
        "verify": if scored { json!({"exit_code": verify_exit, "timed_out": false, "duration_ms": 40}) } else { Value::Null },
        "usage": usage,
        "duration_ms": duration_ms,
        "agent_duration_ms": if scored { json!(duration_ms - 100) } else { Value::Null },
        "phases": [["provision", 1500], ["agent", 900_000], ["probe", 40_000], ["dispose", 800]],
        "started_at": "2025-01-02T03:04:05Z",
    })
}

/// The 12 records: alpha passes 5 of 6, beta passes 2 of 5 scored with one infra error.
fn records() -> Vec<Value> {
    let mut records = Vec::new();
    let mut n = 0;
    for task in TASKS {
        for agent in AGENTS {
            for trial in 1..=2u32 {
                let kind = match (agent, task, trial) {
                    ("alpha", "t2", 2) => Kind::Fail,
                    ("alpha", _, _) => Kind::Pass,
                    ("beta", "t1", 1) => Kind::AgentError,
                    ("beta", "t2", 1) => Kind::Infra,
                    ("beta", "t2", 2) | ("beta", "t3", 2) => Kind::Fail,
                    _ => Kind::Pass,
                };
                records.push(record(task, agent, trial, kind, 1_000 + 250 * n));
                n += 1;
            }
        }
    }
    records
}

fn manifest() -> Value {
    json!({
        "suite": "fixed",
        "suite_path": "/suites/fixed/suite.yaml",
        "suite_digest": "sha256:0000000000000000000000000000000000000000000000000000000000000000",
        "agents": {"alpha": {"kind": "noop"}, "beta": {"kind": "command", "run": "./agent.sh", "timeout": null, "env": {}}},
        "tasks": TASKS,
        "trials_per_task": 2,
        "jobs": 4,
        "planned_trials": 12,
        "deltabench_version": "0.0.0-test",
        "started_at": "2025-01-02T03:04:05Z",
        "finished_at": "2025-01-02T03:05:06Z",
        "host": "testhost",
        "workdir": "/dev/shm",
        "interrupted": false,
    })
}

fn jsonl(records: &[Value]) -> String {
    records
        .iter()
        .map(|r| serde_json::to_string(r).unwrap() + "\n")
        .collect()
}

/// Writes a run directory at `<root>/run` and returns it.
fn write_run(root: &Path) -> std::path::PathBuf {
    let run = root.join("run");
    std::fs::create_dir_all(run.join("trials")).unwrap();
    std::fs::write(
        run.join("manifest.json"),
        serde_json::to_string_pretty(&manifest()).unwrap(),
    )
    .unwrap();
    std::fs::write(run.join("trials.jsonl"), jsonl(&records())).unwrap();
    run
}

fn report(cwd: &Path, run: &Path, extra: &[&str]) -> Output {
    deltabench(cwd)
        .arg("report")
        .arg(run)
        .args(extra)
        .output()
        .unwrap()
}

/// `report --format FORMAT` of the fixed run; must succeed.
fn formatted(format: &str) -> String {
    let tmp = temp_dir();
    let run = write_run(tmp.path());
    let output = report(tmp.path(), &run, &["--format", format]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(output.stderr.is_empty(), "{}", stderr(&output));
    stdout(&output)
}

#[test]
fn report_table() {
    let text = formatted("table");
    assert!(text.contains("alpha"), "{text}");
    insta::assert_snapshot!(text);
}

#[test]
fn report_is_a_table_by_default() {
    let tmp = temp_dir();
    let run = write_run(tmp.path());
    let output = report(tmp.path(), &run, &[]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(stdout(&output), formatted("table"));
}

#[test]
fn report_markdown() {
    let text = formatted("markdown");
    assert!(
        text.contains("### Not scored (infrastructure errors)"),
        "{text}"
    );
    assert!(text.contains("no space left on device"), "{text}");
    insta::assert_snapshot!(text);
}

#[test]
fn report_csv() {
    let text = formatted("csv");
    // A header and one row per trial.
    assert_eq!(text.lines().count(), 13, "{text}");
    let mut reader = csv::Reader::from_reader(text.as_bytes());
    assert_eq!(reader.records().count(), 12);
    insta::assert_snapshot!(text);
}

#[test]
fn report_json() {
    let text = formatted("json");
    let value: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(value["trials"], 12);
    let agents = value["agents"].as_array().unwrap();
    let alpha = &agents[0];
    assert_eq!(alpha["agent"], "alpha");
    assert_eq!(
        (
            alpha["trials"].as_u64(),
            alpha["scored"].as_u64(),
            alpha["passed"].as_u64()
        ),
        (Some(6), Some(6), Some(5))
    );
    let beta = &agents[1];
    assert_eq!(beta["agent"], "beta");
    assert_eq!(
        (
            beta["trials"].as_u64(),
            beta["scored"].as_u64(),
            beta["passed"].as_u64(),
            beta["infra_errors"].as_u64()
        ),
        (Some(6), Some(5), Some(2), Some(1))
    );
    assert_eq!(beta["pass_rate"].as_f64(), Some(0.4));
    insta::assert_snapshot!(text);
}

#[test]
fn report_of_a_missing_dir_is_a_usage_error_with_a_hint() {
    let tmp = temp_dir();
    let missing = tmp.path().join("no-such-run");
    let output = report(tmp.path(), &missing, &[]);
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{err}");
    assert!(output.stdout.is_empty());
    assert!(err.contains(&missing.display().to_string()), "{err}");
    assert!(
        err.contains("hint: RUN_DIR is a folder written by `deltabench run`"),
        "{err}"
    );
    let root = regex::escape(&tmp.path().display().to_string());
    insta::with_settings!({filters => vec![(root.as_str(), "[TMP]")]}, {
        insta::assert_snapshot!(err);
    });
}

#[test]
fn report_of_a_dir_without_trials_is_a_usage_error() {
    let tmp = temp_dir();
    let run = write_run(tmp.path());
    std::fs::remove_file(run.join("trials.jsonl")).unwrap();
    let output = report(tmp.path(), &run, &[]);
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{err}");
    assert!(err.contains("trials.jsonl"), "{err}");
}

#[test]
fn unknown_format_is_a_usage_error() {
    let tmp = temp_dir();
    let run = write_run(tmp.path());
    let output = report(tmp.path(), &run, &["--format", "xml"]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
}

#[test]
fn output_flag_writes_the_file() {
    for format in ["table", "markdown", "csv", "json"] {
        let tmp = temp_dir();
        let run = write_run(tmp.path());
        let file = tmp.path().join(format!("report.{format}"));
        let output = report(
            tmp.path(),
            &run,
            &["--format", format, "-o", file.to_str().unwrap()],
        );
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        assert!(
            output.stdout.is_empty(),
            "{format}: stdout {}",
            stdout(&output)
        );
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            formatted(format),
            "{format}"
        );
    }
}

#[test]
fn output_to_an_unwritable_path_fails() {
    let tmp = temp_dir();
    let run = write_run(tmp.path());
    let file = tmp.path().join("no-such-dir/report.md");
    let output = report(
        tmp.path(),
        &run,
        &["--format", "markdown", "--output", file.to_str().unwrap()],
    );
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(1), "{err}");
    assert!(err.contains("cannot write"), "{err}");
}

#[test]
fn torn_last_line_is_skipped() {
    let tmp = temp_dir();
    let run = write_run(tmp.path());
    let whole = formatted("json");
    // A crash mid-write: half a record, no newline.
    let torn = serde_json::to_string(&record("t3", "beta", 3, Kind::Pass, 5_000)).unwrap();
    let mut text = jsonl(&records());
    text.push_str(&torn[..torn.len() / 2]);
    std::fs::write(run.join("trials.jsonl"), text).unwrap();
    for format in ["table", "markdown", "csv", "json"] {
        let output = report(tmp.path(), &run, &["--format", format]);
        assert_eq!(
            output.status.code(),
            Some(0),
            "{format}: {}",
            stderr(&output)
        );
        assert!(output.stderr.is_empty(), "{format}: {}", stderr(&output));
    }
    let output = report(tmp.path(), &run, &["--format", "json"]);
    assert_eq!(stdout(&output), whole);
}

#[test]
fn a_bad_line_before_the_last_is_an_error_naming_it() {
    let tmp = temp_dir();
    let run = write_run(tmp.path());
    let mut lines: Vec<String> = records()
        .iter()
        .map(|r| serde_json::to_string(r).unwrap())
        .collect();
    lines[4] = "{\"task\": \"t2\", \"agent\"".into();
    std::fs::write(run.join("trials.jsonl"), lines.join("\n") + "\n").unwrap();
    let output = report(tmp.path(), &run, &["--format", "json"]);
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{err}");
    assert!(err.contains("trials.jsonl:5: "), "{err}");
}

#[test]
fn real_run_reports_oracle_at_one_and_noop_at_zero() {
    let tmp = temp_dir();
    git_repo(tmp.path(), &[("a.txt", "a\n")]);
    write_files(tmp.path(), &[("solution/a.txt", "fixed\n")]);
    write_suite(
        tmp.path(),
        "name: e2e\nrepo: repo\ntasks:\n  - id: fix\n    instruction: write fixed into a.txt\n    solution: solution\n    verify: grep -q fixed a.txt\n",
    );
    let (output, _work, out) = run_suite(tmp.path(), &["--agent", "oracle", "--agent", "noop"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));

    let output = report(tmp.path(), &out, &["--format", "json"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let value: Value = serde_json::from_str(&stdout(&output)).unwrap();
    assert_eq!(value["suite"], "e2e");
    assert_eq!(value["trials"], 2);
    assert_eq!(value["planned_trials"], 2);
    assert_eq!(value["interrupted"], false);
    let agent = |name: &str| -> Value {
        value["agents"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["agent"] == name)
            .unwrap_or_else(|| panic!("no {name} in {value}"))
            .clone()
    };
    let oracle = agent("oracle");
    assert_eq!(oracle["pass_rate"].as_f64(), Some(1.0), "{oracle}");
    assert_eq!(
        (oracle["passed"].as_u64(), oracle["infra_errors"].as_u64()),
        (Some(1), Some(0))
    );
    let noop = agent("noop");
    assert_eq!(noop["pass_rate"].as_f64(), Some(0.0), "{noop}");
    assert_eq!(
        (noop["passed"].as_u64(), noop["infra_errors"].as_u64()),
        (Some(0), Some(0))
    );
}
