//! Real Terminal-Bench tasks, end to end (slow, opt-in): the published tasks of the
//! "Real task sets on this machine" measure of docs/import.md that validate offline, imported,
//! prepared and validated with local base images (no registry is reachable here).
//!
//! ```sh
//! benches/real_tasks.sh extract TB_GIT COOKBOOK_GIT /work/rt/tasks   # once (see the script)
//! benches/real_tasks.sh images                                     # once, needs Debian's mirror
//! DELTABENCH_REAL_TASKS=/work/rt/tasks \
//!   cargo test --test it real_tasks -- --ignored --nocapture
//! ```
//!
//! `$DELTABENCH_REAL_TASKS` is the folder `benches/real_tasks.sh extract` writes: the test reads
//! its `tb-aider_polyglot/` tasks. A variable that is not set fails the test with its name: it
//! never passes by doing nothing. The base images are the script's (`images` builds them, from
//! Debian packages); an image that is missing fails `prepare`, with its name.

use std::path::{Path, PathBuf};

use crate::common::{deltabench, stderr, stdout, temp_dir};

const VAR: &str = "DELTABENCH_REAL_TASKS";

/// The Terminal-Bench tasks (aider-polyglot adapter) whose image builds here and whose verify
/// needs no network: each must validate (its reference passes, its untouched base fails).
const OFFLINE: [&str; 9] = [
    "polyglot_cpp_all-your-base",
    "polyglot_cpp_allergies",
    "polyglot_cpp_bank-account",
    "polyglot_cpp_binary-search-tree",
    "polyglot_cpp_circular-buffer",
    "polyglot_cpp_clock",
    "polyglot_cpp_crypto-square",
    "polyglot_cpp_diamond",
    "polyglot_cpp_dnd-character",
];

/// `FROM` images of those tasks and the local images that stand for them (benches/real_tasks.sh).
const BASE_IMAGES: [&str; 1] = ["buildpack-deps:jammy=localhost/rt/buildpack-deps:jammy"];

fn tasks_folder() -> PathBuf {
    let dir = std::env::var_os(VAR).map(PathBuf::from).unwrap_or_else(|| {
        panic!("${VAR} is not set: the folder benches/real_tasks.sh extract writes (see the doc of tests/it/real_tasks.rs)")
    });
    assert!(
        dir.join("tb-aider_polyglot").is_dir(),
        "${VAR}={} holds no tb-aider_polyglot/ (benches/real_tasks.sh extract writes it)",
        dir.display()
    );
    dir
}

fn copy_dir(from: &Path, to: &Path) {
    let status = std::process::Command::new("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .unwrap();
    assert!(
        status.success(),
        "cp -a {} {}",
        from.display(),
        to.display()
    );
}

fn base_images() -> Vec<String> {
    BASE_IMAGES
        .iter()
        .flat_map(|map| ["--base-image".to_owned(), (*map).to_owned()])
        .collect()
}

#[test]
#[ignore = "slow, real Terminal-Bench tasks: needs $DELTABENCH_REAL_TASKS and podman with benches/real_tasks.sh's images (see the module doc)"]
fn real_terminal_bench_tasks_validate_offline() {
    let source = tasks_folder().join("tb-aider_polyglot");
    let tmp = temp_dir();
    let root = tmp.path();
    let tasks = root.join("tasks");
    std::fs::create_dir_all(&tasks).unwrap();
    for task in OFFLINE {
        let dir = source.join(task);
        assert!(dir.is_dir(), "{} is missing", dir.display());
        copy_dir(&dir, &tasks.join(task));
    }

    let output = deltabench(root)
        .args(["import", "terminal-bench", "tasks", "--out", "suite"])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "import: {}\n{}",
        stdout(&output),
        stderr(&output)
    );
    assert!(
        stdout(&output).starts_with(&format!("imported {} tasks", OFFLINE.len())),
        "{}",
        stdout(&output)
    );

    let output = deltabench(root)
        .args(["prepare", "suite"])
        .args(base_images())
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "prepare: {}\n{}",
        stdout(&output),
        stderr(&output)
    );

    let work = root.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let output = deltabench(root)
        .args(["validate", "suite", "-j", "2", "--workdir"])
        .arg(&work)
        .args(base_images())
        .output()
        .unwrap();
    let text = stdout(&output);
    assert!(
        output.status.success(),
        "validate: {text}\n{}",
        stderr(&output)
    );
    for task in OFFLINE {
        assert!(
            text.lines().any(|line| line == format!("ok   {task}")),
            "{task} is not ok:\n{text}"
        );
    }
}
