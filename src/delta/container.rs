//! `delta: container`: what the agent changed in its container outside the workspace.
//!
//! The agent's container is kept when its command ends. Its changes against the image (`diff`,
//! less the harness's mounts) are listed; the protected ones are never carried on; the rest is
//! read from an export of its file system into an archive kept with the trial, and laid (with
//! the deletions) into a new container of the same image, saved as the image the verify
//! command runs in. No process of the agent's survives: only files cross.

use std::collections::{BTreeMap, HashSet};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use super::toolchain::{DEFAULT_PATH, HeldBack, ImagePrograms, Toolchain, folders_of};
use crate::workspace::{ContainerError, FsChange, FsChangeKind, Runtime};

/// The archive of the changed files carried into verify, in the artifacts folder.
pub const CONTAINER_DELTA: &str = "container-delta.tar";
/// The list of what changed in the container, in the artifacts folder.
pub const CONTAINER_CHANGES: &str = "container-delta.txt";

/// How `container-delta.txt` marks a package installed that was held back.
pub const INSTALLED_NOT_APPLIED: &str = "  (installed: not applied)";

/// Files the runtime itself writes or mounts into every container.
const RUNTIME_PATHS: [&str; 7] = [
    "/proc",
    "/sys",
    "/dev",
    "/run/.containerenv",
    "/etc/hosts",
    "/etc/hostname",
    "/etc/resolv.conf",
];

/// Lays the archive and the deletions into the new container: run as root, by the image's own
/// `sh`, `rm` and `tar` (never the agent's: the container is new).
const APPLY_SCRIPT: &str =
    "cd / && if [ \"$#\" -gt 0 ]; then rm -rf -- \"$@\"; fi && tar -xpf - -C /";

/// How to take the agent's container's delta.
#[derive(Clone)]
pub struct ContainerCapture {
    /// The container runtime the agent's container ran under.
    pub runtime: Runtime,
    /// The agent's kept container.
    pub container: String,
    /// The image the agent ran in: the new container's too.
    pub image: String,
    /// The run's label, on every container made.
    pub label: String,
    /// What may reach the verifier ([`super::toolchain`]).
    pub toolchain: Arc<Toolchain>,
}

/// What the agent changed in its container, outside the workspace and the harness's mounts.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ContainerDelta {
    /// Every path the agent added, changed or removed, held back or not.
    pub changes: Vec<ContainerChange>,
    /// Bytes of the changed files carried into verify.
    pub bytes: u64,
    /// The changes carried, as the diff shows them after the workspace's patch.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub patch: String,
}

/// One path the agent changed in its container, and whether verify sees the change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContainerChange {
    /// The path and how it changed (its fields are flattened into this record's JSON).
    #[serde(flatten)]
    pub change: FsChange,
    /// `false` for a path held back: the verify command sees the image's version.
    pub applied: bool,
    /// Held back as the verifier's toolchain or a protected path (not a package installed).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub tampering: bool,
    /// The size of a file carried, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
}

impl ContainerChange {
    fn new(change: FsChange, held: Option<HeldBack>) -> Self {
        Self {
            change,
            applied: held.is_none(),
            tampering: held.is_some_and(HeldBack::is_tampering),
            size: None,
        }
    }
}

impl ContainerDelta {
    /// Whether it holds a change that reaches the verify command.
    pub fn changes_anything(&self) -> bool {
        self.changes.iter().any(|c| c.applied)
    }

    /// The verifier's toolchain and the protected paths the agent changed, removed or shadowed
    /// (a package installed where the image had nothing is held back too, but could not have
    /// acted: it is not tampering).
    pub fn tampered(&self) -> Vec<String> {
        self.changes
            .iter()
            .filter(|c| c.tampering)
            .map(|c| format!("{} (in the container)", c.change.path))
            .collect()
    }

    /// The folders holding other changes.
    fn folders(&self) -> HashSet<String> {
        let changes: Vec<FsChange> = self.changes.iter().map(|c| c.change.clone()).collect();
        folders_of(&changes)
    }

