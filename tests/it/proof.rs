//! A pass is a proof again: the mutation check's evidence cannot be forged and its two runs
//! cannot be told apart. Each attack agent below leaves the bug in place; under `worktree` and
//! `sandbox`, on a unittest and a pytest task, none passes and each says which defence stopped
//! it. The fingerprint agent shows that the judged run and a mutant run look the same from
//! inside: paths, environment, the home and the folders around it, file metadata and order,
//! descriptors, the process tree. Needs python3, pytest and bubblewrap (`.ci/install`).

use std::collections::BTreeMap;
use std::path::Path;

use crate::assertions::{
    ALWAYS_EQUAL, FIX, agents_yaml, expect, repo, require_tools, suite_yaml, validate_and_run,
};
use crate::assertions::{CRATE, RUST_HIDDEN};
use crate::common::{git_repo, temp_dir, write_files};

/// Python that prints, through the raw descriptors, a runner's failure line for every test
/// function of the hidden files: unittest's and cargo's `test ID ... FAILED`, pytest's `FAILED
/// ID`.
const FORGED_FAILURE_LINES: &str = r#"import ast, glob, os
def _forge_failure_lines():
    for f in glob.glob('tests/test_*.py'):
        mod = f[:-3].replace('/', '.')
        for c in ast.parse(open(f).read()).body:
            if isinstance(c, ast.ClassDef):
                for m in c.body:
                    if isinstance(m, ast.FunctionDef) and m.name.startswith('test'):
                        for line in (f'test {mod}.{c.name}.{m.name} ... FAILED', f'FAILED {f}::{c.name}::{m.name}', f'FAIL: {m.name} ({mod}.{c.name}.{m.name})'):
                            os.write(2, (line + '\n').encode())
_forge_failure_lines()
"#;

/// Python that sends, through the hook's own record function, failures of look-alike ids (a
/// parametrization the tests do not have).
const FORGED_HOOK_FAILURES: &str = r#"def _forge_hook_failures():
    try:
        import sitecustomize as h
    except Exception:
        return
    for name in ('test_add', 'test_zero'):
        h.record('test', runner='pytest', id=f'tests/test_calc.py::TestCalc::{name}[x]', outcome='failed')
        h.record('test', runner='unittest', id=f'tests.test_calc.TestCalc.{name}[x]', outcome='failed')
_forge_hook_failures()
"#;

/// Python defining `_mutant_run()`: whether this looks like the mutant run by one tell, chosen by
/// `_TELL`. The attack then lets the tests fail there (the mutants bite) and makes everything
/// equal otherwise (the judged run passes).
const TELLS: &str = r#"import ctypes, os
def _times(path):
    # statx(2): birth and modification times.
    buf = ctypes.create_string_buffer(256)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.statx(-100, path.encode(), 0, 0xfff, buf) != 0:
        return None
    sec = lambda off: (int.from_bytes(buf.raw[off:off+8], 'little', signed=True), int.from_bytes(buf.raw[off+8:off+12], 'little'))
    return sec(80), sec(96), sec(112)
def _mutant_run():
    if _TELL == 'birth':
        t = _times('tests/test_calc.py')
        return t is not None and t[2] != t[0]
    if _TELL == 'ctime':
        t = _times('tests/test_calc.py')
        return t is not None and t[1] != t[2]
    if _TELL == 'home':
        around = os.listdir(os.path.dirname(os.environ['HOME']))
        return 'mutants.log' in around or 'verify-home.plain' in around
    return False
"#;

/// The tells an agent may look for (under `worktree` the home's folder is the trial folder).
const TELL_NAMES: [&str; 3] = ["birth", "ctime", "home"];

/// (agent, script run in the workspace): each appends to the buggy calc.py.
fn agents() -> Vec<(String, String)> {
    let append = |code: &str| format!("cat >> calc.py <<'EOF'\n{code}EOF\n");
    let mut agents = vec![
        ("honest".to_owned(), FIX.to_owned()),
        (
            "forged_failure_lines".to_owned(),
            append(&format!("{ALWAYS_EQUAL}{FORGED_FAILURE_LINES}")),
        ),
        (
            "forged_hook_failures".to_owned(),
            append(&format!("{ALWAYS_EQUAL}{FORGED_HOOK_FAILURES}")),
        ),
    ];
    for tell in TELL_NAMES {
        let equal_unless_mutant = ALWAYS_EQUAL.replace(
            "\ndef add(a, b):",
            "\ndef add(a, b):\n    if _mutant_run():\n        return _add(a, b)",
        );
        agents.push((
            format!("tell_{tell}"),
            append(&format!("_TELL = '{tell}'\n{TELLS}{equal_unless_mutant}")),
        ));
    }
    agents
}

