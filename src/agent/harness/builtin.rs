//! [`BuiltinCli`]: every fact about one built-in CLI, in that CLI's own file.
//!
//! Each CLI module (`claude.rs`, `codex.rs`, ...) has one unit struct implementing this trait;
//! [`HarnessKind::cli`](super::HarnessKind::cli) is the registry that names them. Code outside
//! those files asks the trait, never a kind by name.

use super::adapter::CliAdapter;
use super::cli::CliDialect;
use super::config::{HarnessConfig, HarnessKind, Package, TurnLimit};
use super::invocation::{Invocation, RunPaths};

/// How a CLI takes the task's instruction on its command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prompt {
    /// A positional argument after `--`, so a task starting with `-` is not an option.
    AfterDashes,
    /// A positional argument with no `--` before it: a task starting with `-` or `@` gets a
    /// leading space (pi reads `-x` as an option and `@x` as a file to attach).
    Spaced,
    /// A `--flag=TASK` the CLI's [`BuiltinCli::invoke`] writes itself.
    InFlag,
}

/// What a built-in CLI is, as data: the facts that need no code.
#[derive(Debug, Clone, Copy)]
pub struct Facts {
    /// The executable's name.
    pub program: &'static str,
    /// One line for the agent's description.
    pub description: &'static str,
    /// What docs/agents.md's table of CLIs says of it beyond the other facts.
    pub doc: Doc,
    /// The package that ships it, at the version deltabench was checked against.
    pub package: Package,
    /// The variable it reads its API key from when talking to its own provider.
    pub key_env: &'static str,
    /// Why `CodingTask::session_id` cannot continue one of its sessions; `None` when it can.
    pub no_resume: Option<&'static str>,
    /// The valid `permission_mode` values, the default first; empty when the key does not apply.
    pub permission_modes: &'static [&'static str],
    /// How `max_turns` reaches the CLI, if it can.
    pub turn_limit: TurnLimit,
    /// Whether `append_system_prompt` has somewhere to go.
    pub appends_system_prompt: bool,
    /// Flags `args:` may not pass, each with what to use instead.
    pub reserved_flags: &'static [(&'static str, &'static str)],
    /// Where the task's text goes on the command line.
    pub prompt: Prompt,
}

/// Why a CLI cannot resume, for most that cannot.
pub const NO_SESSION: &str = "it keeps no session of its own";

/// One built-in CLI: what it is, how it is configured, invoked and read.
pub trait BuiltinCli: CliAdapter {
    /// Its facts; the accessors below read them.
    fn facts(&self) -> &'static Facts;

