//! The validated suite: what a run is planned from.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use indexmap::IndexMap;
use serde::Serialize;

use super::raw::RawSuite;
use crate::agent::harness::{HarnessConfig, HarnessKind};
use crate::agent::{CommandAgentConfig, MockConfig};
use crate::delta::VerifySpec;
use crate::support::duration_opt;
use crate::workspace::{Environment, Isolation, Network, Overlay, RepoSource};

/// A value with the place in the suite file it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located<T> {
    /// The value as validated.
    pub value: T,
    /// Line of the value in the suite file, as error messages print it.
    pub line: u64,
    /// Column of the value, as error messages print it.
    pub column: u64,
}

/// How a task is scored. Its kinds, [`MetricKind`], are derived from it: `metric: NAME` takes the
/// kebab-case name of each but `grader`, which is written `{grader: COMMAND}`.
#[derive(Debug, Clone, PartialEq, Serialize, strum::EnumDiscriminants)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[strum_discriminants(
    name(MetricKind),
    derive(strum::VariantNames, strum::IntoStaticStr, strum::EnumString),
    strum(serialize_all = "kebab-case"),
    doc = "A [`MetricSpec`] without its settings: what `metric:` names."
)]
pub enum MetricSpec {
    /// The default: passed when the diff is non-empty and the verify command exited 0 in time.
    Delta,
    /// Passed when the diff is non-empty and the verify output carries no failure token.
    DeltaToken,
    /// Passed when the verify command exited 0 in time, whatever the diff.
    ExitCode,
    /// A command of the suite's reads the diff and verify result as JSON and prints the verdict.
    Grader {
        /// The grader command, a script named in it resolved against the suite file's folder.
        command: String,
        /// The grader's wall-clock limit (`timeout:`, 60s when the suite sets none).
        #[serde(with = "duration_opt")]
        timeout: Option<Duration>,
        /// The command as the suite wrote it (a script named relative to its file's folder, as
        /// `./grade.sh`), which a copied or moved suite keeps: what the lock's digest hashes.
        #[serde(skip)]
        written: String,
    },
}

impl MetricSpec {
    /// The metric's name as trials record it: its kind's kebab-case name, or `grader:COMMAND`.
    pub fn name(&self) -> String {
        match self {
            Self::Grader { command, .. } => format!("grader:{command}"),
            named => <&str>::from(MetricKind::from(named)).to_owned(),
        }
    }

    /// [`name`](Self::name) with the grader's command as written: the same wherever the suite's
    /// folder is.
    pub fn portable_name(&self) -> String {
        match self {
            Self::Grader { written, .. } => format!("grader:{written}"),
            named => named.name(),
        }
    }
}

/// A configured agent. Serialized as `{"kind": KIND, ...its config}`, a real CLI's kind its
/// [`HarnessKind`]'s name.
#[derive(Debug, Clone, PartialEq)]
pub enum AgentSpec {
    /// Completes at once and changes nothing (built in as `noop`).
    Noop,
    /// Applies the task's reference solution (built in as `oracle`).
    Oracle,
    /// Replays a scripted event stream (`kind: mock`).
    Mock(MockConfig),
    /// Runs `sh -c RUN` in the workspace: a harness of the user's own (`kind: command`).
    Command(CommandAgentConfig),
    /// A real CLI agent, built in or defined (`kind: cli`).
    Harness {
        /// Which CLI: one of the built-in ones, or `cli` for one the file describes.
        kind: HarnessKind,
        /// How to start it and read its output, from the agent's keys.
        config: Box<HarnessConfig>,
    },
}

/// The kinds that are not a real CLI's, as an agents file names them.
const OTHER_KINDS: [&str; 4] = ["noop", "oracle", "mock", "command"];

impl Serialize for AgentSpec {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        #[serde(tag = "kind", rename_all = "snake_case")]
        enum Other<'a> {
            Noop,
            Oracle,
            Mock(&'a MockConfig),
            Command(&'a CommandAgentConfig),
        }
        #[derive(Serialize)]
        struct Harness<'a> {
            kind: HarnessKind,
            #[serde(flatten)]
            config: &'a HarnessConfig,
        }
        match self {
            Self::Noop => Other::Noop.serialize(serializer),
            Self::Oracle => Other::Oracle.serialize(serializer),
            Self::Mock(config) => Other::Mock(config).serialize(serializer),
            Self::Command(config) => Other::Command(config).serialize(serializer),
            Self::Harness { kind, config } => Harness {
                kind: *kind,
                config,
            }
            .serialize(serializer),
        }
    }
}

impl AgentSpec {
    /// The spec of a real CLI agent.
    pub fn harness(kind: HarnessKind, config: HarnessConfig) -> Self {
        Self::Harness {
            kind,
            config: Box::new(config),
        }
    }

