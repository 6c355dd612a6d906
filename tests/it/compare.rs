//! Paired comparison, the CI gate, the planner and ablations, through the real binary.

use std::path::{Path, PathBuf};

use crate::common::{
    assert_tmp_snapshot, deltabench, one_file_repo, run_suite, stderr, stdout, temp_dir, trials,
    write_suite,
};

/// Ten tasks; each agent passes a fixed set of them (by writing `done`), the rest it leaves.
fn ten_task_suite(root: &Path) {
    let mut yaml = String::from("name: paired\nrepo: repo\nagents:\n");
    for (agent, passes) in [
        ("all", "*"),
        ("same", "*"),
        ("two", "t0|t1"),
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

fn compare(root: &Path, args: &[&str]) -> (Option<i32>, String) {
    let output = deltabench(root).arg("compare").args(args).output().unwrap();
    (output.status.code(), stdout(&output) + &stderr(&output))
}

#[test]
fn compare_and_gate_find_the_regression_and_nothing_else() {
    let tmp = one_file_repo();
    ten_task_suite(tmp.path());
    let (output, _, out) = run_suite(tmp.path(), &["--trials", "3", "-j", "4"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let run = out.to_str().unwrap();

    let (code, text) = compare(tmp.path(), &[run, "all", "two", "--gate"]);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("verdict: regressed"), "{text}");
    assert_tmp_snapshot!("gate_two_broken_of_ten", tmp.path(), text);

    let (code, text) = compare(tmp.path(), &[run, "all", "two"]);
    assert_eq!(
        code,
        Some(0),
        "without --gate a regression is reported, not failed: {text}"
    );

    // Two identical agents pass; one task of ten gone from 3/3 to 0/3 fails by default
    // (--max-broken 0), though no test can tell one task of ten from noise.
    let (code, text) = compare(tmp.path(), &[run, "all", "same", "--gate"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("verdict: inconclusive"), "{text}");
    assert!(text.contains("gate: passed"), "{text}");
    let (code, text) = compare(tmp.path(), &[run, "all", "nine", "--gate"]);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("gate: FAILED: 1 task(s) went from always passing to never passing (t9 3/3 -> 0/3), more than --max-broken 0"),
        "{text}"
    );

    // Its message (the run has no agent 'nosuch'; its agents): `cli::compare_unknown_agent`.
    let (code, text) = compare(tmp.path(), &[run, "all", "nosuch"]);
    assert_eq!(code, Some(2), "{text}");

    let output = deltabench(tmp.path())
        .args(["plan", run, "--effect", "0.1", "--power", "0.8"])
        .output()
        .unwrap();
    // Its table (trials per task, tasks needed): the snapshot `cli::plan`.
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
}

#[test]
fn run_with_a_baseline_gates_in_one_step() {
    let tmp = one_file_repo();
    ten_task_suite(tmp.path());
    let work = tmp.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let run = |agent: &str, out: &str, extra: &[&str]| {
        deltabench(tmp.path())
            .args([
                "run",
                "suite.yaml",
                "--agent",
                agent,
                "-j",
                "4",
                "--out",
                out,
                "--workdir",
            ])
            .arg(&work)
            .args(extra)
            .output()
            .unwrap()
    };
    let base = run("all", "base", &[]);
    assert_eq!(base.status.code(), Some(0), "{}", stderr(&base));
    let regressed = run(
        "two",
        "candidate",
        &["--trials", "3", "--baseline", "base", "--gate"],
    );
    assert_eq!(regressed.status.code(), Some(1), "{}", stdout(&regressed));
    assert!(
        stdout(&regressed).contains("verdict: regressed"),
        "{}",
        stdout(&regressed)
    );
    let markdown = deltabench(tmp.path())
        .args([
            "report",
            "candidate",
            "--format",
            "markdown",
            "--baseline",
            "base",
        ])
        .output()
        .unwrap();
    assert_eq!(markdown.status.code(), Some(0), "{}", stderr(&markdown));
    let text = stdout(&markdown);
    assert!(text.contains("### Against the baseline `base`"), "{text}");
    assert!(
        text.contains("broken (pass -> fail)   8") && text.contains("verdict: regressed"),
        "{text}"
    );
    let fine = run("same", "same", &["--baseline", "base", "--gate"]);
    assert_eq!(fine.status.code(), Some(0), "{}", stdout(&fine));
    assert!(stdout(&fine).contains("gate: passed"), "{}", stdout(&fine));
    let missing = run("same", "again", &["--baseline", "nowhere", "--gate"]);
    assert_eq!(
        missing.status.code(),
        Some(2),
        "a bad baseline is refused before the run"
    );
    assert!(!tmp.path().join("again").exists());
}

#[test]
fn demo_ablation_prints_main_effects() {
    let tmp = temp_dir();
    let demo = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/suites/demo"));
    let out = tmp.path().join("out");
    let output = deltabench(tmp.path())
        .arg("run")
        .arg(demo)
        .arg("--agents")
        .arg(demo.join("ablation.yaml"))
        .args(["--agent", "sed-fixer-ablation", "--workdir"])
        .arg(tmp.path())
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let report = deltabench(tmp.path())
        .arg("report")
        .arg(&out)
        .arg("--ablation")
        .output()
        .unwrap();
    assert_eq!(report.status.code(), Some(0), "{}", stderr(&report));
    let text = stdout(&report);
    assert!(
        text.contains("Ablation of sed-fixer-ablation: 4 combinations, 24 trials"),
        "{text}"
    );
    // Calc rules solve two tasks, the text rule one: the main effects are -33.3 and -16.7 points.
    let calc = text
        .lines()
        .find(|l| l.trim_start().starts_with("off") && l.contains("-33.3"))
        .is_some();
    assert!(calc, "{text}");
    assert!(text.contains("-16.7"), "{text}");
    assert!(text.contains("interaction = "), "{text}");
    assert!(text.contains("Pareto front"), "{text}");
}

/// Three tasks that pass when the agent writes `done`. `base` and `same` always do; `cand` never
/// on t1, in only two of its trials on t2, always on t3. A trial claims the lowest free number
/// for its task by `mkdir` (atomic), so "two of five" holds with trials in parallel too. t3's
/// setup fails while `<root>/break-setup` exists: an unscored (`infra_error`) trial on demand.
fn three_task_suite(root: &Path) {
    let claims = root.join("claims");
    std::fs::create_dir_all(&claims).unwrap();
    let claim = format!(
        r#"n=1; while ! mkdir "{}/$DELTABENCH_INSTRUCTION.$n" 2>/dev/null; do n=$((n+1)); done"#,
        claims.display()
    );
    let yaml = format!(
        r#"name: three
repo: repo
agents:
  base: {{kind: command, run: 'touch done'}}
  same: {{kind: command, run: 'touch done'}}
  cand: {{kind: command, run: '{claim}; case "$DELTABENCH_INSTRUCTION" in t1) ;; t2) if [ $n -le 2 ]; then touch done; fi;; *) touch done;; esac'}}
tasks:
  - {{id: t1, instruction: t1, verify: "test -f done"}}
  - {{id: t2, instruction: t2, verify: "test -f done"}}
  - {{id: t3, instruction: t3, verify: "test -f done", setup: "test ! -e {}"}}
"#,
        root.join("break-setup").display()
    );
    write_suite(root, &yaml);
}

/// Runs `agents` of the three-task suite, 5 trials each, into `<root>/<out>`.
fn three_task_run(
    root: &Path,
    out: &str,
    agents: &[&str],
    extra: &[&str],
) -> (Option<i32>, String) {
    let work = root.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let mut command = deltabench(root);
    command
        .args([
            "run",
            "suite.yaml",
            "--trials",
            "5",
            "-j",
            "4",
            "--out",
            out,
            "--workdir",
        ])
        .arg(&work);
    for agent in agents {
        command.args(["--agent", agent]);
    }
    let output = command.args(extra).output().unwrap();
    (output.status.code(), stdout(&output) + &stderr(&output))
}

/// The base/same/cand run of the three-task suite in `<root>/run`.
fn three_task_fixture() -> (tempfile::TempDir, PathBuf) {
    let tmp = one_file_repo();
    three_task_suite(tmp.path());
    let (code, text) = three_task_run(tmp.path(), "run", &["base", "same", "cand"], &[]);
    assert_eq!(code, Some(0), "{text}");
    let counts = |agent: &str, task: &str| {
        trials(&tmp.path().join("run"))
            .iter()
            .filter(|r| r["agent"] == agent && r["task"] == task && r["passed"] == true)
            .count()
    };
    assert_eq!(
        (
            counts("cand", "t1"),
            counts("cand", "t2"),
            counts("cand", "t3")
        ),
        (0, 2, 5)
    );
    let out = tmp.path().join("run");
    (tmp, out)
}

#[test]
fn gate_fails_a_task_broken_in_every_trial_even_on_three_tasks() {
    let (tmp, run) = three_task_fixture();
    let root = tmp.path();
    let run = run.to_str().unwrap();

    // 5/5 -> 0/5 on t1 is significant within its trials (Fisher, Holm over 3 tasks), though
    // 3 tasks can never be significant across tasks: the interval says so instead of
    // excluding 0 next to "not significant".
    let (code, text) = compare(root, &[run, "base", "cand", "--gate"]);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("verdict: regressed (within tasks: t1;"),
        "{text}"
    );
    assert_tmp_snapshot!("gate_regressed", root, text);

    let (code, text) = compare(
        root,
        &[run, "base", "cand", "--gate", "--confidence", "0.8"],
    );
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("across tasks: -53.3 points (80% CI -100.0 to +0.0)"),
        "{text}"
    );
    assert!(
        text.contains("candidate 46.7% (80% CI 18.0% to 77.7%)"),
        "{text}"
    );

    // Without --gate the regression is reported, not failed.
    let (code, text) = compare(root, &[run, "base", "cand"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("verdict: regressed"), "{text}");

    let (code, text) = compare(root, &[run, "base", "same", "--gate"]);
    assert_eq!(code, Some(0), "{text}");
    assert_tmp_snapshot!("gate_identical", root, text);
}

#[test]
fn compare_prints_json_and_markdown() {
    let (tmp, run) = three_task_fixture();
    let root = tmp.path();
    let run = run.to_str().unwrap();

    let (code, text) = compare(root, &[run, "base", "cand", "--gate", "--format", "json"]);
    assert_eq!(code, Some(1), "{text}");
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(json["gate"]["decision"], "failed");
    assert_eq!(json["baseline"]["agent"], "base");
    assert_eq!(json["candidate"]["unscored_trials"], 0);
    let cmp = &json["comparison"];
    assert_eq!(cmp["verdict"], "regressed");
    assert_eq!(cmp["dropped"], serde_json::json!(["t1"]));
    assert_eq!(cmp["powerless"], true);
    assert_eq!(cmp["p_value"], 0.5);
    assert_eq!(cmp["interval"], serde_json::json!({"lo": -1.0, "hi": 0.0}));
    let t2 = &cmp["per_task"][1];
    assert_eq!(
        (
            &t2["task"],
            &t2["base_passed"],
            &t2["candidate_passed"],
            &t2["candidate_trials"]
        ),
        (
            &serde_json::json!("t2"),
            &serde_json::json!(5),
            &serde_json::json!(2),
            &serde_json::json!(5)
        )
    );

    let (code, text) = compare(
        root,
        &[
            run,
            "base",
            "cand",
            "--gate",
            "--max-broken",
            "0",
            "--format",
            "markdown",
        ],
    );
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("| t1 | 5/5 | 0/5 | broken | 0.0079 | **0.0238** |"),
        "{text}"
    );
    assert_tmp_snapshot!("markdown_regressed", root, text);

    // Its message (the possible values): the snapshot `cli::compare_unknown_format`.
    let (code, text) = compare(root, &[run, "base", "cand", "--format", "yaml"]);
    assert_eq!(code, Some(2), "{text}");
}

#[test]
fn max_broken_fails_the_gate_on_tasks_that_went_from_always_to_never() {
    let tmp = one_file_repo();
    ten_task_suite(tmp.path());
    let (output, _, out) = run_suite(
        tmp.path(),
        &[
            "--agent", "all", "--agent", "nine", "--agent", "same", "--trials", "2", "-j", "4",
        ],
    );
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let run = out.to_str().unwrap();

    // The default: no task may go from always to never passing.
    let (code, text) = compare(tmp.path(), &[run, "all", "nine", "--gate"]);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("always -> never passing   1: t9 2/2 -> 0/2 (--max-broken 0)"),
        "{text}"
    );
    assert_tmp_snapshot!("max_broken_default", tmp.path(), text);
    let (code, text) = compare(
        tmp.path(),
        &[run, "all", "nine", "--gate", "--format", "markdown"],
    );
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("**Gate**: FAILED: 1 task(s) went from always passing to never passing (t9 2/2 -> 0/2), more than --max-broken 0"),
        "{text}"
    );
    let (code, text) = compare(
        tmp.path(),
        &[run, "all", "nine", "--gate", "--format", "json"],
    );
    assert_eq!(code, Some(1), "{text}");
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(json["gate"]["decision"], "failed");
    assert_eq!(
        json["gate"]["failed_rules"],
        serde_json::json!(["max_broken"])
    );
    assert_eq!(json["gate"]["max_broken"], 0);

    let (code, text) = compare(
        tmp.path(),
        &[run, "all", "nine", "--gate", "--max-broken", "1"],
    );
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("gate: passed"), "{text}");
    // The inconclusive verdict says what would decide it, from plan's computation.
    assert!(
        text.contains("to detect a 10.0-point change with 80% power it would take "),
        "{text}"
    );
    // --require-power: an inconclusive gate is exit 4, not a pass.
    let (code, text) = compare(
        tmp.path(),
        &[
            run,
            "all",
            "nine",
            "--gate",
            "--max-broken",
            "1",
            "--require-power",
        ],
    );
    assert_eq!(code, Some(4), "{text}");
    assert!(text.contains("gate: INCONCLUSIVE: "), "{text}");
    // Two identical agents still pass the default gate.
    let (code, text) = compare(tmp.path(), &[run, "all", "same", "--gate"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("gate: passed"), "{text}");
}