    /// One line per change, as `diff` lists them, those held back marked.
    pub fn listing(&self) -> String {
        self.changes
            .iter()
            .map(|c| match (c.applied, c.tampering) {
                (true, _) => format!("{}\n", c.change.line()),
                (false, true) => format!("{}  (protected: not applied)\n", c.change.line()),
                (false, false) => format!("{}{INSTALLED_NOT_APPLIED}\n", c.change.line()),
            })
            .collect()
    }
}

/// What [`ContainerCapture::capture`] found.
pub struct Captured {
    /// What the agent changed in its container.
    pub delta: ContainerDelta,
    /// The image holding the carried changes, when there are any: the verify command runs in
    /// it, and it is removed after.
    pub image: Option<String>,
    /// Why the delta is not verified (over `max_diff`).
    pub rejected: Option<String>,
}

/// Why the agent's container's delta could not be listed or carried into a verify image.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// The runtime could not list, inspect or export the container.
    #[error(transparent)]
    Runtime(#[from] ContainerError),
    /// The list of changes could not be written beside the trial's artifacts.
    #[error("cannot save {CONTAINER_CHANGES}: {source}")]
    Save {
        /// The error writing the file into the trial's artifacts.
        #[source]
        source: std::io::Error,
    },
    /// No scratch folder for the archive of the changes.
    #[error("{source}")]
    Scratch {
        /// The error creating the folder.
        #[source]
        source: std::io::Error,
    },
    /// The changes could not be applied in a new container from the agent's image.
    #[error("cannot lay the container's changes into a new container: {source}")]
    Apply {
        /// The runtime's failure creating, filling or committing the container.
        #[source]
        source: ContainerError,
    },
}

/// Names the images made (the run label keeps runs apart).
static SEQUENCE: AtomicU64 = AtomicU64::new(0);

impl ContainerCapture {
    /// Reads the agent's container's delta, records it in `artifacts`, builds the verify image
    /// and removes the container. Blocking. An agent that ran no container changed nothing.
    pub fn capture(
        &self,
        artifacts: Option<&Path>,
        max_diff: u64,
    ) -> Result<Captured, CaptureError> {
        if !self.runtime.container_exists(&self.container) {
            return Ok(Captured {
                delta: ContainerDelta::default(),
                image: None,
                rejected: None,
            });
        }
        let captured = self.read_and_apply(artifacts, max_diff);
        self.runtime.remove_container(&self.container);
        captured
    }

    /// Lists what the agent changed in its container, into `artifacts` too, without reading
    /// the files: for a verify command that runs in that same container (`in_place`).
    pub fn list(&self, artifacts: Option<&Path>) -> Result<ContainerDelta, CaptureError> {
        if !self.runtime.container_exists(&self.container) {
            return Ok(ContainerDelta::default());
        }
        let mut delta = self.listed()?;
        let path = self
            .runtime
            .image_path(&self.image)?
            .unwrap_or_else(|| DEFAULT_PATH.to_owned());
        let image = ImagePrograms::new(&path);
        let folders = delta.folders();
        for change in delta.changes.iter_mut().filter(|c| c.applied) {
            if let Some(held) = self
                .toolchain
                .held_back_given(&change.change, &folders, &image)
            {
                *change = ContainerChange::new(change.change.clone(), Some(held));
            }
        }
        self.save_listing(&delta, artifacts)?;
        Ok(delta)
    }

    fn listed(&self) -> Result<ContainerDelta, CaptureError> {
        let listed = self.runtime.diff(&self.container)?;
        let mounts = self.runtime.mount_targets(&self.container)?;
        let listed: Vec<FsChange> = listed
            .into_iter()
            .filter(|change| !harness_path(change, &mounts))
            .collect();
        let folders = folders_of(&listed);
        let changes: Vec<ContainerChange> = listed
            .into_iter()
            .map(|change| {
                let held = self.toolchain.held_back(&change, &folders);
                ContainerChange::new(change, held)
            })
            .collect();
        Ok(ContainerDelta {
            changes,
            bytes: 0,
            patch: String::new(),
        })
    }

