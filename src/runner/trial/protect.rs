//! Protected paths: what the agent must not modify.
//!
//! By default: the paths the hidden tests write, the `__init__.py` of their packages, and the
//! test infrastructure a runner loads before or around the tests (`conftest.py`, `pytest.ini`,
//! `sitecustomize.py`, `*.pth`, a module that shadows the runner, cargo's `.cargo/` config, a
//! jest or vitest config, and the test-runner sections of `pyproject.toml`, `setup.cfg`,
//! `tox.ini` and `package.json`). A task's `protected:` replaces the list; the entry
//! `defaults` brings the defaults back in, and an entry starting with `!` takes paths out.
//!
//! The hidden tests are copied over the verify workspace whatever the agent did, so editing
//! them cannot change the verdict directly; the flag records the attempt and fails the trial
//! under every metric.

use std::io;
use std::sync::LazyLock;

use regex::Regex;

use crate::delta::changed_paths;
use crate::delta::toolchain::Toolchain;
use crate::workspace::Overlay;

/// Infrastructure protected whole, at any depth or at the root.
///
/// Bytecode and distribution metadata (`*.dist-info`, `*.egg-info`) are not here: an honest
/// run of the tests or `pip install -e .` makes them, so they are never copied into the verify
/// workspace instead ([`crate::delta::never_verified`]).
pub(super) const DEFAULT_GLOBS: [&str; 25] = [
    "**/conftest.py",
    "**/pytest.ini",
    "**/.pytest.ini",
    "**/pytest.toml",
    "**/.pytest.toml",
    // Runs before the tests compile, with write access to them.
    "**/build.rs",
    "**/sitecustomize.py",
    "**/usercustomize.py",
    "**/*.pth",
    "unittest.py",
    "unittest",
    "pytest.py",
    "pytest",
    "_pytest",
    "pluggy",
    "py.py",
    ".cargo",
    "rust-toolchain",
    "rust-toolchain.toml",
    "**/jest.config.*",
    "**/vitest.config.*",
    "**/.mocharc*",
    "**/.noserc",
    "**/nose.cfg",
    "**/go.work",
];

/// Files protected only where they configure a test runner: (file name, what counts).
const SECTION_FILES: [(&str, Sections); 5] = [
    // A package's `build` key names a build script other than `build.rs`.
    ("Cargo.toml", Sections::Toml(&["package.build"])),
    (
        "pyproject.toml",
        Sections::Toml(&["tool.pytest", "tool.tox", "tool.nose"]),
    ),
    (
        "setup.cfg",
        Sections::Ini(&["tool:pytest", "pytest", "nosetests"]),
    ),
    ("tox.ini", Sections::Ini(&["pytest", "tox", "testenv"])),
    (
        "package.json",
        Sections::Json(&["scripts", "jest", "mocha", "ava"]),
    ),
];

#[derive(Clone, Copy)]
enum Sections {
    Toml(&'static [&'static str]),
    Ini(&'static [&'static str]),
    Json(&'static [&'static str]),
}

/// A file's content before and after a patch (`None` for a side where it does not exist), or
/// `None` when that cannot be told.
pub(super) type FileVersions = Option<(Option<Vec<u8>>, Option<Vec<u8>>)>;

/// Workspace-relative path patterns.
#[derive(Debug, Default)]
pub(super) struct Protected {
    protect: Vec<Regex>,
    except: Vec<Regex>,
    /// The rules beyond paths: test-runner sections of config files, and new top-level
    /// modules that shadow one the verify interpreter imports from elsewhere.
    rules: bool,
    /// Container path globs (entries starting with `/`), for `delta: container`: compiled
    /// only for a trial that has a container to check ([`Self::toolchain`]).
    container: Vec<String>,
    container_except: Vec<String>,
}

