//! Two verify runs of one trial (the judged run and the mutant run) that cannot see each other.
//!
//! Both runs use the same paths (the verify log, the verify home, the setup log), so nothing in
//! a path tells them apart. After the first run, what it left in the trial folder is packed into
//! memory and removed from disk; once the second is over, the mutant run's files are renamed
//! (`verify.log` to `mutants.log`, `verify-home` to `mutants-home`) and the first run's come
//! back. Under `worktree` the verify process can list the trial folder (its home's parent): it
//! sees the same entries in either run.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};

use super::{ProbeError, ProbeErrorKind};

/// The most bytes of one run's files held in memory; a larger entry is not kept.
const PARK_LIMIT: u64 = 256 * 1024 * 1024;

/// The trial folder's entries before the first verify run: what is newer is a run's.
pub(super) struct Apart {
    dir: Option<PathBuf>,
    before: BTreeSet<OsString>,
}

/// One run's files, off disk: (name, a tar of it).
pub(super) struct Parked(Vec<(String, Vec<u8>)>);

/// The name a mutant run's file gets once both runs are done.
pub(super) fn mutant_name(name: &str) -> String {
    match name.strip_prefix("verify") {
        Some(rest) => format!("mutants{rest}"),
        None => format!("mutants-{name}"),
    }
}

fn error(what: &str, path: &Path, e: impl std::fmt::Display) -> ProbeError {
    ProbeError::new(
        ProbeErrorKind::Verify,
        format!("cannot {what} {}: {e}", path.display()),
    )
}

fn entries(dir: &Path) -> Result<BTreeSet<OsString>, ProbeError> {
    std::fs::read_dir(dir)
        .and_then(|read| read.map(|e| e.map(|e| e.file_name())).collect())
        .map_err(|e| error("list", dir, e))
}

fn remove(path: &Path) -> Result<(), ProbeError> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(error("remove", path, e)),
    };
    if meta.is_dir() {
        crate::workspace::remove_tree(path).map_err(|e| error("remove", path, e))
    } else {
        std::fs::remove_file(path).map_err(|e| error("remove", path, e))
    }
}

fn size(path: &Path) -> u64 {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return 0;
    };
    if !meta.is_dir() {
        return meta.len();
    }
    std::fs::read_dir(path)
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| size(&entry.path()))
        .sum()
}

impl Apart {
    /// Lists `dir` (the trial folder; `None`: nothing to keep apart). Files of an earlier attempt
    /// at the runs' names go first: the first run must not find them.
    pub(super) fn new(dir: Option<PathBuf>) -> Result<Self, ProbeError> {
        let Some(dir) = dir else {
            return Ok(Self {
                dir: None,
                before: BTreeSet::new(),
            });
        };
        let mut before = entries(&dir)?;
        before.retain(|name| {
            let name = name.to_string_lossy();
            let stale = name.starts_with("verify") || name.starts_with("mutants");
            !(stale && remove(&dir.join(&*name)).is_ok())
        });
        Ok(Self {
            dir: Some(dir),
            before,
        })
    }

    fn new_entries(&self) -> Result<Vec<String>, ProbeError> {
        let Some(dir) = &self.dir else {
            return Ok(Vec::new());
        };
        Ok(entries(dir)?
            .into_iter()
            .filter(|name| !self.before.contains(name))
            .map(|name| name.to_string_lossy().into_owned())
            .collect())
    }

    /// Packs what the run just over left in the trial folder and removes it from disk.
    pub(super) fn park(&self) -> Result<Parked, ProbeError> {
        let Some(dir) = &self.dir else {
            return Ok(Parked(Vec::new()));
        };
        let mut parked = Vec::new();
        for name in self.new_entries()? {
            let path = dir.join(&name);
            if size(&path) <= PARK_LIMIT {
                let mut tar = tar::Builder::new(Vec::new());
                tar.follow_symlinks(false);
                let packed = match std::fs::symlink_metadata(&path) {
                    Ok(meta) if meta.is_dir() => tar.append_dir_all(&name, &path),
                    _ => tar.append_path_with_name(&path, &name),
                };
                let bytes = packed
                    .and_then(|()| tar.into_inner())
                    .map_err(|e| error("keep", &path, e))?;
                parked.push((name, bytes));
            }
            remove(&path)?;
        }
        Ok(Parked(parked))
    }

