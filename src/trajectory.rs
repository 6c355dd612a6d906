//! A trial's agent run as a trajectory in Harbor's Agent Trajectory Interchange Format (ATIF),
//! version 1.7: a pure function of the normalized [`StreamEvent`]s, the instruction and the run's
//! [`CodingResult`]. The runner writes it next to `events.jsonl`; nothing here touches a file.
//!
//! The mapping (docs/decisions.md has the why):
//! - step 1 is the instruction, `source: user`, at the trial's start;
//! - `system` events (spawn, exit, warnings) are `source: system` steps, with `subtype` and `data`
//!   in the step's `extra`;
//! - `thinking`, `assistant` and `tool_call` events are grouped into `source: agent` steps, one
//!   per model turn: a step holds its reasoning, then its text, then its tool calls; a new step
//!   starts when text or a call follows what the step already has in an order a single model
//!   response cannot (text after calls, anything after the calls' results);
//! - a `tool_result` lands in the observation of the step that made the call (by id, else the
//!   oldest pending call of the same name, else the oldest pending call);
//! - per-step metrics: for a trial through the gateway, each agent step gets the one model call
//!   the gateway forwarded between the previous agent step's start and its own (none when two
//!   were, as when a CLI makes a side call beside its main one), priced as the total is;
//!   otherwise `usage` events are the run's cumulative totals, and the difference between two
//!   consecutive ones is the metrics of the agent step it follows, when it covers exactly one
//!   model call (when deltabench priced the run itself, those steps carry no cost: the agent's
//!   own figures were not used for the total);
//! - a closing `result` whose text the last agent step does not already say becomes an agent step;
//! - `unknown` events (raw CLI output) are left out; `notes` counts them;
//! - `final_metrics` come from the gateway's count, else the result's usage (deltabench's
//!   authoritative, priced total), else the last `usage` event.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::agent::{CodingResult, ModelCall, StreamEvent, Usage};

/// The `schema_version` every trajectory is written with.
pub(crate) const SCHEMA_VERSION: &str = "ATIF-v1.7";

/// What an agent's version is recorded as when nothing in its stream says.
pub(crate) const UNKNOWN_VERSION: &str = "unknown";

/// An event as the runner received it, with when (ISO 8601).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TimedEvent {
    pub at: String,
    pub event: StreamEvent,
}

/// Everything a trajectory is built from.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TrajectoryInput<'a> {
    /// The agent's name in the suite.
    pub agent: &'a str,
    /// Its kind (`claude-code`, `command`, `mock`, ...): the ATIF agent name.
    pub kind: &'a str,
    /// The model the agent's config names, if any.
    pub model: Option<&'a str>,
    pub instruction: &'a str,
    /// When the trial started (ISO 8601): the instruction step's timestamp.
    pub started_at: &'a str,
    pub events: &'a [TimedEvent],
    /// The run's result, when the agent ran to one.
    pub result: Option<&'a CodingResult>,
    /// What the gateway counted, for a trial whose model calls passed it.
    pub gateway: Option<Counted<'a>>,
}

/// A trial's model calls as deltabench's gateway counted them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Counted<'a> {
    pub calls: &'a [ModelCall],
    pub total: &'a Usage,
}

/// An ATIF trajectory (the fields deltabench fills).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Trajectory {
    pub schema_version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    pub agent: AgentInfo,
    pub steps: Vec<Step>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notes: Option<String>,
    pub final_metrics: FinalMetrics,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<Value>,
}

/// ATIF's `agent` object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct AgentInfo {
    pub name: String,
    pub version: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<Value>,
}

/// Who a step comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Source {
    System,
    User,
    Agent,
}

