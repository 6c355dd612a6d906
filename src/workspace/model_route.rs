//! `network: model`: inside the sandbox the model gateway is the one reachable address.
//!
//! The sandbox has a network namespace of its own with only `lo`. The gateway also listens on a
//! Unix socket, whose folder is mounted into the sandbox at [`SANDBOX_SOCKET_DIR`]; a forwarder
//! started inside before the agent listens on the gateway's own address (`127.0.0.1:PORT`) in
//! the sandbox's namespace and copies every connection to that socket. The agent is pointed at
//! the gateway's usual URL and reaches it, and nothing else: not the host's loopback, not the
//! internet (no route, no DNS).
//!
//! The forwarder is deltabench itself (`deltabench sandbox-forward`, [`forward_then_exec`]):
//! it binds the port, leaves a process copying connections, and `exec`s the agent, so the agent
//! is still the command the sandbox runs (its exit status, its signals). Killing the forwarder
//! only cuts the agent off its model.

use std::ffi::OsString;
use std::io;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

use super::Network;

/// Where the gateway's socket folder is mounted inside the sandbox.
pub const SANDBOX_SOCKET_DIR: &str = "/run/deltabench";

/// How a sandboxed agent reaches the run's gateway.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelRoute {
    /// The gateway's Unix socket on the host.
    pub socket: PathBuf,
    /// The gateway's loopback port, which the agent's URLs name.
    pub port: u16,
    /// The program run as `FORWARDER sandbox-forward ...` before the agent: deltabench.
    pub forwarder: PathBuf,
}

impl ModelRoute {
    /// The route a command with `network` needs: `route` under [`Network::Model`] (an error
    /// without one), none otherwise.
    pub fn needed(network: Network, route: Option<&ModelRoute>) -> io::Result<Option<&ModelRoute>> {
        match (network, route) {
            (Network::Model, None) => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "network `model` needs the run's model gateway, and there is none",
            )),
            (Network::Model, route) => Ok(route),
            _ => Ok(None),
        }
    }

    /// The socket's path inside the sandbox.
    pub fn inner_socket(&self) -> PathBuf {
        let name = self.socket.file_name().unwrap_or_default();
        Path::new(SANDBOX_SOCKET_DIR).join(name)
    }

    /// The forwarder's command line, to which the agent's is appended.
    pub fn forwarder_argv(&self) -> Vec<OsString> {
        vec![
            self.forwarder.clone().into(),
            "sandbox-forward".into(),
            "--listen".into(),
            format!("127.0.0.1:{}", self.port).into(),
            "--socket".into(),
            self.inner_socket().into(),
            "--".into(),
        ]
    }
}

/// Listens on `listen`, forwards each connection to the Unix socket `socket` from a detached
/// process, and replaces this process with `argv`. Returns only when something failed.
///
/// Must be called while the process has a single thread (before any async runtime): it forks.
pub fn forward_then_exec(listen: SocketAddr, socket: &Path, argv: &[OsString]) -> io::Error {
    let Some((program, args)) = argv.split_first() else {
        return io::Error::new(io::ErrorKind::InvalidInput, "no command to run");
    };
    // Bound before the agent starts, so its first call finds the port open.
    let listener = match TcpListener::bind(listen) {
        Ok(listener) => listener,
        Err(e) => return io::Error::new(e.kind(), format!("cannot listen on {listen}: {e}")),
    };
    if let Err(e) = UnixStream::connect(socket) {
        return io::Error::new(
            e.kind(),
            format!(
                "cannot reach the model gateway at {}: {e}",
                socket.display()
            ),
        );
    }
    // Twice, so the forwarder is adopted by the sandbox's init and never becomes an unreaped
    // child the agent does not know about.
    // SAFETY: single-threaded here (the caller's contract), so the child may allocate.
    match unsafe { nix::unistd::fork() } {
        Err(e) => return io::Error::from(e),
        Ok(nix::unistd::ForkResult::Child) => {
            // SAFETY: as above; this child exits without returning.
            if let Ok(nix::unistd::ForkResult::Child) = unsafe { nix::unistd::fork() } {
                // Off the agent's output pipes, which the run reads to their end.
                if let Ok(null) = std::fs::File::options()
                    .read(true)
                    .write(true)
                    .open("/dev/null")
                {
                    use std::os::fd::AsRawFd;
                    for fd in 0..=2 {
                        // SAFETY: duplicates a descriptor this process owns onto the standard ones.
                        unsafe { libc::dup2(null.as_raw_fd(), fd) };
                    }
                }
                serve(listener, socket);
            }
            // SAFETY: ends the intermediate child without running the parent's exit handlers.
            unsafe { libc::_exit(0) };
        }
        Ok(nix::unistd::ForkResult::Parent { child }) => {
            let _ = nix::sys::wait::waitpid(child, None);
        }
    }
    // The listener is close-on-exec: the agent does not inherit it.
    std::process::Command::new(program).args(args).exec()
}

/// Accepts until the sandbox ends, one pair of copying threads per connection.
fn serve(listener: TcpListener, socket: &Path) -> ! {
    for client in listener.incoming().flatten() {
        // As the gateway's own port does: a stream's small writes go out at once.
        let _ = client.set_nodelay(true);
        let socket = socket.to_owned();
        std::thread::spawn(move || {
            if let Ok(upstream) = UnixStream::connect(&socket) {
                splice(client, upstream);
            }
        });
    }
    std::process::exit(0)
}

/// Copies both ways until both sides are done, passing each side's end of input on.
fn splice(client: TcpStream, upstream: UnixStream) {
    let (Ok(mut client_in), Ok(mut upstream_out)) = (client.try_clone(), upstream.try_clone())
    else {
        return;
    };
    let to_upstream = std::thread::spawn(move || {
        let _ = io::copy(&mut client_in, &mut upstream_out);
        let _ = upstream_out.shutdown(Shutdown::Write);
    });
    let (mut upstream_in, mut client_out) = (upstream, client);
    let _ = io::copy(&mut upstream_in, &mut client_out);
    let _ = client_out.shutdown(Shutdown::Write);
    let _ = to_upstream.join();
}
