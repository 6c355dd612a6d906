//! `deltabench import`: task sets in the formats people already have, into ready suite folders.
//!
//! Each importer reads its format and writes a suite folder (`suite.yaml`, instruction files,
//! hidden tests, solutions, graders) into a staging folder inside `--out`. Every suite written
//! is then loaded with the real loader ([`crate::suite::load`]), and only then are the files
//! moved into place: a failed import leaves `--out` as it was.
//!
//! Input that is not the format (an unparseable row or file, a missing required field) is an
//! error naming the file, the row or line, and the field. A task that is well formed but cannot
//! run here (its Dockerfile must be built, its language has no known test command, its base
//! commit is not in the local clone) is skipped with the reason. Keys an importer does not use
//! are ignored: published rows carry many columns (`hints_text`, `created_at`, ...) that
//! deltabench has no use for.

mod container;
mod docker;
mod exercism;
mod swebench;
mod swebench_env;
mod swebench_official;
mod write;

use std::collections::HashSet;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use clap::ValueEnum;

/// A task-set format; its command-line name is the variant's in kebab case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum Format {
    /// SWE-bench and Multi-SWE-bench rows, a JSON or JSONL file; one suite per repository
    Swebench,
    /// A folder of Harbor task folders (`task.toml`, `instruction.md`, `tests/`, `solution/`)
    Harbor,
    /// A folder of Terminal-Bench task folders (`task.yaml`, `run-tests.sh`, `tests/`,
    /// `solution.sh`)
    TerminalBench,
    /// A folder of Exercism practice exercises (`.docs/`, `.meta/config.json`)
    Exercism,
}

impl Format {
    /// Whether `--repos`, `--env` and `--images` apply: the format names repositories to clone.
    fn names_repos(self) -> bool {
        self == Self::Swebench
    }

    /// Whether `--run-solutions` applies: the format's solutions are scripts.
    fn has_solution_scripts(self) -> bool {
        matches!(self, Self::Harbor | Self::TerminalBench)
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Every variant has a name: none is skipped.
        match self.to_possible_value() {
            Some(value) => f.write_str(value.get_name()),
            None => Ok(()),
        }
    }
}

/// What to import and where.
pub(crate) struct ImportOptions {
    pub format: Format,
    /// A rows file (swebench) or a folder of tasks (the others).
    pub source: PathBuf,
    /// The suite folder to write.
    pub out: PathBuf,
    /// swebench: the folder holding local clones (`owner__name` or `owner/name`).
    pub repos: Option<PathBuf>,
    /// swebench: per-repository setup and test commands.
    pub env: Vec<PathBuf>,
    /// swebench: import only these instances (empty: all).
    pub instances: Vec<String>,
    /// swebench: import only the rows of these repositories, `owner/name` (empty: all).
    pub repo_filter: Vec<String>,
    /// swebench: run each row in the official harness's prebuilt instance image instead of a
    /// Dockerfile written from its recipe.
    pub images: bool,
    /// Replace a suite already in `out`.
    pub force: bool,
    /// harbor, terminal-bench: run each solution script once, here, to make its reference patch.
    pub run_solutions: bool,
    /// Told about slow steps (a clone, a solution script) as they start.
    pub progress: Box<dyn Fn(&str) + Send + Sync>,
}

/// What an import wrote.
#[derive(Debug, Clone, Default)]
pub(crate) struct ImportReport {
    /// The suite folders written (one, or one per repository for swebench).
    pub suites: Vec<WrittenSuite>,
    pub skipped: Vec<Skipped>,
    /// Things the user should know about imported tasks (e.g. a solution without a patch).
    pub notes: Vec<String>,
}

impl ImportReport {
    pub(crate) fn tasks(&self) -> usize {
        self.suites.iter().map(|s| s.tasks).sum()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WrittenSuite {
    pub dir: PathBuf,
    pub tasks: usize,
}

/// A task that was not imported, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Skipped {
    pub task: String,
    pub reason: String,
}

/// Why one source task is left out of the suite (it is listed as skipped, with this text): the
/// import goes on with the others.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum Skip {
    /// Its Dockerfile needs a real image build.
    #[error(transparent)]
    Dockerfile(#[from] docker::DockerfileError),
    #[error("needs several containers ({file} starts {services:?})")]
    Containers {
        file: &'static str,
        services: Vec<String>,
    },
    #[error(
        "base commit {commit} is not in {} (fetch it, or clone with full history)",
        clone.display()
    )]
    MissingBase { commit: String, clone: PathBuf },
    /// The row's test patch or fix does not apply to its base commit.
    #[error("the {what} does not apply to base commit {commit}: {source}")]
    PatchDoesNotApply {
        what: &'static str,
        commit: String,
        #[source]
        source: std::sync::Arc<crate::workspace::PatchError>,
    },
    #[error("the official spec of {repo} {version} has no test command")]
    NoOfficialTestCommand { repo: String, version: String },
    #[error(
        "no official image: the SWE-bench harness has no spec for {repo}{}; give its test command in an --env file",
        match version {
            Some(version) => format!(" version {version}"),
            None => " (no version)".to_owned(),
        }
    )]
    NoOfficialImage {
        repo: String,
        version: Option<String>,
    },
    #[error(
        "no test command for {repo}: the base has neither Cargo.toml nor a Python project file; give one in an --env file"
    )]
    NoTestCommand { repo: String },
    #[error("cannot write the official environment of {repo} {version}: {source}")]
    OfficialEnvironment {
        repo: String,
        version: String,
        #[source]
        source: swebench_env::EnvironmentError,
    },
}

