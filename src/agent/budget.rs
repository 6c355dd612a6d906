//! An agent's budget of model use, and the signal that stops a run that spent it.
//!
//! The budget is enforced where every model call passes, the gateway (`crate::gateway`): it
//! refuses the call that would cross it and trips the run's [`BudgetStop`], on which the agent
//! stops its process and resolves `budget_exceeded`. The agents here only listen.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use super::{CodingError, CodingResult, CodingStatus, ErrorCode, StreamEvent};

/// Limits on one trial's model use; each is optional, and none is zero or negative.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    /// Input, output, cache read and cache write tokens together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    /// USD, as priced from the price table (or the agent's `price:`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// Model calls (requests for a completion; token counts and model lists are free).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_calls: Option<u64>,
    /// Wall time from the agent's start.
    #[serde(default, with = "crate::support::duration_opt")]
    pub wall: Option<Duration>,
}

impl Budget {
    /// The keys a `budget:` map takes.
    pub const KEYS: [&str; 4] = ["tokens", "cost_usd", "model_calls", "wall"];

    /// Whether no limit is set.
    pub fn is_empty(&self) -> bool {
        *self == Budget::default()
    }

    /// `self`, with each limit it leaves unset taken from `defaults`.
    pub fn or(self, defaults: Budget) -> Budget {
        Budget {
            tokens: self.tokens.or(defaults.tokens),
            cost_usd: self.cost_usd.or(defaults.cost_usd),
            model_calls: self.model_calls.or(defaults.model_calls),
            wall: self.wall.or(defaults.wall),
        }
    }
}

/// How a replay's mismatch reason begins (`run --replay`: a request the recording does not
/// hold trips the same stop as a spent budget, but is the trial's error).
pub const REPLAY_MISMATCH: &str = "replay: ";

/// Whether a stop's reason is a replay's mismatch, not a spent budget.
pub fn is_replay_mismatch(reason: &str) -> bool {
    reason.starts_with(REPLAY_MISMATCH)
}

/// The event that says why a run's stop tripped: `replay_mismatch` or `budget_exceeded`.
pub fn stop_event(reason: &str) -> StreamEvent {
    let subtype = if is_replay_mismatch(reason) {
        "replay_mismatch"
    } else {
        "budget_exceeded"
    };
    StreamEvent::System {
        subtype: subtype.into(),
        message: reason.to_owned(),
        data: None,
    }
}

/// A run's result once its stop tripped: a replay's mismatch is the trial's error, a spent
/// budget is `budget_exceeded` (scored on its delta, like a turn limit).
pub fn stopped_result(session: String, reason: String) -> CodingResult {
    if is_replay_mismatch(&reason) {
        return CodingResult::failed(session, CodingError::new(ErrorCode::SdkError, reason));
    }
    CodingResult {
        status: CodingStatus::BudgetExceeded,
        ..CodingResult::completed(session)
    }
}

/// Tripped once when a run's budget is spent; the agent then stops its process.
#[derive(Debug, Clone, Default)]
pub struct BudgetStop {
    token: CancellationToken,
    reason: Arc<Mutex<Option<String>>>,
}

impl BudgetStop {
    /// A stop not yet tripped.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records why (the first reason wins) and wakes every listener.
    pub fn trip(&self, reason: impl Into<String>) {
        if let Ok(mut slot) = self.reason.lock()
            && slot.is_none()
        {
            *slot = Some(reason.into());
        }
        self.token.cancel();
    }

    /// Why the budget was exceeded, once it was.
    pub fn tripped(&self) -> Option<String> {
        self.reason.lock().ok().and_then(|slot| slot.clone())
    }

    /// Resolves when the budget is tripped.
    pub async fn wait(&self) {
        self.token.cancelled().await
    }
}
