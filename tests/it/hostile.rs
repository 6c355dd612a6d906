//! A root agent under `isolation: worktree` (it runs on the host): what it does to the host
//! through its workspace, and what deltabench undoes or refuses. These agents need root (to
//! mount, to move between cgroups); without it the tests skip loudly, and fail under CI.

use std::path::Path;
use std::process::Command;

use crate::common::{
    assert_no_leftovers, git_repo, run_suite, stderr, temp_dir, trials, write_files, write_suite,
};
use crate::crash::{mounts_under, processes_with};

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
    crate::common::have_tool(test, "root (mount, cgroups)", false)
}

#[test]
fn a_mount_the_agent_made_is_detached_not_emptied() {
    if !can_mount("a_mount_the_agent_made_is_detached_not_emptied") {
        return;
    }
    let tmp = temp_dir();
    git_repo(tmp.path(), &[("a.txt", "a\n")]);
    let host = tmp.path().join("host");
    write_files(
        &host,
        &[("precious.txt", "the host's\n"), ("dir/deep.txt", "deep\n")],
    );
    // One agent mounts the host dir below its workspace, the other over the workspace itself.
    write_suite(
        tmp.path(),
        &format!(
            "name: mounts\nrepo: repo\nagents:\n  sub: {{kind: command, run: \"mkdir -p sub/x && mount --bind {host} sub/x && cat sub/x/precious.txt\"}}\n  top: {{kind: command, run: \"mount --bind {host} $PWD && cat $PWD/precious.txt\"}}\ntasks:\n  - {{id: t, instruction: x, verify: \"true\"}}\n",
            host = host.display()
        ),
    );
    // One agent at a time: clone workspaces; both agents on one commit: overlay workspaces.
    for agents in [&["sub"][..], &["top"], &["sub", "top"]] {
        let mut args = vec![];
        for agent in agents {
            args.extend(["--agent", agent]);
        }
        let (output, work, out) = run_suite(tmp.path(), &args);
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        for agent in agents {
            let log =
                std::fs::read_to_string(out.join(format!("trials/t/{agent}/1/agent.log"))).unwrap();
            assert!(log.contains("the host's"), "{agent} did not mount: {log}");
        }
        assert_eq!(
            std::fs::read_to_string(host.join("precious.txt")).unwrap(),
            "the host's\n",
            "dispose deleted through the agent's mount ({agents:?})"
        );
        assert!(host.join("dir/deep.txt").exists(), "{agents:?}");
        assert_eq!(mounts_under(&work), Vec::<String>::new(), "{agents:?}");
        assert_no_leftovers(&work);
        std::fs::remove_dir_all(&out).unwrap();
    }
}