    /// Removes what the run just over left (a `validate` round whose files are not kept).
    pub(super) fn remove_new(&self) -> Result<(), ProbeError> {
        let Some(dir) = &self.dir else {
            return Ok(());
        };
        for name in self.new_entries()? {
            remove(&dir.join(name))?;
        }
        Ok(())
    }

    /// Renames what the run just over left, by `rename`.
    pub(super) fn rename_new(&self, rename: fn(&str) -> String) -> Result<(), ProbeError> {
        let Some(dir) = &self.dir else {
            return Ok(());
        };
        for name in self.new_entries()? {
            let to = dir.join(rename(&name));
            remove(&to)?;
            std::fs::rename(dir.join(&name), &to).map_err(|e| error("rename", &to, e))?;
        }
        Ok(())
    }

    /// Puts a parked run's files back, each under `rename(name)`.
    pub(super) fn restore(
        &self,
        parked: Parked,
        rename: fn(&str) -> String,
    ) -> Result<(), ProbeError> {
        let Some(dir) = &self.dir else {
            return Ok(());
        };
        for (name, bytes) in parked.0 {
            let scratch = tempfile::Builder::new()
                .prefix(".restore-")
                .tempdir_in(dir)
                .map_err(|e| error("restore into", dir, e))?;
            let mut archive = tar::Archive::new(bytes.as_slice());
            archive.set_preserve_permissions(true);
            archive
                .unpack(scratch.path())
                .map_err(|e| error("restore", &dir.join(&name), e))?;
            let to = dir.join(rename(&name));
            remove(&to)?;
            std::fs::rename(scratch.path().join(&name), &to)
                .map_err(|e| error("restore", &to, e))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_runs_files_are_off_disk_until_the_second_is_over() {
        let dir = tempfile::tempdir().unwrap();
        let trial = dir.path();
        std::fs::write(trial.join("diff.patch"), "x").unwrap();
        std::fs::write(trial.join("verify.log"), "stale").unwrap();
        let apart = Apart::new(Some(trial.to_owned())).unwrap();
        assert!(!trial.join("verify.log").exists(), "a stale log goes first");
        // The first run (the mutant run here).
        std::fs::create_dir_all(trial.join("verify-home/.deltabench")).unwrap();
        std::fs::write(trial.join("verify-home/.deltabench/tests.jsonl"), "m").unwrap();
        std::fs::write(trial.join("verify.log"), "mutant run").unwrap();
        let parked = apart.park().unwrap();
        let names = |dir: &Path| -> Vec<String> {
            let mut names: Vec<String> = std::fs::read_dir(dir)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            names
        };
        assert_eq!(names(trial), ["diff.patch"]);
        // The second run sees what the first saw, then both are kept under their names.
        std::fs::create_dir_all(trial.join("verify-home")).unwrap();
        std::fs::write(trial.join("verify.log"), "judged run").unwrap();
        apart.restore(parked, mutant_name).unwrap();
        assert_eq!(
            names(trial),
            [
                "diff.patch",
                "mutants-home",
                "mutants.log",
                "verify-home",
                "verify.log"
            ]
        );
        assert_eq!(
            std::fs::read_to_string(trial.join("mutants.log")).unwrap(),
            "mutant run"
        );
        assert_eq!(
            std::fs::read_to_string(trial.join("mutants-home/.deltabench/tests.jsonl")).unwrap(),
            "m"
        );
        assert_eq!(
            std::fs::read_to_string(trial.join("verify.log")).unwrap(),
            "judged run"
        );
    }
}