#[test]
fn one_trial_a_side_is_left_to_the_tests() {
    let tmp = one_file_repo();
    ten_task_suite(tmp.path());
    let (output, _, out) = run_suite(
        tmp.path(),
        &["--agent", "all", "--agent", "nine", "-j", "4"],
    );
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let run = out.to_str().unwrap();
    // 1/1 -> 0/1 is one flip: as likely noise as not, so the default gate passes it.
    let (code, text) = compare(tmp.path(), &[run, "all", "nine", "--gate"]);
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("always -> never passing   0: - (--max-broken 0)"),
        "{text}"
    );
    assert!(text.contains("verdict: inconclusive"), "{text}");
}

#[test]
fn comparing_runs_of_two_suites_is_a_usage_error() {
    let tmp = one_file_repo();
    let root = tmp.path();
    ten_task_suite(root);
    let work = root.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let run = |out: &str| {
        let output = deltabench(root)
            .args([
                "run",
                "suite.yaml",
                "--agent",
                "all",
                "--out",
                out,
                "--workdir",
            ])
            .arg(&work)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    };
    run("paired-run");
    let yaml = std::fs::read_to_string(root.join("suite.yaml")).unwrap();
    write_suite(root, &yaml.replace("name: paired", "name: other"));
    run("other-run");

    let (code, text) = compare(root, &["paired-run", "other-run", "--gate"]);
    assert_eq!(code, Some(2), "{text}");
    assert!(
        text.contains("paired-run is a run of suite 'paired' and other-run of suite 'other': only runs of the same suite can be compared"),
        "{text}"
    );
    // `run --baseline` refuses the same way.
    let (output, _, _) = run_suite(
        root,
        &["--agent", "all", "--baseline", "paired-run", "--gate"],
    );
    assert_eq!(output.status.code(), Some(2), "{}", stdout(&output));
}

