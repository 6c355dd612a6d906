//! Environments: a task's commands run in a container (docs/environments.md).
//!
//! One container per command (`run --rm`), driven through the runtime's CLI (Podman or Docker).
//! [`ContainerPolicy::wrap`] rewrites a [`CommandSpec`] the way [`super::SandboxPolicy::wrap`]
//! does for bubblewrap, so the process module's timeout, log and kill machinery stays; the spec
//! carries a cleanup command (`rm -f -t 0 NAME`) that [`crate::process::run`] runs on every end,
//! since killing the client does not stop its container.

use std::ffi::OsString;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::process::{CommandSpec, ProcessOutput};

use super::Network;
use super::model_route::{ModelRoute, SANDBOX_SOCKET_DIR};

/// The variable that chooses the runtime: `podman`, `docker`, or a path to either.
pub const RUNTIME_VAR: &str = "DELTABENCH_CONTAINER_RUNTIME";
/// The label every container carries, valued with the run's lease id (what `gc` looks for).
pub const RUN_LABEL: &str = "deltabench.run";
/// Lines of a build or preflight log shown in an error.
const LOG_TAIL_LINES: usize = 20;

/// Where a task's commands run: an image (named, or built from a Dockerfile).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Environment {
    /// The image every command's container starts from.
    pub image: ImageSource,
    /// Where the workspace is mounted inside.
    pub workdir: PathBuf,
    /// The network of setup and the agent; the verify command always has none.
    pub network: Network,
    /// What every command's container may use.
    pub limits: Limits,
    /// What of the agent's container reaches the verify command.
    pub delta: DeltaScope,
    /// The verify command's network: none, unless the task declares it needs one.
    pub verify_network: Network,
    /// (container path, workspace folder) mounted read-only into the verify container.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub verify_mounts: Vec<(PathBuf, PathBuf)>,
    /// Where the oracle's solution script folder is mounted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub solution_at: Option<PathBuf>,
    /// Container globs carried into verify whatever the toolchain rule says.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub outputs: Vec<String>,
}

/// What of the agent's container the verify command sees.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeltaScope {
    /// The workspace's diff only: what the agent changed elsewhere in its container is dropped.
    #[default]
    Workspace,
    /// The workspace's diff and what the agent changed anywhere in its container's file system.
    Container,
}

/// A container's resource limits (`--cpus`, `--memory`); `None` leaves the runtime's default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Limits {
    /// Thousandths of a CPU (`cpus: 0.5` is 500).
    pub millicpus: Option<u32>,
    /// Bytes.
    pub memory: Option<u64>,
}

/// Where an environment's image comes from.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ImageSource {
    /// An image by name or id (`python:3.12`).
    Image(String),
    /// An image the harness builds.
    Dockerfile {
        /// The Dockerfile.
        path: PathBuf,
        /// The build context folder (the Dockerfile's folder unless the suite names one).
        context: PathBuf,
    },
}

/// `workdir` when the suite does not set one.
pub const DEFAULT_WORKDIR: &str = "/app";

/// Which CLI a runtime speaks: the flags differ a little.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuntimeKind {
    /// Podman's CLI.
    Podman,
    /// Docker's CLI.
    Docker,
}

/// A container runtime's CLI.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Runtime {
    /// The CLI program run (a name on `PATH` or a path).
    pub program: PathBuf,
    /// Which CLI it is.
    pub kind: RuntimeKind,
}

/// Why a run's containers could not be listed or removed.
#[derive(Debug, thiserror::Error)]
pub enum RemoveContainersError {
    /// The runtime's CLI could not be started.
    #[error("cannot start {}: {source}", program.display())]
    Spawn {
        /// The CLI program.
        program: PathBuf,
        /// The error starting it.
        #[source]
        source: std::io::Error,
    },
    /// The runtime refused; the last lines it wrote.
    #[error("{stderr}")]
    Failed {
        /// The runtime's standard error, last lines kept.
        stderr: String,
    },
}

/// Why containers cannot run, or an image cannot be had: a configuration problem.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ContainerError(pub String);

impl Runtime {
    /// `DELTABENCH_CONTAINER_RUNTIME` when set, else `podman` on `PATH`, else `docker`.
    pub fn discover() -> Result<Self, ContainerError> {
        match std::env::var_os(RUNTIME_VAR).filter(|v| !v.is_empty()) {
            Some(chosen) => {
                let program = PathBuf::from(&chosen);
                let found = if program.components().count() > 1 {
                    program.is_file().then_some(program.clone())
                } else {
                    which(&program)
                };
                let program = found.ok_or_else(|| {
                    ContainerError(format!(
                        "{RUNTIME_VAR}={} names no container runtime: no such program. Set it to `podman`, `docker` or the path of either",
                        program.display()
                    ))
                })?;
                Ok(Self::at(program))
            }
            None => which(Path::new("podman"))
                .or_else(|| which(Path::new("docker")))
                .map(Self::at)
                .ok_or_else(|| {
                    ContainerError(
                        "a task has an `environment:`, and no container runtime is installed: neither `podman` nor `docker` is on PATH. Install Podman (docs/environments.md), or set DELTABENCH_CONTAINER_RUNTIME".into(),
                    )
                }),
        }
    }

    /// The runtime at `program`; its kind is read from the name (Docker unless it says podman).
    pub fn at(program: PathBuf) -> Self {
        let podman = program
            .file_name()
            .is_some_and(|n| n.to_string_lossy().contains("podman"));
        Self {
            program,
            kind: if podman {
                RuntimeKind::Podman
            } else {
                RuntimeKind::Docker
            },
        }
    }

