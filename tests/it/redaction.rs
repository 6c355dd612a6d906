//! Secrets in the names the agent leaves in its trial folder: a file, a folder and a symlink
//! named after a secret, and a symlink pointing at a path holding it, in the sandboxed agent's
//! `$HOME` (kept as `home/` in the trial folder). Needs `bwrap` (`.ci/run` installs it).

use std::path::Path;

use crate::common::{one_file_repo, run_suite, stderr, trials, write_suite};

const TOKEN: &str = "tok-abcdefgh-123";
const TAG: &str = "[REDACTED:MY_TOKEN]";

/// Every path under `dir`, relative, with its symlink target if it is one.
fn entries(dir: &Path) -> Vec<(String, Option<String>)> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(current) = stack.pop() {
        for entry in std::fs::read_dir(&current).unwrap().flatten() {
            let path = entry.path();
            let kind = entry.file_type().unwrap();
            if kind.is_dir() {
                stack.push(path.clone());
            }
            let target = kind
                .is_symlink()
                .then(|| std::fs::read_link(&path).unwrap().display().to_string());
            let relative = path.strip_prefix(dir).unwrap().display().to_string();
            found.push((relative, target));
        }
    }
    found.sort();
    found
}

#[test]
fn secrets_in_file_names_and_link_targets_of_the_agent_home_are_redacted() {
    if !crate::common::have_bwrap("redaction") {
        return;
    }
    let tmp = one_file_repo();
    let run = "echo kept > \\\"$HOME/$MY_TOKEN\\\"; mkdir \\\"$HOME/dir-$MY_TOKEN\\\"; \
               echo inner > \\\"$HOME/dir-$MY_TOKEN/$MY_TOKEN.txt\\\"; \
               ln -s \\\"/nowhere/$MY_TOKEN\\\" \\\"$HOME/link\\\"; \
               ln -s \\\"$HOME/$MY_TOKEN\\\" \\\"$HOME/link-$MY_TOKEN\\\"; echo fixed > a.txt";
    write_suite(
        tmp.path(),
        &format!(
            "name: names\nrepo: repo\nagents:\n  namer:\n    kind: command\n    run: \"{run}\"\n    \
             env: {{MY_TOKEN: {TOKEN}}}\n\
             tasks:\n  - {{id: t, instruction: x, isolation: sandbox, verify: \"grep -q fixed a.txt\"}}\n"
        ),
    );
    let (output, _work, out) = run_suite(tmp.path(), &[]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(trials(&out)[0]["outcome"], "pass", "{:?}", trials(&out));

    let trial = out.join("trials/t/namer/1");
    let found = entries(&trial);
    for (path, target) in &found {
        assert!(!path.contains(TOKEN), "a name holds the secret: {path}");
        let target = target.as_deref().unwrap_or_default();
        assert!(!target.contains(TOKEN), "{path} -> {target}");
    }
    let home = trial.join("home");
    let read = |path: &str| std::fs::read_to_string(home.join(path)).unwrap();
    assert_eq!(read(TAG), "kept\n");
    assert_eq!(read(&format!("dir-{TAG}/{TAG}.txt")), "inner\n");
    let link = |path: &str| {
        std::fs::read_link(home.join(path))
            .unwrap()
            .display()
            .to_string()
    };
    assert_eq!(link("link"), format!("/nowhere/{TAG}"));
    assert_eq!(
        link(&format!("link-{TAG}")),
        format!("{}/{TAG}", home.display())
    );
    println!("{found:#?}");
}
