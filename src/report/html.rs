//! `report --format html`: one self-contained static page for reading a run.
//!
//! No server and no network: CSS, JS and SVG are inline, and a Content-Security-Policy forbids
//! any fetch. The pass-rate bars, the task x agent heat map, the cost scatter and the trial list
//! are rendered here as static SVG/HTML, so the page is useful with JavaScript off. The per-trial
//! data (records, diff, verify.log tail, event timeline) is embedded once as JSON in
//! `#deltabench-data`; the inline script makes heat-map cells and list rows clickable and renders
//! the drill-down into `#trial-detail` from that blob.
//!
//! Everything from the run is user data: it is HTML-escaped in markup, and in the JSON blob `<`
//! is written `\u003c` (so no `</script` or `<!--` can end the script early) and `://` is written
//! `:\/\/` (so the file holds no URL-looking text at all).

use std::fmt::Write as _;

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;

use indexmap::IndexMap;

use super::ablation::{
    Ablation, ci_text, cost_text, effect_text, interaction_line, pct as ablation_pct, rate_text,
    time_text,
};
use super::junit::{LOG_TAIL_LINES, relative, task_position, trial_dir, verify_log_tail};
use super::tasks::task_order;
use super::{AgentSummary, Baseline, FALSE_CLAIMS_NOTE, ablations, rows};
use crate::store::{Outcome, StoredRun, TrialRecord};

/// A diff larger than this is cut: one huge generated file must not make the page unusable.
const MAX_DIFF_BYTES: usize = 200 * 1024;
/// Events kept per trial, half from the start and half from the end of the stream.
const MAX_EVENTS: usize = 300;
/// One event's summary in the timeline.
const MAX_EVENT_CHARS: usize = 200;
/// The agent's own closing text (display only).
const MAX_AGENT_TEXT_CHARS: usize = 4_000;
/// A why-note in the static trial list.
const MAX_NOTE_CHARS: usize = 120;
/// A task's instruction in the drill-down.
const MAX_INSTRUCTION_BYTES: usize = 64 * 1024;

/// What the page shows beyond the run itself.
#[derive(Debug, Clone, Default)]
pub struct HtmlOptions<'a> {
    /// The comparison with an earlier run (`report --baseline`).
    pub baseline: Option<&'a Baseline>,
    /// Confidence of the ablation's intervals.
    pub confidence: f64,
    /// `--ablation` was asked for: say so when the run has no matrix.
    pub ablation: bool,
}

/// The whole page.
pub fn html(
    run: &StoredRun,
    summaries: &[AgentSummary],
    options: &HtmlOptions,
) -> Result<String, serde_json::Error> {
    let tasks = task_order(run);
    let agents: Vec<AgentData> = summaries
        .iter()
        .map(|summary| AgentData {
            summary,
            mean_cost_usd: mean_cost(&run.trials, &summary.agent),
        })
        .collect();
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
    let data = Data {
        suite: &run.manifest.suite,
        started_at: &run.manifest.started_at,
        finished_at: run.manifest.finished_at.as_deref(),
        deltabench_version: &run.manifest.deltabench_version,
        host: &run.manifest.host,
        trials_per_task: run.manifest.trials_per_task,
        planned_trials: run.manifest.planned_trials,
        interrupted: run.manifest.interrupted,
        log_tail_lines: LOG_TAIL_LINES,
        tasks: tasks.clone(),
        instructions: tasks
            .iter()
            .map(|task| (*task, instruction(run, &trials, task)))
            .collect(),
        agents,
        trials: trials.iter().map(|r| trial_data(run, r)).collect(),
    };
    let blob = serde_json::to_string(&data)?
        .replace('<', "\\u003c")
        .replace("://", ":\\/\\/");

    let names: Vec<&str> = summaries.iter().map(|s| s.agent.as_str()).collect();
    let when = run_date(&run.manifest.started_at);
    let mut out = String::with_capacity(blob.len() + 64 * 1024);
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; \
         style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data:\">\n\
         <title>deltabench: {suite}, {when}</title>\n<style>{CSS}</style>\n</head>\n<body>\n\
         <header>\n<h1>deltabench: {suite}</h1>\n<p class=\"meta\">{meta}</p>\n",
        suite = esc(&run.manifest.suite),
        when = esc(&when),
        meta = esc(&meta_line(run, &when, names.len(), tasks.len())),
    );
    if run.manifest.interrupted {
        let _ = writeln!(
            out,
            "<p class=\"banner\">This run was interrupted: {} of {} planned trials were \
             recorded.</p>",
            run.trials.len(),
            run.manifest.planned_trials
        );
    }
    out.push_str("</header>\n<main>\n<div class=\"grid\">\n");
    let has_cost = data.agents.iter().any(|a| a.mean_cost_usd.is_some());
    let _ = write!(
        out,
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
    out.push_str("</div>\n");
    let _ = write!(
        out,
        "<section class=\"panel\">\n<h2>Summary</h2>\n{}<p class=\"note\">{}.</p>\n</section>\n",
        summary_table(summaries),
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
         <script>{JS}</script>\n</body>\n</html>\n"
    );
    Ok(out)
}

/// The JSON blob the script reads.
#[derive(Serialize)]
struct Data<'a> {
    suite: &'a str,
    started_at: &'a str,
    finished_at: Option<&'a str>,
    deltabench_version: &'a str,
    host: &'a str,
    trials_per_task: u32,
    planned_trials: usize,
    interrupted: bool,
    /// How many lines of verify.log each trial carries.
    log_tail_lines: usize,
    tasks: Vec<&'a str>,
    /// Each task's instruction, as a trial folder of the run recorded it.
    instructions: IndexMap<&'a str, Artifact>,
    agents: Vec<AgentData<'a>>,
    trials: Vec<TrialData<'a>>,
}

#[derive(Serialize)]
struct AgentData<'a> {
    #[serde(flatten)]
    summary: &'a AgentSummary,
    /// Mean over the trials that reported a cost; None when none did.
    mean_cost_usd: Option<f64>,
}

/// A record plus what its trial folder holds.
#[derive(Serialize)]
struct TrialData<'a> {
    #[serde(flatten)]
    record: &'a TrialRecord,
    diff_patch: Artifact,
    verify_log: Artifact,
    events: Vec<EventLine>,
    /// Why the timeline is missing or incomplete.
    events_note: Option<String>,
    /// The agent's own closing text from result.json: display only, never scored.
    agent_text: Option<String>,
}

/// A file's (possibly cut) text, and a note when it is cut, missing or unreadable.
#[derive(Serialize)]
struct Artifact {
    text: Option<String>,
    note: Option<String>,
}

