//! The exit codes: the one place a number is given to each outcome. `--help` prints the table
//! from here, and README's "Exit codes" table is checked against it (tests/it/exits.rs).

use std::fmt::Write as _;

/// How a command ended, as its exit code says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// 0: done; every trial was scored (a failed trial is a result, not an error).
    Ok,
    /// 1: a verdict failed: the gate found a regression, or `validate` found unsound tasks.
    VerdictFailed,
    /// 2: usage or configuration error: the command line, a suite or agents file, a run
    /// directory given, an `--out` in use. Nothing was run.
    Usage,
    /// 3: some trials could not be scored (`infra_error`), or the harness itself failed (a file
    /// it cannot write, a `gc` that could not clean).
    Unscored,
    /// 4: inconclusive: `--gate --require-power` found too few tasks or trials to tell, or
    /// `run --until-decided` / `--until-ci-width` reached --max-trials undecided.
    Inconclusive,
    /// 130: interrupted (Ctrl-C, SIGTERM); what finished is recorded.
    Interrupted,
}

impl Exit {
    /// Every exit code, in the order of the tables.
    pub const ALL: [Self; 6] = [
        Self::Ok,
        Self::VerdictFailed,
        Self::Usage,
        Self::Unscored,
        Self::Inconclusive,
        Self::Interrupted,
    ];

    /// The number the process exits with.
    pub const fn code(self) -> u8 {
        match self {
            Self::Ok => 0,
            Self::VerdictFailed => 1,
            Self::Usage => 2,
            Self::Unscored => 3,
            Self::Inconclusive => 4,
            Self::Interrupted => 130,
        }
    }

    /// The code's line in `--help`; README's row for it starts with the same words.
    pub const fn meaning(self) -> &'static str {
        match self {
            Self::Ok => "ok: every trial was scored (failed trials are a result, not an error)",
            Self::VerdictFailed => {
                "a verdict failed: the gate found a regression, or validate found bad tasks"
            }
            Self::Usage => {
                "usage or configuration error (the suite file, an agents file, a flag, an --out in use)"
            }
            Self::Unscored => {
                "some trials could not be scored (infra_error), or the harness failed"
            }
            Self::Inconclusive => {
                "inconclusive: a gate with --require-power, or --until-decided, could not decide"
            }
            Self::Interrupted => {
                "interrupted (what finished is recorded; `deltabench resume` finishes the run)"
            }
        }
    }

    /// The worse of two outcomes of a gate: a regression over an undecided gate over an
    /// inconclusive one over a pass.
    pub fn worse(self, other: Self) -> Self {
        let rank = |exit| match exit {
            Self::VerdictFailed => 3,
            Self::Unscored => 2,
            Self::Inconclusive => 1,
            _ => 0,
        };
        if rank(other) > rank(self) {
            other
        } else {
            self
        }
    }
}

/// The code of the sandbox's network forwarder that could not start its command: what a
/// container runtime gives for the same failure. Only the run that started the agent sees it,
/// as the agent's; never a code of a command of deltabench, so it is in neither table.
pub(super) const FORWARDER_FAILED: u8 = 125;

impl From<Exit> for std::process::ExitCode {
    fn from(exit: Exit) -> Self {
        Self::from(exit.code())
    }
}

/// `deltabench --help`'s closing part: the exit codes, then how to start.
pub fn after_help() -> String {
    let mut text = String::from("Exit codes:\n");
    for exit in Exit::ALL {
        let _ = writeln!(text, "  {:>3}  {}", exit.code(), exit.meaning());
    }
    let built_in = crate::agent::harness::HarnessKind::ALL
        .iter()
        .filter(|kind| kind.cli().is_some())
        .count();
    let _ = write!(
        text,
        "\nStart with:
  deltabench init my-suite                         # a first suite of your own
  deltabench run suites/demo --workdir /dev/shm
  deltabench validate suites/demo
  deltabench run suites/smoke --workdir /dev/shm   # the {built_in} real agent CLIs, offline",
    );
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_distinct_and_in_order() {
        let codes: Vec<u8> = Exit::ALL.iter().map(|e| e.code()).collect();
        let mut sorted = codes.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(codes, sorted);
    }

    #[test]
    fn a_regression_outranks_an_undecided_gate() {
        use Exit::*;
        assert_eq!(Ok.worse(Unscored), Unscored);
        assert_eq!(Unscored.worse(VerdictFailed), VerdictFailed);
        assert_eq!(VerdictFailed.worse(Unscored), VerdictFailed);
        assert_eq!(Unscored.worse(Ok), Unscored);
        assert_eq!(Inconclusive.worse(Unscored), Unscored);
        assert_eq!(Ok.worse(Inconclusive), Inconclusive);
        assert_eq!(Inconclusive.worse(VerdictFailed), VerdictFailed);
    }
}
