//! `deltabench model serve`: run the scripted model endpoint until SIGINT or SIGTERM.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;

use clap::Subcommand;

use super::{CliError, EXIT_OK, print_stdout};
use crate::model::{RequestLog, Script, ScriptError, ScriptedServer};

const SCRIPT_HELP: &str = "\
The script (YAML) says what the model answers, step by step:

  usage: {input_tokens: 1000, output_tokens: 20, cache_read_tokens: 0, cache_write_tokens: 0}
  loop: false            # true: past the last step, repeat it forever
  steps:
    - text: I'll create hello.txt.
      write: {path: hello.txt, content: \"hello\\n\"}   # at most one action: write or shell
    - shell: cat hello.txt
      usage: {input_tokens: 1200}                    # per-step override
    - text: Done.                                    # no action: the turn ends
    - error: {status: 429, message: slow down, retry_after: 2}

A request's step is the number of distinct tool results in its history. Past the last step
the answer is \"Done.\". `write` and `shell` become the client's own tools (Claude Write/Bash,
Codex apply_patch/exec_command, Gemini write_file/run_shell_command, opencode write/bash,
mini-swe-agent bash, aider a SEARCH/REPLACE block). Side calls (titles, commit messages)
report zero usage.

Point clients at the printed root URL: ANTHROPIC_BASE_URL=URL, GOOGLE_GEMINI_BASE_URL=URL,
and URL/v1 for OpenAI-style clients (Codex, opencode, mini-swe-agent, aider).";

#[derive(Debug, clap::Args)]
pub(super) struct ModelArgs {
    #[command(subcommand)]
    command: ModelCommand,
}

#[derive(Debug, Subcommand)]
enum ModelCommand {
    /// Serve a scripted model on 127.0.0.1 for agent CLIs (Anthropic, OpenAI Responses and
    /// Chat Completions, Gemini), until SIGINT or SIGTERM.
    ///
    /// Prints `listening on http://127.0.0.1:PORT` once ready.
    #[command(after_help = SCRIPT_HELP)]
    Serve(ServeArgs),
}

#[derive(Debug, clap::Args)]
struct ServeArgs {
    /// The script file (YAML).
    #[arg(value_name = "SCRIPT")]
    script: PathBuf,
    /// The port on 127.0.0.1 [default: any free port].
    #[arg(long, value_name = "N")]
    port: Option<u16>,
    /// Also write each request (auth headers redacted) as a JSON line to FILE.
    #[arg(long, value_name = "FILE")]
    log: Option<PathBuf>,
}

impl From<ScriptError> for CliError {
    fn from(err: ScriptError) -> Self {
        CliError::usage(err.to_string()).hint(Some(
            "`deltabench model serve --help` describes the script".into(),
        ))
    }
}

pub(super) async fn model_cmd(args: ModelArgs) -> Result<u8, CliError> {
    match args.command {
        ModelCommand::Serve(args) => serve(args).await,
    }
}

async fn serve(args: ServeArgs) -> Result<u8, CliError> {
    let script = Script::load(&args.script)?;
    let log: Option<RequestLog> = match &args.log {
        Some(path) => {
            Some(Box::new(std::fs::File::create(path).map_err(|e| {
                CliError::usage(format!("--log {}: {e}", path.display()))
            })?))
        }
        None => None,
    };
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, args.port.unwrap_or(0)));
    let server = ScriptedServer::start_with_log(script, addr, log)
        .await
        .map_err(|e| CliError::usage(format!("cannot listen on {addr}: {e}")))?;
    print_stdout(&format!("listening on {}\n", server.url()));
    wait_for_signal().await;
    server.stop().await;
    Ok(EXIT_OK)
}

async fn wait_for_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) {
        (Ok(mut int), Ok(mut term)) => {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
        }
        // Without signal handlers, Ctrl-C still ends the process the default way.
        _ => std::future::pending().await,
    }
}
