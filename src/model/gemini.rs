//! Gemini (`POST /v1beta/models/<model>:streamGenerateContent?alt=sse`, `:generateContent`,
//! `:countTokens`; Gemini CLI). JSON side calls get an object that fits their schema.

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Value, json};

use super::request::{self, SIDE_TEXT};
use super::script::{HttpError, Script};
use super::tools::{Answer, Outcome, Tool, fit_schema};

pub(crate) fn tools(body: &Value) -> Vec<Tool> {
    body.get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|t| t.get("functionDeclarations")?.as_array())
        .flatten()
        .filter_map(|d| {
            let schema = d.get("parametersJsonSchema").or(d.get("parameters"));
            Some(Tool::function(d.get("name")?.as_str()?, schema))
        })
        .collect()
}

/// Function responses already in the history; a resume replays them, so distinct ones.
pub(crate) fn step(body: &Value) -> usize {
    let keys: Vec<String> = body
        .get("contents")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|c| c.get("parts")?.as_array())
        .flatten()
        .filter_map(|p| p.get("functionResponse"))
        .map(|r| match r.get("id").and_then(Value::as_str) {
            Some(id) => id.to_owned(),
            None => r.to_string(),
        })
        .collect();
    request::distinct(keys.iter().map(String::as_str))
}

/// The response schema of a structured (JSON) side call.
fn json_schema(body: &Value) -> Option<&Value> {
    let config = body.get("generationConfig")?;
    let mime = config.get("responseMimeType").and_then(Value::as_str);
    let schema = config
        .get("responseJsonSchema")
        .or(config.get("responseSchema"))
        .or(config.get("_responseJsonSchema"));
    match (mime, schema) {
        (_, Some(schema)) => Some(schema),
        (Some("application/json"), None) => Some(&Value::Null),
        _ => None,
    }
}

pub(crate) fn outcome(script: &Script, body: &Value) -> Outcome {
    let tools = tools(body);
    if !tools.is_empty() {
        return request::main_outcome(script, step(body), &tools, body, "");
    }
    match json_schema(body) {
        Some(Value::Null) => request::side_answer("{}"),
        Some(schema) => request::side_answer(&fit_schema(schema, "").to_string()),
        None => request::side_answer(SIDE_TEXT),
    }
}

/// `target` is the path's last segment, `<model>:<method>`; the method is
/// streamGenerateContent, generateContent or countTokens.
pub(crate) fn respond(script: &Script, target: &str, body: &Value) -> Response {
    let (model, method) = target.split_once(':').unwrap_or(("scripted", target));
    if method == "countTokens" {
        return request::json(
            StatusCode::OK,
            &json!({"totalTokens": script.usage.input_tokens}),
        );
    }
    match outcome(script, body) {
        Outcome::Error(e) => error(&e),
        Outcome::Answer(answer) if method == "streamGenerateContent" => {
            request::sse(stream(&answer, model, script.split))
        }
        Outcome::Answer(answer) => request::json(StatusCode::OK, &chunk(&answer, model)),
    }
}

pub(crate) fn error(e: &HttpError) -> Response {
    request::error(
        e,
        &json!({"error": {"code": e.status, "message": e.message,
            "status": request::google_status(e.status)}}),
    )
}

/// One chunk with the whole answer; with `split`, first a chunk per piece of the text but the
/// last, as Gemini streams text (a function call comes whole).
fn stream(answer: &Answer, model: &str, split: Option<usize>) -> String {
    let mut out = String::new();
    let mut last = answer.clone();
    if let Some(text) = &answer.text {
        let mut pieces = request::pieces(text, split);
        last.text = pieces.pop();
        for piece in pieces {
            let part = json!({"candidates": [{"content": {"role": "model",
                "parts": [{"text": piece}]}, "index": 0}], "modelVersion": model});
            request::data(&mut out, &part.to_string());
        }
    }
    request::data(&mut out, &chunk(&last, model).to_string());
    out
}

/// One chunk holds the whole answer; `modelVersion` names the requested model, which Gemini
/// CLI keys its stats by.
fn chunk(answer: &Answer, model: &str) -> Value {
    let mut parts = Vec::new();
    if let Some(text) = &answer.text {
        parts.push(json!({"text": text}));
    }
    if let Some(call) = &answer.call {
        parts.push(json!({"functionCall": {"name": call.name, "args": call.args_object()}}));
    }
    let u = answer.usage;
    // Gemini counts cached tokens inside promptTokenCount.
    let prompt = u.input_tokens + u.cache_read_tokens;
    json!({
        "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": {
            "promptTokenCount": prompt,
            "candidatesTokenCount": u.output_tokens,
            "totalTokenCount": prompt + u.output_tokens,
            "cachedContentTokenCount": u.cache_read_tokens,
        },
        "modelVersion": model,
    })
}
