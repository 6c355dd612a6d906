//! The overlay fast path for `worktree`: one read-only template checkout per (repo, commit), and a
//! kernel overlayfs per trial on top of it.
//!
//! A checkout costs time per file (38k files: 0.8 s on tmpfs, 29 s on this VM's root disk); an
//! overlay mount costs milliseconds at any size (`benches/README.md`, "Speed and scale"). The template is a `worktree` clone
//! (refs stripped, objects borrowed from the source), so an overlay workspace is a normal git
//! checkout: the agent's writes, its index and its commits land in the trial's own upper dir.
//! Templates live in the cache, keyed by the source repo and the commit, and are reused across
//! runs. Dispose unmounts and removes the upper dir; the template is untouched.
//!
//! A new commit close to one whose full template this run already has is not checked out again:
//! its template is a *layer*, what `git checkout` of the new commit changed in an overlay over
//! the full template (the changed files, whiteouts for the removed ones, its own index and
//! `HEAD`), and its workspaces lay both under their overlay. The merged view is what a checkout
//! of the commit gives; the layer's record names the build of the template under it, which is
//! checked as well.
//!
//! In `worktree` mode the agent may run as root, so the template is guarded twice. The overlay's
//! lower layers are read-only binds of the templates, detached once the overlay holds them: the
//! `lowerdir` the agent can read in `/proc/self/mountinfo` then leads nowhere. And the
//! template's content is recorded when it is built and checked on its first use in every run: a
//! changed template is rebuilt, with a warning. A root agent that finds the template's real path
//! and rewrites the record too is not stopped: only `sandbox` isolation protects against that.

use std::collections::{HashMap, HashSet};
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use nix::fcntl::{Flock, FlockArg};
use nix::mount::{MntFlags, MsFlags, mount, umount2};
use sha2::{Digest, Sha256};

use super::clone::{CloneBackend, borrowed_objects, make_clone, objects_of};
use super::digest::{Entry, KnownBlobs, first_difference, record_tree};
use super::error::{PrepareError, TreeError};
use super::git::run_git;
use super::remove::remove_tree;
use super::{
    Isolation, ProvisionedWorkspace, WorkspaceBackend, WorkspaceBase, WorkspaceProvisionError,
};

/// Marks a template whose checkout finished.
const READY: &str = ".deltabench-ready";
/// The template's recorded content (see [`record_tree`]), beside its tree.
const RECORD: &str = "content.json";

/// Beside a template's folder: locked shared while a run uses the template.
const IN_USE: &str = "in-use";
/// In a template's folder: its mtime is when a run last used it.
const LAST_USED: &str = "last-used";
/// In a template's folder: the bytes it takes on disk, counted when it was built.
const SIZE: &str = "bytes";

/// The [`record_tree`] hashing a full template's record is made with: one made another way is no
/// record.
const RECORD_FORMAT: u32 = 1;
/// A layer's record (its tree holds what differs from the full template under it): a build that
/// knows only [`RECORD_FORMAT`] finds no record in it, and rebuilds the template in full.
const LAYER_FORMAT: u32 = 2;
/// How many of this run's full templates (the most recent first) a new commit is compared with.
const LAYER_CANDIDATES: usize = 8;

/// What [`RECORD`] holds.
#[derive(serde::Serialize, serde::Deserialize)]
struct ContentRecord {
    /// 0 for records from before it was written (file contents hashed whole).
    #[serde(default)]
    format: u32,
    commit: String,
    /// The commit a prepared template's workspaces start from (its setup's result).
    #[serde(default)]
    prepared: Option<String>,
    /// Names this build of the template: a layer records the build of the template under it,
    /// so one rebuilt since (new inodes and times under the layer's index) is noticed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    build: Option<String>,
    /// For a layer: the full template under it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    base: Option<LayerBase>,
    entries: Vec<Entry>,
}

/// The full template a layer lies on.
#[derive(Clone, serde::Serialize, serde::Deserialize)]
struct LayerBase {
    /// Its folder's name, in the same templates folder.
    dir: String,
    /// Its build the layer was made on.
    build: String,
}

impl ContentRecord {
    fn start(&self) -> &str {
        self.prepared.as_deref().unwrap_or(&self.commit)
    }
}

fn read_record(dir: &Path) -> Option<ContentRecord> {
    fs::read(dir.join(RECORD))
        .ok()
        .and_then(|bytes| serde_json::from_slice(&bytes).ok())
}

fn touch_last_used(dir: &Path) {
    let _ = fs::File::create(dir.join(LAST_USED));
}

/// A name for one build of a template, unique across builds and processes.
fn new_build_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static BUILDS: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!(
        "{nanos:x}-{:x}-{:x}",
        std::process::id(),
        BUILDS.fetch_add(1, Ordering::Relaxed)
    )
}

/// A template this run checked or built: the trees its workspaces lay under their overlay (the
/// top one first) and the commit they start from.
#[derive(Clone)]
struct Ready {
    layers: Vec<PathBuf>,
    start: String,
    /// `None` for a template built before builds were named.
    build: Option<String>,
}

