//! Dispose exactly once on every path, through the real binary with real subprocesses.

use std::time::Duration;

use crate::common::{
    assert_no_leftovers, descendant_running, one_file_repo, run_suite, stderr, trials, wait_until,
    write_suite,
};

const AGENTS: &str = r#"
agents:
  ok:
    kind: mock
    apply_writes: true
    responses:
      - {type: assistant, text: "fixing"}
      - {type: tool_call, name: write, args: {path: a.txt, content: "fixed\n"}}
  failing:
    kind: mock
    apply_writes: true
    responses:
      - {type: tool_call, name: write, args: {path: a.txt, content: "fixed\n"}}
      - {type: assistant, text: "never sent"}
    simulate_error: {after: 1, message: "harness died", code: sdk_error}
  slow: {kind: command, run: "echo started; sleep 30", timeout: 1s}
  panicking:
    kind: mock
    responses: [{type: assistant, text: "about to panic"}]
    simulate_panic: 0
"#;

fn suite(extra: &str) -> String {
    format!(
        "name: lifecycle\nrepo: repo\n{AGENTS}\ntasks:\n  - id: fix\n    instruction: write fixed into a.txt\n    verify: \"grep -q fixed a.txt\"\n{extra}"
    )
}

fn dispose_count(out: &std::path::Path, agent: &str) -> usize {
    let text =
        std::fs::read_to_string(out.join(format!("trials/fix/{agent}/1/result.json"))).unwrap();
    let result: serde_json::Value = serde_json::from_str(&text).unwrap();
    result["lifecycle"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|step| step[0] == "dispose")
        .count()
}

#[test]
fn every_path_disposes_once_and_scores_on_the_delta() {
    let tmp = one_file_repo();
    write_suite(tmp.path(), &suite(""));
    let (output, work, out) = run_suite(tmp.path(), &["-j", "4"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));

    let records = trials(&out);
    let by_agent = |name: &str| records.iter().find(|r| r["agent"] == name).unwrap().clone();
    let ok = by_agent("ok");
    assert_eq!(
        (ok["status"].as_str(), ok["outcome"].as_str()),
        (Some("completed"), Some("pass"))
    );

    // The agent failed, but what it wrote is still there: scored on the delta, status says error.
    let failing = by_agent("failing");
    assert_eq!(failing["status"], "error");
    assert_eq!(failing["error"]["code"], "sdk_error");
    assert_eq!(failing["error"]["message"], "harness died");
    assert_eq!(failing["outcome"], "pass");

    let slow = by_agent("slow");
    assert_eq!(slow["status"], "max_duration");
    assert_eq!(slow["error"]["code"], "timeout");
    assert_eq!(slow["outcome"], "fail");

    let panicking = by_agent("panicking");
    assert_eq!(panicking["status"], "error");
    assert!(
        panicking["error"]["message"]
            .as_str()
            .unwrap()
            .contains("panicked")
    );
    assert_eq!(panicking["outcome"], "fail");

    for agent in ["ok", "failing", "slow", "panicking"] {
        assert_eq!(dispose_count(&out, agent), 1, "{agent}");
    }
    assert_no_leftovers(&work);
}

