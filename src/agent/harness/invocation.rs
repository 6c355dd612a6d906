//! The command line, environment and config files that run one CLI headless.
//!
//! A pure function of the agent's config and the run's paths, so each kind's invocation is
//! unit-tested without the CLI; `docs/agents.md` says how each was observed. Every CLI gets
//! a cleared environment with its own HOME (and XDG dirs) inside the trial directory, so host
//! credentials, config and plugins never leak in, and a later run with the same HOME and
//! workspace can resume its session.

use std::path::{Path, PathBuf};

use super::builtin::Prompt;
use super::cli::{self, CliDefinition, CliDialect};
use super::config::{HarnessConfig, HarnessKind};

/// The key deltabench gives CLIs talking to a loopback endpoint that needs none.
pub const DUMMY_API_KEY: &str = "sk-deltabench-local";

/// Variables passed through from deltabench's own environment when set.
const PASSTHROUGH_ENV: [&str; 12] = [
    "PATH",
    "LANG",
    "LC_ALL",
    "TZ",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "SSL_CERT_FILE",
    "NODE_EXTRA_CA_CERTS",
];

/// Everything that differs between one run and the next.
#[derive(Debug, Clone)]
pub struct RunPaths<'a> {
    /// The instruction.
    pub task: &'a str,
    /// A session to continue (kinds that resume only).
    pub resume: Option<&'a str>,
    /// Claude's session id for a new run (Claude lets the caller choose it).
    pub new_session: &'a str,
    /// The CLI's private HOME.
    pub home: &'a Path,
    /// The directory the CLI works in (its current directory).
    pub workspace: &'a Path,
    /// Where deltabench's own files for this run go (outside the workspace).
    pub scratch: &'a Path,
    /// The endpoint's root URL, already resolved (`scripted:` started).
    pub endpoint: Option<&'a str>,
    /// The API key: configured, passed through, or the loopback dummy.
    pub api_key: Option<&'a str>,
}

/// How to start the CLI.
#[derive(Debug, Clone, PartialEq)]
pub struct Invocation {
    /// The command-line arguments, the program excluded.
    pub args: Vec<String>,
    /// The whole environment (the child's is cleared first).
    pub env: Vec<(String, String)>,
    /// Config files to write before the start, with their contents.
    pub files: Vec<(PathBuf, String)>,
    /// mini-swe-agent's trajectory file, read while it runs.
    pub trajectory: Option<PathBuf>,
    /// The model name to price usage with, when known.
    pub model: Option<String>,
}

/// Builds the invocation of `kind` for one run.
pub fn invocation(kind: HarnessKind, config: &HarnessConfig, run: &RunPaths) -> Invocation {
    let mut inv = Invocation {
        args: Vec::new(),
        env: base_env(run.home),
        // Agents that commit (aider always does) need an identity; env vars are not enough
        // for aider, which reads `git config user.name`.
        files: vec![(
            run.home.join(".gitconfig"),
            "[user]\n\tname = deltabench agent\n\temail = agent@deltabench.invalid\n".into(),
        )],
        trajectory: None,
        model: config.model.clone(),
    };
    let Some(cli) = kind.cli() else {
        if let Some(definition) = &config.cli {
            cli_invocation(definition, config, run, &mut inv);
        }
        // The template is the whole command line, the environment filled in above.
        return inv;
    };
    cli.invoke(config, run, &mut inv);
    inv.args.extend(config.args.iter().cloned());
    match cli.prompt() {
        Prompt::AfterDashes => {
            inv.args.push("--".into());
            inv.args.push(run.task.to_owned());
        }
        Prompt::Spaced => {
            let space = if run.task.starts_with(['-', '@']) {
                " "
            } else {
                ""
            };
            inv.args.push(format!("{space}{}", run.task));
        }
        Prompt::InFlag => {}
    }
    for (key, value) in &config.env {
        set_env(&mut inv.env, key, value);
    }
    inv
}

fn base_env(home: &Path) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = PASSTHROUGH_ENV
        .iter()
        .filter_map(|key| Some((key.to_string(), std::env::var(key).ok()?)))
        .collect();
    let home_str = home.display().to_string();
    for (key, value) in [
        ("HOME", home_str.clone()),
        ("XDG_CONFIG_HOME", format!("{home_str}/.config")),
        ("XDG_DATA_HOME", format!("{home_str}/.local/share")),
        ("XDG_STATE_HOME", format!("{home_str}/.local/state")),
        ("XDG_CACHE_HOME", format!("{home_str}/.cache")),
        ("TERM", "dumb".into()),
        ("NO_COLOR", "1".into()),
        // Agents that commit need an identity; the private HOME has no git config.
        ("GIT_AUTHOR_NAME", "deltabench agent".into()),
        ("GIT_AUTHOR_EMAIL", "agent@deltabench.invalid".into()),
        ("GIT_COMMITTER_NAME", "deltabench agent".into()),
        ("GIT_COMMITTER_EMAIL", "agent@deltabench.invalid".into()),
    ] {
        set_env(&mut env, key, &value);
    }
    env
}

