//! Each exit code, through the real binary: 0 ok, 1 a verdict failed, 2 usage or configuration
//! error, 3 unscored trials, 130 interrupted. Also covered elsewhere: 1 by
//! `compare::*regress*` and validate's tests, 3 by `crash::retries_*` and
//! `gaming::a_sandbox_that_cannot_start_*`, 130 by `lifecycle::*interrupt*`.

use crate::common::{deltabench, one_file_repo, run_suite, stderr, stdout, write_suite};

const SUITE: &str = "name: exits\nrepo: repo\ntasks:\n  - {id: t, instruction: x, verify: \"grep -q fixed a.txt\", solution: sol}\n";

#[test]
fn exit_codes_match_the_help_table() {
    let tmp = one_file_repo();
    write_suite(tmp.path(), SUITE);
    crate::common::write_files(tmp.path(), &[("sol/a.txt", "fixed\n")]);
    // 0: every trial scored, a failing noop included.
    let (output, _, _) = run_suite(tmp.path(), &["--agent", "noop", "--agent", "oracle"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    // 2: the same --out again holds a run.
    let (again, _, _) = run_suite(tmp.path(), &["--agent", "noop"]);
    // Its message: the snapshot `cli::run_out_in_use`.
    assert_eq!(again.status.code(), Some(2), "{}", stderr(&again));
    // 2: a bad flag.
    let bad = deltabench(tmp.path())
        .args(["run", "suite.yaml", "--trials", "0"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2), "{}", stderr(&bad));
    // 3: a setup that fails is the harness's, not the agent's.
    write_suite(
        tmp.path(),
        &SUITE.replace("verify:", "setup: \"exit 9\", verify:"),
    );
    let work = tmp.path().join("work");
    let unscored = deltabench(tmp.path())
        .args(["run", "suite.yaml", "--agent", "noop", "--workdir"])
        .arg(&work)
        .arg("--out")
        .arg(tmp.path().join("out-3"))
        .output()
        .unwrap();
    assert_eq!(unscored.status.code(), Some(3), "{}", stderr(&unscored));
    // 1: validate finds the task unsound (the setup fails, so nothing is proven).
    let validated = deltabench(tmp.path())
        .args(["validate", "suite.yaml", "--workdir"])
        .arg(&work)
        .output()
        .unwrap();
    assert_eq!(validated.status.code(), Some(1), "{}", stdout(&validated));
    // The help's table of the same codes: the snapshot `cli::help`.
}

/// The plain progress lines (no TTY): one per trial, with the reason a trial did not pass.
#[test]
fn progress_lines_give_the_reason() {
    let tmp = one_file_repo();
    crate::common::write_files(tmp.path(), &[("hidden/check.txt", "x\n")]);
    write_suite(
        tmp.path(),
        "name: progress\nrepo: repo\nagents:\n  \
         fixer: {kind: command, run: \"echo fixed > a.txt\"}\n  \
         cheat: {kind: command, run: \"echo fixed > a.txt; echo y > check.txt\"}\n  \
         crash: {kind: command, run: \"echo oops >&2; exit 4\"}\n\
         tasks:\n  - {id: t, instruction: x, tests: hidden, verify: \"grep -q fixed a.txt\"}\n",
    );
    let (output, _, _) = run_suite(
        tmp.path(),
        &[
            "-j", "1", "--agent", "fixer", "--agent", "cheat", "--agent", "crash", "--agent",
            "noop",
        ],
    );
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let lines: Vec<String> = stderr(&output)
        .lines()
        .filter(|l| l.starts_with('['))
        .map(str::to_owned)
        .collect();
    insta::with_settings!({filters => vec![(r"\(\d+\.\d\ds\)", "([TIME])")]}, {
        insta::assert_snapshot!(lines.join("\n"));
    });
}
