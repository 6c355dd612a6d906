//! The data that crosses the agent seam: tasks, inputs, events, results and errors.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

/// One unit of work for a coding agent.
#[derive(Debug, Clone, Default)]
pub struct CodingTask {
    /// The brief: what the agent is asked to do, as its prompt.
    pub task: String,
    /// Resume a previous harness session.
    pub session_id: Option<String>,
    /// Cancels this run; when set it wins over the node's signal.
    pub signal: Option<CancellationToken>,
    /// Wall-clock limit; past it the run is aborted and resolves `max_duration`.
    pub deadline: Option<Duration>,
}

impl From<&str> for CodingTask {
    fn from(task: &str) -> Self {
        Self {
            task: task.to_owned(),
            ..Self::default()
        }
    }
}

impl From<String> for CodingTask {
    fn from(task: String) -> Self {
        Self {
            task,
            ..Self::default()
        }
    }
}

/// What can be sent to a running agent through its handle.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum CodingInput {
    /// A further user message for an agent that takes them mid-run.
    Message {
        /// The message's text.
        text: String,
    },
    /// The answer to a tool call waiting for approval.
    ToolResponse {
        /// The id of the tool call answered.
        call_id: String,
        /// Whether the call may go ahead.
        approved: bool,
    },
    /// Stop the run; it resolves `aborted`.
    Abort,
}

impl CodingInput {
    /// The input's `type` as its JSON spells it.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Message { .. } => "message",
            Self::ToolResponse { .. } => "tool_response",
            Self::Abort => "abort",
        }
    }
}

/// What a [`StreamEvent::System`] notice is about, spelt as in `events.jsonl`; a subtype a CLI
/// adds that deltabench has no name for is kept as [`SystemSubtype::Other`].
#[derive(Debug, Clone, Eq, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub enum SystemSubtype {
    /// Deltabench started the agent's process.
    Spawn,
    /// The agent's process ended.
    Exit,
    /// A notice from deltabench.
    Warning,
    /// The CLI's session began (model, working folder).
    Init,
    /// The run reached its turn limit.
    MaxTurns,
    /// The run's budget was spent.
    BudgetExceeded,
    /// A replay met a request it has no answer for.
    ReplayMismatch,
    /// An error the CLI reported.
    Error,
    /// The CLI retries a request.
    Retry,
    /// Claude Code retries an API request.
    ApiRetry,
    /// Any other subtype, as the CLI spelt it.
    Other(String),
}

impl SystemSubtype {
    /// The subtype as `events.jsonl` spells it.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Spawn => "spawn",
            Self::Exit => "exit",
            Self::Warning => "warning",
            Self::Init => "init",
            Self::MaxTurns => "max_turns",
            Self::BudgetExceeded => "budget_exceeded",
            Self::ReplayMismatch => "replay_mismatch",
            Self::Error => "error",
            Self::Retry => "retry",
            Self::ApiRetry => "api_retry",
            Self::Other(other) => other,
        }
    }
}

impl From<&str> for SystemSubtype {
    fn from(subtype: &str) -> Self {
        match subtype {
            "spawn" => Self::Spawn,
            "exit" => Self::Exit,
            "warning" => Self::Warning,
            "init" => Self::Init,
            "max_turns" => Self::MaxTurns,
            "budget_exceeded" => Self::BudgetExceeded,
            "replay_mismatch" => Self::ReplayMismatch,
            "error" => Self::Error,
            "retry" => Self::Retry,
            "api_retry" => Self::ApiRetry,
            other => Self::Other(other.to_owned()),
        }
    }
}

impl From<String> for SystemSubtype {
    fn from(subtype: String) -> Self {
        match Self::from(subtype.as_str()) {
            Self::Other(_) => Self::Other(subtype),
            known => known,
        }
    }
}

impl From<SystemSubtype> for String {
    fn from(subtype: SystemSubtype) -> Self {
        match subtype {
            SystemSubtype::Other(other) => other,
            known => known.as_str().to_owned(),
        }
    }
}

