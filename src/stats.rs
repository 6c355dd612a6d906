//! Statistics for honest measurement of agents.
//!
//! A pass rate measured on a suite is a sample: a handful of tasks, a few trials each, drawn from a
//! noisy process. This module turns trial outcomes into numbers that say how far to trust them:
//!
//! - **pass rates with intervals**: [`wilson`] for independent trials, [`pass_rate`] for trials
//!   clustered in tasks, and the unbiased [`pass_at_k`] / [`pass_hat_k`] estimators;
//! - **paired comparison** of a baseline and a candidate on the tasks both ran ([`compare`]):
//!   per-task flips, an exact McNemar or sign-flip permutation test, an interval on the difference
//!   and the minimum detectable effect at this sample size;
//! - **a noise-aware CI gate** ([`gate`]): fail only on a drop that is significant *and* larger
//!   than the tolerance, and say why in words;
//! - **sample-size planning** ([`plan`]): how many tasks × trials an effect of a given size needs.
//!
//! Every function is pure: no I/O, no printing, no clock. Resampling takes a `seed`, so the same
//! inputs always give the same answer. Confidence levels are two-sided and lie in `[0, 1)` (0.95
//! for 95%); functions taking one panic outside that range, so callers validate user input first.

use std::collections::BTreeMap;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::store::{Outcome, TrialRecord};

/// Resamples used by [`compare`] for the permutation test and the bootstrap.
const RESAMPLES: usize = 10_000;
/// Permutation tests enumerate every sign assignment up to this many non-zero differences
/// (2^20 ≈ 10^6 sums), and sample beyond.
const EXACT_MAX: usize = 20;
/// The power [`Comparison::mde`] is computed for.
const MDE_POWER: f64 = 0.8;
/// Trial counts [`plan`] proposes.
const PLAN_TRIALS: [usize; 5] = [1, 2, 3, 5, 10];

/// A closed interval `[lo, hi]`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Interval {
    pub lo: f64,
    pub hi: f64,
}

impl Interval {
    fn point(value: f64) -> Self {
        Self {
            lo: value,
            hi: value,
        }
    }
}

fn check_confidence(confidence: f64) {
    assert!(
        (0.0..1.0).contains(&confidence),
        "confidence must be in [0, 1), got {confidence}"
    );
}

/// The standard normal quantile Φ⁻¹(p) for p in (0, 1), by Acklam's rational approximation
/// (relative error below 1.2e-9).
fn normal_quantile(p: f64) -> f64 {
    assert!(p > 0.0 && p < 1.0, "probability must be in (0, 1), got {p}");
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
    ];
    const P_LOW: f64 = 0.024_25;
    // Horner's rule; `tail` is the rational function used in both tails.
    let poly = |coefficients: &[f64], x: f64| coefficients.iter().fold(0.0, |acc, c| acc * x + c);
    let tail = |q: f64| poly(&C, q) / (poly(&D, q) * q + 1.0);
    if p < P_LOW {
        tail((-2.0 * p.ln()).sqrt())
    } else if p > 1.0 - P_LOW {
        -tail((-2.0 * (1.0 - p).ln()).sqrt())
    } else {
        let q = p - 0.5;
        let r = q * q;
        poly(&A, r) * q / (poly(&B, r) * r + 1.0)
    }
}

/// The two-sided standard normal quantile for `confidence`: Φ⁻¹((1 + confidence) / 2), so
/// `z_for(0.95)` ≈ 1.959964. For a one-sided quantile Φ⁻¹(power), as power calculations need,
/// use `z_for(2.0 * power - 1.0)`.
pub fn z_for(confidence: f64) -> f64 {
    check_confidence(confidence);
    normal_quantile(0.5 + confidence / 2.0)
}

/// The Wilson score interval for `passed` successes in `n` independent trials, clamped to
/// `[0, 1]`. `None` when `n == 0` or `passed > n`.
pub fn wilson(passed: usize, n: usize, confidence: f64) -> Option<Interval> {
    if n == 0 || passed > n {
        return None;
    }
    Some(wilson_at(
        passed as f64 / n as f64,
        n as f64,
        z_for(confidence),
    ))
}

/// The Wilson interval of a proportion `p` observed on `n` (possibly effective, so real) trials.
fn wilson_at(p: f64, n: f64, z: f64) -> Interval {
    let denominator = 1.0 + z * z / n;
    let centre = (p + z * z / (2.0 * n)) / denominator;
    let half = z * (p * (1.0 - p) / n + z * z / (4.0 * n * n)).sqrt() / denominator;
    Interval {
        lo: (centre - half).max(0.0),
        hi: (centre + half).min(1.0),
    }
}

/// The unbiased pass@k estimator (Chen et al., 2021): the probability that at least one of `k`
/// trials drawn without replacement from `n`, of which `c` passed, passes: 1 − C(n−c, k)/C(n, k).
/// `None` if `k == 0`, `k > n` or `c > n`.
pub fn pass_at_k(n: usize, c: usize, k: usize) -> Option<f64> {
    if k == 0 || k > n || c > n {
        return None;
    }
    if n - c < k {
        return Some(1.0);
    }
    // C(n−c, k)/C(n, k) = Π_{i=n−c+1..=n} (1 − k/i): a product of terms in [0, 1], never a
    // factorial, so it cannot overflow.
    let all_fail: f64 = (n - c + 1..=n).map(|i| 1.0 - k as f64 / i as f64).product();
    Some(1.0 - all_fail)
}

/// pass^k: the probability that all `k` trials drawn without replacement from `n`, of which `c`
/// passed, pass: C(c, k)/C(n, k). `None` if `k == 0`, `k > n` or `c > n`.
pub fn pass_hat_k(n: usize, c: usize, k: usize) -> Option<f64> {
    if k == 0 || k > n || c > n {
        return None;
    }
    // C(c, k)/C(n, k) = Π_{i<k} (c−i)/(n−i); a factor is 0 once i reaches c.
    Some(
        (0..k)
            .map(|i| c.saturating_sub(i) as f64 / (n - i) as f64)
            .product(),
    )
}

/// One task's outcomes for one agent: how many trials passed out of how many.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TaskOutcome {
    pub task: String,
    pub passed: usize,
    pub trials: usize,
}

/// Pass and trial counts of one task.
#[derive(Debug, Clone, Copy, Default)]
struct Tally {
    passed: usize,
    trials: usize,
}

impl Tally {
    fn fraction(self) -> f64 {
        self.passed as f64 / self.trials as f64
    }

    /// A task passes when most of its trials passed (its single trial, with one).
    fn passes(self) -> bool {
        self.fraction() > 0.5
    }
}

