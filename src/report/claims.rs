//! Claimed vs proven: how often an agent says the work is done when verification says otherwise.

use serde::Serialize;

use crate::agent::CodingStatus;
use crate::stats;
use crate::store::{Outcome, TrialRecord};

/// One agent's false claims: trials it ended `completed` (it said the work is done) that did not
/// pass verification, out of the scored trials it ended `completed`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct FalseClaims {
    /// Scored trials the agent ended `completed`.
    pub claimed: usize,
    /// Of those, the ones whose outcome is not `pass` (`fail` or `invalid`).
    pub false_claims: usize,
    /// `false_claims / claimed`; None when the agent never ended `completed`.
    pub rate: Option<f64>,
    /// Wilson interval of the rate at the requested confidence.
    pub interval: Option<(f64, f64)>,
}

/// Whether an agent of this recorded config says anything: `noop` and `oracle` are deltabench's
/// own baselines, which end `completed` whatever they did, so they claim nothing.
pub(crate) fn makes_claims(config: Option<&serde_json::Value>) -> bool {
    !matches!(
        config
            .and_then(|c| c.get("kind"))
            .and_then(serde_json::Value::as_str),
        Some("noop" | "oracle")
    )
}

/// The false claims of `agent` in `records`, with a Wilson interval at `confidence` (in [0, 1)).
///
/// `infra_error` trials are left out: nothing verified them, so no claim was disproven. Trials
/// are counted as independent (one claim each), as the Wilson interval assumes.
pub(crate) fn false_claims(records: &[TrialRecord], agent: &str, confidence: f64) -> FalseClaims {
    let claims = records.iter().filter(|r| {
        r.agent == agent
            && r.status == Some(CodingStatus::Completed)
            && r.outcome != Outcome::InfraError
    });
    let (mut claimed, mut false_claims) = (0, 0);
    for record in claims {
        claimed += 1;
        false_claims += usize::from(record.outcome != Outcome::Pass);
    }
    FalseClaims::of(claimed, false_claims, confidence)
}

impl FalseClaims {
    /// `false_claims` of `claimed`, with the rate and its Wilson interval at `confidence`.
    pub(crate) fn of(claimed: usize, false_claims: usize, confidence: f64) -> Self {
        Self {
            claimed,
            false_claims,
            rate: (claimed > 0).then(|| false_claims as f64 / claimed as f64),
            interval: stats::wilson(false_claims, claimed, confidence).map(|i| (i.lo, i.hi)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(agent: &str, status: Option<CodingStatus>, outcome: Outcome) -> TrialRecord {
        let mut record = TrialRecord::unscored(
            "t",
            agent,
            1,
            crate::store::RecordedMetric::Delta,
            String::new(),
        );
        record.outcome = outcome;
        record.status = status;
        record
    }

    #[test]
    fn counts_completed_scored_trials_that_did_not_pass() {
        let done = Some(CodingStatus::Completed);
        let records = [
            record("a", done, Outcome::Pass),
            record("a", done, Outcome::Fail),
            record("a", done, Outcome::Invalid),
            // Not claims: the agent said it failed, or nothing verified the trial.
            record("a", Some(CodingStatus::Error), Outcome::Fail),
            record("a", done, Outcome::InfraError),
            record("b", done, Outcome::Fail),
        ];
        let claims = false_claims(&records, "a", 0.95);
        assert_eq!((claims.claimed, claims.false_claims), (3, 2));
        assert!((claims.rate.unwrap() - 2.0 / 3.0).abs() < 1e-12);
        let (lo, hi) = claims.interval.unwrap();
        assert!(lo < 2.0 / 3.0 && 2.0 / 3.0 < hi, "{lo} {hi}");
        let none = false_claims(&records, "c", 0.95);
        assert_eq!((none.claimed, none.rate, none.interval), (0, None, None));
    }
}
