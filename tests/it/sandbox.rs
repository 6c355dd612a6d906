//! `isolation: sandbox`: the agent and the verify command run in bubblewrap. One agent tries to
//! escape in several ways; the sandbox blocks them all, and the same agent under `worktree` gets
//! through, so the test proves the sandbox is what blocks them. Needs `bwrap` (`.ci/run`
//! installs it).

use std::io::Read;
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::common::{
    assert_no_leftovers, deltabench, git_repo, one_file_repo, stderr, stdout, temp_dir, trials,
    write_files, write_suite,
};

/// Prints `NAME=ok` or `NAME=blocked` for each attempt, then makes the change verify wants.
const PROBE: &str = r#"#!/bin/sh
try() { name=$1; shift; if "$@" >/dev/null 2>&1; then echo "$name=ok"; else echo "$name=blocked"; fi; }
try write_outside sh -c "echo escaped > '$OUTSIDE/escaped'"
try write_repo sh -c "echo planted > '$REPO_OBJECTS/planted'"
try umount umount "$REAL_HOME"
try read_secret cat "$REAL_HOME/.ssh/id_rsa"
try read_run cat "$RUN_DIR/manifest.json"
try read_outside cat "$OUTSIDE/.keep"
try read_shadow test -s /etc/shadow
try connect python3 -c "import socket, sys; socket.create_connection(('127.0.0.1', int(sys.argv[1])), timeout=3)" "$PORT"
try git_status git status --porcelain
try instruction grep -q escape "$DELTABENCH_INSTRUCTION_FILE"
try write_home sh -c 'mkdir -p "$HOME/.config/agent" && echo x > "$HOME/.config/agent/state"'
echo changed >> a.txt
"#;

/// A host folder outside `/tmp`, `/dev` and `$HOME`, which the sandbox does not expose: the
/// deltabench process's `$HOME` with a planted key, and a folder to escape into or read.
struct Host {
    dir: tempfile::TempDir,
    listener_port: u16,
    connections: Arc<AtomicUsize>,
}

impl Host {
    fn new() -> Self {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        write_files(
            dir.path(),
            &[("home/.ssh/id_rsa", "PRIVATE KEY\n"), ("outside/.keep", "")],
        );
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let listener_port = listener.local_addr().unwrap().port();
        let connections = Arc::new(AtomicUsize::new(0));
        let counter = connections.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                counter.fetch_add(1, Ordering::SeqCst);
                let _ = (&stream).read(&mut [0u8; 1]);
            }
        });
        Self {
            dir,
            listener_port,
            connections,
        }
    }

    fn home(&self) -> std::path::PathBuf {
        self.dir.path().join("home")
    }

    fn outside(&self) -> std::path::PathBuf {
        self.dir.path().join("outside")
    }

    /// A suite whose `probe` agent (and `probe-net`, with `network: host`) tries every escape.
    fn suite(&self, root: &Path, isolation: &str) {
        git_repo(root, &[("a.txt", "a\n")]);
        write_files(root, &[("agents/probe.sh", PROBE)]);
        let script = root.join("agents/probe.sh");
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let env = format!(
            "{{OUTSIDE: '{}', REPO_OBJECTS: '{}', REAL_HOME: '{}', RUN_DIR: '{}', PORT: '{}'}}",
            self.outside().display(),
            root.join("repo/.git/objects").display(),
            self.home().display(),
            root.join("out").display(),
            self.listener_port
        );
        let verify = format!(
            "touch '{}/verify-escaped'; grep -q changed a.txt",
            self.outside().display()
        );
        write_suite(
            root,
            &format!(
                "name: escape\nrepo: repo\nagents:\n  probe: {{kind: command, run: ./agents/probe.sh, env: {env}}}\n  probe-net: {{kind: command, run: ./agents/probe.sh, network: host, env: {env}}}\ntasks:\n  - {{id: t, instruction: escape, isolation: {isolation}, verify: \"{verify}\"}}\n"
            ),
        );
    }

    fn run(&self, root: &Path, agents: &[&str]) -> std::path::PathBuf {
        let (work, out) = (root.join("work"), root.join("out"));
        std::fs::create_dir_all(&work).unwrap();
        let mut command = deltabench(root);
        command
            .env("HOME", self.home())
            .args(["run", "suite.yaml", "--workdir"])
            .arg(&work)
            .arg("--out")
            .arg(&out);
        for agent in agents {
            command.args(["--agent", agent]);
        }
        let output = command.output().unwrap();
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        assert_no_leftovers(&work);
        out
    }
}

/// The `NAME=...` lines the probe printed, as `NAME=result` strings.
fn attempts(out: &Path, agent: &str) -> Vec<String> {
    let log = std::fs::read_to_string(out.join(format!("trials/t/{agent}/1/agent.log"))).unwrap();
    log.lines()
        .filter(|line| line.contains('='))
        .map(str::to_owned)
        .collect()
}

