//! Two real SWE-bench Verified rows, end to end (slow, opt-in): `psf__requests-6028` and
//! `pytest-dev__pytest-10081`, the rows that showed the test hook was not inert and its test ids
//! not free of the run's paths (issue 22).
//!
//! Each test imports its row with `deltabench import swebench --env FILE`, the env file giving the
//! row's test command with a Python environment of this machine, then validates or runs it.
//! Run them on purpose, one at a time (each is minutes of real test runs on a shared machine):
//!
//! ```sh
//! DELTABENCH_SWEBENCH_VERIFIED_ROWS=.../swebench_verified_selected.jsonl \
//! DELTABENCH_SWEBENCH_REPOS=.../clones \
//! DELTABENCH_SWEBENCH_PYTHON_REQUESTS=.../venv-requests/bin/python \
//! DELTABENCH_SWEBENCH_PYTHON_PYTEST=.../venv-pytest/bin/python \
//!   cargo test --test it real_rows -- --ignored --test-threads 1 --nocapture
//! ```
//!
//! - `$DELTABENCH_SWEBENCH_VERIFIED_ROWS`: SWE-bench Verified rows (JSON Lines) holding both.
//! - `$DELTABENCH_SWEBENCH_REPOS`: a folder of clones, `psf__requests` and `pytest-dev__pytest`
//!   (or `owner/name`), each holding its row's base commit.
//! - `$DELTABENCH_SWEBENCH_PYTHON_REQUESTS`: a Python (3.8 to 3.11) with requests' test
//!   dependencies, e.g. a virtualenv with `pip install -e CLONE "pytest<8" pytest-httpbin
//!   pytest-mock trustme PySocks`. The test command runs `python -m pytest` in the workspace, so
//!   the workspace's `requests/` is imported before any installed copy.
//! - `$DELTABENCH_SWEBENCH_PYTHON_PYTEST`: a Python (3.8 to 3.11) with pytest's, e.g. a virtualenv
//!   with `pip install -e "CLONE[testing]"`. The test command puts the workspace's `src/` first on
//!   `PYTHONPATH` (keeping the hook's entry), and the task's setup writes the `_version.py` that an
//!   install would generate.
//!
//! A variable that is not set fails the test with its name: these tests never pass by doing
//! nothing. docs/import.md ("Real rows, on this machine") has the env file they write.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Output;

use crate::common::{deltabench, stderr, stdout, temp_dir, trials};

const REQUESTS: &str = "psf__requests-6028";
const PYTEST: &str = "pytest-dev__pytest-10081";

fn var(name: &str) -> PathBuf {
    std::env::var_os(name)
        .map(PathBuf::from)
        .unwrap_or_else(|| panic!("${name} is not set: see the doc of tests/it/real_rows.rs"))
}

/// The env file's entry for `row`'s repository. With `hook: false` the test command first drops
/// `PYTHONPATH`, the documented way for a verify command to run without deltabench's hook
/// (docs/isolation.md); everything else deltabench gives the command stays the same.
fn env_file(row: &str, hook: bool) -> String {
    let unset = if hook { "" } else { "unset PYTHONPATH; " };
    if row == REQUESTS {
        let python = var("DELTABENCH_SWEBENCH_PYTHON_REQUESTS");
        format!(
            "psf/requests:
  test_command: {unset}{} -m pytest -rA -p no:cacheprovider {{test_files}}
  timeout: 10m
",
            python.display()
        )
    } else {
        let python = var("DELTABENCH_SWEBENCH_PYTHON_PYTEST");
        format!(
            r#"pytest-dev/pytest:
  # setuptools-scm writes _version.py when pytest is installed; the workspace is a bare checkout.
  setup: printf 'version = "7.2.0.dev173"\nversion_tuple = (7, 2, 0, "dev173")\n' > src/_pytest/_version.py
  test_command: {unset}PYTHONPATH=src${{PYTHONPATH:+:$PYTHONPATH}} {} -m pytest -rA -p no:cacheprovider {{test_files}}
  timeout: 10m
"#,
            python.display()
        )
    }
}

