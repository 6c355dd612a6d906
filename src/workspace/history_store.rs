//! What a history repository may hold: exactly the objects reachable from its base commit (and
//! from the setup commits recorded under `refs/setup/`), since every workspace cloned from it
//! reads its whole object store through alternates (`git cat-file --batch-all-objects`), and a
//! sandbox or container exposes that store, and the one its alternates name, read-only.
//!
//! A history is built as one pack by `git index-pack`; its name (the pack's checksum) is kept in
//! a manifest beside the objects ([`MANIFEST`], outside what is exposed). The check before a run
//! ([`enforce`]) is then cheap and whitelists the object folder:
//! - `pack/`: the manifest's pack, its index and reverse index; no other pack, no
//!   `multi-pack-index`, no `.keep` or temporary pack;
//! - `info/`: an `alternates` file only, and only naming one whole history beside this one in
//!   the cache (one level, as `source::history_repo` writes it); no `commit-graph`, `packs`,
//!   `http-alternates`;
//! - loose objects (`xx/yyyy...`): only those a setup commit reaches, walking down through loose
//!   objects only (a packed object is reachable from the base, and so is all it points to); a
//!   setup commit counts only while its one parent is the base;
//! - nothing else (a quarantine folder, a stray file).
//!
//! Anything else is something no workspace needs and an agent could read (a reference's patched
//! file written by a patch applied into the store, say): it is removed before the run starts,
//! with a note. A store the check cannot vouch for (no manifest and several packs, alternates
//! naming another store) is refused, saying how to rebuild it. The store a history borrows from
//! is checked the same way. Writers of the store ([`SetupLock`]) and the check take a lock file
//! beside the objects, so a setup commit being copied in is never taken for a stray.

use std::collections::HashSet;
use std::fs::File;
use std::path::{Path, PathBuf};

use git2::{ObjectType, Oid, Repository};

/// The file in a history repository (beside `objects/`, not in it) naming its packs.
pub const MANIFEST: &str = "deltabench-history";
/// The lock file beside `objects/`: shared by writers of setup commits, exclusive for the check.
const LOCK: &str = "deltabench-history.lock";
/// Files of a pack that may sit beside the manifest's `.pack`.
const PACK_FILES: [&str; 3] = ["pack", "idx", "rev"];
/// Files git leaves beside the objects that a check removes (none is exposed to a workspace,
/// but each names objects or holds what a command fetched).
const STRAY_FILES: [&str; 4] = ["FETCH_HEAD", "ORIG_HEAD", "packed-refs.lock", "logs"];

/// Why a history repository cannot be checked or cleaned.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A file or folder of the store could not be read.
    #[error("cannot read the history store {}: {source}", path.display())]
    Read {
        /// The file or folder read.
        path: PathBuf,
        /// The error reading it.
        #[source]
        source: std::io::Error,
    },
    /// The store has no manifest and not exactly one pack: some other tool made it.
    #[error(
        "the history store {} has no manifest ({MANIFEST}) and {packs} packs (a history holds \
         one): it was not made by this deltabench; remove {} and run again to rebuild it",
        repo.display(),
        repo.display()
    )]
    Unknown {
        /// The history repository.
        repo: PathBuf,
        /// How many packs it holds.
        packs: usize,
    },
    /// The store borrows objects from something other than one whole history beside it.
    #[error(
        "the history store {} borrows objects from {text:?}, which is not one whole history \
         beside it in the cache (a workspace would read every object there); remove {} and run \
         again to rebuild it",
        repo.display(),
        repo.display()
    )]
    Alternates {
        /// The history repository.
        repo: PathBuf,
        /// The content of its `objects/info/alternates` file.
        text: String,
    },
    /// A stray object, pack or file could not be removed from the store.
    #[error(
        "cannot remove {} from the history store {}: {source}; remove {} and run again to \
         rebuild it",
        path.display(),
        repo.display(),
        repo.display()
    )]
    Remove {
        /// The history repository.
        repo: PathBuf,
        /// What could not be removed.
        path: PathBuf,
        /// The error removing it.
        #[source]
        source: std::io::Error,
    },
    /// The store's lock file could not be opened or locked.
    #[error("cannot lock the history store {}: {source}", path.display())]
    Lock {
        /// The lock file.
        path: PathBuf,
        /// The error opening or locking it.
        #[source]
        source: std::io::Error,
    },
    /// git2 could not open the store or read its objects and refs.
    #[error("cannot read the history store {}: {}", repo.display(), source.message())]
    Git {
        /// The history repository.
        repo: PathBuf,
        /// git2's reason.
        #[source]
        source: git2::Error,
    },
}

