//! `report --format html`: one self-contained static page for reading a run.
//!
//! CSS, JS and SVG are inline and a Content-Security-Policy forbids any fetch, so the page needs
//! no server or network. Charts and tables are static markup, readable with JavaScript off; the
//! script only adds the per-trial drill-down, from the JSON blob in `#deltabench-data`. Run text
//! is user data: it is escaped wherever it lands.

mod charts;
mod data;
mod heatmap;
mod tables;
mod text;

use std::fmt::Write as _;

use chrono::{DateTime, Utc};

use super::junit::task_position;
use super::tasks::task_order;
use super::{
    AgentSummary, Baseline, FALSE_CLAIMS_NOTE, ablations, capitalized, totals, totals_line,
};
use crate::store::{StoredRun, TrialRecord};
use charts::{cost_scatter, pass_rate_chart};
use data::Data;
use heatmap::heatmap;
use tables::{ablation_section, summary_table, trial_list};
use text::{code_spans, esc};

/// Kept as files of their own so that they read, diff and lint as CSS and JS.
const CSS: &str = include_str!("style.css");
const JS: &str = include_str!("script.js");

/// What the page shows beyond the run itself.
#[derive(Debug, Clone, Default)]
pub(crate) struct HtmlOptions<'a> {
    /// The comparison with an earlier run (`report --baseline`).
    pub baseline: Option<&'a Baseline>,
    /// Confidence of the ablation's intervals.
    pub confidence: f64,
    /// `--ablation` was asked for: say so when the run has no matrix.
    pub ablation: bool,
}

/// The whole page.
pub(crate) fn html(
    run: &StoredRun,
    summaries: &[AgentSummary],
    options: &HtmlOptions,
) -> Result<String, serde_json::Error> {
    let tasks = task_order(run);
    let trials = trial_order(run, summaries);
    let data = Data::new(run, summaries, &tasks, &trials);
    let blob = data.script_json()?;

    let names: Vec<&str> = summaries.iter().map(|s| s.agent.as_str()).collect();
    let mut out = String::with_capacity(blob.len() + 64 * 1024);
    out.push_str(&head(run, names.len(), tasks.len()));
    out.push_str(&banners(run));
    out.push_str("</header>\n<main>\n<div class=\"grid\">\n");
    out.push_str(&chart_panels(summaries, &data));
    out.push_str("</div>\n");
    let _ = write!(
        out,
        "<section class=\"panel\">\n<h2>Summary</h2>\n{}<p class=\"note\" id=\"totals\">{}.</p>\n\
         <p class=\"note\">{}.</p>\n</section>\n",
        summary_table(summaries),
        esc(&capitalized(&totals_line(&totals(summaries)))),
        code_spans(&esc(FALSE_CLAIMS_NOTE))
    );
    if let Some(baseline) = options.baseline {
        let _ = write!(
            out,
            "<section class=\"panel\" id=\"baseline\">\n<h2>Against the baseline</h2>\n\
             <p class=\"note\">Each agent's per-task flips and verdict against the earlier run \
             <code>{}</code>.</p>\n<pre class=\"compare\">{}</pre>\n</section>\n",
            esc(&baseline.run_dir),
            esc(baseline.text.trim_end())
        );
    }
    let ablations = ablations(run, options.confidence);
    if !ablations.is_empty() || options.ablation {
        out.push_str(&ablation_section(&ablations, options.confidence));
    }
    let _ = write!(
        out,
        "<section class=\"panel\">\n<h2>Tasks \u{d7} agents</h2>\n<p class=\"note\">Each cell \
         is the share of scored trials that passed. Select a cell for its trials.</p>\n{}\
         </section>\n",
        heatmap(run, &tasks, &names)
    );
    out.push_str(&preparation_section(run));
    out.push_str(
        "<section class=\"panel\" id=\"trial-detail\">\n<h2>Trial \
         details</h2>\n<p class=\"note\">Select a heat-map cell or a row of the trial list to \
         see the task's instruction and each trial's diff, verify log and events. (This needs \
         JavaScript; the data is embedded in this file.)</p>\n</section>\n",
    );
    let _ = write!(
        out,
        "<section class=\"panel\">\n<h2>All trials</h2>\n{}</section>\n</main>\n",
        trial_list(&trials)
    );
    let _ = write!(
        out,
        "<script type=\"application/json\" id=\"deltabench-data\">{blob}</script>\n\
         <script>\n{JS}</script>\n</body>\n</html>\n"
    );
    Ok(out)
}

