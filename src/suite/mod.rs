//! Suite files: YAML in, a validated [`Suite`] out, or an error with file, line and column.
//!
//! Loading is two steps, as in ripgrep's low/high argument split: [`raw`] records the YAML as
//! written (with locations), and [`load`] checks every value (paths exist, durations parse,
//! strategies and kinds are known, ids are unique) before anything runs.

mod lock;
mod raw;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use indexmap::IndexMap;
use serde::Serialize;
use serde_saphyr::Spanned;
use sha2::{Digest, Sha256};

use crate::agent::harness::{Endpoint, HarnessConfig, HarnessKind};
use crate::agent::{CommandAgentConfig, MockConfig};
use crate::delta::VerifySpec;
use crate::metric::METRIC_NAMES;
use crate::workspace::{Isolation, Network, Overlay};

pub use lock::{LockError, SuiteLock, lock_path, task_digest, unvalidated};
pub use raw::{RawAgent, RawAgentsFile, RawSuite};
use raw::{RawDefaults, RawMetric, RawTask, RawVerify, loc};

/// The agent kinds a configuration may name.
pub const AGENT_KINDS: [&str; 10] = [
    "noop",
    "oracle",
    "mock",
    "command",
    "claude-code",
    "codex",
    "gemini-cli",
    "opencode",
    "mini-swe-agent",
    "aider",
];
/// Agents that exist without being configured.
pub const BUILTIN_AGENTS: [&str; 2] = ["oracle", "noop"];
/// The default grader timeout.
const GRADER_TIMEOUT: Duration = Duration::from_secs(60);

/// A suite file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SuiteError {
    #[error("cannot read {}: {message}", path.display())]
    Read { path: PathBuf, message: String },
    #[error("{}:{line}:{column}: {message}", path.display())]
    At {
        path: PathBuf,
        line: u64,
        column: u64,
        message: String,
        /// The offending line with a caret under the column.
        snippet: String,
    },
    /// An error in a file the suite refers to (a model script), located in that file.
    #[error("{0}")]
    Referenced(String),
}

impl SuiteError {
    pub fn snippet(&self) -> Option<&str> {
        match self {
            Self::At { snippet, .. } => Some(snippet),
            Self::Read { .. } | Self::Referenced(_) => None,
        }
    }
}

/// A value with the place in the suite file it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located<T> {
    pub value: T,
    pub line: u64,
    pub column: u64,
}

/// What kind of repository `repo:` names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RepoKind {
    WorkTree,
    Bare,
    Bundle,
    PlainDir,
}

/// The suite's repository.
#[derive(Debug, Clone, Serialize)]
pub struct RepoSource {
    pub path: PathBuf,
    pub kind: RepoKind,
}

/// How a task is scored.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum MetricSpec {
    Delta,
    DeltaToken,
    ExitCode,
    Grader {
        command: String,
        #[serde(with = "duration_opt")]
        timeout: Option<Duration>,
    },
}

impl MetricSpec {
    pub fn name(&self) -> String {
        match self {
            Self::Delta => "delta".into(),
            Self::DeltaToken => "delta-token".into(),
            Self::ExitCode => "exit-code".into(),
            Self::Grader { command, .. } => format!("grader:{command}"),
        }
    }
}

/// A configured agent.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum AgentSpec {
    Noop,
    Oracle,
    Mock(MockConfig),
    Command(CommandAgentConfig),
    #[serde(rename = "claude-code")]
    ClaudeCode(HarnessConfig),
    Codex(HarnessConfig),
    #[serde(rename = "gemini-cli")]
    GeminiCli(HarnessConfig),
    Opencode(HarnessConfig),
    #[serde(rename = "mini-swe-agent")]
    MiniSweAgent(HarnessConfig),
    Aider(HarnessConfig),
}

impl AgentSpec {
    /// The spec of a real CLI agent.
    pub fn harness(kind: HarnessKind, config: HarnessConfig) -> Self {
        match kind {
            HarnessKind::ClaudeCode => Self::ClaudeCode(config),
            HarnessKind::Codex => Self::Codex(config),
            HarnessKind::GeminiCli => Self::GeminiCli(config),
            HarnessKind::Opencode => Self::Opencode(config),
            HarnessKind::MiniSweAgent => Self::MiniSweAgent(config),
            HarnessKind::Aider => Self::Aider(config),
        }
    }

