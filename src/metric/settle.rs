//! The one place a trial's end is decided: scored (with its verdict) or unscored (with why).
//! Pure: the runner gathers the facts (what the lifecycle produced, the tamper check, the
//! replay stop, the interrupt, the redaction of its files) and records what this returns.

use super::verdict::{Verdict, VerdictInput, verdict};

/// How a trial ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Settled {
    Scored(Verdict),
    /// Not scored: nothing is said about the agent; `retry` and `resume` run it again.
    Unscored {
        why: String,
        /// The run's interrupt cut it short (`resume` runs it again, superseding it).
        interrupted: bool,
    },
}

/// Why a trial could not reach a verdict, or the verdict's input when it could.
pub enum Reached<'a> {
    Verdict(VerdictInput<'a>),
    /// The task's environment, the lifecycle, the sandbox or the tamper check failed: the
    /// harness's failure, not the agent's.
    Broken(String),
}

/// Everything that decides a trial's end.
pub struct TrialFacts<'a> {
    pub reached: Reached<'a>,
    /// A replay that left its recording: it measured nothing the recording did.
    pub replay_mismatch: Option<String>,
    /// The run was cancelled while the trial ran (its agent aborted, or a job engine's SIGTERM
    /// reached its commands directly).
    pub interrupted: bool,
    /// The trial's files could not be rid of its secrets.
    pub unredacted: Option<String>,
}

impl TrialFacts<'_> {
    /// A trial that could not reach a verdict, and nothing else to say.
    pub fn broken(why: String) -> Self {
        Self {
            reached: Reached::Broken(why),
            replay_mismatch: None,
            interrupted: false,
            unredacted: None,
        }
    }
}

pub const INTERRUPTED: &str =
    "interrupted: the run was stopped while this trial ran; `deltabench resume` runs it again";

/// A trial's end, from its facts. Later facts outrank earlier ones: a verdict on a replay that
/// left its recording, an interrupted agent, or files that may still hold a secret is no verdict.
pub fn settle(facts: TrialFacts<'_>) -> Settled {
    let unscored = |why: String| Settled::Unscored {
        why,
        interrupted: facts.interrupted,
    };
    if let Some(why) = facts.unredacted {
        return unscored(why);
    }
    if facts.interrupted {
        return unscored(INTERRUPTED.to_owned());
    }
    if let Some(why) = facts.replay_mismatch {
        return unscored(why);
    }
    match facts.reached {
        Reached::Broken(why) => unscored(why),
        Reached::Verdict(input) => Settled::Scored(verdict(input)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::delta::{CommandResult, EnvironmentDelta};
    use crate::metric::{Judgement, Score};

    fn passing() -> EnvironmentDelta {
        EnvironmentDelta {
            diff: "+x\n".into(),
            command_result: CommandResult {
                exit_code: Some(0),
                output: "Ran 1 test in 0.001s\n\nOK\n".into(),
                ..CommandResult::default()
            },
            ..EnvironmentDelta::default()
        }
    }

    fn facts(delta: &EnvironmentDelta) -> TrialFacts<'_> {
        TrialFacts {
            reached: Reached::Verdict(VerdictInput {
                delta,
                score: Score::from_passed(true),
                tampered: &[],
                expected: None,
            }),
            replay_mismatch: None,
            interrupted: false,
            unredacted: None,
        }
    }

    #[test]
    fn a_pass_is_scored_only_when_no_later_fact_takes_it_back() {
        let delta = passing();
        let Settled::Scored(verdict) = settle(facts(&delta)) else {
            panic!("a clean pass is scored");
        };
        assert_eq!(verdict.judgement, Judgement::Pass);
        let takers: [fn(&mut TrialFacts); 4] = [
            |f| f.replay_mismatch = Some("replay mismatch: call 2".into()),
            |f| f.interrupted = true,
            |f| f.unredacted = Some("cannot redact".into()),
            |f| f.reached = Reached::Broken("the probe failed".into()),
        ];
        for take in takers {
            let mut facts = facts(&delta);
            take(&mut facts);
            assert!(
                matches!(settle(facts), Settled::Unscored { .. }),
                "a later fact makes a pass unscored"
            );
        }
    }

    #[test]
    fn an_interrupt_is_kept_whatever_else_unscored_the_trial() {
        let delta = passing();
        let mut interrupted = facts(&delta);
        interrupted.interrupted = true;
        interrupted.unredacted = Some("cannot redact x".into());
        assert_eq!(
            settle(interrupted),
            Settled::Unscored {
                why: "cannot redact x".into(),
                interrupted: true
            }
        );
        let mut broken = facts(&delta);
        broken.interrupted = true;
        broken.reached = Reached::Broken("the probe failed".into());
        assert_eq!(
            settle(broken),
            Settled::Unscored {
                why: INTERRUPTED.into(),
                interrupted: true
            }
        );
    }
}
