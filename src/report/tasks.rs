//! The per-task view: which tasks each agent passed, failing tasks first.

use indexmap::IndexMap;
use serde::Serialize;
use tabled::builder::Builder;
use tabled::settings::Style;

use crate::store::{Outcome, StoredRun};

/// One agent's trials of one task.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub(crate) struct TaskCell {
    pub passed: usize,
    /// Trials scored (pass, fail or invalid).
    pub scored: usize,
    /// Trials not scored.
    pub infra_errors: usize,
}

impl TaskCell {
    /// `3/5`, `1/1 +1 infra`, `2 infra` (nothing scored) or `-` (no trial).
    pub(crate) fn text(&self) -> String {
        let infra = self.infra_errors;
        match (self.scored, infra) {
            (0, 0) => "-".into(),
            (0, _) => format!("{infra} infra"),
            (scored, 0) => format!("{}/{scored}", self.passed),
            (scored, _) => format!("{}/{scored} +{infra} infra", self.passed),
        }
    }

    fn fraction(&self) -> Option<f64> {
        (self.scored > 0).then(|| self.passed as f64 / self.scored as f64)
    }
}

/// One task's row: a cell per agent, in the agents' order.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct TaskRow {
    pub task: String,
    pub agents: IndexMap<String, TaskCell>,
}

impl TaskRow {
    /// Sort key, lowest first: tasks where nothing could be scored, then by the mean pass
    /// fraction over the agents that have scored trials; tasks no agent ran come last.
    fn key(&self) -> f64 {
        let fractions: Vec<f64> = self
            .agents
            .values()
            .filter_map(TaskCell::fraction)
            .collect();
        if !fractions.is_empty() {
            fractions.iter().sum::<f64>() / fractions.len() as f64
        } else if self.agents.values().any(|c| c.infra_errors > 0) {
            -1.0
        } else {
            2.0
        }
    }
}

/// The manifest's tasks, then any task only the records name.
pub(super) fn task_order(run: &StoredRun) -> Vec<&str> {
    let mut tasks: Vec<&str> = run.manifest.tasks.iter().map(String::as_str).collect();
    for record in &run.trials {
        if !tasks.contains(&record.task.as_str()) {
            tasks.push(&record.task);
        }
    }
    tasks
}

/// A row per task of `run` for `agents`, failing tasks first (ties in the run's task order).
pub(crate) fn per_task(run: &StoredRun, agents: &[String]) -> Vec<TaskRow> {
    let mut rows: Vec<TaskRow> = task_order(run)
        .into_iter()
        .map(|task| TaskRow {
            task: task.to_owned(),
            agents: agents
                .iter()
                .map(|a| (a.clone(), TaskCell::default()))
                .collect(),
        })
        .collect();
    let index: IndexMap<&str, usize> = rows
        .iter()
        .enumerate()
        .map(|(i, row)| (row.task.as_str(), i))
        .collect();
    let mut cells: Vec<Vec<TaskCell>> = vec![vec![TaskCell::default(); agents.len()]; rows.len()];
    for record in &run.trials {
        let (Some(&row), Some(column)) = (
            index.get(record.task.as_str()),
            agents.iter().position(|a| *a == record.agent),
        ) else {
            continue;
        };
        let cell = &mut cells[row][column];
        match record.outcome {
            Outcome::InfraError => cell.infra_errors += 1,
            outcome => {
                cell.scored += 1;
                cell.passed += usize::from(outcome == Outcome::Pass);
            }
        }
    }
    for (row, cells) in rows.iter_mut().zip(cells) {
        for (slot, cell) in row.agents.values_mut().zip(cells) {
            *slot = cell;
        }
    }
    rows.sort_by(|a, b| a.key().total_cmp(&b.key()));
    rows
}

/// A matrix combination's name broken before its `[` and after each `,`, so a column of the
/// terminal table is as wide as its longest factor, not its whole name.
fn stacked(name: &str) -> String {
    if name.chars().count() <= 24 {
        return name.to_owned();
    }
    name.replacen('[', "\n[", 1).replace(',', ",\n")
}