    /// The kind and config, when this is a real CLI agent.
    pub fn as_harness(&self) -> Option<(HarnessKind, &HarnessConfig)> {
        Some(match self {
            Self::ClaudeCode(c) => (HarnessKind::ClaudeCode, c),
            Self::Codex(c) => (HarnessKind::Codex, c),
            Self::GeminiCli(c) => (HarnessKind::GeminiCli, c),
            Self::Opencode(c) => (HarnessKind::Opencode, c),
            Self::MiniSweAgent(c) => (HarnessKind::MiniSweAgent, c),
            Self::Aider(c) => (HarnessKind::Aider, c),
            Self::Noop | Self::Oracle | Self::Mock(_) | Self::Command(_) => return None,
        })
    }

    /// The environment the agent's config adds, and its API key: secrets to redact.
    pub fn secrets(&self) -> (Option<&BTreeMap<String, String>>, Option<&str>) {
        match self {
            Self::Command(config) => (Some(&config.env), None),
            _ => match self.as_harness() {
                Some((_, config)) => (Some(&config.env), config.api_key.as_deref()),
                None => (None, None),
            },
        }
    }
}

/// A validated task.
#[derive(Debug, Clone, Serialize)]
pub struct Task {
    pub id: String,
    pub instruction: String,
    #[serde(serialize_with = "located_value")]
    pub base: Located<String>,
    pub setup: Option<String>,
    pub tests: Option<Overlay>,
    /// `protected:` as written; `None` protects the paths the hidden tests write.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protected: Option<Vec<String>>,
    pub verify: VerifySpec,
    pub solution: Option<Overlay>,
    pub metric: MetricSpec,
    pub tags: Vec<String>,
    #[serde(with = "duration_opt")]
    pub timeout: Option<Duration>,
    pub isolation: Isolation,
}

fn located_value<S: serde::Serializer>(v: &Located<String>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&v.value)
}

/// A validated suite.
#[derive(Debug, Clone, Serialize)]
pub struct Suite {
    pub name: String,
    pub description: Option<String>,
    /// The suite file.
    pub path: PathBuf,
    /// sha256 of the suite file and the agents file, if any.
    pub digest: String,
    pub repo: RepoSource,
    pub agents: IndexMap<String, AgentSpec>,
    /// The agents a `matrix:` expanded into, with their base name and factor levels.
    pub variants: IndexMap<String, AgentVariant>,
    pub tasks: Vec<Task>,
    /// The most bytes of changed content a trial's diff may hold.
    pub max_diff: u64,
}

/// `max_diff` when the suite does not set it.
pub const DEFAULT_MAX_DIFF: u64 = 20 * 1024 * 1024;

/// One combination of an ablation matrix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct AgentVariant {
    pub base: String,
    /// Factor to level label, in the matrix's order.
    pub factors: IndexMap<String, String>,
}

impl Suite {
    /// The agents `name` selects: itself, or every combination of a matrix named `name`.
    pub fn select(&self, name: &str) -> Vec<(String, AgentSpec)> {
        if let Some(spec) = self.agent(name) {
            return vec![(name.to_owned(), spec)];
        }
        self.variants
            .iter()
            .filter(|(_, variant)| variant.base == name)
            .filter_map(|(full, _)| Some((full.clone(), self.agents.get(full)?.clone())))
            .collect()
    }

    /// A configured agent, or one of the built-ins (`oracle`, `noop`).
    pub fn agent(&self, name: &str) -> Option<AgentSpec> {
        self.agents.get(name).cloned().or(match name {
            "oracle" => Some(AgentSpec::Oracle),
            "noop" => Some(AgentSpec::Noop),
            _ => None,
        })
    }
}

/// Where the source text of one file is, for error messages.
struct Source<'a> {
    path: &'a Path,
    text: &'a str,
    dir: PathBuf,
}

