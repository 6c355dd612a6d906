//! `graders/swebench.py` grades as the official SWE-bench harness grades: the same verify logs
//! (captured from real runs of the rows in tests/fixtures/swebench, see its README) go to the
//! grader, as deltabench runs it, and to the official `swebench` package's grading functions,
//! and every verdict and every parsed test status must be the same. Also: the grader's
//! explanation is kept in the trial folder.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::common::{git_repo, have_tool, run_suite, stderr, temp_dir, trials, write_suite};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/swebench")
}

fn grader() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("graders/swebench.py")
}

/// A Python that imports the official package: `$DELTABENCH_SWEBENCH_PYTHON`, the venv
/// `.ci/install` makes, or `python3`.
fn official_python() -> Option<PathBuf> {
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".cache")));
    let candidates = [
        std::env::var_os("DELTABENCH_SWEBENCH_PYTHON").map(PathBuf::from),
        cache.map(|dir| dir.join("deltabench/swebench/bin/python")),
        Some(PathBuf::from("python3")),
    ];
    candidates.into_iter().flatten().find(|python| {
        Command::new(python)
            .args(["-c", "import swebench.harness.grading"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
    })
}

/// One log of one row, graded with one exit code.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Case {
    row: String,
    log: String,
    exit_code: i64,
}

/// Every fixture log with the exit code its run had, and each passing log again with exit
/// code 1 (a log that contradicts its exit code).
fn cases() -> Vec<Case> {
    let mut cases = Vec::new();
    for entry in std::fs::read_dir(fixtures()).unwrap() {
        let dir = entry.unwrap().path();
        let Ok(text) = std::fs::read_to_string(dir.join("row.json")) else {
            continue;
        };
        let row: serde_json::Value = serde_json::from_str(&text).unwrap();
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        for (log, code) in row["exit_codes"].as_object().unwrap() {
            let code = code.as_i64().unwrap();
            let case = |exit_code| Case {
                row: name.clone(),
                log: log.clone(),
                exit_code,
            };
            cases.push(case(code));
            if code == 0 {
                cases.push(case(1));
            }
        }
    }
    cases.sort();
    cases
}

/// The grader's verdict on a case, run as deltabench runs it (the delta on stdin, the full log
/// in `$DELTABENCH_VERIFY_LOG`), with the spec `import swebench` writes.
fn our_verdict(case: &Case, scratch: &Path) -> (bool, String) {
    let dir = fixtures().join(&case.row);
    let row: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("row.json")).unwrap()).unwrap();
    let spec = scratch.join("spec.json");
    let fields = ["repo", "FAIL_TO_PASS", "PASS_TO_PASS"];
    let spec_json: serde_json::Map<_, _> = fields
        .iter()
        .map(|field| (field.to_string(), row[field].clone()))
        .collect();
    std::fs::write(&spec, serde_json::to_string(&spec_json).unwrap()).unwrap();
    let log = dir.join(format!("{}.log", case.log));
    let input = serde_json::json!({
        "diff": "diff --git a/x b/x\n",
        "command_result": {"command": "t", "exit_code": case.exit_code, "timed_out": false,
                           "output": "", "duration_ms": 1},
    });
    let mut child = Command::new("python3")
        .arg(grader())
        .arg(&spec)
        .env("DELTABENCH_VERIFY_LOG", &log)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(input.to_string().as_bytes()).unwrap();
    drop(stdin);
    let done = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&done.stdout).into_owned();
    assert!(
        done.status.success(),
        "{case:?}: the grader exited {:?}: {}{}",
        done.status.code(),
        text,
        String::from_utf8_lossy(&done.stderr)
    );
    let verdict: serde_json::Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    (verdict["passed"].as_bool().unwrap(), text)
}

