//! The shipped demo: three agents, three different pass rates, and a sound suite.

use std::collections::BTreeMap;
use std::path::Path;

use crate::common::{deltabench, stderr, temp_dir, trials};

fn demo() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/suites/demo"))
}

#[test]
fn demo_run_gives_three_pass_rates() {
    let tmp = temp_dir();
    let out = tmp.path().join("out");
    let output = deltabench(tmp.path())
        .arg("run")
        .arg(demo())
        .arg("--workdir")
        .arg(tmp.path())
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let mut passed: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for record in trials(&out) {
        let entry = passed
            .entry(record["agent"].as_str().unwrap().to_owned())
            .or_default();
        entry.1 += 1;
        if record["passed"].as_bool().unwrap() {
            entry.0 += 1;
        }
    }
    assert_eq!(passed["oracle"], (6, 6));
    assert_eq!(passed["noop"], (0, 6));
    assert_eq!(passed["sed-fixer"], (3, 6));
    // The table it prints: the snapshot `cli::run_demo`.
    for file in [
        "events.jsonl",
        "diff.patch",
        "verify.log",
        "agent.log",
        "result.json",
    ] {
        assert!(
            out.join("trials/word-count/sed-fixer/1")
                .join(file)
                .is_file(),
            "{file} missing"
        );
    }
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["suite"], "demo");
    assert!(
        manifest["suite_digest"]
            .as_str()
            .unwrap()
            .starts_with("sha256:")
    );
    assert!(manifest["finished_at"].is_string());
}

// `validate suites/demo` (all 6 tasks sound, exit 0): the snapshot `cli::validate_demo`.
