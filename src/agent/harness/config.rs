//! What an agents file can say about a real CLI agent: the kinds (twelve built-in CLIs and
//! `cli`) and their typed config.
//!
//! Each built-in CLI's facts live in its own file behind [`BuiltinCli`]; [`HarnessKind::cli`] is
//! the registry, and [`HarnessKind`]'s methods answer for a kind through it, so the suite loader
//! rejects a key that does not apply with the valid set, and `--help`, `deltabench agents` and
//! `docs/agents.md` list the same facts.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::builtin::BuiltinCli;
use super::pricing::Price;
use crate::agent::Budget;
use crate::workspace::Network;

/// The real coding-agent CLIs deltabench drives.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    strum::VariantArray,
    strum::IntoStaticStr,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum HarnessKind {
    /// `claude-code`: Claude Code (`claude`).
    ClaudeCode,
    /// `codex`: OpenAI's Codex CLI (`codex`).
    Codex,
    /// `gemini-cli`: Google's Gemini CLI (`gemini`).
    GeminiCli,
    /// `opencode`: opencode (`opencode`).
    Opencode,
    /// `mini-swe-agent`: mini-swe-agent (`mini`).
    MiniSweAgent,
    /// `aider`: aider (`aider`).
    Aider,
    /// `qwen-code`: Qwen Code (`qwen`).
    QwenCode,
    /// `continue-cli`: Continue's CLI (`cn`).
    ContinueCli,
    /// `pi`: pi (`pi`).
    Pi,
    /// `gptme`: gptme (`gptme`).
    Gptme,
    /// `cline`: Cline's CLI (`cline`).
    Cline,
    /// `grok-cli`: Grok CLI (`grok`).
    GrokCli,
    /// Any other CLI, described in the agents file ([`super::cli`]).
    Cli,
}

/// Where a CLI's package comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Registry {
    /// npm (`npm install -g`).
    Npm,
    /// PyPI (`pip install`).
    PyPi,
}

/// A CLI's pinned package.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Package {
    /// Where it is published.
    pub registry: Registry,
    /// Its name there (`@anthropic-ai/claude-code`).
    pub name: &'static str,
    /// The exact version deltabench was checked against.
    pub version: &'static str,
}

/// How a kind bounds the number of turns `max_turns` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TurnLimit {
    /// The CLI's own flag or setting; it reports hitting it.
    Native,
    /// The CLI has none: deltabench stops it when it starts tool call number `max_turns + 1`.
    Enforced,
    /// Not meaningful for this CLI.
    Unsupported,
}

impl HarnessKind {
    /// The built-in CLIs: every kind but [`Self::Cli`], which is a definition, not a CLI.
    pub const ALL: &[HarnessKind] = &[
        Self::ClaudeCode,
        Self::Codex,
        Self::GeminiCli,
        Self::Opencode,
        Self::MiniSweAgent,
        Self::Aider,
        Self::QwenCode,
        Self::ContinueCli,
        Self::Pi,
        Self::Gptme,
        Self::Cline,
        Self::GrokCli,
    ];

    /// The `kind:` value in an agents file.
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// The kind a `kind:` value names; `None` for an unknown one.
    pub fn parse(kind: &str) -> Option<Self> {
        <Self as strum::VariantArray>::VARIANTS
            .iter()
            .copied()
            .find(|k| k.as_str() == kind)
    }

