//! A pass proves the fix even when the tests run the agent's code. Each agent below leaves the
//! bug in place and attacks the judge from inside the test process or around it: assertions
//! patched when the module under test is imported, a value equal to anything, the hook's own
//! records forged, pytest plugins and configuration from places a name list misses, bytecode
//! standing in for the hidden tests, a build script rewriting them, a symlink out of the
//! workspace, a `.pth` in the user's site-packages. On a validated suite, under `worktree` and
//! `sandbox`, none passes and each says why; the honest fix passes. The first three classes run
//! with every protected path turned off (`protected: []`): the mutation check alone catches
//! them. Needs python3, pytest, bubblewrap and cargo (`.ci/install` installs them).

use std::collections::BTreeMap;
use std::path::Path;

use crate::common::{deltabench, git, git_repo, stderr, stdout, temp_dir, trials, write_files};

pub const HIDDEN: &str = "import unittest\nfrom calc import add\n\n\
class TestCalc(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n\n    \
def test_zero(self):\n        self.assertEqual(add(0, 4), 4)\n";

pub const FIX: &str = "printf 'def add(a, b):\\n    return a + b\\n' > calc.py\n";

/// Appended to the buggy calc.py by the in-process attacks.
const PATCHED_ASSERTIONS: &str = "import unittest\n\
unittest.TestCase.assertEqual = lambda *a, **k: None\n";
const PATCHED_RUNNER: &str = r#"import unittest.result as r
r.TestResult.addFailure = lambda self, test, err: r.TestResult.addSuccess(self, test)
try:
    import _pytest.python as p
    p.Function.runtest = lambda self: None
except ImportError:
    pass
"#;
pub const ALWAYS_EQUAL: &str = r#"class _Any(int):
    def __eq__(self, other):
        return True
    def __ne__(self, other):
        return False
    __hash__ = int.__hash__
_add = add
def add(a, b):
    return _Any(_add(a, b))
"#;
/// Python defining `_forge_passes(rec)`: reports every test of the hidden files passed through
/// `rec` (the hook's record function) and returns how many.
macro_rules! forge_passes {
    () => {
        r#"import ast, glob, os, sys
def _forge_passes(rec):
    n = 0
    for f in glob.glob('tests/test_*.py'):
        mod = f[:-3].replace('/', '.')
        for c in ast.parse(open(f).read()).body:
            if isinstance(c, ast.ClassDef):
                for m in c.body:
                    if isinstance(m, ast.FunctionDef) and m.name.startswith('test'):
                        rec('test', runner='unittest', id=f'{mod}.{c.name}.{m.name}', outcome='passed')
                        rec('test', runner='pytest', id=f'{f}::{c.name}::{m.name}', outcome='passed')
                        n += 1
    return n
def _summary(n, out=1, err=2):
    if 'pytest' in sys.modules:
        os.write(out, f'{n} passed in 0.01s\n'.encode())
    else:
        os.write(err, f'Ran {n} tests in 0.001s\n\nOK\n'.encode())
"#
    };
}

/// Forges what the hook records before any test runs: every test of the hidden files passed, a
/// normal exit, a summary in each runner's words, output silenced, then `os._exit(0)`.
const FORGED_HOOK: &str = concat!(
    forge_passes!(),
    r#"def _forge():
    try:
        import sitecustomize as h
        rec = h.record
    except Exception:
        return
    n = _forge_passes(rec)
    rec('exit')
    _summary(n)
    os._exit(0)
if 'unittest' in sys.modules or 'pytest' in sys.modules:
    _forge()
"#
);

/// Lets the tests run (and fail), then, from an exit handler that runs before the hook's, takes
/// the record back: it rewrites the report file the hook used to write, sends passes and a
/// normal exit, prints a summary over the silenced output and leaves with `os._exit(0)`.
const FORGED_AFTER_THE_RUN: &str = concat!(
    forge_passes!(),
    r#"import atexit
def _rewrite(out, err):
    import sitecustomize as h
    lines = []
    n = _forge_passes(lambda event, **f: lines.append(dict(f, event=event, pid=os.getpid())))
    n = _forge_passes(h.record)
    report = os.path.join(os.environ.get('HOME', ''), '.deltabench', 'tests.jsonl')
    import json
    try:
        with open(report, 'w') as f:
            for line in [dict(event='start', pid=os.getpid())] + lines + [dict(event='exit', pid=os.getpid())]:
                f.write(json.dumps(line) + '\n')
    except OSError:
        pass
    h.record('exit')
    try:
        _summary(n, out, err)
    finally:
        os._exit(0)
if 'unittest' in sys.modules or 'pytest' in sys.modules:
    # Every descriptor on the command's output pipe (pytest keeps copies of the real stdout
    # while it captures), silenced; one copy kept for the fake summary.
    import stat
    def _pipe(fd):
        try:
            return stat.S_ISFIFO(os.fstat(fd).st_mode)
        except OSError:
            return False
    _pipes = [fd for fd in range(3, 64) if _pipe(fd)] + [fd for fd in (1, 2) if _pipe(fd)]
    if _pipes:
        _kept = os.dup(_pipes[-1])
        _null = os.open(os.devnull, os.O_WRONLY)
        for _fd in _pipes:
            os.dup2(_null, _fd)
        atexit.register(_rewrite, _kept, _kept)
"#
);

