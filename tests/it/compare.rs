//! Paired comparison, the CI gate, the planner and ablations, through the real binary.

use std::path::Path;

use crate::common::{deltabench, one_file_repo, run_suite, stderr, stdout, temp_dir, write_suite};

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
    assert!(text.contains("broken (pass -> fail)   8"), "{text}");
    assert!(text.contains("test: paired-permutation"), "{text}");
    assert!(text.contains("gate: FAILED"), "{text}");

    let (code, text) = compare(tmp.path(), &[run, "all", "two"]);
    assert_eq!(
        code,
        Some(0),
        "without --gate a regression is reported, not failed: {text}"
    );

    for candidate in ["nine", "same"] {
        let (code, text) = compare(tmp.path(), &[run, "all", candidate, "--gate"]);
        assert_eq!(code, Some(0), "{candidate}: {text}");
        assert!(
            text.contains("verdict: inconclusive"),
            "{candidate}: {text}"
        );
        assert!(text.contains("gate: passed"), "{candidate}: {text}");
    }

    let (code, text) = compare(tmp.path(), &[run, "all", "nosuch"]);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("has no agent 'nosuch'"), "{text}");

    let output = deltabench(tmp.path())
        .args(["plan", run, "--effect", "0.1", "--power", "0.8"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(
        stdout(&output).contains("tasks needed"),
        "{}",
        stdout(&output)
    );
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
