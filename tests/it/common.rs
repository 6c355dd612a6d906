//! Shared fixtures: temp dirs on tmpfs, real git repos, and the real binary.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// A temp dir on `/dev/shm` when it exists (this VM's root disk creates files slowly).
pub fn temp_dir() -> tempfile::TempDir {
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        tempfile::Builder::new()
            .prefix("deltabench-test-")
            .tempdir_in(shm)
            .unwrap()
    } else {
        tempfile::tempdir().unwrap()
    }
}

/// The `deltabench` binary under test, run in `cwd`.
pub fn deltabench(cwd: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_deltabench"));
    // The cache lives beside the workdir, so "nothing left under the workdir" stays checkable.
    command
        .current_dir(cwd)
        .env_remove("DELTABENCH_WORKDIR")
        .env("DELTABENCH_CACHE", cwd.join("cache"));
    command
}

/// Runs git in `dir` with a fixed identity and no user config; panics on failure.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let output = Command::new("git")
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "test")
        .env("GIT_AUTHOR_EMAIL", "test@example.com")
        .env("GIT_COMMITTER_NAME", "test")
        .env("GIT_COMMITTER_EMAIL", "test@example.com")
        .args(args)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "git {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}

/// Writes `files` (path, content) under `root`, creating parents.
pub fn write_files(root: &Path, files: &[(&str, &str)]) {
    for (path, content) in files {
        let target = root.join(path);
        std::fs::create_dir_all(target.parent().unwrap()).unwrap();
        std::fs::write(target, content).unwrap();
    }
}

/// A git repo at `<root>/repo` with one commit of `files`, branch `main`. Returns the commit id.
pub fn git_repo(root: &Path, files: &[(&str, &str)]) -> (PathBuf, String) {
    let repo = root.join("repo");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    write_files(&repo, files);
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "base"]);
    let head = git(&repo, &["rev-parse", "HEAD"]);
    (repo, head)
}

/// Writes `suite.yaml` under `root` and returns its path.
pub fn write_suite(root: &Path, yaml: &str) -> PathBuf {
    let path = root.join("suite.yaml");
    std::fs::write(&path, yaml).unwrap();
    path
}

/// Runs `deltabench run SUITE --workdir WORK --out OUT` plus `extra` args.
pub fn run_suite(root: &Path, extra: &[&str]) -> (Output, PathBuf, PathBuf) {
    let work = root.join("work");
    let out = root.join("out");
    std::fs::create_dir_all(&work).unwrap();
    let output = deltabench(root)
        .args(["run", "suite.yaml", "--workdir"])
        .arg(&work)
        .arg("--out")
        .arg(&out)
        .args(extra)
        .output()
        .unwrap();
    (output, work, out)
}