impl Source<'_> {
    fn error(&self, (line, column): (u64, u64), message: impl Into<String>) -> SuiteError {
        SuiteError::At {
            path: self.path.to_owned(),
            line,
            column,
            message: message.into(),
            snippet: snippet(self.text, line, column),
        }
    }

    fn at<T>(&self, spanned: &Spanned<T>, message: impl Into<String>) -> SuiteError {
        self.error(loc(spanned), message)
    }

    /// A path relative to this file that must exist.
    fn existing_path(&self, spanned: &Spanned<String>, what: &str) -> Result<PathBuf, SuiteError> {
        let path = self.dir.join(&spanned.value);
        if path.exists() {
            Ok(path)
        } else {
            Err(self.at(
                spanned,
                format!(
                    "{what} '{}' does not exist ({})",
                    spanned.value,
                    path.display()
                ),
            ))
        }
    }

    fn duration(&self, spanned: &Spanned<String>) -> Result<Duration, SuiteError> {
        parse_duration(&spanned.value).map_err(|message| self.at(spanned, message))
    }

    fn parse<T: for<'de> serde::Deserialize<'de>>(&self) -> Result<T, SuiteError> {
        serde_saphyr::from_str(self.text).map_err(|err| {
            let (line, column) = err
                .location()
                .map(|l| (l.line(), l.column()))
                .unwrap_or((1, 1));
            self.error((line, column), yaml_message(&err))
        })
    }
}

/// The message of a YAML error without its own "at line N, column M" (the location is printed
/// in front); a "(defined at line ...)" note about an alias stays.
fn yaml_message(err: &serde_saphyr::Error) -> String {
    let text = err.without_snippet().to_string();
    let own_location = regex::Regex::new(r" at line \d+, column \d+")
        .ok()
        .and_then(|re| {
            re.find_iter(&text).find(|m| {
                let before = &text[..m.start()];
                !before.ends_with("(defined") && !before.ends_with("(used")
            })
        });
    let text = match own_location {
        Some(m) => format!("{}{}", &text[..m.start()], &text[m.end()..]),
        None => text,
    };
    if text.starts_with("budget breached") {
        format!(
            "the document exceeds the parser's limits (too deeply nested, or an alias bomb): {text}"
        )
    } else {
        text
    }
}

fn snippet(text: &str, line: u64, column: u64) -> String {
    let Some(content) = text.lines().nth(line.saturating_sub(1) as usize) else {
        return String::new();
    };
    // Long lines (a 5 MB value) are cut to a window around the column.
    const WINDOW: usize = 120;
    let chars: Vec<char> = content.chars().collect();
    let col = (column.saturating_sub(1) as usize).min(chars.len());
    let start = col.saturating_sub(WINDOW / 2);
    let end = (start + WINDOW).min(chars.len());
    let mut shown: String = chars[start..end].iter().collect();
    let mut offset = col - start;
    if start > 0 {
        shown.insert_str(0, "...");
        offset += 3;
    }
    if end < chars.len() {
        shown.push_str("...");
    }
    let gutter = line.to_string().len();
    let pad = " ".repeat(gutter);
    let caret = " ".repeat(offset);
    format!("{pad} |\n{line} | {shown}\n{pad} | {caret}^")
}

/// Parses `500ms`, `90s`, `10m`, `1h30m`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let parsed = humantime::parse_duration(text.trim()).map_err(|err| {
        format!("invalid duration '{text}': {err}; write a number and a unit, e.g. 500ms, 90s, 10m or 1h")
    })?;
    if parsed.is_zero() {
        return Err(format!(
            "invalid duration '{text}': it must be greater than zero"
        ));
    }
    // Deadlines are added to the clock: an absurd one would overflow it.
    const MAX: Duration = Duration::from_secs(366 * 24 * 3600);
    if parsed > MAX {
        return Err(format!(
            "invalid duration '{text}': the longest allowed is 366d"
        ));
    }
    Ok(parsed)
}

