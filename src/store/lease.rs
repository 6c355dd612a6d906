//! Lease files: what a live run holds outside its run directory, so a dead run's leftovers can
//! be found and removed whatever `--workdir` it used.
//!
//! A run writes `<cache>/leases/<run-id>-<pid>.json` before it creates its workspace root under
//! the workdir, and removes it once that root is gone. A lease whose process is gone (its pid
//! is dead, or reused by a process with another start time) belongs to a run that died: `gc`
//! and `resume` reap it by killing the processes still working inside the root (their current
//! directory is under it), detaching every mount under it (overlay workspaces, and whatever an
//! agent mounted), and removing it without crossing into a mount.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use nix::mount::{MntFlags, umount2};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};

use super::{sanitize, write_json_atomic};

/// What a running run holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lease {
    /// The process id of the run.
    pub pid: u32,
    /// The process's start time in clock ticks since boot (`/proc/PID/stat` field 22), so a
    /// reused pid does not pass for the run.
    pub start_time: u64,
    /// The run's workspace root under the workdir: workspaces, overlay mounts, scratch.
    pub root: PathBuf,
    /// The run directory the run writes.
    pub run_dir: PathBuf,
    /// The container runtime the run started containers with (labelled with the lease's
    /// [`id`](FoundLease::id)), so `gc` removes them with the same one whatever its `PATH`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<PathBuf>,
}

/// A lease file held by this process; released explicitly once the root is cleaned.
#[derive(Debug)]
pub struct HeldLease {
    path: PathBuf,
}

impl HeldLease {
    /// Writes the lease of this process for `root` and `run_dir` under `cache`, naming the
    /// container runtime the run uses, if any.
    pub fn acquire(
        cache: &Path,
        run_dir: &Path,
        root: &Path,
        runtime: Option<&Path>,
    ) -> io::Result<Self> {
        let dir = cache.join("leases");
        fs::create_dir_all(&dir)?;
        let pid = std::process::id();
        let run_id = run_dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "run".into());
        let path = dir.join(format!("{}-{pid}.json", sanitize(&run_id)));
        let lease = Lease {
            pid,
            start_time: start_time(pid).unwrap_or(0),
            root: root.to_owned(),
            // Canonical, so `resume` through another spelling of the path finds it.
            run_dir: run_dir
                .canonicalize()
                .or_else(|_| std::path::absolute(run_dir))?,
            runtime: runtime.map(Path::to_owned),
        };
        write_json_atomic(&path, &lease)?;
        register_cache(cache);
        Ok(Self { path })
    }

    /// The lease's id, `<run-id>-<pid>`: the label of the run's containers.
    pub fn id(&self) -> String {
        lease_id(&self.path)
    }

    /// Removes the lease file: the run left nothing behind that gc should reap.
    pub fn release(self) {
        let _ = fs::remove_file(&self.path);
    }
}

/// A lease file found on disk.
#[derive(Debug, Clone)]
pub struct FoundLease {
    /// The lease file (`<cache>/leases/<id>.json`).
    pub path: PathBuf,
    /// What the file holds.
    pub lease: Lease,
}

fn lease_id(path: &Path) -> String {
    path.file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default()
}

impl FoundLease {
    /// The lease's id, as [`HeldLease::id`].
    pub fn id(&self) -> String {
        lease_id(&self.path)
    }

    /// Whether the process that wrote the lease is still running.
    pub fn is_alive(&self) -> bool {
        start_time(self.lease.pid).is_some_and(|t| t == self.lease.start_time)
    }
}

/// Every readable lease under `cache`; unreadable files are skipped (a write in progress).
pub fn leases(cache: &Path) -> Vec<FoundLease> {
    let Ok(entries) = fs::read_dir(cache.join("leases")) else {
        return Vec::new();
    };
    let mut found: Vec<FoundLease> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .filter_map(|path| {
            let lease = serde_json::from_slice(&fs::read(&path).ok()?).ok()?;
            Some(FoundLease { path, lease })
        })
        .collect();
    found.sort_by(|a, b| a.path.cmp(&b.path));
    found
}