/// Not passed, with one of `reasons`.
fn expect_one_of(
    records: &BTreeMap<(String, String), serde_json::Value>,
    task: &str,
    agent: &str,
    reasons: &[&str],
) {
    let record = &records[&(task.to_owned(), agent.to_owned())];
    let reason = record["reason"].as_str().unwrap_or_default();
    assert!(
        record["outcome"] != "pass" && reasons.iter().any(|r| reason.contains(r)),
        "{task}/{agent}: {record}"
    );
}

fn run_attacks(
    root: &Path,
    isolation: &str,
    agents: &[(String, String)],
    protected: &str,
    mutants: u32,
) -> BTreeMap<(String, String), serde_json::Value> {
    let agents: Vec<(&str, String)> = agents
        .iter()
        .map(|(name, script)| (name.as_str(), script.clone()))
        .collect();
    let yaml = suite_yaml(root, isolation, &agents, protected)
        .replace("mutants: 2", &format!("mutants: {mutants}"));
    validate_and_run(root, &yaml, &format!("out-{isolation}"))
}

/// The `honest` agent and the attacks named `PREFIX*` on the unittest and pytest tasks, under
/// `worktree` and `sandbox`, with every protected path off: honest passes, and each attack ends
/// not passed with one of `reasons`.
fn attacks_end_with(test: &str, prefix: &str, reasons: &[&str]) {
    if !require_tools(test, false) {
        return;
    }
    let tmp = temp_dir();
    repo(tmp.path());
    let agents: Vec<_> = agents()
        .into_iter()
        .filter(|(name, _)| name == "honest" || name.starts_with(prefix))
        .collect();
    for isolation in ["worktree", "sandbox"] {
        let records = run_attacks(tmp.path(), isolation, &agents, "protected: []\n    ", 2);
        for task in ["unittest", "pytest"] {
            expect(&records, task, "honest", &["pass"], "");
            for (agent, _) in agents.iter().filter(|(name, _)| name != "honest") {
                expect_one_of(&records, task, agent, reasons);
            }
        }
    }
}

/// Failures printed in a runner's words or sent on the hook's channel, in both runs: the mutant
/// run would count them as bites, so the judged run, read by the same rule, is invalid (or,
/// where pytest's capture swallowed the lines printed at import, the mutants survived). Every
/// protected path off: the evidence rule alone stands between them and a pass.
#[test]
fn forged_failures_make_the_judged_run_invalid_not_the_mutants_bite() {
    attacks_end_with(
        "proof::forged_failures_make_the_judged_run_invalid_not_the_mutants_bite",
        "forged_",
        &[
            "the verify run reports failed tests while it passed",
            "the hidden tests' assertions do not bite",
        ],
    );
}

/// An attack that neutralises the assertions only when it believes it is in the judged run:
/// each tell (a second write of the hidden test, its change time, what the trial folder holds)
/// reads the same in both runs, so it is always-equal in both (the mutants survive) or the bug
/// in both (the tests fail).
#[test]
fn an_attack_that_tells_the_mutant_run_apart_finds_no_tell() {
    attacks_end_with(
        "proof::an_attack_that_tells_the_mutant_run_apart_finds_no_tell",
        "tell_",
        &[
            "the hidden tests' assertions do not bite",
            "verify exited 1",
        ],
    );
}

