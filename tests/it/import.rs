//! `deltabench import`: each format's edge cases on fixtures, the graders on piped JSON, and end
//! to end (import, then `validate` and `run` on the result) for SWE-bench, Harbor,
//! Terminal-Bench and Exercism.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::common::{deltabench, git, stderr, stdout, temp_dir, trials, write_files};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/import")
}

fn import(cwd: &Path, args: &[&str]) -> Output {
    deltabench(cwd).arg("import").args(args).output().unwrap()
}

fn validate(cwd: &Path, suite: &Path) -> Output {
    validate_with(cwd, suite, &[])
}

fn validate_with(cwd: &Path, suite: &Path, extra: &[&str]) -> Output {
    let work = cwd.join("work");
    std::fs::create_dir_all(&work).unwrap();
    deltabench(cwd)
        .arg("validate")
        .arg(suite)
        .arg("--workdir")
        .arg(&work)
        .args(extra)
        .output()
        .unwrap()
}

/// Runs `suite` with `agents` and returns (agent, outcome) per trial, sorted.
fn run(cwd: &Path, suite: &Path, extra: &[&str]) -> (Output, Vec<serde_json::Value>) {
    let work = cwd.join("work");
    let out = cwd.join("run");
    std::fs::create_dir_all(&work).unwrap();
    let _ = std::fs::remove_dir_all(&out);
    let output = deltabench(cwd)
        .arg("run")
        .arg(suite)
        .arg("--workdir")
        .arg(&work)
        .arg("--out")
        .arg(&out)
        .args(extra)
        .output()
        .unwrap();
    let records = if out.join("trials.jsonl").exists() {
        trials(&out)
    } else {
        Vec::new()
    };
    (output, records)
}

fn outcome(records: &[serde_json::Value], agent: &str) -> String {
    records
        .iter()
        .find(|r| r["agent"] == agent)
        .unwrap_or_else(|| panic!("no trial of {agent}: {records:?}"))["outcome"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn assert_ok(output: &Output, what: &str) {
    assert_eq!(
        output.status.code(),
        Some(0),
        "{what}\nstdout:\n{}\nstderr:\n{}",
        stdout(output),
        stderr(output)
    );
}

// ---------------------------------------------------------------------------------------------
// SWE-bench

/// An upstream repo `acme/calc` at `dir`: `add()` subtracts at the base; a later commit holds
/// the fix and the test that shows it. Returns (base, fix commit, patch, test_patch).
fn upstream(dir: &Path) -> (String, String, String, String) {
    std::fs::create_dir_all(dir).unwrap();
    git(dir, &["init", "-q", "-b", "main"]);
    write_files(
        dir,
        &[
            (
                "calc.py",
                "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n",
            ),
            ("tests/__init__.py", ""),
            (
                "tests/test_calc.py",
                "from calc import mul\n\n\ndef test_mul():\n    assert mul(2, 3) == 6\n",
            ),
        ],
    );
    git(dir, &["add", "-A"]);
    git(dir, &["commit", "-qm", "base"]);
    let base = git(dir, &["rev-parse", "HEAD"]);
    write_files(
        dir,
        &[
            (
                "calc.py",
                "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n",
            ),
            (
                "tests/test_calc.py",
                "from calc import add, mul\n\n\ndef test_mul():\n    assert mul(2, 3) == 6\n\n\ndef test_add():\n    assert add(2, 3) == 5\n",
            ),
        ],
    );
    git(dir, &["commit", "-qam", "fix add"]);
    let fix = git(dir, &["rev-parse", "HEAD"]);
    let diff = |path: &str| {
        let out = Command::new("git")
            .current_dir(dir)
            .args(["diff", &base, &fix, "--", path])
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap()
    };
    let (patch, test_patch) = (diff("calc.py"), diff("tests"));
    (base, fix, patch, test_patch)
}

fn swe_row(id: &str, repo: &str, base: &str, patch: &str, test_patch: &str) -> serde_json::Value {
    serde_json::json!({
        "repo": repo,
        "instance_id": id,
        "base_commit": base,
        "patch": patch,
        "test_patch": test_patch,
        "problem_statement": "add() returns the difference of its arguments instead of their sum.",
        "hints_text": "",
        "created_at": "2024-01-01T00:00:00Z",
        "version": "1.0",
        // As the published data has it: a string holding a JSON list.
        "FAIL_TO_PASS": "[\"tests/test_calc.py::test_add\"]",
        "PASS_TO_PASS": ["tests/test_calc.py::test_mul"],
        "environment_setup_commit": base,
    })
}

fn write_rows(path: &Path, rows: &[serde_json::Value]) {
    let text: String = rows.iter().map(|r| format!("{r}\n")).collect();
    std::fs::write(path, text).unwrap();
}

#[test]
fn swebench_end_to_end_validates_and_hides_the_fix() {
    let tmp = temp_dir();
    let root = tmp.path();
    let (base, fix, patch, test_patch) = upstream(&root.join("repos/acme__calc"));
    let mut no_tests = swe_row("acme__calc-2", "acme/calc", &base, &patch, &test_patch);
    no_tests["FAIL_TO_PASS"] = serde_json::json!([]);
    write_rows(
        &root.join("rows.jsonl"),
        &[
            swe_row("acme__calc-1", "acme/calc", &base, &patch, &test_patch),
            no_tests,
            swe_row(
                "acme__calc-3",
                "acme/calc",
                &"0".repeat(40),
                &patch,
                &test_patch,
            ),
        ],
    );
    let output = import(
        root,
        &[
            "swebench",
            "rows.jsonl",
            "--repos",
            "repos",
            "--out",
            "suite",
        ],
    );
    assert_ok(&output, "import");
    let text = stdout(&output);
    crate::common::assert_tmp_snapshot!("swebench_skips_two_rows", root, text);
    for file in [
        "suite.yaml",
        "instructions/acme__calc-1.md",
        "tests/acme__calc-1.patch",
        "tests/acme__calc-1.json",
        "solutions/acme__calc-1.patch",
        "graders/swebench.py",
    ] {
        assert!(
            root.join("suite").join(file).is_file(),
            "{file} not written"
        );
    }
    let yaml = std::fs::read_to_string(root.join("suite/suite.yaml")).unwrap();
    assert!(
        yaml.contains(
            "python3 -m pytest -rA tests/test_calc.py::test_add tests/test_calc.py::test_mul"
        ),
        "{yaml}"
    );

    assert_ok(&validate(root, &root.join("suite")), "validate");

    // The oracle passes, noop fails, and an agent looking at the history sees no later commit.
    std::fs::write(
        root.join("agents.yaml"),
        "agents:\n  peek: {kind: command, run: \"git log --all --format=%H\"}\n",
    )
    .unwrap();
    let (output, records) = run(
        root,
        &root.join("suite"),
        &[
            "--agents",
            "agents.yaml",
            "--agent",
            "oracle",
            "--agent",
            "noop",
            "--agent",
            "peek",
        ],
    );
    assert_ok(&output, "run");
    assert_eq!(outcome(&records, "oracle"), "pass");
    assert_eq!(outcome(&records, "noop"), "fail");
    let log =
        std::fs::read_to_string(root.join("run/trials/acme__calc-1/peek/1/agent.log")).unwrap();
    assert!(log.contains(&base), "{log}");
    assert!(
        !log.contains(&fix),
        "the fix commit is visible to the agent:\n{log}"
    );

    // A second import into the same folder is refused, unless --force.
    let again = import(
        root,
        &[
            "swebench",
            "rows.jsonl",
            "--repos",
            "repos",
            "--out",
            "suite",
        ],
    );
    assert_eq!(again.status.code(), Some(2), "{}", stderr(&again));
    assert!(
        stderr(&again).contains("already holds a suite"),
        "{}",
        stderr(&again)
    );
    let forced = import(
        root,
        &[
            "swebench",
            "rows.jsonl",
            "--repos",
            "repos",
            "--out",
            "suite",
            "--force",
        ],
    );
    assert_ok(&forced, "import --force");
}

/// Each row's patches are applied to its base at import, as the run will: a row whose fix or
/// test patch does not apply is skipped with git's reason, one with a test patch git writes
/// for an empty `__init__.py` is kept and validates, and the clone gains no object.
#[test]
fn swebench_rows_whose_patches_do_not_apply_are_skipped_with_the_reason() {
    let tmp = temp_dir();
    let root = tmp.path();
    let clone = root.join("repos/acme__calc");
    let (base, _, patch, test_patch) = upstream(&clone);
    // The test patch also adds an empty package marker, as git writes it (a header, no hunk),
    // and a file whose blob the clone does not hold.
    let with_empty = format!(
        "{test_patch}diff --git a/tests/unit/__init__.py b/tests/unit/__init__.py\nnew file mode 100644\nindex 0000000..e69de29\n\
         diff --git a/tests/unit/NOTES b/tests/unit/NOTES\nnew file mode 100644\n--- /dev/null\n+++ b/tests/unit/NOTES\n@@ -0,0 +1 @@\n+only in the test patch\n"
    );
    let stale_fix = patch.replace("-    return a - b", "-    return a * b");
    let stale_tests = test_patch.replace(
        "+from calc import add, mul",
        "+from calc import add, mul, div",
    );
    let stale_tests = stale_tests.replace(" def test_mul():", " def test_multiply():");
    write_rows(
        &root.join("rows.jsonl"),
        &[
            swe_row("acme__calc-1", "acme/calc", &base, &patch, &with_empty),
            swe_row("acme__calc-2", "acme/calc", &base, &stale_fix, &test_patch),
            swe_row("acme__calc-3", "acme/calc", &base, &patch, &stale_tests),
            swe_row(
                "acme__calc-4",
                "acme/calc",
                &base,
                "not a patch\n",
                &test_patch,
            ),
        ],
    );
    let objects_before = git(&clone, &["count-objects", "-v"]);
    let output = import(
        root,
        &[
            "swebench",
            "rows.jsonl",
            "--repos",
            "repos",
            "--out",
            "suite",
        ],
    );
    assert_ok(&output, "import");
    let text = stdout(&output);
    assert!(
        text.starts_with("imported 1 task (swebench) into suite\n"),
        "{text}"
    );
    let skipped = |id: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(&format!("  {id}: ")))
            .unwrap_or_else(|| panic!("{id} not skipped:\n{text}"))
            .to_owned()
    };
    let prefix = |what: &str| format!("the {what} does not apply to base commit {base}: ");
    let fix = skipped("acme__calc-2");
    assert!(
        fix.starts_with(&prefix("fix"))
            && fix.contains("patch failed: calc.py:1")
            && fix.contains("calc.py: patch does not apply"),
        "{fix}"
    );
    let tests = skipped("acme__calc-3");
    assert!(
        tests.starts_with(&prefix("test patch"))
            && tests.contains("patch failed: tests/test_calc.py:1")
            && tests.contains("tests/test_calc.py: patch does not apply"),
        "{tests}"
    );
    let prose = skipped("acme__calc-4");
    assert!(
        prose.starts_with(&prefix("fix")) && prose.contains("No valid patches in input"),
        "{prose}"
    );
    assert_eq!(git(&clone, &["count-objects", "-v"]), objects_before);
    assert_ok(&validate(root, &root.join("suite")), "validate");
}