/// A full template of this run a new commit's layer may lie on.
#[derive(Clone)]
struct Candidate {
    dir: PathBuf,
    commit: String,
    build: String,
    /// The paths its record holds: a layer is made only when it changes at most half as many.
    paths: usize,
}

/// Overlay workspaces over cached templates; commits used once fall back to a clone.
pub struct OverlayBackend {
    root: PathBuf,
    templates: PathBuf,
    /// Commits the plan provisions more than once: only those are worth a template.
    reused: HashSet<String>,
    clone: CloneBackend,
    keep: bool,
    building: Mutex<HashMap<PathBuf, Arc<Mutex<()>>>>,
    /// Templates whose content this run has checked (or built) already.
    checked: Mutex<HashMap<PathBuf, Ready>>,
    /// This run's full templates a layer may lie on, in the order they were checked or built.
    bases: Mutex<Vec<Candidate>>,
    /// Templates whose preparation failed in this run, with the reason.
    failed: Mutex<HashMap<PathBuf, PrepareError>>,
    /// The in-use locks of the templates this run uses.
    in_use: Mutex<Vec<(PathBuf, Flock<fs::File>)>>,
}

impl OverlayBackend {
    /// Workspaces under `root`, templates under `templates`. `reused` lists the commits that get
    /// a template (or already have one); every other commit gets a plain clone.
    pub fn new(root: &Path, templates: &Path, reused: HashSet<String>, keep: bool) -> Self {
        Self {
            root: root.to_owned(),
            templates: templates.to_owned(),
            reused,
            clone: CloneBackend::new(root).keeping(keep),
            keep,
            building: Mutex::new(HashMap::new()),
            checked: Mutex::new(HashMap::new()),
            bases: Mutex::new(Vec::new()),
            failed: Mutex::new(HashMap::new()),
            in_use: Mutex::new(Vec::new()),
        }
    }

    /// Whether this process can mount an overlay with its upper dir under `dir`: root (or
    /// CAP_SYS_ADMIN) and a kernel with overlayfs. The reason when not.
    pub fn probe(dir: &Path) -> Result<(), TreeError> {
        fs::create_dir_all(dir).map_err(create(dir))?;
        let scratch = tempfile::Builder::new()
            .prefix(".overlay-probe-")
            .tempdir_in(dir)
            .map_err(|source| TreeError::Staging {
                path: dir.to_owned(),
                source,
            })?;
        let parts = ["lower", "upper", "work", "merged"].map(|p| scratch.path().join(p));
        for part in &parts {
            fs::create_dir(part).map_err(|source| TreeError::Io { source })?;
        }
        mount_overlay(&parts[..1], &parts[1], &parts[2], &parts[3])?;
        let _ = umount2(&parts[3], MntFlags::MNT_DETACH);
        Ok(())
    }

    /// Where the template of `base` is kept.
    fn template_dir(&self, base: &WorkspaceBase) -> PathBuf {
        let repo = base
            .repo
            .canonicalize()
            .unwrap_or_else(|_| base.repo.clone());
        let key = Sha256::digest(format!(
            "{}\0{}{}",
            repo.display(),
            base.commit,
            base.prepare
                .as_deref()
                .map(|p| format!("\0{}", p.key()))
                .unwrap_or_default()
        ));
        self.templates.join(&format!("{key:x}")[..24])
    }

    /// Runs `f` holding the lock of the template folder `dir`: in this process, and across the
    /// processes that share the cache.
    fn with_lock<T>(
        &self,
        dir: &Path,
        f: impl FnOnce() -> Result<T, TreeError>,
    ) -> Result<T, TreeError> {
        let lock = {
            let mut building = self.building.lock()?;
            building.entry(dir.to_owned()).or_default().clone()
        };
        let _held = lock.lock()?;
        fs::create_dir_all(&self.templates).map_err(create(&self.templates))?;
        let lock_file = fs::File::create(dir.with_extension("lock"))
            .map_err(|source| TreeError::Io { source })?;
        let _flock = Flock::lock(lock_file, FlockArg::LockExclusive)
            .map_err(|(_, source)| TreeError::Lock { source })?;
        f()
    }

    /// The template of `base` (built, checked or rebuilt as needed).
    fn template_for(&self, base: &WorkspaceBase, dir: &Path) -> Result<Ready, TreeError> {
        let dir = dir.to_owned();
        self.with_lock(&dir, || {
            // A preparation that failed once in this run fails the same way for every trial.
            if let Some(reason) = self.failed.lock().ok().and_then(|f| f.get(&dir).cloned()) {
                return Err(reason.into());
            }
            self.hold_in_use(&dir)?;
            if let Some(ready) = self.checked_ready(&dir) {
                return Ok(ready);
            }
            if dir.join(READY).exists() {
                let recorded = read_record(&dir);
                match self.check(recorded.as_ref(), &dir, base) {
                    Ok(ready) => {
                        self.mark_checked(&dir, &ready, recorded.as_ref());
                        touch_last_used(&dir);
                        return Ok(ready);
                    }
                    Err(Some(first)) => eprintln!(
                        "warning: the cached template {} (commit {}) changed since it was built \
                         (first difference: {first}); rebuilding it",
                        dir.join("tree").display(),
                        base.commit
                    ),
                    // Built before templates had a record of this format, or what the
                    // preparation made outside the tree is gone: made again, quietly.
                    Err(None) => {}
                }
            }
            self.build(base, &dir)
        })
    }

