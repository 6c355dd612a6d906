//! The suite file as written: a direct record of the YAML, with source locations.
//!
//! Nothing here is validated beyond its shape; [`super::load`] turns these into a [`super::Suite`].

use std::collections::BTreeMap;

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_saphyr::Spanned;

use crate::agent::{MockArtifact, SimulatedError, StreamEvent};

/// A deltabench suite: a repository, agents, and tasks to run them on.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "deltabench suite")]
pub(crate) struct RawSuite {
    /// Suite name; names the default output folder.
    #[schemars(with = "String")]
    pub(crate) name: Spanned<String>,
    #[serde(default)]
    pub(crate) description: Option<String>,
    /// A git repo (bare or not), a git bundle file, or a plain directory; relative to this file.
    #[schemars(with = "String")]
    pub(crate) repo: Spanned<String>,
    /// Default commit-ish for every task (default `HEAD`).
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub(crate) base: Option<Spanned<String>>,
    /// Named agent configurations, merged with `--agents FILE`.
    #[serde(default)]
    pub(crate) agents: IndexMap<String, RawAgent>,
    /// The budget of every agent whose model calls pass deltabench's gateway, limit by limit
    /// where the agent's own `budget:` leaves one unset.
    #[serde(default)]
    #[schemars(with = "Option<RawBudgetSchema>")]
    pub(crate) budget: Option<Spanned<RawBudget>>,
    /// Defaults for every task.
    #[serde(default)]
    pub(crate) defaults: RawDefaults,
    /// The most changed content a trial's diff may hold, e.g. `20MiB` (the default); past it
    /// the trial fails without verifying.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub(crate) max_diff: Option<Spanned<String>>,
    /// Images to build environments `FROM` instead of the ones their Dockerfiles name: a map
    /// of the name as written (`ubuntu:24.04`) to a local image (`localhost/my-ubuntu:24.04`),
    /// for machines without a registry, or a mirror.
    #[serde(default)]
    pub(crate) base_images: IndexMap<String, String>,
    #[schemars(with = "Vec<RawTask>")]
    pub(crate) tasks: Spanned<Vec<RawTask>>,
}

/// A `--agents FILE`: a top-level `agents:` map.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAgentsFile {
    pub(crate) agents: IndexMap<String, RawAgent>,
}

