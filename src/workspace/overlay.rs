//! Writing files over a workspace: hidden tests after the agent, or a reference solution.
//!
//! A directory overlay copies every file to the same relative path. A patch overlay is applied
//! to the base tree in memory (git2, or `git apply --cached` on a scratch index for what git2
//! cannot read), and the resulting files are written out, so it lands the same whatever the
//! agent did to those paths. Either way, a symlink or file the agent planted where a directory
//! or file must go is removed first: nothing is written through a link.

use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use git2::{Diff, Oid, Repository};

/// How a file is stored: git knows regular files, executables and symlinks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    /// A regular file (mode 100644).
    File,
    /// A regular file with the executable bit (mode 100755).
    Executable,
    /// A symbolic link, whose content is its target (mode 120000).
    Symlink,
}

impl EntryKind {
    /// The git file mode of this kind.
    pub fn mode(self) -> git2::FileMode {
        match self {
            Self::File => git2::FileMode::Blob,
            Self::Executable => git2::FileMode::BlobExecutable,
            Self::Symlink => git2::FileMode::Link,
        }
    }

    /// The kind of a git file mode; `None` for a folder, submodule or unknown mode.
    pub fn of_mode(mode: i32) -> Option<Self> {
        match mode {
            0o100644 => Some(Self::File),
            0o100755 => Some(Self::Executable),
            0o120000 => Some(Self::Symlink),
            _ => None,
        }
    }
}

/// Files to lay over a workspace.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "kind", content = "path", rename_all = "snake_case")]
pub enum Overlay {
    /// A directory whose files are copied over the workspace root.
    Dir(PathBuf),
    /// A unified diff (as `git diff --binary` writes it) against the base.
    Patch(PathBuf),
}

impl Overlay {
    /// A `.patch` or `.diff` file is a patch; anything else a directory.
    pub fn from_path(path: PathBuf) -> Self {
        match path.extension().and_then(|e| e.to_str()) {
            Some("patch" | "diff") => Self::Patch(path),
            _ => Self::Dir(path),
        }
    }

    /// The directory or patch file.
    pub fn path(&self) -> &Path {
        match self {
            Self::Dir(path) | Self::Patch(path) => path,
        }
    }
}

/// Why an overlay could not be laid over a workspace.
#[derive(Debug, thiserror::Error)]
pub enum OverlayError {
    /// A file could not be read, written or removed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or folder.
        path: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
    /// A patch overlay does not apply to the base.
    #[error("{}: {message}", path.display())]
    Patch {
        /// The patch file.
        path: PathBuf,
        /// Why it does not apply.
        message: String,
    },
    /// A path of the overlay leads outside the workspace (`..`, an absolute path).
    #[error("{}: refusing to write outside the workspace", path.display())]
    Escape {
        /// The path, relative to the workspace.
        path: PathBuf,
    },
}

