//! SWE-bench and Multi-SWE-bench rows into one suite per repository.
//!
//! A row becomes a task: `problem_statement` (or the resolved issues' text) the instruction,
//! `base_commit` the base, `patch` the solution, `test_patch` the hidden tests, and
//! `FAIL_TO_PASS` + `PASS_TO_PASS` the tests the verify command runs. `graders/swebench.py`
//! (copied into the suite folder) reads the per-test results from the output with the official
//! harness's parser for the repository and grades as it does: every FAIL_TO_PASS test passed,
//! every PASS_TO_PASS test passed or skipped. The repo is a local clone; the workspaces strip
//! every ref, so the agent sees the base and its ancestors. A row the official harness has a
//! spec for runs in its environment (`swebench_env`) unless the `--env` file names its repository.

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

use indexmap::IndexMap;
use serde::Deserialize;
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use super::swebench_env;
use super::swebench_official::{OFFICIAL, OfficialSpec, test_directives};
use super::write::{SuiteFile, TaskEntry, write_file};
use super::{Ids, ImportError, ImportOptions, Imported, Skip};
use crate::process::{self, CommandSpec};
use crate::support::shell_quote;

/// The grader copied into every suite folder.
const GRADER: &str = include_str!("../../graders/swebench.py");
const GRADER_PATH: &str = "graders/swebench.py";
/// How long a clone may take before it is given up.
const CLONE_TIMEOUT: Duration = Duration::from_secs(3600);
/// Stands for the test ids in a test command: all of them, or the files they are in.
const TESTS: &str = "{tests}";
const TEST_FILES: &str = "{test_files}";

/// One instance, whichever flavour of row it came from.
#[derive(Debug, Clone)]
struct Instance {
    name: String,
    repo: String,
    base_commit: String,
    statement: String,
    patch: String,
    test_patch: String,
    fail_to_pass: Vec<String>,
    pass_to_pass: Vec<String>,
    version: Option<String>,
    /// The commit the official environment of the row's version is made at.
    environment_setup_commit: Option<String>,
}

/// One entry of an `--env` file; an empty entry (`owner/name:`) takes every default.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct EnvEntry {
    /// Runs before the agent; its result is part of the base.
    setup: Option<String>,
    /// The verify command; `{tests}` and `{test_files}` are filled in per instance.
    test_command: Option<String>,
    timeout: Option<String>,
    /// The setup runs once per base commit, kept with the template (the suite's `prepare:`).
    prepare: Option<bool>,
    /// Where the row's commands run: a container of this image or Dockerfile.
    environment: Option<EnvEnvironment>,
}

/// An `--env` entry's `environment:`, as a suite task's.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct EnvEnvironment {
    image: Option<String>,
    /// Relative to the `--env` file's folder.
    dockerfile: Option<String>,
    workdir: Option<String>,
}

impl EnvEntry {
    /// This entry with `later`'s settings over it, key by key.
    fn under(self, later: EnvEntry) -> EnvEntry {
        EnvEntry {
            setup: later.setup.or(self.setup),
            test_command: later.test_command.or(self.test_command),
            timeout: later.timeout.or(self.timeout),
            prepare: later.prepare.or(self.prepare),
            environment: later.environment.or(self.environment),
        }
    }
}