/// One thing reaping a dead run's lease did (or, in a dry run, would do).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reaped {
    /// A process still working under the run's root, killed.
    Killed {
        /// Its process id.
        pid: i32,
        /// Its working directory.
        cwd: PathBuf,
    },
    /// The run's cgroups, every process still in them killed.
    Cgroup(PathBuf),
    /// A container of the run, removed through its runtime.
    Container(String),
    /// A mount under the run's root, detached.
    Unmounted(PathBuf),
    /// The run's root, removed.
    Removed(PathBuf),
    /// Something that could not be cleaned, with why.
    Failed {
        /// What could not be cleaned (a path, a process, a container).
        what: String,
        /// Why, as the system said.
        error: String,
    },
}

impl std::fmt::Display for Reaped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Killed { pid, cwd } => write!(f, "process {pid} (in {})", cwd.display()),
            Self::Cgroup(path) => write!(f, "cgroup {}", path.display()),
            Self::Container(id) => write!(f, "container {id}"),
            Self::Unmounted(path) => write!(f, "{}", path.display()),
            Self::Removed(path) => write!(f, "{}", path.display()),
            Self::Failed { what, error } => write!(f, "{what}: {error}"),
        }
    }
}

/// Kills what still runs in a dead run's cgroups and under its root, detaches its mounts,
/// removes the root and the lease file. With `dry_run`, only lists what it would do. `None`
/// when another process (a concurrent `gc` or `resume`) reaps this lease or already did: two
/// reapers of one lease would race each other's kills and removals into false failures.
pub fn reap(found: &FoundLease, dry_run: bool) -> Option<Vec<Reaped>> {
    let _reaping = match dry_run {
        true => None,
        false => Some(lock_for_reaping(&found.path)?),
    };
    Some(reap_locked(found, dry_run))
}

/// An exclusive lock on the lease file, once it is known to be still there after locking.
fn lock_for_reaping(path: &Path) -> Option<nix::fcntl::Flock<fs::File>> {
    use nix::fcntl::{Flock, FlockArg};
    let file = fs::File::open(path).ok()?;
    let lock = Flock::lock(file, FlockArg::LockExclusiveNonblock).ok()?;
    // The reaper before this one removes the file once done.
    path.exists().then_some(lock)
}

fn reap_locked(found: &FoundLease, dry_run: bool) -> Vec<Reaped> {
    let root = &found.lease.root;
    let mut done = Vec::new();
    if root.as_os_str().is_empty() || root == Path::new("/") {
        return done;
    }
    // Containers first: a running one keeps its bind mount of the workspace alive, and neither
    // the cgroups nor the cwd scan below find its processes (conmon is init's child).
    if let Some(program) = &found.lease.runtime {
        let runtime = crate::workspace::Runtime::at(program.clone());
        match runtime.remove_labelled(&found.id(), dry_run) {
            Ok(ids) => done.extend(ids.into_iter().map(Reaped::Container)),
            Err(error) => done.push(Reaped::Failed {
                what: format!("the containers labelled {}", found.id()),
                error: error.to_string(),
            }),
        }
    }
    // The cgroups next: airtight where used, wherever the processes moved to.
    match crate::process::reap_cgroups_of(found.lease.pid, dry_run) {
        Some((cgroup, true)) => done.push(Reaped::Cgroup(cgroup)),
        Some((cgroup, false)) if dry_run => done.push(Reaped::Cgroup(cgroup)),
        Some((cgroup, false)) => done.push(Reaped::Failed {
            what: format!("cgroup {}", cgroup.display()),
            error: "processes still in it".into(),
        }),
        None => {}
    }
    for (pid, cwd) in processes_under(root) {
        // The process may be a setsid escapee: its group is gone with the run, kill it alone.
        // ESRCH: it exited between the scan and the kill.
        if !dry_run
            && let Err(err) = kill(Pid::from_raw(pid), Signal::SIGKILL)
            && err != nix::errno::Errno::ESRCH
        {
            done.push(Reaped::Failed {
                what: format!("process {pid}"),
                error: err.to_string(),
            });
            continue;
        }
        done.push(Reaped::Killed { pid, cwd });
    }
    // Deepest first: an overlay's merged dir may sit inside a directory that is itself a mount.
    let mut mounts = mounts_under(root);
    mounts.sort_by_key(|m| std::cmp::Reverse(m.components().count()));
    for mount in mounts {
        if !dry_run && let Err(err) = umount2(&mount, MntFlags::MNT_DETACH) {
            done.push(Reaped::Failed {
                what: format!("mount {}", mount.display()),
                error: err.to_string(),
            });
            continue;
        }
        done.push(Reaped::Unmounted(mount));
    }
    if fs::symlink_metadata(root).is_ok() {
        match dry_run {
            true => done.push(Reaped::Removed(root.clone())),
            // Never through a mount an agent made, nor one that would not detach.
            false => match crate::workspace::remove_tree(root) {
                Ok(()) => done.push(Reaped::Removed(root.clone())),
                Err(err) => done.extend(err.left.into_iter().map(|left| Reaped::Failed {
                    what: left.path.display().to_string(),
                    error: left.reason,
                })),
            },
        }
    }
    let failed = done.iter().any(|r| matches!(r, Reaped::Failed { .. }));
    // Keep the lease while something is left, so a later gc tries again.
    if !dry_run && !failed {
        let _ = fs::remove_file(&found.path);
    }
    done
}

