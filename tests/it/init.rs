//! `deltabench init`: the scaffolded suite validates and runs as written.

use crate::common::{assert_no_leftovers, deltabench, stderr, stdout, temp_dir, trials};

#[test]
fn init_then_validate_then_run_with_the_scaffolded_agent() {
    let tmp = temp_dir();
    let root = tmp.path();
    let work = root.join("work");
    std::fs::create_dir_all(&work).unwrap();

    let init = deltabench(root).args(["init", "first"]).output().unwrap();
    // What it prints (the files, then `deltabench validate first`): the snapshot `cli::init`.
    assert_eq!(init.status.code(), Some(0), "{}", stderr(&init));
    let suite = root.join("first");
    let yaml = std::fs::read_to_string(suite.join("suite.yaml")).unwrap();
    assert!(yaml.contains("name: first\n"), "{yaml}");
    assert!(
        yaml.contains("copied onto the workspace root"),
        "the hidden tests' placement is explained: {yaml}"
    );
    // Every key has a comment on the line before it.
    let lines: Vec<&str> = yaml.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        let key = line.trim_start().trim_start_matches("- ");
        if !line.trim_start().starts_with('#') && key.contains(':') {
            assert!(
                lines[i - 1].trim_start().starts_with('#'),
                "no comment above `{line}`"
            );
        }
    }

    let validate = deltabench(&suite)
        .args(["validate", ".", "--workdir"])
        .arg(&work)
        .output()
        .unwrap();
    assert_eq!(
        validate.status.code(),
        Some(0),
        "{}\n{}",
        stdout(&validate),
        stderr(&validate)
    );
    assert!(
        stdout(&validate).contains("all 1 tasks are sound"),
        "{}",
        stdout(&validate)
    );
    assert!(suite.join("suite.lock.json").is_file());

    let out = root.join("out");
    let run = deltabench(&suite)
        .args(["run", ".", "--workdir"])
        .arg(&work)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
    let records = trials(&out);
    let passed = |agent: &str| {
        records
            .iter()
            .find(|r| r["agent"] == agent)
            .unwrap_or_else(|| panic!("no {agent} trial: {records:?}"))["passed"]
            .as_bool()
            .unwrap()
    };
    assert!(passed("my-agent"), "{records:?}");
    assert!(!passed("noop"), "{records:?}");
    assert_no_leftovers(&work);
}

#[test]
fn init_refuses_a_folder_that_holds_a_suite_and_defaults_to_the_current_one() {
    let tmp = temp_dir();
    let root = tmp.path();
    let init = deltabench(root).arg("init").output().unwrap();
    assert_eq!(init.status.code(), Some(0), "{}", stderr(&init));
    assert!(root.join("suite.yaml").is_file());
    assert!(root.join("project/.git").is_dir());
    let agent = std::fs::metadata(root.join("agents/my-agent.sh")).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&agent.permissions()) & 0o111,
        0o111
    );

    let before = std::fs::read_to_string(root.join("suite.yaml")).unwrap();
    let again = deltabench(root).arg("init").output().unwrap();
    // Its message (the folder already holds a suite.yaml): the snapshot `cli::init_again`.
    assert_eq!(again.status.code(), Some(2), "{}", stdout(&again));
    assert_eq!(
        std::fs::read_to_string(root.join("suite.yaml")).unwrap(),
        before
    );

    // Nor does it write into folders of a project that has no suite yet.
    let other = root.join("other");
    std::fs::create_dir_all(other.join("tests")).unwrap();
    let refused = deltabench(&other).arg("init").output().unwrap();
    assert_eq!(refused.status.code(), Some(2));
    assert!(stderr(&refused).contains("tests"), "{}", stderr(&refused));
    assert!(!other.join("suite.yaml").exists());
}