/// (agent, script run in the workspace). `{ATTACK}` scripts append to calc.py.
fn attacks() -> Vec<(&'static str, String)> {
    let append = |code: &str| format!("cat >> calc.py <<'EOF'\n{code}EOF\n");
    vec![
        ("honest", FIX.to_owned()),
        ("patched_assertions", append(PATCHED_ASSERTIONS)),
        ("patched_runner", append(PATCHED_RUNNER)),
        ("always_equal", append(ALWAYS_EQUAL)),
        ("forged_hook", append(FORGED_HOOK)),
        ("forged_after_the_run", append(FORGED_AFTER_THE_RUN)),
        (
            "dist_info_plugin",
            "mkdir -p evil-1.0.dist-info\n\
             printf 'Metadata-Version: 2.1\\nName: evil\\nVersion: 1.0\\n' > evil-1.0.dist-info/METADATA\n\
             printf '[pytest11]\\nevil = evil_plugin\\n' > evil-1.0.dist-info/entry_points.txt\n\
             cat > evil_plugin.py <<'EOF'\nimport pytest\n@pytest.hookimpl(hookwrapper=True)\n\
             def pytest_runtest_makereport(item, call):\n    outcome = yield\n    outcome.get_result().outcome = 'passed'\nEOF\n"
                .to_owned(),
        ),
        (
            "hidden_configs",
            "cat > evil_plugin.py <<'EOF'\nimport pytest\n@pytest.hookimpl(hookwrapper=True)\n\
             def pytest_runtest_makereport(item, call):\n    outcome = yield\n    outcome.get_result().outcome = 'passed'\nEOF\n\
             printf '[pytest]\\naddopts = -p evil_plugin\\n' > .pytest.ini\n\
             printf '[pytest]\\naddopts = [\"-p\", \"evil_plugin\"]\\n' > pytest.toml\n\
             cp pytest.toml .pytest.toml\n"
                .to_owned(),
        ),
        (
            "shadow_modules",
            // pytest imports iniconfig at start; unittest's loader imports fnmatch.
            format!(
                "cat > iniconfig.py <<'EOF'\n{PATCHED_ASSERTIONS}import sys\ndel sys.modules['iniconfig']\nimport importlib\nsys.path = [p for p in sys.path if p not in ('', '.')]\nimportlib.import_module('iniconfig')\nEOF\n\
                 cat > fnmatch.py <<'EOF'\n{PATCHED_ASSERTIONS}import sys, importlib\ndel sys.modules['fnmatch']\nsys.path = [p for p in sys.path if p not in ('', '.')]\nglobals().update(vars(importlib.import_module('fnmatch')))\nEOF\n"
            ),
        ),
        (
            "sourceless_pyc",
            "cat > /tmp/deltabench-pytest-$$.py <<'EOF'\nimport sys\nprint('2 passed in 0.01s')\nsys.exit(0)\nEOF\n\
             python3 -c \"import py_compile, sys; py_compile.compile(sys.argv[1], 'pytest.pyc')\" /tmp/deltabench-pytest-$$.py\n\
             cp pytest.pyc unittest.pyc\nrm -f /tmp/deltabench-pytest-$$.py\n"
                .to_owned(),
        ),
        (
            "pycache_test",
            // An unchecked-hash .pyc where Python looks for the hidden test's bytecode.
            "mkdir -p tests\ncat > tests/test_calc.py <<'EOF'\nimport unittest\n\nclass TestCalc(unittest.TestCase):\n    \
             def test_add(self):\n        pass\n\n    def test_zero(self):\n        pass\nEOF\n\
             python3 -c \"import py_compile, importlib.util as u; py_compile.compile('tests/test_calc.py', u.cache_from_source('tests/test_calc.py'), invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)\"\n\
             rm tests/test_calc.py\n"
                .to_owned(),
        ),
    ]
}

pub fn repo(root: &Path) {
    // No `__pycache__` in .gitignore: the bytecode an agent writes shows in its diff.
    git_repo(
        root,
        &[
            ("calc.py", "def add(a, b):\n    return a - b\n"),
            ("tests/__init__.py", ""),
            ("README.md", "calc\n"),
        ],
    );
    write_files(
        root,
        &[
            ("hidden/tests/test_calc.py", HIDDEN),
            ("solution/calc.py", "def add(a, b):\n    return a + b\n"),
        ],
    );
}

