//! The suite's repository, made ready to clone from: a git repo is used in place; a bundle or a
//! plain directory becomes a content-addressed bare repo in the cache.
//!
//! Workspaces do not borrow the source's object store: through `objects/info/alternates` every
//! object is readable by hash (`git cat-file --batch-all-objects`), later commits included, and
//! a later commit can hold the answer. Each base commit gets a cached bare *history* repo instead,
//! holding only the objects reachable from that commit, built once with `git pack-objects
//! --revs` from the source piped into `git index-pack` (the user's repo is only read), and
//! workspaces borrow from that.
//!
//! A commit with an ancestor whose history is whole (no alternates of its own) packs only what
//! that ancestor lacks, and borrows the rest from it: everything an ancestor reaches, the commit
//! reaches too. One level only, so a history's object stores are its own and those its
//! alternates file names (what a sandbox or container exposes).

use std::collections::HashMap;
use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use git2::{IndexAddOption, Repository};
use serde::Serialize;
use sha2::{Digest, Sha256};

use super::error::{HistoryStep, TreeError};
use super::git::{git_command, run_git};

/// What kind of repository `repo:` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RepoKind {
    /// A folder with a `.git` inside.
    WorkTree,
    /// A bare git repository.
    Bare,
    /// A `git bundle` file.
    Bundle,
    /// A folder that is no repository: its files are committed into a cached one.
    PlainDir,
}

/// The suite's repository.
#[derive(Debug, Clone, Serialize)]
pub struct RepoSource {
    /// The repository, file or folder, as the suite resolved `repo:`.
    pub path: PathBuf,
    /// What is at that path.
    pub kind: RepoKind,
}

impl fmt::Display for RepoKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::WorkTree => "git work tree",
            Self::Bare => "bare git repository",
            Self::Bundle => "git bundle",
            Self::PlainDir => "plain directory",
        })
    }
}

/// Where workspaces clone from, and the user's own work tree if there is one.
#[derive(Debug, Clone)]
pub struct PreparedSource {
    /// A git repository (bare or not) holding every base commit.
    pub git_dir: PathBuf,
    /// The user's work tree (for `session`), when the repo is one.
    pub work_tree: Option<PathBuf>,
    /// Per base commit, the cached repo holding only that commit's history.
    pub histories: HashMap<String, PathBuf>,
}

impl PreparedSource {
    /// The repo a workspace at `commit` clones from: its history repo once prepared.
    pub fn repo_for(&self, commit: &str) -> &Path {
        self.histories.get(commit).unwrap_or(&self.git_dir)
    }

    /// Builds (or finds in `cache`) the history repo of each commit, on every core: a suite
    /// with a base commit per task builds one per task before its first trial. Whole histories
    /// first (the oldest commits, or those with no such ancestor), then the rest on them.
    pub fn prepare_histories<'a>(
        &mut self,
        commits: impl IntoIterator<Item = &'a str>,
        cache: &Path,
    ) -> Result<(), TreeError> {
        let mut wanted: Vec<&str> = commits
            .into_iter()
            .filter(|commit| !self.histories.contains_key(*commit))
            .collect();
        wanted.sort_unstable();
        wanted.dedup();
        if wanted.is_empty() {
            return Ok(());
        }
        // Absolute: workspaces clone from it with another working directory.
        let cache = std::path::absolute(cache).map_err(|source| TreeError::Resolve {
            path: cache.to_owned(),
            source,
        })?;
        let planned = plan_histories(&self.git_dir, &wanted, &cache);
        let (whole, borrowing): (Vec<_>, Vec<_>) =
            planned.into_iter().partition(|(_, base)| base.is_none());
        for part in [whole, borrowing] {
            let built = build_histories(&self.git_dir, &part, &cache)?;
            for (commit, repo) in built {
                // Nothing beyond the base may be readable by a workspace that borrows from it.
                let removed = super::history_store::enforce(&repo)?;
                if !removed.is_empty() {
                    eprintln!(
                        "note: the history store {} held {} loose object(s), {} pack(s) and {} \
                         other file(s) beyond what {commit} and its setup reach (a workspace \
                         could read them: {}); removed",
                        repo.display(),
                        removed.loose.len(),
                        removed.packs.len(),
                        removed.other.len(),
                        removed
                            .loose
                            .iter()
                            .chain(&removed.packs)
                            .chain(&removed.other)
                            .take(3)
                            .cloned()
                            .collect::<Vec<_>>()
                            .join(", ")
                    );
                }
                self.histories.insert(commit.to_owned(), repo);
            }
        }
        Ok(())
    }
}

