//! The one place a trial's end is decided: scored (with its verdict) or unscored (with why).
//! Pure: the runner gathers the facts (what the lifecycle produced, the tamper check, the
//! replay stop, the interrupt, the redaction of its files) and records what this returns.

use super::verdict::{Verdict, VerdictInput, verdict};

/// How a trial ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Settled {
    /// Scored, with the verdict.
    Scored(Verdict),
    /// Not scored: nothing is said about the agent; `retry` and `resume` run it again.
    Unscored {
        /// Which fact left it unscored.
        cause: UnscoredCause,
        /// That fact in words: the record's `infra_error`.
        why: String,
        /// The run's interrupt cut it short (`resume` runs it again, superseding it).
        interrupted: bool,
    },
}

/// Which fact left a trial unscored (`why` says it in words).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UnscoredCause {
    /// The trial's files could not be rid of its secrets.
    Unredacted,
    /// The run's interrupt cut the trial short.
    Interrupted,
    /// A replay left its recording.
    ReplayMismatch,
    /// The task's environment, the lifecycle, the sandbox or the tamper check failed.
    HarnessFailed,
    /// The verify command's own program could not run.
    VerifyUnrunnable,
}

/// Why a trial could not reach a verdict, or the verdict's input when it could.
pub enum Reached<'a> {
    /// The trial ran to a verdict's input.
    Verdict(VerdictInput<'a>),
    /// The task's environment, the lifecycle, the sandbox or the tamper check failed: the
    /// harness's failure, not the agent's.
    Broken(String),
}

/// Everything that decides a trial's end.
pub struct TrialFacts<'a> {
    /// How far the trial got.
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

/// The `why` of a trial the run's interrupt cut short.
pub const INTERRUPTED: &str =
    "interrupted: the run was stopped while this trial ran; `deltabench resume` runs it again";

/// A trial's end, from its facts. Later facts outrank earlier ones: a verdict on a replay that
/// left its recording, an interrupted agent, or files that may still hold a secret is no verdict.
pub fn settle(facts: TrialFacts<'_>) -> Settled {
    let unscored = |cause: UnscoredCause, why: String| Settled::Unscored {
        cause,
        why,
        interrupted: facts.interrupted,
    };
    if let Some(why) = facts.unredacted {
        return unscored(UnscoredCause::Unredacted, why);
    }
    if facts.interrupted {
        return unscored(UnscoredCause::Interrupted, INTERRUPTED.to_owned());
    }
    if let Some(why) = facts.replay_mismatch {
        return unscored(UnscoredCause::ReplayMismatch, why);
    }
    match facts.reached {
        Reached::Broken(why) => unscored(UnscoredCause::HarnessFailed, why),
        Reached::Verdict(input) => match unrunnable(&input.delta.command_result) {
            Some(why) => unscored(UnscoredCause::VerifyUnrunnable, why),
            None => Settled::Scored(verdict(input)),
        },
    }
}

/// The verify command's own program could not run (the shell's 127 "not found" or 126 "cannot
/// execute", naming that program): the environment's fault, not the agent's. A program named by
/// a path (`./run-tests`) may be the workspace's, and a 127 from inside the tests (`bash x.sh`
/// with x.sh gone) names another word: both stay the agent's failure.
pub fn unrunnable(result: &crate::delta::CommandResult) -> Option<String> {
    let code = result.exit_code.filter(|c| matches!(c, 126 | 127))?;
    if result.timed_out {
        return None;
    }
    let program = verify_program(&result.command)?;
    let said = |what: &str| {
        result
            .output
            .lines()
            .any(|line| line.contains(&format!("{program}: {what}")))
    };
    let what = if code == 127 && (said("not found") || said("command not found")) {
        "was not found"
    } else if code == 126 && (said("Permission denied") || said("cannot execute")) {
        "could not be executed"
    } else {
        return None;
    };
    Some(format!(
        "the verify command's program `{program}` {what} (exit {code}; command: `{}`): the environment's failure, not the agent's; fix the task's verify or the environment and `deltabench resume` the run",
        result.command.trim()
    ))
}

/// The program a shell command line starts, when it is a plain name the shell looks up on PATH:
/// the first word after any `NAME=value` assignments; `None` for a path, a shell keyword or
/// syntax the line cannot be read without a shell.
pub fn verify_program(command: &str) -> Option<&str> {
    let word = command
        .split_whitespace()
        .find(|word| !word.contains('=') || word.starts_with('='))?;
    let plain = word
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "-_.+".contains(c));
    (plain && !SHELL_WORDS.contains(&word)).then_some(word)
}

/// Builtins and keywords a POSIX shell runs itself: never looked up on PATH.
const SHELL_WORDS: &[&str] = &[
    ".", "alias", "bg", "break", "case", "cd", "command", "continue", "eval", "exec", "exit",
    "export", "false", "fg", "for", "getopts", "hash", "if", "jobs", "kill", "local", "printf",
    "pwd", "read", "readonly", "return", "set", "shift", "source", "test", "times", "trap", "true",
    "type", "ulimit", "umask", "unalias", "unset", "until", "wait", "while", "echo", "!",
];

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
    fn a_verify_program_that_is_not_there_is_unscored_and_named() {
        let failed = |command: &str, code: i32, output: &str| EnvironmentDelta {
            diff: "+x\n".into(),
            command_result: CommandResult {
                command: command.into(),
                exit_code: Some(code),
                output: output.into(),
                ..CommandResult::default()
            },
            ..EnvironmentDelta::default()
        };
        let delta = failed("pytohn3 -m unittest", 127, "sh: 1: pytohn3: not found\n");
        let Settled::Unscored { why, cause, .. } = settle(facts(&delta)) else {
            panic!("scored");
        };
        assert_eq!(cause, UnscoredCause::VerifyUnrunnable);
        assert!(
            why.starts_with("the verify command's program `pytohn3` was not found (exit 127; command: `pytohn3 -m unittest`)"),
            "{why}"
        );
        let delta = failed(
            "LANG=C mytool",
            126,
            "bash: line 1: mytool: Permission denied\n",
        );
        assert!(matches!(settle(facts(&delta)), Settled::Unscored { .. }));
        // A script the workspace should hold, a 127 from inside the tests, or a plain exit 127
        // with no shell message: the agent's failure as before.
        for (command, output) in [
            ("./run-tests", "sh: 1: ./run-tests: not found\n"),
            ("bash run.sh", "bash: run.sh: No such file or directory\n"),
            ("python3 -m unittest", "exit 127 on purpose\n"),
        ] {
            let delta = failed(command, 127, output);
            let mut facts = facts(&delta);
            if let Reached::Verdict(input) = &mut facts.reached {
                input.score = Score::from_passed(false);
            }
            let Settled::Scored(verdict) = settle(facts) else {
                panic!("{command}: unscored");
            };
            assert_eq!(verdict.judgement, Judgement::Fail, "{command}");
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
                cause: UnscoredCause::Unredacted,
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
                cause: UnscoredCause::Interrupted,
                why: INTERRUPTED.into(),
                interrupted: true
            }
        );
    }
}
