//! Harbor and Terminal-Bench task folders into one suite.
//!
//! Both formats describe a container: a Dockerfile whose working directory (`/app`) the agent
//! works in, a test script run afterwards (`tests/test.sh` or `run-tests.sh`, with the tests at
//! `/tests`), and a solution script. On import:
//! - the working directory's files (what the Dockerfile COPYs there) become one root commit per
//!   task in a bare repo `repo.git` in the suite folder, and the task's `base` is that commit, so
//!   each task starts from its own files and sees no other task's;
//! - a Dockerfile that does more (`RUN`, `ENV`, ...) is copied with its build context to
//!   `environments/<id>/` and becomes the task's `environment:`, built at run time; the
//!   workspace is mounted over its working directory;
//! - the test files become hidden tests under `.deltabench/tests/`, run by a small wrapper
//!   (`.deltabench/verify.sh`) that prints the reward file the tests wrote for
//!   `graders/reward.py`;
//! - container paths in the copied files are rewritten to the workspace ([`ContainerPaths`]).
//!
//! A solution script cannot be a `solution:` (that is a patch or a directory to lay over the
//! workspace), so it is copied to `solutions/<id>/` for reference. With `--run-solutions` it is
//! run once here, in a scratch copy of the task's files, and the change it makes becomes the
//! task's reference patch.

use std::path::{Path, PathBuf};
use std::time::Duration;

use git2::{DiffOptions, FileMode, Oid, Repository, Signature, Time};
use serde::Deserialize;
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use super::docker::{self, ContainerPaths, LOGS_DIR, SOLUTION_DIR, StageError, TESTS_DIR};
use super::write::{self, SuiteFile, TaskEntry, write_file};
use super::{Format, Ids, ImportError, ImportOptions, Imported, Skip, seconds};
use crate::process::{self, CommandSpec};

const GRADER: &str = include_str!("../../graders/reward.py");
const GRADER_PATH: &str = "graders/reward.py";
const REPO: &str = "repo.git";
const VERIFY: &str = ".deltabench/verify.sh";
/// The verify timeout when the task file gives none.
const VERIFY_TIMEOUT: Duration = Duration::from_secs(600);
/// How long a solution script may run under `--run-solutions` when the task gives no agent
/// timeout.
const SOLVE_TIMEOUT: Duration = Duration::from_secs(600);
/// Names at the top of a build context that are the harness's, never the image's.
const HARNESS: [&str; 12] = [
    "task.toml",
    "task.yaml",
    "instruction.md",
    "tests",
    "solution",
    "solution.sh",
    "solution.yaml",
    "run-tests.sh",
    "Dockerfile",
    "docker-compose.yaml",
    "docker-compose.yml",
    "environment",
];
/// How deep under SOURCE task folders are looked for.
const MAX_DEPTH: usize = 4;

