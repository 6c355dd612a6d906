//! `run --until-decided` and `--until-ci-width`: runs in rounds that stop when the answer is
//! known, through the real binary on a generated suite.

use std::path::Path;

use crate::common::{deltabench, one_file_repo, stderr, stdout, wait_until, write_suite};
use std::time::Duration;

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

/// A run in rounds gated against `base`, at most ten rounds.
const AGAINST_BASE: [&str; 5] = [
    "--until-decided",
    "--max-trials",
    "10",
    "--baseline",
    "base",
];

/// The ten-task suite and `base`: ten trials per task of `all`, which passes every one.
fn with_base() -> tempfile::TempDir {
    let tmp = one_file_repo();
    ten_task_suite(tmp.path(), "paired");
    let (code, _, err) = run(
        tmp.path(),
        &["--agent", "all", "--trials", "10", "--out", "base"],
    );
    assert_eq!(code, Some(0), "{err}");
    tmp
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
    let tmp = with_base();
    let root = tmp.path();

    let (code, out, err) = run(
        root,
        &[&["--agent", "nine", "--out", "broken"][..], &AGAINST_BASE].concat(),
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
        &[&["--agent", "same", "--out", "same"][..], &AGAINST_BASE].concat(),
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

    // Too few rounds to decide: undecided at the cap, exit 4 (inconclusive, not unscored).
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
    assert_eq!(code, Some(4), "{out}{err}");
    assert!(out.contains("UNDECIDED at the cap"), "{out}");
}

#[test]
fn bad_sequential_input_is_a_usage_error_before_anything_runs() {
    let tmp = one_file_repo();
    let root = tmp.path();
    ten_task_suite(root, "paired");
    let (code, _, err) = run(root, &["--agent", "all", "--out", "base"]);
    assert_eq!(code, Some(0), "{err}");
    let cases: [(&[&str], &str); 6] = [
        (
            &[
                "--agent",
                "all",
                "--agent",
                "nine",
                "--until-decided",
                "--baseline",
                "base",
            ],
            "--until-decided with --baseline gates one agent, and this run has 2",
        ),
        (
            &[
                "--agent",
                "all",
                "--agent",
                "nine",
                "--until-decided",
                "--shard",
                "1/2",
            ],
            "--shard 1/2 in rounds writes refused, and its siblings cannot find it there",
        ),
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
    // Unreachable within the cap: exit 4, said.
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
    assert_eq!(code, Some(4), "{out}{err}");
    assert!(out.contains("NOT met (the --max-trials cap)"), "{out}");
}

/// Five tasks with a reference solution (`fix/done`); `coin`'s verify passes on a coin flip from
/// /dev/urandom once `done` is there. `all` writes `done` everywhere, `four` only in t0..t3 (so
/// it differs from `all` on the flaky task alone).
fn coin_suite(root: &Path) {
    crate::common::git_repo(root, &[("README", "x\n")]);
    crate::common::write_files(root, &[("fix/done", "")]);
    let mut yaml = String::from("name: coin\nrepo: repo\nagents:\n");
    for (agent, passes) in [("all", "*"), ("four", "t0|t1|t2|t3")] {
        yaml.push_str(&format!(
            "  {agent}: {{kind: command, run: 'case \"$DELTABENCH_INSTRUCTION\" in {passes}) touch done;; esac'}}\n"
        ));
    }
    yaml.push_str("tasks:\n");
    for i in 0..4 {
        yaml.push_str(&format!(
            "  - {{id: t{i}, instruction: t{i}, verify: \"test -f done\", solution: fix/}}\n"
        ));
    }
    yaml.push_str("  - {id: coin, instruction: coin, verify: \"test -f done && test $(od -An -N1 -tu1 /dev/urandom) -lt 128\", solution: fix/}\n");
    write_suite(root, &yaml);
}

#[test]
fn a_task_whose_reference_passes_half_the_time_is_flaky_and_left_out_of_the_gate() {
    let tmp = crate::common::temp_dir();
    let root = tmp.path();
    coin_suite(root);
    std::fs::create_dir_all(root.join("work")).unwrap();
    let validate = || {
        let output = deltabench(root)
            .args([
                "validate",
                "suite.yaml",
                "--repeat",
                "10",
                "-j",
                "2",
                "--workdir",
            ])
            .arg(root.join("work"))
            .output()
            .unwrap();
        (output.status.code(), stdout(&output), stderr(&output))
    };
    let (mut code, mut out, mut err) = validate();
    // A fair coin gives 0 or 10 heads of 10 once in 512 validates: flip again then.
    if !out.contains("FLAKY coin") {
        (code, out, err) = validate();
    }
    assert_eq!(code, Some(0), "{out}{err}");
    let line = out
        .lines()
        .find(|l| l.starts_with("FLAKY coin: the reference passed "))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        line.contains(" of 10 times (the base never): recorded as flaky in the lock"),
        "{line}"
    );
    assert!(
        out.contains("ok   t0") && out.contains("4 of 5 tasks are sound and 1 flaky"),
        "{out}"
    );
    let lock: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("suite.lock.json")).unwrap())
            .unwrap();
    let passed = lock["flaky"]["coin"]["passed"].as_u64().unwrap();
    assert!((1..10).contains(&passed), "{lock}");
    assert_eq!(lock["flaky"]["coin"]["runs"], 10);
    let marked = format!("coin (reference passed {passed} of 10)");

    // The fixed gate: the coin task is reported apart and left out.
    let (code, _, err) = run(root, &["--agent", "all", "--trials", "6", "--out", "base"]);
    assert_eq!(code, Some(0), "{err}");
    let (code, out, err) = run(
        root,
        &[
            "--agent",
            "all",
            "--trials",
            "3",
            "--baseline",
            "base",
            "--gate",
            "--out",
            "same",
        ],
    );
    assert!(code == Some(0), "{out}{err}");
    assert!(
        out.contains(&format!(
            "flaky: {marked} left out of the comparison and the gate"
        )),
        "{out}"
    );
    assert!(out.contains("4 shared tasks"), "{out}");
    let (_, out, _) = run(
        root,
        &[
            "--agent",
            "all",
            "--trials",
            "3",
            "--baseline",
            "base",
            "--gate",
            "--include-flaky",
            "--out",
            "counted",
        ],
    );
    assert!(
        out.contains(&format!("flaky: {marked} counted (--include-flaky)")),
        "{out}"
    );
    assert!(out.contains("5 shared tasks"), "{out}");

    // The sequential gate leaves it out too: `four` differs from `all` on the coin alone.
    let (code, out, err) = run(
        root,
        &[
            "--agent",
            "all",
            "--agent",
            "four",
            "--until-decided",
            "--margin",
            "0.3",
            "--max-trials",
            "6",
            "--out",
            "rounds",
        ],
    );
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains(": not regressed by 30.0 points or more"),
        "{out}"
    );
    assert!(
        out.contains("flaky tasks left out of the gate (the lock's `validate --repeat`; --include-flaky keeps them): coin"),
        "{out}"
    );

    // Every report format marks it.
    for (format, mark) in [
        (
            "table",
            "Flaky tasks (the lock's `validate --repeat`".to_owned(),
        ),
        ("markdown", "**Note**: Flaky tasks".to_owned()),
        ("json", "\"flaky_tasks\"".to_owned()),
        ("csv", ",flaky_task".to_owned()),
        ("junit", "name=\"flaky_task\"".to_owned()),
        ("html", "id=\"flaky\"".to_owned()),
    ] {
        let output = deltabench(root)
            .args(["report", "same", "--format", format])
            .output()
            .unwrap();
        let text = stdout(&output);
        assert!(text.contains(&mark), "{format}: {text}");
        if format != "csv" && format != "junit" && format != "json" {
            assert!(text.contains(&marked), "{format}: {text}");
        }
    }
}

