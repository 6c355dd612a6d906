//! What a sandboxed agent can reach on the host: an allow-list, not what was thought of hiding.
//! A neighbouring run's workspaces, run folder and diffs, and host Unix sockets outside the
//! usual daemon folders are all out of reach; the same probes under `worktree` reach them, so
//! the sandbox is what stops them. Needs `bwrap` (`.ci/run` installs it).

use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::common::{deltabench, git_repo, run_suite, stderr, temp_dir, trials, write_files};

/// The live run's agent: leaves the fix in its workspace; in the `wait` task, it then says
/// where that is and waits until the test says the other run is over.
const FIXER: &str = r#"echo SECRET-FIX-B > fix.txt
case "$DELTABENCH_INSTRUCTION" in
  wait*) echo "workspace=$DELTABENCH_WORKSPACE"
         while [ ! -e "$1/a-done" ]; do sleep 0.2; done ;;
esac
"#;

/// Looks for the neighbour's files and writes what it found into `seen.txt`, in its workspace,
/// so it ends up in the trial's diff.
const SPY: &str = r#"try() { name=$1; shift; if "$@" >/dev/null 2>&1; then echo "$name=ok"; else echo "$name=blocked"; fi; }
work=$(ls -A "$WORK" | tr '\n' ' ')
out=$(ls -A "$OUT" | tr '\n' ' ')
found=$(grep -rl SECRET-FIX-B "$WORK" "$OUT" 2>/dev/null | tr '\n' ' ')
{
  try list_other_run ls "$OTHER_RUN"
  try read_other_manifest cat "$OTHER_RUN/manifest.json"
  try read_other_diff grep -q SECRET-FIX-B "$OTHER_DIFF"
  try list_other_root ls "$OTHER_ROOT"
  try read_other_workspace grep -q SECRET-FIX-B "$OTHER_WORKSPACE/fix.txt"
  try instruction grep -q spy "$DELTABENCH_INSTRUCTION_FILE"
  echo "work: $work"
  echo "out: $out"
  echo "found: $found"
} > seen.txt
"#;

/// A `deltabench run` in the background, killed if the test ends before it does.
struct Background(Option<Child>);