/// Per-task tallies sorted by task; repeated entries for a task are summed and tasks without
/// trials dropped, so every tally has a defined fraction.
fn by_task(outcomes: &[TaskOutcome]) -> BTreeMap<&str, Tally> {
    let mut tasks: BTreeMap<&str, Tally> = BTreeMap::new();
    for outcome in outcomes.iter().filter(|o| o.trials > 0) {
        let tally = tasks.entry(&outcome.task).or_default();
        tally.passed += outcome.passed;
        tally.trials += outcome.trials;
    }
    tasks
}

fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len() as f64
}

/// The sample variance (n − 1 denominator); 0 for fewer than two values.
fn sample_variance(values: &[f64]) -> f64 {
    if values.len() < 2 {
        return 0.0;
    }
    let m = mean(values);
    values.iter().map(|v| (v - m).powi(2)).sum::<f64>() / (values.len() - 1) as f64
}

/// An agent's pass rate over tasks, with its interval.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RateEstimate {
    pub rate: f64,
    pub interval: Interval,
    /// `"wilson"` or `"clustered"`.
    pub method: &'static str,
    /// Tasks with at least one trial.
    pub tasks: usize,
    pub trials: usize,
    pub passed: usize,
}

/// The pass rate over tasks with an interval. `None` when there are no trials.
///
/// With one trial per task (or a single task) trials are independent: the rate is passed/trials
/// with a Wilson interval. With several trials per task, trials of one task are correlated, so
/// the task is the unit (`"clustered"`): the rate is the mean of per-task pass fractions, its
/// variance is estimated from the spread of those fractions (sample variance / tasks), and the
/// interval is Wilson's on the effective number of trials that variance stands for,
/// p(1 − p)/variance, never more than the real trials (clustering only adds uncertainty). Being
/// Wilson's, it stays inside (0, 1) unless every trial agreed: 7 of 15 trials over 3 tasks is
/// not "somewhere in 0–100%".
pub fn pass_rate(outcomes: &[TaskOutcome], confidence: f64) -> Option<RateEstimate> {
    let tasks = by_task(outcomes);
    let trials = tasks.values().map(|t| t.trials).sum();
    let passed = tasks.values().map(|t| t.passed).sum();
    let pooled = wilson(passed, trials, confidence)?;
    let independent = RateEstimate {
        rate: passed as f64 / trials as f64,
        interval: pooled,
        method: "wilson",
        tasks: tasks.len(),
        trials,
        passed,
    };
    if tasks.len() == 1 || tasks.values().all(|t| t.trials == 1) {
        return Some(independent);
    }
    let fractions: Vec<f64> = tasks.values().map(|t| t.fraction()).collect();
    let rate = mean(&fractions);
    let variance = sample_variance(&fractions) / fractions.len() as f64;
    // Equal fractions (variance 0) say nothing against independence: the pooled trials count.
    // Otherwise p(1 − p)/variance ≥ tasks − 1, since fractions in [0, 1] with mean p vary by at
    // most p(1 − p)·tasks/(tasks − 1).
    let effective = if variance > 0.0 {
        (rate * (1.0 - rate) / variance).min(trials as f64)
    } else {
        trials as f64
    };
    Some(RateEstimate {
        rate,
        interval: wilson_at(rate, effective, z_for(confidence)),
        method: "clustered",
        ..independent
    })
}

/// [`pass_at_k`] averaged over the tasks with at least `k` trials; `None` if there are none.
pub fn mean_pass_at_k(outcomes: &[TaskOutcome], k: usize) -> Option<f64> {
    mean_over_tasks(outcomes, k, pass_at_k)
}

/// [`pass_hat_k`] averaged over the tasks with at least `k` trials; `None` if there are none.
pub fn mean_pass_hat_k(outcomes: &[TaskOutcome], k: usize) -> Option<f64> {
    mean_over_tasks(outcomes, k, pass_hat_k)
}

fn mean_over_tasks(
    outcomes: &[TaskOutcome],
    k: usize,
    estimator: fn(usize, usize, usize) -> Option<f64>,
) -> Option<f64> {
    let values: Vec<f64> = by_task(outcomes)
        .values()
        .filter_map(|t| estimator(t.trials, t.passed, k))
        .collect();
    (!values.is_empty()).then(|| mean(&values))
}

/// Per-task flips between a baseline and a candidate on the tasks both ran (a task "passes" when
/// its pass fraction is > 0.5 for several trials, or its single trial passed). Each list is sorted.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Flips {
    /// Failed on the baseline, passes on the candidate.
    pub fixed: Vec<String>,
    /// Passed on the baseline, fails on the candidate.
    pub broken: Vec<String>,
    pub both_pass: Vec<String>,
    pub both_fail: Vec<String>,
}

/// The exact two-sided McNemar test: with X ~ Bin(broken + fixed, ½), p = min(1, 2·P(X ≤
/// min(broken, fixed))). 1.0 when there are no discordant pairs.
pub fn mcnemar_exact(broken: usize, fixed: usize) -> f64 {
    let n = broken + fixed;
    if n == 0 {
        return 1.0;
    }
    // Terms C(n, i)/2^n built in log space, so neither C(n, i) overflows nor 2^−n underflows.
    let ln_half_n = n as f64 * 0.5_f64.ln();
    let mut ln_choose = 0.0;
    let mut tail = 0.0;
    for i in 0..=broken.min(fixed) {
        if i > 0 {
            ln_choose += ((n - i + 1) as f64 / i as f64).ln();
        }
        tail += (ln_choose + ln_half_n).exp();
    }
    (2.0 * tail).min(1.0)
}

/// A two-sided sign-flip permutation test of mean(diffs) == 0: the share of sign assignments
/// whose |mean| is at least the observed one.
///
/// Zero differences are the same under either sign, so only the non-zero ones are flipped (the
/// statistic is unchanged: |sum| ranks assignments as |mean| does). With at most 20 of them every
/// assignment is enumerated and p is exact; beyond, `iterations` random assignments give
/// p = (hits + 1)/(iterations + 1). 1.0 when every difference is 0.
pub fn paired_permutation_p(diffs: &[f64], iterations: usize, seed: u64) -> f64 {
    let nonzero: Vec<f64> = diffs.iter().copied().filter(|d| *d != 0.0).collect();
    if nonzero.is_empty() {
        return 1.0;
    }
    let observed = nonzero.iter().sum::<f64>().abs();
    // Summing in another order can round the observed assignment (or an exact tie) a hair below
    // itself; the slack keeps it counted.
    let threshold = observed - 1e-9 * nonzero.iter().map(|d| d.abs()).sum::<f64>();
    if nonzero.len() <= EXACT_MAX {
        let assignments = 1_u64 << nonzero.len();
        let hits = (0..assignments)
            .filter(|mask| {
                let sum: f64 = nonzero
                    .iter()
                    .enumerate()
                    .map(|(i, d)| if mask >> i & 1 == 1 { -d } else { *d })
                    .sum();
                sum.abs() >= threshold
            })
            .count();
        hits as f64 / assignments as f64
    } else {
        let mut rng = SmallRng::seed_from_u64(seed);
        let hits = (0..iterations)
            .filter(|_| {
                let sum: f64 = nonzero
                    .iter()
                    .map(|d| if rng.random() { -d } else { *d })
                    .sum();
                sum.abs() >= threshold
            })
            .count();
        (hits + 1) as f64 / (iterations + 1) as f64
    }
}

