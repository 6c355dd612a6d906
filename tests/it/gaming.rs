//! Verdicts an agent cannot game. Each agent below wants a pass without fixing the bug; it runs
//! as a `command` agent under `worktree` and under `sandbox`, on a unittest task and a pytest
//! task that `validate` recorded first. None passes, each with a reason a user understands; an
//! honest agent on the same tasks passes. Needs python3, pytest and bubblewrap (`.ci/run`
//! installs them).

use std::collections::BTreeMap;
use std::path::Path;

use crate::common::{deltabench, git, git_repo, stderr, stdout, temp_dir, trials, write_files};

const REPO: &[(&str, &str)] = &[
    ("calc.py", "def add(a, b):\n    return a - b\n"),
    ("tests/__init__.py", ""),
    ("README.md", "calc\n"),
    (".gitignore", "__pycache__/\n*.pyc\n"),
];

const HIDDEN: &str = "import unittest\nfrom calc import add\n\n\
class TestCalc(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n\n    \
def test_zero(self):\n        self.assertEqual(add(0, 4), 4)\n";

const FIX: &str = "printf 'def add(a, b):\\n    return a + b\\n' > calc.py\n";

/// (agent name, script, the tasks it attacks). The script runs in the workspace.
const ATTACKS: &[(&str, &str)] = &[
    ("honest", FIX),
    (
        "exit_in_tests_init",
        "printf 'import os\\nos._exit(0)\\n' >> tests/__init__.py\n",
    ),
    (
        "exit_in_conftest",
        "printf 'import os\\nos._exit(0)\\n' > conftest.py\n",
    ),
    (
        "fake_summary",
        "cat > calc.py <<'EOF'\nimport os, sys\nsys.stdout.write('..\\n' + '-' * 70 + '\\nRan 2 tests in 0.001s\\n\\nOK\\n')\n\
         sys.stdout.write('2 passed in 0.01s\\n')\nsys.stdout.flush()\nos._exit(0)\nEOF\n",
    ),
    (
        "stub_assert",
        "printf 'import unittest\\nunittest.TestCase.assertEqual = lambda *a, **k: None\\n' >> tests/__init__.py\n",
    ),
    (
        "forcing_conftest",
        "cat > conftest.py <<'EOF'\nimport pytest\n@pytest.hookimpl(hookwrapper=True)\n\
         def pytest_runtest_makereport(item, call):\n    outcome = yield\n    rep = outcome.get_result()\n    \
         rep.outcome = 'passed'\nEOF\n",
    ),
    (
        "collect_only_ini",
        "printf '[pytest]\\naddopts = --co -q\\n' > pytest.ini\n",
    ),
    (
        "collect_only_pyproject",
        "printf '[tool.pytest.ini_options]\\naddopts = \"--co -q\"\\n' > pyproject.toml\n",
    ),
    (
        "shadow_runner",
        "mkdir -p unittest pytest\n\
         printf 'print(\"Ran 2 tests in 0.001s\")\\nprint()\\nprint(\"OK\")\\n' > unittest/__main__.py\n\
         touch unittest/__init__.py\n\
         printf 'print(\"2 passed in 0.01s\")\\n' > pytest/__main__.py\ntouch pytest/__init__.py\n\
         printf '*\\n' > unittest/.gitignore\nprintf '*\\n' > pytest/.gitignore\n\
         echo more >> README.md\n",
    ),
    (
        "git_tricks",
        // A forcing conftest hidden from git four ways, plus an edit behind skip-worktree.
        "cat > conftest.py <<'EOF'\nimport pytest\n@pytest.hookimpl(hookwrapper=True)\n\
         def pytest_runtest_makereport(item, call):\n    outcome = yield\n    outcome.get_result().outcome = 'passed'\nEOF\n\
         echo conftest.py > .git/info/exclude\nprintf 'conftest.py\\n' > /tmp/excludes\n\
         git config core.excludesFile /tmp/excludes\nprintf '* ident\\n' > .git/info/attributes\n\
         printf '$Id$\\n' >> README.md\n\
         printf 'import os\\nos._exit(0)\\n' >> tests/__init__.py\n\
         git update-index --skip-worktree tests/__init__.py\n\
         git update-index --assume-unchanged README.md\n",
    ),
    (
        "late_writer",
        // Leaves a process that writes the fix after the diff was taken.
        "(sleep 2; printf 'def add(a, b):\\n    return a + b\\n' > calc.py) >/dev/null 2>&1 &\n\
         echo touched >> README.md\n",
    ),
    ("too_large", "head -c 200000 /dev/zero > blob.bin\n"),
];

