//! Processes that always die: agents that escape their process group, ignore SIGTERM, hold
//! the output pipe, flood it, or name themselves like Podman's container monitor, through the
//! real binary. Nothing may survive the run, and the
//! runner's memory stays bounded.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::common::{one_file_repo, stderr, trials, write_suite};
use crate::crash::processes_with;

/// The agents, each tagged with `token` in its command line so survivors can be found.
fn suite(token: &str) -> String {
    format!(
        r#"name: procs
repo: repo
agents:
  daemon: {{kind: command, run: "setsid sh -c 'sleep 300; echo {token}' & echo forked", timeout: 2s}}
  quiet-daemon: {{kind: command, run: "setsid sh -c 'sleep 300; echo {token}' >/dev/null 2>&1 & echo forked", timeout: 2s}}
  stubborn: {{kind: command, run: "trap '' TERM; sleep 300; echo {token}", timeout: 2s}}
  holder: {{kind: command, run: "(sleep 300; echo {token}) & echo hi", timeout: 2s}}
  flood: {{kind: command, run: "yes {token} | head -c 1073741824", timeout: 2s}}
  disguised: {{kind: command, run: "c=$(mktemp -d)/conmon && cp /bin/sh $c && cd / && (setsid $c -c 'while :; do sleep 1; done; echo {token}' >/dev/null 2>&1 &) && echo forked", timeout: 2s}}
tasks:
  - id: t
    instruction: misbehave
    verify: "true"
"#
    )
}

/// Runs the suite under `/usr/bin/time` and checks that everything died; returns the peak
/// RSS of the runner in KiB.
fn run_misbehaving_agents(cgroups: &str) -> Option<u64> {
    let time = std::path::Path::new("/usr/bin/time").exists();
    if !crate::common::have_tool(
        "the misbehaving-agent tests",
        "/usr/bin/time (apt-get install time)",
        time,
    ) {
        return None;
    }
    let tmp = one_file_repo();
    let root = tmp.path();
    let token = format!("deltabench-procs-{cgroups}-{}", std::process::id());
    write_suite(root, &suite(&token));
    std::fs::create_dir_all(root.join("work")).unwrap();
    let out = root.join("out");
    let started = Instant::now();
    let output = Command::new("/usr/bin/time")
        .args(["-f", "peak-rss-kib=%M"])
        .arg(env!("CARGO_BIN_EXE_deltabench"))
        .args(["run", "suite.yaml", "-j", "5", "--workdir"])
        .arg(root.join("work"))
        .arg("--out")
        .arg(&out)
        .current_dir(root)
        .env_remove("DELTABENCH_WORKDIR")
        .env("DELTABENCH_CACHE", root.join("cache"))
        .env("DELTABENCH_CGROUPS", cgroups)
        .output()
        .unwrap();
    let elapsed = started.elapsed();
    let err = stderr(&output);
    assert!(matches!(output.status.code(), Some(0 | 1)), "{err}");
    assert!(elapsed < Duration::from_secs(60), "took {elapsed:?}");
    let records = trials(&out);
    assert_eq!(records.len(), 6, "{err}");
    for record in &records {
        assert_ne!(record["outcome"], "infra_error", "{record}");
    }
    // Killed processes may take a moment to be reaped by init.
    crate::common::eventually(Duration::from_secs(3), || processes_with(&token) == 0);
    assert_eq!(processes_with(&token), 0, "processes survived the run");
    let flood = std::fs::read_to_string(out.join("trials/t/flood/1/agent.log"))
        .map(|log| log.len())
        .unwrap_or(0);
    assert!(
        flood <= 17 * 1024 * 1024,
        "agent.log is not capped: {flood} bytes"
    );
    let peak: u64 = err
        .lines()
        .find_map(|line| line.strip_prefix("peak-rss-kib="))
        .and_then(|kib| kib.trim().parse().ok())
        .unwrap_or_else(|| panic!("no peak RSS in: {err}"));
    eprintln!(
        "cgroups={cgroups}: 6 misbehaving agents, run took {elapsed:.1?}, peak RSS of deltabench {:.1} MiB",
        peak as f64 / 1024.0
    );
    assert!(peak < 200 * 1024, "peak RSS {peak} KiB");
    assert!(Path::new(&out).join("manifest.json").exists());
    Some(peak)
}

#[test]
fn misbehaving_agents_all_die_and_memory_stays_bounded() {
    run_misbehaving_agents("auto");
}

#[test]
fn without_cgroups_the_subreaper_sweep_still_kills_every_escapee() {
    run_misbehaving_agents("off");
}
