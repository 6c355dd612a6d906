//! The run's container environments, made ready before any trial: the runtime answers, each
//! Dockerfile is built once, each image starts (docs/environments.md).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use indexmap::IndexMap;
use sha2::{Digest, Sha256};

use super::RunError;
use crate::agent::harness::{container_mounts, find_program, image_needs};
use crate::suite::{AgentSpec, Suite, Task, hash_tree};
use crate::workspace::{
    ContainerError, ContainerPolicy, DeltaScope, ImageNeed, ImageSource, Network, Runtime,
};

/// What trials need to run their tasks' commands in containers.
#[derive(Debug, Clone, Default)]
pub struct Environments {
    pub runtime: Option<Runtime>,
    /// The image each planned task with an environment runs, by task index.
    pub images: HashMap<usize, String>,
    /// The id each of those images had when the run started, by task index.
    pub ids: HashMap<usize, String>,
    /// The run's lease id: every container's label.
    pub label: String,
    /// Tasks whose environment could not be made (an image that does not build or start), by
    /// task index, with why: their trials are not run, and not scored.
    pub failed: HashMap<usize, String>,
    /// How long building each task's image took, by task index, for those this run built.
    pub built_ms: HashMap<usize, u64>,
}

impl Environments {
    /// How the task at `index` runs a command in its container: with `home` as `$HOME` and the
    /// object stores of `history` readable. `None` for a task run on the host.
    pub fn policy(
        &self,
        index: usize,
        task: &Task,
        home: PathBuf,
        history: &Path,
    ) -> Option<ContainerPolicy> {
        let environment = task.environment.as_ref()?;
        Some(
            ContainerPolicy {
                runtime: self.runtime.clone()?,
                image: self.images.get(&index)?.clone(),
                workdir: environment.workdir.clone(),
                network: environment.network,
                home,
                readable: Vec::new(),
                writable: Vec::new(),
                read_only: Vec::new(),
                workspace_mounts: Vec::new(),
                binds: Vec::new(),
                label: self.label.clone(),
                route: None,
                limits: environment.limits,
                keep: None,
                live: false,
            }
            .borrowing_objects_of(history),
        )
    }
}

/// The runtime, when a planned task has an environment.
pub fn runtime_for(suite: &Suite, tasks: &[usize]) -> Result<Option<Runtime>, RunError> {
    if !tasks.iter().any(|&i| suite.tasks[i].environment.is_some()) {
        return Ok(None);
    }
    Runtime::discover()
        .map(Some)
        .map_err(|ContainerError(message)| RunError::config(message))
}

/// The tag a Dockerfile is built as: a hash of it and its context's files.
pub(super) fn built_tag(dockerfile: &Path, context: &Path) -> String {
    let mut digest = Sha256::new();
    hash_tree(&mut digest, dockerfile);
    digest.update([0xff]);
    hash_tree(&mut digest, context);
    let hex = format!("{:x}", digest.finalize());
    format!("localhost/deltabench-env:{}", &hex[..16])
}

/// Why a task's image cannot be used: that task's trials are not scored, the others run.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ImageError {
    /// The Dockerfile, or its copy with the suite's base images, cannot be read or written.
    #[error("cannot {action} {}: {source}", path.display())]
    File {
        action: &'static str,
        path: PathBuf,
        #[source]
        source: Arc<std::io::Error>,
    },
    #[error("image {image} is not in the local store (it is never pulled): build or load it")]
    NotInStore { image: String },
    /// The runtime's build failed, as it said; offline, with how to build once elsewhere.
    #[error("{}", with_network_hint(.message))]
    Build { message: String },
    /// The runtime could not start the image, as it said.
    #[error("{message}")]
    Start { message: String },
}

impl ImageError {
    fn file(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.to_owned();
        move |source| Self::File {
            action,
            path,
            source: Arc::new(source),
        }
    }
}

/// One image of a suite's environments, as [`build_images`] left it.
#[derive(Debug, Clone)]
pub struct ImageReport {
    /// The image's name, as the tasks' environments give it.
    pub image: String,
    /// The tasks that run in it.
    pub tasks: Vec<String>,
    /// `Ok(true)` built now, `Ok(false)` already there; `Err` why it cannot be used.
    pub outcome: Result<bool, ImageError>,
    /// Wall-clock time its build or check took.
    pub duration: std::time::Duration,
}