/// Records in `out`'s trials.jsonl.
fn records_in(out: &Path) -> usize {
    std::fs::read_to_string(out.join("trials.jsonl"))
        .map(|text| text.matches('\n').count())
        .unwrap_or(0)
}

#[test]
fn a_killed_run_in_rounds_resumes_at_its_last_round_and_decides() {
    let tmp = one_file_repo();
    let root = tmp.path();
    ten_task_suite(root, "paired");
    let work = root.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let out = root.join("rounds");
    let mut child = deltabench(root)
        .args([
            "run",
            "suite.yaml",
            "--agent",
            "all",
            "--agent",
            "nine",
            "--until-decided",
            "--max-trials",
            "10",
            "-j",
            "1",
            "--out",
        ])
        .arg(&out)
        .arg("--workdir")
        .arg(&work)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Two rounds of 20 trials, and some of the third.
    wait_until(Duration::from_secs(120), "a 45th record", || {
        assert!(child.try_wait().unwrap().is_none(), "the run ended early");
        records_in(&out) >= 45
    });
    child.kill().unwrap();
    child.wait().unwrap();
    let killed_at = records_in(&out);
    assert!(killed_at < 120, "killed too late: {killed_at}");

    let resumed = deltabench(root).arg("resume").arg(&out).output().unwrap();
    let (text, err) = (stdout(&resumed), stderr(&resumed));
    assert_eq!(resumed.status.code(), Some(1), "{text}{err}");
    assert!(
        err.contains("resuming the run in rounds at round 3"),
        "{err}"
    );
    assert!(
        text.contains("sequential gate ('nine' against 'all', e-process at 95%, valid at every round): regressed after round 6"),
        "the same decision as an unbroken run: {text}"
    );
    // Each (task, agent, trial) recorded once, rounds 1..=6 only.
    let records = crate::common::trials(&out);
    let mut keys: Vec<(String, String, u64)> = records
        .iter()
        .filter(|r| r["interrupted"] != true)
        .map(|r| {
            (
                r["task"].as_str().unwrap().to_owned(),
                r["agent"].as_str().unwrap().to_owned(),
                r["trial"].as_u64().unwrap(),
            )
        })
        .collect();
    let n = keys.len();
    keys.sort();
    keys.dedup();
    assert_eq!((keys.len(), n), (120, 120), "{killed_at} before the kill");
    assert!(keys.iter().all(|k| (1..=6).contains(&k.2)));
}