/// Why a patch does not apply to a tree (see [`patched_files`]).
#[derive(Debug, thiserror::Error)]
pub enum PatchError {
    /// The file does not parse as a git diff.
    #[error("not a patch: {}", source.message())]
    NotAPatch {
        /// git2's parse error.
        #[source]
        source: git2::Error,
    },
    /// The patch deletes a file with content but carries no hunk removing it.
    #[error("a deletion with no hunk of a file that is not empty")]
    NonEmptyDeletion,
    /// libgit2 could not apply it, or read what it applied.
    #[error("{}", source.message())]
    Apply {
        /// git2's reason.
        #[source]
        source: git2::Error,
    },
    /// A file the patch leaves could not be read from the repository.
    #[error("{}: {}", path.display(), source.message())]
    Blob {
        /// The file, relative to the tree.
        path: PathBuf,
        /// git2's reason.
        #[source]
        source: git2::Error,
    },
    /// The scratch repository `git apply` runs in could not be made.
    #[error("cannot prepare `git apply`: {}", source.message())]
    ScratchRepo {
        /// git2's reason.
        #[source]
        source: git2::Error,
    },
    /// A file of that scratch repository could not be written.
    #[error("cannot prepare `git apply`: {source}")]
    ScratchFile {
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// `git apply` refused it; its reasons, one per line of its stderr, joined by `; `.
    #[error("{reasons}")]
    Rejected {
        /// The reasons, as one string.
        reasons: String,
    },
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> OverlayError + '_ {
    move |source| OverlayError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Lays `overlay` over `workspace`; `base` is the tree-ish a patch applies to, read from the
/// workspace's repo or, when that is broken, from `objects`. Returns the workspace-relative
/// paths written or removed.
pub fn apply_overlay(
    workspace: &Path,
    base: &str,
    overlay: &Overlay,
    objects: Option<&Path>,
) -> Result<Vec<String>, OverlayError> {
    apply_overlay_edited(workspace, base, overlay, objects, &mut |_, _| {})
}

/// As [`apply_overlay`], with each file's content passed through `edit` (its workspace-relative
/// path, its bytes) before it is written: every file is written once, through one path, whatever
/// the edit (the mutation check's mutants are spliced in here, so a mutated test file is laid
/// exactly as an unmutated one is).
pub fn apply_overlay_edited(
    workspace: &Path,
    base: &str,
    overlay: &Overlay,
    objects: Option<&Path>,
    edit: &mut dyn FnMut(&Path, &mut Vec<u8>),
) -> Result<Vec<String>, OverlayError> {
    match overlay {
        Overlay::Dir(dir) => copy_dir(workspace, dir, edit),
        Overlay::Patch(patch) => apply_patch(workspace, base, patch, objects, edit),
    }
}

fn copy_dir(
    workspace: &Path,
    source: &Path,
    edit: &mut dyn FnMut(&Path, &mut Vec<u8>),
) -> Result<Vec<String>, OverlayError> {
    let mut written = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(relative) = stack.pop() {
        let dir = source.join(&relative);
        let mut entries: Vec<_> = fs::read_dir(&dir)
            .map_err(io_err(&dir))?
            .collect::<Result<_, _>>()
            .map_err(io_err(&dir))?;
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            let rel = relative.join(entry.file_name());
            let kind = entry.file_type().map_err(io_err(&entry.path()))?;
            if kind.is_dir() {
                stack.push(rel);
            } else {
                let mut content = fs::read(entry.path()).map_err(io_err(&entry.path()))?;
                edit(&rel, &mut content);
                let mode = entry
                    .metadata()
                    .map_err(io_err(&entry.path()))?
                    .permissions()
                    .mode();
                write_file(workspace, &rel, &content, mode & 0o111 != 0)?;
                written.push(rel.to_string_lossy().into_owned());
            }
        }
    }
    written.sort();
    Ok(written)
}

fn apply_patch(
    workspace: &Path,
    base: &str,
    patch: &Path,
    objects: Option<&Path>,
    edit: &mut dyn FnMut(&Path, &mut Vec<u8>),
) -> Result<Vec<String>, OverlayError> {
    let perr = |message: String| OverlayError::Patch {
        path: patch.to_owned(),
        message,
    };
    let bytes = fs::read(patch).map_err(io_err(patch))?;
    let repo = Repository::open(workspace)
        .ok()
        .filter(|repo| Oid::from_str(base).is_ok_and(|oid| repo.find_object(oid, None).is_ok()))
        .map_or_else(
            || match objects {
                Some(objects) => Repository::open_bare(objects),
                None => Repository::open(workspace),
            },
            Ok,
        )
        .map_err(|e| perr(e.message().to_owned()))?;
    let oid = Oid::from_str(base).map_err(|e| perr(e.message().to_owned()))?;
    let tree = repo
        .find_object(oid, None)
        .and_then(|object| object.peel_to_tree())
        .map_err(|e| perr(format!("base {base}: {}", e.message())))?;
    let mut files = patched_files(&repo, &tree, &bytes)
        .map_err(|why| perr(format!("does not apply to the base {base}: {why}")))?;
    for file in &mut files {
        if let Some((content, EntryKind::File | EntryKind::Executable)) = &mut file.content {
            edit(&file.path, content);
        }
    }
    // Removals first: a file the patch deletes may be where it writes a directory.
    for file in files.iter().filter(|f| f.content.is_none()) {
        remove_file(workspace, &file.path)?;
    }
    for file in &files {
        if let Some((content, kind)) = &file.content {
            write_entry(workspace, &file.path, Some(content), *kind)?;
        }
    }
    let mut touched: Vec<String> = files
        .iter()
        .map(|f| f.path.to_string_lossy().into_owned())
        .collect();
    touched.sort();
    touched.dedup();
    Ok(touched)
}

/// One path a patch changes: its new content and kind, or `None` when the patch removes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatchedFile {
    /// The path, relative to the tree.
    pub path: PathBuf,
    /// The file's new bytes and kind; `None` when the patch removes it.
    pub content: Option<(Vec<u8>, EntryKind)>,
}