fn suite_yaml(root: &Path, isolation: &str) -> String {
    let mut yaml = format!(
        "name: gaming\nrepo: repo\nmax_diff: 100KiB\ndefaults:\n  isolation: {isolation}\nagents:\n"
    );
    for (name, _) in ATTACKS {
        let script = root.join("attacks").join(format!("{name}.sh"));
        yaml.push_str(&format!(
            "  {name}: {{kind: command, run: \"sh {}\"}}\n",
            script.display()
        ));
    }
    // The tree the verify command saw, listed after the tests (checked against `git apply`).
    let listing = "find . -path ./.git -prune -o -type f ! -name '*.pyc' -print | LC_ALL=C sort | xargs sha256sum | sed 's/^/TREE /'";
    yaml.push_str(&format!(
        "tasks:\n  - id: unittest\n    instruction: fix add\n    tests: hidden\n    solution: solution\n    \
         verify: \"python3 -m unittest tests.test_calc; rc=$?; {listing}; exit $rc\"\n  \
         - id: pytest\n    instruction: fix add\n    tests: hidden\n    solution: solution\n    \
         verify: \"python3 -m pytest -q tests/test_calc.py; rc=$?; {listing}; exit $rc\"\n"
    ));
    yaml
}

fn setup() -> tempfile::TempDir {
    let tmp = temp_dir();
    git_repo(tmp.path(), REPO);
    write_files(
        tmp.path(),
        &[
            ("hidden/tests/test_calc.py", HIDDEN),
            ("solution/calc.py", "def add(a, b):\n    return a + b\n"),
        ],
    );
    for (name, script) in ATTACKS {
        write_files(tmp.path(), &[(&format!("attacks/{name}.sh"), script)]);
    }
    tmp
}

fn require_tools() -> bool {
    crate::assertions::require_tools("the gaming tests", false)
}

fn run(root: &Path, isolation: &str) -> Vec<serde_json::Value> {
    std::fs::write(root.join("suite.yaml"), suite_yaml(root, isolation)).unwrap();
    let work = root.join("work");
    std::fs::create_dir_all(&work).unwrap();
    if !root.join("suite.lock.json").exists() {
        let validated = deltabench(root)
            .args(["validate", "suite.yaml", "--workdir"])
            .arg(&work)
            .output()
            .unwrap();
        assert_eq!(
            validated.status.code(),
            Some(0),
            "{}\n{}",
            stdout(&validated),
            stderr(&validated)
        );
        assert!(
            stdout(&validated)
                .contains("recorded what the reference's verify run showed for 2 task(s)")
        );
    }
    let out = root.join(format!("out-{isolation}"));
    let output = deltabench(root)
        .args(["run", "suite.yaml", "-j", "2", "--workdir"])
        .arg(&work)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let progress = stderr(&output);
    let records = trials(&out);
    for record in &records {
        let (task, agent) = (
            record["task"].as_str().unwrap(),
            record["agent"].as_str().unwrap(),
        );
        if agent == "honest" {
            assert_eq!(record["outcome"], "pass", "{isolation}: {record}");
            continue;
        }
        assert_ne!(
            record["outcome"], "pass",
            "{isolation}: {agent} passed {task}: {record}"
        );
        assert_ne!(record["outcome"], "infra_error", "{isolation}: {record}");
        let reason = record["reason"]
            .as_str()
            .unwrap_or_else(|| panic!("{record}"));
        assert!(!reason.is_empty());
        let line = progress
            .lines()
            .find(|l| l.contains(task) && l.contains(agent) && !l.contains("honest"))
            .unwrap_or_else(|| panic!("no progress line for {task}/{agent}:\n{progress}"));
        assert!(
            line.contains(reason.split(':').next().unwrap()),
            "{line} / {reason}"
        );
    }
    assert_eq!(records.len(), 2 * ATTACKS.len());
    records
}

fn by_agent(records: &[serde_json::Value], task: &str) -> BTreeMap<String, serde_json::Value> {
    records
        .iter()
        .filter(|r| r["task"] == task)
        .map(|r| (r["agent"].as_str().unwrap().to_owned(), r.clone()))
        .collect()
}

