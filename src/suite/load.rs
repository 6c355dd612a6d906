//! Loading a suite file: its repo, its tasks and its agents, each value checked.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use indexmap::IndexMap;
use serde_saphyr::Spanned;
use sha2::{Digest, Sha256};

use super::diagnostics::{Errors, Source, SuiteError};
use super::matrix::add_agents;
use super::names::{is_safe_name, resolve_command};
use super::raw::{
    RawAgent, RawAgentsFile, RawEnvironment, RawMetric, RawSuite, RawTask, RawVerify, loc,
};
use super::read::{Lost, Read, read};
use super::types::{AgentSpec, DEFAULT_MAX_DIFF, Located, MetricKind, MetricSpec, Suite, Task};
use crate::agent::harness::Endpoint;
use crate::delta::VerifySpec;
use crate::support::parse_duration;
use crate::workspace::{
    DEFAULT_WORKDIR, DeltaScope, Environment, ImageSource, Isolation, Network, Overlay, RepoKind,
    RepoSource,
};
use strum::VariantNames as _;

/// The default grader timeout.
const GRADER_TIMEOUT: Duration = Duration::from_secs(60);

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
    let mut digest = Sha256::new();
    digest.update(text.as_bytes());

    let mut agents = IndexMap::new();
    let mut variants = IndexMap::new();
    add_agents(
        &source,
        &raw.agents,
        &lost,
        &mut agents,
        &mut variants,
        &mut errors,
    );
    if let (Some(agents_source), Some(file)) = (&agents_source, &agents_file) {
        digest.update(agents_source.text.as_bytes());
        let (file, lost) = (&file.raw, &file.lost);
        add_agents(
            agents_source,
            &file.agents,
            lost,
            &mut agents,
            &mut variants,
            &mut errors,
        );
    }

    if let Some(defaults) = &raw.budget
        && let Some(defaults) = errors.keep(super::agents::budget(&source, &defaults.value))
    {
        super::agents::apply_default_budget(&mut agents, defaults);
    }
    let name = raw.name.value.trim().to_owned();
    if name.is_empty() {
        errors.push(source.at(&raw.name, "the suite `name` is empty"));
    }
    let repo = errors.keep(repo_source(&source, &raw.repo));
    let max_diff = match &raw.max_diff {
        None => DEFAULT_MAX_DIFF,
        Some(size) => match size.value.trim().parse::<bytesize::ByteSize>() {
            Ok(bytes) if bytes.as_u64() > 0 => bytes.as_u64(),
            _ => {
                errors.push(source.at(
                    size,
                    format!(
                        "invalid max_diff '{}': use a size greater than zero such as 20MiB, 500KB or 1048576",
                        size.value
                    ),
                ));
                DEFAULT_MAX_DIFF
            }
        },
    };
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
        tasks.extend(task(&source, &raw, &lost, raw_task, &mut errors));
    }
    // Tasks left out for their errors are not missing.
    if raw.tasks.value.is_empty() && !lost.under("tasks") {
        errors.push(source.at(
            &raw.tasks,
            "the suite has no tasks; add at least one under `tasks:`",
        ));
    }
    check_model_network(&source, &raw.agents, &agents, &tasks, &mut errors);
    if let (Some(agents_source), Some(file)) = (&agents_source, &agents_file) {
        check_model_network(
            agents_source,
            &file.raw.agents,
            &agents,
            &tasks,
            &mut errors,
        );
    }
    // What the files name counts too, so resume and merge notice an edited hidden test.
    for task in &tasks {
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
    let agents_file = agents_source
        .as_ref()
        .zip(agents_file.as_ref())
        .map(|(source, file)| {
            (
                source.path.to_owned(),
                file.raw.agents.keys().cloned().collect(),
            )
        });
    errors.finish(repo.map(|repo| Suite {
        name,
        description: raw.description.clone(),
        path: path.clone(),
        digest: format!("sha256:{:x}", digest.finalize()),
        repo,
        agents,
        variants,
        tasks,
        max_diff,
        base_images: raw.base_images.clone(),
        agents_file,
    }))
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

/// One task, each of its values checked; None when any is wrong, every error kept.
fn task(
    source: &Source,
    raw: &RawSuite,
    lost: &Lost,
    t: &RawTask,
    errors: &mut Errors,
) -> Option<Task> {
    let defaults = &raw.defaults;
    let found = errors.count();
    // A key left out for its error is not also missing.
    let lost_keys = lost.keys_near(loc(&t.id));
    let id = t.id.value.clone();
    if !is_safe_name(&id) {
        errors.push(source.at(
            &t.id,
            format!("task id '{id}' is not allowed: use letters, digits, '.', '_' and '-'"),
        ));
    }
    let instruction = match (&t.instruction, &t.instruction_file) {
        (Some(text), None) => Some(text.value.clone()),
        (None, Some(file)) => errors.keep(source.existing_path(file, "instruction_file").and_then(
            |path| {
                std::fs::read_to_string(&path).map_err(|err| {
                    source.at(file, format!("cannot read {}: {err}", path.display()))
                })
            },
        )),
        (Some(_), Some(file)) => {
            errors.push(source.at(
                file,
                format!("task '{id}' sets both `instruction` and `instruction_file`; keep one"),
            ));
            None
        }
        (None, None) => {
            if !lost_keys {
                errors.push(source.at(
                    &t.id,
                    format!("task '{id}' has no `instruction` or `instruction_file`"),
                ));
            }
            None
        }
    };
    if instruction
        .as_ref()
        .is_some_and(|text| text.trim().is_empty())
    {
        errors.push(source.at(&t.id, format!("task '{id}' has an empty instruction")));
    }
    let base = t
        .base
        .as_ref()
        .or(defaults.base.as_ref())
        .or(raw.base.as_ref())
        .map(|b| Located {
            value: b.value.clone(),
            line: loc(b).0,
            column: loc(b).1,
        })
        .unwrap_or_else(|| Located {
            value: "HEAD".into(),
            line: loc(&raw.repo).0,
            column: loc(&raw.repo).1,
        });
    let mut overlay = |field: &Option<Spanned<String>>, what: &str| -> Option<Option<Overlay>> {
        errors.keep(
            field
                .as_ref()
                .map(|p| source.existing_path(p, what).map(Overlay::from_path))
                .transpose(),
        )
    };
    let tests = overlay(&t.tests, "tests");
    let solution = overlay(&t.solution, "solution");
    let verify_at = t.verify.as_ref().or(defaults.verify.as_ref());
    let verify = match verify_at {
        Some(v) => errors.keep(verify_spec(source, v)),
        None => {
            if !lost_keys && !lost.under("defaults") {
                errors.push(source.at(
                    &t.id,
                    format!(
                        "task '{id}' has no `verify` command; set it on the task or under `defaults:`"
                    ),
                ));
            }
            None
        }
    };
    let metric = match t.metric.as_ref().or(defaults.metric.as_ref()) {
        Some(m) => errors.keep(metric_spec(source, m)),
        None => Some(MetricSpec::Delta),
    };
    let isolation = match t.isolation.as_ref().or(defaults.isolation.as_ref()) {
        Some(s) => errors.keep(
            s.value
                .parse::<Isolation>()
                .map_err(|err| source.at(s, format!("{err}"))),
        ),
        None => Some(Isolation::Worktree),
    };
    // A task's mapping replaces the default's whole: no key-by-key merge.
    let environment = match t.environment.as_ref().or(defaults.environment.as_ref()) {
        Some(e) => environment(source, e, lost, errors).map(Some),
        None => Some(None),
    };
    // What needs a container is checked once the environment is known to be sound.
    if let (Some(verify), Some(environment), Some(at)) = (&verify, &environment, verify_at) {
        if verify.in_place && environment.is_none() {
            errors.push(source.at(
                at,
                format!(
                    "task '{id}' sets `in_place: true`, which runs verify in the agent's own container, and has no `environment:`; give it one, or drop `in_place`"
                ),
            ));
        }
        if let Some(reward) = &verify.reward
            && reward.is_absolute()
            && environment.is_none()
        {
            errors.push(source.at(
                at,
                format!(
                    "task '{id}' reads its reward from {}, a container path, and has no `environment:`; give it one, or name a folder of the workspace (such as .deltabench/logs/verifier)",
                    reward.display()
                ),
            ));
        }
    }
    let timeout = errors.keep(
        t.timeout
            .as_ref()
            .or(defaults.timeout.as_ref())
            .map(|d| source.duration(d))
            .transpose(),
    );
    let setup = t
        .setup
        .as_ref()
        .or(defaults.setup.as_ref())
        .map(|s| s.value.clone());
    let prepare = match (t.prepare.as_ref().or(defaults.prepare.as_ref()), isolation) {
        (Some(p), Some(Isolation::Session)) if p.value => {
            errors.push(source.at(
                p,
                "`prepare: true` needs a cached template, which the `session` strategy never uses \
                 (it works in your own tree); use `worktree` or `sandbox`, or drop `prepare`"
                    .to_owned(),
            ));
            None
        }
        (Some(p), _) => Some(p.value),
        (None, Some(isolation)) => environment
            .as_ref()
            .map(|environment| environment.is_some() && isolation != Isolation::Session),
        (None, None) => None,
    };
    let solution_script = match (&t.solution_script, &t.solution) {
        (Some(script), Some(_)) => {
            errors.push(source.at(
                script,
                "the task sets both `solution` and `solution_script`; keep one",
            ));
            None
        }
        (Some(script), None) => errors
            .keep(
                source
                    .existing_path(script, "solution_script")
                    .and_then(|path| {
                        if path.is_file() {
                            Ok(path.canonicalize().unwrap_or(path))
                        } else {
                            Err(source.at(
                                script,
                                format!("solution_script '{}' is not a file", script.value),
                            ))
                        }
                    }),
            )
            .map(Some),
        (None, _) => Some(None),
    };
    let mut tags = defaults.tags.clone().unwrap_or_default();
    for tag in t.tags.iter().flatten() {
        if !tags.contains(tag) {
            tags.push(tag.clone());
        }
    }
    if errors.count() > found {
        return None;
    }
    Some(Task {
        id,
        instruction: instruction?,
        base,
        setup,
        prepare: prepare?,
        tests: tests?,
        protected: t.protected.clone(),
        verify: verify?,
        solution: solution?,
        solution_script: solution_script?,
        metric: metric?,
        tags,
        timeout: timeout?,
        isolation: isolation?,
        environment: environment?,
        mutants: t
            .mutants
            .as_ref()
            .or(defaults.mutants.as_ref())
            .map_or(crate::delta::DEFAULT_MUTANTS, |n| n.value),
    })
}

/// A task's `environment:`, each key checked; None when any is wrong, every error kept.
fn environment(
    source: &Source,
    e: &Spanned<RawEnvironment>,
    lost: &Lost,
    errors: &mut Errors,
) -> Option<Environment> {
    let raw = &e.value;
    let found = errors.count();
    let image = match (&raw.image, &raw.dockerfile) {
        (Some(image), None) => {
            if let Some(context) = &raw.context {
                errors.push(source.at(
                    context,
                    "`context` applies to a `dockerfile` environment, not an `image` one",
                ));
            }
            let name = image.value.trim();
            if name.is_empty() || name.chars().any(char::is_whitespace) {
                errors.push(source.at(
                    image,
                    format!(
                        "invalid image name '{}': use a local image such as localhost/NAME:TAG",
                        image.value
                    ),
                ));
                None
            } else {
                Some(ImageSource::Image(name.to_owned()))
            }
        }
        (None, Some(dockerfile)) => {
            errors.keep(dockerfile_image(source, dockerfile, raw.context.as_ref()))
        }
        (Some(_), Some(dockerfile)) => {
            errors.push(source.at(
                dockerfile,
                "the environment sets both `image` and `dockerfile`; keep exactly one",
            ));
            None
        }
        (None, None) => {
            if !lost.keys_near(loc(e)) {
                errors.push(source.at(
                    e,
                    "the environment needs exactly one of `image` (a local image name) and `dockerfile` (a path)",
                ));
            }
            None
        }
    };
    let workdir = match &raw.workdir {
        Some(w) if w.value.starts_with('/') && w.value.trim() != "/" => PathBuf::from(&w.value),
        Some(w) => {
            errors.push(source.at(
                w,
                format!(
                    "invalid workdir '{}': use an absolute folder other than /, such as {DEFAULT_WORKDIR}",
                    w.value
                ),
            ));
            PathBuf::new()
        }
        None => PathBuf::from(DEFAULT_WORKDIR),
    };
    let network = match &raw.network {
        Some(n) => match n.value.parse::<Network>() {
            Ok(Network::Model) => {
                errors.push(source.at(
                    n,
                    "network `model` is an agent's setting (set it on the agent, for this \
                     container too), not an environment's. Valid networks for an environment: \
                     none, host",
                ));
                Network::None
            }
            Ok(network) => network,
            Err(_) => {
                errors.push(source.at(
                    n,
                    format!(
                        "unknown network mode: '{}'. Valid networks for an environment: none, host",
                        n.value
                    ),
                ));
                Network::None
            }
        },
        None => Network::None,
    };
    let millicpus = match &raw.cpus {
        Some(c) if c.value.is_finite() && c.value >= 0.001 && c.value <= 4096.0 => {
            Some((c.value * 1000.0).round() as u32)
        }
        Some(c) => {
            errors.push(source.at(
                c,
                format!(
                    "invalid cpus {}: use a number above 0, such as 2 or 0.5",
                    c.value
                ),
            ));
            None
        }
        None => None,
    };
    let memory = match &raw.memory {
        Some(m) => match m.value.trim().parse::<bytesize::ByteSize>() {
            Ok(size) if size.as_u64() >= 6 << 20 => Some(size.as_u64()),
            _ => {
                errors.push(source.at(
                    m,
                    format!(
                        "invalid memory '{}': use a size of at least 6MiB (the runtimes' least), such as 512MiB or 2GB",
                        m.value
                    ),
                ));
                None
            }
        },
        None => None,
    };
    let delta = match &raw.delta {
        Some(d) => match d.value.as_str() {
            "workspace" => DeltaScope::Workspace,
            "container" => DeltaScope::Container,
            other => {
                errors.push(source.at(
                    d,
                    format!("unknown delta '{other}'. Valid deltas: workspace, container"),
                ));
                DeltaScope::Workspace
            }
        },
        None => DeltaScope::Workspace,
    };
    let verify_network = match &raw.verify_network {
        Some(n) => match n.value.as_str() {
            "none" => Network::None,
            "host" => Network::Host,
            other => {
                errors.push(source.at(
                    n,
                    format!("unknown verify_network '{other}'. Valid networks for the verify command: none, host"),
                ));
                Network::None
            }
        },
        None => Network::None,
    };
    let absolute = |path: &str, key: &str| {
        if path.starts_with('/') && !path.trim_end_matches('/').is_empty() {
            return Ok(());
        }
        Err(format!(
            "invalid {key} '{path}': use an absolute container path other than /, such as /tests"
        ))
    };
    let mut verify_mounts = Vec::new();
    if let Some(mounts) = &raw.verify_mounts {
        for (inside, from) in &mounts.value {
            errors.keep(absolute(inside, "verify_mounts path").map_err(|m| source.at(mounts, m)));
            if from.starts_with('/') || from.split('/').any(|p| p == "..") {
                errors.push(source.at(
                    mounts,
                    format!(
                        "invalid verify_mounts source '{from}' for {inside}: use a folder of the workspace, without a leading / or `..`"
                    ),
                ));
            }
            verify_mounts.push((
                PathBuf::from(inside),
                PathBuf::from(from.trim_start_matches("./")),
            ));
        }
    }
    let solution_at = raw.solution_at.as_ref().map(|at| {
        errors.keep(absolute(&at.value, "solution_at").map_err(|m| source.at(at, m)));
        PathBuf::from(&at.value)
    });
    let outputs = match &raw.outputs {
        Some(globs) => {
            for glob in &globs.value {
                errors.keep(absolute(glob, "outputs glob").map_err(|m| source.at(globs, m)));
            }
            globs.value.clone()
        }
        None => Vec::new(),
    };
    if errors.count() > found {
        return None;
    }
    Some(Environment {
        image: image?,
        workdir,
        network,
        limits: crate::workspace::Limits { millicpus, memory },
        delta,
        verify_network,
        verify_mounts,
        solution_at,
        outputs,
    })
}

/// A `dockerfile:` environment's Dockerfile and build context, which must exist.
fn dockerfile_image(
    source: &Source,
    dockerfile: &Spanned<String>,
    context: Option<&Spanned<String>>,
) -> Result<ImageSource, SuiteError> {
    let path = source.existing_path(dockerfile, "dockerfile")?;
    if !path.is_file() {
        return Err(source.at(
            dockerfile,
            format!("dockerfile '{}' is not a file", dockerfile.value),
        ));
    }
    let path = path.canonicalize().unwrap_or(path);
    let context = match context {
        Some(context) => {
            let dir = source.existing_path(context, "context")?;
            if !dir.is_dir() {
                return Err(source.at(
                    context,
                    format!("context '{}' is not a folder", context.value),
                ));
            }
            dir.canonicalize().unwrap_or(dir)
        }
        None => path.parent().map(Path::to_owned).unwrap_or_default(),
    };
    Ok(ImageSource::Dockerfile { path, context })
}

fn verify_spec(source: &Source, v: &Spanned<RawVerify>) -> Result<VerifySpec, SuiteError> {
    if v.value.run.trim().is_empty() {
        return Err(source.at(v, "the verify command is empty"));
    }
    let timeout = v
        .value
        .timeout
        .as_deref()
        .map(|t| parse_duration(t).map_err(|message| source.at(v, message.to_string())))
        .transpose()?;
    let reward = match v.value.reward.as_deref().map(str::trim) {
        None => None,
        Some(dir) if dir.is_empty() || dir == "/" || dir.split('/').any(|p| p == "..") => {
            return Err(source.at(
                v,
                format!(
                    "invalid reward folder '{dir}': use a container path such as /logs/verifier, or a folder of the workspace without `..`"
                ),
            ));
        }
        Some(dir) => Some(PathBuf::from(dir.trim_start_matches("./"))),
    };
    Ok(VerifySpec {
        run: v.value.run.clone(),
        timeout,
        in_place: v.value.in_place,
        reward,
    })
}

fn metric_spec(source: &Source, m: &Spanned<RawMetric>) -> Result<MetricSpec, SuiteError> {
    match &m.value {
        RawMetric::Named(name) => match name.parse::<MetricKind>() {
            Ok(MetricKind::Delta) => Ok(MetricSpec::Delta),
            Ok(MetricKind::DeltaToken) => Ok(MetricSpec::DeltaToken),
            Ok(MetricKind::ExitCode) => Ok(MetricSpec::ExitCode),
            Ok(MetricKind::Grader) | Err(_) => {
                let grader: &str = MetricKind::Grader.into();
                let named: Vec<&str> = MetricKind::VARIANTS
                    .iter()
                    .copied()
                    .filter(|kind| *kind != grader)
                    .collect();
                Err(source.at(
                    m,
                    format!(
                        "unknown metric '{name}'. Valid metrics: {}, or {{grader: COMMAND}}",
                        named.join(", ")
                    ),
                ))
            }
        },
        RawMetric::Grader { command, timeout } => {
            let spanned = Spanned {
                value: command.clone(),
                referenced: m.referenced,
                defined: m.defined,
            };
            Ok(MetricSpec::Grader {
                command: resolve_command(source, &spanned)?,
                written: command.trim().to_owned(),
                timeout: Some(
                    timeout
                        .as_deref()
                        .map(|t| {
                            parse_duration(t).map_err(|message| source.at(m, message.to_string()))
                        })
                        .transpose()?
                        .unwrap_or(GRADER_TIMEOUT),
                ),
            })
        }
    }
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