/// One task folder, read.
#[derive(Debug)]
struct ContainerTask {
    name: String,
    instruction: String,
    dockerfile: Option<PathBuf>,
    /// The Docker build context (COPY sources are relative to it).
    context: PathBuf,
    /// The context is the task folder itself, harness files and all (Terminal-Bench).
    context_is_task: bool,
    /// Files and folders copied into the hidden tests folder: (source, name there; "" for a
    /// folder's contents).
    tests: Vec<(PathBuf, String)>,
    /// The test script's name in the tests folder.
    test_entry: &'static str,
    /// The solution script's file or folder, and the script's name.
    solution: Option<(PathBuf, &'static str)>,
    agent_timeout: Option<Duration>,
    verify_timeout: Option<Duration>,
    tags: Vec<String>,
    /// Settings of the task file that change how it runs and that deltabench does not apply
    /// (`environment.allow_internet`, ...): said at import.
    unused: Vec<String>,
    /// `environment.cpus` and `memory_mb` as the suite's `environment:` pairs.
    limits: Vec<(&'static str, String)>,
    /// Its tests fetch what they need at test time (Harbor's `environment.allow_internet`).
    allow_internet: bool,
}

/// Terminal-Bench's `task.yaml`, the keys the importer uses.
#[derive(Debug, Deserialize)]
struct TaskYaml {
    #[serde(default)]
    instruction: Option<String>,
    /// Older tasks: a list of `{key, description}`, the instruction under key `base`.
    #[serde(default)]
    descriptions: Option<Vec<Description>>,
    #[serde(default)]
    max_agent_timeout_sec: Option<f64>,
    #[serde(default)]
    max_test_timeout_sec: Option<f64>,
    #[serde(default)]
    tags: Option<Vec<String>>,
}

#[derive(Debug, Deserialize)]
struct Description {
    key: String,
    description: String,
}

/// A compose file: only how many services it starts matters.
#[derive(Debug, Deserialize)]
struct Compose {
    #[serde(default)]
    services: Map<String, Value>,
}

pub(super) async fn import(
    options: &ImportOptions,
    staging: &Path,
    name: &str,
) -> Result<Imported, ImportError> {
    let marker = match options.format {
        Format::Harbor => "task.toml",
        _ => "task.yaml",
    };
    let dirs = task_dirs(&options.source, marker);
    if dirs.is_empty() {
        return Err(ImportError::Usage(format!(
            "{}: no task folder (one holding {marker}) found, {MAX_DEPTH} levels deep",
            options.source.display()
        )));
    }
    let scratch = tempfile::tempdir().map_err(|source| ImportError::Write {
        path: std::env::temp_dir(),
        source,
    })?;
    let mut run = Run {
        options,
        staging,
        scratch: scratch.path(),
        imported: Imported::default(),
        repo: BaseRepo::create(&staging.join(REPO))?,
        ids: Ids::default(),
        suite: suite_file(options, name),
        without_reference: 0,
        built: 0,
    };
    for dir in dirs {
        run.add(&dir).await?;
    }
    run.finish()
}

/// The suite file of the import, without its tasks yet.
fn suite_file(options: &ImportOptions, name: &str) -> SuiteFile {
    let source = options.source.display();
    SuiteFile {
        name: name.to_owned(),
        description: format!("{} tasks imported from {source}", options.format),
        repo: REPO.to_owned(),
        origin: format!("deltabench import {} {source}", options.format),
        tasks: Vec::new(),
    }
}

/// An import under way: what was imported so far, and where it goes.
struct Run<'a> {
    options: &'a ImportOptions,
    staging: &'a Path,
    /// Where each task's starting files are staged.
    scratch: &'a Path,
    imported: Imported,
    repo: BaseRepo,
    ids: Ids,
    suite: SuiteFile,
    /// Tasks with a solution script and no reference patch.
    without_reference: usize,
    /// Tasks that run in a container built from their Dockerfile.
    built: usize,
}

impl Run<'_> {
    /// One task folder, read, staged and written into the suite; or skipped, with why.
    async fn add(&mut self, dir: &Path) -> Result<(), ImportError> {
        let read = match self.options.format {
            Format::Harbor => read_harbor(dir)?,
            _ => read_terminal_bench(dir)?,
        };
        let task = match read {
            Ok(task) => task,
            Err((name, reason)) => {
                self.imported.skip(name, reason);
                return Ok(());
            }
        };
        let env = match environment(&task)? {
            Ok(env) => env,
            Err(reason) => {
                self.imported.skip(&task.name, reason);
                return Ok(());
            }
        };
        let app = self.scratch.join(&task.name);
        match docker::stage(&env, &task.context, &app, &HARNESS) {
            Ok(()) => {}
            Err(StageError::Unsupported(reason)) => {
                self.imported.skip(&task.name, Skip::from(reason));
                return Ok(());
            }
            Err(StageError::Io { path, source }) => return Err(ImportError::Read { path, source }),
        }
        let id = self.ids.claim(&task.name);
        // A Dockerfile whose image is built, or that copies files onto a base image: the task
        // runs in that image, as its authors run it.
        let contained = task.dockerfile.is_some() && (env.build.is_some() || env.from.is_some());
        self.note(&id, &task, &env, &app, contained);
        let base = self.repo.add(&id, &app, &env.workdir)?;
        let paths = ContainerPaths::new(&env.workdir);
        // In its container the task's scripts run as authored: the workspace is at WORKDIR, the
        // tests at /tests, the reward folder at /logs/verifier, the solution at /solution.
        // Elsewhere their container paths are rewritten to the workspace.
        let rewrite = (!contained).then_some(&paths);
        let mut entry = write_task(&task, &id, rewrite, self.staging)?;
        entry.base = Some(base);
        if let Some(dockerfile) = task.dockerfile.as_ref().filter(|_| contained) {
            entry.environment =
                contained_environment(&task, dockerfile, &id, &env.workdir, self.staging)?;
            self.built += 1;
        }
        self.reference(&mut entry, &task, &app, &id).await?;
        self.suite.tasks.push(entry);
        Ok(())
    }

    /// Notes on what of the task does not apply here, and on what its starting files leak or
    /// miss.
    fn note(
        &mut self,
        id: &str,
        task: &ContainerTask,
        env: &docker::Environment,
        app: &Path,
        contained: bool,
    ) {
        let notes = &mut self.imported.notes;
        let mut unused = task.unused.clone();
        if !contained && task.allow_internet {
            unused.push("environment.allow_internet = true".to_owned());
        }
        if !contained {
            // No container, so no limits to put on it.
            unused.extend(task.limits.iter().map(|(key, value)| match *key {
                "cpus" => format!("environment.cpus = {value}"),
                _ => format!("environment.memory_mb = {}", value.trim_end_matches("MiB")),
            }));
        }
        if !unused.is_empty() {
            notes.push(format!("{id}: not applied here: {}", unused.join(", ")));
        }
        if let Some(leaked) = answer_in_starting_files(task, app) {
            notes.push(format!(
                "{id}: the starting files hold {leaked}, which the solution script reads and the tests and instruction never name: an agent can read the answer there"
            ));
        }
        for run in &env.hidden_runs {
            notes.push(format!(
                "{id}: `{run}` changes files in WORKDIR {}, which the workspace (what the COPY steps put there) is mounted over: its effect there is not in the starting files",
                env.workdir
            ));
        }
    }

