//! The one rule for what of an agent's container changes may reach the verifier (`delta:
//! container`): whatever produces the verdict comes from the task's image as built.
//!
//! Held back from the verify image, and reported as `tampered: PATH`:
//! - **the shell, the loader and start-up files**: `sh`, `bash`, `dash`, `env`, the loader's
//!   preload list, config and cache, the shells' system start-up files;
//! - **programs on `PATH`**: a program the image has in a `PATH` folder, changed or removed; a
//!   new one that shadows one of the image's (same name, earlier on `PATH`);
//! - **interpreters' libraries**: Python's whole import path (`lib/python3*` anywhere, `site-` and
//!   `dist-packages`, `.pth` files, `sitecustomize`/`usercustomize`, `/etc/python3*`), Node's
//!   `node_modules`, Perl's and Ruby's library trees;
//! - **shared libraries**: a library the image has (under `/lib`, `/usr/lib`, `/usr/local/lib`,
//!   `/lib64`, `/usr/lib64`), changed or removed;
//! - **test-runner configuration** outside the workspace: `conftest.py`, `pytest.ini` and
//!   `pytest.toml` anywhere, and `pyproject.toml`, `setup.cfg`, `tox.ini` in a folder above the
//!   workspace or the tests (pytest looks for its root there).
//!
//! Everything else is the agent's work and is carried: a config under `/etc`, a service's files,
//! a new program the tests call, data under `/var` or `/srv`. A task's `outputs:` globs carry
//! paths this rule would hold back (a package the task asks to install site-wide), and its
//! `protected:` entries starting with `/` hold back more.

use std::collections::{HashMap, HashSet};

use globset::{Glob, GlobBuilder, GlobSet, GlobSetBuilder};

use crate::workspace::{FsChange, FsChangeKind};

/// `PATH` when the image sets none (Podman's and Docker's default).
pub const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// Held back wherever they are (globs over container paths).
const ALWAYS: [&str; 32] = [
    "/bin/sh",
    "/bin/bash",
    "/bin/dash",
    "/usr/bin/sh",
    "/usr/bin/bash",
    "/usr/bin/dash",
    "/usr/bin/env",
    "/etc/ld.so.preload",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d/**",
    "/etc/ld.so.cache",
    "/etc/bash.bashrc",
    "/etc/profile",
    "/etc/profile.d/**",
    "/etc/environment",
    "/etc/python3*/**",
    "**/lib/python3*/**",
    "**/lib/python2*/**",
    "**/site-packages/**",
    "**/dist-packages/**",
    "**/*.pth",
    "**/sitecustomize.py",
    "**/usercustomize.py",
    "**/node_modules/**",
    "/usr/share/perl*/**",
    "/usr/lib/*/perl*/**",
    "/etc/perl/**",
    "/usr/lib/ruby/**",
    "/var/lib/gems/**",
    "**/conftest.py",
    "**/pytest.ini",
    "**/pytest.toml",
];

/// What acts by being there: a start-up hook or a test runner's configuration.
const HOOKS: [&str; 5] = [
    "**/*.pth",
    "**/sitecustomize.py",
    "**/usercustomize.py",
    "**/conftest.py",
    "**/pytest.*",
];

/// Interpreters' library trees, where a new file is a package installed.
const INSTALLED: [&str; 8] = [
    "**/lib/python3*/**",
    "**/lib/python2*/**",
    "**/site-packages/**",
    "**/dist-packages/**",
    "**/node_modules/**",
    "/usr/share/perl*/**",
    "/usr/lib/ruby/**",
    "/var/lib/gems/**",
];

/// Folders of the image's shared libraries: what it has there is held back when changed.
const LIBRARY_DIRS: [&str; 5] = ["/lib", "/lib64", "/usr/lib", "/usr/lib64", "/usr/local/lib"];

