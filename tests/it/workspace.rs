//! Workspaces: isolation from the rest of the history, exact diffs, session rules (sandbox: see
//! `sandbox.rs`).

use std::path::{Path, PathBuf};

use crate::common::{
    assert_no_leftovers, git, git_repo, one_file_repo, run_suite, stderr, temp_dir, trials,
    write_files, write_suite,
};

#[test]
fn workspace_shows_nothing_past_the_base() {
    let tmp = temp_dir();
    let (repo, base) = git_repo(tmp.path(), &[("a.txt", "a\n")]);
    git(&repo, &["tag", "v1"]);
    write_files(&repo, &[("a.txt", "the answer\n")]);
    git(&repo, &["commit", "-qam", "the fix"]);
    let later = git(&repo, &["rev-parse", "HEAD"]);
    git(&repo, &["tag", "v2"]);
    git(&repo, &["checkout", "-qb", "feature"]);
    write_files(&repo, &[("b.txt", "b\n")]);
    git(&repo, &["add", "b.txt"]);
    git(&repo, &["commit", "-qm", "feature work"]);
    let feature = git(&repo, &["rev-parse", "HEAD"]);
    git(&repo, &["checkout", "-q", "main"]);
    write_suite(
        tmp.path(),
        "name: history\nrepo: repo\nbase: v1\nagents:\n  peek: {kind: command, run: \"git log --all --format=%H; echo TAGS; git tag; echo BRANCHES; git branch -a; echo REMOTES; git remote\"}\ntasks:\n  - {id: look, instruction: look around, verify: \"true\"}\n",
    );
    let (output, _, out) = run_suite(tmp.path(), &[]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let log = std::fs::read_to_string(out.join("trials/look/peek/1/agent.log")).unwrap();
    assert!(log.contains(&base), "{log}");
    assert!(
        !log.contains(&later) && !log.contains(&feature),
        "later history leaked:\n{log}"
    );
    let after_tags = log.split("TAGS").nth(1).unwrap();
    for name in ["v1", "v2", "feature", "main", "origin"] {
        assert!(
            !after_tags.contains(name),
            "'{name}' visible in the workspace:\n{log}"
        );
    }
}

/// Trial 1's workspace kept under `work` by `--keep-workspaces` (an overlay's merged view, or a
/// clone).
fn kept_workspace(work: &Path) -> PathBuf {
    let run = std::fs::read_dir(work)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.join("ws").is_dir())
        .unwrap();
    let trial = run.join("ws").join("edit--editor--1");
    let merged = trial.join("merged");
    if merged.is_dir() { merged } else { trial }
}

fn tree_of(dir: &Path) -> String {
    git(dir, &["add", "-A"]);
    git(dir, &["write-tree"])
}

