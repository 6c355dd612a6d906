//! OpenAI Chat Completions (`POST /v1/chat/completions`): opencode and aider stream (SSE),
//! mini-swe-agent and aider's commit-message call do not (one JSON object).
//!
//! aider has no tools: it reads SEARCH/REPLACE blocks from the text, and every request carries
//! few-shot example turns. Its step is the number of this server's own earlier answers found
//! among the assistant messages, so it stays stateless too.

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};

use super::request::{self, SIDE_TEXT};
use super::responses::openai_error;
use super::script::{Action, HttpError, Script, Step, Usage};
use super::tools::{Answer, Outcome, Tool, new_id};

/// aider's commit-message answer.
pub(crate) const COMMIT_MESSAGE: &str = "Apply the scripted model's edits";

pub(crate) fn tools(body: &Value) -> Vec<Tool> {
    body.get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|t| {
            let f = t.get("function")?;
            Some(Tool::function(
                f.get("name")?.as_str()?,
                f.get("parameters"),
            ))
        })
        .collect()
}

fn messages(body: &Value) -> impl Iterator<Item = &Value> {
    body.get("messages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

/// A message's text, whether `content` is a string or a list of parts.
fn content(message: &Value) -> String {
    match message.get("content") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(""),
        _ => String::new(),
    }
}

fn role(message: &Value) -> &str {
    message.get("role").and_then(Value::as_str).unwrap_or("")
}

/// `role:"tool"` messages already in the history.
pub(crate) fn step(body: &Value) -> usize {
    request::distinct(
        messages(body)
            .filter(|m| role(m) == "tool")
            .filter_map(|m| m.get("tool_call_id")?.as_str()),
    )
}

/// Which tool-less call this is.
#[derive(Debug, PartialEq, Eq)]
enum Plain {
    AiderMain,
    AiderCommit,
    Side,
}

fn plain_kind(body: &Value) -> Plain {
    let system: String = messages(body)
        .filter(|m| role(m) == "system")
        .map(content)
        .collect();
    if system.contains("commit message") {
        Plain::AiderCommit
    } else if messages(body).any(|m| content(m).contains("SEARCH/REPLACE")) {
        Plain::AiderMain
    } else {
        Plain::Side
    }
}

/// The text aider gets at a step: the step's text, and a SEARCH/REPLACE block that creates the
/// file for a `write` (aider runs no tools, so a `shell` is only text).
fn aider_text(step: &Step) -> Option<String> {
    let Step::Reply(reply) = step else {
        return None;
    };
    let mut text = reply.text.clone().unwrap_or_default();
    match &reply.action {
        Some(Action::Write { path, content }) => {
            let mut content = content.clone();
            if !content.is_empty() && !content.ends_with('\n') {
                content.push('\n');
            }
            if !text.is_empty() {
                text.push_str("\n\n");
            }
            text.push_str(&format!(
                "{path}\n```\n<<<<<<< SEARCH\n=======\n{content}>>>>>>> REPLACE\n```\n"
            ));
        }
        Some(Action::Shell { command }) if text.is_empty() => {
            text = format!("I would run `{command}`.");
        }
        _ => {}
    }
    Some(text)
}

/// aider's step: how many assistant messages are answers this script gives.
fn aider_step(script: &Script, body: &Value) -> usize {
    let ours: Vec<String> = (0..=script.steps.len())
        .filter_map(|i| aider_text(&script.step(i)))
        .map(|t| t.trim().to_owned())
        .filter(|t| !t.is_empty())
        .collect();
    messages(body)
        .filter(|m| role(m) == "assistant")
        .filter(|m| ours.contains(&content(m).trim().to_owned()))
        .count()
}

pub(crate) fn outcome(script: &Script, body: &Value) -> Outcome {
    let tools = tools(body);
    if !tools.is_empty() {
        return request::main_outcome(script, step(body), &tools, body, "call_");
    }
    match plain_kind(body) {
        Plain::AiderCommit => request::side_answer(COMMIT_MESSAGE),
        Plain::Side => request::side_answer(SIDE_TEXT),
        Plain::AiderMain => {
            let step = script.step(aider_step(script, body));
            match (&step, aider_text(&step)) {
                (Step::Error(e), _) => Outcome::Error(e.clone()),
                (Step::Reply(reply), text) => Outcome::Answer(Answer {
                    text,
                    call: None,
                    usage: reply.usage,
                }),
            }
        }
    }
}

pub(crate) fn respond(script: &Script, body: &Value) -> Response {
    let model = body.get("model").cloned().unwrap_or(json!("scripted"));
    match outcome(script, body) {
        Outcome::Error(e) => error(&e),
        Outcome::Answer(answer) if body.get("stream") == Some(&json!(true)) => {
            let include_usage = body.pointer("/stream_options/include_usage") == Some(&json!(true));
            request::sse(stream(&answer, &model, include_usage, script.split))
        }
        Outcome::Answer(answer) => request::json(StatusCode::OK, &completion(&answer, &model)),
    }
}

pub(crate) fn error(e: &HttpError) -> Response {
    request::error(e, &openai_error(e))
}

fn usage(u: Usage) -> Value {
    // OpenAI counts cached tokens inside prompt_tokens.
    let prompt = u.input_tokens + u.cache_read_tokens;
    json!({
        "prompt_tokens": prompt,
        "completion_tokens": u.output_tokens,
        "total_tokens": prompt + u.output_tokens,
        "prompt_tokens_details": {"cached_tokens": u.cache_read_tokens},
    })
}

fn finish_reason(answer: &Answer) -> &'static str {
    if answer.call.is_some() {
        "tool_calls"
    } else {
        "stop"
    }
}

