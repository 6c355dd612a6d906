//! Issue 37, class 6: a copied or moved suite keeps its evidence. A task's digest in the lock
//! once hashed resolved paths (a grader script named `./grade.py`, an environment's Dockerfile),
//! so the same suite in another folder had no validated evidence and ran with no evidence check
//! and no mutation check, after a one-line note. Digests now hash paths relative to the suite's
//! folder: validated once, moved, then copied, the suite still holds every trial to the lock (an
//! always-equal value is invalid through the mutation check, the honest fix passes), and
//! `run --require-lock` starts. A task changed since it was validated is `unvalidated` in its
//! records and in every report format, and `--require-lock` refuses to start (exit 2), naming
//! the task and the lock.

use std::path::Path;

use crate::assertions::{ALWAYS_EQUAL, FIX, expect, repo, require_tools};
use crate::common::{deltabench, stderr, stdout, temp_dir, trials};

const MUTANT: &str = "the hidden tests' assertions do not bite: a mutant of tests/test_calc.py:";

/// The assertion suite's repository in `dir`, with a grader and agent scripts named relative to
/// the suite's folder; with `image`, a second task in an environment built from a Dockerfile
/// `FROM` it.
fn suite(dir: &Path, isolation: &str, image: Option<&str>) {
    std::fs::create_dir_all(dir).unwrap();
    repo(dir);
    let grader = Path::new(env!("CARGO_MANIFEST_DIR")).join("graders/test-ratio.py");
    let executable = |path: &Path, text: &str| {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    executable(
        &dir.join("grade.py"),
        &std::fs::read_to_string(grader).unwrap(),
    );
    executable(&dir.join("attacks/honest.sh"), &format!("#!/bin/sh\n{FIX}"));
    executable(
        &dir.join("attacks/always_equal.sh"),
        &format!("#!/bin/sh\ncat >> calc.py <<'EOF'\n{ALWAYS_EQUAL}EOF\n"),
    );
    let mut yaml = format!(
        "name: moved\nrepo: repo\ndefaults:\n  isolation: {isolation}\n  mutants: 2\nagents:\n  \
         honest: {{kind: command, run: ./attacks/honest.sh}}\n  \
         always_equal: {{kind: command, run: ./attacks/always_equal.sh}}\ntasks:\n  \
         - id: graded\n    instruction: fix add\n    tests: hidden\n    solution: solution\n    \
         verify: python3 -m unittest tests.test_calc\n    metric: {{grader: ./grade.py}}\n"
    );
    if let Some(image) = image {
        std::fs::create_dir_all(dir.join("env")).unwrap();
        std::fs::write(dir.join("env/Dockerfile"), format!("FROM {image}\n")).unwrap();
        yaml.push_str(
            "  - id: built\n    instruction: fix add\n    tests: hidden\n    solution: solution\n    \
             verify: python3 -m unittest tests.test_calc\n    environment: {dockerfile: env/Dockerfile}\n",
        );
    }
    std::fs::write(dir.join("suite.yaml"), yaml).unwrap();
}

/// `deltabench validate` of the suite in `root/folder`, from `root` (the cache stays there).
fn validate(root: &Path, folder: &str) {
    std::fs::create_dir_all(root.join("work")).unwrap();
    let output = deltabench(root)
        .args(["validate", &format!("{folder}/suite.yaml"), "--workdir"])
        .arg(root.join("work"))
        .output()
        .unwrap();
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}\n{}",
        stdout(&output),
        stderr(&output)
    );
}

/// `deltabench run [extra] folder/suite.yaml --out root/out`: the output.
fn run(root: &Path, folder: &str, out: &str, extra: &[&str]) -> std::process::Output {
    deltabench(root)
        .arg("run")
        .args(extra)
        .arg(format!("{folder}/suite.yaml"))
        .args(["-j", "2", "--workdir"])
        .arg(root.join("work"))
        .arg("--out")
        .arg(root.join(out))
        .output()
        .unwrap()
}

/// The records of the run in `out` by (task, agent), with each trial's folder, for `expect`.
fn records(out: &Path) -> std::collections::BTreeMap<(String, String), serde_json::Value> {
    trials(out)
        .into_iter()
        .map(|mut r| {
            let (task, agent) = (r["task"].as_str().unwrap(), r["agent"].as_str().unwrap());
            let dir = out.join(format!("trials/{task}/{agent}/1"));
            let key = (task.to_owned(), agent.to_owned());
            r["dir"] = dir.display().to_string().into();
            (key, r)
        })
        .collect()
}

