//! Child processes the harness owns.
//!
//! Every child is spawned with stdin closed, in its own process group, with one combined
//! stdout+stderr pipe (so the log keeps the order the child wrote in), a deadline, and bounded
//! capture: the full log goes to disk up to a cap, and only a head and a tail stay in memory.
//! On timeout or cancellation the whole group gets SIGTERM, a grace period, then SIGKILL. After
//! the leader exits, a grandchild that still holds the pipe gets a short leak timeout before the
//! group is killed, so it cannot hang the run. A drop guard kills the group on every other path.
//!
//! A process group does not hold a process that calls `setsid()`. Where the machine allows, each
//! child also gets its own cgroup v2 ([`cgroup`]), joined between fork and exec, and "kill the
//! group" is `cgroup.kill`: every process in it dies, escapees included, and anything still in
//! it when the leader is done is killed too. [`ProcessOutput::kill_method`] says which ran.
//!
//! A root agent can leave its cgroup too (by writing its pid into another one's
//! `cgroup.procs`). So deltabench is always a child subreaper: an orphan anywhere below it is
//! reparented to it rather than to init, and stays findable. Each command's end sweeps the
//! orphans that belong to no running command (in no live process group or cgroup), with
//! everything below them; [`cleanup`], at exit, kills every descendant left.

mod cgroup;

use std::collections::{BTreeSet, VecDeque};
use std::ffi::OsString;
use std::fs;
use std::io;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

/// Bytes of output kept in memory at each end of a capture.
pub(crate) const DEFAULT_KEEP_BYTES: usize = 32 * 1024;
/// Bytes of output written to a log file before the rest is only counted.
pub(crate) const DEFAULT_LOG_CAP: u64 = 16 * 1024 * 1024;
/// How long a group gets between SIGTERM and SIGKILL.
pub(crate) const DEFAULT_GRACE: Duration = Duration::from_secs(3);
/// How long the pipe may stay open after the leader exited (nextest uses 200 ms too).
pub(crate) const LEAK_TIMEOUT: Duration = Duration::from_millis(200);

/// Process groups alive right now, so a hard interrupt can kill them all. Their leaders are
/// tokio's children: the orphan sweep must never reap them.
static LIVE_GROUPS: Mutex<BTreeSet<i32>> = Mutex::new(BTreeSet::new());
/// Cgroups of live children, for the same reason.
static LIVE_CGROUPS: Mutex<BTreeSet<PathBuf>> = Mutex::new(BTreeSet::new());

/// Sends SIGKILL to every process group and cgroup this process still owns. For the second
/// Ctrl-C; the cgroups themselves are left for the kernel to empty.
pub(crate) fn kill_all_live_groups() {
    let groups = LIVE_GROUPS.lock().map(|g| g.clone()).unwrap_or_default();
    for pgid in groups {
        let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
    }
    let cgroups = LIVE_CGROUPS.lock().map(|g| g.clone()).unwrap_or_default();
    for dir in cgroups {
        let _ = cgroup::kill_dir(&dir);
    }
    kill_descendants(|_| true);
    cgroup::remove_parent();
}

/// Kills every process still below this one (an agent's escapee that no command's kill
/// reached), then removes the run's parent cgroup. Call before exiting.
pub(crate) fn cleanup() {
    kill_descendants(|_| true);
    cgroup::remove_parent();
}

/// The cgroup the deltabench process `pid` (now gone) put its children in, if it is left:
/// with `dry_run` only returned; otherwise every process still in it is killed and it is
/// removed. Returns it with whether it is gone.
pub(crate) fn reap_cgroups_of(pid: u32, dry_run: bool) -> Option<(PathBuf, bool)> {
    let parent = cgroup::parent_of(pid)?;
    let gone = !dry_run && cgroup::reap_parent(&parent, true);
    Some((parent, gone))
}

/// Removes the empty cgroups that deltabench processes now gone left behind (with `dry_run`,
/// only lists them). A cgroup still holding processes is left to the lease that names it.
pub(crate) fn tidy_dead_cgroups(dry_run: bool) -> Vec<PathBuf> {
    cgroup::dead_parents()
        .into_iter()
        .filter(|parent| dry_run || cgroup::reap_parent(parent, false))
        .collect()
}

/// How a process tree was killed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KillMethod {
    /// `cgroup.kill` on the child's own cgroup v2: airtight.
    Cgroup,
    /// SIGKILL to the process group, then a sweep of the orphans reparented to deltabench.
    ProcessGroup,
}

impl KillMethod {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Cgroup => "cgroup",
            Self::ProcessGroup => "process-group",
        }
    }
}

