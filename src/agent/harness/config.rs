//! What an agents file can say about a real CLI agent: the six kinds and their typed config.
//!
//! Per-kind facts (the program, the package that ships it, whether it resumes, which permission
//! modes and turn limits it has) live on [`HarnessKind`], so the suite loader can reject a key
//! that does not apply with the valid set, and `--help` and `docs/agents.md` list the same facts.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

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
    ClaudeCode,
    Codex,
    GeminiCli,
    Opencode,
    MiniSweAgent,
    Aider,
    QwenCode,
    ContinueCli,
    Pi,
    Gptme,
    Cline,
    GrokCli,
    /// Any other CLI, described in the agents file ([`super::cli`]).
    Cli,
}

/// Where a CLI's package comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Registry {
    Npm,
    PyPi,
}

/// A CLI's pinned package.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Package {
    pub registry: Registry,
    pub name: &'static str,
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

    pub fn parse(kind: &str) -> Option<Self> {
        <Self as strum::VariantArray>::VARIANTS
            .iter()
            .copied()
            .find(|k| k.as_str() == kind)
    }

    /// The kind's quirks around its output ([`super::adapter`]).
    pub fn adapter(self) -> &'static dyn super::adapter::CliAdapter {
        match self {
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
            // A definition is its own adapter: see `HarnessConfig::adapter`.
            Self::Cli => &super::cli::NO_DEFINITION,
        }
    }

    /// The executable's name.
    pub fn program(self) -> &'static str {
        match self {
            Self::ClaudeCode => "claude",
            Self::Codex => "codex",
            Self::GeminiCli => "gemini",
            Self::Opencode => "opencode",
            Self::MiniSweAgent => "mini",
            Self::Aider => "aider",
            Self::QwenCode => "qwen",
            Self::ContinueCli => "cn",
            Self::Pi => "pi",
            Self::Gptme => "gptme",
            Self::Cline => "cline",
            Self::GrokCli => "grok",
            Self::Cli => "the agent's `command:`",
        }
    }

    /// The package that ships the CLI at the version deltabench was checked against (the pins
    /// `.ci/install-agents` installs); `None` for `cli`.
    pub fn package(self) -> Option<Package> {
        let (registry, name, version) = match self {
            Self::ClaudeCode => (Registry::Npm, "@anthropic-ai/claude-code", "2.1.197"),
            Self::Codex => (Registry::Npm, "@openai/codex", "0.171.0"),
            Self::GeminiCli => (Registry::Npm, "@google/gemini-cli", "0.61.0"),
            Self::Opencode => (Registry::Npm, "opencode-ai", "1.18.33"),
            Self::MiniSweAgent => (Registry::PyPi, "mini-swe-agent", "2.4.6"),
            Self::Aider => (Registry::PyPi, "aider-chat", "0.86.2"),
            Self::QwenCode => (Registry::Npm, "@qwen-code/qwen-code", "0.24.4"),
            Self::ContinueCli => (Registry::Npm, "@continuedev/cli", "1.5.47"),
            Self::Pi => (Registry::Npm, "@mariozechner/pi-coding-agent", "0.73.1"),
            Self::Gptme => (Registry::PyPi, "gptme", "0.35.1"),
            Self::Cline => (Registry::Npm, "cline", "3.0.65"),
            Self::GrokCli => (Registry::Npm, "@vibe-kit/grok-cli", "0.0.34"),
            Self::Cli => return None,
        };
        Some(Package {
            registry,
            name,
            version,
        })
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
        matches!(
            self,
            Self::ClaudeCode
                | Self::Codex
                | Self::GeminiCli
                | Self::Opencode
                | Self::QwenCode
                | Self::ContinueCli
                | Self::Pi
                | Self::Gptme
        )
    }

    /// The valid `permission_mode` values, the default first; empty when the key does not
    /// apply (the CLI has one headless mode, which deltabench always uses).
    pub fn permission_modes(self) -> &'static [&'static str] {
        match self {
            Self::ClaudeCode => &[
                "bypassPermissions",
                "acceptEdits",
                "default",
                "plan",
                "dontAsk",
                "auto",
            ],
            Self::Codex => &["danger-full-access", "workspace-write", "read-only"],
            Self::GeminiCli => &["yolo", "auto_edit", "default", "plan"],
            Self::Opencode => &["allow", "ask", "deny"],
            Self::QwenCode => &["yolo", "auto-edit", "default", "plan", "auto"],
            Self::MiniSweAgent
            | Self::Aider
            | Self::ContinueCli
            | Self::Pi
            | Self::Gptme
            | Self::Cline
            | Self::GrokCli
            | Self::Cli => &[],
        }
    }

    pub fn turn_limit(self) -> TurnLimit {
        match self {
            Self::ClaudeCode
            | Self::GeminiCli
            | Self::MiniSweAgent
            | Self::QwenCode
            | Self::Gptme
            | Self::GrokCli => TurnLimit::Native,
            // A definition passing `{max_turns}` has a native limit: `HarnessConfig::turn_limit`.
            // Cline has a turn limit inside (`maxIterations`) but no flag or setting for it.
            Self::Codex | Self::Opencode | Self::Pi | Self::Cline | Self::Cli => {
                TurnLimit::Enforced
            }
            // Continue's CLI writes its session (deltabench's view of its calls) only at exit.
            Self::Aider | Self::ContinueCli => TurnLimit::Unsupported,
        }
    }

    /// Whether `append_system_prompt` has somewhere to go.
    pub fn appends_system_prompt(self) -> bool {
        !matches!(self, Self::MiniSweAgent | Self::Gptme | Self::Cli)
    }

    /// The environment variable the CLI reads its API key from when talking to its own
    /// provider; deltabench passes it through from its own environment.
    pub fn key_env(self) -> &'static str {
        match self {
            Self::ClaudeCode => "ANTHROPIC_API_KEY",
            Self::GeminiCli => "GEMINI_API_KEY",
            Self::GrokCli => "GROK_API_KEY",
            Self::Codex
            | Self::Opencode
            | Self::MiniSweAgent
            | Self::Aider
            | Self::QwenCode
            | Self::ContinueCli
            | Self::Pi
            | Self::Gptme
            | Self::Cline
            | Self::Cli => "OPENAI_API_KEY",
        }
    }

    /// Flags `args:` may not pass, because the adapter sets them (the stream it parses, the
    /// session it resumes, the prompt) or a typed key does: each with what to use instead.
    pub fn reserved_flags(self) -> &'static [(&'static str, &'static str)] {
        const STREAM: &str = "deltabench reads this output format";
        const SESSION: &str = "resume through CodingTask.session_id";
        const PROMPT: &str = "the task's instruction is the prompt";
        match self {
            Self::ClaudeCode => &[
                ("-p", PROMPT),
                ("--print", PROMPT),
                ("--output-format", STREAM),
                ("--input-format", STREAM),
                ("--session-id", SESSION),
                ("--resume", SESSION),
                ("-r", SESSION),
                ("--continue", SESSION),
                ("-c", SESSION),
                ("--model", "use `model:`"),
                ("--permission-mode", "use `permission_mode:`"),
                ("--max-turns", "use `max_turns:`"),
                ("--append-system-prompt", "use `append_system_prompt:`"),
            ],
            Self::Codex => &[
                ("--json", STREAM),
                ("-m", "use `model:`"),
                ("--model", "use `model:`"),
                ("-s", "use `permission_mode:`"),
                ("--sandbox", "use `permission_mode:`"),
            ],
            Self::GeminiCli => &[
                ("-p", PROMPT),
                ("--prompt", PROMPT),
                ("-o", STREAM),
                ("--output-format", STREAM),
                ("-r", SESSION),
                ("--resume", SESSION),
                ("-m", "use `model:`"),
                ("--model", "use `model:`"),
                ("--approval-mode", "use `permission_mode:`"),
                ("-y", "use `permission_mode:`"),
                ("--yolo", "use `permission_mode:`"),
            ],
            Self::Opencode => &[
                ("--format", STREAM),
                ("--session", SESSION),
                ("-s", SESSION),
                ("--continue", SESSION),
                ("-c", SESSION),
                ("-m", "use `model:`"),
                ("--model", "use `model:`"),
            ],
            Self::MiniSweAgent => &[
                ("-t", PROMPT),
                ("--task", PROMPT),
                ("-o", "deltabench reads the trajectory from its own path"),
                (
                    "--output",
                    "deltabench reads the trajectory from its own path",
                ),
                ("-m", "use `model:`"),
                ("--model", "use `model:`"),
            ],
            Self::Aider => &[
                ("--message", PROMPT),
                ("-m", PROMPT),
                ("--message-file", PROMPT),
                ("-f", PROMPT),
                ("--model", "use `model:`"),
                (
                    "--stream",
                    "deltabench needs the API's usage, which a stream lacks",
                ),
                (
                    "--chat-history-file",
                    "deltabench keeps the histories in the trial folder",
                ),
                (
                    "--input-history-file",
                    "deltabench keeps the histories in the trial folder",
                ),
                (
                    "--llm-history-file",
                    "deltabench keeps the histories in the trial folder",
                ),
            ],
            Self::QwenCode => &[
                ("-p", PROMPT),
                ("--prompt", PROMPT),
                ("-i", PROMPT),
                ("--prompt-interactive", PROMPT),
                ("-o", STREAM),
                ("--output-format", STREAM),
                ("--session-id", SESSION),
                ("-r", SESSION),
                ("--resume", SESSION),
                ("-c", SESSION),
                ("--continue", SESSION),
                ("-m", "use `model:`"),
                ("--model", "use `model:`"),
                ("--approval-mode", "use `permission_mode:`"),
                ("-y", "use `permission_mode:`"),
                ("--yolo", "use `permission_mode:`"),
                ("--max-session-turns", "use `max_turns:`"),
                ("--append-system-prompt", "use `append_system_prompt:`"),
                ("--auth-type", "deltabench points it at the endpoint"),
                ("--openai-base-url", "deltabench points it at the endpoint"),
                ("--openai-api-key", "use `api_key:`"),
            ],
            Self::ContinueCli => &[
                ("-p", PROMPT),
                ("--print", PROMPT),
                ("--format", STREAM),
                (
                    "--config",
                    "deltabench writes the config that points it at the endpoint",
                ),
                ("--resume", SESSION),
                ("--fork", SESSION),
                ("--model", "use `model:`"),
                ("--readonly", "it runs with --auto"),
                ("--auto", "it runs with --auto"),
            ],
            Self::Pi => &[
                ("-p", PROMPT),
                ("--print", PROMPT),
                ("--mode", STREAM),
                ("--session", SESSION),
                ("--session-dir", SESSION),
                ("--no-session", SESSION),
                ("--fork", SESSION),
                ("-r", SESSION),
                ("--resume", SESSION),
                ("-c", SESSION),
                ("--continue", SESSION),
                ("--provider", "deltabench points it at the endpoint"),
                ("--api-key", "use `api_key:`"),
                ("--model", "use `model:`"),
                ("--append-system-prompt", "use `append_system_prompt:`"),
            ],
            Self::Gptme => &[
                ("-n", "it always runs non-interactive"),
                ("--non-interactive", "it always runs non-interactive"),
                ("-w", "it runs in the trial's workspace"),
                ("--workspace", "it runs in the trial's workspace"),
                ("--output-format", STREAM),
                ("--tool-format", STREAM),
                ("--name", SESSION),
                ("-r", SESSION),
                ("--resume", SESSION),
                ("-m", "use `model:`"),
                ("--model", "use `model:`"),
            ],
            Self::Cline => &[
                ("--json", STREAM),
                (
                    "--id",
                    "headless Cline cannot resume: `--id` opens its interactive UI",
                ),
                ("-i", "deltabench runs it headless"),
                ("--tui", "deltabench runs it headless"),
                ("--acp", "deltabench runs it headless"),
                ("-z", "deltabench runs it headless"),
                ("--zen", "deltabench runs it headless"),
                ("-p", "it runs in act mode"),
                ("--plan", "it runs in act mode"),
                ("--auto-approve", "it runs with --auto-approve true"),
                ("-P", "deltabench points it at the endpoint"),
                ("--provider", "deltabench points it at the endpoint"),
                ("-k", "use `api_key:`"),
                ("--key", "use `api_key:`"),
                ("-m", "use `model:`"),
                ("--model", "use `model:`"),
                ("-s", "use `append_system_prompt:`"),
                ("--system", "use `append_system_prompt:`"),
                (
                    "--config",
                    "deltabench writes its settings into the agent's HOME",
                ),
                (
                    "--data-dir",
                    "deltabench reads its sessions from the agent's HOME",
                ),
                ("--worktree", "it must work in the trial's workspace"),
                ("-c", "it runs in the trial's workspace"),
                ("--cwd", "it runs in the trial's workspace"),
            ],
            Self::GrokCli => &[
                ("-p", PROMPT),
                ("--prompt", PROMPT),
                ("-m", "use `model:`"),
                ("--model", "use `model:`"),
                ("-u", "deltabench points it at the endpoint"),
                ("--base-url", "deltabench points it at the endpoint"),
                ("-k", "use `api_key:`"),
                ("--api-key", "use `api_key:`"),
                ("--max-tool-rounds", "use `max_turns:`"),
                ("-d", "it runs in the trial's workspace"),
                ("--directory", "it runs in the trial's workspace"),
            ],
            // Its whole command line is the agent's own template.
            Self::Cli => &[],
        }
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
    #[error("`scripted:` needs a script path, e.g. `scripted:model.yaml`")]
    NoScript,
    #[error(
        "endpoint '{0}' is neither a URL (http://HOST:PORT, the server root) nor `scripted:PATH`"
    )]
    Unknown(String),
}

