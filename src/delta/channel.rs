//! The channel the test hook reports through: a Unix socket the harness listens on for one
//! verify run. Each Python interpreter that loads the hook connects once. The kernel names the
//! interpreter (its pid, `SO_PEERCRED`) and tells the harness when it ended (the connection
//! closes when the process dies, however it dies); the process only sends the tests it saw and,
//! from its last exit handler, a normal-exit mark. A record once received cannot be taken back:
//! the report exists only in the harness until the run is over.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Map, Value};
use tokio::io::AsyncBufReadExt;
use tokio::net::{UnixListener, UnixStream};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// The socket's name in the hook's folder.
pub(super) const CHANNEL_SOCKET: &str = "channel.sock";
/// What one interpreter may send; the rest is read and dropped (a flood cannot exhaust memory).
const MAX_BYTES_PER_INTERPRETER: usize = 64 << 20;
/// How long interpreters get, once the verify command ended, to close their connections (its
/// processes are killed with it, so this bounds only the kernel's cleanup).
const DRAIN: Duration = Duration::from_secs(2);

/// One interpreter, as the harness saw it.
#[derive(Default)]
struct Interpreter {
    pid: u32,
    tests: Vec<Map<String, Value>>,
    /// It sent the normal-exit mark.
    marked: bool,
    /// Its connection closed: the process ended (or closed it on purpose).
    closed: bool,
    /// Bytes received; past [`MAX_BYTES_PER_INTERPRETER`] lines are dropped.
    received: usize,
}

type Seen = Arc<Mutex<Vec<Interpreter>>>;

/// A listening channel; [`Channel::close`] ends it and returns the report.
pub(super) struct Channel {
    address: PathBuf,
    stop: CancellationToken,
    seen: Seen,
    task: Option<tokio::task::JoinHandle<()>>,
}

/// A run that ended early (the command could not start) still stops the listener.
impl Drop for Channel {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl Channel {
    /// Listens at `dir/channel.sock` (a stale socket there is replaced).
    pub(super) fn open(dir: &Path) -> io::Result<Self> {
        let address = dir.join(CHANNEL_SOCKET);
        match std::fs::remove_file(&address) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        let listener = bind(dir)?;
        use std::os::unix::fs::PermissionsExt;
        // A sandbox or container may run the command as another uid.
        std::fs::set_permissions(&address, std::fs::Permissions::from_mode(0o666))?;
        let stop = CancellationToken::new();
        let seen = Seen::default();
        let task = tokio::spawn(listen(listener, stop.clone(), seen.clone()));
        Ok(Self {
            address,
            stop,
            seen,
            task: Some(task),
        })
    }

    /// The path the hook connects to.
    pub(super) fn address(&self) -> &Path {
        &self.address
    }

    /// Stops listening once the verify command has ended and returns what the interpreters
    /// reported, one JSON object per line: `start` and `exit` written by the harness, `test`
    /// as sent but with the kernel's pid.
    pub(super) async fn close(mut self) -> String {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        let _ = std::fs::remove_file(&self.address);
        let interpreters =
            std::mem::take(&mut *self.seen.lock().unwrap_or_else(|e| e.into_inner()));
        let mut out = String::new();
        let mut line = |value: Value| {
            out.push_str(&value.to_string());
            out.push('\n');
        };
        for interpreter in interpreters {
            let pid = Value::from(interpreter.pid);
            line(serde_json::json!({"event": "start", "pid": pid}));
            for mut test in interpreter.tests {
                test.insert("pid".into(), pid.clone());
                line(Value::Object(test));
            }
            // An interpreter still connected never ended while the run watched.
            if interpreter.marked && interpreter.closed {
                line(serde_json::json!({"event": "exit", "pid": pid}));
            }
        }
        out
    }
}

/// Binds through the folder's descriptor: a socket's path holds at most 107 bytes, and trial
/// folders can be deeper than that.
fn bind(dir: &Path) -> io::Result<UnixListener> {
    use std::os::fd::AsRawFd;
    let folder = std::fs::File::open(dir)?;
    let short = format!("/proc/self/fd/{}/{CHANNEL_SOCKET}", folder.as_raw_fd());
    let listener = std::os::unix::net::UnixListener::bind(short)?;
    listener.set_nonblocking(true)?;
    UnixListener::from_std(listener)
}

async fn listen(listener: UnixListener, stop: CancellationToken, seen: Seen) {
    let mut readers = JoinSet::new();
    let accept = |readers: &mut JoinSet<()>, stream: UnixStream| {
        let pid = stream
            .peer_cred()
            .ok()
            .and_then(|cred| cred.pid())
            .map_or(0, |pid| pid as u32);
        let mut all = seen.lock().unwrap_or_else(|e| e.into_inner());
        all.push(Interpreter {
            pid,
            ..Interpreter::default()
        });
        readers.spawn(read(stream, seen.clone(), all.len() - 1));
    };
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            accepted = listener.accept() => {
                if let Ok((stream, _)) = accepted {
                    accept(&mut readers, stream);
                }
            }
        }
    }
    // Interpreters that connected and died before they were accepted: their records wait in
    // the backlog.
    while let Ok(Ok((stream, _))) = tokio::time::timeout(Duration::ZERO, listener.accept()).await {
        accept(&mut readers, stream);
    }
    let _ = tokio::time::timeout(DRAIN, async {
        while readers.join_next().await.is_some() {}
    })
    .await;
    readers.abort_all();
}