/// An `--env` entry with its timeout checked.
#[derive(Debug, Clone)]
struct TestSettings {
    setup: Option<String>,
    command: String,
    timeout: Duration,
    prepare: bool,
    environment: Vec<(&'static str, String)>,
}

pub(super) async fn import(
    options: &ImportOptions,
    staging: &Path,
    name: &str,
) -> Result<Imported, ImportError> {
    let env = read_envs(&options.env)?;
    let mut imported = Imported::default();
    let by_repo = chosen_rows(options, &mut imported)?;
    let repos_dir = options
        .repos
        .clone()
        .unwrap_or_else(|| options.out.join("repos"));
    let clones = clones(by_repo.keys(), &repos_dir, options).await;
    imported
        .notes
        .extend(missing_clones(&clones, &repos_dir, options));
    let several = clones.values().filter(|clone| clone.is_ok()).count() > 1;
    for (repo, instances) in by_repo {
        let clone = match &clones[&repo] {
            Ok(clone) => clone.clone(),
            Err(why) => {
                for instance in &instances {
                    imported.skip(&instance.name, format!("no clone of {repo}: {why}"));
                }
                continue;
            }
        };
        let (folder, suite_name) = if several {
            let flat = repo.replace('/', "__");
            (PathBuf::from(&flat), format!("{name}-{flat}"))
        } else {
            (PathBuf::new(), name.to_owned())
        };
        let suite = SuiteFile {
            name: suite_name,
            description: format!(
                "SWE-bench instances of {repo}, imported from {}",
                options.source.display()
            ),
            repo: clone.display().to_string(),
            origin: format!("deltabench import swebench {}", options.source.display()),
            tasks: Vec::new(),
        };
        let dir = staging.join(&folder);
        let suite = repo_suite(
            suite,
            &instances,
            &clone,
            &dir,
            &env,
            options,
            &mut imported,
        )?;
        if suite.tasks.is_empty() {
            continue;
        }
        let out = options.out.join(&folder);
        imported.notes.extend(built_images(&suite, &repo, &out));
        write_file(&dir.join(GRADER_PATH), GRADER, true)?;
        suite.write(&dir)?;
        imported.suites.push((folder, suite.tasks.len()));
    }
    Ok(imported)
}

/// The rows `--instance` and `--repo` choose, by repository; those without a failing test or
/// a problem statement skipped, and a note for each `--instance` with no row.
fn chosen_rows(
    options: &ImportOptions,
    imported: &mut Imported,
) -> Result<IndexMap<String, Vec<Instance>>, ImportError> {
    let source = &options.source;
    let mut by_repo: IndexMap<String, Vec<Instance>> = IndexMap::new();
    let mut named: Vec<&str> = options.instances.iter().map(String::as_str).collect();
    for (at, row) in read_rows(source)? {
        let instance = instance(source, &at, &row)?;
        // --instance and --repo choose rows; the others are not imported, nor skipped.
        if !options.instances.is_empty() && !options.instances.contains(&instance.name) {
            continue;
        }
        if !options.repo_filter.is_empty() && !options.repo_filter.contains(&instance.repo) {
            continue;
        }
        named.retain(|name| *name != instance.name);
        if instance.fail_to_pass.is_empty() {
            imported.skip(
                &instance.name,
                "no FAIL_TO_PASS tests: nothing tells a fix from no change",
            );
        } else if instance.statement.trim().is_empty() {
            imported.skip(&instance.name, "no problem statement");
        } else {
            by_repo
                .entry(instance.repo.clone())
                .or_default()
                .push(instance);
        }
    }
    for name in named {
        imported.notes.push(format!(
            "--instance {name}: no such row in {}",
            source.display()
        ));
    }
    Ok(by_repo)
}

/// The note saying how to clone the repositories that have no usable clone, if any.
fn missing_clones(
    clones: &IndexMap<String, Result<PathBuf, CloneError>>,
    repos_dir: &Path,
    options: &ImportOptions,
) -> Option<String> {
    let missing: Vec<String> = clones
        .iter()
        .filter(|(_, clone)| clone.is_err())
        .map(|(repo, _)| {
            format!(
                "git clone https://github.com/{repo}.git {}",
                crate::support::shell_quote(
                    &repos_dir.join(repo.replace('/', "__")).to_string_lossy()
                )
            )
        })
        .collect();
    if missing.is_empty() {
        return None;
    }
    Some(format!(
        "{} of {} repositories have no usable clone, so their rows were skipped; get them with:\n    {}\n  then import again{}",
        missing.len(),
        clones.len(),
        missing.join("\n    "),
        if options.repos.is_some() {
            String::new()
        } else {
            format!(
                " (or pass --repos DIR, a folder of clones named owner__name; default {})",
                repos_dir.display()
            )
        }
    ))
}

/// `suite` with a task for each of one repository's instances, from its clone; the others
/// skipped, with why.
fn repo_suite(
    mut suite: SuiteFile,
    instances: &[Instance],
    clone: &Path,
    dir: &Path,
    env: &IndexMap<String, EnvEntry>,
    options: &ImportOptions,
    imported: &mut Imported,
) -> Result<SuiteFile, ImportError> {
    let git_err = |e: git2::Error| ImportError::Git {
        path: clone.to_owned(),
        message: e.message().to_owned(),
    };
    let git = git2::Repository::open(clone).map_err(git_err)?;
    // Checking a patch writes its blobs: to memory, not into the user's clone.
    let _mempack = git
        .odb()
        .map_err(git_err)?
        .add_new_mempack_backend(1000)
        .map_err(git_err)?;
    let mut ids = Ids::default();
    let mut environments = Environments::default();
    let place = Place {
        git: &git,
        clone,
        dir,
        images: options.images,
    };
    for instance in instances {
        match task(instance, &place, env, &mut environments, &mut ids)? {
            Ok(entry) => suite.tasks.push(entry),
            Err(reason) => imported.skip(&instance.name, reason),
        }
    }
    Ok(suite)
}

/// The note on the suite's tasks that run in an image built from a Dockerfile, if any.
fn built_images(suite: &SuiteFile, repo: &str, out: &Path) -> Option<String> {
    let built: Vec<&str> = suite
        .tasks
        .iter()
        .filter(|t| t.environment.iter().any(|(key, _)| *key == "dockerfile"))
        .map(|t| t.id.as_str())
        .collect();
    if built.is_empty() {
        return None;
    }
    Some(format!(
        "{} task(s) of {repo} run in an image built from a Dockerfile, which needs the network once (its base image, conda and pip packages): `deltabench prepare {}` builds them all, then runs are offline ({})",
        built.len(),
        out.display(),
        built.join(", ")
    ))
}

/// Where one repository's tasks are imported from and to.
struct Place<'a> {
    git: &'a git2::Repository,
    clone: &'a Path,
    /// The suite's folder.
    dir: &'a Path,
    /// `--images`: the official instance images rather than generated Dockerfiles.
    images: bool,
}

/// The environments written into one suite's folder, per version: the Dockerfile's path
/// relative to the suite file, or why it could not be written.
type Environments = HashMap<String, Result<String, Skip>>;