fn assert_ok(output: &Output, what: &str) {
    assert_eq!(
        output.status.code(),
        Some(0),
        "{what}\nstdout:\n{}\nstderr:\n{}",
        stdout(output),
        stderr(output)
    );
}

/// Imports `row` into `root/NAME/suite/` and returns that suite folder.
fn import(root: &Path, row: &str, name: &str, hook: bool) -> PathBuf {
    let rows = var("DELTABENCH_SWEBENCH_VERIFIED_ROWS");
    let text = std::fs::read_to_string(&rows)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", rows.display()));
    let needle = format!("\"instance_id\": \"{row}\"");
    let line = text
        .lines()
        .find(|line| line.contains(&needle))
        .unwrap_or_else(|| panic!("{} holds no row {row}", rows.display()));
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("row.jsonl"), format!("{line}\n")).unwrap();
    std::fs::write(dir.join("env.yaml"), env_file(row, hook)).unwrap();
    let started = std::time::Instant::now();
    let output = deltabench(&dir)
        .args(["import", "swebench", "row.jsonl", "--out", "suite", "--env"])
        .arg("env.yaml")
        .arg("--repos")
        .arg(var("DELTABENCH_SWEBENCH_REPOS"))
        .output()
        .unwrap();
    assert_ok(&output, "import");
    // One repository: the suite is the folder itself.
    let suite = dir.join("suite");
    assert!(suite.join("suite.yaml").is_file(), "{}", stdout(&output));
    eprintln!("{row}: imported in {:.1?}", started.elapsed());
    suite
}

fn validate(root: &Path, suite: &Path) {
    let work = root.join("work-validate");
    std::fs::create_dir_all(&work).unwrap();
    let started = std::time::Instant::now();
    let output = deltabench(root)
        .arg("validate")
        .arg(suite)
        .arg("--workdir")
        .arg(&work)
        .output()
        .unwrap();
    assert_ok(&output, "validate");
    eprintln!(
        "validate ({:.1?}):\n{}{}",
        started.elapsed(),
        stdout(&output),
        stderr(&output)
    );
}

/// Runs `suite` into `root/OUT` (workspaces in a folder of its own) and returns its trials.
fn run(root: &Path, suite: &Path, out: &str, extra: &[&str]) -> Vec<serde_json::Value> {
    let work = root.join(format!("work-{out}"));
    std::fs::create_dir_all(&work).unwrap();
    let started = std::time::Instant::now();
    let output = deltabench(root)
        .arg("run")
        .arg(suite)
        .arg("--workdir")
        .arg(&work)
        .arg("--out")
        .arg(root.join(out))
        .args(extra)
        .output()
        .unwrap();
    assert_ok(&output, out);
    let records = trials(&root.join(out));
    for r in &records {
        eprintln!(
            "{out}: {} / {} #{}: {} {} ({:.1?} run)",
            r["task"].as_str().unwrap_or("?"),
            r["agent"].as_str().unwrap_or("?"),
            r["trial"],
            r["outcome"].as_str().unwrap_or("?"),
            r["reason"].as_str().unwrap_or(""),
            started.elapsed()
        );
    }
    records
}

/// The lock's test ids of `task`.
fn lock_ids(suite: &Path, task: &str) -> Vec<String> {
    let lock: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(suite.join("suite.lock.json")).unwrap())
            .unwrap();
    lock["tasks"][task]["tests"]["names"]
        .as_array()
        .unwrap_or_else(|| panic!("the lock holds no test ids of {task}: {lock:#}"))
        .iter()
        .map(|name| name.as_str().unwrap().to_owned())
        .collect()
}

