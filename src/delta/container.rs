//! `delta: container`: what the agent changed in its container outside the workspace.
//!
//! The agent's container is kept when its command ends. Its changes against the image (`diff`,
//! less the harness's mounts) are listed; the protected ones are never carried on; the rest is
//! read from an export of its file system into an archive kept with the trial, and laid (with
//! the deletions) into a new container of the same image, saved as the image the verify
//! command runs in. No process of the agent's survives: only files cross.

use std::collections::HashSet;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use crate::workspace::{ContainerError, FsChange, FsChangeKind, Runtime};

/// The archive of the changed files carried into verify, in the artifacts folder.
pub const CONTAINER_DELTA: &str = "container-delta.tar";
/// The list of what changed in the container, in the artifacts folder.
pub const CONTAINER_CHANGES: &str = "container-delta.txt";

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

/// Whether a container path is protected: never carried into verify.
pub type ProtectedPath = Arc<dyn Fn(&str) -> bool + Send + Sync>;

/// How to take the agent's container's delta.
#[derive(Clone)]
pub struct ContainerCapture {
    pub runtime: Runtime,
    /// The agent's kept container.
    pub container: String,
    /// The image the agent ran in: the new container's too.
    pub image: String,
    /// The run's label, on every container made.
    pub label: String,
    pub protected: ProtectedPath,
}

/// What the agent changed in its container, outside the workspace and the harness's mounts.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ContainerDelta {
    pub changes: Vec<ContainerChange>,
    /// Bytes of the changed files carried into verify.
    pub bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ContainerChange {
    #[serde(flatten)]
    pub change: FsChange,
    /// `false` for a protected path: the verify command sees the image's version.
    pub applied: bool,
}

impl ContainerDelta {
    /// Whether it holds a change that reaches the verify command.
    pub fn changes_anything(&self) -> bool {
        self.changes.iter().any(|c| c.applied)
    }

    /// The protected paths the agent changed or removed (adding where the image had nothing is
    /// what installing a tool does; it is not carried on, so it cannot act).
    pub fn tampered(&self) -> Vec<String> {
        self.changes
            .iter()
            .filter(|c| !c.applied && c.change.kind != FsChangeKind::Added)
            .map(|c| format!("{} (in the container)", c.change.path))
            .collect()
    }

    /// One line per change, as `diff` lists them, the protected ones marked.
    pub fn listing(&self) -> String {
        self.changes
            .iter()
            .map(|c| match c.applied {
                true => format!("{}\n", c.change.line()),
                false => format!("{}  (protected: not applied)\n", c.change.line()),
            })
            .collect()
    }
}

/// What [`ContainerCapture::capture`] found.
pub struct Captured {
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
    #[error("cannot save {CONTAINER_CHANGES}: {source}")]
    Save {
        #[source]
        source: std::io::Error,
    },
    /// No scratch folder for the archive of the changes.
    #[error("{source}")]
    Scratch {
        #[source]
        source: std::io::Error,
    },
    #[error("cannot lay the container's changes into a new container: {source}")]
    Apply {
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
        let delta = self.listed()?;
        if let Some(dir) = artifacts {
            std::fs::write(dir.join(CONTAINER_CHANGES), delta.listing())
                .map_err(|source| CaptureError::Save { source })?;
        }
        Ok(delta)
    }

    fn listed(&self) -> Result<ContainerDelta, CaptureError> {
        let listed = self.runtime.diff(&self.container)?;
        let mounts = self.runtime.mount_targets(&self.container)?;
        let changes: Vec<ContainerChange> = listed
            .into_iter()
            .filter(|change| !harness_path(change, &mounts))
            .map(|change| ContainerChange {
                applied: !(self.protected)(&change.path),
                change,
            })
            .collect();
        Ok(ContainerDelta { changes, bytes: 0 })
    }