/// What to run and how to bound it.
#[derive(Debug, Clone)]
pub struct CommandSpec {
    /// Program and arguments; `argv[0]` is looked up on `PATH`.
    pub argv: Vec<OsString>,
    pub cwd: PathBuf,
    /// Added to (or overriding) the inherited environment.
    pub env: Vec<(OsString, OsString)>,
    pub timeout: Option<Duration>,
    /// Where the full combined output goes (up to `log_cap` bytes).
    pub log_path: Option<PathBuf>,
    pub log_cap: u64,
    pub keep_bytes: usize,
    pub grace: Duration,
    /// Bytes fed to stdin; stdin is closed when `None`.
    pub stdin: Option<Vec<u8>>,
    /// Start from an empty environment instead of inheriting deltabench's.
    pub clear_env: bool,
    /// Gives stdout its own pipe, streamed line by line (the log then holds stderr only).
    pub stdout: Option<StdoutLines>,
    /// Opens fd 3 in the child as the write end of a pipe whose bytes end up in
    /// [`ProcessOutput::status`]: a channel the program (bubblewrap's `--json-status-fd 3`)
    /// writes to and the processes it starts do not inherit.
    pub status_fd: bool,
    /// A command run once this one has ended, on every path (exit, timeout, cancellation, the
    /// future dropped): a container outlives its killed client, so its removal goes here.
    pub cleanup: Option<Vec<OsString>>,
}

/// Where a separated stdout goes: every byte to `raw_path` (up to the log cap) and each line,
/// without its newline, to `lines` as it arrives.
#[derive(Debug, Clone)]
pub struct StdoutLines {
    pub raw_path: PathBuf,
    pub lines: tokio::sync::mpsc::UnboundedSender<String>,
}

impl CommandSpec {
    /// `sh -c SCRIPT` in `cwd`, with the default bounds.
    pub fn shell(script: &str, cwd: impl Into<PathBuf>) -> Self {
        Self::argv(["sh", "-c", script], cwd)
    }

    pub fn argv<I, S>(argv: I, cwd: impl Into<PathBuf>) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        Self {
            argv: argv.into_iter().map(Into::into).collect(),
            cwd: cwd.into(),
            env: Vec::new(),
            timeout: None,
            log_path: None,
            log_cap: DEFAULT_LOG_CAP,
            keep_bytes: DEFAULT_KEEP_BYTES,
            grace: DEFAULT_GRACE,
            stdin: None,
            clear_env: false,
            stdout: None,
            status_fd: false,
            cleanup: None,
        }
    }

    /// Starts the child from an empty environment: only what [`CommandSpec::env`] adds.
    pub fn clear_env(mut self) -> Self {
        self.clear_env = true;
        self
    }

    /// Streams stdout on its own, as [`StdoutLines`] says.
    pub fn stdout_lines(mut self, stdout: StdoutLines) -> Self {
        self.stdout = Some(stdout);
        self
    }

    pub fn stdin(mut self, bytes: Vec<u8>) -> Self {
        self.stdin = Some(bytes);
        self
    }

    pub fn env(mut self, key: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    pub fn timeout(mut self, timeout: Option<Duration>) -> Self {
        self.timeout = timeout;
        self
    }

    pub fn log_path(mut self, path: Option<PathBuf>) -> Self {
        self.log_path = path;
        self
    }
}

/// How a child ended.
#[derive(Debug, Clone)]
pub struct ProcessOutput {
    pub exit_code: Option<i32>,
    /// The signal that ended the leader, when it did not exit on its own.
    pub signal: Option<i32>,
    pub timed_out: bool,
    pub cancelled: bool,
    /// A descendant still held the output pipe after the leader exited.
    pub leaked: bool,
    /// How the tree was killed, when something was left to kill (a timeout, a cancellation, a
    /// leak, a daemon still running after the leader exited); `None` when it ended by itself.
    pub kill_method: Option<KillMethod>,
    pub duration: Duration,
    pub output: BoundedOutput,
    /// What was written to fd 3, when [`CommandSpec::status_fd`] asked for it (up to 64 KiB).
    pub status: Option<Vec<u8>>,
}

impl ProcessOutput {
    /// The output's last non-empty line: what a failing tool usually says last.
    pub fn last_line(&self) -> String {
        let text = self.output.text();
        let line = text.lines().rev().find(|l| !l.trim().is_empty());
        line.unwrap_or("no message").trim().to_owned()
    }

    pub fn success(&self) -> bool {
        self.exit_code == Some(0) && !self.timed_out && !self.cancelled
    }

    /// How it ended, for messages: "exited with status 1", "was killed by signal 9", ...
    pub fn ending(&self) -> String {
        match (self.timed_out, self.cancelled, self.exit_code, self.signal) {
            (true, ..) => "timed out".to_owned(),
            (_, true, ..) => "was cancelled".to_owned(),
            (_, _, Some(code), _) => format!("exited with status {code}"),
            (_, _, None, Some(signal)) => format!("was killed by signal {signal}"),
            _ => "ended abnormally".to_owned(),
        }
    }
}

/// The head and tail of a stream, plus how many bytes it had in all.
#[derive(Debug, Clone, Default)]
pub struct BoundedOutput {
    keep: usize,
    head: Vec<u8>,
    tail: VecDeque<u8>,
    total: u64,
}

