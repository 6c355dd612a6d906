//! The official SWE-bench harness's specs (its test commands, environments and test
//! directives), read by the importer and by the environments it writes.

use std::collections::HashMap;
use std::sync::LazyLock;

use serde::Deserialize;

/// The official harness's specs for its Python repositories, per repository and version
/// (`tests/fixtures/swebench/specs.py` writes the file from the `swebench` package).
#[derive(Debug, Deserialize)]
pub(super) struct OfficialSpecs {
    /// Files a test patch touches that are no test directive (data, docs, config).
    non_test_exts: Vec<String>,
    /// The base image's versions.
    pub docker: DockerSpecs,
    /// Where a repository keeps its requirements file, first found wins.
    pub reqs_paths: HashMap<String, Vec<String>>,
    /// Where a repository keeps its conda environment file, first found wins.
    pub env_yml_paths: HashMap<String, Vec<String>>,
    /// Packages replaced in those files (yanked from PyPI), and their replacements.
    pub replace_req_packages: Vec<(String, String)>,
    pub repos: HashMap<String, HashMap<String, OfficialSpec>>,
}

#[derive(Debug, Deserialize)]
pub(super) struct DockerSpecs {
    pub ubuntu_version: String,
    pub conda_version: String,
}

#[derive(Debug, Deserialize)]
pub(super) struct OfficialSpec {
    pub test_cmd: Option<String>,
    #[serde(default)]
    pub eval_commands: Vec<String>,
    pub python: Option<String>,
    /// Conda packages, or `requirements.txt` / `environment.yml` for the repository's file.
    pub packages: Option<String>,
    #[serde(default)]
    pub pip_packages: Vec<String>,
    #[serde(default)]
    pub pre_install: Vec<String>,
    pub install: Option<String>,
    /// An `environment.yml` is applied to a fresh environment rather than creating it.
    #[serde(default)]
    pub no_use_env: bool,
}

pub(super) static OFFICIAL: LazyLock<OfficialSpecs> = LazyLock::new(|| {
    serde_json::from_str(include_str!("swebench_specs.json"))
        .expect("src/import/swebench_specs.json is valid (a unit test reads it)")
});

/// What the official harness passes its test command: each file a `diff --git a/X b/Y` header
/// of the test patch names (Y), except data files; for Django, as a module (`tests/` and `.py`
/// cut, `/` made `.`).
pub(super) fn test_directives(repo: &str, test_patch: &str) -> Vec<String> {
    test_patch
        .lines()
        // As its pattern `diff --git a/.* b/(.*)` reads: anywhere in a line, the last " b/".
        .filter_map(|line| line.find("diff --git a/").map(|at| &line[at + 13..]))
        .filter_map(|rest| rest.rsplit_once(" b/").map(|(_, path)| path))
        .filter(|path| {
            !OFFICIAL
                .non_test_exts
                .iter()
                .any(|ext| path.ends_with(ext.as_str()))
        })
        .map(|path| {
            if repo != "django/django" {
                return path.to_owned();
            }
            let path = path.strip_suffix(".py").unwrap_or(path);
            let path = path.strip_prefix("tests/").unwrap_or(path);
            path.replace('/', ".")
        })
        .collect()
}