/// What `patch` does to `tree`, read from `repo`, without touching any work tree; the reason
/// when it does not apply.
///
/// libgit2 applies what it can read, which is everything `git diff` writes once an empty file
/// added or deleted with no hunk is given the empty literal libgit2 expects. What it still
/// rejects (a diff made by `diff -u`, a patch that does not apply) goes to `git apply --cached`
/// on an index of the base, in a scratch repository that borrows `repo`'s objects: no
/// configuration, hook or work tree of any other repository is involved. A patch neither takes
/// fails with git's reason, which names the file.
///
/// Nothing is written to `repo`'s object store: the blobs libgit2 makes while applying live in
/// an in-memory backend of a handle of its own (`repo` is often a history repository that
/// workspaces borrow objects from, which must hold nothing beyond what the base reaches), and
/// `git apply` writes into its scratch repository.
pub fn patched_files(
    repo: &Repository,
    tree: &git2::Tree,
    patch: &[u8],
) -> Result<Vec<PatchedFile>, PatchError> {
    let scratch = in_memory(repo).map_err(|source| PatchError::ScratchRepo { source })?;
    let scratch_tree = scratch
        .find_tree(tree.id())
        .map_err(|source| PatchError::Apply { source })?;
    match libgit2_apply(&scratch, &scratch_tree, patch) {
        Ok(files) => Ok(files),
        Err(libgit2_says) => git_apply(repo, tree, patch).unwrap_or(Err(libgit2_says)),
    }
}

/// A new handle on `repo` whose writes go to memory only (an in-memory object backend ahead of
/// the disk ones), dropped with the handle.
fn in_memory(repo: &Repository) -> Result<Repository, git2::Error> {
    let handle = Repository::open(repo.path())?;
    // The backend belongs to the handle's object database (libgit2 keeps one per repository,
    // whatever `odb()` handle names it), so it outlives this one.
    handle.odb()?.add_new_mempack_backend(1000)?;
    Ok(handle)
}

/// Every path the patch names, as the patched tree has it: written, or removed when absent.
fn libgit2_apply(
    repo: &Repository,
    tree: &git2::Tree,
    patch: &[u8],
) -> Result<Vec<PatchedFile>, PatchError> {
    let rewritten = with_empty_contents(patch);
    let readable = rewritten.as_ref().map_or(patch, |(bytes, _)| bytes);
    let diff = Diff::from_buffer(readable).map_err(|source| PatchError::NotAPatch { source })?;
    for &ordinal in rewritten.iter().flat_map(|(_, deletions)| deletions) {
        let path = diff.get_delta(ordinal).and_then(|d| d.old_file().path());
        let empty = path
            .and_then(|path| tree.get_path(path).ok())
            .and_then(|entry| repo.find_blob(entry.id()).ok())
            .is_some_and(|blob| blob.size() == 0);
        if !empty {
            return Err(PatchError::NonEmptyDeletion);
        }
    }
    let index = repo
        .apply_to_tree(tree, &diff, None)
        .map_err(|source| PatchError::Apply { source })?;
    let mut paths = Vec::new();
    for delta in diff.deltas() {
        paths.extend(delta.old_file().path().map(Path::to_owned));
        paths.extend(delta.new_file().path().map(Path::to_owned));
    }
    paths.sort();
    paths.dedup();
    let mut files = Vec::new();
    for path in paths {
        let entry = index.get_path(&path, 0).map(|e| (e.id, e.mode));
        files.extend(read_entry(repo, path, entry)?);
    }
    Ok(files)
}

/// Git's extended header lines, which end where a hunk or binary patch would start.
const HEADER_LINES: [&[u8]; 12] = [
    b"diff --git ",
    b"index ",
    b"new file mode ",
    b"deleted file mode ",
    b"old mode ",
    b"new mode ",
    b"similarity index ",
    b"dissimilarity index ",
    b"rename from ",
    b"rename to ",
    b"copy from ",
    b"copy to ",
];