    /// Every `kind:` an agents file may name.
    pub fn kinds() -> Vec<&'static str> {
        let harness = <HarnessKind as strum::VariantArray>::VARIANTS
            .iter()
            .map(|kind| kind.as_str());
        OTHER_KINDS.into_iter().chain(harness).collect()
    }

    /// The agent's `kind:`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Noop => OTHER_KINDS[0],
            Self::Oracle => OTHER_KINDS[1],
            Self::Mock(_) => OTHER_KINDS[2],
            Self::Command(_) => OTHER_KINDS[3],
            Self::Harness { kind, .. } => kind.as_str(),
        }
    }

    /// The kind and config, when this is a real CLI agent.
    pub fn as_harness(&self) -> Option<(HarnessKind, &HarnessConfig)> {
        match self {
            Self::Harness { kind, config } => Some((*kind, &**config)),
            Self::Noop | Self::Oracle | Self::Mock(_) | Self::Command(_) => None,
        }
    }

    /// The `network:` the agent's config sets, if any.
    pub fn network(&self) -> Option<Network> {
        match self {
            Self::Command(config) => config.network,
            _ => self.as_harness().and_then(|(_, config)| config.network),
        }
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
    /// Unique in the suite; names the task in run directories, reports and `--task`.
    pub id: String,
    /// The prompt given to the agent (`instruction:`, or the text of `instruction_file:`).
    pub instruction: String,
    /// Commit-ish the workspace starts from (the task's, else the defaults', else the suite's,
    /// else `HEAD`), with where it was written; serialized as the value alone.
    #[serde(serialize_with = "located_value")]
    pub base: Located<String>,
    /// Shell command run in the workspace before the agent (the task's, else the defaults').
    pub setup: Option<String>,
    /// `setup` runs once into a cached template instead of in every trial.
    pub prepare: bool,
    /// Hidden tests copied over the workspace after the agent: a directory or a `.patch`.
    pub tests: Option<Overlay>,
    /// `protected:` as written; `None` protects the paths the hidden tests write.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub protected: Option<Vec<String>>,
    /// The command that judges the workspace once the hidden tests are in, and its limit.
    pub verify: VerifySpec,
    /// Reference solution the `oracle` applies: a `.patch` or a directory.
    pub solution: Option<Overlay>,
    /// A script the `oracle` runs as the reference, instead of `solution`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub solution_script: Option<PathBuf>,
    /// How a trial is scored (`metric:`, default [`MetricSpec::Delta`]).
    pub metric: MetricSpec,
    /// Labels from `tags:`, which `--tag` selects tasks by.
    pub tags: Vec<String>,
    /// The agent's wall-clock limit (the task's, else the defaults'); `None`: no limit.
    #[serde(with = "duration_opt")]
    pub timeout: Option<Duration>,
    /// How the trial's workspace and agent are isolated: `session`, `worktree` (default) or
    /// `sandbox`.
    pub isolation: Isolation,
    /// The container its setup, agent and verify command run in; `None`: on the host.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub environment: Option<Environment>,
    /// How many biting mutants of the hidden tests run with each passing trial (0: none).
    pub mutants: u32,
}

fn located_value<S: serde::Serializer>(v: &Located<String>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&v.value)
}

/// A validated suite.
#[derive(Debug, Clone, Serialize)]
pub struct Suite {
    /// `name:`; names the default output folder.
    pub name: String,
    /// `description:`, free text for people.
    pub description: Option<String>,
    /// The suite file.
    pub path: PathBuf,
    /// sha256 of the suite file and the agents file, if any.
    pub digest: String,
    /// Where tasks' workspaces come from (`repo:`, resolved against the suite file's folder).
    pub repo: RepoSource,
    /// Every agent the suite and the agents file define, by name, a matrix as its combinations.
    pub agents: IndexMap<String, AgentSpec>,
    /// The agents a `matrix:` expanded into, with their base name and factor levels.
    pub variants: IndexMap<String, AgentVariant>,
    /// The tasks, in file order.
    pub tasks: Vec<Task>,
    /// The most bytes of changed content a trial's diff may hold.
    pub max_diff: u64,
    /// `FROM` images replaced when environments are built (`base_images:`, `--base-image`).
    pub base_images: IndexMap<String, String>,
    /// The `--agents` file and the agents it names (a matrix by its base name), in its order:
    /// they replace the suite's agents as the ones a run without `--agent` runs.
    pub agents_file: Option<(PathBuf, Vec<String>)>,
}

impl Suite {
    /// The agents a run without `--agent` runs: the agents file's when one is given, else the
    /// suite's (matrix bases by name, each standing for its combinations).
    pub fn default_agents(&self) -> Vec<String> {
        if let Some((_, names)) = &self.agents_file {
            return names.clone();
        }
        let mut names: Vec<String> = Vec::new();
        for name in self.agents.keys() {
            let name = self
                .variants
                .get(name)
                .map_or(name.as_str(), |v| v.base.as_str());
            if !names.iter().any(|n| n == name) {
                names.push(name.to_owned());
            }
        }
        names
    }

    /// Where agent `name` (or the matrix it belongs to) was defined: `--agents FILE` or the
    /// suite file; built-in agents nowhere.
    pub fn agent_source(&self, name: &str) -> &'static str {
        let base = self.variants.get(name).map_or(name, |v| v.base.as_str());
        match &self.agents_file {
            Some((_, names)) if names.iter().any(|n| n == base) => "--agents",
            _ if self.agents.contains_key(name) => "suite",
            _ => "built in",
        }
    }
}

/// `max_diff` when the suite does not set it.
pub const DEFAULT_MAX_DIFF: u64 = 20 * 1024 * 1024;

/// One combination of an ablation matrix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct AgentVariant {
    /// The name the matrix agent has in the file, which its combinations share.
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

/// The JSON Schema of the suite file.
pub fn json_schema() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(RawSuite)).unwrap_or_default()
}

/// Agent configurations as recorded in a manifest.
pub fn agent_configs(agents: &IndexMap<String, AgentSpec>) -> IndexMap<String, serde_json::Value> {
    agents
        .iter()
        .map(|(name, spec)| (name.clone(), serde_json::to_value(spec).unwrap_or_default()))
        .collect()
}