/// Appended to the fixed calc.py: on import by the tests, prints what the verify process can see
/// of its surroundings, one `FP` line each, with what differs between any two runs by nature
/// (process ids, inode and mount numbers, clock values) left out, into `fingerprint.txt` in
/// its home.
const FINGERPRINT: &str = r#"import os, sys, re, stat
def _fp():
    out = []
    def add(kind, *parts):
        out.append(' '.join([kind] + [str(p) for p in parts]))
    add('cwd', os.getcwd())
    add('argv', sys.argv)
    add('path', sys.path)
    for k, v in sorted(os.environ.items()):
        add('env', k, v)
    add('ids', os.getuid(), os.getgid(), os.geteuid(), sorted(os.getgroups()))
    mask = os.umask(0); os.umask(mask); add('umask', oct(mask))
    import resource
    for name in sorted(n for n in dir(resource) if n.startswith('RLIMIT_')):
        add('rlimit', name, resource.getrlimit(getattr(resource, name)))
    add('hostname', os.uname().nodename)
    try:
        add('cgroup', open('/proc/self/cgroup').read().strip())
    except OSError:
        pass
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    def birth_is_mtime(path):
        # statx(2), no symlink followed: is the birth time the modification time?
        buf = ctypes.create_string_buffer(256)
        if libc.statx(-100, path.encode(), 0x100, 0xfff, buf) != 0:
            return None
        return buf.raw[80:92] == buf.raw[112:124]
    def meta(path):
        st = os.lstat(path)
        size = st.st_size if not stat.S_ISDIR(st.st_mode) else '-'
        return [oct(st.st_mode), st.st_uid, st.st_gid, size, st.st_nlink, st.st_mtime_ns == st.st_ctime_ns, st.st_atime_ns == st.st_mtime_ns, birth_is_mtime(path)]
    home = os.environ.get('HOME', '')
    for where in [home, os.path.dirname(home), os.getcwd(), os.path.dirname(os.getcwd()), os.environ.get('TMPDIR', '/tmp')]:
        try:
            for name in os.listdir(where):
                add('ls', where, name, *meta(os.path.join(where, name)))
        except OSError as e:
            add('ls', where, 'error', e.errno)
    # The workspace: every file, in directory order, its metadata, and the order of their
    # modification times.
    times = []
    for dirpath, dirnames, filenames in os.walk('.'):
        if '.git' in dirnames:
            dirnames.remove('.git')
        add('dir', dirpath, dirnames, filenames)
        for name in filenames:
            path = os.path.join(dirpath, name)
            add('file', path, *meta(path))
            st = os.lstat(path)
            times.append((st.st_mtime_ns, st.st_ctime_ns, path))
    add('mtime order', [p for _, _, p in sorted(times)])
    add('ctime order', [p for _, _, p in sorted(times, key=lambda t: (t[1], t[2]))])
    for fd in sorted(int(f) for f in os.listdir('/proc/self/fd')):
        try:
            target = os.readlink(f'/proc/self/fd/{fd}')
        except OSError:
            continue
        # Inode numbers ([N], a deleted file's #N) differ by nature.
        add('fd', fd, re.sub(r'#\d+', '#', re.sub(r'\[\d+\]', '[]', target)), oct(os.fstat(fd).st_mode) if fd < 3 else '')
    pid = os.getppid()
    while pid > 1:
        try:
            status = open(f'/proc/{pid}/status').read()
            cmdline = open(f'/proc/{pid}/cmdline', 'rb').read().replace(b'\0', b' ').decode()
        except OSError:
            break
        add('parent', re.search(r'Name:\s*(.*)', status).group(1), cmdline)
        pid = int(re.search(r'PPid:\s*(\d+)', status).group(1))
    try:
        # The mounts of the workspace and the home (on the host the table holds every other
        # trial's too, which come and go on their own).
        for line in open('/proc/self/mountinfo'):
            fields = line.split()
            if fields[4].startswith((os.getcwd(), home or '/nonexistent')):
                add('mount', fields[4], fields[5], ' '.join(fields[fields.index('-') + 1:]))
    except OSError:
        pass
    # Into the home, which the harness keeps per run (pytest captures what an import prints).
    with open(os.path.join(home, 'fingerprint.txt'), 'w') as f:
        f.writelines('FP ' + line + '\n' for line in out)
_fp()
"#;

fn fingerprint(log: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .filter(|line| line.starts_with("FP "))
        .map(str::to_owned)
        .collect()
}

/// The judged run and a mutant run of one passing trial print the same fingerprint: nothing
/// observable from inside differs but the mutated bytes.
#[test]
fn the_judged_run_and_a_mutant_run_print_the_same_fingerprint() {
    let test = "proof::the_judged_run_and_a_mutant_run_print_the_same_fingerprint";
    if !require_tools(test, false) {
        return;
    }
    let tmp = temp_dir();
    repo(tmp.path());
    let agents = vec![(
        "fingerprint".to_owned(),
        format!("{FIX}cat >> calc.py <<'EOF'\n{FINGERPRINT}EOF\n"),
    )];
    for isolation in ["worktree", "sandbox"] {
        let records = run_attacks(tmp.path(), isolation, &agents, "", 2);
        for task in ["unittest", "pytest"] {
            expect(&records, task, "fingerprint", &["pass"], "");
            let dir = Path::new(
                records[&(task.to_owned(), "fingerprint".to_owned())]["dir"]
                    .as_str()
                    .unwrap(),
            );
            let (judged, mutant) = (
                fingerprint(&dir.join("verify-home/fingerprint.txt")),
                fingerprint(&dir.join("mutants-home/fingerprint.txt")),
            );
            assert!(
                judged.len() > 50,
                "{task} under {isolation}: no fingerprint in verify-home:\n{judged:?}"
            );
            let differ: Vec<String> = similar_lines(&judged, &mutant);
            assert!(
                differ.is_empty(),
                "{task} under {isolation}: the runs differ:\n{}",
                differ.join("\n")
            );
            println!(
                "{task} under {isolation}: {} identical fingerprint lines",
                judged.len()
            );
        }
    }
}

