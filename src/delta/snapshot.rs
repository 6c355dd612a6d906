//! The harness's own view of a workspace after the agent ran: what is recorded is what is
//! verified.
//!
//! Nothing of the workspace's `.git` is read: not its index (skip-worktree and assume-unchanged
//! flags, a stale stat cache), not its config (`core.excludesFile`, filters), not
//! `info/exclude` or `info/attributes`. Files are read raw from disk and compared with the base
//! tree, read from a harness-owned repository. The only ignore rules are the base commit's own
//! `.gitignore` files, so a `.gitignore` the agent wrote hides nothing. New blobs go to an
//! in-memory object store, so nothing the agent wrote is ever stored where another trial can
//! read it. The result is the patch (base tree to the agent's tree) and the file changes that
//! rebuild the same tree from a fresh checkout of the base.

use std::collections::{BTreeSet, HashMap};
use std::fs;
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use git2::build::TreeUpdateBuilder;
use git2::{DiffFindOptions, DiffOptions, ObjectType, Oid, Repository, Tree};
use ignore::Match;
use ignore::gitignore::{Gitignore, GitignoreBuilder};

use super::diff::patch_bytes;
pub use crate::workspace::EntryKind;

/// One path of the agent's tree that differs from the base.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileChange {
    /// The file at `path` holds `content` (a symlink's content is its target).
    Write {
        /// Where, relative to the workspace.
        path: PathBuf,
        /// The file's bytes, or the symlink's target.
        content: Vec<u8>,
        /// A plain file, an executable or a symlink.
        kind: EntryKind,
    },
    /// Nothing is at `path` any more (a file, or a whole directory of the base).
    Remove {
        /// What is gone, relative to the workspace.
        path: PathBuf,
    },
}

impl FileChange {
    /// The path written or removed, relative to the workspace.
    pub fn path(&self) -> &Path {
        match self {
            FileChange::Write { path, .. } | FileChange::Remove { path } => path,
        }
    }
}

/// The agent's delta as the harness sees it.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// `git diff --binary` from the base tree to the agent's tree.
    pub patch: Vec<u8>,
    /// Removals first, then writes: applied to a fresh checkout of the base they give the tree
    /// the patch describes.
    pub changes: Vec<FileChange>,
}

/// Why the agent's tree could not be compared with the base.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// The changed files add up to more than `max_diff`: the trial is not verified.
    #[error(
        "the diff is larger than max_diff ({}): the changed files add up to more than that (at {path}); raise max_diff in the suite if this is expected",
        bytesize::ByteSize::b(*limit).display().iec()
    )]
    TooLarge {
        /// The suite's `max_diff`, in bytes.
        limit: u64,
        /// The changed file that took the total over the limit.
        path: String,
    },
    /// A file of the workspace could not be read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file read.
        path: PathBuf,
        /// The error reading it.
        source: io::Error,
    },
    /// git2 could not read the base tree or build the patch.
    #[error("{0}")]
    Git(#[from] git2::Error),
}

