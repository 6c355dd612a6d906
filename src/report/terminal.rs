//! The terminal report fitted to a width (`COLUMNS`, else [`DEFAULT_WIDTH`]): columns with
//! nothing to show left out, cells made compact and long names shortened until the table fits,
//! a legend for the columns shown, and prose wrapped. Markdown, JSON and HTML keep every column.

use tabled::builder::Builder;
use tabled::settings::Style;
use tabled::{Table, Tabled};

use super::{AgentSummary, Row, rows};

/// The width when the terminal's is not known.
pub(crate) const DEFAULT_WIDTH: usize = 100;

/// Columns a run may have nothing in (no costs, one trial per task, nothing flagged).
const OPTIONAL: [&str; 9] = [
    "false claims",
    "pass@k / pass^k",
    "invalid",
    "flagged",
    "infra errors",
    "tokens",
    "mean cost",
    "total cost",
    "cost/solved",
];

/// Agent names are shortened down to this many characters before the table is wrapped.
const NAME_LIMITS: [Option<usize>; 4] = [None, Some(24), Some(16), Some(10)];

/// The summary table and its legend, fitted to `width`.
pub(super) fn summary(summaries: &[AgentSummary], width: usize) -> String {
    for compact in [false, true] {
        for limit in NAME_LIMITS {
            let columns = columns(summaries, compact, limit);
            let table = render(&columns);
            if table.total_width() <= width {
                return with_legend(table.to_string(), &columns, width);
            }
        }
    }
    // Too narrow for any table: one block per agent, a line per column.
    let columns = columns(summaries, true, None);
    with_legend(wrap(blocks(&columns).trim_end(), width), &columns, width)
}

/// `alpha` then `  rate    83.3%`, ...: the columns of each agent, one per line.
fn blocks(columns: &[Column]) -> String {
    let Some((names, rest)) = columns.split_first() else {
        return String::new();
    };
    let pad = rest
        .iter()
        .map(|c| c.label().chars().count())
        .max()
        .unwrap_or(0);
    let mut out = String::new();
    for (index, name) in names.cells.iter().enumerate() {
        out.push_str(name);
        out.push('\n');
        for column in rest {
            out.push_str(&format!(
                "  {:pad$}  {}\n",
                column.label(),
                column.cells[index]
            ));
        }
    }
    out
}

/// A column of the summary: its header, the title it shows and a cell per agent.
struct Column {
    header: String,
    title: &'static str,
    cells: Vec<String>,
}

/// The title of the column `header` in a compact table.
fn compact_title(header: &str) -> Option<&'static str> {
    Some(match header {
        "pass rate" => "rate",
        "false claims" => "false",
        "pass@k / pass^k" => "pass@k/^k",
        "infra errors" => "infra",
        "cost/solved" => "$/solve",
        "median time" => "time",
        _ => return None,
    })
}

/// The summary's columns, those with nothing to show left out; `compact` drops the intervals
/// of false claims, the rate of flagged and the decimals of pass@k; `limit` shortens agent names.
fn columns(summaries: &[AgentSummary], compact: bool, limit: Option<usize>) -> Vec<Column> {
    let rows: Vec<Row> = rows(summaries)
        .into_iter()
        .zip(summaries)
        .map(|(mut row, s)| {
            if compact {
                let whole = |rate: f64| format!("{:.0}%", rate * 100.0);
                if let Some(rate) = s.false_claim_rate {
                    row.false_claims = format!("{}/{} {}", s.false_claims, s.claimed, whole(rate));
                }
                if let Some((lo, hi)) = s.interval {
                    row.interval = format!("{:.0}-{}", lo * 100.0, whole(hi));
                }
                if let Some(tokens) = &s.tokens {
                    row.tokens = format!(
                        "{}/{}",
                        super::count(tokens.input + tokens.cache_read),
                        super::count(tokens.output)
                    );
                }
                if s.trials > 0 {
                    row.flagged = format!("{}/{}", s.flagged, s.trials);
                }
                if let (Some(at), Some(all)) = (s.pass_at_k, s.pass_hat_k) {
                    row.at_k = format!("{:.0}/{:.0}%", at * 100.0, all * 100.0);
                }
            }
            if let Some(limit) = limit {
                row.agent = shortened(&row.agent, limit);
            }
            row
        })
        .collect();
    let fields: Vec<Vec<String>> = rows
        .iter()
        .map(|row| row.fields().into_iter().map(|f| f.into_owned()).collect())
        .collect();
    let mut columns: Vec<Column> = Row::headers()
        .into_iter()
        .enumerate()
        .map(|(index, header)| Column {
            title: compact_title(&header).filter(|_| compact).unwrap_or(""),
            header: header.into_owned(),
            cells: fields.iter().map(|row| row[index].clone()).collect(),
        })
        .filter(|column| !(OPTIONAL.contains(&column.header.as_str()) && column.is_empty()))
        .collect();
    if compact {
        // `passed` as `6/12`, in place of the trials column; the costs as the cost of a solve
        // (the run's total is under the table; markdown and JSON have each agent's).
        columns.retain(|c| !["trials", "mean cost", "total cost"].contains(&c.header.as_str()));
        if let Some(passed) = columns.iter_mut().find(|c| c.header == "passed") {
            for (cell, s) in passed.cells.iter_mut().zip(summaries) {
                *cell = format!("{}/{}", s.passed, s.trials);
            }
        }
    }
    columns
}