/// The percentile bootstrap interval of mean(diffs) from `iterations` resamples (quantiles by
/// linear interpolation between order statistics). A zero-width interval when all diffs are equal.
///
/// # Panics
/// When `diffs` is empty, or `iterations` is 0 while the diffs differ.
pub fn paired_bootstrap(diffs: &[f64], confidence: f64, iterations: usize, seed: u64) -> Interval {
    check_confidence(confidence);
    assert!(!diffs.is_empty(), "bootstrap of no differences");
    if diffs.iter().all(|d| *d == diffs[0]) {
        return Interval::point(diffs[0]);
    }
    assert!(iterations > 0, "bootstrap needs at least one resample");
    let mut rng = SmallRng::seed_from_u64(seed);
    let n = diffs.len();
    let mut means: Vec<f64> = (0..iterations)
        .map(|_| (0..n).map(|_| diffs[rng.random_range(0..n)]).sum::<f64>() / n as f64)
        .collect();
    means.sort_by(f64::total_cmp);
    let tail = (1.0 - confidence) / 2.0;
    Interval {
        lo: quantile(&means, tail),
        hi: quantile(&means, 1.0 - tail),
    }
}

/// The `q` quantile of sorted, non-empty values, interpolating linearly between order statistics.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    let position = q * (sorted.len() - 1) as f64;
    let i = position.floor() as usize;
    match sorted.get(i + 1) {
        Some(next) => sorted[i] + position.fract() * (next - sorted[i]),
        None => sorted[i],
    }
}

/// What a comparison concluded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Regressed,
    Improved,
    Inconclusive,
}

/// A paired comparison of a candidate against a baseline on the tasks both ran.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    /// Tasks both ran.
    pub tasks: usize,
    pub flips: Flips,
    /// Mean per-task pass fraction on the shared tasks.
    pub base_rate: f64,
    pub candidate_rate: f64,
    /// candidate_rate − base_rate.
    pub diff: f64,
    /// Interval of `diff`: Newcombe's hybrid score interval for paired proportions when every
    /// task ran exactly one trial on both sides, else [`paired_bootstrap`] of the per-task
    /// pass-fraction differences.
    pub interval: Interval,
    /// `"mcnemar-exact"` (one trial per task on both sides) or `"paired-permutation"`.
    pub test: &'static str,
    pub p_value: f64,
    pub verdict: Verdict,
    /// The smallest |diff| this many tasks detect with 80% power at `confidence`.
    pub mde: f64,
    pub confidence: f64,
}

/// Compares `candidate` with `base` on the tasks both ran; `None` when they share no task.
///
/// The verdict is `Regressed` or `Improved` when p < 1 − confidence, by the sign of `diff`, else
/// `Inconclusive`. Paired throughout: each task is compared with itself, so task difficulty cancels.
pub fn compare(
    base: &[TaskOutcome],
    candidate: &[TaskOutcome],
    confidence: f64,
    seed: u64,
) -> Option<Comparison> {
    let candidate = by_task(candidate);
    let shared: Vec<(&str, Tally, Tally)> = by_task(base)
        .into_iter()
        .filter_map(|(task, b)| candidate.get(task).map(|c| (task, b, *c)))
        .collect();
    if shared.is_empty() {
        return None;
    }
    let mut flips = Flips::default();
    for (task, b, c) in &shared {
        let list = match (b.passes(), c.passes()) {
            (false, true) => &mut flips.fixed,
            (true, false) => &mut flips.broken,
            (true, true) => &mut flips.both_pass,
            (false, false) => &mut flips.both_fail,
        };
        list.push((*task).to_owned());
    }
    let base_fractions: Vec<f64> = shared.iter().map(|(_, b, _)| b.fraction()).collect();
    let candidate_fractions: Vec<f64> = shared.iter().map(|(_, _, c)| c.fraction()).collect();
    let diffs: Vec<f64> = shared
        .iter()
        .map(|(_, b, c)| c.fraction() - b.fraction())
        .collect();
    let base_rate = mean(&base_fractions);
    let candidate_rate = mean(&candidate_fractions);
    let diff = candidate_rate - base_rate;

    let one_trial = shared
        .iter()
        .all(|(_, b, c)| b.trials == 1 && c.trials == 1);
    let (test, p_value, interval) = if one_trial {
        (
            "mcnemar-exact",
            mcnemar_exact(flips.broken.len(), flips.fixed.len()),
            newcombe_paired(&flips, confidence),
        )
    } else {
        (
            "paired-permutation",
            paired_permutation_p(&diffs, RESAMPLES, seed),
            paired_bootstrap(&diffs, confidence, RESAMPLES, seed),
        )
    };
    let significant = p_value < 1.0 - confidence;
    let verdict = if significant && diff < 0.0 {
        Verdict::Regressed
    } else if significant && diff > 0.0 {
        Verdict::Improved
    } else {
        Verdict::Inconclusive
    };

    // MDE = (z_{1−α/2} + z_power)·sd/√tasks. An observed sd of 0 (identical or too few tasks)
    // says nothing about the noise, so it is floored at the largest sd of a pass fraction over
    // the mean trials per task and side, 0.5/√trials, and the MDE is never 0.
    let tasks = shared.len();
    let trials_per_side = shared
        .iter()
        .map(|(_, b, c)| b.trials + c.trials)
        .sum::<usize>() as f64
        / (2 * tasks) as f64;
    let observed_sd = sample_variance(&diffs).sqrt();
    let sd = if observed_sd > 0.0 {
        observed_sd
    } else {
        0.5 / trials_per_side.sqrt()
    };
    let mde = ((z_for(confidence) + z_for(2.0 * MDE_POWER - 1.0)) * sd / (tasks as f64).sqrt())
        .clamp(0.0, 1.0);

    Some(Comparison {
        tasks,
        flips,
        base_rate,
        candidate_rate,
        diff,
        interval,
        test,
        p_value,
        verdict,
        mde,
        confidence,
    })
}