#[derive(Serialize)]
struct EventLine {
    #[serde(rename = "type")]
    kind: String,
    summary: String,
}

/// The instruction the task's agents were given: `instruction.md` of the first trial folder
/// (in plan order) that holds one. Only `command` agents get that file; for the others the run
/// directory does not record the instruction.
fn instruction(run: &StoredRun, trials: &[&TrialRecord], task: &str) -> Artifact {
    for record in trials.iter().filter(|r| r.task == task) {
        let path = trial_dir(run, record).join("instruction.md");
        let Ok(bytes) = std::fs::read(&path) else {
            continue;
        };
        let cut = bytes.len() > MAX_INSTRUCTION_BYTES;
        let text = String::from_utf8_lossy(&bytes[..bytes.len().min(MAX_INSTRUCTION_BYTES)]);
        let source = relative(run, &path);
        return Artifact {
            text: Some(text.into_owned()),
            note: Some(if cut {
                format!(
                    "From {source}; the first 64 KB of {} KB are shown.",
                    bytes.len().div_ceil(1024)
                )
            } else {
                format!("From {source}.")
            }),
        };
    }
    Artifact {
        text: None,
        note: Some(
            "The run directory does not record this task's instruction: only command agents \
             keep it, as instruction.md in their trial folders."
                .into(),
        ),
    }
}

fn mean_cost(records: &[TrialRecord], agent: &str) -> Option<f64> {
    let costs: Vec<f64> = records
        .iter()
        .filter(|r| r.agent == agent)
        .filter_map(|r| r.usage.and_then(|u| u.cost_usd))
        .collect();
    (!costs.is_empty()).then(|| costs.iter().sum::<f64>() / costs.len() as f64)
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

fn trial_data<'a>(run: &StoredRun, record: &'a TrialRecord) -> TrialData<'a> {
    let dir = trial_dir(run, record);
    let (events, events_note) = events(run, &dir.join("events.jsonl"));
    let verify_log = match verify_log_tail(run, record) {
        Ok(text) => Artifact {
            text: Some(text),
            note: None,
        },
        Err(why) => Artifact {
            text: None,
            note: Some(why),
        },
    };
    TrialData {
        record,
        diff_patch: diff_patch(run, &dir.join("diff.patch")),
        verify_log,
        events,
        events_note,
        agent_text: agent_text(&dir.join("result.json")),
    }
}

fn diff_patch(run: &StoredRun, path: &std::path::Path) -> Artifact {
    match std::fs::read(path) {
        Ok(bytes) if bytes.len() > MAX_DIFF_BYTES => Artifact {
            text: Some(String::from_utf8_lossy(&bytes[..MAX_DIFF_BYTES]).into_owned()),
            note: Some(format!(
                "Truncated: the first 200 KB of {} KB are shown; the whole patch is {}.",
                bytes.len().div_ceil(1024),
                relative(run, path)
            )),
        },
        Ok(bytes) => Artifact {
            text: Some(String::from_utf8_lossy(&bytes).into_owned()),
            note: None,
        },
        Err(e) => Artifact {
            text: None,
            note: Some(missing(run, path, &e)),
        },
    }
}

fn missing(run: &StoredRun, path: &std::path::Path, e: &std::io::Error) -> String {
    if e.kind() == std::io::ErrorKind::NotFound {
        format!("{} is missing.", relative(run, path))
    } else {
        format!("Cannot read {}: {e}", relative(run, path))
    }
}

/// The event timeline: one (type, short summary) per line of events.jsonl.
fn events(run: &StoredRun, path: &std::path::Path) -> (Vec<EventLine>, Option<String>) {
    let text = match std::fs::read(path) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(e) => return (Vec::new(), Some(missing(run, path, &e))),
    };
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let line = |raw: &str| match serde_json::from_str::<Value>(raw) {
        Ok(value) => event_line(&value),
        Err(_) => EventLine {
            kind: "unparsed".into(),
            summary: one_line(raw, MAX_EVENT_CHARS),
        },
    };
    if lines.len() <= MAX_EVENTS {
        return (lines.into_iter().map(line).collect(), None);
    }
    // Keep both ends: the start shows what the agent tried, the end how it stopped.
    let half = MAX_EVENTS / 2;
    let hidden = lines.len() - MAX_EVENTS;
    let mut kept: Vec<EventLine> = lines[..half].iter().map(|l| line(l)).collect();
    kept.push(EventLine {
        kind: "\u{2026}".into(),
        summary: format!("{hidden} events not shown"),
    });
    kept.extend(lines[lines.len() - half..].iter().map(|l| line(l)));
    (
        kept,
        Some(format!(
            "{} events; the first and last {half} are shown.",
            lines.len()
        )),
    )
}

/// One event in a few words, by its `type` (see `StreamEvent`); unknown shapes are shown raw.
fn event_line(value: &Value) -> EventLine {
    let kind = value
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("unknown")
        .to_owned();
    let text = |key: &str| value.get(key).and_then(Value::as_str).unwrap_or("");
    let summary = match kind.as_str() {
        "system" => format!("{}: {}", text("subtype"), text("message")),
        "assistant" | "thinking" => text("text").to_owned(),
        "tool_call" => format!("{}({})", text("name"), compact(value.get("args"))),
        "tool_result" => {
            let failed = value.get("is_error").and_then(Value::as_bool) == Some(true);
            format!(
                "{}{} {}",
                text("name"),
                if failed { " failed:" } else { ":" },
                compact(value.get("result"))
            )
        }
        "usage" => {
            let usage = value.get("usage").unwrap_or(&Value::Null);
            let count = |key: &str| usage.get(key).and_then(Value::as_u64).unwrap_or(0);
            let mut summary = format!(
                "{} input, {} output tokens",
                count("input_tokens"),
                count("output_tokens")
            );
            if let Some(cost) = usage.get("cost_usd").and_then(Value::as_f64) {
                let _ = write!(summary, ", ${cost:.4}");
            }
            summary
        }
        "result" => match value.get("text").and_then(Value::as_str) {
            Some(said) => format!("{}: {said}", text("status")),
            None => text("status").to_owned(),
        },
        _ => compact(Some(value)),
    };
    EventLine {
        kind,
        summary: one_line(&summary, MAX_EVENT_CHARS),
    }
}

