//! Whether a task is sound, from what its noop and oracle trials left: the first reason it is
//! not, with the evidence shown under its `BAD` line. `validate` runs the trials; this judges.

mod evidence;

use crate::store::{Outcome, layout};
pub use evidence::{Trial, name_list, reference_evidence};

/// Why a task is unsound, with what shows it.
pub struct Unsound<'a> {
    reason: String,
    /// Lines shown under the reason (the tests that failed or passed).
    details: Vec<String>,
    /// The trial whose verify output is shown.
    shown: Option<&'a Trial<'a>>,
    /// The reference passed this many of this many times, and the base never: flaky, not
    /// wrong.
    pub flaky: Option<(u32, u32)>,
}

impl<'a> Unsound<'a> {
    /// A reason the task is unsound, shown with `shown`'s verify output (none when `None`).
    pub fn new(reason: impl Into<String>, shown: Option<&'a Trial<'a>>) -> Self {
        Self {
            reason: reason.into(),
            details: Vec::new(),
            shown,
            flaky: None,
        }
    }
}

/// Why a task is unsound, from its noop and oracle trials and what their folders hold.
pub fn judge<'a>(noop: &'a [Trial<'a>], oracle: &'a [Trial<'a>]) -> Option<Unsound<'a>> {
    not_executable(oracle)
        .or_else(|| not_checked(noop, oracle))
        .or_else(|| not_applied(oracle))
        .or_else(|| no_tests_with_solution(oracle))
        .or_else(|| verdict_pattern(noop, oracle))
}

const WHERE_TESTS_GO: &str = "check that it runs the hidden tests where `tests:` puts them (its folder is copied onto the workspace root)";

/// A shell's "command not found" (127) or "not executable" (126), not a test verdict (first:
/// such a trial is unscored, and this says more than "could not be checked"). Only the
/// reference's counts: on the base, a tool the solution adds is rightly missing.
fn not_executable<'a>(oracle: &'a [Trial<'a>]) -> Option<Unsound<'a>> {
    let t = oracle
        .iter()
        .find(|t| matches!(t.verify_exit(), Some(126 | 127)))?;
    let reason = match t.verify_exit() {
        Some(127) => "the verify command was not found: exit 127 (with the solution applied)",
        _ => "the verify command could not be executed: exit 126 (with the solution applied)",
    };
    Some(Unsound::new(reason, Some(t)))
}

/// A trial of either side that could not be scored.
fn not_checked<'a>(noop: &'a [Trial<'a>], oracle: &'a [Trial<'a>]) -> Option<Unsound<'a>> {
    let t = noop
        .iter()
        .chain(oracle)
        .find(|t| t.record.outcome == Outcome::InfraError)?;
    let why = t.record.infra_error.as_deref().unwrap_or("unknown");
    Some(Unsound::new(
        format!("could not be checked: {why}"),
        Some(t),
    ))
}

/// A reference whose solution did not apply.
fn not_applied<'a>(oracle: &'a [Trial<'a>]) -> Option<Unsound<'a>> {
    let t = oracle
        .iter()
        .find(|t| t.record.status != Some(crate::agent::CodingStatus::Completed))?;
    let why = t
        .record
        .error
        .as_ref()
        .map_or("unknown".to_owned(), |e| e.message.clone());
    Some(Unsound::new(
        format!("reference solution could not be applied: {why}"),
        None,
    ))
}

/// A reference whose test runner ran no test.
fn no_tests_with_solution<'a>(oracle: &'a [Trial<'a>]) -> Option<Unsound<'a>> {
    let (t, runners) = oracle.iter().find_map(|t| Some((t, t.zero_tests()?)))?;
    Some(Unsound::new(
        format!(
            "zero tests ran: with the solution applied, the test runner ({runners}) ran no test; {WHERE_TESTS_GO}"
        ),
        Some(t),
    ))
}

/// What the verdicts show: a base that always passes, a reference that never does, or either
/// breaking its pattern some of the time.
fn verdict_pattern<'a>(noop: &'a [Trial<'a>], oracle: &'a [Trial<'a>]) -> Option<Unsound<'a>> {
    let n = noop.len();
    let base_passes: Vec<&Trial> = noop.iter().filter(|t| t.verify_passed()).collect();
    let reference_passes = oracle.iter().filter(|t| t.record.passed()).count();
    if base_passes.len() == n
        && let Some(&t) = base_passes.first()
    {
        return Some(passes_on_base(t));
    }
    if reference_passes == 0
        && let Some(t) = oracle.first()
    {
        return Some(reference_fails(t));
    }
    if !base_passes.is_empty() || reference_passes < oracle.len() {
        // Show the trial that broke the pattern.
        let odd = base_passes
            .first()
            .copied()
            .or_else(|| oracle.iter().find(|t| !t.record.passed()));
        let mut unsound = Unsound::new(
            format!(
                "flaky: base passed {} of {n} times, reference passed {reference_passes} of {} times",
                base_passes.len(),
                oracle.len()
            ),
            odd,
        );
        if base_passes.is_empty() {
            unsound.flaky = Some((reference_passes as u32, oracle.len() as u32));
        }
        return Some(unsound);
    }
    None
}

/// The base passed every time, as `t` shows: its runner ran nothing, or the task needs no change.
fn passes_on_base<'a>(t: &'a Trial<'a>) -> Unsound<'a> {
    if let Some(runners) = t.zero_tests() {
        return Unsound::new(
            format!(
                "zero tests ran: the verify command succeeds on the untouched base, but the test runner ({runners}) ran no test; {WHERE_TESTS_GO}"
            ),
            Some(t),
        );
    }
    let mut unsound = Unsound::new(
        "passes without change: the verify command succeeds on the untouched base",
        Some(t),
    );
    if let Some(tests) = t.tests.as_ref().filter(|tests| !tests.names.is_empty()) {
        unsound
            .details
            .push(format!("passed on the base: {}", name_list(&tests.names)));
    }
    unsound
}

/// The reference never passed, as `t` shows, with the tests that failed and the installs the
/// verifier held back.
fn reference_fails<'a>(t: &'a Trial<'a>) -> Unsound<'a> {
    let why = t.record.reason.as_deref().unwrap_or("it did not pass");
    let mut unsound = Unsound::new(
        format!("reference fails: the verify command fails with the solution applied ({why})"),
        Some(t),
    );
    let failed = t.failed_tests();
    if !failed.is_empty() {
        unsound
            .details
            .push(format!("failed: {}", name_list(&failed)));
    }
    let held = t.held_back_installs();
    if !held.is_empty() {
        unsound.details.push(format!(
            "the reference installed {} file(s) that the verifier's toolchain rule holds back ({}, e.g. {}): if the task asks for that package site-wide, name its paths in the environment's `outputs:`",
            held.len(),
            crate::delta::CONTAINER_CHANGES,
            held[0]
        ));
    }
    unsound
}

impl Unsound<'_> {
    /// The task's `BAD` line and the evidence under it.
    pub fn render(&self, task: &str) -> String {
        let mut text = format!("BAD  {task}: {}\n", self.reason);
        for line in &self.details {
            text.push_str(&format!("       {line}\n"));
        }
        if let Some(t) = self.shown
            && t.dir.join(layout::VERIFY_LOG).exists()
        {
            text.push_str(&t.log_tail("       "));
        }
        text
    }
}