fn tool_calls(answer: &Answer) -> Option<Value> {
    answer.call.as_ref().map(|call| {
        json!([{"id": call.id, "type": "function",
            "function": {"name": call.name, "arguments": call.arguments()}}])
    })
}

fn completion(answer: &Answer, model: &Value) -> Value {
    let mut message = json!({"role": "assistant", "content": answer.text});
    if let Some(calls) = tool_calls(answer) {
        message["tool_calls"] = calls;
    }
    json!({
        "id": new_id("chatcmpl-"), "object": "chat.completion", "created": request::now(),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason(answer)}],
        "usage": usage(answer.usage),
    })
}

/// Chunks: role, text, the tool call (with an index, as streamed tool calls need), the finish
/// reason, then a usage chunk with no choices when `stream_options.include_usage` asks for it;
/// otherwise the usage rides on the finish chunk (litellm, hence aider, reads it there). With
/// `split`, the text and the arguments come in pieces, the call's id and name in the first.
fn stream(answer: &Answer, model: &Value, include_usage: bool, split: Option<usize>) -> String {
    let id = new_id("chatcmpl-");
    let created = request::now();
    let chunk = |delta: Value, finish: Value| {
        json!({"id": id, "object": "chat.completion.chunk", "created": created, "model": model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
    };
    let mut out = String::new();
    request::data(
        &mut out,
        &chunk(json!({"role": "assistant", "content": ""}), Value::Null).to_string(),
    );
    if let Some(text) = &answer.text {
        for piece in request::pieces(text, split) {
            request::data(
                &mut out,
                &chunk(json!({"content": piece}), Value::Null).to_string(),
            );
        }
    }
    if let Some(call) = &answer.call {
        for (i, piece) in request::pieces(&call.arguments(), split)
            .into_iter()
            .enumerate()
        {
            let delta = if i == 0 {
                json!({"index": 0, "id": call.id, "type": "function",
                    "function": {"name": call.name, "arguments": piece}})
            } else {
                json!({"index": 0, "function": {"arguments": piece}})
            };
            request::data(
                &mut out,
                &chunk(json!({"tool_calls": [delta]}), Value::Null).to_string(),
            );
        }
    }
    let mut finish = chunk(json!({}), json!(finish_reason(answer)));
    if !include_usage {
        finish["usage"] = usage(answer.usage);
    }
    request::data(&mut out, &finish.to_string());
    if include_usage {
        let last = json!({"id": id, "object": "chat.completion.chunk", "created": created,
            "model": model, "choices": [], "usage": usage(answer.usage)});
        request::data(&mut out, &last.to_string());
    }
    request::data(&mut out, "[DONE]");
    out
}