/// A JSON value as short text: strings as they are, anything else as compact JSON.
fn compact(value: Option<&Value>) -> String {
    match value {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

/// `result.output.text` of result.json, cut to a readable size.
fn agent_text(path: &std::path::Path) -> Option<String> {
    let value: Value = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
    let text = value.pointer("/result/output/text")?.as_str()?.trim();
    (!text.is_empty()).then(|| cut(text, MAX_AGENT_TEXT_CHARS))
}

/// At most `max` characters, with an ellipsis when cut.
fn cut(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((end, _)) => format!("{}\u{2026}", &text[..end]),
        None => text.to_owned(),
    }
}

/// Whitespace runs (newlines too) as one space, then `cut`.
fn one_line(text: &str, max: usize) -> String {
    cut(&text.split_whitespace().collect::<Vec<_>>().join(" "), max)
}

/// HTML-escapes text for element content and quoted attributes; `://` is broken up so no
/// user-supplied URL reads as a link (the page must not contain any).
fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out.replace("://", ":&#47;&#47;")
}

/// Escaped text whose `backticked` words become `<code>` elements.
fn code_spans(escaped: &str) -> String {
    let mut out = String::new();
    for (i, part) in escaped.split('`').enumerate() {
        if i % 2 == 1 {
            let _ = write!(out, "<code>{part}</code>");
        } else {
            out.push_str(part);
        }
    }
    out
}

/// An agent name for an HTML table cell: escaped, and breakable after a matrix name's `[` and
/// each `,` (the browser would otherwise break it mid-word, or not at all).
fn name_cell(name: &str) -> String {
    esc(name).replace('[', "[<wbr>").replace(',', ",<wbr>")
}

/// Pixels a label of `text` needs at the charts' 12px font, roughly.
fn label_width<'a>(texts: impl Iterator<Item = &'a str>, min: f64, max: f64) -> f64 {
    let longest = texts.map(|t| t.chars().count()).max().unwrap_or(0);
    (longest as f64 * 7.0 + 16.0).clamp(min, max)
}

/// A label that fits `width` pixels, cut with an ellipsis.
fn fit(text: &str, width: f64) -> String {
    cut(text, ((width - 16.0) / 7.0).max(3.0) as usize)
}

fn pct(value: f64) -> String {
    format!("{:.1}%", value * 100.0)
}

const BAR: &str = "#3b78b8";
const INK: &str = "#1f2933";
const MUTED: &str = "#52606d";
const GRID: &str = "#d9e2ec";
/// Degrees the heat map's column names rise when they are too long to lie flat.
const SLANT: f64 = 35.0;

/// Horizontal bars of the pass rate per agent, each with its 95% interval as a whisker.
fn pass_rate_chart(summaries: &[AgentSummary]) -> String {
    let (plot_w, value_w, top, axis_h) = (300.0, 150.0, 8.0, 24.0);
    // Names too long for a label column (matrix combinations) go whole above their bar.
    let needed = label_width(summaries.iter().map(|s| s.agent.as_str()), 64.0, f64::MAX);
    let stacked = needed > 200.0;
    let (label_w, row_h, bar_y) = if stacked {
        (12.0, 54.0, 36.0)
    } else {
        (needed, 36.0, 18.0)
    };
    let width = (label_w + plot_w + value_w).max(if stacked { needed + 12.0 } else { 0.0 });
    let rows_h = row_h * summaries.len() as f64;
    let height = top + rows_h + axis_h;
    let x = |v: f64| label_w + v * plot_w;
    let mut svg = String::new();
    let _ = write!(
        svg,
        "<svg id=\"pass-rate-chart\" viewBox=\"0 0 {width:.0} {height:.0}\" width=\"{width:.0}\" \
         height=\"{height:.0}\" role=\"img\" aria-labelledby=\"pass-rate-title\">\n\
         <title id=\"pass-rate-title\">Pass rate per agent with 95% intervals</title>\n"
    );
    for tick in [0.0, 0.25, 0.5, 0.75, 1.0] {
        let _ = writeln!(
            svg,
            "<line x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{top}\" y2=\"{bottom:.1}\" stroke=\"{GRID}\"/>\
             <text x=\"{x:.1}\" y=\"{label_y:.1}\" text-anchor=\"middle\" class=\"tick\">{percent:.0}%</text>",
            percent = tick * 100.0,
            x = x(tick),
            bottom = top + rows_h,
            label_y = top + rows_h + 16.0,
        );
    }
    for (i, s) in summaries.iter().enumerate() {
        let row_top = top + row_h * i as f64;
        let cy = row_top + bar_y;
        let label = if stacked {
            format!(
                "<text class=\"agent-label\" x=\"{label_w:.1}\" y=\"{:.1}\" dy=\"0.35em\">{}</text>",
                row_top + 12.0,
                esc(&s.agent)
            )
        } else {
            format!(
                "<text class=\"agent-label\" x=\"{:.1}\" y=\"{cy:.1}\" dy=\"0.35em\" \
                 text-anchor=\"end\">{}</text>",
                label_w - 8.0,
                esc(&s.agent)
            )
        };
        let _ = write!(
            svg,
            "<g class=\"agent-row\" data-agent=\"{agent}\">\n{label}\n<rect x=\"{x0:.1}\" \
             y=\"{ty:.1}\" width=\"{plot_w}\" height=\"16\" rx=\"3\" fill=\"#eef2f7\"/>\n",
            agent = esc(&s.agent),
            x0 = x(0.0),
            ty = cy - 8.0,
        );
        let value_x = label_w + plot_w + 10.0;
        match (s.pass_rate, s.interval) {
            (Some(rate), Some((lo, hi))) => {
                let infra = if s.infra_errors > 0 {
                    format!(" \u{b7} {} infra", s.infra_errors)
                } else {
                    String::new()
                };
                let _ = write!(
                    svg,
                    "<rect class=\"bar\" data-agent=\"{agent}\" x=\"{x0:.1}\" y=\"{ty:.1}\" \
                     width=\"{w:.1}\" height=\"16\" rx=\"3\" fill=\"{BAR}\"><title>{agent}: {passed} \
                     of {scored} scored trials passed ({rate}); 95% CI {lo}\u{2013}{hi}</title>\
                     </rect>\n<g class=\"whisker\" stroke=\"{INK}\" stroke-width=\"1.5\">\
                     <line x1=\"{xl:.1}\" x2=\"{xh:.1}\" y1=\"{cy:.1}\" y2=\"{cy:.1}\"/>\
                     <line x1=\"{xl:.1}\" x2=\"{xl:.1}\" y1=\"{c0:.1}\" y2=\"{c1:.1}\"/>\
                     <line x1=\"{xh:.1}\" x2=\"{xh:.1}\" y1=\"{c0:.1}\" y2=\"{c1:.1}\"/></g>\n\
                     <text x=\"{value_x:.1}\" y=\"{cy:.1}\" dy=\"-0.15em\" class=\"value\">{rate} \
                     ({passed}/{scored}){infra}</text>\n<text x=\"{value_x:.1}\" y=\"{cy:.1}\" \
                     dy=\"1.05em\" class=\"sub\">95% CI {lo}\u{2013}{hi}</text>\n",
                    agent = esc(&s.agent),
                    x0 = x(0.0),
                    ty = cy - 8.0,
                    w = rate * plot_w,
                    passed = s.passed,
                    scored = s.scored,
                    rate = pct(rate),
                    lo = pct(lo),
                    hi = pct(hi),
                    xl = x(lo),
                    xh = x(hi),
                    c0 = cy - 6.0,
                    c1 = cy + 6.0,
                );
            }
            _ => {
                let _ = writeln!(
                    svg,
                    "<text x=\"{value_x:.1}\" y=\"{cy:.1}\" dy=\"0.35em\" class=\"sub\">no scored \
                     trials ({} infra)</text>",
                    s.infra_errors
                );
            }
        }
        svg.push_str("</g>\n");
    }
    svg.push_str("</svg>\n");
    svg
}