/// How long the verify command may take in an official environment: it installs the package
/// again before the tests (a compiled one builds its extensions).
const OFFICIAL_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// Writes one instance's files into `dir` and returns its entry, or the reason to skip it.
fn task(
    instance: &Instance,
    place: &Place,
    env: &IndexMap<String, EnvEntry>,
    environments: &mut Environments,
    ids: &mut Ids,
) -> Result<Result<TaskEntry, Skip>, ImportError> {
    let tree = match base_tree(instance, place) {
        Ok(tree) => tree,
        Err(reason) => return Ok(Err(reason)),
    };
    let entry = env_entry(instance, env);
    let (settings, verify, environment) =
        match how_to_test(instance, &tree, entry, place, environments)? {
            Ok(how) => how,
            Err(reason) => return Ok(Err(reason)),
        };
    let id = ids.claim(&instance.name);
    let files = write_files(instance, &id, place.dir)?;
    Ok(Ok(TaskEntry {
        id,
        instruction_file: files.instruction,
        base: Some(instance.base_commit.clone()),
        setup: settings.setup,
        tests: Some(files.tests),
        verify,
        verify_timeout: Some(settings.timeout),
        solution: Some(files.solution),
        grader: Some(format!("./{GRADER_PATH} {}", files.spec)),
        environment,
        prepare: settings.prepare,
        ..TaskEntry::default()
    }))
}

/// The tree of the instance's base commit in the clone, to which its test patch and its fix
/// each apply.
fn base_tree<'a>(instance: &Instance, place: &Place<'a>) -> Result<git2::Tree<'a>, Skip> {
    let Some(tree) = (place.git)
        .revparse_single(&format!("{}^{{tree}}", instance.base_commit))
        .ok()
        .and_then(|object| object.into_tree().ok())
    else {
        return Err(Skip::MissingBase {
            commit: instance.base_commit.clone(),
            clone: place.clone.to_owned(),
        });
    };
    // Checked as the run applies them (each to the base), so a bad row is skipped here.
    for (what, patch) in [
        ("test patch", &instance.test_patch),
        ("fix", &instance.patch),
    ] {
        if let Err(why) = crate::workspace::patched_files(place.git, &tree, patch.as_bytes()) {
            return Err(Skip::PatchDoesNotApply {
                what,
                commit: instance.base_commit.clone(),
                source: why.into(),
            });
        }
    }
    Ok(tree)
}

/// How a task is verified: its settings, verify command and environment.
type HowToTest = (TestSettings, String, Vec<(&'static str, String)>);

/// How the instance is tested: by its `--env` entry, else in the official harness's
/// environment when it knows the repository and version.
fn how_to_test(
    instance: &Instance,
    tree: &git2::Tree,
    entry: Option<&EnvEntry>,
    place: &Place,
    environments: &mut Environments,
) -> Result<Result<HowToTest, Skip>, ImportError> {
    let official = if entry.is_none() {
        official_spec(instance)
    } else {
        None
    };
    match official {
        Some(spec) => official_test(instance, spec, place, environments),
        None if place.images && entry.is_none() => Ok(Err(Skip::NoOfficialImage {
            repo: instance.repo.clone(),
            version: instance.version.clone(),
        })),
        None => Ok(test_settings(instance, tree, entry).map(|settings| {
            let verify = test_command(&settings.command, instance);
            let environment = settings.environment.clone();
            (settings, verify, environment)
        })),
    }
}

/// The official harness's environment for the instance, and its verify command in it.
fn official_test(
    instance: &Instance,
    spec: &OfficialSpec,
    place: &Place,
    environments: &mut Environments,
) -> Result<Result<HowToTest, Skip>, ImportError> {
    let Some(verify) = swebench_env::verify_command(spec, &instance.repo, &instance.test_patch)
    else {
        return Ok(Err(Skip::NoOfficialTestCommand {
            repo: instance.repo.clone(),
            version: instance.version.clone().unwrap_or_default(),
        }));
    };
    let environment = if place.images {
        ("image", swebench_env::image_name(&instance.name))
    } else {
        match official_dockerfile(instance, spec, place, environments)? {
            Ok(path) => ("dockerfile", path),
            Err(reason) => return Ok(Err(reason)),
        }
    };
    let settings = TestSettings {
        setup: None,
        command: String::new(),
        timeout: OFFICIAL_TIMEOUT,
        prepare: false,
        environment: Vec::new(),
    };
    let workdir = ("workdir", swebench_env::TESTBED.to_owned());
    Ok(Ok((settings, verify, vec![environment, workdir])))
}

/// The files of one task, relative to the suite's folder.
struct TaskFiles {
    instruction: String,
    tests: String,
    /// The tests the grader expects to fail before and pass after.
    spec: String,
    solution: String,
}

/// Writes the instance's instruction, test patch, fix and expected results under `dir`.
fn write_files(instance: &Instance, id: &str, dir: &Path) -> Result<TaskFiles, ImportError> {
    let files = TaskFiles {
        instruction: format!("instructions/{id}.md"),
        tests: format!("tests/{id}.patch"),
        spec: format!("tests/{id}.json"),
        solution: format!("solutions/{id}.patch"),
    };
    write_file(&dir.join(&files.instruction), &instance.statement, false)?;
    write_file(&dir.join(&files.tests), &instance.test_patch, false)?;
    write_file(&dir.join(&files.solution), &instance.patch, false)?;
    // The repository picks the log parser the official harness uses for it.
    let expected = serde_json::json!({
        "instance_id": instance.name,
        "repo": instance.repo,
        "FAIL_TO_PASS": instance.fail_to_pass,
        "PASS_TO_PASS": instance.pass_to_pass,
    });
    write_file(
        &dir.join(&files.spec),
        serde_json::to_string_pretty(&expected).unwrap_or_default() + "\n",
        false,
    )?;
    Ok(files)
}

/// The `--env` entry for the instance: `owner/name@version` first, then `owner/name`.
fn env_entry<'a>(instance: &Instance, env: &'a IndexMap<String, EnvEntry>) -> Option<&'a EnvEntry> {
    let versioned = instance
        .version
        .as_ref()
        .and_then(|v| env.get(&format!("{}@{v}", instance.repo)));
    versioned.or_else(|| env.get(&instance.repo))
}

