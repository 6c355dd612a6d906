//! A tampered `trials.jsonl`: `report` and `resume` refuse a record the run's plan does not
//! hold (an unknown task, agent or trial number, a trial recorded twice) with exit 2, naming
//! the line, the bad value and the valid ones, so such a line never counts. `merge` is tested
//! with the shards, in shard.rs.

use std::path::Path;
use std::process::Output;

use serde_json::Value;

use crate::common::{deltabench, one_file_repo, stderr, stdout, trials, write_files, write_suite};

/// One task `fix`; the suite's agents `oracle` (passes) and a 2-level matrix of `idle`.
fn suite(root: &Path) {
    write_files(root, &[("solution/a.txt", "fixed\n")]);
    write_suite(
        root,
        "name: tamper\nrepo: repo\nagents:\n  oracle: {kind: oracle}\n  \
         idle: {kind: command, run: \"true\", matrix: {env.LEVEL: [low, high]}}\n\
         tasks:\n  - {id: fix, instruction: write fixed, verify: \"grep -q fixed a.txt\", solution: solution}\n",
    );
}

/// Runs the suite into `ROOT/out` (a relative `--out`, as users give it) with 2 trials each.
fn run(root: &Path) -> std::path::PathBuf {
    std::fs::create_dir_all(root.join("work")).unwrap();
    let output = deltabench(root)
        .args(["run", "suite.yaml", "--trials", "2", "--workdir", "work"])
        .args(["--out", "out"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    root.join("out")
}

/// Appends `records` to `out/trials.jsonl`; returns the line number of the first.
fn append(out: &Path, records: &[Value]) -> usize {
    let path = out.join("trials.jsonl");
    let mut text = std::fs::read_to_string(&path).unwrap();
    let first = text.lines().count() + 1;
    for record in records {
        text.push_str(&(serde_json::to_string(record).unwrap() + "\n"));
    }
    std::fs::write(&path, text).unwrap();
    first
}

/// A real record of the run, for `agent`, changed by `edit`.
fn forged(out: &Path, agent: &str, edit: impl FnOnce(&mut Value)) -> Value {
    let mut record = trials(out)
        .into_iter()
        .find(|r| r["agent"] == agent)
        .unwrap();
    edit(&mut record);
    record
}

/// A record that passes: what a forger would add.
fn passing(record: &mut Value) {
    record["outcome"] = "pass".into();
    record["passed"] = true.into();
    record["score"] = 1.0.into();
}

fn report(root: &Path, format: &str) -> Output {
    deltabench(root)
        .args(["report", "out", "--format", format])
        .output()
        .unwrap()
}

const AGENTS: &str = "agents: oracle, idle[env.LEVEL=low], idle[env.LEVEL=high]";

#[test]
fn report_refuses_a_record_off_the_plan_naming_line_value_and_valid_set() {
    let tmp = one_file_repo();
    let root = tmp.path();
    suite(root);
    let out = run(root);
    let clean = std::fs::read_to_string(out.join("trials.jsonl")).unwrap();
    assert_eq!(clean.lines().count(), 6);
    // Matrix-expanded agent names are in the plan: the untouched run reports.
    let table = report(root, "table");
    assert_eq!(table.status.code(), Some(0), "{}", stderr(&table));
    assert!(
        stdout(&table).contains("idle[env.LEVEL=high]"),
        "{}",
        stdout(&table)
    );

    let low = "idle[env.LEVEL=low]";
    let cases: Vec<(Value, String)> = vec![
        (
            forged(&out, low, |r| {
                passing(r);
                r["agent"] = "evil".into();
            }),
            format!("agent 'evil' is not in the run's plan ({AGENTS})"),
        ),
        (
            forged(&out, low, |r| {
                passing(r);
                r["agent"] = "idle".into();
            }),
            format!("agent 'idle' is not in the run's plan ({AGENTS})"),
        ),
        (
            forged(&out, low, |r| {
                passing(r);
                r["task"] = "ghost".into();
            }),
            "task 'ghost' is not in the run's plan (tasks: fix)".into(),
        ),
        (
            forged(&out, low, |r| {
                passing(r);
                r["trial"] = 3.into();
            }),
            "trial 3 is not in the run's plan (trials: 1 to 2)".into(),
        ),
        (
            forged(&out, low, |r| {
                passing(r);
                r["trial"] = 0.into();
            }),
            "trial 0 is not in the run's plan (trials: 1 to 2)".into(),
        ),
    ];
    let again = forged(&out, low, passing);
    let first = clean
        .lines()
        .position(|line| serde_json::from_str::<Value>(line).unwrap()["agent"] == low)
        .unwrap();
    let cases = cases.into_iter().chain([(
        again.clone(),
        format!(
            "trial fix / {low} #{} is already recorded on line {}; a trial is recorded again only after it was interrupted",
            again["trial"],
            first + 1
        ),
    )]);
    for (record, reason) in cases {
        std::fs::write(out.join("trials.jsonl"), &clean).unwrap();
        let line = append(&out, &[record]);
        for format in ["table", "json", "csv", "html"] {
            let output = report(root, format);
            let err = stderr(&output);
            assert_eq!(output.status.code(), Some(2), "{format} {reason}: {err}");
            assert!(
                err.contains(&format!("error: out/trials.jsonl:{line}: {reason}")),
                "{format}: {err}"
            );
            assert!(output.stdout.is_empty(), "{format}: {}", stdout(&output));
        }
    }
}

/// A trial the run's interrupt cut short is recorded again by `resume`: the newer record
/// supersedes it, and the trial counts once.
#[test]
fn a_record_after_an_interrupted_one_supersedes_it() {
    let tmp = one_file_repo();
    let root = tmp.path();
    suite(root);
    let out = run(root);
    let mut lines: Vec<Value> = trials(&out);
    let oracle = lines.iter().position(|r| r["agent"] == "oracle").unwrap();
    let finished = lines[oracle].clone();
    let interrupted = &mut lines[oracle];
    interrupted["interrupted"] = true.into();
    interrupted["outcome"] = "infra_error".into();
    interrupted["passed"] = false.into();
    interrupted["score"] = Value::Null;
    let text: String = lines
        .iter()
        .map(|r| serde_json::to_string(r).unwrap() + "\n")
        .collect();
    std::fs::write(out.join("trials.jsonl"), text).unwrap();
    append(&out, &[finished]);

    let csv = report(root, "csv");
    assert_eq!(csv.status.code(), Some(0), "{}", stderr(&csv));
    let rows: Vec<String> = stdout(&csv).lines().skip(1).map(str::to_owned).collect();
    assert_eq!(rows.len(), 6, "{rows:?}");
    assert!(
        rows.iter()
            .filter(|row| row.starts_with("fix,oracle,"))
            .all(|row| row.contains(",pass,")),
        "{rows:?}"
    );
}

#[test]
fn resume_refuses_a_record_off_the_plan_and_runs_nothing() {
    let tmp = one_file_repo();
    let root = tmp.path();
    suite(root);
    let out = run(root);
    let line = append(
        &out,
        &[forged(&out, "oracle", |r| r["agent"] = "evil".into())],
    );
    let before = std::fs::read_to_string(out.join("trials.jsonl")).unwrap();
    for args in [&["resume", "out"][..], &["resume", "--force", "out"][..]] {
        let output = deltabench(root).args(args).output().unwrap();
        let err = stderr(&output);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains(&format!(
                "error: out/trials.jsonl:{line}: agent 'evil' is not in the run's plan ({AGENTS})"
            )),
            "{args:?}: {err}"
        );
        crate::common::assert_tmp_snapshot!(
            format!("unplanned_agent_{}", args.join("_").replace("--", "")),
            root,
            err
        );
        assert_eq!(
            std::fs::read_to_string(out.join("trials.jsonl")).unwrap(),
            before,
            "{args:?}: nothing ran"
        );
    }
}

/// A suite whose agents changed would make `resume` record trials of another plan: refused,
/// even with --force (which still overrides a changed config).
#[test]
fn resume_refuses_a_changed_set_of_agents_even_with_force() {
    let tmp = one_file_repo();
    let root = tmp.path();
    suite(root);
    let out = run(root);
    let yaml = std::fs::read_to_string(root.join("suite.yaml")).unwrap();
    write_suite(root, &yaml.replace("[low, high]", "[low, mid]"));
    for args in [&["resume", "out"][..], &["resume", "--force", "out"][..]] {
        let output = deltabench(root).args(args).output().unwrap();
        let err = stderr(&output);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {err}");
        crate::common::assert_tmp_snapshot!(
            format!("changed_agents_{}", args.join("_").replace("--", "")),
            root,
            err
        );
        assert!(!err.contains("--force"), "not forcible: {err}");
    }
    assert_eq!(trials(&out).len(), 6);
    // A changed config of the same agents is still forcible.
    write_suite(root, &yaml.replace("run: \"true\"", "run: \"true; true\""));
    let output = deltabench(root).args(["resume", "out"]).output().unwrap();
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(stderr(&output).contains("--force"), "{}", stderr(&output));
    let output = deltabench(root)
        .args(["resume", "--force", "out"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(trials(&out).len(), 6);
}