    /// Whether the built template in `dir` still holds what was recorded (and so does the
    /// template under it, for a layer): `Err(Some(path))` names the first differing path,
    /// `Err(None)` means it is to be rebuilt quietly (no usable record, a base that is gone or
    /// was rebuilt, a preparation whose result outside the tree is gone).
    fn check(
        &self,
        recorded: Option<&ContentRecord>,
        dir: &Path,
        base: &WorkspaceBase,
    ) -> Result<Ready, Option<String>> {
        let recorded = recorded.ok_or(None)?;
        let tree = dir.join("tree");
        let mut layers = vec![tree.clone()];
        if let Some(under) = &recorded.base {
            layers.push(self.base_ready(&self.templates.join(&under.dir), &under.build)?);
        }
        check_template(recorded, &tree)?;
        let start = recorded.start().to_owned();
        if base.prepare.as_ref().is_some_and(|p| !p.intact(&start)) {
            return Err(None);
        }
        Ok(Ready {
            layers,
            start,
            build: recorded.build.clone(),
        })
    }

    /// The tree of the full template in `dir` that a layer was made on, checked (once a run) and
    /// held in use. `Err(None)` when it is gone or was rebuilt since, `Err(Some(path))` when its
    /// content changed: either way the layer is made again.
    fn base_ready(&self, dir: &Path, build: &str) -> Result<PathBuf, Option<String>> {
        let found = self.with_lock(dir, || {
            if let Some(ready) = self.checked_ready(dir) {
                return Ok(match ready.build.as_deref() == Some(build) {
                    true => Ok(ready.layers[0].clone()),
                    false => Err(None),
                });
            }
            let recorded = dir
                .join(READY)
                .exists()
                .then(|| read_record(dir))
                .flatten()
                .filter(|r| {
                    r.build.as_deref() == Some(build) && r.base.is_none() && r.prepared.is_none()
                });
            let Some(recorded) = recorded else {
                return Ok(Err(None));
            };
            self.hold_in_use(dir)?;
            let tree = dir.join("tree");
            if let Err(differs) = check_template(&recorded, &tree) {
                return Ok(Err(differs));
            }
            let ready = Ready {
                layers: vec![tree.clone()],
                start: recorded.commit.clone(),
                build: recorded.build.clone(),
            };
            self.mark_checked(dir, &ready, Some(&recorded));
            touch_last_used(dir);
            Ok(Ok(tree))
        });
        found.unwrap_or(Err(None))
    }

    /// Builds the template of `base` in `dir`: a layer over one of this run's full templates
    /// when the commit is close to one, a full checkout otherwise (or when the layer fails).
    fn build(&self, base: &WorkspaceBase, dir: &Path) -> Result<Ready, TreeError> {
        let fresh = || -> Result<(), TreeError> {
            remove_tree(dir)?;
            fs::create_dir_all(dir).map_err(create(dir))
        };
        fresh()?;
        if base.prepare.is_none()
            && let Some(under) = self.pick_base(base)
        {
            match self.build_layer(&under, base, dir) {
                Ok(ready) => return Ok(ready),
                // Correct either way: the full checkout below only costs more.
                Err(_) => fresh()?,
            }
        }
        let tree = dir.join("tree");
        make_clone(&base.repo, &tree, &base.commit)?;
        let prepared = match base.prepare.as_deref() {
            Some(prepare) => match prepare.prepare(&tree, dir) {
                Ok(start) => Some(start),
                Err(reason) => {
                    if let Ok(mut failed) = self.failed.lock() {
                        failed.insert(dir.to_owned(), reason.clone());
                    }
                    return Err(reason.into());
                }
            },
            None => None,
        };
        let known = settle_index(&tree, true).map_err(settle(&tree))?;
        let (entries, bytes) = record_tree(&tree, &known).map_err(read_back(&tree))?;
        let record = ContentRecord {
            format: RECORD_FORMAT,
            commit: base.commit.clone(),
            prepared,
            build: Some(new_build_id()),
            base: None,
            entries,
        };
        write_record(dir, &record, bytes)?;
        let ready = Ready {
            layers: vec![tree],
            start: record.start().to_owned(),
            build: record.build.clone(),
        };
        self.mark_checked(dir, &ready, Some(&record));
        touch_last_used(dir);
        Ok(ready)
    }

