//! Graders that can't be gamed: tampering with the hidden tests, verify output that
//! contradicts its exit code, planted git config, history past the base, and leaked secrets.

use std::path::Path;

use crate::common::{
    deltabench, git, git_repo, run_suite, stderr, stdout, temp_dir, trials, write_files,
    write_suite,
};

/// The repo every test but the history one uses: a bug in `calc.py`, a `check.sh` verify.
const CALC: &[(&str, &str)] = &[
    ("calc.py", "def add(a, b):\n    return a - b\n"),
    ("check.sh", "python3 -m unittest -q test_calc\n"),
];

const HIDDEN_TEST: &str = "import unittest\nfrom calc import add\n\n\
    class TestCalc(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n";

const FIX: &str = "printf 'def add(a, b):\\n    return a + b\\n' > calc.py";

fn record<'a>(records: &'a [serde_json::Value], task: &str, agent: &str) -> &'a serde_json::Value {
    records
        .iter()
        .find(|r| r["task"] == task && r["agent"] == agent)
        .unwrap_or_else(|| panic!("no record for {task} / {agent}: {records:?}"))
}

/// Every file under `dir`, as (relative path, bytes).
fn files_under(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(current) = stack.pop() {
        for entry in std::fs::read_dir(&current).unwrap().flatten() {
            let path = entry.path();
            if entry.file_type().unwrap().is_dir() {
                stack.push(path);
            } else {
                let relative = path.strip_prefix(dir).unwrap().display().to_string();
                found.push((relative, std::fs::read(&path).unwrap()));
            }
        }
    }
    found
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle.as_bytes())
}

#[test]
fn an_agent_that_edits_the_hidden_tests_is_flagged_and_fails() {
    let tmp = temp_dir();
    git_repo(tmp.path(), CALC);
    write_files(tmp.path(), &[("hidden/test_calc.py", HIDDEN_TEST)]);
    let weakened = "printf 'import unittest\\nclass T(unittest.TestCase):\\n    def test_ok(self): pass\\n' > test_calc.py";
    write_suite(
        tmp.path(),
        &format!(
            "name: tamper\nrepo: repo\nagents:\n  honest: {{kind: command, run: \"{FIX}\"}}\n  \
             cheat: {{kind: command, run: \"{FIX}; {weakened}; mkdir -p docs; echo x > docs/notes.md\"}}\n\
             tasks:\n  - id: default\n    instruction: fix add\n    tests: hidden\n    verify: sh check.sh\n  \
             - id: globbed\n    instruction: fix add\n    tests: hidden\n    verify: sh check.sh\n    \
             protected: [\"docs/**\"]\n"
        ),
    );
    let (output, _work, out) = run_suite(tmp.path(), &[]);
    assert!(
        matches!(output.status.code(), Some(0 | 1)),
        "{}",
        stderr(&output)
    );
    let records = trials(&out);

    let honest = record(&records, "default", "honest");
    assert_eq!(honest["outcome"], "pass", "{honest}");
    assert!(honest.get("tampered").is_none(), "{honest}");

    // The hidden tests were copied over the weakened ones, so the fix itself passed; the flag fails it.
    let cheat = record(&records, "default", "cheat");
    assert_eq!(cheat["verify"]["exit_code"], 0, "{cheat}");
    assert_eq!(
        (&cheat["outcome"], &cheat["passed"], &cheat["score"]),
        (&"fail".into(), &false.into(), &0.0.into()),
        "{cheat}"
    );
    assert_eq!(
        cheat["tampered"],
        serde_json::json!(["test_calc.py"]),
        "{cheat}"
    );

    // `protected:` replaces the default: only the globbed paths count.
    let globbed = record(&records, "globbed", "cheat");
    assert_eq!(globbed["outcome"], "fail", "{globbed}");
    assert_eq!(
        globbed["tampered"],
        serde_json::json!(["docs/notes.md"]),
        "{globbed}"
    );
    println!("tampered records: {cheat}\n{globbed}");
}