    /// The task's reference: its solution script run by the oracle in its image, or the patch
    /// of running it here once (`--run-solutions`), or a note on why there is none.
    async fn reference(
        &mut self,
        entry: &mut TaskEntry,
        task: &ContainerTask,
        app: &Path,
        id: &str,
    ) -> Result<(), ImportError> {
        match &task.solution {
            // In its image, as its authors run it: the oracle runs the script there.
            Some((_, script)) if !entry.environment.is_empty() => {
                entry.solution_script = Some(format!("solutions/{id}/{script}"));
            }
            Some((_, script)) if self.options.run_solutions => {
                (self.options.progress)(&format!("running {script} of {id}"));
                let timeout = task.agent_timeout.unwrap_or(SOLVE_TIMEOUT);
                let solution = self.staging.join("solutions").join(id);
                match bake(app, &solution, script, timeout).await {
                    Ok(patch) => {
                        let path = format!("solutions/{id}.patch");
                        write_file(&self.staging.join(&path), patch, false)?;
                        entry.solution = Some(path);
                    }
                    Err(why) => {
                        (self.imported.notes).push(format!("{id}: no reference solution: {why}"))
                    }
                }
            }
            Some(_) => self.without_reference += 1,
            None => (self.imported.notes).push(format!(
                "{id}: no solution script, so no reference solution"
            )),
        }
        Ok(())
    }

    /// The suite written with its notes, unless no task was imported.
    fn finish(mut self) -> Result<Imported, ImportError> {
        if self.suite.tasks.is_empty() {
            return Ok(self.imported);
        }
        let (without_reference, built) = (self.without_reference, self.built);
        if without_reference > 0 {
            self.imported.notes.push(format!(
                "{without_reference} task(s) have a solution script (copied to solutions/<id>/) but no reference patch yet: \
                 rerun with --run-solutions to run each script here once and keep the change it makes"
            ));
        }
        if built > 0 {
            self.imported.notes.push(format!(
                "{built} task(s) run in a container built from their Dockerfile (environments/<id>/): \
                 `run` and `validate` need podman or docker; their solution scripts are their reference, run by the oracle in the image"
            ));
        }
        self.repo.finish()?;
        write_file(&self.staging.join(GRADER_PATH), GRADER, true)?;
        self.suite.write(self.staging)?;
        (self.imported.suites).push((PathBuf::new(), self.suite.tasks.len()));
        Ok(self.imported)
    }
}

/// A contained task's `environment:`: its image built from the copied Dockerfile, its limits,
/// and the verify command run on the agent's container as in the task's own harness.
fn contained_environment(
    task: &ContainerTask,
    dockerfile: &Path,
    id: &str,
    workdir: &str,
    staging: &Path,
) -> Result<Vec<(&'static str, String)>, ImportError> {
    let mut environment = copy_environment(task, dockerfile, id, workdir, staging)?;
    environment.extend(task.limits.clone());
    // What the agent changes anywhere in its container counts, as in the task's own harness,
    // where the tests run in the agent's container.
    environment.push(("delta", "container".to_owned()));
    let mounts = format!(
        "{{{}: {}}}",
        write::quote("/tests"),
        write::quote(TESTS_DIR)
    );
    environment.push(("verify_mounts", mounts));
    environment.push(("solution_at", "/solution".to_owned()));
    if task.allow_internet {
        environment.push(("verify_network", "host".to_owned()));
    }
    Ok(environment)
}

/// Task folders under `source` (or `source` itself), sorted; hidden folders are left out.
fn task_dirs(source: &Path, marker: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![(source.to_owned(), 0)];
    while let Some((dir, depth)) = stack.pop() {
        if dir.join(marker).is_file() {
            found.push(dir);
            continue;
        }
        if depth == MAX_DEPTH {
            continue;
        }
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let hidden = entry.file_name().to_string_lossy().starts_with('.');
            if !hidden && entry.file_type().is_ok_and(|t| t.is_dir()) {
                stack.push((entry.path(), depth + 1));
            }
        }
    }
    found.sort();
    found
}

/// A task folder's name, or the reason it cannot be imported.
type Read = Result<ContainerTask, (String, String)>;

fn folder_name(dir: &Path) -> String {
    dir.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| dir.display().to_string())
}

fn read_text(path: &Path) -> Result<String, ImportError> {
    std::fs::read_to_string(path).map_err(|source| ImportError::Read {
        path: path.to_owned(),
        source,
    })
}

/// A `task.toml` as JSON (dates kept as their text); an error is its `:line:column` and message.
fn parse_toml(text: &str) -> Result<Map<String, Value>, (String, String)> {
    let table = text.parse::<toml::Table>().map_err(|err| {
        let offset = err.span().map_or(0, |span| span.start).min(text.len());
        let before = &text[..offset];
        let line = 1 + before.matches('\n').count();
        let column = 1 + before.rsplit('\n').next().unwrap_or("").chars().count();
        (format!(":{line}:{column}"), err.message().to_owned())
    })?;
    Ok(table
        .into_iter()
        .map(|(key, value)| (key, toml_to_json(value)))
        .collect())
}