/// One agent configuration. `kind` decides which other keys apply.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawAgent {
    /// `noop`, `oracle`, `mock`, `command`, a real CLI: `claude-code`, `codex`, `gemini-cli`,
    /// `opencode`, `mini-swe-agent`, `aider`, or `cli` (any other CLI, described by `command`,
    /// `args`, `dialect` and `output`).
    #[schemars(with = "String")]
    pub(crate) kind: Spanned<String>,
    /// command: the shell command line; a leading `./` or `../` path is relative to this file.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub(crate) run: Option<Spanned<String>>,
    /// command: wall-clock limit, e.g. `60s`.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub(crate) timeout: Option<Spanned<String>>,
    /// command: extra environment variables.
    #[serde(default)]
    pub(crate) env: Option<BTreeMap<String, String>>,
    /// The agent's network under `isolation: sandbox` or in a task's container: `model` (only
    /// deltabench's model gateway; the default when its calls pass the gateway), `none` (the
    /// default otherwise) or `host`.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub(crate) network: Option<Spanned<String>>,
    /// Real CLI kinds: the model name as the CLI takes it.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub(crate) model: Option<Spanned<String>>,
    /// Real CLI kinds: stop after this many turns (claude-code, gemini-cli, mini-swe-agent
    /// natively; codex and opencode are stopped by deltabench at tool call N+1).
    #[serde(default)]
    #[schemars(with = "Option<u32>")]
    pub(crate) max_turns: Option<Spanned<u32>>,
    /// Real CLI kinds: the CLI's approval/sandbox mode (valid values depend on the kind).
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub(crate) permission_mode: Option<Spanned<String>>,
    /// Real CLI kinds: text added to the CLI's system prompt.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub(crate) append_system_prompt: Option<Spanned<String>>,
    /// Real CLI kinds: extra command-line arguments. cli: the whole argument list, a template
    /// with `{instruction}`, `{model}`, `{max_turns}`, `{workspace}`, `{home}`, `{session}`,
    /// `{endpoint}` and `{api_key}`.
    #[serde(default)]
    #[schemars(with = "Option<Vec<String>>")]
    pub(crate) args: Option<Spanned<Vec<Spanned<String>>>>,
    /// cli: the executable (a path relative to this file, or a name on PATH).
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub(crate) command: Option<Spanned<String>>,
    /// cli: the API the CLI speaks, which sets the variables pointing it at the endpoint:
    /// `anthropic`, `openai` or `gemini`.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub(crate) dialect: Option<Spanned<String>>,
    /// cli: how its stdout is read.
    #[serde(default)]
    #[schemars(with = "Option<RawCliOutput>")]
    pub(crate) output: Option<Spanned<RawCliOutput>>,
    /// Real CLI kinds: the executable (a path relative to this file, or a name on PATH).
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub(crate) binary: Option<Spanned<String>>,
    /// Real CLI kinds: `http://HOST:PORT` (a compatible server's root) or `scripted:PATH`
    /// (deltabench's scripted model endpoint, started for the run).
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub(crate) endpoint: Option<Spanned<String>>,
    /// Real CLI kinds: the API key (default: a dummy for loopback endpoints, else the CLI's
    /// usual variable from deltabench's environment).
    #[serde(default)]
    pub(crate) api_key: Option<String>,
    /// Real CLI kinds: USD per million tokens, overriding the price table for this agent.
    #[serde(default)]
    pub(crate) price: Option<crate::agent::harness::Price>,
    /// Real CLI kinds, and command agents with `gateway: true`: limits on a trial's model
    /// use, enforced at deltabench's gateway (`tokens`, `cost_usd`, `model_calls`, `wall`).
    #[serde(default)]
    #[schemars(with = "Option<RawBudgetSchema>")]
    pub(crate) budget: Option<Spanned<RawBudget>>,
    /// command: route the command's model calls through deltabench's gateway.
    #[serde(default)]
    #[schemars(with = "Option<bool>")]
    pub(crate) gateway: Option<Spanned<bool>>,
    /// mock: the scripted events.
    #[serde(default)]
    pub(crate) responses: Option<Vec<StreamEvent>>,
    /// mock: named texts returned in the result's metadata.
    #[serde(default)]
    pub(crate) artifacts: Option<Vec<MockArtifact>>,
    /// mock: pause before each event, e.g. `10ms`.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub(crate) delay: Option<Spanned<String>>,
    /// mock: fail after N events with this message and code.
    #[serde(default)]
    pub(crate) simulate_error: Option<SimulatedError>,
    /// mock: panic after N events (tests the harness, not an agent).
    #[serde(default)]
    pub(crate) simulate_panic: Option<usize>,
    /// mock: perform scripted `write` calls in the workspace.
    #[serde(default)]
    pub(crate) apply_writes: Option<bool>,
    /// Ablation: factor (a config key such as `timeout`, or `env.NAME`) to its levels (a list
    /// of values, or a map of label to value). Expands into one agent per combination, named
    /// `name[factor=level,...]`.
    #[serde(default)]
    #[schemars(with = "Option<IndexMap<String, LevelsSchema>>")]
    pub(crate) matrix: Option<IndexMap<String, Spanned<RawLevels>>>,
}