/// The longest walk back from a commit looking for an ancestor with a whole history.
const ANCESTOR_WALK: usize = 10_000;

/// Each commit of `wanted` with the ancestor whose whole history it will borrow from (`None`:
/// it gets a whole history). Ancestors are planned first, so their descendants borrow.
fn plan_histories<'a>(
    source: &Path,
    wanted: &[&'a str],
    cache: &Path,
) -> Vec<(&'a str, Option<String>)> {
    let alone = || wanted.iter().map(|c| (*c, None)).collect();
    let Ok(repo) = git2::Repository::open(source) else {
        return alone();
    };
    // Whole histories already in the cache.
    let mut whole: std::collections::HashSet<git2::Oid> = std::fs::read_dir(cache)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let commit = name.strip_prefix("history-")?.strip_suffix(".git")?;
            let borrows = entry.path().join("objects/info/alternates").exists();
            (!borrows)
                .then(|| git2::Oid::from_str(commit).ok())
                .flatten()
        })
        .collect();
    let Some(ordered) = parents_first(&repo, wanted) else {
        return alone();
    };
    let mut planned = Vec::with_capacity(ordered.len());
    for (commit, oid) in ordered {
        if cache.join(format!("history-{commit}.git")).exists() {
            planned.push((commit, None));
            continue;
        }
        match nearest_whole_ancestor(&repo, oid, &whole) {
            Some(base) => planned.push((commit, Some(base.to_string()))),
            None => {
                whole.insert(oid);
                planned.push((commit, None));
            }
        }
    }
    planned
}

/// The longest walk that orders the wanted commits; past it, they are ordered by commit time.
const ORDER_WALK: usize = 500_000;

/// `wanted` with every commit after its ancestors among them; `None` when one is not a commit
/// of `repo`.
fn parents_first<'a>(
    repo: &git2::Repository,
    wanted: &[&'a str],
) -> Option<Vec<(&'a str, git2::Oid)>> {
    let mut by_id = HashMap::new();
    for commit in wanted {
        let oid = git2::Oid::from_str(commit).ok()?;
        let time = repo.find_commit(oid).ok()?.time().seconds();
        by_id.insert(oid, (*commit, time));
    }
    let mut walk = repo.revwalk().ok()?;
    walk.set_sorting(git2::Sort::TOPOLOGICAL | git2::Sort::REVERSE)
        .ok()?;
    for oid in by_id.keys() {
        walk.push(*oid).ok()?;
    }
    let mut ordered = Vec::with_capacity(by_id.len());
    for (seen, id) in walk.enumerate() {
        if seen > ORDER_WALK {
            // A very long history: oldest first is close enough.
            let mut dated: Vec<_> = by_id.iter().map(|(oid, (c, t))| (*t, *c, *oid)).collect();
            dated.sort();
            return Some(dated.into_iter().map(|(_, c, oid)| (c, oid)).collect());
        }
        let id = id.ok()?;
        if let Some((commit, _)) = by_id.get(&id) {
            ordered.push((*commit, id));
        }
    }
    Some(ordered)
}

/// The first commit of `whole` walking back from `commit` (newest first), within
/// [`ANCESTOR_WALK`] commits.
fn nearest_whole_ancestor(
    repo: &git2::Repository,
    commit: git2::Oid,
    whole: &std::collections::HashSet<git2::Oid>,
) -> Option<git2::Oid> {
    if whole.is_empty() {
        return None;
    }
    let mut walk = repo.revwalk().ok()?;
    walk.set_sorting(git2::Sort::TIME).ok()?;
    walk.push(commit).ok()?;
    walk.take(ANCESTOR_WALK)
        .map_while(Result::ok)
        .find(|id| *id != commit && whole.contains(id))
}