fn toml_to_json(value: toml::Value) -> Value {
    match value {
        toml::Value::String(text) => Value::String(text),
        toml::Value::Integer(number) => Value::from(number),
        // NaN and infinities have no JSON number: kept as their TOML text.
        toml::Value::Float(number) => serde_json::Number::from_f64(number)
            .map_or_else(|| Value::String(number.to_string()), Value::Number),
        toml::Value::Boolean(flag) => Value::Bool(flag),
        toml::Value::Datetime(when) => Value::String(when.to_string()),
        toml::Value::Array(items) => Value::Array(items.into_iter().map(toml_to_json).collect()),
        toml::Value::Table(table) => Value::Object(
            table
                .into_iter()
                .map(|(key, value)| (key, toml_to_json(value)))
                .collect(),
        ),
    }
}

fn read_harbor(dir: &Path) -> Result<Read, ImportError> {
    let name = folder_name(dir);
    let toml_path = dir.join("task.toml");
    let config =
        parse_toml(&read_text(&toml_path)?).map_err(|(at, message)| ImportError::Parse {
            path: toml_path.clone(),
            at,
            message,
        })?;
    let skip = |reason: &str| Ok(Err((name.clone(), reason.to_owned())));
    let instruction_path = dir.join("instruction.md");
    if !instruction_path.is_file() {
        // Harbor's multi-step tasks (`schema_version = "1.1"`) keep one instruction per step.
        if let Ok(entries) = std::fs::read_dir(dir.join("steps")) {
            let mut steps: Vec<String> = entries
                .flatten()
                .filter(|entry| entry.path().join("instruction.md").is_file())
                .map(|entry| entry.file_name().to_string_lossy().into_owned())
                .collect();
            if !steps.is_empty() {
                steps.sort();
                return skip(&format!(
                    "a multi-step task (steps/ {}): deltabench gives a task one instruction",
                    steps.join(", ")
                ));
            }
        }
        return skip("no instruction.md");
    }
    if !dir.join("tests/test.sh").is_file() {
        return skip("no tests/test.sh");
    }
    let table = |key: &str| config.get(key).and_then(Value::as_object);
    let number = |section: &str, key: &str| table(section).and_then(|t| t.get(key)?.as_f64());
    let environment = dir.join("environment");
    let dockerfile = environment.join("Dockerfile");
    let image = table("environment")
        .and_then(|t| t.get("docker_image")?.as_str())
        .map(str::to_owned);
    if !dockerfile.is_file()
        && let Some(image) = image
    {
        return skip(&format!(
            "runs in the prebuilt image {image}: what it holds is unknown here"
        ));
    }
    let mut tags = Vec::new();
    for list in [
        table("metadata").and_then(|t| t.get("tags")),
        table("task").and_then(|t| t.get("keywords")),
    ] {
        for tag in list.and_then(Value::as_array).into_iter().flatten() {
            if let Some(tag) = tag.as_str().filter(|t| !tags.iter().any(|x| x == t)) {
                tags.push(tag.to_owned());
            }
        }
    }
    let solution = dir.join("solution");
    Ok(Ok(ContainerTask {
        instruction: read_text(&instruction_path)?,
        dockerfile: dockerfile.is_file().then_some(dockerfile),
        context: environment,
        context_is_task: false,
        tests: vec![(dir.join("tests"), String::new())],
        test_entry: "test.sh",
        solution: solution
            .join("solve.sh")
            .is_file()
            .then_some((solution, "solve.sh")),
        agent_timeout: seconds(number("agent", "timeout_sec")),
        verify_timeout: seconds(number("verifier", "timeout_sec")),
        tags,
        unused: unused_settings(&config),
        limits: [
            ("cpus", number("environment", "cpus").map(|c| c.to_string())),
            (
                "memory",
                number("environment", "memory_mb").map(|m| format!("{m}MiB")),
            ),
        ]
        .into_iter()
        .filter_map(|(key, value)| Some((key, value?)))
        .collect(),
        allow_internet: config
            .get("environment")
            .and_then(|e| e.get("allow_internet"))
            .and_then(Value::as_bool)
            .unwrap_or(false),
        name,
    }))
}

/// task.toml's settings that deltabench does not apply, as `section.key = value`: everything
/// but the descriptive tables (`[metadata]`, `[task]`, `version`) and the keys it reads.
fn unused_settings(config: &serde_json::Map<String, Value>) -> Vec<String> {
    const USED: [&str; 6] = [
        "environment.allow_internet",
        "environment.docker_image",
        "environment.cpus",
        "environment.memory_mb",
        "agent.timeout_sec",
        "verifier.timeout_sec",
    ];
    let mut unused = Vec::new();
    for (section, value) in config {
        if matches!(section.as_str(), "metadata" | "task" | "version") {
            continue;
        }
        match value.as_object() {
            Some(table) => {
                for (key, value) in table {
                    let name = format!("{section}.{key}");
                    if !USED.contains(&name.as_str()) {
                        unused.push(format!("{name} = {value}"));
                    }
                }
            }
            None => unused.push(format!("{section} = {value}")),
        }
    }
    unused
}

