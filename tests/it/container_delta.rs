//! `delta: container` through the real binary and Podman: what the agent changes in its container
//! outside the workspace reaches the verify command, except the protected paths, and a runtime
//! that cannot read or save a container's changes is said before any trial.

use std::path::Path;

use crate::common::{
    assert_no_leftovers, deltabench, one_file_repo, run_suite, stderr, trials, write_files,
    write_suite,
};
use crate::environments::{BASE, have_podman_image};

/// One task per delta scope, the same otherwise: its reference writes `/etc/app.conf` (outside the
/// workspace) and its verify command checks it.
fn write_conf_suite(root: &Path, extra_agents: &str) {
    write_files(
        root,
        &[(
            "sol/solve.sh",
            "set -e\necho port=8080 > /etc/app.conf\necho done > solved.txt\n",
        )],
    );
    let task = |id: &str, delta: &str| {
        format!(
            "  - id: {id}\n    instruction: configure the app on port 8080\n    solution_script: sol/solve.sh\n    environment: {{image: {BASE}, delta: {delta}}}\n    verify: grep -q port=8080 /etc/app.conf\n"
        )
    };
    write_suite(
        root,
        &format!(
            "name: cd\nrepo: repo\nmax_diff: 10KiB\nagents:{}{}\ntasks:\n{}{}",
            if extra_agents.is_empty() { " {}" } else { "\n" },
            extra_agents.trim_end(),
            task("container", "container"),
            task("workspace", "workspace")
        ),
    );
}

fn record<'a>(records: &'a [serde_json::Value], task: &str, agent: &str) -> &'a serde_json::Value {
    records
        .iter()
        .find(|r| r["task"] == task && r["agent"] == agent)
        .unwrap_or_else(|| panic!("no record of {task} / {agent}"))
}

