//! Environments through the real binary: a task's setup, verify command and `command` agent run
//! in a Podman container built from `localhost/deltabench-base:bookworm` (.ci/install builds it).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use deltabench::agent::harness::{HarnessKind, find_program};

use crate::common::{
    assert_no_leftovers, deltabench, have_tool, one_file_repo, run_suite, stderr, stdout, trials,
    wait_until, write_files, write_suite,
};
use crate::crash::{mounts_under, processes_with};

pub const BASE: &str = "localhost/deltabench-base:bookworm";
/// The base plus `only-in-image` (tests/images/only-in-image/, built by `build-base.sh
/// --with-derived`).
const ONLY_IN_IMAGE: &str = "localhost/deltabench-only-in-image:latest";

/// Whether Podman and the base image are here (see [`have_tool`]).
pub fn have_podman_image(test: &str) -> bool {
    let found = Command::new("podman")
        .args(["image", "exists", BASE])
        .status()
        .is_ok_and(|s| s.success());
    have_tool(
        test,
        "podman and localhost/deltabench-base:bookworm (tests/images/build-base.sh)",
        found,
    )
}

/// `env/` with a Dockerfile `FROM` the base image whose RUN step installs `only-in-image`, the
/// repository's own tool (tests/images/only-in-image/), plus `extra` files in the context.
fn write_env(root: &Path, extra: &[(&str, &str)]) {
    let tool = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/images/only-in-image");
    write_files(
        root,
        &[
            (
                "env/only-in-image",
                &std::fs::read_to_string(tool.join("only-in-image")).unwrap(),
            ),
            (
                "env/Dockerfile",
                &format!(
                    "FROM {BASE}\nCOPY only-in-image /usr/local/bin/only-in-image\nRUN chmod 0755 /usr/local/bin/only-in-image && only-in-image --check\n"
                ),
            ),
            ("sol/out.txt", "only-in-image was here\n"),
        ],
    );
    write_files(root, extra);
}