    fn read_and_apply(
        &self,
        artifacts: Option<&Path>,
        max_diff: u64,
    ) -> Result<Captured, CaptureError> {
        let mut delta = self.listed()?;
        let scratch;
        let archive = match artifacts {
            Some(dir) => dir.join(CONTAINER_DELTA),
            None => {
                scratch = tempfile::tempdir().map_err(|source| CaptureError::Scratch { source })?;
                scratch.path().join(CONTAINER_DELTA)
            }
        };
        let (packed, image) = self.export_applied(&delta, &archive, max_diff)?;
        // Now that the image's programs are known: what shadows or changes one is held back.
        let dropped = self.hold_back(&mut delta, &image);
        self.save_listing(&delta, artifacts)?;
        let Some(mut packed) = packed else {
            return Ok(Captured {
                delta,
                image: None,
                rejected: None,
            });
        };
        if packed.over {
            delta.bytes = packed.bytes;
            return Ok(Captured {
                rejected: Some(format!(
                    "the agent changed more than max_diff ({max_diff} bytes) of files in its container outside the workspace ({CONTAINER_CHANGES} lists them)"
                )),
                delta,
                image: None,
            });
        }
        if !dropped.is_empty() {
            packed =
                repack(&archive, &dropped).map_err(|source| CaptureError::Scratch { source })?;
        }
        record_packed(&mut delta, &packed);
        let deleted = deleted_paths(&delta);
        if packed.files.is_empty() && deleted.is_empty() {
            return Ok(Captured {
                delta,
                image: None,
                rejected: None,
            });
        }
        let tag = format!(
            "localhost/deltabench-delta:{}-{}",
            tag_safe(&self.label),
            SEQUENCE.fetch_add(1, Ordering::Relaxed)
        );
        self.runtime
            .run_and_commit(
                &self.image,
                &self.label,
                APPLY_SCRIPT,
                &deleted,
                &archive,
                &tag,
            )
            .map_err(|source| CaptureError::Apply { source })?;
        Ok(Captured {
            delta,
            image: Some(tag),
            rejected: None,
        })
    }

    /// The applied changes exported from the container into `archive` (none when nothing
    /// applies), and the image's programs, noted from the changed files it already had.
    fn export_applied(
        &self,
        delta: &ContainerDelta,
        archive: &Path,
        max_diff: u64,
    ) -> Result<(Option<Packed>, ImagePrograms), CaptureError> {
        let added: HashSet<String> = delta
            .changes
            .iter()
            .filter(|c| c.change.kind == FsChangeKind::Added)
            .map(archive_path)
            .collect();
        let candidates: HashSet<String> = delta
            .changes
            .iter()
            .filter(|c| c.applied && c.change.kind != FsChangeKind::Deleted)
            .map(archive_path)
            .collect();
        let path = self
            .runtime
            .image_path(&self.image)?
            .unwrap_or_else(|| DEFAULT_PATH.to_owned());
        let mut image = ImagePrograms::new(&path);
        let any_applied = delta.changes.iter().any(|c| c.applied);
        let packed = match any_applied {
            true => Some(self.runtime.export(&self.container, |stream| {
                pack(stream, archive, &candidates, max_diff, &mut |path| {
                    if !added.contains(path) {
                        image.note(&format!("/{path}"));
                    }
                })
            })?),
            false => None,
        };
        Ok((packed, image))
    }

    /// Holds back the applied changes that shadow or change one of the image's programs;
    /// returns their archive paths.
    fn hold_back(&self, delta: &mut ContainerDelta, image: &ImagePrograms) -> HashSet<String> {
        let mut dropped = HashSet::new();
        let folders = delta.folders();
        for change in delta.changes.iter_mut().filter(|c| c.applied) {
            if let Some(held) = self
                .toolchain
                .held_back_given(&change.change, &folders, image)
            {
                *change = ContainerChange::new(change.change.clone(), Some(held));
                dropped.insert(archive_path(change));
            }
        }
        dropped
    }

