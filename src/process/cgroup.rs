//! A cgroup v2 per child process tree, where the machine allows: `cgroup.kill` kills every
//! process in it at once, including the ones that left the process group with `setsid()`.
//!
//! The unified hierarchy is found in `/proc/self/mountinfo` (at `/sys/fs/cgroup` on pure v2
//! hosts, `/sys/fs/cgroup/unified` on hybrid ones), and this process's own cgroup in
//! `/proc/self/cgroup` (`0::/path`). Children go under `<own>/deltabench-<pidns>-<pid>/`
//! (the pid namespace's inode: a pid is only dead or alive within its namespace, and a machine
//! may run deltabench in several that share one cgroup tree), created at
//! the first spawn; when that fails (no v2, no write access, a kernel without `cgroup.kill`),
//! every child falls back to its process group.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Set to `off` to use process groups even where cgroups work (to test the fallback).
pub(super) const DISABLE_ENV: &str = "DELTABENCH_CGROUPS";

/// This run's parent cgroup, or `None` when cgroups cannot be used here.
fn parent() -> Option<&'static Path> {
    static PARENT: OnceLock<Option<PathBuf>> = OnceLock::new();
    PARENT.get_or_init(detect).as_deref()
}

fn detect() -> Option<PathBuf> {
    if std::env::var(DISABLE_ENV).is_ok_and(|v| v == "off") {
        return None;
    }
    // Tidy what earlier runs left empty (a run killed with -9 cannot remove its own).
    for parent in dead_parents() {
        let _ = reap_parent(&parent, false);
    }
    let parent = own_dir()?.join(parent_name(std::process::id()));
    fs::create_dir_all(&parent).ok()?;
    // cgroup.kill exists since Linux 5.14; without it a cgroup cannot kill its tree.
    let probe = parent.join("probe");
    let usable =
        fs::create_dir(&probe).is_ok() && probe.join("cgroup.kill").exists() && can_join(&probe);
    let _ = fs::remove_dir(&probe);
    if !usable {
        let _ = fs::remove_dir(&parent);
        return None;
    }
    Some(parent)
}

/// Whether a child can move itself into `dir` (creating a cgroup may be allowed where moving a
/// process is not, e.g. without delegation): runs `true` there once.
fn can_join(dir: &Path) -> bool {
    use std::os::unix::process::CommandExt;
    let Ok(procs) = OpenOptions::new()
        .write(true)
        .open(dir.join("cgroup.procs"))
    else {
        return false;
    };
    let fd = procs.as_raw_fd();
    let mut command = std::process::Command::new("true");
    // SAFETY: the closure only calls `write(2)` on an fd opened before the fork.
    unsafe {
        command.pre_exec(move || join_from_child(fd));
    }
    command.status().is_ok_and(|status| status.success())
}

/// This process's own cgroup in the unified hierarchy.
fn own_dir() -> Option<PathBuf> {
    let own = fs::read_to_string("/proc/self/cgroup")
        .ok()?
        .lines()
        .find_map(|line| line.strip_prefix("0::").map(str::to_owned))?;
    let mountinfo = fs::read_to_string("/proc/self/mountinfo").ok()?;
    // Fields: id parent major:minor root mount-point options... - fstype source options.
    let mount = mountinfo.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        (right.split(' ').next()? == "cgroup2")
            .then(|| left.split(' ').nth(4).map(PathBuf::from))?
    })?;
    Some(mount.join(own.trim_start_matches('/')))
}

/// The parent cgroups of deltabench processes that are gone, beside this process's own.
pub(super) fn dead_parents() -> Vec<PathBuf> {
    let Some(entries) = own_dir().and_then(|own| fs::read_dir(own).ok()) else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = entries
        .flatten()
        .filter(|entry| {
            let name = entry.file_name();
            let pid = name
                .to_str()
                .and_then(|n| n.strip_prefix(&format!("deltabench-{}-", pid_namespace())))
                .and_then(|pid| pid.parse::<u32>().ok());
            pid.is_some_and(|pid| {
                pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists()
            })
        })
        .map(|entry| entry.path())
        .collect();
    found.sort();
    found
}

