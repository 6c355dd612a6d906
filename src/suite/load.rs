//! Loading a suite file: its repo, its agents and its tasks, each value checked.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use indexmap::IndexMap;
use serde_saphyr::Spanned;
use sha2::{Digest, Sha256};

use super::diagnostics::{Errors, Source, SuiteError};
use super::matrix::add_agents;
use super::raw::{RawAgent, RawAgentsFile, RawSuite, loc};
use super::read::{Lost, Read, read};
use super::task::task;
use super::types::{AgentSpec, AgentVariant, DEFAULT_MAX_DIFF, Suite, Task};
use crate::agent::harness::Endpoint;
use crate::workspace::{
    Environment, ImageSource, Isolation, Network, Overlay, RepoKind, RepoSource,
};

/// Finds the suite file: `path` itself, or `suite.yaml` / `suite.yml` inside it.
pub fn suite_file(path: &Path) -> Result<PathBuf, SuiteError> {
    if path.is_dir() {
        for name in ["suite.yaml", "suite.yml"] {
            let candidate = path.join(name);
            if candidate.is_file() {
                return Ok(candidate);
            }
        }
        return Err(SuiteError::NotFound {
            path: path.to_owned(),
            why: "the folder has no suite.yaml",
        });
    }
    if path.is_file() {
        Ok(path.to_owned())
    } else {
        Err(SuiteError::NotFound {
            path: path.to_owned(),
            why: "no such file or folder",
        })
    }
}

fn read_text(path: &Path) -> Result<String, SuiteError> {
    std::fs::read_to_string(path).map_err(|source| SuiteError::Read {
        path: path.to_owned(),
        source,
    })
}

/// Loads and validates a suite (a file, or a folder holding `suite.yaml`) and an optional agents
/// file whose agents override the suite's of the same name and are the ones run by default.
/// Every error of both files is reported, not only the first.
pub fn load(suite: &Path, agents_file: Option<&Path>) -> Result<Suite, SuiteError> {
    let path = suite_file(suite)?;
    // Absolute, so relative paths resolve the same whatever the working directory.
    let path = path.canonicalize().unwrap_or(path);
    let text = read_text(&path)?;
    let source = Source::new(&path, &text);
    let agents_text = agents_file.map(read_text).transpose()?;
    let agents_source = agents_file
        .zip(agents_text.as_deref())
        .map(|(path, text)| Source::new(path, text));
    let mut errors = Errors::in_files(std::iter::once(path.as_path()).chain(agents_file));
    let raw = read::<RawSuite>(&source, &mut errors);
    let agents_file = agents_source
        .as_ref()
        .and_then(|agents_source| read::<RawAgentsFile>(agents_source, &mut errors));
    let Some(Read { raw, lost }) = raw else {
        return errors.finish(None);
    };
    let agents_file = agents_source.as_ref().zip(agents_file.as_ref());
    let (agents, variants) = suite_agents(&source, &raw, &lost, agents_file, &mut errors);
    let name = suite_name(&source, &raw.name, &mut errors);
    let repo = errors.keep(repo_source(&source, &raw.repo));
    let max_diff = errors.keep(max_diff(&source, raw.max_diff.as_ref()));
    let tasks = tasks(&source, &raw, &lost, &mut errors);
    check_model_network(&source, &raw.agents, &agents, &tasks, &mut errors);
    if let Some((agents_source, file)) = agents_file {
        let raw_agents = &file.raw.agents;
        check_model_network(agents_source, raw_agents, &agents, &tasks, &mut errors);
    }
    let agents_text = agents_file.map(|(source, _)| source.text);
    let digest = digest(&text, agents_text, &tasks, &agents);
    let agents_file = agents_file.map(|(source, file)| {
        let names = file.raw.agents.keys().cloned().collect();
        (source.path.to_owned(), names)
    });
    errors.finish(repo.zip(max_diff).map(|(repo, max_diff)| Suite {
        name,
        description: raw.description.clone(),
        path: path.clone(),
        digest,
        repo,
        agents,
        variants,
        tasks,
        max_diff,
        base_images: raw.base_images.clone(),
        agents_file,
    }))
}