/// An import that cannot go on.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ImportError {
    /// An option that does not fit the format, or a source of the wrong kind.
    #[error("{0}")]
    Usage(String),
    #[error("cannot read {}: {source}", path.display())]
    Read { path: PathBuf, source: io::Error },
    #[error("{}:{line}:{column}: not a JSON row: {message}", path.display())]
    Json {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    #[error("{}: {row} has no `{field}`", path.display())]
    MissingField {
        path: PathBuf,
        row: String,
        field: String,
    },
    #[error("{}: {row}: `{field}` {message}", path.display())]
    BadField {
        path: PathBuf,
        row: String,
        field: String,
        message: String,
    },
    /// A task or settings file that cannot be parsed; `at` is `:line:column`, `:line` or "".
    #[error("{}{at}: {message}", path.display())]
    Parse {
        path: PathBuf,
        at: String,
        message: String,
    },
    #[error(
        "{} already holds a suite ({}); pass --force to replace it",
        out.display(),
        found.display()
    )]
    OutExists { out: PathBuf, found: PathBuf },
    #[error("{} already exists; pass --force to replace it", path.display())]
    Conflict { path: PathBuf },
    #[error("no local clone of {repo}: looked for {}; {why}", expected.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(" and "))]
    NoClone {
        repo: String,
        expected: Vec<PathBuf>,
        why: String,
    },
    #[error("cannot write {}: {source}", path.display())]
    Write { path: PathBuf, source: io::Error },
    #[error("{}: {message}", path.display())]
    Git { path: PathBuf, message: String },
    #[error("the suite written to {} does not load (a bug in the importer): {message}", path.display())]
    Unloadable { path: PathBuf, message: String },
}

impl ImportError {
    /// True for errors in what the user gave (exit code 2), false for failures while writing.
    pub(crate) fn is_usage(&self) -> bool {
        !matches!(
            self,
            Self::Write { .. } | Self::Git { .. } | Self::Unloadable { .. }
        )
    }
}

/// What one importer produced inside the staging folder.
#[derive(Debug, Default)]
struct Imported {
    /// Each suite's folder relative to the staging folder ("" for the staging folder itself),
    /// and its task count.
    suites: Vec<(PathBuf, usize)>,
    skipped: Vec<Skipped>,
    notes: Vec<String>,
}

impl Imported {
    fn skip(&mut self, task: impl Into<String>, reason: impl fmt::Display) {
        self.skipped.push(Skipped {
            task: task.into(),
            reason: reason.to_string(),
        });
    }
}

/// Reads `options.source` in `options.format` and writes the suite folder(s) to `options.out`.
pub(crate) async fn import(options: &ImportOptions) -> Result<ImportReport, ImportError> {
    check_options(options)?;
    if !options.source.exists() {
        return Err(ImportError::Usage(format!(
            "{}: no such file or folder",
            options.source.display()
        )));
    }
    let staging = write::Staging::new(&options.out, options.force)?;
    let name = suite_name(&options.out, options.format);
    let imported = match options.format {
        Format::Swebench => swebench::import(options, staging.path(), &name).await?,
        Format::Harbor | Format::TerminalBench => {
            container::import(options, staging.path(), &name).await?
        }
        Format::Exercism => exercism::import(options, staging.path(), &name)?,
    };
    let mut report = ImportReport {
        suites: Vec::new(),
        skipped: imported.skipped,
        notes: imported.notes,
    };
    if imported.suites.is_empty() {
        return Ok(report);
    }
    for (dir, _) in &imported.suites {
        let path = staging.path().join(dir);
        crate::suite::load(&path, None).map_err(|err| ImportError::Unloadable {
            path: options.out.join(dir),
            message: err.to_string(),
        })?;
    }
    for lock in staging.commit(options.force)? {
        report.notes.push(format!(
            "kept {}: its entries count only for tasks that did not change (run `deltabench validate` to refresh it)",
            lock.display()
        ));
    }
    report.suites = imported
        .suites
        .into_iter()
        .map(|(dir, tasks)| WrittenSuite {
            dir: if dir.as_os_str().is_empty() {
                options.out.clone()
            } else {
                options.out.join(dir)
            },
            tasks,
        })
        .collect();
    Ok(report)
}