    /// The registry: the built-in CLI this kind is, `None` for [`Self::Cli`] (a definition).
    pub fn cli(self) -> Option<&'static dyn BuiltinCli> {
        Some(match self {
            Self::ClaudeCode => &super::claude::Adapter,
            Self::Codex => &super::codex::Adapter,
            Self::GeminiCli => &super::gemini::Adapter,
            Self::Opencode => &super::opencode::Adapter,
            Self::MiniSweAgent => &super::mini_swe::Adapter,
            Self::Aider => &super::aider::Adapter,
            Self::QwenCode => &super::qwen::Adapter,
            Self::ContinueCli => &super::continue_cli::Adapter,
            Self::Pi => &super::pi::Adapter,
            Self::Gptme => &super::gptme::Adapter,
            Self::Cline => &super::cline::Adapter,
            Self::GrokCli => &super::grok::Adapter,
            Self::Cli => return None,
        })
    }

    /// The kind's quirks around its output ([`super::adapter`]).
    pub fn adapter(self) -> &'static dyn super::adapter::CliAdapter {
        match self.cli() {
            Some(cli) => cli,
            // A definition is its own adapter: see `HarnessConfig::adapter`.
            None => &super::cli::NO_DEFINITION,
        }
    }

    /// The executable's name.
    pub fn program(self) -> &'static str {
        self.cli()
            .map_or("the agent's `command:`", |cli| cli.program())
    }

    /// One line saying what the kind runs.
    pub fn description(self) -> &'static str {
        self.cli().map_or(
            "a CLI run from its definition in the agents file (kind: cli).",
            |cli| cli.description(),
        )
    }

    /// The package that ships the CLI at the version deltabench was checked against (the pins
    /// `.ci/install-agents` installs); `None` for `cli`.
    pub fn package(self) -> Option<Package> {
        self.cli().map(|cli| cli.package())
    }

    /// How to install the version deltabench was checked against.
    pub fn install_hint(self) -> String {
        match self.package() {
            Some(Package {
                registry: Registry::Npm,
                name,
                version,
            }) => format!("npm install -g {name}@{version}"),
            Some(Package {
                registry: Registry::PyPi,
                name,
                version,
            }) => format!("pip install {name}=={version}"),
            None => "install the CLI its `command:` names".to_owned(),
        }
    }

    /// Whether `CodingTask::session_id` can continue one of its sessions.
    pub fn can_resume(self) -> bool {
        self.cli().is_some_and(|cli| cli.can_resume())
    }

    /// The valid `permission_mode` values, the default first; empty when the key does not
    /// apply (the CLI has one headless mode, which deltabench always uses).
    pub fn permission_modes(self) -> &'static [&'static str] {
        self.cli().map_or(&[], |cli| cli.permission_modes())
    }

    /// A definition passing `{max_turns}` has a native limit: `HarnessConfig::turn_limit`.
    pub fn turn_limit(self) -> TurnLimit {
        self.cli()
            .map_or(TurnLimit::Enforced, |cli| cli.turn_limit())
    }

    /// Whether `append_system_prompt` has somewhere to go.
    pub fn appends_system_prompt(self) -> bool {
        self.cli().is_some_and(|cli| cli.appends_system_prompt())
    }

    /// The environment variable the CLI reads its API key from when talking to its own
    /// provider; deltabench passes it through from its own environment.
    pub fn key_env(self) -> &'static str {
        self.cli().map_or("OPENAI_API_KEY", |cli| cli.key_env())
    }

    /// Flags `args:` may not pass, because the adapter sets them (the stream it parses, the
    /// session it resumes, the prompt) or a typed key does: each with what to use instead. A
    /// definition's whole command line is the agent's own template.
    pub fn reserved_flags(self) -> &'static [(&'static str, &'static str)] {
        self.cli().map_or(&[], |cli| cli.reserved_flags())
    }

    /// The reserved flag `arg` is (as `--flag` or `--flag=value`), with what to use instead.
    pub fn reserved_flag(self, arg: &str) -> Option<(&'static str, &'static str)> {
        self.reserved_flags().iter().copied().find(|(flag, _)| {
            arg == *flag
                || (flag.starts_with("--")
                    && arg
                        .strip_prefix(flag)
                        .is_some_and(|rest| rest.starts_with('=')))
        })
    }

    /// The agents-file keys this kind accepts.
    pub fn keys(self) -> Vec<&'static str> {
        let mut keys = vec![
            "model", "args", "env", "endpoint", "api_key", "timeout", "network", "price", "budget",
        ];
        if self == Self::Cli {
            keys.extend(["command", "dialect", "output"]);
        } else {
            keys.push("binary");
        }
        if self.turn_limit() != TurnLimit::Unsupported {
            keys.push("max_turns");
        }
        if !self.permission_modes().is_empty() {
            keys.push("permission_mode");
        }
        if self.appends_system_prompt() {
            keys.push("append_system_prompt");
        }
        keys
    }
}

impl fmt::Display for HarnessKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where the CLI's model calls go.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Endpoint {
    /// A compatible server's root URL; the adapter adds the path its client expects.
    Url(String),
    /// deltabench starts its scripted endpoint on this script for the run.
    Scripted(PathBuf),
}

impl Endpoint {
    /// `scripted:PATH` or an `http(s)://` URL; relative script paths stay relative.
    pub fn parse(text: &str) -> Result<Self, EndpointError> {
        let text = text.trim();
        if let Some(path) = text.strip_prefix("scripted:") {
            if path.is_empty() {
                return Err(EndpointError::NoScript);
            }
            return Ok(Self::Scripted(PathBuf::from(path)));
        }
        if text.starts_with("http://") || text.starts_with("https://") {
            return Ok(Self::Url(text.trim_end_matches('/').to_owned()));
        }
        Err(EndpointError::Unknown(text.to_owned()))
    }
}

