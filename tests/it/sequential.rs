//! `run --until-decided` and `--until-ci-width`: runs in rounds that stop when the answer is
//! known, through the real binary on a generated suite.

use std::path::Path;

use crate::common::{deltabench, one_file_repo, stderr, stdout, write_suite};

/// Ten tasks; `all` and `same` pass every one (by writing `done`), `nine` breaks t9.
fn ten_task_suite(root: &Path, name: &str) {
    let mut yaml = format!("name: {name}\nrepo: repo\nagents:\n");
    for (agent, passes) in [
        ("all", "*"),
        ("same", "*"),
        ("nine", "t0|t1|t2|t3|t4|t5|t6|t7|t8"),
    ] {
        yaml.push_str(&format!(
            "  {agent}: {{kind: command, run: 'case \"$DELTABENCH_INSTRUCTION\" in {passes}) touch done;; esac'}}\n"
        ));
    }
    yaml.push_str("tasks:\n");
    for i in 0..10 {
        yaml.push_str(&format!(
            "  - {{id: t{i}, instruction: t{i}, verify: \"test -f done\"}}\n"
        ));
    }
    write_suite(root, &yaml);
}

fn run(root: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let work = root.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let output = deltabench(root)
        .args(["run", "suite.yaml", "-j", "2", "--workdir"])
        .arg(&work)
        .args(args)
        .output()
        .unwrap();
    (output.status.code(), stdout(&output), stderr(&output))
}

/// The lines from the comparison on (the summary table carries timings).
fn closing(root: &Path, text: &str) -> String {
    let start = text.find("\ncandidate ").map_or(0, |i| i + 1);
    text[start..].replace(&root.display().to_string(), "[TMP]")
}

#[test]
fn a_broken_task_is_a_regression_before_the_cap_and_the_same_agent_is_not() {
    let tmp = one_file_repo();
    let root = tmp.path();
    ten_task_suite(root, "paired");
    let (code, _, err) = run(root, &["--agent", "all", "--trials", "10", "--out", "base"]);
    assert_eq!(code, Some(0), "{err}");

    let (code, out, err) = run(
        root,
        &[
            "--agent",
            "nine",
            "--until-decided",
            "--max-trials",
            "10",
            "--baseline",
            "base",
            "--out",
            "broken",
        ],
    );
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(err.contains("round 1 of at most 10: undecided"), "{err}");
    insta::assert_snapshot!("sequential_regressed", closing(root, &out));
    let trials = crate::common::trials(&root.join("broken"));
    assert!(
        trials.len() < 100,
        "stopped before the cap: {}",
        trials.len()
    );

    let (code, out, err) = run(
        root,
        &[
            "--agent",
            "same",
            "--until-decided",
            "--max-trials",
            "10",
            "--baseline",
            "base",
            "--out",
            "same",
        ],
    );
    assert_eq!(code, Some(0), "{out}{err}");
    insta::assert_snapshot!("sequential_not_regressed", closing(root, &out));

    // Two agents of one run, in rounds side by side.
    let (code, out, err) = run(
        root,
        &[
            "--agent",
            "all",
            "--agent",
            "nine",
            "--until-decided",
            "--max-trials",
            "10",
            "--out",
            "pair",
        ],
    );
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(
        out.contains("sequential gate ('nine' against 'all'"),
        "{out}"
    );
    assert!(out.contains(": regressed after round"), "{out}");

    // Too few rounds to decide: undecided at the cap, exit 3.
    let (code, out, err) = run(
        root,
        &[
            "--agent",
            "all",
            "--agent",
            "nine",
            "--until-decided",
            "--max-trials",
            "2",
            "--out",
            "short",
        ],
    );
    assert_eq!(code, Some(3), "{out}{err}");
    assert!(out.contains("UNDECIDED at the cap"), "{out}");
}

#[test]
fn bad_sequential_input_is_a_usage_error_before_anything_runs() {
    let tmp = one_file_repo();
    let root = tmp.path();
    ten_task_suite(root, "paired");
    let (code, _, err) = run(root, &["--agent", "all", "--out", "base"]);
    assert_eq!(code, Some(0), "{err}");
    let cases: [(&[&str], &str); 4] = [
        (
            &["--agent", "all", "--until-decided"],
            "--until-decided compares two sides, and this run has 1 agent(s) and no --baseline",
        ),
        (
            &[
                "--agent",
                "all",
                "--agent",
                "nine",
                "--until-decided",
                "--margin",
                "0",
            ],
            "--margin 0 is out of range: use a fraction in (0, 1)",
        ),
        (
            &[
                "--agent",
                "all",
                "--agent",
                "nine",
                "--until-decided",
                "--margin",
                "1",
            ],
            "--margin 1 is out of range",
        ),
        (
            &["--agent", "all", "--until-ci-width", "0"],
            "--until-ci-width 0 is out of range",
        ),
    ];
    for (args, message) in cases {
        let mut args = args.to_vec();
        args.extend(["--out", "refused"]);
        let (code, out, err) = run(root, &args);
        assert_eq!(code, Some(2), "{args:?}: {out}{err}");
        assert!(err.contains(message), "{args:?}: {err}");
        assert!(!root.join("refused").exists(), "{args:?} ran something");
    }
    // A baseline of another suite.
    let other = one_file_repo();
    ten_task_suite(other.path(), "another");
    let base = root.join("base");
    let (code, out, err) = run(
        other.path(),
        &[
            "--agent",
            "all",
            "--until-decided",
            "--baseline",
            base.to_str().unwrap(),
            "--out",
            "refused",
        ],
    );
    assert_eq!(code, Some(2), "{out}{err}");
    assert!(
        err.contains("is a run of suite 'paired', and this run is of suite 'another'"),
        "{err}"
    );
    assert!(!other.path().join("refused").exists());
}

#[test]
fn until_ci_width_stops_when_the_interval_is_narrow() {
    let tmp = one_file_repo();
    let root = tmp.path();
    ten_task_suite(root, "paired");
    let (code, out, err) = run(
        root,
        &[
            "--agent",
            "all",
            "--until-ci-width",
            "0.2",
            "--max-trials",
            "8",
            "--out",
            "ci",
        ],
    );
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains("stopping rule: met after 2 trial(s) per task"),
        "{out}"
    );
    assert_eq!(crate::common::trials(&root.join("ci")).len(), 20);
    // Unreachable within the cap: exit 3, said.
    let (code, out, err) = run(
        root,
        &[
            "--agent",
            "nine",
            "--until-ci-width",
            "0.01",
            "--max-trials",
            "2",
            "--out",
            "wide",
        ],
    );
    assert_eq!(code, Some(3), "{out}{err}");
    assert!(out.contains("NOT met (the --max-trials cap)"), "{out}");
}