/// Containers (running or not) labelled with `label`'s value.
fn containers_labelled(value: &str) -> Vec<String> {
    let out = Command::new("podman")
        .args(["ps", "-a", "-q", "--filter"])
        .arg(format!("label=deltabench.run={value}"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

/// Running containers labelled with `value`.
fn running_labelled(value: &str) -> usize {
    let out = Command::new("podman")
        .args(["ps", "-q", "--filter"])
        .arg(format!("label=deltabench.run={value}"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .count()
}

/// Fails with the whole record unless `task / agent` ended with `expected`.
fn assert_outcome(records: &[serde_json::Value], task: &str, agent: &str, expected: &str) {
    let record = records
        .iter()
        .find(|r| r["task"] == task && r["agent"] == agent)
        .unwrap_or_else(|| panic!("no record of {task} / {agent}"));
    assert_eq!(record["outcome"], expected, "{task} / {agent}: {record}");
}

#[test]
fn a_verify_command_needing_the_images_tool_passes_only_in_the_container() {
    if !have_podman_image("environments::a_verify_command_needing_the_images_tool") {
        return;
    }
    let tmp = one_file_repo();
    let root = tmp.path();
    write_env(root, &[]);
    write_suite(
        root,
        "name: env\nrepo: repo\nagents:\n  inside: {kind: command, run: only-in-image > out.txt, timeout: 2m}\ntasks:\n  - id: worktree\n    instruction: write out.txt\n    solution: sol\n    environment: {dockerfile: env/Dockerfile}\n    verify: only-in-image --verify out.txt\n  - id: sandbox\n    instruction: write out.txt\n    solution: sol\n    isolation: sandbox\n    environment: {dockerfile: env/Dockerfile}\n    verify: only-in-image --verify out.txt\n  - id: host\n    instruction: write out.txt\n    solution: sol\n    verify: only-in-image --verify out.txt\n",
    );
    // Without the environment the same verify runs on the host, where the tool is missing:
    // `run` refuses before the first trial, naming the task, rather than fail every trial.
    let refused = deltabench(root)
        .args(["run", "suite.yaml", "--task", "host", "--agent", "oracle"])
        .args(["--out", "refused"])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2), "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("task 'host': verify program `only-in-image` is not on PATH"),
        "{}",
        stderr(&refused)
    );
    assert!(!root.join("refused").exists());
    let (output, work, out) = run_suite(
        root,
        &[
            "--task", "worktree", "--task", "sandbox", "--agent", "oracle", "--agent", "noop",
            "--agent", "inside",
        ],
    );
    let records = trials(&out);
    assert_eq!(records.len(), 6, "{}", stderr(&output));
    for task in ["worktree", "sandbox"] {
        assert_outcome(&records, task, "oracle", "pass");
        assert_outcome(&records, task, "noop", "fail");
        // The agent wrote what only the image's tool prints, into the mounted workspace.
        assert_outcome(&records, task, "inside", "pass");
        let patch = std::fs::read_to_string(out.join(format!("trials/{task}/inside/1/diff.patch")))
            .unwrap();
        assert!(patch.contains("+only-in-image was here"), "{patch}");
    }
    assert_no_leftovers(&work);
    // Every container of the run is gone: the label is the lease id, `out-<pid>`.
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("manifest.json")).unwrap()).unwrap();
    let pid = manifest["workdir"]
        .as_str()
        .unwrap()
        .rsplit('-')
        .next()
        .unwrap()
        .to_owned();
    assert_eq!(
        containers_labelled(&format!("out-{pid}")),
        Vec::<String>::new()
    );
}

/// A verify command that exits 125 (what a runtime exits with when it cannot start a container)
/// is the task's own failure, never an unscored trial: otherwise code that exits 125 would take
/// a failed trial out of the pass rate.
#[test]
fn a_task_exiting_125_fails_and_is_not_taken_for_the_runtime() {
    if !have_podman_image("environments::a_task_exiting_125_fails") {
        return;
    }
    let _ = task_exiting_125_fails(None);
}

/// The same through the Docker code path (no fd 3 to pass in: the start mark is a line of the
/// output), driven by Podman's Docker-compatible CLI under the name `docker`.
#[test]
fn a_task_exiting_125_fails_through_the_docker_client_too() {
    if !have_podman_image("environments::a_task_exiting_125_fails_through_the_docker_client") {
        return;
    }
    let bin = crate::common::temp_dir();
    let podman = which_podman();
    let docker = bin.path().join("docker");
    std::os::unix::fs::symlink(&podman, &docker).unwrap();
    let (_tmp, out) = task_exiting_125_fails(Some(&docker));
    let log = std::fs::read_to_string(out.join("trials/t/quits/1/verify.log")).unwrap();
    assert!(
        log.starts_with("deltabench: the container started\n"),
        "{log}"
    );
}

pub fn which_podman() -> std::path::PathBuf {
    let out = Command::new("sh")
        .args(["-c", "command -v podman"])
        .output()
        .unwrap();
    std::path::PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// Runs an agent and a verify command that both exit 125 in a container (with `runtime` as
/// DELTABENCH_CONTAINER_RUNTIME when given); the trial is scored and fails. Returns the run
/// directory and the temp folder holding it.
fn task_exiting_125_fails(runtime: Option<&Path>) -> (tempfile::TempDir, std::path::PathBuf) {
    let tmp = one_file_repo();
    let root = tmp.path();
    write_suite(
        root,
        &format!(
            "name: env\nrepo: repo\nagents:\n  quits: {{kind: command, run: 'echo x > a.txt; exit 125', timeout: 2m}}\ntasks:\n  - id: t\n    instruction: x\n    environment: {{image: {BASE}}}\n    verify: \"grep -q fixed a.txt || exit 125\"\n"
        ),
    );
    let work = root.join("work");
    let out = root.join("out");
    std::fs::create_dir_all(&work).unwrap();
    let mut command = deltabench(root);
    command
        .args(["run", "suite.yaml", "--agent", "quits", "--workdir"])
        .arg(&work)
        .arg("--out")
        .arg(&out);
    if let Some(runtime) = runtime {
        command.env("DELTABENCH_CONTAINER_RUNTIME", runtime);
    }
    let output = command.output().unwrap();
    let records = trials(&out);
    assert_eq!(records.len(), 1, "{}", stderr(&output));
    assert_outcome(&records, "t", "quits", "fail");
    assert_eq!(records[0]["verify"]["exit_code"], 125, "{}", records[0]);
    // The agent's own exit 125 is its error, not the runtime's: it ran and is scored.
    assert_ne!(records[0]["status"], "completed", "{}", records[0]);
    assert_no_leftovers(&work);
    (tmp, out)
}

#[test]
fn a_dockerfile_with_a_run_step_is_built_once_per_run() {
    if !have_podman_image("environments::a_dockerfile_with_a_run_step_is_built_once_per_run") {
        return;
    }
    let tmp = one_file_repo();
    let root = tmp.path();
    // A context of its own, copied before the RUN step, so this run really builds and runs it.
    let marker = format!("{:?} {}", Instant::now(), std::process::id());
    let dockerfile = format!(
        "FROM {BASE}\nCOPY marker.txt /marker.txt\nCOPY only-in-image /usr/local/bin/only-in-image\nRUN chmod 0755 /usr/local/bin/only-in-image && only-in-image --check\n"
    );
    write_env(
        root,
        &[("env/marker.txt", &marker), ("env/Dockerfile", &dockerfile)],
    );
    let task = |id: &str| {
        format!(
            "  - id: {id}\n    instruction: write out.txt\n    solution: sol\n    setup: only-in-image --check > setup.txt\n    verify: only-in-image --verify out.txt && grep -q ok setup.txt\n"
        )
    };
    write_suite(
        root,
        &format!(
            "name: env\nrepo: repo\ndefaults:\n  environment:\n    dockerfile: env/Dockerfile\n    context: env\n    workdir: /work/inside\ntasks:\n{}{}",
            task("one"),
            task("two")
        ),
    );
    let (output, work, out) = run_suite(root, &["--agent", "oracle", "--agent", "noop"]);
    let records = trials(&out);
    assert_eq!(records.len(), 4, "{}", stderr(&output));
    for id in ["one", "two"] {
        assert_outcome(&records, id, "oracle", "pass");
        assert_outcome(&records, id, "noop", "fail");
    }
    // One build for both tasks: one log, one image.
    let logs: Vec<_> = std::fs::read_dir(root.join("cache/environments"))
        .unwrap()
        .flatten()
        .collect();
    assert_eq!(logs.len(), 1, "{logs:?}");
    let log = std::fs::read_to_string(logs[0].path()).unwrap();
    assert!(log.contains("only-in-image: ok"), "the RUN step ran: {log}");
    let tag = logs[0]
        .file_name()
        .to_string_lossy()
        .trim_end_matches(".log")
        .replacen("localhost_deltabench-env_", "localhost/deltabench-env:", 1);
    assert!(
        Command::new("podman")
            .args(["image", "exists", &tag])
            .status()
            .unwrap()
            .success(),
        "{tag}"
    );
    assert_no_leftovers(&work);
    let _ = Command::new("podman")
        .args(["rmi", "-f", &tag])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
}

#[test]
fn a_missing_image_or_runtime_stops_the_run_before_any_trial() {
    let tmp = one_file_repo();
    let root = tmp.path();
    write_suite(
        root,
        "name: env\nrepo: repo\ndefaults:\n  environment: {image: localhost/deltabench-no-such-image:1}\ntasks:\n  - id: t\n    instruction: do it\n    verify: \"true\"\n",
    );
    let (output, _, out) = run_suite(root, &["--agent", "noop"]);
    let podman = Command::new("podman").arg("--version").output().is_ok();
    if have_tool(
        "environments::a_missing_image_or_runtime_stops_the_run_before_any_trial",
        "podman",
        podman,
    ) {
        assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
        let err = stderr(&output);
        assert!(
            err.contains("localhost/deltabench-no-such-image:1")
                && err.contains("not in the local store")
                && err.contains("image not known")
                && err.contains("no trial ran"),
            "{err}"
        );
        // The note about unvalidated tasks comes with the trials, which never started.
        assert!(!err.contains("no validated evidence"), "{err}");
        assert!(!out.exists(), "a run directory was left");
    }

    for command in ["run", "validate"] {
        let mut cmd = deltabench(root);
        cmd.arg(command)
            .arg("suite.yaml")
            .args(["--workdir"])
            .arg(root.join("work"))
            .env("DELTABENCH_CONTAINER_RUNTIME", "/nonexistent");
        if command == "run" {
            cmd.arg("--out").arg(root.join("out2"));
        }
        let output = cmd.output().unwrap();
        assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
        assert!(
            stderr(&output)
                .contains("DELTABENCH_CONTAINER_RUNTIME=/nonexistent names no container runtime"),
            "{}",
            stderr(&output)
        );
        assert!(
            !stderr(&output).contains("reference fails"),
            "{}",
            stderr(&output)
        );
    }
    assert!(!root.join("out2").exists());
    assert_no_leftovers(&root.join("work"));
}

/// In a task's container, `network: model` (the default for an agent whose calls pass the
/// gateway) gives the agent its model and nothing else, as in the sandbox.
#[test]
fn with_network_model_a_contained_agent_reaches_its_model_and_nothing_else() {
    let test =
        "environments::with_network_model_a_contained_agent_reaches_its_model_and_nothing_else";
    if have_podman_image(test) {
        crate::sandbox_reach::reaches_its_model_and_nothing_else(
            test,
            &format!("environment: {{image: {BASE}}}"),
        );
    }
}

/// A container with network `none` has its own loopback only: a real CLI told `network: none`
/// cannot reach its model (on this machine, through the gateway), refused at plan time.
#[test]
fn a_real_cli_told_network_none_cannot_reach_its_model_from_a_container() {
    let tmp = one_file_repo();
    let root = tmp.path();
    write_suite(
        root,
        "name: env\nrepo: repo\nagents:\n  claude: {kind: claude-code, binary: /bin/true, endpoint: \"http://127.0.0.1:9\", network: none}\ndefaults:\n  environment: {image: localhost/x:1}\ntasks:\n  - id: t\n    instruction: do it\n    verify: \"true\"\n",
    );
    let (output, _, out) = run_suite(root, &["--agent", "claude"]);
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{err}");
    crate::common::assert_tmp_snapshot!("network_none_cannot_reach_the_model", root, err);
    assert!(!out.exists());
}

/// Whether `kind`'s CLI is installed (see [`have_tool`]).
pub fn have_cli(test: &str, kind: HarnessKind) -> bool {
    let found = find_program(kind, None);
    have_tool(
        test,
        &format!(
            "{kind} (.ci/install-agents): {}",
            found
                .clone()
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        ),
        found.is_ok(),
    )
}

/// Claude Code (a native program: the image needs nothing of its own for it) runs in the task's
/// container against the scripted endpoint: its write lands at the workdir, and its shell call
/// runs a tool only the image has.
#[test]
fn a_real_cli_runs_inside_the_tasks_container() {
    let test = "environments::a_real_cli_runs_inside_the_tasks_container";
    if !have_podman_image(test) || !have_cli(test, HarnessKind::ClaudeCode) {
        return;
    }
    let tmp = one_file_repo();
    let root = tmp.path();
    write_files(
        root,
        &[(
            "model.yaml",
            "usage: {input_tokens: 1000, output_tokens: 20}\nsteps:\n  - text: I'll create hello.txt.\n    write: {path: hello.txt, content: \"hello from the script\\n\"}\n  - shell: only-in-image > out.txt\n  - text: Done.\n",
        )],
    );
    write_suite(
        root,
        &format!(
            "name: env\nrepo: repo\nagents:\n  a:\n    kind: claude-code\n    endpoint: scripted:model.yaml\n    model: claude-sonnet-4-5\n    env: {{CLAUDE_CODE_MAX_RETRIES: '0'}}\ntasks:\n  - id: hello\n    instruction: Create hello.txt, then run only-in-image into out.txt.\n    environment: {{image: {ONLY_IN_IMAGE}}}\n    verify: grep -q 'hello from the script' hello.txt && only-in-image --verify out.txt\n"
        ),
    );
    let (output, work, out) = run_suite(root, &[]);
    let records = trials(&out);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}\n{records:?}",
        stderr(&output)
    );
    assert_outcome(&records, "hello", "a", "pass");
    let dir = out.join("trials/hello/a/1");
    let events: Vec<serde_json::Value> = std::fs::read_to_string(dir.join("events.jsonl"))
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let spawn = events[0]["message"].as_str().unwrap();
    assert!(
        spawn.starts_with(&format!("in the container {ONLY_IN_IMAGE}: ")),
        "{spawn}"
    );
    // The CLI saw the workspace at the workdir (this machine has no /app).
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "tool_call" && e["args"].to_string().contains("/app/hello.txt")),
        "{events:#?}"
    );
    let patch = std::fs::read_to_string(dir.join("diff.patch")).unwrap();
    assert!(patch.contains("+hello from the script"), "{patch}");
    assert!(patch.contains("+only-in-image was here"), "{patch}");
    let result: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("result.json")).unwrap()).unwrap();
    assert_eq!(
        result["result"]["output"]["modified_files"],
        serde_json::json!(["hello.txt"])
    );
    assert_no_leftovers(&work);
}