/// What a history store held beyond its base, and was removed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Removed {
    /// Loose objects reachable from no recorded setup commit.
    pub loose: Vec<String>,
    /// Pack files the manifest does not name.
    pub packs: Vec<String>,
    /// Anything else: files and folders the object store may not hold, setup refs whose commit
    /// is not on the base, stray files beside the objects.
    pub other: Vec<String>,
}

impl Removed {
    /// True when nothing was removed: the store held only its base.
    pub fn is_empty(&self) -> bool {
        self.loose.is_empty() && self.packs.is_empty() && self.other.is_empty()
    }

    fn extend(&mut self, more: Removed) {
        self.loose.extend(more.loose);
        self.packs.extend(more.packs);
        self.other.extend(more.other);
    }
}

/// Held while setup objects are copied into a history store (see [`enforce`]).
#[derive(Debug)]
pub struct SetupLock(#[allow(dead_code)] File);

impl SetupLock {
    /// Takes the store `repo`'s lock, shared (other writers go on; a check waits).
    pub fn take(repo: &Path) -> std::io::Result<Self> {
        let file = open_lock(repo)?;
        file.lock_shared()?;
        Ok(Self(file))
    }
}

fn open_lock(repo: &Path) -> std::io::Result<File> {
    std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(repo.join(LOCK))
}

/// Records the packs of the freshly built history `repo` as its manifest.
pub(super) fn write_manifest(repo: &Path) -> std::io::Result<()> {
    let packs = pack_names(&repo.join("objects/pack"))?;
    std::fs::write(repo.join(MANIFEST), packs.join("\n") + "\n")
}

/// The pack names (`pack-<hash>`) in `dir`, sorted.
fn pack_names(dir: &Path) -> std::io::Result<Vec<String>> {
    let mut names: Vec<String> = match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().into_string().ok())
            .filter_map(|name| name.strip_suffix(".pack").map(str::to_owned))
            .collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e),
    };
    names.sort();
    Ok(names)
}

/// Checks the history `repo`, and the whole history it borrows from, hold nothing beyond the
/// objects their base and setup commits reach, and removes what they hold beyond them (see the
/// module's documentation). A store made before manifests existed is adopted when it has the
/// one pack a history is built with.
pub fn enforce(repo: &Path) -> Result<Removed, StoreError> {
    let mut removed = enforce_one(repo, true)?;
    if let Some(borrowed) = borrowed_history(repo)? {
        removed.extend(enforce_one(&borrowed, false)?);
    }
    Ok(removed)
}

/// The whole history `repo` borrows from, checked to be one beside it in the cache with no
/// alternates of its own; `None` when it borrows nothing.
fn borrowed_history(repo: &Path) -> Result<Option<PathBuf>, StoreError> {
    let file = repo.join("objects/info/alternates");
    let text = match std::fs::read_to_string(&file) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(StoreError::Read { path: file, source }),
    };
    let refuse = || StoreError::Alternates {
        repo: repo.to_owned(),
        text: text.trim().to_owned(),
    };
    let lines: Vec<&str> = text
        .lines()
        .filter(|line| !line.trim().is_empty() && !line.starts_with('#'))
        .collect();
    let [line] = lines[..] else {
        return Err(refuse());
    };
    let objects = Path::new(line);
    let history = objects.parent().filter(|_| objects.ends_with("objects"));
    let whole = history.filter(|history| {
        let named = history
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_prefix("history-")?.strip_suffix(".git"))
            .is_some_and(|commit| Oid::from_str(commit).is_ok() && commit.len() == 40);
        named
            && history.parent() == repo.parent()
            && history.is_dir()
            && !objects.join("info/alternates").exists()
    });
    whole.map(|h| Some(h.to_owned())).ok_or_else(refuse)
}

/// [`enforce`] on one store, under its lock; `may_borrow`: an alternates file is expected.
fn enforce_one(repo: &Path, may_borrow: bool) -> Result<Removed, StoreError> {
    let lock_path = repo.join(LOCK);
    let lock = open_lock(repo)
        .and_then(|file| file.lock().map(|()| file))
        .map_err(|source| StoreError::Lock {
            path: lock_path,
            source,
        })?;
    let cleaned = clean(repo, may_borrow);
    drop(lock);
    cleaned
}

