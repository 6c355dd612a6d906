//! Diffs with git2 against a base tree, never HEAD (agents commit), and never via the git CLI
//! (a planted `core.fsmonitor`, filter or external diff would run as the harness).

use std::path::Path;

use git2::{DiffFormat, IndexAddOption, Oid, Repository};
use serde::{Deserialize, Serialize};

/// The size of a diff.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiffStats {
    /// Files the patch touches (each `diff --git` or `diff --container` section).
    pub files: u64,
    /// Lines added (`+` lines inside hunks).
    pub insertions: u64,
    /// Lines removed (`-` lines inside hunks).
    pub deletions: u64,
    /// Length of the whole patch, in bytes.
    pub bytes: u64,
}

impl DiffStats {
    /// Counts files and changed lines of a git-style patch.
    pub fn from_patch(patch: &str) -> Self {
        let mut stats = Self {
            bytes: patch.len() as u64,
            ..Self::default()
        };
        let mut in_hunk = false;
        for line in patch.lines() {
            if line.starts_with("diff --git ") {
                stats.files += 1;
                in_hunk = false;
            } else if line.starts_with("diff --container ") {
                // A container change's section (`delta: container`): a file, its content `+`.
                stats.files += 1;
                in_hunk = true;
            } else if line.starts_with("@@") {
                in_hunk = true;
            } else if in_hunk && line.starts_with('+') {
                stats.insertions += 1;
            } else if in_hunk && line.starts_with('-') {
                stats.deletions += 1;
            }
        }
        stats
    }
}

/// The paths a git-style patch touches, both sides of a rename or copy, sorted and deduplicated.
///
/// Read from the `diff --git` headers (whose two sides are equal unless the file moved) and
/// the `rename`/`copy` lines; C-quoted paths (`"a/t\303\251st"`) are unquoted.
pub fn changed_paths(patch: &str) -> Vec<String> {
    let mut paths = std::collections::BTreeSet::new();
    for line in patch.lines() {
        if let Some(header) = line.strip_prefix("diff --git ") {
            paths.extend(header_paths(header));
        } else if let Some(path) = ["rename from ", "rename to ", "copy from ", "copy to "]
            .iter()
            .find_map(|prefix| line.strip_prefix(prefix))
        {
            paths.insert(unquote(path));
        }
    }
    paths.into_iter().collect()
}

/// The two sides of `a/X b/Y`, prefixes stripped.
fn header_paths(header: &str) -> Vec<String> {
    let strip = |side: String, prefix: &str| side.strip_prefix(prefix).map(str::to_owned);
    if let Some(quoted) = header.strip_prefix('"') {
        // A quoted side ends at the first unescaped quote.
        let mut escaped = false;
        let end = quoted.char_indices().find_map(|(i, c)| {
            let close = c == '"' && !escaped;
            escaped = c == '\\' && !escaped;
            close.then_some(i + 2)
        });
        let Some(end) = end else { return Vec::new() };
        let (a, b) = (unquote(&header[..end]), unquote(header[end..].trim_start()));
        return [strip(a, "a/"), strip(b, "b/")]
            .into_iter()
            .flatten()
            .collect();
    }
    // Unquoted and unmoved, the header is `a/P b/P`: split in the middle.
    let half = header.len().saturating_sub(1) / 2;
    if header.len() % 2 == 1
        && header.is_char_boundary(half)
        && header[half..].starts_with(' ')
        && header[..half].strip_prefix("a/") == header[half + 1..].strip_prefix("b/")
        && let Some(path) = header[..half].strip_prefix("a/")
    {
        return vec![path.to_owned()];
    }
    // A moved file: its `rename`/`copy` lines name both sides exactly.
    match header.split_once(" b/") {
        Some((a, b)) => [strip(a.to_owned(), "a/"), Some(unquote(b))]
            .into_iter()
            .flatten()
            .collect(),
        None => Vec::new(),
    }
}

