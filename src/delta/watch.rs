//! The hidden tests watched while the verify command runs (inotify): a write, a truncation, a
//! mode change, a rename or removal of one of them is tampering, even when the file's content is
//! put back before the command ends (a hash taken at the end would match again).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::Path;

use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};

/// What a watched file's own events are.
const FILE_EVENTS: AddWatchFlags = AddWatchFlags::IN_MODIFY
    .union(AddWatchFlags::IN_ATTRIB)
    .union(AddWatchFlags::IN_CLOSE_WRITE)
    .union(AddWatchFlags::IN_MOVE_SELF)
    .union(AddWatchFlags::IN_DELETE_SELF);
/// A watched file's folder: another file moved or made at its name.
const DIR_EVENTS: AddWatchFlags = AddWatchFlags::IN_CREATE
    .union(AddWatchFlags::IN_DELETE)
    .union(AddWatchFlags::IN_MOVED_FROM)
    .union(AddWatchFlags::IN_MOVED_TO);

/// What a watch descriptor stands for.
enum Watched {
    /// A hidden test file (its workspace-relative path).
    File(String),
    /// A folder, with the hidden test files it holds by name.
    Dir(BTreeMap<OsString, String>),
}

pub(super) struct Watch {
    inotify: Inotify,
    watched: BTreeMap<WatchDescriptor, Watched>,
    all: Vec<String>,
}

impl Watch {
    /// Watches `files` (relative to `workspace`) and their folders; under `also` (an overlay's
    /// upper dir, where the files' bytes really are) the same paths again.
    pub(super) fn files<'a>(
        workspace: &Path,
        also: Option<&Path>,
        files: impl IntoIterator<Item = &'a str>,
    ) -> std::io::Result<Self> {
        // Close-on-exec: the verify command never holds it.
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)?;
        let mut watch = Self {
            inotify,
            watched: BTreeMap::new(),
            all: Vec::new(),
        };
        for file in files {
            watch.all.push(file.to_owned());
            for root in std::iter::once(workspace).chain(also) {
                let path = root.join(file);
                if !path.exists() {
                    continue;
                }
                let wd = watch.inotify.add_watch(&path, FILE_EVENTS)?;
                watch.watched.insert(wd, Watched::File(file.to_owned()));
                let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
                    continue;
                };
                let wd = watch.inotify.add_watch(dir, DIR_EVENTS)?;
                match watch
                    .watched
                    .entry(wd)
                    .or_insert(Watched::Dir(BTreeMap::new()))
                {
                    Watched::Dir(names) => {
                        names.insert(name.to_owned(), file.to_owned());
                    }
                    Watched::File(_) => {}
                }
            }
        }
        Ok(watch)
    }

    /// The hidden test files something wrote, moved or removed since the watch began, sorted.
    /// When the kernel's queue overflowed, every watched file: what happened is no longer known.
    pub(super) fn written(&self) -> Vec<String> {
        let mut written = std::collections::BTreeSet::new();
        loop {
            let events = match self.inotify.read_events() {
                Ok(events) if !events.is_empty() => events,
                // EAGAIN: nothing more queued.
                _ => break,
            };
            for event in events {
                if event.mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
                    return self.all.clone();
                }
                if event.mask.contains(AddWatchFlags::IN_IGNORED) {
                    continue;
                }
                match (self.watched.get(&event.wd), &event.name) {
                    (Some(Watched::File(file)), _) => {
                        written.insert(file.clone());
                    }
                    (Some(Watched::Dir(names)), Some(name)) => {
                        if let Some(file) = names.get(name) {
                            written.insert(file.clone());
                        }
                    }
                    _ => {}
                }
            }
        }
        written.into_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_undone_before_the_end_is_still_seen() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("tests")).unwrap();
        for name in [
            "tests/it.rs",
            "tests/other.rs",
            "tests/moved.rs",
            "tests/read.rs",
        ] {
            std::fs::write(root.join(name), "original").unwrap();
        }
        let watch = Watch::files(
            root,
            None,
            ["tests/it.rs", "tests/moved.rs", "tests/read.rs"],
        )
        .unwrap();
        std::fs::write(root.join("tests/it.rs"), "rewritten").unwrap();
        std::fs::write(root.join("tests/it.rs"), "original").unwrap();
        std::fs::write(root.join("tests/new.rs"), "x").unwrap();
        std::fs::write(root.join("tests/other.rs"), "x").unwrap();
        std::fs::write(root.join("tests/moved.tmp"), "forged").unwrap();
        std::fs::rename(root.join("tests/moved.tmp"), root.join("tests/moved.rs")).unwrap();
        let _ = std::fs::read(root.join("tests/read.rs")).unwrap();
        assert_eq!(watch.written(), ["tests/it.rs", "tests/moved.rs"]);
        assert!(watch.written().is_empty(), "events are read once");
    }
}