/// The table of `rows` for the agents `columns` of each row, under `headers`.
fn builder(
    rows: &[TaskRow],
    headers: impl Iterator<Item = String>,
    columns: std::ops::Range<usize>,
) -> Builder {
    let mut builder = Builder::default();
    builder.push_record(std::iter::once("task".to_owned()).chain(headers));
    for row in rows {
        builder.push_record(
            std::iter::once(row.task.clone()).chain(
                row.agents
                    .values()
                    .skip(columns.start)
                    .take(columns.len())
                    .map(TaskCell::text),
            ),
        );
    }
    builder
}

/// What the per-task tables hold, said once above them.
pub(crate) const PER_TASK_NOTE: &str =
    "passed/scored trials per task and agent, failing tasks first (+N infra: trials not scored)";

/// Task names are shortened to this many characters in a terminal table too wide for them.
const TASK_NAME_LIMIT: usize = 40;

/// The per-task table for a terminal `width` wide: when the agents' columns do not fit side by
/// side, as many tables as it takes, each with the task column and the agents that fit.
pub(crate) fn per_task_table(rows: &[TaskRow], agents: &[String], width: usize) -> String {
    let table = |rows: &[TaskRow], columns: std::ops::Range<usize>| {
        let headers = agents[columns.clone()].iter().map(|a| stacked(a));
        let mut table = builder(rows, headers, columns).build();
        table.with(Style::rounded());
        table
    };
    let narrow: Vec<TaskRow>;
    let rows = if table(rows, 0..agents.len().min(1)).total_width() <= width {
        rows
    } else {
        narrow = rows
            .iter()
            .map(|row| TaskRow {
                task: super::terminal::shortened(&row.task, TASK_NAME_LIMIT),
                agents: row.agents.clone(),
            })
            .collect();
        &narrow
    };
    let mut tables = Vec::new();
    let mut from = 0;
    while from < agents.len() || tables.is_empty() {
        let mut to = (from + 1).min(agents.len());
        while to < agents.len() && table(rows, from..to + 1).total_width() <= width {
            to += 1;
        }
        tables.push(table(rows, from..to).to_string());
        from = to.max(from + 1);
    }
    tables.join("\n")
}

/// The per-task table in markdown.
pub(crate) fn per_task_markdown(rows: &[TaskRow], agents: &[String]) -> String {
    builder(rows, agents.iter().cloned(), 0..agents.len())
        .build()
        .with(Style::markdown())
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cell_text_says_what_was_scored() {
        let cell = |passed, scored, infra_errors| {
            TaskCell {
                passed,
                scored,
                infra_errors,
            }
            .text()
        };
        assert_eq!(cell(3, 5, 0), "3/5");
        assert_eq!(cell(1, 1, 1), "1/1 +1 infra");
        assert_eq!(cell(0, 0, 2), "2 infra");
        assert_eq!(cell(0, 0, 0), "-");
    }

    #[test]
    fn agents_that_do_not_fit_side_by_side_get_tables_of_their_own() {
        let agents: Vec<String> = (1..=6).map(|n| format!("agent-number-{n}")).collect();
        let rows = vec![TaskRow {
            task: "a-task-with-a-name-longer-than-forty-characters-in-all".into(),
            agents: agents
                .iter()
                .map(|a| (a.clone(), TaskCell::default()))
                .collect(),
        }];
        let text = per_task_table(&rows, &agents, 72);
        for line in text.lines() {
            assert!(line.chars().count() <= 72, "{line}\n{text}");
        }
        for agent in &agents {
            assert_eq!(text.matches(agent.as_str()).count(), 1, "{text}");
        }
        assert!(text.matches("╭").count() > 1, "{text}");
        assert!(text.contains("a-task-with-a-name-l…"), "{text}");
    }

    #[test]
    fn long_matrix_names_break_at_their_factors() {
        assert_eq!(stacked("alpha"), "alpha");
        assert_eq!(
            stacked("sed-fixer[env.CALC=on,env.TEXT=off]"),
            "sed-fixer\n[env.CALC=on,\nenv.TEXT=off]"
        );
    }
}