/// The Dockerfile of the official environment of the row's version, written into the suite's
/// `environments/` once per version: its path relative to the suite file, or why there is none.
fn official_dockerfile(
    instance: &Instance,
    spec: &OfficialSpec,
    place: &Place,
    environments: &mut Environments,
) -> Result<Result<String, Skip>, ImportError> {
    let version = instance.version.clone().unwrap_or_default();
    if let Some(known) = environments.get(&version) {
        return Ok(known.clone());
    }
    // The harness makes a version's environment at its `environment_setup_commit`.
    let commit = instance
        .environment_setup_commit
        .as_deref()
        .unwrap_or(&instance.base_commit);
    let tree = place
        .git
        .revparse_single(&format!("{commit}^{{tree}}"))
        .ok()
        .and_then(|object| object.into_tree().ok());
    let files = match tree {
        None => Err(swebench_env::EnvironmentError::MissingCommit {
            commit: commit.to_owned(),
            clone: place.clone.to_owned(),
        }),
        Some(tree) => {
            swebench_env::dockerfile(&instance.repo, &version, spec, commit, place.git, &tree)
        }
    };
    let folder = format!(
        "environments/{}-{}",
        instance.repo.replace('/', "__"),
        super::task_id(&version)
    );
    let result = match files {
        Ok(files) => {
            for (name, text) in files {
                write_file(&place.dir.join(&folder).join(name), text, false)?;
            }
            Ok(format!("{folder}/Dockerfile"))
        }
        Err(source) => Err(Skip::OfficialEnvironment {
            repo: instance.repo.clone(),
            version: version.clone(),
            source,
        }),
    };
    environments.insert(version, result.clone());
    Ok(result)
}

/// The `--env` entry's settings for the instance, or the defaults: the official test command,
/// else the one for the language found at the base.
fn test_settings(
    instance: &Instance,
    tree: &git2::Tree,
    entry: Option<&EnvEntry>,
) -> Result<TestSettings, Skip> {
    let entry = entry.cloned().unwrap_or_default();
    let rust = tree.get_name("Cargo.toml").is_some();
    let python = ["setup.py", "pyproject.toml", "setup.cfg"]
        .iter()
        .any(|f| tree.get_name(f).is_some())
        || instance
            .fail_to_pass
            .iter()
            .any(|t| t.contains(".py::") || t.ends_with(".py"));
    let (default_command, default_timeout) = if rust {
        (Some("cargo test --no-fail-fast -- {tests}"), 30 * 60)
    } else if python {
        (Some("python3 -m pytest -rA {tests}"), 15 * 60)
    } else {
        (None, 15 * 60)
    };
    let official = official_test_command(instance);
    let Some(command) = entry
        .test_command
        .as_deref()
        .or(official.as_deref())
        .or(default_command)
    else {
        return Err(Skip::NoTestCommand {
            repo: instance.repo.clone(),
        });
    };
    let timeout = match &entry.timeout {
        // Checked when the --env file was read.
        Some(text) => crate::support::parse_duration(text).unwrap_or_default(),
        None => Duration::from_secs(default_timeout),
    };
    let environment = entry.environment.map_or_else(Vec::new, |env| {
        [
            ("image", env.image),
            ("dockerfile", env.dockerfile),
            ("workdir", env.workdir),
        ]
        .into_iter()
        .filter_map(|(key, value)| Some((key, value?)))
        .collect()
    });
    Ok(TestSettings {
        setup: entry.setup,
        command: command.to_owned(),
        timeout,
        prepare: entry.prepare.unwrap_or(false),
        environment,
    })
}

/// The official spec of the row's repository and version, if the table lists them.
fn official_spec(instance: &Instance) -> Option<&'static OfficialSpec> {
    OFFICIAL
        .repos
        .get(&instance.repo)?
        .get(instance.version.as_deref()?)
}

/// The test command the official harness runs for the row: its repository and version's
/// `test_cmd` followed by the test directives (the files the test patch touches; Django's as
/// module names), after the `export`s of its `eval_commands` (their system edits, such as
/// `locale-gen`, are left to an image). None for a repository or version it does not list.
fn official_test_command(instance: &Instance) -> Option<String> {
    let spec = official_spec(instance)?;
    let command = spec.test_cmd.as_deref()?;
    let mut parts: Vec<String> = spec
        .eval_commands
        .iter()
        .filter(|line| line.starts_with("export "))
        .map(|line| format!("{line} &&"))
        .collect();
    parts.push(command.to_owned());
    parts.extend(
        test_directives(&instance.repo, &instance.test_patch)
            .iter()
            .map(|d| shell_quote(d)),
    );
    Some(parts.join(" "))
}

