//! A record of a directory tree's exact content, to notice when a cached template was changed
//! after it was built: one hash per path over its raw name, type and mode, size, content (a
//! symlink's target) and extended attributes. `.git` is included: a changed index or config
//! changes what git shows in every workspace built on the template.

use std::ffi::CString;
use std::fs;
use std::io::{self, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// One path of the tree: its display name (relative, lossy) and the hash of everything about it.
pub(super) type Entry = (String, String);

/// Every path under `root` (not `root` itself), sorted by name.
pub(super) fn record_tree(root: &Path) -> io::Result<Vec<Entry>> {
    let mut entries = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut stack = vec![PathBuf::new()];
    while let Some(relative) = stack.pop() {
        for entry in fs::read_dir(root.join(&relative))? {
            let entry = entry?;
            let path = relative.join(entry.file_name());
            let full = entry.path();
            let meta = fs::symlink_metadata(&full)?;
            let mut hasher = Sha256::new();
            hasher.update(path.as_os_str().as_bytes());
            hasher.update([0]);
            hasher.update(meta.mode().to_le_bytes());
            hasher.update(meta.size().to_le_bytes());
            hasher.update(meta.rdev().to_le_bytes());
            let kind = meta.file_type();
            if kind.is_file() {
                let mut file = fs::File::open(&full)?;
                loop {
                    let n = file.read(&mut buf)?;
                    if n == 0 {
                        break;
                    }
                    hasher.update(&buf[..n]);
                }
            } else if kind.is_symlink() {
                hasher.update(fs::read_link(&full)?.as_os_str().as_bytes());
            } else if kind.is_dir() {
                stack.push(path.clone());
            }
            hash_xattrs(&full, &mut hasher);
            let digest = hasher.finalize();
            entries.push((
                path.to_string_lossy().into_owned(),
                format!("{digest:x}")[..32].to_owned(),
            ));
        }
    }
    entries.sort();
    Ok(entries)
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
        let before = record_tree(root).unwrap();
        assert_eq!(first_difference(&before, &record_tree(root).unwrap()), None);

        fs::write(root.join("b.txt"), "B").unwrap();
        let now = record_tree(root).unwrap();
        assert_eq!(first_difference(&before, &now).as_deref(), Some("b.txt"));
        fs::write(root.join("b.txt"), "b").unwrap();

        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(root.join("a.txt")).unwrap().permissions();
        fs::set_permissions(root.join("a.txt"), fs::Permissions::from_mode(0o700)).unwrap();
        let now = record_tree(root).unwrap();
        assert_eq!(first_difference(&before, &now).as_deref(), Some("a.txt"));
        fs::set_permissions(root.join("a.txt"), mode).unwrap();

        fs::write(root.join(".git/index"), "IDX").unwrap();
        let now = record_tree(root).unwrap();
        assert_eq!(
            first_difference(&before, &now).as_deref(),
            Some(".git/index")
        );
        fs::write(root.join(".git/index"), "idx").unwrap();

        fs::remove_file(root.join("link")).unwrap();
        std::os::unix::fs::symlink("b.txt", root.join("link")).unwrap();
        let now = record_tree(root).unwrap();
        assert_eq!(first_difference(&before, &now).as_deref(), Some("link"));
        fs::remove_file(root.join("link")).unwrap();
        let now = record_tree(root).unwrap();
        assert_eq!(first_difference(&before, &now).as_deref(), Some("link"));
        std::os::unix::fs::symlink("a.txt", root.join("link")).unwrap();

        fs::write(root.join("0-new.txt"), "new").unwrap();
        let now = record_tree(root).unwrap();
        assert_eq!(
            first_difference(&before, &now).as_deref(),
            Some("0-new.txt")
        );
    }
}
