//! deltabench: evaluate coding agents on real task suites, scored only on the workspace delta.
//!
//! A trial is one (task, agent, attempt). It flows: [`suite`] (YAML into a validated suite) →
//! [`runner`] (plan and schedule) → provision ([`workspace`]) → construct and run ([`agent`]) →
//! probe ([`delta`]) → dispose → score ([`metric`]) → [`store`] (the run directory) →
//! [`report`]. The seam types in [`agent`], [`workspace`], [`delta`] and [`metric`] know
//! nothing of the CLI or the run directory, so the crate is usable as a library.

// Before every module, so each sees these instead of std's: std's panic when stderr is closed
// (`deltabench run 2>&1 | head -1`), and a progress line lost must not end a run half-recorded.
/// `eprintln!` that ignores a write error (a closed pipe).
macro_rules! eprintln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}
/// `eprint!` that ignores a write error (a closed pipe).
macro_rules! eprint {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stderr(), $($arg)*);
    }};
}

pub mod agent;
pub mod cli;
pub mod delta;
pub mod gateway;
pub(crate) mod import;
pub mod lifecycle;
pub mod metric;
pub mod model;
pub(crate) mod process;
pub(crate) mod report;
pub mod runner;
pub mod stats;
pub mod store;
pub mod suite;
pub(crate) mod support;
pub(crate) mod trajectory;
pub mod workspace;