#[test]
fn interrupt_aborts_running_trials_and_still_disposes() {
    let tmp = one_file_repo();
    let go = tmp.path().join("go");
    write_suite(
        tmp.path(),
        &format!(
            "name: abort\nrepo: repo\nagents:\n  sleeper: {{kind: command, run: \"[ -f {} ] || sleep 60; echo fixed > a.txt\"}}\ntasks:\n  - id: fix\n    instruction: x\n    verify: \"grep -q fixed a.txt\"\n",
            go.display()
        ),
    );
    let (mut child, work, out) = run_until_the_agent_runs(tmp.path(), "sleeper");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(
        status.code(),
        Some(130),
        "an interrupted run is not a complete run"
    );
    let records = trials(&out);
    assert_eq!(records.len(), 1);
    assert_eq!(records[0]["status"], "aborted");
    assert_eq!(records[0]["error"]["code"], "aborted");
    // Cut short by the user, not failed by the agent: not scored, and resume runs it again.
    assert_eq!(records[0]["outcome"], "infra_error");
    assert_eq!(records[0]["interrupted"], true);
    assert_eq!(dispose_count(&out, "sleeper"), 1);
    assert_no_leftovers(&work);

    std::fs::write(&go, "").unwrap();
    let resumed = crate::common::deltabench(tmp.path())
        .arg("resume")
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(resumed.status.code(), Some(0), "{}", stderr(&resumed));
    let records = trials(&out);
    assert_eq!(records.len(), 2, "appended, not rewritten");
    assert_eq!(records[1]["outcome"], "pass");
    let report = crate::common::deltabench(tmp.path())
        .args(["report", "--format", "csv"])
        .arg(&out)
        .output()
        .unwrap();
    let csv = String::from_utf8_lossy(&report.stdout).into_owned();
    assert_eq!(
        csv.lines().count(),
        2,
        "the resumed record superseded the interrupted one:\n{csv}"
    );
    assert!(
        csv.lines()
            .nth(1)
            .unwrap()
            .starts_with("fix,sleeper,1,pass,"),
        "{csv}"
    );
}

#[test]
fn forty_trials_at_four_jobs_are_each_recorded_once() {
    let tmp = one_file_repo();
    let mut yaml = String::from(
        "name: many\nrepo: repo\nagents:\n  ok:\n    kind: mock\n    apply_writes: true\n    responses: [{type: tool_call, name: write, args: {path: a.txt, content: \"fixed\\n\"}}]\ntasks:\n",
    );
    for i in 0..4 {
        yaml.push_str(&format!(
            "  - {{id: t{i}, instruction: x, verify: \"grep -q fixed a.txt\"}}\n"
        ));
    }
    write_suite(tmp.path(), &yaml);
    let (output, work, out) = run_suite(tmp.path(), &["--trials", "10", "-j", "4"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let records = trials(&out);
    assert_eq!(records.len(), 40);
    let mut keys: Vec<String> = records
        .iter()
        .map(|r| format!("{}/{}/{}", r["task"], r["agent"], r["trial"]))
        .collect();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), 40, "a trial was recorded twice");
    assert!(records.iter().all(|r| r["outcome"] == "pass"));
    assert_no_leftovers(&work);
}

/// A grader scores from the delta's JSON; one that gives no verdict (it exits non-zero, times
/// out, prints no verdict line) fails the trial and says why.
#[test]
fn an_external_grader_scores_from_the_delta_json() {
    let tmp = one_file_repo();
    let grader = concat!(env!("CARGO_MANIFEST_DIR"), "/graders/test-ratio.py");
    write_suite(
        tmp.path(),
        &format!(
            "name: graded\nrepo: repo\nagents:\n  ok:\n    kind: mock\n    apply_writes: true\n    responses: [{{type: tool_call, name: write, args: {{path: a.txt, content: \"fixed\\n\"}}}}]\n\
             tasks:\n  - id: fix\n    instruction: x\n    verify: \"echo 'Ran 4 tests'; grep -q fixed a.txt\"\n    metric: {{grader: \"python3 {grader}\"}}\n  \
             - id: broken\n    instruction: x\n    verify: \"echo 'Ran 4 tests'\"\n    metric: {{grader: \"echo 'Traceback: KeyError' >&2; exit 3\"}}\n  \
             - id: slow\n    instruction: x\n    verify: \"true\"\n    metric: {{grader: \"sleep 30\", timeout: 1s}}\n  \
             - id: mute\n    instruction: x\n    verify: \"true\"\n    metric: {{grader: \"echo thinking\"}}\n"
        ),
    );
    let (output, _, out) = run_suite(tmp.path(), &["--agent", "ok", "--agent", "noop"]);
    // A grader that gives no verdict on what it read fails the trial: crashing it must not
    // take a trial out of the pass rate.
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let records = trials(&out);
    let find = |task: &str, agent: &str| {
        records
            .iter()
            .find(|r| r["task"] == task && r["agent"] == agent)
            .unwrap()
            .clone()
    };
    assert_eq!(find("fix", "ok")["outcome"], "pass");
    assert_eq!(find("fix", "ok")["score"], 1.0);
    assert_eq!(find("fix", "noop")["outcome"], "fail");
    for (task, why) in [
        (
            "broken",
            "the grader gave no verdict: it exited with 3: Traceback: KeyError",
        ),
        ("slow", "the grader gave no verdict: it timed out after 1s"),
        (
            "mute",
            "the grader gave no verdict: it printed no {\"passed\": bool, \"score\": number} line: thinking",
        ),
    ] {
        let record = find(task, "ok");
        assert_eq!(record["outcome"], "fail", "{record:#}");
        assert_eq!(record["reason"], why, "{record:#}");
    }
}

