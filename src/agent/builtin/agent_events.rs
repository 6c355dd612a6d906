//! The events a `command` agent reports about itself: a JSON-lines file at `$DELTABENCH_EVENTS`,
//! read once the command has ended and turned into [`StreamEvent`]s and a [`Usage`].
//!
//! The file is the agent's own writing, so it is read defensively: never through a symlink,
//! only a regular file with one link, at most [`MAX_BYTES`]; every line that does not parse is
//! reported (line number and why) and skipped. What it says only ever reaches the event stream,
//! the trajectory and the usage: a result's status comes from the command's exit, and the
//! verdict from the workspace.
//!
//! One JSON object per line, `type` first (blank lines are skipped):
//!
//! ```text
//! {"type": "model", "name": "gpt-5"}
//! {"type": "message", "text": "I'll fix the parser.", "reasoning": "(optional)"}
//! {"type": "tool_call", "id": "c1", "name": "bash", "args": {"command": "pytest"}}
//! {"type": "tool_result", "id": "c1", "output": "3 passed", "is_error": false}
//! {"type": "usage", "input_tokens": 1200, "output_tokens": 80, "cache_read_tokens": 1000,
//!  "cost_usd": 0.004}
//! ```

use std::io::Read;
use std::path::Path;

use serde::Deserialize;
use serde_json::{Value, json};

use crate::agent::{StreamEvent, Usage};

/// The file's name, in the trial folder (in the agent's `home/` when it runs confined).
pub const AGENT_EVENTS: &str = "agent-events.jsonl";

/// The most of the file that is read; the rest is reported as cut off.
pub(crate) const MAX_BYTES: u64 = 4 * 1024 * 1024;

/// Malformed lines reported one by one; past this, only their count.
const MAX_REPORTED: usize = 20;

/// One line of the file.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
enum Line {
    Model {
        name: String,
    },
    Message {
        text: String,
        #[serde(default)]
        reasoning: Option<String>,
    },
    ToolCall {
        name: String,
        #[serde(default)]
        id: Option<String>,
        #[serde(default)]
        args: Value,
    },
    ToolResult {
        #[serde(default)]
        id: Option<String>,
        #[serde(default)]
        name: Option<String>,
        #[serde(default)]
        output: Value,
        #[serde(default)]
        is_error: bool,
    },
    /// One model call's tokens and cost (increments; they are summed).
    Usage {
        #[serde(default)]
        input_tokens: u64,
        #[serde(default)]
        output_tokens: u64,
        #[serde(default)]
        cache_read_tokens: u64,
        #[serde(default)]
        cache_write_tokens: u64,
        #[serde(default)]
        cost_usd: Option<f64>,
        /// Model calls this line covers (default 1).
        #[serde(default)]
        calls: Option<u64>,
    },
}

/// What the file amounted to.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AgentEvents {
    /// In the file's order; `usage` events carry the running total, as every agent's do.
    pub events: Vec<StreamEvent>,
    /// The summed usage, when any line reported some.
    pub usage: Option<Usage>,
    /// What was wrong, one message per problem (`line 3: ...`), at most [`MAX_REPORTED`] + 1.
    pub problems: Vec<String>,
}

/// Reads the file at `path` (absent or empty: nothing).
pub(crate) fn read(path: &Path) -> AgentEvents {
    match read_bounded(path) {
        Ok((text, cut)) => {
            let mut parsed = parse(&String::from_utf8_lossy(&text));
            if cut {
                parsed.problems.push(format!(
                    "the file is larger than {MAX_BYTES} bytes: the rest was not read"
                ));
            }
            parsed
        }
        Err(problem) => AgentEvents {
            problems: problem.into_iter().collect(),
            ..AgentEvents::default()
        },
    }
}

