//! Patches as git writes them, through the real binary: hidden tests and solutions that add an
//! empty file, change only a mode or rename a file apply as `git apply` applies them, and a
//! patch that does not apply says which file and why.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::common::{git, git_repo, run_suite, stderr, trials, write_files, write_suite};

/// `git diff --binary -M` of the work tree of `repo` after `change` against HEAD, which it
/// then restores.
fn patch_of(repo: &Path, change: impl FnOnce(&Path)) -> String {
    change(repo);
    git(repo, &["add", "-A"]);
    let patch = git(repo, &["diff", "--cached", "--binary", "-M"]);
    git(repo, &["reset", "-q", "--hard"]);
    git(repo, &["clean", "-q", "-fdx"]);
    patch + "\n"
}

/// A repo where `add` subtracts and `check.sh` (not executable) runs the tests as a package;
/// the hidden tests need an empty `tests/__init__.py`, the fix makes `check.sh` executable,
/// adds an empty `calc_extras/__init__.py` the tests import and renames `old_name.py`.
fn suite(root: &Path) -> (String, String) {
    let (repo, _) = git_repo(
        root,
        &[
            ("calc.py", "def add(a, b):\n    return a - b\n"),
            (
                "check.sh",
                "#!/bin/sh\nexec python3 -m unittest discover -v -s tests -t .\n",
            ),
            ("old_name.py", "VALUE = 1\n"),
        ],
    );
    write_files(
        &repo,
        &[
            ("tests/__init__.py", ""),
            (
                "tests/test_calc.py",
                "import unittest\n\nimport calc_extras\nfrom calc import add\nfrom new_name import VALUE\n\n\n\
                 class CalcTest(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(add(2, 3), 5 * VALUE)\n",
            ),
        ],
    );
    let tests = patch_of(&repo, |_| {});
    write_files(
        &repo,
        &[
            ("calc.py", "def add(a, b):\n    return a + b\n"),
            ("calc_extras/__init__.py", ""),
        ],
    );
    let solution = patch_of(&repo, |repo| {
        let script = repo.join("check.sh");
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::rename(repo.join("old_name.py"), repo.join("new_name.py")).unwrap();
    });
    (tests, solution)
}

#[test]
fn empty_files_modes_and_renames_apply_as_hidden_tests_and_as_a_solution() {
    let tmp = crate::common::temp_dir();
    let root = tmp.path();
    let (tests, solution) = suite(root);
    // The patches are the shapes libgit2 alone rejects: headers with no hunk.
    assert!(
        tests.contains("new file mode 100644\nindex 0000000..e69de29\ndiff --git"),
        "{tests}"
    );
    assert!(
        solution.contains("old mode 100644\nnew mode 100755\n")
            && solution.contains("new file mode 100644\nindex 0000000..e69de29\n")
            && solution.contains("rename from old_name.py\nrename to new_name.py\n"),
        "{solution}"
    );
    write_files(root, &[("hidden.patch", &tests), ("fix.patch", &solution)]);
    write_suite(
        root,
        "name: patches\nrepo: repo\ntasks:\n  - id: t\n    instruction: fix add\n    tests: hidden.patch\n    \
         solution: fix.patch\n    protected: [defaults, \"!check.sh\"]\n    verify: ./check.sh\n",
    );
    let (output, _, out) = run_suite(root, &["--agent", "oracle", "--agent", "noop"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let records = trials(&out);
    let outcome = |agent: &str| {
        let record = records.iter().find(|r| r["agent"] == agent).unwrap();
        (
            record["outcome"].as_str().unwrap().to_owned(),
            record.clone(),
        )
    };
    let (oracle, record) = outcome("oracle");
    assert_eq!(oracle, "pass", "{record:#}");
    let (noop, record) = outcome("noop");
    assert_eq!(noop, "fail", "{record:#}");
    // The oracle's diff carries what its patch did, as git writes it.
    let diff = std::fs::read_to_string(out.join("trials/t/oracle/1/diff.patch")).unwrap();
    assert!(
        diff.contains("old mode 100644\nnew mode 100755")
            && diff.contains("calc_extras/__init__.py")
            && diff.contains("rename to new_name.py"),
        "{diff}"
    );
    let verify = std::fs::read_to_string(out.join("trials/t/oracle/1/verify.log")).unwrap();
    assert!(
        verify.contains("test_add") && verify.contains("OK"),
        "{verify}"
    );
}

#[test]
fn a_patch_that_does_not_apply_names_the_file_and_why() {
    let tmp = crate::common::temp_dir();
    let root = tmp.path();
    let (tests, _) = suite(root);
    // The hunk expects a line the base does not have.
    let stale = "diff --git a/calc.py b/calc.py\n--- a/calc.py\n+++ b/calc.py\n@@ -1,2 +1,2 @@\n \
                 def add(a, b):\n-    return a * b\n+    return a + b\n";
    write_files(root, &[("hidden.patch", &tests), ("fix.patch", stale)]);
    write_suite(
        root,
        "name: patches\nrepo: repo\ntasks:\n  - id: t\n    instruction: fix add\n    tests: hidden.patch\n    \
         solution: fix.patch\n    protected: [defaults, \"!check.sh\"]\n    verify: ./check.sh\n",
    );
    let (_, _, out) = run_suite(root, &["--agent", "oracle"]);
    let records = trials(&out);
    let text = records[0].to_string();
    assert!(
        text.contains("fix.patch: does not apply to the base")
            && text.contains("patch failed: calc.py:1")
            && text.contains("calc.py: patch does not apply"),
        "{:#}",
        records[0]
    );
}