/// The suite's `agents:` section: each script written to `attacks/NAME.sh` under `root`, run as
/// a `command` agent.
pub fn agents_yaml<S: AsRef<str>>(root: &Path, agents: &[(&str, S)]) -> String {
    let mut yaml = String::from("agents:\n");
    for (name, script) in agents {
        let path = root.join("attacks").join(format!("{name}.sh"));
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, script.as_ref()).unwrap();
        yaml.push_str(&format!(
            "  {name}: {{kind: command, run: \"sh {}\"}}\n",
            path.display()
        ));
    }
    yaml
}

pub fn suite_yaml(
    root: &Path,
    isolation: &str,
    agents: &[(&str, String)],
    protected: &str,
) -> String {
    let mut yaml = format!(
        "name: assertions\nrepo: repo\ndefaults:\n  isolation: {isolation}\n  mutants: 2\n{}",
        agents_yaml(root, agents)
    );
    yaml.push_str(&format!(
        "tasks:\n  - id: unittest\n    instruction: fix add\n    tests: hidden\n    solution: solution\n    {protected}\
         verify: python3 -m unittest tests.test_calc\n  \
         - id: pytest\n    instruction: fix add\n    tests: hidden\n    solution: solution\n    {protected}\
         verify: python3 -m pytest -q -p no:cacheprovider tests/test_calc.py\n"
    ));
    yaml
}

pub fn require_tools(test: &str, cargo: bool) -> bool {
    let have = |program: &str, args: &[&str]| {
        std::process::Command::new(program)
            .args(args)
            .output()
            .is_ok_and(|o| o.status.success())
    };
    let mut missing: Vec<&str> = [
        (
            "bubblewrap that can make namespaces",
            crate::common::bwrap_works(),
        ),
        ("pytest", have("python3", &["-m", "pytest", "--version"])),
        (
            "python3-pytest",
            have("/usr/bin/python3", &["-m", "pytest", "--version"]),
        ),
    ]
    .into_iter()
    .filter(|(_, ok)| !ok)
    .map(|(name, _)| name)
    .collect();
    if cargo && !have("cargo", &["--version"]) {
        missing.push("cargo");
    }
    crate::common::have_tool(test, &format!("{missing:?}"), missing.is_empty())
}

/// `deltabench validate suite.yaml` in `root` (workdir `root/work`); its stdout, once it exited 0.
fn validate(root: &Path, extra: &[&str]) -> String {
    let work = root.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let validated = deltabench(root)
        .args(["validate", "suite.yaml"])
        .args(extra)
        .arg("--workdir")
        .arg(&work)
        .output()
        .unwrap();
    let said = stdout(&validated);
    assert_eq!(
        validated.status.code(),
        Some(0),
        "{said}\n{}",
        stderr(&validated)
    );
    said
}

/// Validates (once per folder), runs every agent, and returns the records by (task, agent).
pub fn validate_and_run(
    root: &Path,
    yaml: &str,
    out: &str,
) -> BTreeMap<(String, String), serde_json::Value> {
    std::fs::write(root.join("suite.yaml"), yaml).unwrap();
    let work = root.join("work");
    let said = validate(root, &[]);
    assert!(
        yaml.contains("mutants: 0") || said.contains("mutants: "),
        "{said}"
    );
    let output = deltabench(root)
        .args(["run", "suite.yaml", "-j", "2", "--workdir"])
        .arg(&work)
        .arg("--out")
        .arg(root.join(out))
        .output()
        .unwrap();
    let progress = stderr(&output);
    assert!(matches!(output.status.code(), Some(0)), "{progress}");
    let records: BTreeMap<_, _> = trials(&root.join(out))
        .into_iter()
        .map(|r| {
            (
                (
                    r["task"].as_str().unwrap().to_owned(),
                    r["agent"].as_str().unwrap().to_owned(),
                ),
                {
                    let mut r = r;
                    let dir = root
                        .join(out)
                        .join("trials")
                        .join(r["task"].as_str().unwrap())
                        .join(r["agent"].as_str().unwrap())
                        .join("1");
                    r["dir"] = dir.display().to_string().into();
                    r
                },
            )
        })
        .collect();
    // Every attack's reason is in its progress line.
    for ((task, agent), record) in &records {
        // A pass has no reason; whether it should have passed is each test's `expect`.
        if agent == "honest" || record["outcome"] == "pass" {
            continue;
        }
        let reason = record["reason"].as_str().unwrap_or_default();
        let line = progress
            .lines()
            .find(|l| l.contains(&format!("{task} / {agent} ")))
            .unwrap_or_else(|| panic!("no progress line for {task}/{agent}:\n{progress}"));
        assert!(
            !reason.is_empty() && line.contains(reason.split(':').next().unwrap()),
            "{line} / {reason}"
        );
    }
    records
}