    fn read_and_apply(
        &self,
        artifacts: Option<&Path>,
        max_diff: u64,
    ) -> Result<Captured, CaptureError> {
        let mut delta = self.list(artifacts)?;
        let applied = |kind: fn(FsChangeKind) -> bool| -> Vec<String> {
            delta
                .changes
                .iter()
                .filter(|c| c.applied && kind(c.change.kind))
                .map(|c| c.change.path.clone())
                .collect()
        };
        let written: HashSet<String> = applied(|k| k != FsChangeKind::Deleted)
            .into_iter()
            .map(|p| p.trim_start_matches('/').to_owned())
            .collect();
        let deleted = applied(|k| k == FsChangeKind::Deleted);
        if written.is_empty() && deleted.is_empty() {
            return Ok(Captured {
                delta,
                image: None,
                rejected: None,
            });
        }
        let scratch;
        let archive = match artifacts {
            Some(dir) => dir.join(CONTAINER_DELTA),
            None => {
                scratch = tempfile::tempdir().map_err(|source| CaptureError::Scratch { source })?;
                scratch.path().join(CONTAINER_DELTA)
            }
        };
        let packed = self.runtime.export(&self.container, |stream| {
            pack(stream, &archive, &written, max_diff)
        })?;
        delta.bytes = packed.bytes;
        if packed.over {
            return Ok(Captured {
                rejected: Some(format!(
                    "the agent changed more than max_diff ({max_diff} bytes) of files in its container outside the workspace ({CONTAINER_CHANGES} lists them)"
                )),
                delta,
                image: None,
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

struct Packed {
    bytes: u64,
    /// Over `max_diff`: the archive is incomplete.
    over: bool,
}

/// Copies the entries of the exported file system named in `keep` into a new archive at `to`.
fn pack(
    stream: &mut dyn Read,
    to: &Path,
    keep: &HashSet<String>,
    max_diff: u64,
) -> std::io::Result<Packed> {
    let mut builder = tar::Builder::new(std::fs::File::create(to)?);
    builder.follow_symlinks(false);
    let mut packed = Packed {
        bytes: 0,
        over: false,
    };
    let mut exported = tar::Archive::new(stream);
    for entry in exported.entries()? {
        let mut entry = entry?;
        let path = entry.path()?.to_string_lossy().into_owned();
        let path = path.trim_start_matches("./").trim_start_matches('/');
        let path = path.trim_end_matches('/').to_owned();
        if !keep.contains(&path) {
            continue;
        }
        let mut header = entry.header().clone();
        if header.entry_type().is_file() {
            packed.bytes += entry.size();
            if packed.bytes > max_diff {
                packed.over = true;
                break;
            }
        }
        match entry.link_name()? {
            Some(target) => {
                let target = target.into_owned();
                builder.append_link(&mut header, &path, target)?;
            }
            None => builder.append_data(&mut header, &path, &mut entry)?,
        }
    }
    builder.into_inner()?.sync_all()?;
    Ok(packed)
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
    fn only_protected_files_the_image_had_count_as_tampering() {
        let delta = ContainerDelta {
            changes: vec![
                ContainerChange {
                    change: change(FsChangeKind::Added, "/usr/local/bin/pytest"),
                    applied: false,
                },
                ContainerChange {
                    change: change(FsChangeKind::Changed, "/usr/bin/python3"),
                    applied: false,
                },
                ContainerChange {
                    change: change(FsChangeKind::Changed, "/etc/app.conf"),
                    applied: true,
                },
            ],
            bytes: 3,
        };
        assert_eq!(delta.tampered(), ["/usr/bin/python3 (in the container)"]);
        assert_eq!(
            delta.listing(),
            "A /usr/local/bin/pytest  (protected: not applied)\nC /usr/bin/python3  (protected: not applied)\nC /etc/app.conf\n"
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
        let packed = pack(&mut bytes.as_slice(), &out, &keep, 100).unwrap();
        assert_eq!((packed.bytes, packed.over), (8, false));
        let mut names: Vec<String> = tar::Archive::new(std::fs::File::open(&out).unwrap())
            .entries()
            .unwrap()
            .map(|e| e.unwrap().path().unwrap().display().to_string())
            .collect();
        names.sort();
        assert_eq!(names, ["etc/app.conf", "opt/x/a"]);
        let over = pack(&mut bytes.as_slice(), &out, &keep, 5).unwrap();
        assert!(over.over);
    }
}