/// The trials of one (task, agent) cell: all of them, the scored ones, the passed ones.
#[derive(Default)]
struct Cell {
    trials: usize,
    scored: usize,
    passed: usize,
}

fn cell(run: &StoredRun, task: &str, agent: &str) -> Cell {
    let mut cell = Cell::default();
    for r in run
        .trials
        .iter()
        .filter(|r| r.task == task && r.agent == agent)
    {
        cell.trials += 1;
        match r.outcome {
            Outcome::Pass => {
                cell.scored += 1;
                cell.passed += 1;
            }
            Outcome::Fail | Outcome::Invalid => cell.scored += 1,
            Outcome::InfraError => {}
        }
    }
    cell
}

/// A diverging red-grey-blue scale (ColorBrewer RdBu, readable with red-green colour blindness);
/// dark text stays readable on every step.
fn heat_colour(fraction: f64) -> String {
    const LOW: [f64; 3] = [214.0, 96.0, 77.0];
    const MID: [f64; 3] = [247.0, 247.0, 247.0];
    const HIGH: [f64; 3] = [67.0, 147.0, 195.0];
    let (from, to, t) = if fraction < 0.5 {
        (LOW, MID, fraction * 2.0)
    } else {
        (MID, HIGH, fraction * 2.0 - 1.0)
    };
    let mix = |i: usize| (from[i] + (to[i] - from[i]) * t).round() as u8;
    format!("#{:02x}{:02x}{:02x}", mix(0), mix(1), mix(2))
}

/// The task x agent grid; a corner triangle marks cells with infra errors, hatching cells
/// where nothing could be scored.
fn heatmap(run: &StoredRun, tasks: &[&str], agents: &[&str]) -> String {
    let label_w = label_width(tasks.iter().copied(), 80.0, 320.0);
    // Column names that do not fit across a column (matrix combinations) are written whole,
    // slanted up to the right.
    let needed = label_width(agents.iter().copied(), 72.0, f64::MAX);
    let slanted = needed > 150.0;
    let col_w = if slanted { 84.0 } else { needed };
    // Bold capitals run wider than the 7px a character `label_width` assumes.
    let longest = agents.iter().map(|a| a.chars().count()).max().unwrap_or(0) as f64 * 8.0;
    let (cos, sin) = (SLANT.to_radians().cos(), SLANT.to_radians().sin());
    let (cell_h, legend_h) = (30.0, 44.0);
    let header_h = if slanted { longest * sin + 20.0 } else { 28.0 };
    // Wide enough for the grid, the slanted names that overhang it, and the legend under it.
    let overhang = if slanted {
        (longest * cos - col_w / 2.0).max(0.0)
    } else {
        0.0
    };
    let width = (label_w + col_w * agents.len() as f64 + 8.0 + overhang).max(label_w + 400.0);
    let grid_h = cell_h * tasks.len() as f64;
    let height = header_h + grid_h + legend_h;
    let mut svg = String::new();
    let _ = write!(
        svg,
        "<svg id=\"heatmap\" viewBox=\"0 0 {width:.0} {height:.0}\" width=\"{width:.0}\" \
         height=\"{height:.0}\" role=\"group\" aria-labelledby=\"heatmap-title\">\n\
         <title id=\"heatmap-title\">Pass fraction per task and agent</title>\n<defs>\
         <pattern id=\"hatch\" width=\"6\" height=\"6\" patternUnits=\"userSpaceOnUse\" \
         patternTransform=\"rotate(45)\"><line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" \
         stroke=\"#9aa5b1\" stroke-width=\"2\"/></pattern>\
         <linearGradient id=\"heat-scale\"><stop offset=\"0\" stop-color=\"{}\"/>\
         <stop offset=\"0.5\" stop-color=\"{}\"/><stop offset=\"1\" stop-color=\"{}\"/>\
         </linearGradient></defs>\n",
        heat_colour(0.0),
        heat_colour(0.5),
        heat_colour(1.0)
    );
    for (j, agent) in agents.iter().enumerate() {
        let (x, y) = (label_w + col_w * (j as f64 + 0.5), header_h - 10.0);
        if slanted {
            let _ = writeln!(
                svg,
                "<text x=\"{x:.1}\" y=\"{y:.1}\" transform=\"rotate(-{SLANT} {x:.1} {y:.1})\" \
                 class=\"col\">{}</text>",
                esc(agent)
            );
        } else {
            let _ = writeln!(
                svg,
                "<text x=\"{x:.1}\" y=\"{y:.1}\" text-anchor=\"middle\" class=\"col\">{}</text>",
                esc(agent)
            );
        }
    }
    for (i, task) in tasks.iter().enumerate() {
        let y = header_h + cell_h * i as f64;
        let _ = writeln!(
            svg,
            "<text x=\"{:.1}\" y=\"{:.1}\" dy=\"0.35em\" text-anchor=\"end\">{}</text>",
            label_w - 8.0,
            y + cell_h / 2.0,
            esc(&fit(task, label_w))
        );
        for (j, agent) in agents.iter().enumerate() {
            let x = label_w + col_w * j as f64;
            let c = cell(run, task, agent);
            let infra = c.trials - c.scored;
            let (fill, label) = if c.scored > 0 {
                (
                    heat_colour(c.passed as f64 / c.scored as f64),
                    format!("{}/{}", c.passed, c.scored),
                )
            } else if c.trials > 0 {
                ("#e4e7eb".to_owned(), "infra".to_owned())
            } else {
                ("#ffffff".to_owned(), "\u{2013}".to_owned())
            };
            let mut title = format!(
                "{task} / {agent}: {} of {} scored trials passed",
                c.passed, c.scored
            );
            if infra > 0 {
                let _ = write!(title, "; {infra} infra error(s), not scored");
            }
            let _ = write!(
                svg,
                "<g class=\"cell\" data-task=\"{t}\" data-agent=\"{a}\" data-passed=\"{p}\" \
                 data-scored=\"{s}\" data-infra=\"{infra}\"><title>{title}</title>\
                 <rect class=\"fill\" x=\"{x1:.1}\" y=\"{y1:.1}\" width=\"{w:.1}\" \
                 height=\"{h:.1}\" rx=\"3\" fill=\"{fill}\" stroke=\"{GRID}\"/>",
                t = esc(task),
                a = esc(agent),
                p = c.passed,
                s = c.scored,
                title = esc(&title),
                x1 = x + 1.0,
                y1 = y + 1.0,
                w = col_w - 2.0,
                h = cell_h - 2.0,
            );
            if c.scored == 0 && c.trials > 0 {
                let _ = write!(
                    svg,
                    "<rect x=\"{:.1}\" y=\"{:.1}\" width=\"{:.1}\" height=\"{:.1}\" rx=\"3\" \
                     fill=\"url(#hatch)\"/>",
                    x + 1.0,
                    y + 1.0,
                    col_w - 2.0,
                    cell_h - 2.0
                );
            }
            if infra > 0 {
                let _ = write!(
                    svg,
                    "<path class=\"infra-mark\" d=\"M{:.1} {:.1}h11v11z\" fill=\"{INK}\"/>",
                    x + col_w - 12.0,
                    y + 1.0
                );
            }
            let _ = writeln!(
                svg,
                "<text x=\"{:.1}\" y=\"{:.1}\" dy=\"0.35em\" text-anchor=\"middle\">{label}</text>\
                 </g>",
                x + col_w / 2.0,
                y + cell_h / 2.0
            );
        }
    }
    let ly = header_h + grid_h + 16.0;
    let lx = label_w;
    let _ = writeln!(
        svg,
        "<g class=\"legend\"><text x=\"{l0:.1}\" y=\"{ty:.1}\" text-anchor=\"end\" \
         class=\"sub\">0%</text><rect x=\"{lx:.1}\" y=\"{ly:.1}\" width=\"120\" height=\"10\" \
         fill=\"url(#heat-scale)\" stroke=\"{GRID}\"/><text x=\"{l1:.1}\" y=\"{ty:.1}\" \
         class=\"sub\">100% passed</text><path d=\"M{m0:.1} {ly:.1}h11v11z\" fill=\"{INK}\"/>\
         <text x=\"{m1:.1}\" y=\"{ty:.1}\" class=\"sub\">infra errors (not scored)</text></g>",
        l0 = lx - 4.0,
        l1 = lx + 124.0,
        ty = ly + 9.0,
        m0 = lx + 210.0,
        m1 = lx + 226.0,
    );
    svg.push_str("</svg>\n");
    svg
}