/// The suite's agents, then the agents file's (replacing those of the same name), each with
/// the suite's default budget where it sets none of its own.
fn suite_agents(
    source: &Source,
    raw: &RawSuite,
    lost: &Lost,
    agents_file: Option<(&Source, &Read<RawAgentsFile>)>,
    errors: &mut Errors,
) -> (IndexMap<String, AgentSpec>, IndexMap<String, AgentVariant>) {
    let mut agents = IndexMap::new();
    let mut variants = IndexMap::new();
    add_agents(
        source,
        &raw.agents,
        lost,
        &mut agents,
        &mut variants,
        errors,
    );
    if let Some((agents_source, file)) = agents_file {
        let (file, lost) = (&file.raw, &file.lost);
        add_agents(
            agents_source,
            &file.agents,
            lost,
            &mut agents,
            &mut variants,
            errors,
        );
    }
    if let Some(defaults) = &raw.budget
        && let Some(defaults) = errors.keep(super::agents::budget(source, &defaults.value))
    {
        super::agents::apply_default_budget(&mut agents, defaults);
    }
    (agents, variants)
}

/// The suite's `name`, trimmed, not empty.
fn suite_name(source: &Source, name: &Spanned<String>, errors: &mut Errors) -> String {
    let trimmed = name.value.trim().to_owned();
    if trimmed.is_empty() {
        errors.push(source.at(name, "the suite `name` is empty"));
    }
    trimmed
}

/// `max_diff`: a size greater than zero.
fn max_diff(source: &Source, size: Option<&Spanned<String>>) -> Result<u64, SuiteError> {
    let Some(size) = size else {
        return Ok(DEFAULT_MAX_DIFF);
    };
    match size.value.trim().parse::<bytesize::ByteSize>() {
        Ok(bytes) if bytes.as_u64() > 0 => Ok(bytes.as_u64()),
        _ => Err(source.at(
            size,
            format!(
                "invalid max_diff '{}': use a size greater than zero such as 20MiB, 500KB or 1048576",
                size.value
            ),
        )),
    }
}

/// The suite's tasks, each checked, their ids unique; at least one.
fn tasks(source: &Source, raw: &RawSuite, lost: &Lost, errors: &mut Errors) -> Vec<Task> {
    let mut tasks = Vec::with_capacity(raw.tasks.value.len());
    let mut seen: HashMap<&str, u64> = HashMap::new();
    for raw_task in &raw.tasks.value {
        if let Some(first) = seen.insert(&raw_task.id.value, loc(&raw_task.id).0) {
            errors.push(source.at(
                &raw_task.id,
                format!(
                    "duplicate task id '{}' (first defined on line {first})",
                    raw_task.id.value
                ),
            ));
        }
        tasks.extend(task(source, raw, lost, raw_task, errors));
    }
    // Tasks left out for their errors are not missing.
    if raw.tasks.value.is_empty() && !lost.under("tasks") {
        errors.push(source.at(
            &raw.tasks,
            "the suite has no tasks; add at least one under `tasks:`",
        ));
    }
    tasks
}

/// The suite's digest: its files' text, and what they name (so resume and merge notice an
/// edited hidden test).
fn digest(
    text: &str,
    agents_text: Option<&str>,
    tasks: &[Task],
    agents: &IndexMap<String, AgentSpec>,
) -> String {
    let mut digest = Sha256::new();
    digest.update(text.as_bytes());
    if let Some(agents_text) = agents_text {
        digest.update(agents_text.as_bytes());
    }
    for task in tasks {
        digest.update(task.instruction.as_bytes());
        for overlay in [&task.tests, &task.solution].into_iter().flatten() {
            let (Overlay::Dir(path) | Overlay::Patch(path)) = overlay;
            hash_tree(&mut digest, path);
        }
        if let Some(script) = &task.solution_script {
            hash_tree(&mut digest, script);
        }
        if let Some(Environment {
            image: ImageSource::Dockerfile { path, context },
            ..
        }) = &task.environment
        {
            hash_tree(&mut digest, path);
            hash_tree(&mut digest, context);
        }
    }
    for spec in agents.values() {
        if let Some((_, config)) = spec.as_harness()
            && let Some(Endpoint::Scripted(script)) = &config.endpoint
        {
            hash_tree(&mut digest, script);
        }
    }
    format!("sha256:{:x}", digest.finalize())
}