impl BoundedOutput {
    fn new(keep: usize) -> Self {
        Self {
            keep,
            ..Self::default()
        }
    }

    fn push(&mut self, mut bytes: &[u8]) {
        self.total += bytes.len() as u64;
        let room = self.keep.saturating_sub(self.head.len());
        if room > 0 {
            let take = room.min(bytes.len());
            self.head.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
        }
        if bytes.len() >= self.keep {
            self.tail.clear();
            self.tail.extend(&bytes[bytes.len() - self.keep..]);
        } else {
            let overflow = (self.tail.len() + bytes.len()).saturating_sub(self.keep);
            self.tail.drain(..overflow);
            self.tail.extend(bytes);
        }
    }

    pub fn total_bytes(&self) -> u64 {
        self.total
    }

    /// The kept text; elided bytes are replaced by one marker line.
    pub fn text(&self) -> String {
        let kept = (self.head.len() + self.tail.len()) as u64;
        let tail: Vec<u8> = self.tail.iter().copied().collect();
        if kept >= self.total {
            let mut all = self.head.clone();
            all.extend_from_slice(&tail);
            return String::from_utf8_lossy(&all).into_owned();
        }
        format!(
            "{}\n[... {} bytes elided ...]\n{}",
            String::from_utf8_lossy(&self.head),
            self.total - kept,
            String::from_utf8_lossy(&tail)
        )
    }
}

/// The child's process group and, where possible, its cgroup: kills both when dropped.
struct GroupGuard {
    pgid: i32,
    cgroup: Option<cgroup::Cgroup>,
}

impl GroupGuard {
    fn signal(&self, signal: Signal) {
        // ESRCH (the group is already gone) is the normal case here.
        let _ = killpg(Pid::from_raw(self.pgid), signal);
    }

    fn method(&self) -> KillMethod {
        match self.cgroup {
            Some(_) => KillMethod::Cgroup,
            None => KillMethod::ProcessGroup,
        }
    }

    /// Whether any process of the tree is still alive (in the cgroup, or in the group).
    fn remains(&self) -> bool {
        match &self.cgroup {
            Some(cgroup) => cgroup.populated(),
            None => killpg(Pid::from_raw(self.pgid), None).is_ok(),
        }
    }

    /// SIGKILLs the whole tree.
    fn kill_tree(&self) {
        self.signal(Signal::SIGKILL);
        match &self.cgroup {
            Some(cgroup) => {
                let _ = cgroup.kill();
            }
            None => sweep_orphans(),
        }
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        self.kill_tree();
        if let Ok(mut live) = LIVE_GROUPS.lock() {
            live.remove(&self.pgid);
        }
        if let Some(cgroup) = self.cgroup.take() {
            if let Ok(mut live) = LIVE_CGROUPS.lock() {
                live.remove(cgroup.dir());
            }
            // Waits until the kernel emptied it: its members' orphans are reparented by then.
            drop(cgroup);
        }
        // Whatever left the group and the cgroup (a root agent can move itself out) and
        // outlived its parent is an orphan of ours now.
        sweep_orphans();
    }
}

/// Makes deltabench the reaper of its descendants' orphans, once: an escapee from a process
/// group or a cgroup is then reparented here instead of to init, where the sweeps find it.
fn become_subreaper() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: PR_SET_CHILD_SUBREAPER takes one integer argument and touches no memory.
        unsafe {
            libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
        }
    });
}

/// SIGKILLs every orphan reparented to deltabench, with everything below it, unless it belongs
/// to a command still running: the orphans are children of ours that are neither a live
/// command's leader (tokio's to reap) nor in our own process group (git and other direct
/// children), and a process in a live command's process group or cgroup is spared. Best effort
/// without cgroups: an orphan of another running command that left its group is killed too.
fn sweep_orphans() {
    let own_group = nix::unistd::getpgrp().as_raw();
    // Held while scanning: a leader spawned meanwhile is registered before it can be seen.
    let Ok(live) = LIVE_GROUPS.lock() else {
        return;
    };
    let cgroups = LIVE_CGROUPS.lock().map(|g| g.clone()).unwrap_or_default();
    let in_live_cgroup: BTreeSet<i32> = cgroups
        .iter()
        .filter_map(|dir| fs::read_to_string(dir.join("cgroup.procs")).ok())
        .flat_map(|procs| {
            procs
                .lines()
                .filter_map(|l| l.parse().ok())
                .collect::<Vec<i32>>()
        })
        .collect();
    kill_descendants(|process| {
        !live.contains(&process.pid)
            && process.pgid != own_group
            && !live.contains(&process.pgid)
            && !in_live_cgroup.contains(&process.pid)
            && !is_container_monitor(process.pid)
    });
}