#[test]
fn a_change_outside_the_workspace_counts_only_with_delta_container_and_never_the_test_runners() {
    if !have_podman_image("container_delta::a_change_outside_the_workspace_counts") {
        return;
    }
    let tmp = one_file_repo();
    let root = tmp.path();
    write_conf_suite(
        root,
        concat!(
            // Makes the verify command's own program pass whatever it is asked. (`cd /usr/bin`
            // names a system folder: it stays the image's, never the host's mounted over it.)
            "  forger: {kind: command, run: \"cd /usr/bin && printf '#!/bin/sh\\nexit 0\\n' > grep\", timeout: 2m}\n",
            // Puts one earlier on PATH, shadowing the image's: never carried on, and tampering.
            "  shadow: {kind: command, run: \"cd /usr/local/bin && printf '#!/bin/sh\\nexit 0\\n' > grep && chmod +x grep\", timeout: 2m}\n",
            "  big: {kind: command, run: \"echo port=8080 > /etc/app.conf && head -c 20000 /dev/urandom > /opt/big\", timeout: 2m}\n",
        ),
    );
    let (output, work, out) = run_suite(
        root,
        &[
            "--task",
            "container",
            "--agent",
            "oracle",
            "--agent",
            "noop",
            "--agent",
            "forger",
            "--agent",
            "shadow",
            "--agent",
            "big",
        ],
    );
    let records = trials(&out);
    assert_eq!(records.len(), 5, "{}", stderr(&output));
    let oracle = record(&records, "container", "oracle");
    assert_eq!(oracle["outcome"], "pass", "{oracle}");
    assert_eq!(
        oracle["container_changes"],
        serde_json::json!(["A /etc/app.conf"]),
        "{oracle}"
    );
    let trial = out.join("trials/container/oracle/1");
    let listing = std::fs::read_to_string(trial.join("container-delta.txt")).unwrap();
    assert!(listing.contains("A /etc/app.conf\n"), "{listing}");
    let mut archive =
        tar::Archive::new(std::fs::File::open(trial.join("container-delta.tar")).unwrap());
    let mut names = Vec::new();
    for entry in archive.entries().unwrap() {
        let mut entry = entry.unwrap();
        let name = entry.path().unwrap().display().to_string();
        if name == "etc/app.conf" {
            let mut body = String::new();
            std::io::Read::read_to_string(&mut entry, &mut body).unwrap();
            assert_eq!(body, "port=8080\n");
        }
        names.push(name);
    }
    assert!(names.contains(&"etc/app.conf".to_owned()), "{names:?}");
    // The workspace's part of the reference is in its diff as ever, and the container's
    // change after it.
    let patch = std::fs::read_to_string(trial.join("diff.patch")).unwrap();
    assert!(patch.contains("+done"), "{patch}");
    assert!(
        patch.contains("diff --container /etc/app.conf\nnew file, 10 bytes\n")
            && patch.contains("+port=8080\n"),
        "{patch}"
    );

    assert_eq!(record(&records, "container", "noop")["outcome"], "fail");
    let forger = record(&records, "container", "forger");
    assert_eq!(forger["outcome"], "fail", "{forger}");
    assert_eq!(
        forger["tampered"],
        serde_json::json!(["/usr/bin/grep (in the container)"]),
        "{forger}"
    );
    let shadow = record(&records, "container", "shadow");
    assert_eq!(shadow["outcome"], "fail", "{shadow}");
    assert_eq!(
        shadow["tampered"],
        serde_json::json!(["/usr/local/bin/grep (in the container)"]),
        "{shadow}"
    );
    let listing =
        std::fs::read_to_string(out.join("trials/container/shadow/1/container-delta.txt")).unwrap();
    assert!(
        listing.contains("A /usr/local/bin/grep  (protected: not applied)"),
        "{listing}"
    );
    let big = record(&records, "container", "big");
    assert_eq!(big["outcome"], "fail", "{big}");
    assert!(
        big["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("max_diff"),
        "{big}"
    );
    assert_no_leftovers(&work);
    assert_no_delta_images(&out);

    // With `delta: workspace` the same reference's change to /etc is dropped before verify.
    let out = root.join("out-workspace");
    let output = run_task(root, &out, "workspace", None, &["oracle"]);
    let records = trials(&out);
    assert_eq!(records.len(), 1, "{}", stderr(&output));
    assert_eq!(records[0]["outcome"], "fail", "{}", records[0]);
    assert!(records[0].get("container_changes").is_none());
}

#[test]
fn validate_proves_a_task_whose_reference_changes_the_container() {
    if !have_podman_image("container_delta::validate_proves_a_task") {
        return;
    }
    let tmp = one_file_repo();
    let root = tmp.path();
    write_conf_suite(root, "");
    std::fs::create_dir_all(root.join("work")).unwrap();
    let validate = |task: &str| {
        let output = deltabench(root)
            .args(["validate", "suite.yaml", "--task", task, "--workdir"])
            .arg(root.join("work"))
            .output()
            .unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&output.stdout),
            stderr(&output)
        );
        (output.status.code(), said)
    };
    let (code, said) = validate("container");
    assert_eq!(code, Some(0), "{said}");
    let (code, said) = validate("workspace");
    assert_eq!(code, Some(1), "{said}");
    assert!(said.contains("workspace"), "{said}");
}

/// A runtime wrapper that fails one subcommand (`fail` is `diff`, or `commit` of a trial's
/// verify image) and passes everything else to Podman.
fn failing_runtime(dir: &Path, fail: &str) -> std::path::PathBuf {
    let path = dir.join("podman-wrapper");
    let body = match fail {
        "diff" => {
            "if [ \"$1\" = diff ]; then echo 'Error: unrecognized command `podman diff`' >&2; exit 125; fi\n"
        }
        _ => {
            "case \"$1 $3\" in 'commit localhost/deltabench-delta:'*) echo 'Error: committing container: no space left on device' >&2; exit 125;; esac\n"
        }
    };
    std::fs::write(&path, format!("#!/bin/sh\n{body}exec podman \"$@\"\n")).unwrap();
    let mut permissions = std::fs::metadata(&path).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o755);
    std::fs::set_permissions(&path, permissions).unwrap();
    path
}

