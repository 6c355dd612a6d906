//! Child processes the harness owns.
//!
//! Every child is spawned with stdin closed, in its own process group, with one combined
//! stdout+stderr pipe (so the log keeps the order the child wrote in), a deadline, and bounded
//! capture: the full log goes to disk up to a cap, and only a head and a tail stay in memory.
//! On timeout or cancellation the whole group gets SIGTERM, a grace period, then SIGKILL. After
//! the leader exits, a grandchild that still holds the pipe gets a short leak timeout before the
//! group is killed, so it cannot hang the run. A drop guard kills the group on every other path.

use std::collections::{BTreeSet, VecDeque};
use std::ffi::OsString;
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
pub const DEFAULT_KEEP_BYTES: usize = 32 * 1024;
/// Bytes of output written to a log file before the rest is only counted.
pub const DEFAULT_LOG_CAP: u64 = 16 * 1024 * 1024;
/// How long a group gets between SIGTERM and SIGKILL.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(3);
/// How long the pipe may stay open after the leader exited (nextest uses 200 ms too).
pub const LEAK_TIMEOUT: Duration = Duration::from_millis(200);

/// Process groups alive right now, so a hard interrupt can kill them all.
static LIVE_GROUPS: Mutex<BTreeSet<i32>> = Mutex::new(BTreeSet::new());

/// Sends SIGKILL to every process group this process still owns. For the second Ctrl-C.
pub fn kill_all_live_groups() {
    let groups = LIVE_GROUPS.lock().map(|g| g.clone()).unwrap_or_default();
    for pgid in groups {
        let _ = killpg(Pid::from_raw(pgid), Signal::SIGKILL);
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
        }
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
    pub duration: Duration,
    pub output: BoundedOutput,
}

impl ProcessOutput {
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

/// Kills the group when dropped, unless disarmed after a clean end.
struct GroupGuard {
    pgid: i32,
}

impl GroupGuard {
    fn new(pgid: i32) -> Self {
        if let Ok(mut live) = LIVE_GROUPS.lock() {
            live.insert(pgid);
        }
        Self { pgid }
    }

    fn signal(&self, signal: Signal) {
        // ESRCH (the group is already gone) is the normal case here.
        let _ = killpg(Pid::from_raw(self.pgid), signal);
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        self.signal(Signal::SIGKILL);
        if let Ok(mut live) = LIVE_GROUPS.lock() {
            live.remove(&self.pgid);
        }
    }
}

/// Runs `spec` to completion (or timeout, or cancellation) and returns how it ended.
///
/// An `Err` means the child could not be started at all.
pub async fn run(spec: &CommandSpec, cancel: &CancellationToken) -> io::Result<ProcessOutput> {
    let started = Instant::now();
    let (read_end, write_end) = nix::unistd::pipe().map_err(io::Error::from)?;
    let write_err = write_end.try_clone()?;
    let Some((program, args)) = spec.argv.split_first() else {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty command"));
    };
    let mut command = tokio::process::Command::new(program);
    command
        .args(args)
        .current_dir(&spec.cwd)
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdin(if spec.stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::from(write_end))
        .stderr(Stdio::from(write_err))
        .process_group(0)
        .kill_on_drop(false);
    let spawned = command.spawn();
    // The command holds our copies of the write end: drop it so EOF can arrive.
    drop(command);
    let mut child = spawned?;
    let pgid = child.id().map(|id| id as i32).unwrap_or(0);
    let guard = GroupGuard::new(pgid);
    if let (Some(bytes), Some(mut stdin)) = (spec.stdin.clone(), child.stdin.take()) {
        // A child that never reads stdin must not block us: write in the background.
        tokio::spawn(async move {
            let _ = stdin.write_all(&bytes).await;
        });
    }

    let pipe = tokio::net::unix::pipe::Receiver::from_owned_fd(read_end)?;
    let log = match &spec.log_path {
        Some(path) => Some(tokio::fs::File::create(path).await?),
        None => None,
    };
    let mut reader = tokio::spawn(capture(pipe, log, spec.log_cap, spec.keep_bytes));

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
        status = child.wait() => status?,
        () = sleep_until_deadline => {
            timed_out = true;
            terminate(&mut child, &guard, spec.grace).await?
        }
        () = cancel.cancelled() => {
            cancelled = true;
            terminate(&mut child, &guard, spec.grace).await?
        }
    };

    let mut leaked = false;
    let output = match tokio::time::timeout(LEAK_TIMEOUT, &mut reader).await {
        Ok(joined) => joined.map_err(io::Error::other)?,
        Err(_) => {
            leaked = true;
            guard.signal(Signal::SIGKILL);
            match tokio::time::timeout(LEAK_TIMEOUT, &mut reader).await {
                Ok(joined) => joined.map_err(io::Error::other)?,
                // Something outside the group (a setsid escapee) still holds the pipe.
                Err(_) => {
                    reader.abort();
                    let mut lost = BoundedOutput::new(spec.keep_bytes);
                    lost.push(b"[output lost: a process that left the group kept the pipe open]\n");
                    lost
                }
            }
        }
    };
    drop(guard);

    use std::os::unix::process::ExitStatusExt;
    Ok(ProcessOutput {
        exit_code: status.code(),
        signal: status.signal(),
        timed_out,
        cancelled,
        leaked,
        duration: started.elapsed(),
        output,
    })
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
            guard.signal(Signal::SIGKILL);
            status
        }
        Err(_) => {
            guard.signal(Signal::SIGKILL);
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
        if let Some(file) = log.as_mut() {
            let room = log_cap.saturating_sub(logged) as usize;
            if room > 0 {
                let take = room.min(n);
                if file.write_all(&chunk[..take]).await.is_err() {
                    log = None;
                }
                logged += take as u64;
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;

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