/// Where pytest looks for its root configuration, in a folder above what it runs.
const ROOT_CONFIGS: [&str; 5] = [
    "pyproject.toml",
    "setup.cfg",
    "tox.ini",
    ".pytest.ini",
    ".pytest.toml",
];

/// Why a change is held back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeldBack {
    /// The verifier's toolchain (this module's rule).
    Toolchain,
    /// The task's `protected:` entries.
    Protected,
    /// A program that shadows one of the image's on `PATH`.
    Shadows,
    /// A new package or module in an interpreter's library tree: not carried, but it could
    /// not have acted either (not a hook), so it is no tampering: installing a tool to work.
    Installed,
}

impl HeldBack {
    /// Whether holding it back reports the trial `tampered`.
    pub fn is_tampering(self) -> bool {
        self != Self::Installed
    }
}

/// The rule for one task, compiled.
#[derive(Debug, Clone)]
pub struct Toolchain {
    always: GlobSet,
    hooks: GlobSet,
    installed: GlobSet,
    /// The task's own container globs (`protected:` entries starting with `/`).
    protected: GlobSet,
    /// The task's `outputs:`, and `protected:` entries `!/...`: carried whatever the rule says.
    outputs: GlobSet,
    /// The folders above the workspace and the tests, where a root config counts.
    roots: HashSet<String>,
}

/// The image's `PATH` folders, in order, with the programs each holds (the image's own: not
/// what the agent added).
#[derive(Debug, Clone, Default)]
pub struct ImagePrograms {
    /// The `PATH` folders, in lookup order.
    pub path: Vec<String>,
    /// For each folder of `path`, the names of the programs the image holds in it.
    pub programs: HashMap<String, HashSet<String>>,
}

impl ImagePrograms {
    /// The folders of `path` (a `PATH` value). A folder that links to another (`/bin` to
    /// `usr/bin`) holds nothing in the export; the runtimes list changes at the real path.
    pub fn new(path: &str) -> Self {
        let mut dirs: Vec<String> = Vec::new();
        for dir in path.split(':').filter(|d| d.starts_with('/')) {
            let dir = dir.trim_end_matches('/').to_owned();
            if !dirs.contains(&dir) {
                dirs.push(dir);
            }
        }
        Self {
            path: dirs,
            programs: HashMap::new(),
        }
    }

    /// Notes `path` (a file of the image) if it is a program in a `PATH` folder.
    pub fn note(&mut self, path: &str) {
        if let Some((dir, name)) = path.rsplit_once('/')
            && self.path.iter().any(|d| d == dir)
        {
            self.programs
                .entry(dir.to_owned())
                .or_default()
                .insert(name.to_owned());
        }
    }

    /// Whether `path`, a new program, would run instead of one of the image's: the image has
    /// the same name in a `PATH` folder after this one's.
    pub fn shadowed_by(&self, path: &str) -> bool {
        let Some((dir, name)) = path.rsplit_once('/') else {
            return false;
        };
        let Some(at) = self.path.iter().position(|d| d == dir) else {
            return false;
        };
        self.path[at + 1..].iter().any(|later| {
            self.programs
                .get(later)
                .is_some_and(|names| names.contains(name))
        })
    }

    /// Whether `path` is directly in one of the `PATH` folders.
    pub fn on_path(&self, path: &str) -> bool {
        path.rsplit_once('/')
            .is_some_and(|(dir, _)| self.path.iter().any(|d| d == dir))
    }
}

fn compile(globs: &[String]) -> GlobSet {
    let mut set = GlobSetBuilder::new();
    for glob in globs {
        let glob = if glob.starts_with('/') || glob.starts_with("**") {
            glob.clone()
        } else {
            format!("/{glob}")
        };
        let built = GlobBuilder::new(&glob).literal_separator(true).build();
        // A glob that does not compile matches its own text only.
        set.add(built.unwrap_or_else(|_| Glob::new(&globset::escape(&glob)).expect("escaped")));
        // `/etc/x` also covers what is under it, as `protected:` entries always have.
        if !glob.ends_with("/**")
            && let Ok(under) = GlobBuilder::new(&format!("{glob}/**"))
                .literal_separator(true)
                .build()
        {
            set.add(under);
        }
    }
    set.build().unwrap_or_else(|_| GlobSet::empty())
}

