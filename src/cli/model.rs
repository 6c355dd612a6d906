//! `deltabench model serve`: run the scripted model endpoint until SIGINT or SIGTERM.

use std::net::{Ipv4Addr, SocketAddr};

use tokio::signal::unix::{Signal, SignalKind, signal};

use super::args::{ModelArgs, ModelCommand, ServeArgs};
use super::exit::Exit;
use super::{CliError, ErrorKind, print_stdout};
use crate::model::{RequestLog, Script, ScriptedServer};

pub(super) async fn model(args: ModelArgs) -> Result<Exit, CliError> {
    match args.command {
        ModelCommand::Serve(args) => serve(args).await,
    }
}

async fn serve(args: ServeArgs) -> Result<Exit, CliError> {
    let script = Script::load(&args.script)?;
    let log: Option<RequestLog> = match &args.log {
        Some(path) => Some(Box::new(std::fs::File::create(path).map_err(|e| {
            CliError::with_cause(ErrorKind::Usage, format!("--log {}", path.display()), e)
        })?)),
        None => None,
    };
    // Before the URL is printed: whoever reads it may send SIGTERM at once, and must find it
    // handled, not the default action.
    let signals = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    );
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, args.port.unwrap_or(0)));
    let server = ScriptedServer::start_with_log(script, addr, log)
        .await
        .map_err(|e| {
            CliError::with_cause(ErrorKind::Usage, format!("cannot listen on {addr}"), e)
        })?;
    print_stdout(&format!("listening on {}\n", server.url()));
    wait_for_signal(signals).await;
    server.stop().await;
    Ok(Exit::Ok)
}

async fn wait_for_signal(signals: (std::io::Result<Signal>, std::io::Result<Signal>)) {
    match signals {
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
