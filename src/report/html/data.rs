//! The JSON blob the page's script reads: the run's records plus what each trial folder holds.

use std::fmt::Write as _;

use indexmap::IndexMap;
use serde::Serialize;
use serde_json::Value;

use super::text::{cut, one_line};
use crate::report::AgentSummary;
use crate::report::junit::{LOG_TAIL_LINES, relative, verify_log_tail};
use crate::store::{StoredRun, TrialRecord, layout};

/// A diff larger than this is cut: one huge generated file must not make the page unusable.
const MAX_DIFF_BYTES: usize = 200 * 1024;
/// Events kept per trial, half from the start and half from the end of the stream.
const MAX_EVENTS: usize = 300;
/// One event's summary in the timeline.
const MAX_EVENT_CHARS: usize = 200;
/// The agent's own closing text (display only).
const MAX_AGENT_TEXT_CHARS: usize = 4_000;
/// A task's instruction in the drill-down.
const MAX_INSTRUCTION_BYTES: usize = 64 * 1024;

/// The JSON blob the script reads.
#[derive(Serialize)]
pub(super) struct Data<'a> {
    suite: &'a str,
    started_at: &'a str,
    finished_at: Option<&'a str>,
    deltabench_version: &'a str,
    host: &'a str,
    trials_per_task: u32,
    planned_trials: usize,
    interrupted: bool,
    /// How many lines of verify.log each trial carries.
    log_tail_lines: usize,
    tasks: Vec<&'a str>,
    /// Each task's instruction, as a trial folder of the run recorded it.
    instructions: IndexMap<&'a str, Artifact>,
    pub(super) agents: Vec<AgentData<'a>>,
    trials: Vec<TrialData<'a>>,
}

impl<'a> Data<'a> {
    /// The blob of `run`, its trials in the order of `trials`.
    pub(super) fn new(
        run: &'a StoredRun,
        summaries: &'a [AgentSummary],
        tasks: &[&'a str],
        trials: &[&'a TrialRecord],
    ) -> Self {
        Data {
            suite: &run.manifest.suite,
            started_at: &run.manifest.started_at,
            finished_at: run.manifest.finished_at.as_deref(),
            deltabench_version: &run.manifest.deltabench_version,
            host: &run.manifest.host,
            trials_per_task: run.manifest.trials_per_task,
            planned_trials: run.manifest.planned_trials,
            interrupted: run.manifest.interrupted,
            log_tail_lines: LOG_TAIL_LINES,
            tasks: tasks.to_vec(),
            instructions: tasks
                .iter()
                .map(|task| (*task, instruction(run, trials, task)))
                .collect(),
            agents: summaries
                .iter()
                .map(|summary| AgentData { summary })
                .collect(),
            trials: trials.iter().map(|r| trial_data(run, r)).collect(),
        }
    }

    /// The blob as JSON that can sit inside a `<script>` element: `<` is written `\u003c`, so no
    /// `</script` or `<!--` in run data can end the element early, and `://` is written `:\/\/`,
    /// so the page holds no URL-looking text at all.
    pub(super) fn script_json(&self) -> Result<String, serde_json::Error> {
        Ok(serde_json::to_string(self)?
            .replace('<', "\\u003c")
            .replace("://", ":\\/\\/"))
    }
}

#[derive(Serialize)]
pub(super) struct AgentData<'a> {
    #[serde(flatten)]
    pub(super) summary: &'a AgentSummary,
}

/// A record plus what its trial folder holds.
#[derive(Serialize)]
struct TrialData<'a> {
    #[serde(flatten)]
    record: &'a TrialRecord,
    diff_patch: Artifact,
    verify_log: Artifact,
    events: Vec<EventLine>,
    /// Why the timeline is missing or incomplete.
    events_note: Option<String>,
    /// The agent's own closing text from result.json: display only, never scored.
    agent_text: Option<String>,
}

/// A file's (possibly cut) text, and a note when it is cut, missing or unreadable.
#[derive(Serialize)]
struct Artifact {
    text: Option<String>,
    note: Option<String>,
}

#[derive(Serialize)]
struct EventLine {
    #[serde(rename = "type")]
    kind: String,
    summary: String,
}

/// The instruction the task's agents were given: `instruction.md` of the first trial folder
/// (in plan order) that holds one. Only `command` agents get that file; for the others the run
/// directory does not record the instruction.
fn instruction(run: &StoredRun, trials: &[&TrialRecord], task: &str) -> Artifact {
    for record in trials.iter().filter(|r| r.task == task) {
        let path = layout::record_path(&run.path, record).join(layout::INSTRUCTION_FILE);
        let Ok(bytes) = std::fs::read(&path) else {
            continue;
        };
        let cut = bytes.len() > MAX_INSTRUCTION_BYTES;
        let text = String::from_utf8_lossy(&bytes[..bytes.len().min(MAX_INSTRUCTION_BYTES)]);
        let source = relative(run, &path);
        return Artifact {
            text: Some(text.into_owned()),
            note: Some(if cut {
                format!(
                    "From {source}; the first 64 KB of {} KB are shown.",
                    bytes.len().div_ceil(1024)
                )
            } else {
                format!("From {source}.")
            }),
        };
    }
    Artifact {
        text: None,
        note: Some(
            "The run directory does not record this task's instruction: only command agents \
             keep it, as instruction.md in their trial folders."
                .into(),
        ),
    }
}