/// Builds every image the tasks need that is not there yet (or checks a named one is), each
/// once, calling `building` with each image before its build; no trial runs. What `deltabench
/// prepare` does, so that later runs need no network.
pub fn build_images(
    suite: &Suite,
    tasks: &[usize],
    runtime: &Runtime,
    cache: &Path,
    mut building: impl FnMut(&str),
) -> Vec<ImageReport> {
    let mut reports: IndexMap<String, ImageReport> = IndexMap::new();
    for &i in tasks {
        let task = &suite.tasks[i];
        let Some(environment) = &task.environment else {
            continue;
        };
        let (image, dockerfile) = match image_of(&environment.image, suite, cache) {
            Ok((image, dockerfile)) => (image, Ok(dockerfile)),
            Err((image, why)) => (image, Err(why)),
        };
        if let Some(report) = reports.get_mut(&image) {
            report.tasks.push(task.id.clone());
            continue;
        }
        let started = std::time::Instant::now();
        let outcome = dockerfile.and_then(|dockerfile| {
            made(runtime, &image, dockerfile.as_ref(), cache, &mut building)
        });
        let report = ImageReport {
            image: image.clone(),
            tasks: vec![task.id.clone()],
            outcome,
            duration: started.elapsed(),
        };
        reports.insert(image, report);
    }
    reports.into_values().collect()
}

/// The Dockerfile to build: `path` itself, or, when a `FROM` names an image of `base_images`, a
/// copy in the cache with that image replaced (the tag, a hash of the file built, follows).
pub(super) fn dockerfile_to_build(
    path: &Path,
    base_images: &IndexMap<String, String>,
    cache: &Path,
) -> Result<PathBuf, ImageError> {
    if base_images.is_empty() {
        return Ok(path.to_owned());
    }
    let text = std::fs::read_to_string(path).map_err(ImageError::file("read", path))?;
    let mut replaced = false;
    let lines: Vec<String> = text
        .lines()
        .map(|line| {
            let mut words: Vec<&str> = line.split_whitespace().collect();
            if !words
                .first()
                .is_some_and(|w| w.eq_ignore_ascii_case("FROM"))
            {
                return line.to_owned();
            }
            let Some(at) = words.iter().skip(1).position(|w| !w.starts_with("--")) else {
                return line.to_owned();
            };
            match base_images.get(words[at + 1]) {
                Some(local) => {
                    replaced = true;
                    words[at + 1] = local;
                    words.join(" ")
                }
                None => line.to_owned(),
            }
        })
        .collect();
    if !replaced {
        return Ok(path.to_owned());
    }
    let text = lines.join("\n") + "\n";
    let dir = cache.join("environments");
    let copy = dir.join(format!("{:x}.Dockerfile", Sha256::digest(text.as_bytes())));
    std::fs::create_dir_all(&dir)
        .and_then(|()| std::fs::write(&copy, text))
        .map_err(ImageError::file("write", &copy))?;
    Ok(copy)
}

/// A Dockerfile to build: the file (the base-image map applied) and its context.
type ToBuild = Option<(PathBuf, PathBuf)>;

/// The image an environment runs, and for a Dockerfile what to build it from (its tag is a hash
/// of that); `Err` when the Dockerfile cannot be read, with the tag of the file as written.
fn image_of(
    source: &ImageSource,
    suite: &Suite,
    cache: &Path,
) -> Result<(String, ToBuild), (String, ImageError)> {
    match source {
        ImageSource::Image(name) => Ok((name.clone(), None)),
        ImageSource::Dockerfile { path, context } => {
            match dockerfile_to_build(path, &suite.base_images, cache) {
                Ok(path) => Ok((built_tag(&path, context), Some((path, context.clone())))),
                Err(why) => Err((built_tag(path, context), why)),
            }
        }
    }
}

/// Makes `image` ready: a named image must be in the local store, a Dockerfile's is built unless
/// it is there already (`building` is told before a build). `Ok(true)` when it was built now.
fn made(
    runtime: &Runtime,
    image: &str,
    dockerfile: Option<&(PathBuf, PathBuf)>,
    cache: &Path,
    building: &mut dyn FnMut(&str),
) -> Result<bool, ImageError> {
    if runtime.image_exists(image) {
        return Ok(false);
    }
    match dockerfile {
        Some((path, context)) => {
            building(image);
            runtime
                .build(path, context, image, &build_log(cache, image))
                .map(|()| true)
                .map_err(|ContainerError(message)| ImageError::Build { message })
        }
        None => Err(ImageError::NotInStore {
            image: image.to_owned(),
        }),
    }
}

fn build_log(cache: &Path, tag: &str) -> PathBuf {
    cache
        .join("environments")
        .join(format!("{}.log", tag.replace([':', '/'], "_")))
}

/// A build that failed for want of the network says so, and how to build once where there is
/// one.
fn with_network_hint(message: &str) -> String {
    const OFFLINE: [&str; 9] = [
        "Temporary failure in name resolution",
        "Could not resolve",
        "no such host",
        "network is unreachable",
        "dial tcp",
        "i/o timeout",
        "TLS handshake timeout",
        "Failed to establish a new connection",
        "pinging container registry",
    ];
    if OFFLINE.iter().any(|sign| message.contains(sign)) {
        format!(
            "{message}\nthis environment needs the network to build, once: run `deltabench prepare SUITE` where there is network (or build its FROM image here); runs after that use the built image offline"
        )
    } else {
        message.to_owned()
    }
}