    /// The executable's name.
    fn program(&self) -> &'static str {
        self.facts().program
    }

    /// One line for the agent's description.
    fn description(&self) -> &'static str {
        self.facts().description
    }

    /// What docs/agents.md's table of CLIs says of it beyond the other facts.
    fn doc(&self) -> Doc {
        self.facts().doc
    }

    /// The package that ships it, at the version deltabench was checked against.
    fn package(&self) -> Package {
        self.facts().package
    }

    /// The variable it reads its API key from when talking to its own provider.
    fn key_env(&self) -> &'static str {
        self.facts().key_env
    }

    /// Whether `CodingTask::session_id` can continue one of its sessions.
    fn can_resume(&self) -> bool {
        self.facts().no_resume.is_none()
    }

    /// Why it cannot resume, when it cannot.
    fn no_resume_reason(&self) -> &'static str {
        self.facts().no_resume.unwrap_or(NO_SESSION)
    }

    /// The valid `permission_mode` values, the default first; empty when the key does not apply.
    fn permission_modes(&self) -> &'static [&'static str] {
        self.facts().permission_modes
    }

    /// How `max_turns` reaches the CLI, if it can.
    fn turn_limit(&self) -> TurnLimit {
        self.facts().turn_limit
    }

    /// Whether `append_system_prompt` has somewhere to go.
    fn appends_system_prompt(&self) -> bool {
        self.facts().appends_system_prompt
    }

    /// Flags `args:` may not pass, each with what to use instead.
    fn reserved_flags(&self) -> &'static [(&'static str, &'static str)] {
        self.facts().reserved_flags
    }

    /// Where the task's text goes on the command line.
    fn prompt(&self) -> Prompt {
        self.facts().prompt
    }

    /// Adds its own arguments, environment and config files to `inv` (before `args:`, the
    /// prompt and `env:`, which [`super::invocation::invocation`] adds for every CLI).
    fn invoke(&self, config: &HarnessConfig, run: &RunPaths, inv: &mut Invocation);

    /// The API the gateway speaks to it when the agent names no endpoint; `None` when the
    /// gateway cannot stand in for its provider (it then runs direct).
    fn gateway_dialect(&self, config: &HarnessConfig) -> Option<CliDialect>;

    /// Why an agent of this CLI bypasses the gateway, for the error that needs it.
    fn gateway_bypass(&self) -> &'static str {
        "a model of a provider other than OpenAI without `endpoint:`"
    }

    /// A rule of its own the agent's config breaks, checked when the agents file loads.
    fn config_error(&self, _config: &HarnessConfig) -> Option<ConfigRule> {
        None
    }

    /// Whether a run needs an API key deltabench can check for (not when the CLI's own
    /// providers each read their own variable).
    fn needs_key(&self, _config: &HarnessConfig) -> bool {
        true
    }

    /// The oldest Node.js major version its code runs on, when that is newer than what a
    /// `#!/usr/bin/env node` script otherwise needs.
    fn min_node(&self) -> Option<u32> {
        None
    }
}

/// The words of a CLI's row in docs/agents.md's table ([`docs_table`]) that no other fact holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Doc {
    /// Its name as its makers write it.
    pub name: &'static str,
    /// After the program's name (where it comes from, when that is worth saying).
    pub program_note: &'static str,
    /// After `yes` or `no` in the resume column.
    pub resume_note: &'static str,
    /// The setting a native turn limit goes to.
    pub turns: &'static str,
    /// After its permission modes (or the `-` of none).
    pub modes_note: &'static str,
    /// Where the trial's cost comes from.
    pub cost: &'static str,
}

/// docs/agents.md's table of the built-in CLIs, one row per [`HarnessKind::ALL`], each from
/// its [`BuiltinCli`].
pub fn docs_table() -> String {
    let mut table = "| kind | CLI | resume | `max_turns` | `permission_mode` (default first) | cost comes from |\n|---|---|---|---|---|---|\n".to_owned();
    for &kind in HarnessKind::ALL {
        let Some(cli) = kind.cli() else { continue };
        let doc = cli.doc();
        let resume = if cli.can_resume() { "yes" } else { "no" };
        let turns = match cli.turn_limit() {
            TurnLimit::Native => format!("native ({})", doc.turns),
            TurnLimit::Enforced => "enforced by deltabench".to_owned(),
            TurnLimit::Unsupported => "-".to_owned(),
        };
        let modes = match cli.permission_modes() {
            [] => "-".to_owned(),
            modes => modes
                .iter()
                .map(|mode| format!("`{mode}`"))
                .collect::<Vec<_>>()
                .join(", "),
        };
        table += &format!(
            "| `{kind}` | {} {} (`{}`{}) | {resume}{} | {turns} | {modes}{} | {} |\n",
            doc.name,
            cli.package().version,
            cli.program(),
            doc.program_note,
            doc.resume_note,
            doc.modes_note,
            doc.cost
        );
    }
    table
}

/// A CLI's own rule on its config: the key to point at, and what is wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConfigRule {
    /// The config key the error names.
    pub key: &'static str,
    /// What is wrong with it, as the error shows it.
    pub message: &'static str,
}

/// Why a reserved flag is deltabench's: the stream it parses.
pub const STREAM: &str = "deltabench reads this output format";
/// Why a reserved flag is deltabench's: the session it resumes.
pub const SESSION: &str = "resume through CodingTask.session_id";
/// Why a reserved flag is deltabench's: the prompt.
pub const PROMPT: &str = "the task's instruction is the prompt";