fn read_terminal_bench(dir: &Path) -> Result<Read, ImportError> {
    let name = folder_name(dir);
    let yaml_path = dir.join("task.yaml");
    let text = read_text(&yaml_path)?;
    let config: TaskYaml =
        serde_saphyr::from_str(&text).map_err(|err| ImportError::yaml(&yaml_path, &err))?;
    let skip = |reason: &str| Ok(Err((name.clone(), reason.to_owned())));
    let instruction = config.instruction.clone().or_else(|| {
        config
            .descriptions
            .iter()
            .flatten()
            .find(|d| d.key == "base")
            .map(|d| d.description.clone())
    });
    let Some(instruction) = instruction.filter(|i| !i.trim().is_empty()) else {
        return skip("task.yaml has no instruction");
    };
    let run_tests = dir.join("run-tests.sh");
    if !run_tests.is_file() {
        return skip("no run-tests.sh");
    }
    let mut tests = vec![(run_tests, "run-tests.sh".to_owned())];
    if dir.join("tests").is_dir() {
        tests.push((dir.join("tests"), String::new()));
    }
    let dockerfile = dir.join("Dockerfile");
    let script = dir.join("solution.sh");
    Ok(Ok(ContainerTask {
        instruction,
        dockerfile: dockerfile.is_file().then_some(dockerfile),
        context: dir.to_owned(),
        context_is_task: true,
        tests,
        test_entry: "run-tests.sh",
        solution: script.is_file().then_some((script, "solution.sh")),
        agent_timeout: seconds(config.max_agent_timeout_sec),
        verify_timeout: seconds(config.max_test_timeout_sec),
        tags: config.tags.unwrap_or_default(),
        limits: Vec::new(),
        allow_internet: false,
        unused: serde_saphyr::from_str::<serde_json::Map<String, Value>>(&text)
            .map(|raw| {
                raw.into_iter()
                    .filter(|(key, _)| !TASK_YAML_READ.contains(&key.as_str()))
                    .map(|(key, value)| format!("{key} = {value}"))
                    .collect()
            })
            .unwrap_or_default(),
        name,
    }))
}

/// task.yaml's keys the importer reads, and those that only describe the task.
const TASK_YAML_READ: [&str; 12] = [
    "instruction",
    "descriptions",
    "max_agent_timeout_sec",
    "max_test_timeout_sec",
    "tags",
    "author_name",
    "author_email",
    "difficulty",
    "category",
    "estimated_duration_sec",
    "expert_time_estimate_min",
    "junior_time_estimate_min",
];

/// The task's environment, or why it cannot be imported. A compose file or Dockerfile that
/// cannot be read is an error, like any task file.
fn environment(task: &ContainerTask) -> Result<Result<docker::Environment, Skip>, ImportError> {
    for name in ["docker-compose.yaml", "docker-compose.yml"] {
        let path = task.context.join(name);
        if !path.is_file() {
            continue;
        }
        let compose: Compose =
            serde_saphyr::from_str(&read_text(&path)?).map_err(|e| ImportError::yaml(&path, &e))?;
        if compose.services.len() > 1 {
            return Ok(Err(Skip::Containers {
                file: name,
                services: compose.services.keys().cloned().collect(),
            }));
        }
    }
    let parsed = match &task.dockerfile {
        Some(path) => docker::parse_dockerfile(&read_text(path)?),
        None => docker::parse_dockerfile(""),
    };
    Ok(parsed.map_err(Skip::from))
}

/// Copies the task's Dockerfile and build context to `environments/<id>/` (harness files left
/// out) and returns its `environment:` mapping.
fn copy_environment(
    task: &ContainerTask,
    dockerfile: &Path,
    id: &str,
    workdir: &str,
    staging: &Path,
) -> Result<Vec<(&'static str, String)>, ImportError> {
    let dir = format!("environments/{id}");
    let skip: &[&str] = if task.context_is_task { &HARNESS } else { &[] };
    docker::copy_tree(&task.context, &staging.join(&dir), skip).map_err(|err| match err {
        StageError::Io { path, source } => ImportError::Read { path, source },
        StageError::Unsupported(message) => ImportError::Usage(message.to_string()),
    })?;
    let text = std::fs::read(dockerfile).map_err(|source| ImportError::Read {
        path: dockerfile.to_owned(),
        source,
    })?;
    write_file(&staging.join(&dir).join("Dockerfile"), text, false)?;
    Ok(vec![
        ("dockerfile", format!("{dir}/Dockerfile")),
        ("context", dir),
        ("workdir", workdir.to_owned()),
    ])
}