/// The run's trials in the page's order: by task as the suite lists them, then by agent as the
/// summaries do, then by trial number.
fn trial_order<'a>(run: &'a StoredRun, summaries: &[AgentSummary]) -> Vec<&'a TrialRecord> {
    let mut trials: Vec<&TrialRecord> = run.trials.iter().collect();
    let agent_position = |agent: &str| summaries.iter().position(|s| s.agent == agent);
    trials.sort_by_key(|r| {
        (
            task_position(run, &r.task),
            r.task.as_str(),
            agent_position(&r.agent),
            r.trial,
        )
    });
    trials
}

/// The document's head, with its stylesheet and policy, and the header's title and meta line.
fn head(run: &StoredRun, agents: usize, tasks: usize) -> String {
    let when = run_date(&run.manifest.started_at);
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; \
         style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">\n\
         <title>deltabench: {suite}, {when}</title>\n<style>\n{CSS}</style>\n</head>\n<body>\n\
         <header>\n<h1>deltabench: {suite}</h1>\n<p class=\"meta\">{meta}</p>\n",
        suite = esc(&run.manifest.suite),
        when = esc(&when),
        meta = esc(&meta_line(run, &when, agents, tasks)),
    )
}

/// The header's warnings: an interrupted run, flaky tasks, tasks never validated.
fn banners(run: &StoredRun) -> String {
    let mut out = String::new();
    if run.manifest.interrupted {
        let _ = writeln!(
            out,
            "<p class=\"banner\">This run was interrupted: {} of {} planned trials were \
             recorded.</p>",
            run.trials.len(),
            run.manifest.planned_trials
        );
    }
    let flaky = super::flaky_tasks(run);
    if !flaky.is_empty() {
        let _ = writeln!(
            out,
            "<p class=\"banner\" id=\"flaky\">Flaky tasks (the lock's <code>validate --repeat</code>; \
             gates leave them out unless --include-flaky): {}</p>",
            esc(&super::flaky_list(&flaky))
        );
    }
    let unvalidated = super::unvalidated_tasks(run);
    if !unvalidated.is_empty() {
        let _ = writeln!(
            out,
            "<p class=\"banner\" id=\"unvalidated\">Tasks {}: {}</p>",
            esc(super::UNVALIDATED_NOTE),
            esc(&unvalidated.join(", "))
        );
    }
    out
}

/// The pass-rate panel and, when some agent reported a cost, the cost scatter's.
fn chart_panels(summaries: &[AgentSummary], data: &Data) -> String {
    let has_cost = data
        .agents
        .iter()
        .any(|a| a.summary.mean_cost_usd.is_some());
    let mut out = format!(
        "<section class=\"panel\">\n<h2>Pass rate per agent</h2>\n<p class=\"note\">Scored \
         trials only; whiskers are 95% intervals (Wilson for one trial per task, task-clustered for several).</p>\n{}{}</section>\n",
        pass_rate_chart(summaries),
        if has_cost {
            ""
        } else {
            "<p class=\"note\" id=\"no-cost\">No agent reported a cost, so there is no cost \
             chart.</p>\n"
        }
    );
    if has_cost {
        let (scatter, scatter_note) = cost_scatter(&data.agents);
        let _ = write!(
            out,
            "<section class=\"panel\">\n<h2>Cost vs pass rate</h2>\n<p class=\"note\">Mean cost \
             per trial over the trials that reported one.</p>\n{scatter}<p class=\"note\" \
             id=\"cost-note\">{}</p>\n</section>\n",
            esc(&scatter_note)
        );
    }
    out
}

/// What preparing each task cost beside its trials, when anything was prepared.
fn preparation_section(run: &StoredRun) -> String {
    let prepared = crate::report::preparation_lines(run, "");
    if prepared.is_empty() {
        return String::new();
    }
    let mut lines = prepared.trim().lines();
    let head = lines.next().unwrap_or_default().trim_end_matches(':');
    let items: String = lines.map(|l| format!("<li>{}</li>", esc(l))).collect();
    format!(
        "<section class=\"panel\" id=\"preparation\">\n<h2>Preparation</h2>\n<p class=\"note\">{}.</p>\n<ul>{items}</ul>\n</section>\n",
        esc(head)
    )
}

fn run_date(started_at: &str) -> String {
    DateTime::parse_from_rfc3339(started_at).map_or_else(
        |_| started_at.to_owned(),
        |t| {
            t.with_timezone(&Utc)
                .format("%Y-%m-%d %H:%M UTC")
                .to_string()
        },
    )
}

fn meta_line(run: &StoredRun, when: &str, agents: usize, tasks: usize) -> String {
    let m = &run.manifest;
    format!(
        "Run started {when} \u{b7} {} trials recorded of {} planned \u{b7} {agents} agents \
         \u{d7} {tasks} tasks \u{d7} {} trial(s) \u{b7} deltabench {} on {}",
        run.trials.len(),
        m.planned_trials,
        m.trials_per_task,
        m.deltabench_version,
        m.host
    )
}