impl Background {
    fn wait(mut self) -> std::process::Output {
        self.0.take().unwrap().wait_with_output().unwrap()
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        if let Some(child) = &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Polls `found` until it returns a value; a hang guard, not a timing assertion.
fn wait_for<T>(what: &str, mut found: impl FnMut() -> Option<T>) -> T {
    let mut value = None;
    crate::common::wait_until(Duration::from_secs(300), what, || {
        value = found();
        value.is_some()
    });
    value.unwrap()
}

/// The workspace of run B's `wait` trial, once its agent has put the fix in and said where.
fn live_workspace(log: &Path) -> Option<PathBuf> {
    let log = std::fs::read_to_string(log).ok()?;
    let line = log.lines().find_map(|l| l.strip_prefix("workspace="))?;
    Some(PathBuf::from(line))
}

fn run_in_background(root: &Path, suite: &str, work: &Path, out: &Path) -> Background {
    let child = deltabench(root)
        .args(["run", suite, "--jobs", "1", "--workdir"])
        .arg(work)
        .arg("--out")
        .arg(out)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    Background(Some(child))
}

/// The lines `agent`'s trial of task `t` added, from its diff.
fn added_lines(out: &Path, agent: &str) -> Vec<String> {
    let patch =
        std::fs::read_to_string(out.join(format!("trials/t/{agent}/1/diff.patch"))).unwrap();
    patch
        .lines()
        .filter_map(|line| line.strip_prefix('+'))
        .filter(|line| !line.starts_with("++"))
        .map(str::to_owned)
        .collect()
}

#[test]
fn a_sandboxed_agent_sees_nothing_of_a_concurrent_run_beside_it() {
    if !crate::common::have_bwrap("a_sandboxed_agent_sees_nothing_of_a_concurrent_run_beside_it") {
        return;
    }
    // The suite's folder, the shared workdir and the runs' parent folder side by side, on a
    // disk folder (a fresh `/dev` alone would hide ones on `/dev/shm`).
    let tmp = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let (root, work) = (&tmp.path().join("suite"), tmp.path().join("work"));
    let (shards, sync) = (tmp.path().join("OUT"), tmp.path().join("sync"));
    git_repo(root, &[("a.txt", "a\n")]);
    write_files(root, &[("agents/fixer.sh", FIXER), ("agents/spy.sh", SPY)]);
    std::fs::create_dir_all(&work).unwrap();
    std::fs::create_dir_all(&sync).unwrap();
    let agent_b = format!(
        "fixer: {{kind: command, run: \"sh {}/agents/fixer.sh {}\", timeout: 10m}}",
        root.display(),
        sync.display()
    );
    std::fs::write(
        root.join("suite-b.yaml"),
        format!(
            "name: b\nrepo: repo\nagents:\n  {agent_b}\ntasks:\n  - {{id: done, instruction: finish, isolation: sandbox, verify: \"grep -q SECRET-FIX-B fix.txt\"}}\n  - {{id: wait, instruction: wait for a, isolation: sandbox, verify: \"grep -q SECRET-FIX-B fix.txt\"}}\n"
        ),
    )
    .unwrap();

    // Run B: one trial done (its diff holds the fix), the next one live and waiting.
    let b = run_in_background(root, "suite-b.yaml", &work, &shards.join("shard-2"));
    let other_diff = shards.join("shard-2/trials/done/fixer/1/diff.patch");
    wait_for("run B's first diff", || other_diff.is_file().then_some(()));
    let other_workspace = wait_for("run B's live workspace", || {
        live_workspace(&shards.join("shard-2/trials/wait/fixer/1/agent.log"))
    });
    assert!(other_workspace.join("fix.txt").is_file());
    let other_root = std::fs::read_dir(&work)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| other_workspace.starts_with(p))
        .unwrap();
    let other_root_name = other_root
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert!(
        other_root_name.starts_with("deltabench-shard-2-"),
        "{other_root_name}"
    );

    let spy = |isolation: &str, out: &str| {
        let env = format!(
            "{{WORK: '{}', OUT: '{}', OTHER_RUN: '{}', OTHER_DIFF: '{}', OTHER_ROOT: '{}', OTHER_WORKSPACE: '{}'}}",
            work.display(),
            shards.display(),
            shards.join("shard-2").display(),
            other_diff.display(),
            other_root.display(),
            other_workspace.display(),
        );
        let suite = format!("suite-a-{isolation}.yaml");
        std::fs::write(
            root.join(&suite),
            format!(
                "name: a\nrepo: repo\nagents:\n  spy: {{kind: command, run: \"sh {}/agents/spy.sh\", env: {env}}}\ntasks:\n  - {{id: t, instruction: spy, isolation: {isolation}, verify: \"true\"}}\n",
                root.display()
            ),
        )
        .unwrap();
        let out = shards.join(out);
        let output = deltabench(root)
            .args(["run", &suite, "--workdir"])
            .arg(&work)
            .arg("--out")
            .arg(&out)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        added_lines(&out, "spy")
    };

    // Run A, sandboxed, while B is live beside it.
    let boxed = spy("sandbox", "shard-1");
    for line in [
        "list_other_run=blocked",
        "read_other_manifest=blocked",
        "read_other_diff=blocked",
        "list_other_root=blocked",
        "read_other_workspace=blocked",
        "instruction=ok",
        "out: shard-1 ",
        "found: ",
    ] {
        assert!(boxed.contains(&line.to_owned()), "{line}: {boxed:#?}");
    }
    let listed = boxed.iter().find(|l| l.starts_with("work: ")).unwrap();
    assert!(listed.contains("deltabench-shard-1-"), "{listed}");
    assert!(!listed.contains(&other_root_name), "{listed}");

    // The same agent under `worktree` reaches all of it: the sandbox is what stopped it.
    let open = spy("worktree", "shard-3");
    for line in [
        "list_other_run=ok",
        "read_other_manifest=ok",
        "read_other_diff=ok",
        "list_other_root=ok",
        "read_other_workspace=ok",
    ] {
        assert!(open.contains(&line.to_owned()), "{line}: {open:#?}");
    }
    let found = open.iter().find(|l| l.starts_with("found: ")).unwrap();
    assert!(found.contains("diff.patch"), "{found}");

    std::fs::write(sync.join("a-done"), "").unwrap();
    let output = b.wait();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let records = trials(&shards.join("shard-2"));
    assert_eq!(records.len(), 2);
    for record in records {
        assert_eq!(record["outcome"], "pass", "{record}");
    }
}

/// A Unix socket listening on the host, counting the connections it accepts.
struct Socket {
    path: PathBuf,
    accepted: Arc<AtomicUsize>,
}

impl Socket {
    fn listen(dir: &Path) -> Self {
        let path = dir.join("daemon.sock");
        let listener = UnixListener::bind(&path).unwrap();
        let accepted = Arc::new(AtomicUsize::new(0));
        let counter = accepted.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                counter.fetch_add(1, Ordering::SeqCst);
                drop(stream);
            }
        });
        Self { path, accepted }
    }
}

