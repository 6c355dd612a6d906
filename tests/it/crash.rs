//! Runs that survive a crash: `kill -9` of the runner at several points, then `resume`, then
//! `gc`, through the real binary.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::process::Child;
use std::time::Duration;

use crate::common::{
    assert_no_leftovers, deltabench, eventually, one_file_repo, run_suite, stderr, stdout, trials,
    wait_until, write_suite,
};

/// 5 tasks x 2 agents x 3 trials = 30 trials; `fixer` passes every task, `idle` none.
fn suite(fixer_run: &str) -> String {
    let mut yaml = format!(
        "name: crash\nrepo: repo\nagents:\n  fixer: {{kind: command, run: \"{fixer_run}\", timeout: 30s}}\n  idle: {{kind: command, run: \"sleep 0.2\", timeout: 30s}}\ntasks:\n"
    );
    for i in 0..5 {
        yaml.push_str(&format!(
            "  - id: t{i}\n    instruction: write fixed into a.txt\n    verify: \"grep -q fixed a.txt\"\n"
        ));
    }
    yaml
}

const FIXER: &str = "sleep 0.2; echo fixed > a.txt";

fn start_run(root: &Path, out: &Path) -> Child {
    deltabench(root)
        .args(["run", "suite.yaml", "--trials", "3", "-j", "2", "--workdir"])
        .arg(root.join("work"))
        .arg("--out")
        .arg(out)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

fn start_resume(root: &Path, out: &Path) -> Child {
    deltabench(root)
        .arg("resume")
        .arg(out)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

fn records_in(out: &Path) -> usize {
    std::fs::read_to_string(out.join("trials.jsonl"))
        .map(|text| text.matches('\n').count())
        .unwrap_or(0)
}

/// Waits until `out` holds at least `records` records (and a manifest), then `kill -9`s `child`.
fn kill_at(mut child: Child, out: &Path, records: usize) -> usize {
    wait_until(
        Duration::from_secs(60),
        "a manifest and enough records",
        || {
            assert!(
                child.try_wait().unwrap().is_none(),
                "the run ended before {records} records"
            );
            out.join("manifest.json").exists() && records_in(out) >= records
        },
    );
    if records == 0 {
        // Kill mid-trial: once the first workspace exists.
        wait_until(Duration::from_secs(60), "a workspace", || {
            workspaces_exist(&out.parent().unwrap().join("work"))
        });
    }
    child.kill().unwrap();
    child.wait().unwrap();
    records_in(out)
}

/// Whether a run root under `work` holds a workspace.
fn workspaces_exist(work: &Path) -> bool {
    std::fs::read_dir(work).unwrap().flatten().any(|root| {
        std::fs::read_dir(root.path().join("ws")).is_ok_and(|mut ws| {
            ws.any(|e| e.is_ok_and(|e| !e.file_name().to_string_lossy().starts_with('.')))
        })
    })
}

fn pass_counts(out: &Path) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for record in trials(out) {
        let passed = usize::from(record["passed"].as_bool().unwrap());
        *counts
            .entry(record["agent"].as_str().unwrap().to_owned())
            .or_default() += passed;
    }
    counts
}

/// Mount points at or below `dir`.
pub fn mounts_under(dir: &Path) -> Vec<String> {
    let dir = dir.canonicalize().unwrap();
    std::fs::read_to_string("/proc/self/mounts")
        .unwrap()
        .lines()
        .filter_map(|line| line.split(' ').nth(1))
        .filter(|mount| Path::new(mount).starts_with(&dir))
        .map(str::to_owned)
        .collect()
}

#[test]
fn kill_9_at_any_point_then_resume_records_each_trial_once() {
    let tmp = one_file_repo();
    let root = tmp.path();
    write_suite(root, &suite(FIXER));
    std::fs::create_dir_all(root.join("work")).unwrap();

    let reference = root.join("reference");
    let status = start_run(root, &reference).wait().unwrap();
    assert_eq!(status.code(), Some(0));
    let expected = pass_counts(&reference);
    assert_eq!(
        expected,
        BTreeMap::from([("fixer".into(), 15), ("idle".into(), 0)])
    );

    let out = root.join("out");
    let mut seen = vec![kill_at(start_run(root, &out), &out, 0)];
    // A crash mid-append leaves a torn last line: resume must cut it off, not append to it.
    let mut torn = std::fs::OpenOptions::new()
        .append(true)
        .open(out.join("trials.jsonl"))
        .unwrap();
    std::io::Write::write_all(&mut torn, b"{\"task\": \"t0\", \"agent").unwrap();
    drop(torn);
    for at in [10, 20] {
        seen.push(kill_at(start_resume(root, &out), &out, at));
    }
    eprintln!("records when killed: {seen:?}");
    assert!(seen[2] < 30, "the last kill came too late: {seen:?}");

    // A changed suite or agent config refuses the resume, and says which.
    write_suite(root, &suite("sleep 0.3; echo fixed > a.txt"));
    let refused = deltabench(root).arg("resume").arg(&out).output().unwrap();
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("agent 'fixer' config changed"),
        "{}",
        stderr(&refused)
    );
    write_suite(root, &format!("{}# a comment\n", suite(FIXER)));
    let refused = deltabench(root).arg("resume").arg(&out).output().unwrap();
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    crate::common::assert_tmp_snapshot!("resume_of_a_changed_suite", root, stderr(&refused));
    write_suite(root, &suite(FIXER));

    let finished = deltabench(root).arg("resume").arg(&out).output().unwrap();
    assert_eq!(finished.status.code(), Some(0), "{}", stderr(&finished));
    assert!(stdout(&finished).contains("fixer"), "{}", stdout(&finished));

    let records = trials(&out);
    let keys: HashSet<(String, String, u64)> = records
        .iter()
        .map(|r| {
            (
                r["task"].as_str().unwrap().to_owned(),
                r["agent"].as_str().unwrap().to_owned(),
                r["trial"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(records.len(), 30, "a trial recorded twice or lost");
    assert_eq!(keys.len(), 30, "a trial recorded twice");
    assert_eq!(pass_counts(&out), expected);
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["interrupted"], false);

    // --force finishes (here: nothing left to run) despite the change.
    write_suite(root, &format!("{}# a comment\n", suite(FIXER)));
    let forced = deltabench(root)
        .args(["run", "--force", "--resume"])
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(forced.status.code(), Some(0), "{}", stderr(&forced));
    assert_eq!(trials(&out).len(), 30);

    let gc = deltabench(root).arg("gc").output().unwrap();
    assert_eq!(gc.status.code(), Some(0), "{}", stderr(&gc));
    assert_eq!(mounts_under(&root.join("work")), Vec::<String>::new());
    assert_no_leftovers(&root.join("work"));
}

#[test]
fn gc_reaps_a_killed_run_its_mounts_and_its_processes() {
    let tmp = one_file_repo();
    let root = tmp.path();
    let token = format!("deltabench-gc-token-{}", std::process::id());
    let seconds = 3000 + std::process::id() % 1000;
    // Three trials of one commit: overlay workspaces where the machine can mount. The leader
    // dies with the runner (PDEATHSIG); its grandchild, holding the token, does not.
    std::fs::write(
        root.join("sleeper.sh"),
        format!("#!/bin/sh\nsh -c 'sleep {seconds} || echo {token}'\n"),
    )
    .unwrap();
    let executable = std::os::unix::fs::PermissionsExt::from_mode(0o755);
    std::fs::set_permissions(root.join("sleeper.sh"), executable).unwrap();
    write_suite(
        root,
        "name: gc\nrepo: repo\nagents:\n  sleeper: {kind: command, run: ./sleeper.sh, timeout: 10m}\ntasks:\n  - id: t\n    instruction: wait\n    verify: \"true\"\n",
    );
    std::fs::create_dir_all(root.join("work")).unwrap();
    let out = root.join("out");
    let mut child = deltabench(root)
        .args(["run", "suite.yaml", "--trials", "3", "-j", "3", "--workdir"])
        .arg(root.join("work"))
        .arg("--out")
        .arg(&out)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // The premise: all three agents' inner shells and their `sleep`s run, and the run holds
    // its lease, before the kill.
    let leases = root.join("cache/leases");
    let lease_held = || std::fs::read_dir(&leases).is_ok_and(|mut d| d.next().is_some());
    // A `sleep`'s command line is its arguments joined by NULs.
    let sleeps = format!("sleep\0{seconds}");
    assert!(
        eventually(Duration::from_secs(60), || {
            processes_with(&token) >= 3 && processes_with(&sleeps) >= 3 && lease_held()
        }),
        "premise not established in 60 s: {} of 3 agents started, lease held: {}",
        processes_with(&token),
        lease_held()
    );
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(
        processes_with(&token),
        3,
        "the agents outlive a kill -9 of the runner"
    );

    let dry = deltabench(root).args(["gc", "--dry-run"]).output().unwrap();
    assert_eq!(dry.status.code(), Some(0), "{}", stderr(&dry));
    assert!(
        stdout(&dry).contains("would kill process"),
        "{}",
        stdout(&dry)
    );
    assert!(stdout(&dry).contains("would remove"), "{}", stdout(&dry));
    assert_eq!(processes_with(&token), 3, "--dry-run killed something");

    let gc = deltabench(root).arg("gc").output().unwrap();
    assert_eq!(gc.status.code(), Some(0), "{}{}", stdout(&gc), stderr(&gc));
    assert!(
        stdout(&gc).contains("removed lease of dead run"),
        "{}",
        stdout(&gc)
    );
    wait_until(
        Duration::from_secs(5),
        "the end of the agents after gc",
        || processes_with(&token) == 0,
    );
    assert_eq!(mounts_under(&root.join("work")), Vec::<String>::new());
    assert_no_leftovers(&root.join("work"));
    let again = deltabench(root).arg("gc").output().unwrap();
    // Nothing of this run is left (an empty cgroup of another test's killed run may be).
    assert!(
        !stdout(&again).contains(&*out.to_string_lossy()),
        "{}",
        stdout(&again)
    );
}

/// Live processes whose command line holds `token` (zombies have an empty one).
pub fn processes_with(token: &str) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.parse::<u32>().is_ok())
        })
        .filter_map(|e| std::fs::read(e.path().join("cmdline")).ok())
        .filter(|cmdline| String::from_utf8_lossy(cmdline).contains(token))
        .count()
}

#[test]
fn retries_rerun_only_infra_errors_and_record_the_last_attempt() {
    let tmp = one_file_repo();
    let root = tmp.path();
    // The setup fails the first time it runs (an infra_error), then succeeds.
    let flag = root.join("setup-ran-once");
    write_suite(
        root,
        &format!(
            "name: retries\nrepo: repo\ntasks:\n  - id: flaky\n    instruction: fix\n    setup: \"test -e {0} || {{ touch {0}; exit 1; }}\"\n    verify: \"grep -q fixed a.txt\"\n    solution: solution/\n",
            flag.display()
        ),
    );
    crate::common::write_files(root, &[("solution/a.txt", "fixed\n")]);
    let (output, _, out) = run_suite(root, &["--agent", "oracle"]);
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    assert_eq!(trials(&out)[0]["outcome"], "infra_error");

    std::fs::remove_file(&flag).unwrap();
    std::fs::remove_dir_all(&out).unwrap();
    let (output, work, out) = run_suite(root, &["--agent", "oracle", "--retries", "2"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let records = trials(&out);
    assert_eq!(records.len(), 1, "only the last attempt is recorded");
    assert_eq!(records[0]["outcome"], "pass");
    assert_no_leftovers(&work);
}