fn clean(repo: &Path, may_borrow: bool) -> Result<Removed, StoreError> {
    let objects = repo.join("objects");
    let kept = kept_packs(repo, &objects.join("pack"))?;
    let mut cleaner = Cleaner {
        repo,
        removed: Removed::default(),
    };
    let mut loose = Vec::new();
    for (name, path) in sorted_entries(&objects).map_err(read_error(&objects))? {
        let is_dir = path.symlink_metadata().is_ok_and(|m| m.is_dir());
        match name.as_str() {
            "pack" if is_dir => cleaner.clean_packs(&path, &kept)?,
            "info" if is_dir => cleaner.clean_info(&path, may_borrow)?,
            fan if is_dir && is_fan(fan) => loose.extend(cleaner.clean_fan(fan, &path)?),
            _ => cleaner.remove_other(&path)?,
        }
    }
    cleaner.clean_unreached(&loose)?;
    for stray in STRAY_FILES {
        let path = repo.join(stray);
        if path.symlink_metadata().is_ok() {
            cleaner.remove(&path)?;
            cleaner.removed.other.push(stray.to_owned());
        }
    }
    let mut removed = cleaner.removed;
    removed.loose.sort();
    Ok(removed)
}

fn read_error(path: &Path) -> impl FnOnce(std::io::Error) -> StoreError + use<> {
    let path = path.to_owned();
    move |source| StoreError::Read { path, source }
}

/// The packs the store keeps, from its manifest; a store without one, made before manifests,
/// gets one written when it holds exactly one pack.
fn kept_packs(repo: &Path, pack_dir: &Path) -> Result<HashSet<String>, StoreError> {
    let manifest = repo.join(MANIFEST);
    match std::fs::read_to_string(&manifest) {
        Ok(text) => Ok(text.lines().map(str::to_owned).collect()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let packs = pack_names(pack_dir).map_err(read_error(pack_dir))?;
            if packs.len() != 1 {
                return Err(StoreError::Unknown {
                    repo: repo.to_owned(),
                    packs: packs.len(),
                });
            }
            write_manifest(repo).map_err(read_error(&manifest))?;
            Ok(packs.into_iter().collect())
        }
        Err(e) => Err(read_error(&manifest)(e)),
    }
}

/// A loose objects' fan-out folder's name: two hex digits.
fn is_fan(name: &str) -> bool {
    name.len() == 2 && name.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Whether a file of `objects/pack` stays: a plain file of a kept pack, of a known kind.
fn keeps_pack_file(file: &str, plain: bool, kept: &HashSet<String>) -> bool {
    let (stem, ext) = file.rsplit_once('.').unwrap_or((file, ""));
    plain && kept.contains(stem) && PACK_FILES.contains(&ext)
}

/// One store's removals, and the list of what went.
struct Cleaner<'a> {
    repo: &'a Path,
    removed: Removed,
}

