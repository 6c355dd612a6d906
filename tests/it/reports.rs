//! `deltabench report` reads a run directory alone: every format from a hand-written run (with
//! the trial files JUnit and HTML read), the error paths, a torn last line, one real run end to
//! end, and the HTML page rendered by headless Chromium.

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
        "agents": {"alpha": {"kind": "command", "run": "./alpha.sh", "timeout": null, "env": {}}, "beta": {"kind": "command", "run": "./agent.sh", "timeout": null, "env": {}}},
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
    write_artifacts(&run);
    run
}

/// A verify.log of 50 lines whose tail holds markup, an ANSI colour, a NUL and U+FFFE.
fn long_verify_log() -> String {
    let mut log: String = (1..=45).map(|n| format!("collecting line {n}\n")).collect();
    log.push_str("E   assert parse(\"<a & b>\") == ']]>'\n");
    log.push_str("\u{1b}[31mFAILED\u{1b}[0m test_parse.py::test_markup\n");
    log.push_str("bad bytes: [\u{0}] [\u{fffe}] [\u{7}]\n");
    log.push_str("see https://example.com/ci?a=1&b=2\n");
    log.push_str("1 failed, 3 passed\n");
    log
}

/// Trial files for some trials: verify.log for the failed ones (but t3/beta/2, to exercise a
/// missing file), a diff and an event stream with hostile text, and a result.json.
fn write_artifacts(run: &Path) {
    let trial = |task: &str, agent: &str, n: u32| format!("trials/{task}/{agent}/{n}/");
    let file = |dir: String, name: &str, text: &str| {
        write_files(run, &[(format!("{dir}{name}").as_str(), text)]);
    };
    file(trial("t2", "alpha", 2), "verify.log", &long_verify_log());
    file(
        trial("t1", "beta", 1),
        "verify.log",
        "E   assert 429 == 200\nFAILED test_api.py::test_call\n",
    );
    file(
        trial("t2", "beta", 2),
        "verify.log",
        "Traceback (most recent call last):\nValueError: </script><script>alert(1)</script>\n",
    );
    file(
        trial("t1", "beta", 1),
        "diff.patch",
        "diff --git a/api.py b/api.py\n--- a/api.py\n+++ b/api.py\n@@ -1 +1,2 @@\n-URL = 'http://old.example'\n+URL = 'https://new.example'\n+# </script><!-- <script>\n",
    );
    file(
        trial("t1", "beta", 1),
        "events.jsonl",
        concat!(
            r#"{"type":"system","subtype":"spawn","message":"sh -c ./agent.sh"}"#,
            "\n",
            r#"{"type":"assistant","text":"Fetching https://docs.example/api </script><!--"}"#,
            "\n",
            r#"{"type":"tool_call","id":"c1","name":"edit","args":{"path":"api.py"}}"#,
            "\n",
            "not json at all\n",
            r#"{"type":"result","status":"error","text":"rate limited"}"#,
            "\n",
        ),
    );
    // Only command agents record the instruction they were given.
    file(
        trial("t1", "beta", 1),
        "instruction.md",
        "Make `call()` return 200, not 429.\n<b>Do not</b> touch tests/.\n",
    );
    file(
        trial("t1", "beta", 1),
        "result.json",
        r#"{"result":{"status":"error","output":{"text":"I fixed it (trust me)","modified_files":[]}}}"#,
    );
}

/// `deltabench report RUN EXTRA` with a terminal 200 columns wide (every column fits).
fn report(cwd: &Path, run: &Path, extra: &[&str]) -> Output {
    report_at(cwd, run, extra, 200)
}