#[test]
fn swebench_rows_of_several_repos_make_one_suite_each() {
    let tmp = temp_dir();
    let root = tmp.path();
    let (base, _, patch, test_patch) = upstream(&root.join("repos/acme__calc"));
    // The other repo is found under the owner/name layout.
    let nested = root.join("repos/acme/other");
    std::fs::create_dir_all(nested.parent().unwrap()).unwrap();
    git(
        root,
        &["clone", "-q", "repos/acme__calc", nested.to_str().unwrap()],
    );
    write_rows(
        &root.join("rows.json.jsonl"),
        &[
            swe_row("acme__calc-1", "acme/calc", &base, &patch, &test_patch),
            swe_row("acme__other-1", "acme/other", &base, &patch, &test_patch),
        ],
    );
    std::fs::write(
        root.join("env.yaml"),
        "acme/other@1.0:\n  test_command: python3 -m pytest -rA -p no:cacheprovider {test_files}\n  timeout: 2m\n",
    )
    .unwrap();
    let output = import(
        root,
        &[
            "swebench",
            "rows.json.jsonl",
            "--repos",
            "repos",
            "--env",
            "env.yaml",
            "--out",
            "suites",
        ],
    );
    assert_ok(&output, "import");
    let text = stdout(&output);
    assert!(
        text.contains("imported 2 tasks (swebench) into 2 suites, one per repository:\n  suites/acme__calc: 1 task\n  suites/acme__other: 1 task\n"),
        "{text}"
    );
    assert!(
        text.ends_with(
            "  deltabench validate suites/acme__calc\n  deltabench validate suites/acme__other\n"
        ),
        "{text}"
    );
    let other = std::fs::read_to_string(root.join("suites/acme__other/suite.yaml")).unwrap();
    assert!(
        other.contains(
            "verify: {run: \"python3 -m pytest -rA -p no:cacheprovider tests/test_calc.py\", timeout: \"2m\"}"
        ),
        "{other}"
    );
    assert_ok(
        &validate(root, &root.join("suites/acme__other")),
        "validate",
    );
}

/// Clones of `pallets/flask`, `sphinx-doc/sphinx`, `django/django` and `acme/calc` (all the
/// calc repo of [`upstream`]) and a row of each: the first three are in the official harness's
/// table (flask 2.3: requirements file; sphinx 7.2: conda packages and a `pre_install` edit;
/// django 4.0: a requirements file its clone lacks), `acme/calc` is not. Flask's environment
/// commit adds the requirements files. Returns (base, environment commit).
fn official_rows(root: &Path) -> (String, String) {
    let flask = root.join("repos/pallets__flask");
    let (base, _, patch, test_patch) = upstream(&flask);
    git(&flask, &["checkout", "-q", "-b", "env", &base]);
    write_files(
        &flask,
        &[
            (
                "requirements/dev.txt",
                "-r tests.txt\n-e .\n# the tools\ntox\ntypes-pkg_resources==0.1.3\n",
            ),
            ("requirements/tests.txt", "pytest\n# async\nasgiref\n"),
        ],
    );
    git(&flask, &["add", "-A"]);
    git(&flask, &["commit", "-qm", "requirements"]);
    let env = git(&flask, &["rev-parse", "HEAD"]);
    git(&flask, &["checkout", "-q", "main"]);
    for other in ["sphinx-doc__sphinx", "django__django", "acme__calc"] {
        git(
            root,
            &[
                "clone",
                "-q",
                "repos/pallets__flask",
                &format!("repos/{other}"),
            ],
        );
    }
    let row = |id: &str, repo: &str, version: &str| {
        let mut row = swe_row(id, repo, &base, &patch, &test_patch);
        row["version"] = serde_json::json!(version);
        row["environment_setup_commit"] = serde_json::json!(env);
        row
    };
    write_rows(
        &root.join("rows.jsonl"),
        &[
            row("pallets__flask-1", "pallets/flask", "2.3"),
            row("sphinx-doc__Sphinx-2", "sphinx-doc/sphinx", "7.2"),
            row("django__django-3", "django/django", "4.0"),
            row("acme__calc-4", "acme/calc", "1.0"),
        ],
    );
    (base, env)
}

