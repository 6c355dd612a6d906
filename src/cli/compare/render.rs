//! How a comparison reads: lines for a terminal or a CI log, or Markdown for a CI summary.

use std::fmt::Write as _;

use super::{Compared, Decision};
use crate::stats::{self, Comparison, Finding, TaskComparison};

fn pct(v: f64) -> String {
    format!("{:.1}%", v * 100.0)
}

/// Signed points; never "-0.0".
fn pts(v: f64) -> String {
    format!("{:+.1}", v * 100.0 + 0.0)
}

/// 95, 80, 97.5.
fn level(confidence: f64) -> String {
    format!("{}", (confidence * 1000.0).round() / 10.0)
}

/// `46.7% (95% CI 11.0% to 86.1%)`.
fn rate_ci(rate: f64, interval: &stats::Interval, level: &str) -> String {
    format!(
        "{} ({level}% CI {} to {})",
        pct(rate),
        pct(interval.lo),
        pct(interval.hi)
    )
}

/// `t1 5/5 -> 0/5, t2 5/5 -> 2/5`, or `-`.
fn counts(cmp: &Comparison, tasks: &[String]) -> String {
    if tasks.is_empty() {
        return "-".into();
    }
    tasks
        .iter()
        .filter_map(|task| cmp.task(task))
        .map(TaskComparison::counts)
        .collect::<Vec<_>>()
        .join(", ")
}

/// `5 trials per task`, or `1-5 trials per task`.
fn trials_per_task(cmp: &Comparison) -> String {
    let all = cmp
        .per_task
        .iter()
        .flat_map(|t| [t.base_trials, t.candidate_trials]);
    let (min, max) = all.fold((usize::MAX, 0), |(lo, hi), n| (lo.min(n), hi.max(n)));
    match (min, max) {
        (1, 1) => "1 trial per task".into(),
        (a, b) if a == b => format!("{a} trials per task"),
        (a, b) => format!("{a}-{b} trials per task"),
    }
}

/// The test across tasks in a sentence, and, when it cannot decide on this many tasks, why.
fn across(cmp: &Comparison) -> (String, Option<String>) {
    let significant = cmp.p_value < 1.0 - cmp.confidence;
    let sentence = format!(
        "{} points ({}% CI {} to {}); {} ({}), p = {:.4}: {}",
        pts(cmp.diff),
        level(cmp.confidence),
        pts(cmp.interval.lo),
        pts(cmp.interval.hi),
        cmp.test,
        if cmp.exact {
            "exact"
        } else {
            "10000 seeded resamples"
        },
        cmp.p_value,
        if significant {
            "significant"
        } else {
            "not significant"
        }
    );
    let note = cmp.powerless.then(|| {
        format!(
            "with {} tasks this test cannot reach {}% confidence (its smallest p is {:.4}): the interval only spans the per-task differences and 0",
            cmp.tasks,
            level(cmp.confidence),
            cmp.min_p
        )
    });
    (sentence, note)
}

/// What the verdict rests on, for its line.
fn verdict_text(cmp: &Comparison) -> String {
    let within = |tasks: &[String]| format!("within tasks: {}", tasks.join(", "));
    let mut why = Vec::new();
    match cmp.verdict {
        Finding::Regressed => {
            if cmp.paired_drop() {
                why.push(format!("across tasks, {}", stats::p_text(cmp.p_value)));
            }
            if !cmp.dropped.is_empty() {
                why.push(within(&cmp.dropped));
            }
            if cmp.too_many_broken() {
                why.push(format!(
                    "{} task(s) broken outright, more than --max-broken {}",
                    cmp.broken_outright.len(),
                    cmp.max_broken.unwrap_or_default()
                ));
            }
            if !cmp.paired_drop() {
                why.push("the test across tasks alone does not show it".into());
            }
            format!("regressed ({})", why.join("; "))
        }
        Finding::Improved => {
            if cmp.paired_gain() {
                why.push(format!("across tasks, {}", stats::p_text(cmp.p_value)));
            }
            if !cmp.gained.is_empty() {
                why.push(within(&cmp.gained));
            }
            format!("improved ({})", why.join("; "))
        }
        Finding::Inconclusive => format!(
            "inconclusive (with {} tasks, the smallest difference this comparison can reliably detect is {:.1} points{})",
            cmp.tasks,
            cmp.mde * 100.0,
            cmp.to_decide
                .as_ref()
                .map(|plan| format!("; {}", plan.text()))
                .unwrap_or_default()
        ),
    }
}