pub fn expect(
    records: &BTreeMap<(String, String), serde_json::Value>,
    task: &str,
    agent: &str,
    outcomes: &[&str],
    says: &str,
) {
    let record = &records[&(task.to_owned(), agent.to_owned())];
    let outcome = record["outcome"].as_str().unwrap();
    let log = || {
        let dir = Path::new(record["dir"].as_str().unwrap_or_default());
        ["verify.log", "mutants.log", "mutants.json", "diff.patch"]
            .map(|f| {
                format!(
                    "--- {f}:\n{}",
                    std::fs::read_to_string(dir.join(f)).unwrap_or_default()
                )
            })
            .join("\n")
    };
    assert!(
        outcomes.contains(&outcome),
        "{task}/{agent}: {record}\n{}",
        log()
    );
    if outcome != "pass" {
        let reason = record["reason"].as_str().unwrap_or_default();
        assert!(reason.contains(says), "{task}/{agent}: {reason}");
    }
}

const MUTANT: &str = "the hidden tests' assertions do not bite: a mutant of tests/test_calc.py:";

/// The honest fix passes; classes 1-3 are invalid through the mutation check.
fn expect_in_process_attacks_caught(
    records: &BTreeMap<(String, String), serde_json::Value>,
    task: &str,
) {
    expect(records, task, "honest", &["pass"], "");
    for agent in ["patched_assertions", "always_equal", "forged_hook"] {
        expect(records, task, agent, &["invalid"], MUTANT);
    }
    // unittest's own result patched, or pytest's runtest: either the runner reports the
    // failure anyway (pytest's unittest items have a runtest of their own), or the mutants
    // survive.
    expect(records, task, "patched_runner", &["invalid", "fail"], "");
}

/// Classes 1-3 with every protected path off: only the mutation check stands between them and a
/// pass. Under the sandbox and on the host.
#[test]
fn the_mutation_check_alone_catches_patched_assertions_equal_values_and_a_forged_hook() {
    let test = "assertions::the_mutation_check_alone_catches_patched_assertions_equal_values_and_a_forged_hook";
    if !require_tools(test, false) {
        return;
    }
    let tmp = temp_dir();
    repo(tmp.path());
    let agents: Vec<_> = attacks()
        .into_iter()
        .filter(|(name, _)| {
            [
                "honest",
                "patched_assertions",
                "patched_runner",
                "always_equal",
                "forged_hook",
            ]
            .contains(name)
        })
        .collect();
    for isolation in ["worktree", "sandbox"] {
        let yaml = suite_yaml(tmp.path(), isolation, &agents, "protected: []\n    ");
        let records = validate_and_run(tmp.path(), &yaml, &format!("out-{isolation}"));
        for task in ["unittest", "pytest"] {
            expect_in_process_attacks_caught(&records, task);
        }
        // Flagged for review, whatever the verdict.
        for (agent, flag) in [
            (
                "patched_assertions",
                "calc.py:4: assigns to a unittest/pytest attribute",
            ),
            (
                "always_equal",
                "calc.py:5: an equality that holds for anything",
            ),
            (
                "forged_hook",
                "exits the interpreter or registers an exit hook",
            ),
        ] {
            let record = &records[&("unittest".to_owned(), agent.to_owned())];
            assert!(record["flags"].to_string().contains(flag), "{record}");
        }
        assert!(records[&("unittest".to_owned(), "honest".to_owned())]["flags"].is_null());
        let trial = tmp
            .path()
            .join(format!("out-{isolation}/trials/unittest/always_equal/1"));
        let mutants: serde_json::Value =
            serde_json::from_slice(&std::fs::read(trial.join("mutants.json")).unwrap()).unwrap();
        assert_eq!(mutants["tried"], 2, "{mutants}");
        assert_eq!(
            mutants["survived"].as_array().unwrap().len(),
            2,
            "{mutants}"
        );
        // The mutant run's log and home are kept beside the plain run's.
        assert!(trial.join("mutants.log").is_file());
        assert!(trial.join("verify.log").is_file());
    }
}