impl Protected {
    /// The task's `protected:` globs, or else the defaults for its hidden tests and its verify
    /// command.
    pub(super) fn for_task(
        globs: Option<&[String]>,
        tests: Option<&Overlay>,
        verify: &str,
    ) -> io::Result<Self> {
        let defaults = || -> io::Result<Vec<Regex>> {
            // Compiled once per process: per trial they were a tenth of a noop trial's CPU.
            static DEFAULTS: LazyLock<Vec<Regex>> =
                LazyLock::new(|| DEFAULT_GLOBS.iter().map(|g| glob_regex(g)).collect());
            let mut patterns = DEFAULTS.clone();
            patterns.extend(run_by(verify).iter().map(|path| glob_regex(path)));
            if let Some(overlay) = tests {
                for path in overlay_paths(overlay)? {
                    patterns.push(anchored(&regex::escape(&path)));
                    for package in std::path::Path::new(&path).ancestors().skip(1) {
                        if !package.as_os_str().is_empty() {
                            let init = package.join("__init__.py");
                            patterns.push(anchored(&regex::escape(&init.to_string_lossy())));
                        }
                    }
                }
            }
            Ok(patterns)
        };
        // Besides the verifier's toolchain (`delta::toolchain`), every program the verify
        // command names, in any `bin` folder: a copy earlier on `PATH` would run instead.
        let container_defaults = || programs_named(verify);
        let Some(globs) = globs else {
            return Ok(Self {
                protect: defaults()?,
                except: Vec::new(),
                rules: true,
                container: container_defaults(),
                container_except: Vec::new(),
            });
        };
        let mut protected = Self::default();
        for glob in globs {
            if glob == "defaults" {
                protected.protect.extend(defaults()?);
                protected.container.extend(container_defaults());
                protected.rules = true;
            } else if let Some(excluded) = glob.strip_prefix('!').filter(|g| g.starts_with('/')) {
                protected.container_except.push(excluded.to_owned());
            } else if let Some(excluded) = glob.strip_prefix('!') {
                protected.except.push(glob_regex(excluded));
            } else if glob.starts_with('/') {
                protected.container.push(glob.clone());
            } else {
                protected.protect.push(glob_regex(glob));
            }
        }
        Ok(protected)
    }

    /// What of the agent's container may reach the verifier: the toolchain rule with this
    /// task's container entries, its `outputs:` carried, for a workspace and tests at `places`.
    pub(super) fn toolchain(&self, outputs: &[String], places: &[&str]) -> Toolchain {
        let carried: Vec<String> = outputs
            .iter()
            .chain(&self.container_except)
            .cloned()
            .collect();
        Toolchain::new(&self.container, &carried, places)
    }

    /// The paths of `patch` that the list covers. `contents(path)` gives a file's content
    /// before and after the patch (`None` when it does not exist or cannot be told), for the
    /// files protected only in their test-runner sections.
    pub(super) fn touched(
        &self,
        patch: &str,
        contents: &dyn Fn(&str) -> FileVersions,
    ) -> Vec<String> {
        changed_paths(patch)
            .into_iter()
            .filter(|path| !self.except.iter().any(|re| re.is_match(path)))
            .filter(|path| {
                self.protect.iter().any(|re| re.is_match(path))
                    || (self.rules
                        && (runner_sections_changed(path, contents)
                            || shadows_a_module(path, contents)))
            })
            .collect()
    }
}

/// The files a verify command runs itself: a Makefile for `make`, and the shell scripts it
/// names by a relative path (`sh run_tests.sh`, `./ci/test.bash`). Other files it names
/// (`grep x src/lib.rs`, `python3 main.py`) are often what the agent is asked to change.
fn run_by(verify: &str) -> Vec<String> {
    let words: Vec<&str> = verify
        .split(|c: char| c.is_whitespace() || matches!(c, ';' | '&' | '|' | '(' | ')'))
        .map(|w| w.trim_matches(|c| c == '\'' || c == '"'))
        .filter(|w| !w.is_empty())
        .collect();
    let mut files = Vec::new();
    if words.iter().any(|w| *w == "make" || w.ends_with("/make")) {
        files.extend(["Makefile", "makefile", "GNUmakefile"].map(String::from));
    }
    for word in words {
        let word = word.trim_start_matches("./");
        let script = [".sh", ".bash", ".mk"]
            .iter()
            .any(|ext| word.ends_with(ext));
        let relative = !word.starts_with(['/', '-', '$', '~']) && !word.contains("..");
        if relative && script && !word.contains(['*', '?', '=']) {
            files.push(word.to_owned());
        }
    }
    files
}