/// One ATIF step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Step {
    pub step_id: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp: Option<String>,
    pub source: Source,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCall>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observation: Option<Observation>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<Metrics>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ToolCall {
    pub tool_call_id: String,
    pub function_name: String,
    /// Always a JSON object: a call's arguments that are not one are kept under `input`.
    pub arguments: Map<String, Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Observation {
    pub results: Vec<ObservationResult>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ObservationResult {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_call_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<Value>,
}

/// Per-step token counts and cost. `prompt_tokens` includes cached tokens, as ATIF defines it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct Metrics {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub cached_tokens: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<Value>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct FinalMetrics {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_prompt_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_completion_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_cached_tokens: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_cost_usd: Option<f64>,
    pub total_steps: usize,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extra: Option<Value>,
}

/// The trajectory of one agent run.
pub(crate) fn trajectory(input: &TrajectoryInput) -> Trajectory {
    let mut builder = Builder::default();
    builder.steps.push(Step {
        timestamp: Some(input.started_at.to_owned()),
        message: input.instruction.to_owned(),
        ..Step::new(Source::User)
    });
    for timed in input.events {
        builder.event(timed);
    }
    let Builder {
        mut steps,
        last_usage,
        unknown,
        model,
        version,
        ..
    } = builder;
    for (index, step) in steps.iter_mut().enumerate() {
        step.step_id = index + 1;
    }
    let usage = match input.gateway {
        Some(counted) => Some(counted.total.clone()),
        None => input.result.and_then(|r| r.usage.clone()).or(last_usage),
    }
    .filter(|u| *u != Usage::default());
    // The gateway's calls, unless the agent's own stream gives more steps their metrics.
    let from_calls = input.gateway.map(|c| metrics_from_calls(&steps, c.calls));
    let from_events = steps.iter().filter(|s| s.metrics.is_some()).count();
    match from_calls {
        Some(from_calls) if from_calls.iter().flatten().count() >= from_events => {
            for (step, metrics) in steps.iter_mut().zip(from_calls) {
                step.metrics = metrics;
            }
        }
        _ if usage.as_ref().is_some_and(|u| u.cost_estimated) => {
            for metrics in steps.iter_mut().filter_map(|s| s.metrics.as_mut()) {
                metrics.cost_usd = None;
            }
        }
        _ => {}
    }
    let final_metrics = FinalMetrics {
        total_steps: steps.len(),
        ..usage.as_ref().map(final_metrics).unwrap_or_default()
    };
    let notes = (unknown > 0).then(|| {
        format!(
            "{unknown} event(s) deltabench could not map (raw agent output) are in events.jsonl \
             only"
        )
    });
    let extra = input.result.map(|result| {
        json!({
            "status": result.status,
            "error": result.error,
            "duration_ms": result.duration_ms,
        })
    });
    Trajectory {
        schema_version: SCHEMA_VERSION.to_owned(),
        session_id: input.result.map(|r| r.session_id.clone()),
        agent: AgentInfo {
            name: input.kind.to_owned(),
            version: version.unwrap_or_else(|| UNKNOWN_VERSION.to_owned()),
            model_name: input.model.map(str::to_owned).or(model),
            extra: Some(json!({
                "deltabench_agent": input.agent,
                "deltabench_version": env!("CARGO_PKG_VERSION"),
            })),
        },
        steps,
        notes,
        final_metrics,
        extra,
    }
}

impl Step {
    fn new(source: Source) -> Self {
        Self {
            step_id: 0,
            timestamp: None,
            source,
            message: String::new(),
            reasoning_content: None,
            tool_calls: None,
            observation: None,
            metrics: None,
            extra: None,
        }
    }

    fn calls(&self) -> usize {
        self.tool_calls.as_ref().map_or(0, Vec::len)
    }
}

#[derive(Default)]
struct Builder {
    steps: Vec<Step>,
    /// The agent step still open to more of the same model turn.
    open: Option<usize>,
    /// Calls without a result yet: (id, name, step index), oldest first.
    pending: Vec<(String, String, usize)>,
    /// Every tool call id given out, so each is unique in the trajectory.
    ids: BTreeSet<String>,
    last_usage: Option<Usage>,
    unknown: usize,
    model: Option<String>,
    version: Option<String>,
}

impl Builder {
    fn event(&mut self, timed: &TimedEvent) {
        let at = &timed.at;
        match &timed.event {
            StreamEvent::System {
                subtype,
                message,
                data,
            } => {
                if subtype == "init"
                    && let Some(data) = data
                {
                    self.init(data);
                }
                self.open = None;
                let mut extra = json!({ "subtype": subtype });
                if let Some(data) = data {
                    extra["data"] = data.clone();
                }
                self.steps.push(Step {
                    timestamp: Some(at.clone()),
                    message: message.clone(),
                    extra: Some(extra),
                    ..Step::new(Source::System)
                });
            }
            StreamEvent::Thinking { text } => {
                let index = self.turn(at, |step| step.message.is_empty() && step.calls() == 0);
                let step = &mut self.steps[index];
                match &mut step.reasoning_content {
                    Some(reasoning) => {
                        reasoning.push('\n');
                        reasoning.push_str(text);
                    }
                    None => step.reasoning_content = Some(text.clone()),
                }
            }
            StreamEvent::Assistant { text } => {
                let index = self.turn(at, |step| step.message.is_empty() && step.calls() == 0);
                self.steps[index].message = text.clone();
            }
            StreamEvent::ToolCall { id, name, args } => {
                let id = self.call_id(id.as_deref());
                let index = self.turn(at, |_| true);
                let step = &mut self.steps[index];
                step.tool_calls.get_or_insert_with(Vec::new).push(ToolCall {
                    tool_call_id: id.clone(),
                    function_name: name.clone(),
                    arguments: match args {
                        Value::Object(map) => map.clone(),
                        Value::Null => Map::new(),
                        other => Map::from_iter([("input".to_owned(), other.clone())]),
                    },
                });
                self.pending.push((id, name.clone(), index));
            }
            StreamEvent::ToolResult {
                id,
                name,
                result,
                is_error,
            } => self.tool_result(at, id.as_deref(), name.as_deref(), result, *is_error),
            StreamEvent::Usage { usage } => self.usage(usage),
            StreamEvent::Result { status, text } => {
                let said = self
                    .steps
                    .iter()
                    .rev()
                    .find(|s| s.source == Source::Agent && !s.message.is_empty())
                    .map(|s| s.message.as_str());
                if let Some(text) = text.as_deref().map(str::trim)
                    && !text.is_empty()
                    && said.map(str::trim) != Some(text)
                {
                    let step = self.start(at);
                    step.message = text.to_owned();
                    step.extra = Some(json!({ "result": status }));
                }
                self.open = None;
            }
            StreamEvent::Unknown { .. } => self.unknown += 1,
        }
    }

    /// The model and version an `init` notice names (the CLIs' own field names).
    fn init(&mut self, data: &Value) {
        let text = |key: &str| data.get(key).and_then(Value::as_str).map(str::to_owned);
        if self.model.is_none() {
            self.model = text("model");
        }
        if self.version.is_none() {
            self.version = ["claude_code_version", "cli_version", "version"]
                .into_iter()
                .find_map(text);
        }
    }

    /// The open agent step when `fits` it, else a new one: its index. Once results came back,
    /// the next text or call is the model's next turn.
    fn turn(&mut self, at: &str, fits: impl Fn(&Step) -> bool) -> usize {
        match self.open {
            Some(index) if self.steps[index].observation.is_none() && fits(&self.steps[index]) => {
                index
            }
            _ => {
                self.start(at);
                self.steps.len() - 1
            }
        }
    }

    fn start(&mut self, at: &str) -> &mut Step {
        self.steps.push(Step {
            timestamp: Some(at.to_owned()),
            ..Step::new(Source::Agent)
        });
        self.open = Some(self.steps.len() - 1);
        self.steps.last_mut().expect("just pushed")
    }

    /// `id` when it is unused, else a fresh one.
    fn call_id(&mut self, id: Option<&str>) -> String {
        let mut id = match id {
            Some(id) if !id.is_empty() => id.to_owned(),
            _ => format!("call_{}", self.ids.len() + 1),
        };
        let base = id.clone();
        let mut n = 1;
        while self.ids.contains(&id) {
            n += 1;
            id = format!("{base}#{n}");
        }
        self.ids.insert(id.clone());
        id
    }

    fn tool_result(
        &mut self,
        at: &str,
        id: Option<&str>,
        name: Option<&str>,
        result: &Value,
        is_error: bool,
    ) {
        let pending = match id {
            Some(id) => self.pending.iter().position(|(call, ..)| call == id),
            None => name
                .and_then(|name| self.pending.iter().position(|(_, call, _)| call == name))
                .or((!self.pending.is_empty()).then_some(0)),
        };
        let mut extra = Map::new();
        if is_error {
            extra.insert("is_error".into(), json!(true));
        }
        let (source_call_id, index) = match pending {
            Some(at) => {
                let (call, _, index) = self.pending.remove(at);
                (Some(call), index)
            }
            None => {
                // A result of no call deltabench saw: kept, with what it named.
                if let Some(id) = id {
                    extra.insert("call_id".into(), json!(id));
                }
                if let Some(name) = name {
                    extra.insert("tool".into(), json!(name));
                }
                let last_agent = self.steps.iter().rposition(|s| s.source == Source::Agent);
                match last_agent {
                    Some(index) => (None, index),
                    None => {
                        self.steps.push(Step {
                            timestamp: Some(at.to_owned()),
                            message: "tool result".to_owned(),
                            ..Step::new(Source::System)
                        });
                        self.open = None;
                        (None, self.steps.len() - 1)
                    }
                }
            }
        };
        let content = match result {
            Value::String(text) => Some(text.clone()),
            Value::Null => None,
            other => Some(other.to_string()),
        };
        self.steps[index]
            .observation
            .get_or_insert_with(|| Observation {
                results: Vec::new(),
            })
            .results
            .push(ObservationResult {
                source_call_id,
                content,
                extra: (!extra.is_empty()).then_some(Value::Object(extra)),
            });
    }

    /// A cumulative total: its increase is the metrics of the last agent step without any,
    /// when the increase is exactly one model call (an agent that does not count its calls
    /// reports none per step).
    fn usage(&mut self, usage: &Usage) {
        let previous = self.last_usage.replace(usage.clone()).unwrap_or_default();
        let grew = usage.input_tokens >= previous.input_tokens
            && usage.output_tokens >= previous.output_tokens
            && usage.cache_read_tokens >= previous.cache_read_tokens
            && usage.cache_write_tokens >= previous.cache_write_tokens
            && usage.model_calls >= previous.model_calls;
        let delta = if grew {
            Usage {
                input_tokens: usage.input_tokens - previous.input_tokens,
                output_tokens: usage.output_tokens - previous.output_tokens,
                cache_read_tokens: usage.cache_read_tokens - previous.cache_read_tokens,
                cache_write_tokens: usage.cache_write_tokens - previous.cache_write_tokens,
                model_calls: usage.model_calls - previous.model_calls,
                cost_usd: match (usage.cost_usd, previous.cost_usd) {
                    (Some(now), Some(before)) if now >= before => Some(now - before),
                    (Some(now), None) => Some(now),
                    _ => None,
                },
                cost_estimated: usage.cost_estimated,
            }
        } else {
            // The agent started counting again: this total is its own.
            usage.clone()
        };
        if delta.model_calls != 1 {
            return;
        }
        let Some(step) = self
            .steps
            .iter_mut()
            .rev()
            .find(|s| s.source == Source::Agent)
            .filter(|s| s.metrics.is_none())
        else {
            return;
        };
        step.metrics = Some(metrics(&delta));
    }
}

/// Each step's metrics from the gateway's calls (`None` for all but agent steps). With as many
/// calls as agent steps, each one started by the time its step began, the k-th call is the k-th
/// step's (an agent that reports its steps only at the end). Otherwise a step gets the one call
/// forwarded after the previous agent step began and by the time it did; none when there were
/// several (a side call beside the main one) or none. Timestamps are to the millisecond.
fn metrics_from_calls(steps: &[Step], calls: &[ModelCall]) -> Vec<Option<Metrics>> {
    use chrono::{DateTime, DurationRound, TimeDelta, Utc};
    let millis = |at: DateTime<Utc>| at.duration_trunc(TimeDelta::milliseconds(1)).unwrap_or(at);
    let began: Vec<Option<DateTime<Utc>>> = steps
        .iter()
        .map(|step| {
            let at = step
                .timestamp
                .as_deref()
                .filter(|_| step.source == Source::Agent)?;
            Some(DateTime::parse_from_rfc3339(at).ok()?.with_timezone(&Utc))
        })
        .collect();
    let agent: Vec<(usize, DateTime<Utc>)> = began
        .iter()
        .enumerate()
        .filter_map(|(i, at)| Some((i, (*at)?)))
        .collect();
    let mut found = vec![None; steps.len()];
    let in_order = agent.len() == calls.len()
        && agent
            .iter()
            .zip(calls)
            .all(|((_, at), call)| millis(call.started_at) <= *at);
    if in_order {
        for ((index, _), call) in agent.iter().zip(calls) {
            found[*index] = Some(metrics(&call.usage));
        }
        return found;
    }
    let mut previous: Option<DateTime<Utc>> = None;
    for (index, at) in agent {
        let mut made = calls.iter().filter(|call| {
            let started = millis(call.started_at);
            started <= at && previous.is_none_or(|p| started > p)
        });
        if let (Some(call), None) = (made.next(), made.next()) {
            found[index] = Some(metrics(&call.usage));
        }
        previous = Some(at);
    }
    found
}

fn prompt_tokens(usage: &Usage) -> u64 {
    usage
        .input_tokens
        .saturating_add(usage.cache_read_tokens)
        .saturating_add(usage.cache_write_tokens)
}

fn metrics(usage: &Usage) -> Metrics {
    Metrics {
        prompt_tokens: prompt_tokens(usage),
        completion_tokens: usage.output_tokens,
        cached_tokens: usage.cache_read_tokens,
        cost_usd: usage.cost_usd.filter(|c| c.is_finite()),
        extra: (usage.cache_write_tokens > 0)
            .then(|| json!({ "cache_write_tokens": usage.cache_write_tokens })),
    }
}

fn final_metrics(usage: &Usage) -> FinalMetrics {
    FinalMetrics {
        total_prompt_tokens: Some(prompt_tokens(usage)),
        total_completion_tokens: Some(usage.output_tokens),
        total_cached_tokens: Some(usage.cache_read_tokens),
        total_cost_usd: usage.cost_usd.filter(|c| c.is_finite()),
        total_steps: 0,
        extra: Some(json!({
            "model_calls": usage.model_calls,
            "cache_write_tokens": usage.cache_write_tokens,
            "cost_estimated": usage.cost_estimated,
        })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::{CodingStatus, ErrorCode};

    fn at(n: usize, event: StreamEvent) -> TimedEvent {
        TimedEvent {
            at: format!("2026-01-01T00:00:{n:02}.000Z"),
            event,
        }
    }

    fn bash_call(n: usize, id: &str) -> TimedEvent {
        at(
            n,
            StreamEvent::ToolCall {
                id: Some(id.into()),
                name: "bash".into(),
                args: json!({}),
            },
        )
    }

    fn bash_result(n: usize, id: &str) -> TimedEvent {
        at(
            n,
            StreamEvent::ToolResult {
                id: Some(id.into()),
                name: None,
                result: json!("ok"),
                is_error: false,
            },
        )
    }

    fn usage(input: u64, output: u64, calls: u64, cost: Option<f64>) -> Usage {
        Usage {
            input_tokens: input,
            output_tokens: output,
            model_calls: calls,
            cost_usd: cost,
            ..Usage::default()
        }
    }

    fn input<'a>(
        events: &'a [TimedEvent],
        result: Option<&'a CodingResult>,
    ) -> TrajectoryInput<'a> {
        TrajectoryInput {
            agent: "claude",
            kind: "claude-code",
            model: None,
            instruction: "Fix the bug.",
            started_at: "2026-01-01T00:00:00.000Z",
            events,
            result,
            gateway: None,
        }
    }

    #[test]
    fn an_agent_without_events_gets_the_instruction_and_final_metrics() {
        let result = CodingResult::completed("s-1");
        let t = trajectory(&TrajectoryInput {
            kind: "noop",
            ..input(&[], Some(&result))
        });
        assert_eq!(t.schema_version, "ATIF-v1.7");
        assert_eq!(t.session_id.as_deref(), Some("s-1"));
        assert_eq!(t.agent.name, "noop");
        assert_eq!(t.agent.version, UNKNOWN_VERSION);
        assert_eq!(t.steps.len(), 1);
        let step = &t.steps[0];
        assert_eq!((step.step_id, step.source), (1, Source::User));
        assert_eq!(step.message, "Fix the bug.");
        assert_eq!(t.final_metrics.total_steps, 1);
        assert_eq!(t.final_metrics.total_prompt_tokens, None);
        let json = serde_json::to_value(&t).unwrap();
        assert_eq!(json["extra"]["status"], "completed");
        assert!(json.get("notes").is_none());
        // Without a result (the agent never ran): still a valid trajectory, no session.
        let t = trajectory(&input(&[], None));
        assert_eq!((t.steps.len(), t.session_id), (1, None));
    }

    /// Through the gateway: each agent step gets the one call forwarded for it, a window with a
    /// side call beside the main one gets none, the agent's own usage events give nothing, and
    /// the totals are the gateway's.
    #[test]
    fn gateway_calls_are_the_metrics_of_the_steps_they_were_made_for() {
        let call_at = |ms: i64, input: u64| ModelCall {
            started_at: chrono::DateTime::from_timestamp_millis(
                chrono::DateTime::parse_from_rfc3339("2026-01-01T00:00:00Z")
                    .unwrap()
                    .timestamp_millis()
                    + ms,
            )
            .unwrap(),
            usage: Usage {
                cost_usd: Some(input as f64 / 1000.0),
                cost_estimated: true,
                ..usage(input, 1, 1, None)
            },
        };
        let events = [
            bash_call(1, "c1"),
            bash_result(2, "c1"),
            at(
                3,
                StreamEvent::Usage {
                    usage: usage(999, 9, 1, Some(9.0)),
                },
            ),
            bash_call(4, "c2"),
            bash_result(5, "c2"),
            at(
                7,
                StreamEvent::Assistant {
                    text: "Done.".into(),
                },
            ),
        ];
        let calls = [
            call_at(500, 10),
            call_at(3000, 20),
            call_at(3500, 1),
            call_at(6000, 30),
        ];
        let total = usage(61, 4, 4, Some(0.061));
        let t = trajectory(&TrajectoryInput {
            gateway: Some(Counted {
                calls: &calls,
                total: &total,
            }),
            ..input(&events, None)
        });
        let agent: Vec<&Step> = t
            .steps
            .iter()
            .filter(|s| s.source == Source::Agent)
            .collect();
        assert_eq!(agent.len(), 3, "{:#?}", t.steps);
        let first = agent[0].metrics.as_ref().unwrap();
        assert_eq!((first.prompt_tokens, first.completion_tokens), (10, 1));
        assert_eq!(first.cost_usd, Some(0.01));
        assert_eq!(agent[1].metrics, None);
        assert_eq!(agent[2].metrics.as_ref().unwrap().prompt_tokens, 30);
        assert_eq!(t.final_metrics.total_prompt_tokens, Some(61));
        assert_eq!(t.final_metrics.total_cost_usd, Some(0.061));
    }

    /// Steps reported only at the end (all at one time): as many calls as steps, in order. And
    /// an agent whose own stream gives more steps their metrics than the calls' times can.
    #[test]
    fn gateway_calls_in_order_or_the_streams_own_counts() {
        let call_at = |second: i64, input: u64| ModelCall {
            started_at: chrono::DateTime::from_timestamp(1_767_225_600 + second, 0).unwrap(),
            usage: usage(input, 1, 1, Some(0.5)),
        };
        let tool = |id: &str| bash_call(9, id);
        let result = |id: &str| bash_result(9, id);
        let events = [tool("a"), result("a"), tool("b"), result("b")];
        let calls = [call_at(1, 10), call_at(3, 20)];
        let total = usage(30, 2, 2, Some(1.0));
        let counted = Counted {
            calls: &calls,
            total: &total,
        };
        let t = trajectory(&TrajectoryInput {
            gateway: Some(counted),
            ..input(&events, None)
        });
        let tokens: Vec<Option<u64>> = t
            .steps
            .iter()
            .filter(|s| s.source == Source::Agent)
            .map(|s| s.metrics.as_ref().map(|m| m.prompt_tokens))
            .collect();
        assert_eq!(tokens, [Some(10), Some(20)]);

        // Two calls before the first step (a side call and the main one), the stream counting
        // each call: the stream's counts, without the agent's cost.
        let counting = [
            tool("a"),
            at(
                9,
                StreamEvent::Usage {
                    usage: usage(10, 1, 1, Some(0.5)),
                },
            ),
            result("a"),
            tool("b"),
            at(
                9,
                StreamEvent::Usage {
                    usage: usage(30, 2, 2, Some(1.0)),
                },
            ),
            result("b"),
        ];
        let calls = [call_at(1, 0), call_at(2, 10), call_at(10, 20)];
        let t = trajectory(&TrajectoryInput {
            gateway: Some(Counted {
                calls: &calls,
                total: &Usage {
                    cost_estimated: true,
                    ..total.clone()
                },
            }),
            ..input(&counting, None)
        });
        let metrics: Vec<Option<(u64, Option<f64>)>> = t
            .steps
            .iter()
            .filter(|s| s.source == Source::Agent)
            .map(|s| s.metrics.as_ref().map(|m| (m.prompt_tokens, m.cost_usd)))
            .collect();
        assert_eq!(metrics, [Some((10, None)), Some((20, None))]);
    }

    #[test]
    fn events_group_into_turns_with_their_results_and_metrics() {
        let call = |id: Option<&str>, name: &str| StreamEvent::ToolCall {
            id: id.map(str::to_owned),
            name: name.to_owned(),
            args: json!({"command": "ls"}),
        };
        let result = |id: Option<&str>, name: Option<&str>, out: Value| StreamEvent::ToolResult {
            id: id.map(str::to_owned),
            name: name.map(str::to_owned),
            result: out,
            is_error: false,
        };
        let events = [
            at(
                1,
                StreamEvent::System {
                    subtype: "init".into(),
                    message: "model m in /w".into(),
                    data: Some(json!({"model": "m-1", "claude_code_version": "2.1.197"})),
                },
            ),
            at(
                2,
                StreamEvent::Thinking {
                    text: "plan".into(),
                },
            ),
            at(
                3,
                StreamEvent::Assistant {
                    text: "Looking.".into(),
                },
            ),
            at(4, call(Some("a"), "bash")),
            at(5, call(Some("b"), "read")),
            at(
                6,
                StreamEvent::Usage {
                    usage: usage(100, 10, 1, Some(0.01)),
                },
            ),
            at(7, result(Some("b"), None, json!({"lines": 3}))),
            at(8, result(Some("a"), None, json!("a.py"))),
            // A second turn: calls without ids, results matched by name, then by age.
            at(9, call(None, "edit")),
            at(
                10,
                StreamEvent::ToolCall {
                    id: None,
                    name: "bash".into(),
                    args: json!("x"),
                },
            ),
            at(
                11,
                StreamEvent::Usage {
                    usage: usage(250, 30, 2, Some(0.03)),
                },
            ),
            at(12, result(None, Some("bash"), json!("ok"))),
            at(13, result(None, None, Value::Null)),
            at(14, result(Some("zz"), Some("ghost"), json!("?"))),
            at(
                15,
                StreamEvent::Unknown {
                    raw: json!("noise"),
                },
            ),
            at(
                16,
                StreamEvent::Assistant {
                    text: "Done.".into(),
                },
            ),
            // Two calls at once: no per-step metrics, only the totals.
            at(
                17,
                StreamEvent::Usage {
                    usage: usage(500, 50, 4, Some(0.05)),
                },
            ),
            at(
                18,
                StreamEvent::Result {
                    status: CodingStatus::Completed,
                    text: Some("Done.".into()),
                },
            ),
            at(
                19,
                StreamEvent::Result {
                    status: CodingStatus::Completed,
                    text: Some("Summary.".into()),
                },
            ),
        ];
        let mut result = CodingResult::completed("sess");
        result.usage = Some(Usage {
            cache_read_tokens: 40,
            ..usage(500, 50, 4, Some(0.05))
        });
        let t = trajectory(&input(&events, Some(&result)));
        let sources: Vec<Source> = t.steps.iter().map(|s| s.source).collect();
        use Source::*;
        assert_eq!(sources, [User, System, Agent, Agent, Agent, Agent]);
        let ids: Vec<usize> = t.steps.iter().map(|s| s.step_id).collect();
        assert_eq!(ids, [1, 2, 3, 4, 5, 6]);
        assert_eq!(t.agent.model_name.as_deref(), Some("m-1"));
        assert_eq!(t.agent.version, "2.1.197");
        assert_eq!(t.steps[1].extra.as_ref().unwrap()["subtype"], "init");

        let first = &t.steps[2];
        assert_eq!(first.timestamp.as_deref(), Some("2026-01-01T00:00:02.000Z"));
        assert_eq!(first.reasoning_content.as_deref(), Some("plan"));
        assert_eq!(first.message, "Looking.");
        let calls = first.tool_calls.as_ref().unwrap();
        assert_eq!(
            (
                calls[0].tool_call_id.as_str(),
                calls[1].tool_call_id.as_str()
            ),
            ("a", "b")
        );
        let results = &first.observation.as_ref().unwrap().results;
        assert_eq!(results[0].source_call_id.as_deref(), Some("b"));
        assert_eq!(results[0].content.as_deref(), Some("{\"lines\":3}"));
        assert_eq!(results[1].content.as_deref(), Some("a.py"));
        let m = first.metrics.as_ref().unwrap();
        assert_eq!(
            (m.prompt_tokens, m.completion_tokens, m.cost_usd),
            (100, 10, Some(0.01))
        );

        let second = &t.steps[3];
        assert_eq!(second.message, "");
        let calls = second.tool_calls.as_ref().unwrap();
        assert_eq!(calls[0].tool_call_id, "call_3");
        assert_eq!(calls[1].arguments["input"], "x");
        let results = &second.observation.as_ref().unwrap().results;
        let matched: Vec<Option<&str>> = results
            .iter()
            .map(|r| r.source_call_id.as_deref())
            .collect();
        assert_eq!(matched, [Some("call_4"), Some("call_3"), None]);
        assert_eq!(results[1].content, None);
        assert_eq!(results[2].extra.as_ref().unwrap()["call_id"], "zz");
        let m = second.metrics.as_ref().unwrap();
        assert_eq!((m.prompt_tokens, m.completion_tokens), (150, 20));
        let cost = m.cost_usd.unwrap();
        assert!((cost - 0.02).abs() < 1e-9, "{cost}");

        // "Done." repeats the last message; "Summary." does not.
        assert_eq!(t.steps[4].message, "Done.");
        assert_eq!(t.steps[4].metrics, None);
        assert_eq!(t.steps[5].message, "Summary.");

        let f = &t.final_metrics;
        assert_eq!(
            (
                f.total_prompt_tokens,
                f.total_completion_tokens,
                f.total_cached_tokens
            ),
            (Some(540), Some(50), Some(40))
        );
        assert_eq!((f.total_cost_usd, f.total_steps), (Some(0.05), 6));
        assert!(t.notes.unwrap().starts_with("1 event(s)"));
    }

    #[test]
    fn a_failed_run_records_its_status_and_error() {
        let result = CodingResult::failed(
            "s",
            crate::agent::CodingError::new(ErrorCode::RateLimited, "429"),
        );
        let events = [at(
            1,
            StreamEvent::Usage {
                usage: usage(7, 1, 1, None),
            },
        )];
        let t = trajectory(&input(&events, Some(&result)));
        let json = serde_json::to_value(&t).unwrap();
        assert_eq!(json["extra"]["status"], "error");
        assert_eq!(json["extra"]["error"]["code"], "rate_limited");
        // No agent step to carry it: the usage is in the totals only.
        assert_eq!(t.final_metrics.total_prompt_tokens, Some(7));
        assert!(json["final_metrics"].get("total_cost_usd").is_none());
    }

    #[test]
    fn steps_carry_only_one_calls_usage_and_no_cost_deltabench_replaced() {
        let events = [
            at(1, StreamEvent::Assistant { text: "a".into() }),
            // An agent that does not count its calls: no per-step metrics.
            at(
                2,
                StreamEvent::Usage {
                    usage: usage(10, 1, 0, None),
                },
            ),
            at(3, StreamEvent::Assistant { text: "b".into() }),
            at(
                4,
                StreamEvent::Usage {
                    usage: usage(30, 2, 1, Some(0.0)),
                },
            ),
        ];
        let mut result = CodingResult::completed("s");
        result.usage = Some(Usage {
            cost_usd: Some(0.2),
            cost_estimated: true,
            ..usage(30, 2, 1, None)
        });
        let t = trajectory(&input(&events, Some(&result)));
        assert_eq!(t.steps[1].metrics, None);
        let m = t.steps[2].metrics.as_ref().unwrap();
        assert_eq!((m.prompt_tokens, m.cost_usd), (20, None));
        assert_eq!(t.final_metrics.total_cost_usd, Some(0.2));
    }
}