/// Podman's `conmon` double-forks away from its client, so as our subreaped orphan it would
/// look like an escapee; killing it breaks a running container. Containers are removed
/// through their runtime instead (`rm -f`, the run's label, `gc`). Spared only when it is the
/// system's conmon monitoring one of our containers (`-n deltabench-...`): an agent's process
/// that merely calls itself `conmon` is still swept.
fn is_container_monitor(pid: i32) -> bool {
    let system_conmon = fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|exe| {
        exe.starts_with("/usr") && exe.file_name().is_some_and(|name| name == "conmon")
    });
    let ours = || {
        let Ok(cmdline) = fs::read(format!("/proc/{pid}/cmdline")) else {
            return false;
        };
        let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
        args.windows(2)
            .any(|pair| pair[0] == b"-n" && pair[1].starts_with(b"deltabench-"))
    };
    system_conmon && ours()
}

/// A process as `/proc/PID/stat` describes it.
#[derive(Debug, Clone, Copy)]
struct ProcessInfo {
    pid: i32,
    ppid: i32,
    pgid: i32,
}

fn process_table() -> Vec<ProcessInfo> {
    fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| {
            let (ppid, pgid) = parent_and_group(pid)?;
            Some(ProcessInfo { pid, ppid, pgid })
        })
        .collect()
}

/// SIGKILLs each child of this process that `is_orphan` accepts, and everything below it, in
/// rounds until none is left (killed processes may have forked on the way); reaps the ones
/// that end up as our children. Reaped by explicit pid: `waitpid(-1)` would steal tokio's exit
/// statuses.
fn kill_descendants(is_orphan: impl Fn(&ProcessInfo) -> bool) {
    let me = std::process::id() as i32;
    for _ in 0..10 {
        // Reading every process's stat after each command was a sixth of a noop trial's CPU:
        // our own children are listed per thread, and the table is read only when one of them
        // is doomed.
        if let Some(children) = own_children() {
            let doomed = children.into_iter().any(|pid| {
                parent_and_group(pid).is_some_and(|(ppid, pgid)| {
                    ppid == me && is_orphan(&ProcessInfo { pid, ppid, pgid })
                })
            });
            if !doomed {
                return;
            }
        }
        let table = process_table();
        let mut doomed: Vec<i32> = table
            .iter()
            .filter(|p| p.ppid == me && is_orphan(p))
            .map(|p| p.pid)
            .collect();
        let mut next = 0;
        while next < doomed.len() {
            let parent = doomed[next];
            doomed.extend(table.iter().filter(|p| p.ppid == parent).map(|p| p.pid));
            next += 1;
        }
        if doomed.is_empty() {
            return;
        }
        for &pid in &doomed {
            let _ = nix::sys::signal::kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
        for &pid in &doomed {
            if table.iter().any(|p| p.pid == pid && p.ppid == me) {
                let _ = nix::sys::wait::waitpid(Pid::from_raw(pid), None);
            }
        }
    }
}

/// This process's children, from each thread's `/proc/self/task/TID/children`; `None` when the
/// kernel does not list them (built without `CONFIG_PROC_CHILDREN`).
fn own_children() -> Option<Vec<i32>> {
    let read = |tid: &str| fs::read_to_string(format!("/proc/self/task/{tid}/children"));
    let main = std::process::id().to_string();
    // The main thread lives as long as the process: its file is there if any is.
    let mut pids = read(&main).ok()?;
    for entry in fs::read_dir("/proc/self/task").ok()?.flatten() {
        let tid = entry.file_name().to_string_lossy().into_owned();
        // A thread may exit meanwhile; its children, handed to another thread, wait for the
        // next sweep.
        if tid != main {
            pids.push(' ');
            pids.push_str(&read(&tid).unwrap_or_default());
        }
    }
    Some(
        pids.split_whitespace()
            .filter_map(|pid| pid.parse().ok())
            .collect(),
    )
}

/// `(ppid, pgid)` from `/proc/PID/stat`.
fn parent_and_group(pid: i32) -> Option<(i32, i32)> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields 4 and 5 come after the last ')'.
    let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace().skip(1);
    Some((fields.next()?.parse().ok()?, fields.next()?.parse().ok()?))
}

/// Not inherited by a command: a build folder shared across workspaces.
pub(crate) const SHARED_BUILD_DIR: &str = "CARGO_TARGET_DIR";

/// close_range(2)'s flag: mark the range close-on-exec instead of closing it now (std's own
/// exec-error pipe must stay open until exec).
const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;