/// Config shared by every real-CLI kind; keys a kind does not support are rejected at load.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HarnessConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_turns: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permission_mode: Option<String>,
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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<Endpoint>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key: Option<String>,
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
    fn kinds_round_trip_and_list_their_keys() {
        for &kind in HarnessKind::ALL {
            assert_eq!(HarnessKind::parse(kind.as_str()), Some(kind));
        }
        assert!(!HarnessKind::Aider.keys().contains(&"max_turns"));
        assert!(
            !HarnessKind::MiniSweAgent
                .keys()
                .contains(&"permission_mode")
        );
        assert!(HarnessKind::Codex.keys().contains(&"max_turns"));
        assert_eq!(
            HarnessKind::ClaudeCode.reserved_flag("--output-format=text"),
            Some(("--output-format", "deltabench reads this output format"))
        );
        assert_eq!(HarnessKind::ClaudeCode.reserved_flag("--bare"), None);
        assert_eq!(HarnessKind::Aider.reserved_flag("--edit-format"), None);
        assert_eq!(
            HarnessKind::Pi.reserved_flag("--session-dir=/tmp"),
            Some(("--session-dir", "resume through CodingTask.session_id"))
        );
        assert_eq!(HarnessKind::Pi.reserved_flag("--thinking"), None);
        assert!(HarnessKind::Gptme.reserved_flag("--tool-format").is_some());
        assert!(HarnessKind::Gptme.keys().contains(&"max_turns"));
        assert!(!HarnessKind::Gptme.keys().contains(&"append_system_prompt"));
        assert_eq!(
            HarnessConfig::default().permission_mode(HarnessKind::ClaudeCode),
            Some("bypassPermissions")
        );
    }
}