impl RawAgent {
    /// The keys set on this agent, with the location to blame when they do not fit the kind.
    pub(crate) fn keys_set(&self) -> Vec<(&'static str, Option<(u64, u64)>)> {
        let at = |s: &Option<Spanned<String>>| s.as_ref().map(loc);
        let mut keys = Vec::new();
        let mut add = |name, set: bool, location| {
            if set {
                keys.push((name, location));
            }
        };
        add("run", self.run.is_some(), at(&self.run));
        add("timeout", self.timeout.is_some(), at(&self.timeout));
        add("env", self.env.is_some(), None);
        add("network", self.network.is_some(), at(&self.network));
        add("responses", self.responses.is_some(), None);
        add("artifacts", self.artifacts.is_some(), None);
        add("delay", self.delay.is_some(), at(&self.delay));
        add("simulate_error", self.simulate_error.is_some(), None);
        add("simulate_panic", self.simulate_panic.is_some(), None);
        add("apply_writes", self.apply_writes.is_some(), None);
        add("model", self.model.is_some(), at(&self.model));
        add(
            "max_turns",
            self.max_turns.is_some(),
            self.max_turns.as_ref().map(loc),
        );
        add(
            "permission_mode",
            self.permission_mode.is_some(),
            at(&self.permission_mode),
        );
        add(
            "append_system_prompt",
            self.append_system_prompt.is_some(),
            at(&self.append_system_prompt),
        );
        add("args", self.args.is_some(), self.args.as_ref().map(loc));
        add("binary", self.binary.is_some(), at(&self.binary));
        add("command", self.command.is_some(), at(&self.command));
        add("dialect", self.dialect.is_some(), at(&self.dialect));
        add(
            "output",
            self.output.is_some(),
            self.output.as_ref().map(loc),
        );
        add("endpoint", self.endpoint.is_some(), at(&self.endpoint));
        add("api_key", self.api_key.is_some(), None);
        add("price", self.price.is_some(), None);
        add(
            "budget",
            self.budget.is_some(),
            self.budget.as_ref().map(loc),
        );
        add(
            "gateway",
            self.gateway.is_some(),
            self.gateway.as_ref().map(loc),
        );
        keys
    }
}

/// A `kind: cli` agent's `output:`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawCliOutput {
    /// `stream-json` (Claude Code's), `gemini-stream-json`, `codex-json`, `opencode-json`,
    /// `json-lines` (the CLI's own shape, read at the fields below), `text` or `aider-text`.
    #[schemars(with = "String")]
    pub(crate) parser: Spanned<String>,
    /// json-lines: the dotted path of the final answer in a line (`result`, `data.text`).
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub(crate) result: Option<Spanned<String>>,
    /// json-lines: the dotted path of the session id.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub(crate) session_id: Option<Spanned<String>>,
    /// json-lines: the dotted path of the token counts (`input_tokens`/`prompt_tokens`, ...).
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub(crate) usage: Option<Spanned<String>>,
}

/// An agent's `budget:`; each value is checked to be above zero when the agent is built.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawBudget {
    #[serde(default)]
    pub(crate) tokens: Option<Spanned<i64>>,
    #[serde(default)]
    pub(crate) cost_usd: Option<Spanned<f64>>,
    #[serde(default)]
    pub(crate) model_calls: Option<Spanned<i64>>,
    #[serde(default)]
    pub(crate) wall: Option<Spanned<String>>,
}

/// An agent's budget; each limit is optional and must be above zero.
#[derive(JsonSchema)]
#[allow(dead_code)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBudgetSchema {
    /// Input, output, cache read and cache write tokens together.
    tokens: Option<u64>,
    /// USD, priced from the price table or the agent's `price:`.
    cost_usd: Option<f64>,
    /// Model calls.
    model_calls: Option<u64>,
    /// Wall time, e.g. `10m`.
    wall: Option<String>,
}

/// Line and column of a spanned value.
pub(super) fn loc<T>(spanned: &Spanned<T>) -> (u64, u64) {
    (spanned.referenced.line(), spanned.referenced.column())
}