/// `patch` with an empty binary literal after each header that adds or deletes an empty file
/// with no hunk (as git writes it), which libgit2 cannot read; the literal is what
/// `git diff --binary` writes for an empty side. Also the ordinals of the sections that delete
/// a file this way, whose base must be checked empty (libgit2 does not). `None` when there is
/// no such header.
fn with_empty_contents(patch: &[u8]) -> Option<(Vec<u8>, Vec<usize>)> {
    const EMPTY: &[u8] = b"GIT binary patch\nliteral 0\nHcmV?d00001\n\nliteral 0\nHcmV?d00001\n\n";
    let lines: Vec<&[u8]> = patch.split_inclusive(|&b| b == b'\n').collect();
    let starts: Vec<usize> = (0..lines.len())
        .filter(|&i| lines[i].starts_with(b"diff --git "))
        .chain([lines.len()])
        .collect();
    let mut out = Vec::with_capacity(patch.len() + EMPTY.len());
    let (mut changed, mut deletions) = (false, Vec::new());
    out.extend(lines[..starts[0]].concat());
    for (ordinal, section) in starts.windows(2).enumerate() {
        let lines = &lines[section[0]..section[1]];
        let header_end = lines
            .iter()
            .take_while(|line| HEADER_LINES.iter().any(|p| line.starts_with(p)))
            .count();
        let has = |prefix: &[u8]| lines[..header_end].iter().any(|l| l.starts_with(prefix));
        let deletes = has(b"deleted file mode ");
        let content = lines[header_end..].iter().any(|line| {
            [
                &b"--- "[..],
                b"+++ ",
                b"@@ ",
                b"GIT binary patch",
                b"Binary files ",
            ]
            .iter()
            .any(|p| line.starts_with(p))
        });
        out.extend(lines[..header_end].concat());
        if (deletes || has(b"new file mode ")) && !content {
            if !out.ends_with(b"\n") {
                out.push(b'\n');
            }
            out.extend_from_slice(EMPTY);
            changed = true;
            if deletes {
                deletions.push(ordinal);
            }
        }
        out.extend(lines[header_end..].concat());
    }
    changed.then_some((out, deletions))
}

/// A changed index entry as a file to write, or a removal; `None` for a submodule entry, which
/// has no file in a work tree.
fn read_entry(
    repo: &Repository,
    path: PathBuf,
    entry: Option<(Oid, u32)>,
) -> Result<Option<PatchedFile>, PatchError> {
    let Some((id, mode)) = entry else {
        return Ok(Some(PatchedFile {
            path,
            content: None,
        }));
    };
    let Some(kind) = EntryKind::of_mode(mode as i32) else {
        return Ok(None);
    };
    let blob = repo.find_blob(id).map_err(|source| PatchError::Blob {
        path: path.clone(),
        source,
    })?;
    Ok(Some(PatchedFile {
        path,
        content: Some((blob.content().to_vec(), kind)),
    }))
}

/// `git apply --cached` on an index of `tree`; `None` when git cannot be run at all.
fn git_apply(
    repo: &Repository,
    tree: &git2::Tree,
    patch: &[u8],
) -> Option<Result<Vec<PatchedFile>, PatchError>> {
    let scratch = tempfile::Builder::new()
        .prefix("deltabench-patch-")
        .tempdir()
        .ok()?;
    let dir = scratch.path();
    let prepared = (|| {
        let msg = |source: git2::Error| PatchError::ScratchRepo { source };
        let file = |source: io::Error| PatchError::ScratchFile { source };
        let scratch_repo = Repository::init_bare(dir).map_err(msg)?;
        let objects = repo.commondir().join("objects");
        fs::write(
            dir.join("objects/info/alternates"),
            format!("{}\n", objects.display()),
        )
        .map_err(file)?;
        let mut index = git2::Index::open(&dir.join("index")).map_err(msg)?;
        index.read_tree(tree).map_err(msg)?;
        index.write().map_err(msg)?;
        fs::write(dir.join("patch.diff"), patch).map_err(file)?;
        Ok(scratch_repo)
    })();
    let scratch_repo = match prepared {
        Ok(scratch_repo) => scratch_repo,
        Err(why) => return Some(Err(why)),
    };
    let output = super::git_command(dir)
        .args(["--git-dir=.", "apply", "--cached", "patch.diff"])
        .env("GIT_INDEX_FILE", dir.join("index"))
        .env("LC_ALL", "C")
        .output()
        .ok()?;
    if !output.status.success() {
        let said = String::from_utf8_lossy(&output.stderr);
        let reasons: Vec<&str> = said
            .lines()
            .map(|line| line.trim().trim_start_matches("error: "))
            .filter(|line| !line.is_empty())
            .collect();
        return Some(Err(PatchError::Rejected {
            reasons: reasons.join("; "),
        }));
    }
    Some(changes_in_index(
        &scratch_repo,
        tree.id(),
        &dir.join("index"),
    ))
}