/// psf__requests-6028: the lock's test ids hold no path of the validate run (one id is
/// parametrized with the test file's path: `{workspace}` stands for the workspace), and the
/// reference solution passes in two later runs, each in workspaces of its own.
#[test]
#[ignore = "slow, real SWE-bench row: needs $DELTABENCH_SWEBENCH_VERIFIED_ROWS, $DELTABENCH_SWEBENCH_REPOS, $DELTABENCH_SWEBENCH_PYTHON_REQUESTS (see the module doc)"]
fn real_row_requests_6028_lock_ids_are_path_free_and_the_reference_passes_twice() {
    let tmp = temp_dir();
    let root = tmp.path();
    let suite = import(root, REQUESTS, "import", true);
    validate(root, &suite);

    let ids = lock_ids(&suite, REQUESTS);
    // The environment's own paths (the interpreter's site-packages) are not the run's.
    let python = var("DELTABENCH_SWEBENCH_PYTHON_REQUESTS");
    let env_prefix = python
        .parent()
        .and_then(Path::parent)
        .unwrap_or(&python)
        .display()
        .to_string();
    let temp = std::env::temp_dir().display().to_string();
    let run_specific: Vec<&String> = ids
        .iter()
        .filter(|id| {
            let id = id.replace(&env_prefix, "");
            id.contains(&root.display().to_string())
                || id.contains("/dev/shm/")
                || id.contains("/tmp/")
                || id.contains(&format!("{temp}/"))
                || id.contains("deltabench-")
                || id.contains("/trials/")
                || id.contains("/merged/")
        })
        .collect();
    assert!(
        run_specific.is_empty(),
        "lock ids holding a path of the run: {run_specific:#?}"
    );
    let with_workspace: Vec<&String> = ids.iter().filter(|id| id.contains("{workspace}")).collect();
    assert_eq!(
        with_workspace,
        [
            "tests/test_utils.py::TestExtractZippedPaths::test_unzipped_paths_unchanged[{workspace}/tests/test_utils.py]"
        ],
        "the id parametrized with the test file's path"
    );
    eprintln!(
        "lock: {} ids, none holding a path of the run; {with_workspace:?}",
        ids.len()
    );

    for n in ["oracle-1", "oracle-2"] {
        let records = run(root, &suite, n, &["--agent", "oracle"]);
        assert_eq!(records.len(), 1, "{records:#?}");
        assert_eq!(records[0]["outcome"], "pass", "{:#}", records[0]);
    }
}

/// pytest-dev__pytest-10081: an agent that only appends a blank line to README.rst fails (the
/// hook once made the FAIL_TO_PASS test pass on the unfixed base, and with it this agent).
#[test]
#[ignore = "slow, real SWE-bench row: needs $DELTABENCH_SWEBENCH_VERIFIED_ROWS, $DELTABENCH_SWEBENCH_REPOS, $DELTABENCH_SWEBENCH_PYTHON_PYTEST (see the module doc)"]
fn real_row_pytest_10081_a_blank_line_in_the_readme_fails() {
    let tmp = temp_dir();
    let root = tmp.path();
    let suite = import(root, PYTEST, "import", true);
    validate(root, &suite);
    std::fs::write(
        root.join("agents.yaml"),
        "agents:\n  blank-readme:\n    kind: command\n    run: echo >> README.rst\n",
    )
    .unwrap();
    let records = run(
        root,
        &suite,
        "blank-readme",
        &["--agents", "agents.yaml", "--agent", "blank-readme"],
    );
    assert_eq!(records.len(), 1, "{records:#?}");
    let record = &records[0];
    assert_eq!(record["outcome"], "fail", "{record:#}");
    let grader = record["grader"].as_str().unwrap_or_default();
    assert!(
        grader.contains(
            "not passed: FAIL_TO_PASS testing/test_unittest.py::test_pdb_teardown_skipped_for_classes[@unittest.skip]"
        ),
        "{record:#}"
    );
}

/// The hook is inert on psf__requests-6028: see [`differential`].
#[test]
#[ignore = "slow, real SWE-bench row: needs $DELTABENCH_SWEBENCH_VERIFIED_ROWS, $DELTABENCH_SWEBENCH_REPOS, $DELTABENCH_SWEBENCH_PYTHON_REQUESTS (see the module doc)"]
fn real_row_requests_6028_outcomes_are_the_same_with_and_without_the_hook() {
    differential(REQUESTS);
}

