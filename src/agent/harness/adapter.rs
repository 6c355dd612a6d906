//! The seam between the generic run loop ([`super::HarnessAgent`]) and one CLI: each harness's
//! module implements [`CliAdapter::begin`], which returns the [`CliRun`] that reads the CLI's
//! output and does whatever that CLI needs around it (Codex's per-thread usage, aider's
//! repo-map caches, mini-swe-agent's trajectory file). The run loop knows no CLI by name.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::{ParsedRun, StreamParser};
use crate::agent::{StreamEvent, Usage};

/// What a run's [`CliRun`] may need to know when it starts.
#[derive(Debug, Clone, Copy)]
pub struct RunStart<'a> {
    /// The CLI's private HOME (kept between runs, so a resumed session finds its files).
    pub home: &'a Path,
    /// The directory the CLI works in (the agent's change is made there).
    pub workspace: &'a Path,
    /// The session being continued, if any.
    pub resume: Option<&'a str>,
    /// The file the CLI writes its trajectory to, when it writes one ([`super::invocation`]).
    pub trajectory: Option<&'a Path>,
}

/// One harness's quirks, behind one method.
pub trait CliAdapter: Send + Sync {
    /// Starts reading one run of the CLI (called just before it is spawned).
    fn begin(&self, run: &RunStart<'_>) -> Box<dyn CliRun>;

    /// Paths under HOME the CLI writes of its own, not of the trial (bundled skills, plugin
    /// installs, telemetry): removed after the trial unless `run --keep-homes`, with
    /// [`COMMON_BUNDLED`].
    fn bundled(&self) -> &'static [&'static str] {
        &[]
    }
}

/// What any Node or Python CLI may leave in HOME that is a cache, not the trial's.
pub const COMMON_BUNDLED: [&str; 3] = [".npm/_cacache", ".npm/_npx", ".cache/pip"];

/// Removes `bundled` and [`COMMON_BUNDLED`] from `home`: never a symlink's target, never a path
/// that leaves `home`. What cannot be removed stays (a run never fails on it).
pub fn prune_home(home: &Path, bundled: &[&str]) {
    for relative in COMMON_BUNDLED.iter().chain(bundled) {
        let path = home.join(relative);
        let inside = Path::new(relative)
            .components()
            .all(|c| matches!(c, std::path::Component::Normal(_)));
        let Ok(meta) = std::fs::symlink_metadata(&path) else {
            continue;
        };
        // A parent that is a symlink would take the removal out of the home.
        let real_parent = path
            .parent()
            .and_then(|p| std::fs::canonicalize(p).ok())
            .zip(std::fs::canonicalize(home).ok())
            .is_some_and(|(parent, home)| parent.starts_with(home));
        if !inside || !real_parent {
            continue;
        }
        let _ = if meta.is_dir() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
    }
}

/// One run of a CLI as the run loop sees it: lines in, events out, a verdict at the end.
pub trait CliRun: Send {
    /// One line of stdout, without its newline.
    fn line(&mut self, line: &str) -> Vec<StreamEvent>;

    /// Events from what the CLI writes beside its stdout (polled while it runs, and once after).
    fn poll(&mut self) -> Vec<StreamEvent> {
        Vec::new()
    }

    /// The verdict once the CLI has exited; also cleans up what the CLI left that is not the
    /// agent's change.
    fn finish(self: Box<Self>, exit_code: Option<i32>, stderr_tail: &str) -> Finished;

    /// Whether a zero cost the CLI reports only echoes the zero price of the local config
    /// deltabench wrote (so deltabench prices the usage itself).
    fn echoes_local_price(&self) -> bool {
        false
    }
}

/// Work left for when the run's session id is known.
pub type AfterSession = Box<dyn FnOnce(&str) + Send>;

/// What [`CliRun::finish`] returns: the parsed run, and what to do once its session is known.
pub struct Finished {
    /// The run as the parser (and any [`Then`] step) read it.
    pub parsed: ParsedRun,
    /// Called with the run's session id (Codex keeps its thread's cumulative usage).
    pub after: Option<AfterSession>,
}

impl From<ParsedRun> for Finished {
    fn from(parsed: ParsedRun) -> Self {
        Self {
            parsed,
            after: None,
        }
    }
}

/// What a run does once the CLI exited, with what its parser made of it: clean up what the CLI
/// left that is not the agent's change, name its session, carry its usage over.
pub type Then = Box<dyn FnOnce(ParsedRun) -> Finished + Send>;