    /// The full template of this run that `base`'s commit changes the fewest paths of, when
    /// that is at most half of them.
    fn pick_base(&self, base: &WorkspaceBase) -> Option<Candidate> {
        let candidates: Vec<Candidate> = {
            let bases = self.bases.lock().ok()?;
            bases.iter().rev().take(LAYER_CANDIDATES).cloned().collect()
        };
        if candidates.is_empty() {
            return None;
        }
        let repo = git2::Repository::open(&base.repo).ok()?;
        let odb = repo.odb().ok()?;
        let tree_of = |commit: &str| {
            git2::Oid::from_str(commit)
                .and_then(|oid| repo.find_commit(oid))
                .and_then(|commit| commit.tree())
                .ok()
        };
        let target = tree_of(&base.commit)?;
        let mut best: Option<(usize, Candidate)> = None;
        for candidate in candidates {
            // The candidate's commit may be no ancestor: its objects are read from its own
            // history (in this process only).
            if let Some(objects) = borrowed_objects(&candidate.dir.join("tree")) {
                let _ = odb.add_disk_alternate(&objects.to_string_lossy());
            }
            let Some(tree) = tree_of(&candidate.commit) else {
                continue;
            };
            let Ok(diff) = repo.diff_tree_to_tree(Some(&tree), Some(&target), None) else {
                continue;
            };
            let changed = diff.deltas().len();
            if changed * 2 <= candidate.paths && best.as_ref().is_none_or(|(n, _)| changed < *n) {
                best = Some((changed, candidate));
            }
        }
        best.map(|(_, candidate)| candidate)
    }

    /// Makes the template of `base` in `dir` a layer over the full template `under`: an overlay
    /// on `under`'s tree with the layer as its upper dir, in which git checks out the commit.
    fn build_layer(
        &self,
        under: &Candidate,
        base: &WorkspaceBase,
        dir: &Path,
    ) -> Result<Ready, TreeError> {
        let [tree, work, merged] = ["tree", "work", "merged"].map(|p| dir.join(p));
        for part in [&tree, &work, &merged] {
            fs::create_dir_all(part).map_err(create(part))?;
        }
        let objects = objects_of(&base.repo)?;
        let lower = under.dir.join("tree");
        let known = self.with_lock(&under.dir, || {
            // Another run may have rebuilt it since this run checked it.
            let current = self.checked_ready(&under.dir).and_then(|r| r.build);
            if current.as_deref() != Some(under.build.as_str()) {
                return Err(TreeError::Rebuilt);
            }
            mount_overlay(std::slice::from_ref(&lower), &tree, &work, &merged)?;
            let made = checkout_layer(&merged, &lower, &objects, &under.commit, &base.commit);
            let unmounted = umount2(&merged, MntFlags::empty())
                .or_else(|_| umount2(&merged, MntFlags::MNT_DETACH))
                .map_err(|source| TreeError::Unmount {
                    path: merged.clone(),
                    source,
                });
            let known = made?;
            unmounted?;
            Ok(known)
        })?;
        remove_tree(&work)?;
        let _ = fs::remove_dir(&merged);
        strip_overlay_marks(&tree)?;
        let (entries, bytes) = record_tree(&tree, &known).map_err(read_back(&tree))?;
        let dir_name = under
            .dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let record = ContentRecord {
            format: LAYER_FORMAT,
            commit: base.commit.clone(),
            prepared: None,
            build: Some(new_build_id()),
            base: Some(LayerBase {
                dir: dir_name,
                build: under.build.clone(),
            }),
            entries,
        };
        write_record(dir, &record, bytes)?;
        let ready = Ready {
            layers: vec![tree, lower],
            start: base.commit.clone(),
            build: record.build.clone(),
        };
        self.mark_checked(dir, &ready, Some(&record));
        touch_last_used(dir);
        Ok(ready)
    }

    /// Holds a shared lock on the template's in-use file until the backend is dropped, so
    /// `gc --cache-max` never evicts a template a running trial's overlay reads from.
    fn hold_in_use(&self, dir: &Path) -> Result<(), TreeError> {
        let mut held = self.in_use.lock()?;
        if held.iter().any(|(path, _)| path == dir) {
            return Ok(());
        }
        let file = fs::File::create(dir.with_extension(IN_USE))
            .map_err(|source| TreeError::Io { source })?;
        let flock = Flock::lock(file, FlockArg::LockShared)
            .map_err(|(_, source)| TreeError::Lock { source })?;
        held.push((dir.to_owned(), flock));
        Ok(())
    }

    fn checked_ready(&self, dir: &Path) -> Option<Ready> {
        self.checked.lock().ok()?.get(dir).cloned()
    }

    /// Notes `dir` as checked in this run; a full template without preparation becomes a
    /// candidate for later commits' layers.
    fn mark_checked(&self, dir: &Path, ready: &Ready, recorded: Option<&ContentRecord>) {
        if let Ok(mut checked) = self.checked.lock() {
            checked.insert(dir.to_owned(), ready.clone());
        }
        let Some(recorded) = recorded.filter(|r| r.base.is_none() && r.prepared.is_none()) else {
            return;
        };
        let Some(build) = recorded.build.clone() else {
            return;
        };
        if let Ok(mut bases) = self.bases.lock() {
            bases.retain(|c| c.dir != dir);
            bases.push(Candidate {
                dir: dir.to_owned(),
                commit: recorded.commit.clone(),
                build,
                paths: recorded.entries.len(),
            });
        }
    }

