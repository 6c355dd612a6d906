//! The pass-rate bars and the cost scatter, as static SVG.

use std::fmt::Write as _;

use super::data::AgentData;
use super::text::{cut, esc};
use crate::report::{AgentSummary, pct};

// The page's palette: INK, MUTED and GRID are the stylesheet's --ink, --muted and --line, which
// SVG attributes cannot reference.
const BAR: &str = "#3b78b8";
pub(super) const INK: &str = "#1f2933";
const MUTED: &str = "#52606d";
pub(super) const GRID: &str = "#d9e2ec";

/// Pixels a label of `text` needs at the charts' 12px font, roughly.
pub(super) fn label_width<'a>(texts: impl Iterator<Item = &'a str>, min: f64, max: f64) -> f64 {
    let longest = texts.map(|t| t.chars().count()).max().unwrap_or(0);
    (longest as f64 * 7.0 + 16.0).clamp(min, max)
}

/// A label that fits `width` pixels, cut with an ellipsis.
pub(super) fn fit(text: &str, width: f64) -> String {
    cut(text, ((width - 16.0) / 7.0).max(3.0) as usize)
}

/// Horizontal bars of the pass rate per agent, each with its 95% interval as a whisker.
pub(super) fn pass_rate_chart(summaries: &[AgentSummary]) -> String {
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
        svg.push_str(&rate_bar(s, cy, label_w, plot_w));
        svg.push_str("</g>\n");
    }
    svg.push_str("</svg>\n");
    svg
}

/// An agent's bar, its interval's whisker and the figures beside them, its row centred on `cy`
/// (or the note that it has no scored trials).
fn rate_bar(s: &AgentSummary, cy: f64, label_w: f64, plot_w: f64) -> String {
    let x = |v: f64| label_w + v * plot_w;
    let value_x = label_w + plot_w + 10.0;
    let mut svg = String::new();
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
pub(super) fn cost_scatter(agents: &[AgentData]) -> (String, String) {
    let max_cost = agents
        .iter()
        .filter_map(|a| a.summary.mean_cost_usd)
        .fold(0.0, f64::max);
    let frame = ScatterFrame::new(cost_axis(max_cost));
    let mut svg = frame.axes();
    // Points drawn lowest first so a label that would collide moves down past the previous one.
    let mut points: Vec<(usize, &AgentData, f64, f64)> = agents
        .iter()
        .enumerate()
        .filter_map(|(i, a)| {
            let rate = a.summary.pass_rate?;
            Some((
                i + 1,
                a,
                frame.x(a.summary.mean_cost_usd.unwrap_or(0.0)),
                frame.y(rate),
            ))
        })
        .collect();
    // A name that does not fit beside its point (matrix combinations) would be cut: number the
    // points instead, and name them in a key under the chart.
    let label_w = ScatterFrame::RIGHT + 20.0;
    let numbered = points
        .iter()
        .any(|(_, a, _, _)| fit(&a.summary.agent, label_w) != a.summary.agent);
    points.sort_by(|a, b| a.3.total_cmp(&b.3));
    let mut placed: Vec<(f64, f64)> = Vec::new();
    for &(number, agent, px, py) in &points {
        let mut label_y = py;
        while placed
            .iter()
            .any(|(lx, ly)| (lx - px).abs() < 90.0 && (ly - label_y).abs() < 13.0)
        {
            label_y += 13.0;
        }
        placed.push((px, label_y));
        let label = if numbered {
            number.to_string()
        } else {
            esc(&agent.summary.agent)
        };
        svg.push_str(&frame.point(agent.summary, (px, py), label_y, &label));
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
    (svg, cost_note(agents))
}

/// The cost scatter's geometry: its plot area and the cost axis's `(steps, step)`.
struct ScatterFrame {
    steps: u32,
    step: f64,
    x_max: f64,
}

impl ScatterFrame {
    const WIDTH: f64 = 480.0;
    const HEIGHT: f64 = 300.0;
    const LEFT: f64 = 64.0;
    const RIGHT: f64 = 110.0;
    const TOP: f64 = 14.0;
    const BOTTOM: f64 = 46.0;
    const PLOT_W: f64 = Self::WIDTH - Self::LEFT - Self::RIGHT;
    const PLOT_H: f64 = Self::HEIGHT - Self::TOP - Self::BOTTOM;

    fn new((steps, step): (u32, f64)) -> Self {
        Self {
            steps,
            step,
            x_max: step * f64::from(steps),
        }
    }

    fn x(&self, cost: f64) -> f64 {
        Self::LEFT + cost / self.x_max * Self::PLOT_W
    }

    fn y(&self, rate: f64) -> f64 {
        Self::TOP + (1.0 - rate) * Self::PLOT_H
    }

    /// The opening `<svg>`, the grid with its dollar and percent ticks, and the axis titles.
    fn axes(&self) -> String {
        let (width, height, left, top) = (Self::WIDTH, Self::HEIGHT, Self::LEFT, Self::TOP);
        let (plot_w, plot_h) = (Self::PLOT_W, Self::PLOT_H);
        let mut svg = String::new();
        let _ = write!(
            svg,
            "<svg id=\"cost-scatter\" viewBox=\"0 0 {width} {height}\" width=\"{width}\" \
             height=\"{height}\" role=\"img\" aria-labelledby=\"cost-title\">\n<title \
             id=\"cost-title\">Mean cost per trial against pass rate</title>\n"
        );
        for i in 0..=self.steps {
            let v = self.step * f64::from(i);
            let _ = writeln!(
                svg,
                "<line x1=\"{px:.1}\" x2=\"{px:.1}\" y1=\"{top}\" y2=\"{b:.1}\" stroke=\"{GRID}\"/>\
                 <text x=\"{px:.1}\" y=\"{ty:.1}\" text-anchor=\"middle\" class=\"tick\">{}</text>",
                dollars(v, self.step),
                px = self.x(v),
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
                py = self.y(r),
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
        svg
    }

    /// One agent's point at `(px, py)`, its whisker, and its label at `label_y`.
    fn point(&self, s: &AgentSummary, (px, py): (f64, f64), label_y: f64, label: &str) -> String {
        let mut svg = String::new();
        if let Some((lo, hi)) = s.interval {
            let _ = write!(
                svg,
                "<line class=\"whisker\" x1=\"{px:.1}\" x2=\"{px:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" \
                 stroke=\"{MUTED}\" stroke-width=\"1.2\"/>",
                self.y(lo),
                self.y(hi)
            );
        }
        let (fill, cost) = match s.mean_cost_usd {
            Some(cost) => (BAR, format!("${cost:.4} per trial")),
            None => ("#ffffff", "no cost reported".to_owned()),
        };
        let _ = writeln!(
            svg,
            "<circle class=\"point\" data-agent=\"{a}\" cx=\"{px:.1}\" cy=\"{py:.1}\" r=\"5\" \
             fill=\"{fill}\" stroke=\"{BAR}\" stroke-width=\"2\"><title>{a}: {rate}, {cost}\
             </title></circle><text x=\"{lx:.1}\" y=\"{label_y:.1}\" dy=\"0.35em\">{label}</text>",
            a = esc(&s.agent),
            rate = pct(s.pass_rate.unwrap_or(0.0)),
            cost = esc(&cost),
            lx = px + 9.0,
        );
        svg
    }
}

/// The note under the scatter: the agents drawn hollow at $0, and those not drawn at all.
fn cost_note(agents: &[AgentData]) -> String {
    let no_cost: Vec<&str> = agents
        .iter()
        .filter(|a| a.summary.mean_cost_usd.is_none())
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
    note.trim().to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