/// Where the programs the verify command runs live: for each simple command's program, any `bin`
/// folder for a bare name and the path itself for an absolute one, and the absolute script an
/// interpreter is given (`bash /tests/run.sh`). Its other words are data, often what the task
/// asks for (`grep -q x /etc/app.conf`).
fn programs_named(verify: &str) -> Vec<String> {
    const INTERPRETERS: [&str; 8] = [
        "sh", "bash", "dash", "python", "python3", "node", "perl", "ruby",
    ];
    let mut found = Vec::new();
    for command in verify.split([';', '&', '|', '(', ')', '`', '\n']) {
        let mut words = command
            .split_whitespace()
            .map(|w| w.trim_matches(|c| c == '\'' || c == '"'))
            .skip_while(|w| w.contains('=') || matches!(*w, "exec" | "env" | "sudo" | "!"));
        let Some(program) = words.next() else {
            continue;
        };
        let name = program.rsplit('/').next().unwrap_or(program);
        if program.starts_with('/') {
            found.push(program.to_owned());
        } else if !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '+'))
        {
            found.push(format!("**/bin/{name}"));
        }
        if INTERPRETERS.contains(&name)
            && let Some(script) = words.find(|w| !w.starts_with('-'))
            && script.starts_with('/')
        {
            found.push(script.to_owned());
        }
    }
    found.retain(|p| !p.contains(['*', '?', '$']) || p.starts_with("**/bin/"));
    found
}

/// A top-level module the diff adds (`NAME.py`, `NAME/__init__.py`, `NAME.pyc`, `NAME.*.so`)
/// whose name the verify interpreter would otherwise import from its standard library or an
/// installed package: with the workspace first on `sys.path`, it runs in their place.
fn shadows_a_module(path: &str, contents: &dyn Fn(&str) -> FileVersions) -> bool {
    let (name, rest) = path.split_once('/').unwrap_or((path, ""));
    let module = match rest {
        "" => {
            let (stem, ext) = name.split_once('.').unwrap_or((name, ""));
            let importable = ext == "py" || ext == "pyc" || ext.ends_with("so") || ext == "pyd";
            if !importable {
                return false;
            }
            stem
        }
        "__init__.py" => name,
        _ => return false,
    };
    let added = !matches!(contents(path), Some((Some(_), _)));
    added && importable_elsewhere().contains(module)
}

/// The top-level modules `python3` imports from outside a workspace: its standard library and
/// its installed packages (empty when there is no `python3`).
fn importable_elsewhere() -> &'static std::collections::BTreeSet<String> {
    static NAMES: std::sync::OnceLock<std::collections::BTreeSet<String>> =
        std::sync::OnceLock::new();
    NAMES.get_or_init(|| {
        let script = "import pkgutil, sys\n\
            names = set(getattr(sys, 'stdlib_module_names', ())) | set(sys.builtin_module_names)\n\
            names |= {m.name for m in pkgutil.iter_modules()}\n\
            print('\\n'.join(sorted(names)))";
        std::process::Command::new("python3")
            .args(["-I", "-c", script])
            .stdin(std::process::Stdio::null())
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| {
                String::from_utf8_lossy(&o.stdout)
                    .lines()
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    })
}

