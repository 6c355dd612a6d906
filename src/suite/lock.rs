//! The suite's lock file: what `validate` saw the reference solution's verify run show, per
//! task, so every trial can be held to at least the same evidence.
//!
//! Written next to the suite as `<suite file stem>.lock.json`. A task's entry counts only while
//! its digest (base, setup, verify command, metric and hidden tests) is unchanged.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{Suite, Task, hash_tree};
use crate::metric::TestEvidence;

const VERSION: u32 = 1;

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SuiteLock {
    pub version: u32,
    pub tasks: BTreeMap<String, LockedTask>,
    /// Tasks whose reference did not pass every time under `validate --repeat N`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub flaky: BTreeMap<String, FlakyTask>,
}

/// A task whose reference solution passed `passed` of `runs` verify runs: its trials say as
/// much about the task as about the agent, so gates leave it out by default.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlakyTask {
    pub digest: String,
    pub passed: u32,
    pub runs: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LockedTask {
    pub digest: String,
    pub validated_at: String,
    pub tests: TestEvidence,
}

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{}: not a deltabench lock file ({message}); run `deltabench validate` again to rewrite it",
        path.display()
    )]
    Parse { path: PathBuf, message: String },
    #[error("cannot write {}: {source}", path.display())]
    Write {
        path: PathBuf,
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

/// What a task's validation depends on.
pub fn task_digest(task: &Task) -> String {
    let mut digest = Sha256::new();
    for part in [
        task.base.value.as_str(),
        task.setup.as_deref().unwrap_or(""),
        task.verify.run.as_str(),
        &task.metric.name(),
    ] {
        digest.update(part.as_bytes());
        digest.update([0]);
    }
    if let Some(tests) = &task.tests {
        hash_tree(&mut digest, tests.path());
    }
    // Only when set, so the digests of tasks without one stay what they were.
    if let Some(environment) = &task.environment {
        digest.update(serde_json::to_vec(environment).unwrap_or_default());
    }
    format!("sha256:{:x}", digest.finalize())
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

    /// The evidence recorded for `task`, when its validation still holds.
    pub fn expected(&self, task: &Task) -> Option<&TestEvidence> {
        self.tasks
            .get(&task.id)
            .filter(|locked| locked.digest == task_digest(task))
            .map(|locked| &locked.tests)
    }

    /// The flaky record of `task`, when its digest still holds.
    pub fn flaky(&self, task: &Task) -> Option<&FlakyTask> {
        self.flaky
            .get(&task.id)
            .filter(|flaky| flaky.digest == task_digest(task))
    }

    /// Marks `task` flaky (`passed` of `runs`), or clears the mark when `passed == runs`;
    /// returns whether the lock changed.
    pub fn mark_flaky(&mut self, task: &Task, passed: u32, runs: u32) -> bool {
        self.version = VERSION;
        if passed >= runs {
            return self.flaky.remove(&task.id).is_some();
        }
        let entry = FlakyTask {
            digest: task_digest(task),
            passed,
            runs,
        };
        self.flaky.insert(task.id.clone(), entry.clone()) != Some(entry)
    }

    /// Records what `task`'s reference showed; returns false when that is already recorded (the
    /// file then stays as it is, so a checked-in lock does not churn).
    pub fn record(&mut self, task: &Task, tests: TestEvidence, at: String) -> bool {
        self.version = VERSION;
        let digest = task_digest(task);
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

/// Which tasks of a plan run without validated evidence, for the run's opening line.
pub fn unvalidated<'a>(
    lock: Option<&SuiteLock>,
    tasks: impl Iterator<Item = &'a Task>,
) -> Vec<&'a str> {
    tasks
        .filter(|task| lock.is_none_or(|lock| lock.expected(task).is_none()))
        .map(|task| task.id.as_str())
        .collect()
}
