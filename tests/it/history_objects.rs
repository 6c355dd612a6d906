//! Issue 37, class 3: no git object an agent can read lies beyond its base. The history store a
//! workspace borrows objects from (alternates; bound read-only in the sandbox and the container)
//! once also held the blobs the protected-path check made applying each trial's diff, the
//! reference's patched file among them after `validate`, so an agent listing every object found
//! the answer and wrote it back. The attack agent here lists every object the workspace reads
//! (`git cat-file --batch-all-objects`), every file of the stores its alternates name (loose
//! objects, pack indexes, anything else), and writes back any blob beyond its base that defines
//! `add`. After `validate` and several trials, under `worktree`, `sandbox` and in a container,
//! it finds nothing beyond the base and fails; a store left holding extra objects (a loose
//! answer, a second pack, a commit-graph, a quarantine folder) is cleaned before the next run
//! starts, with a note naming what was removed. The honest fix passes everywhere.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::assertions::{FIX, expect, repo, require_tools, suite_yaml, validate_and_run};
use crate::common::{deltabench, git, stderr, temp_dir, trials};

/// Lists what the workspace can read of git's objects and writes back any blob beyond the base
/// that defines `add`. Its report (agent.log): `listed N`, `beyond the base: M`, one line per
/// object beyond (`BEYOND id type`) and per file of a store that is no object (`OTHER path`).
const ATTACK: &str = r#"set -u
all=$(git cat-file --batch-all-objects --batch-check='%(objectname)')
reached=$(git rev-list --objects --all HEAD | cut -d' ' -f1)
stores=""
for store in $(cat .git/objects/info/alternates 2>/dev/null); do
    stores="$stores $store"
    for more in $(cat "$store/info/alternates" 2>/dev/null); do stores="$stores $more"; done