/// A written file with the test's paths and commits put back as `<root>`, `<base>`, `<env>`.
fn read_normalized(path: &Path, root: &Path, base: &str, env: &str) -> String {
    let root = root.canonicalize().unwrap();
    std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .replace(&root.display().to_string(), "<root>")
        .replace(base, "<base>")
        .replace(env, "<env>")
}

#[test]
fn swebench_images_run_the_official_eval_in_each_instance_image() {
    let tmp = temp_dir();
    let root = tmp.path();
    let (base, env) = official_rows(root);
    let output = import(
        root,
        &[
            "swebench",
            "rows.jsonl",
            "--repos",
            "repos",
            "--images",
            "--out",
            "suites",
        ],
    );
    assert_ok(&output, "import --images");
    // No official image for a repository the harness does not know: skipped, and said.
    crate::common::assert_tmp_snapshot!("swebench_images_summary", root, stdout(&output));
    let mut suites = String::new();
    for repo in ["pallets__flask", "sphinx-doc__sphinx", "django__django"] {
        let dir = root.join("suites").join(repo);
        assert!(!dir.join("environments").exists(), "{repo}: no Dockerfile");
        suites.push_str(&read_normalized(&dir.join("suite.yaml"), root, &base, &env));
    }
    insta::assert_snapshot!("swebench_images", suites);
}

#[test]
fn swebench_without_images_writes_the_official_recipe_per_version() {
    let tmp = temp_dir();
    let root = tmp.path();
    let (base, env) = official_rows(root);
    let output = import(
        root,
        &[
            "swebench",
            "rows.jsonl",
            "--repos",
            "repos",
            "--out",
            "suites",
        ],
    );
    assert_ok(&output, "import");
    let text = stdout(&output);
    assert!(
        text.contains("imported 3 tasks (swebench) into 3 suites, one per repository:\n"),
        "{text}"
    );
    // Django's requirements file is not at the environment commit: no recipe, no task.
    assert!(
        text.contains(&format!(
            "skipped 1 task:\n  django__django-3: cannot write the official environment of django/django 4.0: no requirements file at commit {env} (looked for tests/requirements/py3.txt)\n"
        )),
        "{text}"
    );
    let flask = root.join("suites/pallets__flask");
    let mut written = read_normalized(&flask.join("suite.yaml"), root, &base, &env);
    for file in ["Dockerfile", "setup_env.sh", "setup_repo.sh"] {
        written.push_str(&format!("=== environments/pallets__flask-2.3/{file}\n"));
        written.push_str(&read_normalized(
            &flask.join("environments/pallets__flask-2.3").join(file),
            root,
            &base,
            &env,
        ));
    }
    let sphinx = root.join("suites/sphinx-doc__sphinx");
    written.push_str(&read_normalized(
        &sphinx.join("suite.yaml"),
        root,
        &base,
        &env,
    ));
    for file in ["setup_env.sh", "setup_repo.sh"] {
        written.push_str(&format!("=== environments/sphinx-doc__sphinx-7.2/{file}\n"));
        written.push_str(&read_normalized(
            &sphinx
                .join("environments/sphinx-doc__sphinx-7.2")
                .join(file),
            root,
            &base,
            &env,
        ));
    }
    insta::assert_snapshot!("swebench_dockerfiles", written);
    // A repository the harness does not know runs here, as before.
    let calc = std::fs::read_to_string(root.join("suites/acme__calc/suite.yaml")).unwrap();
    assert!(
        calc.contains("verify: {run: \"python3 -m pytest -rA tests/test_calc.py::test_add tests/test_calc.py::test_mul\", timeout: \"15m\"}"),
        "{calc}"
    );
    assert!(!calc.contains("environment"), "{calc}");
}

/// `--env` is repeatable (a later file's settings win, key by key); an entry may be empty, and
/// takes `prepare` and `environment` too; `import --force` keeps a suite lock and says so.
#[test]
fn swebench_env_files_layer_and_force_keeps_the_lock() {
    let tmp = temp_dir();
    let root = tmp.path();
    official_rows(root);
    write_files(
        root,
        &[
            (
                "base.yaml",
                "pallets/flask@2.3:\n  setup: pip install -e .\n  test_command: python3 -m pytest -rA {test_files}\n  timeout: 2m\nacme/calc:\n",
            ),
            (
                "envs/later.yaml",
                "pallets/flask@2.3:\n  timeout: 5m\n  prepare: true\n  environment: {dockerfile: flask/Dockerfile, workdir: /src}\nsphinx-doc/sphinx:\n  environment: {image: localhost/sphinx:1}\n",
            ),
            ("envs/flask/Dockerfile", "FROM localhost/python:3\n"),
        ],
    );
    let args = [
        "swebench",
        "rows.jsonl",
        "--repos",
        "repos",
        "--env",
        "base.yaml",
        "--env",
        "envs/later.yaml",
        "--out",
        "suites",
    ];
    let output = import(root, &args);
    assert_ok(&output, "import --env --env");
    let flask = std::fs::read_to_string(root.join("suites/pallets__flask/suite.yaml")).unwrap();
    let dockerfile = root.join("envs/flask/Dockerfile");
    for line in [
        "    setup: \"pip install -e .\"\n".to_owned(),
        "    prepare: true\n".to_owned(),
        "verify: {run: \"python3 -m pytest -rA tests/test_calc.py\", timeout: \"5m\"}".to_owned(),
        format!(
            "environment: {{dockerfile: \"{}\", workdir: \"/src\"}}",
            dockerfile.display()
        ),
    ] {
        assert!(flask.contains(&line), "{line}\n{flask}");
    }
    // The empty entry: the row runs here with the defaults.
    let calc = std::fs::read_to_string(root.join("suites/acme__calc/suite.yaml")).unwrap();
    assert!(
        calc.contains("python3 -m pytest -rA") && !calc.contains("environment"),
        "{calc}"
    );
    let sphinx =
        std::fs::read_to_string(root.join("suites/sphinx-doc__sphinx/suite.yaml")).unwrap();
    assert!(
        sphinx.contains("environment: {image: \"localhost/sphinx:1\"}"),
        "{sphinx}"
    );

    // A lock beside an imported suite survives --force, and import says so.
    let lock = root.join("suites/acme__calc/suite.lock.json");
    std::fs::write(&lock, "{}\n").unwrap();
    let mut forced = args.to_vec();
    forced.push("--force");
    let output = import(root, &forced);
    assert_ok(&output, "import --force");
    assert_eq!(std::fs::read_to_string(&lock).unwrap(), "{}\n");
    assert!(
        stdout(&output).contains("kept suites/acme__calc/suite.lock.json: its entries count only"),
        "{}",
        stdout(&output)
    );

    // An environment needs exactly one of image and dockerfile, and the Dockerfile must be there.
    for (bad, says) in [
        (
            "{workdir: /x}",
            "acme/calc: environment: give one of image and dockerfile",
        ),
        (
            "{dockerfile: nope/Dockerfile}",
            "acme/calc: environment: dockerfile ",
        ),
    ] {
        write_files(
            root,
            &[("bad.yaml", &format!("acme/calc:\n  environment: {bad}\n"))],
        );
        let args = [
            "swebench",
            "rows.jsonl",
            "--repos",
            "repos",
            "--env",
            "bad.yaml",
            "--out",
            "bad",
        ];
        let output = import(root, &args);
        assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
        assert!(stderr(&output).contains(says), "{}", stderr(&output));
    }
}