/// Runs `spec` to completion (or timeout, or cancellation) and returns how it ended.
///
/// An `Err` means the child could not be started at all.
pub(crate) async fn run(
    spec: &CommandSpec,
    cancel: &CancellationToken,
) -> io::Result<ProcessOutput> {
    let started = Instant::now();
    // Close-on-exec, every pipe: a command started meanwhile by another trial must not inherit
    // this one's (the child gets its ends as 0-2, where the flag is cleared).
    let pipe = || nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(io::Error::from);
    let (read_end, write_end) = pipe()?;
    let write_err = write_end.try_clone()?;
    let Some((program, args)) = spec.argv.split_first() else {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty command"));
    };
    let mut command = tokio::process::Command::new(program);
    if spec.clear_env {
        command.env_clear();
    } else {
        // One build folder for every workspace would hand each trial the builds of the others
        // (a no-op agent passing on a fix built before it): each builds in its own workspace
        // unless the command's own environment names one.
        command.env_remove(SHARED_BUILD_DIR);
    }
    let stdout_pipe = match &spec.stdout {
        Some(_) => Some(pipe()?),
        None => None,
    };
    let (stdout_read, stdout_write) = match stdout_pipe {
        Some((read, write)) => {
            // Our copy of the combined pipe's write end must go, or its EOF never comes.
            drop(write_end);
            (Some(read), Stdio::from(write))
        }
        None => (None, Stdio::from(write_end)),
    };
    set_stdio(
        &mut command,
        spec,
        args,
        stdout_write,
        Stdio::from(write_err),
    );
    let cgroup = cgroup::Cgroup::create();
    become_subreaper();
    let procs = cgroup.as_ref().map(cgroup::Cgroup::procs_fd);
    let harness = std::process::id() as libc::pid_t;
    let status_pipe = if spec.status_fd { Some(pipe()?) } else { None };
    let status_write = status_pipe
        .as_ref()
        .map(|(_, write)| std::os::fd::AsRawFd::as_raw_fd(write));
    set_pre_exec(&mut command, harness, status_write, procs);
    let (mut child, pgid) = spawn_registered(command)?;
    // Only the child keeps the status pipe's write end, so its EOF comes with the child.
    let status_read = status_pipe.map(|(read, write)| {
        drop(write);
        read
    });
    if let Some(cgroup) = &cgroup
        && let Ok(mut live) = LIVE_CGROUPS.lock()
    {
        live.insert(cgroup.dir().to_owned());
    }
    let guard = GroupGuard { pgid, cgroup };
    let mut cleanup = Cleanup(spec.cleanup.clone());
    if let (Some(bytes), Some(mut stdin)) = (spec.stdin.clone(), child.stdin.take()) {
        // A child that never reads stdin must not block us: write in the background.
        tokio::spawn(async move {
            let _ = stdin.write_all(&bytes).await;
        });
    }
    let (mut reader, mut stdout_reader) = spawn_readers(spec, read_end, stdout_read).await?;
    let ended = wait_for_end(&mut child, &guard, &mut cleanup, spec, cancel).await?;
    let drained = drain(&mut reader, stdout_reader.as_mut(), &guard, spec.keep_bytes).await?;
    let mut killed = ended.timed_out || ended.cancelled || drained.leaked;
    // A daemon that let go of the pipe outlives the leader: the tree dies with the command.
    if guard.remains() {
        killed = true;
    }
    let kill_method = killed.then(|| guard.method());
    drop(guard);
    let status_bytes = status_read.map(read_status);

    use std::os::unix::process::ExitStatusExt;
    Ok(ProcessOutput {
        exit_code: ended.status.code(),
        signal: ended.status.signal(),
        timed_out: ended.timed_out,
        cancelled: ended.cancelled,
        leaked: drained.leaked,
        kill_method,
        duration: started.elapsed(),
        output: drained.output,
        status: status_bytes,
    })
}