fn check_options(options: &ImportOptions) -> Result<(), ImportError> {
    let format = options.format;
    let names_repos: fn(Format) -> bool = Format::names_repos;
    let flags = [
        (options.repos.is_some(), "--repos", names_repos),
        (!options.env.is_empty(), "--env", names_repos),
        (options.images, "--images", names_repos),
        (
            options.run_solutions,
            "--run-solutions",
            Format::has_solution_scripts,
        ),
    ];
    for (given, flag, applies) in flags {
        if given && !applies(format) {
            let formats: Vec<String> = Format::value_variants()
                .iter()
                .filter(|f| applies(**f))
                .map(ToString::to_string)
                .collect();
            return Err(ImportError::Usage(format!(
                "{flag} applies to {} only, not to {format}",
                formats.join(" and ")
            )));
        }
    }
    Ok(())
}

/// The suite's name: the `--out` folder's name (it names `deltabench run`'s output folder).
fn suite_name(out: &Path, format: Format) -> String {
    let name = out
        .file_name()
        .map(|n| task_id(&n.to_string_lossy()))
        .unwrap_or_default();
    if name == "task" || name.is_empty() {
        format.to_string()
    } else {
        name
    }
}

/// `raw` as a task id (`[A-Za-z0-9._-]+`): other characters become `-`.
fn task_id(raw: &str) -> String {
    let id: String = raw
        .trim()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .collect();
    let id = id.trim_matches('-');
    if id.is_empty() || id.chars().all(|c| c == '.') {
        "task".to_owned()
    } else {
        id.to_owned()
    }
}

/// Hands out task ids, unique within a suite (`x`, `x-2`, `x-3`, ...).
#[derive(Debug, Default)]
struct Ids(HashSet<String>);

impl Ids {
    fn claim(&mut self, raw: &str) -> String {
        let base = task_id(raw);
        let mut id = base.clone();
        let mut n = 2;
        while !self.0.insert(id.clone()) {
            id = format!("{base}-{n}");
            n += 1;
        }
        id
    }
}

impl ImportError {
    /// A file that is not what its name says, with no position.
    fn parse(path: &Path, message: impl Into<String>) -> Self {
        Self::Parse {
            path: path.to_owned(),
            at: String::new(),
            message: message.into(),
        }
    }

    /// A YAML file that does not parse (the parser's own " at line L, column C" dropped: the
    /// position is printed first).
    fn yaml(path: &Path, err: &serde_saphyr::Error) -> Self {
        let text = err.without_snippet().to_string();
        match err.location() {
            Some(at) => {
                let own = format!(" at line {}, column {}", at.line(), at.column());
                Self::Parse {
                    path: path.to_owned(),
                    at: format!(":{}:{}", at.line(), at.column()),
                    message: text.replace(&own, ""),
                }
            }
            None => Self::parse(path, text),
        }
    }

    /// A JSON file that does not parse.
    fn json(path: &Path, err: &serde_json::Error) -> Self {
        Self::Parse {
            path: path.to_owned(),
            at: format!(":{}:{}", err.line(), err.column()),
            message: json_message(err),
        }
    }
}

/// serde_json's message without its own " at line L column C".
fn json_message(err: &serde_json::Error) -> String {
    let text = err.to_string();
    text.split(" at line ").next().unwrap_or(&text).to_owned()
}

/// A timeout in seconds from a task file, as a whole number of seconds (rounded up).
fn seconds(value: Option<f64>) -> Option<std::time::Duration> {
    value
        .filter(|s| s.is_finite() && *s > 0.0)
        .map(|s| std::time::Duration::from_secs(s.ceil() as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_safe_and_unique() {
        let mut ids = Ids::default();
        assert_eq!(
            ids.claim("astropy__astropy-12907"),
            "astropy__astropy-12907"
        );
        assert_eq!(ids.claim("hello world!"), "hello-world");
        assert_eq!(ids.claim("hello world?"), "hello-world-2");
        assert_eq!(ids.claim("../.."), "..-..");
        assert_eq!(ids.claim(".."), "task");
        assert_eq!(ids.claim("éé"), "task-2");
    }
}