/// The within-task tests in a line: the significant tasks, or the closest call.
fn within_summary(cmp: &Comparison) -> String {
    let significant: Vec<&TaskComparison> = cmp
        .per_task
        .iter()
        .filter(|t| cmp.dropped.contains(&t.task) || cmp.gained.contains(&t.task))
        .collect();
    let head = format!(
        "Fisher exact on each task's trials, Holm-corrected over {} tasks",
        cmp.tasks
    );
    if !significant.is_empty() {
        return format!(
            "{head}: {} significant ({})",
            significant.len(),
            significant
                .iter()
                .map(|t| format!(
                    "{}, p = {:.4}, adjusted {:.4}",
                    t.counts(),
                    t.p_value,
                    t.adjusted_p
                ))
                .collect::<Vec<_>>()
                .join("; ")
        );
    }
    let closest = cmp
        .per_task
        .iter()
        .filter(|t| t.diff() != 0.0)
        .min_by(|a, b| a.adjusted_p.total_cmp(&b.adjusted_p));
    match closest {
        Some(t) => format!(
            "{head}: none significant (closest {}, adjusted p = {:.4})",
            t.counts(),
            t.adjusted_p
        ),
        None => format!("{head}: no task's pass fraction changed"),
    }
}

fn unscored_text(outcome: &Compared) -> Option<String> {
    let (b, c) = (
        outcome.baseline.unscored_trials,
        outcome.candidate.unscored_trials,
    );
    (b + c > 0).then(|| {
        format!(
            "{} trial(s) could not be scored (infra_error; baseline {b}, candidate {c}) and are left out",
            b + c
        )
    })
}

fn gate_label(decision: Decision) -> &'static str {
    match decision {
        Decision::Failed => "FAILED",
        Decision::Undecided => "UNDECIDED",
        Decision::Inconclusive => "INCONCLUSIVE",
        Decision::Passed | Decision::Off => "passed",
    }
}

/// `2/4 50.0%`, or `-` when the agent never ended `completed`.
fn claims(claims: &crate::report::FalseClaims) -> String {
    match claims.rate {
        Some(rate) => format!(
            "{}/{} {:.1}%",
            claims.false_claims,
            claims.claimed,
            rate * 100.0
        ),
        None => "-".to_owned(),
    }
}

/// The human account of a comparison.
pub(super) fn text(base: &str, candidate: &str, outcome: &Compared) -> String {
    let cmp = &outcome.comparison;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "candidate {candidate} vs baseline {base}: {} shared tasks, {}",
        cmp.tasks,
        trials_per_task(cmp)
    );
    let flips = &cmp.flips;
    let _ = writeln!(
        out,
        "  fixed  (fail -> pass) {:>3}: {}",
        flips.fixed.len(),
        counts(cmp, &flips.fixed)
    );
    let _ = writeln!(
        out,
        "  broken (pass -> fail) {:>3}: {}",
        flips.broken.len(),
        counts(cmp, &flips.broken)
    );
    let _ = writeln!(
        out,
        "  both pass {}, both fail {}",
        flips.both_pass.len(),
        flips.both_fail.len()
    );
    if let Some(max) = cmp.max_broken {
        let _ = writeln!(
            out,
            "  always -> never passing {:>3}: {} (--max-broken {max})",
            cmp.broken_outright.len(),
            counts(cmp, &cmp.broken_outright)
        );
    }
    let level = level(cmp.confidence);
    let _ = writeln!(
        out,
        "pass rate: baseline {}, candidate {}",
        rate_ci(cmp.base_rate, &cmp.base_interval, &level),
        rate_ci(cmp.candidate_rate, &cmp.candidate_interval, &level),
    );
    let _ = writeln!(
        out,
        "false claims (ended `completed`, did not pass): baseline {}, candidate {}{}",
        claims(&outcome.baseline.false_claims),
        claims(&outcome.candidate.false_claims),
        match (
            outcome.baseline.false_claims.rate,
            outcome.candidate.false_claims.rate
        ) {
            (Some(base), Some(cand)) => format!(" ({:+.1} points)", (cand - base) * 100.0),
            _ => String::new(),
        }
    );
    let _ = writeln!(
        out,
        "flagged (a diff shaped like an attack on the judge): baseline {}/{}, candidate {}/{}",
        outcome.baseline.flagged,
        outcome.baseline.trials,
        outcome.candidate.flagged,
        outcome.candidate.trials
    );
    let (sentence, note) = across(cmp);
    let _ = writeln!(out, "across tasks: {sentence}");
    if let Some(note) = note {
        let _ = writeln!(out, "  {note}");
    }
    if cmp.within_tested() {
        let _ = writeln!(out, "within tasks: {}", within_summary(cmp));
    }
    if let Some(unscored) = unscored_text(outcome) {
        let _ = writeln!(out, "unscored: {unscored}");
    }
    if let Some(flaky) = flaky_text(outcome) {
        let _ = writeln!(out, "flaky: {flaky}");
    }
    let _ = writeln!(out, "verdict: {}", verdict_text(cmp));
    if let Some(reason) = &outcome.gate.reason {
        let _ = writeln!(out, "gate: {}: {reason}", gate_label(outcome.gate.decision));
    }
    out
}