/// Fills `{tests}` (every FAIL_TO_PASS then PASS_TO_PASS id) and `{test_files}` (the files
/// those ids are in) into `command`.
fn test_command(command: &str, instance: &Instance) -> String {
    let ids: Vec<&String> = instance
        .fail_to_pass
        .iter()
        .chain(&instance.pass_to_pass)
        .collect();
    let mut files: Vec<&str> = Vec::new();
    for id in &ids {
        if let Some((file, _)) = id.split_once("::")
            && !files.contains(&file)
        {
            files.push(file);
        }
    }
    let quoted = |items: Vec<&str>| {
        items
            .into_iter()
            .map(shell_quote)
            .collect::<Vec<_>>()
            .join(" ")
    };
    command
        .replace(TESTS, &quoted(ids.iter().map(|s| s.as_str()).collect()))
        .replace(TEST_FILES, &quoted(files))
}

/// A row, and where it was in its file ("line 3", "row 3").
type Row = (String, Map<String, Value>);

/// The rows of a JSON array, a single JSON object, or JSON Lines.
fn read_rows(path: &Path) -> Result<Vec<Row>, ImportError> {
    let text = std::fs::read_to_string(path).map_err(|source| ImportError::Read {
        path: path.to_owned(),
        source,
    })?;
    // Within a JSON Lines file, serde_json's line is always 1: the file's line is ours.
    let json_err = |e: serde_json::Error, line: usize| ImportError::Json {
        path: path.to_owned(),
        line,
        column: e.column(),
        message: super::json_message(&e),
    };
    let not_object = |at: String| ImportError::parse(path, format!("{at} is not a JSON object"));
    if text.trim_start().starts_with('[') {
        let rows: Vec<Value> = serde_json::from_str(&text).map_err(|e| {
            let line = e.line();
            json_err(e, line)
        })?;
        return rows
            .into_iter()
            .enumerate()
            .map(|(i, row)| match row {
                Value::Object(map) => Ok((format!("row {}", i + 1), map)),
                _ => Err(not_object(format!("row {}", i + 1))),
            })
            .collect();
    }
    if let Ok(Value::Object(map)) = serde_json::from_str(&text) {
        let first = text.lines().position(|l| !l.trim().is_empty()).unwrap_or(0);
        return Ok(vec![(format!("line {}", first + 1), map)]);
    }
    let mut rows = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str(line).map_err(|e| json_err(e, i + 1))? {
            Value::Object(map) => rows.push((format!("line {}", i + 1), map)),
            _ => return Err(not_object(format!("line {}", i + 1))),
        }
    }
    if rows.is_empty() {
        return Err(ImportError::Usage(format!(
            "{}: no rows (expected JSON Lines or a JSON array of SWE-bench rows)",
            path.display()
        )));
    }
    Ok(rows)
}

/// Reads a row of either flavour: Multi-SWE-bench rows have `org` and `fix_patch`.
fn instance(path: &Path, at: &str, row: &Map<String, Value>) -> Result<Instance, ImportError> {
    let multi = row.contains_key("fix_patch") || row.contains_key("org");
    let named = |id: Option<&str>| match id {
        Some(id) => format!("row '{id}' ({at})"),
        None => format!("the row at {at}"),
    };
    let id_hint = row.get("instance_id").and_then(Value::as_str);
    let fields = Fields {
        path,
        row,
        name: named(id_hint),
    };
    if !multi {
        let name = fields.string("instance_id")?;
        let fields = Fields {
            name: named(Some(&name)),
            ..fields
        };
        return Ok(Instance {
            repo: fields.repo("repo")?,
            base_commit: fields.string("base_commit")?,
            statement: fields.string("problem_statement")?,
            patch: fields.string("patch")?,
            test_patch: fields.string("test_patch")?,
            fail_to_pass: fields.test_list("FAIL_TO_PASS")?,
            pass_to_pass: fields.test_list("PASS_TO_PASS")?,
            version: row.get("version").and_then(|v| match v {
                Value::String(s) => Some(s.clone()),
                Value::Number(n) => Some(n.to_string()),
                _ => None,
            }),
            environment_setup_commit: row
                .get("environment_setup_commit")
                .and_then(Value::as_str)
                .map(str::to_owned),
            name,
        });
    }
    let org = fields.string("org")?;
    let repo_name = fields.string("repo")?;
    let name = match id_hint {
        Some(id) => id.to_owned(),
        None => format!("{org}__{repo_name}-{}", fields.scalar("number")?),
    };
    let fields = Fields {
        name: named(Some(&name)),
        ..fields
    };
    let base = fields.object("base")?;
    let base_commit = match base.get("sha") {
        Some(Value::String(sha)) => sha.clone(),
        _ => return Err(fields.missing("base.sha")),
    };
    let issues = match row.get("resolved_issues") {
        Some(Value::Array(items)) => items,
        Some(_) => return Err(fields.bad("resolved_issues", "is not a list")),
        None => return Err(fields.missing("resolved_issues")),
    };
    let statement = issues
        .iter()
        .map(|issue| {
            let text = |key| issue.get(key).and_then(Value::as_str).unwrap_or_default();
            format!("{}\n\n{}", text("title"), text("body"))
                .trim()
                .to_owned()
        })
        .filter(|text| !text.is_empty())
        .collect::<Vec<_>>()
        .join("\n\n");
    // Tests that must pass after the fix: failing, skipped or absent before it.
    let mut fail_to_pass = BTreeSet::new();
    for key in ["f2p_tests", "s2p_tests", "n2p_tests"] {
        if key == "f2p_tests" || row.contains_key(key) {
            fail_to_pass.extend(fields.test_names(key)?);
        }
    }
    Ok(Instance {
        repo: fields.owner_name("org", format!("{org}/{repo_name}"))?,
        base_commit,
        statement,
        patch: fields.string("fix_patch")?,
        test_patch: fields.string("test_patch")?,
        fail_to_pass: fail_to_pass.into_iter().collect(),
        pass_to_pass: fields.test_names("p2p_tests")?,
        version: None,
        environment_setup_commit: None,
        name,
    })
}