/// `deltabench-<pidns>-<pid>`: the parent cgroup's name for `pid` of this pid namespace.
fn parent_name(pid: u32) -> String {
    format!("deltabench-{}-{pid}", pid_namespace())
}

/// The inode of this process's pid namespace (`0` when it cannot be read).
fn pid_namespace() -> u64 {
    static NS: OnceLock<u64> = OnceLock::new();
    *NS.get_or_init(|| {
        use std::os::unix::fs::MetadataExt;
        fs::metadata("/proc/self/ns/pid").map_or(0, |m| m.ino())
    })
}

/// The parent cgroup of deltabench process `pid`, if it exists.
pub(super) fn parent_of(pid: u32) -> Option<PathBuf> {
    let parent = own_dir()?.join(parent_name(pid));
    parent.is_dir().then_some(parent)
}

/// Removes a dead run's parent cgroup and its children; with `kill`, whatever still runs in
/// them is killed first. Whether it is gone.
pub(super) fn reap_parent(parent: &Path, kill: bool) -> bool {
    let children = fs::read_dir(parent).into_iter().flatten().flatten();
    for child in children.filter(|c| c.file_type().is_ok_and(|t| t.is_dir())) {
        if kill {
            kill_and_wait(&child.path());
        }
        let _ = fs::remove_dir(child.path());
    }
    fs::remove_dir(parent).is_ok()
}

/// `cgroup.kill`, then waits (up to 2 s) for the kernel to empty the cgroup: the kill takes a
/// few ms, and only an empty cgroup can be removed.
fn kill_and_wait(dir: &Path) {
    let _ = kill_dir(dir);
    let deadline = Instant::now() + Duration::from_secs(2);
    while populated(dir) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn populated(dir: &Path) -> bool {
    fs::read_to_string(dir.join("cgroup.events"))
        .is_ok_and(|events| events.lines().any(|l| l == "populated 1"))
}

/// Removes this run's parent cgroup once its children are gone (at the end of the process).
pub(super) fn remove_parent() {
    if let Some(parent) = parent() {
        let _ = fs::remove_dir(parent);
    }
}

/// One child's cgroup: the child joins it between fork and exec.
#[derive(Debug)]
pub(super) struct Cgroup {
    dir: PathBuf,
    /// `cgroup.procs`, opened before the fork: the child only has to `write(2)` to it.
    procs: File,
}

impl Cgroup {
    /// A fresh cgroup, or `None` when the machine does not allow one.
    pub(super) fn create() -> Option<Self> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let dir = parent()?.join(NEXT.fetch_add(1, Ordering::Relaxed).to_string());
        fs::create_dir(&dir).ok()?;
        match OpenOptions::new()
            .write(true)
            .open(dir.join("cgroup.procs"))
        {
            Ok(procs) => Some(Self { dir, procs }),
            Err(_) => {
                let _ = fs::remove_dir(&dir);
                None
            }
        }
    }

    /// The fd the child writes "0" to (itself) from `pre_exec`.
    pub(super) fn procs_fd(&self) -> RawFd {
        self.procs.as_raw_fd()
    }

    pub(super) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Whether any process is still in the cgroup.
    pub(super) fn populated(&self) -> bool {
        populated(&self.dir)
    }

    /// SIGKILLs every process in the cgroup, escapees from the process group included.
    pub(super) fn kill(&self) -> io::Result<()> {
        kill_dir(&self.dir)
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        kill_and_wait(&self.dir);
        let _ = fs::remove_dir(&self.dir);
    }
}

/// Writes "1" to `dir/cgroup.kill`.
pub(super) fn kill_dir(dir: &Path) -> io::Result<()> {
    OpenOptions::new()
        .write(true)
        .open(dir.join("cgroup.kill"))?
        .write_all(b"1")
}

/// The child side of joining: writes "0" (the writer itself) to the open `cgroup.procs`.
/// Async-signal-safe: one `write(2)`, no allocation.
pub(super) fn join_from_child(procs: RawFd) -> io::Result<()> {
    // SAFETY: `procs` is an open fd inherited from the parent; the buffer is a static literal.
    let written = unsafe { libc::write(procs, b"0".as_ptr().cast(), 1) };
    if written == 1 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}