pub(super) fn set_env(env: &mut Vec<(String, String)>, key: &str, value: &str) {
    env.retain(|(k, _)| k != key);
    env.push((key.to_owned(), value.to_owned()));
}

pub(super) fn push(args: &mut Vec<String>, items: &[&str]) {
    args.extend(items.iter().map(|s| s.to_string()));
}

/// A TOML basic string (JSON's escapes are a subset TOML accepts).
pub(super) fn toml_string(text: &str) -> String {
    serde_json::to_string(text).expect("a string serializes")
}

/// litellm wants `provider/model`; against an OpenAI-compatible endpoint that is `openai/`,
/// whatever slashes the served model's own name has (`openai/qwen/qwen3-coder`).
pub(super) fn litellm_model(config: &HarnessConfig, run: &RunPaths) -> Option<String> {
    config.model.as_ref().map(|model| {
        if run.endpoint.is_some() && !model.starts_with("openai/") {
            format!("openai/{model}")
        } else {
            model.clone()
        }
    })
}

/// The gateway's dialect for a litellm CLI (mini-swe-agent, aider): OpenAI's, unless its
/// `provider/model` names another provider.
pub(super) fn litellm_dialect(config: &HarnessConfig) -> Option<CliDialect> {
    match config.model.as_deref() {
        Some(model) if model.contains('/') && !model.starts_with("openai/") => None,
        _ => Some(CliDialect::Openai),
    }
}

pub(super) fn openai_env(run: &RunPaths, inv: &mut Invocation, base_var: &str) {
    if let Some(url) = run.endpoint {
        set_env(&mut inv.env, base_var, &format!("{url}/v1"));
    }
    if let Some(key) = run.api_key {
        set_env(&mut inv.env, "OPENAI_API_KEY", key);
    }
    // litellm's price map comes from the package, not the network.
    set_env(&mut inv.env, "LITELLM_LOCAL_MODEL_COST_MAP", "True");
}

/// mini-swe-agent's own trajectory file, in the trial folder (`trajectory.json` there is
/// deltabench's ATIF trajectory of every agent).
pub const MINI_TRAJECTORY: &str = "mini-trajectory.json";

/// The invocation of a `kind: cli` agent.
fn cli_invocation(
    definition: &CliDefinition,
    config: &HarnessConfig,
    run: &RunPaths,
    inv: &mut Invocation,
) {
    let values = [
        ("instruction", Some(run.task.to_owned())),
        ("model", config.model.clone()),
        ("max_turns", config.max_turns.map(|t| t.to_string())),
        ("workspace", Some(run.workspace.display().to_string())),
        ("home", Some(run.home.display().to_string())),
        (
            "session",
            Some(run.resume.unwrap_or(run.new_session).to_owned()),
        ),
        ("endpoint", run.endpoint.map(str::to_owned)),
        ("api_key", run.api_key.map(str::to_owned)),
    ];
    if let Some(url) = run.endpoint {
        for (key, value) in definition.dialect.env(url) {
            set_env(&mut inv.env, key, &value);
        }
    }
    if let Some(key) = run.api_key {
        set_env(&mut inv.env, definition.dialect.key_env(), key);
    }
    for (key, value) in &config.env {
        set_env(&mut inv.env, key, &cli::fill(value, &values));
    }
    inv.args = definition
        .args
        .iter()
        .map(|arg| cli::fill(arg, &values))
        .collect();
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn paths<'a>(resume: Option<&'a str>, endpoint: Option<&'a str>) -> RunPaths<'a> {
        RunPaths {
            task: "-fix the bug",
            resume,
            new_session: "0f0e0d0c-0b0a-4908-8706-050403020100",
            home: Path::new("/t/home"),
            workspace: Path::new("/ws"),
            scratch: Path::new("/t"),
            endpoint,
            api_key: Some(DUMMY_API_KEY),
        }
    }

    pub(crate) fn env<'a>(inv: &'a Invocation, key: &str) -> Option<&'a str> {
        inv.env
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    pub(crate) fn file<'a>(inv: &'a Invocation, name: &str) -> &'a str {
        &inv.files
            .iter()
            .find(|(p, _)| p.ends_with(name))
            .unwrap_or_else(|| panic!("no {name} in {:?}", inv.files))
            .1
    }
}