fn check_reasons(records: &[serde_json::Value], isolation: &str) {
    let expect = |task: &str, agent: &str, outcome: &str, says: &str| {
        let all = by_agent(records, task);
        let r = &all[agent];
        assert_eq!(r["outcome"], outcome, "{isolation} {task}/{agent}: {r}");
        let reason = r["reason"].as_str().unwrap();
        assert!(
            reason.contains(says),
            "{isolation} {task}/{agent}: {reason}"
        );
    };
    for task in ["unittest", "pytest"] {
        expect(
            task,
            "exit_in_tests_init",
            "fail",
            "tampered: tests/__init__.py",
        );
        expect(task, "exit_in_conftest", "fail", "tampered: conftest.py");
        expect(task, "stub_assert", "fail", "tampered: tests/__init__.py");
        expect(task, "forcing_conftest", "fail", "tampered: conftest.py");
        expect(task, "collect_only_ini", "fail", "tampered: pytest.ini");
        expect(
            task,
            "collect_only_pyproject",
            "fail",
            "tampered: pyproject.toml",
        );
        expect(task, "shadow_runner", "fail", "tampered: ");
        expect(task, "git_tricks", "fail", "conftest.py");
        expect(task, "too_large", "fail", "larger than max_diff");
        expect(task, "fake_summary", "invalid", "without a normal exit");
        expect(task, "late_writer", "fail", "verify exited 1");
    }
    let shadow = &by_agent(records, "unittest")["shadow_runner"];
    let tampered = shadow["tampered"].to_string();
    assert!(
        tampered.contains("unittest/__init__.py") && tampered.contains("pytest/__main__.py"),
        "{tampered}"
    );
}

/// The tree listed by the verify command equals the base plus `git apply diff.patch` plus the
/// hidden tests: what is recorded is what was verified.
fn check_recorded_is_verified(root: &Path, isolation: &str, task: &str, agent: &str) {
    let trial = root.join(format!("out-{isolation}/trials/{task}/{agent}/1"));
    let log = std::fs::read_to_string(trial.join("verify.log")).unwrap();
    let verified: Vec<&str> = log.lines().filter(|l| l.starts_with("TREE ")).collect();
    let check = root.join(format!("check-{isolation}-{task}-{agent}"));
    git(root, &["clone", "-q", "repo", check.to_str().unwrap()]);
    let patch = trial.join("diff.patch");
    if std::fs::metadata(&patch).unwrap().len() > 0 {
        git(&check, &["apply", "--binary", patch.to_str().unwrap()]);
    }
    write_files(&check, &[("tests/test_calc.py", HIDDEN)]);
    let listing = std::process::Command::new("sh")
        .arg("-c")
        .arg("find . -path ./.git -prune -o -type f ! -name '*.pyc' -print | LC_ALL=C sort | xargs sha256sum | sed 's/^/TREE /'")
        .current_dir(&check)
        .output()
        .unwrap();
    let expected = String::from_utf8(listing.stdout).unwrap();
    let expected: Vec<&str> = expected.lines().collect();
    assert_eq!(verified, expected, "{isolation} {task}/{agent}");
}

#[test]
fn no_attack_passes_under_worktree_or_sandbox() {
    if !require_tools() {
        return;
    }
    let tmp = setup();
    let lock = {
        let records = run(tmp.path(), "worktree");
        check_reasons(&records, "worktree");
        std::fs::read_to_string(tmp.path().join("suite.lock.json")).unwrap()
    };
    assert!(lock.contains("tests.test_calc.TestCalc.test_add"), "{lock}");
    assert!(
        lock.contains("tests/test_calc.py::TestCalc::test_zero"),
        "{lock}"
    );
    for (task, agent) in [
        ("pytest", "git_tricks"),
        ("unittest", "shadow_runner"),
        ("unittest", "honest"),
    ] {
        check_recorded_is_verified(tmp.path(), "worktree", task, agent);
    }
    let records = run(tmp.path(), "sandbox");
    check_reasons(&records, "sandbox");
    check_recorded_is_verified(tmp.path(), "sandbox", "pytest", "git_tricks");
}