#[test]
fn swebench_grader_agrees_with_the_official_harness_on_every_fixture_log() {
    let test = "swebench_grader_agrees_with_the_official_harness_on_every_fixture_log";
    let Some(python) = official_python() else {
        have_tool(
            test,
            "the official `swebench` package (.ci/install puts swebench==5.0.2 in a venv under ~/.cache/deltabench/swebench; or set DELTABENCH_SWEBENCH_PYTHON)",
            false,
        );
        return;
    };
    let cases = cases();
    let mut driver = Command::new(&python)
        .arg(fixtures().join("official.py"))
        .arg(fixtures())
        .arg(grader())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines: String = cases
        .iter()
        .map(|c| format!("{}/{}:{}\n", c.row, c.log, c.exit_code))
        .collect();
    driver
        .stdin
        .take()
        .unwrap()
        .write_all(lines.as_bytes())
        .unwrap();
    let done = driver.wait_with_output().unwrap();
    assert!(
        done.status.success(),
        "the official driver failed: {}",
        String::from_utf8_lossy(&done.stderr)
    );
    let official: Vec<serde_json::Value> = String::from_utf8_lossy(&done.stdout)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(official.len(), cases.len(), "one official verdict per case");

    let scratch = temp_dir();
    let mut disagree = Vec::new();
    let mut table = String::new();
    for (case, theirs) in cases.iter().zip(&official) {
        assert_eq!(
            (&theirs["case"], &theirs["log"]),
            (&case.row.as_str().into(), &case.log.as_str().into())
        );
        let resolved = theirs["resolved"].as_bool().unwrap();
        let (passed, explanation) = our_verdict(case, scratch.path());
        table.push_str(&format!(
            "{:28} {:10} exit {}  official {:5}  ours {:5}  {}\n",
            case.row, case.log, case.exit_code, resolved, passed, theirs["parser"]
        ));
        if passed != resolved {
            disagree.push(format!(
                "{case:?}: official {resolved}, ours {passed}:\n{explanation}"
            ));
        }
        if theirs["same_statuses"] != true {
            disagree.push(format!(
                "{case:?}: the parsed statuses differ; only official: {}, only ours: {}",
                theirs["only_official"], theirs["only_ours"]
            ));
        }
    }
    println!("{table}");
    assert!(disagree.is_empty(), "{}", disagree.join("\n"));
    // Not agreement by never passing, or never failing.
    let verdicts: Vec<bool> = official.iter().map(|v| v["resolved"] == true).collect();
    assert!(
        verdicts.contains(&true) && verdicts.contains(&false),
        "{table}"
    );
}

