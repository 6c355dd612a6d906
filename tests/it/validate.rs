//! `validate` on tasks that are wrong in the ways a first suite is: each bad task says why from
//! the evidence its trials left, and the scratch run stays for reading; a killed validate's
//! scratch is `gc`'s.

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::Duration;

use crate::common::{
    assert_no_leftovers, deltabench, git_repo, leftovers, stderr, stdout, temp_dir, wait_until,
    write_files, write_suite,
};
use crate::crash::processes_with;

const SUITE: &str = r#"name: reasons
repo: repo
tasks:
  # The hidden test lands at the root, where `discover -s tests` does not look.
  - id: zero-tests
    instruction: fix add
    tests: flat/
    verify: "python3 -m unittest discover -s tests -t ."
    solution: fix/
  - id: wrong-fix
    instruction: fix add
    tests: hidden/
    verify: "python3 -m unittest -v tests.test_calc"
    solution: wrong/
  - id: not-found
    instruction: fix add
    tests: hidden/
    verify: "no-such-verify-tool --check"
    solution: fix/
  - id: unchanged
    instruction: fix add
    tests: passing/
    verify: "python3 -m unittest -v tests.test_truth"
    solution: fix/
  - id: good
    instruction: fix add
    tests: hidden/
    verify: "python3 -m unittest -v tests.test_calc"
    solution: fix/
"#;

const TEST_CALC: &str = "import unittest\n\nfrom calc import add\n\n\nclass CalcTest(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n";

/// A repo whose `add` subtracts, and the suite above.
fn reasons_suite() -> tempfile::TempDir {
    let tmp = temp_dir();
    let root = tmp.path();
    git_repo(
        root,
        &[
            ("calc.py", "def add(a, b):\n    return a - b\n"),
            ("tests/__init__.py", ""),
        ],
    );
    write_files(
        root,
        &[
            ("flat/test_calc.py", TEST_CALC),
            ("hidden/tests/test_calc.py", TEST_CALC),
            (
                "passing/tests/test_truth.py",
                "import unittest\n\n\nclass TruthTest(unittest.TestCase):\n    def test_truth(self):\n        self.assertTrue(True)\n",
            ),
            ("fix/calc.py", "def add(a, b):\n    return a + b\n"),
            ("wrong/calc.py", "def add(a, b):\n    return a * b\n"),
        ],
    );
    write_suite(root, SUITE);
    std::fs::create_dir_all(root.join("work")).unwrap();
    tmp
}

fn validate(root: &Path, extra: &[&str]) -> Output {
    deltabench(root)
        .args(["validate", "suite.yaml", "--workdir"])
        .arg(root.join("work"))
        .args(extra)
        .output()
        .unwrap()
}

/// The lines from the task's `BAD` line up to the next task's line.
fn block<'a>(text: &'a str, task: &str) -> &'a str {
    let start = text
        .find(&format!("BAD  {task}: "))
        .unwrap_or_else(|| panic!("no BAD line for {task}:\n{text}"));
    let rest = &text[start..];
    let end = rest[1..]
        .find("\nBAD  ")
        .or_else(|| rest[1..].find("\nok   "))
        .or_else(|| rest[1..].find("\nkept "))
        .map_or(rest.len(), |i| i + 2);
    &rest[..end]
}

/// The scratch folder `validate` said it kept.
fn kept(text: &str) -> PathBuf {
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("kept the validate run: "))
        .unwrap_or_else(|| panic!("no kept folder named:\n{text}"));
    PathBuf::from(line.split(" (").next().unwrap())
}

#[test]
fn every_bad_task_says_why_with_its_verify_output_and_its_run_is_kept() {
    let tmp = reasons_suite();
    let root = tmp.path();
    let output = validate(root, &[]);
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(1), "{text}\n{}", stderr(&output));

    let zero = block(&text, "zero-tests");
    assert!(
        zero.contains("zero tests ran: ") && zero.contains("(unittest) ran no test"),
        "{zero}"
    );
    assert!(zero.contains("copied onto the workspace root"), "{zero}");
    assert!(zero.contains("Ran 0 tests"), "the output tail: {zero}");

    let wrong = block(&text, "wrong-fix");
    assert!(
        wrong.contains(
            "reference fails: the verify command fails with the solution applied (verify exited 1)"
        ),
        "{wrong}"
    );
    assert!(
        wrong.contains("\n       failed: tests.test_calc.CalcTest.test_add\n"),
        "{wrong}"
    );
    // The tail of verify.log, indented under the task.
    assert!(wrong.contains("verify.log"), "{wrong}");
    assert!(
        wrong.contains("\n         AssertionError: 6 != 5\n"),
        "{wrong}"
    );
    assert!(wrong.contains("\n         FAILED (failures=1)"), "{wrong}");

    let missing = block(&text, "not-found");
    assert!(
        missing.contains("the verify command was not found: exit 127"),
        "{missing}"
    );
    assert!(
        missing.contains("no-such-verify-tool") && missing.contains("not found"),
        "the shell's message: {missing}"
    );

    let unchanged = block(&text, "unchanged");
    assert!(
        unchanged
            .contains("passes without change: the verify command succeeds on the untouched base"),
        "{unchanged}"
    );
    assert!(
        unchanged.contains("passed on the base: tests.test_truth.TruthTest.test_truth"),
        "{unchanged}"
    );
    assert!(unchanged.contains("\n         OK"), "{unchanged}");

    assert!(text.contains("\nok   good\n"), "{text}");
    assert!(text.contains("4 of 5 tasks are unsound"), "{text}");

    // The run is kept for reading, with every trial's evidence.
    let scratch = kept(&text);
    assert!(
        scratch.starts_with(root.join("work")),
        "{}",
        scratch.display()
    );
    let trial = scratch.join("run/trials/wrong-fix/oracle/1");
    for file in ["verify.log", "tests.json", "diff.patch", "result.json"] {
        assert!(
            trial.join(file).is_file(),
            "{file} missing in {}",
            trial.display()
        );
    }
    // A kept folder is the user's: gc leaves it.
    let gc = deltabench(root).arg("gc").output().unwrap();
    assert_eq!(gc.status.code(), Some(0), "{}", stderr(&gc));
    assert!(scratch.is_dir(), "gc removed a kept run: {}", stdout(&gc));
}