/// Compares `workspace` with `base` (a commit or tree in the repository at `objects`).
///
/// `only`, when given, lists the workspace-relative paths that can differ from the base (an
/// overlay's upper dir knows them); nothing else is read, which keeps this cheap on large trees.
/// `max_bytes` bounds the changed content: past it the snapshot fails with `TooLarge` before the
/// file is read, so memory stays bounded too.
pub fn snapshot(
    objects: &Path,
    workspace: &Path,
    base: &str,
    only: Option<&[String]>,
    max_bytes: u64,
) -> Result<Snapshot, SnapshotError> {
    let repo = Repository::open_bare(objects)?;
    // Blobs of the agent's files live in memory only.
    let _mempack = repo.odb()?.add_new_mempack_backend(1000)?;
    let base_tree = repo.revparse_single(base)?.peel_to_tree()?;
    let mut view = View {
        repo: &repo,
        workspace,
        base: &base_tree,
        ignores: HashMap::new(),
        removed: BTreeSet::new(),
        written: Vec::new(),
        bytes: 0,
        limit: max_bytes,
    };
    match only {
        Some(paths) => {
            for path in paths {
                view.candidate(Path::new(path))?;
            }
        }
        None => view.compare_dir(Path::new(""), Some(base_tree.clone()), false)?,
    }
    if view.removed.is_empty() && view.written.is_empty() {
        return Ok(Snapshot::default());
    }
    view.written.sort_by(|a, b| a.0.cmp(&b.0));
    let mut update = TreeUpdateBuilder::new();
    for path in &view.removed {
        update.remove(path);
    }
    for (path, oid, kind) in &view.written {
        update.upsert(path, *oid, kind.mode());
    }
    let tree = repo.find_tree(update.create_updated(&repo, &base_tree)?)?;
    let mut options = DiffOptions::new();
    // A typechange (file to symlink) as a deletion and an addition, as git writes it: a mode
    // change from 100644 to 120000 is a patch `git apply` refuses.
    options.show_binary(true);
    let mut diff = repo.diff_tree_to_tree(Some(&base_tree), Some(&tree), Some(&mut options))?;
    let mut find = DiffFindOptions::new();
    find.renames(true);
    diff.find_similar(Some(&mut find))?;
    let patch = patch_bytes(&diff)?;
    let mut changes: Vec<FileChange> = view
        .removed
        .iter()
        .map(|path| FileChange::Remove { path: path.clone() })
        .collect();
    for (path, oid, kind) in view.written {
        let content = repo.find_blob(oid)?.content().to_vec();
        changes.push(FileChange::Write {
            path,
            content,
            kind,
        });
    }
    Ok(Snapshot { patch, changes })
}

struct View<'a> {
    repo: &'a Repository,
    workspace: &'a Path,
    base: &'a Tree<'a>,
    /// The base's `.gitignore` of a directory, by directory (None: it has none).
    ignores: HashMap<PathBuf, Option<Gitignore>>,
    removed: BTreeSet<PathBuf>,
    written: Vec<(PathBuf, Oid, EntryKind)>,
    bytes: u64,
    limit: u64,
}

/// What a workspace path is on disk.
enum OnDisk {
    Missing,
    Dir,
    Entry(EntryKind, u64),
    /// A FIFO, socket or device: git cannot store it, and reading a FIFO would block.
    Unstorable,
}

fn is_git_dir(path: &Path) -> bool {
    path.components().any(|c| c.as_os_str() == ".git")
}

