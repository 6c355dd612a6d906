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
    Message { text: String },
    ToolResponse { call_id: String, approved: bool },
    Abort,
}

impl CodingInput {
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
        #[schemars(with = "String")]
        subtype: SystemSubtype,
        message: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        data: Option<Value>,
    },
    Assistant {
        text: String,
    },
    Thinking {
        text: String,
    },
    ToolCall {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        name: String,
        #[serde(default)]
        args: Value,
    },
    ToolResult {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        name: Option<String>,
        #[serde(default)]
        result: Value,
        #[serde(default)]
        is_error: bool,
    },
    Usage {
        usage: Usage,
    },
    /// The agent's own closing message; the handle resolves the `CodingResult` separately.
    Result {
        status: CodingStatus,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        text: Option<String>,
    },
    /// Anything an adapter could not map; kept verbatim.
    Unknown {
        raw: Value,
    },
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CodingStatus {
    Completed,
    Error,
    Aborted,
    MaxTurns,
    MaxDuration,
    // The gateway refused a model call past the agent's `budget:` and the run was stopped.
    BudgetExceeded,
}

impl CodingStatus {
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
    RateLimited,
    ContextExhausted,
    SdkError,
    Aborted,
    Timeout,
    Unknown,
}

impl ErrorCode {
    pub const ALL: [ErrorCode; 6] = [
        Self::RateLimited,
        Self::ContextExhausted,
        Self::SdkError,
        Self::Aborted,
        Self::Timeout,
        Self::Unknown,
    ];

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
    pub message: String,
    pub code: ErrorCode,
    /// Seconds to wait, when `code` is `rate_limited`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<f64>,
}

impl CodingError {
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
    pub input_tokens: u64,
    pub output_tokens: u64,
    #[serde(default)]
    pub cache_read_tokens: u64,
    #[serde(default)]
    pub cache_write_tokens: u64,
    #[serde(default)]
    pub model_calls: u64,
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
    pub started_at: chrono::DateTime<chrono::Utc>,
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
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, Value>,
}

/// The verdict a run handle resolves to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CodingResult {
    pub status: CodingStatus,
    /// Always present: the resume handle.
    pub session_id: String,
    pub output: CodingOutput,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<CodingError>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
}

impl CodingResult {
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
    pub task: String,
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