#[test]
fn sandbox_blocks_what_worktree_allows() {
    if !crate::common::have_bwrap("sandbox_blocks_what_worktree_allows") {
        return;
    }
    let host = Host::new();

    let boxed = temp_dir();
    host.suite(boxed.path(), "sandbox");
    let out = host.run(boxed.path(), &["probe", "probe-net"]);
    assert_eq!(
        attempts(&out, "probe"),
        [
            "write_outside=blocked",
            "write_repo=blocked",
            "umount=blocked",
            "read_secret=blocked",
            "read_run=blocked",
            "read_outside=blocked",
            "read_shadow=blocked",
            "connect=blocked",
            "git_status=ok",
            "instruction=ok",
            "write_home=ok",
        ]
    );
    // `network: host` is the one difference.
    let net = attempts(&out, "probe-net");
    assert!(net.contains(&"connect=ok".to_owned()), "{net:?}");
    assert!(net.contains(&"read_secret=blocked".to_owned()), "{net:?}");
    assert_eq!(host.connections.load(Ordering::SeqCst), 1);
    for record in trials(&out) {
        let agent = record["agent"].as_str().unwrap();
        let verify =
            std::fs::read_to_string(out.join(format!("trials/t/{agent}/1/verify.log"))).unwrap();
        assert_eq!(record["outcome"], "pass", "{record}\n{verify}");
    }
    // The agent's home is its own, kept with the trial; the verify command could not escape.
    assert!(
        out.join("trials/t/probe/1/home/.config/agent/state")
            .is_file()
    );
    assert!(!host.outside().join("escaped").exists());
    assert!(!host.outside().join("verify-escaped").exists());
    assert!(!boxed.path().join("repo/.git/objects/planted").exists());
    let manifest = std::fs::read_to_string(out.join("manifest.json")).unwrap();
    assert!(manifest.contains("bubblewrap"), "{manifest}");

    let open = temp_dir();
    host.suite(open.path(), "worktree");
    let out = host.run(open.path(), &["probe"]);
    let seen = attempts(&out, "probe");
    for allowed in [
        "write_outside=ok",
        "read_secret=ok",
        "read_run=ok",
        "read_outside=ok",
        "connect=ok",
    ] {
        assert!(seen.contains(&allowed.to_owned()), "{allowed}: {seen:?}");
    }
    assert!(host.outside().join("escaped").is_file());
    assert!(host.outside().join("verify-escaped").is_file());
}

