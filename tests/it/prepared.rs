//! Prepared setup through the real binary: a task's setup runs once per template, every trial
//! gets a copy-on-write view of its result, and no trial sees another trial's build.

use std::path::Path;

use crate::common::{
    deltabench, git_repo, have_tool, run_suite, stderr, stdout, temp_dir, trials, write_files,
    write_suite,
};
use crate::environments::{BASE, have_podman_image};

/// Templates are overlay mounts: root (or CAP_SYS_ADMIN) is needed.
fn can_mount(test: &str) -> bool {
    have_tool(
        test,
        "root, for overlay mounts",
        // SAFETY: geteuid has no preconditions.
        unsafe { libc::geteuid() } == 0,
    )
}

fn outcome(records: &[serde_json::Value], agent: &str) -> Vec<String> {
    records
        .iter()
        .filter(|r| r["agent"] == agent)
        .map(|r| r["outcome"].as_str().unwrap_or_default().to_owned())
        .collect()
}

fn read(path: impl AsRef<Path>) -> String {
    std::fs::read_to_string(path.as_ref())
        .unwrap_or_else(|e| panic!("{}: {e}", path.as_ref().display()))
}

/// A crate whose `add` subtracts; the hidden test wants a sum; the solution adds.
fn write_crate(root: &Path) {
    git_repo(
        root,
        &[
            (
                "Cargo.toml",
                "[package]\nname = \"adder\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
            ),
            (
                "src/lib.rs",
                "pub fn add(a: i32, b: i32) -> i32 {\n    a - b\n}\n",
            ),
            (".gitignore", "/target\n"),
        ],
    );
    write_files(
        root,
        &[
            (
                "hidden/tests/add.rs",
                "#[test]\nfn adds() {\n    assert_eq!(adder::add(2, 2), 4);\n}\n",
            ),
            (
                "sol/src/lib.rs",
                "pub fn add(a: i32, b: i32) -> i32 {\n    a + b\n}\n",
            ),
        ],
    );
}

/// The issue this closes: with one build folder for all trials (CARGO_TARGET_DIR), a no-op
/// agent after the oracle was verified on the oracle's build and passed.
#[test]
fn a_rust_setup_runs_once_and_no_trial_sees_another_trials_build() {
    let test = "prepared::a_rust_setup_runs_once_and_no_trial_sees_another_trials_build";
    if !can_mount(test) {
        return;
    }
    let tmp = temp_dir();
    let root = tmp.path();
    write_crate(root);
    let count = root.join("setups.txt");
    write_suite(
        root,
        &format!(
            "name: rust\nrepo: repo\ntasks:\n  - id: add\n    instruction: make add add\n    tests: hidden\n    solution: sol\n    prepare: true\n    setup: echo setup >> {} && cargo build --offline --quiet\n    verify: cargo test --offline\n    timeout: 5m\n",
            count.display()
        ),
    );
    let shared = root.join("shared-target");
    let run = |out: &str| {
        let work = root.join("work");
        std::fs::create_dir_all(&work).unwrap();
        deltabench(root)
            .args(["run", "suite.yaml", "--jobs", "1", "--trials", "2"])
            .args(["--agent", "oracle", "--agent", "noop", "--workdir"])
            .arg(&work)
            .arg("--out")
            .arg(root.join(out))
            .env("CARGO_TARGET_DIR", &shared)
            .output()
            .unwrap()
    };
    let output = run("out");
    let out = root.join("out");
    let records = trials(&out);
    assert_eq!(records.len(), 4, "{}", stderr(&output));
    assert_eq!(outcome(&records, "oracle"), ["pass", "pass"], "{records:?}");
    assert_eq!(outcome(&records, "noop"), ["fail", "fail"], "{records:?}");
    // Four trials, eight workspaces (each trial's and the one it is verified in): one setup.
    assert_eq!(read(&count), "setup\n");
    assert!(!shared.exists(), "a trial built in the shared folder");
    let manifest = read(out.join("manifest.json"));
    assert!(
        manifest.contains("setup prepared once per template for 1 of 1 tasks"),
        "{manifest}"
    );
    for trial in ["1", "2"] {
        // The setup's build is part of the base: the diff holds the fix alone.
        let patch = read(out.join(format!("trials/add/oracle/{trial}/diff.patch")));
        assert!(patch.contains("+    a + b"), "{patch}");
        assert!(!patch.contains("target/"), "{patch}");
        // The no-op's verify ran the hidden test against the unfixed crate.
        let log = read(out.join(format!("trials/add/noop/{trial}/verify.log")));
        assert!(log.contains("left: 0"), "{log}");
        assert!(log.contains("right: 4"), "{log}");
    }
    // The verify workspace rebuilt the crate the oracle changed, from the prepared build.
    let log = read(out.join("trials/add/oracle/1/verify.log"));
    assert!(log.contains("Compiling adder"), "{log}");

    // A second run finds the template: no setup at all.
    let output = run("out2");
    let records = trials(&root.join("out2"));
    assert_eq!(records.len(), 4, "{}", stderr(&output));
    assert_eq!(read(&count), "setup\n");

    // gc --cache-max evicts it (nothing is using it now), naming what it removed.
    let gc = deltabench(root)
        .args(["gc", "--cache-max", "1B"])
        .output()
        .unwrap();
    assert!(gc.status.success(), "{}", stderr(&gc));
    let said = stdout(&gc);
    assert!(said.contains("removed template"), "{said}");
    assert!(said.contains("least recently used"), "{said}");
    let templates = root.join("cache/templates");
    let left: Vec<_> = std::fs::read_dir(&templates)
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_dir())
        .collect();
    assert!(left.is_empty(), "{left:?}");
    // ... and the next run prepares it again.
    let output = run("out3");
    assert_eq!(trials(&root.join("out3")).len(), 4, "{}", stderr(&output));
    assert_eq!(read(&count), "setup\nsetup\n");
}