/// The cost axis: `(steps, step)`, at most four "nice" steps (1, 2 or 5 times a power of ten)
/// that reach `max`; a quarter-dollar scale when nothing reported a cost.
fn cost_axis(max: f64) -> (u32, f64) {
    if max <= 0.0 || !max.is_finite() {
        return (4, 0.25);
    }
    let rough = max / 4.0;
    let scale = 10f64.powf(rough.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * scale)
        .find(|&step| step >= rough * (1.0 - 1e-9))
        .unwrap_or(10.0 * scale);
    let steps = (max / step - 1e-9).ceil().max(1.0) as u32;
    (steps, step)
}

/// `$` and as many decimals as `step` needs.
fn dollars(value: f64, step: f64) -> String {
    let decimals = (0..6)
        .find(|&d| {
            let scaled = step * 10f64.powi(d);
            (scaled - scaled.round()).abs() < 1e-6
        })
        .unwrap_or(6) as usize;
    format!("${value:.decimals$}")
}

/// Mean cost per trial against pass rate, with the pass rate's interval as a vertical whisker.
/// Agents that reported no cost sit at $0 as hollow points; the returned note names them.
fn cost_scatter(agents: &[AgentData]) -> (String, String) {
    let (width, height) = (480.0, 300.0);
    let (left, right, top, bottom) = (64.0, 110.0, 14.0, 46.0);
    let (plot_w, plot_h) = (width - left - right, height - top - bottom);
    let max_cost = agents
        .iter()
        .filter_map(|a| a.mean_cost_usd)
        .fold(0.0, f64::max);
    let (steps, step) = cost_axis(max_cost);
    let x_max = step * f64::from(steps);
    let x = |v: f64| left + v / x_max * plot_w;
    let y = |v: f64| top + (1.0 - v) * plot_h;
    let mut svg = String::new();
    let _ = write!(
        svg,
        "<svg id=\"cost-scatter\" viewBox=\"0 0 {width} {height}\" width=\"{width}\" \
         height=\"{height}\" role=\"img\" aria-labelledby=\"cost-title\">\n<title \
         id=\"cost-title\">Mean cost per trial against pass rate</title>\n"
    );
    for i in 0..=steps {
        let v = step * f64::from(i);
        let _ = writeln!(
            svg,
            "<line x1=\"{px:.1}\" x2=\"{px:.1}\" y1=\"{top}\" y2=\"{b:.1}\" stroke=\"{GRID}\"/>\
             <text x=\"{px:.1}\" y=\"{ty:.1}\" text-anchor=\"middle\" class=\"tick\">{}</text>",
            dollars(v, step),
            px = x(v),
            b = top + plot_h,
            ty = top + plot_h + 16.0,
        );
    }
    for i in 0..=4 {
        let r = f64::from(i) / 4.0;
        let _ = writeln!(
            svg,
            "<line x1=\"{left}\" x2=\"{r1:.1}\" y1=\"{py:.1}\" y2=\"{py:.1}\" stroke=\"{GRID}\"/>\
             <text x=\"{tx:.1}\" y=\"{py:.1}\" dy=\"0.35em\" text-anchor=\"end\" \
             class=\"tick\">{:.0}%</text>",
            r * 100.0,
            r1 = left + plot_w,
            py = y(r),
            tx = left - 6.0,
        );
    }
    let _ = writeln!(
        svg,
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" class=\"sub\">mean cost per trial \
         (USD)</text><text transform=\"translate(14 {:.1}) rotate(-90)\" text-anchor=\"middle\" \
         class=\"sub\">pass rate</text>",
        left + plot_w / 2.0,
        height - 8.0,
        top + plot_h / 2.0
    );
    // Points drawn lowest first so a label that would collide moves down past the previous one.
    let mut points: Vec<(usize, &AgentData, f64, f64)> = agents
        .iter()
        .enumerate()
        .filter_map(|(i, a)| {
            let rate = a.summary.pass_rate?;
            Some((i + 1, a, x(a.mean_cost_usd.unwrap_or(0.0)), y(rate)))
        })
        .collect();
    // A name that does not fit beside its point (matrix combinations) would be cut: number the
    // points instead, and name them in a key under the chart.
    let label_w = right + 20.0;
    let numbered = points
        .iter()
        .any(|(_, a, _, _)| fit(&a.summary.agent, label_w) != a.summary.agent);
    points.sort_by(|a, b| a.3.total_cmp(&b.3));
    let mut placed: Vec<(f64, f64)> = Vec::new();
    for (number, agent, px, py) in &points {
        let s = agent.summary;
        if let Some((lo, hi)) = s.interval {
            let _ = write!(
                svg,
                "<line class=\"whisker\" x1=\"{px:.1}\" x2=\"{px:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" \
                 stroke=\"{MUTED}\" stroke-width=\"1.2\"/>",
                y(lo),
                y(hi)
            );
        }
        let (fill, cost) = match agent.mean_cost_usd {
            Some(cost) => (BAR, format!("${cost:.4} per trial")),
            None => ("#ffffff", "no cost reported".to_owned()),
        };
        let mut label_y = *py;
        while placed
            .iter()
            .any(|(lx, ly)| (lx - px).abs() < 90.0 && (ly - label_y).abs() < 13.0)
        {
            label_y += 13.0;
        }
        placed.push((*px, label_y));
        let _ = writeln!(
            svg,
            "<circle class=\"point\" data-agent=\"{a}\" cx=\"{px:.1}\" cy=\"{py:.1}\" r=\"5\" \
             fill=\"{fill}\" stroke=\"{BAR}\" stroke-width=\"2\"><title>{a}: {rate}, {cost}\
             </title></circle><text x=\"{lx:.1}\" y=\"{label_y:.1}\" dy=\"0.35em\">{label}</text>",
            a = esc(&s.agent),
            rate = pct(s.pass_rate.unwrap_or(0.0)),
            cost = esc(&cost),
            lx = px + 9.0,
            label = if numbered {
                number.to_string()
            } else {
                esc(&s.agent)
            },
        );
    }
    svg.push_str("</svg>\n");
    if numbered {
        points.sort_by_key(|p| p.0);
        svg.push_str("<ol class=\"point-key\">\n");
        for (number, agent, _, _) in &points {
            let _ = writeln!(
                svg,
                "<li value=\"{number}\" data-agent=\"{a}\">{a}</li>",
                a = esc(&agent.summary.agent)
            );
        }
        svg.push_str("</ol>\n");
    }

    let no_cost: Vec<&str> = agents
        .iter()
        .filter(|a| a.mean_cost_usd.is_none())
        .map(|a| a.summary.agent.as_str())
        .collect();
    let unscored: Vec<&str> = agents
        .iter()
        .filter(|a| a.summary.pass_rate.is_none())
        .map(|a| a.summary.agent.as_str())
        .collect();
    let mut note = String::new();
    if !no_cost.is_empty() {
        let _ = write!(
            note,
            "Hollow points: no cost reported, plotted at $0 ({}).",
            no_cost.join(", ")
        );
    }
    if !unscored.is_empty() {
        let _ = write!(
            note,
            " Not plotted, no scored trials: {}.",
            unscored.join(", ")
        );
    }
    (svg, note.trim().to_owned())
}