/// The other CLIs that need nothing of the image run in it too: opencode (native), and
/// mini-swe-agent and aider from their virtualenv, whose Python is mounted with it; their files
/// in the trial's folder (mini-swe-agent's trajectory, aider's history) are written through.
#[test]
fn the_native_and_virtualenv_clis_run_inside_the_container() {
    let test = "environments::the_native_and_virtualenv_clis_run_inside_the_container";
    let kinds = [
        HarnessKind::Opencode,
        HarnessKind::MiniSweAgent,
        HarnessKind::Aider,
    ];
    if !have_podman_image(test) || !kinds.iter().all(|&kind| have_cli(test, kind)) {
        return;
    }
    let tmp = one_file_repo();
    let root = tmp.path();
    write_files(
        root,
        &[(
            "model.yaml",
            "steps:\n  - text: I'll create hello.txt.\n    write: {path: hello.txt, content: \"hello from the script\\n\"}\n  - shell: cat hello.txt\n  - text: Done.\n",
        )],
    );
    let price = "model: fake-model, price: {input: 3, output: 15}";
    write_suite(
        root,
        &format!(
            "name: env\nrepo: repo\nagents:\n  opencode: {{kind: opencode, endpoint: scripted:model.yaml, {price}}}\n  mini: {{kind: mini-swe-agent, endpoint: scripted:model.yaml, {price}, env: {{MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT: '1'}}}}\n  aider: {{kind: aider, endpoint: scripted:model.yaml, {price}, args: [--edit-format, diff]}}\ntasks:\n  - id: hello\n    instruction: Create hello.txt, then show it.\n    environment: {{image: {BASE}, network: host}}\n    verify: grep -q 'hello from the script' hello.txt\n"
        ),
    );
    let (output, work, out) = run_suite(root, &[]);
    let records = trials(&out);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}\n{records:?}",
        stderr(&output)
    );
    for agent in ["opencode", "mini", "aider"] {
        assert_outcome(&records, "hello", agent, "pass");
        let dir = out.join(format!("trials/hello/{agent}/1"));
        let events = std::fs::read_to_string(dir.join("events.jsonl")).unwrap();
        assert!(
            events.starts_with(&format!(
                "{{\"type\":\"system\",\"subtype\":\"spawn\",\"message\":\"in the container {BASE}: "
            )),
            "{agent}: {events}"
        );
    }
    let trajectory = out.join("trials/hello/mini/1/mini-trajectory.json");
    let trajectory = std::fs::read_to_string(&trajectory).unwrap();
    assert!(trajectory.contains("hello.txt"), "{trajectory}");
    let history = out.join("trials/hello/aider/1/aider.chat.history.md");
    assert!(std::fs::metadata(&history).unwrap().len() > 0);
    assert_no_leftovers(&work);
}