impl<'a> View<'a> {
    fn io(path: &Path) -> impl FnOnce(io::Error) -> SnapshotError + '_ {
        move |source| SnapshotError::Io {
            path: path.to_owned(),
            source,
        }
    }

    fn on_disk(&self, relative: &Path) -> Result<OnDisk, SnapshotError> {
        let full = self.workspace.join(relative);
        let meta = match fs::symlink_metadata(&full) {
            Ok(meta) => meta,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(OnDisk::Missing),
            Err(e) => return Err(Self::io(&full)(e)),
        };
        let kind = meta.file_type();
        Ok(if kind.is_dir() {
            OnDisk::Dir
        } else if kind.is_symlink() {
            OnDisk::Entry(EntryKind::Symlink, meta.len())
        } else if kind.is_file() {
            let exec = meta.permissions().mode() & 0o111 != 0;
            let kind = if exec {
                EntryKind::Executable
            } else {
                EntryKind::File
            };
            OnDisk::Entry(kind, meta.len())
        } else {
            OnDisk::Unstorable
        })
    }

    /// The base tree's entry at `relative`: a blob's id and kind, or a subtree.
    fn base_entry(&self, relative: &Path) -> Option<BaseEntry<'a>> {
        let repo: &'a Repository = self.repo;
        let entry = self.base.get_path(relative).ok()?;
        match entry.kind() {
            Some(ObjectType::Tree) => repo.find_tree(entry.id()).ok().map(BaseEntry::Tree),
            Some(ObjectType::Blob) => {
                EntryKind::of_mode(entry.filemode()).map(|kind| BaseEntry::Blob(entry.id(), kind))
            }
            // A submodule's commit: the harness leaves it alone.
            _ => None,
        }
    }

    /// One path an overlay says may have changed.
    fn candidate(&mut self, relative: &Path) -> Result<(), SnapshotError> {
        if is_git_dir(relative) || relative.as_os_str().is_empty() {
            return Ok(());
        }
        let base = self.base_entry(relative);
        self.visit(relative, base, None)
    }

    /// Compares a workspace directory with the base's subtree at the same path, recursively.
    /// Untracked files under an ignored directory are skipped; tracked ones never are.
    fn compare_dir(
        &mut self,
        relative: &Path,
        base: Option<Tree<'a>>,
        ignored: bool,
    ) -> Result<(), SnapshotError> {
        let full = self.workspace.join(relative);
        let mut names = BTreeSet::new();
        for entry in fs::read_dir(&full).map_err(Self::io(&full))? {
            let name = entry.map_err(Self::io(&full))?.file_name();
            if name != ".git" {
                names.insert(name);
            }
        }
        for name in &names {
            let path = relative.join(name);
            let base_entry = base.as_ref().and_then(|_| self.base_entry(&path));
            self.visit(&path, base_entry, Some(ignored))?;
        }
        if let Some(tree) = &base {
            for entry in tree.iter() {
                let name = std::ffi::OsStr::from_bytes(entry.name_bytes());
                if !names.contains(name) {
                    self.removed.insert(relative.join(name));
                }
            }
        }
        Ok(())
    }

    /// Compares one workspace path with the base's entry there. `parent_ignored` is known when
    /// walking down a directory; `None` makes the path's parents be checked.
    fn visit(
        &mut self,
        path: &Path,
        base: Option<BaseEntry<'a>>,
        parent_ignored: Option<bool>,
    ) -> Result<(), SnapshotError> {
        let ignored = |view: &mut Self, is_dir| match parent_ignored {
            Some(parent) => parent || view.ignored(path, is_dir),
            None => view.ignored_with_parents(path, is_dir),
        };
        match self.on_disk(path)? {
            OnDisk::Missing | OnDisk::Unstorable => {
                if base.is_some() {
                    self.removed.insert(path.to_owned());
                }
            }
            OnDisk::Dir => {
                let subtree = match base {
                    Some(BaseEntry::Tree(tree)) => Some(tree),
                    Some(BaseEntry::Blob(..)) => {
                        self.removed.insert(path.to_owned());
                        None
                    }
                    None => None,
                };
                let ignored = ignored(self, true);
                if !(ignored && subtree.is_none()) {
                    self.compare_dir(path, subtree, ignored)?;
                }
            }
            OnDisk::Entry(kind, size) => {
                let base = match base {
                    Some(BaseEntry::Blob(oid, kind)) => Some((oid, kind)),
                    Some(BaseEntry::Tree(_)) => {
                        self.removed.insert(path.to_owned());
                        None
                    }
                    None if ignored(self, false) => return Ok(()),
                    None => None,
                };
                self.compare_file(path, kind, size, base)?;
            }
        }
        Ok(())
    }

    fn compare_file(
        &mut self,
        relative: &Path,
        kind: EntryKind,
        size: u64,
        base: Option<(Oid, EntryKind)>,
    ) -> Result<(), SnapshotError> {
        let full = self.workspace.join(relative);
        if let Some((oid, base_kind)) = base
            && base_kind == kind
        {
            let odb = self.repo.odb()?;
            let (base_size, _) = odb.read_header(oid)?;
            if base_size as u64 == size && self.hash(&full, kind)? == oid {
                return Ok(());
            }
        }
        // Deleted lines are in the patch too.
        let old_size = match base {
            Some((oid, _)) => self.repo.odb()?.read_header(oid)?.0 as u64,
            None => 0,
        };
        self.bytes = self.bytes.saturating_add(size).saturating_add(old_size);
        if self.bytes > self.limit {
            return Err(SnapshotError::TooLarge {
                limit: self.limit,
                path: relative.display().to_string(),
            });
        }
        let content = read_entry(&full, kind)?;
        let oid = self.repo.blob(&content)?;
        if base.is_none_or(|(base_oid, base_kind)| base_oid != oid || base_kind != kind) {
            self.written.push((relative.to_owned(), oid, kind));
        }
        Ok(())
    }

    fn hash(&self, full: &Path, kind: EntryKind) -> Result<Oid, SnapshotError> {
        Ok(match kind {
            EntryKind::Symlink => Oid::hash_object(ObjectType::Blob, &read_entry(full, kind)?)?,
            _ => Oid::hash_file(ObjectType::Blob, full)?,
        })
    }

    /// Whether the base's `.gitignore` files ignore `relative` or one of its parent directories.
    fn ignored_with_parents(&mut self, relative: &Path, is_dir: bool) -> bool {
        let mut prefix = PathBuf::new();
        let parents: Vec<_> = relative
            .parent()
            .map(|p| p.components().collect())
            .unwrap_or_default();
        for component in parents {
            prefix.push(component);
            if self.ignored(&prefix.clone(), true) {
                return true;
            }
        }
        self.ignored(relative, is_dir)
    }

    /// Whether the base's `.gitignore` files ignore `relative` itself: the deepest file with a
    /// matching rule decides, as in git.
    fn ignored(&mut self, relative: &Path, is_dir: bool) -> bool {
        let mut dirs: Vec<PathBuf> = relative.ancestors().skip(1).map(Path::to_owned).collect();
        dirs.reverse();
        let mut verdict = false;
        for dir in dirs {
            let Some(rules) = self.rules(&dir) else {
                continue;
            };
            let within = relative.strip_prefix(&dir).unwrap_or(relative);
            match rules.matched(within, is_dir) {
                Match::Ignore(_) => verdict = true,
                Match::Whitelist(_) => verdict = false,
                Match::None => {}
            }
        }
        verdict
    }

    fn rules(&mut self, dir: &Path) -> Option<&Gitignore> {
        if !self.ignores.contains_key(dir) {
            let rules = self.load_rules(dir);
            self.ignores.insert(dir.to_owned(), rules);
        }
        self.ignores.get(dir).and_then(Option::as_ref)
    }

    fn load_rules(&self, dir: &Path) -> Option<Gitignore> {
        let entry = self.base.get_path(&dir.join(".gitignore")).ok()?;
        let blob = self.repo.find_blob(entry.id()).ok()?;
        let mut builder = GitignoreBuilder::new("");
        for line in String::from_utf8_lossy(blob.content()).lines() {
            // A bad pattern is skipped, as git skips it.
            let _ = builder.add_line(None, line);
        }
        builder.build().ok()
    }
}

