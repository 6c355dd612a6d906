//! `sandbox` isolation: a `worktree` workspace whose agent and verify commands run in bubblewrap.
//!
//! The sandbox is an allow-list. Its root is an empty read-only tmpfs, and only these host paths
//! are mounted into it:
//! - the system's read-only folders: `/usr`, `/bin`, `/sbin`, `/lib*` (as the symlinks they are
//!   on a merged-usr host) and `/etc`, minus what of `/etc` others may not read (shadow files,
//!   ssh host keys, `/etc/ssl/private`);
//! - the toolchains on the command's `PATH`, read-only ([`SandboxPolicy::wrap`] says which);
//! - the paths the caller makes [`readable`](SandboxPolicy::readable): the agent's program, its
//!   instruction file, the git objects the workspace borrows;
//! - the workspace and a per-command home, the only writable host folders;
//! - a fresh `/dev`, `/proc` and `/tmp`.
//!
//! Nothing else of the host is there: no other workspace or run folder (a neighbour's diff holds
//! the answer), no `/home`, `/root`, `/run`, `/var`, `/mnt`, `/media`, `/srv`, `/opt`, `/dev/shm`
//! or `/sys`, so no host Unix socket either. Every namespace is unshared (the network too: none,
//! or under [`Network::Model`] only the model gateway, unless the agent asks for `network:
//! host`), ALL capabilities are dropped, the command gets a new session
//! and dies with its parent. [`SandboxPolicy::hiding`] masks paths again where an exposed tree
//! covers them (a CLI installed in the suite's folder must not expose the suite's solutions).
//!
//! Why `--cap-drop ALL`: a root-run bwrap otherwise keeps its capabilities inside, and the agent
//! could unmount what masks a secret.

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::{Mutex, OnceLock};

use super::model_route::{ModelRoute, SANDBOX_SOCKET_DIR};
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
    /// Only deltabench's model gateway, at its usual address ([`super::ModelRoute`]): the
    /// default for an agent whose model calls pass the gateway.
    Model,
}

impl Network {
    /// True for no network at all.
    pub fn is_none(&self) -> bool {
        *self == Self::None
    }

    /// An agent's network in the sandbox: the one it set, else `model` when its calls pass the
    /// gateway, else `none`.
    pub fn for_agent(configured: Option<Network>, through_gateway: bool) -> Network {
        match configured {
            Some(network) => network,
            None if through_gateway => Network::Model,
            None => Network::None,
        }
    }

    /// An agent's network in its task's container: `model` when the agent sets it; else
    /// `host` when the environment or the agent says so; else what it set, or `model` when its
    /// calls pass the gateway.
    pub fn in_container(
        environment: Network,
        agent: Option<Network>,
        through_gateway: bool,
    ) -> Network {
        match (environment, agent) {
            (_, Some(Network::Model)) => Network::Model,
            (Network::Host, _) | (_, Some(Network::Host)) => Network::Host,
            _ => Network::for_agent(agent, through_gateway),
        }
    }
}

impl fmt::Display for Network {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::None => "none",
            Self::Host => "host",
            Self::Model => "model",
        })
    }
}

/// A `network:` value that is neither `none` nor `host`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown network mode: '{value}'. Valid modes: none, host, model")]
pub struct UnknownNetworkError {
    /// The value given.
    pub value: String,
}