/// Field access on one row, with errors naming the file, the row and the field.
struct Fields<'a> {
    path: &'a Path,
    row: &'a Map<String, Value>,
    name: String,
}

impl Fields<'_> {
    fn missing(&self, field: &str) -> ImportError {
        ImportError::MissingField {
            path: self.path.to_owned(),
            row: self.name.clone(),
            field: field.to_owned(),
        }
    }

    fn bad(&self, field: &str, message: &str) -> ImportError {
        ImportError::BadField {
            path: self.path.to_owned(),
            row: self.name.clone(),
            field: field.to_owned(),
            message: message.to_owned(),
        }
    }

    fn get(&self, field: &str) -> Result<&Value, ImportError> {
        match self.row.get(field) {
            None | Some(Value::Null) => Err(self.missing(field)),
            Some(value) => Ok(value),
        }
    }

    fn string(&self, field: &str) -> Result<String, ImportError> {
        match self.get(field)? {
            Value::String(text) => Ok(text.clone()),
            _ => Err(self.bad(field, "is not a string")),
        }
    }

    /// A string or a number, as text.
    fn scalar(&self, field: &str) -> Result<String, ImportError> {
        match self.get(field)? {
            Value::String(text) => Ok(text.clone()),
            Value::Number(n) => Ok(n.to_string()),
            _ => Err(self.bad(field, "is not a string or a number")),
        }
    }

    fn object(&self, field: &str) -> Result<&Map<String, Value>, ImportError> {
        match self.get(field)? {
            Value::Object(map) => Ok(map),
            _ => Err(self.bad(field, "is not an object")),
        }
    }

    /// `owner/name`.
    fn repo(&self, field: &str) -> Result<String, ImportError> {
        let repo = self.string(field)?;
        self.owner_name(field, repo)
    }

    fn owner_name(&self, field: &str, repo: String) -> Result<String, ImportError> {
        // Both parts become path components under --repos: nothing that could leave it.
        let safe = |part: &str| {
            !part.is_empty()
                && part != "."
                && part != ".."
                && part
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
        };
        match repo.split_once('/') {
            Some((owner, name)) if safe(owner) && safe(name) => Ok(repo),
            _ => Err(self.bad(field, &format!("'{repo}' is not owner/name"))),
        }
    }

    /// A JSON list of test ids, or a string holding one (as the published data has it).
    fn test_list(&self, field: &str) -> Result<Vec<String>, ImportError> {
        let value = self.get(field)?;
        let parsed;
        let list = match value {
            Value::String(text) => {
                parsed = serde_json::from_str::<Value>(text).map_err(|_| {
                    self.bad(
                        field,
                        "is a string that does not hold a JSON list of test ids",
                    )
                })?;
                &parsed
            }
            other => other,
        };
        strings(list).ok_or_else(|| self.bad(field, "is not a list of test ids"))
    }

    /// Multi-SWE-bench's `{test name: {run, test, fix}}` map (or a plain list) of test names.
    fn test_names(&self, field: &str) -> Result<Vec<String>, ImportError> {
        match self.get(field)? {
            Value::Object(map) => Ok(map.keys().cloned().collect()),
            other => strings(other).ok_or_else(|| {
                self.bad(field, "is neither a map of test names nor a list of them")
            }),
        }
    }
}

fn strings(value: &Value) -> Option<Vec<String>> {
    value
        .as_array()?
        .iter()
        .map(|v| v.as_str().map(str::to_owned))
        .collect()
}

/// Reads the `--env` files, later files' settings over earlier ones', key by key.
fn read_envs(paths: &[PathBuf]) -> Result<IndexMap<String, EnvEntry>, ImportError> {
    let mut merged: IndexMap<String, EnvEntry> = IndexMap::new();
    for path in paths {
        for (repo, entry) in read_env(path)? {
            let earlier = merged.shift_remove(&repo).unwrap_or_default();
            merged.insert(repo, earlier.under(entry));
        }
    }
    Ok(merged)
}

/// Reads an `--env` file: a map of `owner/name` (or `owner/name@version`) to settings.
fn read_env(path: &Path) -> Result<IndexMap<String, EnvEntry>, ImportError> {
    let text = std::fs::read_to_string(path).map_err(|source| ImportError::Read {
        path: path.to_owned(),
        source,
    })?;
    let parse_err = |message: String| ImportError::parse(path, message);
    let entries: IndexMap<String, Option<EnvEntry>> =
        serde_saphyr::from_str(&text).map_err(|err| ImportError::yaml(path, &err))?;
    let folder = std::path::absolute(path)
        .ok()
        .and_then(|p| p.parent().map(Path::to_owned))
        .unwrap_or_default();
    let mut read = IndexMap::new();
    for (repo, entry) in entries {
        let mut entry = entry.unwrap_or_default();
        if let Some(timeout) = &entry.timeout {
            crate::support::parse_duration(timeout)
                .map_err(|message| parse_err(format!("{repo}: timeout: {message}")))?;
        }
        if entry
            .test_command
            .as_deref()
            .is_some_and(|c| c.trim().is_empty())
        {
            return Err(parse_err(format!("{repo}: test_command is empty")));
        }
        if let Some(env) = &mut entry.environment {
            if env.image.is_some() == env.dockerfile.is_some() {
                return Err(parse_err(format!(
                    "{repo}: environment: give one of image and dockerfile"
                )));
            }
            if let Some(dockerfile) = &mut env.dockerfile {
                let found = folder.join(&*dockerfile);
                if !found.is_file() {
                    return Err(parse_err(format!(
                        "{repo}: environment: dockerfile {} does not exist",
                        found.display()
                    )));
                }
                *dockerfile = found.display().to_string();
            }
        }
        read.insert(repo, entry);
    }
    Ok(read)
}