/// A config file protected only in its test-runner sections: an honest diff that also adds an
/// empty file (a header with no hunk) and edits another section is judged on the sections, not
/// counted as tampering because the diff was hard to read.
#[test]
fn an_empty_file_in_the_diff_does_not_make_a_config_edit_tampering() {
    let tmp = temp_dir();
    let mut files = CALC.to_vec();
    files.push(("pyproject.toml", "[project]\nname = \"calc\"\n"));
    git_repo(tmp.path(), &files);
    write_files(tmp.path(), &[("hidden/test_calc.py", HIDDEN_TEST)]);
    let extra = "touch empty.txt; printf 'version = \\\"1\\\"\\n' >> pyproject.toml";
    let runner = "printf '[tool.pytest.ini_options]\\naddopts = \\\"-q\\\"\\n' >> pyproject.toml";
    write_suite(
        tmp.path(),
        &format!(
            "name: sections\nrepo: repo\nagents:\n  honest: {{kind: command, run: \"{FIX}; {extra}\"}}\n  \
             runner: {{kind: command, run: \"{FIX}; touch empty.txt; {runner}\"}}\n\
             tasks:\n  - id: t\n    instruction: fix add\n    tests: hidden\n    verify: sh check.sh\n"
        ),
    );
    let (output, _work, out) = run_suite(tmp.path(), &[]);
    let records = trials(&out);
    assert_eq!(records.len(), 2, "{}", stderr(&output));
    let honest = record(&records, "t", "honest");
    let patch = std::fs::read_to_string(out.join("trials/t/honest/1/diff.patch")).unwrap();
    assert!(patch.contains("new file mode 100644"), "{patch}");
    assert_eq!(honest["outcome"], "pass", "{honest}");
    assert!(honest.get("tampered").is_none(), "{honest}");
    // The runner's section is still protected, with the same empty file beside it.
    let runner = record(&records, "t", "runner");
    assert_eq!(runner["outcome"], "fail", "{runner}");
    assert_eq!(
        runner["tampered"],
        serde_json::json!(["pyproject.toml"]),
        "{runner}"
    );
}

#[test]
fn fake_success_lines_with_a_failing_exit_are_invalid() {
    let tmp = temp_dir();
    git_repo(tmp.path(), CALC);
    // The agent rewrites the verify script to print what a green unittest run prints, then exit 1
    // (the script is taken out of the protected paths, which would fail it first).
    let fake = "printf 'test_add PASSED\\n\\nRan 3 tests in 0.001s\\n\\nOK\\n'; exit 1";
    write_suite(
        tmp.path(),
        &format!(
            "name: fake\nrepo: repo\nagents:\n  faker: {{kind: command, run: \"printf '%s\\\\n' \\\"{fake}\\\" > check.sh\"}}\n\
             tasks:\n  - id: by-delta\n    instruction: fix add\n    verify: sh check.sh\n    protected: [defaults, \"!check.sh\"]\n  \
             - id: by-token\n    instruction: fix add\n    verify: sh check.sh\n    protected: [defaults, \"!check.sh\"]\n    metric: delta-token\n"
        ),
    );
    let (output, _work, out) = run_suite(tmp.path(), &[]);
    assert!(
        matches!(output.status.code(), Some(0 | 1)),
        "{}",
        stderr(&output)
    );
    let records = trials(&out);
    for task in ["by-delta", "by-token"] {
        let r = record(&records, task, "faker");
        assert_eq!(r["verify"]["exit_code"], 1, "{r}");
        assert_eq!(
            (&r["outcome"], &r["passed"], &r["score"]),
            (&"invalid".into(), &false.into(), &0.0.into()),
            "{r}"
        );
        let why = r["invalid"].as_str().unwrap();
        assert!(
            why.contains("claims 3 test(s) passed, but verify exited 1"),
            "{why}"
        );
    }

    // Reports count invalid trials apart, as not passed.
    let report = deltabench(tmp.path())
        .arg("report")
        .arg(&out)
        .args(["--format", "json"])
        .output()
        .unwrap();
    let summary: serde_json::Value = serde_json::from_slice(&report.stdout).unwrap();
    let agent = &summary["agents"][0];
    assert_eq!(
        (&agent["invalid"], &agent["passed"], &agent["scored"]),
        (&2.into(), &0.into(), &2.into()),
        "{agent}"
    );
    let table = deltabench(tmp.path())
        .arg("report")
        .arg(&out)
        .output()
        .unwrap();
    assert!(stdout(&table).contains("invalid"), "{}", stdout(&table));
    println!("invalid records: {records:?}");
}