impl Toolchain {
    /// The rule for a task: its container globs (`protected:` entries starting with `/`), what
    /// it carries whatever the rule says (`outputs:`, `protected:` entries `!/...`), and the
    /// folders its workspace and tests are at inside the container. The rule itself always
    /// applies: a task's `protected:` list replaces the workspace's defaults, not this.
    pub fn new(protected: &[String], carried: &[String], places: &[&str]) -> Self {
        let mut roots = HashSet::new();
        for place in places {
            let mut at = std::path::Path::new(place).parent();
            while let Some(dir) = at {
                roots.insert(dir.to_string_lossy().trim_end_matches('/').to_owned());
                at = dir.parent();
            }
        }
        Self {
            always: compile(&ALWAYS.map(String::from)),
            hooks: compile(&HOOKS.map(String::from)),
            installed: compile(&INSTALLED.map(String::from)),
            protected: compile(protected),
            outputs: compile(carried),
            roots,
        }
    }

    /// Whether a change is held back, before the image's programs are known. `folders` are
    /// those holding other changes ([`folders_of`]): a folder changes when a file in it does,
    /// which is not a change of its own.
    pub fn held_back(&self, change: &FsChange, folders: &HashSet<String>) -> Option<HeldBack> {
        let path = change.path.trim_end_matches('/');
        if self.outputs.is_match(path)
            || (change.kind != FsChangeKind::Deleted && folders.contains(path))
        {
            return None;
        }
        if self.protected.is_match(path) {
            return Some(HeldBack::Protected);
        }
        let in_the_image = change.kind != FsChangeKind::Added;
        let root_config = path
            .rsplit_once('/')
            .is_some_and(|(dir, name)| ROOT_CONFIGS.contains(&name) && self.roots.contains(dir));
        let library = in_the_image && LIBRARY_DIRS.iter().any(|d| under(path, d));
        if root_config || library || self.hooks.is_match(path) {
            return Some(HeldBack::Toolchain);
        }
        match (self.always.is_match(path), in_the_image) {
            (false, _) => None,
            (true, false) if self.installed.is_match(path) => Some(HeldBack::Installed),
            (true, _) => Some(HeldBack::Toolchain),
        }
    }

    /// Whether a change is held back, now that the image's `PATH` programs are known.
    pub fn held_back_given(
        &self,
        change: &FsChange,
        folders: &HashSet<String>,
        image: &ImagePrograms,
    ) -> Option<HeldBack> {
        if let Some(why) = self.held_back(change, folders) {
            return Some(why);
        }
        let path = change.path.trim_end_matches('/');
        if self.outputs.is_match(path)
            || !image.on_path(path)
            || (change.kind != FsChangeKind::Deleted && folders.contains(path))
        {
            return None;
        }
        match change.kind {
            FsChangeKind::Added => image.shadowed_by(path).then_some(HeldBack::Shadows),
            // A program of the image's, changed or removed.
            _ => Some(HeldBack::Toolchain),
        }
    }
}

/// The folders that hold other changes of `changes`.
pub fn folders_of(changes: &[FsChange]) -> HashSet<String> {
    let mut folders = HashSet::new();
    for change in changes {
        let mut at = std::path::Path::new(change.path.trim_end_matches('/')).parent();
        while let Some(dir) = at.filter(|d| d.as_os_str().len() > 1) {
            if !folders.insert(dir.to_string_lossy().into_owned()) {
                break;
            }
            at = dir.parent();
        }
    }
    folders
}