/// Whether a `pyproject.toml`, `setup.cfg`, `tox.ini` or `package.json` changed where it
/// configures a test runner. When the contents cannot be read back, it counts as changed.
fn runner_sections_changed(path: &str, contents: &dyn Fn(&str) -> FileVersions) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    let Some((_, sections)) = SECTION_FILES.iter().find(|(file, _)| *file == name) else {
        return false;
    };
    let Some((before, after)) = contents(path) else {
        return true;
    };
    let extract = |bytes: Option<Vec<u8>>| {
        let text = String::from_utf8_lossy(&bytes.unwrap_or_default()).into_owned();
        runner_config(&text, *sections)
    };
    extract(before) != extract(after)
}

/// The parts of a config file that configure a test runner, normalised for comparison; a file
/// that does not parse is taken whole.
fn runner_config(text: &str, sections: Sections) -> String {
    match sections {
        Sections::Toml(keys) => match text.parse::<toml::Table>() {
            Ok(table) => keys
                .iter()
                .map(|key| {
                    let mut value = Some(toml::Value::Table(table.clone()));
                    for part in key.split('.') {
                        value = value.and_then(|v| v.get(part).cloned());
                    }
                    format!("{key}={value:?}")
                })
                .collect(),
            Err(_) => text.to_owned(),
        },
        Sections::Json(keys) => match serde_json::from_str::<serde_json::Value>(text) {
            Ok(json) => keys
                .iter()
                .map(|key| format!("{key}={}", json[key]))
                .collect(),
            Err(_) => text.to_owned(),
        },
        Sections::Ini(prefixes) => {
            let mut kept = String::new();
            let mut inside = false;
            for line in text.lines() {
                let trimmed = line.trim();
                if let Some(header) = trimmed.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
                    let header = header.trim();
                    inside = prefixes
                        .iter()
                        .any(|p| header == *p || header.starts_with(&format!("{p}:")));
                }
                if inside && !trimmed.is_empty() && !trimmed.starts_with(['#', ';']) {
                    kept.push_str(trimmed);
                    kept.push('\n');
                }
            }
            kept
        }
    }
}

/// A pattern matching a path or anything under it (a directory protects its contents).
fn anchored(body: &str) -> Regex {
    // Every piece is escaped or a fixed class, so the pattern always compiles.
    Regex::new(&format!("^{body}(?:/.*)?$")).expect("escaped pattern")
}

/// `*` and `?` stay within a path segment, `**` crosses segments.
fn glob_regex(glob: &str) -> Regex {
    let glob = glob.trim_start_matches("./").trim_start_matches('/');
    let mut body = String::new();
    let mut rest = glob;
    while let Some(c) = rest.chars().next() {
        let (piece, len) = if rest.starts_with("**/") {
            ("(?:.*/)?".to_owned(), 3)
        } else if rest.starts_with("**") {
            (".*".to_owned(), 2)
        } else if c == '*' {
            ("[^/]*".to_owned(), 1)
        } else if c == '?' {
            ("[^/]".to_owned(), 1)
        } else {
            (regex::escape(&c.to_string()), c.len_utf8())
        };
        body.push_str(&piece);
        rest = &rest[len..];
    }
    anchored(&body)
}

