//! Protected paths: what the agent must not modify (the hidden tests by default).
//!
//! The hidden tests are copied over the workspace after the agent whatever it did, so editing
//! them cannot change the verdict directly; the flag records the attempt (an agent that read or
//! rewrote the tests to fit its fix) and fails the trial under the `delta` metric.

use std::io;

use regex::Regex;

use crate::delta::changed_paths;
use crate::workspace::Overlay;

/// Workspace-relative path patterns.
#[derive(Debug, Default)]
pub struct Protected(Vec<Regex>);

impl Protected {
    /// The task's `protected:` globs, or else the paths its hidden tests write.
    pub fn for_task(globs: Option<&[String]>, tests: Option<&Overlay>) -> io::Result<Self> {
        let patterns = match (globs, tests) {
            (Some(globs), _) => globs.iter().map(|g| glob_regex(g)).collect(),
            (None, Some(overlay)) => overlay_paths(overlay)?
                .iter()
                .map(|path| anchored(&regex::escape(path)))
                .collect(),
            (None, None) => Vec::new(),
        };
        Ok(Self(patterns))
    }

    /// The paths of `patch` that a pattern covers.
    pub fn touched(&self, patch: &str) -> Vec<String> {
        if self.0.is_empty() {
            return Vec::new();
        }
        changed_paths(patch)
            .into_iter()
            .filter(|path| self.0.iter().any(|re| re.is_match(path)))
            .collect()
    }
}

/// A pattern matching a path or anything under it (a directory protects its contents).
fn anchored(body: &str) -> Regex {
    // Every piece is escaped or a fixed class, so the pattern always compiles.
    Regex::new(&format!("^{body}(?:/.*)?$")).expect("escaped pattern")
}

/// `*` and `?` stay within a path segment, `**` crosses segments.
fn glob_regex(glob: &str) -> Regex {
    let glob = glob.trim_start_matches("./").trim_start_matches('/');
    let mut body = String::new();
    let mut rest = glob;
    while let Some(c) = rest.chars().next() {
        let (piece, len) = if rest.starts_with("**/") {
            ("(?:.*/)?".to_owned(), 3)
        } else if rest.starts_with("**") {
            (".*".to_owned(), 2)
        } else if c == '*' {
            ("[^/]*".to_owned(), 1)
        } else if c == '?' {
            ("[^/]".to_owned(), 1)
        } else {
            (regex::escape(&c.to_string()), c.len_utf8())
        };
        body.push_str(&piece);
        rest = &rest[len..];
    }
    anchored(&body)
}

/// The workspace paths an overlay writes: a directory's files, or a patch's paths.
fn overlay_paths(overlay: &Overlay) -> io::Result<Vec<String>> {
    match overlay {
        Overlay::Patch(path) => Ok(changed_paths(&std::fs::read_to_string(path)?)),
        Overlay::Dir(root) => {
            let mut found = Vec::new();
            let mut stack = vec![root.clone()];
            while let Some(dir) = stack.pop() {
                for entry in std::fs::read_dir(&dir)? {
                    let path = entry?.path();
                    if path.is_dir() {
                        stack.push(path);
                    } else if let Ok(relative) = path.strip_prefix(root) {
                        found.push(relative.to_string_lossy().into_owned());
                    }
                }
            }
            Ok(found)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn patch(paths: &[&str]) -> String {
        paths
            .iter()
            .map(|p| format!("diff --git a/{p} b/{p}\n--- a/{p}\n+++ b/{p}\n"))
            .collect()
    }

    #[test]
    fn globs_match_within_and_across_segments() {
        let globs = [
            "tests/**".to_owned(),
            "*.lock".to_owned(),
            "ci/run?.sh".into(),
        ];
        let protected = Protected::for_task(Some(&globs), None).unwrap();
        let touched = protected.touched(&patch(&[
            "tests/unit/test_a.py",
            "Cargo.lock",
            "sub/Cargo.lock",
            "ci/run1.sh",
            "src/lib.rs",
        ]));
        assert_eq!(
            touched,
            ["Cargo.lock", "ci/run1.sh", "tests/unit/test_a.py"]
        );
    }

    #[test]
    fn a_directory_protects_its_contents_and_default_is_the_overlay() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("tests")).unwrap();
        std::fs::write(dir.path().join("tests/test_x.py"), "").unwrap();
        let overlay = Overlay::Dir(dir.path().to_owned());
        let protected = Protected::for_task(None, Some(&overlay)).unwrap();
        assert_eq!(
            protected.touched(&patch(&["tests/test_x.py", "tests/test_y.py"])),
            ["tests/test_x.py"]
        );
        let by_dir = Protected::for_task(Some(&["tests".to_owned()]), None).unwrap();
        assert_eq!(
            by_dir.touched(&patch(&["tests/a", "testsuite"])),
            ["tests/a"]
        );
        assert!(Protected::default().touched(&patch(&["x"])).is_empty());
    }
}