    fn has_template(&self, base: &WorkspaceBase) -> bool {
        base.prepare.is_some() || self.reused.contains(&base.commit)
    }
}

/// `TreeError::Create` of `path`, for `map_err`.
fn create(path: &Path) -> impl FnOnce(std::io::Error) -> TreeError + '_ {
    move |source| TreeError::Create {
        path: path.to_owned(),
        source,
    }
}

/// `TreeError::Access` of `path`, for `map_err`.
fn access(path: &Path) -> impl FnOnce(std::io::Error) -> TreeError + '_ {
    move |source| TreeError::Access {
        path: path.to_owned(),
        source,
    }
}

/// `TreeError::ReadBack` of `path`, for `map_err`.
fn read_back(path: &Path) -> impl FnOnce(std::io::Error) -> TreeError + '_ {
    move |source| TreeError::ReadBack {
        path: path.to_owned(),
        source,
    }
}

/// `TreeError::Settle` of `path`, for `map_err`.
fn settle(path: &Path) -> impl FnOnce(TreeError) -> TreeError + '_ {
    move |source| TreeError::Settle {
        path: path.to_owned(),
        source: Box::new(source),
    }
}

/// Writes a finished template's record, then marks it ready, and notes its size.
fn write_record(dir: &Path, record: &ContentRecord, bytes: u64) -> Result<(), TreeError> {
    let json = serde_json::to_vec(record).map_err(|source| TreeError::Record { source })?;
    let bytes = bytes + json.len() as u64;
    fs::write(dir.join(RECORD), json).map_err(|source| TreeError::Io { source })?;
    fs::write(dir.join(READY), &record.commit).map_err(|source| TreeError::Io { source })?;
    // Read-only from now on: its size is counted once, not at every eviction.
    let _ = fs::write(dir.join(SIZE), bytes.to_string());
    Ok(())
}

/// In `merged`, an overlay on the full template `lower` (a checkout of `from`), moves the work
/// tree and index to `commit` as `git checkout` would, reading `from` from the template's history
/// and `commit` from `objects`; then the index is settled and the layer left borrowing from
/// `objects` alone.
///
/// `git read-tree -m -u` is the two-tree merge `git checkout` does, without its refresh of the
/// whole index first: only the entries that change are compared with their files (the template's
/// index is settled, so its stat data holds), and only their files are written.
fn checkout_layer(
    merged: &Path,
    lower: &Path,
    objects: &Path,
    from: &str,
    commit: &str,
) -> Result<KnownBlobs, TreeError> {
    let alternates = merged.join(".git/objects/info/alternates");
    let write = |text: String| {
        fs::write(&alternates, text).map_err(|source| TreeError::Write {
            path: alternates.clone(),
            source,
        })
    };
    let under = fs::read_to_string(lower.join(".git/objects/info/alternates")).unwrap_or_default();
    write(format!("{}\n{under}", objects.display()))?;
    run_git(merged, &["read-tree", "-m", "-u", from, commit])?;
    // A detached HEAD, as the checkout of a full template leaves it (and no reflog); only the
    // commit's own history.
    let head = merged.join(".git/HEAD");
    fs::write(&head, format!("{commit}\n")).map_err(|source| TreeError::Write {
        path: head.clone(),
        source,
    })?;
    write(format!("{}\n", objects.display()))?;
    settle_index(merged, false).map_err(settle(merged))
}

/// Removes the extended attributes overlayfs left on a layer's copied-up folders and files
/// (`trusted.overlay.origin`, `impure`...) but the one it is read with as a lower layer:
/// `opaque`, a folder that hides the template's. Whiteouts are device files, kept as they are.
fn strip_overlay_marks(tree: &Path) -> Result<(), TreeError> {
    use std::os::unix::ffi::OsStrExt;
    let mut stack = vec![tree.to_owned()];
    while let Some(path) = stack.pop() {
        let meta = fs::symlink_metadata(&path).map_err(access(&path))?;
        if meta.is_dir() {
            for entry in fs::read_dir(&path).map_err(access(&path))? {
                stack.push(entry.map_err(|source| TreeError::Io { source })?.path());
            }
        }
        let Ok(c_path) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
            continue;
        };
        let mut names = vec![0u8; 4096];
        // SAFETY: `names` has room for the size passed.
        let size =
            unsafe { libc::llistxattr(c_path.as_ptr(), names.as_mut_ptr().cast(), names.len()) };
        if size <= 0 {
            continue;
        }
        names.truncate(size as usize);
        for name in names.split(|&b| b == 0) {
            if name.starts_with(b"trusted.overlay.") && name != b"trusted.overlay.opaque" {
                let Ok(c_name) = std::ffi::CString::new(name) else {
                    continue;
                };
                // SAFETY: both are NUL-terminated strings.
                if unsafe { libc::lremovexattr(c_path.as_ptr(), c_name.as_ptr()) } != 0 {
                    return Err(TreeError::Xattr {
                        name: String::from_utf8_lossy(name).into_owned(),
                        path,
                        source: std::io::Error::last_os_error(),
                    });
                }
            }
        }
    }
    Ok(())
}