/// The top-level entries of the starting files (`app`) that the solution script names and
/// neither the tests nor the instruction do (an encrypted reference beside the code, as in
/// aider-polyglot's `.oracle/`), quoted and joined; `None` when there are none.
fn answer_in_starting_files(task: &ContainerTask, app: &Path) -> Option<String> {
    let (source, script) = task.solution.as_ref()?;
    let script = if source.is_dir() {
        source.join(script)
    } else {
        source.clone()
    };
    let solution = std::fs::read_to_string(script).ok()?;
    let mut others = task.instruction.clone();
    for (path, _) in &task.tests {
        let mut stack = vec![path.clone()];
        while let Some(path) = stack.pop() {
            match std::fs::read_dir(&path) {
                Ok(entries) => stack.extend(entries.flatten().map(|e| e.path())),
                Err(_) => others.push_str(&std::fs::read_to_string(&path).unwrap_or_default()),
            }
        }
    }
    let mut names: Vec<String> = std::fs::read_dir(app)
        .ok()?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        // Short names (`a`, `go`) are found in any text by chance.
        .filter(|name| {
            name.len() >= 4 && solution.contains(name.as_str()) && !others.contains(name.as_str())
        })
        .map(|name| format!("`{name}`"))
        .collect();
    names.sort();
    (!names.is_empty()).then(|| names.join(", "))
}

/// Writes the task's instruction, hidden tests and solution script; returns its entry without
/// `base`. With `rewrite`, for a task that runs outside its container, container paths in them
/// become workspace paths and a wrapper runs the test script from the workspace root.
fn write_task(
    task: &ContainerTask,
    id: &str,
    rewrite: Option<&ContainerPaths>,
    staging: &Path,
) -> Result<TaskEntry, ImportError> {
    let instruction = format!("instructions/{id}.md");
    let text = match rewrite {
        Some(paths) => paths.relative(&task.instruction),
        None => task.instruction.clone(),
    };
    write_file(&staging.join(&instruction), text, false)?;
    let tests = format!("tests/{id}");
    let tests_dir = staging.join(&tests);
    for (source, name) in &task.tests {
        copy_rewritten(source, &tests_dir.join(TESTS_DIR).join(name), rewrite)?;
    }
    // Harbor's test scripts write a reward file; Terminal-Bench's older ones exit with the
    // tests' status.
    let writes_reward = task.test_entry == "test.sh";
    let (verify, reward) = match rewrite {
        Some(_) => {
            write_file(&tests_dir.join(VERIFY), wrapper(task.test_entry), true)?;
            (format!("sh {VERIFY}"), format!("{LOGS_DIR}/verifier"))
        }
        None => (
            format!("TEST_DIR=/tests bash /tests/{}", task.test_entry),
            "/logs/verifier".to_owned(),
        ),
    };
    if let Some((source, script)) = &task.solution {
        let target = staging.join("solutions").join(id);
        let target = if source.is_dir() {
            target
        } else {
            target.join(script)
        };
        copy_rewritten(source, &target, rewrite)?;
    }
    Ok(TaskEntry {
        id: id.to_owned(),
        instruction_file: instruction,
        tests: Some(tests),
        verify,
        verify_timeout: Some(task.verify_timeout.unwrap_or(VERIFY_TIMEOUT)),
        verify_reward: writes_reward.then_some(reward),
        grader: Some(format!("./{GRADER_PATH}")),
        timeout: task.agent_timeout,
        tags: task.tags.clone(),
        ..TaskEntry::default()
    })
}

/// Copies a file, or a folder's contents, rewriting container paths in text files: shell
/// scripts through `$DELTABENCH_WORKSPACE`, everything else relative to the workspace root.
fn copy_rewritten(
    source: &Path,
    target: &Path,
    rewrite: Option<&ContainerPaths>,
) -> Result<(), ImportError> {
    let read_err = |source: std::io::Error, path: &Path| ImportError::Read {
        path: path.to_owned(),
        source,
    };
    if source.is_dir() {
        let mut entries: Vec<_> = std::fs::read_dir(source)
            .map_err(|e| read_err(e, source))?
            .flatten()
            .collect();
        entries.sort_by_key(|e| e.file_name());
        for entry in entries {
            copy_rewritten(&entry.path(), &target.join(entry.file_name()), rewrite)?;
        }
        return Ok(());
    }
    let bytes = std::fs::read(source).map_err(|e| read_err(e, source))?;
    let executable = std::fs::metadata(source)
        .is_ok_and(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o111 != 0);
    let Some(paths) = rewrite else {
        return write_file(target, bytes, executable);
    };
    let content = match String::from_utf8(bytes) {
        Ok(text) if !text.contains('\0') => {
            let shell = source.extension().is_some_and(|e| e == "sh")
                || text.lines().next().is_some_and(|l| {
                    l.starts_with("#!") && (l.contains("sh") || l.contains("bash"))
                });
            if shell {
                paths.in_shell(&text)
            } else {
                paths.relative(&text)
            }
            .into_bytes()
        }
        Ok(text) => text.into_bytes(),
        Err(err) => err.into_bytes(),
    };
    write_file(target, content, executable)
}