#[test]
fn a_runtime_that_cannot_diff_is_said_before_any_trial_and_a_failed_commit_loses_nothing() {
    if !have_podman_image("container_delta::a_runtime_that_cannot_diff") {
        return;
    }
    let tmp = one_file_repo();
    let root = tmp.path();
    write_conf_suite(root, "");
    let bin = crate::common::temp_dir();

    let runtime = failing_runtime(bin.path(), "diff");
    let work = root.join("work");
    let output = run_task(
        root,
        &root.join("out-diff"),
        "container",
        Some(&runtime),
        &["oracle"],
    );
    let said = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{said}");
    assert!(
        said.contains("task 'container' sets `delta: container`, which cannot work here")
            && said.contains("unrecognized command")
            && said.contains("no trial ran"),
        "{said}"
    );
    assert!(
        !root.join("out-diff/trials.jsonl").exists() || trials(&root.join("out-diff")).is_empty()
    );

    let runtime = failing_runtime(bin.path(), "commit");
    let out = root.join("out-commit");
    let output = run_task(root, &out, "container", Some(&runtime), &["oracle"]);
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    let records = trials(&out);
    let why = records[0]["infra_error"].as_str().unwrap_or_default();
    assert!(
        why.contains("cannot take the container's delta")
            && why.contains("no space left on device"),
        "{}",
        records[0]
    );
    // What was read before the failure is kept with the trial.
    let trial = out.join("trials/container/oracle/1");
    for file in ["container-delta.txt", "container-delta.tar", "diff.patch"] {
        assert!(trial.join(file).is_file(), "{file}");
    }
    assert_no_leftovers(&work);
}

/// `deltabench run suite.yaml --task TASK` with `agents`, into `out`, with `runtime` as the
/// container runtime when given.
fn run_task(
    root: &Path,
    out: &Path,
    task: &str,
    runtime: Option<&Path>,
    agents: &[&str],
) -> std::process::Output {
    let work = root.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let mut command = deltabench(root);
    command.args(["run", "suite.yaml", "--task", task]);
    for agent in agents {
        command.args(["--agent", agent]);
    }
    command.arg("--workdir").arg(&work).arg("--out").arg(out);
    if let Some(runtime) = runtime {
        command.env("DELTABENCH_CONTAINER_RUNTIME", runtime);
    }
    command.output().unwrap()
}