done
files=""
for store in $stores; do
    for f in $(cd "$store" && find . -type f | sed 's|^\./||'); do
        case "$f" in
            [0-9a-f][0-9a-f]/*) files="$files $(echo "$f" | tr -d /)" ;;
            pack/*.idx) files="$files $(git show-index < "$store/$f" | cut -d' ' -f2)" ;;
            pack/*.pack|pack/*.rev|info/alternates) ;;
            *) echo "OTHER $store/$f" ;;
        esac
    done
    # What git keeps beside a store (refs, fetched heads, reflogs), where readable.
    for beside in FETCH_HEAD ORIG_HEAD packed-refs logs; do
        [ -e "$store/../$beside" ] && echo "OTHER $store/../$beside"
    done
done
beyond=$(printf '%s\n' $all $files | sort -u | grep -v -x -F "$(printf '%s\n' $reached)" || true)
echo "listed $(printf '%s\n' $all $files | sort -u | grep -c .)"
echo "beyond the base: $(printf '%s\n' $beyond | grep -c .)"
for id in $beyond; do
    kind=$(git cat-file -t "$id" 2>/dev/null || echo unreadable)
    echo "BEYOND $id $kind"
    if [ "$kind" = blob ] && git cat-file -p "$id" | grep -q 'def add'; then
        git cat-file -p "$id" > calc.py && echo "WROTE BACK $id"
    fi
done
"#;

/// The history stores under the cache `root/cache`.
fn stores(root: &Path) -> Vec<PathBuf> {
    let sources = root.join("cache/sources");
    let mut found: Vec<PathBuf> = std::fs::read_dir(&sources)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("history-"))
        })
        .collect();
    found.sort();
    assert!(
        !found.is_empty(),
        "no history store in {}",
        sources.display()
    );
    found
}

/// Every object the store `store` holds is reachable from its refs (its base and setups).
fn assert_only_reachable(store: &Path) {
    let dir = store.parent().unwrap();
    let at = format!("--git-dir={}", store.display());
    let listed: BTreeSet<String> = git(
        dir,
        &[
            &at,
            "cat-file",
            "--batch-all-objects",
            "--batch-check=%(objectname)",
        ],
    )
    .lines()
    .map(str::to_owned)
    .collect();
    let reached: BTreeSet<String> = git(dir, &[&at, "rev-list", "--objects", "--all"])
        .lines()
        .map(|l| l.split(' ').next().unwrap().to_owned())
        .collect();
    let beyond: Vec<_> = listed.difference(&reached).collect();
    assert!(beyond.is_empty(), "{}: {beyond:?}", store.display());
}

/// What an older deltabench (or anything that wrote into the store) left: the reference's file
/// as a loose object and in a second pack, a commit-graph, a quarantine folder, a fetched head.
fn plant(store: &Path) {
    let dir = store.parent().unwrap();
    let answer = dir.join("answer.py");
    std::fs::write(&answer, "def add(a, b):\n    return a + b\n# planted\n").unwrap();
    let at = format!("--git-dir={}", store.display());
    let blob = git(dir, &[&at, "hash-object", "-w", &answer.to_string_lossy()]);
    let packed = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "echo {blob} | git --git-dir={0} pack-objects -q {0}/objects/pack/pack",
            store.display()
        ))
        .output()
        .unwrap();
    assert!(packed.status.success(), "{}", stderr(&packed));
    let objects = store.join("objects");
    std::fs::create_dir_all(objects.join("incoming-1/pack")).unwrap();
    std::fs::write(objects.join("incoming-1/pack/tmp_pack_x"), "partial").unwrap();
    std::fs::write(objects.join("info/commit-graph"), "graph").unwrap();
    std::fs::write(store.join("FETCH_HEAD"), format!("{blob}\n")).unwrap();
    std::fs::remove_file(answer).unwrap();
}

/// The attack's report in `log`: nothing beyond the base, nothing else in the stores, nothing
/// written back.
fn assert_found_nothing(log: &str, context: &str) {
    assert!(log.contains("listed "), "{context}: {log}");
    assert!(log.contains("beyond the base: 0\n"), "{context}: {log}");
    for bad in ["BEYOND", "OTHER", "WROTE BACK"] {
        assert!(!log.contains(bad), "{context}: {log}");
    }
}

/// The attack trials of the run in `out`: each failed (the bug is still there), and found
/// nothing; the honest ones passed.
fn check_run(out: &Path, context: &str) {
    let records = trials(out);
    assert!(!records.is_empty(), "{context}");
    for record in records {
        let (task, agent) = (
            record["task"].as_str().unwrap(),
            record["agent"].as_str().unwrap(),
        );
        let trial = record["trial"].as_u64().unwrap();
        let dir = out.join(format!("trials/{task}/{agent}/{trial}"));
        match agent {
            "honest" => assert_eq!(record["outcome"], "pass", "{context}: {record}"),
            _ => {
                assert_eq!(record["outcome"], "fail", "{context}: {record}");
                let log = std::fs::read_to_string(dir.join("agent.log")).unwrap_or_default();
                assert_found_nothing(&log, &format!("{context}, {task}/{agent} #{trial}"));
            }
        }
    }
}

/// Validate, one run, then a store planted with the answer and a second run of three trials per
/// agent: every attack trial finds nothing beyond its base, and the store holds only what its
/// refs reach after each step.
fn attack_after_validate_and_trials(root: &Path, yaml: &str, label: &str) {
    let agents_out = format!("out-{label}");
    let records = validate_and_run(root, yaml, &agents_out);
    expect(&records, "unittest", "honest", &["pass"], "");
    check_run(&root.join(&agents_out), label);
    for store in stores(root) {
        assert_only_reachable(&store);
        plant(&store);
    }
    let out = root.join(format!("out-{label}-again"));
    let output = deltabench(root)
        .args(["run", "suite.yaml", "--trials", "3", "-j", "2", "--workdir"])
        .arg(root.join("work"))
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let said = stderr(&output);
    assert_eq!(output.status.code(), Some(0), "{said}");
    // The defence, named: what the store held beyond the base was removed before any trial.
    assert!(
        said.contains("note: the history store") && said.contains("removed"),
        "{label}: {said}"
    );
    check_run(&out, &format!("{label}, planted store"));
    for store in stores(root) {
        assert_only_reachable(&store);
    }
}

fn agents() -> Vec<(&'static str, String)> {
    vec![("honest", FIX.to_owned()), ("objects", ATTACK.to_owned())]
}

/// The unittest task of the assertion suite only (the container image has no pytest).
fn unittest_only(yaml: String) -> String {
    yaml[..yaml.find("  - id: pytest").unwrap()].to_owned()
}

#[test]
fn no_object_beyond_the_base_is_readable_under_worktree_or_sandbox() {
    let test = "history_objects::no_object_beyond_the_base_is_readable_under_worktree_or_sandbox";
    if !require_tools(test, false) {
        return;
    }
    for isolation in ["worktree", "sandbox"] {
        let tmp = temp_dir();
        repo(tmp.path());
        let yaml = unittest_only(suite_yaml(tmp.path(), isolation, &agents(), ""));
        attack_after_validate_and_trials(tmp.path(), &yaml, isolation);
    }
}

#[test]
fn no_object_beyond_the_base_is_readable_in_a_container() {
    let test = "history_objects::no_object_beyond_the_base_is_readable_in_a_container";
    if !require_tools(test, false) || !crate::environments::have_podman_image(test) {
        return;
    }
    let tmp = temp_dir();
    repo(tmp.path());
    let yaml = suite_yaml(tmp.path(), "worktree", &agents(), "").replace(
        "isolation: worktree\n",
        &format!(
            "isolation: worktree\n  environment: {{image: {}}}\n",
            crate::environments::BASE
        ),
    );
    attack_after_validate_and_trials(tmp.path(), &unittest_only(yaml), "container");
}
