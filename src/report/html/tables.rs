//! The page's HTML tables: the summary, the ablation and the list of every trial.

use std::fmt::Write as _;

use super::text::{esc, name_cell, one_line};
use crate::report::ablation::{Ablation, interaction_line, level_rows, pareto_cells};
use crate::report::{AgentSummary, NO_ABLATION, percent, rows};
use crate::store::TrialRecord;

/// A why-note in the static trial list.
const MAX_NOTE_CHARS: usize = 120;

/// The summary table of the terminal report, as HTML (full agent names, false claims).
pub(super) fn summary_table(summaries: &[AgentSummary]) -> String {
    let mut out = String::from(
        "<table id=\"summary\">\n<thead><tr><th>agent</th><th>trials</th><th>passed</th>\
         <th>pass rate</th><th>95% CI</th><th>false claims</th><th>pass@k / pass^k</th>\
         <th>invalid</th><th>flagged</th><th>infra errors</th><th>tokens</th><th>mean cost</th>\
         <th>total cost</th><th>cost/solved</th><th>median time</th></tr>\
         </thead>\n<tbody>\n",
    );
    for row in rows(summaries) {
        let _ = writeln!(
            out,
            "<tr data-agent=\"{agent}\"><td class=\"name\">{name}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td><td class=\"false-claims\">{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            row.trials,
            row.passed,
            esc(&row.pass_rate),
            esc(&row.interval),
            esc(&row.false_claims),
            esc(&row.at_k),
            row.invalid,
            esc(&row.flagged),
            row.infra_errors,
            esc(&row.tokens),
            esc(&row.cost),
            esc(&row.total_cost),
            esc(&row.cost_per_solved),
            esc(&row.median),
            agent = esc(&row.agent),
            name = name_cell(&row.agent),
        );
    }
    out.push_str("</tbody>\n</table>\n");
    out
}

/// The `--ablation` tables of every matrix in the run.
pub(super) fn ablation_section(ablations: &[Ablation], confidence: f64) -> String {
    let mut out = String::from("<section class=\"panel\" id=\"ablation\">\n<h2>Ablation</h2>\n");
    if ablations.is_empty() {
        let _ = writeln!(out, "<p class=\"note\">{}.</p>", esc(NO_ABLATION));
    }
    for ablation in ablations {
        let _ = writeln!(
            out,
            "<h3>{}: {} combinations, {} trials</h3>\n<table class=\"ablation\" \
             data-base=\"{base}\">\n<thead><tr><th>factor</th><th>level</th><th>pass rate</th>\
             <th>{ci:.0}% CI</th><th>effect vs first (pts)</th><th>mean cost</th><th>time</th>\
             </tr></thead>\n<tbody>",
            esc(&ablation.base),
            ablation.combinations.len(),
            ablation.trials,
            base = esc(&ablation.base),
            ci = confidence * 100.0,
        );
        for [factor, level, rate, ci, effect, cost, time] in level_rows(ablation) {
            let _ = writeln!(
                out,
                "<tr><td>{}</td><td>{}</td><td>{rate}</td><td>{ci}</td><td>{effect}</td>\
                 <td>{cost}</td><td>{time}</td></tr>",
                esc(&factor),
                esc(&level)
            );
        }
        out.push_str("</tbody>\n</table>\n");
        if let Some(table) = &ablation.interaction {
            let _ = write!(
                out,
                "<h4>Interaction: pass rate by {} (rows) \u{d7} {} (columns)</h4>\n\
                 <table class=\"interaction\">\n<thead><tr><th></th>",
                esc(&table.rows_factor),
                esc(&table.columns_factor)
            );
            for column in &table.columns {
                let _ = write!(out, "<th>{}</th>", esc(column));
            }
            out.push_str("</tr></thead>\n<tbody>\n");
            for (row, cells) in table.rows.iter().zip(&table.cells) {
                let _ = write!(out, "<tr><th>{}</th>", esc(row));
                for cell in cells {
                    let _ = write!(out, "<td>{}</td>", percent(*cell));
                }
                out.push_str("</tr>\n");
            }
            out.push_str("</tbody>\n</table>\n");
            if let Some(line) = interaction_line(table) {
                let _ = writeln!(out, "<p class=\"note\">{}</p>", esc(&line));
            }
        }
        out.push_str(
            "<h4>Pareto front (pass rate higher, cost and time lower)</h4>\n<table \
             class=\"pareto\">\n<thead><tr><th>combination</th><th>pass rate</th>\
             <th>mean cost</th><th>time</th></tr></thead>\n<tbody>\n",
        );
        for p in &ablation.pareto {
            let [rate, cost, time] = pareto_cells(p);
            let _ = writeln!(
                out,
                "<tr><td class=\"name\">{}</td><td>{rate}</td><td>{cost}</td><td>{time}</td></tr>",
                name_cell(&p.agent)
            );
        }
        out.push_str("</tbody>\n</table>\n");
    }
    out.push_str("</section>\n");
    out
}

/// Every trial as a table row (useful without JS; with JS a row opens its drill-down).
pub(super) fn trial_list(trials: &[&TrialRecord]) -> String {
    let mut out = String::from(
        "<table id=\"trial-list\">\n<thead><tr><th>task</th><th>agent</th><th>#</th>\
         <th>outcome</th><th>agent status</th><th>verify</th><th>diff</th><th>time</th>\
         <th>cost</th><th>note</th></tr></thead>\n<tbody>\n",
    );
    for r in trials {
        let verify = match &r.verify {
            None => "\u{2013}".to_owned(),
            Some(v) if v.timed_out => "timed out".to_owned(),
            Some(v) => v
                .exit_code
                .map_or("no exit code".to_owned(), |c| format!("exit {c}")),
        };
        let diff = r.diff.map_or("\u{2013}".to_owned(), |d| {
            format!(
                "{} file(s) +{} \u{2212}{}",
                d.files, d.insertions, d.deletions
            )
        });
        let cost = r
            .usage
            .and_then(|u| u.cost_usd)
            .map_or(String::new(), |c| format!("${c:.4}"));
        let mut note = match (&r.infra_error, &r.invalid, &r.error) {
            (Some(why), _, _) | (None, Some(why), _) => why.clone(),
            (None, None, Some(error)) => error.to_string(),
            (None, None, None) => String::new(),
        };
        if !r.tampered.is_empty() {
            note = format!("tampered with {}; {note}", r.tampered.join(", "));
        }
        if !r.flags.is_empty() {
            note = format!("flagged: {}; {note}", r.flags.join(", "));
        }
        if let Some(mark) = crate::report::evidence_marks(r) {
            note = format!("{mark}; {note}");
        }
        let _ = writeln!(
            out,
            "<tr data-task=\"{task}\" data-agent=\"{agent}\" data-trial=\"{n}\"><td>{task}</td>\
             <td>{agent}</td><td>{n}</td><td><span class=\"badge {o}\">{outcome}</span></td>\
             <td>{status}</td><td>{verify}</td><td>{diff}</td><td>{secs:.2}s</td><td>{cost}</td>\
             <td class=\"why\">{note}</td></tr>",
            task = esc(&r.task),
            agent = esc(&r.agent),
            n = r.trial,
            o = r.outcome.as_str(),
            outcome = r.outcome.as_str().replace('_', " "),
            status = r.status.map_or("\u{2013}", |s| s.as_str()),
            secs = r.duration_ms as f64 / 1000.0,
            note = esc(&one_line(&note, MAX_NOTE_CHARS)),
        );
    }
    out.push_str("</tbody>\n</table>\n");
    out
}