impl Cleaner<'_> {
    fn remove(&self, path: &Path) -> Result<(), StoreError> {
        let removed = match std::fs::symlink_metadata(path) {
            Ok(meta) if meta.is_dir() => std::fs::remove_dir_all(path),
            Ok(_) => std::fs::remove_file(path),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(e),
        };
        removed.map_err(|source| StoreError::Remove {
            repo: self.repo.to_owned(),
            path: path.to_owned(),
            source,
        })
    }

    /// Removes `path`, listed among the other removals by its path in the store.
    fn remove_other(&mut self, path: &Path) -> Result<(), StoreError> {
        self.remove(path)?;
        let shown = path.strip_prefix(self.repo).unwrap_or(path).display();
        self.removed.other.push(shown.to_string());
        Ok(())
    }

    /// `objects/pack`: every file but the kept packs' own.
    fn clean_packs(&mut self, dir: &Path, kept: &HashSet<String>) -> Result<(), StoreError> {
        for (file, path) in sorted_entries(dir).map_err(read_error(dir))? {
            let plain = path.symlink_metadata().is_ok_and(|m| m.is_file());
            if keeps_pack_file(&file, plain, kept) {
                continue;
            }
            if file.rsplit_once('.').is_some_and(|(_, ext)| ext == "pack") {
                self.remove(&path)?;
                self.removed.packs.push(file);
            } else {
                self.remove_other(&path)?;
            }
        }
        Ok(())
    }

    /// `objects/info`: all of it, but the alternates file of a store that may borrow.
    fn clean_info(&mut self, dir: &Path, may_borrow: bool) -> Result<(), StoreError> {
        for (file, path) in sorted_entries(dir).map_err(read_error(dir))? {
            if file == "alternates" && may_borrow {
                continue;
            }
            self.remove_other(&path)?;
        }
        Ok(())
    }

    /// A fan-out folder: its loose objects are returned, anything else goes.
    fn clean_fan(&mut self, fan: &str, dir: &Path) -> Result<Vec<(Oid, PathBuf)>, StoreError> {
        let mut loose = Vec::new();
        for (rest, path) in sorted_entries(dir).map_err(read_error(dir))? {
            let plain = path.symlink_metadata().is_ok_and(|m| m.is_file());
            match Oid::from_str(&format!("{fan}{rest}")) {
                Ok(id) if plain && rest.len() == 38 => loose.push((id, path)),
                // A temporary file of an interrupted write, or no object at all.
                _ => self.remove_other(&path)?,
            }
        }
        Ok(loose)
    }

    /// Stale setup references go, then the loose objects no setup commit reaches.
    fn clean_unreached(&mut self, loose: &[(Oid, PathBuf)]) -> Result<(), StoreError> {
        let git = |source| StoreError::Git {
            repo: self.repo.to_owned(),
            source,
        };
        let handle = Repository::open_bare(self.repo).map_err(git)?;
        let (setups, stale) = setup_commits(&handle).map_err(git)?;
        for name in stale {
            if let Ok(mut reference) = handle.find_reference(&name) {
                reference.delete().map_err(git)?;
            }
            self.removed.other.push(name);
        }
        if !loose.is_empty() {
            let reached = reached_loose(&handle, &setups, loose).map_err(git)?;
            for (id, path) in loose {
                if !reached.contains(id) {
                    self.remove(path)?;
                    self.removed.loose.push(id.to_string());
                }
            }
        }
        Ok(())
    }
}

/// The entries of `dir` by name, sorted; none when it does not exist.
fn sorted_entries(dir: &Path) -> std::io::Result<Vec<(String, PathBuf)>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut found = Vec::new();
    for entry in entries {
        let entry = entry?;
        found.push((
            entry.file_name().to_string_lossy().into_owned(),
            entry.path(),
        ));
    }
    found.sort();
    Ok(found)
}

/// The setup commits of `repo` (`refs/setup/*` naming a commit whose one parent is the base,
/// `refs/heads/base`), and the names of the other refs under `refs/setup/`.
fn setup_commits(repo: &Repository) -> Result<(Vec<Oid>, Vec<String>), git2::Error> {
    let base = repo
        .find_reference("refs/heads/base")
        .ok()
        .and_then(|r| r.target());
    let (mut setups, mut stale) = (Vec::new(), Vec::new());
    for reference in repo.references_glob("refs/setup/*")? {
        let reference = reference?;
        let name = reference.name().unwrap_or_default().to_owned();
        let on_base = reference
            .target()
            .and_then(|id| repo.find_commit(id).ok())
            .filter(|commit| base.is_some() && commit.parent_ids().eq(base))
            .map(|commit| commit.id());
        match on_base {
            Some(id) => setups.push(id),
            None => stale.push(name),
        }
    }
    Ok((setups, stale))
}