/// Connects to each socket named on its command line; `self` first proves Unix sockets work in
/// here at all (it listens in its own `/tmp` and connects to that).
const KNOCK: &str = r#"import os, socket, sys, tempfile
def knock(path):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(5)
    s.connect(path)
    s.close()
own = os.path.join(tempfile.mkdtemp(), "own.sock")
server = socket.socket(socket.AF_UNIX)
server.bind(own)
server.listen(1)
for name, path in [("self", own)] + [a.split("=", 1) for a in sys.argv[1:]]:
    try:
        knock(path)
        print(f"{name}=ok")
    except OSError:
        print(f"{name}=blocked")
"#;

#[test]
fn a_sandboxed_agent_cannot_connect_to_a_host_unix_socket() {
    if !crate::common::have_bwrap("a_sandboxed_agent_cannot_connect_to_a_host_unix_socket") {
        return;
    }
    let tmp = temp_dir();
    let root = tmp.path();
    git_repo(root, &[("a.txt", "a\n")]);
    write_files(root, &[("agents/knock.py", KNOCK)]);
    // Folders no hide-list thought of: a tmpfs one, and one on the disk next to the build.
    let shm = tempfile::tempdir_in("/dev/shm").unwrap();
    let disk = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let sockets = [Socket::listen(shm.path()), Socket::listen(disk.path())];
    let run = format!(
        "python3 {}/agents/knock.py shm={} disk={}",
        root.display(),
        sockets[0].path.display(),
        sockets[1].path.display()
    );
    let accepted = || -> usize {
        sockets
            .iter()
            .map(|s| s.accepted.load(Ordering::SeqCst))
            .sum()
    };

    for isolation in ["sandbox", "worktree"] {
        std::fs::write(
            root.join("suite.yaml"),
            format!(
                "name: knock\nrepo: repo\nagents:\n  knock: {{kind: command, run: \"{run}\"}}\n  knock-net: {{kind: command, run: \"{run}\", network: host}}\ntasks:\n  - {{id: t, instruction: x, isolation: {isolation}, verify: \"true\"}}\n"
            ),
        )
        .unwrap();
        let (work, out) = (root.join("work"), root.join(format!("out-{isolation}")));
        std::fs::create_dir_all(&work).unwrap();
        let output = deltabench(root)
            .args(["run", "suite.yaml", "--workdir"])
            .arg(&work)
            .arg("--out")
            .arg(&out)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        for agent in ["knock", "knock-net"] {
            let log =
                std::fs::read_to_string(out.join(format!("trials/t/{agent}/1/agent.log"))).unwrap();
            let lines: Vec<&str> = log.lines().filter(|l| l.contains('=')).collect();
            let expected = if isolation == "sandbox" {
                // The host network does not bring the host's file system with it.
                ["self=ok", "shm=blocked", "disk=blocked"]
            } else {
                ["self=ok", "shm=ok", "disk=ok"]
            };
            assert_eq!(lines, expected, "{isolation}, {agent}:\n{log}");
        }
        if isolation == "sandbox" {
            assert_eq!(accepted(), 0);
        }
    }
    // Two agents, two sockets each, under `worktree`.
    wait_for("the worktree agents' connections", || {
        (accepted() == 4).then_some(())
    });
}