    fn command(&self) -> Command {
        let mut command = Command::new(&self.program);
        command.stdin(Stdio::null());
        command
    }

    /// Checks that the runtime answers: a Docker client without a daemon does not.
    pub fn check(&self) -> Result<(), ContainerError> {
        let out = self
            .command()
            .args(["version", "--format", "{{.Server.Version}}"])
            .output()
            .map_err(|e| ContainerError(format!("cannot start {}: {e}", self.program.display())))?;
        if out.status.success() {
            return Ok(());
        }
        let said = tail(&String::from_utf8_lossy(&out.stderr), LOG_TAIL_LINES);
        let fix = match self.kind {
            RuntimeKind::Docker => format!(
                "start the Docker daemon, or set {RUNTIME_VAR}=podman to use Podman instead"
            ),
            RuntimeKind::Podman => {
                "check Podman's configuration (docs/environments.md lists the errors and the fix)"
                    .into()
            }
        };
        Err(ContainerError(format!(
            "the container runtime {} does not answer (`version` exited with {}): {fix}\n{said}",
            self.program.display(),
            exit_text(&out.status)
        )))
    }

    /// Whether `image` is in the local store.
    pub fn image_exists(&self, image: &str) -> bool {
        self.image_id(image).is_some()
    }

    /// The id of `image` in the local store: what its name points to now.
    pub fn image_id(&self, image: &str) -> Option<String> {
        let out = self
            .command()
            .args(["image", "inspect", "--format", "{{.Id}}", image])
            .stderr(Stdio::null())
            .output()
            .ok()?;
        let id = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        (out.status.success() && !id.is_empty()).then_some(id)
    }

    /// The `PATH` `image` sets for its commands, if it sets one.
    pub fn image_path(&self, image: &str) -> Result<Option<String>, ContainerError> {
        let format = "{{range .Config.Env}}{{println .}}{{end}}";
        let out = self.checked(&["image", "inspect", "--format", format, image])?;
        Ok(String::from_utf8_lossy(&out)
            .lines()
            .find_map(|line| line.strip_prefix("PATH="))
            .map(str::to_owned))
    }

    /// Saves the stopped container `name` as `image`, then removes the container (also when
    /// the commit fails).
    pub fn commit(&self, name: &str, image: &str) -> Result<(), ContainerError> {
        let out = self.command().args(["commit", name, image]).output();
        self.remove_container(name);
        let out = out
            .map_err(|e| ContainerError(format!("cannot start {}: {e}", self.program.display())))?;
        if out.status.success() {
            return Ok(());
        }
        Err(ContainerError(format!(
            "`{} commit {name} {image}` exited with {}: {}",
            self.program.display(),
            exit_text(&out.status),
            tail(&String::from_utf8_lossy(&out.stderr), LOG_TAIL_LINES)
        )))
    }

    /// Whether the container `name` exists (running or not).
    pub fn container_exists(&self, name: &str) -> bool {
        self.command()
            .args(["inspect", "--format", "{{.Id}}", name])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// Starts the container `name` when it is not running (a stopped one runs its command
    /// again).
    pub fn start_container(&self, name: &str) -> Result<(), ContainerError> {
        self.checked(&["start", name]).map(drop)
    }

    /// Stops the container `name` at once, keeping it.
    pub fn stop_container(&self, name: &str) {
        let _ = self
            .command()
            .args(["stop", "-t", "0", name])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }

    /// What changed in the container `name`'s file system against its image, as `diff` lists
    /// it (mounted paths are not in it).
    pub fn diff(&self, name: &str) -> Result<Vec<FsChange>, ContainerError> {
        let out = self.checked(&["diff", name])?;
        Ok(String::from_utf8_lossy(&out)
            .lines()
            .filter_map(FsChange::parse)
            .collect())
    }

    /// Where the container `name`'s mounts are, inside it.
    pub fn mount_targets(&self, name: &str) -> Result<Vec<PathBuf>, ContainerError> {
        let format = "{{range .Mounts}}{{.Destination}}\n{{end}}";
        let out = self.checked(&["inspect", "--format", format, name])?;
        Ok(String::from_utf8_lossy(&out)
            .lines()
            .filter(|l| l.starts_with('/'))
            .map(PathBuf::from)
            .collect())
    }

    /// Streams the container `name`'s whole file system, as a tar archive, to `read`.
    pub fn export<T>(
        &self,
        name: &str,
        read: impl FnOnce(&mut dyn std::io::Read) -> std::io::Result<T>,
    ) -> Result<T, ContainerError> {
        let mut child = self
            .command()
            .args(["export", name])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| self.unstartable(e))?;
        let mut stdout = child.stdout.take().expect("piped");
        let read = read(&mut stdout);
        // Whatever was not read must not block the exporter.
        let _ = std::io::copy(&mut stdout, &mut std::io::sink());
        let out = child.wait_with_output().map_err(|e| self.unstartable(e))?;
        if !out.status.success() {
            return Err(self.failed(&["export", name], &out));
        }
        read.map_err(|e| {
            ContainerError(format!(
                "cannot read what `{} export {name}` wrote: {e}",
                self.program.display()
            ))
        })
    }