#[test]
fn a_cache_max_that_is_not_a_size_is_a_usage_error() {
    let tmp = temp_dir();
    let gc = deltabench(tmp.path())
        .args(["gc", "--cache-max", "lots"])
        .output()
        .unwrap();
    assert_eq!(gc.status.code(), Some(2), "{}", stderr(&gc));
    let said = stderr(&gc);
    assert!(said.contains("'lots'"), "{said}");
    assert!(said.contains("20GiB"), "{said}");
}

/// In a container, what setup changes outside the workspace (here a file under /tmp) is kept
/// in an image the trial's commands run in; a setup run per trial in a removed container would
/// lose it.
#[test]
fn a_setup_in_a_container_is_kept_as_an_image_and_run_once() {
    let test = "prepared::a_setup_in_a_container_is_kept_as_an_image_and_run_once";
    if !can_mount(test) || !have_podman_image(test) {
        return;
    }
    let tmp = temp_dir();
    let root = tmp.path();
    git_repo(root, &[("a.txt", "a\n"), (".gitignore", "stamp.txt\n")]);
    write_files(root, &[("sol/out.txt", "fixed\n")]);
    write_suite(
        root,
        &format!(
            "name: env\nrepo: repo\ntasks:\n  - id: t\n    instruction: write out.txt\n    solution: sol\n    environment: {{image: {BASE}}}\n    setup: \"date +%s%N > stamp.txt && echo prepared > /tmp/outside.txt\"\n    verify: \"cat stamp.txt && grep -q prepared /tmp/outside.txt && grep -q fixed out.txt\"\n"
        ),
    );
    let (output, _work, out) = run_suite(
        root,
        &[
            "--jobs", "1", "--trials", "2", "--agent", "oracle", "--agent", "noop",
        ],
    );
    let records = trials(&out);
    assert_eq!(records.len(), 4, "{}", stderr(&output));
    assert_eq!(outcome(&records, "oracle"), ["pass", "pass"], "{records:?}");
    assert_eq!(outcome(&records, "noop"), ["fail", "fail"], "{records:?}");
    // Every verify saw the one stamp the single setup wrote.
    let stamps: std::collections::BTreeSet<String> = ["oracle", "noop"]
        .iter()
        .flat_map(|agent| ["1", "2"].map(|n| format!("trials/t/{agent}/{n}/verify.log")))
        .map(|log| {
            read(out.join(log))
                .lines()
                .next()
                .unwrap_or_default()
                .to_owned()
        })
        .collect();
    assert_eq!(stamps.len(), 1, "{stamps:?}");
    // The noop failed on the fix alone: the setup's file outside the workspace was there.
    let log = read(out.join("trials/t/noop/1/verify.log"));
    assert!(!log.contains("outside.txt"), "{log}");
    let manifest = read(out.join("manifest.json"));
    assert!(manifest.contains("setup prepared once"), "{manifest}");
}