#[test]
fn what_dispose_cannot_remove_is_named_to_the_user() {
    let test = "what_dispose_cannot_remove_is_named_to_the_user";
    if !can_mount(test) {
        return;
    }
    let chattr = Command::new("chattr").arg("--help").output().is_ok();
    if !crate::common::have_tool(test, "chattr (e2fsprogs)", chattr) {
        return;
    }
    let tmp = temp_dir();
    git_repo(tmp.path(), &[("a.txt", "a\n")]);
    // An immutable file: not even root can unlink it until the flag is cleared.
    write_suite(
        tmp.path(),
        "name: stuck\nrepo: repo\nagents:\n  pin: {kind: command, run: \"mkdir -p keep && echo x > keep/stuck && chattr +i keep/stuck\"}\ntasks:\n  - {id: t, instruction: x, verify: \"true\"}\n",
    );
    // Without CAP_SYS_ADMIN deltabench clones (every trial now provisions twice, so it would
    // otherwise take the overlay path, where the pinned file lands in the upper dir).
    let (work, out) = (tmp.path().join("work"), tmp.path().join("out"));
    std::fs::create_dir_all(&work).unwrap();
    let output = Command::new("setpriv")
        .args([
            "--bounding-set",
            "-sys_admin",
            "--inh-caps",
            "-sys_admin",
            "--",
        ])
        .arg(env!("CARGO_BIN_EXE_deltabench"))
        .args(["run", "suite.yaml", "--agent", "pin", "--workdir"])
        .arg(&work)
        .arg("--out")
        .arg(&out)
        .env("DELTABENCH_CACHE", tmp.path().join("cache"))
        .env_remove("DELTABENCH_WORKDIR")
        .current_dir(tmp.path())
        .output()
        .unwrap();
    let stuck: Vec<_> = crate::common::leftovers(&work)
        .into_iter()
        .filter(|p| p.ends_with("keep/stuck"))
        .collect();
    for path in &stuck {
        let _ = Command::new("chattr")
            .arg("-i")
            .arg(work.join(path))
            .status();
    }
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let log = std::fs::read_to_string(out.join("trials/t/pin/1/agent.log")).unwrap();
    assert_eq!(stuck.len(), 1, "the agent could not pin a file: {log}");
    // The trial keeps its verdict; the trace and the run's warnings name the path.
    assert_eq!(trials(&out)[0]["outcome"], "pass");
    let result = std::fs::read_to_string(out.join("trials/t/pin/1/result.json")).unwrap();
    let result: serde_json::Value = serde_json::from_str(&result).unwrap();
    let error = result["lifecycle"]["dispose_error"].as_str().unwrap();
    assert!(error.contains(&stuck[0]), "{error}");
    assert!(
        stderr(&output).contains("warning: could not clean up")
            && stderr(&output).contains(&stuck[0]),
        "{}",
        stderr(&output)
    );
    // Its lease is kept, so gc finishes the job once the file can go.
    let gc = crate::common::deltabench(tmp.path())
        .arg("gc")
        .output()
        .unwrap();
    assert_eq!(gc.status.code(), Some(0), "{}", stderr(&gc));
    assert_no_leftovers(&work);
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

/// An agent that writes the fix into the template: first through the `lowerdir` the mount
/// table shows (the path and the outcome go to `<tmp>/lowerdir`), then straight into the cache.
fn poison_script(cache: &Path, tmp: &Path) -> String {
    format!(
        r#"L=$(grep " $PWD " /proc/self/mountinfo | sed -n 's/.*lowerdir=\([^,]*\).*/\1/p')
[ -n "$L" ] || exit 1
echo "$L" > {tmp}/lowerdir
(echo fixed > "$L/a.txt") 2>> {tmp}/lowerdir && echo written >> {tmp}/lowerdir
for t in {cache}/templates/*/tree; do echo fixed > "$t/a.txt"; done
"#,
        tmp = tmp.display(),
        cache = cache.display()
    )
}

#[test]
fn a_poisoned_template_is_rebuilt_with_a_warning() {
    if !can_mount("a_poisoned_template_is_rebuilt_with_a_warning") {
        return;
    }
    let tmp = temp_dir();
    let root = tmp.path();
    let (_, base) = git_repo(root, &[("a.txt", "a\n"), ("README", "readme\n")]);
    let poison = root.join("poison.sh");
    std::fs::write(&poison, poison_script(&root.join("cache"), root)).unwrap();
    write_suite(
        root,
        &format!(
            "name: poison\nrepo: repo\nagents:\n  poison: {{kind: command, run: \"sh {}\"}}\n  readme: {{kind: command, run: \"echo more >> README\"}}\ntasks:\n  - {{id: t, instruction: x, verify: \"grep -q fixed a.txt\"}}\n",
            poison.display()
        ),
    );
    // Two trials of one commit: overlay workspaces over a cached template.
    let (output, work, out) = run_suite(root, &["--agent", "poison", "--trials", "2", "-j", "1"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("manifest.json")).unwrap()).unwrap();
    let provisioning = manifest["provisioning"].as_str().unwrap();
    assert!(provisioning.starts_with("overlay"), "{provisioning}");
    let lowerdir = std::fs::read_to_string(root.join("lowerdir")).unwrap();
    assert!(
        lowerdir.lines().count() > 1 && !lowerdir.contains("written"),
        "a write through the lowerdir shown in mountinfo went through: {lowerdir}"
    );
    let template = std::fs::read_dir(root.join("cache/templates"))
        .unwrap()
        .flatten()
        .map(|e| e.path().join("tree"))
        .find(|tree| tree.is_dir())
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(template.join("a.txt")).unwrap(),
        "fixed\n",
        "the agent did not reach the template"
    );
    assert_no_leftovers(&work);
    std::fs::remove_dir_all(&out).unwrap();

    // The next run notices, says so, and rebuilds: README alone does not pass.
    let (output, work, out) = run_suite(root, &["--agent", "readme", "--trials", "2"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let warning = format!(
        "warning: the cached template {} (commit {base}) changed since it was built",
        template.display()
    );
    let err = stderr(&output);
    assert!(err.contains(&warning), "{err}");
    assert!(err.contains("(first difference: a.txt)"), "{err}");
    assert_eq!(
        err.matches("warning: the cached template").count(),
        1,
        "{err}"
    );
    for record in trials(&out) {
        assert_eq!(record["outcome"], "fail", "{record}");
    }
    assert_eq!(
        std::fs::read_to_string(template.join("a.txt")).unwrap(),
        "a\n"
    );
    assert_no_leftovers(&work);
    std::fs::remove_dir_all(&out).unwrap();

    // The rebuilt template has a record of its own: the run after is quiet.
    let (output, _, _) = run_suite(root, &["--agent", "readme", "--trials", "2"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(!stderr(&output).contains("warning"), "{}", stderr(&output));
}