/// The workspace paths an overlay writes: a directory's files, or a patch's paths.
fn overlay_paths(overlay: &Overlay) -> io::Result<Vec<String>> {
    match overlay {
        Overlay::Patch(path) => Ok(changed_paths(&std::fs::read_to_string(path)?)),
        Overlay::Dir(root) => {
            let mut found = Vec::new();
            let mut stack = vec![root.clone()];
            while let Some(dir) = stack.pop() {
                for entry in std::fs::read_dir(&dir)? {
                    let path = entry?.path();
                    if path.is_dir() {
                        stack.push(path);
                    } else if let Ok(relative) = path.strip_prefix(root) {
                        found.push(relative.to_string_lossy().into_owned());
                    }
                }
            }
            Ok(found)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl Protected {
        fn touched_plain(&self, patch: &str) -> Vec<String> {
            self.touched(patch, &|_| None)
        }
    }

    fn patch(paths: &[&str]) -> String {
        paths
            .iter()
            .map(|p| format!("diff --git a/{p} b/{p}\n--- a/{p}\n+++ b/{p}\n"))
            .collect()
    }

    #[test]
    fn container_paths_cover_the_shell_the_runners_and_what_verify_names() {
        let protected = Protected::for_task(
            None,
            None,
            "only-in-image --verify out.txt && /opt/check/run x; bash /tests/t.sh; grep -q x /etc/app.conf",
        )
        .unwrap();
        let rule = protected.toolchain(&[], &["/app"]);
        let is = |path: &str| held(&rule, path);
        for path in [
            "/usr/bin/bash",
            "/usr/local/lib/python3.11/site-packages/_pytest/main.py",
            "/usr/lib/python3/dist-packages/x.pth",
            "/usr/local/bin/only-in-image",
            "/root/.local/bin/only-in-image",
            "/opt/check/run",
            "/etc/profile.d/x.sh",
            "/tests/t.sh",
            "/usr/bin/grep",
        ] {
            assert!(is(path), "{path}");
        }
        for path in [
            "/etc/app.conf",
            "/usr/local/bin/tool",
            "/opt/check",
            "/usr/bin",
        ] {
            assert!(!is(path), "{path}");
        }
        let narrowed = Protected::for_task(
            Some(&[
                "defaults".into(),
                "!/usr/lib/python3/dist-packages/*.pth".into(),
                "/srv/**".into(),
            ]),
            None,
            "true",
        )
        .unwrap()
        .toolchain(&[], &["/app"]);
        assert!(!held(&narrowed, "/usr/lib/python3/dist-packages/x.pth"));
        assert!(held(&narrowed, "/srv/a/b") && held(&narrowed, "/bin/sh"));
        // A workspace glob is no container path.
        let workspace_only = Protected::for_task(Some(&["src/**".into()]), None, "true").unwrap();
        assert!(!held(&workspace_only.toolchain(&[], &["/app"]), "/src/x"));
    }

    fn held(rule: &Toolchain, path: &str) -> bool {
        let change = crate::workspace::FsChange {
            kind: crate::workspace::FsChangeKind::Changed,
            path: path.into(),
        };
        rule.held_back(&change, &Default::default()).is_some()
    }

    #[test]
    fn globs_match_within_and_across_segments() {
        let globs = [
            "tests/**".to_owned(),
            "*.lock".to_owned(),
            "ci/run?.sh".into(),
        ];
        let protected = Protected::for_task(Some(&globs), None, "").unwrap();
        let touched = protected.touched_plain(&patch(&[
            "tests/unit/test_a.py",
            "Cargo.lock",
            "sub/Cargo.lock",
            "ci/run1.sh",
            "src/lib.rs",
        ]));
        assert_eq!(
            touched,
            ["Cargo.lock", "ci/run1.sh", "tests/unit/test_a.py"]
        );
    }

    #[test]
    fn a_directory_protects_its_contents_and_default_is_the_overlay() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("tests")).unwrap();
        std::fs::write(dir.path().join("tests/test_x.py"), "").unwrap();
        let overlay = Overlay::Dir(dir.path().to_owned());
        let protected = Protected::for_task(None, Some(&overlay), "").unwrap();
        assert_eq!(
            protected.touched_plain(&patch(&["tests/test_x.py", "tests/test_y.py"])),
            ["tests/test_x.py"]
        );
        let by_dir = Protected::for_task(Some(&["tests".to_owned()]), None, "").unwrap();
        assert_eq!(
            by_dir.touched_plain(&patch(&["tests/a", "testsuite"])),
            ["tests/a"]
        );
        assert!(
            Protected::default()
                .touched_plain(&patch(&["x"]))
                .is_empty()
        );
    }
}