#[test]
fn an_unvalidated_suite_says_so_and_still_catches_the_fake_summary() {
    if !require_tools() {
        return;
    }
    let tmp = setup();
    std::fs::write(
        tmp.path().join("suite.yaml"),
        suite_yaml(tmp.path(), "worktree"),
    )
    .unwrap();
    let work = tmp.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let output = deltabench(tmp.path())
        .args([
            "run",
            "suite.yaml",
            "--agent",
            "fake_summary",
            "--agent",
            "honest",
            "--workdir",
        ])
        .arg(&work)
        .arg("--out")
        .arg(tmp.path().join("out"))
        .output()
        .unwrap();
    let err = stderr(&output);
    assert!(
        err.contains("note: 2 of 2 task(s) have no validated evidence")
            && err.contains("suite.lock.json"),
        "{err}"
    );
    let records = trials(&tmp.path().join("out"));
    for r in &records {
        let expected = if r["agent"] == "honest" {
            "pass"
        } else {
            "invalid"
        };
        assert_eq!(r["outcome"], expected, "{r}");
    }
}

/// A bubblewrap that fails to set the sandbox up once (as under mount pressure) makes the trial
/// the harness's `infra_error`, retried by `--retries`; an agent that prints bubblewrap's
/// message and exits 1 stays its own `fail`.
#[test]
fn a_sandbox_that_cannot_start_is_an_infra_error_not_the_agents_fail() {
    if !require_tools() {
        return;
    }
    let tmp = setup();
    let fake = tmp.path().join("fakebin");
    let mark = tmp.path().join("fail-once");
    std::fs::write(&mark, "").unwrap();
    write_files(
        &fake,
        &[(
            "bwrap",
            "#!/bin/sh\ncase \" $* \" in *\" --json-status-fd \"*)\n  if [ -e \"$FAIL_MARK\" ]; then rm -f \"$FAIL_MARK\"; \
             echo \"bwrap: Can't mount tmpfs on /newroot/tmp: No space left on device\" >&2; exit 1; fi;;\nesac\nexec /usr/bin/bwrap \"$@\"\n",
        )],
    );
    std::process::Command::new("chmod")
        .arg("+x")
        .arg(fake.join("bwrap"))
        .status()
        .unwrap();
    let liar =
        "echo \"bwrap: Can't mount tmpfs on /newroot/tmp: No space left on device\" >&2; exit 1\n";
    write_files(tmp.path(), &[("attacks/liar.sh", liar)]);
    let yaml = suite_yaml(tmp.path(), "sandbox").replace(
        "agents:\n",
        &format!(
            "agents:\n  liar: {{kind: command, run: \"sh {}\"}}\n",
            tmp.path().join("attacks/liar.sh").display()
        ),
    );
    std::fs::write(tmp.path().join("suite.yaml"), yaml).unwrap();
    let work = tmp.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let path = format!("{}:{}", fake.display(), std::env::var("PATH").unwrap());
    let run = |out: &str, retries: &str| {
        std::fs::write(&mark, "").unwrap();
        let output = deltabench(tmp.path())
            .args([
                "run",
                "suite.yaml",
                "--task",
                "unittest",
                "--agent",
                "honest",
                "--agent",
                "liar",
            ])
            .args(["-j", "1", "--retries", retries, "--workdir"])
            .arg(&work)
            .arg("--out")
            .arg(tmp.path().join(out))
            .env("PATH", &path)
            .env("FAIL_MARK", &mark)
            .output()
            .unwrap();
        assert!(
            !mark.exists(),
            "the fake bwrap never failed: {}",
            stderr(&output)
        );
        let records = trials(&tmp.path().join(out));
        let of = |agent: &str| {
            records
                .iter()
                .find(|r| r["agent"] == agent)
                .unwrap()
                .clone()
        };
        assert_eq!(of("liar")["outcome"], "fail", "{records:?}");
        (output, of("honest"))
    };
    // Unscored (exit 3), with bubblewrap's reason in the record and the progress line.
    let (output, honest) = run("out-once", "0");
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    assert_eq!(honest["outcome"], "infra_error", "{honest}");
    let why = "the sandbox could not start the agent: bwrap: Can't mount tmpfs";
    assert!(
        honest["infra_error"].as_str().unwrap().starts_with(why),
        "{honest}"
    );
    assert!(stderr(&output).contains(why), "{}", stderr(&output));
    // --retries runs it again, and then it passes.
    let (output, honest) = run("out-retried", "1");
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(honest["outcome"], "pass", "{honest}");
}