impl WorkspaceBackend for OverlayBackend {
    fn provision(
        &self,
        base: &WorkspaceBase,
    ) -> Result<ProvisionedWorkspace, WorkspaceProvisionError> {
        if !self.has_template(base) {
            return self.clone.provision(base);
        }
        let fail = |reason: String| WorkspaceProvisionError {
            isolation: Isolation::Worktree,
            base: base.repo.clone(),
            reason,
        };
        let asked = std::time::Instant::now();
        // Not made nor checked in this run yet: this trial pays (or waits for) the preparation.
        let kept_at = self.template_dir(base);
        let preparing = self.checked_ready(&kept_at).is_none();
        let template = self.template_for(base, &kept_at).map_err(|e| {
            fail(match base.prepare {
                // The preparation's reason says what failed and where its log is.
                Some(_) => e.to_string(),
                None => format!("cannot build the template: {e}"),
            })
        })?;
        let dir = self.root.join(&base.name);
        if dir.exists() {
            return Err(fail(format!(
                "{} already exists (left by an earlier run?); remove it or choose another --workdir",
                dir.display()
            )));
        }
        let [upper, work, merged] = ["upper", "work", "merged"].map(|p| dir.join(p));
        for part in [&upper, &work, &merged] {
            fs::create_dir_all(part)
                .map_err(|e| fail(format!("cannot create {}: {e}", part.display())))?;
        }
        if let Err(reason) = mount_over_templates(&template.layers, &dir, &upper, &work, &merged) {
            let _ = remove_tree(&dir);
            return Err(fail(reason.to_string()));
        }
        let keep = self.keep;
        let workspace = ProvisionedWorkspace::new(
            merged,
            Isolation::Worktree,
            base.commit.clone(),
            move || {
                // Kept workspaces stay mounted for inspection (`umount` them when done).
                if keep {
                    return Ok(());
                }
                // Detaches the overlay and whatever the agent mounted inside it (a leaked
                // grandchild cannot keep them alive), and never deletes through a mount.
                remove_tree(&dir).map_err(std::io::Error::from)
            },
        );
        let mut workspace = workspace.with_changes(upper);
        if preparing {
            workspace.preparation = Some(asked.elapsed());
        }
        Ok(match base.prepare {
            Some(_) => workspace.prepared_at(template.start),
            None => workspace,
        })
    }
}

/// The workspace-relative paths an overlay's upper dir says may differ from the template: every
/// file, symlink and whiteout (a deletion) in it, and every opaque directory (a directory
/// replaced as a whole), except under `.git`.
pub fn overlay_changes(upper: &Path) -> std::io::Result<Vec<String>> {
    let mut changed = Vec::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(relative) = stack.pop() {
        for entry in fs::read_dir(upper.join(&relative))? {
            let entry = entry?;
            let path = relative.join(entry.file_name());
            if path == Path::new(".git") {
                continue;
            }
            let kind = entry.file_type()?;
            if kind.is_dir() && !is_opaque(&entry.path()) {
                stack.push(path);
            } else {
                changed.push(path.to_string_lossy().into_owned());
            }
        }
    }
    changed.sort();
    Ok(changed)
}

/// Overlayfs marks a directory that hides everything below it in the lower layer with the
/// `trusted.overlay.opaque` xattr.
fn is_opaque(dir: &Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(path) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return false;
    };
    let mut value = [0u8; 1];
    // SAFETY: both pointers are valid for the sizes passed; the buffer outlives the call.
    let n = unsafe {
        libc::lgetxattr(
            path.as_ptr(),
            c"trusted.overlay.opaque".as_ptr(),
            value.as_mut_ptr().cast(),
            value.len(),
        )
    };
    n == 1 && value[0] == b'y'
}