/// gptme, whose launcher links into its own virtualenv, runs in the task's container with the
/// default `network: model`: its venv and Python are mounted, its write lands in the workspace,
/// and its conversation log (read for its events) is in its HOME, written through.
#[test]
fn gptme_runs_inside_the_tasks_container() {
    let test = "environments::gptme_runs_inside_the_tasks_container";
    if !have_podman_image(test) || !have_cli(test, HarnessKind::Gptme) {
        return;
    }
    let tmp = one_file_repo();
    let root = tmp.path();
    write_files(
        root,
        &[(
            "model.yaml",
            "usage: {input_tokens: 1000, output_tokens: 20}\nsteps:\n  - text: I'll create hello.txt.\n    write: {path: hello.txt, content: \"hello from the script\\n\"}\n  - shell: cat hello.txt\n  - text: Done.\n",
        )],
    );
    write_suite(
        root,
        &format!(
            "name: env\nrepo: repo\nagents:\n  a: {{kind: gptme, endpoint: scripted:model.yaml, model: fake-model, price: {{input: 3, output: 15}}}}\ntasks:\n  - id: hello\n    instruction: Create hello.txt, then show it.\n    environment: {{image: {BASE}}}\n    verify: grep -q 'hello from the script' hello.txt\n"
        ),
    );
    let (output, work, out) = run_suite(root, &[]);
    let records = trials(&out);
    assert_eq!(
        output.status.code(),
        Some(0),
        "{}\n{records:?}",
        stderr(&output)
    );
    assert_outcome(&records, "hello", "a", "pass");
    let dir = out.join("trials/hello/a/1");
    let events = std::fs::read_to_string(dir.join("events.jsonl")).unwrap();
    assert!(
        events.starts_with(&format!(
            "{{\"type\":\"system\",\"subtype\":\"spawn\",\"message\":\"in the container {BASE}: "
        )),
        "{events}"
    );
    assert!(events.contains("\"name\":\"save\""), "{events}");
    let record = &records[0];
    assert_eq!(record["usage"]["input_tokens"], 5000, "{record:#}");
    assert!(
        record["session_id"]
            .as_str()
            .is_some_and(|id| dir.join("home/.local/share/gptme/logs").join(id).is_dir()),
        "{record:#}"
    );
    assert_no_leftovers(&work);
}