/// Starts shard `index` of 2 of a run of `nine` in rounds against `base`, in `root/shards`, with
/// its own workdir and cache (as on a node of its own).
fn start_shard(root: &Path, index: u32) -> std::process::Child {
    let work = root.join(format!("work-{index}"));
    std::fs::create_dir_all(&work).unwrap();
    deltabench(root)
        .env("DELTABENCH_CACHE", root.join(format!("cache-{index}")))
        .args([
            "run",
            "suite.yaml",
            "--agent",
            "nine",
            "-j",
            "2",
            "--shard",
            &format!("{index}/2"),
            "--out",
            &format!("shards/shard-{index}-of-2"),
            "--workdir",
        ])
        .arg(&work)
        .args(AGAINST_BASE)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// The gate's closing line.
fn gate_line(text: &str) -> &str {
    text.lines()
        .find(|l| l.starts_with("sequential gate"))
        .unwrap_or("(no gate line)")
}

#[test]
fn shards_of_a_run_in_rounds_meet_after_each_round_and_decide_like_one_run() {
    let tmp = with_base();
    let root = tmp.path();
    let (code, whole, err) = run(
        root,
        &[&["--agent", "nine", "--out", "whole"][..], &AGAINST_BASE].concat(),
    );
    assert_eq!(code, Some(1), "{whole}{err}");

    let shards = [start_shard(root, 1), start_shard(root, 2)];
    let outputs: Vec<_> = shards
        .into_iter()
        .map(|s| s.wait_with_output().unwrap())
        .collect();
    for output in &outputs {
        let (text, err) = (stdout(output), stderr(output));
        assert_eq!(output.status.code(), Some(1), "{text}{err}");
        // Each shard judged every task's trials, not its slice: the unsharded run's decision,
        // at the same round.
        assert_eq!(gate_line(&text), gate_line(&whole), "{err}");
        assert!(err.contains("round 1 of at most 10: undecided"), "{err}");
    }
    let rounds = |dir: &str| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(root.join(dir).join("rounds.json")).unwrap())
            .unwrap()
    };
    let (one, two) = (rounds("shards/shard-1-of-2"), rounds("shards/shard-2-of-2"));
    assert_eq!(one["round"], two["round"]);
    assert!(
        one["decided"]
            .as_str()
            .unwrap()
            .starts_with("regressed after round"),
        "{one}"
    );

    // Merged, the shards hold exactly the unsharded run's trials.
    let merged = deltabench(root).args(["merge", "shards"]).output().unwrap();
    assert_eq!(merged.status.code(), Some(0), "{}", stderr(&merged));
    let keys = |dir: &str| {
        let mut keys: Vec<String> = crate::common::trials(&root.join(dir))
            .iter()
            .map(|r| {
                format!(
                    "{} {} {} {}",
                    r["task"], r["agent"], r["trial"], r["passed"]
                )
            })
            .collect();
        keys.sort();
        keys
    };
    assert_eq!(keys("shards/merged"), keys("whole"));
    let status = deltabench(root)
        .args(["status", "shards"])
        .output()
        .unwrap();
    let table = stdout(&status);
    assert_eq!(table.matches(" finished ").count(), 2, "{table}");

    // A sibling whose records are not its slice is refused, not judged: one record gone, or
    // one of the other shard's slice copied in.
    let log = root.join("shards/shard-2-of-2/trials.jsonl");
    let lines: Vec<String> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    let resume_first = || {
        deltabench(root)
            .env("DELTABENCH_CACHE", root.join("cache-1"))
            .args(["resume", "shards/shard-1-of-2"])
            .output()
            .unwrap()
    };
    std::fs::write(&log, lines[1..].join("\n") + "\n").unwrap();
    let output = resume_first();
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(3), "{err}");
    assert!(err.contains("shard 2/2 ("), "{err}");
    assert!(err.contains(") says it finished round "), "{err}");
    assert!(err.contains("cannot be judged on it"), "{err}");
    let other = std::fs::read_to_string(root.join("shards/shard-1-of-2/trials.jsonl")).unwrap();
    let copied = other.lines().next().unwrap();
    std::fs::write(&log, lines.join("\n") + "\n" + copied + "\n").unwrap();
    let output = resume_first();
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{err}");
    assert!(
        err.contains("belongs to shard 1/2, not to this run's shard 2/2"),
        "{err}"
    );
}