/// The verify command's wrapper, for a task that runs outside its container: runs the task's
/// test script from the workspace root, as its container would. deltabench reads the reward
/// file it writes (`verify.reward`) once it has ended.
fn wrapper(entry: &str) -> String {
    format!(
        r#"#!/bin/sh
# Written by `deltabench import`: runs the task's test script the way its container would, from
# the workspace root. deltabench reads the reward file it writes itself, after it ended.
DELTABENCH_WORKSPACE=$(pwd)
TEST_DIR="$DELTABENCH_WORKSPACE/{TESTS_DIR}"
export DELTABENCH_WORKSPACE TEST_DIR
mkdir -p "$DELTABENCH_WORKSPACE/{LOGS_DIR}/verifier" || exit 2
exec bash "$TEST_DIR/{entry}"
"#
    )
}

/// Runs the solution script (from `solution`, the folder it was copied to) in a scratch copy of
/// the task's files and returns the patch of what it changed there, or why there is none.
async fn bake(
    app: &Path,
    solution: &Path,
    script: &str,
    timeout: Duration,
) -> Result<Vec<u8>, BakeError> {
    let scratch = tempfile::tempdir().map_err(BakeError::Scratch)?;
    let ws = scratch.path().join("ws");
    docker::copy_tree(app, &ws, &[])?;
    docker::copy_tree(solution, &ws.join(SOLUTION_DIR), &[])?;
    let spec = CommandSpec::argv(["bash".to_owned(), format!("{SOLUTION_DIR}/{script}")], &ws)
        .env("DELTABENCH_SOLUTION", ws.join(SOLUTION_DIR))
        .env("DELTABENCH_WORKSPACE", &ws)
        .timeout(Some(timeout));
    let ended = process::run(&spec, &CancellationToken::new())
        .await
        .map_err(|source| BakeError::Run {
            script: script.to_owned(),
            source,
        })?;
    if !ended.success() {
        let text = ended.output.text();
        let tail: Vec<&str> = text.lines().rev().take(5).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        return Err(BakeError::Failed {
            script: script.to_owned(),
            ending: ended.ending(),
            tail: tail.join(" | "),
        });
    }
    let _ = std::fs::remove_dir_all(ws.join(".deltabench"));
    let patch = diff_dirs(scratch.path(), app, &ws).map_err(BakeError::Diff)?;
    if patch.is_empty() {
        return Err(BakeError::NoChange(script.to_owned()));
    }
    Ok(patch)
}

/// Why a solution script gave no reference patch.
#[derive(Debug, thiserror::Error)]
enum BakeError {
    #[error("no scratch folder: {0}")]
    Scratch(std::io::Error),
    #[error(transparent)]
    Copy(#[from] StageError),
    #[error("cannot run {script}: {source}")]
    Run {
        script: String,
        source: std::io::Error,
    },
    #[error("{script} {ending}: {tail}")]
    Failed {
        script: String,
        ending: String,
        tail: String,
    },
    #[error("{}", .0.message())]
    Diff(git2::Error),
    #[error("{0} changed nothing in the working directory")]
    NoChange(String),
}

/// The patch from `before` to `after`, computed in a throwaway repo under `scratch` (not in
/// `repo.git`: the solution's objects must not be reachable from a workspace by hash).
fn diff_dirs(scratch: &Path, before: &Path, after: &Path) -> Result<Vec<u8>, git2::Error> {
    let repo = Repository::init_bare(scratch.join("diff.git"))?;
    let old = repo.find_tree(tree_of(&repo, before)?)?;
    let new = repo.find_tree(tree_of(&repo, after)?)?;
    let mut options = DiffOptions::new();
    options.show_binary(true).include_typechange(true);
    let diff = repo.diff_tree_to_tree(Some(&old), Some(&new), Some(&mut options))?;
    crate::delta::patch_bytes(&diff)
}

/// Writes `dir` as a tree (every file, no ignore rules: COPY has none; `.git` left out).
fn tree_of(repo: &Repository, dir: &Path) -> Result<Oid, git2::Error> {
    let io = |e: std::io::Error| git2::Error::from_str(&format!("{}: {e}", dir.display()));
    let mut builder = repo.treebuilder(None)?;
    let mut entries: Vec<_> = std::fs::read_dir(dir).map_err(io)?.flatten().collect();
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let name = entry.file_name();
        if name == ".git" {
            continue;
        }
        let path = entry.path();
        let meta = std::fs::symlink_metadata(&path).map_err(io)?;
        let (oid, mode) = if meta.file_type().is_symlink() {
            let target = std::fs::read_link(&path).map_err(io)?;
            let blob = repo.blob(target.as_os_str().as_encoded_bytes())?;
            (blob, FileMode::Link)
        } else if meta.is_dir() {
            let tree = tree_of(repo, &path)?;
            // Git keeps no empty folders.
            if repo.find_tree(tree)?.is_empty() {
                continue;
            }
            (tree, FileMode::Tree)
        } else {
            let executable = std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o111;
            let blob = repo.blob(&std::fs::read(&path).map_err(io)?)?;
            let mode = if executable != 0 {
                FileMode::BlobExecutable
            } else {
                FileMode::Blob
            };
            (blob, mode)
        };
        builder.insert(&name, oid, mode.into())?;
    }
    builder.write()
}