/// Checks the runtime, builds what is missing, starts each image once, and checks in each image
/// what the plan's real agent CLIs need there (`node`, the virtualenv's Python). Blocking.
pub(super) fn prepare(
    suite: &Suite,
    tasks: &[usize],
    agents: &IndexMap<String, AgentSpec>,
    runtime: Option<&Runtime>,
    label: &str,
    cache: &Path,
) -> Result<Environments, RunError> {
    let Some(runtime) = runtime else {
        return Ok(Environments::default());
    };
    runtime
        .check()
        .map_err(|ContainerError(message)| RunError::config(message))?;
    let (mut images, mut ids, mut failed) = (HashMap::new(), HashMap::new(), HashMap::new());
    let mut built_ms = HashMap::new();
    let mut once = OncePerRun {
        runtime,
        cache,
        label,
        built: HashMap::new(),
        started: HashMap::new(),
    };
    for &i in tasks {
        let Some(environment) = &suite.tasks[i].environment else {
            continue;
        };
        // Only this task's trials are lost: the others run.
        let (image, ms) = match once.build(&environment.image, suite) {
            Ok(built) => built,
            Err(why) => {
                failed.insert(i, why.to_string());
                continue;
            }
        };
        built_ms.extend(ms.map(|ms| (i, ms)));
        if let Err(why) = once.start(&image) {
            failed.insert(i, why.to_string());
            continue;
        }
        if let Some(id) = runtime.image_id(&image) {
            ids.insert(i, id);
        }
        images.insert(i, image);
    }
    if failed.len() == tasks.len() {
        // Nothing can run: stop as a configuration error, naming every environment.
        let lines: Vec<String> = tasks
            .iter()
            .map(|i| format!("task '{}': {}", suite.tasks[*i].id, failed[i]))
            .collect();
        return Err(RunError::config(none_usable(lines)));
    }
    let failed = failed
        .into_iter()
        .map(|(i, message)| {
            (
                i,
                format!("its environment cannot be used, so the trial did not run: {message}"),
            )
        })
        .collect();
    check_clis(runtime, agents, &images, label)?;
    check_forwarder(runtime, suite, tasks, agents, &images, label)?;
    check_container_delta(runtime, suite, &images, label)?;
    Ok(Environments {
        runtime: Some(runtime.clone()),
        images,
        ids,
        label: label.to_owned(),
        failed,
        built_ms,
    })
}

/// The error when no task's environment can be used, from one `task 'ID': why` line each.
fn none_usable(mut lines: Vec<String>) -> String {
    match lines.len() {
        1 => lines[0].replacen(
            ": ",
            ": its environment cannot be used, so no trial ran: ",
            1,
        ),
        _ => {
            lines.insert(
                0,
                "no task's environment can be used, so no trial ran:".into(),
            );
            lines.join("\n  ")
        }
    }
}

/// Each Dockerfile built, and each image started, once per run: tasks that share one share
/// its result.
struct OncePerRun<'a> {
    runtime: &'a Runtime,
    cache: &'a Path,
    label: &'a str,
    built: HashMap<String, Result<Option<u64>, ImageError>>,
    started: HashMap<String, Result<(), ImageError>>,
}

impl OncePerRun<'_> {
    /// The image `source` names, built if it is missing, with the build's milliseconds when
    /// this run built it. A named image is checked by starting it.
    fn build(
        &mut self,
        source: &ImageSource,
        suite: &Suite,
    ) -> Result<(String, Option<u64>), ImageError> {
        let (image, dockerfile) = image_of(source, suite, self.cache).map_err(|(_, why)| why)?;
        let Some(dockerfile) = dockerfile else {
            return Ok((image, None));
        };
        let (runtime, cache) = (self.runtime, self.cache);
        let ms = self
            .built
            .entry(image.clone())
            .or_insert_with(|| {
                let started = std::time::Instant::now();
                made(runtime, &image, Some(&dockerfile), cache, &mut |_| {})
                    .map(|built| built.then(|| started.elapsed().as_millis() as u64))
            })
            .clone()?;
        Ok((image, ms))
    }

    /// Starts `image` once (the runtime's preflight).
    fn start(&mut self, image: &str) -> Result<(), ImageError> {
        let (runtime, label) = (self.runtime, self.label);
        self.started
            .entry(image.to_owned())
            .or_insert_with(|| {
                runtime
                    .preflight(image, label)
                    .map_err(|ContainerError(message)| ImageError::Start { message })
            })
            .clone()
    }
}