#[test]
fn a_verify_that_runs_zero_tests_is_invalid() {
    let tmp = temp_dir();
    git_repo(tmp.path(), CALC);
    write_suite(
        tmp.path(),
        &format!(
            "name: zero\nrepo: repo\nagents:\n  fixer: {{kind: command, run: \"{FIX}\"}}\n\
             tasks:\n  - id: none-found\n    instruction: fix add\n    \
             verify: \"python3 -m unittest discover -p 'nothing_matches_*.py'\"\n"
        ),
    );
    let (output, _work, out) = run_suite(tmp.path(), &[]);
    assert!(
        matches!(output.status.code(), Some(0 | 1)),
        "{}",
        stderr(&output)
    );
    let records = trials(&out);
    let r = record(&records, "none-found", "fixer");
    assert_eq!(
        (&r["outcome"], &r["passed"]),
        (&"invalid".into(), &false.into()),
        "{r}"
    );
    assert!(
        r["invalid"].as_str().unwrap().contains("ran zero tests"),
        "{r}"
    );
    println!("zero-tests record: {r}");
}

#[test]
fn planted_git_config_hooks_and_filters_never_run_as_the_harness() {
    let tmp = temp_dir();
    git_repo(tmp.path(), CALC);
    // A patch overlay, so the hidden tests are applied through git2 as well.
    write_files(
        tmp.path(),
        &[(
            "hidden.patch",
            "diff --git a/test_calc.py b/test_calc.py\nnew file mode 100644\n--- /dev/null\n\
             +++ b/test_calc.py\n@@ -0,0 +1 @@\n+import unittest\n",
        )],
    );
    let marker = tmp.path().join("marker");
    let evil = tmp.path().join("evil.sh");
    std::fs::write(
        &evil,
        format!("#!/bin/sh\necho \"$0 $*\" >> {}\ncat\n", marker.display()),
    )
    .unwrap();
    let hooks = tmp.path().join("hooks");
    std::fs::create_dir_all(&hooks).unwrap();
    let mut plant = vec![
        "set -e".to_owned(),
        format!("git config core.fsmonitor {}", evil.display()),
        format!("git config filter.x.clean {}", evil.display()),
        format!("git config filter.x.smudge {}", evil.display()),
        "git config filter.x.required true".to_owned(),
        format!("git config diff.external {}", evil.display()),
        format!("git config core.hooksPath {}", hooks.display()),
        "echo '* filter=x' > .gitattributes".to_owned(),
        format!("cp {} .git/hooks/post-checkout", evil.display()),
        "chmod +x .git/hooks/post-checkout".to_owned(),
    ];
    for hook in [
        "post-checkout",
        "pre-commit",
        "post-index-change",
        "reference-transaction",
    ] {
        std::fs::copy(&evil, hooks.join(hook)).unwrap();
    }
    plant.push(FIX.to_owned());
    let script = tmp.path().join("plant.sh");
    std::fs::write(&script, plant.join("\n") + "\n").unwrap();
    std::process::Command::new("chmod")
        .args(["+x"])
        .arg(&evil)
        .args(hooks.read_dir().unwrap().map(|e| e.unwrap().path()))
        .status()
        .unwrap();
    write_suite(
        tmp.path(),
        &format!(
            "name: planted\nrepo: repo\nagents:\n  planter: {{kind: command, run: \"sh {}\"}}\n\
             tasks:\n  - id: fix\n    instruction: fix add\n    tests: hidden.patch\n    \
             verify: python3 -c 'import calc; assert calc.add(2, 3) == 5'\n",
            script.display()
        ),
    );
    let (output, _work, out) = run_suite(tmp.path(), &[]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let r = record(&trials(&out), "fix", "planter").clone();
    assert_eq!(r["outcome"], "pass", "{r}");
    // The diff shows the planted attributes file: the harness saw it and did not run it.
    let patch = std::fs::read_to_string(out.join("trials/fix/planter/1/diff.patch")).unwrap();
    assert!(patch.contains(".gitattributes"), "{patch}");
    assert!(
        !marker.exists(),
        "a planted git program ran: {}",
        std::fs::read_to_string(&marker).unwrap_or_default()
    );
}

#[test]
fn a_workspace_sees_no_object_past_its_base() {
    let tmp = temp_dir();
    let (repo, base) = git_repo(tmp.path(), &[("a.txt", "a\n")]);
    write_files(&repo, &[("answer.txt", "THE-SECRET-FIX-42\n")]);
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "the fix"]);
    git(&repo, &["tag", "v2"]);
    git(&repo, &["branch", "fix"]);
    let later = git(&repo, &["rev-parse", "HEAD"]);
    let later_objects = [
        later.clone(),
        git(&repo, &["rev-parse", "HEAD^{tree}"]),
        git(&repo, &["rev-parse", "HEAD:answer.txt"]),
    ];
    let probe = "git log --all --format=commit:%H; git tag; git branch -a; \
                 git cat-file --batch-all-objects --batch-check; \
                 git cat-file -e $LATER 2>/dev/null && echo LATER-READABLE || echo later-hidden; \
                 echo x > a.txt";
    write_suite(
        tmp.path(),
        &format!(
            "name: leak\nrepo: repo\nagents:\n  snoop: {{kind: command, run: \"{probe}\", env: {{LATER: {later}}}}}\n\
             tasks:\n  - id: t\n    instruction: look around\n    base: {base}\n    verify: \"true\"\n"
        ),
    );
    std::fs::create_dir_all(tmp.path().join("work")).unwrap();
    // Twice: once with a fresh cache, once reusing the cached history repo.
    for round in 0..2 {
        let out = tmp.path().join(format!("out{round}"));
        let output = deltabench(tmp.path())
            .args(["run", "suite.yaml", "--workdir"])
            .arg(tmp.path().join("work"))
            .arg("--out")
            .arg(&out)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        let log = std::fs::read_to_string(out.join("trials/t/snoop/1/agent.log")).unwrap();
        assert!(log.contains(&format!("commit:{base}")), "{log}");
        assert!(log.contains("later-hidden"), "{log}");
        for object in &later_objects {
            assert!(!log.contains(object.as_str()), "{object} leaked:\n{log}");
        }
        assert!(!log.contains("v2") && !log.contains("fix"), "{log}");
        println!("round {round}: the workspace sees\n{log}");
    }
}