/// The records of `trials.jsonl` as JSON values.
pub fn trials(out: &Path) -> Vec<serde_json::Value> {
    std::fs::read_to_string(out.join("trials.jsonl"))
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// Every file or directory left under `work` (recursively), relative.
pub fn leftovers(work: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![work.to_owned()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            found.push(
                entry
                    .path()
                    .strip_prefix(work)
                    .unwrap()
                    .display()
                    .to_string(),
            );
            if entry.file_type().unwrap().is_dir() {
                stack.push(entry.path());
            }
        }
    }
    found
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Fails the test if any file or directory is left under `work`.
pub fn assert_no_leftovers(work: &Path) {
    let left = leftovers(work);
    assert!(
        left.is_empty(),
        "left behind under {}: {left:?}",
        work.display()
    );
}

/// A temp dir holding `repo/` with one commit of `a.txt` ("a\n").
pub fn one_file_repo() -> tempfile::TempDir {
    let tmp = temp_dir();
    git_repo(tmp.path(), &[("a.txt", "a\n")]);
    tmp
}

/// Whether a test's tool is there. Without it: under CI the test fails; elsewhere it is skipped
/// loudly and recorded in `target/tmp/skipped-tests.txt`, which `.ci/test` lists with a count
/// at the end (never a silent `ok`).
pub fn have_tool(test: &str, tool: &str, found: bool) -> bool {
    if found {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{test} needs {tool}, and CI must install it (.ci/install does)"
    );
    eprintln!("\n*** SKIPPED: {test} needs {tool} ***\n");
    let log = Path::new(env!("CARGO_TARGET_TMPDIR")).join("skipped-tests.txt");
    if let Ok(mut file) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
    {
        use std::io::Write;
        let _ = writeln!(file, "{test}: needs {tool}");
    }
    false
}

/// Whether `command` is on `PATH` (see [`have_tool`]).
pub fn have_command(test: &str, command: &str) -> bool {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {command}")])
        .output()
        .is_ok_and(|o| o.status.success());
    have_tool(test, command, found)
}

/// Whether bubblewrap can run here (see [`have_tool`]).
pub fn have_bwrap(test: &str) -> bool {
    have_tool(
        test,
        "a bubblewrap that can create namespaces (apt-get install bubblewrap; a chroot or a container may forbid user namespaces)",
        bwrap_works(),
    )
}

/// Whether bubblewrap makes its namespaces here. Asked up to three times: under a full test
/// run's load one attempt can fail for want of a moment's resources, not for want of the tool.
pub fn bwrap_works() -> bool {
    (0..3).any(|attempt| {
        if attempt > 0 {
            std::thread::sleep(std::time::Duration::from_millis(200));
        }
        Command::new("bwrap")
            .args(["--unshare-all", "--ro-bind", "/", "/", "true"])
            .output()
            .is_ok_and(|o| o.status.success())
    })
}

/// Filters that replace the temp dir `root` (as given and canonicalized) with `[TMP]`.
pub fn tmp_filters(root: &Path) -> Vec<(String, &'static str)> {
    let mut paths = vec![root.display().to_string()];
    if let Ok(canonical) = root.canonicalize() {
        let canonical = canonical.display().to_string();
        if !paths.contains(&canonical) {
            paths.push(canonical);
        }
    }
    // Longest first, so a canonical path that extends the given one is replaced whole.
    paths.sort_by_key(|p| std::cmp::Reverse(p.len()));
    paths
        .into_iter()
        .map(|p| (regex::escape(&p), "[TMP]"))
        .collect()
}

/// Snapshots `$text` (a message as the user sees it) with the temp dir `$root` replaced by
/// `[TMP]`. Named `$name`, or after the calling test when no name is given (a macro, so that
/// insta sees the caller).
macro_rules! assert_tmp_snapshot {
    ($root:expr, $text:expr) => {{
        let filters = $crate::common::tmp_filters($root);
        let filters: Vec<(&str, &str)> = filters.iter().map(|(p, r)| (p.as_str(), *r)).collect();
        insta::with_settings!({filters => filters}, {
            insta::assert_snapshot!($text);
        });
    }};
    ($name:expr, $root:expr, $text:expr) => {{
        let filters = $crate::common::tmp_filters($root);
        let filters: Vec<(&str, &str)> = filters.iter().map(|(p, r)| (p.as_str(), *r)).collect();
        insta::with_settings!({filters => filters}, {
            insta::assert_snapshot!($name, $text);
        });
    }};
}
pub(crate) use assert_tmp_snapshot;

/// How often [`eventually`] asks again.
const POLL: Duration = Duration::from_millis(5);

/// Whether `condition` holds within `timeout`, asked every few ms.
pub fn eventually(timeout: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let started = Instant::now();
    loop {
        if condition() {
            return true;
        }
        if started.elapsed() >= timeout {
            return false;
        }
        std::thread::sleep(POLL);
    }
}

/// Waits until `condition` holds; fails the test after `timeout` saying that `what` never
/// happened. A hang guard, not a timing assertion: give it a generous timeout.
pub fn wait_until(timeout: Duration, what: &str, condition: impl FnMut() -> bool) {
    assert!(
        eventually(timeout, condition),
        "waited {timeout:?}, and {what} never happened"
    );
}

/// [`wait_until`] inside an async test: polls without blocking the runtime.
pub async fn wait_until_async(timeout: Duration, what: &str, mut condition: impl FnMut() -> bool) {
    let started = Instant::now();
    while !condition() {
        assert!(
            started.elapsed() < timeout,
            "waited {timeout:?}, and {what} never happened"
        );
        tokio::time::sleep(POLL).await;
    }
}

/// Whether a descendant of process `ancestor` runs with the arguments `args` in a row in its
/// command line (`["sleep", "60"]` finds `sleep 60`).
pub fn descendant_running(ancestor: u32, args: &[&str]) -> bool {
    // A command line is its arguments joined by NULs.
    let needle = args.join("\0");
    let mut parents = std::collections::HashMap::new();
    let mut matching = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        // The parent is the second field after the command name, which may hold spaces.
        let Some(parent) = std::fs::read_to_string(entry.path().join("stat"))
            .ok()
            .and_then(|stat| {
                stat.rsplit_once(')')?
                    .1
                    .split_whitespace()
                    .nth(1)?
                    .parse()
                    .ok()
            })
        else {
            continue;
        };
        parents.insert(pid, parent);
        if std::fs::read(entry.path().join("cmdline"))
            .is_ok_and(|cmdline| String::from_utf8_lossy(&cmdline).contains(&needle))
        {
            matching.push(pid);
        }
    }
    matching.into_iter().any(|mut pid| {
        while let Some(&parent) = parents.get(&pid) {
            if parent == ancestor {
                return true;
            }
            pid = parent;
        }
        false
    })
}

/// Every `.rs` file under `dir`, depth first, into `found`.
pub fn rust_files(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, found);
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            found.push(path);
        }
    }
}