fn under(path: &str, dir: &str) -> bool {
    path.strip_prefix(dir)
        .is_some_and(|rest| rest.starts_with('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(kind: FsChangeKind, path: &str) -> FsChange {
        FsChange {
            kind,
            path: path.into(),
        }
    }

    fn image() -> ImagePrograms {
        let mut image = ImagePrograms::new(DEFAULT_PATH);
        for program in [
            "/usr/bin/awk",
            "/usr/bin/pytest",
            "/usr/bin/tr",
            "/usr/bin/python3",
        ] {
            image.note(program);
        }
        image
    }

    #[test]
    fn the_verifiers_toolchain_is_held_back_and_the_tasks_product_is_carried() {
        let rule = Toolchain::new(&[], &[], &["/app", "/tests"]);
        let image = image();
        use FsChangeKind::*;
        let folders = folders_of(&[
            change(Added, "/usr/local/bin/mytool"),
            change(Added, "/usr/lib/python3/dist-packages/x.py"),
            change(Added, "/usr/lib/x86_64-linux-gnu/libnew.so.1"),
        ]);
        assert!(folders.contains("/usr/lib/python3") && folders.contains("/usr/local/bin"));
        for (kind, path, held) in [
            (Added, "/usr/local/bin/awk", Some(HeldBack::Shadows)),
            (Added, "/usr/local/bin/pytest", Some(HeldBack::Shadows)),
            (Changed, "/usr/bin/tr", Some(HeldBack::Toolchain)),
            (Deleted, "/usr/bin/awk", Some(HeldBack::Toolchain)),
            (
                Changed,
                "/usr/lib/python3/dist-packages/iniconfig/__init__.py",
                Some(HeldBack::Toolchain),
            ),
            (
                Added,
                "/usr/local/lib/python3.11/dist-packages/evil.pth",
                Some(HeldBack::Toolchain),
            ),
            (
                Added,
                "/usr/local/lib/python3.11/dist-packages/requests/__init__.py",
                Some(HeldBack::Installed),
            ),
            (Added, "/conftest.py", Some(HeldBack::Toolchain)),
            (Added, "/pyproject.toml", Some(HeldBack::Toolchain)),
            (Added, "/etc/ld.so.preload", Some(HeldBack::Toolchain)),
            (
                Changed,
                "/usr/lib/x86_64-linux-gnu/libc.so.6",
                Some(HeldBack::Toolchain),
            ),
            (Added, "/usr/bin/sh", Some(HeldBack::Toolchain)),
            // The task's product.
            (Added, "/usr/local/bin/mytool", None),
            (Added, "/etc/nginx/conf.d/site.conf", None),
            (Changed, "/etc/app.conf", None),
            (Added, "/usr/lib/x86_64-linux-gnu/libnew.so.1", None),
            (Added, "/srv/data/pyproject.toml", None),
            // Folders holding other changes.
            (Changed, "/usr/local/bin", None),
            (Changed, "/usr/lib/python3", None),
            (Changed, "/usr/lib/python3/dist-packages", None),
            (Changed, "/usr/lib/x86_64-linux-gnu", None),
            // The last folder on PATH: nothing later to shadow.
            (Added, "/usr/bin/newtool", None),
        ] {
            assert_eq!(
                rule.held_back_given(&change(kind, path), &folders, &image),
                held,
                "{kind:?} {path}"
            );
        }
    }

    #[test]
    fn outputs_carry_and_protected_entries_hold_back() {
        let rule = Toolchain::new(
            &["/etc/secret.conf".into()],
            &["/usr/local/lib/python3*/dist-packages/mypkg/**".into()],
            &["/app"],
        );
        let image = image();
        let held = |path| {
            rule.held_back_given(&change(FsChangeKind::Added, path), &HashSet::new(), &image)
        };
        assert_eq!(
            held("/usr/local/lib/python3.11/dist-packages/mypkg/__init__.py"),
            None
        );
        assert_eq!(
            held("/usr/local/lib/python3.11/dist-packages/other/x.py"),
            Some(HeldBack::Installed)
        );
        assert_eq!(held("/etc/secret.conf"), Some(HeldBack::Protected));
    }
}