/// The toolchains on `PATH` work inside, wherever they are installed (here, as usual for
/// rustup and pyenv, under the home folder, which the sandbox does not expose otherwise).
#[test]
fn a_sandboxed_verify_command_finds_the_toolchains_on_path() {
    if !crate::common::have_bwrap("a_sandboxed_verify_command_finds_the_toolchains_on_path") {
        return;
    }
    let tmp = temp_dir();
    git_repo(
        tmp.path(),
        &[
            (
                "Cargo.toml",
                "[package]\nname = \"fixme\"\nversion = \"0.1.0\"\nedition = \"2021\"\n",
            ),
            ("src/lib.rs", "pub fn answer() -> u32 { 41 }\n"),
            (".gitignore", "/target\n"),
        ],
    );
    std::fs::write(
        tmp.path().join("suite.yaml"),
        "name: tools\nrepo: repo\nagents:\n  fixer: {kind: command, run: \"sed -i s/41/42/ src/lib.rs && python3 -c 'print(6 * 7)' && cargo --version\"}\ntasks:\n  - {id: t, instruction: x, isolation: sandbox, verify: \"python3 -c 'import sys' && cargo build --offline --quiet && grep -q 42 src/lib.rs\"}\n",
    )
    .unwrap();
    let (output, _, out) = crate::common::run_suite(tmp.path(), &[]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let dir = out.join("trials/t/fixer/1");
    let log = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap_or_default();
    let record = &trials(&out)[0];
    assert_eq!(
        record["outcome"],
        "pass",
        "{record}\nagent:\n{}\nverify:\n{}",
        log("agent.log"),
        log("verify.log")
    );
    assert!(
        log("agent.log").contains("42\ncargo "),
        "{}",
        log("agent.log")
    );
}

/// A folder the agent is given (here the suite's, named in `run`) is readable, but the
/// solutions and hidden tests inside it stay masked. (The solution is named through `$d`:
/// an absolute path written out in `run` counts as part of the agent's program.)
#[test]
fn an_exposed_suite_folder_still_masks_its_solutions() {
    if !crate::common::have_bwrap("an_exposed_suite_folder_still_masks_its_solutions") {
        return;
    }
    let tmp = temp_dir();
    let suite = tmp.path().join("suite");
    git_repo(&suite, &[("a.txt", "a\n")]);
    write_files(
        &suite,
        &[
            ("sol/a.txt", "SECRET-SOLUTION\n"),
            ("hidden/check.sh", "grep -q SECRET-SOLUTION a.txt\n"),
            ("notes.txt", "public\n"),
        ],
    );
    let work = tmp.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let dir = suite.display();
    for isolation in ["sandbox", "worktree"] {
        std::fs::write(
            suite.join("suite.yaml"),
            format!(
                "name: peek\nrepo: repo\nagents:\n  peeker: {{kind: command, run: \"ls {dir} >/dev/null; d={dir}; cat $d/notes.txt; cp $d/sol/a.txt a.txt || echo blocked\"}}\n\
                 tasks:\n  - {{id: t, instruction: x, isolation: {isolation}, tests: hidden/, solution: sol/, verify: \"sh check.sh\"}}\n"
            ),
        )
        .unwrap();
        let out = tmp.path().join(format!("out-{isolation}"));
        let output = deltabench(&suite)
            .args(["run", "suite.yaml", "--workdir"])
            .arg(&work)
            .arg("--out")
            .arg(&out)
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        let log = std::fs::read_to_string(out.join("trials/t/peeker/1/agent.log")).unwrap();
        assert!(log.contains("public"), "{isolation}: {log}");
        let expected = if isolation == "sandbox" {
            "fail"
        } else {
            "pass"
        };
        assert_eq!(trials(&out)[0]["outcome"], expected, "{isolation}: {log}");
    }
}

/// Tries the model (through the gateway, at the URL deltabench gives), then every other kind of
/// address, with no proxy; writes what worked into `reach.txt`, in the workspace, so it is in
/// the diff. Python: the sandbox and the tests' base image both have it.
const REACH: &str = r#"#!/usr/bin/env python3
import json, os, urllib.request
opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
def reach(name, url, body=None, headers={}):
    try:
        with opener.open(urllib.request.Request(url, data=body, headers=headers), timeout=10) as answer:
            answer.read()
        return f"{name}=ok"
    except Exception:
        return f"{name}=blocked"
host = f"{os.environ['HOST_ADDRESS']}:{os.environ['HOST_PORT']}"
call = json.dumps({"model": "claude-sonnet-4-5", "max_tokens": 10,
                   "messages": [{"role": "user", "content": "hi"}]}).encode()
lines = [
    reach("model", os.environ["ANTHROPIC_BASE_URL"] + "/v1/messages", call,
          {"x-api-key": os.environ["ANTHROPIC_API_KEY"], "content-type": "application/json"}),
    reach("host_loopback", f"http://127.0.0.1:{os.environ['HOST_PORT']}/"),
    reach("host_address", f"http://{host}/"),
    reach("internet_by_name", "https://index.crates.io/config.json"),
    reach("internet_by_address", "http://192.0.2.1/"),
]
with open("reach.txt", "w") as out:
    out.write("\n".join(lines) + "\n")
"#;

/// A TCP server on every interface answering `200` to anything, counting its connections.
fn http_server() -> (u16, Arc<AtomicUsize>) {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = accepted.clone();
    std::thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            counter.fetch_add(1, Ordering::SeqCst);
            let _ = stream.read(&mut [0; 4096]);
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok");
        }
    });
    (port, accepted)
}