/// Task fields that `defaults:` may set.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawDefaults {
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub(crate) base: Option<Spanned<String>>,
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub(crate) setup: Option<Spanned<String>>,
    #[serde(default)]
    #[schemars(with = "Option<VerifySchema>")]
    pub(crate) verify: Option<Spanned<RawVerify>>,
    #[serde(default)]
    #[schemars(with = "Option<MetricSchema>")]
    pub(crate) metric: Option<Spanned<RawMetric>>,
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub(crate) timeout: Option<Spanned<String>>,
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub(crate) isolation: Option<Spanned<String>>,
    #[serde(default)]
    pub(crate) tags: Option<Vec<String>>,
    #[serde(default)]
    #[schemars(with = "Option<RawEnvironment>")]
    pub(crate) environment: Option<Spanned<RawEnvironment>>,
    #[serde(default)]
    #[schemars(with = "Option<bool>")]
    pub(crate) prepare: Option<Spanned<bool>>,
    #[serde(default)]
    #[schemars(with = "Option<u32>")]
    pub(crate) mutants: Option<Spanned<u32>>,
}

/// `environment:`: the container a task's setup, agent and verify command run in.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawEnvironment {
    /// A local image name (fully qualified, e.g. `localhost/NAME:TAG`; never pulled).
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub(crate) image: Option<Spanned<String>>,
    /// A Dockerfile, relative to the suite file, built once per run (or `image`).
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub(crate) dockerfile: Option<Spanned<String>>,
    /// The build context, relative to the suite file (default: the Dockerfile's folder).
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub(crate) context: Option<Spanned<String>>,
    /// Where the workspace is mounted inside (default `/app`).
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub(crate) workdir: Option<Spanned<String>>,
    /// The network of setup and the agent: `none` (default) or `host`. The verify command
    /// always runs with none.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub(crate) network: Option<Spanned<String>>,
    /// The CPUs each container may use (`--cpus`), e.g. `2` or `0.5`.
    #[serde(default)]
    #[schemars(with = "Option<f64>")]
    pub(crate) cpus: Option<Spanned<f64>>,
    /// The memory each container may use (`--memory`), e.g. `512MiB` or `2 GB`.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub(crate) memory: Option<Spanned<String>>,
    /// What of the agent's container the verify command sees: `workspace` (default, the
    /// workspace's diff) or `container` (also what the agent changed anywhere in its
    /// container's file system, minus the protected paths).
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub(crate) delta: Option<Spanned<String>>,
    /// The verify command's network: `none` (default) or `host`, for tests that fetch what they
    /// need at test time (Harbor's `allow_internet`); records and reports mark such trials.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub(crate) verify_network: Option<Spanned<String>>,
    /// Folders of the verify workspace mounted read-only into the verify container, by the
    /// path they appear at (`/tests: .deltabench/tests`): a test script runs as authored.
    #[serde(default)]
    #[schemars(with = "Option<BTreeMap<String, String>>")]
    pub(crate) verify_mounts: Option<Spanned<BTreeMap<String, String>>>,
    /// Where the oracle's solution script folder is mounted (`/solution`), so the script runs
    /// as authored.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub(crate) solution_at: Option<Spanned<String>>,
    /// Container paths (globs) the verify image gets from the agent's container whatever the
    /// toolchain rule says (a package the task asks to install site-wide). `delta: container`.
    #[serde(default)]
    #[schemars(with = "Option<Vec<String>>")]
    pub(crate) outputs: Option<Spanned<Vec<String>>>,
}

