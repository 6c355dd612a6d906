//! Diffs with git2 against a base tree, never HEAD (agents commit), and never via the git CLI
//! (a planted `core.fsmonitor`, filter or external diff would run as the harness).

use std::path::Path;

use git2::{
    DiffFindOptions, DiffFormat, DiffOptions, IndexAddOption, Oid, Repository, Signature, Time,
};
use serde::{Deserialize, Serialize};

/// The size of a diff.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiffStats {
    pub files: u64,
    pub insertions: u64,
    pub deletions: u64,
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

/// The patch that turns `base` into the workspace: tracked, untracked (not ignored) and binary
/// files, renames detected. Applies with `git apply --binary`.
///
/// `only`, when given, lists the workspace-relative paths that can differ from the base (an
/// overlay's upper dir knows them); the diff then looks at nothing else, which keeps it cheap on
/// large trees.
pub fn capture_diff(
    workspace: &Path,
    base: &str,
    only: Option<&[String]>,
) -> Result<Vec<u8>, git2::Error> {
    if only.is_some_and(|paths| paths.is_empty()) {
        return Ok(Vec::new());
    }
    let repo = Repository::open(workspace)?;
    let tree = repo
        .find_object(Oid::from_str(base)?, None)?
        .peel_to_tree()?;
    let mut options = DiffOptions::new();
    options
        .include_untracked(true)
        .recurse_untracked_dirs(true)
        .show_untracked_content(true)
        .show_binary(true)
        .include_typechange(true);
    if let Some(paths) = only {
        options.disable_pathspec_match(true);
        for path in paths {
            options.pathspec(path);
        }
    }
    let mut diff = repo.diff_tree_to_workdir_with_index(Some(&tree), Some(&mut options))?;
    let mut find = DiffFindOptions::new();
    find.renames(true).for_untracked(true);
    diff.find_similar(Some(&mut find))?;
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
/// the commit id: the base after a setup step. The agent then finds a clean status, and the
/// index's stat cache keeps the later diff fast.
pub fn commit_setup(workspace: &Path) -> Result<String, git2::Error> {
    let repo = Repository::open(workspace)?;
    let mut index = repo.index()?;
    index.add_all(["*"], IndexAddOption::DEFAULT, None)?;
    index.update_all(["*"], None)?;
    index.write()?;
    let tree = repo.find_tree(index.write_tree()?)?;
    let parent = repo.head()?.peel_to_commit()?;
    let signature = Signature::new(
        "deltabench",
        "deltabench@localhost",
        &Time::new(946_684_800, 0),
    )?;
    let commit = repo.commit(
        None,
        &signature,
        &signature,
        "deltabench: task setup",
        &tree,
        &[&parent],
    )?;
    repo.set_head_detached(commit)?;
    Ok(commit.to_string())
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
    fn empty_patch_has_no_files() {
        assert_eq!(DiffStats::from_patch(""), DiffStats::default());
    }
}
