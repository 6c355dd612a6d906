//! `sandbox` isolation: a `worktree` workspace whose agent and verify commands run in bubblewrap.
//!
//! The policy is the one measured in facts.md 4.1: the whole file system read-only
//! (`--ro-bind / /`), a fresh `/dev` and `/proc`, a private `/tmp`, the real `$HOME` hidden
//! under an empty tmpfs, every namespace unshared (no network unless the agent asks for
//! `network: host`), ALL capabilities dropped, a new session, and death with the parent. The
//! workspace and a per-command home directory are the only writable paths. The run's other
//! workspaces and trial folders are hidden too (an oracle's diff or workspace holds the answer);
//! the fresh `/dev` hides `/dev/shm`. Paths the command needs that the hiding covered (the
//! source repo the workspace borrows objects from, the agent's script, the instruction file)
//! are bound back read-only.
//!
//! Why `--cap-drop ALL`: a root-run bwrap otherwise keeps its capabilities inside, and the agent
//! can `umount` the tmpfs that hides `$HOME` (facts.md 4.1, "root pitfall").

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::OnceLock;

use crate::process::CommandSpec;

/// What network a sandboxed command sees.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Network {
    /// Only a loopback interface of its own: nothing on the host or beyond is reachable.
    #[default]
    None,
    /// The host's network (an agent that calls its model API).
    Host,
}

impl Network {
    pub fn is_none(&self) -> bool {
        *self == Self::None
    }
}

impl fmt::Display for Network {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::None => "none",
            Self::Host => "host",
        })
    }
}

/// A `network:` value that is neither `none` nor `host`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown network mode: '{value}'. Valid modes: none, host")]
pub struct UnknownNetworkError {
    pub value: String,
}

impl FromStr for Network {
    type Err = UnknownNetworkError;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        match value {
            "none" => Ok(Self::None),
            "host" => Ok(Self::Host),
            _ => Err(UnknownNetworkError {
                value: value.to_owned(),
            }),
        }
    }
}

/// bubblewrap cannot run here, so `sandbox` cannot either (never a silent downgrade).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the `sandbox` isolation strategy needs bubblewrap, and {reason}. Install it (`apt-get install bubblewrap`) and make sure unprivileged user namespaces are enabled (`sysctl kernel.unprivileged_userns_clone=1`, `user.max_user_namespaces` > 0), or use `worktree`"
)]
pub struct SandboxUnavailableError {
    pub reason: String,
}

/// Checks once per process that `bwrap` exists and can build the sandbox's namespaces; returns
/// its version line.
pub fn check_bubblewrap() -> Result<String, SandboxUnavailableError> {
    static CHECKED: OnceLock<Result<String, SandboxUnavailableError>> = OnceLock::new();
    CHECKED.get_or_init(probe_bubblewrap).clone()
}