/// A second Ctrl-C kills everything and the run returns (no `exit` inside the library): exit
/// 130, the manifest says interrupted, and what is left is named for `gc`.
#[test]
fn a_second_interrupt_kills_everything_and_exits_130() {
    let tmp = one_file_repo();
    write_suite(
        tmp.path(),
        "name: abort\nrepo: repo\nagents:\n  stubborn: {kind: command, run: \"trap '' TERM INT; sleep 60\"}\ntasks:\n  - id: fix\n    instruction: x\n    verify: \"true\"\n",
    );
    let (mut child, work, out) = run_until_the_agent_runs(tmp.path(), "stubborn");
    // Stderr read as it comes, so the second SIGINT follows the first one's notice (two
    // signals sent at once may arrive as one).
    let err = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let reader = {
        let err = err.clone();
        let mut stderr = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            let mut chunk = [0; 4096];
            while let Ok(n @ 1..) = std::io::Read::read(&mut stderr, &mut chunk) {
                err.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&chunk[..n]));
            }
        })
    };
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    wait_until(
        Duration::from_secs(30),
        "the notice of the first interrupt",
        || err.lock().unwrap().contains("press Ctrl-C again"),
    );
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let status = child.wait().unwrap();
    reader.join().unwrap();
    let err = err.lock().unwrap().clone();
    assert_eq!(status.code(), Some(130), "{err}");
    assert!(
        err.contains("a forced stop leaves it to `deltabench gc`"),
        "{err}"
    );
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["interrupted"], true, "{manifest}");
    let gc = crate::common::deltabench(tmp.path())
        .args(["gc", "--workdir"])
        .arg(&work)
        .output()
        .unwrap();
    assert_eq!(gc.status.code(), Some(0), "{}", stderr(&gc));
    assert_no_leftovers(&work);
}

/// Starts `deltabench run` on `root`'s suite (task `fix`) and returns once `agent` is running:
/// its instruction file appears when it starts. Returns the child, the workdir and the run dir.
fn run_until_the_agent_runs(
    root: &std::path::Path,
    agent: &str,
) -> (std::process::Child, std::path::PathBuf, std::path::PathBuf) {
    let work = root.join("work");
    let out = root.join("out");
    std::fs::create_dir_all(&work).unwrap();
    let child = crate::common::deltabench(root)
        .args(["run", "suite.yaml", "--workdir"])
        .arg(&work)
        .arg("--out")
        .arg(&out)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let instruction = out.join(format!("trials/fix/{agent}/1/instruction.md"));
    // Both agents end in `sleep 60`: once it runs, the agent's traps are set.
    wait_until(
        Duration::from_secs(60),
        "the agent's `sleep 60` running",
        || instruction.exists() && descendant_running(child.id(), &["sleep", "60"]),
    );
    (child, work, out)
}