/// A CLI that needs what the image lacks (Codex runs through `node`; the base image has none)
/// stops the run before any trial, naming the image, the agent and the tool.
#[test]
fn an_image_lacking_a_clis_interpreter_stops_the_run_before_any_trial() {
    let test = "environments::an_image_lacking_a_clis_interpreter_stops_the_run";
    if !have_podman_image(test) || !have_cli(test, HarnessKind::Codex) {
        return;
    }
    let tmp = one_file_repo();
    let root = tmp.path();
    write_files(root, &[("model.yaml", "steps:\n  - text: Done.\n")]);
    write_suite(
        root,
        &format!(
            "name: env\nrepo: repo\nagents:\n  a: {{kind: codex, endpoint: scripted:model.yaml, model: gpt-5.5}}\ntasks:\n  - id: t\n    instruction: do it\n    environment: {{image: {BASE}, network: host}}\n    verify: \"true\"\n"
        ),
    );
    let (output, work, out) = run_suite(root, &[]);
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "image {BASE} lacks node, which agent 'a' (codex) needs"
        )),
        "{err}"
    );
    assert!(err.contains("hint: add Node.js to the image"), "{err}");
    assert!(!out.join("trials.jsonl").exists(), "a trial ran");
    assert_no_leftovers(&work);
}