/// Every repository's local clone, or why there is none. All are looked for first, and the
/// missing ones said at once, before any is cloned: with --repos (clones the user keeps) nothing
/// is cloned; without it the missing ones are cloned from GitHub into `repos`.
async fn clones<'a>(
    repos: impl Iterator<Item = &'a String>,
    dir: &Path,
    options: &ImportOptions,
) -> IndexMap<String, Result<PathBuf, CloneError>> {
    let mut found: IndexMap<String, Option<Result<PathBuf, CloneError>>> = repos
        .map(|repo| (repo.clone(), existing_clone(repo, dir)))
        .collect();
    let absent: Vec<&str> = found
        .iter()
        .filter(|(_, clone)| clone.is_none())
        .map(|(repo, _)| repo.as_str())
        .collect();
    if !absent.is_empty() {
        (options.progress)(&format!(
            "{} of {} repositories have no clone under {}{}: {}",
            absent.len(),
            found.len(),
            dir.display(),
            if options.repos.is_some() {
                ", skipping their rows"
            } else {
                ", cloning them"
            },
            absent.join(", ")
        ));
    }
    for (repo, clone) in &mut found {
        if clone.is_some() {
            continue;
        }
        *clone = Some(if options.repos.is_some() {
            Err(CloneError::Absent {
                flat: dir.join(repo.replace('/', "__")),
                nested: dir.join(repo.as_str()),
            })
        } else {
            local_clone(repo, dir, &*options.progress)
                .await
                .map_err(CloneError::from)
        });
    }
    found
        .into_iter()
        .map(|(repo, clone)| (repo, clone.expect("each looked for")))
        .collect()
}

/// The clone of `repo` already under `repos` (`owner__name` or `owner/name`), or why it cannot
/// be used; `None` when there is none.
fn existing_clone(repo: &str, repos: &Path) -> Option<Result<PathBuf, CloneError>> {
    let flat = repos.join(repo.replace('/', "__"));
    let nested = repos.join(repo);
    let candidate = [flat, nested].into_iter().find(|c| c.exists())?;
    Some(match git2::Repository::open(&candidate) {
        Ok(_) => Ok(candidate.canonicalize().unwrap_or(candidate)),
        Err(err) => Err(CloneError::NotARepository {
            message: err.message().to_owned(),
            path: candidate,
        }),
    })
}

/// Why a repository has no usable clone.
#[derive(Debug, thiserror::Error)]
enum CloneError {
    #[error("{} is not a git repository: {message}", path.display())]
    NotARepository { path: PathBuf, message: String },
    #[error("neither {} nor {} exists", flat.display(), nested.display())]
    Absent { flat: PathBuf, nested: PathBuf },
    #[error(transparent)]
    Cloning(#[from] ImportError),
}

/// The local clone of `repo` (`owner/name`) under `repos`: `owner__name` or `owner/name`, or a
/// fresh clone from GitHub into `owner__name` when neither exists.
async fn local_clone(
    repo: &str,
    repos: &Path,
    progress: &(dyn Fn(&str) + Send + Sync),
) -> Result<PathBuf, ImportError> {
    let flat = repos.join(repo.replace('/', "__"));
    let nested = repos.join(repo);
    let expected = vec![flat.clone(), nested.clone()];
    for candidate in [&flat, &nested] {
        if candidate.exists() {
            return match git2::Repository::open(candidate) {
                Ok(_) => Ok(candidate
                    .canonicalize()
                    .unwrap_or_else(|_| candidate.clone())),
                Err(err) => Err(ImportError::NoClone {
                    repo: repo.to_owned(),
                    expected,
                    why: format!(
                        "{} is not a git repository: {}",
                        candidate.display(),
                        err.message()
                    ),
                }),
            };
        }
    }
    let url = format!("https://github.com/{repo}.git");
    progress(&format!("cloning {url} into {}", flat.display()));
    let no_clone = |why: String| ImportError::NoClone {
        repo: repo.to_owned(),
        expected: expected.clone(),
        why,
    };
    let created = !repos.exists();
    std::fs::create_dir_all(repos)
        .map_err(|e| no_clone(format!("cannot create {}: {e}", repos.display())))?;
    // git runs in `repos`: the target must not be relative to where we are.
    let target = std::path::absolute(&flat).unwrap_or_else(|_| flat.clone());
    let spec = CommandSpec::argv(
        [
            "git",
            "-c",
            "core.hooksPath=/dev/null",
            "clone",
            "--quiet",
            &url,
            &target.to_string_lossy(),
        ],
        repos,
    )
    .env("GIT_TERMINAL_PROMPT", "0")
    .timeout(Some(CLONE_TIMEOUT));
    let ended = process::run(&spec, &CancellationToken::new())
        .await
        .map_err(|e| no_clone(format!("cannot run git: {e}")))?;
    if !ended.success() {
        let _ = std::fs::remove_dir_all(&flat);
        if created {
            let _ = std::fs::remove_dir(repos);
        }
        return Err(no_clone(format!(
            "cloning {url} {} ({}); with no network, clone it there yourself",
            ended.ending(),
            ended.output.text().trim()
        )));
    }
    Ok(flat.canonicalize().unwrap_or(flat))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn row(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            _ => unreachable!(),
        }
    }