#[test]
fn swebench_env_entries_win_over_images() {
    let tmp = temp_dir();
    let root = tmp.path();
    official_rows(root);
    std::fs::write(
        root.join("env.yaml"),
        "pallets/flask@2.3:\n  setup: pip install -e .\n  test_command: python3 -m pytest -rA {test_files}\n  timeout: 2m\nacme/calc:\n  timeout: 3m\n",
    )
    .unwrap();
    let output = import(
        root,
        &[
            "swebench",
            "rows.jsonl",
            "--repos",
            "repos",
            "--env",
            "env.yaml",
            "--images",
            "--out",
            "suites",
        ],
    );
    assert_ok(&output, "import --env --images");
    let text = stdout(&output);
    assert!(
        text.contains("imported 4 tasks (swebench) into 4 suites"),
        "{text}"
    );
    let flask = std::fs::read_to_string(root.join("suites/pallets__flask/suite.yaml")).unwrap();
    assert!(
        flask.contains("    setup: \"pip install -e .\"\n")
            && flask.contains(
                "verify: {run: \"python3 -m pytest -rA tests/test_calc.py\", timeout: \"2m\"}"
            )
            && !flask.contains("environment"),
        "{flask}"
    );
    // An entry with a timeout only: the row runs here, with the default test command.
    let calc = std::fs::read_to_string(root.join("suites/acme__calc/suite.yaml")).unwrap();
    assert!(
        calc.contains("timeout: \"3m\"}") && !calc.contains("environment"),
        "{calc}"
    );
    // The rows the file does not name keep their official image.
    let sphinx =
        std::fs::read_to_string(root.join("suites/sphinx-doc__sphinx/suite.yaml")).unwrap();
    assert!(
        sphinx.contains("environment: {image: \"docker.io/swebench/sweb.eval.x86_64.sphinx-doc_1776_sphinx-2:latest\", workdir: \"/testbed\"}"),
        "{sphinx}"
    );

    // --images is for SWE-bench rows only.
    let harbor = import(root, &["harbor", "rows.jsonl", "--images", "--out", "hb"]);
    assert_eq!(harbor.status.code(), Some(2), "{}", stderr(&harbor));
    assert!(
        stderr(&harbor).contains("--images applies to swebench only, not to harbor"),
        "{}",
        stderr(&harbor)
    );
}

#[test]
fn swebench_bad_input_names_the_file_row_and_field() {
    let dir = fixtures().join("swebench");
    let tmp = temp_dir();
    let fixture = |name: &str| dir.join(name).to_string_lossy().into_owned();
    let cases = [
        (
            "bad_json.jsonl",
            vec![],
            "bad_json.jsonl:2:40: not a JSON row: EOF while parsing a value",
        ),
        (
            "missing_field.jsonl",
            vec![],
            "missing_field.jsonl: row 'acme__calc-3' (line 1) has no `base_commit`",
        ),
        (
            "bad_list.jsonl",
            vec![],
            "bad_list.jsonl: row 'acme__calc-4' (line 1): `FAIL_TO_PASS` is a string that does not hold a JSON list of test ids",
        ),
        (
            "bad_list.jsonl",
            vec!["--env".to_owned(), fixture("bad_env.yaml")],
            "bad_env.yaml:3:3: unknown field `timout`, expected one of setup, test_command, timeout, prepare, environment\n",
        ),
    ];
    for (rows, extra, message) in cases {
        let out = tmp.path().join("out");
        let output = deltabench(tmp.path())
            .args(["import", "swebench", &fixture(rows), "--out"])
            .arg(&out)
            .args(&extra)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2), "{rows}: {}", stderr(&output));
        assert!(
            stderr(&output).contains(message),
            "{rows}: expected {message:?} in:\n{}",
            stderr(&output)
        );
        assert!(!out.exists(), "a failed import leaves nothing behind");
    }

    let output = deltabench(tmp.path())
        .args([
            "import",
            "swe-bench",
            &fixture("bad_json.jsonl"),
            "--out",
            "x",
        ])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains(
            "invalid value 'swe-bench' for '<FORMAT>'\n  [possible values: swebench, harbor, terminal-bench, exercism]"
        ),
        "{}",
        stderr(&output)
    );
}

#[test]
fn swebench_without_a_clone_or_network_names_the_expected_path() {
    let tmp = temp_dir();
    let root = tmp.path();
    write_rows(
        &root.join("rows.jsonl"),
        &[swe_row(
            "acme__calc-1",
            "acme/calc",
            &"a".repeat(40),
            "",
            "",
        )],
    );
    // No network in tests: only local transports are allowed, so the clone fails at once.
    let output = deltabench(root)
        .env("GIT_ALLOW_PROTOCOL", "file")
        .args(["import", "swebench", "rows.jsonl", "--out", "suite"])
        .output()
        .unwrap();
    // Nothing to import: the row is skipped with the reason, and the clone command is given.
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    let text = stdout(&output);
    crate::common::assert_tmp_snapshot!("swebench_nothing_cloned", root, text);
    assert!(
        !root.join("suite").exists(),
        "a failed import leaves nothing behind"
    );
}

#[test]
fn swebench_lists_every_missing_clone_and_imports_what_is_there() {
    let tmp = temp_dir();
    let root = tmp.path();
    let (base, _, patch, test_patch) = upstream(&root.join("repos/acme__calc"));
    write_rows(
        &root.join("rows.jsonl"),
        &[
            swe_row("acme__calc-1", "acme/calc", &base, &patch, &test_patch),
            swe_row("acme__calc-2", "acme/calc", &base, &patch, &test_patch),
            swe_row("gone__one-1", "gone/one", &base, &patch, &test_patch),
            swe_row("gone__two-1", "gone/two", &base, &patch, &test_patch),
        ],
    );
    let output = import(
        root,
        &[
            "swebench",
            "rows.jsonl",
            "--repos",
            "repos",
            "--out",
            "suite",
        ],
    );
    assert_ok(&output, "import");
    let text = stdout(&output);
    crate::common::assert_tmp_snapshot!("swebench_repos_without_clones", root, text);
    assert!(!text.contains("pass --repos"), "--repos was given: {text}");
    // Said before anything is imported.
    assert!(
        stderr(&output).starts_with(
            "2 of 3 repositories have no clone under repos, skipping their rows: gone/one, gone/two"
        ),
        "{}",
        stderr(&output)
    );

    // --instance and --repo choose the rows.
    let output = import(
        root,
        &[
            "swebench",
            "rows.jsonl",
            "--repos",
            "repos",
            "--out",
            "one",
            "--instance",
            "acme__calc-2",
            "--instance",
            "nosuch-1",
        ],
    );
    assert_ok(&output, "import --instance");
    let text = stdout(&output);
    assert!(
        text.starts_with("imported 1 task (swebench) into one\n"),
        "{text}"
    );
    assert!(
        text.contains("note: --instance nosuch-1: no such row in rows.jsonl"),
        "{text}"
    );
    let output = import(
        root,
        &[
            "swebench",
            "rows.jsonl",
            "--repos",
            "repos",
            "--out",
            "acme",
            "--repo",
            "acme/calc",
        ],
    );
    assert_ok(&output, "import --repo");
    let text = stdout(&output);
    assert!(
        text.starts_with("imported 2 tasks (swebench) into acme\n"),
        "{text}"
    );
    assert!(!text.contains("skipped"), "{text}");
}