/// The files where the index at `index_path` differs from the tree `base`.
fn changes_in_index(
    repo: &Repository,
    base: Oid,
    index_path: &Path,
) -> Result<Vec<PatchedFile>, PatchError> {
    let msg = |source: git2::Error| PatchError::Apply { source };
    let index = git2::Index::open(index_path).map_err(msg)?;
    let tree = repo.find_tree(base).map_err(msg)?;
    let diff = repo
        .diff_tree_to_index(Some(&tree), Some(&index), None)
        .map_err(msg)?;
    let mut files = Vec::new();
    for delta in diff.deltas() {
        let (old, new) = (delta.old_file(), delta.new_file());
        let entry = match delta.status() {
            git2::Delta::Deleted => None,
            _ => Some((new.id(), u32::from(new.mode()))),
        };
        let Some(path) = entry.map_or(old.path(), |_| new.path()).map(Path::to_owned) else {
            continue;
        };
        if let Some(file) = read_entry(repo, path, entry)? {
            files.push(file);
        }
    }
    Ok(files)
}

/// Checks `relative` stays inside the workspace and makes every parent a real directory.
fn prepare_parent(workspace: &Path, relative: &Path) -> Result<PathBuf, OverlayError> {
    if relative
        .components()
        .any(|c| !matches!(c, Component::Normal(_)))
    {
        return Err(OverlayError::Escape {
            path: relative.to_owned(),
        });
    }
    let mut dir = workspace.to_owned();
    let parents: Vec<_> = relative
        .parent()
        .map(|p| p.components().collect())
        .unwrap_or_default();
    for component in parents {
        dir.push(component);
        match fs::symlink_metadata(&dir) {
            Ok(meta) if meta.is_dir() => continue,
            Ok(_) => fs::remove_file(&dir).map_err(io_err(&dir))?,
            Err(_) => {}
        }
        fs::create_dir(&dir).map_err(io_err(&dir))?;
    }
    Ok(workspace.join(relative))
}

fn write_file(
    workspace: &Path,
    relative: &Path,
    content: &[u8],
    executable: bool,
) -> Result<(), OverlayError> {
    let target = prepare_parent(workspace, relative)?;
    match fs::symlink_metadata(&target) {
        Ok(meta) if meta.is_dir() => fs::remove_dir_all(&target).map_err(io_err(&target))?,
        Ok(_) => fs::remove_file(&target).map_err(io_err(&target))?,
        Err(_) => {}
    }
    fs::write(&target, content).map_err(io_err(&target))?;
    let mode = if executable { 0o755 } else { 0o644 };
    fs::set_permissions(&target, fs::Permissions::from_mode(mode)).map_err(io_err(&target))
}

/// Writes one entry of a tree (a file, an executable or a symlink) at `relative`, or removes
/// whatever is there when `content` is `None`; nothing is written through a planted link.
pub fn write_entry(
    workspace: &Path,
    relative: &Path,
    content: Option<&[u8]>,
    kind: EntryKind,
) -> Result<(), OverlayError> {
    match (content, kind) {
        (None, _) => remove_file(workspace, relative),
        (Some(content), EntryKind::Symlink) => {
            remove_file(workspace, relative)?;
            let target = prepare_parent(workspace, relative)?;
            let link = std::ffi::OsStr::from_bytes(content);
            std::os::unix::fs::symlink(link, &target).map_err(io_err(&target))
        }
        (Some(content), kind) => {
            write_file(workspace, relative, content, kind == EntryKind::Executable)
        }
    }
}

/// Sets the times of what was laid in `workspace` (`relative` paths, in the order written, then
/// every folder above them, deepest first, the root last) the same way in every run: each is
/// stat'ed, so the kernel's multigrain clock gives the next update a fine-grained time, then
/// touched, so birth < mtime == ctime always. Without it, whether a file's mtime equals its
/// birth depends on how fast it was written and on other processes' stat calls, and a verify
/// command could tell two runs of one trial apart by it.
pub fn settle_times<'a>(
    workspace: &Path,
    relative: impl IntoIterator<Item = &'a Path>,
) -> Result<(), OverlayError> {
    use nix::sys::stat::{UtimensatFlags, utimensat};
    use nix::sys::time::TimeSpec;
    let mut folders = std::collections::BTreeSet::new();
    let touch = |path: &Path| -> Result<(), OverlayError> {
        if fs::symlink_metadata(path).is_err() {
            return Ok(()); // removed
        }
        utimensat(
            nix::fcntl::AT_FDCWD,
            path,
            &TimeSpec::UTIME_NOW,
            &TimeSpec::UTIME_NOW,
            UtimensatFlags::NoFollowSymlink,
        )
        .map_err(|e| io_err(path)(std::io::Error::from(e)))
    };
    for path in relative {
        touch(&workspace.join(path))?;
        folders.extend(path.ancestors().skip(1).map(Path::to_owned));
    }
    // Deepest first: touching a folder's entry never changes the folder, but writing one did.
    let mut folders: Vec<_> = folders.into_iter().collect();
    folders.sort_by_key(|f| std::cmp::Reverse(f.components().count()));
    for folder in folders {
        touch(&workspace.join(folder))?;
    }
    Ok(())
}

