//! The suite's lock file: what `validate` saw the reference solution's verify run show, per
//! task, so every trial can be held to at least the same evidence.
//!
//! Written next to the suite as `<suite file stem>.lock.json`. A task's entry counts only while
//! its digest (base, setup, verify command, metric and hidden tests) is unchanged.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{Suite, Task, hash_tree};
use crate::metric::TestEvidence;
use crate::workspace::ImageSource;

const VERSION: u32 = 1;

/// A suite's lock file: per task, what its reference solution's verify run showed under
/// `validate`, and which tasks were flaky.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SuiteLock {
    /// Format version; [`SuiteLock::read_at`] rejects any but the one this deltabench writes.
    pub version: u32,
    /// Task id to what its reference showed.
    pub tasks: BTreeMap<String, LockedTask>,
    /// Tasks whose reference did not pass every time under `validate --repeat N`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub flaky: BTreeMap<String, FlakyTask>,
}

/// A task whose reference solution passed `passed` of `runs` verify runs: its trials say as
/// much about the task as about the agent, so gates leave it out by default.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlakyTask {
    /// The task's [`task_digest`] when it was marked: the mark holds while that is unchanged.
    pub digest: String,
    /// Verify runs of the reference that passed.
    pub passed: u32,
    /// Verify runs of the reference (`validate --repeat N`).
    pub runs: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LockedTask {
    pub digest: String,
    pub validated_at: String,
    pub tests: TestEvidence,
}

/// A lock file that cannot be read, parsed or written.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// The lock file exists but reading it failed.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The lock file.
        path: PathBuf,
        /// Why reading failed.
        source: std::io::Error,
    },
    /// The file is no lock this deltabench reads (bad JSON, another version): `validate`
    /// rewrites it.
    #[error(
        "{}: not a deltabench lock file ({message}); run `deltabench validate` again to rewrite it",
        path.display()
    )]
    Parse {
        /// The lock file.
        path: PathBuf,
        /// What is wrong: the JSON error, or the version found.
        message: String,
    },
    /// Writing the lock next to the suite failed: is its folder writable?
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The lock file being written.
        path: PathBuf,
        /// Why writing failed.
        source: std::io::Error,
    },
}

/// Where a suite's lock file lives.
pub fn lock_path(suite: &Suite) -> PathBuf {
    lock_path_of(&suite.path)
}

/// The lock file beside the suite file at `suite_path`.
pub fn lock_path_of(suite_path: &std::path::Path) -> PathBuf {
    let stem = suite_path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "suite".into());
    suite_path.with_file_name(format!("{stem}.lock.json"))
}

/// The folder a suite's paths are taken relative to in its tasks' digests: its file's, resolved.
pub fn suite_root(suite: &Suite) -> PathBuf {
    let dir = match suite.path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_owned(),
        _ => PathBuf::from("."),
    };
    dir.canonicalize().unwrap_or(dir)
}

/// What a task's validation depends on: its base, setup, verify command, metric, hidden tests
/// and environment, with every path the suite names relative to `root` (the suite's folder, see
/// [`suite_root`]), so a copied or moved suite folder keeps its lock.
pub fn task_digest(task: &Task, root: &Path) -> String {
    digest_of(task, Some(root))
}

/// The digest as deltabench wrote it before digests were portable: the grader's and the
/// Dockerfile's resolved paths in it. A lock holding it still counts where it was made.
fn legacy_digest(task: &Task) -> String {
    digest_of(task, None)
}

fn digest_of(task: &Task, root: Option<&Path>) -> String {
    let mut digest = Sha256::new();
    let metric = match root {
        Some(_) => task.metric.portable_name(),
        None => task.metric.name(),
    };
    for part in [
        task.base.value.as_str(),
        task.setup.as_deref().unwrap_or(""),
        task.verify.run.as_str(),
        &metric,
    ] {
        digest.update(part.as_bytes());
        digest.update([0]);
    }
    if let Some(tests) = &task.tests {
        hash_tree(&mut digest, tests.path());
    }
    // Only when set, so the digests of tasks without one stay what they were.
    if let Some(environment) = &task.environment {
        let mut environment = environment.clone();
        if let (Some(root), ImageSource::Dockerfile { path, context }) =
            (root, &mut environment.image)
        {
            *path = relative_to(path, root);
            *context = relative_to(context, root);
        }
        digest.update(serde_json::to_vec(&environment).unwrap_or_default());
    }
    format!("sha256:{:x}", digest.finalize())
}