#[test]
fn unscored_trials_leave_the_gate_undecided_and_a_regression_still_fails() {
    let tmp = one_file_repo();
    let root = tmp.path();
    three_task_suite(root);
    let (code, text) = three_task_run(root, "base", &["base"], &[]);
    assert_eq!(code, Some(0), "{text}");
    std::fs::write(root.join("break-setup"), "").unwrap();
    let (code, text) = three_task_run(root, "same", &["same"], &[]);
    assert_ne!(code, Some(0), "t3's trials could not be scored: {text}");

    // Nothing regressed on t1 and t2, but t3 could not be compared: neither pass nor fail.
    let (code, text) = compare(root, &["base", "same", "--gate"]);
    assert_eq!(code, Some(3), "{text}");
    assert!(
        text.contains("unscored: 5 trial(s) could not be scored (infra_error; baseline 0, candidate 5) and are left out"),
        "{text}"
    );
    assert!(text.contains("gate: UNDECIDED: "), "{text}");
    let (code, _) = compare(root, &["base", "same"]);
    assert_eq!(code, Some(0), "without --gate there is nothing to decide");

    // A regression among the scored trials is a verdict, whatever could not be scored.
    let (code, text) = three_task_run(root, "cand", &["cand"], &["--baseline", "base", "--gate"]);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("gate: FAILED: 1 task(s) went from always passing to never passing (t1 5/5 -> 0/5), more than --max-broken 0; t1 5/5 -> 0/5 dropped within its trials"),
        "{text}"
    );
}