    fn official_row(repo: &str, version: &str, test_patch: &str) -> Instance {
        let swe = row(json!({
            "instance_id": "o__r-1", "repo": repo, "base_commit": "abc",
            "problem_statement": "p", "patch": "x", "test_patch": test_patch,
            "FAIL_TO_PASS": ["a"], "PASS_TO_PASS": [], "version": version,
        }));
        instance(Path::new("rows.jsonl"), "line 1", &swe).unwrap()
    }

    #[test]
    fn the_official_test_command_runs_the_files_the_test_patch_touches() {
        let patch = "diff --git a/sympy/core/tests/test_basic.py b/sympy/core/tests/test_basic.py\n\
                     --- a/sympy/core/tests/test_basic.py\n\
                     +++ b/sympy/core/tests/test_basic.py\n\
                     diff --git a/data/table.txt b/data/table.txt\n\
                     diff --git a/sympy/old.py b/sympy/new_test.py\n";
        assert_eq!(
            official_test_command(&official_row("sympy/sympy", "1.12", patch)).as_deref(),
            Some(
                "PYTHONWARNINGS='ignore::UserWarning,ignore::SyntaxWarning' bin/test -C --verbose \
                 sympy/core/tests/test_basic.py sympy/new_test.py"
            )
        );
        // Django: modules, and the exports of its eval commands (not its locale-gen).
        let patch = "diff --git a/tests/admin_views/tests.py b/tests/admin_views/tests.py\n";
        assert_eq!(
            official_test_command(&official_row("django/django", "3.0", patch)).as_deref(),
            Some(
                "export LANG=en_US.UTF-8 && export LANGUAGE=en_US:en && export LC_ALL=en_US.UTF-8 && \
                 ./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1 admin_views.tests"
            )
        );
        let patch = "diff --git a/tests/test_requests.py b/tests/test_requests.py\n";
        assert_eq!(
            official_test_command(&official_row("psf/requests", "2.27", patch)).as_deref(),
            Some("pytest -rA tests/test_requests.py")
        );
        // A version or a repository the official table does not list: the caller's default.
        assert_eq!(
            official_test_command(&official_row("psf/requests", "9.9", patch)),
            None
        );
        assert_eq!(
            official_test_command(&official_row("o/r", "1.0", patch)),
            None
        );
    }

    #[test]
    fn test_lists_may_be_strings_holding_json() {
        let path = Path::new("rows.jsonl");
        let swe = row(json!({
            "instance_id": "o__r-1", "repo": "o/r", "base_commit": "abc",
            "problem_statement": "p", "patch": "x", "test_patch": "y",
            "FAIL_TO_PASS": "[\"t.py::a\"]", "PASS_TO_PASS": ["t.py::b"], "version": 2.3,
            "hints_text": "ignored",
        }));
        let instance = instance(path, "line 1", &swe).unwrap();
        assert_eq!(instance.fail_to_pass, ["t.py::a"]);
        assert_eq!(instance.pass_to_pass, ["t.py::b"]);
        assert_eq!(instance.version.as_deref(), Some("2.3"));
        assert_eq!(
            test_command("python3 -m pytest -rA {tests} # {test_files}", &instance),
            "python3 -m pytest -rA t.py::a t.py::b # t.py"
        );

        let mut bad = swe.clone();
        bad.insert("FAIL_TO_PASS".into(), json!("t.py::a"));
        let err = super::instance(path, "line 1", &bad).unwrap_err();
        assert_eq!(
            err.to_string(),
            "rows.jsonl: row 'o__r-1' (line 1): `FAIL_TO_PASS` is a string that does not hold a JSON list of test ids"
        );
        let mut missing = swe;
        missing.remove("base_commit");
        let err = super::instance(path, "line 1", &missing).unwrap_err();
        assert_eq!(
            err.to_string(),
            "rows.jsonl: row 'o__r-1' (line 1) has no `base_commit`"
        );
    }

    #[test]
    fn multi_swe_bench_rows_are_read() {
        let msb = row(json!({
            "org": "o", "repo": "r", "number": 7, "base": {"sha": "abc"},
            "resolved_issues": [{"number": 1, "title": "T", "body": "B"}],
            "fix_patch": "x", "test_patch": "y",
            "f2p_tests": {"a": {}}, "n2p_tests": {"n": {}}, "p2p_tests": {"p": {}},
        }));
        let instance = instance(Path::new("r.jsonl"), "line 3", &msb).unwrap();
        assert_eq!(instance.name, "o__r-7");
        assert_eq!(instance.repo, "o/r");
        assert_eq!(instance.statement, "T\n\nB");
        assert_eq!(instance.fail_to_pass, ["a", "n"]);
        assert_eq!(instance.pass_to_pass, ["p"]);

        let mut no_sha = msb;
        no_sha.insert("base".into(), json!({"ref": "main"}));
        let err = super::instance(Path::new("r.jsonl"), "line 3", &no_sha).unwrap_err();
        assert_eq!(
            err.to_string(),
            "r.jsonl: row 'o__r-7' (line 3) has no `base.sha`"
        );
    }
}