fn probe_bubblewrap() -> Result<String, SandboxUnavailableError> {
    let unavailable = |reason: String| SandboxUnavailableError { reason };
    let version = std::process::Command::new("bwrap")
        .arg("--version")
        .output()
        .map_err(|e| unavailable(format!("`bwrap` cannot be started ({e})")))?;
    // The mounts and namespaces of a real run: user namespaces may be off, or a container may
    // forbid mounting a new /proc.
    let trial = std::process::Command::new("bwrap")
        .args(["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"])
        .args(["--tmpfs", "/tmp", "--unshare-all", "--cap-drop", "ALL"])
        .args(["--die-with-parent", "--new-session", "--", "true"])
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| unavailable(format!("`bwrap` cannot be started ({e})")))?;
    if !trial.status.success() {
        return Err(unavailable(format!(
            "a trial sandbox (`bwrap --ro-bind / / --unshare-all ... true`) failed here: {}",
            String::from_utf8_lossy(&trial.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&version.stdout).trim().to_owned())
}

/// How to run one kind of command (the agent, or the verify command) in the sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxPolicy {
    /// A host directory, created on use, that becomes the command's empty, writable `$HOME`.
    pub home: PathBuf,
    pub network: Network,
    /// Host folders hidden under an empty tmpfs, besides `/tmp` and `$HOME`.
    pub hidden: Vec<PathBuf>,
    /// Host paths bound back read-only in case a hidden folder covered them.
    pub readable: Vec<PathBuf>,
}

impl SandboxPolicy {
    pub fn new(home: PathBuf) -> Self {
        Self {
            home,
            network: Network::None,
            hidden: Vec::new(),
            readable: Vec::new(),
        }
    }

    /// Hides `dirs` (e.g. the run's other workspaces and trial folders). `/` is never hidden.
    pub fn hiding(mut self, dirs: impl IntoIterator<Item = PathBuf>) -> Self {
        self.hidden
            .extend(dirs.into_iter().filter(|d| d.parent().is_some()));
        self
    }

    pub fn network(mut self, network: Network) -> Self {
        self.network = network;
        self
    }

    /// Keeps `path` readable inside (it must exist when the command starts).
    pub fn readable(mut self, path: impl Into<PathBuf>) -> Self {
        self.readable.push(path.into());
        self
    }

    /// Keeps the object store of the git repository `repo` (bare or not) readable, and the
    /// stores it borrows from in turn: a workspace cloned from `repo` reads objects there.
    /// Taken from `repo`, never from the workspace, whose alternates file the agent can rewrite.
    pub fn borrowing_objects_of(mut self, repo: &Path) -> Self {
        let objects = match repo.join(".git/objects") {
            nested if nested.is_dir() => nested,
            _ => repo.join("objects"),
        };
        let alternates = std::fs::read_to_string(objects.join("info/alternates"));
        for line in alternates.iter().flat_map(|text| text.lines()) {
            if !line.is_empty() && !line.starts_with('#') {
                self = self.readable(objects.join(line));
            }
        }
        self.readable(objects)
    }

    /// `spec` rewritten to run inside bubblewrap with `workspace` as its only writable tree.
    /// Creates the home directory.
    pub fn wrap(&self, workspace: &Path, mut spec: CommandSpec) -> std::io::Result<CommandSpec> {
        std::fs::create_dir_all(&self.home)?;
        let mut argv: Vec<OsString> = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev"]
            .map(OsString::from)
            .to_vec();
        let mut add = |args: &[&dyn AsRef<std::ffi::OsStr>]| {
            argv.extend(args.iter().map(|a| a.as_ref().to_owned()));
        };
        add(&[&"--proc", &"/proc", &"--tmpfs", &"/tmp"]);
        if let Some(real_home) = real_home() {
            add(&[&"--tmpfs", &real_home]);
        }
        // Host daemons listen on Unix sockets under /run, which no network namespace covers.
        if Path::new("/run").is_dir() {
            add(&[&"--tmpfs", &"/run"]);
        }
        for dir in &self.hidden {
            if dir.is_dir() {
                add(&[&"--tmpfs", dir]);
            } else if dir.is_file() {
                // A hidden file (a solution patch) is replaced by an empty one.
                add(&[&"--ro-bind", &"/dev/null", dir]);
            }
        }
        for path in self.readable.iter().filter(|p| p.exists()) {
            add(&[&"--ro-bind", path, path]);
        }
        // After the hiding mounts, so a workspace under /tmp or $HOME is bound back on top.
        add(&[&"--bind", &workspace, &workspace]);
        add(&[&"--bind", &self.home, &self.home]);
        add(&[
            &"--setenv",
            &"HOME",
            &self.home,
            &"--setenv",
            &"TMPDIR",
            &"/tmp",
        ]);
        add(&[&"--unshare-all"]);
        if self.network == Network::Host {
            add(&[&"--share-net"]);
        }
        add(&[
            &"--cap-drop",
            &"ALL",
            &"--die-with-parent",
            &"--new-session",
        ]);
        add(&[&"--chdir", &workspace, &"--"]);
        argv.append(&mut spec.argv);
        spec.argv = argv;
        Ok(spec)
    }
}

/// The user's real home, when it is a directory that hiding would not take `/` with it.
fn real_home() -> Option<PathBuf> {
    let home = PathBuf::from(std::env::var_os("HOME")?);
    (home.is_absolute() && home != Path::new("/") && home.is_dir()).then_some(home)
}

/// The absolute paths that exist among the words of a shell command line: the agent's script
/// or binary, which must stay readable wherever it lives.
pub fn program_paths(command: &str) -> Vec<PathBuf> {
    command
        .split_whitespace()
        .map(|word| word.trim_matches(|c| c == '\'' || c == '"'))
        .filter(|word| word.starts_with('/') && *word != "/")
        .map(PathBuf::from)
        .filter(|path| path.exists())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn network_parses_and_names_the_valid_set() {
        assert_eq!("none".parse(), Ok(Network::None));
        assert_eq!("host".parse(), Ok(Network::Host));
        let err = "bridge".parse::<Network>().unwrap_err().to_string();
        assert_eq!(
            err,
            "unknown network mode: 'bridge'. Valid modes: none, host"
        );
    }

    #[test]
    fn wrap_binds_the_workspace_last_and_drops_capabilities() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        let policy = SandboxPolicy::new(dir.path().join("home")).readable(dir.path());
        let spec = policy.wrap(&ws, CommandSpec::shell("true", &ws)).unwrap();
        let argv: Vec<String> = spec
            .argv
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let at = |flag: &str| argv.iter().position(|a| a == flag).unwrap();
        assert_eq!(argv[0], "bwrap");
        assert!(at("--bind") > at("--tmpfs") && at("--bind") > at("--ro-bind"));
        assert_eq!(&argv[at("--cap-drop") + 1], "ALL");
        assert!(!argv.contains(&"--share-net".to_owned()));
        assert_eq!(argv[argv.len() - 3..], ["sh", "-c", "true"]);
        assert!(dir.path().join("home").is_dir());
    }

    #[test]
    fn program_paths_keep_existing_absolute_words() {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("agent.sh");
        std::fs::write(&script, "").unwrap();
        let line = format!("'{}' --flag /nonexistent/x relative", script.display());
        assert_eq!(program_paths(&line), vec![script]);
    }
}