#[test]
fn secrets_are_redacted_from_every_artifact() {
    let tmp = temp_dir();
    git_repo(tmp.path(), CALC);
    let secret = "sk-test-1234567890";
    let agent_token = "tok-abcdefgh-123";
    write_suite(
        tmp.path(),
        &format!(
            "name: secrets\nrepo: repo\nagents:\n  echoer:\n    kind: command\n    \
             run: \"echo key=$OPENAI_API_KEY token=$MY_TOKEN; echo $OPENAI_API_KEY > leaked.txt; {FIX}\"\n    \
             env: {{MY_TOKEN: {agent_token}}}\n\
             tasks:\n  - id: t\n    instruction: fix add\n    verify: \"cat leaked.txt; echo $OPENAI_API_KEY; exit 3\"\n"
        ),
    );
    let work = tmp.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let out = tmp.path().join("out");
    let output = deltabench(tmp.path())
        .env("OPENAI_API_KEY", secret)
        .args(["run", "suite.yaml", "--workdir"])
        .arg(&work)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        matches!(output.status.code(), Some(0 | 1)),
        "{}",
        stderr(&output)
    );
    assert!(!stdout(&output).contains(secret) && !stderr(&output).contains(secret));
    let trial = out.join("trials/t/echoer/1");
    let mut artifacts = files_under(&trial);
    for file in ["trials.jsonl", "manifest.json"] {
        artifacts.push((file.into(), std::fs::read(out.join(file)).unwrap()));
    }
    for (name, bytes) in &artifacts {
        for value in [secret, agent_token] {
            assert!(!contains(bytes, value), "{name} holds {value}");
        }
    }
    let read = |name: &str| std::fs::read_to_string(trial.join(name)).unwrap();
    assert!(read("agent.log").contains("key=[REDACTED:OPENAI_API_KEY] token=[REDACTED:MY_TOKEN]"));
    assert!(read("diff.patch").contains("+[REDACTED:OPENAI_API_KEY]"));
    assert!(read("verify.log").contains("[REDACTED:OPENAI_API_KEY]"));
    let names: Vec<&str> = artifacts.iter().map(|(name, _)| name.as_str()).collect();
    println!("checked {names:?}");
}