/// `network: model` runs deltabench itself in the container: an image that cannot (here, one
/// without the unwinder every Rust program on glibc links, libgcc_s, nor zlib, which a build
/// may link) stops the run before any trial, saying what to do instead.
#[test]
fn an_image_that_cannot_run_the_forwarder_stops_a_model_network_run() {
    let test = "environments::an_image_that_cannot_run_the_forwarder_stops_a_model_network_run";
    if !have_podman_image(test) {
        return;
    }
    let ldd = Command::new("ldd")
        .arg(env!("CARGO_BIN_EXE_deltabench"))
        .output()
        .unwrap();
    assert!(
        stdout(&ldd).contains("libgcc_s.so"),
        "premise: this build of deltabench links libgcc_s, which the test image lacks; ldd says:\n{}",
        stdout(&ldd)
    );
    let tmp = one_file_repo();
    let root = tmp.path();
    write_files(
        root,
        &[
            ("model.yaml", "steps:\n  - text: Done.\n"),
            (
                "env/Dockerfile",
                &format!(
                    "FROM {BASE}\nRUN rm -f /usr/lib/*-linux-gnu/libz.so* /lib/*-linux-gnu/libz.so* /usr/lib/*-linux-gnu/libgcc_s.so* /lib/*-linux-gnu/libgcc_s.so*\n"
                ),
            ),
        ],
    );
    write_suite(
        root,
        "name: env\nrepo: repo\nagents:\n  a: {kind: command, run: \"true\", gateway: true, endpoint: scripted:model.yaml}\ntasks:\n  - id: t\n    instruction: do it\n    environment: {dockerfile: env/Dockerfile}\n    verify: \"true\"\n",
    );
    let (output, work, out) = run_suite(root, &[]);
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{err}");
    assert!(
        err.contains("lacks a C library deltabench runs with, which agent 'a' needs: under `network: model` deltabench"),
        "{err}"
    );
    assert!(err.contains("or set `network: host` on agent 'a'"), "{err}");
    assert!(!out.join("trials.jsonl").exists(), "a trial ran");
    assert_no_leftovers(&work);
}