enum BaseEntry<'r> {
    Blob(Oid, EntryKind),
    Tree(Tree<'r>),
}

/// A file's bytes, or a symlink's target, never following the link.
fn read_entry(full: &Path, kind: EntryKind) -> Result<Vec<u8>, SnapshotError> {
    let io = |source| SnapshotError::Io {
        path: full.to_owned(),
        source,
    };
    match kind {
        EntryKind::Symlink => Ok(fs::read_link(full).map_err(io)?.into_os_string().into_vec()),
        _ => fs::read(full).map_err(io),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn git(dir: &Path, args: &[&str]) -> String {
        let out = Command::new("git")
            .args(["-c", "user.name=t", "-c", "user.email=t@t"])
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// A repo with a base commit, and a clone of it to play the workspace.
    fn setup(files: &[(&str, &str)]) -> (tempfile::TempDir, PathBuf, PathBuf, String) {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("repo");
        fs::create_dir(&repo).unwrap();
        git(&repo, &["init", "-q"]);
        for (path, content) in files {
            let file = repo.join(path);
            fs::create_dir_all(file.parent().unwrap()).unwrap();
            fs::write(file, content).unwrap();
        }
        git(&repo, &["add", "-A"]);
        git(&repo, &["commit", "-qm", "base"]);
        let base = git(&repo, &["rev-parse", "HEAD"]);
        let ws = dir.path().join("ws");
        git(dir.path(), &["clone", "-q", "repo", "ws"]);
        (dir, repo.join(".git"), ws, base)
    }

    fn paths(snapshot: &Snapshot) -> Vec<String> {
        crate::delta::changed_paths(&String::from_utf8_lossy(&snapshot.patch))
    }

    #[test]
    fn agent_git_tricks_do_not_hide_changes() {
        let (_dir, objects, ws, base) = setup(&[
            (".gitignore", "*.log\n"),
            ("src/a.py", "a = 1\n"),
            ("src/b.py", "b = 1\n"),
        ]);
        fs::write(ws.join("src/a.py"), "a = 2\n").unwrap();
        git(&ws, &["update-index", "--skip-worktree", "src/a.py"]);
        fs::write(ws.join("src/b.py"), "b = 2\n").unwrap();
        git(&ws, &["update-index", "--assume-unchanged", "src/b.py"]);
        // A package hidden by a .gitignore that ignores itself, and by the agent's excludes.
        fs::create_dir_all(ws.join("unittest")).unwrap();
        fs::write(ws.join("unittest/__init__.py"), "fake\n").unwrap();
        fs::write(ws.join("unittest/.gitignore"), "*\n").unwrap();
        fs::write(ws.join(".git/info/exclude"), "hidden.py\n").unwrap();
        fs::write(ws.join("hidden.py"), "x\n").unwrap();
        git(&ws, &["config", "core.excludesFile", "/dev/null"]);
        // Ignored by the base's own rules: stays out.
        fs::write(ws.join("run.log"), "noise\n").unwrap();
        let snapshot = snapshot(&objects, &ws, &base, None, u64::MAX).unwrap();
        assert_eq!(
            paths(&snapshot),
            [
                "hidden.py",
                "src/a.py",
                "src/b.py",
                "unittest/.gitignore",
                "unittest/__init__.py"
            ]
        );
    }

    #[test]
    fn overlay_candidates_match_a_full_walk() {
        let (_dir, objects, ws, base) = setup(&[
            ("keep.txt", "k\n"),
            ("gone/x.txt", "x\n"),
            ("mod.txt", "m\n"),
            ("build/.gitignore", "*\n!.gitignore\n"),
        ]);
        fs::remove_dir_all(ws.join("gone")).unwrap();
        fs::write(ws.join("mod.txt"), "m2\n").unwrap();
        fs::write(ws.join("build/out.o"), "obj\n").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", ws.join("link")).unwrap();
        let full = snapshot(&objects, &ws, &base, None, u64::MAX).unwrap();
        let only: Vec<String> = ["gone", "mod.txt", "build/out.o", "link"]
            .map(str::to_owned)
            .to_vec();
        let partial = snapshot(&objects, &ws, &base, Some(&only), u64::MAX).unwrap();
        assert_eq!(paths(&full), ["gone/x.txt", "link", "mod.txt"]);
        assert_eq!(full.patch, partial.patch);
        assert_eq!(full.changes, partial.changes);
        assert!(full.changes.contains(&FileChange::Write {
            path: "link".into(),
            content: b"/etc/passwd".to_vec(),
            kind: EntryKind::Symlink
        }));
    }

    #[test]
    fn too_large_stops_before_reading() {
        let (_dir, objects, ws, base) = setup(&[("a.txt", "a\n")]);
        fs::write(ws.join("big.bin"), vec![0u8; 4096]).unwrap();
        let err = snapshot(&objects, &ws, &base, None, 1000).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("the diff is larger than max_diff (1000 B)"),
            "{err}"
        );
        assert!(snapshot(&objects, &ws, &base, None, 10_000).is_ok());
    }

    #[test]
    fn unchanged_workspace_has_an_empty_patch() {
        let (_dir, objects, ws, base) = setup(&[("a.txt", "a\n"), ("bin/run", "#!/bin/sh\n")]);
        let snapshot = snapshot(&objects, &ws, &base, None, u64::MAX).unwrap();
        assert!(snapshot.patch.is_empty() && snapshot.changes.is_empty());
    }
}
