//! Each dialect's stream with the workspace path split at every position: recorded, it holds
//! the placeholder whole; replayed, the client reassembles the text with the current path.

use serde_json::{Value, json};

use super::*;
use crate::gateway::record::{kept_answer, with_places};

const OLD: &str = "/work/run-1234/ws/hello--claude--1/merged";
const NEW: &str = "/work/run-98/ws/hello--claude--1/merged";

fn data(out: &mut String, event: Value) {
    out.push_str(&format!("data: {event}\n\n"));
}

fn places(path: &str) -> Vec<(String, String)> {
    vec![(path.to_owned(), "<workspace>".to_owned())]
}

/// What a client reads from a stream: each stream's fragments joined (`pointers` name them).
fn reassembled(dialect: Dialect, sse: &str) -> Vec<String> {
    let mut streams: Vec<(String, String)> = Vec::new();
    for line in sse.lines() {
        let Some(Ok(event)) = line
            .strip_prefix("data: ")
            .map(serde_json::from_str::<Value>)
        else {
            continue;
        };
        for (key, pointer) in fragments(dialect, &event) {
            let text = event.pointer(&pointer).and_then(Value::as_str).unwrap();
            match streams.iter_mut().find(|(k, _)| *k == key) {
                Some((_, joined)) => joined.push_str(text),
                None => streams.push((key, text.to_owned())),
            }
        }
    }
    streams.into_iter().map(|(_, text)| text).collect()
}

/// `build` makes a stream of `whole` in the given pieces: for every cut of `whole` in two and
/// for one character a piece, the recording holds no part of the old path and the replay
/// reassembles to `whole` with the new one.
fn splits_at_every_position(dialect: Dialect, whole: &str, build: impl Fn(&[&str]) -> String) {
    assert!(whole.contains(OLD));
    let wanted = whole.replace(OLD, NEW);
    let chars: Vec<String> = whole.chars().map(String::from).collect();
    let mut cases: Vec<Vec<&str>> = whole
        .char_indices()
        .map(|(i, _)| vec![&whole[..i], &whole[i..]])
        .collect();
    cases.push(chars.iter().map(String::as_str).collect());
    for pieces in cases {
        let sse = build(&pieces);
        assert_eq!(reassembled(dialect, &sse), [whole], "{sse}");
        let kept = kept_answer(&sse, Some(dialect), None, &places(OLD));
        assert!(!kept.contains("/work/run-1234"), "{kept}");
        assert!(kept.contains("<workspace>"), "{kept}");
        let replayed = with_places(&kept, &places(NEW));
        assert_eq!(reassembled(dialect, &replayed), [wanted.as_str()], "{kept}");
    }
}

fn anthropic(kind: &str, field: &str) -> impl Fn(&[&str]) -> String {
    move |pieces| {
        let mut out = "event: message_start\ndata: {\"type\":\"message_start\"}\n\n".to_owned();
        for piece in pieces {
            out.push_str("event: content_block_delta\n");
            data(
                &mut out,
                json!({"type": "content_block_delta", "index": 1,
                    "delta": {"type": kind, field: piece}}),
            );
        }
        out
    }
}

#[test]
fn anthropic_text_and_tool_input() {
    let input = json!({"file_path": format!("{OLD}/hello.txt"), "content": "hi"}).to_string();
    splits_at_every_position(
        Dialect::Anthropic,
        &input,
        anthropic("input_json_delta", "partial_json"),
    );
    let text = format!("I'll write {OLD}/hello.txt.");
    splits_at_every_position(Dialect::Anthropic, &text, anthropic("text_delta", "text"));
}