/// Undoes git's C-style quoting of a path; an unquoted path is returned as is.
fn unquote(path: &str) -> String {
    let Some(inner) = path.strip_prefix('"').and_then(|p| p.strip_suffix('"')) else {
        return path.to_owned();
    };
    let mut bytes = Vec::with_capacity(inner.len());
    let mut chars = inner.bytes().peekable();
    while let Some(b) = chars.next() {
        if b != b'\\' {
            bytes.push(b);
            continue;
        }
        match chars.next() {
            Some(b'n') => bytes.push(b'\n'),
            Some(b't') => bytes.push(b'\t'),
            Some(d @ b'0'..=b'7') => {
                let mut value = u32::from(d - b'0');
                for _ in 0..2 {
                    if let Some(&next @ b'0'..=b'7') = chars.peek() {
                        value = value * 8 + u32::from(next - b'0');
                        chars.next();
                    }
                }
                bytes.push(value as u8);
            }
            Some(other) => bytes.push(other),
            None => {}
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// A diff as `git diff --binary` prints it: the bytes `git apply --binary` takes back.
pub fn patch_bytes(diff: &git2::Diff) -> Result<Vec<u8>, git2::Error> {
    let mut patch = Vec::new();
    diff.print(DiffFormat::Patch, |_, _, line| {
        if matches!(line.origin(), '+' | '-' | ' ') {
            patch.push(line.origin() as u8);
        }
        patch.extend_from_slice(line.content());
        true
    })?;
    Ok(patch)
}

/// Commits the workspace's current files (ignored ones excepted) on a detached HEAD and returns
/// the commit id: the base after a setup step. The agent then finds a clean status. The new
/// objects are copied into `keep_in`, the harness-owned repository the probe reads the base
/// from (the workspace's own object store is the agent's to break).
pub fn commit_setup(workspace: &Path, keep_in: &Path) -> Result<String, git2::Error> {
    let repo = Repository::open(workspace)?;
    let mut index = repo.index()?;
    index.add_all(["*"], IndexAddOption::DEFAULT, None)?;
    index.update_all(["*"], None)?;
    index.write()?;
    let tree = repo.find_tree(index.write_tree()?)?;
    let parent = repo.head()?.peel_to_commit()?;
    let signature = crate::workspace::harness_signature()?;
    let commit = repo.commit(
        None,
        &signature,
        &signature,
        "deltabench: task setup",
        &tree,
        &[&parent],
    )?;
    repo.set_head_detached(commit)?;
    let target = Repository::open_bare(keep_in)?;
    // The store's check waits until the commit's objects and its ref are all in.
    let _lock = crate::workspace::SetupLock::take(keep_in)
        .map_err(|e| git2::Error::from_str(&format!("cannot lock {}: {e}", keep_in.display())))?;
    let (from, to) = (repo.odb()?, target.odb()?);
    copy_tree(&repo, &from, &to, tree.id())?;
    copy_object(&from, &to, commit)?;
    // Named, so the check of the history store (`workspace::history_store`) keeps its objects.
    // Trials of one task make the same commit: the one that names it first holds the ref's
    // lock for a moment, and the others find the ref there once it is let go.
    let name = format!("refs/setup/{commit}");
    let mut attempts = 0;
    loop {
        if target.refname_to_id(&name).is_ok_and(|id| id == commit) {
            break;
        }
        match target.reference(&name, commit, true, "setup") {
            Ok(_) => break,
            Err(e) if e.code() == git2::ErrorCode::Locked && attempts < 100 => {
                attempts += 1;
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            Err(e) => return Err(e),
        }
    }
    Ok(commit.to_string())
}

/// Copies a tree and what it holds, children first, skipping what `to` already has (an object
/// is only ever written after everything it points to).
fn copy_tree(
    repo: &Repository,
    from: &git2::Odb,
    to: &git2::Odb,
    id: Oid,
) -> Result<(), git2::Error> {
    if to.exists(id) {
        return Ok(());
    }
    let tree = repo.find_tree(id)?;
    for entry in tree.iter() {
        match entry.kind() {
            Some(git2::ObjectType::Tree) => copy_tree(repo, from, to, entry.id())?,
            Some(git2::ObjectType::Blob) if !to.exists(entry.id()) => {
                copy_object(from, to, entry.id())?
            }
            _ => {}
        }
    }
    copy_object(from, to, id)
}

fn copy_object(from: &git2::Odb, to: &git2::Odb, id: Oid) -> Result<(), git2::Error> {
    let object = from.read(id)?;
    to.write(object.kind(), object.data())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_count_files_and_lines() {
        let patch = "diff --git a/x b/x\n--- a/x\n+++ b/x\n@@ -1 +1,2 @@\n-old\n+new\n+more\n\
                     diff --git a/y b/y\nnew file mode 100644\n--- /dev/null\n+++ b/y\n@@ -0,0 +1 @@\n+y\n";
        let stats = DiffStats::from_patch(patch);
        assert_eq!((stats.files, stats.insertions, stats.deletions), (2, 3, 1));
        assert_eq!(stats.bytes, patch.len() as u64);
    }

    #[test]
    fn changed_paths_reads_headers_renames_and_quotes() {
        let patch = "diff --git a/tests/test_x.py b/tests/test_x.py\n--- a/tests/test_x.py\n\
                     +++ b/tests/test_x.py\n@@ -1 +1 @@\n-a\n+b\n\
                     diff --git a/old name.txt b/new name.txt\nsimilarity index 100%\n\
                     rename from old name.txt\nrename to new name.txt\n\
                     diff --git \"a/t\\303\\251st.txt\" \"b/t\\303\\251st.txt\"\n\
                     new file mode 100644\n\
                     diff --git a/a b/a b/a b/a\ndeleted file mode 100644\n";
        assert_eq!(
            changed_paths(patch),
            [
                "a b/a",
                "new name.txt",
                "old name.txt",
                "tests/test_x.py",
                "t\u{e9}st.txt"
            ]
        );
        assert!(changed_paths("").is_empty());
    }

    #[test]
    fn empty_patch_has_no_files() {
        assert_eq!(DiffStats::from_patch(""), DiffStats::default());
    }

    /// Trials of one task record the same setup commit at the same moment: every one of them
    /// must provision (one used to lose the ref's lock and end as an infra error).
    #[test]
    fn the_same_setup_recorded_by_trials_at_once_all_succeed() {
        // A race: ten rounds, so that a regression shows on (almost) every run.
        for _ in 0..10 {
            let tmp = tempfile::tempdir().unwrap();
            let store = tmp.path().join("store.git");
            Repository::init_bare(&store).unwrap();
            let signature = crate::workspace::harness_signature().unwrap();
            let workspaces: Vec<_> = (0..8)
                .map(|n| {
                    let path = tmp.path().join(format!("w{n}"));
                    let repo = Repository::init(&path).unwrap();
                    std::fs::write(path.join("a.txt"), "a\n").unwrap();
                    let mut index = repo.index().unwrap();
                    index.add_path(Path::new("a.txt")).unwrap();
                    let tree = repo.find_tree(index.write_tree().unwrap()).unwrap();
                    repo.commit(Some("HEAD"), &signature, &signature, "base", &tree, &[])
                        .unwrap();
                    std::fs::write(path.join("setup.txt"), "made by setup\n").unwrap();
                    path
                })
                .collect();
            let start = std::sync::Barrier::new(workspaces.len());
            let commits: Vec<_> = std::thread::scope(|scope| {
                let handles: Vec<_> = workspaces
                    .iter()
                    .map(|path| {
                        let (start, store) = (&start, &store);
                        scope.spawn(move || {
                            start.wait();
                            commit_setup(path, store)
                        })
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            });
            let first = commits[0].as_ref().unwrap().clone();
            for commit in &commits {
                assert_eq!(
                    commit.as_ref().map_err(|e| e.message().to_owned()),
                    Ok(&first)
                );
            }
            let store = Repository::open_bare(&store).unwrap();
            let named = store.refname_to_id(&format!("refs/setup/{first}")).unwrap();
            assert_eq!(named.to_string(), first);
        }
    }
}