async fn read(stream: UnixStream, seen: Seen, index: usize) {
    let mut lines = tokio::io::BufReader::new(stream);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let n = match lines.read_until(b'\n', &mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let mut all = seen.lock().unwrap_or_else(|e| e.into_inner());
        let interpreter = &mut all[index];
        interpreter.received += n;
        if interpreter.received > MAX_BYTES_PER_INTERPRETER {
            continue;
        }
        let Ok(Value::Object(record)) = serde_json::from_slice::<Value>(&buf) else {
            continue;
        };
        match record.get("event").and_then(Value::as_str) {
            Some("test") => interpreter.tests.push(record),
            Some("exit") => interpreter.marked = true,
            _ => {}
        }
    }
    seen.lock().unwrap_or_else(|e| e.into_inner())[index].closed = true;
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn connect(channel: &Channel) -> std::os::unix::net::UnixStream {
        std::os::unix::net::UnixStream::connect(channel.address()).unwrap()
    }

    #[tokio::test]
    async fn the_harness_names_each_interpreter_and_sees_its_end() {
        let dir = tempfile::tempdir().unwrap();
        let channel = Channel::open(dir.path()).unwrap();
        let mut clean = connect(&channel);
        // The pid a process writes is not the one kept: the kernel's is.
        clean
            .write_all(
                b"{\"event\": \"start\", \"pid\": 1}\n\
                  {\"event\": \"test\", \"pid\": 1, \"runner\": \"pytest\", \"id\": \"t.py::a\", \"outcome\": \"passed\"}\n\
                  not json\n{\"event\": \"exit\", \"pid\": 1}\n",
            )
            .unwrap();
        drop(clean);
        let mut unclean = connect(&channel);
        unclean
            .write_all(b"{\"event\": \"test\", \"id\": \"t.py::b\", \"outcome\": \"failed\"}\n")
            .unwrap();
        drop(unclean);
        // Still running when the run ends: its tests are kept, its exit is not normal.
        let mut lingering = connect(&channel);
        lingering
            .write_all(b"{\"event\": \"test\", \"id\": \"t.py::c\", \"outcome\": \"passed\"}\n{\"event\": \"exit\"}\n")
            .unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        let text = channel.close().await;
        drop(lingering);
        let me = std::process::id();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 7, "{text}");
        assert_eq!(lines[0], format!(r#"{{"event":"start","pid":{me}}}"#));
        assert!(lines[1].contains(&format!(r#""pid":{me}"#)), "{text}");
        assert_eq!(lines[2], format!(r#"{{"event":"exit","pid":{me}}}"#));
        assert_eq!(lines[3], format!(r#"{{"event":"start","pid":{me}}}"#));
        let report = super::super::TestReport::parse(&text);
        assert_eq!((report.interpreters, report.unclean_exits), (3, 2));
        assert_eq!(report.failed.len(), 1);
        assert_eq!(report.passed.len(), 2);
        assert!(!dir.path().join(CHANNEL_SOCKET).exists());
    }

    /// A deep folder (over the 107 bytes a socket path holds) still gets a channel.
    #[tokio::test]
    async fn a_deep_folder_gets_a_channel() {
        let dir = tempfile::tempdir().unwrap();
        let deep = dir.path().join("d".repeat(60)).join("e".repeat(60));
        std::fs::create_dir_all(&deep).unwrap();
        let channel = Channel::open(&deep).unwrap();
        assert!(channel.address().as_os_str().len() > 107);
        assert!(deep.join(CHANNEL_SOCKET).exists());
        let text = channel.close().await;
        assert_eq!(text, "");
    }
}