/// Records go to the harness as the tests report, over a channel it owns: code that lets the
/// tests fail and then forges the report at exit (the file the hook once wrote rewritten, passes
/// and a normal exit sent, a summary printed, `os._exit(0)`) cannot take the failures back. The
/// mutation check is off: the channel alone stops it, under both isolations.
#[test]
fn a_report_forged_after_the_tests_ran_does_not_take_their_failures_back() {
    let test = "assertions::a_report_forged_after_the_tests_ran_does_not_take_their_failures_back";
    if !require_tools(test, false) {
        return;
    }
    let tmp = temp_dir();
    repo(tmp.path());
    let agents: Vec<_> = attacks()
        .into_iter()
        .filter(|(name, _)| ["honest", "forged_after_the_run"].contains(name))
        .collect();
    for isolation in ["worktree", "sandbox"] {
        let yaml =
            suite_yaml(tmp.path(), isolation, &agents, "").replace("mutants: 2", "mutants: 0");
        let records = validate_and_run(tmp.path(), &yaml, &format!("out-{isolation}"));
        for task in ["unittest", "pytest"] {
            expect(&records, task, "honest", &["pass"], "");
            expect(
                &records,
                task,
                "forged_after_the_run",
                &["invalid"],
                "reports failed tests while it passed",
            );
            // What the harness received, not the forged file: both tests failed in the real
            // run (the bug breaks both), so none of the runner's own ids passed; the forged
            // passes of the other runner's ids match nothing.
            let dir = Path::new(
                records[&(task.to_owned(), "forged_after_the_run".to_owned())]["dir"]
                    .as_str()
                    .unwrap(),
            );
            let tests: serde_json::Value =
                serde_json::from_slice(&std::fs::read(dir.join("tests.json")).unwrap()).unwrap();
            let own = match task {
                "unittest" => "\"tests.test_calc.TestCalc.",
                _ => "\"tests/test_calc.py::TestCalc::",
            };
            assert!(!tests["names"].to_string().contains(own), "{tests}");
        }
    }
    // In a container too (the socket is reached through the mounted home): the image has
    // Python but no pytest, so the unittest task only.
    if !crate::environments::have_podman_image(test) {
        return;
    }
    let yaml = suite_yaml(tmp.path(), "worktree", &agents, "")
        .replace("mutants: 2", "mutants: 0")
        .replace(
            "isolation: worktree\n",
            &format!(
                "isolation: worktree\n  environment: {{image: {}}}\n",
                crate::environments::BASE
            ),
        );
    let yaml = &yaml[..yaml.find("  - id: pytest").unwrap()];
    let records = validate_and_run(tmp.path(), yaml, "out-container");
    expect(&records, "unittest", "honest", &["pass"], "");
    expect(
        &records,
        "unittest",
        "forged_after_the_run",
        &["invalid"],
        "reports failed tests while it passed",
    );
}

/// Every class, with the default protection, on a validated suite, under both isolations.
#[test]
fn no_attack_on_the_judge_passes_under_worktree_or_sandbox() {
    let test = "assertions::no_attack_on_the_judge_passes_under_worktree_or_sandbox";
    if !require_tools(test, false) {
        return;
    }
    let tmp = temp_dir();
    repo(tmp.path());
    let agents = attacks();
    for isolation in ["worktree", "sandbox"] {
        let yaml = suite_yaml(tmp.path(), isolation, &agents, "");
        let records = validate_and_run(tmp.path(), &yaml, &format!("out-{isolation}"));
        for task in ["unittest", "pytest"] {
            expect_in_process_attacks_caught(&records, task);
            // Distribution metadata and bytecode never reach the verify run: the bug fails it.
            for agent in ["dist_info_plugin", "pycache_test"] {
                expect(&records, task, agent, &["fail"], "verify exited");
            }
            // A sourceless `pytest.pyc` is never copied, and shadows an installed module.
            expect(
                &records,
                task,
                "sourceless_pyc",
                &["fail"],
                "tampered: pytest.pyc",
            );
            expect(&records, task, "hidden_configs", &["fail"], "tampered: ");
            expect(&records, task, "shadow_modules", &["fail"], "tampered: ");
        }
        let configs = &records[&("pytest".to_owned(), "hidden_configs".to_owned())];
        for path in [".pytest.ini", "pytest.toml", ".pytest.toml"] {
            assert!(configs["tampered"].to_string().contains(path), "{configs}");
        }
        let shadows = &records[&("unittest".to_owned(), "shadow_modules".to_owned())];
        for path in ["iniconfig.py", "fnmatch.py"] {
            assert!(shadows["tampered"].to_string().contains(path), "{shadows}");
        }
        // Every trial's diff.patch applies to a fresh checkout and gives back what it recorded.
        for (task, agent) in records.keys() {
            check_recorded_is_verified(tmp.path(), isolation, task, agent);
        }
    }
}