/// At most [`MAX_BYTES`] of a regular file, never through a symlink and never blocking on a
/// FIFO; whether there was more. `Err(None)` when there is no file.
fn read_bounded(path: &Path) -> Result<(Vec<u8>, bool), Option<String>> {
    use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path);
    let file = match file {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(None),
        Err(e) => return Err(Some(format!("cannot open it (a symlink is refused): {e}"))),
    };
    let meta = file
        .metadata()
        .map_err(|e| Some(format!("cannot read it: {e}")))?;
    if !meta.is_file() {
        return Err(Some("it is not a regular file".to_owned()));
    }
    if meta.nlink() > 1 {
        return Err(Some("it has other hard links: refused".to_owned()));
    }
    let mut text = Vec::new();
    file.take(MAX_BYTES + 1)
        .read_to_end(&mut text)
        .map_err(|e| Some(format!("cannot read it: {e}")))?;
    let cut = text.len() as u64 > MAX_BYTES;
    if cut {
        text.truncate(MAX_BYTES as usize);
        // Only whole lines: the cut one is dropped.
        let end = text.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
        text.truncate(end);
    }
    Ok((text, cut))
}

/// The events and usage of the file's text.
pub(crate) fn parse(text: &str) -> AgentEvents {
    let mut out = AgentEvents::default();
    let mut total: Option<Usage> = None;
    let mut malformed = 0usize;
    for (index, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let number = index + 1;
        let problem = match serde_json::from_str::<Line>(line) {
            Ok(line) => apply(line, &mut out.events, &mut total)
                .err()
                .map(|e| e.to_string()),
            Err(e) => Some(describe(line, &e)),
        };
        if let Some(problem) = problem {
            malformed += 1;
            if malformed <= MAX_REPORTED {
                out.problems.push(format!("line {number}: {problem}"));
            }
        }
    }
    if malformed > MAX_REPORTED {
        out.problems.push(format!(
            "{} more malformed lines not listed",
            malformed - MAX_REPORTED
        ));
    }
    out.usage = total;
    out
}

fn describe(line: &str, error: &serde_json::Error) -> String {
    match serde_json::from_str::<Value>(line) {
        Err(_) => format!("not JSON ({error})"),
        Ok(value) if !value.is_object() => "not a JSON object".to_owned(),
        Ok(value) if value.get("type").and_then(Value::as_str).is_none() => {
            "no `type` (one of model, message, tool_call, tool_result, usage)".to_owned()
        }
        Ok(_) => error.to_string(),
    }
}

/// A usage line whose cost cannot be added up.
#[derive(Debug, thiserror::Error)]
enum BadUsage {
    #[error("`cost_usd` must be a non-negative number, not {0}")]
    Cost(f64),
    #[error("the summed `cost_usd` is not a finite number")]
    Sum,
}

