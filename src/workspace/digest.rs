//! A record of a directory tree's exact content, to notice when a cached template was changed
//! after it was built: one hash per path over its raw name, type and mode, size, content (a
//! symlink's target) and extended attributes. `.git` is included: a changed index or config
//! changes what git shows in every workspace built on the template. A file's content enters as
//! the id of the git blob that holds it, so a file the checkout just wrote from a known blob is
//! not read back.

use std::collections::HashMap;
use std::ffi::CString;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// One path of the tree: its display name (relative, lossy) and the hash of everything about it.
pub(super) type Entry = (String, String);

/// Files known to hold a blob, by path relative to the root: the blob's id and size. A file of
/// another size is read.
pub(super) type KnownBlobs = HashMap<PathBuf, (git2::Oid, u64)>;

/// Every path under `root` (not `root` itself), sorted by name, and the bytes they take on disk.
/// A file in `known` of the known size is taken to hold its blob; every other file is read.
///
/// The folders are listed first, then the paths are hashed on every core: a template's record
/// is on the path of a new base commit's first trial, and its cost is a few system calls per
/// file.
pub(super) fn record_tree(root: &Path, known: &KnownBlobs) -> io::Result<(Vec<Entry>, u64)> {
    let mut paths = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(relative) = stack.pop() {
        for entry in fs::read_dir(root.join(&relative))? {
            let entry = entry?;
            let path = relative.join(entry.file_name());
            if entry.file_type()?.is_dir() {
                stack.push(path.clone());
            }
            paths.push(path);
        }
    }
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    let chunk = paths.len().div_ceil(workers).max(1);
    let hashed = std::thread::scope(|scope| {
        let handles: Vec<_> = paths
            .chunks(chunk)
            .map(|part| scope.spawn(move || hash_paths(root, part, known)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect::<io::Result<Vec<_>>>()
    })?;
    let mut entries = Vec::with_capacity(paths.len());
    let mut bytes = 0;
    for (part, part_bytes) in hashed {
        entries.extend(part);
        bytes += part_bytes;
    }
    entries.sort();
    Ok((entries, bytes))
}

/// The entries of `paths` (relative to `root`) and the bytes they take on disk.
fn hash_paths(root: &Path, paths: &[PathBuf], known: &KnownBlobs) -> io::Result<(Vec<Entry>, u64)> {
    let mut entries = Vec::with_capacity(paths.len());
    let mut bytes = 0;
    for path in paths {
        let full = root.join(path);
        let meta = fs::symlink_metadata(&full)?;
        bytes += meta.blocks() * 512;
        let mut hasher = Sha256::new();
        hasher.update(path.as_os_str().as_bytes());
        hasher.update([0]);
        hasher.update(meta.mode().to_le_bytes());
        hasher.update(meta.size().to_le_bytes());
        hasher.update(meta.rdev().to_le_bytes());
        let kind = meta.file_type();
        if kind.is_file() {
            let blob = match known.get(path) {
                Some(&(id, size)) if size == meta.size() => id,
                _ => git2::Oid::hash_file(git2::ObjectType::Blob, &full).map_err(|e| {
                    io::Error::other(format!("{}: {}", full.display(), e.message()))
                })?,
            };
            hasher.update(blob.as_bytes());
        } else if kind.is_symlink() {
            hasher.update(fs::read_link(&full)?.as_os_str().as_bytes());
        }
        hash_xattrs(&full, &mut hasher);
        let digest = hasher.finalize();
        entries.push((
            path.to_string_lossy().into_owned(),
            format!("{digest:x}")[..32].to_owned(),
        ));
    }
    Ok((entries, bytes))
}

/// Adds every extended attribute of `path` (names sorted, with values) to the hash: overlayfs
/// reads some of them (`trusted.overlay.*`) from its lower layer.
fn hash_xattrs(path: &Path, hasher: &mut Sha256) {
    let Ok(c_path) = CString::new(path.as_os_str().as_bytes()) else {
        return;
    };
    // SAFETY: a null buffer of size 0 asks only for the size of the list.
    let size = unsafe { libc::llistxattr(c_path.as_ptr(), std::ptr::null_mut(), 0) };
    if size <= 0 {
        return;
    }
    let mut names = vec![0u8; size as usize];
    // SAFETY: `names` has room for `size` bytes.
    let size = unsafe { libc::llistxattr(c_path.as_ptr(), names.as_mut_ptr().cast(), names.len()) };
    if size <= 0 {
        return;
    }
    names.truncate(size as usize);
    let mut names: Vec<&[u8]> = names.split(|&b| b == 0).filter(|n| !n.is_empty()).collect();
    names.sort();
    for name in names {
        let Ok(c_name) = CString::new(name) else {
            continue;
        };
        hasher.update(name);
        hasher.update([0]);
        // SAFETY: as above, first the size, then a buffer that large.
        let len =
            unsafe { libc::lgetxattr(c_path.as_ptr(), c_name.as_ptr(), std::ptr::null_mut(), 0) };
        if len > 0 {
            let mut value = vec![0u8; len as usize];
            let len = unsafe {
                libc::lgetxattr(
                    c_path.as_ptr(),
                    c_name.as_ptr(),
                    value.as_mut_ptr().cast(),
                    value.len(),
                )
            };
            if len > 0 {
                hasher.update(&value[..len as usize]);
            }
        }
        hasher.update([0]);
    }
}

/// The first path (in name order) that was added, removed or changed between `recorded` and
/// `now`, or `None` when they are the same.
pub(super) fn first_difference(recorded: &[Entry], now: &[Entry]) -> Option<String> {
    let (mut a, mut b) = (recorded.iter().peekable(), now.iter().peekable());
    loop {
        match (a.peek(), b.peek()) {
            (None, None) => return None,
            (Some((path, _)), None) | (None, Some((path, _))) => return Some(path.clone()),
            (Some(x), Some(y)) if x == y => {
                a.next();
                b.next();
            }
            (Some((x, _)), Some((y, _))) => return Some(x.min(y).clone()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_change_of_content_mode_name_or_link_is_the_first_difference() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        fs::create_dir_all(root.join(".git")).unwrap();
        fs::write(root.join(".git/index"), "idx").unwrap();
        fs::write(root.join("a.txt"), "a").unwrap();
        fs::write(root.join("b.txt"), "b").unwrap();
        std::os::unix::fs::symlink("a.txt", root.join("link")).unwrap();
        let before = record_tree(root, &HashMap::new()).unwrap().0;
        assert_eq!(
            first_difference(&before, &record_tree(root, &HashMap::new()).unwrap().0),
            None
        );

        fs::write(root.join("b.txt"), "B").unwrap();
        let now = record_tree(root, &HashMap::new()).unwrap().0;
        assert_eq!(first_difference(&before, &now).as_deref(), Some("b.txt"));
        fs::write(root.join("b.txt"), "b").unwrap();

        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(root.join("a.txt")).unwrap().permissions();
        fs::set_permissions(root.join("a.txt"), fs::Permissions::from_mode(0o700)).unwrap();
        let now = record_tree(root, &HashMap::new()).unwrap().0;
        assert_eq!(first_difference(&before, &now).as_deref(), Some("a.txt"));
        fs::set_permissions(root.join("a.txt"), mode).unwrap();

        fs::write(root.join(".git/index"), "IDX").unwrap();
        let now = record_tree(root, &HashMap::new()).unwrap().0;
        assert_eq!(
            first_difference(&before, &now).as_deref(),
            Some(".git/index")
        );
        fs::write(root.join(".git/index"), "idx").unwrap();

        fs::remove_file(root.join("link")).unwrap();
        std::os::unix::fs::symlink("b.txt", root.join("link")).unwrap();
        let now = record_tree(root, &HashMap::new()).unwrap().0;
        assert_eq!(first_difference(&before, &now).as_deref(), Some("link"));
        fs::remove_file(root.join("link")).unwrap();
        let now = record_tree(root, &HashMap::new()).unwrap().0;
        assert_eq!(first_difference(&before, &now).as_deref(), Some("link"));
        std::os::unix::fs::symlink("a.txt", root.join("link")).unwrap();

        fs::write(root.join("0-new.txt"), "new").unwrap();
        let now = record_tree(root, &HashMap::new()).unwrap().0;
        assert_eq!(
            first_difference(&before, &now).as_deref(),
            Some("0-new.txt")
        );
    }

    #[test]
    fn a_file_of_a_known_blob_records_as_if_read() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path();
        fs::write(root.join("a.txt"), "hello\n").unwrap();
        let read = record_tree(root, &HashMap::new()).unwrap().0;
        let blob = git2::Oid::hash_object(git2::ObjectType::Blob, b"hello\n").unwrap();
        let known = HashMap::from([(PathBuf::from("a.txt"), (blob, 6))]);
        assert_eq!(record_tree(root, &known).unwrap().0, read);
        // Another size (a checkout filter rewrote it): the file is read, not the blob trusted.
        let rewritten = HashMap::from([(PathBuf::from("a.txt"), (git2::Oid::ZERO_SHA1, 7))]);
        assert_eq!(record_tree(root, &rewritten).unwrap().0, read);
    }
}