/// The summary table of the terminal report, as HTML (full agent names, false claims).
fn summary_table(summaries: &[AgentSummary]) -> String {
    let mut out = String::from(
        "<table id=\"summary\">\n<thead><tr><th>agent</th><th>trials</th><th>passed</th>\
         <th>pass rate</th><th>95% CI</th><th>false claims</th><th>pass@k / pass^k</th>\
         <th>invalid</th><th>infra errors</th><th>mean cost</th><th>median time</th></tr>\
         </thead>\n<tbody>\n",
    );
    for row in rows(summaries) {
        let _ = writeln!(
            out,
            "<tr data-agent=\"{agent}\"><td class=\"name\">{name}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td><td class=\"false-claims\">{}</td><td>{}</td><td>{}</td>\
             <td>{}</td><td>{}</td><td>{}</td></tr>",
            row.trials,
            row.passed,
            esc(&row.pass_rate),
            esc(&row.interval),
            esc(&row.false_claims),
            esc(&row.at_k),
            row.invalid,
            row.infra_errors,
            esc(&row.cost),
            esc(&row.median),
            agent = esc(&row.agent),
            name = name_cell(&row.agent),
        );
    }
    out.push_str("</tbody>\n</table>\n");
    out
}

/// The `--ablation` tables of every matrix in the run.
fn ablation_section(ablations: &[Ablation], confidence: f64) -> String {
    let mut out = String::from("<section class=\"panel\" id=\"ablation\">\n<h2>Ablation</h2>\n");
    if ablations.is_empty() {
        let _ = writeln!(out, "<p class=\"note\">{}.</p>", esc(super::NO_ABLATION));
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
        for factor in &ablation.factors {
            for (i, level) in factor.levels.iter().enumerate() {
                let _ = writeln!(
                    out,
                    "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
                     <td>{}</td></tr>",
                    if i == 0 {
                        esc(&factor.factor)
                    } else {
                        String::new()
                    },
                    esc(&level.level),
                    rate_text(level.pass_rate),
                    ci_text(level.interval),
                    effect_text(level.effect, i == 0),
                    cost_text(level.mean_cost_usd),
                    time_text(level.median_duration_ms)
                );
            }
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
                    let _ = write!(out, "<td>{}</td>", rate_text(*cell));
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
            let _ = writeln!(
                out,
                "<tr><td class=\"name\">{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                name_cell(&p.agent),
                ablation_pct(p.pass_rate),
                cost_text(p.mean_cost_usd),
                time_text(p.median_duration_ms)
            );
        }
        out.push_str("</tbody>\n</table>\n");
    }
    out.push_str("</section>\n");
    out
}