/// A CLI read from its stdout alone, with an optional step after it exits.
pub struct Plain<P> {
    parser: P,
    local_price: bool,
    then: Option<Then>,
}

impl<P: StreamParser + Send + 'static> Plain<P> {
    /// Reads the stdout with `parser`, trusts the cost the CLI reports, and does nothing after.
    pub fn new(parser: P) -> Self {
        Self {
            parser,
            local_price: false,
            then: None,
        }
    }

    /// [`Plain::new`], boxed as the [`CliRun`] an adapter returns.
    pub fn boxed(parser: P) -> Box<dyn CliRun> {
        Box::new(Self::new(parser))
    }

    /// A CLI that prices from the config deltabench wrote (zero), so its cost is not its own.
    pub fn locally_priced(parser: P) -> Box<dyn CliRun> {
        Box::new(Self::new(parser).priced_locally())
    }

    /// Marks a zero cost the CLI reports as the echo of the local config deltabench wrote, so
    /// that deltabench prices the usage itself.
    pub fn priced_locally(mut self) -> Self {
        self.local_price = true;
        self
    }

    /// Runs `then` on the parsed run once the CLI exited.
    pub fn then(mut self, then: impl FnOnce(ParsedRun) -> Finished + Send + 'static) -> Self {
        self.then = Some(Box::new(then));
        self
    }
}

impl<P: StreamParser + Send + 'static> CliRun for Plain<P> {
    fn line(&mut self, line: &str) -> Vec<StreamEvent> {
        self.parser.line(line)
    }

    fn finish(self: Box<Self>, exit_code: Option<i32>, stderr_tail: &str) -> Finished {
        let parsed = self.parser.finish(exit_code, stderr_tail);
        match self.then {
            Some(then) => then(parsed),
            None => parsed.into(),
        }
    }

    fn echoes_local_price(&self) -> bool {
        self.local_price
    }
}

/// Usage kept per session in a JSON file (`{session: usage}`), for CLIs whose reported usage
/// is cumulative across a resumed session.
pub(super) fn saved_usage(file: &Path, session: &str) -> Usage {
    std::fs::read_to_string(file)
        .ok()
        .and_then(|text| {
            serde_json::from_str::<std::collections::BTreeMap<String, Usage>>(&text).ok()
        })
        .and_then(|mut all| all.remove(session))
        .unwrap_or_default()
}

pub(super) fn save_usage(file: &Path, session: &str, total: Usage) {
    let mut all: std::collections::BTreeMap<String, Usage> = std::fs::read_to_string(file)
        .ok()
        .and_then(|text| serde_json::from_str(&text).ok())
        .unwrap_or_default();
    all.insert(session.to_owned(), total);
    if let Ok(text) = serde_json::to_string_pretty(&all) {
        let _ = std::fs::write(file, text);
    }
}

/// The entries of `dir` that `keep` accepts (none when it cannot be read): a CLI's sessions,
/// listed before its run so the one the run adds can be told apart.
pub fn entries(dir: &Path, keep: impl Fn(&Path) -> bool) -> BTreeSet<PathBuf> {
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| keep(path))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_totals_survive_between_runs() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("usage.json");
        assert_eq!(saved_usage(&file, "t"), Usage::default());
        let total = Usage {
            input_tokens: 3300,
            output_tokens: 63,
            ..Usage::default()
        };
        save_usage(&file, "t", total.clone());
        save_usage(&file, "u", Usage::default());
        assert_eq!(saved_usage(&file, "t"), total);
    }

    #[test]
    fn a_home_loses_its_bundled_files_and_nothing_through_a_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let (home, outside) = (dir.path().join("home"), dir.path().join("outside"));
        for folder in [".codex/skills/.system", ".codex/sessions", ".npm/_cacache"] {
            std::fs::create_dir_all(home.join(folder)).unwrap();
        }
        std::fs::create_dir_all(outside.join("skills/.system")).unwrap();
        std::os::unix::fs::symlink(&outside, home.join(".cfg")).unwrap();
        prune_home(
            &home,
            &[".codex/skills/.system", ".cfg/skills/.system", "../outside"],
        );
        assert!(!home.join(".codex/skills/.system").exists());
        assert!(!home.join(".npm/_cacache").exists());
        assert!(home.join(".codex/sessions").is_dir());
        assert!(
            outside.join("skills/.system").is_dir(),
            "not through a symlink"
        );
        assert!(outside.is_dir(), "never out of the home");
    }
}