/// Takes every index entry out of git's "racily clean" state without waiting or re-hashing.
///
/// Right after a checkout each file has the index's own mtime second, and git re-hashes an
/// entry whose file is not older than the index (a same-second edit would look clean), so each
/// trial's first git command would re-hash the whole tree. The files are fresh from the
/// checkout (or from setup, whose result was just committed), so their content is what the
/// index says: each such file's mtime is set two seconds back and its new stat data written
/// into the index, which is then written after it, so every entry is strictly older. Returns
/// the blob of each tracked file (`all`) or of each file it settled (a layer's, the files its
/// checkout wrote), for the template's record.
fn settle_index(tree: &Path, all: bool) -> Result<KnownBlobs, TreeError> {
    use nix::sys::stat::{UtimensatFlags, utimensat};
    use nix::sys::time::TimeSpec;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::MetadataExt;

    let msg = |source: git2::Error| TreeError::Repo { source };
    let repo = git2::Repository::open(tree).map_err(msg)?;
    let mut index = repo.index().map_err(msg)?;
    let odb = repo.odb().map_err(msg)?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|source| TreeError::Clock { source })?
        .as_secs() as i64;
    let past = now - 2;
    let mut known = KnownBlobs::new();
    for entry in index.iter() {
        if matches!(entry.mode, 0o100644 | 0o100755)
            && (all || i64::from(entry.mtime.seconds()) > past)
        {
            let (size, _) = odb.read_header(entry.id).map_err(msg)?;
            let path = PathBuf::from(std::ffi::OsStr::from_bytes(&entry.path));
            known.insert(path, (entry.id, size as u64));
        }
    }
    let mut settled: Vec<git2::IndexEntry> = index
        .iter()
        // Submodules are folders git does not stat-compare this way.
        .filter(|e| e.mode != 0o160000 && i64::from(e.mtime.seconds()) > past)
        .collect();
    if settled.is_empty() {
        return Ok(known);
    }
    let mtime = TimeSpec::new(past, 0);
    let settle = |entries: &mut [git2::IndexEntry]| -> Result<(), TreeError> {
        for entry in entries {
            let path = tree.join(std::ffi::OsStr::from_bytes(&entry.path));
            utimensat(
                nix::fcntl::AT_FDCWD,
                &path,
                &TimeSpec::UTIME_OMIT,
                &mtime,
                UtimensatFlags::NoFollowSymlink,
            )
            .map_err(|source| TreeError::Stamp {
                path: path.clone(),
                source,
            })?;
            let meta = fs::symlink_metadata(&path).map_err(access(&path))?;
            // The index keeps the low 32 bits of each field, as git does.
            entry.ctime = git2::IndexTime::new(meta.ctime() as i32, meta.ctime_nsec() as u32);
            entry.mtime = git2::IndexTime::new(meta.mtime() as i32, meta.mtime_nsec() as u32);
            entry.dev = meta.dev() as u32;
            entry.ino = meta.ino() as u32;
            entry.uid = meta.uid();
            entry.gid = meta.gid();
            entry.file_size = meta.size() as u32;
        }
        Ok(())
    };
    // Two system calls a file: on every core, as the record is (a new commit's first trial
    // waits for both).
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    let chunk = settled.len().div_ceil(workers).max(1);
    std::thread::scope(|scope| {
        let handles: Vec<_> = settled
            .chunks_mut(chunk)
            .map(|part| scope.spawn(|| settle(part)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect::<Result<Vec<()>, TreeError>>()
    })?;
    for entry in &settled {
        index.add(entry).map_err(msg)?;
    }
    index.write().map_err(msg)?;
    Ok(known)
}

/// Whether the template `tree` still holds what was recorded when it was built: `Err(Some(path))`
/// names the first differing path, `Err(None)` means the record is of another format.
fn check_template(recorded: &ContentRecord, tree: &Path) -> Result<(), Option<String>> {
    let format = match recorded.base {
        Some(_) => LAYER_FORMAT,
        None => RECORD_FORMAT,
    };
    if recorded.format != format {
        return Err(None);
    }
    let (now, _) = record_tree(tree, &KnownBlobs::new())
        .map_err(|e| Some(format!("{} ({e})", tree.display())))?;
    match first_difference(&recorded.entries, &now) {
        None => Ok(()),
        Some(path) => Err(Some(path)),
    }
}

/// Mounts an overlay on `merged` whose lower layers are read-only binds of `layers` (the top one
/// first) made in `dir`. The binds are detached and their folders removed once the overlay holds
/// them (overlayfs keeps a private clone of its layers), so the `lowerdir` the mount table shows
/// leads nowhere.
fn mount_over_templates(
    layers: &[PathBuf],
    dir: &Path,
    upper: &Path,
    work: &Path,
    merged: &Path,
) -> Result<(), TreeError> {
    let lowers: Vec<PathBuf> = (0..layers.len())
        .map(|i| match i {
            0 => dir.join("lower"),
            i => dir.join(format!("lower{i}")),
        })
        .collect();
    let detach = |lowers: &[PathBuf]| {
        for lower in lowers {
            let _ = umount2(lower, MntFlags::MNT_DETACH);
            // Nothing needs the path any more: writes through it fail instead of landing anywhere.
            let _ = fs::remove_dir(lower);
        }
    };
    for (i, (template, lower)) in layers.iter().zip(&lowers).enumerate() {
        let bound = fs::create_dir_all(lower)
            .map_err(create(lower))
            .and_then(|()| bind_read_only(template, lower));
        if let Err(reason) = bound {
            detach(&lowers[..i]);
            let _ = fs::remove_dir(lower);
            return Err(reason);
        }
    }
    let mounted = mount_overlay(&lowers, upper, work, merged);
    detach(&lowers);
    mounted
}

/// A bind of `template` on `lower`, read-only when the kernel allows it.
fn bind_read_only(template: &Path, lower: &Path) -> Result<(), TreeError> {
    let bind = |flags: MsFlags| {
        mount(Some(template), lower, None::<&str>, flags, None::<&str>).map_err(|source| {
            TreeError::Bind {
                template: template.to_owned(),
                lower: lower.to_owned(),
                source,
            }
        })
    };
    bind(MsFlags::MS_BIND)?;
    // Read-only is a second line only (the bind is detached once mounted), so a refusal is not
    // fatal. A bind remount must keep the flags the kernel locked on the source (nosuid, nodev...).
    let kept = inherited_flags(lower);
    let _ = bind(MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY | kept);
    Ok(())
}

/// The per-mount flags of the mount holding `path`, as remount flags.
fn inherited_flags(path: &Path) -> MsFlags {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c_path) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return MsFlags::empty();
    };
    // SAFETY: statvfs writes only into the zeroed struct passed.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c_path.as_ptr(), &mut st) } != 0 {
        return MsFlags::empty();
    }
    let mut flags = MsFlags::empty();
    for (st_flag, ms_flag) in [
        (libc::ST_NOSUID, MsFlags::MS_NOSUID),
        (libc::ST_NODEV, MsFlags::MS_NODEV),
        (libc::ST_NOEXEC, MsFlags::MS_NOEXEC),
        (libc::ST_NOATIME, MsFlags::MS_NOATIME),
        (libc::ST_NODIRATIME, MsFlags::MS_NODIRATIME),
        (libc::ST_RELATIME, MsFlags::MS_RELATIME),
    ] {
        if st.f_flag & st_flag != 0 {
            flags |= ms_flag;
        }
    }
    flags
}