/// The lock's flaky tasks, apart: whether the comparison and the gate counted them.
fn flaky_text(outcome: &Compared) -> Option<String> {
    if outcome.flaky.tasks.is_empty() {
        return None;
    }
    Some(format!(
        "{} {}",
        crate::report::flaky_list(&outcome.flaky.tasks),
        if outcome.flaky.counted {
            "counted (--include-flaky)"
        } else {
            "left out of the comparison and the gate (the lock's `validate --repeat`; --include-flaky keeps them)"
        }
    ))
}

/// The comparison for a CI summary: rates, changed tasks as a table, verdict, gate.
pub(super) fn markdown(outcome: &Compared) -> String {
    let cmp = &outcome.comparison;
    let (base, candidate) = (&outcome.baseline, &outcome.candidate);
    let level = level(cmp.confidence);
    let mut out = format!(
        "### Candidate `{}` vs baseline `{}`\n\n| | baseline | candidate |\n|---|---|---|\n",
        candidate.agent, base.agent
    );
    let _ = writeln!(out, "| run | `{}` | `{}` |", base.run, candidate.run);
    let _ = writeln!(
        out,
        "| pass rate | {} | {} |",
        rate_ci(cmp.base_rate, &cmp.base_interval, &level),
        rate_ci(cmp.candidate_rate, &cmp.candidate_interval, &level),
    );
    let _ = writeln!(
        out,
        "| unscored trials | {} | {} |",
        base.unscored_trials, candidate.unscored_trials
    );
    let (sentence, note) = across(cmp);
    let _ = write!(
        out,
        "\n**Across tasks** ({} shared tasks, {}): {sentence}.",
        cmp.tasks,
        trials_per_task(cmp)
    );
    if let Some(note) = note {
        let _ = write!(out, " {}{}.", note[..1].to_uppercase(), &note[1..]);
    }
    out.push('\n');
    let within = cmp.within_tested();
    if within {
        let _ = writeln!(out, "\n**Within tasks**: {}.", within_summary(cmp));
    }
    let changed: Vec<&TaskComparison> = cmp.per_task.iter().filter(|t| t.diff() != 0.0).collect();
    if changed.is_empty() {
        let _ = writeln!(out, "\nNo task's pass fraction changed.");
    } else {
        out.push_str(if within {
            "\n| task | baseline | candidate | change | p | adjusted p |\n|---|---|---|---|---|---|\n"
        } else {
            "\n| task | baseline | candidate | change |\n|---|---|---|---|\n"
        });
        for t in &changed {
            let change = if cmp.flips.broken.contains(&t.task) {
                "broken"
            } else if cmp.flips.fixed.contains(&t.task) {
                "fixed"
            } else if t.diff() < 0.0 {
                "worse"
            } else {
                "better"
            };
            let _ = write!(
                out,
                "| {} | {}/{} | {}/{} | {change} |",
                t.task, t.base_passed, t.base_trials, t.candidate_passed, t.candidate_trials
            );
            if within {
                let significant = t.adjusted_p < 1.0 - cmp.confidence;
                let _ = write!(
                    out,
                    " {:.4} | {} |",
                    t.p_value,
                    if significant {
                        format!("**{:.4}**", t.adjusted_p)
                    } else {
                        format!("{:.4}", t.adjusted_p)
                    }
                );
            }
            out.push('\n');
        }
        let _ = writeln!(
            out,
            "\n{} of {} tasks unchanged.",
            cmp.tasks - changed.len(),
            cmp.tasks
        );
    }
    if let Some(flaky) = flaky_text(outcome) {
        let _ = writeln!(out, "\n**Flaky tasks**: {flaky}");
    }
    let _ = writeln!(out, "\n**Verdict**: {}", verdict_text(cmp));
    if let Some(reason) = &outcome.gate.reason {
        let _ = writeln!(
            out,
            "\n**Gate**: {}: {reason}",
            gate_label(outcome.gate.decision)
        );
    }
    out
}