/// Builds the history repos of `planned` on every core.
fn build_histories<'a>(
    source: &Path,
    planned: &[(&'a str, Option<String>)],
    cache: &Path,
) -> Result<Vec<(&'a str, PathBuf)>, TreeError> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
    let built = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..workers.min(planned.len()))
            .map(|_| {
                scope.spawn(|| {
                    let mut built = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some((commit, base)) = planned.get(i) else {
                            return Ok(built);
                        };
                        built.push((
                            *commit,
                            history_repo(source, commit, base.as_deref(), cache)?,
                        ));
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect::<Result<Vec<_>, TreeError>>()
    })?;
    Ok(built.into_iter().flatten().collect())
}

/// A bare repo in `cache` with exactly the objects reachable from `commit` and one ref to it.
/// A commit id fixes its whole history, so the commit alone names it. With `base` (an ancestor
/// with a whole history in `cache`), it holds what `base` lacks and borrows the rest from it.
fn history_repo(
    source_repo: &Path,
    commit: &str,
    base: Option<&str>,
    cache: &Path,
) -> Result<PathBuf, TreeError> {
    let target = cache.join(format!("history-{commit}.git"));
    if target.exists() {
        return Ok(target);
    }
    let scratch = scratch_dir(cache)?;
    let staged = scratch.path().join("history.git");
    let io = |step: HistoryStep| {
        move |source: std::io::Error| TreeError::HistoryIo {
            commit: commit.to_owned(),
            repo: source_repo.to_owned(),
            step,
            source,
        }
    };
    let tool = |step: HistoryStep, stderr: &[u8]| TreeError::HistoryTool {
        commit: commit.to_owned(),
        repo: source_repo.to_owned(),
        step,
        stderr: String::from_utf8_lossy(stderr).trim().to_owned(),
    };
    Repository::init_bare(&staged).map_err(|source| TreeError::HistoryRepo {
        commit: commit.to_owned(),
        repo: source_repo.to_owned(),
        step: HistoryStep::Init,
        source,
    })?;
    if let Some(base) = base {
        let alternates = staged.join("objects/info/alternates");
        let objects = cache.join(format!("history-{base}.git/objects"));
        std::fs::create_dir_all(staged.join("objects/info"))
            .and_then(|()| std::fs::write(&alternates, format!("{}\n", objects.display())))
            .map_err(io(HistoryStep::Alternates))?;
    }
    let mut pack = git_command(source_repo)
        .args(["pack-objects", "--revs", "--stdout", "--quiet"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(io(HistoryStep::PackObjects))?;
    let mut revs = pack.stdin.take().expect("piped stdin");
    let wanted = match base {
        Some(base) => format!("{commit}\n^{base}\n"),
        None => format!("{commit}\n"),
    };
    revs.write_all(wanted.as_bytes())
        .map_err(io(HistoryStep::PackObjects))?;
    drop(revs);
    let pack_out = pack.stdout.take().expect("piped stdout");
    let index = git_command(&staged)
        .args(["index-pack", "--stdin"])
        .stdin(Stdio::from(pack_out))
        .output()
        .map_err(io(HistoryStep::IndexPack))?;
    let packed = pack
        .wait_with_output()
        .map_err(io(HistoryStep::PackObjects))?;
    if !packed.status.success() {
        return Err(tool(HistoryStep::PackObjects, &packed.stderr));
    }
    if !index.status.success() {
        return Err(tool(HistoryStep::IndexPack, &index.stderr));
    }
    // One branch at the commit, checked out: as `update-ref` and `symbolic-ref` would leave it.
    std::fs::write(staged.join("refs/heads/base"), format!("{commit}\n"))
        .and_then(|()| std::fs::write(staged.join("HEAD"), "ref: refs/heads/base\n"))
        .map_err(io(HistoryStep::Refs))?;
    super::history_store::write_manifest(&staged).map_err(io(HistoryStep::Refs))?;
    publish(&staged, &target)?;
    Ok(target)
}

/// Makes `repo` clonable. A bundle or a plain directory becomes a bare repo in `cache`, named by
/// its content (the bundle's sha256, the snapshot's commit id), so later runs and workspace
/// templates that borrow its objects find it again.
pub fn prepare_source(repo: &RepoSource, cache: &Path) -> Result<PreparedSource, TreeError> {
    let bare = |git_dir: PathBuf| PreparedSource {
        git_dir,
        work_tree: None,
        histories: HashMap::new(),
    };
    match repo.kind {
        RepoKind::WorkTree => Ok(PreparedSource {
            git_dir: repo.path.clone(),
            work_tree: Some(repo.path.clone()),
            histories: HashMap::new(),
        }),
        RepoKind::Bare => Ok(bare(repo.path.clone())),
        RepoKind::Bundle => {
            let bytes = std::fs::read(&repo.path).map_err(|source| TreeError::Io { source })?;
            let target = cache.join(format!("bundle-{:x}.git", Sha256::digest(&bytes)));
            if !target.exists() {
                let scratch = scratch_dir(cache)?;
                let staged = scratch.path().join("source.git");
                run_git(
                    scratch.path(),
                    &[
                        "clone",
                        "--bare",
                        "--quiet",
                        &repo.path.to_string_lossy(),
                        &staged.to_string_lossy(),
                    ],
                )?;
                publish(&staged, &target)?;
            }
            Ok(bare(target))
        }
        RepoKind::PlainDir => {
            let scratch = scratch_dir(cache)?;
            let staged = scratch.path().join("source.git");
            let commit =
                snapshot_dir(&repo.path, &staged).map_err(|source| TreeError::Snapshot {
                    path: repo.path.clone(),
                    source,
                })?;
            let target = cache.join(format!("plain-{commit}.git"));
            if !target.exists() {
                publish(&staged, &target)?;
            }
            Ok(bare(target))
        }
    }
}

fn scratch_dir(cache: &Path) -> Result<tempfile::TempDir, TreeError> {
    std::fs::create_dir_all(cache).map_err(|source| TreeError::Create {
        path: cache.to_owned(),
        source,
    })?;
    tempfile::Builder::new()
        .prefix(".staging-")
        .tempdir_in(cache)
        .map_err(|source| TreeError::Staging {
            path: cache.to_owned(),
            source,
        })
}

/// Moves a finished repo into place; a concurrent run that got there first wins.
fn publish(staged: &Path, target: &Path) -> Result<(), TreeError> {
    match std::fs::rename(staged, target) {
        Ok(()) => Ok(()),
        Err(_) if target.exists() => Ok(()),
        Err(source) => Err(TreeError::Publish {
            target: target.to_owned(),
            source,
        }),
    }
}

/// Commits the files of `dir` (honouring its `.gitignore`) as `main` in a new bare repo. The
/// author and date are fixed, so the same files always give the same commit id.
fn snapshot_dir(dir: &Path, target: &Path) -> Result<String, git2::Error> {
    let repo = Repository::init_bare(target)?;
    repo.set_workdir(dir, false)?;
    let mut index = repo.index()?;
    index.add_all(["*"], IndexAddOption::DEFAULT, None)?;
    let tree = repo.find_tree(index.write_tree()?)?;
    let signature = super::harness_signature()?;
    let commit = repo.commit(
        Some("refs/heads/main"),
        &signature,
        &signature,
        "deltabench snapshot of the suite's repository",
        &tree,
        &[],
    )?;
    repo.set_head("refs/heads/main")?;
    // The index lives in the bare repo; drop it so the repo stays a plain object store.
    drop(index);
    let _ = std::fs::remove_file(target.join("index"));
    Ok(commit.to_string())
}