/// `network: model` needs a network of the agent's own: the sandbox's or a container's. An
/// agent that sets it cannot run a task under `worktree` without an environment.
fn check_model_network(
    source: &Source,
    raw: &IndexMap<String, RawAgent>,
    agents: &IndexMap<String, AgentSpec>,
    tasks: &[Task],
    errors: &mut Errors,
) {
    for (name, agent) in raw {
        let Some(network) = &agent.network else {
            continue;
        };
        // An agents file may have replaced the suite's agent of that name.
        if agents.get(name).and_then(AgentSpec::network) != Some(Network::Model) {
            continue;
        }
        let outside = tasks
            .iter()
            .find(|task| task.environment.is_none() && task.isolation != Isolation::Sandbox);
        if let Some(task) = outside {
            errors.push(source.at(
                network,
                format!(
                    "agent '{name}' sets `network: model`, which needs `isolation: sandbox` or an \
                     `environment:` (a network of the agent's own), and task '{}' runs under \
                     `isolation: {}` on this machine. Valid networks there: none, host",
                    task.id, task.isolation
                ),
            ));
        }
    }
}

/// Adds a file's bytes, or a folder's file names and bytes in sorted order, to `digest`.
pub fn hash_tree(digest: &mut Sha256, path: &Path) {
    let mut files = Vec::new();
    let mut stack = vec![path.to_owned()];
    while let Some(next) = stack.pop() {
        match std::fs::read_dir(&next) {
            Ok(entries) => stack.extend(entries.flatten().map(|e| e.path())),
            Err(_) => files.push(next),
        }
    }
    files.sort();
    for file in files {
        digest.update(
            file.strip_prefix(path)
                .unwrap_or(&file)
                .as_os_str()
                .as_encoded_bytes(),
        );
        digest.update([0]);
        digest.update(std::fs::read(&file).unwrap_or_default());
        digest.update([0]);
    }
}

fn repo_source(source: &Source, repo: &Spanned<String>) -> Result<RepoSource, SuiteError> {
    let path = source.existing_path(repo, "repo")?;
    let path = path.canonicalize().unwrap_or(path);
    let kind = if path.is_file() {
        let mut head = [0u8; 16];
        let n = std::fs::File::open(&path)
            .and_then(|mut f| std::io::Read::read(&mut f, &mut head))
            .unwrap_or(0);
        if head[..n].starts_with(b"# v2 git bundle") || head[..n].starts_with(b"# v3 git bundle") {
            RepoKind::Bundle
        } else {
            return Err(source.at(
                repo,
                format!("repo '{}' is a file but not a git bundle", repo.value),
            ));
        }
    } else if path.join(".git").exists() {
        RepoKind::WorkTree
    } else if path.join("HEAD").is_file() && path.join("objects").is_dir() {
        RepoKind::Bare
    } else {
        RepoKind::PlainDir
    };
    Ok(RepoSource { path, kind })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_covers_the_files_a_suite_names() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let git = |args: &[&str]| {
            let ok = std::process::Command::new("git")
                .args(args)
                .current_dir(root.join("repo"))
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .env("GIT_AUTHOR_NAME", "t")
                .env("GIT_AUTHOR_EMAIL", "t@t")
                .env("GIT_COMMITTER_NAME", "t")
                .env("GIT_COMMITTER_EMAIL", "t@t")
                .status()
                .unwrap()
                .success();
            assert!(ok, "git {args:?}");
        };
        std::fs::create_dir_all(root.join("repo")).unwrap();
        std::fs::create_dir_all(root.join("hidden/tests")).unwrap();
        std::fs::write(root.join("repo/a.txt"), "a\n").unwrap();
        git(&["init", "-q"]);
        git(&["add", "-A"]);
        git(&["commit", "-qm", "base"]);
        std::fs::write(root.join("hidden/tests/test_a.py"), "assert True\n").unwrap();
        std::fs::write(root.join("task.md"), "Do it.\n").unwrap();
        std::fs::write(
            root.join("suite.yaml"),
            "name: d\nrepo: repo\ntasks:\n  - id: t\n    base: HEAD\n    instruction_file: task.md\n    tests: hidden\n    verify: 'true'\n",
        )
        .unwrap();
        let digest = || load(&root.join("suite.yaml"), None).unwrap().digest;
        let first = digest();
        assert_eq!(digest(), first, "stable");
        std::fs::write(root.join("hidden/tests/test_a.py"), "assert False\n").unwrap();
        let second = digest();
        assert_ne!(second, first, "a hidden test changed");
        std::fs::write(root.join("task.md"), "Do it well.\n").unwrap();
        assert_ne!(digest(), second, "the instruction file changed");
    }
}