/// The hook is inert on pytest-dev__pytest-10081: see [`differential`].
#[test]
#[ignore = "slow, real SWE-bench row: needs $DELTABENCH_SWEBENCH_VERIFIED_ROWS, $DELTABENCH_SWEBENCH_REPOS, $DELTABENCH_SWEBENCH_PYTHON_PYTEST (see the module doc)"]
fn real_row_pytest_10081_outcomes_are_the_same_with_and_without_the_hook() {
    differential(PYTEST);
}

/// The differential: the row's test command, run by deltabench with its hook and run by
/// deltabench with a command that drops the hook from `PYTHONPATH`, on the base with the test
/// patch (`noop`) and with the gold patch (`oracle`), twice each; every test's outcome in
/// pytest's `-rA` summary must be the same both ways. Both sides go through the binary under
/// test, so the hook is exactly what a trial gets (its files, its environment, its channel),
/// and the sides differ only by the hook. A test whose outcome differs between the two trials of
/// one side is flaky: listed, not counted. Parametrized ids holding the workspace path are
/// compared with `{workspace}` in its place (pytest's `rootdir:` line names it).
fn differential(row: &str) {
    let tmp = temp_dir();
    let root = tmp.path();
    let mut sides = BTreeMap::new();
    for (side, hook) in [("hook", true), ("plain", false)] {
        let suite = import(root, row, side, hook);
        let records = run(
            root,
            &suite,
            side,
            &[
                "--agent", "noop", "--agent", "oracle", "--trials", "2", "-j", "1",
            ],
        );
        assert_eq!(records.len(), 4, "{records:#?}");
        for r in &records {
            let agent = r["agent"].as_str().unwrap();
            let want = if agent == "oracle" { "pass" } else { "fail" };
            assert_eq!(r["outcome"], want, "{side}: {r:#}");
            let trial = root
                .join(side)
                .join("trials")
                .join(row)
                .join(agent)
                .join(r["trial"].to_string());
            // tests.json lists test names only when the hook reported them.
            let report: serde_json::Value =
                serde_json::from_str(&std::fs::read_to_string(trial.join("tests.json")).unwrap())
                    .unwrap();
            assert_eq!(
                report.get("names").is_some_and(|n| !n.is_null()),
                hook,
                "{side} {agent} #{}: the hook {} in this run: {report:#}",
                r["trial"],
                if hook { "did not report" } else { "reported" }
            );
            let log = std::fs::read_to_string(trial.join("verify.log")).unwrap();
            let outcomes = summary(&log);
            assert!(
                !outcomes.is_empty(),
                "no -rA summary in {}",
                trial.display()
            );
            sides
                .entry(agent.to_owned())
                .or_insert_with(BTreeMap::new)
                .entry(side)
                .or_insert_with(Vec::new)
                .push(outcomes);
        }
    }

    let mut differing = Vec::new();
    for (agent, by_side) in &sides {
        let mut flaky = BTreeSet::new();
        for runs in by_side.values() {
            for test in runs[0].keys().chain(runs[1].keys()) {
                if runs[0].get(test) != runs[1].get(test) {
                    flaky.insert(test.clone());
                }
            }
        }
        let (hook, plain) = (&by_side["hook"][0], &by_side["plain"][0]);
        let mut counts: BTreeMap<&str, (usize, usize)> = BTreeMap::new();
        for outcome in hook.values() {
            counts.entry(outcome).or_default().0 += 1;
        }
        for outcome in plain.values() {
            counts.entry(outcome).or_default().1 += 1;
        }
        eprintln!(
            "{row} / {agent}: {} tests with the hook, {} without; (with, without) by outcome: {counts:?}",
            hook.len(),
            plain.len()
        );
        for test in hook.keys().chain(plain.keys()).collect::<BTreeSet<_>>() {
            let (a, b) = (hook.get(test), plain.get(test));
            if a != b {
                let note = if flaky.contains(test) { " (flaky)" } else { "" };
                eprintln!("DIFF{note} {agent} {test}: with the hook {a:?}, without {b:?}");
                if !flaky.contains(test) {
                    differing.push(format!(
                        "{agent} {test}: with the hook {a:?}, without {b:?}"
                    ));
                }
            }
        }
        if !flaky.is_empty() {
            eprintln!("{row} / {agent}: flaky, not counted: {flaky:?}");
        }
    }
    assert!(
        differing.is_empty(),
        "{row}: per-test outcomes differ with the hook: {differing:#?}"
    );
    eprintln!("{row}: per-test outcomes identical with and without the hook");
}

