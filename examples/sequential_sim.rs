//! Prints the sequential gate's simulation table for docs/measurement.md:
//! `cargo run --release --example sequential_sim`.

use deltabench::stats::{SequentialSpec, SimSuite, fixed_trials, simulation_table};

fn main() {
    let suite = SimSuite::spread(20, 0.35, 0.95);
    let spec = SequentialSpec {
        alpha: 0.05,
        max_drop: 0.0,
        margin: 0.1,
    };
    let (max_trials, runs, seed) = (30, 10_000, 26);
    println!(
        "20 tasks, baseline pass rates 35%..95%, alpha {}, margin {}, at most {max_trials} trials per task, {runs} seeded runs per row (seed {seed})\n",
        spec.alpha, spec.margin
    );
    println!(
        "| drop | regressed | not regressed | undecided | mean trials/task | fixed N, same alpha and power | sequential / fixed | fixed N at 80% power |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for row in simulation_table(&suite, spec, max_trials, runs, seed) {
        let share = |n: usize| format!("{:.1}%", 100.0 * n as f64 / runs as f64);
        let r = &row.result;
        let (fixed, ratio) = match row.fixed {
            Some(n) => (
                n.to_string(),
                format!("{:.0}%", 100.0 * r.mean_trials / n as f64),
            ),
            None => ("-".into(), "-".into()),
        };
        let at_80 = if row.drop > 0.0 {
            fixed_trials(
                spec.alpha,
                0.8,
                -suite.delta(row.drop),
                suite.round_variance(row.drop),
            )
            .to_string()
        } else {
            "-".into()
        };
        println!(
            "| {:.0} points | {} | {} | {} | {:.2} | {fixed} | {ratio} | {at_80} |",
            row.drop * 100.0,
            share(r.regressed),
            share(r.not_regressed),
            share(r.undecided),
            r.mean_trials
        );
    }
}