#[test]
fn gc_removes_the_containers_of_a_killed_run() {
    if !have_podman_image("environments::gc_removes_the_containers_of_a_killed_run") {
        return;
    }
    let tmp = one_file_repo();
    let root = tmp.path();
    let seconds = 3000 + std::process::id() % 1000;
    let token = format!("sleep {seconds}");
    write_suite(
        root,
        &format!(
            "name: env\nrepo: repo\ndefaults:\n  environment: {{image: {BASE}}}\nagents:\n  sleeper: {{kind: command, run: \"{token}\", timeout: 10m}}\ntasks:\n  - id: t\n    instruction: wait\n    verify: \"true\"\n"
        ),
    );
    std::fs::create_dir_all(root.join("work")).unwrap();
    let out = root.join("out");
    let mut child = deltabench(root)
        .args(["run", "suite.yaml", "--agent", "sleeper", "--workdir"])
        .arg(root.join("work"))
        .arg("--out")
        .arg(&out)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let label = format!("out-{}", child.id());
    // The client's command line holds the token too: wait for the container itself.
    wait_until(
        Duration::from_secs(60),
        "the start of the agent's container",
        || running_labelled(&label) > 0 && processes_with(&token) >= 2,
    );
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(
        containers_labelled(&label).len(),
        1,
        "the container outlives a kill -9 of the runner"
    );

    let gc = deltabench(root).arg("gc").output().unwrap();
    assert_eq!(gc.status.code(), Some(0), "{}", stderr(&gc));
    // When this fails, what happened to the container says who removed it.
    let events = || {
        let out = Command::new("podman")
            .args(["events", "--stream=false", "--since", "5m", "--filter"])
            .arg(format!("label=deltabench.run={label}"))
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(
        stdout(&gc).contains("removed container"),
        "{}\nthe container's events:\n{}",
        stdout(&gc),
        events()
    );
    assert_eq!(containers_labelled(&label), Vec::<String>::new());
    wait_until(
        Duration::from_secs(5),
        "the end of the container's process after gc",
        || processes_with(&token) == 0,
    );
    assert_eq!(mounts_under(&root.join("work")), Vec::<String>::new());
    assert_no_leftovers(&root.join("work"));
}

#[test]
fn a_bad_environment_is_a_located_suite_error() {
    let tmp = one_file_repo();
    let root = tmp.path();
    write_files(root, &[("env/Dockerfile", "FROM scratch\n")]);
    let cases = [
        (
            "{image: localhost/x:1, dockerfile: env/Dockerfile}",
            "the environment sets both `image` and `dockerfile`; keep exactly one",
        ),
        (
            "{image: localhost/x:1, network: bridge}",
            "unknown network mode: 'bridge'. Valid networks for an environment: none, host",
        ),
        (
            "{dockerfile: env/Dockerfile, workdir: app}",
            "invalid workdir 'app': use an absolute folder other than /, such as /app",
        ),
        (
            "{workdir: /app}",
            "the environment needs exactly one of `image` (a local image name) and `dockerfile` (a path)",
        ),
        (
            "{image: localhost/x:1, cpus: 0}",
            "invalid cpus 0: use a number above 0",
        ),
        (
            "{image: localhost/x:1, memory: lots}",
            "invalid memory 'lots': use a size of at least 6MiB",
        ),
    ];
    for (environment, expected) in cases {
        write_suite(
            root,
            &format!(
                "name: env\nrepo: repo\ntasks:\n  - id: t\n    instruction: do it\n    environment: {environment}\n    verify: \"true\"\n"
            ),
        );
        let output = deltabench(root)
            .args(["validate", "suite.yaml"])
            .output()
            .unwrap();
        assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
        assert!(
            stderr(&output).contains(expected) && stderr(&output).contains("suite.yaml:6:"),
            "{environment}: {}",
            stderr(&output)
        );
    }
}

/// `cpus` and `memory` limit every container of the task: its verify command reads them from
/// its own cgroup (bad values: `a_bad_environment_is_a_located_suite_error`).
#[test]
fn an_environments_cpus_and_memory_limit_its_containers() {
    if !have_podman_image("environments::an_environments_cpus_and_memory_limit_its_containers") {
        return;
    }
    let tmp = one_file_repo();
    let root = tmp.path();
    // cgroup v2's files, else v1's (Podman on a v1 or hybrid host).
    let limits = "q=$(cat /sys/fs/cgroup/cpu.max 2>/dev/null || echo \"$(cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us) $(cat /sys/fs/cgroup/cpu/cpu.cfs_period_us)\")\n\
                  m=$(cat /sys/fs/cgroup/memory.max 2>/dev/null || cat /sys/fs/cgroup/memory/memory.limit_in_bytes)\n\
                  echo \"cpu $q, memory $m\"\ntest \"$q\" = '50000 100000' && test \"$m\" = 67108864\n";
    write_files(
        root,
        &[("sol/a.txt", "fixed\n"), ("hidden/limits.sh", limits)],
    );
    write_suite(
        root,
        &format!(
            "name: env\nrepo: repo\ntasks:\n  - id: t\n    instruction: fix a.txt\n    solution: sol\n    tests: hidden\n    \
             environment: {{image: {BASE}, cpus: 0.5, memory: 64MiB}}\n    \
             verify: sh limits.sh && grep -q fixed a.txt\n"
        ),
    );
    let (output, _, out) = run_suite(root, &["--agent", "oracle", "--agent", "noop"]);
    let records = trials(&out);
    assert_eq!(records.len(), 2, "{}", stderr(&output));
    assert_outcome(&records, "t", "oracle", "pass");
    assert_outcome(&records, "t", "noop", "fail");
}

/// An image that does not build stops only the tasks that use it: their trials are unscored
/// with the build's reason (exit 3), the other tasks run and are scored; `validate` names the
/// task it could not check.
#[test]
fn an_image_that_does_not_build_stops_only_its_tasks() {
    if !have_podman_image("environments::an_image_that_does_not_build_stops_only_its_tasks") {
        return;
    }
    let tmp = one_file_repo();
    let root = tmp.path();
    write_files(
        root,
        &[
            ("sol/a.txt", "fixed\n"),
            (
                "broken/Dockerfile",
                &format!("FROM {BASE}\nRUN echo the build breaks here >&2 && false\n"),
            ),
        ],
    );
    write_suite(
        root,
        "name: env\nrepo: repo\ntasks:\n  - id: broken\n    instruction: fix a.txt\n    solution: sol\n    \
         environment: {dockerfile: broken/Dockerfile}\n    verify: grep -q fixed a.txt\n  \
         - id: host\n    instruction: fix a.txt\n    solution: sol\n    verify: grep -q fixed a.txt\n",
    );
    let (output, _, out) = run_suite(root, &["--agent", "oracle", "--agent", "noop"]);
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    let records = trials(&out);
    assert_eq!(records.len(), 4, "{}", stderr(&output));
    assert_outcome(&records, "host", "oracle", "pass");
    assert_outcome(&records, "host", "noop", "fail");
    for record in records.iter().filter(|r| r["task"] == "broken") {
        assert_eq!(record["outcome"], "infra_error", "{record}");
        let why = record["infra_error"].as_str().unwrap();
        assert!(
            why.starts_with("its environment cannot be used, so the trial did not run: "),
            "{why}"
        );
    }

    let validated = deltabench(root)
        .args(["validate", "suite.yaml"])
        .output()
        .unwrap();
    let said = format!("{}{}", stdout(&validated), stderr(&validated));
    assert_eq!(validated.status.code(), Some(1), "{said}");
    assert!(
        said.contains("could not be checked: its environment cannot be used"),
        "{said}"
    );
    assert!(said.contains("ok   host"), "{said}");
}

/// `deltabench prepare` builds each image once and says so; a second time they are there; a
/// Dockerfile that does not build is named with its log's tail (exit 2), and one that needs the
/// network (a FROM image from a registry) says so and how to build it once.
#[test]
fn prepare_builds_each_image_once_and_names_what_needs_the_network() {
    if !have_podman_image("environments::prepare_builds_each_image_once") {
        return;
    }
    let tmp = one_file_repo();
    let root = tmp.path();
    // A label unique to this test run, so the image is built here, not found from a past run.
    let unique = format!("{}-{}", std::process::id(), root.display());
    write_files(
        root,
        &[
            (
                "ok/Dockerfile",
                &format!("FROM {BASE}\nLABEL deltabench.test=\"{unique}\"\nRUN true\n"),
            ),
            (
                "remote/Dockerfile",
                "FROM registry.invalid/deltabench/none:1\nRUN true\n",
            ),
        ],
    );
    let suite = |tasks: &str| write_suite(root, &format!("name: env\nrepo: repo\ntasks:\n{tasks}"));
    let task = |id: &str, dir: &str| {
        format!(
            "  - id: {id}\n    instruction: x\n    environment: {{dockerfile: {dir}/Dockerfile}}\n    verify: \"true\"\n"
        )
    };
    suite(&format!("{}{}", task("a", "ok"), task("b", "ok")));
    let prepare = || {
        deltabench(root)
            .args(["prepare", "suite.yaml"])
            .output()
            .unwrap()
    };
    let first = prepare();
    assert_eq!(first.status.code(), Some(0), "{}", stderr(&first));
    let said = stdout(&first);
    assert!(
        said.starts_with("built   localhost/deltabench-env:"),
        "{said}"
    );
    assert!(said.contains(" (a, b) in "), "{said}");
    assert!(
        said.ends_with("1 image(s) ready, 0 failed; later runs use them without building\n"),
        "{said}"
    );
    let again = stdout(&prepare());
    assert!(
        again.starts_with("present localhost/deltabench-env:"),
        "{again}"
    );

    suite(&format!("{}{}", task("a", "ok"), task("far", "remote")));
    let output = prepare();
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    let said = stdout(&output);
    assert!(said.contains("FAILED  localhost/deltabench-env:"), "{said}");
    assert!(said.contains("(far):\n  building "), "{said}");
    assert!(said.contains("registry.invalid"), "{said}");
    assert!(
        said.contains("this environment needs the network to build, once: run `deltabench prepare SUITE` where there is network"),
        "{said}"
    );
    assert!(
        said.ends_with("1 image(s) ready, 1 failed; later runs use them without building\n"),
        "{said}"
    );
}

/// A Dockerfile's `FROM` image mapped to one this machine has (the suite's `base_images:`, or
/// `--base-image FROM=IMAGE` over it): the environment builds offline from the local image, and
/// the manifest records the map. A bad flag says what it wants.
#[test]
fn base_images_map_a_dockerfiles_from_to_a_local_image() {
    if !have_podman_image("environments::base_images_map_a_dockerfiles_from_to_a_local_image") {
        return;
    }
    let tmp = one_file_repo();
    let root = tmp.path();
    let unique = format!("{}-{}", std::process::id(), root.display());
    write_files(
        root,
        &[
            ("sol/a.txt", "fixed\n"),
            (
                "env/Dockerfile",
                &format!(
                    "FROM registry.invalid/upstream/debian:12 AS base\nLABEL deltabench.test=\"{unique}\"\nRUN echo built-here > /opt/marker\n"
                ),
            ),
        ],
    );
    let tasks = "tasks:\n  - id: t\n    instruction: fix a.txt\n    solution: sol\n    \
                 environment: {dockerfile: env/Dockerfile}\n    verify: grep -q built-here /opt/marker && grep -q fixed a.txt\n";
    write_suite(
        root,
        &format!(
            "name: env\nrepo: repo\nbase_images:\n  registry.invalid/upstream/debian:12: {BASE}\n{tasks}"
        ),
    );
    let (output, _, out) = run_suite(root, &["--agent", "oracle", "--agent", "noop"]);
    let records = trials(&out);
    assert_eq!(records.len(), 2, "{}", stderr(&output));
    assert_outcome(&records, "t", "oracle", "pass");
    assert_outcome(&records, "t", "noop", "fail");
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(
        manifest["base_images"]["registry.invalid/upstream/debian:12"], BASE,
        "{manifest}"
    );

    // The same map from the command line, for a suite that has none.
    write_suite(root, &format!("name: env\nrepo: repo\n{tasks}"));
    let prepared = deltabench(root)
        .args(["prepare", "suite.yaml", "--base-image"])
        .arg(format!("registry.invalid/upstream/debian:12={BASE}"))
        .output()
        .unwrap();
    assert_eq!(prepared.status.code(), Some(0), "{}", stderr(&prepared));
    assert!(
        stdout(&prepared).starts_with("present localhost/deltabench-env:"),
        "{}",
        stdout(&prepared)
    );
    let bad = deltabench(root)
        .args(["prepare", "suite.yaml", "--base-image", "ubuntu"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2), "{}", stderr(&bad));
    assert!(
        stderr(&bad).contains("'ubuntu': give FROM=IMAGE"),
        "{}",
        stderr(&bad)
    );
}