#[test]
fn chat_text_and_tool_arguments() {
    let text = format!("Working in {OLD}.");
    splits_at_every_position(Dialect::Chat, &text, |pieces| {
        let mut out = String::new();
        for piece in pieces {
            data(
                &mut out,
                json!({"choices": [{"index": 0, "delta": {"content": piece}}]}),
            );
        }
        out.push_str("data: [DONE]\n\n");
        out
    });
    let arguments = json!({"command": format!("cat {OLD}/hello.txt")}).to_string();
    splits_at_every_position(Dialect::Chat, &arguments, |pieces| {
        let mut out = String::new();
        for piece in pieces {
            data(
                &mut out,
                json!({"choices": [{"index": 0, "delta": {"tool_calls": [
                    {"index": 0, "function": {"arguments": piece}}]}}]}),
            );
        }
        out
    });
}

#[test]
fn responses_text_and_function_arguments() {
    let build = |kind: &'static str| {
        move |pieces: &[&str]| {
            let mut out = String::new();
            for piece in pieces {
                out.push_str(&format!("event: {kind}\n"));
                data(
                    &mut out,
                    json!({"type": kind, "item_id": "fc_1", "output_index": 0,
                        "content_index": 0, "delta": piece}),
                );
            }
            out
        }
    };
    let text = format!("Working in {OLD}.");
    splits_at_every_position(
        Dialect::Responses,
        &text,
        build("response.output_text.delta"),
    );
    let arguments = json!({"cmd": format!("cat {OLD}/hello.txt")}).to_string();
    splits_at_every_position(
        Dialect::Responses,
        &arguments,
        build("response.function_call_arguments.delta"),
    );
}

#[test]
fn gemini_text() {
    let text = format!("Working in {OLD}.");
    splits_at_every_position(Dialect::Gemini, &text, |pieces| {
        let mut out = String::new();
        for piece in pieces {
            data(
                &mut out,
                json!({"candidates": [{"content": {"role": "model", "parts": [{"text": piece}]},
                    "index": 0}]}),
            );
        }
        out
    });
}

#[test]
fn unchanged_events_keep_their_bytes_and_a_split_key_is_redacted() {
    // Spaces and key order a re-encoding would lose.
    let untouched = "event: x\ndata:  {\"type\": \"message_start\", \"a\": 1}\r\n\r\n";
    let sse = format!(
        "{untouched}{}{}",
        "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"key sk-se\"}}\n\n",
        "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"cret!\"}}\n\n",
    );
    let kept = kept_answer(&sse, Some(Dialect::Anthropic), Some("sk-secret"), &[]);
    assert!(kept.starts_with(untouched), "{kept}");
    assert!(!kept.contains("sk-se"), "{kept}");
    assert_eq!(
        reassembled(Dialect::Anthropic, &kept),
        ["key [REDACTED:api_key]!"]
    );
    // Nothing split: the bytes are the stream's.
    let whole = format!(
        "data: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":\"{OLD}\"}}}}\n\n"
    );
    assert_eq!(unsplit(Dialect::Anthropic, &whole, &[OLD]), whole);
}

#[test]
fn places_in_other_streams_and_overlapping_places() {
    // Two blocks interleaved: each is reassembled on its own.
    let (a, b) = OLD.split_at(10);
    let event = |index: u32, text: &str| {
        json!({"type": "content_block_delta", "index": index,
            "delta": {"type": "text_delta", "text": text}})
    };
    let mut sse = String::new();
    for (index, text) in [(0, a), (1, "x"), (0, b), (1, "y")] {
        data(&mut sse, event(index, text));
    }
    let kept = kept_answer(&sse, Some(Dialect::Anthropic), None, &places(OLD));
    assert_eq!(
        reassembled(Dialect::Anthropic, &kept),
        ["<workspace>", "xy"]
    );
    // A place that holds another: the longer wins.
    let short = OLD.rsplit_once('/').unwrap().0;
    let both = vec![
        (OLD.to_owned(), "<workspace>".to_owned()),
        (short.to_owned(), "<parent>".to_owned()),
    ];
    let sse =
        anthropic("text_delta", "text")(&[&OLD[..20], &OLD[20..], "/f ", &short[..5], &short[5..]]);
    let kept = kept_answer(&sse, Some(Dialect::Anthropic), None, &both);
    assert_eq!(
        reassembled(Dialect::Anthropic, &kept),
        ["<workspace>/f <parent>"]
    );
}
