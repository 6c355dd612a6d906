//! A streamed answer as the client reassembles it. Providers split a stream's text and tool
//! arguments into fragments at arbitrary points, so a place (a workspace path, a key) may
//! straddle two events, where a replacement over the raw bytes misses it. [`unsplit`] moves
//! each such place whole into the fragment where it starts: what the client reassembles is
//! unchanged, and the raw text then holds every place whole.

use serde_json::Value;

use super::dialect::Dialect;

/// `sse` with each of `places` that spans fragments of one stream (a content block, a choice's
/// text or tool call, an output item, a candidate's text) moved whole into the fragment where it
/// starts. Events left unchanged keep their bytes; a changed one is written again as JSON.
pub(super) fn unsplit(dialect: Dialect, sse: &str, places: &[&str]) -> String {
    let mut places: Vec<&str> = places.iter().copied().filter(|p| !p.is_empty()).collect();
    // The longest first: one place may hold another.
    places.sort_by_key(|p| std::cmp::Reverse(p.len()));
    let mut lines: Vec<Line> = sse.split_inclusive('\n').map(Line::read).collect();
    // Each stream's fragments in order: (line, JSON pointer to the string).
    let mut streams: Vec<(String, Vec<(usize, String)>)> = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let Some(event) = &line.event else { continue };
        for (key, pointer) in fragments(dialect, event) {
            match streams.iter_mut().find(|(k, _)| *k == key) {
                Some((_, found)) => found.push((i, pointer)),
                None => streams.push((key, vec![(i, pointer)])),
            }
        }
    }
    for (_, stream) in streams {
        let texts: Vec<String> = stream
            .iter()
            .map(|(i, pointer)| text_at(&lines[*i], pointer))
            .collect();
        let Some(moved) = moved_whole(&texts, &places) else {
            continue;
        };
        for ((i, pointer), (old, new)) in stream.iter().zip(texts.iter().zip(moved)) {
            if *old != new
                && let Some(slot) = lines[*i]
                    .event
                    .as_mut()
                    .and_then(|e| e.pointer_mut(pointer))
            {
                *slot = Value::String(new);
                lines[*i].changed = true;
            }
        }
    }
    lines.iter().map(Line::write).collect()
}

/// One line of the SSE text, and its event when it is a `data:` line holding JSON.
struct Line<'a> {
    raw: &'a str,
    /// Up to the JSON (`data: `), and the line's end (`\n`, `\r\n` or nothing).
    head: &'a str,
    tail: &'a str,
    event: Option<Value>,
    changed: bool,
}

impl<'a> Line<'a> {
    fn read(raw: &'a str) -> Line<'a> {
        let body = raw.trim_end_matches(['\n', '\r']);
        let tail = &raw[body.len()..];
        let json = body
            .strip_prefix("data:")
            .map(|rest| rest.trim_start_matches(' '));
        let head = &body[..body.len() - json.map_or(body.len(), str::len)];
        let event = json
            .and_then(|j| serde_json::from_str(j).ok())
            .filter(Value::is_object);
        Line {
            raw,
            head,
            tail,
            event,
            changed: false,
        }
    }

    fn write(&self) -> String {
        match (&self.event, self.changed) {
            (Some(event), true) => format!("{}{event}{}", self.head, self.tail),
            _ => self.raw.to_owned(),
        }
    }
}

fn text_at(line: &Line, pointer: &str) -> String {
    line.event
        .as_ref()
        .and_then(|e| e.pointer(pointer))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// The fragments one event carries: for each, the stream it belongs to and where its text is.
fn fragments(dialect: Dialect, event: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let string_at = |pointer: &str| event.pointer(pointer).is_some_and(Value::is_string);
    match dialect {
        Dialect::Anthropic => {
            if event["type"] == "content_block_delta" {
                for field in ["text", "partial_json", "thinking"] {
                    let pointer = format!("/delta/{field}");
                    if string_at(&pointer) {
                        out.push((format!("block {}", event["index"]), pointer));
                    }
                }
            }
        }
        Dialect::Chat => {
            for (c, choice) in array(event, "/choices").iter().enumerate() {
                let choice_key = format!("choice {}", choice["index"]);
                for field in ["content", "reasoning_content"] {
                    let pointer = format!("/choices/{c}/delta/{field}");
                    if string_at(&pointer) {
                        out.push((format!("{choice_key} {field}"), pointer));
                    }
                }
                for (t, call) in array(choice, "/delta/tool_calls").iter().enumerate() {
                    let pointer = format!("/choices/{c}/delta/tool_calls/{t}/function/arguments");
                    if string_at(&pointer) {
                        out.push((format!("{choice_key} call {}", call["index"]), pointer));
                    }
                }
            }
        }
        Dialect::Responses => {
            let kind = event["type"].as_str().unwrap_or_default();
            if kind.ends_with(".delta") && string_at("/delta") {
                let part = event
                    .get("content_index")
                    .or(event.get("summary_index"))
                    .unwrap_or(&Value::Null);
                out.push((
                    format!("{kind} {} {part}", event["output_index"]),
                    "/delta".to_owned(),
                ));
            }
        }
        Dialect::Gemini => {
            for (c, candidate) in array(event, "/candidates").iter().enumerate() {
                let index = candidate.get("index").unwrap_or(&Value::Null);
                for (p, part) in array(candidate, "/content/parts").iter().enumerate() {
                    let pointer = format!("/candidates/{c}/content/parts/{p}/text");
                    if string_at(&pointer) {
                        let thought = part["thought"] == true;
                        out.push((format!("candidate {index} {thought}"), pointer));
                    }
                }
            }
        }
    }
    out
}

fn array<'v>(value: &'v Value, pointer: &str) -> &'v [Value] {
    value
        .pointer(pointer)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// `texts` (one stream's fragments) cut again so that no place in their concatenation spans
/// two: a cut inside a place moves to its end. `None` when no cut moves.
fn moved_whole(texts: &[String], places: &[&str]) -> Option<Vec<String>> {
    let whole: String = texts.concat();
    let mut cuts: Vec<usize> = texts
        .iter()
        .scan(0, |end, t| {
            *end += t.len();
            Some(*end)
        })
        .collect();
    cuts.pop();
    let mut moved = false;
    let mut at = 0;
    while at < whole.len() {
        let rest = &whole[at..];
        match places.iter().find(|p| rest.starts_with(**p)) {
            Some(place) => {
                let end = at + place.len();
                for cut in cuts.iter_mut().filter(|c| at < **c && **c < end) {
                    *cut = end;
                    moved = true;
                }
                at = end;
            }
            None => at += rest.chars().next().map_or(1, char::len_utf8),
        }
    }
    moved.then(|| {
        let mut start = 0;
        let mut out = Vec::with_capacity(texts.len());
        for cut in cuts.into_iter().chain([whole.len()]) {
            out.push(whole[start..cut].to_owned());
            start = cut;
        }
        out
    })
}

#[cfg(test)]
mod tests;