/// [`settle_times`] for everything under `root`, `root` included: a folder the harness prepares
/// whole, like a verify run's home.
pub fn settle_tree(root: &Path) -> Result<(), OverlayError> {
    fn walk(root: &Path, relative: &Path, out: &mut Vec<PathBuf>) -> Result<(), OverlayError> {
        for (name, is_dir) in sorted_entries(&root.join(relative))? {
            let path = relative.join(name);
            if is_dir {
                walk(root, &path, out)?;
            }
            out.push(path);
        }
        Ok(())
    }
    let mut paths = Vec::new();
    walk(root, Path::new(""), &mut paths)?;
    settle_times(root, paths.iter().map(PathBuf::as_path))
}

/// [`settle_tree`] for the folder `own` that holds a workspace mounted at `workspace` (an
/// overlay's upper and work folders beside it): everything in it but the mounted tree.
pub fn settle_beside(own: &Path, workspace: &Path) -> Result<(), OverlayError> {
    let entries = sorted_entries(own)?;
    for (name, is_dir) in &entries {
        let path = own.join(name);
        if *is_dir && path != workspace {
            // Best effort inside: the kernel makes an overlay's `work/work` readable by root
            // alone, and a user without it has no other way in either.
            let _ = settle_tree(&path);
        }
    }
    settle_times(own, entries.iter().map(|(name, _)| Path::new(name)))
}

/// The entries of `dir` by name, each with whether it is a folder (not followed).
fn sorted_entries(dir: &Path) -> Result<Vec<(std::ffi::OsString, bool)>, OverlayError> {
    let mut entries = fs::read_dir(dir)
        .map_err(io_err(dir))?
        .map(|entry| entry.and_then(|e| Ok((e.file_name(), e.file_type()?.is_dir()))))
        .collect::<Result<Vec<_>, _>>()
        .map_err(io_err(dir))?;
    entries.sort();
    Ok(entries)
}

