//! How a CLI's run ends: what deltabench itself saw (an abort, its timeout, a spent budget, an
//! enforced turn limit) outranks what the CLI's own output says.

use super::ParsedRun;
use crate::agent::{CodingError, CodingResult, CodingStatus, ErrorCode};

/// What deltabench saw of a run beside the CLI's output.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Seen {
    /// The trial was cancelled.
    pub cancelled: bool,
    /// The CLI's wall-clock limit stopped it (with the limit's message).
    pub timed_out: Option<String>,
    /// The reason a budget stopped it.
    pub budget_stop: Option<String>,
    /// deltabench stopped it at `max_turns`.
    pub turn_limit_hit: bool,
}

/// The run's result, first match wins: aborted, timed out, stopped by its budget, at its turn
/// limit, else as the CLI's output says.
pub(super) fn run_result(session: String, seen: Seen, parsed: &ParsedRun) -> CodingResult {
    if seen.cancelled {
        return CodingResult::aborted(session);
    }
    if let Some(message) = seen.timed_out {
        return CodingResult::failed(session, CodingError::new(ErrorCode::Timeout, message));
    }
    if let Some(reason) = seen.budget_stop {
        return crate::agent::stopped_result(session, reason);
    }
    let (status, error) = if seen.turn_limit_hit {
        (CodingStatus::MaxTurns, None)
    } else {
        (parsed.status, parsed.error.clone())
    };
    CodingResult {
        status,
        error,
        ..CodingResult::completed(session)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed() -> ParsedRun {
        ParsedRun::failed(CodingError::new(ErrorCode::RateLimited, "429"))
    }

    fn seen() -> Seen {
        Seen {
            cancelled: true,
            timed_out: Some("too slow".into()),
            budget_stop: Some("budget: tokens 10 of 5".into()),
            turn_limit_hit: true,
        }
    }

    #[test]
    fn an_abort_outranks_everything() {
        let result = run_result("s".into(), seen(), &failed());
        assert_eq!(result.status, CodingStatus::Aborted);
        assert_eq!(result.session_id, "s");
    }

    #[test]
    fn a_timeout_outranks_the_budget_and_the_stream() {
        let seen = Seen {
            cancelled: false,
            ..seen()
        };
        let result = run_result("s".into(), seen, &failed());
        assert_eq!(result.status, CodingStatus::MaxDuration);
        let error = result.error.unwrap();
        assert_eq!(
            (error.code, error.message.as_str()),
            (ErrorCode::Timeout, "too slow")
        );
    }

    #[test]
    fn a_spent_budget_outranks_the_turn_limit() {
        let seen = Seen {
            cancelled: false,
            timed_out: None,
            ..seen()
        };
        let result = run_result("s".into(), seen.clone(), &failed());
        let stopped = crate::agent::stopped_result("s".into(), seen.budget_stop.unwrap());
        assert_eq!(result.status, stopped.status);
        assert_eq!(result.error, stopped.error);
    }

    #[test]
    fn an_enforced_turn_limit_outranks_the_stream() {
        let seen = Seen {
            turn_limit_hit: true,
            ..Seen::default()
        };
        let result = run_result("s".into(), seen, &failed());
        assert_eq!(result.status, CodingStatus::MaxTurns);
        assert_eq!(result.error, None);
    }

    #[test]
    fn otherwise_the_stream_decides() {
        let result = run_result("s".into(), Seen::default(), &failed());
        assert_eq!(result.status, CodingStatus::Error);
        assert_eq!(result.error.unwrap().code, ErrorCode::RateLimited);
        let done = run_result("s".into(), Seen::default(), &ParsedRun::completed());
        assert_eq!(done.status, CodingStatus::Completed);
    }
}