/// Mounts an overlay of `lowers` (the top one first) on `merged`.
fn mount_overlay(
    lowers: &[PathBuf],
    upper: &Path,
    work: &Path,
    merged: &Path,
) -> Result<(), TreeError> {
    let lowers: Vec<String> = lowers.iter().map(|l| l.display().to_string()).collect();
    let options = format!(
        "lowerdir={},upperdir={},workdir={}",
        lowers.join(":"),
        upper.display(),
        work.display()
    );
    mount(
        Some("overlay"),
        merged,
        Some("overlay"),
        MsFlags::empty(),
        Some(options.as_str()),
    )
    .map_err(|source| TreeError::Mount {
        path: merged.to_owned(),
        source,
    })
}

/// A cached template `gc --cache-max` removed (or would remove, on a dry run).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EvictedTemplate {
    /// The template's folder in the cache.
    pub dir: PathBuf,
    /// Its size, in bytes, as counted toward `--cache-max`.
    pub bytes: u64,
    /// What its preparation made outside it, as written to its `made` file (an image name).
    pub made: Option<String>,
}

/// In a template's folder: what its preparation made outside the folder (one line).
pub const MADE: &str = "made";

/// Removes the least recently used templates under `templates` until what is left takes at most
/// `max_bytes` on disk. A template a running run uses (its in-use lock is held) is never
/// removed, nor counted as removable.
pub fn evict_templates(
    templates: &Path,
    max_bytes: u64,
    dry_run: bool,
) -> std::io::Result<Vec<EvictedTemplate>> {
    let mut found = Vec::new();
    let entries = match fs::read_dir(templates) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let entry = entry?;
        if !entry.file_type()?.is_dir() {
            continue;
        }
        let dir = entry.path();
        let used = fs::metadata(dir.join(LAST_USED))
            .or_else(|_| fs::metadata(&dir))
            .and_then(|m| m.modified())
            .unwrap_or(std::time::SystemTime::UNIX_EPOCH);
        let bytes = fs::read_to_string(dir.join(SIZE))
            .ok()
            .and_then(|text| text.trim().parse().ok())
            .unwrap_or_else(|| disk_usage(&dir));
        found.push((used, bytes, dir));
    }
    let mut total: u64 = found.iter().map(|(_, bytes, _)| bytes).sum();
    found.sort_by_key(|(used, _, _)| *used);
    let mut evicted = Vec::new();
    for (_, bytes, dir) in found {
        if total <= max_bytes {
            break;
        }
        let Ok(file) = fs::File::create(dir.with_extension(IN_USE)) else {
            continue;
        };
        // Busy: a running run's overlays read from it.
        let Ok(_exclusive) = Flock::lock(file, FlockArg::LockExclusiveNonblock) else {
            continue;
        };
        let made = fs::read_to_string(dir.join(MADE))
            .ok()
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty());
        if !dry_run {
            remove_tree(&dir).map_err(std::io::Error::from)?;
            let _ = fs::remove_file(dir.with_extension("lock"));
        }
        total = total.saturating_sub(bytes);
        evicted.push(EvictedTemplate { dir, bytes, made });
    }
    Ok(evicted)
}

/// The bytes `dir` takes on disk (allocated blocks), not following links.
fn disk_usage(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let mut total = 0;
    let mut stack = vec![dir.to_owned()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let Ok(meta) = entry.metadata() else { continue };
            total += meta.blocks() * 512;
            if meta.is_dir() {
                stack.push(entry.path());
            }
        }
    }
    total
}
