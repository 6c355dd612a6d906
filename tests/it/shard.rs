//! `run --shard I/N` and `merge`: the shards of a run, merged, are the unsharded run.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

use crate::common::{deltabench, one_file_repo, stderr, stdout, trials, write_files, write_suite};

/// Six tasks, each solved by writing `tN.txt`, with a `solution:` directory that does so.
fn six_task_suite(root: &Path) {
    let mut yaml = String::from("name: sharded\nrepo: repo\ntasks:\n");
    for i in 0..6 {
        write_files(root, &[(&format!("solutions/t{i}/t{i}.txt"), "done\n")]);
        yaml.push_str(&format!(
            "  - {{id: t{i}, instruction: write t{i}.txt, verify: \"test -f t{i}.txt\", solution: solutions/t{i}}}\n"
        ));
    }
    write_suite(root, &yaml);
}

/// `deltabench run suite.yaml --out ROOT/OUT` with `extra`; returns the output and the run dir.
fn run(root: &Path, out: &str, extra: &[&str]) -> (Output, PathBuf) {
    let work = root.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let dir = root.join(out);
    let output = deltabench(root)
        .args(["run", "suite.yaml", "-j", "4", "--workdir"])
        .arg(&work)
        .arg("--out")
        .arg(&dir)
        .args(extra)
        .output()
        .unwrap();
    (output, dir)
}

fn merge(root: &Path, args: &[&str]) -> Output {
    deltabench(root).arg("merge").args(args).output().unwrap()
}

/// (task, agent, trial) of a record.
fn key(record: &Value) -> (String, String, u64) {
    (
        record["task"].as_str().unwrap().to_owned(),
        record["agent"].as_str().unwrap().to_owned(),
        record["trial"].as_u64().unwrap(),
    )
}