fn report_at(cwd: &Path, run: &Path, extra: &[&str], columns: usize) -> Output {
    deltabench(cwd)
        .arg("report")
        .arg(run)
        .args(extra)
        .env("COLUMNS", columns.to_string())
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

/// At 100 columns (the default) and narrower, no line of the report is wider than the
/// terminal: empty columns left out, cells compact, a legend; the totals and cost per solved
/// task are there at every width.
#[test]
fn the_table_fits_the_terminal_with_totals_and_cost_per_solved_task() {
    let tmp = temp_dir();
    let run = write_run(tmp.path());
    for columns in [100, 72, 48] {
        let output = report_at(tmp.path(), &run, &[], columns);
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        let text = stdout(&output);
        for line in text.lines() {
            assert!(
                line.chars().count() <= columns,
                "{columns}: {} columns: {line}\n{text}",
                line.chars().count()
            );
        }
        let words = text.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            words.contains("total: 12 trials, 7 passed; tokens 7.2k in / 2.0k out; cost $0.0750, $0.0107 per solved task"),
            "{text}"
        );
        if columns == 100 {
            insta::assert_snapshot!(text);
        }
    }
}

#[test]
fn report_table() {
    let text = formatted("table");
    assert!(text.contains("alpha"), "{text}");
    // alpha ended all 6 trials `completed` and one failed; beta claimed 4 (one ended in an error,
    // one is an infra error) and 2 failed.
    assert!(text.contains("1/6 16.7% (3.0-56.4%)"), "{text}");
    assert!(text.contains("2/4 50.0% (15.0-85.0%)"), "{text}");
    // The per-task table, failing tasks first: t2 (1/2 and 0/1) before t1 and t3.
    let per_task = &text[text.find("Per task:").expect("no per-task table")..];
    let order: Vec<usize> = ["│ t2", "│ t1", "│ t3"]
        .iter()
        .map(|row| {
            per_task
                .find(row)
                .unwrap_or_else(|| panic!("no {row}: {text}"))
        })
        .collect();
    assert!(order.is_sorted(), "{per_task}");
    assert!(per_task.contains("0/1 +1 infra"), "{per_task}");
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
    assert!(text.contains("### Per task"), "{text}");
    assert!(text.contains("| t2   | 1/2   | 0/1 +1 infra |"), "{text}");
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
    // The mean of per-task pass fractions (1/2, 1/2, 0/1), not the pooled 2 of 5 trials.
    assert!((beta["pass_rate"].as_f64().unwrap() - 1.0 / 3.0).abs() < 1e-12);
    assert_eq!(
        (
            beta["claimed"].as_u64(),
            beta["false_claims"].as_u64(),
            beta["false_claim_rate"].as_f64()
        ),
        (Some(4), Some(2), Some(0.5))
    );
    let tasks: Vec<&Value> = value["tasks"].as_array().unwrap().iter().collect();
    assert_eq!(tasks[0]["task"], "t2", "failing tasks first");
    assert_eq!(
        tasks[0]["agents"]["beta"],
        json!({"passed": 0, "scored": 1, "infra_errors": 1})
    );
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
    crate::common::assert_tmp_snapshot!(tmp.path(), err);
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
    for format in ["table", "markdown", "csv", "json", "junit", "html"] {
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
    assert_eq!(output.status.code(), Some(3), "{err}");
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

/// A minimal XML 1.0 well-formedness check, independent of the serializer: only legal
/// characters, every `&` a known entity, and tags balanced (quick-junit escapes `>` in
/// attributes, so a tag ends at the first `>`).
fn assert_well_formed(xml: &str) {
    for c in xml.chars() {
        assert!(
            matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..),
            "character {c:?} is not allowed in XML 1.0"
        );
    }
    let entities = regex::Regex::new(r"&(amp|lt|gt|quot|apos|#[0-9]+|#x[0-9a-fA-F]+);").unwrap();
    let check_text = |text: &str| {
        assert_eq!(
            text.matches('&').count(),
            entities.find_iter(text).count(),
            "bare & in {text:?}"
        );
    };
    let mut open: Vec<&str> = Vec::new();
    let mut rest = xml;
    while let Some(start) = rest.find('<') {
        check_text(&rest[..start]);
        let end = start + rest[start..].find('>').expect("unclosed tag");
        let tag = &rest[start + 1..end];
        check_text(tag);
        if tag.starts_with('?') {
            assert!(tag.ends_with('?'), "{tag}");
        } else if let Some(name) = tag.strip_prefix('/') {
            assert_eq!(open.pop(), Some(name.trim()), "mismatched </{name}>");
        } else if !tag.ends_with('/') {
            open.push(tag.split_whitespace().next().unwrap());
        }
        rest = &rest[end + 1..];
    }
    check_text(rest);
    assert!(open.is_empty(), "unclosed: {open:?}");
}

#[test]
fn report_junit() {
    let text = formatted("junit");
    assert_well_formed(&text);
    let report = quick_junit::Report::deserialize_from_str(&text).unwrap();
    assert_eq!(
        (report.tests, report.failures, report.errors),
        (12, 4, 1),
        "{text}"
    );
    let suites: Vec<(&str, usize, usize, usize)> = report
        .test_suites
        .iter()
        .map(|s| (s.name.as_str(), s.tests, s.failures, s.errors))
        .collect();
    assert_eq!(suites, [("alpha", 6, 1, 0), ("beta", 6, 3, 1)]);
    let case = |agent: &str, name: &str| {
        report
            .test_suites
            .iter()
            .find(|s| s.name.as_str() == agent)
            .and_then(|s| s.test_cases.iter().find(|c| c.name.as_str() == name))
            .unwrap_or_else(|| panic!("no {agent} {name}"))
            .clone()
    };
    let failed = case("alpha", "t2 #2");
    assert_eq!(failed.classname.as_deref(), Some("alpha"));
    assert_eq!(failed.time, Some(std::time::Duration::from_millis(2_250)));
    let quick_junit::TestCaseStatus::NonSuccess {
        message,
        description,
        ..
    } = &failed.status
    else {
        panic!("{failed:?}")
    };
    assert_eq!(
        message.as_deref(),
        Some("fail: verify exited 1; agent completed")
    );
    let description = description.as_deref().unwrap();
    // The last 40 of 50 lines, markup intact after unescaping, control characters dropped.
    assert!(
        description
            .starts_with("[... 10 earlier lines of verify.log not shown]\ncollecting line 11\n"),
        "{description}"
    );
    assert!(
        description.contains("E   assert parse(\"<a & b>\") == ']]>'\nFAILED test_parse.py"),
        "{description}"
    );
    assert!(description.contains("bad bytes: [] [] []"), "{description}");
    let missing = format!("{:?}", case("beta", "t3 #2").status);
    assert!(
        missing.contains("(trials/t3/beta/2/verify.log is missing)"),
        "{missing}"
    );
    let infra = format!("{:?}", case("beta", "t2 #1").status);
    assert!(infra.contains("no space left on device"), "{infra}");
    insta::assert_snapshot!(text);
}

/// The JSON blob of an HTML report, which must end at the first `</script>`.
fn data_blob(html: &str) -> Value {
    let open = "<script type=\"application/json\" id=\"deltabench-data\">";
    let start = html.find(open).expect("no data blob") + open.len();
    let end = start + html[start..].find("</script>").unwrap();
    let blob = &html[start..end];
    assert!(!blob.contains('<'), "raw < in the data blob");
    serde_json::from_str(blob).unwrap()
}

#[test]
fn report_html_is_self_contained_and_embeds_the_run() {
    let html = formatted("html");
    for id in [
        "pass-rate-chart",
        "heatmap",
        "cost-scatter",
        "trial-detail",
        "trial-list",
        "deltabench-data",
    ] {
        assert!(html.contains(&format!("id=\"{id}\"")), "no #{id}");
    }
    // Nothing to fetch: the run's URLs are escaped, and the page names none of its own.
    let lower = html.to_lowercase();
    assert!(!lower.contains("http://") && !lower.contains("https://"));
    assert!(!lower.contains(" src=") && !lower.contains(" href="));
    // Only the page's own two scripts: the run's `</script><script>` stayed text.
    assert_eq!(html.matches("<script").count(), 2);
    assert!(html.contains("<title>deltabench: fixed, 2025-01-02 03:04 UTC</title>"));
    // Static charts: one bar per agent, one cell per (task, agent), beta t2's infra error marked.
    assert_eq!(html.matches("class=\"bar\"").count(), 2);
    assert_eq!(html.matches("<g class=\"cell\"").count(), 6);
    assert_eq!(html.matches("class=\"infra-mark\"").count(), 1);
    assert_eq!(html.matches("<tr data-task=").count(), 12);
    assert!(
        html.contains("no cost reported, plotted at $0 (beta)"),
        "cost note"
    );

    let data = data_blob(&html);
    assert_eq!(data["suite"], "fixed");
    assert_eq!(data["tasks"], json!(["t1", "t2", "t3"]));
    let agents = data["agents"].as_array().unwrap();
    assert_eq!(agents.len(), 2);
    assert_eq!(
        (
            &agents[0]["agent"],
            &agents[0]["passed"],
            &agents[0]["mean_cost_usd"]
        ),
        (&json!("alpha"), &json!(5), &json!(0.0125))
    );
    assert_eq!(
        (
            &agents[1]["agent"],
            &agents[1]["infra_errors"],
            &agents[1]["mean_cost_usd"]
        ),
        (&json!("beta"), &json!(1), &Value::Null)
    );
    let trials = data["trials"].as_array().unwrap();
    assert_eq!(trials.len(), 12);
    let trial = |task: &str, agent: &str, n: u64| {
        trials
            .iter()
            .find(|t| t["task"] == task && t["agent"] == agent && t["trial"] == n)
            .unwrap()
    };
    let rate_limited = trial("t1", "beta", 1);
    assert_eq!(rate_limited["error"]["code"], "rate_limited");
    assert_eq!(rate_limited["agent_text"], "I fixed it (trust me)");
    assert!(
        rate_limited["diff_patch"]["text"]
            .as_str()
            .unwrap()
            .contains("+URL = 'https://new.example'\n+# </script><!-- <script>")
    );
    let events: Vec<(&str, &str)> = rate_limited["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| (e["type"].as_str().unwrap(), e["summary"].as_str().unwrap()))
        .collect();
    assert_eq!(
        events,
        [
            ("system", "spawn: sh -c ./agent.sh"),
            (
                "assistant",
                "Fetching https://docs.example/api </script><!--"
            ),
            ("tool_call", "edit({\"path\":\"api.py\"})"),
            ("unparsed", "not json at all"),
            ("result", "error: rate limited"),
        ]
    );
    let missing = trial("t3", "beta", 2);
    assert_eq!(missing["verify_log"]["text"], Value::Null);
    assert!(
        missing["verify_log"]["note"]
            .as_str()
            .unwrap()
            .contains("trials/t3/beta/2/verify.log is missing"),
        "{missing}"
    );
    assert_eq!(
        trial("t2", "beta", 1)["infra_error"],
        "cannot provision a worktree workspace: no space left on device"
    );
}

#[test]
fn report_html_cuts_a_huge_diff_with_a_note() {
    let tmp = temp_dir();
    let run = write_run(tmp.path());
    let line = "+".to_owned() + &"x".repeat(99) + "\n";
    write_files(
        &run,
        &[("trials/t1/alpha/1/diff.patch", &line.repeat(3_000))],
    );
    let output = report(tmp.path(), &run, &["--format", "html"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let data = data_blob(&stdout(&output));
    let diff = &data["trials"][0]["diff_patch"];
    assert_eq!(diff["text"].as_str().unwrap().len(), 200 * 1024);
    let note = diff["note"].as_str().unwrap();
    assert!(
        note.starts_with("Truncated: the first 200 KB of 296 KB"),
        "{note}"
    );
}

/// `/usr/bin/chromium`, or `chromium` on PATH.
fn chromium() -> Option<std::path::PathBuf> {
    let fixed = Path::new("/usr/bin/chromium");
    if fixed.exists() {
        return Some(fixed.to_owned());
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join("chromium"))
        .find(|path| path.exists())
}

/// Runs `command` in its own process group; kills the group if it outlives `limit`.
fn output_within(mut command: std::process::Command, limit: std::time::Duration) -> Output {
    use std::os::unix::process::CommandExt;
    let child = command
        .process_group(0)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let group = nix::unistd::Pid::from_raw(child.id() as i32);
    let (done, wait) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = done.send(child.wait_with_output());
    });
    match wait.recv_timeout(limit) {
        Ok(output) => output.unwrap(),
        Err(_) => {
            let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
            panic!("{command:?} did not finish within {limit:?}");
        }
    }
}

/// The DOM of `report --format html` of the run at `run` after headless Chromium ran its
/// script; None (the test is skipped) when Chromium is not installed outside CI.
fn rendered(tmp: &Path, run: &Path) -> Option<String> {
    let found = chromium();
    let test = "the headless Chromium report tests";
    if !crate::common::have_tool(test, "chromium (apt-get install chromium)", found.is_some()) {
        return None;
    }
    let chromium = found.expect("checked above");
    let page = tmp.join("report.html");
    let output = report(
        tmp,
        run,
        &["--format", "html", "-o", page.to_str().unwrap()],
    );
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));

    let mut command = std::process::Command::new(chromium);
    command
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ])
        .arg(format!("--user-data-dir={}", tmp.join("profile").display()))
        .args(["--virtual-time-budget=5000", "--dump-dom"])
        .arg(format!("file://{}", page.display()))
        .stdin(std::process::Stdio::null());
    let output = output_within(command, std::time::Duration::from_secs(120));
    assert!(output.status.success(), "{}", stderr(&output));
    Some(stdout(&output))
}

