//! `run --dry-run`: the plan in words, and what it may take, with nothing run or written.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use crate::runner::Plan;
use crate::store::{self, TrialRecord};
use crate::workspace::ImageSource;

/// The plan of `run`: trials, agents and where each came from, isolation, the images a run
/// would build, and an estimate of time and cost from earlier runs of the suite under `reports`.
pub(super) fn describe(plan: &Plan, reports: &Path) -> String {
    let suite = &plan.suite;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "plan: {} trial(s) = {} task(s) x {} agent(s) x {} trial(s), -j {}",
        plan.trials.len(),
        plan.tasks.len(),
        plan.agents.len(),
        plan.request.trials,
        plan.request.jobs
    );
    let _ = writeln!(out, "suite: {} ({})", suite.name, suite.path.display());
    let _ = writeln!(out, "agents: {}", super::reporter::agent_sources(plan));
    let mut isolation: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    let mut images: BTreeMap<String, Vec<&str>> = BTreeMap::new();
    for &index in &plan.tasks {
        let task = &suite.tasks[index];
        let place = match &task.environment {
            Some(env) => {
                let image = match &env.image {
                    ImageSource::Image(name) => format!("{name} (pulled or present)"),
                    ImageSource::Dockerfile { path, .. } => {
                        format!("built from {}", path.display())
                    }
                };
                images.entry(image).or_default().push(&task.id);
                format!("{} in a container", task.isolation)
            }
            None => task.isolation.to_string(),
        };
        isolation.entry(place).or_default().push(&task.id);
    }
    for (place, tasks) in &isolation {
        let _ = writeln!(out, "isolation: {place}: {}", list(tasks));
    }
    if images.is_empty() {
        let _ = writeln!(out, "images: none (every task runs on this machine)");
    }
    for (image, tasks) in &images {
        let _ = writeln!(out, "image: {image}: {}", list(tasks));
    }
    let unvalidated = plan.unvalidated();
    let _ = writeln!(
        out,
        "lock: {} of {} task(s) validated{}",
        plan.tasks.len() - unvalidated.len(),
        plan.tasks.len(),
        if unvalidated.is_empty() {
            String::new()
        } else {
            format!(" (not: {})", list(&unvalidated))
        }
    );
    out.push_str(&estimate(plan, reports));
    out.push_str("nothing was run or written (--dry-run)\n");
    out
}

fn list(names: &[&str]) -> String {
    const SHOWN: usize = 8;
    let mut text = names
        .iter()
        .take(SHOWN)
        .copied()
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > SHOWN {
        let _ = write!(text, ", +{} more", names.len() - SHOWN);
    }
    text
}

/// Per (task, agent) the median duration and mean cost of the earlier runs' trials of this
/// suite; the estimate sums them over the plan and divides the time by -j.
fn estimate(plan: &Plan, reports: &Path) -> String {
    let mut seen: BTreeMap<(String, String), Vec<&TrialRecord>> = BTreeMap::new();
    let runs: Vec<store::StoredRun> = std::fs::read_dir(reports)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| store::read_run(&entry.path()).ok())
        .filter(|run| run.manifest.suite == plan.suite.name)
        .collect();
    for run in &runs {
        for record in &run.trials {
            if record.outcome != store::Outcome::InfraError {
                seen.entry((record.task.clone(), record.agent.clone()))
                    .or_default()
                    .push(record);
            }
        }
    }
    let (mut known, mut millis, mut cost, mut priced) = (0usize, 0u64, 0.0f64, 0usize);
    for spec in &plan.trials {
        let task = &plan.suite.tasks[spec.task].id;
        let Some(records) = seen.get(&(task.clone(), spec.agent.clone())) else {
            continue;
        };
        known += 1;
        let mut times: Vec<u64> = records.iter().map(|r| r.duration_ms).collect();
        times.sort_unstable();
        millis += times[times.len() / 2];
        let costs: Vec<f64> = records
            .iter()
            .filter_map(|r| r.usage.and_then(|u| u.cost_usd))
            .collect();
        if !costs.is_empty() {
            priced += 1;
            cost += costs.iter().sum::<f64>() / costs.len() as f64;
        }
    }
    if known == 0 {
        return format!(
            "estimate: no earlier run of suite '{}' under {} to estimate time or cost from\n",
            plan.suite.name,
            reports.display()
        );
    }
    let wall = millis / plan.request.jobs.max(1) as u64;
    let mut text = format!(
        "estimate: about {} of trial time at -j {} ({} of {} trial(s) seen in {} earlier run(s) under {}",
        humantime::format_duration(std::time::Duration::from_secs(wall.div_ceil(1000))),
        plan.request.jobs,
        known,
        plan.trials.len(),
        runs.len(),
        reports.display()
    );
    if priced > 0 {
        let _ = write!(
            text,
            "); model cost about ${cost:.2} for the {priced} priced"
        );
    } else {
        text.push_str("; no cost recorded");
    }
    text.push_str(")\n");
    text
}