impl std::fmt::Display for SystemSubtype {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// By spelling, so `Other("init")` is `Init`.
impl PartialEq for SystemSubtype {
    fn eq(&self, other: &Self) -> bool {
        self.as_str() == other.as_str()
    }
}

impl PartialEq<str> for SystemSubtype {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for SystemSubtype {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// The common event vocabulary every agent's stream is mapped onto.
///
/// `events.jsonl` holds one of these per line; `type` names the variant.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StreamEvent {
    /// Lifecycle and harness notices (start, exit, warnings).
    System {
        /// What the notice is about ([`SystemSubtype`]).
        #[schemars(with = "String")]
        subtype: SystemSubtype,
        /// The notice, for a human.
        message: String,
        /// Details as the CLI or deltabench gave them; absent when there are none.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        data: Option<Value>,
    },
    /// Text the agent wrote to the user.
    Assistant {
        /// The text (one message or block, not a delta).
        text: String,
    },
    /// The model's reasoning, where the CLI shows it.
    Thinking {
        /// The reasoning text.
        text: String,
    },
    /// The agent called a tool.
    ToolCall {
        /// The call's id, which its [`StreamEvent::ToolResult`] repeats; absent when the CLI
        /// gives none.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        /// The tool's name, as the CLI calls it.
        name: String,
        /// The call's arguments, as the CLI gave them (`null` when none).
        #[serde(default)]
        args: Value,
    },
    /// What a tool call returned.
    ToolResult {
        /// The id of the call answered; absent when the CLI gives none.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        /// The tool's name, when the CLI repeats it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        /// The tool's output, as the CLI gave it.
        #[serde(default)]
        result: Value,
        /// Whether the tool failed.
        #[serde(default)]
        is_error: bool,
    },
    /// The run's usage so far; the last one is the running total.
    Usage {
        /// Totals since the run started.
        usage: Usage,
    },
    /// The agent's own closing message; the handle resolves the `CodingResult` separately.
    Result {
        /// How the agent says the run ended.
        status: CodingStatus,
        /// Its final text, when it has one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        text: Option<String>,
    },
    /// Anything an adapter could not map; kept verbatim.
    Unknown {
        /// The line as JSON, or as a string when it was not JSON.
        raw: Value,
    },
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CodingStatus {
    /// The agent finished on its own.
    Completed,
    /// The run failed; the result's `error` says why.
    Error,
    /// The run was cancelled (abort, signal) before it finished.
    Aborted,
    /// The run hit its `max_turns`.
    MaxTurns,
    /// The run hit its wall-clock limit.
    MaxDuration,
    /// The gateway refused a model call past the agent's `budget:` and the run was stopped.
    BudgetExceeded,
}

impl CodingStatus {
    /// The status as its JSON spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::Error => "error",
            Self::Aborted => "aborted",
            Self::MaxTurns => "max_turns",
            Self::MaxDuration => "max_duration",
            Self::BudgetExceeded => "budget_exceeded",
        }
    }
}

impl fmt::Display for CodingStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a run failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The model API refused for rate or quota; retry later (see `retry_after`).
    RateLimited,
    /// The conversation outgrew the model's context window.
    ContextExhausted,
    /// The agent or its API failed otherwise (a bad config, a crash, an HTTP error).
    SdkError,
    /// The run was cancelled.
    Aborted,
    /// The run passed its wall-clock limit.
    Timeout,
    /// A failure deltabench could not classify.
    Unknown,
}

impl ErrorCode {
    /// Every code, in declaration order.
    pub const ALL: [ErrorCode; 6] = [
        Self::RateLimited,
        Self::ContextExhausted,
        Self::SdkError,
        Self::Aborted,
        Self::Timeout,
        Self::Unknown,
    ];

    /// The code as its JSON spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RateLimited => "rate_limited",
            Self::ContextExhausted => "context_exhausted",
            Self::SdkError => "sdk_error",
            Self::Aborted => "aborted",
            Self::Timeout => "timeout",
            Self::Unknown => "unknown",
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A failed run's error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, thiserror::Error)]
#[error("{message} ({code})")]
pub struct CodingError {
    /// What went wrong, for a human.
    pub message: String,
    /// The kind of failure, which decides the result's status.
    pub code: ErrorCode,
    /// Seconds to wait, when `code` is `rate_limited`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<f64>,
}

impl CodingError {
    /// An error with no `retry_after`.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            code,
            retry_after: None,
        }
    }
}