    /// Runs `sh -c script` as root in a new container of `image`, `stdin` on its standard
    /// input and without a network, then saves the container as `tag` (and removes it).
    pub fn run_and_commit(
        &self,
        image: &str,
        label: &str,
        script: &str,
        args: &[String],
        stdin: &Path,
        tag: &str,
    ) -> Result<(), ContainerError> {
        let name = format!(
            "deltabench-{label}-{}",
            SEQUENCE.fetch_add(1, Ordering::Relaxed)
        );
        let input = std::fs::File::open(stdin)
            .map_err(|e| ContainerError(format!("cannot open {}: {e}", stdin.display())))?;
        let out = self
            .command()
            .args([
                "run",
                "-i",
                "--pull=never",
                "--network=none",
                "--user",
                "0:0",
            ])
            .args(["--name", &name, "--label", &format!("{RUN_LABEL}={label}")])
            .args([image, "sh", "-c", script, "deltabench"])
            .args(args)
            .stdin(input)
            .output()
            .map_err(|e| self.unstartable(e));
        match out {
            Ok(out) if out.status.success() => self.commit(&name, tag),
            Ok(out) => {
                self.remove_container(&name);
                Err(self.failed(&["run", image], &out))
            }
            Err(e) => {
                self.remove_container(&name);
                Err(e)
            }
        }
    }

    /// Checks, once per image, what `delta: container` needs: the runtime's `diff`, `export` and
    /// `commit` on a container of `image`, and the image's own `tar` and `rm` (which lay the
    /// changes into the verify image).
    pub fn delta_preflight(&self, image: &str, label: &str) -> Result<(), ContainerError> {
        let name = format!(
            "deltabench-{label}-{}",
            SEQUENCE.fetch_add(1, Ordering::Relaxed)
        );
        let tag = format!("localhost/deltabench-delta-check:{}", name.to_lowercase());
        let checked = (|| {
            let out = self
                .command()
                .args(["run", "--pull=never", "--network=none", "--name", &name])
                .args(["--label", &format!("{RUN_LABEL}={label}")])
                .args([image, "sh", "-c"])
                .arg("for t in tar rm; do command -v $t >/dev/null || { echo \"$t\"; exit 3; }; done; touch /deltabench-delta-check")
                .output()
                .map_err(|e| self.unstartable(e))?;
            if out.status.code() == Some(3) {
                return Err(ContainerError(format!(
                    "image {image} has no `{}`, which `delta: container` needs to lay the agent's changes into the verify image",
                    String::from_utf8_lossy(&out.stdout).trim()
                )));
            }
            if !out.status.success() {
                return Err(self.failed(&["run", image], &out));
            }
            let listed = self.diff(&name)?;
            if !listed.iter().any(|c| c.path == "/deltabench-delta-check") {
                return Err(ContainerError(format!(
                    "`{} diff` does not list what a container changed",
                    self.program.display()
                )));
            }
            self.export(&name, |stream| std::io::copy(stream, &mut std::io::sink()))?;
            self.commit(&name, &tag)?;
            self.remove_image(&tag);
            Ok(())
        })();
        self.remove_container(&name);
        checked
    }

    /// Runs the runtime with `args`: its standard output, or why it failed.
    fn checked(&self, args: &[&str]) -> Result<Vec<u8>, ContainerError> {
        let out = self
            .command()
            .args(args)
            .output()
            .map_err(|e| self.unstartable(e))?;
        if out.status.success() {
            return Ok(out.stdout);
        }
        Err(self.failed(args, &out))
    }

    fn unstartable(&self, e: std::io::Error) -> ContainerError {
        ContainerError(format!("cannot start {}: {e}", self.program.display()))
    }

    fn failed(&self, args: &[&str], out: &std::process::Output) -> ContainerError {
        ContainerError(format!(
            "`{} {}` exited with {}: {}",
            self.program.display(),
            args.join(" "),
            exit_text(&out.status),
            tail(&String::from_utf8_lossy(&out.stderr), LOG_TAIL_LINES).trim()
        ))
    }

    /// Removes the container `name` if it exists.
    pub fn remove_container(&self, name: &str) {
        let _ = self
            .command()
            .args(["rm", "-f", "-t", "0", name])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }

    /// Removes `image` from the local store (nothing when a container still uses it).
    pub fn remove_image(&self, image: &str) -> bool {
        self.command()
            .args(["rmi", image])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    }

    /// Builds `dockerfile` with `context` as `tag`, its whole output written to `log`.
    pub fn build(
        &self,
        dockerfile: &Path,
        context: &Path,
        tag: &str,
        log: &Path,
    ) -> Result<(), ContainerError> {
        let out = self
            .command()
            .arg("build")
            .arg("-f")
            .arg(dockerfile)
            .args(["-t", tag])
            .arg(context)
            .output()
            .map_err(|e| ContainerError(format!("cannot start {}: {e}", self.program.display())))?;
        let mut text = out.stdout;
        text.extend_from_slice(&out.stderr);
        if let Some(dir) = log.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let _ = std::fs::write(log, &text);
        if out.status.success() {
            return Ok(());
        }
        Err(ContainerError(format!(
            "building {} failed ({}); the build log ({}) ends with:\n{}",
            dockerfile.display(),
            exit_text(&out.status),
            log.display(),
            tail(&String::from_utf8_lossy(&text), LOG_TAIL_LINES)
        )))
    }

