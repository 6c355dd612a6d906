//! Removing a directory an agent had write access to, without ever leaving it.
//!
//! `fs::remove_dir_all` does not follow symlinks, but it does walk into mount points: an agent
//! that ran as root could `mount --bind /some/host/dir ws/sub`, and dispose would then delete the
//! host directory's files. [`remove_tree`] first detaches every mount at or below the directory
//! (deepest first), then removes what is left through directory file descriptors, never
//! following a symlink and never entering a directory on another file system or mount. Whatever
//! it cannot remove is named in the error.

use std::ffi::{CStr, CString, OsStr};
use std::fmt;
use std::fs;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::mount::{MntFlags, umount2};

/// Open directories held at once while descending; a deeper directory is first moved up to the
/// top, so a hostile nesting depth cannot exhaust file descriptors.
const MAX_OPEN_DIRS: usize = 64;
/// Paths named in the error message; the rest are counted.
const SHOWN: usize = 5;

/// A path [`remove_tree`] left on disk, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeftBehind {
    /// The path still on disk.
    pub path: PathBuf,
    /// Why it could not be removed (the system's error, or a mount on it).
    pub reason: String,
}

impl fmt::Display for LeftBehind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.path.display(), self.reason)
    }
}

/// What [`remove_tree`] could not remove under `root`.
#[derive(Debug, Clone, thiserror::Error)]
#[error(
    "could not remove everything under {}: {} left on disk: {}; remove {} by hand, or clear what holds {} and run `deltabench gc`",
    root.display(),
    plural(left.len()),
    shown(left),
    if left.len() == 1 { "it" } else { "them" },
    if left.len() == 1 { "it" } else { "them" }
)]
pub struct RemoveError {
    /// The tree being removed.
    pub root: PathBuf,
    /// Every path left on disk (the message names the first few).
    pub left: Vec<LeftBehind>,
}

impl From<RemoveError> for io::Error {
    fn from(err: RemoveError) -> Self {
        io::Error::other(err)
    }
}

fn plural(n: usize) -> String {
    if n == 1 {
        "1 path".into()
    } else {
        format!("{n} paths")
    }
}

fn shown(left: &[LeftBehind]) -> String {
    let mut text: Vec<String> = left.iter().take(SHOWN).map(|l| l.to_string()).collect();
    if left.len() > SHOWN {
        text.push(format!("and {} more", left.len() - SHOWN));
    }
    text.join(", ")
}

/// Detaches every mount at or below `root`, then removes `root` and everything in it without
/// crossing into another file system or mount and without following symlinks. A missing `root`
/// is not an error.
pub fn remove_tree(root: &Path) -> Result<(), RemoveError> {
    let root = anchored(root);
    let mut left = unmount_below(&root);
    left.extend(remove_within(&root));
    if left.is_empty() {
        Ok(())
    } else {
        left.sort_by(|a, b| a.path.cmp(&b.path));
        left.dedup_by(|a, b| a.path == b.path);
        Err(RemoveError { root, left })
    }
}

/// `root` with its parent canonicalized and its last component kept as is: a symlink planted in
/// place of the root must not redirect the unmounting to wherever it points.
fn anchored(root: &Path) -> PathBuf {
    let absolute = std::path::absolute(root).unwrap_or_else(|_| root.to_owned());
    match (absolute.parent(), absolute.file_name()) {
        (Some(parent), Some(name)) => parent
            .canonicalize()
            .unwrap_or_else(|_| parent.to_owned())
            .join(name),
        _ => absolute,
    }
}

