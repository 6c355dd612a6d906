//! One integration-test binary (one link instead of many), as in jj and uv.

// The crate's lints guard the library's public API; helpers shared between test modules are
// `pub` to each other, not to any user.
#![allow(unreachable_pub, missing_docs)]

mod agents;
mod agents_cli;
mod assertions;
mod cli;
mod cluster;
mod common;
mod compare;
mod container_delta;
mod container_verifier;
mod crash;
mod demo;
mod environments;
mod exits;
mod first_hour;
mod gaming;
mod gateway;
mod history_objects;
mod hostile;
mod import;
mod init;
mod layers;
mod lifecycle;
mod model;
mod moved_suite;
mod patches;
mod prepared;
mod procs;
mod proof;
mod real_rows;
mod real_tasks;
mod redaction;
mod registry;
mod replay;
mod reports;
mod sandbox;
mod sandbox_reach;
mod seam;
mod sequential;
mod shard;
mod suite_errors;
mod swebench;
mod tampered;
mod trajectory;
mod trust;
mod validate;
mod workspace;

/// jj's guard: a file in tests/it that no `mod` line above names is never compiled, so its tests
/// silently never run. This fails instead.
#[test]
fn every_test_file_is_declared_here() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it");
    let main = std::fs::read_to_string(dir.join("main.rs")).unwrap();
    let declared: std::collections::BTreeSet<&str> = main
        .lines()
        .filter_map(|line| line.strip_prefix("mod ")?.strip_suffix(';'))
        .collect();
    let mut forgotten = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        // A module is `NAME.rs` or a folder `NAME/` holding `mod.rs`.
        let name = match path.extension() {
            Some(ext) if ext == "rs" => path.file_stem(),
            None if path.join("mod.rs").is_file() => path.file_name(),
            _ => None,
        };
        let Some(name) = name.and_then(|name| name.to_str()) else {
            continue;
        };
        if name != "main" && !declared.contains(name) {
            forgotten.push(format!("mod {name};"));
        }
    }
    forgotten.sort();
    assert!(
        forgotten.is_empty(),
        "tests/it has files main.rs does not declare, so they are never compiled: add {forgotten:?} to tests/it/main.rs"
    );
}