/// Which of the `loose` objects the setup commits reach, walking down only through loose
/// objects: a packed object is reachable from the base with all it points to.
fn reached_loose(
    repo: &Repository,
    setups: &[Oid],
    loose: &[(Oid, PathBuf)],
) -> Result<HashSet<Oid>, git2::Error> {
    let loose: HashSet<Oid> = loose.iter().map(|(id, _)| *id).collect();
    let mut reached = HashSet::new();
    let mut stack: Vec<Oid> = setups.to_vec();
    while let Some(id) = stack.pop() {
        if !loose.contains(&id) || !reached.insert(id) {
            continue;
        }
        let object = repo.find_object(id, None)?;
        match object.kind() {
            Some(ObjectType::Commit) => {
                let commit = object.peel_to_commit()?;
                stack.push(commit.tree_id());
                stack.extend(commit.parent_ids());
            }
            Some(ObjectType::Tree) => {
                let tree = object.peel_to_tree()?;
                stack.extend(tree.iter().map(|entry| entry.id()));
            }
            _ => {}
        }
    }
    Ok(reached)
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fan_folder_is_two_hex_digits() {
        assert!(is_fan("0a"));
        assert!(is_fan("FF"));
        assert!(!is_fan("0g"));
        assert!(!is_fan("abc"));
        assert!(!is_fan("a"));
    }

    #[test]
    fn only_a_kept_packs_plain_known_files_stay() {
        let kept: HashSet<String> = ["pack-1".to_owned()].into();
        assert!(keeps_pack_file("pack-1.pack", true, &kept));
        assert!(keeps_pack_file("pack-1.idx", true, &kept));
        assert!(keeps_pack_file("pack-1.rev", true, &kept));
        assert!(!keeps_pack_file("pack-1.keep", true, &kept));
        assert!(!keeps_pack_file("pack-1.pack", false, &kept));
        assert!(!keeps_pack_file("pack-2.pack", true, &kept));
        assert!(!keeps_pack_file("pack-1", true, &kept));
    }

    fn git(dir: &Path, args: &[&str]) -> String {
        let out = std::process::Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@t")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@t")
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// A work repo with one commit, and `history.git` holding its history as one pack with a
    /// manifest, as `source::history_repo` builds it. Returns (work, store, base).
    fn history(dir: &Path) -> (PathBuf, PathBuf, String) {
        let work = dir.join("work");
        std::fs::create_dir(&work).unwrap();
        git(&work, &["init", "-q"]);
        std::fs::write(work.join("a"), "base\n").unwrap();
        git(&work, &["add", "a"]);
        git(&work, &["commit", "-qm", "base"]);
        let base = git(&work, &["rev-parse", "HEAD"]);
        let store = dir.join(format!("history-{base}.git"));
        git(dir, &["init", "-q", "--bare", store.to_str().unwrap()]);
        let pack = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "echo {base} | git -C {} pack-objects --revs --stdout -q | git -C {} index-pack --stdin",
                work.display(),
                store.display()
            ))
            .output()
            .unwrap();
        assert!(pack.status.success());
        git(&store, &["update-ref", "refs/heads/base", &base]);
        write_manifest(&store).unwrap();
        (work, store, base)
    }

    /// Commits `a` as `content` in `work` and copies the commit into `store` as a setup commit.
    fn setup_commit(work: &Path, store: &Path, content: &str) -> Oid {
        std::fs::write(work.join("a"), content).unwrap();
        git(work, &["commit", "-qam", "setup"]);
        let setup = git(work, &["rev-parse", "HEAD"]);
        let repo = Repository::open_bare(store).unwrap();
        let from = Repository::open(work).unwrap();
        let commit = from.find_commit(Oid::from_str(&setup).unwrap()).unwrap();
        let (odb, source) = (repo.odb().unwrap(), from.odb().unwrap());
        let copy = |id: Oid| {
            let object = source.read(id).unwrap();
            odb.write(object.kind(), object.data()).unwrap();
        };
        for entry in commit.tree().unwrap().iter() {
            copy(entry.id());
        }
        copy(commit.tree_id());
        copy(commit.id());
        repo.reference(&format!("refs/setup/{setup}"), commit.id(), true, "")
            .unwrap();
        commit.id()
    }

    #[test]
    fn extra_loose_objects_are_removed_and_setup_commits_kept() {
        let dir = tempfile::tempdir().unwrap();
        let (work, store, _) = history(dir.path());
        let setup = setup_commit(&work, &store, "after setup\n");
        let repo = Repository::open_bare(&store).unwrap();
        let stray = repo.blob(b"the reference's answer\n").unwrap();
        let removed = enforce(&store).unwrap();
        assert_eq!(removed.loose, vec![stray.to_string()]);
        assert!(
            removed.packs.is_empty() && removed.other.is_empty(),
            "{removed:?}"
        );
        assert!(repo.find_commit(setup).is_ok());
        assert!(
            Repository::open_bare(&store)
                .unwrap()
                .find_blob(stray)
                .is_err()
        );
        assert_eq!(enforce(&store).unwrap(), Removed::default());
    }

    /// Everything in the object folder but the manifest's pack, the alternates file and loose
    /// objects a setup reaches goes: another pack (with the answer in it), a commit-graph, a
    /// multi-pack index, a quarantine folder, a stray file, a temporary object; and the
    /// fetched and reflog files beside the objects.
    #[test]
    fn only_the_manifest_pack_and_reached_objects_stay() {
        let dir = tempfile::tempdir().unwrap();
        let (work, store, _) = history(dir.path());
        let answer = dir.path().join("answer");
        std::fs::write(&answer, "the reference's answer\n").unwrap();
        let blob = git(&work, &["hash-object", "-w", answer.to_str().unwrap()]);
        let packed = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "echo {blob} | git -C {} pack-objects -q {}/objects/pack/pack",
                work.display(),
                store.display()
            ))
            .output()
            .unwrap();
        assert!(packed.status.success());
        let objects = store.join("objects");
        for (file, content) in [
            ("info/commit-graph", "graph"),
            ("info/packs", "P pack-x.pack\n"),
            ("pack/multi-pack-index", "midx"),
            ("incoming-abc/pack/tmp_pack_1", "pack"),
            ("answer.txt", "the reference's answer\n"),
            ("ab/tmp_obj_123", "partial"),
        ] {
            let path = objects.join(file);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, content).unwrap();
        }
        std::fs::write(store.join("FETCH_HEAD"), format!("{blob}\n")).unwrap();
        let kept = pack_names(&objects.join("pack")).unwrap().len();
        assert_eq!(kept, 2);
        let removed = enforce(&store).unwrap();
        assert_eq!(removed.packs.len(), 1, "{removed:?}");
        for other in [
            "objects/info/commit-graph",
            "objects/pack/multi-pack-index",
            "objects/incoming-abc",
            "objects/answer.txt",
            "objects/ab/tmp_obj_123",
            "FETCH_HEAD",
        ] {
            assert!(
                removed.other.iter().any(|o| o == other),
                "{other}: {removed:?}"
            );
        }
        let repo = Repository::open_bare(&store).unwrap();
        assert!(repo.find_blob(Oid::from_str(&blob).unwrap()).is_err());
        assert_eq!(pack_names(&objects.join("pack")).unwrap().len(), 1);
        assert!(repo.revparse_single("refs/heads/base").is_ok());
        assert_eq!(enforce(&store).unwrap(), Removed::default());
    }

    /// A ref under `refs/setup/` naming a commit that is not on the base (an answer committed
    /// and named as a setup) keeps nothing: the ref and what only it reached go.
    #[test]
    fn a_setup_ref_off_the_base_keeps_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let (work, store, _) = history(dir.path());
        let first = setup_commit(&work, &store, "setup\n");
        // A second commit on top: its parent is the first setup, not the base.
        let second = setup_commit(&work, &store, "the reference's answer\n");
        let removed = enforce(&store).unwrap();
        assert_eq!(removed.other, vec![format!("refs/setup/{second}")]);
        // The answer's commit, tree and blob; the first setup's stay.
        assert_eq!(removed.loose.len(), 3, "{removed:?}");
        let repo = Repository::open_bare(&store).unwrap();
        assert!(repo.find_commit(first).is_ok());
        assert!(repo.find_commit(second).is_err());
    }

    #[test]
    fn a_store_with_packs_it_cannot_tell_apart_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let repo = dir.path().join("h.git");
        std::fs::create_dir_all(repo.join("objects/pack")).unwrap();
        std::fs::write(repo.join("objects/pack/pack-a.pack"), "").unwrap();
        std::fs::write(repo.join("objects/pack/pack-b.pack"), "").unwrap();
        let err = enforce(&repo).unwrap_err().to_string();
        assert!(
            err.contains("no manifest") && err.contains("2 packs"),
            "{err}"
        );
    }

    /// Alternates naming anything but one whole history beside the store (the suite's own
    /// repository, say, which holds every later commit) are refused, naming the file's text.
    #[test]
    fn alternates_naming_another_store_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (work, store, _) = history(dir.path());
        let alternates = store.join("objects/info/alternates");
        let source = work.join(".git/objects");
        std::fs::write(&alternates, format!("{}\n", source.display())).unwrap();
        let err = enforce(&store).unwrap_err().to_string();
        assert!(
            err.contains("borrows objects from") && err.contains(&source.display().to_string()),
            "{err}"
        );
        // One whole history beside it is what a history borrows from, and it is checked too.
        let other = dir.path().join("other");
        std::fs::create_dir(&other).unwrap();
        let (_, whole, _) = history(&other);
        let beside = dir.path().join(format!("history-{}.git", "1".repeat(40)));
        std::fs::rename(&whole, &beside).unwrap();
        std::fs::write(
            &alternates,
            format!("{}\n", beside.join("objects").display()),
        )
        .unwrap();
        let stray = Repository::open_bare(&beside).unwrap().blob(b"x").unwrap();
        let removed = enforce(&store).unwrap();
        assert_eq!(removed.loose, vec![stray.to_string()]);
    }
}
