//! Writing files over a workspace: hidden tests after the agent, or a reference solution.
//!
//! A directory overlay copies every file to the same relative path. A patch overlay is applied
//! to the base tree in memory (git2), and the resulting files are written out, so it lands the
//! same whatever the agent did to those paths. Either way, a symlink or file the agent planted
//! where a directory or file must go is removed first: nothing is written through a link.

use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

use git2::{Diff, Oid, Repository};

/// How a file is stored: git knows regular files, executables and symlinks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryKind {
    File,
    Executable,
    Symlink,
}

impl EntryKind {
    pub fn mode(self) -> git2::FileMode {
        match self {
            Self::File => git2::FileMode::Blob,
            Self::Executable => git2::FileMode::BlobExecutable,
            Self::Symlink => git2::FileMode::Link,
        }
    }

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

    pub fn path(&self) -> &Path {
        match self {
            Self::Dir(path) | Self::Patch(path) => path,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum OverlayError {
    #[error("{}: {source}", path.display())]
    Io { path: PathBuf, source: io::Error },
    #[error("{}: {message}", path.display())]
    Patch { path: PathBuf, message: String },
    #[error("{}: refusing to write outside the workspace", path.display())]
    Escape { path: PathBuf },
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
    match overlay {
        Overlay::Dir(dir) => copy_dir(workspace, dir),
        Overlay::Patch(patch) => apply_patch(workspace, base, patch, objects),
    }
}

fn copy_dir(workspace: &Path, source: &Path) -> Result<Vec<String>, OverlayError> {
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
                let content = fs::read(entry.path()).map_err(io_err(&entry.path()))?;
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
    let diff =
        Diff::from_buffer(&bytes).map_err(|e| perr(format!("not a patch: {}", e.message())))?;
    let oid = Oid::from_str(base).map_err(|e| perr(e.message().to_owned()))?;
    let tree = repo
        .find_object(oid, None)
        .and_then(|object| object.peel_to_tree())
        .map_err(|e| perr(format!("base {base}: {}", e.message())))?;
    let index = repo
        .apply_to_tree(&tree, &diff, None)
        .map_err(|e| perr(format!("does not apply to the base: {}", e.message())))?;
    let mut touched = Vec::new();
    for delta in diff.deltas() {
        if let Some(old) = delta.old_file().path()
            && delta.status() != git2::Delta::Added
            && index.get_path(old, 0).is_none()
        {
            remove_file(workspace, old)?;
            touched.push(old.to_string_lossy().into_owned());
        }
        let Some(new) = delta.new_file().path() else {
            continue;
        };
        let Some(entry) = index.get_path(new, 0) else {
            continue;
        };
        let blob = repo
            .find_blob(entry.id)
            .map_err(|e| perr(e.message().to_owned()))?;
        write_file(workspace, new, blob.content(), entry.mode & 0o111 != 0)?;
        touched.push(new.to_string_lossy().into_owned());
    }
    touched.sort();
    touched.dedup();
    Ok(touched)
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

fn remove_file(workspace: &Path, relative: &Path) -> Result<(), OverlayError> {
    let target = prepare_parent(workspace, relative)?;
    match fs::symlink_metadata(&target) {
        Ok(meta) if meta.is_dir() => fs::remove_dir_all(&target).map_err(io_err(&target)),
        Ok(_) => fs::remove_file(&target).map_err(io_err(&target)),
        Err(_) => Ok(()),
    }
}