/// Validated in `a`, moved to `b`, copied to `c`: each runs under `--require-lock` with the
/// lock's checks; then `c`'s hidden tests change, and `c` is unvalidated everywhere.
fn keeps_its_lock(isolation: &str, image: Option<&str>) {
    let tmp = temp_dir();
    let root = tmp.path();
    suite(&root.join("a"), isolation, image);
    validate(root, "a");
    std::fs::rename(root.join("a"), root.join("b")).unwrap();
    let copied = std::process::Command::new("cp")
        .arg("-a")
        .arg(root.join("b"))
        .arg(root.join("c"))
        .status()
        .unwrap();
    assert!(copied.success());
    let tasks: &[&str] = if image.is_some() {
        &["graded", "built"]
    } else {
        &["graded"]
    };
    for folder in ["b", "c"] {
        let out = format!("out-{folder}");
        let output = run(root, folder, &out, &["--require-lock"]);
        let said = stderr(&output);
        assert_eq!(output.status.code(), Some(0), "{folder}: {said}");
        assert!(!said.contains("no validated evidence"), "{folder}: {said}");
        assert!(!stdout(&output).contains("unvalidated"), "{folder}");
        let records = records(&root.join(&out));
        for task in tasks {
            expect(&records, task, "honest", &["pass"], "");
            expect(&records, task, "always_equal", &["invalid"], MUTANT);
        }
        assert!(
            records.values().all(|r| r.get("unvalidated").is_none()),
            "{records:?}"
        );
    }

    // A task changed since its validation: no evidence, and `--require-lock` says so.
    let hidden = root.join("c/hidden/tests/test_calc.py");
    let changed = std::fs::read_to_string(&hidden).unwrap() + "\n# changed\n";
    std::fs::write(&hidden, changed).unwrap();
    let refused = run(root, "c", "out-refused", &["--require-lock"]);
    let said = stderr(&refused);
    assert_eq!(refused.status.code(), Some(2), "{said}");
    for part in [
        "--require-lock:",
        "have no validated evidence in",
        "c/suite.lock.json",
        "graded",
        "deltabench validate",
    ] {
        assert!(said.contains(part), "{part}: {said}");
    }
    assert!(!root.join("out-refused/trials").exists());
    let output = run(root, "c", "out-unvalidated", &[]);
    let said = stderr(&output);
    assert_eq!(output.status.code(), Some(0), "{said}");
    assert!(said.contains("no validated evidence"), "{said}");
    let summary = stdout(&output);
    assert!(
        summary.contains("unvalidated: no evidence in the suite's lock"),
        "{summary}"
    );
    let out = root.join("out-unvalidated");
    for record in trials(&out) {
        assert_eq!(record["unvalidated"], true, "{record}");
    }
    for (format, marker) in [
        ("table", "Tasks unvalidated: no evidence"),
        ("markdown", "**Note**: Tasks unvalidated: no evidence"),
        ("json", "\"unvalidated_tasks\""),
        ("csv", ",unvalidated\n"),
        ("junit", "name=\"unvalidated\""),
        ("html", "id=\"unvalidated\""),
    ] {
        let report = deltabench(root)
            .args(["report", "--format", format])
            .arg(&out)
            .output()
            .unwrap();
        let text = stdout(&report);
        assert!(
            text.contains(marker),
            "{format}: {text}\n{}",
            stderr(&report)
        );
        assert!(text.contains("graded"), "{format}: {text}");
    }
}

#[test]
fn a_moved_or_copied_suite_keeps_its_lock_and_an_unvalidated_task_is_marked() {
    let test =
        "moved_suite::a_moved_or_copied_suite_keeps_its_lock_and_an_unvalidated_task_is_marked";
    if !require_tools(test, false) {
        return;
    }
    for isolation in ["worktree", "sandbox"] {
        keeps_its_lock(isolation, None);
    }
}

#[test]
fn a_moved_suite_with_an_environment_keeps_its_lock() {
    let test = "moved_suite::a_moved_suite_with_an_environment_keeps_its_lock";
    if !require_tools(test, false) || !crate::environments::have_podman_image(test) {
        return;
    }
    keeps_its_lock("worktree", Some(crate::environments::BASE));
}