/// One task.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTask {
    /// Unique within the suite, `[A-Za-z0-9._-]+`.
    #[schemars(with = "String")]
    pub(crate) id: Spanned<String>,
    /// The instruction given to the agent (or `instruction_file`).
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub(crate) instruction: Option<Spanned<String>>,
    /// A file holding the instruction, relative to the suite file.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub(crate) instruction_file: Option<Spanned<String>>,
    /// Commit-ish the workspace starts from.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub(crate) base: Option<Spanned<String>>,
    /// Shell command run in the workspace before the agent; its result is part of the base.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub(crate) setup: Option<Spanned<String>>,
    /// Run `setup` once per base commit and environment into a cached template that every
    /// trial gets a copy-on-write view of (default: true with an `environment`, false on the
    /// host, where the template's path differs from the trial's).
    #[serde(default)]
    #[schemars(with = "Option<bool>")]
    pub(crate) prepare: Option<Spanned<bool>>,
    /// Hidden tests: a directory copied over the workspace after the agent, or a `.patch`.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub(crate) tests: Option<Spanned<String>>,
    /// Globs of workspace paths the agent must not modify (`*`, `?`, `**`; a directory covers
    /// what is under it); a diff touching one fails the trial. Default: the hidden tests and the
    /// test infrastructure (`conftest.py`, `pytest.ini`, ...); `defaults` in the list brings
    /// those back, a `!glob` entry takes paths out.
    #[serde(default)]
    pub(crate) protected: Option<Vec<String>>,
    /// The verify command: a string, or `{run, timeout}`.
    #[serde(default)]
    #[schemars(with = "Option<VerifySchema>")]
    pub(crate) verify: Option<Spanned<RawVerify>>,
    /// Reference solution: a `.patch` or a directory.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub(crate) solution: Option<Spanned<String>>,
    /// Reference solution as a script (or `solution`): the `oracle` runs `bash SCRIPT` in the
    /// workspace, in the task's container or sandbox as any agent, with its folder's copy at
    /// `$DELTABENCH_SOLUTION`; what it changes is the reference. For solutions that need the
    /// task's image (Harbor's `solve.sh`, Terminal-Bench's `solution.sh`).
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub(crate) solution_script: Option<Spanned<String>>,
    /// `delta` (default), `delta-token`, `exit-code`, or `{grader: COMMAND, timeout}`.
    #[serde(default)]
    #[schemars(with = "Option<MetricSchema>")]
    pub(crate) metric: Option<Spanned<RawMetric>>,
    #[serde(default)]
    pub(crate) tags: Option<Vec<String>>,
    /// The agent's wall-clock limit, e.g. `10m`.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub(crate) timeout: Option<Spanned<String>>,
    /// `session`, `worktree` (default) or `sandbox`.
    #[serde(default)]
    #[schemars(with = "Option<String>")]
    pub(crate) isolation: Option<Spanned<String>>,
    /// The container the task's commands run in; replaces the default's whole mapping.
    #[serde(default)]
    #[schemars(with = "Option<RawEnvironment>")]
    pub(crate) environment: Option<Spanned<RawEnvironment>>,
    /// Mutants of the hidden tests' assertions run with every passing trial, to show that the
    /// assertions still bite in that run (default 3 where a mutator exists: Python, Rust); 0
    /// turns the check off.
    #[serde(default)]
    #[schemars(with = "Option<u32>")]
    pub(crate) mutants: Option<Spanned<u32>>,
}

/// A factor's levels as written: `[a, b]` (each value its own label) or `{label: value}`.
#[derive(Debug, Clone)]
pub(crate) struct RawLevels(pub(crate) Vec<(String, String)>);

/// `verify:` as written: a command, or a map with `run` and `timeout`.
#[derive(Debug, Clone)]
pub(crate) struct RawVerify {
    pub(crate) run: String,
    pub(crate) timeout: Option<String>,
    pub(crate) in_place: bool,
    pub(crate) reward: Option<String>,
}

/// `metric:` as written: a name, or a grader command.
#[derive(Debug, Clone)]
pub(crate) enum RawMetric {
    Named(String),
    Grader {
        command: String,
        timeout: Option<String>,
    },
}

/// The verify command: a shell command line, or `{run, timeout}`.
#[derive(JsonSchema)]
#[serde(untagged)]
#[expect(dead_code, reason = "only describes the schema")]
enum VerifySchema {
    Command(String),
    Full {
        run: String,
        timeout: Option<String>,
        /// Run in the agent's own container, still running (live state: a server the agent
        /// started): weaker evidence, marked in records and reports. Needs an `environment`.
        in_place: Option<bool>,
        /// The folder the test script writes `reward.txt` or `reward.json` in (Harbor's
        /// `/logs/verifier`): absolute, a fresh folder mounted there in the verify container;
        /// relative, a folder of the verify workspace. deltabench reads the reward itself once
        /// every process of the verify command has ended.
        reward: Option<String>,
    },
}