    /// Starts `image` once with a command that does nothing: tells a missing image, a broken
    /// runtime configuration and an image without `/bin/sh` apart from a task's own failures.
    pub fn preflight(&self, image: &str, label: &str) -> Result<(), ContainerError> {
        let mut command = self.command();
        command.args(["run", "--rm", "--pull=never", "--network=none"]);
        command.arg("--label").arg(format!("{RUN_LABEL}={label}"));
        let out = command
            .args([image, "sh", "-c", "exit 0"])
            .output()
            .map_err(|e| ContainerError(format!("cannot start {}: {e}", self.program.display())))?;
        if out.status.success() {
            return Ok(());
        }
        let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&out.stderr));
        let why = match out.status.code() {
            Some(125) if !self.image_exists(image) => {
                "the image is not in the local store (build or pull it first; deltabench never pulls)"
            }
            Some(125) => "the container runtime could not create the container",
            Some(126) => "the container could not start its command (see the runtime's message)",
            Some(127) => "the image has no `sh`",
            _ => "the container did not run `sh -c 'exit 0'`",
        };
        Err(ContainerError(format!(
            "image {image} cannot run a command: {why} (`{} run --rm --pull=never --network=none {image} sh -c 'exit 0'` exited with {}):\n{}",
            self.program.display(),
            exit_text(&out.status),
            tail(&text, LOG_TAIL_LINES)
        )))
    }

    /// Runs each need's test in `image`, with `mounts` mounted read-only at their host paths:
    /// the index of the first that fails, or `None` when the image has everything.
    pub fn lacks(
        &self,
        image: &str,
        label: &str,
        mounts: &[PathBuf],
        needs: &[ImageNeed],
    ) -> Result<Option<usize>, ContainerError> {
        let mut script = String::new();
        for (i, need) in needs.iter().enumerate() {
            script.push_str(&format!(
                "if ! ( {} ) >/dev/null 2>&1; then echo {MISSING}{i}; exit 3; fi\n",
                need.test
            ));
        }
        let mut command = self.command();
        command.args(["run", "--rm", "--pull=never", "--network=none"]);
        command.arg("--label").arg(format!("{RUN_LABEL}={label}"));
        for path in mounts.iter().filter(|p| p.is_absolute() && p.exists()) {
            let mut bind = path.as_os_str().to_owned();
            bind.push(":");
            bind.push(path.as_os_str());
            bind.push(":ro");
            command.arg("-v").arg(bind);
        }
        let out = command
            .args([image, "sh", "-c", &script])
            .output()
            .map_err(|e| ContainerError(format!("cannot start {}: {e}", self.program.display())))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        if let Some(i) = stdout
            .lines()
            .find_map(|line| line.strip_prefix(MISSING)?.trim().parse::<usize>().ok())
        {
            return Ok(Some(i));
        }
        if out.status.success() {
            return Ok(None);
        }
        Err(ContainerError(format!(
            "image {image} could not run the agent CLI's checks ({}):\n{}",
            exit_text(&out.status),
            tail(&String::from_utf8_lossy(&out.stderr), LOG_TAIL_LINES)
        )))
    }

    /// Removes every container labelled with run `label` (with `dry_run`, only lists them).
    /// Returns the ids removed.
    pub fn remove_labelled(
        &self,
        label: &str,
        dry_run: bool,
    ) -> Result<Vec<String>, RemoveContainersError> {
        let spawn = |source| RemoveContainersError::Spawn {
            program: self.program.clone(),
            source,
        };
        let failed = |stderr: &[u8]| RemoveContainersError::Failed {
            stderr: tail(&String::from_utf8_lossy(stderr), 3),
        };
        let out = self
            .command()
            .args(["ps", "-a", "-q", "--filter"])
            .arg(format!("label={RUN_LABEL}={label}"))
            .output()
            .map_err(spawn)?;
        if !out.status.success() {
            return Err(failed(&out.stderr));
        }
        let ids: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .map(str::to_owned)
            .collect();
        if dry_run || ids.is_empty() {
            return Ok(ids);
        }
        let out = self
            .command()
            .args(["rm", "-f", "-t", "0"])
            .args(&ids)
            .output()
            .map_err(spawn)?;
        if !out.status.success() {
            return Err(failed(&out.stderr));
        }
        Ok(ids)
    }
}

/// One path `diff` lists: added, changed or deleted in a container against its image.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FsChange {
    /// How the path changed.
    pub kind: FsChangeKind,
    /// The absolute path inside the container.
    pub path: String,
}

/// How a path changed in a container (`A`, `C` or `D` in the runtime's `diff`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FsChangeKind {
    /// Not in the image.
    Added,
    /// In the image, and different in the container.
    Changed,
    /// In the image and removed.
    Deleted,
}

impl FsChange {
    /// A line of `diff`'s output: `A /path`, `C /path` or `D /path`.
    fn parse(line: &str) -> Option<Self> {
        let (kind, path) = line.split_once(' ')?;
        let kind = match kind {
            "A" => FsChangeKind::Added,
            "C" => FsChangeKind::Changed,
            "D" => FsChangeKind::Deleted,
            _ => return None,
        };
        path.starts_with('/').then(|| Self {
            kind,
            path: path.to_owned(),
        })
    }

    /// The line `diff` printed.
    pub fn line(&self) -> String {
        let kind = match self.kind {
            FsChangeKind::Added => 'A',
            FsChangeKind::Changed => 'C',
            FsChangeKind::Deleted => 'D',
        };
        format!("{kind} {}", self.path)
    }
}

/// What an agent CLI needs from an image: a shell test that succeeds when it is there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageNeed {
    /// What is missing when the test fails (`node`).
    pub tool: String,
    /// Why the CLI needs it.
    pub why: String,
    /// A `sh` command line, run with the CLI's installation mounted.
    pub test: String,
    /// How to give the image what it lacks.
    pub hint: String,
}

/// How [`Runtime::lacks`]'s script names the need that failed.
const MISSING: &str = "deltabench-missing:";

