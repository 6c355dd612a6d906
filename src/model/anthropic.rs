//! Anthropic Messages (`POST /v1/messages`, Claude Code): streaming SSE or one JSON message.

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};

use super::request::{self, SIDE_TEXT};
use super::script::{HttpError, Script};
use super::tools::{Answer, Outcome, Tool, new_id};

/// The advertised tools.
pub(crate) fn tools(body: &Value) -> Vec<Tool> {
    body.get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|t| {
            Some(Tool::function(
                t.get("name")?.as_str()?,
                t.get("input_schema"),
            ))
        })
        .collect()
}

/// Tool results already in the history.
pub(crate) fn step(body: &Value) -> usize {
    let messages = body.get("messages").and_then(Value::as_array);
    request::distinct(
        messages
            .into_iter()
            .flatten()
            .filter_map(|m| m.get("content")?.as_array())
            .flatten()
            .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool_result"))
            .filter_map(|b| b.get("tool_use_id")?.as_str()),
    )
}

/// What a request gets.
pub(crate) fn outcome(script: &Script, body: &Value) -> Outcome {
    let tools = tools(body);
    if tools.is_empty() {
        return request::side_answer(SIDE_TEXT);
    }
    request::main_outcome(script, step(body), &tools, body, "toolu_")
}

pub(crate) fn respond(script: &Script, body: &Value) -> Response {
    let model = body.get("model").cloned().unwrap_or(json!("scripted"));
    match outcome(script, body) {
        Outcome::Error(e) => error(&e),
        Outcome::Answer(answer) if body.get("stream") == Some(&json!(true)) => {
            request::sse(stream(&answer, &model, script.split))
        }
        Outcome::Answer(answer) => request::json(StatusCode::OK, &message(&answer, &model)),
    }
}

pub(crate) fn error(e: &HttpError) -> Response {
    let kind = match e.status {
        400 | 413 => "invalid_request_error",
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        _ => "api_error",
    };
    request::error(
        e,
        &json!({"type": "error", "error": {"type": kind, "message": e.message}}),
    )
}

/// `count_tokens`: the script's input size, so budgets stay predictable.
pub(crate) fn count_tokens(script: &Script) -> Response {
    request::json(
        StatusCode::OK,
        &json!({"input_tokens": script.usage.input_tokens}),
    )
}

fn blocks(answer: &Answer) -> Vec<Value> {
    let mut blocks = Vec::new();
    if let Some(text) = &answer.text {
        blocks.push(json!({"type": "text", "text": text}));
    }
    if let Some(call) = &answer.call {
        blocks.push(json!({"type": "tool_use", "id": call.id, "name": call.name, "input": call.args_object()}));
    }
    blocks
}

fn stop_reason(answer: &Answer) -> &'static str {
    if answer.call.is_some() {
        "tool_use"
    } else {
        "end_turn"
    }
}

fn usage(answer: &Answer, output_tokens: u64) -> Value {
    let u = answer.usage;
    json!({
        "input_tokens": u.input_tokens,
        "cache_creation_input_tokens": u.cache_write_tokens,
        "cache_read_input_tokens": u.cache_read_tokens,
        "output_tokens": output_tokens,
    })
}

fn message(answer: &Answer, model: &Value) -> Value {
    json!({
        "id": new_id("msg_"), "type": "message", "role": "assistant", "model": model,
        "content": blocks(answer), "stop_reason": stop_reason(answer), "stop_sequence": null,
        "usage": usage(answer, answer.usage.output_tokens),
    })
}

/// message_start, per block a start, its deltas (one, or one per piece of `split`
/// characters) and a stop, message_delta (stop reason and the output tokens), message_stop.
fn stream(answer: &Answer, model: &Value, split: Option<usize>) -> String {
    let mut out = String::new();
    let start_output = answer.usage.output_tokens.min(1);
    request::event(
        &mut out,
        "message_start",
        &json!({"type": "message_start", "message": {
            "id": new_id("msg_"), "type": "message", "role": "assistant", "model": model,
            "content": [], "stop_reason": null, "stop_sequence": null,
            "usage": usage(answer, start_output)}}),
    );
    for (index, block) in blocks(answer).into_iter().enumerate() {
        let (start, kind, field, whole) = match block.get("type").and_then(Value::as_str) {
            Some("tool_use") => (
                json!({"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}),
                "input_json_delta",
                "partial_json",
                block["input"].to_string(),
            ),
            _ => (
                json!({"type": "text", "text": ""}),
                "text_delta",
                "text",
                block["text"].as_str().unwrap_or_default().to_owned(),
            ),
        };
        request::event(
            &mut out,
            "content_block_start",
            &json!({"type": "content_block_start", "index": index, "content_block": start}),
        );
        for piece in request::pieces(&whole, split) {
            request::event(
                &mut out,
                "content_block_delta",
                &json!({"type": "content_block_delta", "index": index,
                    "delta": {"type": kind, field: piece}}),
            );
        }
        request::event(
            &mut out,
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": index}),
        );
    }
    request::event(
        &mut out,
        "message_delta",
        &json!({"type": "message_delta",
            "delta": {"stop_reason": stop_reason(answer), "stop_sequence": null},
            "usage": {"output_tokens": answer.usage.output_tokens}}),
    );
    request::event(&mut out, "message_stop", &json!({"type": "message_stop"}));
    out
}