impl Column {
    /// What the column shows as its title.
    fn label(&self) -> &str {
        if self.title.is_empty() {
            &self.header
        } else {
            self.title
        }
    }

    /// Every cell is `-`, `0` or a count of none (`0/6`, `0/6 0.0%`) in the flagged column.
    fn is_empty(&self) -> bool {
        self.cells.iter().all(|cell| {
            cell == "-" || cell == "0" || (self.header == "flagged" && cell.starts_with("0/"))
        })
    }
}

fn render(columns: &[Column]) -> Table {
    let mut builder = Builder::default();
    builder.push_record(columns.iter().map(Column::label));
    let agents = columns.first().map_or(0, |c| c.cells.len());
    for index in 0..agents {
        builder.push_record(columns.iter().map(|c| c.cells[index].clone()));
    }
    let mut table = builder.build();
    table.with(Style::rounded());
    table
}

/// The table, then one legend line for the columns it shows, wrapped at `width`.
fn with_legend(table: String, columns: &[Column], width: usize) -> String {
    let shown = |header: &str| columns.iter().any(|c| c.header == header);
    let mut terms = Vec::new();
    if shown("false claims") {
        terms.push("false claims (false): said done (ended `completed`) but did not pass, with a 95% Wilson interval");
    }
    if shown("flagged") {
        terms.push("flagged: a diff shaped like an attack on the judge");
    }
    if shown("pass@k / pass^k") {
        terms.push("pass@k / pass^k: one of k trials passes / all k pass");
    }
    let titles: Vec<String> = columns
        .iter()
        .filter(|c| {
            !c.title.is_empty()
                && !c.title.contains('$')
                && !["pass@k/^k", "false"].contains(&c.title)
        })
        .map(|c| format!("{}: {}", c.title, c.header))
        .collect();
    let titles = titles.join("; ");
    if !titles.is_empty() {
        terms.push(&titles);
    }
    if columns
        .iter()
        .any(|c| c.cells.iter().any(|cell| cell.starts_with("~$")))
    {
        terms.push("~$: priced by deltabench from its price table, not reported by the agent");
    }
    if shown("tokens") {
        terms.push("tokens: read / written");
    }
    if shown("cost/solved") {
        terms.push("cost/solved ($/solve): total cost over the passing trials");
    }
    let left_out = OPTIONAL.iter().any(|header| !shown(header));
    if left_out {
        terms.push("columns left out: `--format json` or `markdown` has all");
    }
    if terms.is_empty() {
        return table;
    }
    format!(
        "{table}\n{}",
        wrap(&format!("legend: {}", terms.join("; ")), width)
    )
}

/// `name` in at most `limit` characters: its start and its end around `…` (a matrix name's
/// factors are at its end).
pub(super) fn shortened(name: &str, limit: usize) -> String {
    let chars: Vec<char> = name.chars().collect();
    if chars.len() <= limit || limit < 3 {
        return name.to_owned();
    }
    let tail = (limit - 1) / 2;
    let head = limit - 1 - tail;
    chars[..head]
        .iter()
        .chain(std::iter::once(&'…'))
        .chain(&chars[chars.len() - tail..])
        .collect()
}

/// Every line of `text` that is not a table's wrapped at `width`, its continuation lines
/// indented two spaces past the line's own indent.
pub(crate) fn wrap(text: &str, width: usize) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        let (body, newline) = match line.strip_suffix('\n') {
            Some(body) => (body, "\n"),
            None => (line, ""),
        };
        let table_line = body.starts_with(['╭', '│', '├', '╰', '|']);
        if table_line || textwrap::core::display_width(body) <= width {
            out.push_str(line);
            continue;
        }
        let indent = &body[..body.len() - body.trim_start().len()];
        let continuation = format!("{indent}  ");
        let options = textwrap::Options::new(width)
            .initial_indent(indent)
            .subsequent_indent(&continuation)
            .break_words(true);
        out.push_str(&textwrap::fill(body.trim_start(), options));
        out.push_str(newline);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_names_keep_their_start_and_end() {
        assert_eq!(shortened("claude-code", 24), "claude-code");
        assert_eq!(
            shortened("sed-fixer[env.CALC=on,env.TEXT=off]", 16),
            "sed-fixe…XT=off]"
        );
        assert_eq!(shortened("sed-fixer[env.CALC=on]", 10).chars().count(), 10);
    }

    #[test]
    fn prose_wraps_and_tables_do_not() {
        let text = format!("{}\n│ {} │\n", "word ".repeat(30), "cell ".repeat(30));
        let wrapped = wrap(&text, 40);
        for line in wrapped.lines().filter(|l| !l.starts_with('│')) {
            assert!(line.chars().count() <= 40, "{line}");
        }
        assert!(wrapped.lines().nth(1).unwrap().starts_with("  word"));
        assert!(wrapped.contains(&format!("│ {} │", "cell ".repeat(30))));
    }
}
