//! The task x agent heat map, as static SVG: the cells the script makes clickable.

use std::fmt::Write as _;

use super::charts::{GRID, INK, fit, label_width};
use super::text::esc;
use crate::store::{Outcome, StoredRun};

/// Degrees the column names rise when they are too long to lie flat.
const SLANT: f64 = 35.0;

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
pub(super) fn heatmap(run: &StoredRun, tasks: &[&str], agents: &[&str]) -> String {
    let grid = Layout::new(tasks, agents);
    let Layout {
        label_w,
        cell_h,
        header_h,
        ..
    } = grid;
    let (width, height) = (grid.width, grid.height);
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
    svg.push_str(&grid.column_names(agents));
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
            let x = label_w + grid.col_w * j as f64;
            svg.push_str(&grid.cell(&cell(run, task, agent), task, agent, (x, y)));
        }
    }
    svg.push_str(&grid.legend());
    svg.push_str("</svg>\n");
    svg
}

/// Where the heat map's parts go, from the lengths of its task and agent names.
struct Layout {
    label_w: f64,
    col_w: f64,
    /// Column names too long to lie flat are slanted up to the right.
    slanted: bool,
    cell_h: f64,
    header_h: f64,
    grid_h: f64,
    width: f64,
    height: f64,
}

impl Layout {
    fn new(tasks: &[&str], agents: &[&str]) -> Self {
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
        Self {
            label_w,
            col_w,
            slanted,
            cell_h,
            header_h,
            grid_h,
            width,
            height: header_h + grid_h + legend_h,
        }
    }

    /// The agents' names over their columns.
    fn column_names(&self, agents: &[&str]) -> String {
        let mut svg = String::new();
        for (j, agent) in agents.iter().enumerate() {
            let (x, y) = (
                self.label_w + self.col_w * (j as f64 + 0.5),
                self.header_h - 10.0,
            );
            if self.slanted {
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
        svg
    }

    /// One (task, agent) cell with its top-left corner at `(x, y)`.
    fn cell(&self, c: &Cell, task: &str, agent: &str, (x, y): (f64, f64)) -> String {
        let (col_w, cell_h) = (self.col_w, self.cell_h);
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
        let mut svg = String::new();
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
        svg
    }

    /// The colour scale and the infra mark, under the grid.
    fn legend(&self) -> String {
        let ly = self.header_h + self.grid_h + 16.0;
        let lx = self.label_w;
        format!(
            "<g class=\"legend\"><text x=\"{l0:.1}\" y=\"{ty:.1}\" text-anchor=\"end\" \
             class=\"sub\">0%</text><rect x=\"{lx:.1}\" y=\"{ly:.1}\" width=\"120\" height=\"10\" \
             fill=\"url(#heat-scale)\" stroke=\"{GRID}\"/><text x=\"{l1:.1}\" y=\"{ty:.1}\" \
             class=\"sub\">100% passed</text><path d=\"M{m0:.1} {ly:.1}h11v11z\" fill=\"{INK}\"/>\
             <text x=\"{m1:.1}\" y=\"{ty:.1}\" class=\"sub\">infra errors (not scored)</text></g>\n",
            l0 = lx - 4.0,
            l1 = lx + 124.0,
            ty = ly + 9.0,
            m0 = lx + 210.0,
            m1 = lx + 226.0,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heat_colour_runs_red_grey_blue() {
        assert_eq!(heat_colour(0.0), "#d6604d");
        assert_eq!(heat_colour(0.5), "#f7f7f7");
        assert_eq!(heat_colour(1.0), "#4393c3");
    }
}