    fn save_listing(
        &self,
        delta: &ContainerDelta,
        artifacts: Option<&Path>,
    ) -> Result<(), CaptureError> {
        if let Some(dir) = artifacts {
            std::fs::write(dir.join(CONTAINER_CHANGES), delta.listing())
                .map_err(|source| CaptureError::Save { source })?;
        }
        Ok(())
    }
}

/// What the runtime or the harness put there: its own files, the mounts (the workspace, the
/// homes, the programs) and the folders made to hold them.
fn harness_path(change: &FsChange, mounts: &[PathBuf]) -> bool {
    let path = Path::new(&change.path);
    let mut made = RUNTIME_PATHS
        .iter()
        .map(Path::new)
        .chain(mounts.iter().map(PathBuf::as_path));
    made.any(|made| {
        path.starts_with(made) || (change.kind != FsChangeKind::Deleted && made.starts_with(path))
    })
}

/// A change's path in the exported archive: without the leading `/`.
fn archive_path(change: &ContainerChange) -> String {
    change.change.path.trim_start_matches('/').to_owned()
}

/// The archive's size, each change's size in it, and the patch shown for them.
fn record_packed(delta: &mut ContainerDelta, packed: &Packed) {
    delta.bytes = packed.bytes;
    for change in &mut delta.changes {
        if let Some(file) = packed.files.get(&archive_path(change)) {
            change.size = Some(file.size);
        }
    }
    delta.patch = container_patch(delta, &packed.files);
}

/// The applied deletions, as the container lists them.
fn deleted_paths(delta: &ContainerDelta) -> Vec<String> {
    delta
        .changes
        .iter()
        .filter(|c| c.applied && c.change.kind == FsChangeKind::Deleted)
        .map(|c| c.change.path.clone())
        .collect()
}

struct Packed {
    bytes: u64,
    /// Over `max_diff`: the archive is incomplete.
    over: bool,
    /// What the archive holds, by path (without the leading `/`).
    files: BTreeMap<String, PackedEntry>,
}

struct PackedEntry {
    size: u64,
    /// A regular file's content; a link's target.
    content: Option<Vec<u8>>,
    link: Option<String>,
}

/// Copies the entries of the exported file system named in `keep` into a new archive at `to`;
/// `seen` is told every other non-folder entry's path (the image's files, mostly).
fn pack(
    stream: &mut dyn Read,
    to: &Path,
    keep: &HashSet<String>,
    max_diff: u64,
    seen: &mut dyn FnMut(&str),
) -> std::io::Result<Packed> {
    let mut exported = tar::Archive::new(stream);
    copy_entries(exported.entries()?, to, max_diff, |path, dir| {
        let kept = keep.contains(path);
        if !kept && !dir {
            seen(path);
        }
        kept
    })
}

/// The archive at `at` without the entries in `dropped`.
fn repack(at: &Path, dropped: &HashSet<String>) -> std::io::Result<Packed> {
    let from = at.with_extension("tar.full");
    std::fs::rename(at, &from)?;
    let mut archive = tar::Archive::new(std::fs::File::open(&from)?);
    let packed = copy_entries(archive.entries()?, at, u64::MAX, |path, _| {
        !dropped.contains(path)
    });
    std::fs::remove_file(&from)?;
    packed
}