/// No verify image of the run in `out` is left in the store.
fn assert_no_delta_images(out: &Path) {
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("manifest.json")).unwrap()).unwrap();
    let pid = manifest["workdir"]
        .as_str()
        .unwrap()
        .rsplit('-')
        .next()
        .unwrap()
        .to_owned();
    let out = std::process::Command::new("podman")
        .args(["images", "--format", "{{.Repository}}:{{.Tag}}"])
        .output()
        .unwrap();
    let left: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(&format!("deltabench-delta:out-{pid}-")))
        .map(str::to_owned)
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// A task whose tests check live state: a server the reference starts and leaves running.
#[test]
fn in_place_verify_sees_the_server_the_reference_left_running_and_says_so() {
    if !have_podman_image("container_delta::in_place_verify_sees_the_server") {
        return;
    }
    let tmp = one_file_repo();
    let root = tmp.path();
    write_files(
        root,
        &[(
            "sol/solve.sh",
            "mkdir -p /tmp/site && echo hello > /tmp/site/index.html\n(python3 -m http.server 8000 --bind 127.0.0.1 --directory /tmp/site >/dev/null 2>&1 &)\n# Until the server answers.\nfor _ in $(seq 200); do python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", 8000))' 2>/dev/null && break; sleep 0.05; done\n",
        )],
    );
    let fetch = "python3 -c \"import urllib.request; assert urllib.request.urlopen(''http://127.0.0.1:8000/'').read() == b''hello\\\\n''\"";
    let task = |id: &str, in_place: bool| {
        format!(
            "  - id: {id}\n    instruction: serve hello on port 8000\n    solution_script: sol/solve.sh\n    environment: {{image: {BASE}}}\n    verify: {{run: '{fetch}', in_place: {in_place}}}\n"
        )
    };
    write_suite(
        root,
        &format!(
            "name: live\nrepo: repo\nagents: {{}}\ntasks:\n{}{}",
            task("live", true),
            task("fresh", false)
        ),
    );
    let (output, work, out) = run_suite(root, &["--agent", "oracle", "--agent", "noop"]);
    let records = trials(&out);
    assert_eq!(records.len(), 4, "{}", stderr(&output));
    let live = record(&records, "live", "oracle");
    assert_eq!(live["outcome"], "pass", "{live}");
    assert_eq!(live["in_place"], true, "{live}");
    assert_eq!(record(&records, "live", "noop")["outcome"], "fail");
    // In a fresh container the server is gone.
    let fresh = record(&records, "fresh", "oracle");
    assert_eq!(fresh["outcome"], "fail", "{fresh}");
    assert!(fresh.get("in_place").is_none(), "{fresh}");
    let report = deltabench(root)
        .args(["report"])
        .arg(&out)
        .args(["--format", "junit"])
        .output()
        .unwrap();
    let junit = String::from_utf8_lossy(&report.stdout);
    assert!(junit.contains("checked in place"), "{junit}");
    assert_no_leftovers(&work);
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("manifest.json")).unwrap()).unwrap();
    let pid = manifest["workdir"]
        .as_str()
        .unwrap()
        .rsplit('-')
        .next()
        .unwrap();
    let left = std::process::Command::new("podman")
        .args(["ps", "-a", "-q", "--filter"])
        .arg(format!("label=deltabench.run=out-{pid}"))
        .output()
        .unwrap();
    assert!(
        left.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&left.stdout)
    );
}

#[test]
fn in_place_without_an_environment_is_a_located_suite_error() {
    let tmp = one_file_repo();
    let root = tmp.path();
    write_suite(
        root,
        "name: live\nrepo: repo\nagents: {}\ntasks:\n  - id: t\n    instruction: x\n    verify: {run: 'true', in_place: true}\n",
    );
    let output = deltabench(root)
        .args(["validate", "suite.yaml"])
        .output()
        .unwrap();
    let said = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{said}");
    assert!(
        said.contains("suite.yaml:7:")
            && said.contains("task 't' sets `in_place: true`, which runs verify in the agent's own container, and has no `environment:`"),
        "{said}"
    );
}

/// The same commands through the Docker code path (Podman's Docker-compatible CLI named
/// `docker`): no fd 3 start mark, `diff`, `inspect`, `export`, `run -i` and `commit` alike.
#[test]
fn the_container_delta_works_through_the_docker_client_too() {
    if !have_podman_image("container_delta::the_container_delta_works_through_the_docker_client") {
        return;
    }
    let tmp = one_file_repo();
    let root = tmp.path();
    write_conf_suite(root, "");
    let bin = crate::common::temp_dir();
    let docker = bin.path().join("docker");
    std::os::unix::fs::symlink(crate::environments::which_podman(), &docker).unwrap();
    let (work, out) = (root.join("work"), root.join("out"));
    let output = run_task(root, &out, "container", Some(&docker), &["oracle", "noop"]);
    let records = trials(&out);
    assert_eq!(records.len(), 2, "{}", stderr(&output));
    let oracle = record(&records, "container", "oracle");
    assert_eq!(oracle["outcome"], "pass", "{oracle}");
    assert_eq!(
        oracle["container_changes"],
        serde_json::json!(["A /etc/app.conf"])
    );
    assert_eq!(record(&records, "container", "noop")["outcome"], "fail");
    assert_no_leftovers(&work);
    assert_no_delta_images(&out);
}