#[test]
fn task_picks_tasks_and_keep_keeps_a_sound_run() {
    let tmp = reasons_suite();
    let root = tmp.path();
    let work = root.join("work");

    let output = validate(root, &["--task", "good"]);
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(0), "{text}\n{}", stderr(&output));
    assert!(text.contains("ok   good\n"), "{text}");
    assert!(text.contains("all 1 tasks are sound"), "{text}");
    assert!(
        !text.contains("wrong-fix") && !text.contains("kept"),
        "{text}"
    );
    assert_no_leftovers(&work);

    let output = validate(root, &["--task", "good", "--task", "wrong-fix", "--keep"]);
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(1), "{text}");
    assert!(text.contains("1 of 2 tasks are unsound"), "{text}");
    assert!(!text.contains("zero-tests"), "{text}");
    let scratch = kept(&text);
    assert!(
        scratch
            .join("run/trials/good/oracle/1/verify.log")
            .is_file()
    );
    std::fs::remove_dir_all(&scratch).unwrap();

    let output = validate(root, &["--task", "good", "--keep"]);
    let text = stdout(&output);
    assert_eq!(output.status.code(), Some(0), "{text}");
    assert!(
        kept(&text)
            .join("run/trials/good/noop/1/verify.log")
            .is_file()
    );

    // Its message (unknown task 'nope', the suite's tasks): `cli::validate_unknown_task`.
    let output = validate(root, &["--task", "nope"]);
    assert_eq!(output.status.code(), Some(2), "{}", stdout(&output));
}

#[test]
fn a_closed_stdout_does_not_stop_validate_from_cleaning_up() {
    let tmp = reasons_suite();
    let root = tmp.path();
    // As `validate ... | head -0`: the reader is gone before the first line.
    let mut child = deltabench(root)
        .args(["validate", "suite.yaml", "--task", "good", "--workdir"])
        .arg(root.join("work"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    assert_no_leftovers(&root.join("work"));
}

#[test]
fn gc_removes_the_scratch_of_a_killed_validate() {
    let tmp = temp_dir();
    let root = tmp.path();
    git_repo(root, &[("a.txt", "a\n")]);
    let token = format!("deltabench-validate-token-{}", std::process::id());
    let marker = root.join("verify-started");
    write_files(root, &[("fix/a.txt", "fixed\n")]);
    write_suite(
        root,
        &format!(
            "name: killed\nrepo: repo\ntasks:\n  - id: t\n    instruction: fix\n    verify: \"touch {}; sh -c 'sleep 300 || echo {token}'\"\n    solution: fix/\n",
            marker.display()
        ),
    );
    let work = root.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let mut child = deltabench(root)
        .args(["validate", "suite.yaml", "-j", "2", "--workdir"])
        .arg(&work)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_until(Duration::from_secs(60), "the start of verify", || {
        assert!(child.try_wait().unwrap().is_none(), "validate ended early");
        marker.exists()
    });
    child.kill().unwrap();
    child.wait().unwrap();
    let scratch: Vec<String> = leftovers(&work)
        .into_iter()
        .filter(|p| p.starts_with("deltabench-validate-") && !p.contains('/'))
        .collect();
    assert_eq!(scratch.len(), 1, "{:?}", leftovers(&work));

    let gc = deltabench(root).arg("gc").output().unwrap();
    let text = stdout(&gc);
    assert_eq!(gc.status.code(), Some(0), "{text}\n{}", stderr(&gc));
    assert!(
        text.contains(&format!(
            "removed lease of dead validate {}",
            work.join(&scratch[0]).display()
        )),
        "{text}"
    );
    wait_until(
        Duration::from_secs(5),
        "the end of the verify command after gc",
        || processes_with(&token) == 0,
    );
    assert_no_leftovers(&work);
}