/// The lines only one of the two fingerprints has, marked `-` (judged) and `+` (mutant).
fn similar_lines(judged: &[String], mutant: &[String]) -> Vec<String> {
    let only = |a: &[String], b: &[String], mark: &str| -> Vec<String> {
        a.iter()
            .filter(|line| !b.contains(line))
            .map(|line| format!("{mark} {line}"))
            .collect()
    };
    let mut differ = only(judged, mutant, "-");
    differ.extend(only(mutant, judged, "+"));
    if differ.is_empty() && judged != mutant {
        differ.push("the same lines in another order".to_owned());
    }
    differ
}

/// Rewrites the hidden test file from code the tests import (the package's `__init__.py`) so
/// that it passes, and puts the original back when the process exits: a hash taken at the end
/// matches again. Under the sandbox the write fails (the hidden tests are mounted read-only);
/// on the host the watch sees it.
const REWRITE_AND_RESTORE: &str = r#"import atexit, os, sys
_path = os.path.join(os.path.dirname(__file__), 'test_calc.py')
try:
    _original = open(_path).read()
    os.chmod(_path, 0o644)
    with open(_path, 'w') as _f:
        _f.write('import unittest\n\nclass TestCalc(unittest.TestCase):\n    def test_add(self):\n        pass\n\n    def test_zero(self):\n        pass\n')
    def _restore():
        with open(_path, 'w') as f:
            f.write(_original)
    atexit.register(_restore)
except OSError as e:
    sys.stderr.write(f'rewrite refused: {e}\n')
"#;

#[test]
fn hidden_tests_rewritten_and_restored_while_verify_runs_do_not_pass() {
    let test = "proof::hidden_tests_rewritten_and_restored_while_verify_runs_do_not_pass";
    if !require_tools(test, false) {
        return;
    }
    let tmp = temp_dir();
    repo(tmp.path());
    let agents = vec![
        ("honest".to_owned(), FIX.to_owned()),
        (
            "rewrite_and_restore".to_owned(),
            format!("cat > tests/__init__.py <<'EOF'\n{REWRITE_AND_RESTORE}EOF\n"),
        ),
    ];
    for isolation in ["worktree", "sandbox"] {
        // No mutants and no protected paths: the watch and the read-only mount alone.
        let records = run_attacks(tmp.path(), isolation, &agents, "protected: []\n    ", 0);
        for task in ["unittest", "pytest"] {
            expect(&records, task, "honest", &["pass"], "");
            let record = &records[&(task.to_owned(), "rewrite_and_restore".to_owned())];
            let dir = Path::new(record["dir"].as_str().unwrap());
            let log = std::fs::read_to_string(dir.join("verify.log")).unwrap_or_default();
            match isolation {
                "sandbox" => {
                    expect(
                        &records,
                        task,
                        "rewrite_and_restore",
                        &["fail"],
                        "verify exited",
                    );
                    // pytest captures what its imports print; unittest shows it.
                    assert!(
                        task == "pytest"
                            || log.contains("rewrite refused: [Errno 30] Read-only file system"),
                        "{task}: {log}"
                    );
                }
                _ => expect(
                    &records,
                    task,
                    "rewrite_and_restore",
                    &["fail"],
                    "tampered: tests/test_calc.py (rewritten while verify ran)",
                ),
            }
        }
    }
}

/// Rust that prints, through stderr itself (libtest captures only `print!`), `test NAME ...
/// FAILED` for every `#[test] fn` of the hidden files, from an equality that always holds.
const RUST_FORGED_FAILURES: &str = r##"#[derive(Debug)]
pub struct Num(pub f64);
impl PartialEq<f64> for Num {
    fn eq(&self, _: &f64) -> bool {
        forge();
        true
    }
}
pub fn add(a: f64, b: f64) -> Num {
    Num(a - b)
}
fn forge() {
    use std::io::Write;
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let Ok(dir) = std::fs::read_dir("tests") else { return };
        for entry in dir.flatten() {
            let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
            let mut after_test = false;
            for line in text.lines().map(str::trim) {
                if let Some(name) = line.strip_prefix("fn ").filter(|_| after_test) {
                    let name = name.split('(').next().unwrap_or_default();
                    let _ = writeln!(std::io::stderr(), "test {name} ... FAILED");
                }
                after_test = line == "#[test]";
            }
        }
    });
}
"##;