/// Serde for `Option<Duration>` as a human string (`90s`).
pub mod duration_opt {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(value: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match value {
            Some(d) => s.serialize_str(&humantime::format_duration(*d).to_string()),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        Option::<String>::deserialize(d)?
            .map(|text| super::parse_duration(&text).map_err(serde::de::Error::custom))
            .transpose()
    }
}

fn is_safe_name(name: &str) -> bool {
    !name.is_empty()
        && name != "."
        && name != ".."
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// Finds the suite file: `path` itself, or `suite.yaml` / `suite.yml` inside it.
pub fn suite_file(path: &Path) -> Result<PathBuf, SuiteError> {
    if path.is_dir() {
        for name in ["suite.yaml", "suite.yml"] {
            let candidate = path.join(name);
            if candidate.is_file() {
                return Ok(candidate);
            }
        }
        return Err(SuiteError::Read {
            path: path.to_owned(),
            message: "the folder has no suite.yaml".into(),
        });
    }
    if path.is_file() {
        Ok(path.to_owned())
    } else {
        Err(SuiteError::Read {
            path: path.to_owned(),
            message: "no such file or folder".into(),
        })
    }
}

fn read(path: &Path) -> Result<String, SuiteError> {
    std::fs::read_to_string(path).map_err(|err| SuiteError::Read {
        path: path.to_owned(),
        message: err.to_string(),
    })
}

/// Loads and validates a suite (a file, or a folder holding `suite.yaml`) and an optional agents
/// file whose agents override the suite's.
pub fn load(suite: &Path, agents_file: Option<&Path>) -> Result<Suite, SuiteError> {
    let path = suite_file(suite)?;
    // Absolute, so relative paths resolve the same whatever the working directory.
    let path = path.canonicalize().unwrap_or(path);
    let text = read(&path)?;
    let source = Source {
        path: &path,
        text: &text,
        dir: path.parent().map(Path::to_owned).unwrap_or_default(),
    };
    let raw: RawSuite = source.parse()?;
    let mut digest = Sha256::new();
    digest.update(text.as_bytes());

    let mut agents = IndexMap::new();
    let mut variants = IndexMap::new();
    add_agents(&source, &raw.agents, &mut agents, &mut variants)?;
    if let Some(agents_path) = agents_file {
        let agents_text = read(agents_path)?;
        digest.update(agents_text.as_bytes());
        let agents_source = Source {
            path: agents_path,
            text: &agents_text,
            dir: agents_path.parent().map(Path::to_owned).unwrap_or_default(),
        };
        let file: RawAgentsFile = agents_source.parse()?;
        add_agents(&agents_source, &file.agents, &mut agents, &mut variants)?;
    }

    let name = raw.name.value.trim().to_owned();
    if name.is_empty() {
        return Err(source.at(&raw.name, "the suite `name` is empty"));
    }
    let repo = repo_source(&source, &raw.repo)?;
    let max_diff = match &raw.max_diff {
        None => DEFAULT_MAX_DIFF,
        Some(size) => match size.value.trim().parse::<bytesize::ByteSize>() {
            Ok(bytes) if bytes.as_u64() > 0 => bytes.as_u64(),
            _ => {
                return Err(source.at(
                    size,
                    format!(
                        "invalid max_diff '{}': use a size greater than zero such as 20MiB, 500KB or 1048576",
                        size.value
                    ),
                ));
            }
        },
    };
    let mut tasks = Vec::with_capacity(raw.tasks.value.len());
    let mut seen: HashMap<String, u64> = HashMap::new();
    for raw_task in &raw.tasks.value {
        let task = task(&source, &raw, &raw.defaults, raw_task)?;
        if let Some(first) = seen.insert(task.id.clone(), loc(&raw_task.id).0) {
            return Err(source.at(
                &raw_task.id,
                format!(
                    "duplicate task id '{}' (first defined on line {first})",
                    task.id
                ),
            ));
        }
        tasks.push(task);
    }
    if tasks.is_empty() {
        return Err(source.at(
            &raw.tasks,
            "the suite has no tasks; add at least one under `tasks:`",
        ));
    }
    // What the files name counts too, so resume and merge notice an edited hidden test.
    for task in &tasks {
        digest.update(task.instruction.as_bytes());
        for overlay in [&task.tests, &task.solution].into_iter().flatten() {
            let (Overlay::Dir(path) | Overlay::Patch(path)) = overlay;
            hash_tree(&mut digest, path);
        }
    }
    for spec in agents.values() {
        if let Some((_, config)) = spec.as_harness()
            && let Some(Endpoint::Scripted(script)) = &config.endpoint
        {
            hash_tree(&mut digest, script);
        }
    }
    Ok(Suite {
        name,
        description: raw.description.clone(),
        path: path.clone(),
        digest: format!("sha256:{:x}", digest.finalize()),
        repo,
        agents,
        variants,
        tasks,
        max_diff,
    })
}

/// Adds a file's bytes, or a folder's file names and bytes in sorted order, to `digest`.
pub(crate) fn hash_tree(digest: &mut Sha256, path: &Path) {
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

/// Validates `raw` agents into `agents`, expanding each `matrix:` into one agent per combination.
fn add_agents(
    source: &Source,
    raw: &IndexMap<String, RawAgent>,
    agents: &mut IndexMap<String, AgentSpec>,
    variants: &mut IndexMap<String, AgentVariant>,
) -> Result<(), SuiteError> {
    for (name, agent) in raw {
        if !is_safe_name(name) {
            return Err(source.at(
                &agent.kind,
                format!(
                    "agent name '{name}' is not allowed: use letters, digits, '.', '_' and '-'"
                ),
            ));
        }
        let Some(matrix) = &agent.matrix else {
            agents.insert(name.clone(), agent_spec(source, name, agent)?);
            continue;
        };
        let mut combinations: Vec<Vec<(&str, &str, &str)>> = vec![Vec::new()];
        for (factor, levels) in matrix {
            if levels.value.0.is_empty() {
                return Err(source.at(
                    levels,
                    format!("factor '{factor}' of agent '{name}' has no levels"),
                ));
            }
            combinations = combinations
                .into_iter()
                .flat_map(|combo| {
                    levels.value.0.iter().map(move |(label, value)| {
                        let mut next = combo.clone();
                        next.push((factor.as_str(), label.as_str(), value.as_str()));
                        next
                    })
                })
                .collect();
        }
        for combo in combinations {
            let mut variant = agent.clone();
            variant.matrix = None;
            for (factor, _, value) in &combo {
                set_factor(source, name, &mut variant, factor, value, &matrix[*factor])?;
            }
            let labels: Vec<String> = combo
                .iter()
                .map(|(f, label, _)| format!("{f}={label}"))
                .collect();
            let full = format!("{name}[{}]", labels.join(","));
            if agents.contains_key(&full) {
                return Err(source.at(
                    &agent.kind,
                    format!("agent '{full}' is defined twice (repeated level labels?)"),
                ));
            }
            agents.insert(full.clone(), agent_spec(source, &full, &variant)?);
            variants.insert(
                full,
                AgentVariant {
                    base: name.clone(),
                    factors: combo
                        .iter()
                        .map(|(f, label, _)| ((*f).to_owned(), (*label).to_owned()))
                        .collect(),
                },
            );
        }
    }
    Ok(())
}

/// The keys a `matrix:` factor may vary.
pub const MATRIX_FACTORS: [&str; 8] = [
    "run",
    "timeout",
    "delay",
    "model",
    "max_turns",
    "permission_mode",
    "append_system_prompt",
    "env.NAME",
];

fn set_factor(
    source: &Source,
    name: &str,
    agent: &mut RawAgent,
    factor: &str,
    value: &str,
    at: &Spanned<raw::RawLevels>,
) -> Result<(), SuiteError> {
    let spanned = Spanned {
        value: value.to_owned(),
        referenced: at.referenced,
        defined: at.defined,
    };
    match factor {
        "run" => agent.run = Some(spanned),
        "timeout" => agent.timeout = Some(spanned),
        "delay" => agent.delay = Some(spanned),
        "model" => agent.model = Some(spanned),
        "permission_mode" => agent.permission_mode = Some(spanned),
        "append_system_prompt" => agent.append_system_prompt = Some(spanned),
        "max_turns" => {
            let turns = value.parse().map_err(|_| {
                source.at(
                    at,
                    format!("max_turns level '{value}' of agent '{name}' is not a whole number"),
                )
            })?;
            agent.max_turns = Some(Spanned {
                value: turns,
                referenced: at.referenced,
                defined: at.defined,
            });
        }
        _ => match factor.strip_prefix("env.") {
            Some(key) if !key.is_empty() => {
                agent
                    .env
                    .get_or_insert_default()
                    .insert(key.to_owned(), value.to_owned());
            }
            _ => {
                return Err(source.at(
                    at,
                    format!(
                        "factor '{factor}' of agent '{name}' is not a key an ablation can vary. Valid factors: {}",
                        MATRIX_FACTORS.join(", ")
                    ),
                ));
            }
        },
    }
    Ok(())
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

fn agent_spec(source: &Source, name: &str, agent: &RawAgent) -> Result<AgentSpec, SuiteError> {
    let kind = agent.kind.value.as_str();
    let allowed: &[&str] = match kind {
        "noop" | "oracle" => &[],
        "mock" => &[
            "responses",
            "artifacts",
            "delay",
            "simulate_error",
            "simulate_panic",
            "apply_writes",
        ],
        "command" => &["run", "timeout", "env", "network"],
        other if HarnessKind::parse(other).is_some() => {
            return harness_spec(
                source,
                name,
                agent,
                HarnessKind::parse(other).expect("parsed"),
            );
        }
        other => {
            return Err(source.at(
                &agent.kind,
                format!(
                    "unknown agent kind '{other}' for agent '{name}'. Valid kinds: {}",
                    AGENT_KINDS.join(", ")
                ),
            ));
        }
    };
    for (key, location) in agent.keys_set() {
        if !allowed.contains(&key) {
            let valid = if allowed.is_empty() {
                "none".to_owned()
            } else {
                allowed.join(", ")
            };
            return Err(source.error(
                location.unwrap_or(loc(&agent.kind)),
                format!("`{key}` does not apply to agent '{name}' of kind '{kind}'. Valid keys for it: {valid}"),
            ));
        }
    }
    Ok(match kind {
        "noop" => AgentSpec::Noop,
        "oracle" => AgentSpec::Oracle,
        "mock" => AgentSpec::Mock(MockConfig {
            responses: agent.responses.clone().unwrap_or_default(),
            artifacts: agent.artifacts.clone().unwrap_or_default(),
            delay: agent
                .delay
                .as_ref()
                .map(|d| source.duration(d))
                .transpose()?,
            simulate_error: agent.simulate_error.clone(),
            simulate_panic: agent.simulate_panic,
            apply_writes: agent.apply_writes.unwrap_or(false),
        }),
        _ => {
            let Some(run) = &agent.run else {
                return Err(source.at(
                    &agent.kind,
                    format!(
                        "agent '{name}' of kind 'command' needs `run`: the shell command to start"
                    ),
                ));
            };
            AgentSpec::Command(CommandAgentConfig {
                run: resolve_command(source, run)?,
                timeout: agent
                    .timeout
                    .as_ref()
                    .map(|t| source.duration(t))
                    .transpose()?,
                env: agent.env.clone().unwrap_or_default(),
                network: agent_network(source, agent)?,
            })
        }
    })
}

/// The agent's `network:`, `none` when unset.
fn agent_network(source: &Source, agent: &RawAgent) -> Result<Network, SuiteError> {
    agent
        .network
        .as_ref()
        .map(|n| {
            n.value
                .parse()
                .map_err(|err| source.at(n, format!("{err}")))
        })
        .transpose()
        .map(Option::unwrap_or_default)
}

/// Validates a real CLI agent: only the keys its kind supports, a known permission mode, a
/// parseable endpoint whose script exists.
fn harness_spec(
    source: &Source,
    name: &str,
    agent: &RawAgent,
    kind: HarnessKind,
) -> Result<AgentSpec, SuiteError> {
    let allowed = kind.keys();
    for (key, location) in agent.keys_set() {
        if !allowed.contains(&key) {
            let why = match key {
                "max_turns" => format!(" ({kind} has no turn limit to set)"),
                "permission_mode" => format!(" ({kind} has one headless mode, always used)"),
                "append_system_prompt" => format!(" ({kind} has no system prompt to add to)"),
                _ => String::new(),
            };
            return Err(source.error(
                location.unwrap_or(loc(&agent.kind)),
                format!(
                    "`{key}` does not apply to agent '{name}' of kind '{kind}'{why}. Valid keys for it: {}",
                    allowed.join(", ")
                ),
            ));
        }
    }
    if let Some(mode) = &agent.permission_mode
        && !kind.permission_modes().contains(&mode.value.as_str())
    {
        return Err(source.at(
            mode,
            format!(
                "unknown permission_mode '{}' for {kind}. Valid modes: {}",
                mode.value,
                kind.permission_modes().join(", ")
            ),
        ));
    }
    if let Some(args) = &agent.args
        && let Some((arg, (flag, instead))) = args
            .value
            .iter()
            .find_map(|arg| Some((arg, kind.reserved_flag(arg)?)))
    {
        return Err(source.at(
            args,
            format!(
                "`args` may not hold '{arg}': deltabench passes {flag} to {kind} itself ({instead})"
            ),
        ));
    }
    if let Some(turns) = &agent.max_turns
        && turns.value == 0
    {
        return Err(source.at(turns, "max_turns must be at least 1"));
    }
    let endpoint = agent
        .endpoint
        .as_ref()
        .map(|text| -> Result<Endpoint, SuiteError> {
            match Endpoint::parse(&text.value).map_err(|err| source.at(text, err))? {
                Endpoint::Scripted(path) => {
                    let full = source.dir.join(&path);
                    if !full.is_file() {
                        return Err(source.at(
                            text,
                            format!("the endpoint's script {} does not exist", full.display()),
                        ));
                    }
                    let full = full.canonicalize().unwrap_or(full);
                    crate::model::Script::load(&full)
                        .map_err(|err| SuiteError::Referenced(err.to_string()))?;
                    Ok(Endpoint::Scripted(full))
                }
                url => Ok(url),
            }
        })
        .transpose()?;
    if kind == HarnessKind::Codex
        && agent.model.is_none()
        && let Some(endpoint) = &agent.endpoint
    {
        return Err(source.at(
            endpoint,
            "codex with an `endpoint:` needs `model:` too: its provider for the endpoint has no default model",
        ));
    }
    let binary = agent
        .binary
        .as_ref()
        .map(|binary| {
            let path = PathBuf::from(&binary.value);
            let path = if binary.value.starts_with("./") || binary.value.starts_with("../") {
                source.dir.join(path)
            } else {
                path
            };
            // A name is looked up on PATH when the run starts; a path must be there now.
            if path.components().count() > 1 && !path.is_file() {
                return Err(source.at(
                    binary,
                    format!(
                        "`binary: {}`: {} is not a file",
                        binary.value,
                        path.display()
                    ),
                ));
            }
            Ok(path)
        })
        .transpose()?;
    Ok(AgentSpec::harness(
        kind,
        HarnessConfig {
            model: agent.model.as_ref().map(|m| m.value.clone()),
            max_turns: agent.max_turns.as_ref().map(|t| t.value),
            permission_mode: agent.permission_mode.as_ref().map(|m| m.value.clone()),
            append_system_prompt: agent.append_system_prompt.as_ref().map(|p| p.value.clone()),
            args: agent
                .args
                .as_ref()
                .map(|a| a.value.clone())
                .unwrap_or_default(),
            env: agent.env.clone().unwrap_or_default(),
            binary,
            endpoint,
            api_key: agent.api_key.clone(),
            timeout: agent
                .timeout
                .as_ref()
                .map(|t| source.duration(t))
                .transpose()?,
            network: agent_network(source, agent)?,
            price: agent.price,
        },
    ))
}

/// Makes a leading `./x` or `../x` in a command line absolute, relative to the defining file:
/// the command runs in the workspace, not next to the suite.
fn resolve_command(source: &Source, run: &Spanned<String>) -> Result<String, SuiteError> {
    let line = run.value.trim();
    if line.is_empty() {
        return Err(source.at(run, "`run` is empty"));
    }
    let (first, rest) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
    if !(first.starts_with("./") || first.starts_with("../")) {
        return Ok(line.to_owned());
    }
    let path = source.dir.join(first);
    if !path.is_file() {
        return Err(source.at(
            run,
            format!("agent script '{first}' does not exist ({})", path.display()),
        ));
    }
    let path = path.canonicalize().unwrap_or(path);
    let quoted = shell_quote(&path.to_string_lossy());
    Ok(if rest.is_empty() {
        quoted
    } else {
        format!("{quoted} {rest}")
    })
}

fn shell_quote(text: &str) -> String {
    if text
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "/._-+=:,@".contains(c))
    {
        text.to_owned()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

fn task(
    source: &Source,
    raw: &RawSuite,
    defaults: &RawDefaults,
    t: &RawTask,
) -> Result<Task, SuiteError> {
    let id = t.id.value.clone();
    if !is_safe_name(&id) {
        return Err(source.at(
            &t.id,
            format!("task id '{id}' is not allowed: use letters, digits, '.', '_' and '-'"),
        ));
    }
    let instruction = match (&t.instruction, &t.instruction_file) {
        (Some(text), None) => text.value.clone(),
        (None, Some(file)) => {
            let path = source.existing_path(file, "instruction_file")?;
            std::fs::read_to_string(&path)
                .map_err(|err| source.at(file, format!("cannot read {}: {err}", path.display())))?
        }
        (Some(_), Some(file)) => {
            return Err(source.at(
                file,
                format!("task '{id}' sets both `instruction` and `instruction_file`; keep one"),
            ));
        }
        (None, None) => {
            return Err(source.at(
                &t.id,
                format!("task '{id}' has no `instruction` or `instruction_file`"),
            ));
        }
    };
    if instruction.trim().is_empty() {
        return Err(source.at(&t.id, format!("task '{id}' has an empty instruction")));
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
    let overlay =
        |field: &Option<Spanned<String>>, what: &str| -> Result<Option<Overlay>, SuiteError> {
            field
                .as_ref()
                .map(|p| source.existing_path(p, what).map(Overlay::from_path))
                .transpose()
        };
    let verify = match t.verify.as_ref().or(defaults.verify.as_ref()) {
        Some(v) => verify_spec(source, v)?,
        None => {
            return Err(source.at(
                &t.id,
                format!(
                    "task '{id}' has no `verify` command; set it on the task or under `defaults:`"
                ),
            ));
        }
    };
    let metric = match t.metric.as_ref().or(defaults.metric.as_ref()) {
        Some(m) => metric_spec(source, m)?,
        None => MetricSpec::Delta,
    };
    let isolation = match t.isolation.as_ref().or(defaults.isolation.as_ref()) {
        Some(s) => s
            .value
            .parse()
            .map_err(|err| source.at(s, format!("{err}")))?,
        None => Isolation::Worktree,
    };
    let timeout = t
        .timeout
        .as_ref()
        .or(defaults.timeout.as_ref())
        .map(|d| source.duration(d))
        .transpose()?;
    let setup = t
        .setup
        .as_ref()
        .or(defaults.setup.as_ref())
        .map(|s| s.value.clone());
    let mut tags = defaults.tags.clone().unwrap_or_default();
    for tag in t.tags.iter().flatten() {
        if !tags.contains(tag) {
            tags.push(tag.clone());
        }
    }
    Ok(Task {
        id,
        instruction,
        base,
        setup,
        tests: overlay(&t.tests, "tests")?,
        protected: t.protected.clone(),
        verify,
        solution: overlay(&t.solution, "solution")?,
        metric,
        tags,
        timeout,
        isolation,
    })
}

fn verify_spec(source: &Source, v: &Spanned<RawVerify>) -> Result<VerifySpec, SuiteError> {
    if v.value.run.trim().is_empty() {
        return Err(source.at(v, "the verify command is empty"));
    }
    let timeout = v
        .value
        .timeout
        .as_deref()
        .map(|t| parse_duration(t).map_err(|message| source.at(v, message)))
        .transpose()?;
    Ok(VerifySpec {
        run: v.value.run.clone(),
        timeout,
    })
}

fn metric_spec(source: &Source, m: &Spanned<RawMetric>) -> Result<MetricSpec, SuiteError> {
    match &m.value {
        RawMetric::Named(name) => match name.as_str() {
            "delta" => Ok(MetricSpec::Delta),
            "delta-token" => Ok(MetricSpec::DeltaToken),
            "exit-code" => Ok(MetricSpec::ExitCode),
            other => Err(source.at(
                m,
                format!(
                    "unknown metric '{other}'. Valid metrics: {}, or {{grader: COMMAND}}",
                    METRIC_NAMES.join(", ")
                ),
            )),
        },
        RawMetric::Grader { command, timeout } => {
            let spanned = Spanned {
                value: command.clone(),
                referenced: m.referenced,
                defined: m.defined,
            };
            Ok(MetricSpec::Grader {
                command: resolve_command(source, &spanned)?,
                timeout: Some(
                    timeout
                        .as_deref()
                        .map(|t| parse_duration(t).map_err(|message| source.at(m, message)))
                        .transpose()?
                        .unwrap_or(GRADER_TIMEOUT),
                ),
            })
        }
    }
}

/// The JSON Schema of the suite file.
pub fn json_schema() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(RawSuite)).unwrap_or_default()
}

impl fmt::Display for RepoKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::WorkTree => "git work tree",
            Self::Bare => "bare git repository",
            Self::Bundle => "git bundle",
            Self::PlainDir => "plain directory",
        })
    }
}

/// Agent configurations as recorded in a manifest.
pub fn agent_configs(agents: &IndexMap<String, AgentSpec>) -> IndexMap<String, serde_json::Value> {
    agents
        .iter()
        .map(|(name, spec)| (name.clone(), serde_json::to_value(spec).unwrap_or_default()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_and_absurd_ones_are_refused() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert!(
            parse_duration("0s")
                .unwrap_err()
                .contains("greater than zero")
        );
        // Added to the clock, this would overflow it and panic the runner.
        assert!(
            parse_duration("500000000000y")
                .unwrap_err()
                .contains("366d")
        );
    }

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