// ---------------------------------------------------------------------------------------------
// The graders, fed JSON on stdin

fn grade(
    grader: &str,
    args: &[&str],
    diff: &str,
    exit_code: i32,
    output: &str,
) -> (Option<i32>, String) {
    let input = serde_json::json!({
        "diff": diff,
        "command_result": {"command": "t", "exit_code": exit_code, "timed_out": false, "output": output, "duration_ms": 1},
    });
    grade_input(grader, args, &input)
}

/// Runs `graders/GRADER ARGS` on `input` (a delta as a grader reads it): its exit code and the
/// last line it printed (the verdict).
fn grade_input(grader: &str, args: &[&str], input: &serde_json::Value) -> (Option<i32>, String) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("graders")
        .join(grader);
    let mut child = Command::new(script)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.to_string().as_bytes())
        .unwrap();
    let done = child.wait_with_output().unwrap();
    let last = String::from_utf8_lossy(&done.stdout)
        .lines()
        .last()
        .unwrap_or_default()
        .to_owned();
    (done.status.code(), last)
}

/// A spec with no `repo` (a set outside the official table) gets the generic parser, and the
/// official verdict: FAIL_TO_PASS passed, PASS_TO_PASS passed or skipped, and a log that
/// contradicts its exit code grades nothing. The agreement with the official package on real
/// logs is `swebench::*`.
#[test]
fn swebench_grader_needs_every_listed_test_passed() {
    let tmp = temp_dir();
    let spec = tmp.path().join("spec.json");
    std::fs::write(
        &spec,
        r#"{"FAIL_TO_PASS": ["tests/t.py::test_new"], "PASS_TO_PASS": ["tests/t.py::test_old", "tests/t.py::test_p[a b]"]}"#,
    )
    .unwrap();
    let spec = spec.to_str().unwrap();
    let pytest = |new: &str| {
        format!(
            "===== short test summary info =====\nPASSED tests/t.py::test_old\nPASSED tests/t.py::test_p[a b]\n{new}\n"
        )
    };
    let cargo = |new: &str, p: &str| {
        format!(
            "test tests/t.py::test_new ... {new}\ntest tests/t.py::test_old ... ok\ntest tests/t.py::test_p[a b] ... {p}\n"
        )
    };
    let cases = [
        (
            "all pass",
            "+x",
            0,
            pytest("PASSED tests/t.py::test_new"),
            r#"{"passed": true, "score": 1.0}"#,
        ),
        (
            "no diff",
            "",
            0,
            pytest("PASSED tests/t.py::test_new"),
            r#"{"passed": false, "score": 1.0}"#,
        ),
        (
            "F2P failed",
            "+x",
            1,
            pytest("FAILED tests/t.py::test_new - assert 1 == 2"),
            r#"{"passed": false, "score": 0.6666666666666666}"#,
        ),
        (
            // pytest -rA reports a skip by location, not by id: the F2P test is not PASSED.
            "F2P skipped",
            "+x",
            0,
            pytest("SKIPPED [1] tests/t.py:10: not ready"),
            r#"{"passed": false, "score": 0.6666666666666666}"#,
        ),
        (
            "exit 1, nothing failed",
            "+x",
            1,
            pytest("PASSED tests/t.py::test_new"),
            r#"{"passed": false, "score": 1.0}"#,
        ),
        (
            "cargo test",
            "+x",
            0,
            cargo("ok", "ok"),
            r#"{"passed": true, "score": 1.0}"#,
        ),
        (
            "cargo P2P ignored",
            "+x",
            0,
            cargo("ok", "ignored"),
            r#"{"passed": true, "score": 1.0}"#,
        ),
        (
            "cargo F2P ignored",
            "+x",
            0,
            cargo("ignored", "ok"),
            r#"{"passed": false, "score": 0.6666666666666666}"#,
        ),
    ];
    for (name, diff, exit_code, output, verdict) in cases {
        let (code, last) = grade("swebench.py", &[spec], diff, exit_code, &output);
        assert_eq!(code, Some(0), "{name}");
        assert_eq!(last, verdict, "{name}");
    }
    // Cut output with a listed test missing: not a verdict, an error (the trial is not scored).
    let cut =
        "PASSED tests/t.py::test_old\n[... 123 bytes elided ...]\nPASSED tests/t.py::test_new\n";
    let (code, _) = grade("swebench.py", &[spec], "+x", 0, cut);
    assert_eq!(code, Some(3));
}

#[test]
fn reward_grader_reads_the_reward_line() {
    let cases = [
        (
            "DELTABENCH_REWARD=1",
            0,
            "+x",
            r#"{"passed": true, "score": 1.0}"#,
        ),
        (
            "DELTABENCH_REWARD=0.5",
            1,
            "+x",
            r#"{"passed": false, "score": 0.5}"#,
        ),
        (
            "DELTABENCH_REWARD=1",
            0,
            "",
            r#"{"passed": false, "score": 1.0}"#,
        ),
        (
            r#"DELTABENCH_REWARD_JSON={"reward": 1.0, "style": 0.2}"#,
            0,
            "+x",
            r#"{"passed": true, "score": 1.0}"#,
        ),
        (
            r#"DELTABENCH_REWARD_JSON={"a": 1, "b": 0}"#,
            1,
            "+x",
            r#"{"passed": false, "score": 0.5}"#,
        ),
        (
            "no reward file: the exit code decides",
            0,
            "+x",
            r#"{"passed": true, "score": 1.0}"#,
        ),
        (
            "no reward file: the exit code decides",
            1,
            "+x",
            r#"{"passed": false, "score": 0.0}"#,
        ),
    ];
    for (output, exit_code, diff, verdict) in cases {
        let (code, last) = grade("reward.py", &[], diff, exit_code, output);
        assert_eq!(code, Some(0), "{output}");
        assert_eq!(last, verdict, "{output}");
    }
    let (code, _) = grade("reward.py", &[], "+x", 0, "DELTABENCH_REWARD=lots");
    assert_eq!(
        code,
        Some(3),
        "an unreadable reward is an error, not a verdict"
    );
}