/// This machine's address on its outgoing interface (no packet is sent).
fn host_address() -> Option<std::net::IpAddr> {
    let probe = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    probe.connect("192.0.2.1:9").ok()?;
    Some(probe.local_addr().ok()?.ip()).filter(|ip| !ip.is_loopback())
}

/// `network: model` (the default for an agent whose calls pass the gateway), with the task
/// placed by `task_keys` (its isolation or environment): the agent's model calls succeed, and
/// nothing else answers: not a server on the host's loopback or on its address, not the
/// internet by name or by address. The same agent with `network: host` reaches the host's
/// server both ways, so the probes do bite.
pub fn reaches_its_model_and_nothing_else(test: &str, task_keys: &str) {
    let address = host_address();
    if !crate::common::have_tool(test, "an address other than loopback", address.is_some()) {
        return;
    }
    let (port, accepted) = http_server();
    let tmp = temp_dir();
    let root = tmp.path();
    git_repo(root, &[("a.txt", "a\n")]);
    write_files(
        root,
        &[
            ("agents/reach.py", REACH),
            (
                "model.yaml",
                "usage: {input_tokens: 7, output_tokens: 3}\nsteps:\n  - text: Done.\n",
            ),
        ],
    );
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        root.join("agents/reach.py"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    let agent = |network: &str| {
        format!(
            "{{kind: command, run: ./agents/reach.py, gateway: true, endpoint: scripted:model.yaml{network}, env: {{HOST_PORT: '{port}', HOST_ADDRESS: '{}'}}}}",
            address.unwrap()
        )
    };
    std::fs::write(
        root.join("suite.yaml"),
        format!(
            "name: reach\nrepo: repo\nagents:\n  model: {}\n  host: {}\ntasks:\n  - {{id: t, instruction: x, {task_keys}, verify: \"true\"}}\n",
            agent(""),
            agent(", network: host")
        ),
    )
    .unwrap();
    let (output, _, out) = run_suite(root, &[]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let reached = |agent: &str| added_lines(&out, agent);
    assert_eq!(
        reached("model"),
        [
            "model=ok",
            "host_loopback=blocked",
            "host_address=blocked",
            "internet_by_name=blocked",
            "internet_by_address=blocked"
        ],
        "{test}"
    );
    let host = reached("host");
    assert_eq!(
        host[..3],
        ["model=ok", "host_loopback=ok", "host_address=ok"],
        "{test}"
    );
    // Only the `host` agent's two requests arrived.
    assert_eq!(accepted.load(Ordering::SeqCst), 2, "{test}");
    for record in trials(&out) {
        assert_eq!(record["gateway_usage"]["model_calls"], 1, "{record:#}");
    }
}

#[test]
fn with_network_model_a_sandboxed_agent_reaches_its_model_and_nothing_else() {
    let test = "with_network_model_a_sandboxed_agent_reaches_its_model_and_nothing_else";
    if crate::common::have_bwrap(test) {
        reaches_its_model_and_nothing_else(test, "isolation: sandbox");
    }
}