fn copy_entries<R: Read>(
    entries: tar::Entries<'_, R>,
    to: &Path,
    max_diff: u64,
    mut keep: impl FnMut(&str, bool) -> bool,
) -> std::io::Result<Packed> {
    let mut builder = tar::Builder::new(std::fs::File::create(to)?);
    builder.follow_symlinks(false);
    let mut packed = Packed {
        bytes: 0,
        over: false,
        files: BTreeMap::new(),
    };
    for entry in entries {
        let mut entry = entry?;
        let path = entry.path()?.to_string_lossy().into_owned();
        let path = path.trim_start_matches("./").trim_start_matches('/');
        let path = path.trim_end_matches('/').to_owned();
        let dir = entry.header().entry_type().is_dir();
        if !keep(&path, dir) {
            continue;
        }
        let mut header = entry.header().clone();
        let mut content = None;
        if header.entry_type().is_file() {
            packed.bytes += entry.size();
            if packed.bytes > max_diff {
                packed.over = true;
                break;
            }
            let mut bytes = Vec::with_capacity(entry.size() as usize);
            entry.read_to_end(&mut bytes)?;
            content = Some(bytes);
        }
        let link = entry.link_name()?.map(|t| t.to_string_lossy().into_owned());
        match (&link, &content) {
            (Some(target), _) => builder.append_link(&mut header, &path, target)?,
            (None, Some(bytes)) => builder.append_data(&mut header, &path, bytes.as_slice())?,
            (None, None) => builder.append_data(&mut header, &path, std::io::empty())?,
        }
        if !dir {
            packed.files.insert(
                path,
                PackedEntry {
                    size: header.size().unwrap_or_default(),
                    content,
                    link,
                },
            );
        }
    }
    builder.into_inner()?.sync_all()?;
    Ok(packed)
}