fn remove_file(workspace: &Path, relative: &Path) -> Result<(), OverlayError> {
    let target = prepare_parent(workspace, relative)?;
    match fs::symlink_metadata(&target) {
        Ok(meta) if meta.is_dir() => fs::remove_dir_all(&target).map_err(io_err(&target)),
        Ok(_) => fs::remove_file(&target).map_err(io_err(&target)),
        Err(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workspace::git::run_git;

    fn git(dir: &Path, args: &[&str]) -> String {
        let mut all = vec!["-c", "user.name=t", "-c", "user.email=t@e"];
        all.extend_from_slice(args);
        run_git(dir, &all).unwrap()
    }

    fn write(root: &Path, path: &str, content: &[u8]) {
        let target = root.join(path);
        fs::create_dir_all(target.parent().unwrap()).unwrap();
        fs::write(target, content).unwrap();
    }

    fn chmod(root: &Path, path: &str, mode: u32) {
        fs::set_permissions(root.join(path), fs::Permissions::from_mode(mode)).unwrap();
    }

    /// Every file under `root` but `.git`: its kind and content (a link's target).
    fn listing(root: &Path) -> Vec<(String, &'static str, Vec<u8>)> {
        let mut found = Vec::new();
        let mut stack = vec![root.to_owned()];
        while let Some(dir) = stack.pop() {
            for entry in fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                let rel = path
                    .strip_prefix(root)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                let meta = fs::symlink_metadata(&path).unwrap();
                if rel == ".git" {
                    continue;
                } else if meta.is_dir() {
                    stack.push(path);
                } else if meta.file_type().is_symlink() {
                    let target = fs::read_link(&path).unwrap();
                    found.push((rel, "link", target.as_os_str().as_bytes().to_vec()));
                } else {
                    let kind = if meta.permissions().mode() & 0o111 != 0 {
                        "exec"
                    } else {
                        "file"
                    };
                    found.push((rel, kind, fs::read(&path).unwrap()));
                }
            }
        }
        found.sort();
        found
    }

    /// A repo whose base has a text file, an empty file, a script and a binary file.
    fn base_repo(root: &Path) -> (PathBuf, String) {
        let repo = root.join("repo");
        fs::create_dir_all(&repo).unwrap();
        git(&repo, &["init", "-q", "-b", "main"]);
        write(&repo, "a.txt", b"a\n");
        write(&repo, "empty", b"");
        write(&repo, "run.sh", b"echo run\n");
        write(&repo, "moved.txt", b"one\ntwo\nthree\n");
        write(&repo, "data.bin", b"\x00\x01\x02bin");
        git(&repo, &["add", "-A"]);
        git(&repo, &["commit", "-q", "-m", "base"]);
        let base = git(&repo, &["rev-parse", "HEAD"]);
        (repo, base)
    }

    /// The patch `change` makes, as `git diff --cached --binary ARGS` writes it.
    fn patch_of(repo: &Path, diff_args: &[&str], change: impl FnOnce(&Path)) -> Vec<u8> {
        change(repo);
        git(repo, &["add", "-A"]);
        let mut args = vec!["diff", "--cached", "--binary"];
        args.extend_from_slice(diff_args);
        let output = crate::workspace::git_command(repo)
            .args(&args)
            .output()
            .unwrap();
        git(repo, &["reset", "-q", "--hard"]);
        git(repo, &["clean", "-q", "-fdx"]);
        output.stdout
    }

    /// Applies `patch` with `apply_overlay` to a plain copy of the base (objects read from the
    /// repo, as the verify workspace does) and with `git apply` to a clone, and compares.
    fn lands_as_git_applies_it(root: &Path, repo: &Path, base: &str, name: &str, patch: &[u8]) {
        let file = root.join(format!("{name}.patch"));
        fs::write(&file, patch).unwrap();
        let truth = root.join(format!("{name}-git"));
        git(
            root,
            &[
                "clone",
                "-q",
                &repo.to_string_lossy(),
                &truth.to_string_lossy(),
            ],
        );
        git(&truth, &["apply", &file.to_string_lossy()]);
        let ours = root.join(format!("{name}-ours"));
        git(
            root,
            &[
                "clone",
                "-q",
                &repo.to_string_lossy(),
                &ours.to_string_lossy(),
            ],
        );
        fs::remove_dir_all(ours.join(".git")).unwrap();
        let touched = apply_overlay(&ours, base, &Overlay::Patch(file), Some(&repo.join(".git")))
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(!touched.is_empty(), "{name}: nothing written");
        assert_eq!(listing(&ours), listing(&truth), "{name}");
        assert_ne!(
            listing(&ours),
            listing(repo),
            "{name}: the patch changed nothing"
        );
    }

    #[test]
    fn every_patch_git_applies_lands_as_git_applies_it() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        let (repo, base) = base_repo(root);
        let cases: Vec<(&str, Vec<u8>)> = vec![
            (
                "empty-file-added-beside-a-test",
                patch_of(&repo, &[], |r| {
                    write(r, "tests/__init__.py", b"");
                    write(r, "tests/test_a.py", b"def test_a():\n    pass\n");
                }),
            ),
            (
                "empty-file-deleted",
                patch_of(&repo, &[], |r| {
                    fs::remove_file(r.join("empty")).unwrap();
                }),
            ),
            (
                "empty-executable-added",
                patch_of(&repo, &[], |r| {
                    write(r, "bin/tool", b"");
                    chmod(r, "bin/tool", 0o755);
                }),
            ),
            (
                "mode-change",
                patch_of(&repo, &[], |r| chmod(r, "run.sh", 0o755)),
            ),
            (
                "pure-rename",
                patch_of(&repo, &["-M"], |r| {
                    fs::rename(r.join("moved.txt"), r.join("renamed.txt")).unwrap();
                }),
            ),
            (
                "rename-and-mode",
                patch_of(&repo, &["-M"], |r| {
                    fs::rename(r.join("moved.txt"), r.join("moved.sh")).unwrap();
                    chmod(r, "moved.sh", 0o755);
                }),
            ),
            (
                "copy",
                patch_of(&repo, &["-C", "-C"], |r| {
                    fs::copy(r.join("moved.txt"), r.join("copied.txt")).unwrap();
                }),
            ),
            (
                "binary",
                patch_of(&repo, &[], |r| {
                    write(r, "data.bin", b"\x00\x01\x03changed");
                    write(r, "new.bin", b"\x00new");
                }),
            ),
            (
                "symlink",
                patch_of(&repo, &[], |r| {
                    std::os::unix::fs::symlink("a.txt", r.join("link")).unwrap();
                }),
            ),
            (
                "file-becomes-directory",
                patch_of(&repo, &[], |r| {
                    fs::remove_file(r.join("empty")).unwrap();
                    write(r, "empty/inside.txt", b"x\n");
                }),
            ),
        ];
        let git2_repo = Repository::open(&repo).unwrap();
        let tree = git2_repo
            .revparse_single(&base)
            .unwrap()
            .peel_to_tree()
            .unwrap();
        for (name, patch) in &cases {
            lands_as_git_applies_it(root, &repo, &base, name, patch);
            // What git diff writes never needs the `git apply` fallback.
            libgit2_apply(&git2_repo, &tree, patch).unwrap_or_else(|e| panic!("{name}: {e}"));
        }
        // As `git format-patch` ends a mail, after an empty file's header.
        let mut signed = cases[0].1.clone();
        signed.extend_from_slice(b"-- \n2.47.3\n\n");
        let empty_last = patch_of(&repo, &[], |r| write(r, "zz/__init__.py", b""));
        signed.extend_from_slice(&empty_last);
        signed.extend_from_slice(b"-- \n2.47.3\n\n");
        lands_as_git_applies_it(root, &repo, &base, "format-patch", &signed);
        libgit2_apply(&git2_repo, &tree, &signed).unwrap();
        let traditional = b"--- a/a.txt\n+++ b/a.txt\n@@ -1 +1,2 @@\n a\n+more\n";
        lands_as_git_applies_it(root, &repo, &base, "not-from-git", traditional);
    }

    #[test]
    fn a_patch_that_does_not_apply_names_the_file_and_why() {
        let tmp = tempfile::tempdir().unwrap();
        let (repo, base) = base_repo(tmp.path());
        let check = |patch: &[u8]| {
            let file = tmp.path().join("bad.patch");
            fs::write(&file, patch).unwrap();
            let err = apply_overlay(&repo, &base, &Overlay::Patch(file.clone()), None)
                .unwrap_err()
                .to_string();
            assert!(err.starts_with(&format!("{}: ", file.display())), "{err}");
            err
        };
        let stale =
            check(b"diff --git a/a.txt b/a.txt\n--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-b\n+c\n");
        assert!(
            stale.contains("patch failed: a.txt:1")
                && stale.contains("a.txt: patch does not apply"),
            "{stale}"
        );
        let exists =
            check(b"diff --git a/a.txt b/a.txt\nnew file mode 100644\nindex 0000000..e69de29\n");
        assert!(
            exists.contains("a.txt: already exists in index"),
            "{exists}"
        );
        let not_empty = check(
            b"diff --git a/a.txt b/a.txt\ndeleted file mode 100644\nindex 7898192..0000000\n",
        );
        assert!(
            not_empty.contains("removal patch leaves file contents")
                && not_empty.contains("a.txt: patch does not apply"),
            "{not_empty}"
        );
        let prose = check(b"this is not a patch\n");
        assert!(prose.contains("No valid patches in input"), "{prose}");
        assert_eq!(fs::read(repo.join("a.txt")).unwrap(), b"a\n");
    }

    /// What a patch makes is never written to the repository it is read from (a history store
    /// workspaces borrow objects from): neither through libgit2 nor through `git apply`.
    #[test]
    fn applying_a_patch_writes_no_object_into_the_repository() {
        let root = tempfile::tempdir().unwrap();
        let (repo, base) = base_repo(root.path());
        let objects = |repo: &Path| {
            let out = crate::workspace::git_command(repo)
                .args(["cat-file", "--batch-all-objects", "--batch-check"])
                .output()
                .unwrap();
            String::from_utf8_lossy(&out.stdout).into_owned()
        };
        // Made in a clone, so the repository has never seen the patched file.
        let clone = root.path().join("clone");
        git(
            root.path(),
            &[
                "clone",
                "-q",
                &repo.to_string_lossy(),
                &clone.to_string_lossy(),
            ],
        );
        let libgit2 = patch_of(&clone, &[], |repo| {
            write(repo, "a.txt", b"the reference's answer\n");
        });
        // A `diff -u` patch libgit2 does not read: `git apply` in a scratch repository takes it.
        let plain = b"--- a/moved.txt\n+++ b/moved.txt\n@@ -1,3 +1,3 @@\n one\n-two\n+2, the answer\n three\n";
        let before = objects(&repo);
        let handle = Repository::open(&repo).unwrap();
        let tree = handle
            .find_commit(Oid::from_str(&base).unwrap())
            .unwrap()
            .tree()
            .unwrap();
        for patch in [&libgit2[..], &plain[..]] {
            let files = patched_files(&handle, &tree, patch).unwrap();
            assert_eq!(files.len(), 1, "{files:?}");
        }
        assert_eq!(objects(&repo), before);
    }
}