fn which(program: &Path) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(program))
        .find(|path| path.is_file())
}

fn exit_text(status: &std::process::ExitStatus) -> String {
    match status.code() {
        Some(code) => format!("status {code}"),
        None => "a signal".into(),
    }
}

/// The last `lines` non-empty lines of `text`, indented.
pub fn tail(text: &str, lines: usize) -> String {
    let kept: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let start = kept.len().saturating_sub(lines);
    kept[start..]
        .iter()
        .map(|line| format!("  {line}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Names containers uniquely within this process (the run label keeps runs apart).
static SEQUENCE: AtomicU64 = AtomicU64::new(0);

/// How to run one kind of command (setup, the agent, the verify command) in a container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerPolicy {
    /// The runtime whose CLI runs the container.
    pub runtime: Runtime,
    /// The image's name or id.
    pub image: String,
    /// Where the workspace is mounted inside, and the command's working directory.
    pub workdir: PathBuf,
    /// The network the container gets.
    pub network: Network,
    /// A host folder, created on use, mounted at the same path as the command's `$HOME`.
    pub home: PathBuf,
    /// Host paths mounted read-only at the same path.
    pub readable: Vec<PathBuf>,
    /// Host paths (files or folders) mounted read-write at the same path.
    pub writable: Vec<PathBuf>,
    /// Files inside the workspace mounted read-only over it, at their place under the workdir
    /// (the hidden tests while verify runs).
    pub read_only: Vec<PathBuf>,
    /// Folders of the workspace mounted read-only at a path of their own inside: (inside,
    /// workspace-relative). The verify command's `verify_mounts` (`/tests`).
    pub workspace_mounts: Vec<(PathBuf, PathBuf)>,
    /// Host folders mounted at a path of their own inside: (host, inside, writable). The
    /// reward folder, the oracle's solution folder.
    pub binds: Vec<(PathBuf, PathBuf, bool)>,
    /// The run's lease id: the containers' label, and part of their names.
    pub label: String,
    /// How the command reaches the gateway under [`Network::Model`].
    pub route: Option<ModelRoute>,
    /// The container's CPU and memory limits.
    pub limits: Limits,
    /// The name of the container to keep (stopped, not removed) when the command ends, so its
    /// file system can be read: the agent's under `delta: container`.
    pub keep: Option<String>,
    /// The kept container outlives each command (`run -d`, then `exec` per command), for a
    /// verify command that runs in the agent's own container.
    pub live: bool,
}

impl ContainerPolicy {
    /// Runs in `image` instead.
    pub fn image(mut self, image: &str) -> Self {
        self.image = image.to_owned();
        self
    }

    /// Keeps the command's container when it ends (stopped on a timeout or cancel), under a
    /// name of its own: [`Self::keep`].
    pub fn kept(mut self) -> Self {
        let seq = SEQUENCE.fetch_add(1, Ordering::Relaxed);
        self.keep = Some(format!("deltabench-{}-kept-{seq}", self.label));
        self
    }

    /// As [`Self::kept`], with the container kept running between commands.
    pub fn kept_live(self) -> Self {
        let mut kept = self.kept();
        kept.live = true;
        kept
    }

    /// Runs with `network` instead.
    pub fn network(mut self, network: Network) -> Self {
        self.network = network;
        self
    }

    /// Where the gateway is, for [`Network::Model`] (the other networks ignore it): as in the
    /// sandbox, deltabench (mounted read-only at its host path) forwards the gateway's port
    /// inside the container's own network to the gateway's socket, then runs the command.
    pub fn model_route(mut self, route: ModelRoute) -> Self {
        self.route = Some(route);
        self
    }

    /// Mounts `home` as the command's `$HOME` instead.
    pub fn home(mut self, home: PathBuf) -> Self {
        self.home = home;
        self
    }

    /// Mounts the workspace's folders read-only at their own paths: (inside, relative).
    pub fn workspace_mounts(mut self, mounts: &[(PathBuf, PathBuf)]) -> Self {
        self.workspace_mounts.extend_from_slice(mounts);
        self
    }

    /// Mounts the host folder `host` at `inside`.
    pub fn bind(mut self, host: PathBuf, inside: PathBuf, writable: bool) -> Self {
        self.binds.push((host, inside, writable));
        self
    }

    /// Mounts `path` read-only at the same path (it must exist when the command starts).
    pub fn readable(mut self, path: impl Into<PathBuf>) -> Self {
        self.readable.push(path.into());
        self
    }

    /// Mounts `path` read-write at the same path (it must exist when the command starts): a
    /// file of the trial's own that the command writes (an agent CLI's trajectory).
    pub fn writable(mut self, path: impl Into<PathBuf>) -> Self {
        self.writable.push(path.into());
        self
    }

    /// Mounts the object stores a workspace cloned from `repo` borrows: its alternates name them
    /// by their host paths, so they are mounted at those paths.
    pub fn borrowing_objects_of(mut self, repo: &Path) -> Self {
        let (own, borrowed) = super::sandbox::object_stores(repo);
        for path in borrowed {
            // Mounted where the alternates file points, resolved.
            self = self.readable(path.canonicalize().unwrap_or(path));
        }
        self.readable(own)
    }

    /// `spec` rewritten to run as `RUNTIME run --rm ... IMAGE ARGV` with `workspace` mounted
    /// at the workdir, as the workspace's owner. Creates the home folder.
    pub fn wrap(&self, workspace: &Path, spec: CommandSpec) -> std::io::Result<CommandSpec> {
        if let Some(name) = &self.keep {
            let mut spec = self.wrap_as(workspace, spec, name, false)?;
            // A timeout or cancel stops it: what it changed so far is still read.
            spec.cleanup = Some(
                [
                    self.runtime.program.as_os_str(),
                    "stop".as_ref(),
                    "-t".as_ref(),
                    "0".as_ref(),
                    name.as_ref(),
                ]
                .map(OsString::from)
                .to_vec(),
            );
            return Ok(spec);
        }
        let seq = SEQUENCE.fetch_add(1, Ordering::Relaxed);
        self.wrap_as(
            workspace,
            spec,
            &format!("deltabench-{}-{seq}", self.label),
            true,
        )
    }

    /// As [`Self::wrap`], but the container is named `name` and kept when the command ends by
    /// itself, for [`Runtime::commit`] (it is removed on a timeout or cancel).
    pub fn wrap_kept(
        &self,
        workspace: &Path,
        spec: CommandSpec,
        name: &str,
    ) -> std::io::Result<CommandSpec> {
        self.wrap_as(workspace, spec, name, false)
    }

    fn wrap_as(
        &self,
        workspace: &Path,
        mut spec: CommandSpec,
        name: &str,
        remove: bool,
    ) -> std::io::Result<CommandSpec> {
        let route = ModelRoute::needed(self.network, self.route.as_ref())?;
        std::fs::create_dir_all(&self.home)?;
        let owner = std::fs::metadata(workspace)?;
        let user = format!("{}:{}", owner.uid(), owner.gid());
        let mut argv = self.run_flags(name, remove, &user);
        self.push_mounts(&mut argv, workspace, route);
        if self.live {
            // The container outlives its commands: each runs in it by `exec`, and what they
            // leave running (a server) is still there for the next.
            self.start_live(argv, name)?;
            argv = vec![self.runtime.program.clone().into()];
            add_all(&mut argv, &["exec", "--user", &user, "-w"]);
            argv.push(self.workdir.clone().into());
        }
        self.push_env(&mut argv, workspace, &mut spec);
        if spec.stdin.is_some() {
            argv.push("-i".into());
        }
        // The command says it started before anything of the task's runs, so the task's own
        // exit 125 can never pass for the runtime's failure (which would turn a failed trial
        // into an unscored one). Podman hands fd 3 in, closed before the task runs; Docker
        // cannot, so there the mark is the output's first line, which the task cannot unwrite.
        let marked = self.runtime.kind == RuntimeKind::Podman;
        if marked {
            add_all(&mut argv, &["--preserve-fds", "1"]);
        }
        argv.push(match self.live {
            true => name.into(),
            false => self.image.clone().into(),
        });
        let script = if marked {
            STARTED_SCRIPT
        } else {
            STARTED_OUTPUT_SCRIPT
        };
        add_all(&mut argv, &["sh", "-c", script, "deltabench-started"]);
        if let Some(route) = route {
            argv.extend(route.forwarder_argv());
        }
        argv.append(&mut spec.argv);
        spec.argv = argv;
        // The client needs nothing of the command's environment but the secrets: the rest went
        // in with -e.
        spec.clear_env = false;
        spec.status_fd = marked;
        spec.cleanup = Some(vec![
            self.runtime.program.clone().into(),
            "rm".into(),
            "-f".into(),
            "-t".into(),
            "0".into(),
            name.into(),
        ]);
        Ok(spec)
    }

    /// `RUNTIME run` and its flags up to the mounts: removal or detaching, the name, host
    /// name, label, network, user and limits.
    fn run_flags(&self, name: &str, remove: bool, user: &str) -> Vec<OsString> {
        let mut argv: Vec<OsString> = vec![self.runtime.program.clone().into()];
        let mut add = |args: &[&str]| argv.extend(args.iter().map(OsString::from));
        add(&["run"]);
        if remove {
            add(&["--rm"]);
        } else if self.live {
            add(&["-d"]);
        }
        add(&["--init", "--pull=never"]);
        if self.runtime.kind == RuntimeKind::Podman {
            // Podman copies the host's *_proxy variables in otherwise.
            add(&["--http-proxy=false"]);
        }
        add(&["--name", name]);
        // Not the container's id: two runs of one trial see the same host name.
        add(&["--hostname", "deltabench"]);
        add(&["--label", &format!("{RUN_LABEL}={}", self.label)]);
        // `model`: the container's own network, with only the forwarded port in it.
        let network = match self.network {
            Network::Model => Network::None,
            network => network,
        };
        add(&["--network", &network.to_string()]);
        add(&["--user", user]);
        if let Some(millicpus) = self.limits.millicpus {
            add(&["--cpus", &(f64::from(millicpus) / 1000.0).to_string()]);
        }
        if let Some(bytes) = self.limits.memory {
            add(&["--memory", &format!("{bytes}b")]);
        }
        argv
    }

    /// The `-v` mounts: the workspace, its read-only files and folders, the binds, then `-w`,
    /// then the home, the model route's socket folder and the readable and writable paths.
    fn push_mounts(&self, argv: &mut Vec<OsString>, workspace: &Path, route: Option<&ModelRoute>) {
        push_mount(argv, workspace, &self.workdir, ":rw");
        for file in &self.read_only {
            if let Ok(rest) = file.strip_prefix(workspace)
                && file.exists()
            {
                push_mount(argv, file, &self.workdir.join(rest), ":ro");
            }
        }
        for (inside, relative) in &self.workspace_mounts {
            let folder = workspace.join(relative);
            if folder.is_dir() {
                push_mount(argv, &folder, inside, ":ro");
            }
        }
        for (host, inside, writable) in &self.binds {
            push_mount(argv, host, inside, if *writable { ":rw" } else { ":ro" });
        }
        argv.push("-w".into());
        argv.push(self.workdir.clone().into());
        push_mount(argv, &self.home, &self.home, ":rw");
        if let Some(route) = route {
            let folder = route.socket.parent().unwrap_or(Path::new("/"));
            push_mount(argv, folder, Path::new(SANDBOX_SOCKET_DIR), ":ro");
        }
        let mut readable: Vec<&PathBuf> = self
            .readable
            .iter()
            .chain(route.map(|route| &route.forwarder))
            .filter(|p| p.is_absolute() && p.exists())
            .collect();
        readable.sort();
        readable.dedup();
        for path in readable {
            push_mount(argv, path, path, ":ro");
        }
        for path in self.writable.iter().filter(|p| p.is_absolute()) {
            push_mount(argv, path, path, ":rw");
        }
    }

    /// `HOME` and the command's environment as `-e` flags, values naming the workspace moved
    /// to the workdir; a secret goes by name only and stays in the client's environment.
    fn push_env(&self, argv: &mut Vec<OsString>, workspace: &Path, spec: &mut CommandSpec) {
        let mut env = vec![(OsString::from("HOME"), self.home.clone().into_os_string())];
        env.extend(std::mem::take(&mut spec.env));
        for (key, value) in env {
            // A secret's value stays out of the command line, which Podman keeps in the
            // container's configuration on disk (`CreateCommand`): `-e KEY` takes it from the
            // client's environment instead.
            if crate::support::is_secret_name(&key.to_string_lossy()) {
                argv.push("-e".into());
                argv.push(key.clone());
                spec.env.push((key, value));
                continue;
            }
            argv.push("-e".into());
            argv.push(env_pair(key, self.moved_value(workspace, value)));
        }
    }

    /// Only the workspace moves: a value naming it names the workdir inside.
    fn moved_value(&self, workspace: &Path, value: OsString) -> OsString {
        match Path::new(&value).strip_prefix(workspace) {
            Ok(rest) if rest.as_os_str().is_empty() => self.workdir.clone().into_os_string(),
            Ok(rest) => self.workdir.join(rest).into_os_string(),
            Err(_) => value,
        }
    }

    /// Starts the live container `name` (`run -d`, `argv` being its flags), unless it runs.
    fn start_live(&self, mut argv: Vec<OsString>, name: &str) -> std::io::Result<()> {
        if self.runtime.container_exists(name) {
            return Ok(());
        }
        argv.push(self.image.clone().into());
        add_all(&mut argv, &["sh", "-c", KEEP_ALIVE]);
        let out = Command::new(&argv[0])
            .args(&argv[1..])
            .stdin(Stdio::null())
            .output()?;
        if out.status.success() {
            return Ok(());
        }
        Err(std::io::Error::other(format!(
            "cannot start the container {name} (`run -d` exited with {}): {}",
            exit_text(&out.status),
            tail(&String::from_utf8_lossy(&out.stderr), LOG_TAIL_LINES).trim()
        )))
    }
}

/// What a live container runs between the commands `exec`ed into it.
const KEEP_ALIVE: &str = "while :; do sleep 3600; done";

/// Runs first in the container: writes the start mark on fd 3, closes it, then execs the task's
/// command (`"$@"`).
const STARTED_SCRIPT: &str = "printf started >&3 && exec 3>&- && exec \"$@\"";

fn add_all(argv: &mut Vec<OsString>, args: &[&str]) {
    argv.extend(args.iter().map(OsString::from));
}

/// `-v HOST:INSIDE:MODE`.
fn push_mount(argv: &mut Vec<OsString>, host: &Path, inside: &Path, mode: &str) {
    let mut arg = host.as_os_str().to_owned();
    arg.push(":");
    arg.push(inside.as_os_str());
    arg.push(mode);
    argv.push("-v".into());
    argv.push(arg);
}

/// `KEY=VALUE`, as `-e` takes it.
fn env_pair(mut key: OsString, value: OsString) -> OsString {
    key.push("=");
    key.push(value);
    key
}

/// Without fd 3 (Docker): the mark is a line of the command's output, written before the task runs.
const STARTED_OUTPUT_SCRIPT: &str =
    "printf '%s\\n' 'deltabench: the container started' >&2 && exec \"$@\"";
const STARTED_OUTPUT: &str = "deltabench: the container started\n";

/// Whether a wrapped command reached the task's own command: Podman's runs carry the start mark
/// on fd 3, Docker's as a line of their output (the client may print warnings before it). Any
/// end without it is the runtime's failure; a task printing the line itself only makes its own
/// failure count as one.
pub fn container_started(ended: &ProcessOutput) -> bool {
    match &ended.status {
        Some(status) => status.starts_with(b"started"),
        None => ended.output.text().contains(STARTED_OUTPUT),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(home: PathBuf) -> ContainerPolicy {
        ContainerPolicy {
            runtime: Runtime::at(PathBuf::from("/usr/bin/podman")),
            image: "localhost/x:1".into(),
            workdir: PathBuf::from("/app"),
            network: Network::None,
            home,
            readable: Vec::new(),
            writable: Vec::new(),
            read_only: Vec::new(),
            workspace_mounts: Vec::new(),
            binds: Vec::new(),
            label: "run-1".into(),
            route: None,
            limits: Limits::default(),
            keep: None,
            live: false,
        }
    }

    #[test]
    fn a_value_naming_the_workspace_names_the_workdir() {
        let policy = policy(PathBuf::from("/h"));
        let ws = Path::new("/w/ws");
        let moved = |value: &str| policy.moved_value(ws, value.into());
        assert_eq!(moved("/w/ws"), OsString::from("/app"));
        assert_eq!(moved("/w/ws/a/b"), OsString::from("/app/a/b"));
        assert_eq!(moved("/w/wsx"), OsString::from("/w/wsx"));
        assert_eq!(moved("plain"), OsString::from("plain"));
    }

    #[test]
    fn run_flags_remove_or_detach_and_map_the_model_network_to_none() {
        let mut policy = policy(PathBuf::from("/h"));
        policy.network = Network::Model;
        let text = |argv: Vec<OsString>| {
            argv.iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        };
        assert_eq!(
            text(policy.run_flags("c1", true, "1:2")),
            format!(
                "/usr/bin/podman run --rm --init --pull=never --http-proxy=false --name c1 \
                 --hostname deltabench --label {RUN_LABEL}=run-1 --network none --user 1:2"
            )
        );
        policy.live = true;
        assert!(text(policy.run_flags("c1", false, "1:2")).starts_with("/usr/bin/podman run -d "));
    }

    #[test]
    fn env_pairs_join_key_and_value() {
        assert_eq!(env_pair("K".into(), "v=w".into()), OsString::from("K=v=w"));
    }

    #[test]
    fn limits_become_the_runtimes_flags() {
        let dir = tempfile::tempdir().unwrap();
        let mut policy = policy(dir.path().join("home"));
        policy.limits = Limits {
            millicpus: Some(1500),
            memory: Some(512 << 20),
        };
        let wrapped = policy
            .wrap(dir.path(), CommandSpec::shell("true", dir.path()))
            .unwrap();
        let joined: Vec<String> = wrapped
            .argv
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let joined = joined.join(" ");
        assert!(
            joined.contains("--cpus 1.5 --memory 536870912b"),
            "{joined}"
        );
    }

    #[test]
    fn wrap_mounts_the_workspace_at_the_workdir_and_translates_its_path() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        let spec = CommandSpec::shell("make test", &ws)
            .env("DELTABENCH_WORKSPACE", &ws)
            .env("OUT", ws.join("out.txt"))
            .env("KEEP", "/etc");
        let wrapped = policy(dir.path().join("home")).wrap(&ws, spec).unwrap();
        let argv: Vec<String> = wrapped
            .argv
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let joined = argv.join(" ");
        assert_eq!(argv[0], "/usr/bin/podman");
        assert!(joined.contains("run --rm --init --pull=never --http-proxy=false"));
        assert!(joined.contains(&format!("-v {}:/app:rw -w /app", ws.display())));
        assert!(joined.contains("--label deltabench.run=run-1"));
        assert!(joined.contains("--network none"));
        assert!(joined.contains("-e DELTABENCH_WORKSPACE=/app "));
        assert!(joined.contains("-e OUT=/app/out.txt "));
        assert!(joined.contains("-e KEEP=/etc "));
        // Podman: the start mark on fd 3, closed before the task's command runs.
        assert!(
            joined.contains(" --preserve-fds 1 localhost/x:1 "),
            "{joined}"
        );
        assert!(
            joined.ends_with(
                "localhost/x:1 sh -c printf started >&3 && exec 3>&- && exec \"$@\" deltabench-started sh -c make test"
            ),
            "{joined}"
        );
        assert!(wrapped.status_fd);
        assert!(wrapped.env.is_empty());
        let cleanup = wrapped.cleanup.unwrap();
        let name = argv[argv.iter().position(|a| a == "--name").unwrap() + 1].clone();
        assert!(name.starts_with("deltabench-run-1-"), "{name}");
        assert_eq!(cleanup.last().unwrap().to_string_lossy(), name);
        assert!(dir.path().join("home").is_dir());
    }

    #[test]
    fn a_secret_stays_out_of_the_command_line_and_writable_paths_are_mounted_rw() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        let trajectory = dir.path().join("trajectory.json");
        let spec = CommandSpec::shell("true", &ws)
            .env("ANTHROPIC_API_KEY", "sk-very-secret-value")
            .env("MODEL", "m");
        let wrapped = policy(dir.path().join("home"))
            .writable(&trajectory)
            .wrap(&ws, spec)
            .unwrap();
        let joined: String = wrapped
            .argv
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ");
        assert!(!joined.contains("sk-very-secret-value"), "{joined}");
        assert!(
            joined.contains("-e ANTHROPIC_API_KEY -e MODEL=m "),
            "{joined}"
        );
        // The client passes it on from its own environment.
        assert_eq!(
            wrapped.env,
            [("ANTHROPIC_API_KEY".into(), "sk-very-secret-value".into())]
        );
        let t = trajectory.display();
        assert!(joined.contains(&format!("-v {t}:{t}:rw")), "{joined}");
    }

    #[test]
    fn docker_gets_no_podman_only_flag() {
        let dir = tempfile::tempdir().unwrap();
        let mut policy = policy(dir.path().join("home"));
        policy.runtime = Runtime::at(PathBuf::from("docker"));
        let wrapped = policy
            .wrap(dir.path(), CommandSpec::shell("true", dir.path()))
            .unwrap();
        assert!(!wrapped.argv.iter().any(|a| a == "--http-proxy=false"));
    }

    #[test]
    fn tail_keeps_the_last_non_empty_lines() {
        assert_eq!(tail("a\n\nb\nc\n\n", 2), "  b\n  c");
    }
}