/// The grader's explanation (how many listed tests passed, which did not) lands in the trial
/// folder's `grader.log`, for a failing and for a passing trial.
#[test]
fn the_grader_explanation_is_kept_in_the_trial_folder() {
    let tmp = temp_dir();
    let root = tmp.path();
    git_repo(root, &[("a.txt", "a\n")]);
    let row = fixtures().join("psf__requests-6028");
    let spec: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(row.join("row.json")).unwrap()).unwrap();
    let spec = serde_json::json!({
        "repo": spec["repo"], "FAIL_TO_PASS": spec["FAIL_TO_PASS"], "PASS_TO_PASS": spec["PASS_TO_PASS"],
    });
    std::fs::write(root.join("spec.json"), spec.to_string()).unwrap();
    // The verify replays a captured log: the fix's when the agent wrote one, else the tests'.
    write_suite(
        root,
        &format!(
            "name: explained\nrepo: repo\ntasks:\n  - id: requests\n    instruction: x\n    \
             verify: \"if grep -q fixed a.txt; then cat {gold}; else cat {tests}; exit 1; fi\"\n    \
             metric: {{grader: 'python3 {grader} spec.json'}}\nagents:\n  \
             fixer: {{kind: command, run: \"echo fixed > a.txt\"}}\n  \
             other: {{kind: command, run: \"echo other > a.txt\"}}\n",
            gold = row.join("gold.log").display(),
            tests = row.join("tests-only.log").display(),
            grader = grader().display(),
        ),
    );
    let (output, _, out) = run_suite(root, &["--agent", "fixer", "--agent", "other"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let records = trials(&out);
    let log_of = |agent: &str| {
        let record = records.iter().find(|r| r["agent"] == agent).unwrap();
        let log = out.join(format!("trials/requests/{agent}/1/grader.log"));
        let text =
            std::fs::read_to_string(&log).unwrap_or_else(|e| panic!("{}: {e}", log.display()));
        (record["outcome"].as_str().unwrap().to_owned(), text)
    };
    let (outcome, text) = log_of("other");
    assert_eq!(outcome, "fail", "{text}");
    assert!(
        text.contains("parser: parse_log_pytest_options (psf/requests)")
            && text.contains("185 of 187 listed tests passed (FAIL_TO_PASS 0 of 2, PASS_TO_PASS 185 of 185)")
            && text.contains(
                "not passed: FAIL_TO_PASS tests/test_utils.py::test_prepend_scheme_if_needed[http://user@example.com/path?query-http://user@example.com/path?query] (FAILED)"
            )
            && text.trim_end().ends_with(r#"{"passed": false, "score": 0.9893048128342246}"#),
        "{text}"
    );
    let (outcome, text) = log_of("fixer");
    assert_eq!(outcome, "pass", "{text}");
    assert!(
        text.contains("187 of 187 listed tests passed")
            && !text.contains("not passed")
            && text
                .trim_end()
                .ends_with(r#"{"passed": true, "score": 1.0}"#),
        "{text}"
    );
}

/// Why a graded trial did not pass is kept in its record and shown by `report`, in the terminal
/// and in markdown: which listed test failed, and the count.
#[test]
fn the_graders_explanation_is_kept_and_reported() {
    let tmp = temp_dir();
    let root = tmp.path();
    git_repo(root, &[("a.txt", "a\n")]);
    std::fs::write(
        root.join("spec.json"),
        r#"{"FAIL_TO_PASS": ["tests/t.py::test_fixed"], "PASS_TO_PASS": ["tests/t.py::test_old"]}"#,
    )
    .unwrap();
    write_suite(
        root,
        &format!(
            "name: graded\nrepo: repo\nagents:\n  editor: {{kind: command, run: echo b > a.txt}}\ntasks:\n  - id: t\n    instruction: write b to a.txt\n    verify: >-\n      echo 'PASSED tests/t.py::test_old';\n      if grep -q b a.txt; then echo 'PASSED tests/t.py::test_fixed'; else echo 'FAILED tests/t.py::test_fixed'; exit 1; fi\n    metric: {{grader: 'python3 {} spec.json'}}\n",
            grader().display()
        ),
    );
    let (output, _work, out) = run_suite(root, &["--agent", "editor", "--agent", "noop"]);
    let records = trials(&out);
    assert_eq!(records.len(), 2, "{}", stderr(&output));
    let record = |agent: &str| records.iter().find(|r| r["agent"] == agent).unwrap();
    assert_eq!(record("editor")["outcome"], "pass", "{}", record("editor"));
    let noop = record("noop");
    assert_eq!(noop["outcome"], "fail", "{noop}");
    let explained = noop["grader"].as_str().unwrap_or_default();
    assert!(
        explained.contains("not passed: FAIL_TO_PASS tests/t.py::test_fixed (FAILED)"),
        "{noop}"
    );
    assert!(explained.contains("1 of 2 listed tests passed"), "{noop}");
    assert!(
        !explained.contains("\"passed\""),
        "the verdict line is not the explanation: {noop}"
    );
    for format in ["table", "markdown"] {
        let report = crate::common::deltabench(root)
            .args(["report", "--format", format])
            .arg(&out)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&report.stdout);
        assert!(
            text.contains("Not passed, as the grader explained"),
            "{format}: {text}"
        );
        assert!(
            text.contains("not passed: FAIL_TO_PASS tests/t.py::test_fixed (FAILED)"),
            "{format}: {text}"
        );
        // Only the trial that did not pass is explained.
        assert!(!text.contains("editor #1"), "{format}: {text}");
    }
}