/// Lazily detaches every mount at or below `root`, deepest first, until none is left (mounts
/// may be stacked on one path: each is listed, and detached, once). Returns the mounts that
/// could not be detached.
///
/// The mount table is read again only after a pass that could not detach everything it listed:
/// a mount made after the listing (by a process still running) is not detached, and
/// [`remove_tree`] then leaves it, and the files under it, in place and names it.
pub fn unmount_below(root: &Path) -> Vec<LeftBehind> {
    let mut failed: Vec<LeftBehind> = Vec::new();
    for _ in 0..32 {
        let mut mounts = mounts_below(root);
        if mounts.is_empty() {
            return Vec::new();
        }
        mounts.sort_by_key(|m| std::cmp::Reverse(m.components().count()));
        failed.clear();
        let mut progress = false;
        for mount in mounts {
            match umount2(&mount, MntFlags::MNT_DETACH | MntFlags::UMOUNT_NOFOLLOW) {
                Ok(()) => progress = true,
                // Already gone with a parent mount detached before it.
                Err(nix::Error::EINVAL | nix::Error::ENOENT) if !is_mount_listed(&mount) => {}
                Err(err) => failed.push(LeftBehind {
                    reason: format!("a mount point that could not be unmounted: {err}"),
                    path: mount,
                }),
            }
        }
        if failed.is_empty() || !progress {
            break;
        }
    }
    failed
}

fn is_mount_listed(path: &Path) -> bool {
    mount_points().iter().any(|m| m == path)
}

/// Mount points at `root` or below it, from `/proc/self/mountinfo`.
pub fn mounts_below(root: &Path) -> Vec<PathBuf> {
    mount_points()
        .into_iter()
        .filter(|path| path.starts_with(root))
        .collect()
}

/// Every mount point of this mount namespace (field 5 of `/proc/self/mountinfo`).
fn mount_points() -> Vec<PathBuf> {
    let Ok(text) = fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|line| line.split(' ').nth(4))
        .map(|field| PathBuf::from(OsStr::from_bytes(&unescape_mount_path(field))))
        .collect()
}

/// The kernel writes space, tab, newline and backslash in mount paths as octal (`\040`).
pub(super) fn unescape_mount_path(field: &str) -> Vec<u8> {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).and_then(|d| {
            let text = std::str::from_utf8(d).ok()?;
            u8::from_str_radix(text, 8).ok()
        });
        match (bytes[i], octal) {
            (b'\\', Some(byte)) => {
                out.push(byte);
                i += 4;
            }
            (byte, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    out
}

/// Where an inode lives: a directory is entered only when both match the root's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Place {
    dev: u64,
    /// The mount id (`statx`), which tells a bind mount of the same file system apart; `None`
    /// on kernels without it.
    mount: Option<u64>,
}