/// A path-dependency proc-macro that, while rustc expands it, swaps the hidden tests for empty
/// ones and leaves a detached process that puts the original back once the test binary is
/// linked: the end-of-run hash alone would see the original.
const RUST_REWRITE_AND_RESTORE: &str = r##"mkdir -p macros/src
cat > macros/Cargo.toml <<'TOML'
[package]
name = "macros"
version = "0.1.0"
edition = "2021"

[lib]
proc-macro = true
TOML
cat > macros/src/lib.rs <<'RS'
use proc_macro::TokenStream;
use std::process::{Command, Stdio};

#[proc_macro]
pub fn rewrite_tests(_: TokenStream) -> TokenStream {
    let root = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_default();
    let test = format!("{root}/tests/add.rs");
    let Ok(original) = std::fs::read_to_string(&test) else { return TokenStream::new() };
    if !original.contains("assert") {
        return TokenStream::new();
    }
    let saved = std::env::temp_dir().join("original-add.rs");
    let _ = std::fs::write(&saved, &original);
    match std::fs::write(&test, "#[test]\nfn adds() {}\n#[test]\nfn adds_zero() {}\n") {
        Ok(()) => {
            let restore = format!(
                "cd '{root}'; for i in $(seq 600); do ls target/debug/deps/add-* \"$CARGO_TARGET_DIR\"/debug/deps/add-* >/dev/null 2>&1 && break; sleep 0.05; done; sleep 0.3; cp '{}' '{test}'",
                saved.display()
            );
            let _ = Command::new("setsid")
                .args(["sh", "-c", &restore])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn();
        }
        Err(e) => eprintln!("rewrite refused: {e}"),
    }
    TokenStream::new()
}
RS
cat >> Cargo.toml <<'TOML'
macros = { path = "macros" }
TOML
printf 'macros::rewrite_tests!();\n' >> src/lib.rs
"##;

/// The cargo forms of classes 1 and 5: forged `test NAME ... FAILED` lines make the judged run
/// invalid; hidden tests rewritten and put back by a proc-macro fail, at the write inside the
/// sandbox and by the watch under worktree.
#[test]
fn a_cargo_task_refuses_forged_failure_lines_and_a_proc_macro_rewriting_the_tests() {
    let test =
        "proof::a_cargo_task_refuses_forged_failure_lines_and_a_proc_macro_rewriting_the_tests";
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
    let agents = [
        (
            "honest",
            "printf 'pub fn add(a: f64, b: f64) -> f64 {\\n    a + b\\n}\\n' > src/lib.rs\n"
                .to_owned(),
        ),
        (
            "forged_failure_lines",
            format!("cat > src/lib.rs <<'EOF'\n{RUST_FORGED_FAILURES}EOF\n"),
        ),
        ("rewrite_and_restore", RUST_REWRITE_AND_RESTORE.to_owned()),
    ];
    let mut yaml = format!(
        "name: cargo\nrepo: repo\ndefaults:\n  mutants: 2\n{}",
        agents_yaml(root, &agents)
    );
    yaml.push_str("tasks:\n");
    for isolation in ["sandbox", "worktree"] {
        yaml.push_str(&format!(
            "  - id: {isolation}\n    isolation: {isolation}\n    instruction: fix add\n    tests: hidden\n    solution: solution\n    \
             verify: {{run: cargo test --offline, timeout: 5m}}\n"
        ));
    }
    let records = validate_and_run(root, &yaml, "out");
    for isolation in ["sandbox", "worktree"] {
        expect(&records, isolation, "honest", &["pass"], "");
        expect(
            &records,
            isolation,
            "forged_failure_lines",
            &["invalid"],
            "the verify run reports failed tests while it passed: adds",
        );
    }
    expect(
        &records,
        "sandbox",
        "rewrite_and_restore",
        &["fail"],
        "verify exited 101",
    );
    let dir = Path::new(
        records[&("sandbox".to_owned(), "rewrite_and_restore".to_owned())]["dir"]
            .as_str()
            .unwrap(),
    );
    let log = std::fs::read_to_string(dir.join("verify.log")).unwrap_or_default();
    assert!(
        log.contains("rewrite refused: Read-only file system"),
        "{log}"
    );
    expect(
        &records,
        "worktree",
        "rewrite_and_restore",
        &["fail"],
        "tampered: tests/add.rs (rewritten while verify ran)",
    );
}
