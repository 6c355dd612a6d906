//! The one reporter that owns the terminal: a progress bar on a TTY, plain lines otherwise.

use std::path::Path;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

use crate::runner::{Plan, RunObserver};
use crate::store::{Outcome, TrialRecord};

pub(super) struct TerminalReporter {
    tty: bool,
    bar: Option<ProgressBar>,
    total: usize,
    done: usize,
    passed: usize,
    /// Resuming a run: the trials it had recorded already (progress counts on from there).
    resumed: Option<usize>,
    /// A run in rounds: the round this reporter's part runs (its start line says so).
    round: Option<u32>,
    /// Trials in flight, with when they started, in start order.
    running: Vec<(String, Instant)>,
    /// Said when the trials start: after the environments were made, so that an environment
    /// that stops the run is the first thing said.
    note: Option<String>,
    /// The summary's counts over every record, one record at a time (a run keeps no records).
    tally: crate::report::Tally,
}

impl TerminalReporter {
    pub(super) fn new(tty: bool) -> Self {
        Self {
            tty,
            bar: None,
            total: 0,
            done: 0,
            passed: 0,
            resumed: None,
            round: None,
            running: Vec::new(),
            note: None,
            tally: crate::report::Tally::default(),
        }
    }

    /// The counts of every record the run reported.
    pub(super) fn tally(&self) -> &crate::report::Tally {
        &self.tally
    }

    /// Says `note` once the trials start.
    pub(super) fn noting(mut self, note: Option<String>) -> Self {
        self.note = note;
        self
    }

    /// For round `round` of a run in rounds.
    pub(super) fn in_round(mut self, round: u32) -> Self {
        self.round = Some(round);
        self
    }

    /// For a resumed run that had recorded `recorded` of its trials.
    pub(super) fn resuming(mut self, recorded: usize) -> Self {
        self.resumed = Some(recorded);
        self
    }

    /// The bar's message: the running pass count and the trials in flight with their time.
    fn status(&self) -> String {
        // The pass count is of the trials run now: the recorded ones are not read back.
        let mut text = format!(
            "passed {}/{}",
            self.passed,
            self.done - self.resumed.unwrap_or(0)
        );
        if !self.running.is_empty() {
            let names: Vec<String> = self
                .running
                .iter()
                .take(3)
                .map(|(name, at)| format!("{name} {}s", at.elapsed().as_secs()))
                .collect();
            let more = self.running.len().saturating_sub(names.len());
            text.push_str(&format!(" | running: {}", names.join(", ")));
            if more > 0 {
                text.push_str(&format!(" +{more}"));
            }
        }
        text
    }

    fn refresh(&self) {
        if let Some(bar) = &self.bar {
            bar.set_message(self.status());
        }
    }

    pub(super) fn finish(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }

    fn line(record: &TrialRecord) -> String {
        let verdict = match record.outcome {
            Outcome::Pass => "PASS ",
            Outcome::Fail => "FAIL ",
            Outcome::Invalid => "INVAL",
            Outcome::InfraError => "INFRA",
        };
        let mut line = format!(
            "{verdict} {} / {} #{} ({:.2}s)",
            record.task,
            record.agent,
            record.trial,
            record.duration_ms as f64 / 1000.0
        );
        if let Some(status) = record
            .status
            .filter(|s| *s != crate::agent::CodingStatus::Completed)
        {
            line.push_str(&format!(" agent {status}"));
            if let Some(error) = &record.error {
                line.push_str(&format!(" ({})", error.message));
            }
        }
        if let Some(reason) = record.infra_error.as_ref().or(record.reason.as_ref()) {
            line.push_str(&format!(": {reason}"));
        }
        line
    }
}

/// `my-agent (suite), noop (built in), fixer[...] (--agents ablation.yaml)`: each planned agent
/// and where it was defined.
pub(super) fn agent_sources(plan: &Plan) -> String {
    let file = plan
        .suite
        .agents_file
        .as_ref()
        .and_then(|(path, _)| path.file_name())
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    plan.agents
        .keys()
        .map(|name| match plan.suite.agent_source(name) {
            "--agents" => format!("{name} (--agents {file})"),
            source => format!("{name} ({source})"),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

impl RunObserver for TerminalReporter {
    fn started(&mut self, plan: &Plan, run_dir: &Path) {
        for (name, spec) in &plan.agents {
            if matches!(
                spec,
                crate::suite::AgentSpec::Noop | crate::suite::AgentSpec::Oracle
            ) {
                self.tally.claims_nothing(name);
            }
        }
        if let Some(note) = self.note.take() {
            eprintln!("{note}");
        }
        self.total = plan.trials.len();
        let count =
            |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
        match (self.resumed, self.round) {
            (Some(recorded), Some(round)) => {
                self.done = recorded;
                eprintln!(
                    "round {round}: {recorded} of {} recorded, running {} (-j {}) into {}",
                    count(self.total, "trial", "trials"),
                    self.total.saturating_sub(recorded),
                    plan.request.jobs,
                    run_dir.display()
                );
            }
            (Some(recorded), None) => {
                self.done = recorded;
                eprintln!(
                    "resuming: {recorded} of {} recorded, running {} (-j {}) into {}",
                    count(self.total, "trial", "trials"),
                    self.total.saturating_sub(recorded),
                    plan.request.jobs,
                    run_dir.display()
                );
            }
            (None, _) => {
                eprintln!(
                    "running {} ({} x {} x {}, -j {}) into {}",
                    count(self.total, "trial", "trials"),
                    count(plan.tasks.len(), "task", "tasks"),
                    count(plan.agents.len(), "agent", "agents"),
                    count(plan.request.trials as usize, "trial", "trials"),
                    plan.request.jobs,
                    run_dir.display()
                );
                eprintln!("agents: {}", agent_sources(plan));
            }
        }
        if self.tty {
            let bar = ProgressBar::new(self.total as u64).with_position(self.done as u64);
            bar.set_style(
                ProgressStyle::with_template("{bar:30} {pos}/{len} {elapsed} ETA {eta} {msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            bar.enable_steady_tick(Duration::from_millis(200));
            self.bar = Some(bar);
        }
    }

    fn trial_started(&mut self, name: &str) {
        self.running.push((name.to_owned(), Instant::now()));
        self.refresh();
    }

    fn recorded(&mut self, record: &TrialRecord) {
        self.tally.add(record);
    }

    fn trial_finished(&mut self, record: &TrialRecord) {
        self.tally.add(record);
        self.done += 1;
        self.passed += usize::from(record.outcome == Outcome::Pass);
        let name = format!("{} / {} #{}", record.task, record.agent, record.trial);
        self.running.retain(|(running, _)| *running != name);
        self.refresh();
        let line = Self::line(record);
        match &self.bar {
            Some(bar) => {
                bar.println(line);
                bar.inc(1);
            }
            None => eprintln!(
                "[{:>width$}/{}] {line}",
                self.done,
                self.total,
                width = self.total.to_string().len()
            ),
        }
    }

    fn interrupted(&mut self) {
        let message = "interrupt: no new trials start; running ones end and are recorded (press Ctrl-C again to kill everything)";
        match &self.bar {
            Some(bar) => bar.println(message),
            None => eprintln!("{message}"),
        }
    }
}