/// `statx` of `name` in `dir` (or of `dir` itself when `name` is empty), not following a
/// symlink: file type and mode, inode, and where it lives.
fn stat_at(dir: RawFd, name: &CStr) -> io::Result<(u32, u64, Place)> {
    let mut flags = libc::AT_SYMLINK_NOFOLLOW | libc::AT_STATX_SYNC_AS_STAT;
    if name.is_empty() {
        flags |= libc::AT_EMPTY_PATH;
    }
    // SAFETY: statx only writes into the zeroed struct passed; `name` is NUL-terminated.
    let mut st: libc::statx = unsafe { std::mem::zeroed() };
    let rc = unsafe {
        libc::statx(
            dir,
            name.as_ptr(),
            flags,
            libc::STATX_TYPE | libc::STATX_MODE | libc::STATX_INO | libc::STATX_MNT_ID,
            &mut st,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let dev = libc::makedev(st.stx_dev_major, st.stx_dev_minor);
    let mount = (st.stx_mask & libc::STATX_MNT_ID != 0).then_some(st.stx_mnt_id);
    Ok((u32::from(st.stx_mode), st.stx_ino, Place { dev, mount }))
}

fn is_dir(mode: u32) -> bool {
    mode & libc::S_IFMT == libc::S_IFDIR
}

fn open_dir_at(dir: RawFd, name: &CStr) -> io::Result<OwnedFd> {
    // SAFETY: `name` is NUL-terminated; the returned fd is owned below.
    let fd = unsafe {
        libc::openat(
            dir,
            name.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The names in the directory `fd` (without `.` and `..`).
fn names_in(fd: &OwnedFd) -> io::Result<Vec<CString>> {
    // fdopendir takes the fd it is given: hand it a duplicate.
    let dup = fd.try_clone()?;
    // SAFETY: `dup` is a valid directory fd whose ownership passes to the DIR stream.
    let stream = unsafe { libc::fdopendir(dup.as_raw_fd()) };
    if stream.is_null() {
        return Err(io::Error::last_os_error());
    }
    std::mem::forget(dup);
    let mut names = Vec::new();
    loop {
        // SAFETY: `stream` is a valid DIR stream until closedir below.
        let entry = unsafe { libc::readdir64(stream) };
        if entry.is_null() {
            break;
        }
        // SAFETY: readdir returned a valid entry whose d_name is NUL-terminated.
        let name = unsafe { CStr::from_ptr((*entry).d_name.as_ptr()) };
        if name != c"." && name != c".." {
            names.push(name.to_owned());
        }
    }
    // SAFETY: closes the stream (and the duplicate fd) exactly once.
    unsafe { libc::closedir(stream) };
    Ok(names)
}

fn unlink_at(dir: RawFd, name: &CStr, flags: libc::c_int) -> io::Result<()> {
    // SAFETY: `name` is NUL-terminated.
    if unsafe { libc::unlinkat(dir, name.as_ptr(), flags) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Unlinks `name`, making `dir` writable first when only its mode was in the way (a read-only
/// directory, as Go's module cache makes them).
fn unlink_in(dir: &OwnedFd, name: &CStr, flags: libc::c_int) -> io::Result<()> {
    match unlink_at(dir.as_raw_fd(), name, flags) {
        Err(err) if err.raw_os_error() == Some(libc::EACCES) => {
            // SAFETY: fchmod on an fd we hold; it cannot be redirected by a symlink.
            unsafe { libc::fchmod(dir.as_raw_fd(), 0o700) };
            unlink_at(dir.as_raw_fd(), name, flags)
        }
        other => other,
    }
}

/// One directory being emptied.
struct Frame {
    fd: OwnedFd,
    /// Its name in the directory below it on the stack.
    name: CString,
    path: PathBuf,
    todo: Vec<CString>,
    /// How many leftovers were known when it was entered: if it cannot be removed because
    /// something below it stayed, that something is already named.
    left_before: usize,
}

fn path_in(dir: &Path, name: &CStr) -> PathBuf {
    dir.join(OsStr::from_bytes(name.to_bytes()))
}

/// Removes `root` and what it holds, never following a symlink nor entering a directory whose
/// device or mount differs from the root's. Returns what is left.
fn remove_within(root: &Path) -> Vec<LeftBehind> {
    let mut left = Vec::new();
    let Some((parent_fd, frame, place)) = enter_root(root, &mut left) else {
        return left;
    };
    let mut removal = Removal {
        parent_fd,
        place,
        stack: vec![frame],
        left,
        moved: 0,
    };
    removal.run();
    removal.left
}

fn fail(left: &mut Vec<LeftBehind>, path: &Path, reason: String) {
    left.push(LeftBehind {
        path: path.to_owned(),
        reason,
    });
}

/// The root's parent, the root entered as the first frame, and the mount it sits on; `None`
/// when there is nothing more to do (gone, not a directory and unlinked, or refused).
fn enter_root(root: &Path, left: &mut Vec<LeftBehind>) -> Option<(OwnedFd, Frame, Place)> {
    let (Some(parent), Some(name)) = (root.parent(), root.file_name()) else {
        fail(left, root, "not a removable path".into());
        return None;
    };
    let Ok(name) = CString::new(name.as_bytes()) else {
        fail(left, root, "a path with a NUL byte".into());
        return None;
    };
    let parent_fd = match fs::File::open(parent) {
        Ok(file) => OwnedFd::from(file),
        Err(err) if err.kind() == io::ErrorKind::NotFound => return None,
        Err(err) => {
            fail(left, root, format!("cannot open its parent: {err}"));
            return None;
        }
    };
    let (mode, ino, place) = match stat_at(parent_fd.as_raw_fd(), &name) {
        Ok(found) => found,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return None,
        Err(err) => {
            fail(left, root, err.to_string());
            return None;
        }
    };
    if !is_dir(mode) {
        if let Err(err) = unlink_in(&parent_fd, &name, 0) {
            fail(left, root, err.to_string());
        }
        return None;
    }
    // The root itself must sit on its parent's mount: if not, it is a mount point still.
    match stat_at(parent_fd.as_raw_fd(), c"") {
        Ok((_, _, parent_place)) if parent_place != place => {
            fail(left, root, "a mount point".into());
            return None;
        }
        Err(err) => {
            fail(left, root, format!("cannot stat its parent: {err}"));
            return None;
        }
        Ok(_) => {}
    }
    let entered = open_dir_at(parent_fd.as_raw_fd(), &name)
        .and_then(|fd| same_dir(fd, ino, place))
        .and_then(|fd| Ok((names_in(&fd)?, fd)));
    let (todo, fd) = match entered {
        Ok(found) => found,
        Err(err) => {
            fail(left, root, err.to_string());
            return None;
        }
    };
    let frame = Frame {
        fd,
        name,
        path: root.to_owned(),
        todo,
        left_before: 0,
    };
    Some((parent_fd, frame, place))
}

/// A tree being emptied depth first, one open directory per level.
struct Removal {
    parent_fd: OwnedFd,
    /// The root's device and mount: nothing elsewhere is entered.
    place: Place,
    stack: Vec<Frame>,
    left: Vec<LeftBehind>,
    /// How many too-deep directories were moved up to the root.
    moved: u64,
}

impl Removal {
    fn run(&mut self) {
        while let Some(top) = self.stack.last_mut() {
            match top.todo.pop() {
                Some(name) => self.visit(name),
                None => self.leave(),
            }
        }
    }

    /// The top directory is empty (or what stayed is named): it goes from the one below.
    fn leave(&mut self) {
        let done = self.stack.pop().expect("the stack is not empty");
        let below = self.stack.last().map_or(&self.parent_fd, |f| &f.fd);
        drop(done.fd);
        match unlink_in(below, &done.name, libc::AT_REMOVEDIR) {
            Err(err) if err.kind() == io::ErrorKind::NotFound => {}
            Err(_) if self.left.len() > done.left_before => {}
            Err(err) => fail(&mut self.left, &done.path, err.to_string()),
            Ok(()) => {}
        }
    }

    /// One entry of the top directory: unlinked, refused, moved up, or entered.
    fn visit(&mut self, name: CString) {
        let depth = self.stack.len();
        let top = self.stack.last().expect("the stack is not empty");
        let path = path_in(&top.path, &name);
        let (mode, ino, found) = match stat_at(top.fd.as_raw_fd(), &name) {
            Ok(found) => found,
            Err(err) if err.kind() == io::ErrorKind::NotFound => return,
            Err(err) => return fail(&mut self.left, &path, err.to_string()),
        };
        if !is_dir(mode) {
            // Unlinking only drops a name: a bind-mounted file fails with EBUSY, untouched.
            match unlink_in(&top.fd, &name, 0) {
                Err(err) if err.kind() == io::ErrorKind::NotFound => {}
                Err(err) => fail(&mut self.left, &path, err.to_string()),
                Ok(()) => {}
            }
            return;
        }
        if found != self.place {
            return fail(
                &mut self.left,
                &path,
                "on another mount; not entered".into(),
            );
        }
        if depth >= MAX_OPEN_DIRS {
            return self.move_up(&name, &path);
        }
        let opened = match open_dir_at(top.fd.as_raw_fd(), &name) {
            Err(err) if err.raw_os_error() == Some(libc::EACCES) => {
                // A directory without read or search permission for us: grant it, then retry.
                // SAFETY: `name` is NUL-terminated; the parent fd is held open.
                unsafe { libc::fchmodat(top.fd.as_raw_fd(), name.as_ptr(), 0o700, 0) };
                open_dir_at(top.fd.as_raw_fd(), &name)
            }
            other => other,
        };
        let entered = opened
            .and_then(|fd| same_dir(fd, ino, self.place))
            .and_then(|fd| Ok((names_in(&fd)?, fd)));
        match entered {
            Ok((todo, fd)) => {
                let left_before = self.left.len();
                self.stack.push(Frame {
                    fd,
                    name,
                    path,
                    todo,
                    left_before,
                });
            }
            Err(err) => fail(&mut self.left, &path, err.to_string()),
        }
    }

    /// Too deep to hold another fd: the directory moves up to the root, emptied later.
    fn move_up(&mut self, name: &CStr, path: &Path) {
        let top_fd = self
            .stack
            .last()
            .expect("the stack is not empty")
            .fd
            .as_raw_fd();
        let root_fd = self.stack[0].fd.as_raw_fd();
        let spare = loop {
            self.moved += 1;
            let spare = CString::new(format!(".deltabench-deep-{}", self.moved))
                .expect("no NUL in a formatted name");
            if stat_at(root_fd, &spare).is_err() {
                break spare;
            }
        };
        // SAFETY: both names are NUL-terminated; both fds are open directories.
        let rc = unsafe { libc::renameat(top_fd, name.as_ptr(), root_fd, spare.as_ptr()) };
        if rc == 0 {
            self.stack[0].todo.push(spare);
        } else {
            fail(&mut self.left, path, io::Error::last_os_error().to_string());
        }
    }
}

/// `fd` if it is still the directory that was checked (same inode, device and mount): guards
/// against a swap between the check and the open.
fn same_dir(fd: OwnedFd, ino: u64, place: Place) -> io::Result<OwnedFd> {
    let (_, opened_ino, opened_place) = stat_at(fd.as_raw_fd(), c"")?;
    if opened_ino == ino && opened_place == place {
        Ok(fd)
    } else {
        Err(io::Error::other(
            "changed while being removed (a mount point?); not entered",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    fn temp_dir() -> tempfile::TempDir {
        let shm = Path::new("/dev/shm");
        let builder = tempfile::Builder::new();
        if shm.is_dir() {
            builder.tempdir_in(shm).unwrap()
        } else {
            builder.tempdir().unwrap()
        }
    }

    /// Bind mounts need root (CAP_SYS_ADMIN): say so outside CI, fail inside it.
    fn can_mount(test: &str) -> bool {
        let dir = temp_dir();
        let target = dir.path().join("t");
        fs::create_dir(&target).unwrap();
        let ok = Command::new("mount")
            .args(["--bind", "/dev/shm"])
            .arg(&target)
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            let _ = umount2(&target, MntFlags::MNT_DETACH);
            return true;
        }
        assert!(
            std::env::var("CI").is_err(),
            "{test} needs permission to mount (root)"
        );
        eprintln!("SKIPPED {test}: needs permission to mount (root)");
        // Listed with a count at the end of `.ci/test`, beside the integration tests' skips.
        let log = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/tmp/skipped-tests.txt");
        if let Some(dir) = log.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        if let Ok(mut file) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
        {
            use std::io::Write;
            let _ = writeln!(file, "{test}: needs permission to mount (root)");
        }
        false
    }

    fn bind(source: &Path, target: &Path) {
        let status = Command::new("mount")
            .arg("--bind")
            .arg(source)
            .arg(target)
            .status()
            .unwrap();
        assert!(status.success());
    }

    #[test]
    fn removes_nested_files_read_only_dirs_and_symlinks_but_not_their_targets() {
        let tmp = temp_dir();
        let outside = tmp.path().join("outside");
        fs::create_dir(&outside).unwrap();
        fs::write(outside.join("keep.txt"), "keep").unwrap();
        let root = tmp.path().join("ws");
        fs::create_dir_all(root.join("a/b/c")).unwrap();
        fs::write(root.join("a/b/c/f.txt"), "x").unwrap();
        std::os::unix::fs::symlink(&outside, root.join("link")).unwrap();
        std::os::unix::fs::symlink(outside.join("keep.txt"), root.join("a/file-link")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(root.join("a/b"), fs::Permissions::from_mode(0o555)).unwrap();
        remove_tree(&root).unwrap();
        assert!(!root.exists());
        assert_eq!(
            fs::read_to_string(outside.join("keep.txt")).unwrap(),
            "keep"
        );
        // Gone already: not an error.
        remove_tree(&root).unwrap();
    }

    #[test]
    fn a_directory_nested_past_the_fd_budget_is_removed() {
        let tmp = temp_dir();
        let root = tmp.path().join("ws");
        let mut deep = root.clone();
        for _ in 0..(MAX_OPEN_DIRS * 3) {
            deep.push("d");
        }
        fs::create_dir_all(&deep).unwrap();
        fs::write(deep.join("f"), "x").unwrap();
        remove_tree(&root).unwrap();
        assert!(!root.exists());
    }

    #[test]
    fn a_bind_mount_inside_is_unmounted_and_its_files_survive() {
        if !can_mount("a_bind_mount_inside_is_unmounted_and_its_files_survive") {
            return;
        }
        let tmp = temp_dir();
        let host = tmp.path().join("host");
        fs::create_dir(&host).unwrap();
        fs::write(host.join("precious.txt"), "mine").unwrap();
        let root = tmp.path().join("ws");
        fs::create_dir_all(root.join("sub/deeper")).unwrap();
        bind(&host, &root.join("sub/deeper"));
        // Stacked: a second mount over the first.
        bind(&host, &root.join("sub/deeper"));
        remove_tree(&root).unwrap();
        assert!(!root.exists());
        assert_eq!(
            fs::read_to_string(host.join("precious.txt")).unwrap(),
            "mine"
        );
        assert!(mounts_below(tmp.path()).is_empty());
    }

    #[test]
    fn a_mount_left_in_place_is_not_entered_and_is_named() {
        if !can_mount("a_mount_left_in_place_is_not_entered_and_is_named") {
            return;
        }
        let tmp = temp_dir();
        let host = tmp.path().join("host");
        fs::create_dir(&host).unwrap();
        fs::write(host.join("precious.txt"), "mine").unwrap();
        let root = tmp.path().join("ws");
        let sub = root.join("sub");
        fs::create_dir_all(&sub).unwrap();
        fs::write(root.join("other.txt"), "x").unwrap();
        // Same file system (a bind of a tmpfs dir into the same tmpfs): only the mount id
        // tells it apart. The removal step alone must not cross it.
        bind(&host, &sub);
        let left = remove_within(&anchored(&root));
        let _ = umount2(&sub, MntFlags::MNT_DETACH);
        assert_eq!(
            fs::read_to_string(host.join("precious.txt")).unwrap(),
            "mine"
        );
        assert_eq!(left.len(), 1, "{left:?}");
        assert_eq!(left[0].path, anchored(&sub));
        assert!(!root.join("other.txt").exists());
        let err = RemoveError {
            root: root.clone(),
            left,
        };
        let message = err.to_string();
        assert!(message.contains(&*sub.to_string_lossy()), "{message}");
        assert!(message.contains("1 path left on disk"), "{message}");
        remove_tree(&root).unwrap();
    }

    #[test]
    fn a_symlink_in_place_of_the_root_is_removed_not_followed() {
        let tmp = temp_dir();
        let target = tmp.path().join("target");
        fs::create_dir(&target).unwrap();
        fs::write(target.join("keep.txt"), "keep").unwrap();
        let root = tmp.path().join("ws");
        std::os::unix::fs::symlink(&target, &root).unwrap();
        remove_tree(&root).unwrap();
        assert!(fs::symlink_metadata(&root).is_err());
        assert!(target.join("keep.txt").exists());
    }

    #[test]
    fn mount_paths_are_unescaped() {
        assert_eq!(unescape_mount_path(r"/a\040b/c\134d"), br"/a b/c\d");
    }
}