/// A setup that fails is reported with the reason and its log's last lines, never a bare
/// "reference fails", and is not run again for each trial of the run.
#[test]
fn a_failing_prepared_setup_is_explained_once() {
    let test = "prepared::a_failing_prepared_setup_is_explained_once";
    if !can_mount(test) {
        return;
    }
    let tmp = temp_dir();
    let root = tmp.path();
    git_repo(root, &[("a.txt", "a\n")]);
    write_files(root, &[("sol/a.txt", "b\n")]);
    let count = root.join("setups.txt");
    write_suite(
        root,
        &format!(
            "name: broken\nrepo: repo\ntasks:\n  - id: t\n    instruction: write b\n    solution: sol\n    prepare: true\n    setup: echo run >> {}; echo the mirror is down; exit 3\n    verify: grep -q b a.txt\n",
            count.display()
        ),
    );
    let work = root.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let output = deltabench(root)
        .args(["validate", "suite.yaml", "--workdir"])
        .arg(&work)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let said = format!("{}{}", stdout(&output), stderr(&output));
    assert!(said.contains("the setup command `echo run"), "{said}");
    assert!(said.contains("exited with status 3"), "{said}");
    assert!(
        said.contains("which ends with:\n  the mirror is down"),
        "{said}"
    );
    assert!(!said.contains("reference fails"), "{said}");
    // Oracle and noop, each with a verify workspace: one attempt.
    assert_eq!(read(&count), "run\n");
}

/// The one-time preparation of a task (its template, with the prepared setup) is timed apart
/// from its trials: the trial that made it says how long it took, no trial's duration holds it,
/// and the manifest and the reports give it per task.
#[test]
fn a_tasks_preparation_is_timed_apart_from_its_trials() {
    if !can_mount("prepared::a_tasks_preparation_is_timed_apart_from_its_trials") {
        return;
    }
    let tmp = temp_dir();
    let root = tmp.path();
    git_repo(root, &[("a.txt", "a\n")]);
    write_suite(
        root,
        "name: prep\nrepo: repo\nagents: {}\ntasks:\n  - id: slow-setup\n    instruction: x\n    setup: sleep 1.2 && echo built > built.txt\n    prepare: true\n    verify: test -f built.txt\n",
    );
    let (output, _work, out) = run_suite(root, &["--agent", "noop", "--trials", "2", "-j", "1"]);
    let records = trials(&out);
    assert_eq!(records.len(), 2, "{}", stderr(&output));
    let (first, second) = (&records[0], &records[1]);
    let preparation = first["preparation_ms"]
        .as_u64()
        .unwrap_or_else(|| panic!("{first}"));
    assert!(preparation >= 1200, "{first}");
    let phases = first["phases"].as_array().unwrap();
    assert_eq!(phases[0][0], "prepare", "{first}");
    assert!(second.get("preparation_ms").is_none(), "{second}");
    assert_eq!(second["phases"][0][0], "provision", "{second}");
    let manifest: serde_json::Value =
        serde_json::from_str(&read(out.join("manifest.json"))).unwrap();
    assert_eq!(
        manifest["preparation"]["slow-setup"]["template_ms"].as_u64(),
        Some(preparation),
        "{manifest}"
    );
    let report = deltabench(root).arg("report").arg(&out).output().unwrap();
    let text = stdout(&report);
    assert!(
        text.contains("Prepared once per task, not counted in its trials' times")
            && text.contains("slow-setup: template "),
        "{text}"
    );
    let json = deltabench(root)
        .arg("report")
        .arg(&out)
        .args(["--format", "json"])
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(
        json["preparation"]["slow-setup"]["template_ms"].as_u64(),
        Some(preparation)
    );
}