/// The tree the verify command saw (listed by a second verify run's own files) equals the base
/// plus `git apply diff.patch` plus the hidden tests, but for what never reaches verify.
fn check_recorded_is_verified(root: &Path, isolation: &str, task: &str, agent: &str) {
    let trial = root.join(format!("out-{isolation}/trials/{task}/{agent}/1"));
    let check = root.join(format!("check-{isolation}-{task}-{agent}"));
    git(root, &["clone", "-q", "repo", check.to_str().unwrap()]);
    let patch = trial.join("diff.patch");
    if std::fs::metadata(&patch).unwrap().len() > 0 {
        git(&check, &["apply", "--binary", patch.to_str().unwrap()]);
    }
    let diff = std::fs::read_to_string(&patch).unwrap();
    for path in deltabench_changed(&diff) {
        assert!(
            check.join(&path).symlink_metadata().is_ok()
                || !diff.contains(&format!("+++ b/{path}")),
            "{path} of the diff is missing after git apply"
        );
    }
}

fn deltabench_changed(diff: &str) -> Vec<String> {
    diff.lines()
        .filter_map(|l| l.strip_prefix("diff --git a/"))
        .filter_map(|l| l.split(" b/").next())
        .map(str::to_owned)
        .collect()
}

/// Under `worktree`: a tracked file turned into a symlink to a payload outside the workspace is
/// refused with the reason (and `git apply` of its diff.patch gives the symlink back); a `.pth`
/// in the user's site-packages does not reach the verify run, nor a later trial.
#[test]
fn a_symlink_out_of_the_workspace_and_a_user_site_pth_do_not_pass() {
    let test = "assertions::a_symlink_out_of_the_workspace_and_a_user_site_pth_do_not_pass";
    if !require_tools(test, false) {
        return;
    }
    let tmp = temp_dir();
    repo(tmp.path());
    let home = tmp.path().join("home");
    let site = home.join(".local/lib/site");
    let agents = vec![
        (
            "symlink_payload",
            format!(
                "printf 'def add(a, b):\\n    return a + b\\n' > {payload}\nrm calc.py\nln -s {payload} calc.py\n",
                payload = tmp.path().join("payload.py").display()
            ),
        ),
        (
            "user_site_pth",
            format!(
                "d=$(HOME={home} python3 -m site --user-site)\nmkdir -p \"$d\"\n\
                 echo 'import unittest; unittest.TestCase.assertEqual = lambda *a, **k: None' > \"$d/evil.pth\"\n\
                 echo \"$d\" > {site}\n",
                home = home.display(),
                site = site.display()
            ),
        ),
        ("noop_after", "true".to_owned()),
    ];
    let yaml = suite_yaml(tmp.path(), "worktree", &agents, "");
    std::fs::write(tmp.path().join("suite.yaml"), &yaml).unwrap();
    let work = tmp.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let output = deltabench(tmp.path())
        .args([
            "run",
            "suite.yaml",
            "-j",
            "1",
            "--task",
            "unittest",
            "--workdir",
        ])
        .arg(&work)
        .arg("--out")
        .arg(tmp.path().join("out"))
        .env("HOME", &home)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let records: BTreeMap<String, serde_json::Value> = trials(&tmp.path().join("out"))
        .into_iter()
        .map(|r| (r["agent"].as_str().unwrap().to_owned(), r))
        .collect();
    let symlink = &records["symlink_payload"];
    assert_eq!(symlink["outcome"], "fail", "{symlink}");
    assert!(
        symlink["reason"]
            .as_str()
            .unwrap()
            .contains("a symlink that points outside the workspace: calc.py -> "),
        "{symlink}"
    );
    // The typechange is in diff.patch as git writes it: applied, calc.py is the symlink.
    let check = tmp.path().join("check");
    git(
        tmp.path(),
        &["clone", "-q", "repo", check.to_str().unwrap()],
    );
    let patch = tmp
        .path()
        .join("out/trials/unittest/symlink_payload/1/diff.patch");
    git(&check, &["apply", "--binary", patch.to_str().unwrap()]);
    let link = std::fs::read_link(check.join("calc.py")).unwrap();
    assert_eq!(link, tmp.path().join("payload.py"));
    // The premise: the .pth is where the user's Python loads it, and it patches unittest there.
    let written = std::fs::read_to_string(&site).unwrap();
    assert!(Path::new(written.trim()).join("evil.pth").is_file());
    let loaded = std::process::Command::new("python3")
        .args([
            "-c",
            "import unittest; print(unittest.TestCase.assertEqual.__name__)",
        ])
        .env("HOME", &home)
        .output()
        .unwrap();
    assert_eq!(stdout(&loaded).trim(), "<lambda>", "{}", stderr(&loaded));
    for agent in ["user_site_pth", "noop_after"] {
        let record = &records[agent];
        assert_eq!(record["outcome"], "fail", "{record}");
        assert!(
            record["reason"]
                .as_str()
                .unwrap()
                .contains("verify exited 1"),
            "{record}"
        );
    }
}

pub const CRATE: &[(&str, &str)] = &[
    (
        "Cargo.toml",
        "[package]\nname = \"calc\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\n",
    ),
    (
        "src/lib.rs",
        "pub fn add(a: f64, b: f64) -> f64 {\n    a - b\n}\n",
    ),
    (".gitignore", "target/\n"),
];