/// The command's arguments, folder, environment and standard streams, in a process group of
/// its own that is not killed on drop (the group guard does that).
fn set_stdio(
    command: &mut tokio::process::Command,
    spec: &CommandSpec,
    args: &[OsString],
    stdout: Stdio,
    stderr: Stdio,
) {
    command
        .args(args)
        .current_dir(&spec.cwd)
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(if spec.stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(stdout)
        .stderr(stderr)
        .process_group(0)
        .kill_on_drop(false);
}

/// What the child does between fork and exec: die with the harness, refuse to run orphaned,
/// take the status pipe as fd 3, close the rest at exec and join its cgroup.
fn set_pre_exec(
    command: &mut tokio::process::Command,
    harness: libc::pid_t,
    status_write: Option<std::os::fd::RawFd>,
    procs: Option<std::os::fd::RawFd>,
) {
    // SAFETY: between fork and exec the closure only makes async-signal-safe system calls
    // (prctl, getppid, write) on values computed before the fork; it allocates nothing.
    unsafe {
        command.pre_exec(move || {
            // If deltabench itself is killed (even with -9), the leader dies with it; the rest
            // of the tree is left to the cgroup, or to `deltabench gc`.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
            if libc::getppid() != harness {
                // Its parent is already gone: do not run an orphan.
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            if let Some(fd) = status_write {
                // dup2 clears close-on-exec on the copy; fd 3 itself needs it cleared by hand.
                let ok = if fd == 3 {
                    libc::fcntl(fd, libc::F_SETFD, 0)
                } else {
                    libc::dup2(fd, 3)
                };
                if ok < 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            // Whatever else the harness holds open (a library's descriptor without the flag)
            // closes at exec: the command sees 0-2, and 3 when it was asked for.
            let first_unkept: libc::c_uint = if status_write.is_some() { 4 } else { 3 };
            libc::syscall(
                libc::SYS_close_range,
                first_unkept,
                libc::c_uint::MAX,
                CLOSE_RANGE_CLOEXEC,
            );
            match procs {
                Some(procs) => cgroup::join_from_child(procs),
                None => Ok(()),
            }
        });
    }
}

/// The readers of the combined pipe (into the log and memory) and of the separate stdout
/// pipe (into its raw file and lines), when the spec asked for one.
async fn spawn_readers(
    spec: &CommandSpec,
    read_end: std::os::fd::OwnedFd,
    stdout_read: Option<std::os::fd::OwnedFd>,
) -> io::Result<(
    tokio::task::JoinHandle<BoundedOutput>,
    Option<tokio::task::JoinHandle<()>>,
)> {
    let pipe = tokio::net::unix::pipe::Receiver::from_owned_fd(read_end)?;
    let log = match &spec.log_path {
        Some(path) => Some(tokio::fs::File::create(path).await?),
        None => None,
    };
    let reader = tokio::spawn(capture(pipe, log, spec.log_cap, spec.keep_bytes));
    let stdout_reader = match (stdout_read, &spec.stdout) {
        (Some(read_end), Some(sink)) => {
            let pipe = tokio::net::unix::pipe::Receiver::from_owned_fd(read_end)?;
            let raw = tokio::fs::File::create(&sink.raw_path).await?;
            Some(tokio::spawn(stream_lines(
                pipe,
                raw,
                spec.log_cap,
                sink.lines.clone(),
            )))
        }
        _ => None,
    };
    Ok((reader, stdout_reader))
}

/// How the leader ended: by itself, at the deadline, or cancelled.
struct Ended {
    status: ExitStatus,
    timed_out: bool,
    cancelled: bool,
}

/// Waits for the leader's end, its deadline or the cancellation, whichever comes first; on
/// the last two the cleanup runs, then the group is terminated.
async fn wait_for_end(
    child: &mut tokio::process::Child,
    guard: &GroupGuard,
    cleanup: &mut Cleanup,
    spec: &CommandSpec,
    cancel: &CancellationToken,
) -> io::Result<Ended> {
    let deadline = spec.timeout.map(|t| tokio::time::Instant::now() + t);
    let sleep_until_deadline = async {
        match deadline {
            Some(at) => tokio::time::sleep_until(at).await,
            None => std::future::pending().await,
        }
    };
    let mut timed_out = false;
    let mut cancelled = false;
    let status: ExitStatus = tokio::select! {
        status = child.wait() => {
            // A client that ended by itself took its container with it (`run --rm`): the
            // cleanup is for the ends it does not see, and the run's label sweep backs it up.
            cleanup.disarm();
            status?
        }
        () = sleep_until_deadline => {
            timed_out = true;
            // First: the client's end would not stop its container.
            cleanup.run().await;
            terminate(child, guard, spec.grace).await?
        }
        () = cancel.cancelled() => {
            cancelled = true;
            cleanup.run().await;
            terminate(child, guard, spec.grace).await?
        }
    };
    Ok(Ended {
        status,
        timed_out,
        cancelled,
    })
}

/// The captured output, and whether a process kept a pipe open past the leak timeout (the
/// tree was killed for it).
struct Drained {
    output: BoundedOutput,
    leaked: bool,
}

/// Waits for the readers to reach EOF, each within the leak timeout; a pipe still held then
/// gets the tree killed and one more timeout, then its reader is given up.
async fn drain(
    reader: &mut tokio::task::JoinHandle<BoundedOutput>,
    stdout_reader: Option<&mut tokio::task::JoinHandle<()>>,
    guard: &GroupGuard,
    keep_bytes: usize,
) -> io::Result<Drained> {
    let mut leaked = false;
    let output = match tokio::time::timeout(LEAK_TIMEOUT, &mut *reader).await {
        Ok(joined) => joined.map_err(io::Error::other)?,
        Err(_) => {
            leaked = true;
            guard.kill_tree();
            match tokio::time::timeout(LEAK_TIMEOUT, &mut *reader).await {
                Ok(joined) => joined.map_err(io::Error::other)?,
                // Something outside the group (a setsid escapee) still holds the pipe.
                Err(_) => {
                    reader.abort();
                    let mut lost = BoundedOutput::new(keep_bytes);
                    lost.push(b"[output lost: a process that left the group kept the pipe open]\n");
                    lost
                }
            }
        }
    };
    if let Some(stdout) = stdout_reader
        && tokio::time::timeout(LEAK_TIMEOUT, &mut *stdout)
            .await
            .is_err()
    {
        leaked = true;
        guard.kill_tree();
        if tokio::time::timeout(LEAK_TIMEOUT, &mut *stdout)
            .await
            .is_err()
        {
            stdout.abort();
        }
    }
    Ok(Drained { output, leaked })
}

/// A spec's cleanup command: run once, awaited where the command ends, or blocking on drop.
struct Cleanup(Option<Vec<OsString>>);

impl Cleanup {
    fn disarm(&mut self) {
        self.0 = None;
    }

    async fn run(&mut self) {
        if let Some(argv) = self.0.take() {
            let _ = tokio::task::spawn_blocking(move || run_cleanup(&argv)).await;
        }
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if let Some(argv) = self.0.take() {
            run_cleanup(&argv);
        }
    }
}

fn run_cleanup(argv: &[OsString]) {
    if let Some((program, args)) = argv.split_first() {
        let _ = std::process::Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// The bytes of the status pipe, up to 64 KiB: what the child wrote before it ended. Read
/// without blocking, so a descendant that kept the write end open cannot hold us.
fn read_status(read: std::os::fd::OwnedFd) -> Vec<u8> {
    use std::io::Read;
    let _ = nix::fcntl::fcntl(
        &read,
        nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
    );
    let mut file = std::fs::File::from(read);
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 4096];
    while bytes.len() < 64 * 1024 {
        match file.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => bytes.extend_from_slice(&chunk[..n]),
        }
    }
    bytes
}

/// Spawns `command` (consumed: it holds our copies of the pipe's write end, which must go so
/// EOF can arrive) and registers its group, under the lock so the orphan sweep never mistakes
/// the new leader for an orphan.
fn spawn_registered(
    mut command: tokio::process::Command,
) -> io::Result<(tokio::process::Child, i32)> {
    let mut live = LIVE_GROUPS.lock().unwrap_or_else(|e| e.into_inner());
    let child = command.spawn()?;
    let pgid = child.id().map(|id| id as i32).unwrap_or(0);
    live.insert(pgid);
    Ok((child, pgid))
}

/// SIGTERM to the group, a grace period, then SIGKILL.
async fn terminate(
    child: &mut tokio::process::Child,
    guard: &GroupGuard,
    grace: Duration,
) -> io::Result<ExitStatus> {
    guard.signal(Signal::SIGTERM);
    match tokio::time::timeout(grace, child.wait()).await {
        Ok(status) => {
            guard.kill_tree();
            status
        }
        Err(_) => {
            guard.kill_tree();
            child.wait().await
        }
    }
}

async fn capture(
    mut pipe: tokio::net::unix::pipe::Receiver,
    mut log: Option<tokio::fs::File>,
    log_cap: u64,
    keep: usize,
) -> BoundedOutput {
    let mut out = BoundedOutput::new(keep);
    let mut logged: u64 = 0;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let chunk = &buf[..n];
        out.push(chunk);
        write_capped(&mut log, &mut logged, log_cap, chunk).await;
    }
    if let Some(mut file) = log {
        if out.total > logged {
            let note = format!(
                "\n[deltabench: log capped at {log_cap} bytes; {} more bytes not written]\n",
                out.total - logged
            );
            let _ = file.write_all(note.as_bytes()).await;
        }
        let _ = file.flush().await;
    }
    out
}

/// Appends as much of `chunk` to `file` as `cap` leaves room for, counting in `written`; a
/// failed write stops the logging (the capture in memory goes on).
async fn write_capped(
    file: &mut Option<tokio::fs::File>,
    written: &mut u64,
    cap: u64,
    chunk: &[u8],
) {
    let take = (cap.saturating_sub(*written) as usize).min(chunk.len());
    if let Some(out) = file.as_mut()
        && take > 0
    {
        if out.write_all(&chunk[..take]).await.is_err() {
            *file = None;
        }
        *written += take as u64;
    }
}

/// Longest stdout line passed on whole; a longer one is cut there (its parser then sees broken
/// JSON, an `unknown` event) so one runaway line cannot take the memory. The raw file keeps it.
const MAX_LINE: usize = 32 * 1024 * 1024;

/// Copies a separated stdout to its raw file (up to `log_cap` bytes) and sends each complete
/// line as it arrives; a last line without a newline is sent at EOF.
async fn stream_lines(
    mut pipe: tokio::net::unix::pipe::Receiver,
    raw: tokio::fs::File,
    log_cap: u64,
    lines: tokio::sync::mpsc::UnboundedSender<String>,
) {
    let mut raw = Some(raw);
    let mut logged: u64 = 0;
    let mut pending: Vec<u8> = Vec::new();
    // How far `pending` is known to hold no newline, so a long line is scanned once.
    let mut scanned = 0;
    let mut skipping = false;
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let chunk = &buf[..n];
        write_capped(&mut raw, &mut logged, log_cap, chunk).await;
        pending.extend_from_slice(chunk);
        let mut start = 0;
        while let Some(at) = pending[scanned..].iter().position(|&b| b == b'\n') {
            let end = scanned + at;
            if !skipping {
                let _ = lines.send(String::from_utf8_lossy(&pending[start..end]).into_owned());
            }
            skipping = false;
            start = end + 1;
            scanned = start;
        }
        pending.drain(..start);
        scanned = pending.len();
        if pending.len() > MAX_LINE {
            if !skipping {
                let _ = lines.send(String::from_utf8_lossy(&pending[..MAX_LINE]).into_owned());
            }
            // The rest of this line, up to its newline, is dropped.
            skipping = true;
            pending.clear();
            scanned = 0;
        }
    }
    if !pending.is_empty() && !skipping {
        let _ = lines.send(String::from_utf8_lossy(&pending).into_owned());
    }
    if let Some(mut file) = raw {
        let _ = file.flush().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn separated_stdout_streams_lines_and_keeps_the_raw_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let raw_path = dir.path().join("raw");
        let spec = CommandSpec::shell("echo one; echo oops >&2; printf 'two\\nthree'", dir.path())
            .clear_env()
            .stdout_lines(StdoutLines {
                raw_path: raw_path.clone(),
                lines: tx,
            });
        let out = run(&spec, &CancellationToken::new()).await.unwrap();
        assert_eq!(out.exit_code, Some(0));
        assert_eq!(out.output.text(), "oops\n");
        let mut got = Vec::new();
        while let Ok(line) = rx.try_recv() {
            got.push(line);
        }
        assert_eq!(got, ["one", "two", "three"]);
        assert_eq!(fs::read_to_string(raw_path).unwrap(), "one\ntwo\nthree");
    }

    #[tokio::test]
    async fn a_long_line_arrives_whole_in_many_chunks() {
        let dir = tempfile::tempdir().unwrap();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        // 3 MB without a newline, then a short line: read in 64 KiB chunks.
        let spec = CommandSpec::shell(
            "head -c 3000000 /dev/zero | tr '\\0' x; echo; echo end",
            dir.path(),
        )
        .stdout_lines(StdoutLines {
            raw_path: dir.path().join("raw"),
            lines: tx,
        });
        run(&spec, &CancellationToken::new()).await.unwrap();
        let first = rx.try_recv().unwrap();
        assert_eq!(first.len(), 3_000_000);
        assert!(first.bytes().all(|b| b == b'x'));
        assert_eq!(rx.try_recv().unwrap(), "end");
        assert!(rx.try_recv().is_err());
    }

    #[test]
    fn bounded_output_keeps_head_and_tail() {
        let mut out = BoundedOutput::new(4);
        out.push(b"abcdefghij");
        out.push(b"kl");
        assert_eq!(out.total_bytes(), 12);
        assert_eq!(out.text(), "abcd\n[... 4 bytes elided ...]\nijkl");
    }

    #[test]
    fn bounded_output_small_is_verbatim() {
        let mut out = BoundedOutput::new(8);
        out.push(b"hello ");
        out.push(b"world");
        assert_eq!(out.text(), "hello world");
    }

    #[tokio::test]
    async fn timeout_kills_the_whole_group() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("survivor");
        let script = format!("(sleep 2; touch {}) & sleep 30", marker.display());
        let spec =
            CommandSpec::shell(&script, dir.path()).timeout(Some(Duration::from_millis(200)));
        let out = run(&spec, &CancellationToken::new()).await.unwrap();
        assert!(out.timed_out);
        assert!(!out.success());
        tokio::time::sleep(Duration::from_millis(2500)).await;
        assert!(!marker.exists(), "a grandchild outlived the timeout kill");
    }

    #[tokio::test]
    async fn a_setsid_daemon_dies_with_its_command() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join("survivor");
        // Leaves the group and the pipe: only the cgroup or the subreaper sweep can find it.
        let script = format!(
            "setsid sh -c 'sleep 1; touch {}' >/dev/null 2>&1 &",
            marker.display()
        );
        let out = run(
            &CommandSpec::shell(&script, dir.path()),
            &CancellationToken::new(),
        )
        .await
        .unwrap();
        assert_eq!(out.exit_code, Some(0));
        let expected = match cgroup::Cgroup::create() {
            Some(_) => KillMethod::Cgroup,
            None => KillMethod::ProcessGroup,
        };
        assert_eq!(out.kill_method, Some(expected));
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert!(!marker.exists(), "the setsid daemon outlived its command");
    }

    #[tokio::test]
    async fn grandchild_holding_the_pipe_does_not_hang() {
        let dir = tempfile::tempdir().unwrap();
        let spec = CommandSpec::shell("sleep 30 & echo hi", dir.path());
        let started = Instant::now();
        let out = run(&spec, &CancellationToken::new()).await.unwrap();
        assert!(started.elapsed() < Duration::from_secs(10));
        assert!(out.leaked);
        assert_eq!(out.exit_code, Some(0));
        assert_eq!(out.output.text(), "hi\n");
    }
}