fn apply(
    line: Line,
    events: &mut Vec<StreamEvent>,
    total: &mut Option<Usage>,
) -> Result<(), BadUsage> {
    match line {
        Line::Model { name } => events.push(StreamEvent::System {
            subtype: "init".into(),
            message: format!("model {name}"),
            data: Some(json!({ "model": name, "source": AGENT_EVENTS })),
        }),
        Line::Message { text, reasoning } => {
            if let Some(reasoning) = reasoning {
                events.push(StreamEvent::Thinking { text: reasoning });
            }
            events.push(StreamEvent::Assistant { text });
        }
        Line::ToolCall { name, id, args } => events.push(StreamEvent::ToolCall { id, name, args }),
        Line::ToolResult {
            id,
            name,
            output,
            is_error,
        } => events.push(StreamEvent::ToolResult {
            id,
            name,
            result: output,
            is_error,
        }),
        Line::Usage {
            input_tokens,
            output_tokens,
            cache_read_tokens,
            cache_write_tokens,
            cost_usd,
            calls,
        } => {
            if let Some(cost) = cost_usd
                && !(cost.is_finite() && cost >= 0.0)
            {
                return Err(BadUsage::Cost(cost));
            }
            let mut usage = total.clone().unwrap_or_default();
            usage.input_tokens = usage.input_tokens.saturating_add(input_tokens);
            usage.output_tokens = usage.output_tokens.saturating_add(output_tokens);
            usage.cache_read_tokens = usage.cache_read_tokens.saturating_add(cache_read_tokens);
            usage.cache_write_tokens = usage.cache_write_tokens.saturating_add(cache_write_tokens);
            usage.model_calls = usage.model_calls.saturating_add(calls.unwrap_or(1));
            if let Some(cost) = cost_usd {
                let sum = usage.cost_usd.unwrap_or(0.0) + cost;
                if !sum.is_finite() {
                    return Err(BadUsage::Sum);
                }
                usage.cost_usd = Some(sum);
            }
            events.push(StreamEvent::Usage {
                usage: usage.clone(),
            });
            *total = Some(usage);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::harness::tests::kinds;

    #[test]
    fn agent_events_lines_become_events_and_summed_usage() {
        let text = r#"{"type": "model", "name": "m-1"}
{"type": "message", "text": "looking", "reasoning": "hmm"}

{"type": "tool_call", "id": "c1", "name": "bash", "args": {"command": "ls"}}
{"type": "tool_result", "id": "c1", "output": "a.py"}
{"type": "usage", "input_tokens": 10, "output_tokens": 2, "cost_usd": 0.5}
{"type": "usage", "input_tokens": 5, "output_tokens": 1, "cache_read_tokens": 3, "calls": 2}
"#;
        let parsed = parse(text);
        assert!(parsed.problems.is_empty(), "{:?}", parsed.problems);
        assert_eq!(
            kinds(&parsed.events),
            [
                "system",
                "thinking",
                "assistant",
                "tool_call",
                "tool_result",
                "usage",
                "usage"
            ]
        );
        let usage = parsed.usage.unwrap();
        assert_eq!(
            (
                usage.input_tokens,
                usage.output_tokens,
                usage.cache_read_tokens,
                usage.model_calls
            ),
            (15, 3, 3, 3)
        );
        assert_eq!(usage.cost_usd, Some(0.5));
        assert!(!usage.cost_estimated);
    }

    #[test]
    fn agent_events_malformed_lines_are_named_and_skipped() {
        let text = "not json\n[1]\n{\"text\": \"x\"}\n{\"type\": \"shout\"}\n\
                    {\"type\": \"message\"}\n{\"type\": \"message\", \"text\": \"ok\", \"x\": 1}\n\
                    {\"type\": \"usage\", \"input_tokens\": -3}\n\
                    {\"type\": \"usage\", \"cost_usd\": -1}\n\
                    {\"type\": \"message\", \"text\": \"fine\"}\n";
        let parsed = parse(text);
        assert_eq!(kinds(&parsed.events), ["assistant"]);
        let problems = parsed.problems.join("\n");
        for expected in [
            "line 1: not JSON",
            "line 2: not a JSON object",
            "line 3: no `type`",
            "line 4: unknown variant `shout`",
            "line 5: missing field `text`",
            "line 6: unknown field `x`",
            "line 7: invalid value",
            "line 8: `cost_usd` must be a non-negative number",
        ] {
            assert!(problems.contains(expected), "{expected} in:\n{problems}");
        }
        assert_eq!(parsed.usage, None);
    }

    #[test]
    fn agent_events_reports_are_bounded() {
        let text = "x\n".repeat(100);
        let parsed = parse(&text);
        assert_eq!(parsed.problems.len(), MAX_REPORTED + 1);
        assert!(parsed.problems.last().unwrap().contains("80 more"));
    }

    #[test]
    fn agent_events_file_is_read_safely() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(AGENT_EVENTS);
        assert_eq!(read(&path), AgentEvents::default());

        let secret = dir.path().join("secret");
        std::fs::write(&secret, "{\"type\": \"message\", \"text\": \"secret\"}\n").unwrap();
        std::os::unix::fs::symlink(&secret, &path).unwrap();
        let parsed = read(&path);
        assert!(parsed.events.is_empty());
        assert!(
            parsed.problems[0].contains("symlink"),
            "{:?}",
            parsed.problems
        );

        std::fs::remove_file(&path).unwrap();
        std::fs::hard_link(&secret, &path).unwrap();
        assert!(read(&path).problems[0].contains("hard links"));

        std::fs::remove_file(&path).unwrap();
        nix::unistd::mkfifo(&path, nix::sys::stat::Mode::S_IRWXU).unwrap();
        assert!(read(&path).problems[0].contains("not a regular file"));

        std::fs::remove_file(&path).unwrap();
        let line = "{\"type\": \"message\", \"text\": \"many\"}\n";
        let big = line.repeat(MAX_BYTES as usize / line.len() + 10);
        std::fs::write(&path, big).unwrap();
        let parsed = read(&path);
        assert_eq!(parsed.events.len(), MAX_BYTES as usize / line.len());
        assert!(parsed.problems[0].contains("larger than"));
    }
}