/// An `endpoint:` that is neither a URL nor a scripted endpoint.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EndpointError {
    /// `scripted:` with nothing after it.
    #[error("`scripted:` needs a script path, e.g. `scripted:model.yaml`")]
    NoScript,
    #[error(
        "endpoint '{0}' is neither a URL (http://HOST:PORT, the server root) nor `scripted:PATH`"
    )]
    /// Neither form; holds the text given.
    Unknown(String),
}

/// Config shared by every real-CLI kind; keys a kind does not support are rejected at load.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HarnessConfig {
    /// The model the CLI is told to use; `None`: the CLI's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The most turns (tool calls) a run may take, bounded as the kind's [`TurnLimit`] says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_turns: Option<u32>,
    /// One of [`HarnessKind::permission_modes`]; `None`: the first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permission_mode: Option<String>,
    /// Text added to the CLI's system prompt (kinds that have somewhere to put it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub append_system_prompt: Option<String>,
    /// Appended to the command line as given.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Added to the CLI's otherwise cleared environment.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// The executable; by default looked up on PATH, then in the agent tool dir.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binary: Option<PathBuf>,
    /// The model API the CLI talks to; `None`: its own provider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<Endpoint>,
    /// The key passed to the CLI; `None`: its key variable from the environment (a dummy for
    /// the gateway or a loopback endpoint).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key: Option<String>,
    /// The run's wall-clock limit; `None`: 30 minutes.
    #[serde(default, with = "crate::support::duration_opt")]
    pub timeout: Option<Duration>,
    /// Unset: `model` when its calls pass the gateway, else `none` ([`Network::for_agent`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<Network>,
    /// Overrides the price table for this agent's model (USD per million tokens).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub price: Option<Price>,
    /// Limits on the trial's model use, enforced at the gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<Budget>,
    /// `kind: cli`: the command line template, dialect and output parser.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cli: Option<super::cli::CliDefinition>,
}

impl HarnessConfig {
    /// The adapter that reads this agent's runs: its definition's for `kind: cli`.
    pub fn adapter(&self, kind: HarnessKind) -> &dyn super::adapter::CliAdapter {
        match &self.cli {
            Some(definition) => definition,
            None => kind.adapter(),
        }
    }

    /// How `max_turns` is bounded: a definition passing `{max_turns}` to its CLI is native.
    pub fn turn_limit(&self, kind: HarnessKind) -> TurnLimit {
        match &self.cli {
            Some(definition) if definition.native_turn_limit() => TurnLimit::Native,
            _ => kind.turn_limit(),
        }
    }

    /// The variable the API key is read from: the dialect's for `kind: cli`.
    pub fn key_env(&self, kind: HarnessKind) -> &'static str {
        match &self.cli {
            Some(definition) => definition.dialect.key_env(),
            None => kind.key_env(),
        }
    }

    /// The permission mode in force: the configured one or the kind's default.
    pub fn permission_mode(&self, kind: HarnessKind) -> Option<&str> {
        self.permission_mode
            .as_deref()
            .or(kind.permission_modes().first().copied())
    }

    /// The permission mode in force for `cli`: the configured one or its default.
    pub fn permission_mode_of(&self, cli: &dyn BuiltinCli) -> Option<&str> {
        self.permission_mode
            .as_deref()
            .or(cli.permission_modes().first().copied())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_parse_urls_and_scripts() {
        assert_eq!(
            Endpoint::parse("http://127.0.0.1:8765/").unwrap(),
            Endpoint::Url("http://127.0.0.1:8765".into())
        );
        assert_eq!(
            Endpoint::parse("scripted:model.yaml").unwrap(),
            Endpoint::Scripted("model.yaml".into())
        );
        assert!(Endpoint::parse("scripted:").is_err());
        assert!(
            Endpoint::parse("localhost:8765")
                .unwrap_err()
                .to_string()
                .contains("neither")
        );
    }

    #[test]
    fn kinds_round_trip_and_a_definition_has_no_facts_of_its_own() {
        for &kind in HarnessKind::ALL {
            assert_eq!(HarnessKind::parse(kind.as_str()), Some(kind));
            assert!(kind.cli().is_some(), "{kind}");
        }
        assert!(HarnessKind::Cli.cli().is_none());
        assert_eq!(HarnessKind::Cli.reserved_flag("-p"), None);
        assert!(HarnessKind::Cli.keys().contains(&"command"));
        assert!(!HarnessKind::Cli.keys().contains(&"binary"));
    }
}