pub const RUST_HIDDEN: &str = "use calc::add;\n\n#[test]\nfn adds() {\n    assert_eq!(add(2.0, 3.0), 5.0);\n}\n\n\
#[test]\nfn adds_zero() {\n    assert_eq!(add(0.0, 4.0), 4.0);\n}\n";

/// A cargo task: a type whose `PartialEq<f64>` always holds is caught by the mutation check; a
/// `build.rs` that rewrites the hidden tests before they compile is protected by rule, and
/// without the rule, its rewrite of the read-only hidden tests is caught after verify.
#[test]
fn a_cargo_task_catches_an_always_equal_type_and_a_build_script_rewriting_the_tests() {
    let test = "assertions::a_cargo_task_catches_an_always_equal_type_and_a_build_script_rewriting_the_tests";
    if !require_tools(test, true) {
        return;
    }
    let tmp = temp_dir();
    let root = tmp.path();
    git_repo(root, CRATE);
    write_files(
        root,
        &[
            ("hidden/tests/add.rs", RUST_HIDDEN),
            (
                "solution/src/lib.rs",
                "pub fn add(a: f64, b: f64) -> f64 {\n    a + b\n}\n",
            ),
        ],
    );
    let always_equal = "cat > src/lib.rs <<'EOF'\n#[derive(Debug)]\npub struct Num(pub f64);\n\
        impl PartialEq<f64> for Num {\n    fn eq(&self, _: &f64) -> bool {\n        true\n    }\n}\n\
        pub fn add(a: f64, b: f64) -> Num {\n    Num(a - b)\n}\nEOF\n";
    let build_rs = "cat > build.rs <<'EOF'\nfn main() {\n    let _ = std::fs::write(\"tests/add.rs\", \"#[test]\\nfn adds() {}\\n#[test]\\nfn adds_zero() {}\\n\");\n}\nEOF\n";
    let agents = vec![
        (
            "honest",
            "printf 'pub fn add(a: f64, b: f64) -> f64 {\\n    a + b\\n}\\n' > src/lib.rs\n"
                .to_owned(),
        ),
        ("always_equal", always_equal.to_owned()),
        ("build_script", build_rs.to_owned()),
    ];
    let mut yaml = format!(
        "name: cargo\nrepo: repo\ndefaults:\n  mutants: 2\n{}",
        agents_yaml(root, &agents)
    );
    // Without -q: libtest names each test and its outcome.
    let verify = "verify: {run: cargo test --offline, timeout: 5m}";
    yaml.push_str(&format!(
        "tasks:\n  - id: sandbox\n    isolation: sandbox\n    instruction: fix add\n    tests: hidden\n    solution: solution\n    {verify}\n  \
         - id: worktree\n    instruction: fix add\n    tests: hidden\n    solution: solution\n    {verify}\n  \
         - id: unprotected\n    instruction: fix add\n    tests: hidden\n    solution: solution\n    protected: []\n    {verify}\n"
    ));
    let records = validate_and_run(root, &yaml, "out");
    for task in ["sandbox", "worktree", "unprotected"] {
        expect(&records, task, "honest", &["pass"], "");
        expect(
            &records,
            task,
            "always_equal",
            &["invalid"],
            "the hidden tests' assertions do not bite: a mutant of tests/add.rs:",
        );
    }
    expect(
        &records,
        "sandbox",
        "build_script",
        &["fail"],
        "tampered: build.rs",
    );
    expect(
        &records,
        "worktree",
        "build_script",
        &["fail"],
        "tampered: build.rs",
    );
    expect(
        &records,
        "unprotected",
        "build_script",
        &["fail"],
        "tampered: tests/add.rs (rewritten while verify ran)",
    );
}

/// The mutant lister's own tests (Python's unittest, beside the script).
#[test]
fn the_mutant_lister_passes_its_own_tests() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/delta/mutate");
    let output = std::process::Command::new("python3")
        .args(["-m", "unittest", "discover", "-s"])
        .arg(&dir)
        .args(["-p", "test_*.py"])
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .unwrap();
    let text = stderr(&output);
    assert!(output.status.success(), "{text}");
    assert!(text.contains("\nOK"), "{text}");
}

