//! A root agent under `isolation: worktree` (it runs on the host): what it does to the host
//! through its workspace, and what deltabench undoes or refuses. These agents need root (to
//! mount, to move between cgroups); without it the tests skip loudly, and fail under CI.

use std::process::Command;

use crate::common::{assert_no_leftovers, git_repo, run_suite, stderr, temp_dir, write_suite};
use crate::crash::processes_with;

/// Whether this process may mount (root); outside CI a skip is printed, under CI it fails.
fn can_mount(test: &str) -> bool {
    let tmp = temp_dir();
    let target = tmp.path().join("t");
    std::fs::create_dir(&target).unwrap();
    let mounted = Command::new("mount")
        .arg("--bind")
        .arg(tmp.path())
        .arg(&target)
        .status()
        .is_ok_and(|s| s.success());
    if mounted {
        let _ = Command::new("umount").arg("-l").arg(&target).status();
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{test} needs root (mount, cgroups) under CI"
    );
    eprintln!("\n*** SKIPPED: {test} needs root (mount, cgroups) ***\n");
    false
}

/// The unified cgroup hierarchy's mount point, if there is one.
fn cgroup2_root() -> Option<String> {
    std::fs::read_to_string("/proc/self/mounts")
        .ok()?
        .lines()
        .map(|line| line.split(' ').collect::<Vec<_>>())
        .find(|fields| fields.get(2) == Some(&"cgroup2"))
        .map(|fields| fields[1].to_owned())
}

/// Kills (by pid) whatever a failed test left running with `token` in its command line.
struct KillOnDrop<'a>(&'a str);

impl Drop for KillOnDrop<'_> {
    fn drop(&mut self) {
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
            if String::from_utf8_lossy(&cmdline).contains(self.0) {
                let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            }
        }
    }
}

#[test]
fn an_agent_that_leaves_its_cgroup_does_not_outlive_the_run() {
    if !can_mount("an_agent_that_leaves_its_cgroup_does_not_outlive_the_run") {
        return;
    }
    let tmp = temp_dir();
    git_repo(tmp.path(), &[("a.txt", "a\n")]);
    let token = format!("deltabench-escapee-{}", std::process::id());
    let _cleanup = KillOnDrop(&token);
    let moved = tmp.path().join("moved-to");
    // Leaves the process group (setsid), the pipe, and the cgroup (into the root one), then
    // outlives the agent, which exits once the move is done.
    let escapee = tmp.path().join(format!("{token}.sh"));
    std::fs::write(
        &escapee,
        "[ -n \"$1\" ] && echo $$ > \"$1/cgroup.procs\"\ncat /proc/self/cgroup > \"$2.tmp\"; mv \"$2.tmp\" \"$2\"\nwhile :; do sleep 1; done\n",
    )
    .unwrap();
    let cgroups = cgroup2_root().unwrap_or_default();
    write_suite(
        tmp.path(),
        &format!(
            "name: escape\nrepo: repo\nagents:\n  escaper: {{kind: command, run: \"setsid sh {escapee} '{cgroups}' {moved} >/dev/null 2>&1 </dev/null & while [ ! -e {moved} ]; do sleep 0.05; done\"}}\ntasks:\n  - {{id: t, instruction: x, verify: \"true\"}}\n",
            escapee = escapee.display(),
            moved = moved.display(),
        ),
    );
    let (output, work, _) = run_suite(tmp.path(), &["--agent", "escaper"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    if !cgroups.is_empty() {
        let joined = std::fs::read_to_string(&moved).unwrap();
        assert!(
            joined.lines().any(|l| l == "0::/"),
            "the escapee did not reach the root cgroup: {joined}"
        );
    }
    assert_eq!(
        processes_with(&token),
        0,
        "the escapee outlived `deltabench run`"
    );
    assert_no_leftovers(&work);
}