/// Newcombe's hybrid score interval for a difference of paired proportions (Newcombe 1998,
/// method 10; as in Fagerland, Lydersen & Laake, *Statistical Analysis of Contingency Tables*,
/// ch. 8), for candidate − base: Wilson intervals of both rates combined by square-and-add,
/// corrected by their estimated correlation.
fn newcombe_paired(flips: &Flips, confidence: f64) -> Interval {
    let (both_pass, fixed, broken, both_fail) = (
        flips.both_pass.len(),
        flips.fixed.len(),
        flips.broken.len(),
        flips.both_fail.len(),
    );
    let n = both_pass + fixed + broken + both_fail;
    let candidate_passed = both_pass + fixed;
    let base_passed = both_pass + broken;
    let wilson_of = |passed| wilson(passed, n, confidence).expect("a shared task exists");
    let (c, b) = (wilson_of(candidate_passed), wilson_of(base_passed));
    let p1 = candidate_passed as f64 / n as f64;
    let p2 = base_passed as f64 / n as f64;
    let margins = [
        candidate_passed,
        n - candidate_passed,
        base_passed,
        n - base_passed,
    ];
    // The correlation of the two rates, with Newcombe's continuity correction on its numerator.
    let psi = if margins.contains(&0) {
        0.0
    } else {
        let numerator = (both_pass * both_fail) as f64 - (fixed * broken) as f64;
        let half_n = n as f64 / 2.0;
        let corrected = if numerator > half_n {
            numerator - half_n
        } else {
            numerator.min(0.0)
        };
        corrected / margins.iter().map(|&m| m as f64).product::<f64>().sqrt()
    };
    let combine = |x: f64, y: f64| (x * x + y * y - 2.0 * psi * x * y).max(0.0).sqrt();
    let estimate = p1 - p2;
    Interval {
        lo: (estimate - combine(p1 - c.lo, b.hi - p2)).max(-1.0),
        hi: (estimate + combine(p2 - b.lo, c.hi - p1)).min(1.0),
    }
}

fn percent(fraction: f64) -> f64 {
    fraction * 100.0
}

fn p_text(p: f64) -> String {
    if p < 1e-4 {
        "p<0.0001".into()
    } else {
        format!("p={p:.4}")
    }
}

/// The gate: fail when the candidate is worse by more than `max_drop` (a fraction: 0.05 is five
/// points) with the given confidence, i.e. the verdict is `Regressed` and the whole interval lies
/// below −max_drop. A significant drop whose interval reaches −max_drop is within tolerance.
/// Returns (failed, the reason for humans).
pub fn gate(cmp: &Comparison, max_drop: f64) -> (bool, String) {
    let ci = format!(
        "{}% CI {:.1} to {:.1}",
        (cmp.confidence * 1000.0).round() / 10.0,
        percent(cmp.interval.lo),
        percent(cmp.interval.hi)
    );
    let evidence = format!("{}, {}", p_text(cmp.p_value), cmp.test);
    let change = percent(cmp.diff.abs());
    let allowed = percent(max_drop);
    match cmp.verdict {
        Verdict::Regressed if cmp.interval.hi < -max_drop => (
            true,
            format!(
                "candidate is worse by {change:.1} points ({ci}), more than the allowed {allowed:.1} ({evidence})"
            ),
        ),
        Verdict::Regressed => (
            false,
            format!(
                "candidate is worse by {change:.1} points ({ci}), but not clearly by more than the allowed {allowed:.1} ({evidence})"
            ),
        ),
        Verdict::Improved => (
            false,
            format!("candidate is better by {change:.1} points ({ci}; {evidence})"),
        ),
        Verdict::Inconclusive => (
            false,
            format!(
                "no significant difference: {:+.1} points ({ci}; {evidence}); on {} tasks only a change of about {:.1} points or more is reliably detected",
                percent(cmp.diff),
                cmp.tasks,
                percent(cmp.mde)
            ),
        ),
    }
}

/// One row of a sample-size plan: this many trials per task needs this many tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PlanRow {
    pub trials: usize,
    pub tasks: usize,
}

/// How many tasks, for 1, 2, 3, 5 and 10 trials per task, a paired comparison needs to detect a
/// change of `effect` (a fraction: 0.1 is ten points) with `power` at `confidence`, judged from
/// the noise in `outcomes`. Empty when there are no trials or `effect` is not positive.
///
/// Each task contributes one difference of pass fractions, whose variance is
/// 2·var_between + 2·var_within/trials: var_between is the spread of true pass rates across
/// tasks (counted for both agents and uncorrelated between them, which one agent's outcomes
/// cannot contradict, so the plan errs large), var_within the mean Bernoulli variance p(1−p) of a
/// trial, averaged over `trials` on each side. The normal approximation then gives
///
/// ```text
/// tasks = ⌈(z_{1−α/2} + z_power)² · (2·var_between + 2·var_within/trials) / effect²⌉
/// ```
///
/// # Panics
/// When `power` is not in (0, 1).
pub fn plan(outcomes: &[TaskOutcome], effect: f64, power: f64, confidence: f64) -> Vec<PlanRow> {
    assert!(
        power > 0.0 && power < 1.0,
        "power must be in (0, 1), got {power}"
    );
    let tasks = by_task(outcomes);
    if tasks.is_empty() || effect.is_nan() || effect <= 0.0 {
        return Vec::new();
    }
    let fractions: Vec<f64> = tasks.values().map(|t| t.fraction()).collect();
    let overall = mean(&fractions);
    // Per task, p(1−p) is estimated without bias from m ≥ 2 trials as f(1−f)·m/(m−1), capped at
    // its maximum ¼; one trial cannot tell it from the spread between tasks, so such a task takes
    // the pooled p̄(1−p̄), an upper bound of the mean p(1−p).
    let within: Vec<f64> = tasks
        .values()
        .map(|t| {
            if t.trials >= 2 {
                let m = t.trials as f64;
                (t.fraction() * (1.0 - t.fraction()) * m / (m - 1.0)).min(0.25)
            } else {
                overall * (1.0 - overall)
            }
        })
        .collect();
    // The observed spread of fractions is the true spread plus each task's sampling noise.
    let noise: Vec<f64> = tasks
        .values()
        .zip(&within)
        .map(|(t, w)| w / t.trials as f64)
        .collect();
    let var_between = (sample_variance(&fractions) - mean(&noise)).max(0.0);
    let var_within = mean(&within);
    // Nothing observed varies (say every trial passed): assume the worst Bernoulli noise rather
    // than promise a one-task experiment.
    let var_within = if var_between + var_within > 0.0 {
        var_within
    } else {
        0.25
    };
    let z = z_for(confidence) + z_for(2.0 * power - 1.0);
    PLAN_TRIALS
        .iter()
        .map(|&trials| {
            let variance = 2.0 * var_between + 2.0 * var_within / trials as f64;
            PlanRow {
                trials,
                tasks: (z * z * variance / (effect * effect)).ceil() as usize,
            }
        })
        .collect()
}