/// The container's changes as the diff shows them, after the workspace's patch: one section
/// per change carried, headed `diff --container PATH`, then its kind and size and a text file's
/// new content as `+` lines. No `---`/`+++`/`@@` lines: `git apply` skips such a section (it
/// reads no path from it), so `diff.patch` still applies to a workspace.
fn container_patch(delta: &ContainerDelta, files: &BTreeMap<String, PackedEntry>) -> String {
    let mut out = String::new();
    for change in delta.changes.iter().filter(|c| c.applied) {
        let path = &change.change.path;
        let entry = files.get(path.trim_start_matches('/'));
        let what = match (change.change.kind, entry) {
            (FsChangeKind::Deleted, _) => "deleted".to_owned(),
            (_, Some(PackedEntry { link: Some(t), .. })) => format!("symlink to {t}"),
            (FsChangeKind::Added, Some(e)) => format!("new file, {} bytes", e.size),
            (_, Some(e)) => format!("changed file, {} bytes (its new content)", e.size),
            // A folder: its files have sections of their own.
            (_, None) => continue,
        };
        out.push_str(&format!("diff --container {path}\n{what}\n"));
        let Some(text) = entry
            .and_then(|e| e.content.as_deref())
            .filter(|bytes| !bytes.is_empty() && !bytes.contains(&0))
            .and_then(|bytes| std::str::from_utf8(bytes).ok())
        else {
            continue;
        };
        for line in text.lines() {
            out.push('+');
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// `label` as an image tag may hold it.
fn tag_safe(label: &str) -> String {
    label
        .chars()
        .map(|c| match c {
            'a'..='z' | '0'..='9' | '_' | '.' | '-' => c,
            'A'..='Z' => c.to_ascii_lowercase(),
            _ => '-',
        })
        .take(100)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(kind: FsChangeKind, path: &str) -> FsChange {
        FsChange {
            kind,
            path: path.into(),
        }
    }

    #[test]
    fn only_applied_deletions_are_deleted_and_archive_paths_lose_their_slash() {
        let delta = ContainerDelta {
            changes: vec![
                ContainerChange::new(change(FsChangeKind::Deleted, "/etc/gone"), None),
                ContainerChange::new(
                    change(FsChangeKind::Deleted, "/usr/bin/held"),
                    Some(HeldBack::Shadows),
                ),
                ContainerChange::new(change(FsChangeKind::Added, "/etc/new"), None),
            ],
            bytes: 0,
            patch: String::new(),
        };
        assert_eq!(deleted_paths(&delta), ["/etc/gone"]);
        assert_eq!(archive_path(&delta.changes[2]), "etc/new");
    }

    #[test]
    fn mounts_their_folders_and_the_runtimes_files_are_the_harnesss() {
        let mounts = [PathBuf::from("/app"), PathBuf::from("/work/run/t/home")];
        for (kind, path, harness) in [
            (FsChangeKind::Added, "/app", true),
            (FsChangeKind::Changed, "/work", true),
            (FsChangeKind::Added, "/work/run/t", true),
            (FsChangeKind::Added, "/work/run/t/other.txt", false),
            (FsChangeKind::Deleted, "/work", false),
            (FsChangeKind::Added, "/etc/app.conf", false),
            (FsChangeKind::Changed, "/etc/hosts", true),
            (FsChangeKind::Changed, "/etc", true),
            (FsChangeKind::Added, "/application", false),
        ] {
            assert_eq!(
                harness_path(&change(kind, path), &mounts),
                harness,
                "{kind:?} {path}"
            );
        }
    }

    #[test]
    fn held_back_changes_count_as_tampering_unless_a_package_was_installed() {
        let delta = ContainerDelta {
            changes: vec![
                ContainerChange::new(
                    change(FsChangeKind::Added, "/usr/local/bin/pytest"),
                    Some(HeldBack::Shadows),
                ),
                ContainerChange::new(
                    change(FsChangeKind::Added, "/usr/lib/python3/dist-packages/six.py"),
                    Some(HeldBack::Installed),
                ),
                ContainerChange::new(change(FsChangeKind::Changed, "/etc/app.conf"), None),
            ],
            bytes: 3,
            patch: String::new(),
        };
        assert_eq!(
            delta.tampered(),
            ["/usr/local/bin/pytest (in the container)"]
        );
        assert_eq!(
            delta.listing(),
            "A /usr/local/bin/pytest  (protected: not applied)\nA /usr/lib/python3/dist-packages/six.py  (installed: not applied)\nC /etc/app.conf\n"
        );
    }

    #[test]
    fn the_diff_shows_a_carried_text_files_new_content() {
        let delta = ContainerDelta {
            changes: vec![
                ContainerChange::new(change(FsChangeKind::Changed, "/etc"), None),
                ContainerChange::new(change(FsChangeKind::Added, "/etc/app.conf"), None),
                ContainerChange::new(change(FsChangeKind::Deleted, "/etc/old.conf"), None),
                ContainerChange::new(
                    change(FsChangeKind::Changed, "/usr/bin/tr"),
                    Some(HeldBack::Toolchain),
                ),
            ],
            ..ContainerDelta::default()
        };
        let files = BTreeMap::from([(
            "etc/app.conf".to_owned(),
            PackedEntry {
                size: 8,
                content: Some(b"a=1\nb=2\n".to_vec()),
                link: None,
            },
        )]);
        assert_eq!(
            container_patch(&delta, &files),
            "diff --container /etc/app.conf\nnew file, 8 bytes\n+a=1\n+b=2\ndiff --container /etc/old.conf\ndeleted\n"
        );
    }

    #[test]
    fn pack_keeps_only_the_listed_entries_and_stops_over_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let mut source = tar::Builder::new(Vec::new());
        for (path, body) in [
            ("etc/app.conf", "x=1\n"),
            ("etc/other", "y\n"),
            ("opt/x/a", "aaaa"),
        ] {
            let mut header = tar::Header::new_gnu();
            header.set_size(body.len() as u64);
            header.set_mode(0o644);
            header.set_cksum();
            source
                .append_data(&mut header, path, body.as_bytes())
                .unwrap();
        }
        let bytes = source.into_inner().unwrap();
        let keep: HashSet<String> = ["etc/app.conf".into(), "opt/x/a".into()].into();
        let out = dir.path().join("d.tar");
        let mut seen = Vec::new();
        let packed = pack(&mut bytes.as_slice(), &out, &keep, 100, &mut |p| {
            seen.push(p.to_owned())
        })
        .unwrap();
        assert_eq!(seen, ["etc/other"]);
        assert_eq!((packed.bytes, packed.over), (8, false));
        let mut names: Vec<String> = tar::Archive::new(std::fs::File::open(&out).unwrap())
            .entries()
            .unwrap()
            .map(|e| e.unwrap().path().unwrap().display().to_string())
            .collect();
        names.sort();
        assert_eq!(names, ["etc/app.conf", "opt/x/a"]);
        let over = pack(&mut bytes.as_slice(), &out, &keep, 5, &mut |_| {}).unwrap();
        assert!(over.over);
    }
}