/// The drill-down section of a rendered page.
fn detail_of(dom: &str) -> &str {
    let start = dom.find("id=\"trial-detail\"").unwrap();
    &dom[start..start + dom[start..].find("</section>").unwrap()]
}

#[test]
fn report_html_renders_in_headless_chromium() {
    let tmp = temp_dir();
    let run = write_run(tmp.path());
    let Some(dom) = rendered(tmp.path(), &run) else {
        return;
    };

    // The script ran: every heat-map cell and list row was made interactive...
    let hydrated = |pattern: &str| regex::Regex::new(pattern).unwrap().find_iter(&dom).count();
    assert_eq!(
        hydrated(r#"<g class="cell[^"]*"[^>]*data-rendered="true""#),
        6,
        "{dom}"
    );
    assert_eq!(hydrated(r#"<tr [^>]*data-rendered="true""#), 12);
    assert_eq!(dom.matches("class=\"bar\"").count(), 2);
    // ...and opened the first cell that did not fully pass: t1 x beta, with its two trials.
    let detail = detail_of(&dom);
    assert!(
        detail.contains("data-rendered=\"true\""),
        "drill-down not rendered: {detail}"
    );
    assert!(detail.contains("Trial details: t1 × beta"), "{detail}");
    assert_eq!(detail.matches("class=\"trial-card").count(), 2, "{detail}");
    assert!(detail.contains("429 from the provider (rate_limited)"));
    assert!(detail.contains("FAILED test_api.py::test_call"));
    assert!(detail.contains("<span class=\"add\">+URL = 'https:"));
    assert!(detail.contains("<span class=\"etype\">tool_call</span>"));
    // The task's instruction, above the trials; its markup stayed text.
    assert!(detail.contains("Task instruction"), "{detail}");
    assert!(
        detail.contains(
            "Make `call()` return 200, not 429.\n&lt;b&gt;Do not&lt;/b&gt; touch tests/."
        ),
        "{detail}"
    );
    // The run's hostile text stayed text.
    assert!(detail.contains("&lt;/script&gt;&lt;!--"), "{detail}");
    assert_eq!(dom.matches("<script").count(), 2);
}

#[test]
fn report_html_of_a_matrix_renders_in_headless_chromium() {
    let tmp = temp_dir();
    let run = write_matrix_run(tmp.path());
    let Some(dom) = rendered(tmp.path(), &run) else {
        return;
    };
    // The first cell that did not fully pass is t2 x low/fast; t2's instruction was recorded in
    // another combination's folder, and is the task's all the same.
    let detail = detail_of(&dom);
    assert!(
        detail.contains("Trial details: t2 × idle[env.LEVEL=low,env.MODE=fast]"),
        "{detail}"
    );
    assert!(
        detail.contains("Return the level, not the mode."),
        "{detail}"
    );
    assert!(
        detail.contains("From trials/t2/idle_env.LEVEL_high_env.MODE_slow_/1/instruction.md."),
        "{detail}"
    );
    assert!(!dom.contains("id=\"cost-scatter\""));
    for (name, _, _) in COMBOS {
        assert!(
            dom.contains(&format!(">{name}</text>")),
            "{name} is not written whole"
        );
    }
}

/// The four combinations of a 2x2 `matrix:` of the agent `idle`.
const COMBOS: [(&str, &str, &str); 4] = [
    ("idle[env.LEVEL=low,env.MODE=fast]", "low", "fast"),
    ("idle[env.LEVEL=low,env.MODE=slow]", "low", "slow"),
    ("idle[env.LEVEL=high,env.MODE=fast]", "high", "fast"),
    ("idle[env.LEVEL=high,env.MODE=slow]", "high", "slow"),
];

/// A run of the 2x2 matrix on t1..t3, one trial each, no costs: `high` passes more than `low`,
/// `slow` more than `fast`. t1's and t2's instructions are each in one combination's trial
/// folder; t3's is not recorded.
fn write_matrix_run(root: &Path) -> std::path::PathBuf {
    let run = root.join("run");
    std::fs::create_dir_all(run.join("trials")).unwrap();
    let mut manifest = manifest();
    manifest["suite"] = json!("matrix");
    manifest["trials_per_task"] = json!(1);
    // Objects written by hand: a serde_json::Map would sort the combinations by name, and the
    // run's order is what the reports keep.
    let object = |entries: Vec<String>| format!("{{{}}}", entries.join(","));
    let agents = object(
        COMBOS
            .iter()
            .map(|(name, _, _)| {
                format!("{}:{{\"kind\":\"command\",\"run\":\"true\"}}", json!(name))
            })
            .collect(),
    );
    let variants = object(
        COMBOS
            .iter()
            .map(|(name, level, mode)| {
                format!(
                    "{}:{{\"base\":\"idle\",\"factors\":{{\"env.LEVEL\":\"{level}\",\"env.MODE\":\"{mode}\"}}}}",
                    json!(name)
                )
            })
            .collect(),
    );
    manifest["agents"] = json!("AGENTS");
    manifest["variants"] = json!("VARIANTS");
    let mut records = Vec::new();
    for (n, task) in TASKS.iter().enumerate() {
        for (i, (name, level, mode)) in COMBOS.iter().enumerate() {
            // high passes t1 and t2, low only t1 (fast) or t1 and t3 (slow); t2 fails for low.
            let pass = match (*level, *mode, *task) {
                ("high", "slow", _) => true,
                ("high", "fast", task) => task != "t3",
                ("low", "slow", task) => task != "t2",
                (_, _, task) => task == "t1",
            };
            let kind = if pass { Kind::Pass } else { Kind::Fail };
            records.push(record(
                task,
                name,
                1,
                kind,
                2_000 + 100 * (4 * n + i) as u64,
            ));
        }
    }
    manifest["planned_trials"] = json!(records.len());
    let text = serde_json::to_string_pretty(&manifest)
        .unwrap()
        .replace("\"AGENTS\"", &agents)
        .replace("\"VARIANTS\"", &variants);
    std::fs::write(run.join("manifest.json"), text).unwrap();
    std::fs::write(run.join("trials.jsonl"), jsonl(&records)).unwrap();
    write_files(
        &run,
        &[
            (
                "trials/t1/idle_env.LEVEL_low_env.MODE_fast_/1/instruction.md",
                "Print the level.\nKeep it <short> & plain.\n",
            ),
            (
                "trials/t2/idle_env.LEVEL_high_env.MODE_slow_/1/instruction.md",
                "Return the level, not the mode.\n",
            ),
        ],
    );
    run
}

/// `report RUN extra...` of the matrix run; must succeed.
fn matrix_report(extra: &[&str]) -> String {
    let tmp = temp_dir();
    let run = write_matrix_run(tmp.path());
    let output = report(tmp.path(), &run, extra);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    stdout(&output)
}

#[test]
fn report_ablation_markdown() {
    let text = matrix_report(&["--ablation", "--format", "markdown"]);
    assert!(
        text.contains("### Ablation of `idle`: 4 combinations, 12 trials"),
        "{text}"
    );
    // low passes 3 of 6, high 5 of 6: +33.3 points.
    assert!(text.contains("| env.LEVEL | low | 50.0% |"), "{text}");
    assert!(
        text.contains("| | high | 83.3% |") || text.contains("|  | high | 83.3% |"),
        "{text}"
    );
    assert!(text.contains("+33.3 ("), "{text}");
    assert!(text.contains("interaction = "), "{text}");
    insta::assert_snapshot!(text);
}

#[test]
fn report_ablation_json() {
    let text = matrix_report(&["--ablation", "--format", "json"]);
    let value: Value = serde_json::from_str(&text).unwrap();
    let ablation = &value["ablations"][0];
    assert_eq!(ablation["base"], "idle");
    assert_eq!(ablation["trials"], 12);
    let level = &ablation["factors"][0];
    assert_eq!(level["factor"], "env.LEVEL");
    let diff = level["levels"][1]["effect"]["diff"].as_f64().unwrap();
    assert!((diff - 1.0 / 3.0).abs() < 1e-12, "{level}");
    assert_eq!(
        ablation["interaction"]["cells"],
        json!([[1.0 / 3.0, 2.0 / 3.0], [2.0 / 3.0, 1.0]])
    );
    // high/fast is as good as low/slow but slower; the others each win on rate or time.
    let front: Vec<&str> = ablation["pareto"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["agent"].as_str().unwrap())
        .collect();
    assert_eq!(
        front,
        [
            "idle[env.LEVEL=low,env.MODE=fast]",
            "idle[env.LEVEL=low,env.MODE=slow]",
            "idle[env.LEVEL=high,env.MODE=slow]"
        ]
    );
    insta::assert_snapshot!(text);
}

#[test]
fn report_ablation_text_is_unchanged_by_the_other_formats() {
    let text = matrix_report(&["--ablation"]);
    assert!(
        text.starts_with("Ablation of idle: 4 combinations, 12 trials\n"),
        "{text}"
    );
    assert!(text.contains("Pareto front"), "{text}");
}

#[test]
fn report_ablation_json_of_a_run_without_a_matrix_is_empty() {
    let value: Value =
        serde_json::from_str(&formatted_with(&["--ablation", "--format", "json"])).unwrap();
    assert_eq!(value["ablations"], json!([]));
}

/// `report --format ...` of the fixed run with `extra`; must succeed.
fn formatted_with(extra: &[&str]) -> String {
    let tmp = temp_dir();
    let run = write_run(tmp.path());
    let output = report(tmp.path(), &run, extra);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    stdout(&output)
}

#[test]
fn ablation_and_baseline_have_no_csv_or_junit_form() {
    let tmp = temp_dir();
    let run = write_run(tmp.path());
    let baseline = run.to_str().unwrap();
    for format in ["csv", "junit"] {
        for extra in [vec!["--ablation"], vec!["--baseline", baseline]] {
            let mut args = vec!["--format", format];
            args.extend(&extra);
            let output = report(tmp.path(), &run, &args);
            let err = stderr(&output);
            assert_eq!(output.status.code(), Some(2), "{args:?}: {err}");
            assert!(output.stdout.is_empty(), "{args:?}");
            assert!(
                err.contains(&format!("{} has no {format} form", extra[0]))
                    && err.contains("use --format table, markdown, json or html"),
                "{err}"
            );
        }
    }
}

#[test]
fn report_agent_flag_keeps_only_the_named_agents() {
    let text = formatted_with(&["--agent", "beta", "--format", "json"]);
    let value: Value = serde_json::from_str(&text).unwrap();
    let agents: Vec<&Value> = value["agents"].as_array().unwrap().iter().collect();
    assert_eq!(agents.len(), 1);
    assert_eq!(agents[0]["agent"], "beta");
    assert_eq!(value["trials"], 6);
    assert_eq!(value["planned_trials"], 6);
    assert_eq!(
        value["tasks"][0]["agents"].as_object().unwrap().len(),
        1,
        "{text}"
    );

    // A matrix's name selects all its combinations; naming two agents keeps both.
    let text = matrix_report(&["--agent", "idle", "--format", "json"]);
    let value: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(value["agents"].as_array().unwrap().len(), 4);
    let text = matrix_report(&[
        "--agent",
        "idle[env.LEVEL=high,env.MODE=slow]",
        "--agent",
        "idle[env.LEVEL=low,env.MODE=fast]",
        "--format",
        "json",
    ]);
    let value: Value = serde_json::from_str(&text).unwrap();
    let names: Vec<&str> = value["agents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["agent"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "idle[env.LEVEL=low,env.MODE=fast]",
            "idle[env.LEVEL=high,env.MODE=slow]"
        ]
    );
}

#[test]
fn report_agent_flag_with_an_unknown_name_lists_the_valid_ones() {
    let tmp = temp_dir();
    let run = write_matrix_run(tmp.path());
    let output = report(tmp.path(), &run, &["--agent", "nope"]);
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{err}");
    assert!(output.stdout.is_empty());
    insta::assert_snapshot!(err);
}

#[test]
fn report_with_a_baseline_adds_the_comparison() {
    let tmp = temp_dir();
    let run = write_run(tmp.path());
    let earlier = tmp.path().join("earlier");
    std::fs::create_dir_all(&earlier).unwrap();
    for file in ["manifest.json", "trials.jsonl"] {
        std::fs::copy(run.join(file), earlier.join(file)).unwrap();
    }
    for format in ["table", "markdown", "json", "html"] {
        let output = report(
            tmp.path(),
            &run,
            &["--format", format, "--baseline", earlier.to_str().unwrap()],
        );
        let text = stdout(&output).replace("&#39;", "'");
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        assert!(
            text.contains("candidate 'alpha' (this run) vs baseline 'alpha'"),
            "{format}: {text}"
        );
        assert!(text.contains("verdict: "), "{format}: {text}");
        if format == "html" {
            assert!(text.contains("<section class=\"panel\" id=\"baseline\">"));
        }
        // Not a snapshot: the comparison's wording belongs to `compare`.
        let heading = match format {
            "table" => format!("Against the baseline {}:\n", earlier.display()),
            "markdown" => format!("### Against the baseline `{}`", earlier.display()),
            "json" => format!("\"run_dir\": \"{}\"", earlier.display()),
            _ => format!("<code>{}</code>", earlier.display()),
        };
        assert!(text.contains(&heading), "{format}: {text}");
    }
}

/// The `<text>` labels of one SVG chart of an HTML page.
fn svg_texts(html: &str, id: &str) -> Vec<String> {
    let start = html.find(&format!("<svg id=\"{id}\"")).expect(id);
    let end = start + html[start..].find("</svg>").unwrap();
    regex::Regex::new(r"<text[^>]*>([^<]*)</text>")
        .unwrap()
        .captures_iter(&html[start..end])
        .map(|c| c[1].to_owned())
        .collect()
}

#[test]
fn report_html_shows_full_matrix_names_the_instruction_and_no_cost_chart_without_costs() {
    let html = matrix_report(&["--format", "html"]);
    // Every combination's whole name, in the bar chart and over its heat-map column.
    for (name, _, _) in COMBOS {
        for id in ["pass-rate-chart", "heatmap"] {
            let texts = svg_texts(&html, id);
            assert_eq!(
                texts.iter().filter(|t| *t == name).count(),
                1,
                "{id}: {name} in {texts:?}"
            );
        }
    }
    assert!(!html.contains('\u{2026}'), "a label was cut");
    // Nobody reported a cost: no scatter, a sentence instead.
    assert!(!html.contains("id=\"cost-scatter\""));
    assert!(html.contains("No agent reported a cost, so there is no cost chart."));
    // The ablation tables and the false-claim column are on the page.
    assert!(html.contains("<section class=\"panel\" id=\"ablation\">"));
    assert!(html.contains("<h3>idle: 4 combinations, 12 trials</h3>"));
    assert!(html.contains("<th>false claims</th>"));
    assert!(html.contains("<td class=\"false-claims\">1/3 33.3% ("));
    // The instruction, read from the trial folder that recorded it.
    let data = data_blob(&html);
    assert_eq!(
        data["instructions"]["t1"]["text"],
        "Print the level.\nKeep it <short> & plain.\n"
    );
    assert!(
        data["instructions"]["t3"]["note"]
            .as_str()
            .unwrap()
            .contains("does not record this task's instruction"),
        "{}",
        data["instructions"]
    );
}