/// The agent edits, deletes a file and a whole folder, renames, changes a mode, adds untracked,
/// binary and nested files, and commits half of it; applying `diff.patch` to the base must give
/// the workspace's tree. With two trials the commit is provisioned twice: the overlay path.
fn diff_round_trip(trial_count: &str) {
    let tmp = temp_dir();
    let (_, base) = git_repo(
        tmp.path(),
        &[
            ("a.txt", "a\nb\nc\n"),
            ("gone.txt", "bye\n"),
            ("old/name.txt", "moving\n"),
            ("olddir/x.txt", "x\n"),
            ("olddir/y.txt", "y\n"),
            ("run.sh", "echo\n"),
            ("keep.txt", "k\n"),
        ],
    );
    let script = tmp.path().join("agent.sh");
    std::fs::write(
        &script,
        r#"set -e
git -c user.name=a -c user.email=a@a mv old/name.txt new-name.txt
printf 'a\nB\nc' > a.txt
rm gone.txt
chmod +x run.sh
git add -A
git -c user.name=a -c user.email=a@a commit -qm "agent commit"
rm -rf olddir
mkdir -p deep/nested
echo untracked > deep/nested/new.txt
head -c 4096 /dev/urandom > blob.bin
printf 'k2\n' >> keep.txt
"#,
    )
    .unwrap();
    write_suite(
        tmp.path(),
        &format!(
            "name: roundtrip\nrepo: repo\nagents:\n  editor: {{kind: command, run: \"sh {}\"}}\ntasks:\n  - {{id: edit, instruction: edit, verify: \"true\"}}\n",
            script.display()
        ),
    );
    let (output, work, out) =
        run_suite(tmp.path(), &["--keep-workspaces", "--trials", trial_count]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let record = &trials(&out)[0];
    assert_eq!(
        record["outcome"], "pass",
        "an agent that commits is still diffed against the base"
    );
    assert!(record["diff"]["files"].as_u64().unwrap() >= 8, "{record}");

    let workspace = kept_workspace(&work);
    let fresh = tmp.path().join("fresh");
    git(
        tmp.path(),
        &["clone", "-q", "repo", fresh.to_str().unwrap()],
    );
    git(&fresh, &["checkout", "-q", "--detach", &base]);
    let patch = out.join("trials/edit/editor/1/diff.patch");
    git(&fresh, &["apply", "--binary", patch.to_str().unwrap()]);
    let (expected, actual) = (tree_of(&fresh), tree_of(&workspace));
    // Kept overlay workspaces (the agent's and the verify one) stay mounted: release them all
    // before the temp dir goes, deepest first.
    let mut mounts = crate::crash::mounts_under(tmp.path());
    mounts.sort_by_key(|mount| std::cmp::Reverse(mount.len()));
    for mount in mounts {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(mount)
            .status();
    }
    assert!(crate::crash::mounts_under(tmp.path()).is_empty());
    assert_eq!(
        expected, actual,
        "applying diff.patch to the base must give the workspace tree"
    );
}

#[test]
fn diff_round_trips_binary_untracked_renames_and_commits() {
    diff_round_trip("1");
}

#[test]
fn diff_round_trips_in_overlay_workspaces() {
    diff_round_trip("2");
}

#[test]
fn hidden_tests_land_over_what_the_agent_wrote() {
    let tmp = one_file_repo();
    write_files(tmp.path(), &[("hidden/check.sh", "grep -q fixed a.txt\n")]);
    write_suite(
        tmp.path(),
        "name: hidden\nrepo: repo\nagents:\n  cheat: {kind: command, run: \"echo exit 0 > check.sh; echo touched >> a.txt\"}\ntasks:\n  - {id: t, instruction: x, tests: hidden/, verify: \"sh check.sh\"}\n",
    );
    let (output, work, out) = run_suite(tmp.path(), &[]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let record = &trials(&out)[0];
    assert_eq!(
        record["outcome"], "fail",
        "the agent's check.sh must be replaced by the hidden one"
    );
    assert_eq!(record["verify"]["exit_code"], 1);
    assert_no_leftovers(&work);
}

#[test]
fn setup_output_is_part_of_the_base() {
    let tmp = one_file_repo();
    write_suite(
        tmp.path(),
        "name: setup\nrepo: repo\ntasks:\n  - {id: t, instruction: x, setup: \"echo generated > gen.txt\", verify: \"test -f gen.txt\"}\n",
    );
    let (output, _, out) = run_suite(tmp.path(), &["--agent", "noop"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let record = &trials(&out)[0];
    assert_eq!(
        record["diff"]["files"], 0,
        "setup's files are not the agent's change: {record}"
    );
    assert_eq!(record["verify"]["exit_code"], 0);
}

#[test]
fn bundle_and_plain_directory_repos_work() {
    for kind in ["bundle", "plain"] {
        let tmp = temp_dir();
        let (repo, _) = git_repo(tmp.path(), &[("a.txt", "a\n")]);
        let repo_field = if kind == "bundle" {
            git(
                &repo,
                &["bundle", "create", "-q", "../repo.bundle", "--all"],
            );
            "repo.bundle"
        } else {
            write_files(tmp.path(), &[("plain/a.txt", "a\n")]);
            "plain"
        };
        write_files(tmp.path(), &[("sol/a.txt", "fixed\n")]);
        write_suite(
            tmp.path(),
            &format!(
                "name: {kind}\nrepo: {repo_field}\ntasks:\n  - {{id: t, instruction: x, solution: sol/, verify: \"grep -q fixed a.txt\"}}\n"
            ),
        );
        let (output, work, out) = run_suite(tmp.path(), &[]);
        assert_eq!(output.status.code(), Some(0), "{kind}: {}", stderr(&output));
        let records = trials(&out);
        let outcome =
            |agent: &str| records.iter().find(|r| r["agent"] == agent).unwrap()["outcome"].clone();
        assert_eq!(outcome("oracle"), "pass", "{kind}");
        assert_eq!(outcome("noop"), "fail", "{kind}");
        assert_no_leftovers(&work);
    }
}

#[test]
fn session_works_in_place_for_one_trial_only() {
    let tmp = temp_dir();
    let (repo, _) = git_repo(tmp.path(), &[("a.txt", "a\n")]);
    write_suite(
        tmp.path(),
        "name: session\nrepo: repo\nagents:\n  edit: {kind: command, run: \"echo fixed > a.txt\"}\ntasks:\n  - {id: t, instruction: x, isolation: session, verify: \"grep -q fixed a.txt\"}\n",
    );
    let (output, _, _) = run_suite(tmp.path(), &["--trials", "2"]);
    assert_eq!(
        output.status.code(),
        Some(2),
        "two trials on a session task"
    );
    assert!(
        stderr(&output).contains("runs a single trial"),
        "{}",
        stderr(&output)
    );

    let (output, _, out) = run_suite(tmp.path(), &["--agent", "edit"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(trials(&out)[0]["outcome"], "pass");
    assert_eq!(
        std::fs::read_to_string(repo.join("a.txt")).unwrap(),
        "fixed\n",
        "session leaves the change"
    );

    // Now the work tree is dirty: a second session run refuses it instead of mixing changes.
    std::fs::remove_dir_all(&out).unwrap();
    let (output, _, out) = run_suite(tmp.path(), &["--agent", "edit"]);
    assert_eq!(output.status.code(), Some(3));
    let record = &trials(&out)[0];
    assert_eq!(record["outcome"], "infra_error");
    assert!(
        record["infra_error"]
            .as_str()
            .unwrap()
            .contains("uncommitted"),
        "{record}"
    );
}

/// Two agents on one commit: the commit is provisioned twice, so it gets a template and overlays.
const OVERLAY_SUITE: &str = "name: overlay\nrepo: repo\nagents:\n  committer: {kind: command, run: \"echo fixed > a.txt && git -c user.name=a -c user.email=a@a commit -qam fix && git status --porcelain > ../status.txt; git log --oneline | wc -l\"}\ntasks:\n  - {id: t, instruction: x, verify: \"grep -q fixed a.txt\"}\n";

fn manifest(out: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(out.join("manifest.json")).unwrap()).unwrap()
}

#[test]
fn overlay_workspaces_behave_as_checkouts() {
    let tmp = one_file_repo();
    write_suite(tmp.path(), OVERLAY_SUITE);
    let (output, work, out) = run_suite(
        tmp.path(),
        &["--agent", "committer", "--agent", "noop", "--trials", "2"],
    );
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let provisioning = manifest(&out)["provisioning"].as_str().unwrap().to_owned();
    assert!(provisioning.starts_with("overlay"), "{provisioning}");
    for record in trials(&out) {
        let expected = if record["agent"] == "committer" {
            "pass"
        } else {
            "fail"
        };
        assert_eq!(record["outcome"], expected, "{record}");
    }
    // The agent committed inside the overlay; the diff is still against the base.
    let diff = std::fs::read_to_string(out.join("trials/t/committer/2/diff.patch")).unwrap();
    assert!(diff.contains("+fixed"), "{diff}");
    let log = std::fs::read_to_string(out.join("trials/t/committer/1/agent.log")).unwrap();
    assert_eq!(log.trim(), "2", "base + the agent's commit: {log}");
    let mounts = std::fs::read_to_string("/proc/self/mounts").unwrap();
    assert!(
        !mounts.contains(work.to_str().unwrap()),
        "an overlay stayed mounted"
    );
    assert_no_leftovers(&work);
}

#[test]
fn without_mount_rights_it_falls_back_to_clones_and_says_so() {
    let tmp = one_file_repo();
    write_suite(tmp.path(), OVERLAY_SUITE);
    let work = tmp.path().join("work");
    let out = tmp.path().join("out");
    std::fs::create_dir_all(&work).unwrap();
    // The same machine without CAP_SYS_ADMIN: mounting fails, so deltabench must clone.
    let output = std::process::Command::new("setpriv")
        .args([
            "--bounding-set",
            "-sys_admin",
            "--inh-caps",
            "-sys_admin",
            "--",
        ])
        .arg(env!("CARGO_BIN_EXE_deltabench"))
        .args([
            "run",
            "suite.yaml",
            "--agent",
            "committer",
            "--trials",
            "2",
            "--cache",
            "cache",
            "--workdir",
        ])
        .arg(&work)
        .arg("--out")
        .arg(&out)
        .current_dir(tmp.path())
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let provisioning = manifest(&out)["provisioning"].as_str().unwrap().to_owned();
    assert!(
        provisioning.starts_with("clone (overlay unavailable: cannot mount"),
        "{provisioning}"
    );
    assert!(trials(&out).iter().all(|r| r["outcome"] == "pass"));
}

#[test]
fn a_bad_base_found_at_run_time_leaves_nothing_behind() {
    let tmp = one_file_repo();
    let suite = "name: base\nrepo: repo\nbase: BASE\ntasks:\n  - {id: t, instruction: x, verify: \"true\"}\n";
    write_suite(tmp.path(), &suite.replace("BASE", "nosuchref"));
    let (output, work, out) = run_suite(tmp.path(), &["--agent", "noop"]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("suite.yaml:3:7: base 'nosuchref'"),
        "{}",
        stderr(&output)
    );
    assert!(!out.exists(), "an empty run directory was left behind");
    assert_no_leftovers(&work);
    // Fixed, the same --out is free to use.
    write_suite(tmp.path(), &suite.replace("BASE", "main"));
    let (output, _, _) = run_suite(tmp.path(), &["--agent", "noop"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
}

/// What the agent of `layered_templates_are_checkouts` prints: the commit, what git says, whether
/// it can read the other commit (`$ONE`/`$TWO`, whichever is not `HEAD`), and every path of the
/// work tree with its kind, mode and content.
const LISTING: &str = r#"head=$(git rev-parse HEAD)
other=$ONE; [ "$other" = "$head" ] && other=$TWO
echo "head $head"
echo "status [$(git status --porcelain)]"
git cat-file -e "$other" 2>/dev/null && echo OTHER-READABLE
git log --all --format=%H | grep -q "$other" && echo OTHER-LOGGED
git cat-file --batch-all-objects --batch-check | grep -q "^$other" && echo OTHER-LISTED
find . -path ./.git -prune -o -print | LC_ALL=C sort | while read -r p; do
  if [ -L "$p" ]; then echo "$p link $(readlink "$p")"
  elif [ -d "$p" ]; then echo "$p dir"
  else echo "$p $(stat -c %a "$p") $(cat "$p")"; fi
done
"#;

/// A second commit's template is a layer over the first one's: its workspaces are what a checkout
/// of that commit gives (changed, removed and added files, a removed folder, a file become a
/// folder, a mode, a symlink), git finds them clean, and no object of the other commit is
/// readable, whichever of the two is the later one (the later commit's history borrows the
/// earlier one's). A later run checks both quietly; a change to the template under a layer is
/// noticed through the layer.
#[test]
fn layered_templates_are_checkouts() {
    let tmp = temp_dir();
    let root = tmp.path();
    let (repo, _) = git_repo(
        root,
        &[
            ("a.txt", "a\n"),
            ("gone.txt", "bye\n"),
            ("olddir/x.txt", "x\n"),
            ("olddir/y.txt", "y\n"),
            ("run.sh", "echo\n"),
            ("becomes-dir", "file\n"),
            ("keep/k.txt", "k\n"),
        ],
    );
    std::os::unix::fs::symlink("a.txt", repo.join("link")).unwrap();
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-qm", "link"]);
    let first = git(&repo, &["rev-parse", "HEAD"]);
    write_files(
        &repo,
        &[("a.txt", "A changed\n"), ("new/deep/n.txt", "n\n")],
    );
    std::fs::remove_file(repo.join("gone.txt")).unwrap();
    std::fs::remove_dir_all(repo.join("olddir")).unwrap();
    std::fs::remove_file(repo.join("becomes-dir")).unwrap();
    write_files(&repo, &[("becomes-dir/inner.txt", "inner\n")]);
    let executable = std::os::unix::fs::PermissionsExt::from_mode(0o755);
    std::fs::set_permissions(repo.join("run.sh"), executable).unwrap();
    std::fs::remove_file(repo.join("link")).unwrap();
    std::os::unix::fs::symlink("keep/k.txt", repo.join("link")).unwrap();
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-qm", "second"]);
    let second = git(&repo, &["rev-parse", "HEAD"]);
    let script = root.join("list.sh");
    std::fs::write(&script, LISTING).unwrap();
    let listing = |dir: &Path| {
        let output = std::process::Command::new("sh")
            .arg(&script)
            .env("ONE", &first)
            .env("TWO", &second)
            .current_dir(dir)
            .output()
            .unwrap();
        String::from_utf8(output.stdout).unwrap()
    };
    // What a checkout of each commit lists (a clone reads every object: those lines aside).
    let mut want: std::collections::HashMap<String, String> = std::collections::HashMap::new();
    for commit in [&first, &second] {
        let dir = root.join(format!("checkout-{commit}"));
        git(
            root,
            &[
                "clone",
                "-q",
                &repo.to_string_lossy(),
                &dir.to_string_lossy(),
            ],
        );
        git(&dir, &["checkout", "-q", "--detach", commit]);
        let text = listing(&dir);
        let text: Vec<&str> = text.lines().filter(|l| !l.starts_with("OTHER")).collect();
        want.insert(commit.clone(), text.join("\n"));
    }
    assert_ne!(want[&first], want[&second]);

    // The later commit over the earlier one's template, then the earlier over the later's.
    for (round, order) in [[&first, &second], [&second, &first]].iter().enumerate() {
        let work = root.join(format!("work{round}"));
        let cache = root.join(format!("cache{round}"));
        let out = root.join("out");
        write_suite(
            root,
            &format!(
                "name: layers\nrepo: repo\nagents:\n  list: {{kind: command, run: \"sh {}\", env: {{ONE: {first}, TWO: {second}}}}}\ntasks:\n  - {{id: one, instruction: x, base: {}, verify: \"true\"}}\n  - {{id: two, instruction: x, base: {}, verify: \"true\"}}\n",
                script.display(),
                order[0],
                order[1],
            ),
        );
        let run = || {
            let _ = std::fs::remove_dir_all(&out);
            std::fs::create_dir_all(&work).unwrap();
            let output = crate::common::deltabench(root)
                .env("DELTABENCH_CACHE", &cache)
                .args([
                    "run",
                    "suite.yaml",
                    "--agent",
                    "list",
                    "-j",
                    "1",
                    "--workdir",
                ])
                .arg(&work)
                .arg("--out")
                .arg(&out)
                .output()
                .unwrap();
            assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
            for (task, commit) in [("one", order[0]), ("two", order[1])] {
                let log = out.join(format!("trials/{task}/list/1/agent.log"));
                let log = std::fs::read_to_string(log).unwrap();
                // The second commit's history holds the first; never the other way round.
                if *commit == first {
                    assert!(!log.contains("OTHER-"), "round {round}, {task}: {log}");
                }
                let log: Vec<&str> = log.lines().filter(|l| !l.starts_with("OTHER")).collect();
                assert_eq!(
                    log.join("\n"),
                    want[commit.as_str()],
                    "round {round}, {task}"
                );
            }
            assert_no_leftovers(&work);
            stderr(&output)
        };
        let said = run();
        assert!(!said.contains("warning"), "{said}");
        let templates = cache.join("templates");
        let records: Vec<serde_json::Value> = std::fs::read_dir(&templates)
            .unwrap()
            .flatten()
            .filter_map(|e| std::fs::read(e.path().join("content.json")).ok())
            .map(|bytes| serde_json::from_slice(&bytes).unwrap())
            .collect();
        let layer = records.iter().find(|r| r["base"].is_object());
        assert!(layer.is_some(), "round {round}: no layer in {records:?}");
        assert_eq!(layer.unwrap()["commit"], order[1].as_str());

        // The later commit's history holds what the earlier one's lacks, and borrows the rest.
        let borrowed = cache.join(format!(
            "sources/history-{second}.git/objects/info/alternates"
        ));
        let borrowed = std::fs::read_to_string(borrowed).unwrap();
        assert!(
            borrowed.contains(&format!("history-{first}.git")),
            "{borrowed}"
        );
        let whole = cache.join(format!(
            "sources/history-{first}.git/objects/info/alternates"
        ));
        assert!(!whole.exists());

        // A later run checks both, quietly.
        let said = run();
        assert!(!said.contains("warning"), "{said}");

        // The template under the layer changed: noticed, and every workspace still right.
        let base = templates.join(layer.unwrap()["base"]["dir"].as_str().unwrap());
        std::fs::write(base.join("tree/keep/k.txt"), "poisoned\n").unwrap();
        let said = run();
        assert!(
            said.contains("changed since it was built (first difference: keep/k.txt)"),
            "{said}"
        );
    }
}