fn trial_data<'a>(run: &StoredRun, record: &'a TrialRecord) -> TrialData<'a> {
    let dir = layout::record_path(&run.path, record);
    let (events, events_note) = events(run, &dir.join(layout::EVENTS));
    let verify_log = match verify_log_tail(run, record) {
        Ok(text) => Artifact {
            text: Some(text),
            note: None,
        },
        Err(why) => Artifact {
            text: None,
            note: Some(why.to_string()),
        },
    };
    TrialData {
        record,
        diff_patch: diff_patch(run, &dir.join(layout::DIFF_PATCH)),
        verify_log,
        events,
        events_note,
        agent_text: agent_text(&dir.join(layout::RESULT)),
    }
}

fn diff_patch(run: &StoredRun, path: &std::path::Path) -> Artifact {
    match std::fs::read(path) {
        Ok(bytes) if bytes.len() > MAX_DIFF_BYTES => Artifact {
            text: Some(String::from_utf8_lossy(&bytes[..MAX_DIFF_BYTES]).into_owned()),
            note: Some(format!(
                "Truncated: the first 200 KB of {} KB are shown; the whole patch is {}.",
                bytes.len().div_ceil(1024),
                relative(run, path)
            )),
        },
        Ok(bytes) => Artifact {
            text: Some(String::from_utf8_lossy(&bytes).into_owned()),
            note: None,
        },
        Err(e) => Artifact {
            text: None,
            note: Some(missing(run, path, &e)),
        },
    }
}

fn missing(run: &StoredRun, path: &std::path::Path, e: &std::io::Error) -> String {
    if e.kind() == std::io::ErrorKind::NotFound {
        format!("{} is missing.", relative(run, path))
    } else {
        format!("Cannot read {}: {e}", relative(run, path))
    }
}

/// The event timeline: one (type, short summary) per line of events.jsonl.
fn events(run: &StoredRun, path: &std::path::Path) -> (Vec<EventLine>, Option<String>) {
    let text = match std::fs::read(path) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(e) => return (Vec::new(), Some(missing(run, path, &e))),
    };
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let line = |raw: &str| match serde_json::from_str::<Value>(raw) {
        Ok(value) => event_line(&value),
        Err(_) => EventLine {
            kind: "unparsed".into(),
            summary: one_line(raw, MAX_EVENT_CHARS),
        },
    };
    if lines.len() <= MAX_EVENTS {
        return (lines.into_iter().map(line).collect(), None);
    }
    // Keep both ends: the start shows what the agent tried, the end how it stopped.
    let half = MAX_EVENTS / 2;
    let hidden = lines.len() - MAX_EVENTS;
    let mut kept: Vec<EventLine> = lines[..half].iter().map(|l| line(l)).collect();
    kept.push(EventLine {
        kind: "\u{2026}".into(),
        summary: format!("{hidden} events not shown"),
    });
    kept.extend(lines[lines.len() - half..].iter().map(|l| line(l)));
    (
        kept,
        Some(format!(
            "{} events; the first and last {half} are shown.",
            lines.len()
        )),
    )
}

/// One event in a few words, by its `type` (see `StreamEvent`); unknown shapes are shown raw.
fn event_line(value: &Value) -> EventLine {
    let kind = value
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("unknown")
        .to_owned();
    let text = |key: &str| value.get(key).and_then(Value::as_str).unwrap_or("");
    let summary = match kind.as_str() {
        "system" => format!("{}: {}", text("subtype"), text("message")),
        "assistant" | "thinking" => text("text").to_owned(),
        "tool_call" => format!("{}({})", text("name"), compact(value.get("args"))),
        "tool_result" => {
            let failed = value.get("is_error").and_then(Value::as_bool) == Some(true);
            format!(
                "{}{} {}",
                text("name"),
                if failed { " failed:" } else { ":" },
                compact(value.get("result"))
            )
        }
        "usage" => {
            let usage = value.get("usage").unwrap_or(&Value::Null);
            let count = |key: &str| usage.get(key).and_then(Value::as_u64).unwrap_or(0);
            let mut summary = format!(
                "{} input, {} output tokens",
                count("input_tokens"),
                count("output_tokens")
            );
            if let Some(cost) = usage.get("cost_usd").and_then(Value::as_f64) {
                let _ = write!(summary, ", ${cost:.4}");
            }
            summary
        }
        "result" => match value.get("text").and_then(Value::as_str) {
            Some(said) => format!("{}: {said}", text("status")),
            None => text("status").to_owned(),
        },
        _ => compact(Some(value)),
    };
    EventLine {
        kind,
        summary: one_line(&summary, MAX_EVENT_CHARS),
    }
}

/// A JSON value as short text: strings as they are, anything else as compact JSON.
fn compact(value: Option<&Value>) -> String {
    match value {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

/// `result.output.text` of result.json, cut to a readable size.
fn agent_text(path: &std::path::Path) -> Option<String> {
    let value: Value = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
    let text = value.pointer("/result/output/text")?.as_str()?.trim();
    (!text.is_empty()).then(|| cut(text, MAX_AGENT_TEXT_CHARS))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_lines_summarize_each_kind() {
        let line = |v: Value| {
            let e = event_line(&v);
            (e.kind, e.summary)
        };
        assert_eq!(
            line(serde_json::json!({"type": "tool_call", "name": "write", "args": {"path": "a"}})),
            ("tool_call".into(), "write({\"path\":\"a\"})".into())
        );
        assert_eq!(
            line(
                serde_json::json!({"type": "system", "subtype": "exit", "message": "exited\nwith 1"})
            ),
            ("system".into(), "exit: exited with 1".into())
        );
        assert_eq!(
            line(
                serde_json::json!({"type": "usage", "usage": {"input_tokens": 3, "output_tokens": 4, "cost_usd": 0.5}})
            ),
            ("usage".into(), "3 input, 4 output tokens, $0.5000".into())
        );
    }
}
