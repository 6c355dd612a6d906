//! OpenAI Responses (`POST /v1/responses`, Codex): SSE items, then `response.completed`.

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};

use super::request::{self, SIDE_TEXT};
use super::script::{HttpError, Script};
use super::tools::{Answer, Input, Outcome, Tool, new_id};

/// The advertised tools: `function` and freeform `custom` ones (hosted tools have no name).
pub(crate) fn tools(body: &Value) -> Vec<Tool> {
    body.get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|t| {
            let name = t.get("name")?.as_str()?;
            match t.get("type").and_then(Value::as_str) {
                Some("custom") => Some(Tool {
                    name: name.to_owned(),
                    custom: true,
                    properties: Default::default(),
                }),
                Some("function") | None => Some(Tool::function(name, t.get("parameters"))),
                _ => None,
            }
        })
        .collect()
}

/// Tool outputs already in the input.
pub(crate) fn step(body: &Value) -> usize {
    request::distinct(
        body.get("input")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|item| {
                item.get("type")
                    .and_then(Value::as_str)
                    .is_some_and(|t| t.ends_with("_call_output"))
            })
            .filter_map(|item| item.get("call_id")?.as_str()),
    )
}

pub(crate) fn outcome(script: &Script, body: &Value) -> Outcome {
    let tools = tools(body);
    if tools.is_empty() {
        return request::side_answer(SIDE_TEXT);
    }
    request::main_outcome(script, step(body), &tools, body, "call_")
}

pub(crate) fn respond(script: &Script, body: &Value) -> Response {
    let model = body.get("model").cloned().unwrap_or(json!("scripted"));
    match outcome(script, body) {
        Outcome::Error(e) => error(&e),
        Outcome::Answer(answer) if body.get("stream") == Some(&json!(false)) => {
            request::json(StatusCode::OK, &response(&answer, &items(&answer), &model))
        }
        Outcome::Answer(answer) => request::sse(stream(&answer, &model, script.split)),
    }
}

pub(crate) fn error(e: &HttpError) -> Response {
    request::error(e, &openai_error(e))
}

/// The OpenAI error body (Responses and Chat Completions share it).
pub(crate) fn openai_error(e: &HttpError) -> Value {
    let kind = match e.status {
        400 => "invalid_request_error",
        401 => "authentication_error",
        429 => "rate_limit_exceeded",
        _ => "server_error",
    };
    json!({"error": {"message": e.message, "type": kind, "param": null, "code": kind}})
}

fn items(answer: &Answer) -> Vec<Value> {
    let mut items = Vec::new();
    if let Some(text) = &answer.text {
        items.push(json!({
            "type": "message", "id": new_id("msg_"), "status": "completed", "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }));
    }
    if let Some(call) = &answer.call {
        items.push(match &call.input {
            Input::Text(input) => json!({
                "type": "custom_tool_call", "id": new_id("ctc_"), "status": "completed",
                "call_id": call.id, "name": call.name, "input": input,
            }),
            Input::Json(_) => json!({
                "type": "function_call", "id": new_id("fc_"), "status": "completed",
                "call_id": call.id, "name": call.name, "arguments": call.arguments(),
            }),
        });
    }
    items
}

fn usage(answer: &Answer) -> Value {
    let u = answer.usage;
    // OpenAI counts cached tokens inside input_tokens.
    let input = u.input_tokens + u.cache_read_tokens;
    json!({
        "input_tokens": input,
        "input_tokens_details": {
            "cached_tokens": u.cache_read_tokens,
            // Codex reads cache writes here (its turn.completed cache_write_input_tokens).
            "cache_write_tokens": u.cache_write_tokens,
        },
        "output_tokens": u.output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input + u.output_tokens,
    })
}

fn response(answer: &Answer, items: &[Value], model: &Value) -> Value {
    json!({
        "id": new_id("resp_"), "object": "response", "created_at": request::now(),
        "status": "completed", "model": model, "output": items, "usage": usage(answer),
    })
}

/// response.created, output_item.added/.done per item, response.completed. With `split`, as
/// the API streams: an item is added empty, its text or arguments follow as deltas in pieces,
/// and `.done` carries it whole.
fn stream(answer: &Answer, model: &Value, split: Option<usize>) -> String {
    let mut out = String::new();
    let mut seq = 0;
    let mut emit = |out: &mut String, name: &str, mut data: Value| {
        data["type"] = json!(name);
        data["sequence_number"] = json!(seq);
        seq += 1;
        request::event(out, name, &data);
    };
    let items = items(answer);
    let done = response(answer, &items, model);
    let mut created = done.clone();
    created["status"] = json!("in_progress");
    created["output"] = json!([]);
    created["usage"] = Value::Null;
    emit(&mut out, "response.created", json!({"response": created}));
    for (index, item) in items.into_iter().enumerate() {
        let mut added = item.clone();
        added["status"] = json!("in_progress");
        let streamed = split.and_then(|_| match item["type"].as_str() {
            Some("message") => Some(("content", json!([]), "response.output_text.delta")),
            Some("function_call") => Some((
                "arguments",
                json!(""),
                "response.function_call_arguments.delta",
            )),
            Some("custom_tool_call") => {
                Some(("input", json!(""), "response.custom_tool_call_input.delta"))
            }
            _ => None,
        });
        if let Some((field, empty, _)) = &streamed {
            added[*field] = empty.clone();
        }
        emit(
            &mut out,
            "response.output_item.added",
            json!({"output_index": index, "item": added}),
        );
        if let Some((field, _, event)) = streamed {
            let whole = match field {
                "content" => &item["content"][0]["text"],
                _ => &item[field],
            };
            for piece in request::pieces(whole.as_str().unwrap_or_default(), split) {
                let mut delta =
                    json!({"item_id": item["id"], "output_index": index, "delta": piece});
                if field == "content" {
                    delta["content_index"] = json!(0);
                }
                emit(&mut out, event, delta);
            }
        }
        emit(
            &mut out,
            "response.output_item.done",
            json!({"output_index": index, "item": item}),
        );
    }
    emit(&mut out, "response.completed", json!({"response": done}));
    out
}