#[test]
fn an_agent_that_deletes_the_git_dir_is_still_scored_on_its_delta() {
    let tmp = crate::common::one_file_repo();
    write_suite(
        tmp.path(),
        "name: nogit\nrepo: repo\nagents:\n  \
         solver: {kind: command, run: \"echo fixed > a.txt; rm -rf .git\"}\n  \
         vandal: {kind: command, run: \"rm -rf .git\"}\n\
         tasks:\n  - {id: t, instruction: x, verify: \"grep -q fixed a.txt\"}\n",
    );
    let (output, _, out) = crate::common::run_suite(tmp.path(), &[]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let records = trials(&out);
    let outcome =
        |agent: &str| records.iter().find(|r| r["agent"] == agent).unwrap()["outcome"].clone();
    // Removing the evidence must not turn a trial into an unscored infrastructure error.
    assert_eq!(outcome("solver"), "pass");
    assert_eq!(outcome("vandal"), "fail");
    let diff = std::fs::read_to_string(out.join("trials/t/solver/1/diff.patch")).unwrap();
    assert!(diff.contains("+fixed"), "{diff}");
}

/// Listing a file in `.git/info/exclude` does not hide it from the diff: the probe sets the
/// workspace's excludes aside, so a protected path written that way is still flagged.
#[test]
fn an_agent_cannot_hide_files_from_the_diff_through_git_excludes() {
    let tmp = temp_dir();
    git_repo(tmp.path(), CALC);
    let hide = "mkdir -p docs; echo 'docs/' >> .git/info/exclude; echo x > docs/notes.md";
    write_suite(
        tmp.path(),
        &format!(
            "name: hide\nrepo: repo\nagents:\n  cheat: {{kind: command, run: \"{FIX}; {hide}\"}}\n\
             tasks:\n  - id: t\n    instruction: fix add\n    verify: python3 -c 'from calc import add; assert add(2, 3) == 5'\n    \
             protected: [\"docs/**\"]\n"
        ),
    );
    let (output, _work, out) = run_suite(tmp.path(), &[]);
    assert!(
        matches!(output.status.code(), Some(0 | 1)),
        "{}",
        stderr(&output)
    );
    let records = trials(&out);
    let cheat = record(&records, "t", "cheat");
    assert_eq!(cheat["outcome"], "fail", "{cheat}");
    assert_eq!(
        cheat["tampered"],
        serde_json::json!(["docs/notes.md"]),
        "{cheat}"
    );
    let diff = std::fs::read_to_string(out.join("trials/t/cheat/1/diff.patch")).unwrap();
    assert!(diff.contains("docs/notes.md"), "{diff}");
}