#[test]
fn a_shard_in_rounds_stops_when_a_sibling_died_and_both_resume_to_the_decision() {
    let tmp = with_base();
    let root = tmp.path();
    // Shard 2 started, recorded no round and fell silent long ago (a node that died).
    let dead = root.join("shards/shard-2-of-2");
    std::fs::create_dir_all(&dead).unwrap();
    std::fs::write(
        dead.join("rounds.json"),
        r#"{"round": 0, "decided": null, "heartbeat": 1000, "host": "node-7", "pid": 4242}"#,
    )
    .unwrap();
    let output = start_shard(root, 1).wait_with_output().unwrap();
    let (text, err) = (stdout(&output), stderr(&output));
    assert_eq!(output.status.code(), Some(3), "{text}{err}");
    assert!(
        err.contains("shard 2/2 stopped after round 0 (no heartbeat for")
            && err.contains("last on host 'node-7'): round 1 cannot be judged without its trials"),
        "{err}"
    );
    assert!(err.contains("resume this shard too"), "{err}");
    assert!(!text.contains("sequential gate"), "{text}");
    // It said it stopped: `status` shows it stopped at once, not running for a minute.
    let status = deltabench(root)
        .args(["status", "shards"])
        .output()
        .unwrap();
    let table = stdout(&status);
    let line = table.lines().find(|l| l.starts_with("1/2")).unwrap();
    assert!(line.contains("STOPPED"), "{table}");

    // The dead shard runs again beside the first one's resume; they meet at round 1 and go on.
    std::fs::remove_dir_all(&dead).unwrap();
    let second = start_shard(root, 2);
    let resumed = deltabench(root)
        .env("DELTABENCH_CACHE", root.join("cache-1"))
        .args(["resume", "shards/shard-1-of-2"])
        .output()
        .unwrap();
    let second = second.wait_with_output().unwrap();
    for output in [&resumed, &second] {
        let (text, err) = (stdout(output), stderr(output));
        assert_eq!(output.status.code(), Some(1), "{text}{err}");
        assert!(
            gate_line(&text).contains(": regressed after round"),
            "{text}"
        );
    }
    assert_eq!(gate_line(&stdout(&resumed)), gate_line(&stdout(&second)));
}

/// A shard waiting for a sibling that never starts stops on SIGTERM (a Ctrl-C, an `scancel`):
/// exit 130, its round kept, and its mark says at once that it stopped.
#[test]
fn a_shard_waiting_for_its_siblings_stops_on_sigterm() {
    let tmp = with_base();
    let root = tmp.path();
    let child = start_shard(root, 1);
    let mark = root.join("shards/shard-1-of-2/rounds.json");
    let read_mark = || -> serde_json::Value {
        std::fs::read_to_string(&mark)
            .ok()
            .and_then(|text| serde_json::from_str(&text).ok())
            .unwrap_or_default()
    };
    wait_until(Duration::from_secs(120), "the end of round 1", || {
        read_mark()["round"] == 1
    });
    let kill = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let output = child.wait_with_output().unwrap();
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(130), "{err}");
    assert!(
        err.contains("round 1: waiting for shard 2/2 (not started)"),
        "{err}"
    );
    assert!(
        err.contains("interrupted while waiting for the other shards after round 1"),
        "{err}"
    );
    assert_eq!(read_mark()["heartbeat"], 0, "{}", read_mark());
    assert_eq!(read_mark()["decided"], serde_json::Value::Null);
}