/// `path` from `root`, both absolute, by their components alone (`../env/Dockerfile` for a
/// file beside the suite's folder); `path` as it is when either is relative.
fn relative_to(path: &Path, root: &Path) -> PathBuf {
    if !path.is_absolute() || !root.is_absolute() {
        return path.to_owned();
    }
    let (path, root): (Vec<Component>, Vec<Component>) =
        (path.components().collect(), root.components().collect());
    let shared = path.iter().zip(&root).take_while(|(a, b)| a == b).count();
    let mut relative: PathBuf = root[shared..]
        .iter()
        .map(|_| Component::ParentDir)
        .collect();
    relative.extend(&path[shared..]);
    if relative.as_os_str().is_empty() {
        relative.push(".");
    }
    relative
}

impl SuiteLock {
    /// The suite's lock, or `None` when it was never validated.
    pub fn read(suite: &Suite) -> Result<Option<Self>, LockError> {
        Self::read_at(&lock_path(suite))
    }

    /// The lock file at `path`, or `None` when there is none.
    pub fn read_at(path: &std::path::Path) -> Result<Option<Self>, LockError> {
        let path = path.to_owned();
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(LockError::Read { path, source }),
        };
        let lock: Self = serde_json::from_str(&text).map_err(|e| LockError::Parse {
            path: path.clone(),
            message: e.to_string(),
        })?;
        if lock.version != VERSION {
            return Err(LockError::Parse {
                path,
                message: format!(
                    "version {} (this deltabench writes {VERSION})",
                    lock.version
                ),
            });
        }
        Ok(Some(lock))
    }

    /// The evidence recorded for `task` of the suite in `root` ([`suite_root`]), when its
    /// validation still holds.
    pub fn expected(&self, task: &Task, root: &Path) -> Option<&TestEvidence> {
        self.tasks
            .get(&task.id)
            .filter(|locked| holds(&locked.digest, task, root))
            .map(|locked| &locked.tests)
    }

    /// The flaky record of `task`, when its digest still holds.
    pub fn flaky(&self, task: &Task, root: &Path) -> Option<&FlakyTask> {
        self.flaky
            .get(&task.id)
            .filter(|flaky| holds(&flaky.digest, task, root))
    }

    /// Marks `task` flaky (`passed` of `runs`), or clears the mark when `passed == runs`;
    /// returns whether the lock changed.
    pub fn mark_flaky(&mut self, task: &Task, root: &Path, passed: u32, runs: u32) -> bool {
        self.version = VERSION;
        if passed >= runs {
            return self.flaky.remove(&task.id).is_some();
        }
        let entry = FlakyTask {
            digest: task_digest(task, root),
            passed,
            runs,
        };
        self.flaky.insert(task.id.clone(), entry.clone()) != Some(entry)
    }

    /// Records what `task`'s reference showed; returns false when that is already recorded (the
    /// file then stays as it is, so a checked-in lock does not churn).
    pub fn record(&mut self, task: &Task, root: &Path, tests: TestEvidence, at: String) -> bool {
        self.version = VERSION;
        let digest = task_digest(task, root);
        if self
            .tasks
            .get(&task.id)
            .is_some_and(|old| old.digest == digest && old.tests == tests)
        {
            return false;
        }
        self.tasks.insert(
            task.id.clone(),
            LockedTask {
                digest,
                validated_at: at,
                tests,
            },
        );
        true
    }

    /// Writes the lock next to the suite (through a `.json.tmp` renamed over it) and returns its
    /// path.
    pub fn write(&self, suite: &Suite) -> Result<PathBuf, LockError> {
        let path = lock_path(suite);
        let text = serde_json::to_string_pretty(self).expect("plain data") + "\n";
        let tmp = path.with_extension("json.tmp");
        std::fs::write(&tmp, text)
            .and_then(|()| std::fs::rename(&tmp, &path))
            .map_err(|source| LockError::Write {
                path: path.clone(),
                source,
            })?;
        Ok(path)
    }
}

/// Whether a lock's `digest` still holds for `task`: the portable digest, or the one this
/// deltabench wrote before (resolved paths in it), which holds only where it was made.
fn holds(digest: &str, task: &Task, root: &Path) -> bool {
    digest == task_digest(task, root) || digest == legacy_digest(task)
}

/// Which tasks of a plan run without validated evidence, for the run's opening line.
pub fn unvalidated<'a>(
    lock: Option<&SuiteLock>,
    root: &Path,
    tasks: impl Iterator<Item = &'a Task>,
) -> Vec<&'a str> {
    tasks
        .filter(|task| lock.is_none_or(|lock| lock.expected(task, root).is_none()))
        .map(|task| task.id.as_str())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_taken_from_the_suite_folder_by_their_components() {
        let root = Path::new("/work/suites/calc");
        for (path, relative) in [
            ("/work/suites/calc/env/Dockerfile", "env/Dockerfile"),
            ("/work/suites/calc", "."),
            ("/work/suites/shared/env", "../shared/env"),
            ("/opt/env", "../../../opt/env"),
            ("relative/env", "relative/env"),
        ] {
            assert_eq!(
                relative_to(Path::new(path), root),
                Path::new(relative),
                "{path}"
            );
        }
    }
}