/// Every trial as a table row (useful without JS; with JS a row opens its drill-down).
fn trial_list(trials: &[&TrialRecord]) -> String {
    let mut out = String::from(
        "<table id=\"trial-list\">\n<thead><tr><th>task</th><th>agent</th><th>#</th>\
         <th>outcome</th><th>agent status</th><th>verify</th><th>diff</th><th>time</th>\
         <th>cost</th><th>note</th></tr></thead>\n<tbody>\n",
    );
    for r in trials {
        let verify = match r.verify {
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

const CSS: &str = r#"
:root { color-scheme: light; --ink: #1f2933; --muted: #52606d; --line: #d9e2ec; --panel: #f8fafc; }
* { box-sizing: border-box; }
body { margin: 0; color: var(--ink); background: #fff;
  font: 14px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
header, main { max-width: 1240px; margin: 0 auto; padding: 0 24px; }
header { padding-top: 24px; padding-bottom: 12px; border-bottom: 1px solid var(--line); }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 16px; margin: 0 0 4px; }
h3 { font-size: 15px; margin: 0; }
.meta, .note { color: var(--muted); margin: 0 0 8px; }
.note { font-size: 13px; }
.banner { background: #fff3c4; border: 1px solid #e6c65c; border-radius: 6px; padding: 8px 12px; }
main > * { margin: 20px 0; }
.grid { display: grid; grid-template-columns: repeat(auto-fit, minmax(520px, 1fr)); gap: 20px;
  align-items: start; }
.panel { background: var(--panel); border: 1px solid var(--line); border-radius: 8px; padding: 16px;
  overflow-x: auto; }
svg { display: block; max-width: 100%; height: auto; font-family: inherit; }
svg text { fill: var(--ink); font-size: 12px; }
svg text.tick, svg text.sub { fill: var(--muted); font-size: 11px; }
svg text.col { font-weight: 600; }
svg text.value { font-weight: 600; }
g.cell[data-rendered] { cursor: pointer; }
g.cell:focus { outline: none; }
g.cell:hover rect.fill { stroke: var(--muted); stroke-width: 2; }
g.cell:focus-visible rect.fill, g.cell.selected rect.fill { stroke: var(--ink); stroke-width: 3; }
table { border-collapse: collapse; width: 100%; font-size: 13px; background: #fff; }
th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid var(--line); white-space: nowrap; }
th { color: var(--muted); font-weight: 600; }
td.why { white-space: normal; color: var(--muted); }
tr[data-rendered] { cursor: pointer; }
tr[data-rendered]:hover, tr.selected { background: #eaf2fb; }
tr[data-rendered]:focus-visible { outline: 2px solid var(--ink); }
.badge { display: inline-block; padding: 0 6px; border-radius: 4px; font-size: 12px; font-weight: 600; }
.badge.pass { background: #dbeafe; color: #1e3a8a; }
.badge.fail { background: #fde2e1; color: #8a1c1c; }
.badge.infra_error { background: #fff3c4; color: #6b4e00; }
.badge.invalid { background: #ede9fe; color: #4c1d95; }
.trial-card { background: #fff; border: 1px solid var(--line); border-radius: 8px; padding: 12px 16px; margin: 12px 0 0; }
.trial-card.focus { border-color: var(--ink); }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 2px 16px; margin: 8px 0; }
dl.facts dt { color: var(--muted); }
dl.facts dd { margin: 0; white-space: pre-wrap; overflow-wrap: anywhere; }
details { margin-top: 8px; }
details > summary { cursor: pointer; font-weight: 600; }
pre { background: #fff; border: 1px solid var(--line); border-radius: 6px; padding: 8px; margin: 4px 0 0;
  max-height: 420px; overflow: auto; font: 12px/1.45 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
pre.diff span { display: block; min-height: 1.45em; white-space: pre; }
pre.diff .add { background: #e6f4ea; }
pre.diff .del { background: #fdecea; }
pre.diff .hunk { color: #5b3f9e; }
pre.diff .meta { color: var(--muted); }
ol.timeline { list-style: none; margin: 4px 0 0; padding: 0 0 0 12px; border-left: 2px solid var(--line); }
ol.timeline li { padding: 2px 0; overflow-wrap: anywhere; }
td.name { white-space: normal; min-width: 12em; }
h4 { font-size: 14px; margin: 12px 0 4px; }
section h3 { margin-top: 12px; }
table.ablation, table.interaction, table.pareto { width: auto; margin: 4px 0; }
pre.compare, pre.instruction-text { white-space: pre-wrap; overflow-wrap: anywhere; }
ol.point-key { margin: 4px 0 0; padding-left: 28px; font-size: 13px; overflow-wrap: anywhere; }
#trial-detail > details.instruction { margin-top: 4px; }
.etype { font: 12px ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; background: #eef2f7;
  border-radius: 4px; padding: 0 4px; margin-right: 6px; }
"#;

const JS: &str = r##"
(() => {
  "use strict";
  const data = JSON.parse(document.getElementById("deltabench-data").textContent);
  const detail = document.getElementById("trial-detail");
  const key = (task, agent) => task + "\u0000" + agent;
  const byCell = new Map();
  for (const t of data.trials) {
    const k = key(t.task, t.agent);
    if (!byCell.has(k)) byCell.set(k, []);
    byCell.get(k).push(t);
  }
  for (const list of byCell.values()) list.sort((a, b) => a.trial - b.trial);

  // Builds an element; text children become text nodes, so run data is never parsed as HTML.
  function h(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value !== null && value !== undefined) node.setAttribute(name, value);
    }
    for (const child of children.flat()) {
      if (child !== null && child !== undefined) node.append(child);
    }
    return node;
  }
  const secs = (ms) => (ms / 1000).toFixed(2) + " s";
  const OUTCOME = { pass: "pass", fail: "fail", invalid: "invalid", infra_error: "infra error" };

  function verifyText(v) {
    if (!v) return "did not run";
    if (v.timed_out) return "timed out after " + secs(v.duration_ms);
    const end = v.exit_code === null ? "ended without an exit code" : "exit " + v.exit_code;
    return end + " after " + secs(v.duration_ms);
  }

  function diffPre(text) {
    const pre = h("pre", { class: "diff" });
    for (const line of text.replace(/\n$/, "").split("\n")) {
      let kind = "ctx";
      if (/^(diff |index |--- |\+\+\+ |new file|deleted file|similarity|rename |Binary )/.test(line)) kind = "meta";
      else if (line.startsWith("@@")) kind = "hunk";
      else if (line.startsWith("+")) kind = "add";
      else if (line.startsWith("-")) kind = "del";
      pre.append(h("span", { class: kind }, line));
    }
    return pre;
  }

  function section(title, note, body) {
    return h("details", { open: "" }, h("summary", null, title),
      note ? h("p", { class: "note" }, note) : null, body);
  }

  function artifact(title, art, render) {
    let body = null;
    if (art.text === "") body = h("p", { class: "note" }, "(empty)");
    else if (art.text !== null) body = render(art.text);
    return section(title, art.note, body);
  }

  function card(t) {
    const facts = h("dl", { class: "facts" });
    const fact = (name, value) => {
      if (value !== null && value !== undefined && value !== "") facts.append(h("dt", null, name), h("dd", null, String(value)));
    };
    fact("agent status", t.status === null ? "no agent ran" : t.status);
    if (t.error) fact("agent error", t.error.message + " (" + t.error.code + ")");
    fact("infra error", t.infra_error);
    fact("invalid", t.invalid);
    if (t.tampered) fact("tampered", t.tampered.join(", "));
    fact("verify", verifyText(t.verify));
    if (t.diff) fact("diff", t.diff.files + " file(s), +" + t.diff.insertions + " \u2212" + t.diff.deletions);
    fact("score", t.score === null ? "not scored" : t.score + " (" + t.metric + ")");
    fact("duration", secs(t.duration_ms));
    if (t.usage) {
      const cost = t.usage.cost_usd === null || t.usage.cost_usd === undefined ? "" : ", $" + t.usage.cost_usd.toFixed(4);
      fact("usage", t.usage.input_tokens + " input, " + t.usage.output_tokens + " output tokens" + cost);
    }
    fact("agent's own summary (not scored)", t.agent_text);
    const timeline = t.events.length
      ? h("ol", { class: "timeline" }, t.events.map((e) => h("li", null, h("span", { class: "etype" }, e.type), e.summary)))
      : null;
    return h("article", { class: "trial-card", "data-trial": String(t.trial) },
      h("h3", null, "#" + t.trial + " ", h("span", { class: "badge " + t.outcome }, OUTCOME[t.outcome] || t.outcome)),
      facts,
      artifact("diff.patch", t.diff_patch, diffPre),
      artifact("verify.log (last " + data.log_tail_lines + " lines)", t.verify_log, (text) => h("pre", { class: "log" }, text)),
      section("events (" + t.events.length + ")", t.events_note, timeline));
  }

  // The task's instruction, the same for every agent: open, above the trials.
  function instruction(art) {
    if (!art) return null;
    return h("details", { class: "instruction", open: "" }, h("summary", null, "Task instruction"),
      art.note ? h("p", { class: "note" }, art.note) : null,
      art.text === null ? null : h("pre", { class: "instruction-text" }, art.text));
  }

  const cells = Array.from(document.querySelectorAll("#heatmap g.cell"));
  const rows = Array.from(document.querySelectorAll("#trial-list tbody tr"));

  function show(task, agent, trial) {
    for (const node of document.querySelectorAll(".selected")) node.classList.remove("selected");
    for (const node of cells.concat(rows)) {
      if (node.dataset.task === task && node.dataset.agent === agent) node.classList.add("selected");
    }
    const trials = byCell.get(key(task, agent)) || [];
    detail.replaceChildren(
      h("h2", null, "Trial details: " + task + " \u00d7 " + agent),
      instruction(data.instructions[task]),
      ...(trials.length ? trials.map(card) : [h("p", { class: "note" }, "No trials were recorded for this cell.")]));
    detail.dataset.task = task;
    detail.dataset.agent = agent;
    detail.dataset.rendered = "true";
    const focus = trial && detail.querySelector('[data-trial="' + trial + '"]');
    if (focus) focus.classList.add("focus");
    return focus || detail;
  }

  function activate(node, go) {
    node.setAttribute("tabindex", "0");
    node.setAttribute("role", "button");
    node.addEventListener("click", go);
    node.addEventListener("keydown", (event) => {
      if (event.key === "Enter" || event.key === " ") {
        event.preventDefault();
        go();
      }
    });
    node.dataset.rendered = "true";
  }
  for (const cell of cells) {
    cell.setAttribute("aria-label", cell.querySelector("title").textContent);
    activate(cell, () => show(cell.dataset.task, cell.dataset.agent).scrollIntoView({ block: "start" }));
  }
  for (const row of rows) {
    activate(row, () => show(row.dataset.task, row.dataset.agent, row.dataset.trial).scrollIntoView({ block: "start" }));
  }

  // Open on the first cell that did not fully pass: that is usually what a reader came for.
  const first = cells.find((c) => c.dataset.passed !== c.dataset.scored || c.dataset.infra !== "0") || cells[0];
  if (first) show(first.dataset.task, first.dataset.agent);
})();
"##;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn esc_escapes_markup_and_breaks_urls() {
        assert_eq!(
            esc("<a href=\"https://x\">&'</a>"),
            "&lt;a href=&quot;https:&#47;&#47;x&quot;&gt;&amp;&#39;&lt;/a&gt;"
        );
    }

    #[test]
    fn backticks_become_code() {
        assert_eq!(
            code_spans("ended `completed` or `error`."),
            "ended <code>completed</code> or <code>error</code>."
        );
    }

    #[test]
    fn heat_colour_runs_red_grey_blue() {
        assert_eq!(heat_colour(0.0), "#d6604d");
        assert_eq!(heat_colour(0.5), "#f7f7f7");
        assert_eq!(heat_colour(1.0), "#4393c3");
    }

    #[test]
    fn cost_axis_and_dollar_ticks() {
        let close = |(steps, step): (u32, f64), want: (u32, f64)| {
            steps == want.0 && (step - want.1).abs() < 1e-12
        };
        assert!(close(cost_axis(0.0125), (3, 0.005)));
        assert!(close(cost_axis(0.031), (4, 0.01)));
        assert!(close(cost_axis(1.0), (2, 0.5)));
        assert!(close(cost_axis(20.0), (4, 5.0)));
        assert!(close(cost_axis(0.0), (4, 0.25)));
        assert_eq!(dollars(0.005, 0.005), "$0.005");
        assert_eq!(dollars(0.5, 0.25), "$0.50");
    }

    #[test]
    fn event_lines_summarize_each_kind() {
        let line = |v: Value| {
            let e = event_line(&v);
            (e.kind, e.summary)
        };
        assert_eq!(
            line(serde_json::json!({"type": "tool_call", "name": "write", "args": {"path": "a"}})),
            ("tool_call".into(), "write({\"path\":\"a\"})".into())
        );
        assert_eq!(
            line(
                serde_json::json!({"type": "system", "subtype": "exit", "message": "exited\nwith 1"})
            ),
            ("system".into(), "exit: exited with 1".into())
        );
        assert_eq!(
            line(
                serde_json::json!({"type": "usage", "usage": {"input_tokens": 3, "output_tokens": 4, "cost_usd": 0.5}})
            ),
            ("usage".into(), "3 input, 4 output tokens, $0.5000".into())
        );
    }
}
