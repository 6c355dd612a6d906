//! A scripted model endpoint: a local HTTP server that speaks enough of four model APIs
//! (Anthropic Messages, OpenAI Responses, OpenAI Chat Completions, Gemini) to drive real
//! coding-agent CLIs offline, following a YAML [`Script`].
//!
//! It keeps no conversation state: the step of a request is the number of distinct tool
//! results already in its history (aider, which has no tools, counts this script's own
//! answers instead), so side calls and resumed sessions stay on script. The generic actions
//! (`write`, `shell`) become whichever native tool the client advertised, with absolute paths
//! from the working directory its prompt names. Side calls (titles, commit messages, JSON
//! checks) get a short answer and zero usage, so run totals equal the script's numbers.

mod anthropic;
mod chat;
mod gemini;
mod request;
mod responses;
mod script;
mod server;
mod tools;

#[cfg(test)]
mod tests;

pub use script::{Action, HttpError, Reply, Script, ScriptError, Step, Usage};
pub use server::{RequestLog, ScriptedServer, Served, without_delay};