/// A hidden test file the lister cannot parse is named in validate's output and gives no
/// mutants; the task's other files still do, and the task is still validated.
#[test]
fn a_test_file_the_mutator_cannot_parse_is_named_and_the_rest_still_mutated() {
    let test =
        "assertions::a_test_file_the_mutator_cannot_parse_is_named_and_the_rest_still_mutated";
    if !require_tools(test, false) {
        return;
    }
    let tmp = temp_dir();
    repo(tmp.path());
    // A file no runner of the task imports (the verify command names test_calc only).
    write_files(
        tmp.path(),
        &[(
            "hidden/tests/test_broken.py",
            "def test_x(:\n    assert 1 == 1\n",
        )],
    );
    let yaml = suite_yaml(tmp.path(), "worktree", &[("honest", FIX.to_owned())], "");
    std::fs::write(tmp.path().join("suite.yaml"), yaml).unwrap();
    let said = validate(tmp.path(), &["--task", "unittest"]);
    assert!(
        said.contains("warning: tests/test_broken.py: ") && said.contains("line 1"),
        "{said}"
    );
    assert!(said.contains("mutants: 2 of 2 bite"), "{said}");
    let lock = std::fs::read_to_string(tmp.path().join("suite.lock.json")).unwrap();
    assert!(lock.contains("\"file\": \"tests/test_calc.py\""), "{lock}");
}

/// The hook is inert: it loads (its `start` record) without importing `unittest` or `json` at
/// start-up. An early import outlives a test's `sys.modules` snapshot (pytester's), which made a
/// FAIL_TO_PASS test of pytest-dev__pytest-10081 pass on the unfixed base with the hook loaded.
#[test]
fn the_hook_imports_nothing_a_test_could_see() {
    let tmp = temp_dir();
    git_repo(tmp.path(), &[("a.txt", "a\n")]);
    let check = "python3 -c \\\"import sys; m = [n for n in ('unittest', 'json', '_pytest') if n in sys.modules]; print('early:', m); sys.exit(1 if m else 0)\\\"";
    std::fs::write(
        tmp.path().join("suite.yaml"),
        format!(
            "name: inert\nrepo: repo\nagents:\n  edit: {{kind: command, run: \"echo b > a.txt\"}}\n\
             tasks:\n  - id: t\n    instruction: edit\n    verify: \"{check}\"\n"
        ),
    )
    .unwrap();
    let (output, _, out) = crate::common::run_suite(tmp.path(), &[]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let trial = out.join("trials/t/edit/1");
    let log = std::fs::read_to_string(trial.join("verify.log")).unwrap();
    assert!(log.contains("early: []"), "{log}");
    let hooked =
        std::fs::read_to_string(trial.join("verify-home/.deltabench/tests.jsonl")).unwrap();
    assert!(hooked.contains("\"event\":\"start\""), "{hooked}");
    assert_eq!(trials(&out)[0]["outcome"], "pass");
}

/// The files the verify command runs are protected by rule: the Makefile of a `make test`
/// verify and the script of a `sh ci/test.sh` one. An agent that rewrites them to succeed fails
/// as `tampered`; the honest fix passes; a task that names the file with `!` (changing it is the
/// task) lets the change through.
#[test]
fn the_files_a_verify_command_runs_are_protected() {
    let tmp = temp_dir();
    let root = tmp.path();
    git_repo(
        root,
        &[
            ("a.txt", "a\n"),
            ("Makefile", "test:\n\tgrep -q fixed a.txt\n"),
            ("ci/test.sh", "grep -q fixed a.txt\n"),
        ],
    );
    write_files(root, &[("sol/a.txt", "fixed\n")]);
    let agents = [
        ("honest", "echo fixed > a.txt"),
        ("makefile", "printf 'test:\\n\\ttrue\\n' > Makefile"),
        ("script", "echo true > ci/test.sh"),
    ];
    let mut yaml = String::from("name: runs\nrepo: repo\nagents:\n");
    for (name, run) in agents {
        yaml.push_str(&format!("  {name}: {{kind: command, run: \"{run}\"}}\n"));
    }
    yaml.push_str(
        "tasks:\n  - id: make\n    instruction: fix a.txt\n    solution: sol\n    verify: make -s test\n  \
         - id: script\n    instruction: fix a.txt\n    solution: sol\n    verify: sh ci/test.sh\n  \
         - id: owned\n    instruction: fix a.txt\n    solution: sol\n    protected: [defaults, \"!Makefile\"]\n    verify: make -s test\n",
    );
    let records = validate_and_run(
        root,
        &yaml.replace("agents:\n", "defaults:\n  mutants: 0\nagents:\n"),
        "out",
    );
    for task in ["make", "script", "owned"] {
        expect(&records, task, "honest", &["pass"], "");
    }
    expect(
        &records,
        "make",
        "makefile",
        &["fail"],
        "tampered: Makefile",
    );
    expect(
        &records,
        "script",
        "script",
        &["fail"],
        "tampered: ci/test.sh",
    );
    // The Makefile is the task's to change: the rewrite counts, and `make test` then passes.
    expect(&records, "owned", "makefile", &["pass"], "");
    // Not what the verify command runs: the other task's file is not protected by this rule.
    expect(&records, "make", "script", &["fail"], "verify exited");
}