/// The reward grader scores the reward deltabench read from the reward folder (Harbor's rule is
/// `delta::reward`'s, unit-tested there), and only that: a forged `DELTABENCH_REWARD=1` line in
/// the output, a reward with a problem or no reward file never pass.
#[test]
fn the_reward_grader_scores_only_the_reward_deltabench_read() {
    let grade_read = |reward: serde_json::Value, output: &str| -> serde_json::Value {
        let input = serde_json::json!({
            "diff": "+x",
            "command_result": {"command": "t", "exit_code": 0, "timed_out": false, "output": output, "duration_ms": 1, "reward": reward},
        });
        let (code, verdict) = grade_input("reward.py", &[], &input);
        assert_eq!(code, Some(0), "{verdict}");
        serde_json::from_str(&verdict).unwrap()
    };
    let forged = "DELTABENCH_REWARD=1\nDELTABENCH_REWARD_JSON={\"reward\": 1}\n";
    for (reward, passed, score) in [
        (
            serde_json::json!({"value": 1.0, "from": "reward.txt"}),
            true,
            1.0,
        ),
        (
            serde_json::json!({"value": 0.5, "from": "reward.json"}),
            false,
            0.5,
        ),
        (
            serde_json::json!({"value": 0.0, "from": "reward.txt"}),
            false,
            0.0,
        ),
        (serde_json::json!({}), false, 0.0),
        (
            serde_json::json!({"value": 1.0, "problems": ["a process the test script did not start wrote it"]}),
            false,
            1.0,
        ),
    ] {
        let verdict = grade_read(reward.clone(), forged);
        assert_eq!(verdict["passed"], passed, "{reward}: {verdict}");
        assert_eq!(
            verdict["score"].as_f64(),
            Some(score),
            "{reward}: {verdict}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Harbor and Terminal-Bench

#[test]
fn harbor_end_to_end_with_skipped_and_built_tasks() {
    let tmp = temp_dir();
    let root = tmp.path();
    let source = fixtures().join("harbor");

    // Without --run-solutions the script is kept, but there is no reference patch yet. What
    // import prints (the skipped tasks, the note to rerun with --run-solutions, the validate to
    // run next), here and with --run-solutions: the snapshots `cli::import_harbor` and
    // `cli::import_harbor_run_solutions`.
    let output = import(
        root,
        &["harbor", source.to_str().unwrap(), "--out", "plain"],
    );
    assert_ok(&output, "import");
    assert!(root.join("plain/solutions/greet/solve.sh").is_file());
    assert!(
        !std::fs::read_to_string(root.join("plain/suite.yaml"))
            .unwrap()
            .contains("solution:")
    );

    let output = import(
        root,
        &[
            "harbor",
            source.to_str().unwrap(),
            "--out",
            "suite",
            "--run-solutions",
        ],
    );
    assert_ok(&output, "import --run-solutions");

    let suite = root.join("suite");
    let yaml = std::fs::read_to_string(suite.join("suite.yaml")).unwrap();
    for line in [
        // The test script runs as authored; deltabench reads the reward it writes.
        "verify: {run: \"TEST_DIR=/tests bash /tests/test.sh\", timeout: \"1m\", reward: \"/logs/verifier\"}",
        // Its Dockerfile only copies files, onto python:3.12-slim: it runs in that image, and
        // its solution script is its reference there.
        "solution_script: \"solutions/greet/solve.sh\"",
        "environment: {dockerfile: \"environments/greet/Dockerfile\", context: \"environments/greet\", workdir: \"/app\", cpus: 1, memory: \"512MiB\", delta: \"container\", verify_mounts: {\"/tests\": \".deltabench/tests\"}, solution_at: \"/solution\"}",
        "metric: {grader: \"./graders/reward.py\", timeout: \"60s\"}",
        "timeout: \"2m\"",
        "tags: [\"files\", \"trivial\"]",
    ] {
        assert!(yaml.contains(line), "{line} missing in:\n{yaml}");
    }
    // A task that runs in its container keeps its files as written: the workspace is at /app,
    // the tests at /tests.
    let instruction = std::fs::read_to_string(suite.join("instructions/greet.md")).unwrap();
    assert!(
        instruction.contains("The file /app/greeting.txt has a typo"),
        "{instruction}"
    );
    let test =
        std::fs::read_to_string(suite.join("tests/greet/.deltabench/tests/test.sh")).unwrap();
    assert_eq!(
        test,
        std::fs::read_to_string(source.join("greet/tests/test.sh")).unwrap()
    );
    // The RUN step is left to a build at run time (of ubuntu:24.04, so not run here).
    assert!(
        // `allow_internet = true`: its verify command gets the network (marked in reports).
        yaml.contains("environment: {dockerfile: \"environments/needs-apt/Dockerfile\", context: \"environments/needs-apt\", workdir: \"/app\", cpus: 2, memory: \"1024MiB\", delta: \"container\", verify_mounts: {\"/tests\": \".deltabench/tests\"}, solution_at: \"/solution\", verify_network: \"host\"}"),
        "{yaml}"
    );

    if !crate::environments::have_podman_image(
        "import::harbor_end_to_end_with_skipped_and_built_tasks",
    ) {
        return;
    }
    let from = format!("python:3.12-slim={}", crate::environments::BASE);
    assert_ok(
        &validate_with(root, &suite, &["--task", "greet", "--base-image", &from]),
        "validate",
    );
    let (output, records) = run(root, &suite, &["--task", "greet", "--base-image", &from]);
    assert_ok(&output, "run");
    assert_eq!(outcome(&records, "oracle"), "pass");
    assert_eq!(outcome(&records, "noop"), "fail");
}

/// Writes a Harbor task whose Dockerfile RUN step installs `only-here` (outside `/app`) and
/// COPYs `data.txt` into `/app`; its test needs the tool and its solution copies the data.
fn write_built_task(dir: &Path) {
    let dockerfile = format!(
        "FROM {}\nRUN printf '#!/bin/sh\\nexec cmp -s \"$1\" \"$2\"\\n' > /usr/local/bin/only-here \\\n && chmod 0755 /usr/local/bin/only-here\nWORKDIR /app\nCOPY data.txt /app/data.txt\n",
        crate::environments::BASE
    );
    write_files(
        dir,
        &[
            (
                "task.toml",
                "version = \"1.0\"\n[verifier]\ntimeout_sec = 120.0\n[agent]\ntimeout_sec = 60.0\n",
            ),
            ("instruction.md", "Copy /app/data.txt to /app/status.txt.\n"),
            ("environment/Dockerfile", &dockerfile),
            ("environment/data.txt", "ready\n"),
            (
                "tests/test.sh",
                "#!/bin/bash\nmkdir -p /logs/verifier\nif only-here /app/status.txt /app/data.txt; then\n  echo 1 > /logs/verifier/reward.txt\nelse\n  echo 0 > /logs/verifier/reward.txt\nfi\n",
            ),
            (
                "solution/solve.sh",
                "#!/bin/bash\ncp /app/data.txt /app/status.txt\n",
            ),
        ],
    );
}

/// A Harbor task whose solution needs its image (a tool only the image has, a file of its own
/// under /solution): the oracle runs `solve.sh` in the built image, as its authors run it, so it
/// validates without `--run-solutions`, and the trial's diff is the reference's.
#[test]
fn harbor_solution_runs_in_its_image() {
    if !crate::environments::have_podman_image("import::harbor_solution_runs_in_its_image") {
        return;
    }
    let tmp = temp_dir();
    let root = tmp.path();
    let task = root.join("tasks/needs-image");
    write_built_task(&task);
    write_files(
        &task,
        &[
            (
                "solution/solve.sh",
                "#!/bin/bash\nonly-here /app/data.txt /app/data.txt || exit 1\ncp /solution/status.txt /app/status.txt\n",
            ),
            ("solution/status.txt", "ready\n"),
        ],
    );
    let output = import(root, &["harbor", "tasks", "--out", "suite"]);
    assert_ok(&output, "import");
    let suite = root.join("suite");
    let yaml = std::fs::read_to_string(suite.join("suite.yaml")).unwrap();
    assert!(
        yaml.contains("    solution_script: \"solutions/needs-image/solve.sh\"\n")
            && !yaml.contains("    solution: "),
        "{yaml}"
    );
    assert!(
        !stdout(&output).contains("--run-solutions"),
        "{}",
        stdout(&output)
    );
    assert_ok(&validate(root, &suite), "validate");
    let (output, records) = run(root, &suite, &[]);
    assert_ok(&output, "run");
    assert_eq!(outcome(&records, "oracle"), "pass");
    assert_eq!(outcome(&records, "noop"), "fail");
    let patch = std::fs::read_to_string(root.join("run/trials/needs-image/oracle/1/diff.patch"))
        .unwrap_or_default();
    assert!(patch.contains("+++ b/status.txt"), "{patch}");
}

#[test]
fn harbor_task_with_a_run_step_runs_in_its_built_image() {
    if !crate::environments::have_podman_image("import::harbor_task_with_a_run_step") {
        return;
    }
    let tmp = temp_dir();
    let root = tmp.path();
    write_built_task(&root.join("tasks/only-here"));
    let output = import(
        root,
        &["harbor", "tasks", "--out", "suite", "--run-solutions"],
    );
    assert_ok(&output, "import");
    let text = stdout(&output);
    assert!(
        text.starts_with("imported 1 task (harbor) into suite\n") && !text.contains("skipped"),
        "{text}"
    );
    let suite = root.join("suite");
    let yaml = std::fs::read_to_string(suite.join("suite.yaml")).unwrap();
    assert!(
        yaml.contains("environment: {dockerfile: \"environments/only-here/Dockerfile\", context: \"environments/only-here\", workdir: \"/app\", delta: \"container\", verify_mounts: {\"/tests\": \".deltabench/tests\"}, solution_at: \"/solution\"}"),
        "{yaml}"
    );
    assert!(suite.join("environments/only-here/data.txt").is_file());
    // The COPYed file is still in the base: the workspace mounted over /app would hide it.
    let base = git(&suite.join("repo.git"), &["show", "only-here:data.txt"]);
    assert_eq!(base.trim(), "ready");

    assert_ok(&validate(root, &suite), "validate");
    let (output, records) = run(root, &suite, &[]);
    assert_ok(&output, "run");
    assert_eq!(outcome(&records, "oracle"), "pass");
    assert_eq!(outcome(&records, "noop"), "fail");
    // The tool is the image's alone: on this machine the test cannot pass.
    assert!(
        !Command::new("sh")
            .args(["-c", "command -v only-here"])
            .status()
            .unwrap()
            .success()
    );

    // A command agent and a real CLI (against the scripted endpoint) run inside the built image:
    // the command agent calls the image's tool, Claude Code writes at the workdir.
    let test = "import::harbor_task_with_a_run_step_runs_in_its_built_image";
    if !crate::environments::have_cli(test, deltabench::agent::harness::HarnessKind::ClaudeCode) {
        return;
    }
    write_files(
        root,
        &[
            (
                "model.yaml",
                "usage: {input_tokens: 1000, output_tokens: 20}\nsteps:\n  - text: I'll copy it.\n    write: {path: /app/status.txt, content: \"ready\\n\"}\n  - text: Done.\n",
            ),
            (
                "agents.yaml",
                "agents:\n  inside: {kind: command, run: \"only-here data.txt data.txt && cp data.txt status.txt\", timeout: 2m}\n  claude:\n    kind: claude-code\n    endpoint: scripted:model.yaml\n    model: claude-sonnet-4-5\n    network: host\n    env: {CLAUDE_CODE_MAX_RETRIES: '0'}\n",
            ),
        ],
    );
    let (output, records) = run(
        root,
        &suite,
        &[
            "--agents",
            "agents.yaml",
            "--agent",
            "inside",
            "--agent",
            "claude",
        ],
    );
    assert_ok(&output, "run with agents inside");
    assert_eq!(outcome(&records, "inside"), "pass", "{records:?}");
    assert_eq!(outcome(&records, "claude"), "pass", "{records:?}");
}

#[test]
fn harbor_unparseable_task_file_is_an_error_with_its_line_and_column() {
    let tmp = temp_dir();
    let source = fixtures().join("harbor-bad-toml");
    let output = import(
        tmp.path(),
        &["harbor", source.to_str().unwrap(), "--out", "suite"],
    );
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("broken/task.toml:2:15: extra `=`"),
        "{}",
        stderr(&output)
    );
}

#[test]
fn terminal_bench_end_to_end() {
    let tmp = temp_dir();
    let root = tmp.path();
    let source = fixtures().join("terminal-bench");
    let output = import(
        root,
        &[
            "terminal-bench",
            source.to_str().unwrap(),
            "--out",
            "tb",
            "--run-solutions",
        ],
    );
    assert_ok(&output, "import");
    let text = stdout(&output);
    assert!(
        text.starts_with("imported 1 task (terminal-bench) into tb\n"),
        "{text}"
    );
    assert!(
        text.contains("  two-containers: needs several containers (docker-compose.yaml starts [\"client\", \"server\"])"),
        "{text}"
    );
    let yaml = std::fs::read_to_string(root.join("tb/suite.yaml")).unwrap();
    assert!(yaml.contains("timeout: \"1m 30s\""), "{yaml}");
    assert!(yaml.contains("tags: [\"counting\"]"), "{yaml}");
    if !crate::environments::have_podman_image("import::terminal_bench_end_to_end") {
        return;
    }
    let from = format!(
        "ghcr.io/laude-institute/t-bench/python-3-13:20250620={}",
        crate::environments::BASE
    );
    assert_ok(
        &validate_with(root, &root.join("tb"), &["--base-image", &from]),
        "validate",
    );
}

/// Harbor's multi-step tasks (`steps/NAME/instruction.md`, no top-level instruction) are skipped
/// as such, with their steps, not as a task missing its instruction.
#[test]
fn harbor_multi_step_task_is_skipped_as_such() {
    let tmp = temp_dir();
    let root = tmp.path();
    write_files(
        &root.join("tasks/steps"),
        &[
            ("task.toml", "schema_version = \"1.1\"\n"),
            (
                "environment/Dockerfile",
                "FROM debian:bookworm\nWORKDIR /app\n",
            ),
            ("steps/scaffold/instruction.md", "Write greet.sh.\n"),
            ("steps/document/instruction.md", "Document it.\n"),
            ("steps/document/tests/test.sh", "#!/bin/bash\nexit 0\n"),
            ("tests/test.sh", "#!/bin/bash\nexit 0\n"),
        ],
    );
    let output = import(root, &["harbor", "tasks", "--out", "hb"]);
    let text = stdout(&output);
    assert!(
        text.contains(
            "  steps: a multi-step task (steps/ document, scaffold): deltabench gives a task one instruction\n"
        ),
        "{text}\n{}",
        stderr(&output)
    );
}

/// A `RUN` in the `WORKDIR` that writes only absolute paths outside it (`mkdir -p /tests`, every
/// aider-polyglot task's Dockerfile) changes nothing the workspace hides: import says nothing of
/// it. One that writes a relative path there is still said.
#[test]
fn terminal_bench_run_steps_outside_the_workdir_are_not_said() {
    let tmp = temp_dir();
    let root = tmp.path();
    write_files(
        &root.join("tasks/mkdir-tests"),
        &[
            ("task.yaml", "instruction: Write 1 to /app/out.txt.\n"),
            (
                "Dockerfile",
                "FROM debian:bookworm\nWORKDIR /app\nCOPY data.txt ./\nRUN mkdir -p /tests && echo x > /etc/x.conf\nRUN touch made.txt\nENV TEST_DIR=/tests\n",
            ),
            ("data.txt", "1\n"),
            ("run-tests.sh", "#!/bin/bash\ngrep -qx 1 /app/out.txt\n"),
            ("tests/check.txt", "1\n"),
            ("solution.sh", "#!/bin/bash\necho 1 > /app/out.txt\n"),
        ],
    );
    let output = import(root, &["terminal-bench", "tasks", "--out", "tb"]);
    assert_ok(&output, "import");
    let text = stdout(&output);
    assert!(
        text.contains("mkdir-tests: `RUN touch made.txt` changes files in WORKDIR /app"),
        "{text}"
    );
    assert!(!text.contains("RUN mkdir"), "{text}");
}

/// An answer shipped in the starting files (aider-polyglot's encrypted `.oracle/`, which its
/// `solution.sh` decrypts with a default password) is said at import: an agent can read it.
#[test]
fn an_answer_in_the_starting_files_is_said_at_import() {
    let tmp = temp_dir();
    let root = tmp.path();
    write_files(
        &root.join("tasks/leaky"),
        &[
            (
                "task.yaml",
                "instruction: Fix solver.py so that the tests pass.
",
            ),
            (
                "Dockerfile",
                "FROM debian:bookworm\nWORKDIR /app\nCOPY workspace/ ./\n",
            ),
            ("workspace/solver.py", "def solve():\n    return 0\n"),
            ("workspace/.oracle/solution.enc", "c2VjcmV0\n"),
            ("run-tests.sh", "#!/bin/bash\npython3 -m pytest $TEST_DIR\n"),
            (
                "tests/test_solver.py",
                "from solver import solve\n\ndef test():\n    assert solve() == 1\n",
            ),
            (
                "solution.sh",
                "#!/bin/bash\nAPP_DIR=${APP_DIR:-/app}\nopenssl enc -d -in $APP_DIR/.oracle/solution.enc -pass pass:x | tar -x -C $APP_DIR\n",
            ),
        ],
    );
    let output = import(root, &["terminal-bench", "tasks", "--out", "tb"]);
    assert_ok(&output, "import");
    let text = stdout(&output);
    assert!(
        text.contains("leaky: the starting files hold `.oracle`, which the solution script reads and the tests and instruction never name: an agent can read the answer there"),
        "{text}"
    );
    assert!(!text.contains("`solver.py`"), "{text}");
}

// ---------------------------------------------------------------------------------------------
// Exercism

#[test]
fn exercism_end_to_end_hides_tests_and_reference() {
    let tmp = temp_dir();
    let root = tmp.path();
    let source = fixtures().join("exercism");
    // What it prints (one task imported, the COBOL one and the one without an example
    // skipped, and why): the snapshot `cli::import_exercism`.
    let output = import(root, &["exercism", source.to_str().unwrap(), "--out", "ex"]);
    assert_ok(&output, "import");
    let ex = root.join("ex");
    assert!(ex.join("repo/leap/leap.py").is_file());
    assert!(
        !ex.join("repo/leap/leap_test.py").exists(),
        "tests are hidden"
    );
    assert!(
        !ex.join("repo/leap/.meta").exists(),
        "the reference is hidden"
    );
    assert!(ex.join("tests/leap/leap/leap_test.py").is_file());
    assert!(
        std::fs::read_to_string(ex.join("solutions/leap/leap/leap.py"))
            .unwrap()
            .contains("year % 400")
    );
    let instruction = std::fs::read_to_string(ex.join("instructions/leap.md")).unwrap();
    assert!(
        instruction.contains("Use only the standard library."),
        "{instruction}"
    );
    assert!(
        instruction.contains("write your solution in `leap/leap.py`"),
        "{instruction}"
    );

    assert_ok(&validate(root, &ex), "validate");
    let (output, records) = run(root, &ex, &[]);
    assert_ok(&output, "run");
    assert_eq!(outcome(&records, "oracle"), "pass");
    assert_eq!(outcome(&records, "noop"), "fail");
}

#[test]
fn exercism_unparseable_config_is_an_error_with_its_line() {
    let tmp = temp_dir();
    let source = fixtures().join("exercism-bad");
    let output = import(
        tmp.path(),
        &["exercism", source.to_str().unwrap(), "--out", "ex"],
    );
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("broken/.meta/config.json:4:3: trailing comma\n"),
        "{}",
        stderr(&output)
    );
}

// ---------------------------------------------------------------------------------------------
// A real row (slow, opt-in)

/// Imports one real Multi-SWE-bench row (tokio-rs/bytes) against a local clone and validates it.
/// Run on purpose (`--ignored`) with `$DELTABENCH_SWEBENCH_REPOS` holding `tokio-rs__bytes` (or
/// `tokio-rs/bytes`), `$DELTABENCH_SWEBENCH_ROWS` a Multi-SWE-bench JSONL file holding row
/// `tokio-rs__bytes-732`, and a Rust toolchain; `cargo test` of bytes takes minutes.
#[test]
#[ignore = "slow: builds a real crate; needs $DELTABENCH_SWEBENCH_REPOS and $DELTABENCH_SWEBENCH_ROWS"]
fn real_multi_swe_bench_row_validates() {
    let var = |name: &str| {
        std::env::var_os(name).unwrap_or_else(|| panic!("${name} is not set: see this test's doc"))
    };
    let repos = var("DELTABENCH_SWEBENCH_REPOS");
    let data = PathBuf::from(var("DELTABENCH_SWEBENCH_ROWS"));
    let rows = std::fs::read_to_string(&data)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", data.display()));
    let row = rows
        .lines()
        .find(|line| line.contains("\"instance_id\": \"tokio-rs__bytes-732\""))
        .expect("row tokio-rs__bytes-732");
    let tmp = temp_dir();
    let root = tmp.path();
    std::fs::write(root.join("row.jsonl"), format!("{row}\n")).unwrap();
    let output = deltabench(root)
        .args([
            "import",
            "swebench",
            "row.jsonl",
            "--out",
            "suite",
            "--repos",
        ])
        .arg(&repos)
        .output()
        .unwrap();
    assert_ok(&output, "import");
    assert_ok(&validate(root, &root.join("suite")), "validate");
}

/// A verify output far longer than the head and tail kept in memory: the grader reads the
/// full log, so a listed test in the middle is still found and the trial is scored.
#[test]
fn swebench_grader_reads_the_full_verify_log() {
    let tmp = temp_dir();
    let root = tmp.path();
    crate::common::git_repo(root, &[("a.txt", "a\n")]);
    let grader = Path::new(env!("CARGO_MANIFEST_DIR")).join("graders/swebench.py");
    write_files(
        root,
        &[
            (
                "spec.json",
                r#"{"FAIL_TO_PASS": ["tests/t.py::test_middle"], "PASS_TO_PASS": []}"#,
            ),
            (
                "suite.yaml",
                &format!(
                    "name: long
repo: repo
tasks:
  - id: long
    base: main
    instruction: Change a.txt.
    # 200k lines of filler with the listed test in the middle: about 6 MB.
    verify: >-
      seq 100000 | sed 's/^/PASSED tests\\/filler.py::test_/';
      echo 'PASSED tests/t.py::test_middle';
      seq 100000 | sed 's/^/PASSED tests\\/more.py::test_/'
    metric: {{grader: 'python3 {} spec.json'}}
agents:
  editor:
    kind: command
    run: echo b > a.txt
",
                    grader.display()
                ),
            ),
        ],
    );
    let (output, records) = run(root, &root.join("suite.yaml"), &["--agent", "editor"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(records[0]["outcome"], "pass", "{:#}", records[0]);
}

/// Output the tested code prints can hold a bare `FAIL:` or `ERROR:` line (Django's parser
/// reads them as test names): the grader grades the trial instead of crashing, which would
/// leave a failed trial unscored.
#[test]
fn swebench_grader_survives_bare_fail_lines_in_a_django_log() {
    let tmp = temp_dir();
    let spec = tmp.path().join("spec.json");
    std::fs::write(
        &spec,
        r#"{"repo": "django/django", "FAIL_TO_PASS": ["test_new (app.tests.T)"], "PASS_TO_PASS": []}"#,
    )
    .unwrap();
    let log = "test_new (app.tests.T) ... FAIL\nFAIL:\nERROR:\n";
    let (code, last) = grade("swebench.py", &[spec.to_str().unwrap()], "+x", 1, log);
    assert_eq!(code, Some(0), "{last}");
    assert_eq!(last, r#"{"passed": false, "score": 0.0}"#);
}