/// The start time of `pid` in clock ticks since boot, or `None` when it is not running.
fn start_time(pid: u32) -> Option<u64> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces and parentheses: parse after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    // `rest` starts at field 3 (state); the start time is field 22.
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Processes (other than this one) whose current directory is `root` or below it.
fn processes_under(root: &Path) -> Vec<(i32, PathBuf)> {
    let me = std::process::id() as i32;
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid != me)
        .filter_map(|pid| {
            let cwd = fs::read_link(format!("/proc/{pid}/cwd")).ok()?;
            cwd.starts_with(root).then_some((pid, cwd))
        })
        .collect()
}

/// Mount points at `root` or below it.
fn mounts_under(root: &Path) -> Vec<PathBuf> {
    crate::workspace::mounts_below(root)
}

/// The file listing every cache a run used, so `gc` finds leases whatever `--workdir` or
/// `--cache` the run had: `$XDG_STATE_HOME/deltabench/caches` (or `~/.local/state/...`).
fn cache_registry() -> Option<PathBuf> {
    let state = std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".local/state"))
        })?;
    Some(state.join("deltabench").join("caches"))
}

fn register_cache(cache: &Path) {
    let (Some(registry), Ok(cache)) = (cache_registry(), cache.canonicalize()) else {
        return;
    };
    if registered_caches().contains(&cache) {
        return;
    }
    if let Some(parent) = registry.parent() {
        let _ = fs::create_dir_all(parent);
    }
    if let Ok(mut file) = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&registry)
    {
        use std::io::Write;
        let _ = writeln!(file, "{}", cache.display());
    }
}

/// Every cache a run has registered that still exists.
pub fn registered_caches() -> Vec<PathBuf> {
    let Some(text) = cache_registry().and_then(|r| fs::read_to_string(r).ok()) else {
        return Vec::new();
    };
    let mut caches: Vec<PathBuf> = text
        .lines()
        .map(PathBuf::from)
        .filter(|p| p.is_dir())
        .collect();
    caches.sort();
    caches.dedup();
    caches
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_alive_and_a_reused_pid_is_not() {
        let tmp = tempfile::tempdir().unwrap();
        let held = HeldLease::acquire(tmp.path(), Path::new("/x/run"), Path::new("/x/root"), None)
            .unwrap();
        let found = leases(tmp.path());
        assert_eq!(found.len(), 1);
        assert!(found[0].is_alive());
        let mut other = found[0].clone();
        other.lease.start_time += 1;
        assert!(!other.is_alive());
        held.release();
        assert!(leases(tmp.path()).is_empty());
    }

    /// Two `gc`s at once: the one that finds the lease being reaped leaves it alone, and one
    /// that comes after it was reaped finds nothing to do.
    #[test]
    fn a_lease_is_reaped_by_one_process_at_a_time() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        fs::create_dir_all(root.join("w")).unwrap();
        let held = HeldLease::acquire(tmp.path(), &tmp.path().join("run"), &root, None).unwrap();
        let mut found = leases(tmp.path()).remove(0);
        // A process that is gone (this test process's cgroups are other tests' to keep).
        let mut gone = std::process::Command::new("true").spawn().unwrap();
        gone.wait().unwrap();
        found.lease.pid = gone.id();
        let other = lock_for_reaping(&found.path).unwrap();
        assert_eq!(reap(&found, false), None);
        assert!(root.exists() && found.path.exists());
        drop(other);
        let reaped = reap(&found, false).unwrap();
        assert_eq!(reaped, vec![Reaped::Removed(root.clone())]);
        assert!(!root.exists() && !found.path.exists());
        assert_eq!(reap(&found, false), None);
        drop(held);
    }
}