/// Tokens, model calls and cost of one run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Usage {
    /// Input tokens not read from the cache.
    pub input_tokens: u64,
    /// Output tokens (reasoning included).
    pub output_tokens: u64,
    /// Input tokens read from the prompt cache.
    #[serde(default)]
    pub cache_read_tokens: u64,
    /// Input tokens written to the prompt cache.
    #[serde(default)]
    pub cache_write_tokens: u64,
    /// Requests made to the model API.
    #[serde(default)]
    pub model_calls: u64,
    /// The cost in USD; `None` when neither the agent reported one nor a price was known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// True when the cost was priced by deltabench rather than reported by the agent.
    #[serde(default)]
    pub cost_estimated: bool,
}

/// One model call as deltabench's gateway saw it: when it was forwarded, and what its answer
/// used (one `model_calls`, priced when the model's price is known).
#[derive(Debug, Clone, PartialEq)]
pub struct ModelCall {
    /// When the gateway forwarded the request.
    pub started_at: chrono::DateTime<chrono::Utc>,
    /// What its answer used.
    pub usage: Usage,
}

/// What a run produced besides the workspace change.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CodingOutput {
    /// The agent's own summary: display only, never scored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Provenance from the run's write/edit tool calls, not proof.
    pub modified_files: Vec<String>,
    /// Anything else the agent reports, by name (the mock's `artifacts`, for one).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, Value>,
}

/// The verdict a run handle resolves to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CodingResult {
    /// How the run ended.
    pub status: CodingStatus,
    /// Always present: the resume handle.
    pub session_id: String,
    /// What the run produced besides the workspace change.
    pub output: CodingOutput,
    /// The run's totals; `None` when the agent reported none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// Why the run failed; `None` when it did not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<CodingError>,
    /// Wall-clock time of the run in milliseconds, when the handle measured it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
}

impl CodingResult {
    /// A completed result with empty output and no usage.
    pub fn completed(session_id: impl Into<String>) -> Self {
        Self {
            status: CodingStatus::Completed,
            session_id: session_id.into(),
            output: CodingOutput::default(),
            usage: None,
            error: None,
            duration_ms: None,
        }
    }

    /// A failed result; the status follows the code (`aborted`, `timeout` map to their own).
    pub fn failed(session_id: impl Into<String>, error: CodingError) -> Self {
        let status = match error.code {
            ErrorCode::Aborted => CodingStatus::Aborted,
            ErrorCode::Timeout => CodingStatus::MaxDuration,
            _ => CodingStatus::Error,
        };
        Self {
            status,
            error: Some(error),
            ..Self::completed(session_id)
        }
    }

    /// A result aborted with the message `aborted`.
    pub fn aborted(session_id: impl Into<String>) -> Self {
        Self::failed(session_id, CodingError::new(ErrorCode::Aborted, "aborted"))
    }
}

/// A fresh session id for agents that have no session of their own.
pub fn new_session_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// The tool form's input: a brief and an optional session to resume.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CodingToolInput {
    /// The brief, as [`CodingTask::task`].
    pub task: String,
    /// JSON `sessionId`: a session to resume.
    #[serde(default, rename = "sessionId", skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
}

/// The JSON Schema of [`CodingToolInput`]: `task` required, `sessionId` optional.
pub fn coding_tool_input_schema() -> Value {
    serde_json::json!({
        "type": "object",
        "properties": {
            "task": {
                "type": "string",
                "description": "What the coding agent should do, written as a brief."
            },
            "sessionId": {
                "type": "string",
                "description": "Resume this earlier harness session instead of starting a new one."
            }
        },
        "required": ["task"],
        "additionalProperties": false
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn system_subtypes_keep_their_spelling_in_json() {
        for line in [
            r#"{"type":"system","subtype":"init","message":"m"}"#,
            r#"{"type":"system","subtype":"budget_exceeded","message":"m"}"#,
            r#"{"type":"system","subtype":"compact_boundary","message":"m"}"#,
        ] {
            let event: StreamEvent = serde_json::from_str(line).unwrap();
            assert_eq!(serde_json::to_string(&event).unwrap(), line);
        }
        let event: StreamEvent =
            serde_json::from_str(r#"{"type":"system","subtype":"max_turns","message":"m"}"#)
                .unwrap();
        assert!(matches!(
            event,
            StreamEvent::System {
                subtype: SystemSubtype::MaxTurns,
                ..
            }
        ));
        assert_eq!(
            SystemSubtype::from("hook"),
            SystemSubtype::Other("hook".into())
        );
        assert_eq!(SystemSubtype::Other("init".into()), SystemSubtype::Init);
    }
}