/// Each image of a task with `delta: container` must let the runtime read and save a
/// container's changes, and have what lays them into the verify image.
fn check_container_delta(
    runtime: &Runtime,
    suite: &Suite,
    images: &HashMap<usize, String>,
    label: &str,
) -> Result<(), RunError> {
    let mut checked: Vec<&str> = Vec::new();
    for (&i, image) in images {
        let task = &suite.tasks[i];
        let wants = task
            .environment
            .as_ref()
            .is_some_and(|e| e.delta == DeltaScope::Container);
        if !wants || checked.contains(&image.as_str()) {
            continue;
        }
        runtime.delta_preflight(image, label).map_err(|ContainerError(why)| {
            RunError::config(format!(
                "task '{}' sets `delta: container`, which cannot work here: {why}; no trial ran\nhint: `delta: workspace` verifies only the workspace's diff",
                task.id
            ))
        })?;
        checked.push(image);
    }
    Ok(())
}

/// Each image in which an agent will have `network: model` must run deltabench's forwarder:
/// deltabench itself, mounted, so a glibc as new as the build's.
fn check_forwarder(
    runtime: &Runtime,
    suite: &Suite,
    tasks: &[usize],
    agents: &IndexMap<String, AgentSpec>,
    images: &HashMap<usize, String>,
    label: &str,
) -> Result<(), RunError> {
    let Ok(forwarder) = std::env::current_exe() else {
        return Ok(());
    };
    let mut checked = std::collections::HashSet::new();
    for &i in tasks {
        let (Some(environment), Some(image)) = (&suite.tasks[i].environment, images.get(&i)) else {
            continue;
        };
        let Some(name) = agents.iter().find_map(|(name, spec)| {
            let network = Network::in_container(
                environment.network,
                spec.network(),
                super::gateway::uses_gateway(spec),
            );
            (network == Network::Model).then_some(name)
        }) else {
            continue;
        };
        if !checked.insert(image.clone()) {
            continue;
        }
        let need = ImageNeed {
            tool: "a C library deltabench runs with".to_owned(),
            why: format!(
                "under `network: model` deltabench ({}) forwards the model gateway's port inside the container, and it needs glibc 2.34 or newer and the libraries it links (`ldd` lists them)",
                forwarder.display()
            ),
            test: format!(
                "{} --version",
                crate::support::shell_quote(&forwarder.to_string_lossy())
            ),
            hint: format!(
                "use an image with glibc 2.34 or newer (Debian 12, Ubuntu 22.04 or later), or set `network: host` on agent '{name}' (the container then shares this machine's network)"
            ),
        };
        let lack = runtime
            .lacks(
                image,
                label,
                std::slice::from_ref(&forwarder),
                std::slice::from_ref(&need),
            )
            .map_err(|ContainerError(message)| RunError::config(message))?;
        if lack.is_some() {
            return Err(RunError::config(format!(
                "image {image} lacks {}, which agent '{name}' needs: {}; no trial ran\nhint: {}",
                need.tool, need.why, need.hint
            )));
        }
    }
    Ok(())
}

/// For each (image, real agent CLI) pair of the plan, checks in the image that what the CLI
/// needs besides its mounted installation is there; the first lack stops the run.
fn check_clis(
    runtime: &Runtime,
    agents: &IndexMap<String, AgentSpec>,
    images: &HashMap<usize, String>,
    label: &str,
) -> Result<(), RunError> {
    let mut images: Vec<&String> = images.values().collect();
    images.sort();
    images.dedup();
    for (name, spec) in agents {
        let Some((kind, cli)) = spec.as_harness() else {
            continue;
        };
        // The plan checked it is installed.
        let Ok(program) = find_program(kind, cli.binary.as_deref()) else {
            continue;
        };
        let needs = image_needs(kind, &program);
        if needs.is_empty() {
            continue;
        }
        let mounts = container_mounts(&program);
        for image in &images {
            let lack = runtime
                .lacks(image, label, &mounts, &needs)
                .map_err(|ContainerError(message)| RunError::config(message))?;
            if let Some(i) = lack {
                let need = &needs[i];
                return Err(RunError::config(format!(
                    "image {image} lacks {}, which agent '{name}' ({kind}) needs: {}; no trial ran\nhint: {}",
                    need.tool, need.why, need.hint
                )));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn none_usable_names_one_task_inline_and_several_in_a_list() {
        assert_eq!(
            none_usable(vec!["task 'a': no such image".into()]),
            "task 'a': its environment cannot be used, so no trial ran: no such image"
        );
        assert_eq!(
            none_usable(vec!["task 'a': x".into(), "task 'b': y".into()]),
            "no task's environment can be used, so no trial ran:\n  task 'a': x\n  task 'b': y"
        );
    }
}