/// Groups trial records into per-task outcomes for one agent, sorted by task. `infra_error`
/// records are not scored, so they are left out (a task with nothing else is absent).
pub fn outcomes_of(records: &[TrialRecord], agent: &str) -> Vec<TaskOutcome> {
    let mut tasks: BTreeMap<&str, Tally> = BTreeMap::new();
    for record in records
        .iter()
        .filter(|r| r.agent == agent && r.outcome != Outcome::InfraError)
    {
        let tally = tasks.entry(&record.task).or_default();
        tally.trials += 1;
        tally.passed += usize::from(record.outcome == Outcome::Pass);
    }
    tasks
        .into_iter()
        .map(|(task, t)| TaskOutcome {
            task: task.to_owned(),
            passed: t.passed,
            trials: t.trials,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(actual: f64, expected: f64, tolerance: f64) {
        assert!(
            (actual - expected).abs() <= tolerance,
            "{actual} is not within {tolerance} of {expected}"
        );
    }

    /// Tasks "t00", "t01", … with (passed, trials) each.
    fn tasks(counts: &[(usize, usize)]) -> Vec<TaskOutcome> {
        counts
            .iter()
            .enumerate()
            .map(|(i, &(passed, trials))| TaskOutcome {
                task: format!("t{i:02}"),
                passed,
                trials,
            })
            .collect()
    }

    #[test]
    fn z_matches_normal_quantiles() {
        // Φ⁻¹(0.975) = 1.959963985 (two-sided 95%).
        close(z_for(0.95), 1.959_963_985, 1e-6);
        // Φ⁻¹(0.9) = 1.281551566 (two-sided 80%).
        close(z_for(0.8), 1.281_551_566, 1e-6);
        // For 80% power the one-sided Φ⁻¹(0.8) = 0.841621234 is z_for(2·0.8 − 1) = z_for(0.6).
        close(z_for(2.0 * 0.8 - 1.0), 0.841_621_234, 1e-6);
        // Φ⁻¹(0.995) = 2.575829304: in the central region; Φ⁻¹(0.9995) = 3.290526731: in the tail.
        close(z_for(0.99), 2.575_829_304, 1e-6);
        close(z_for(0.999), 3.290_526_731, 1e-6);
        // Φ⁻¹(0.5) = 0.
        close(z_for(0.0), 0.0, 1e-12);
    }

    #[test]
    #[should_panic(expected = "confidence must be in [0, 1)")]
    fn confidence_of_one_is_refused() {
        z_for(1.0);
    }

    #[test]
    fn wilson_bounds() {
        // 3/6 at 95%: z² = 3.841459, denominator 1 + z²/6 = 1.640243, centre (0.5 + z²/12)/1.640243
        // = 0.5, half-width z·√(0.25/6 + z²/144)/1.640243 = 1.959964·0.261426/1.640243 = 0.312384.
        let i = wilson(3, 6, 0.95).unwrap();
        close(i.lo, 0.187_616, 1e-6);
        close(i.hi, 0.812_384, 1e-6);
        // 0/10: centre = half-width, so lo = 0 and hi = z²/(n + z²) = 3.841459/13.841459 = 0.277533.
        let i = wilson(0, 10, 0.95).unwrap();
        close(i.lo, 0.0, 1e-12);
        close(i.hi, 0.277_533, 1e-6);
        assert_eq!(wilson(0, 0, 0.95), None);
        assert_eq!(wilson(3, 2, 0.95), None);
    }

    #[test]
    fn pass_at_k_for_two_of_five() {
        // 1 − C(3,k)/C(5,k): k=1: 1 − 3/5 = 0.4; k=2: 1 − 3/10 = 0.7; k=3: 1 − 1/10 = 0.9;
        // k=4, 5: C(3,k) = 0, so 1.
        let expected = [0.4, 0.7, 0.9, 1.0, 1.0];
        for (k, want) in (1..=5).zip(expected) {
            close(pass_at_k(5, 2, k).unwrap(), want, 1e-12);
        }
        assert_eq!(pass_at_k(5, 2, 0), None);
        assert_eq!(pass_at_k(5, 2, 6), None);
        // No passes: C(n,k)/C(n,k) = 1, so 0.
        assert_eq!(pass_at_k(5, 0, 3), Some(0.0));
        // Large n stays finite: 1 − C(900,10)/C(1000,10) = 1 − Π_{i=0..9} (900−i)/(1000−i)
        // = 1 − (900·899·…·891)/(1000·999·…·991) = 0.653072.
        close(pass_at_k(1000, 100, 10).unwrap(), 0.653_072, 1e-6);
    }

    #[test]
    fn pass_hat_k_for_two_of_five() {
        // C(2,k)/C(5,k): k=1: 2/5 = 0.4; k=2: 1/10 = 0.1; k ≥ 3: C(2,k) = 0.
        let expected = [0.4, 0.1, 0.0, 0.0, 0.0];
        for (k, want) in (1..=5).zip(expected) {
            close(pass_hat_k(5, 2, k).unwrap(), want, 1e-12);
        }
        assert_eq!(pass_hat_k(5, 2, 0), None);
        assert_eq!(pass_hat_k(5, 6, 1), None);
    }

    #[test]
    fn means_over_tasks_skip_tasks_with_too_few_trials() {
        let outcomes = tasks(&[(2, 5), (5, 5), (1, 1)]);
        // k=2 uses the two 5-trial tasks: pass@2 = (0.7 + 1)/2 = 0.85, pass^2 = (0.1 + 1)/2 = 0.55.
        close(mean_pass_at_k(&outcomes, 2).unwrap(), 0.85, 1e-12);
        close(mean_pass_hat_k(&outcomes, 2).unwrap(), 0.55, 1e-12);
        // k=1 uses all three: (0.4 + 1 + 1)/3 = 0.8 for both.
        close(mean_pass_at_k(&outcomes, 1).unwrap(), 0.8, 1e-12);
        close(mean_pass_hat_k(&outcomes, 1).unwrap(), 0.8, 1e-12);
        assert_eq!(mean_pass_at_k(&outcomes, 6), None);
        assert_eq!(mean_pass_hat_k(&outcomes, 0), None);
    }

    #[test]
    fn pass_rate_is_wilson_with_one_trial_per_task() {
        let estimate = pass_rate(
            &tasks(&[(1, 1), (0, 1), (1, 1), (0, 1), (1, 1), (0, 1)]),
            0.95,
        )
        .unwrap();
        assert_eq!(estimate.method, "wilson");
        assert_eq!(
            (estimate.tasks, estimate.trials, estimate.passed),
            (6, 6, 3)
        );
        close(estimate.rate, 0.5, 1e-12);
        // As wilson(3, 6): 0.187616 to 0.812384.
        close(estimate.interval.lo, 0.187_616, 1e-6);
        close(estimate.interval.hi, 0.812_384, 1e-6);
        // A single task falls back to Wilson on its pooled trials.
        assert_eq!(pass_rate(&tasks(&[(3, 6)]), 0.95).unwrap().method, "wilson");
        assert_eq!(pass_rate(&[], 0.95), None);
        assert_eq!(pass_rate(&tasks(&[(0, 0)]), 0.95), None);
    }

    #[test]
    fn pass_rate_is_clustered_with_several_trials() {
        // Fractions [1, 0.5, 0]: mean 0.5, sample variance 0.25, variance of the mean 0.25/3, so
        // 0.25/(0.25/3) = 3 effective trials (of 6): Wilson(0.5, 3) = [0.125334, 0.874666].
        let estimate = pass_rate(&tasks(&[(2, 2), (1, 2), (0, 2)]), 0.95).unwrap();
        assert_eq!(estimate.method, "clustered");
        close(estimate.rate, 0.5, 1e-12);
        close(estimate.interval.lo, 0.125_334, 1e-6);
        close(estimate.interval.hi, 0.874_666, 1e-6);

        // 7 of 15 trials over 3 tasks (0/5, 2/5, 5/5): mean 7/15, sample variance 0.253333,
        // 0.248889/(0.253333/3) = 2.947368 effective trials: Wilson = [0.109776, 0.861280], not
        // 0-100%. At 80%: [0.179925, 0.777264].
        let seven = tasks(&[(0, 5), (2, 5), (5, 5)]);
        let estimate = pass_rate(&seven, 0.95).unwrap();
        close(estimate.rate, 7.0 / 15.0, 1e-12);
        close(estimate.interval.lo, 0.109_776, 1e-6);
        close(estimate.interval.hi, 0.861_280, 1e-6);
        let estimate = pass_rate(&seven, 0.8).unwrap();
        close(estimate.interval.lo, 0.179_925, 1e-6);
        close(estimate.interval.hi, 0.777_264, 1e-6);

        // Fractions [1, 0.5, 0.5, 0, 0]: mean 0.4, sample variance 0.175, 0.24/(0.175/5) =
        // 6.857143 effective trials (of 10): [0.140163, 0.731649].
        let estimate = pass_rate(&tasks(&[(2, 2), (1, 2), (1, 2), (0, 2), (0, 2)]), 0.95).unwrap();
        close(estimate.rate, 0.4, 1e-12);
        close(estimate.interval.lo, 0.140_163, 1e-6);
        close(estimate.interval.hi, 0.731_649, 1e-6);

        // Every task 1/2: the spread is 0, so the 8 pooled trials count: Wilson(4, 8) =
        // [0.215216, 0.784784], not the point 0.5.
        let estimate = pass_rate(&tasks(&[(1, 2), (1, 2), (1, 2), (1, 2)]), 0.95).unwrap();
        close(estimate.interval.lo, 0.215_216, 1e-6);
        close(estimate.interval.hi, 0.784_784, 1e-6);
    }

    #[test]
    fn mcnemar_exact_p() {
        // n = 9, P(X ≤ 1) = (C(9,0) + C(9,1))/2^9 = 10/512; p = 2·10/512 = 0.0390625.
        close(mcnemar_exact(8, 1), 0.039_062_5, 1e-12);
        close(mcnemar_exact(1, 8), 0.039_062_5, 1e-12);
        assert_eq!(mcnemar_exact(0, 0), 1.0);
        // n = 1: 2·P(X ≤ 0) = 2·½ = 1.
        close(mcnemar_exact(1, 0), 1.0, 1e-12);
        // n = 22: 2·(1 + 22 + 231 + 1540 + 7315 + 26334 + 74613)/2^22 = 220112/4194304 = 0.0524788.
        close(mcnemar_exact(16, 6), 0.052_478_790, 1e-9);
        // Far beyond where 2^−n underflows an f64, the tail is still a number.
        assert!(mcnemar_exact(1500, 1500) > 0.9);
    }

    #[test]
    fn permutation_p_is_exact_for_small_samples() {
        // Eight −1s and two 0s: only the 8 non-zero diffs are flipped, 2^8 = 256 assignments, and
        // only all −1 or all +1 reach |sum| = 8: p = 2/256 = 0.0078125.
        let diffs = [-1.0, -1.0, -1.0, -1.0, -1.0, -1.0, -1.0, -1.0, 0.0, 0.0];
        assert_eq!(paired_permutation_p(&diffs, 0, 1), 0.007_812_5);
        // [1, −1]: observed |sum| 0, which all 4 assignments reach.
        assert_eq!(paired_permutation_p(&[1.0, -1.0], 0, 1), 1.0);
        assert_eq!(paired_permutation_p(&[0.0, 0.0], 0, 1), 1.0);
        // [1/3, 1/3, 2/3]: |sum| = 4/3 is reached by all-plus and all-minus only (the others give
        // 2/3 or 0): 2/8 = 0.25, despite 1/3 + 1/3 + 2/3 not summing exactly in floating point.
        assert_eq!(
            paired_permutation_p(&[1.0 / 3.0, 1.0 / 3.0, 2.0 / 3.0], 0, 1),
            0.25
        );
        // 25 diffs of which 3 are non-zero are still enumerated exactly: 2/2^3 = 0.25.
        let mut sparse = vec![0.0; 22];
        sparse.extend([0.5, 0.5, 0.5]);
        assert_eq!(paired_permutation_p(&sparse, 0, 1), 0.25);
        // The largest enumerated case, 20 × +1: p = 2/2^20 exactly, seed and iterations unused.
        assert_eq!(paired_permutation_p(&[1.0; 20], 0, 1), 2.0 / 1_048_576.0);
    }

    #[test]
    fn permutation_p_samples_large_samples() {
        // 25 × +1: only 2 of 2^25 assignments reach |sum| = 25, so 999 draws almost surely hit
        // none and p = (0 + 1)/(999 + 1) = 0.001.
        assert_eq!(paired_permutation_p(&[1.0; 25], 999, 7), 0.001);
        // Balanced signs: every |sum| ≥ 1 = observed |sum| (25 odd terms), so all hit:
        // (999 + 1)/(999 + 1) = 1.
        let mut balanced = vec![1.0; 13];
        balanced.extend([-1.0; 12]);
        assert_eq!(paired_permutation_p(&balanced, 999, 7), 1.0);
        // Same seed, same answer.
        let noisy: Vec<f64> = (0..30).map(|i| (i % 7) as f64 / 3.0 - 0.9).collect();
        assert_eq!(
            paired_permutation_p(&noisy, 2000, 42),
            paired_permutation_p(&noisy, 2000, 42)
        );
    }

    #[test]
    fn bootstrap_is_deterministic_and_holds_the_mean() {
        let diffs = [-1.0, 0.0, -0.5, 0.5, -1.0, 0.0, -0.5, -1.0];
        // mean = −3.5/8 = −0.4375.
        let first = paired_bootstrap(&diffs, 0.95, 5000, 11);
        assert_eq!(first, paired_bootstrap(&diffs, 0.95, 5000, 11));
        assert!(first.lo < -0.4375 && -0.4375 < first.hi, "{first:?}");
        // A resampled mean never leaves [min, max].
        assert!(first.lo >= -1.0 && first.hi <= 0.5, "{first:?}");
        // All equal: zero width at that value, whatever the iterations.
        assert_eq!(
            paired_bootstrap(&[0.25; 4], 0.95, 0, 11),
            Interval { lo: 0.25, hi: 0.25 }
        );
    }

    #[test]
    fn quantile_interpolates_between_order_statistics() {
        // Positions q·(n − 1) on [0, 10, 20, 30]: 0.5 → 1.5 → 15; 1 → 3 → 30; 0 → 0.
        let sorted = [0.0, 10.0, 20.0, 30.0];
        close(quantile(&sorted, 0.5), 15.0, 1e-12);
        close(quantile(&sorted, 1.0), 30.0, 1e-12);
        close(quantile(&sorted, 0.0), 0.0, 1e-12);
    }

    #[test]
    fn all_pass_baseline_against_a_candidate_passing_two_of_ten() {
        let base = tasks(&[(3, 3); 10]);
        let mut counts = [(0, 3); 10];
        counts[0] = (3, 3);
        counts[1] = (3, 3);
        let candidate = tasks(&counts);
        let cmp = compare(&base, &candidate, 0.95, 1).unwrap();
        assert_eq!(cmp.tasks, 10);
        assert_eq!(cmp.test, "paired-permutation");
        assert_eq!(cmp.flips.both_pass, ["t00", "t01"]);
        assert_eq!(cmp.flips.broken.len(), 8);
        assert!(cmp.flips.fixed.is_empty() && cmp.flips.both_fail.is_empty());
        close(cmp.base_rate, 1.0, 1e-12);
        close(cmp.candidate_rate, 0.2, 1e-12);
        close(cmp.diff, -0.8, 1e-12);
        // Diffs: eight −1, two 0 → exact p = 2/2^8 = 0.0078125 < 0.05.
        assert_eq!(cmp.p_value, 0.007_812_5);
        assert_eq!(cmp.verdict, Verdict::Regressed);
        // Resampled means are −X/10 with X ~ Bin(10, 0.8): the 2.5% point of X is 5 (P(X ≤ 4) =
        // 0.006, P(X ≤ 5) = 0.033) and the 97.5% point is 10, so about [−1.0, −0.5].
        close(cmp.interval.lo, -1.0, 1e-12);
        close(cmp.interval.hi, -0.5, 0.05);
        // sd of diffs = √(10·0.8·0.2/9) = 0.421637; MDE = (1.959964 + 0.841621)·0.421637/√10
        // = 0.373545.
        close(cmp.mde, 0.373_545, 1e-6);

        let (failed, reason) = gate(&cmp, 0.0);
        assert!(failed);
        assert!(
            reason.starts_with("candidate is worse by 80.0 points (95% CI -100.0 to -"),
            "{reason}"
        );
        assert!(
            reason.ends_with("more than the allowed 0.0 (p=0.0078, paired-permutation)"),
            "{reason}"
        );
        // A drop of up to 60 points is tolerated: the interval reaches above −0.6.
        let (failed, reason) = gate(&cmp, 0.6);
        assert!(!failed);
        assert!(
            reason.contains("not clearly by more than the allowed 60.0"),
            "{reason}"
        );
    }

    #[test]
    fn one_flipped_task_is_inconclusive() {
        let base = tasks(&[(1, 1); 10]);
        let mut counts = [(1, 1); 10];
        counts[3] = (0, 1);
        let cmp = compare(&base, &tasks(&counts), 0.95, 1).unwrap();
        assert_eq!(cmp.test, "mcnemar-exact");
        assert_eq!(cmp.flips.broken, ["t03"]);
        // b = 1, c = 0: 2·P(X ≤ 0) with X ~ Bin(1, ½) = 1.
        assert_eq!(cmp.p_value, 1.0);
        assert_eq!(cmp.verdict, Verdict::Inconclusive);
        close(cmp.diff, -0.1, 1e-12);
        assert!(
            cmp.interval.lo < -0.1 && cmp.interval.hi > 0.0,
            "{:?}",
            cmp.interval
        );
        let (failed, reason) = gate(&cmp, 0.0);
        assert!(!failed);
        assert!(
            reason.starts_with("no significant difference: -10.0 points"),
            "{reason}"
        );

        // With three trials: one diff of −1, 2/2 sign assignments reach it: p = 1.
        let base = tasks(&[(3, 3); 10]);
        let mut counts = [(3, 3); 10];
        counts[3] = (0, 3);
        let cmp = compare(&base, &tasks(&counts), 0.95, 1).unwrap();
        assert_eq!(cmp.p_value, 1.0);
        assert_eq!(cmp.verdict, Verdict::Inconclusive);
    }

    #[test]
    fn identical_runs_are_inconclusive_with_p_one() {
        let one = tasks(&[(1, 1), (0, 1), (1, 1), (1, 1)]);
        let cmp = compare(&one, &one, 0.95, 3).unwrap();
        assert_eq!(
            (cmp.test, cmp.p_value, cmp.verdict),
            ("mcnemar-exact", 1.0, Verdict::Inconclusive)
        );
        assert_eq!(cmp.diff, 0.0);
        // Observed sd 0, so the floor 0.5/√1: MDE = (1.959964 + 0.841621)·0.5/√4 = 0.700396.
        close(cmp.mde, 0.700_396, 1e-5);

        let three = tasks(&[(3, 3), (1, 3), (0, 3), (2, 3)]);
        let cmp = compare(&three, &three, 0.95, 3).unwrap();
        assert_eq!(
            (cmp.test, cmp.p_value, cmp.verdict),
            ("paired-permutation", 1.0, Verdict::Inconclusive)
        );
        assert_eq!(cmp.interval, Interval { lo: 0.0, hi: 0.0 });
        // Floor 0.5/√3 = 0.288675: MDE = 2.801585·0.288675/√4 = 0.404374.
        close(cmp.mde, 0.404_374, 1e-5);
        assert!(!gate(&cmp, 0.0).0);
    }

    #[test]
    fn compare_uses_only_shared_tasks() {
        let base = tasks(&[(1, 1), (1, 1), (1, 1)]);
        let candidate = vec![TaskOutcome {
            task: "t01".into(),
            passed: 0,
            trials: 1,
        }];
        let cmp = compare(&base, &candidate, 0.95, 0).unwrap();
        assert_eq!(cmp.tasks, 1);
        assert_eq!(cmp.flips.broken, ["t01"]);
        let elsewhere = vec![TaskOutcome {
            task: "other".into(),
            passed: 1,
            trials: 1,
        }];
        assert_eq!(compare(&base, &elsewhere, 0.95, 0), None);
    }

    #[test]
    fn newcombe_interval_matches_the_published_example() {
        // Fagerland, Lydersen & Laake (2017), ch. 8, Cavo et al. (2012): 59 both, 6 first only,
        // 16 second only, 80 neither; estimate (65 − 75)/161 = −0.0621, 95% CI −0.1186 to −0.0046.
        // Here "first" is the candidate: 6 fixed, 16 broken.
        let mut counts = vec![(1, 1); 59];
        counts.extend([(0, 1); 6]);
        counts.extend([(1, 1); 16]);
        counts.extend([(0, 1); 80]);
        let base = tasks(&counts);
        let mut counts = vec![(1, 1); 59];
        counts.extend([(1, 1); 6]);
        counts.extend([(0, 1); 16]);
        counts.extend([(0, 1); 80]);
        let cmp = compare(&base, &tasks(&counts), 0.95, 0).unwrap();
        assert_eq!((cmp.flips.fixed.len(), cmp.flips.broken.len()), (6, 16));
        close(cmp.diff, -0.0621, 5e-5);
        close(cmp.interval.lo, -0.1186, 5e-5);
        close(cmp.interval.hi, -0.0046, 5e-5);
        // The exact test is more conservative: p = 0.0524788 (see mcnemar_exact_p).
        assert_eq!(cmp.verdict, Verdict::Inconclusive);
    }

    #[test]
    fn improvement_is_reported_and_passes_the_gate() {
        let base = tasks(&[(0, 1); 12]);
        let candidate = tasks(&[(1, 1); 12]);
        let cmp = compare(&base, &candidate, 0.95, 0).unwrap();
        // 12 fixed, 0 broken: 2·2^−12 = 0.000488.
        close(cmp.p_value, 2.0 / 4096.0, 1e-12);
        assert_eq!(cmp.verdict, Verdict::Improved);
        let (failed, reason) = gate(&cmp, 0.0);
        assert!(!failed);
        assert!(
            reason.starts_with("candidate is better by 100.0 points"),
            "{reason}"
        );
        assert_eq!(
            serde_json::to_value(cmp.verdict).unwrap(),
            serde_json::json!("improved")
        );
    }

    #[test]
    fn plan_from_within_task_noise_only() {
        // Two tasks at 1/2: within = min(0.25·2/1, 0.25) = 0.25; fractions equal, so
        // var_between = max(0, 0 − 0.25/2) = 0. (z_.975 + z_.8)² = 2.801585² = 7.848880, and
        // tasks = 7.848880·(2·0.25/trials)/0.1² = 392.44/trials: 393, 197 (196.22), 131 (130.81),
        // 79 (78.49), 40 (39.24).
        let rows = plan(&tasks(&[(1, 2), (1, 2)]), 0.1, 0.8, 0.95);
        let expected = [(1, 393), (2, 197), (3, 131), (5, 79), (10, 40)];
        let got: Vec<(usize, usize)> = rows.iter().map(|r| (r.trials, r.tasks)).collect();
        assert_eq!(got, expected);
    }

    #[test]
    fn plan_from_between_task_spread_only() {
        // Deterministic tasks [1, 0, 1, 0]: within 0; sample variance (4·0.25)/3 = 1/3 =
        // var_between. tasks = 7.848880·(2/3)/0.2² = 130.81 → 131, whatever the trials: repeating
        // a deterministic task teaches nothing.
        let rows = plan(&tasks(&[(3, 3), (0, 3), (3, 3), (0, 3)]), 0.2, 0.8, 0.95);
        assert!(rows.iter().all(|r| r.tasks == 131), "{rows:?}");
    }

    #[test]
    fn plan_is_monotone() {
        let outcomes = tasks(&[(3, 5), (5, 5), (1, 5), (0, 5), (4, 5), (2, 5)]);
        let small = plan(&outcomes, 0.05, 0.8, 0.95);
        let large = plan(&outcomes, 0.2, 0.8, 0.95);
        assert_eq!(small.len(), 5);
        for (s, l) in small.iter().zip(&large) {
            assert!(s.tasks > l.tasks, "{s:?} vs {l:?}");
        }
        for rows in [&small, &large] {
            assert!(
                rows.windows(2).all(|w| w[0].tasks >= w[1].tasks),
                "{rows:?}"
            );
        }
        assert!(small[0].tasks > small[4].tasks, "{small:?}");
        // Nothing varies: worst-case noise ¼, so 7.848880·(2·0.25)/0.1² = 392.44 → 393 at 1 trial.
        assert_eq!(
            plan(&tasks(&[(2, 2), (2, 2)]), 0.1, 0.8, 0.95)[0].tasks,
            393
        );
        assert!(plan(&outcomes, 0.0, 0.8, 0.95).is_empty());
        assert!(plan(&[], 0.1, 0.8, 0.95).is_empty());
    }

    fn record(task: &str, agent: &str, outcome: Outcome) -> TrialRecord {
        TrialRecord {
            task: task.into(),
            agent: agent.into(),
            trial: 1,
            outcome,
            passed: outcome == Outcome::Pass,
            score: None,
            metric: "delta".into(),
            status: None,
            error: None,
            infra_error: None,
            session_id: None,
            diff: None,
            verify: None,
            usage: None,
            duration_ms: 0,
            agent_duration_ms: None,
            phases: Vec::new(),
            started_at: String::new(),
            tampered: Vec::new(),
            invalid: None,
            reason: None,
            interrupted: false,
        }
    }

    #[test]
    fn outcomes_of_groups_by_task_without_infra_errors() {
        // An invalid trial counts as a trial that did not pass; an infra error is not counted.
        let records = [
            record("b", "x", Outcome::Pass),
            record("a", "x", Outcome::Invalid),
            record("b", "x", Outcome::Fail),
            record("b", "x", Outcome::InfraError),
            record("c", "x", Outcome::InfraError),
            record("a", "y", Outcome::Pass),
        ];
        let outcomes = outcomes_of(&records, "x");
        assert_eq!(
            outcomes,
            [
                TaskOutcome {
                    task: "a".into(),
                    passed: 0,
                    trials: 1
                },
                TaskOutcome {
                    task: "b".into(),
                    passed: 1,
                    trials: 2
                },
            ]
        );
    }
}