/// The set of (task, agent, trial, outcome) of a run directory.
fn outcomes(dir: &Path) -> BTreeSet<(String, String, u64, String)> {
    trials(dir)
        .iter()
        .map(|r| {
            let (task, agent, trial) = key(r);
            (
                task,
                agent,
                trial,
                r["outcome"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

fn manifest(dir: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap()
}

#[test]
fn shards_merged_equal_the_unsharded_run() {
    let tmp = one_file_repo();
    let root = tmp.path();
    six_task_suite(root);

    let (output, full) = run(root, "full", &["--trials", "2"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let expected = outcomes(&full);
    assert_eq!(expected.len(), 24);
    assert_eq!(
        expected.iter().filter(|o| o.3 == "pass").count(),
        12,
        "oracle passes every task, noop none: {expected:?}"
    );

    let mut owners: HashMap<(String, String, u64), Vec<u32>> = HashMap::new();
    for i in 1..=3u32 {
        let shard = format!("{i}/3");
        let (output, dir) = run(
            root,
            &format!("shard-{i}"),
            &["--trials", "2", "--shard", &shard],
        );
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        assert!(
            stderr(&output).contains(&format!("shard {shard}: ")),
            "{}",
            stderr(&output)
        );
        let records = trials(&dir);
        let m = manifest(&dir);
        assert_eq!(m["shard"], serde_json::json!({"index": i, "total": 3}));
        assert_eq!(m["planned_trials"].as_u64(), Some(records.len() as u64));
        for record in &records {
            owners.entry(key(record)).or_default().push(i);
        }
    }
    assert_eq!(owners.len(), 24, "every trial ran in some shard");
    for (trial, shards) in &owners {
        assert_eq!(shards.len(), 1, "{trial:?} ran in shards {shards:?}");
    }

    let output = merge(root, &["shard-1", "shard-2", "shard-3", "--out", "merged"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(
        stdout(&output).contains("merged 24 of 24 planned trials into merged"),
        "{}",
        stdout(&output)
    );
    assert!(!stderr(&output).contains("warning"), "{}", stderr(&output));
    let merged = root.join("merged");
    assert_eq!(outcomes(&merged), expected);

    // Plan order: task, then agent (the run's order: oracle, noop), then trial.
    let order: Vec<_> = trials(&merged).iter().map(key).collect();
    let mut planned = Vec::new();
    for task in 0..6 {
        for agent in ["oracle", "noop"] {
            for trial in 1..=2 {
                planned.push((format!("t{task}"), agent.to_owned(), trial));
            }
        }
    }
    assert_eq!(order, planned);
    for (task, agent, trial) in &order {
        let dir = merged.join(format!("trials/{task}/{agent}/{trial}"));
        assert!(dir.join("diff.patch").is_file(), "{}", dir.display());
    }

    let m = manifest(&merged);
    assert_eq!(m["shard"], Value::Null);
    assert_eq!(m["planned_trials"].as_u64(), Some(24));
    assert_eq!(m["interrupted"], Value::Bool(false));
    assert_eq!(
        m["merged_from"],
        serde_json::json!(["shard-1", "shard-2", "shard-3"])
    );
    for format in ["table", "markdown", "json", "html"] {
        let output = deltabench(root)
            .args(["report", "merged", "--format", format])
            .output()
            .unwrap();
        assert_eq!(
            output.status.code(),
            Some(0),
            "{format}: {}",
            stderr(&output)
        );
    }

    let output = merge(root, &["shard-1", "shard-1", "--out", "twice"]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("shard-1 and shard-1 are both shard 1/3"),
        "{}",
        stderr(&output)
    );
    assert!(
        !root.join("twice").exists(),
        "a refused merge writes nothing"
    );

    let output = merge(root, &["shard-1", "--out", "merged"]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("merged already holds a run"),
        "{}",
        stderr(&output)
    );

    // Written, but planned trials have no result: exit 3, as for trials not scored.
    let output = merge(root, &["shard-1", "shard-3", "--out", "partial"]);
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("no input holds shard 2 of 3"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn bad_shard_values_are_usage_errors_naming_the_value() {
    let tmp = one_file_repo();
    six_task_suite(tmp.path());
    for bad in ["0/3", "4/3", "x"] {
        let (output, dir) = run(tmp.path(), "out", &["--shard", bad]);
        assert_eq!(output.status.code(), Some(2), "{bad}: {}", stderr(&output));
        let text = stderr(&output);
        let name = format!("bad_shard_{}", bad.replace('/', "_of_"));
        crate::common::assert_tmp_snapshot!(name, tmp.path(), text);
        assert!(!dir.exists(), "{bad}: nothing runs");
    }
}

#[test]
fn merge_refuses_shards_of_different_plans() {
    let tmp = one_file_repo();
    let root = tmp.path();
    six_task_suite(root);
    let (output, _) = run(root, "a", &["--shard", "1/2"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let (output, _) = run(root, "b", &["--shard", "2/2", "--trials", "2"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));

    let output = merge(root, &["a", "b", "--out", "m"]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains(
            "b is not a shard of the plan a is a shard of: its trials_per_task is 2, not 1"
        ),
        "{}",
        stderr(&output)
    );

    // Another suite: the same tasks with another verify command.
    let yaml = std::fs::read_to_string(root.join("suite.yaml")).unwrap();
    write_suite(root, &yaml.replace("test -f", "test -s"));
    let (output, _) = run(root, "c", &["--shard", "2/2"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let output = merge(root, &["a", "c", "--out", "m"]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output)
            .contains("c is not a shard of the plan a is a shard of: its suite_digest is"),
        "{}",
        stderr(&output)
    );
    assert!(!root.join("m").exists(), "a refused merge writes nothing");
}

#[test]
fn an_empty_shard_writes_an_empty_run_that_merges() {
    let tmp = one_file_repo();
    let root = tmp.path();
    write_suite(
        root,
        "name: one\nrepo: repo\ntasks:\n  - {id: only, instruction: x, verify: \"true\"}\n",
    );
    let mut sizes = Vec::new();
    for i in 1..=2 {
        let (output, dir) = run(
            root,
            &format!("s{i}"),
            &["--agent", "noop", "--shard", &format!("{i}/2")],
        );
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        let n = trials(&dir).len();
        if n == 0 {
            assert!(
                stderr(&output).contains(&format!(
                    "shard {i}/2 holds none of the plan's 1 trials: writing an empty run directory"
                )),
                "{}",
                stderr(&output)
            );
        }
        sizes.push(n);
    }
    sizes.sort();
    assert_eq!(sizes, [0, 1]);
    let output = merge(root, &["s1", "s2", "--out", "m"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(trials(&root.join("m")).len(), 1);
}

/// A shard's `trials.jsonl` with a record its plan does not hold (an unknown agent, task or
/// trial number, another shard's trial, a trial twice) is refused, naming the line, and
/// nothing is written: such a record would be counted in the merged run.
#[test]
fn merge_refuses_a_record_off_the_plan_naming_the_line() {
    let tmp = one_file_repo();
    let root = tmp.path();
    six_task_suite(root);
    for i in 1..=2 {
        let (output, _) = run(root, &format!("s{i}"), &["--shard", &format!("{i}/2")]);
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    }
    let jsonl = root.join("s1/trials.jsonl");
    let clean = std::fs::read_to_string(&jsonl).unwrap();
    let lines = clean.lines().count();
    let mine: Value = serde_json::from_str(clean.lines().next().unwrap()).unwrap();
    let theirs = trials(&root.join("s2"))[0].clone();
    let (task, agent) = (
        mine["task"].as_str().unwrap(),
        mine["agent"].as_str().unwrap(),
    );
    let with = |field: &str, value: Value| {
        let mut record = mine.clone();
        record[field] = value;
        record["outcome"] = "pass".into();
        record["passed"] = true.into();
        record
    };
    let cases = [
        (
            with("agent", "evil".into()),
            "agent 'evil' is not in the run's plan (agents: oracle, noop)".to_owned(),
        ),
        (
            with("task", "t9".into()),
            "task 't9' is not in the run's plan (tasks: t0, t1, t2, t3, t4, t5)".into(),
        ),
        (
            with("trial", 2.into()),
            "trial 2 is not in the run's plan (trials: 1)".into(),
        ),
        (
            theirs.clone(),
            format!(
                "trial {} / {} #1 belongs to shard 2/2, not to this run's shard 1/2",
                theirs["task"].as_str().unwrap(),
                theirs["agent"].as_str().unwrap()
            ),
        ),
        (
            with("trial", 1.into()),
            format!("trial {task} / {agent} #1 is already recorded on line 1"),
        ),
    ];
    for (record, reason) in cases {
        std::fs::write(
            &jsonl,
            format!("{clean}{}\n", serde_json::to_string(&record).unwrap()),
        )
        .unwrap();
        let output = merge(root, &["s1", "s2", "--out", "m"]);
        let err = stderr(&output);
        assert_eq!(output.status.code(), Some(2), "{reason}: {err}");
        assert!(
            err.contains(&format!("error: s1/trials.jsonl:{}: {reason}", lines + 1)),
            "{err}"
        );
        assert!(!root.join("m").exists(), "a refused merge writes nothing");
    }
    std::fs::write(&jsonl, clean).unwrap();
    let output = merge(root, &["s1", "s2", "--out", "m"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(
        stdout(&output).contains("merged 12 of 12 planned trials into m"),
        "{}",
        stdout(&output)
    );
}

/// `deltabench ARGS` in `root` with no job engine's variables but `vars`.
fn engine(root: &Path, vars: &[(&str, &str)], args: &[&str]) -> Output {
    let mut command = deltabench(root);
    for name in [
        "SLURM_ARRAY_TASK_ID",
        "SLURM_ARRAY_TASK_MIN",
        "SLURM_ARRAY_TASK_MAX",
        "SLURM_ARRAY_TASK_COUNT",
        "JOB_COMPLETION_INDEX",
        "DELTABENCH_SHARD",
        "DELTABENCH_SHARDS",
    ] {
        command.env_remove(name);
    }
    command
        .envs(vars.iter().copied())
        .args(args)
        .output()
        .unwrap()
}

/// `run --shard auto` as a CI matrix does it: each shard finds its slice in DELTABENCH_SHARD
/// and writes DIR/shard-I-of-N; a shard never started is named by `status`, `merge DIR` and
/// `report DIR`; once it ran, `merge DIR` is complete and equals the unsharded run, and
/// merging again changes nothing. A shard run again finishes its folder, never starts over.
#[test]
fn shard_auto_folders_status_and_merge_of_the_parent() {
    let tmp = one_file_repo();
    let root = tmp.path();
    six_task_suite(root);
    std::fs::create_dir_all(root.join("work")).unwrap();
    let (output, full) = run(root, "full", &["--trials", "2"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let auto = |i: u32| {
        engine(
            root,
            &[("DELTABENCH_SHARD", &format!("{i}/3"))],
            &[
                "run",
                "suite.yaml",
                "--trials",
                "2",
                "-j",
                "2",
                "--workdir",
                "work",
                "--shard",
                "auto",
                "--out",
                "set",
            ],
        )
    };
    for i in [1, 3] {
        let output = auto(i);
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        assert!(
            root.join(format!("set/shard-{i}-of-3/manifest.json"))
                .is_file(),
            "{}",
            stderr(&output)
        );
    }
    let status = engine(root, &[], &["status", "set"]);
    assert_eq!(status.status.code(), Some(0), "{}", stderr(&status));
    let text = stdout(&status);
    assert!(text.contains("2/3    not started"), "{text}");
    assert!(text.contains("1/3    finished"), "{text}");
    assert!(
        text.contains("shard 2/3 (set/shard-2-of-3): never started, no run directory"),
        "{text}"
    );

    let merged = engine(root, &[], &["merge", "set"]);
    assert_eq!(merged.status.code(), Some(3), "{}", stderr(&merged));
    assert!(
        stderr(&merged).contains("shard 2/3 (set/shard-2-of-3): never started"),
        "{}",
        stderr(&merged)
    );
    let report = engine(root, &[], &["report", "set", "--format", "json"]);
    assert_eq!(report.status.code(), Some(0), "{}", stderr(&report));
    assert!(
        stderr(&report).contains("shard 2/3 (set/shard-2-of-3): never started"),
        "{}",
        stderr(&report)
    );
    let partial: Value = serde_json::from_str(&stdout(&report)).unwrap();
    assert!(partial.is_object(), "{partial}");

    let output = auto(2);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    for _ in 0..2 {
        // The second merge replaces the first: merging is idempotent.
        let merged = engine(root, &[], &["merge", "set"]);
        assert_eq!(merged.status.code(), Some(0), "{}", stderr(&merged));
        assert!(
            stdout(&merged).contains("merged 24 of 24 planned trials into set/merged"),
            "{}",
            stdout(&merged)
        );
        assert_eq!(outcomes(&root.join("set/merged")), outcomes(&full));
    }
    let text = stdout(&engine(root, &[], &["status", "set"]));
    assert!(
        text.contains("every shard finished; merged into set/merged"),
        "{text}"
    );

    // A shard started again (a requeued job) finishes its folder: nothing is run twice.
    let before = trials(&root.join("set/shard-1-of-3")).len();
    let output = auto(1);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("holds this shard's earlier attempt: finishing it"),
        "{}",
        stderr(&output)
    );
    assert_eq!(trials(&root.join("set/shard-1-of-3")).len(), before);

    // A folder holding another shard's run is refused, naming both.
    std::fs::rename(root.join("set/shard-2-of-3"), root.join("kept")).unwrap();
    copy(
        &root.join("set/shard-1-of-3"),
        &root.join("set/shard-2-of-3"),
    );
    let merged = engine(root, &[], &["merge", "set", "--out", "other"]);
    assert_eq!(merged.status.code(), Some(2), "{}", stderr(&merged));
    assert!(
        stderr(&merged).contains("set/shard-2-of-3 holds shard 1/3, not shard 2/3"),
        "{}",
        stderr(&merged)
    );
    std::fs::remove_dir_all(root.join("set/shard-2-of-3")).unwrap();
    std::fs::rename(root.join("kept"), root.join("set/shard-2-of-3")).unwrap();

    // A shard folder of another plan among them is refused, as with named inputs.
    let (output, _) = run(root, "set/shard-2-of-3-other", &["--shard", "2/3"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    std::fs::rename(root.join("set/shard-2-of-3"), root.join("kept")).unwrap();
    std::fs::rename(
        root.join("set/shard-2-of-3-other"),
        root.join("set/shard-2-of-3"),
    )
    .unwrap();
    let merged = engine(root, &[], &["merge", "set", "--out", "other"]);
    assert_eq!(merged.status.code(), Some(2), "{}", stderr(&merged));
    assert!(
        stderr(&merged).contains("its trials_per_task is 1, not 2"),
        "{}",
        stderr(&merged)
    );
}

/// `--shard auto` with no engine's variables, or with variables that disagree, runs nothing
/// and says which variables it read.
#[test]
fn shard_auto_outside_an_engine_or_contradicted_is_a_usage_error() {
    let tmp = one_file_repo();
    let root = tmp.path();
    six_task_suite(root);
    let args = ["run", "suite.yaml", "--shard", "auto", "--out", "out"];
    let output = engine(root, &[], &args);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    for name in [
        "SLURM_ARRAY_TASK_ID",
        "SLURM_ARRAY_TASK_MIN",
        "SLURM_ARRAY_TASK_COUNT",
        "JOB_COMPLETION_INDEX",
        "DELTABENCH_SHARDS",
        "DELTABENCH_SHARD=I/N",
    ] {
        assert!(
            stderr(&output).contains(name),
            "{name}: {}",
            stderr(&output)
        );
    }
    let output = engine(
        root,
        &[
            ("JOB_COMPLETION_INDEX", "0"),
            ("DELTABENCH_SHARD", "2/4"),
            ("DELTABENCH_SHARDS", "4"),
        ],
        &args,
    );
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output)
            .contains("DELTABENCH_SHARD=2/4 says shard 2/4, JOB_COMPLETION_INDEX=0 says shard 1/4"),
        "{}",
        stderr(&output)
    );
    let output = engine(root, &[("JOB_COMPLETION_INDEX", "1")], &args);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("JOB_COMPLETION_INDEX is set but the shard count is not"),
        "{}",
        stderr(&output)
    );
    assert!(!root.join("out").exists(), "nothing ran");
    // A Kubernetes pod with the count: JOB_COMPLETION_INDEX 1 is shard 2 of 2.
    let output = engine(
        root,
        &[("JOB_COMPLETION_INDEX", "1")],
        &[
            "run",
            "suite.yaml",
            "--shard",
            "auto",
            "--shards",
            "2",
            "--out",
            "out",
            "--workdir",
            ".",
        ],
    );
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(
        manifest(&root.join("out/shard-2-of-2"))["shard"]["index"],
        2
    );
}

fn copy(from: &Path, to: &Path) {
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .unwrap();
    assert!(status.success());
}