#[test]
fn sandbox_without_bubblewrap_is_a_plan_error_that_says_what_to_install() {
    let tmp = one_file_repo();
    write_suite(
        tmp.path(),
        "name: sandbox\nrepo: repo\ntasks:\n  - {id: t, instruction: x, isolation: sandbox, verify: \"true\"}\n",
    );
    // A PATH with the usual tools but no `bwrap`.
    let bin = tmp.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for tool in ["sh", "git", "python3"] {
        let found = std::process::Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .unwrap();
        let path = String::from_utf8_lossy(&found.stdout).trim().to_owned();
        std::os::unix::fs::symlink(path, bin.join(tool)).unwrap();
    }
    let work = tmp.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let output = deltabench(tmp.path())
        .env("PATH", &bin)
        .args(["run", "suite.yaml", "--workdir"])
        .arg(&work)
        .args(["--out", "out"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    let err = stderr(&output);
    crate::common::assert_tmp_snapshot!("no_bubblewrap", tmp.path(), err);
    assert!(!tmp.path().join("out/trials.jsonl").exists());
}

#[test]
fn unknown_network_mode_names_the_place_and_the_valid_set() {
    let tmp = one_file_repo();
    write_suite(
        tmp.path(),
        "name: net\nrepo: repo\nagents:\n  a: {kind: command, run: \"true\", network: bridge}\ntasks:\n  - {id: t, instruction: x, verify: \"true\"}\n",
    );
    let output = deltabench(tmp.path())
        .args(["validate", "suite.yaml"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    let err = stderr(&output);
    assert!(
        err.contains(
            "suite.yaml:4:44: unknown network mode: 'bridge'. Valid modes: none, host, model"
        ),
        "{err}"
    );
}

#[test]
fn a_timed_out_sandbox_takes_its_escaped_daemon_with_it() {
    if !crate::common::have_bwrap("a_timed_out_sandbox_takes_its_escaped_daemon_with_it") {
        return;
    }
    let tmp = one_file_repo();
    // The daemon leaves the process group (setsid); the sandbox's PID namespace still ends it.
    write_suite(
        tmp.path(),
        "name: daemon\nrepo: repo\nagents:\n  forker: {kind: command, run: \"(setsid sh -c 'sleep 2; touch $HOME/survived' &); sleep 60\", timeout: 1s}\ntasks:\n  - {id: t, instruction: x, isolation: sandbox, verify: \"true\"}\n",
    );
    let started = std::time::Instant::now();
    let (output, work, out) = crate::common::run_suite(tmp.path(), &[]);
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(trials(&out)[0]["error"]["code"], "timeout");
    std::thread::sleep(std::time::Duration::from_millis(2500));
    assert!(out.join("trials/t/forker/1/home").is_dir());
    assert!(!out.join("trials/t/forker/1/home/survived").exists());
    assert_no_leftovers(&work);
}

#[test]
fn a_sandboxed_agent_cannot_read_the_suites_hidden_tests_or_solutions() {
    if !crate::common::have_bwrap(
        "a_sandboxed_agent_cannot_read_the_suites_hidden_tests_or_solutions",
    ) {
        return;
    }
    let tmp = one_file_repo();
    write_files(
        tmp.path(),
        &[
            ("sol/a.txt", "SECRET-SOLUTION\n"),
            ("hidden/check.sh", "grep -q SECRET-SOLUTION a.txt\n"),
        ],
    );
    // The path is assembled at run time: absolute words of `run` count as the agent's program,
    // which stays readable.
    let suite_dir = tmp.path().display().to_string();
    for isolation in ["sandbox", "worktree"] {
        write_suite(
            tmp.path(),
            &format!(
                "name: peek\nrepo: repo\nagents:\n  peeker: {{kind: command, run: \"d={suite_dir}; cp $d/sol/a.txt a.txt || echo blocked\"}}\n\
                 tasks:\n  - {{id: t, instruction: x, isolation: {isolation}, tests: hidden/, solution: sol/, verify: \"sh check.sh\"}}\n"
            ),
        );
        let out = tmp.path().join(format!("out-{isolation}"));
        let output = deltabench(tmp.path())
            .args(["run", "suite.yaml", "--agent", "peeker", "--workdir"])
            .arg(tmp.path())
            .arg("--out")
            .arg(&out)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        let expected = if isolation == "sandbox" {
            "fail"
        } else {
            "pass"
        };
        assert_eq!(
            trials(&out)[0]["outcome"],
            expected,
            "{isolation}: copying the solution"
        );
    }
}

/// `validate` runs each task under its own isolation: the reference's verify run under
/// `sandbox` has no network (a server on the host's loopback is out of reach), as every trial's.
/// This task's verify passes only there.
#[test]
fn validate_keeps_a_tasks_sandbox_for_the_verify_run() {
    if !crate::common::have_bwrap("validate_keeps_a_tasks_sandbox_for_the_verify_run") {
        return;
    }
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let tmp = one_file_repo();
    let root = tmp.path();
    write_files(root, &[("sol/a.txt", "fixed\n")]);
    let offline = format!(
        "python3 -c 'import socket, sys; sys.exit(socket.socket().connect_ex((\"127.0.0.1\", {port})) == 0)'"
    );
    for isolation in ["sandbox", "worktree"] {
        write_suite(
            root,
            &format!(
                "name: v\nrepo: repo\ntasks:\n  - id: t\n    instruction: fix a.txt\n    solution: sol\n    \
                 isolation: {isolation}\n    verify: \"{} && grep -q fixed a.txt\"\n",
                offline.replace('"', "\\\"")
            ),
        );
        let output = deltabench(root)
            .args(["validate", "suite.yaml"])
            .output()
            .unwrap();
        let said = format!("{}{}", stdout(&output), stderr(&output));
        match isolation {
            "sandbox" => assert_eq!(output.status.code(), Some(0), "{said}"),
            // The same verify on the host reaches the server: the reference fails.
            _ => {
                assert_eq!(output.status.code(), Some(1), "{said}");
                assert!(said.contains("oracle"), "{said}");
            }
        }
    }
    drop(listener);
}

/// A `solution_script` is the oracle's reference under any isolation: it runs in the sandbox
/// (where the suite's folder is hidden) from a copy of its folder, `$DELTABENCH_SOLUTION`.
#[test]
fn a_solution_script_is_the_reference_in_the_sandbox_too() {
    if !crate::common::have_bwrap("a_solution_script_is_the_reference_in_the_sandbox_too") {
        return;
    }
    let tmp = one_file_repo();
    let root = tmp.path();
    write_files(
        root,
        &[
            (
                "sol/solve.sh",
                "cp \"$DELTABENCH_SOLUTION/fixed.txt\" a.txt\n",
            ),
            ("sol/fixed.txt", "fixed\n"),
        ],
    );
    for isolation in ["sandbox", "worktree"] {
        write_suite(
            root,
            &format!(
                "name: v\nrepo: repo\ntasks:\n  - id: t\n    instruction: fix a.txt\n    solution_script: sol/solve.sh\n    \
                 isolation: {isolation}\n    verify: grep -q fixed a.txt\n"
            ),
        );
        let output = deltabench(root)
            .args(["validate", "suite.yaml"])
            .output()
            .unwrap();
        assert_eq!(
            output.status.code(),
            Some(0),
            "{isolation}: {}{}",
            stdout(&output),
            stderr(&output)
        );
    }
}