/// Each test's outcome in the last `short test summary info` of a pytest `-rA` log (earlier
/// ones are pytester's inner runs): `PASSED`, `FAILED`, `ERROR`, `XFAIL`, `XPASS` by node id,
/// `SKIPPED` by location and reason (its lines name no test), as `SKIPPED xN`. The workspace
/// path, from the first `rootdir:` line, is replaced by `{workspace}`.
fn summary(log: &str) -> BTreeMap<String, String> {
    let workspace = log
        .lines()
        .find_map(|line| line.strip_prefix("rootdir: "))
        .map(|rest| rest.split(',').next().unwrap().trim().to_owned());
    let lines: Vec<&str> = log.lines().collect();
    let is_header = |line: &str| {
        let inner = line.trim_matches('=');
        line.starts_with('=') && inner.trim() == "short test summary info"
    };
    let Some(start) = lines.iter().rposition(|line| is_header(line)) else {
        return BTreeMap::new();
    };
    let mut found = BTreeMap::new();
    for line in &lines[start + 1..] {
        if line.starts_with('=') {
            break;
        }
        let line = match &workspace {
            Some(dir) => line.replace(dir.as_str(), "{workspace}"),
            None => (*line).to_owned(),
        };
        let Some((kind, rest)) = line.split_once(' ') else {
            continue;
        };
        match kind {
            "SKIPPED" => {
                // "SKIPPED [N] location: reason".
                let (count, location) = rest
                    .strip_prefix('[')
                    .and_then(|r| r.split_once("] "))
                    .unwrap_or(("1", rest));
                found.insert(location.to_owned(), format!("SKIPPED x{count}"));
            }
            "PASSED" | "FAILED" | "ERROR" | "XFAIL" | "XPASS" => {
                let id = if kind == "PASSED" {
                    rest
                } else {
                    rest.split(" - ").next().unwrap()
                };
                found.insert(id.to_owned(), kind.to_owned());
            }
            _ => {}
        }
    }
    found
}

/// The summary parser on the shapes pytest 7 prints.
#[test]
fn summary_reads_the_last_short_test_summary() {
    let log = "\
rootdir: /w/merged, configfile: pyproject.toml
=========================== short test summary info ============================
PASSED inner.py::test_x
============================== 1 passed in 0.01s ===============================
=========================== short test summary info ============================
PASSED t.py::test_a[/w/merged/t.py]
FAILED t.py::test_b - AssertionError: no
ERROR t.py::test_c - fixture 'x' not found
XFAIL t.py::test_d - reason: later
SKIPPED [2] t.py:10: no network
=================== 1 failed, 1 passed, 2 skipped in 0.10s ====================
";
    let found = summary(log);
    let want: BTreeMap<String, String> = [
        ("t.py::test_a[{workspace}/t.py]", "PASSED"),
        ("t.py::test_b", "FAILED"),
        ("t.py::test_c", "ERROR"),
        ("t.py::test_d", "XFAIL"),
        ("t.py:10: no network", "SKIPPED x2"),
    ]
    .into_iter()
    .map(|(a, b)| (a.to_owned(), b.to_owned()))
    .collect();
    assert_eq!(found, want);
}