/// A factor's levels: a list of values, or a map of label to value.
#[derive(JsonSchema)]
#[serde(untagged)]
#[expect(dead_code, reason = "only describes the schema")]
enum LevelsSchema {
    List(Vec<String>),
    Labelled(IndexMap<String, String>),
}

/// A metric: `delta`, `delta-token`, `exit-code`, or `{grader: COMMAND, timeout}`.
#[derive(JsonSchema)]
#[serde(untagged)]
#[expect(dead_code, reason = "only describes the schema")]
enum MetricSchema {
    /// `delta`, `delta-token` or `exit-code`.
    Named(String),
    Grader {
        grader: String,
        timeout: Option<String>,
    },
}

/// String keys to string values.
type StringMap = BTreeMap<String, String>;

/// Reads a map of string keys to string values, rejecting keys outside `allowed`.
fn string_map<'de, A: MapAccess<'de>>(
    mut map: A,
    allowed: &'static [&'static str],
) -> Result<StringMap, A::Error> {
    let mut fields = BTreeMap::new();
    while let Some(key) = map.next_key::<String>()? {
        if !allowed.contains(&key.as_str()) {
            return Err(de::Error::unknown_field(&key, allowed));
        }
        let value: String = map.next_value()?;
        fields.insert(key, value);
    }
    Ok(fields)
}

impl<'de> Deserialize<'de> for RawVerify {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawVerify;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str(
                    "a command string or a map with `run` and optional `timeout`, `in_place` and `reward`",
                )
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<RawVerify, E> {
                Ok(RawVerify {
                    run: v.to_owned(),
                    timeout: None,
                    in_place: false,
                    reward: None,
                })
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawVerify, A::Error> {
                const KEYS: &[&str] = &["run", "timeout", "in_place", "reward"];
                let (mut run, mut timeout, mut in_place, mut reward) = (None, None, false, None);
                while let Some(key) = map.next_key::<String>()? {
                    match key.as_str() {
                        "run" => run = Some(map.next_value::<String>()?),
                        "timeout" => timeout = Some(map.next_value::<String>()?),
                        "in_place" => in_place = map.next_value::<bool>()?,
                        "reward" => reward = Some(map.next_value::<String>()?),
                        _ => return Err(de::Error::unknown_field(&key, KEYS)),
                    }
                }
                Ok(RawVerify {
                    run: run.ok_or_else(|| de::Error::missing_field("run"))?,
                    timeout,
                    in_place,
                    reward,
                })
            }
        }
        deserializer.deserialize_any(V)
    }
}

impl<'de> Deserialize<'de> for RawLevels {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawLevels;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a list of levels, or a map of level label to value")
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<RawLevels, A::Error> {
                let mut levels = Vec::new();
                while let Some(value) = seq.next_element::<String>()? {
                    levels.push((value.clone(), value));
                }
                Ok(RawLevels(levels))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawLevels, A::Error> {
                let mut levels = Vec::new();
                while let Some((label, value)) = map.next_entry::<String, String>()? {
                    levels.push((label, value));
                }
                Ok(RawLevels(levels))
            }
        }
        deserializer.deserialize_any(V)
    }
}

impl<'de> Deserialize<'de> for RawMetric {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawMetric;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a metric name or a map with `grader` and optional `timeout`")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<RawMetric, E> {
                Ok(RawMetric::Named(v.to_owned()))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<RawMetric, A::Error> {
                let mut fields = string_map(map, &["grader", "timeout"])?;
                Ok(RawMetric::Grader {
                    command: fields
                        .remove("grader")
                        .ok_or_else(|| de::Error::missing_field("grader"))?,
                    timeout: fields.remove("timeout"),
                })
            }
        }
        deserializer.deserialize_any(V)
    }
}