/// `repo.git`: one root commit per task, tagged with the task id.
struct BaseRepo {
    path: PathBuf,
    repo: Repository,
    tags: usize,
}

impl BaseRepo {
    fn create(path: &Path) -> Result<Self, ImportError> {
        let repo = Repository::init_bare(path).map_err(|e| ImportError::Git {
            path: path.to_owned(),
            message: e.message().to_owned(),
        })?;
        Ok(Self {
            path: path.to_owned(),
            repo,
            tags: 0,
        })
    }

    fn git_err(&self, e: git2::Error) -> ImportError {
        ImportError::Git {
            path: self.path.clone(),
            message: e.message().to_owned(),
        }
    }

    /// Fixed author and date: the same files always give the same commit id.
    fn signature(&self) -> Result<Signature<'static>, ImportError> {
        Signature::new(
            "deltabench import",
            "deltabench@localhost",
            &Time::new(946_684_800, 0),
        )
        .map_err(|e| self.git_err(e))
    }

    /// Commits `dir` as task `id`'s base and returns the commit id.
    fn add(&mut self, id: &str, dir: &Path, workdir: &str) -> Result<String, ImportError> {
        let tree = tree_of(&self.repo, dir).map_err(|e| self.git_err(e))?;
        let tree = self.repo.find_tree(tree).map_err(|e| self.git_err(e))?;
        let signature = self.signature()?;
        let commit = self
            .repo
            .commit(
                None,
                &signature,
                &signature,
                &format!("{id}: the files of {workdir}"),
                &tree,
                &[],
            )
            .map_err(|e| self.git_err(e))?;
        // The tag keeps the commit reachable (and findable by id); a task id may hold what a
        // ref name may not (`a..b`), so those get a numbered tag.
        self.tags += 1;
        let mut tag = format!("refs/tags/{id}");
        if !git2::Reference::is_valid_name(&tag) {
            tag = format!("refs/tags/task-{}", self.tags);
        }
        self.repo
            .reference(&tag, commit, true, "import")
            .map_err(|e| self.git_err(e))?;
        Ok(commit.to_string())
    }

    /// Points `HEAD` at a `main` branch whose one commit explains the layout.
    fn finish(self) -> Result<(), ImportError> {
        let readme = b"One root commit per task, tagged with the task id: the files the task's \
Dockerfile puts in its working directory. suite.yaml names each as the task's base.\n";
        let blob = self.repo.blob(readme).map_err(|e| self.git_err(e))?;
        let mut builder = self.repo.treebuilder(None).map_err(|e| self.git_err(e))?;
        builder
            .insert("README", blob, FileMode::Blob.into())
            .map_err(|e| self.git_err(e))?;
        let tree = builder.write().map_err(|e| self.git_err(e))?;
        let tree = self.repo.find_tree(tree).map_err(|e| self.git_err(e))?;
        let signature = self.signature()?;
        self.repo
            .commit(
                Some("refs/heads/main"),
                &signature,
                &signature,
                "deltabench import: task bases",
                &tree,
                &[],
            )
            .map_err(|e| self.git_err(e))?;
        self.repo
            .set_head("refs/heads/main")
            .map_err(|e| self.git_err(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_a_harbor_task_toml() {
        let doc = parse_toml(
            r#"
version = "1.0"   # schema
[metadata]
tags = ["trivial",
  "files", # trailing comma next
]
[verifier]
timeout_sec = 120.0
env = { API_KEY = "sk-1", "quoted.key" = 'C:\path' }
[agent]
timeout_sec = 1_200
[[verifier.collect]]
run = '''echo 'two''''
[environment.resources]
cpus = 0x2
built = 1979-05-27T07:32:00Z
"#,
        )
        .unwrap();
        let doc = Value::Object(doc);
        assert_eq!(doc["metadata"]["tags"], json!(["trivial", "files"]));
        assert_eq!(doc["verifier"]["timeout_sec"], 120.0);
        assert_eq!(doc["verifier"]["env"]["quoted.key"], "C:\\path");
        assert_eq!(doc["agent"]["timeout_sec"], 1200);
        assert_eq!(doc["verifier"]["collect"][0]["run"], "echo 'two'");
        assert_eq!(doc["environment"]["resources"]["cpus"], 2);
        assert_eq!(
            doc["environment"]["resources"]["built"],
            "1979-05-27T07:32:00Z"
        );
    }

    #[test]
    fn errors_name_the_line_and_column() {
        let (at, _) = parse_toml("a = 1\n[agent]\ntimeout_sec = = 3\n").unwrap_err();
        assert_eq!(at, ":3:15");
        let (at, _) = parse_toml("[a]\nb = 1 2\n").unwrap_err();
        assert!(at.starts_with(":2:"), "{at}");
        assert!(
            parse_toml("a = 1\na.b = 2\n").is_err(),
            "a is a value, not a table"
        );
        assert!(parse_toml("a = 1\na = 2\n").is_err(), "a key defined twice");
    }
}