impl FromStr for Network {
    type Err = UnknownNetworkError;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        match value {
            "none" => Ok(Self::None),
            "host" => Ok(Self::Host),
            "model" => Ok(Self::Model),
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
    /// What the check found: `bwrap` cannot start, or cannot build the sandbox.
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
    let mut args = Args::default();
    args.flags(&["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]);
    args.system();
    args.seal();
    args.flags(&["--unshare-all", "--cap-drop", "ALL"]);
    args.flags(&["--die-with-parent", "--new-session", "--", "true"]);
    let trial = std::process::Command::new("bwrap")
        .args(&args.argv)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| unavailable(format!("`bwrap` cannot be started ({e})")))?;
    if !trial.status.success() {
        return Err(unavailable(format!(
            "a trial sandbox (`bwrap --ro-bind /usr /usr ... --unshare-all ... true`) failed \
             here: {}",
            String::from_utf8_lossy(&trial.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&version.stdout).trim().to_owned())
}

/// The host's system folders, mounted read-only (or recreated as the symlinks they are).
const SYSTEM_DIRS: [&str; 7] = [
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
];

/// Secrets of `/etc` masked whatever their mode says (ssh host keys too).
const ETC_SECRETS: [&str; 6] = [
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/ssl/private",
    "/etc/security/opasswd",
];

/// Files at the top of an exposed toolchain that hold a login (cargo's registry token).
const TOOLCHAIN_SECRETS: [&str; 2] = ["credentials", "credentials.toml"];

/// How to run one kind of command (the agent, or the verify command) in the sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxPolicy {
    /// A host directory, created on use, that becomes the command's empty, writable `$HOME`.
    pub home: PathBuf,
    /// The network the command gets.
    pub network: Network,
    /// Host paths masked (emptied) where an exposed tree would show them.
    pub hidden: Vec<PathBuf>,
    /// Host paths exposed read-only.
    pub readable: Vec<PathBuf>,
    /// Files inside the workspace mounted read-only over it (the hidden tests while verify runs).
    pub read_only: Vec<PathBuf>,
    /// How the command reaches the gateway under [`Network::Model`].
    pub route: Option<ModelRoute>,
}

/// The object store of the git repository `repo` (bare or not), then the stores it borrows
/// from (its alternates, as written): what a workspace cloned from `repo` reads objects from.
pub(super) fn object_stores(repo: &Path) -> (PathBuf, Vec<PathBuf>) {
    let objects = match repo.join(".git/objects") {
        nested if nested.is_dir() => nested,
        _ => repo.join("objects"),
    };
    let alternates = std::fs::read_to_string(objects.join("info/alternates"));
    let borrowed = alternates
        .iter()
        .flat_map(|text| text.lines())
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(|line| objects.join(line))
        .collect();
    (objects, borrowed)
}

impl SandboxPolicy {
    /// A policy with `home` as `$HOME`, no network, and nothing hidden or exposed beyond the
    /// workspace.
    pub fn new(home: PathBuf) -> Self {
        Self {
            home,
            network: Network::None,
            hidden: Vec::new(),
            readable: Vec::new(),
            read_only: Vec::new(),
            route: None,
        }
    }

    /// Masks `paths` (e.g. the run's folders, the suite's solutions) wherever a tree the sandbox
    /// exposes covers them; a [`readable`](Self::readable) path inside one stays readable. `/`
    /// is never masked.
    pub fn hiding(mut self, paths: impl IntoIterator<Item = PathBuf>) -> Self {
        self.hidden
            .extend(paths.into_iter().filter(|d| d.parent().is_some()));
        self
    }

    /// Runs with `network` instead.
    pub fn network(mut self, network: Network) -> Self {
        self.network = network;
        self
    }

    /// Where the gateway is, for [`Network::Model`] (the other networks ignore it).
    pub fn model_route(mut self, route: ModelRoute) -> Self {
        self.route = Some(route);
        self
    }

    /// Exposes `path` read-only (it must exist when the command starts). A folder that holds the
    /// workspace or the home is not exposed: it would show the neighbours' workspaces too.
    pub fn readable(mut self, path: impl Into<PathBuf>) -> Self {
        self.readable.push(path.into());
        self
    }

    /// Keeps the object store of the git repository `repo` (bare or not) readable, and the
    /// stores it borrows from in turn: a workspace cloned from `repo` reads objects there.
    /// Taken from `repo`, never from the workspace, whose alternates file the agent can rewrite.
    pub fn borrowing_objects_of(mut self, repo: &Path) -> Self {
        let (own, borrowed) = object_stores(repo);
        self.readable.extend(borrowed);
        self.readable(own)
    }

    /// `spec` rewritten to run inside bubblewrap with `workspace` and the home as its only
    /// writable host folders. Creates the home directory.
    ///
    /// Besides the system folders and the readable paths, the toolchains on the `PATH` the
    /// command will see (its own `PATH` variable, else deltabench's) are exposed read-only, so a
    /// verify command's `python3` or `cargo` works wherever it is installed:
    /// - each `PATH` folder, and the real folder of each symlink in it (a `/usr/local/bin/node`
    ///   that links into `/opt/node/bin`);
    /// - for such a folder named `bin`, `sbin` or `shims` (or a `node_modules/.bin`), its whole
    ///   installation prefix, the parent (`~/.cargo`, `~/.pyenv`, `/opt/node`, a virtualenv),
    ///   since launchers and shims load their libraries from there; and the Python a virtualenv
    ///   was made from. A prefix is not used when it is `/`, the home folder or one of its
    ///   parents, a folder anyone may write to (`/tmp`), or one that holds the workspace or the
    ///   sandbox's home: then only the folder itself is. `~/.local` gives only `bin` and `lib`:
    ///   its `share` and `state` hold applications' data and logins;
    /// - for a rustup install (a `rustup` on `PATH`), its `RUSTUP_HOME` and `CARGO_HOME`, which
    ///   are also set in the command's environment (unless it sets them), since both default to
    ///   folders under `$HOME`, which inside is the sandbox's own.
    ///
    /// Files named `credentials` or `credentials.toml` at the top of an exposed prefix are
    /// masked.
    pub fn wrap(&self, workspace: &Path, mut spec: CommandSpec) -> std::io::Result<CommandSpec> {
        let route = ModelRoute::needed(self.network, self.route.as_ref())?;
        std::fs::create_dir_all(&self.home)?;
        let var = |key: &str| -> Option<OsString> {
            match spec.env.iter().rev().find(|(k, _)| k == key) {
                Some((_, value)) => Some(value.clone()),
                None if spec.clear_env => None,
                None => std::env::var_os(key),
            }
        };
        let real_home = real_home();
        let mut private = vec![workspace.to_owned(), self.home.clone()];
        private.extend(real_home.clone());
        let tools = Toolchains::on(var("PATH"), &var, real_home.as_deref(), &private);

        let mut args = Args::default();
        args.flags(&["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]);
        let mut exposed = args.system();
        args.flags(&["--ro-bind", "/etc", "/etc"]);
        exposed.push(PathBuf::from("/etc"));
        // A resolv.conf that links into /run (systemd-resolved): that one file, for `host`.
        if let Ok(resolv) = Path::new("/etc/resolv.conf").canonicalize()
            && !is_system(&resolv)
        {
            args.ro_bind(&resolv);
        }

        self.expose_trees(&mut args, exposed, &tools, route, &private);
        self.bind_own(&mut args, workspace, route);
        args.flags(&["--setenv", "HOME"]).path(&self.home);
        args.flags(&["--setenv", "TMPDIR", "/tmp"]);
        for (key, value) in &tools.env {
            if var(key).is_none() {
                args.flags(&["--setenv", key]).path(value);
            }
        }
        args.flags(&["--unshare-all"]);
        if self.network == Network::Host {
            args.flags(&["--share-net"]);
        }
        args.flags(&["--cap-drop", "ALL", "--die-with-parent", "--new-session"]);
        // bubblewrap reports the child's start there: how a failed sandbox is told apart from
        // an agent that exits 1 (see `sandbox_started`).
        args.flags(&["--json-status-fd", "3"]);
        args.flags(&["--chdir"]).path(workspace).flags(&["--"]);
        let mut argv = vec![OsString::from("bwrap")];
        argv.append(&mut args.argv);
        if let Some(route) = route {
            argv.extend(route.forwarder_argv());
        }
        argv.append(&mut spec.argv);
        spec.argv = argv;
        spec.status_fd = true;
        Ok(spec)
    }

    /// The toolchains' and readable trees, read-only, with the hidden paths inside them
    /// masked and the machine's secrets masked after them all.
    fn expose_trees(
        &self,
        args: &mut Args,
        mut exposed: Vec<PathBuf>,
        tools: &Toolchains,
        route: Option<&ModelRoute>,
        private: &[PathBuf],
    ) {
        let readable = self
            .readable
            .iter()
            .chain(route.map(|route| &route.forwarder))
            .filter(|path| path.is_absolute() && path.exists())
            .filter(|path| !private.iter().any(|p| p.starts_with(path)));
        let trees: Vec<&PathBuf> = tools.roots.iter().chain(readable).collect();
        exposed.extend(trees.iter().map(|tree| tree.to_path_buf()));
        let masks = self
            .hidden
            .iter()
            .flat_map(|path| [path.clone(), path.canonicalize().unwrap_or_default()])
            .filter(|path| path.parent().is_some() && path.exists())
            .filter(|path| exposed.iter().any(|tree| path.starts_with(tree)))
            .filter(|path| !trees.contains(&path));
        for (path, expose) in &mount_order(&trees, masks) {
            if *expose {
                args.ro_bind(path);
            } else {
                args.mask(path);
            }
        }
        // After every tree: a readable path never uncovers a secret.
        for secret in etc_secrets().iter().chain(&tools.masked) {
            args.mask(secret);
        }
    }

    /// The model route's socket folder, then the command's own folders, writable (its
    /// read-only files over the workspace), last so nothing is mounted over them; sealed.
    fn bind_own(&self, args: &mut Args, workspace: &Path, route: Option<&ModelRoute>) {
        if let Some(route) = route {
            let folder = route.socket.parent().unwrap_or(Path::new("/"));
            args.flags(&["--ro-bind"])
                .path(folder)
                .path(SANDBOX_SOCKET_DIR);
        }
        args.flags(&["--bind"]).path(workspace).path(workspace);
        for file in self
            .read_only
            .iter()
            .filter(|f| f.starts_with(workspace) && f.exists())
        {
            args.flags(&["--ro-bind"]).path(file).path(file);
        }
        args.flags(&["--bind"]).path(&self.home).path(&self.home);
        args.seal();
    }
}

/// Trees to expose (`true`) and paths to mask, parents first, so the deeper mount wins: a
/// hidden folder inside an exposed tree is masked, a readable path inside a hidden folder
/// (the objects in the cache) shows.
fn mount_order(trees: &[&PathBuf], masks: impl Iterator<Item = PathBuf>) -> Vec<(PathBuf, bool)> {
    let mut mounts: Vec<(PathBuf, bool)> = trees
        .iter()
        .map(|tree| (tree.to_path_buf(), true))
        .chain(masks.map(|path| (path, false)))
        .collect();
    mounts.sort_by_key(|(path, _)| (path.components().count(), path.clone()));
    mounts.dedup();
    mounts
}

/// bwrap's arguments, built up mount by mount.
#[derive(Default)]
struct Args {
    argv: Vec<OsString>,
    /// Masking tmpfs folders, made read-only once nothing more is mounted inside them.
    masks: Vec<PathBuf>,
}

impl Args {
    fn flags(&mut self, flags: &[&str]) -> &mut Self {
        self.argv.extend(flags.iter().map(OsString::from));
        self
    }

    fn path(&mut self, path: impl AsRef<std::ffi::OsStr>) -> &mut Self {
        self.argv.push(path.as_ref().to_owned());
        self
    }

    fn ro_bind(&mut self, path: &Path) {
        self.flags(&["--ro-bind"]).path(path).path(path);
    }

    /// Empties `path` inside: an empty read-only folder, or an empty file.
    fn mask(&mut self, path: &Path) {
        if path.is_dir() {
            self.flags(&["--tmpfs"]).path(path);
            self.masks.push(path.to_owned());
        } else {
            self.flags(&["--ro-bind", "/dev/null"]).path(path);
        }
    }

    /// Makes the root and the masks read-only: after the last mount, since a readable path, the
    /// workspace or the home may lie inside a mask and need a mount point made there.
    fn seal(&mut self) {
        self.flags(&["--remount-ro", "/"]);
        for mask in std::mem::take(&mut self.masks) {
            self.flags(&["--remount-ro"]).path(mask);
        }
    }

    /// Mounts the system folders that exist here; returns the real folders among them.
    fn system(&mut self) -> Vec<PathBuf> {
        let mut real = Vec::new();
        for dir in SYSTEM_DIRS.map(Path::new) {
            let Ok(meta) = dir.symlink_metadata() else {
                continue;
            };
            if meta.is_symlink() {
                if let Ok(target) = std::fs::read_link(dir) {
                    self.flags(&["--symlink"]).path(target).path(dir);
                }
            } else if meta.is_dir() {
                self.ro_bind(dir);
                real.push(dir.to_owned());
            }
        }
        real
    }
}

/// Whether `path` (a real path) lies in the system folders every sandbox exposes.
fn is_system(path: &Path) -> bool {
    SYSTEM_DIRS
        .iter()
        .chain(&["/etc"])
        .any(|dir| path.starts_with(dir))
}

/// What of `/etc` others may not read (a folder whole), and the well-known secrets: masked.
fn etc_secrets() -> &'static [PathBuf] {
    static SECRETS: OnceLock<Vec<PathBuf>> = OnceLock::new();
    SECRETS.get_or_init(|| {
        let mut secrets: Vec<PathBuf> = ETC_SECRETS.iter().map(PathBuf::from).collect();
        let ssh = std::fs::read_dir("/etc/ssh")
            .into_iter()
            .flatten()
            .flatten();
        secrets.extend(
            ssh.map(|entry| entry.path())
                .filter(|path| path.to_string_lossy().ends_with("_key")),
        );
        unreadable_under(Path::new("/etc"), &mut secrets);
        secrets.retain(|path| path.symlink_metadata().is_ok_and(|m| !m.is_symlink()));
        secrets.sort();
        secrets.dedup();
        // What lies inside a masked folder goes with it (and is no mount point any more).
        let folders: Vec<PathBuf> = secrets.iter().filter(|p| p.is_dir()).cloned().collect();
        secrets.retain(|path| !folders.iter().any(|f| path != f && path.starts_with(f)));
        secrets
    })
}

/// `DirEntry::metadata` does not follow symlinks: a link is judged by its target on its own.
fn unreadable_under(dir: &Path, found: &mut Vec<PathBuf>) {
    use std::os::unix::fs::PermissionsExt;
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let Ok(meta) = entry.metadata() else {
            continue;
        };
        let mode = meta.permissions().mode();
        if meta.is_dir() {
            if mode & 0o005 != 0o005 {
                found.push(entry.path());
            } else {
                unreadable_under(&entry.path(), found);
            }
        } else if !meta.is_symlink() && mode & 0o004 == 0 {
            found.push(entry.path());
        }
    }
}

/// What the programs on a `PATH` need inside: the trees to expose, the login files in them to
/// mask, and the variables that point the programs at their installation.
#[derive(Debug, Default)]
struct Toolchains {
    roots: Vec<PathBuf>,
    masked: Vec<PathBuf>,
    env: Vec<(String, PathBuf)>,
}

impl Toolchains {
    /// See [`SandboxPolicy::wrap`]. No exposed tree may hold a `private` path.
    fn on(
        path: Option<OsString>,
        var: &dyn Fn(&str) -> Option<OsString>,
        real_home: Option<&Path>,
        private: &[PathBuf],
    ) -> Self {
        let mut tools = Self::default();
        let Some(path) = path else {
            return tools;
        };
        for dir in program_dirs(&path) {
            if !is_system(&dir) {
                tools.add_prefix_of(&dir, private);
            }
            let rustup = dir.join("rustup");
            if rustup.is_file() && !is_system(&rustup) {
                let homes = [
                    ("RUSTUP_HOME", real_home.map(|home| home.join(".rustup"))),
                    ("CARGO_HOME", dir.parent().map(Path::to_owned)),
                ];
                for (key, default) in homes {
                    let home = var(key).map(PathBuf::from).or(default);
                    if let Some(home) = home.filter(|home| home.is_dir())
                        && tools.add(&home, private)
                    {
                        tools.env.push((key.to_owned(), home));
                    }
                }
            }
        }
        for root in tools.roots.clone() {
            // A virtualenv's interpreter links to the Python it was made from.
            if let Some(python) = venv_home(&root) {
                tools.add_prefix_of(&python, private);
            }
        }
        // A tree inside another one is there already (`~/.pyenv/libexec` in `~/.pyenv`).
        tools.masked.sort();
        tools.masked.dedup();
        tools.roots.sort();
        let roots = std::mem::take(&mut tools.roots);
        for root in roots {
            if !tools.roots.iter().any(|kept| root.starts_with(kept)) {
                tools.roots.push(root);
            }
        }
        tools.env.dedup();
        tools
    }

    /// Exposes `dir`'s installation prefix (see [`SandboxPolicy::wrap`]), or `dir` alone.
    fn add_prefix_of(&mut self, dir: &Path, private: &[PathBuf]) {
        let name = dir.file_name().unwrap_or_default();
        let parent = dir.parent().unwrap_or(Path::new("/"));
        let binaries = ["bin", "sbin", "shims"].iter().any(|n| name == *n)
            || (name == ".bin" && parent.file_name().is_some_and(|n| n == "node_modules"));
        if binaries && parent.file_name().is_some_and(|n| n == ".local") {
            self.add(dir, private);
            self.add(&parent.join("lib"), private);
        } else if !(binaries && self.add(parent, private)) {
            self.add(dir, private);
        }
    }

    /// Exposes `tree` unless it is `/`, open to anyone's writes, or holds a private path.
    fn add(&mut self, tree: &Path, private: &[PathBuf]) -> bool {
        use std::os::unix::fs::PermissionsExt;
        let usable = tree.is_absolute()
            && tree.parent().is_some()
            && std::fs::metadata(tree)
                .is_ok_and(|m| m.is_dir() && m.permissions().mode() & 0o002 == 0)
            && !private.iter().any(|p| p.starts_with(tree));
        if usable {
            self.roots.push(tree.to_owned());
            self.masked.extend(
                TOOLCHAIN_SECRETS
                    .iter()
                    .map(|name| tree.join(name))
                    .filter(|file| file.is_file()),
            );
        }
        usable
    }
}

/// The folders a `PATH`'s programs live in: each entry as written and as its real path, and the
/// real folder of each symlink in it. Read once per `PATH` value.
fn program_dirs(path: &std::ffi::OsStr) -> Vec<PathBuf> {
    static SEEN: Mutex<Vec<(OsString, Vec<PathBuf>)>> = Mutex::new(Vec::new());
    let mut seen = SEEN.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some((_, dirs)) = seen.iter().find(|(p, _)| p == path) {
        return dirs.clone();
    }
    let mut dirs = Vec::new();
    for entry in std::env::split_paths(path).filter(|d| d.is_absolute() && d.is_dir()) {
        let links = std::fs::read_dir(&entry).into_iter().flatten().flatten();
        for link in links.filter(|l| l.file_type().is_ok_and(|t| t.is_symlink())) {
            let target = link.path().canonicalize();
            dirs.extend(target.ok().and_then(|t| t.parent().map(Path::to_owned)));
        }
        dirs.extend(entry.canonicalize().ok());
        dirs.push(entry);
    }
    dirs.sort();
    dirs.dedup();
    seen.push((path.to_owned(), dirs.clone()));
    dirs
}

/// The bin folder of the Python a virtualenv at `root` was made from (`home =` in its
/// `pyvenv.cfg`).
fn venv_home(root: &Path) -> Option<PathBuf> {
    let cfg = std::fs::read_to_string(root.join("pyvenv.cfg")).ok()?;
    cfg.lines()
        .filter_map(|line| line.split_once('='))
        .find(|(key, _)| key.trim() == "home")
        .map(|(_, value)| PathBuf::from(value.trim()))
        .filter(|home| home.is_absolute())
}

/// The user's real home, when it is a directory other than `/`.
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
    fn mounts_go_parents_first_and_once() {
        let (usr, cache) = (
            PathBuf::from("/usr"),
            PathBuf::from("/home/u/.cache/x/objects"),
        );
        let masks = [
            PathBuf::from("/home/u/.cache"),
            PathBuf::from("/usr/local/secret"),
            PathBuf::from("/home/u/.cache"),
        ];
        let order = mount_order(&[&cache, &usr], masks.into_iter());
        assert_eq!(
            order,
            [
                (PathBuf::from("/usr"), true),
                (PathBuf::from("/home/u/.cache"), false),
                (PathBuf::from("/usr/local/secret"), false),
                (PathBuf::from("/home/u/.cache/x/objects"), true),
            ]
        );
    }

    #[test]
    fn network_parses_and_names_the_valid_set() {
        assert_eq!("none".parse(), Ok(Network::None));
        assert_eq!("host".parse(), Ok(Network::Host));
        let err = "bridge".parse::<Network>().unwrap_err().to_string();
        assert_eq!(
            err,
            "unknown network mode: 'bridge'. Valid modes: none, host, model"
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

    fn argv(spec: &CommandSpec) -> Vec<String> {
        spec.argv
            .iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    /// Whether `words` appear in a row in `argv`.
    fn has(argv: &[String], words: &[&str]) -> bool {
        argv.windows(words.len()).any(|w| w == words)
    }

    /// An executable `dir/rel`.
    fn program(dir: &Path, rel: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    #[test]
    fn a_path_folder_brings_its_installation_but_never_the_home_or_the_workspace() {
        use std::os::unix::fs::PermissionsExt;
        let tmp = tempfile::tempdir().unwrap();
        let t = tmp.path().canonicalize().unwrap();
        let home = t.join("home");
        program(&t, "opt/tool/bin/tool");
        program(&home, "bin/mine");
        program(&home, ".local/bin/user-tool");
        std::fs::create_dir_all(home.join(".local/lib/python3/site-packages")).unwrap();
        std::fs::create_dir_all(home.join(".local/share/app")).unwrap();
        program(&t, "node/node_modules/.bin/cli");
        // A link into another installation, and a virtualenv made from a third one.
        let real = program(&t, "real/bin/linked");
        std::fs::create_dir_all(t.join("links")).unwrap();
        std::os::unix::fs::symlink(&real, t.join("links/linked")).unwrap();
        program(&t, "python/bin/python3");
        program(&t, "venv/bin/tool");
        let cfg = format!("home = {}\n", t.join("python/bin").display());
        std::fs::write(t.join("venv/pyvenv.cfg"), cfg).unwrap();
        // A prefix holding the workspace, and one anyone may write to.
        program(&t, "work/bin/w");
        std::fs::create_dir_all(t.join("work/ws")).unwrap();
        program(&t, "shared/bin/s");
        std::fs::set_permissions(t.join("shared"), std::fs::Permissions::from_mode(0o1777))
            .unwrap();
        let path = std::env::join_paths(
            [
                "opt/tool/bin",
                "home/bin",
                "home/.local/bin",
                "node/node_modules/.bin",
                "links",
                "venv/bin",
                "work/bin",
                "shared/bin",
            ]
            .map(|dir| t.join(dir)),
        )
        .unwrap();
        let private = [t.join("work/ws"), t.join("sandbox-home"), home.clone()];
        let tools = Toolchains::on(Some(path), &|_| None, Some(&home), &private);
        let expected: Vec<PathBuf> = [
            "home/.local/bin",
            "home/.local/lib",
            "home/bin",
            "links",
            "node/node_modules",
            "opt/tool",
            "python",
            "real",
            "shared/bin",
            "venv",
            "work/bin",
        ]
        .iter()
        .map(|dir| t.join(dir))
        .collect();
        assert_eq!(tools.roots, expected);
        assert!(tools.env.is_empty() && tools.masked.is_empty());
    }

    #[test]
    fn a_rustup_install_brings_its_homes_and_sets_them_but_masks_the_registry_token() {
        let tmp = tempfile::tempdir().unwrap();
        let t = tmp.path().canonicalize().unwrap();
        program(&t, "cargo/bin/rustup");
        std::fs::write(t.join("cargo/credentials.toml"), "token").unwrap();
        std::fs::create_dir_all(t.join(".rustup/toolchains")).unwrap();
        let path = t.join("cargo/bin").into_os_string();
        let tools = Toolchains::on(Some(path), &|_| None, Some(&t), std::slice::from_ref(&t));
        assert_eq!(tools.roots, [t.join(".rustup"), t.join("cargo")]);
        assert_eq!(
            tools.env,
            [
                ("RUSTUP_HOME".to_owned(), t.join(".rustup")),
                ("CARGO_HOME".to_owned(), t.join("cargo"))
            ]
        );
        assert_eq!(tools.masked, [t.join("cargo/credentials.toml")]);
    }

    #[test]
    fn wrap_exposes_no_root_and_masks_hidden_paths_only_under_exposed_trees() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().canonicalize().unwrap();
        let ws = d.join("ws");
        std::fs::create_dir_all(&ws).unwrap();
        std::fs::create_dir_all(d.join("suite/sol")).unwrap();
        std::fs::create_dir_all(d.join("elsewhere")).unwrap();
        // A CLI installed in the suite's folder exposes that folder; its solutions stay masked.
        let policy = SandboxPolicy::new(d.join("home"))
            .readable(d.join("suite"))
            .readable(&d)
            .hiding([d.join("suite/sol"), d.join("elsewhere")]);
        let spec = CommandSpec::shell("true", &ws).env("PATH", "/usr/bin:/bin");
        let argv = argv(&policy.wrap(&ws, spec).unwrap());
        let path = |p: &Path| p.display().to_string();
        assert!(!has(&argv, &["--ro-bind", "/", "/"]), "{argv:?}");
        assert!(has(&argv, &["--remount-ro", "/"]), "{argv:?}");
        let suite = path(&d.join("suite"));
        assert!(has(&argv, &["--ro-bind", &suite, &suite]), "{argv:?}");
        assert!(
            has(&argv, &["--tmpfs", &path(&d.join("suite/sol"))]),
            "{argv:?}"
        );
        assert!(!argv.contains(&path(&d.join("elsewhere"))), "{argv:?}");
        // A folder holding the workspace would show its neighbours.
        assert!(!argv.contains(&path(&d)), "{argv:?}");
        if Path::new("/etc/shadow").exists() {
            assert!(
                has(&argv, &["--ro-bind", "/dev/null", "/etc/shadow"]),
                "{argv:?}"
            );
        }
    }
}
