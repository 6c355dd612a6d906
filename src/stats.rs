//! Statistics for honest measurement of agents.
//!
//! A pass rate measured on a suite is a sample: a handful of tasks, a few trials each, drawn from a
//! noisy process. This module turns trial outcomes into numbers that say how far to trust them:
//!
//! - **pass rates with intervals**: [`wilson`] for independent trials, [`pass_rate`] for trials
//!   clustered in tasks, and the unbiased [`pass_at_k`] / [`pass_hat_k`] estimators;
//! - **paired comparison** of a baseline and a candidate on the tasks both ran ([`compare`]):
//!   across tasks, a sign-flip permutation test on per-task pass-fraction differences whose
//!   inversion is also the interval of the difference ([`sign_flip`]), so the two cannot disagree;
//!   within tasks, an exact Fisher test on each task's trial counts ([`fisher_exact`]), corrected
//!   for the number of tasks ([`holm`]); and the minimum detectable effect at this sample size;
//! - **a noise-aware CI gate** ([`gate`]): fail only on a drop that is significant *and* larger
//!   than the tolerance (or on more tasks broken outright than allowed), and say why in words;
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

mod sequential;
pub use sequential::{
    GateReading, SequentialDecision, SequentialSpec, SequentialState, SimResult, SimRow, SimSuite,
    fixed_trials, gate_after, gate_sides, interval_widths, paired_rounds, planned_fixed_trials,
    sequential, simulate, simulation_table,
};

/// Random sign assignments [`compare`] draws when enumerating them all is too much.
const RESAMPLES: usize = 10_000;
/// [`sign_flip`] enumerates sign assignments exactly (tasks with equal differences grouped, so
/// 500 tasks of which 480 did not change still count as few) up to this many combinations.
const EXACT_LIMIT: usize = 1 << 20;
/// The power [`Comparison::mde`] is computed for.
const MDE_POWER: f64 = 0.8;
/// Trials on each side a task needs before always -> never counts as broken outright: 1/1 -> 0/1
/// is one flip, as likely noise as not.
pub const OUTRIGHT_TRIALS: usize = 2;
/// The smallest change an inconclusive verdict's [`ToDecide`] plans for.
const MIN_EFFECT: f64 = 0.05;
/// Trial counts [`plan`] proposes.
const PLAN_TRIALS: [usize; 5] = [1, 2, 3, 5, 10];

/// A closed interval `[lo, hi]`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Interval {
    /// Lower bound, a fraction (0.8 is 80%, or +80 points for a difference).
    pub lo: f64,
    /// Upper bound, in the same unit as `lo`.
    pub hi: f64,
}

#[cfg(test)]
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
    /// Task name, as in the suite.
    pub task: String,
    /// Trials of this task that passed.
    pub passed: usize,
    /// Trials of this task that were scored; `passed` of them passed.
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
    /// Pass rate as a fraction in [0, 1]: passed/trials (`"wilson"`) or the mean per-task pass
    /// fraction (`"clustered"`).
    pub rate: f64,
    /// Two-sided interval of `rate` at the requested confidence.
    pub interval: Interval,
    /// `"wilson"` or `"clustered"`.
    pub method: &'static str,
    /// Tasks with at least one trial.
    pub tasks: usize,
    /// Trials counted, over all tasks.
    pub trials: usize,
    /// Trials that passed, over all tasks.
    pub passed: usize,
}

/// The interval of `second.rate − first.rate`, two independent pass rates, by Newcombe's
/// hybrid score method (his method 10, 1998): each rate's own interval (Wilson's, or the
/// clustered one of [`pass_rate`]) gives the distances
///
/// ```text
/// lo = d − √((p₂ − l₂)² + (u₁ − p₁)²),   hi = d + √((u₂ − p₂)² + (p₁ − l₁)²)
/// ```
///
/// Since √(a² + b²) ≤ a + b and each rate's interval lies in [0, 1], lo ≥ −1 and hi ≤ 1: a
/// difference of two proportions never leaves [−1, 1], as adding half-widths in quadrature did.
pub fn newcombe(first: &RateEstimate, second: &RateEstimate) -> Interval {
    let (p1, p2) = (first.rate, second.rate);
    let (i1, i2) = (first.interval, second.interval);
    let d = p2 - p1;
    Interval {
        lo: (d - ((p2 - i2.lo).powi(2) + (i1.hi - p1).powi(2)).sqrt()).max(-1.0),
        hi: (d + ((i2.hi - p2).powi(2) + (p1 - i1.lo).powi(2)).sqrt()).min(1.0),
    }
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
    /// Passed on both sides.
    pub both_pass: Vec<String>,
    /// Failed on both sides.
    pub both_fail: Vec<String>,
}

/// The exact two-sided McNemar test: with X ~ Bin(broken + fixed, ½), p = min(1, 2·P(X ≤
/// min(broken, fixed))). 1.0 when there are no discordant pairs. With one trial per task it is
/// the same test as [`sign_flip`] on the per-task differences.
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

/// ln(k!) for k in 0..=n.
fn ln_factorials(n: usize) -> Vec<f64> {
    let mut table = Vec::with_capacity(n + 1);
    table.push(0.0);
    for k in 1..=n {
        table.push(table[k - 1] + (k as f64).ln());
    }
    table
}

/// The two-sided Fisher exact test of a 2×2 table: `passed_a` of `trials_a` against `passed_b`
/// of `trials_b`. With both margins fixed the table follows a hypergeometric law; p sums the
/// probability of every table no more likely than the observed one (as R's `fisher.test`).
/// 1.0 when a side has no trials.
pub fn fisher_exact(passed_a: usize, trials_a: usize, passed_b: usize, trials_b: usize) -> f64 {
    assert!(
        passed_a <= trials_a && passed_b <= trials_b,
        "more passes than trials"
    );
    if trials_a == 0 || trials_b == 0 {
        return 1.0;
    }
    let n = trials_a + trials_b;
    let passes = passed_a + passed_b;
    let ln_fact = ln_factorials(n);
    let ln_choose = |n: usize, k: usize| ln_fact[n] - ln_fact[k] - ln_fact[n - k];
    // ln P(x of side a's trials pass), up to the constant −ln C(n, trials_a).
    let ln_p = |x: usize| ln_choose(passes, x) + ln_choose(n - passes, trials_a - x);
    let observed = ln_p(passed_a);
    // The tolerance keeps tables exactly as likely as the observed one counted despite rounding;
    // dividing by the total makes "every table counts" exactly 1.
    let (mut counted, mut total) = (0.0, 0.0);
    for x in passes.saturating_sub(trials_b)..=passes.min(trials_a) {
        let ln = ln_p(x);
        total += ln.exp();
        if ln <= observed + 1e-7 {
            counted += ln.exp();
        }
    }
    (counted / total).min(1.0)
}

/// Holm's step-down adjustment of `p_values` (returned in the same order): rejecting every
/// hypothesis whose adjusted p is below α keeps the chance of any false rejection among them
/// at most α.
pub fn holm(p_values: &[f64]) -> Vec<f64> {
    let m = p_values.len();
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_by(|&a, &b| p_values[a].total_cmp(&p_values[b]));
    let mut adjusted = vec![0.0; m];
    let mut running = 0.0_f64;
    for (rank, &i) in order.iter().enumerate() {
        running = running.max(((m - rank) as f64 * p_values[i]).min(1.0));
        adjusted[i] = running;
    }
    adjusted
}

/// The paired test across tasks and the interval it implies, from one set of sign assignments.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SignFlip {
    /// Two-sided p of mean difference 0.
    pub p_value: f64,
    /// Every mean difference δ the test does not reject (its p for differences − δ is at least
    /// 1 − confidence), so 0 lies in it exactly when p ≥ 1 − confidence. When no δ can be
    /// rejected (`powerless`), the span of the observed differences and 0.
    pub interval: Interval,
    /// Every sign assignment was counted; else `RESAMPLES` seeded random ones.
    pub exact: bool,
    /// The smallest p this many tasks can give (2/2^tasks when exact).
    pub min_p: f64,
    /// `min_p` is not below 1 − confidence: on this many tasks the test can never be significant.
    pub powerless: bool,
}

/// Sums of one sign assignment: A = Σ sᵢ·dᵢ, B = Σ sᵢ, and its probability under the null.
struct Assignment {
    sum: f64,
    signs: i64,
    weight: f64,
}

/// P(X = x) for X ~ Bin(m, ½), x in 0..=m. Exact (dyadic) while C(m, x) fits an f64's mantissa,
/// so small samples give exact p-values; in log space for groups too large for 2^−m.
fn binomial_half(m: usize) -> Vec<f64> {
    if m <= 1000 {
        let half_m = 0.5_f64.powi(m as i32);
        let mut choose = 1.0_f64;
        (0..=m)
            .map(|x| {
                if x > 0 {
                    choose = choose * (m - x + 1) as f64 / x as f64;
                }
                choose * half_m
            })
            .collect()
    } else {
        let ln_fact = ln_factorials(m);
        let ln_half_m = m as f64 * 0.5_f64.ln();
        (0..=m)
            .map(|x| (ln_fact[m] - ln_fact[x] - ln_fact[m - x] + ln_half_m).exp())
            .collect()
    }
}

/// Every sign assignment of `diffs` with its probability, grouping equal differences (x of a
/// group's m members flipped to + has probability C(m, x)/2^m); `None` when there are more than
/// [`EXACT_LIMIT`] combinations.
fn exact_assignments(diffs: &[f64]) -> Option<Vec<Assignment>> {
    let mut sorted = diffs.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mut groups: Vec<(f64, usize)> = Vec::new();
    for d in sorted {
        match groups.last_mut() {
            Some((value, count)) if *value == d => *count += 1,
            _ => groups.push((d, 1)),
        }
    }
    let combinations = groups
        .iter()
        .try_fold(1_usize, |acc, (_, m)| acc.checked_mul(m + 1))
        .filter(|c| *c <= EXACT_LIMIT)?;
    // Per group and x: (contribution to A, to B, probability).
    let parts: Vec<Vec<(f64, i64, f64)>> = groups
        .iter()
        .map(|&(value, m)| {
            let probabilities = binomial_half(m);
            (0..=m)
                .map(|x| {
                    let signs = 2 * x as i64 - m as i64;
                    (value * signs as f64, signs, probabilities[x])
                })
                .collect()
        })
        .collect();
    let mut all = Vec::with_capacity(combinations);
    for mut index in 0..combinations {
        let (mut sum, mut signs, mut weight) = (0.0, 0, 1.0);
        for part in &parts {
            let (a, b, w) = part[index % part.len()];
            index /= part.len();
            sum += a;
            signs += b;
            weight *= w;
        }
        all.push(Assignment { sum, signs, weight });
    }
    Some(all)
}

/// The observed assignment and `iterations` random ones, each weighing 1/(iterations + 1).
fn sampled_assignments(diffs: &[f64], iterations: usize, seed: u64) -> Vec<Assignment> {
    let weight = 1.0 / (iterations + 1) as f64;
    let mut rng = SmallRng::seed_from_u64(seed);
    let mut all = vec![Assignment {
        sum: diffs.iter().sum(),
        signs: diffs.len() as i64,
        weight,
    }];
    all.extend((0..iterations).map(|_| {
        let (mut sum, mut signs) = (0.0, 0);
        for d in diffs {
            if rng.random() {
                sum += d;
                signs += 1;
            } else {
                sum -= d;
                signs -= 1;
            }
        }
        Assignment { sum, signs, weight }
    }));
    all
}

/// The two-sided sign-flip permutation test of mean(diffs) == 0, and its inversion as the
/// interval of the mean.
///
/// Under the null each difference is as likely negated, so p is the share of sign assignments
/// whose |Σ sᵢ·dᵢ| reaches the observed |Σ dᵢ|: exact (grouped enumeration, see
/// [`EXACT_LIMIT`]) when feasible, else from `iterations` seeded random assignments plus the
/// observed one. With one trial per task (differences −1, 0, 1) this is the exact McNemar test.
///
/// The interval holds every δ the same test, on the same assignments, does not reject for
/// dᵢ − δ. Each assignment keeps counting on a closed range [ℓ, u] of δ around the mean (the
/// observed statistic |Σ dᵢ − nδ| grows fastest away from it), so the interval's ends are
/// weighted order statistics of those ranges' ends: no search, no second method to disagree
/// with the p-value. Beyond the observed range only the all-plus and all-minus assignments
/// count, so when 2/2^n is below 1 − confidence the interval lies within the observed
/// differences; when it is not, no δ is rejected at all and the interval is the span of the
/// differences and 0.
///
/// # Panics
/// When `diffs` is empty.
pub fn sign_flip(diffs: &[f64], confidence: f64, iterations: usize, seed: u64) -> SignFlip {
    check_confidence(confidence);
    assert!(!diffs.is_empty(), "sign-flip test of no differences");
    let alpha = 1.0 - confidence;
    let (assignments, exact) = match exact_assignments(diffs) {
        Some(all) => (all, true),
        None => (sampled_assignments(diffs, iterations, seed), false),
    };
    let n = diffs.len() as i64;
    // The observed sum exactly as the all-plus assignment computed it, so it ties with itself.
    let observed = assignments
        .iter()
        .find(|a| a.signs == n)
        .map_or_else(|| diffs.iter().sum(), |a| a.sum);
    // Summing in another order can round an exact tie a hair below the observed; the slack
    // keeps it counted.
    let slack = 1e-9 * diffs.iter().map(|d| d.abs()).sum::<f64>();
    let p_value: f64 = assignments
        .iter()
        .filter(|a| a.sum.abs() >= observed.abs() - slack)
        .map(|a| a.weight)
        .sum::<f64>()
        .min(1.0);

    // For δ below the mean the assignment counts while |A − Bδ| ≥ S − nδ, i.e. from
    // min((S − A)/(n − B), (S + A)/(n + B)) on; above it, up to the max of the two. All-plus
    // (B = n) and all-minus (B = −n) always count.
    let (s, nf) = (observed, n as f64);
    let ends: Vec<(f64, f64, f64)> = assignments
        .iter()
        .map(|a| {
            if a.signs == n || a.signs == -n {
                return (f64::NEG_INFINITY, f64::INFINITY, a.weight);
            }
            let t1 = (s - a.sum) / (nf - a.signs as f64);
            let t2 = (s + a.sum) / (nf + a.signs as f64);
            (t1.min(t2), t1.max(t2), a.weight)
        })
        .collect();
    // The first end at which the accumulated weight reaches α.
    let bound = |mut ends: Vec<(f64, f64)>| {
        ends.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut total = 0.0;
        for (end, weight) in ends {
            total += weight;
            if total >= alpha - 1e-12 {
                return end;
            }
        }
        f64::INFINITY
    };
    let lo = bound(ends.iter().map(|&(l, _, w)| (l, w)).collect());
    let hi = -bound(ends.iter().map(|&(_, u, w)| (-u, w)).collect());
    let min_p = if exact {
        2.0 * 0.5_f64.powi(diffs.len().min(2000) as i32)
    } else {
        1.0 / (iterations + 1) as f64
    };
    let powerless = !lo.is_finite() || !hi.is_finite();
    let mut interval = if powerless {
        let (low, high) = diffs
            .iter()
            .fold((0.0_f64, 0.0_f64), |(l, h), d| (l.min(*d), h.max(*d)));
        Interval { lo: low, hi: high }
    } else {
        Interval {
            lo: lo.max(-1.0),
            hi: hi.min(1.0),
        }
    };
    // A tie the p-value counted (with its slack) can miss 0 by a rounding error in the ends.
    if p_value >= alpha {
        interval.lo = interval.lo.min(0.0);
        interval.hi = interval.hi.max(0.0);
    }
    SignFlip {
        p_value,
        interval,
        exact,
        min_p,
        powerless,
    }
}

/// What a comparison found (its `verdict` in the JSON): the input of the gate. Not a trial's
/// [`crate::metric::Verdict`], the crate's one `Verdict`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Finding {
    /// A significant drop, or more tasks broken outright than allowed: the gate fails.
    Regressed,
    /// A significant gain and no regression.
    Improved,
    /// Neither: the data cannot tell; [`Comparison::to_decide`] says what would.
    Inconclusive,
}

/// One shared task: its trials on each side and the within-task test.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskComparison {
    /// Task name, as in the suite.
    pub task: String,
    /// Baseline trials of this task that passed.
    pub base_passed: usize,
    /// Baseline trials of this task.
    pub base_trials: usize,
    /// Candidate trials of this task that passed.
    pub candidate_passed: usize,
    /// Candidate trials of this task.
    pub candidate_trials: usize,
    /// Two-sided [`fisher_exact`] p of the two sides' trial counts.
    pub p_value: f64,
    /// `p_value` after [`holm`] over all shared tasks.
    pub adjusted_p: f64,
}

impl TaskComparison {
    fn base_fraction(&self) -> f64 {
        self.base_passed as f64 / self.base_trials as f64
    }

    fn candidate_fraction(&self) -> f64 {
        self.candidate_passed as f64 / self.candidate_trials as f64
    }

    /// candidate − base pass fraction.
    pub fn diff(&self) -> f64 {
        self.candidate_fraction() - self.base_fraction()
    }

    /// `t1 5/5 -> 0/5`.
    pub fn counts(&self) -> String {
        format!(
            "{} {}/{} -> {}/{}",
            self.task,
            self.base_passed,
            self.base_trials,
            self.candidate_passed,
            self.candidate_trials
        )
    }
}

/// A paired comparison of a candidate against a baseline on the tasks both ran.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    /// Tasks both ran.
    pub tasks: usize,
    /// Each shared task, sorted by task.
    pub per_task: Vec<TaskComparison>,
    /// Which tasks flipped between pass and fail (a task's pass: most of its trials passed).
    pub flips: Flips,
    /// Mean per-task pass fraction on the shared tasks, with its [`pass_rate`] interval.
    pub base_rate: f64,
    /// Interval of `base_rate`.
    pub base_interval: Interval,
    /// Mean per-task pass fraction of the candidate on the shared tasks.
    pub candidate_rate: f64,
    /// Interval of `candidate_rate`.
    pub candidate_interval: Interval,
    /// candidate_rate − base_rate.
    pub diff: f64,
    /// The test across tasks: `"paired-permutation"` ([`sign_flip`] on per-task differences).
    pub test: &'static str,
    /// Two-sided p of `test`: below 1 − confidence, `diff` is significant.
    pub p_value: f64,
    /// Interval of `diff`: the inversion of the same test (see [`SignFlip::interval`]).
    pub interval: Interval,
    /// The p-value counted every sign assignment; else seeded random ones (see [`SignFlip::exact`]).
    pub exact: bool,
    /// The smallest p this many tasks can give.
    pub min_p: f64,
    /// `min_p` is not below 1 − confidence: across tasks this comparison can never be significant.
    pub powerless: bool,
    /// Tasks whose pass fraction fell (`dropped`) or rose (`gained`) significantly within their
    /// own trials: Holm-adjusted Fisher p below 1 − confidence.
    pub dropped: Vec<String>,
    /// See `dropped`: tasks whose pass fraction rose significantly.
    pub gained: Vec<String>,
    /// Tasks broken outright: every baseline trial passed and no candidate trial did, with at
    /// least [`OUTRIGHT_TRIALS`] trials on each side (one flip of one trial is left to the tests).
    pub broken_outright: Vec<String>,
    /// Tasks fixed outright: no baseline trial passed and every candidate trial did.
    pub fixed_outright: Vec<String>,
    /// More tasks than this broken outright is a regression, whatever the tests say.
    pub max_broken: Option<usize>,
    /// What the tests found; [`gate`] decides from it.
    pub verdict: Finding,
    /// The smallest |diff| this many tasks detect with 80% power at `confidence`.
    pub mde: f64,
    /// With an inconclusive verdict: what [`plan`] says a comparison would need to decide.
    pub to_decide: Option<ToDecide>,
    /// Two-sided confidence level every test and interval here used (0.95 for 95%).
    pub confidence: f64,
}

/// The tasks × trials a comparison needs to detect a change of `effect` with `power`, from
/// [`plan`] on both sides' trials.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToDecide {
    /// The change to detect, a fraction (0.1 is ten points): the one seen, or five points when it is
    /// smaller.
    pub effect: f64,
    /// Probability of detecting `effect` (0.8 is 80%).
    pub power: f64,
    /// Tasks needed for each trials-per-task count [`plan`] tries.
    pub rows: Vec<PlanRow>,
}

impl ToDecide {
    /// `30 tasks x 1 trial, 21 x 2, ...`.
    pub fn text(&self) -> String {
        let rows: Vec<String> = self
            .rows
            .iter()
            .enumerate()
            .map(|(i, row)| match (i, row.trials) {
                (0, 1) => format!("{} tasks x 1 trial", row.tasks),
                (0, n) => format!("{} tasks x {n} trials", row.tasks),
                (_, n) => format!("{} x {n}", row.tasks),
            })
            .collect();
        format!(
            "to detect a {:.1}-point change with {:.0}% power it would take {} (tasks x trials per task, as `deltabench plan`)",
            self.effect * 100.0,
            self.power * 100.0,
            rows.join(", ")
        )
    }
}

impl Comparison {
    /// 1 − confidence.
    fn alpha(&self) -> f64 {
        1.0 - self.confidence
    }

    /// The test across tasks found a significant drop.
    pub fn paired_drop(&self) -> bool {
        self.p_value < self.alpha() && self.diff < 0.0
    }

    /// The test across tasks found a significant gain.
    pub fn paired_gain(&self) -> bool {
        self.p_value < self.alpha() && self.diff > 0.0
    }

    /// More tasks broken outright than `max_broken` allows.
    pub fn too_many_broken(&self) -> bool {
        self.max_broken
            .is_some_and(|max| self.broken_outright.len() > max)
    }

    /// Some task ran several trials on a side: the within-task tests can say something.
    pub fn within_tested(&self) -> bool {
        self.per_task
            .iter()
            .any(|t| t.base_trials > 1 || t.candidate_trials > 1)
    }

    /// The shared task named `task`.
    pub fn task(&self, task: &str) -> Option<&TaskComparison> {
        self.per_task.iter().find(|t| t.task == task)
    }
}

/// Compares `candidate` with `base` on the tasks both ran; `None` when they share no task.
///
/// Two tests, each at 1 − confidence: across tasks, [`sign_flip`] on the per-task differences of
/// pass fractions (task difficulty cancels, and the task is the unit, so it says whether the
/// change generalises over tasks, but a few tasks cannot reach significance); within tasks, a
/// [`fisher_exact`] test on each task's trial counts, [`holm`]-corrected over the shared tasks
/// (so one task going from 5/5 to 0/5 is evidence even on a 3-task suite). The verdict is
/// `Regressed` when either finds a significant drop, or when more than `max_broken` tasks are
/// broken outright; else `Improved` when either finds a significant gain; else `Inconclusive`.
pub fn compare(
    base: &[TaskOutcome],
    candidate: &[TaskOutcome],
    confidence: f64,
    max_broken: Option<usize>,
    seed: u64,
) -> Option<Comparison> {
    let candidate = by_task(candidate);
    let shared: Vec<SharedTask> = by_task(base)
        .into_iter()
        .filter_map(|(task, b)| candidate.get(task).map(|c| (task, b, *c)))
        .collect();
    if shared.is_empty() {
        return None;
    }
    let per_task = per_task(&shared);
    let within = Within::of(&per_task, 1.0 - confidence);
    let diffs: Vec<f64> = per_task.iter().map(TaskComparison::diff).collect();
    let base_rate = mean(&shared.iter().map(|s| s.1.fraction()).collect::<Vec<_>>());
    let candidate_rate = mean(&shared.iter().map(|s| s.2.fraction()).collect::<Vec<_>>());
    let diff = candidate_rate - base_rate;
    let paired = sign_flip(&diffs, confidence, RESAMPLES, seed);
    let too_many_broken = max_broken.is_some_and(|max| within.broken_outright.len() > max);
    let verdict = finding(
        paired.p_value < 1.0 - confidence,
        diff,
        &within,
        too_many_broken,
    );
    let to_decide =
        (verdict == Finding::Inconclusive).then(|| to_decide(&shared, diff, confidence));
    Some(Comparison {
        tasks: shared.len(),
        per_task,
        flips: flips(&shared),
        base_rate,
        base_interval: side_rate(&shared, |s| s.1, confidence),
        candidate_rate,
        candidate_interval: side_rate(&shared, |s| s.2, confidence),
        diff,
        test: "paired-permutation",
        p_value: paired.p_value,
        interval: paired.interval,
        exact: paired.exact,
        min_p: paired.min_p,
        powerless: paired.powerless,
        dropped: within.dropped,
        gained: within.gained,
        broken_outright: within.broken_outright,
        fixed_outright: within.fixed_outright,
        max_broken,
        verdict,
        mde: mde(&shared, &diffs, confidence),
        to_decide,
        confidence,
    })
}

/// A task both sides ran: its name and each side's tally (base, candidate).
type SharedTask<'a> = (&'a str, Tally, Tally);

/// Each shared task's flip of its majority outcome.
fn flips(shared: &[SharedTask]) -> Flips {
    let mut flips = Flips::default();
    for (task, b, c) in shared {
        let list = match (b.passes(), c.passes()) {
            (false, true) => &mut flips.fixed,
            (true, false) => &mut flips.broken,
            (true, true) => &mut flips.both_pass,
            (false, false) => &mut flips.both_fail,
        };
        list.push((*task).to_owned());
    }
    flips
}

/// Each shared task's counts and its within-task test, [`holm`]-corrected over the tasks.
fn per_task(shared: &[SharedTask]) -> Vec<TaskComparison> {
    let p_values: Vec<f64> = shared
        .iter()
        .map(|(_, b, c)| fisher_exact(b.passed, b.trials, c.passed, c.trials))
        .collect();
    shared
        .iter()
        .zip(p_values.iter().zip(holm(&p_values)))
        .map(|((task, b, c), (&p_value, adjusted_p))| TaskComparison {
            task: (*task).to_owned(),
            base_passed: b.passed,
            base_trials: b.trials,
            candidate_passed: c.passed,
            candidate_trials: c.trials,
            p_value,
            adjusted_p,
        })
        .collect()
}

/// What the tasks' own trials say, task by task (see the fields of [`Comparison`]).
struct Within {
    dropped: Vec<String>,
    gained: Vec<String>,
    broken_outright: Vec<String>,
    fixed_outright: Vec<String>,
}

impl Within {
    fn of(per_task: &[TaskComparison], alpha: f64) -> Self {
        let names = |keep: &dyn Fn(&TaskComparison) -> bool| -> Vec<String> {
            per_task
                .iter()
                .filter(|t| keep(t))
                .map(|t| t.task.clone())
                .collect()
        };
        let outright = |t: &TaskComparison| {
            t.base_trials >= OUTRIGHT_TRIALS && t.candidate_trials >= OUTRIGHT_TRIALS
        };
        Self {
            dropped: names(&|t| t.adjusted_p < alpha && t.diff() < 0.0),
            gained: names(&|t| t.adjusted_p < alpha && t.diff() > 0.0),
            broken_outright: names(&|t| {
                outright(t) && t.base_passed == t.base_trials && t.candidate_passed == 0
            }),
            fixed_outright: names(&|t| {
                outright(t) && t.base_passed == 0 && t.candidate_passed == t.candidate_trials
            }),
        }
    }
}

/// The verdict: a significant paired drop, a task dropping within its trials, or too many
/// broken outright is a regression; else a significant gain either way an improvement.
fn finding(significant: bool, diff: f64, within: &Within, too_many_broken: bool) -> Finding {
    if (significant && diff < 0.0) || !within.dropped.is_empty() || too_many_broken {
        Finding::Regressed
    } else if (significant && diff > 0.0) || !within.gained.is_empty() {
        Finding::Improved
    } else {
        Finding::Inconclusive
    }
}

/// One side's [`pass_rate`] interval over the shared tasks.
fn side_rate(shared: &[SharedTask], side: fn(&SharedTask) -> Tally, confidence: f64) -> Interval {
    let outcomes: Vec<TaskOutcome> = shared
        .iter()
        .map(|shared| {
            let tally = side(shared);
            TaskOutcome {
                task: shared.0.to_owned(),
                passed: tally.passed,
                trials: tally.trials,
            }
        })
        .collect();
    pass_rate(&outcomes, confidence)
        .expect("a shared task has trials")
        .interval
}

/// MDE = (z_{1−α/2} + z_power)·sd/√tasks. An observed sd of 0 (identical or too few tasks)
/// says nothing about the noise, so it is floored at the largest sd of a pass fraction over
/// the mean trials per task and side, 0.5/√trials, and the MDE is never 0.
fn mde(shared: &[SharedTask], diffs: &[f64], confidence: f64) -> f64 {
    let tasks = shared.len();
    let trials_per_side = shared
        .iter()
        .map(|(_, b, c)| b.trials + c.trials)
        .sum::<usize>() as f64
        / (2 * tasks) as f64;
    let observed_sd = sample_variance(diffs).sqrt();
    let sd = if observed_sd > 0.0 {
        observed_sd
    } else {
        0.5 / trials_per_side.sqrt()
    };
    ((z_for(confidence) + z_for(2.0 * MDE_POWER - 1.0)) * sd / (tasks as f64).sqrt())
        .clamp(0.0, 1.0)
}

/// What [`plan`] says an inconclusive comparison would need: to detect the change seen (or,
/// when there is hardly any, five points, `plan`'s default), on both sides' trials.
fn to_decide(shared: &[SharedTask], diff: f64, confidence: f64) -> ToDecide {
    let effect = if diff.abs() >= MIN_EFFECT {
        diff.abs()
    } else {
        MIN_EFFECT
    };
    let both: Vec<TaskOutcome> = shared
        .iter()
        .flat_map(|(task, b, c)| {
            [b, c].map(|tally| TaskOutcome {
                task: (*task).to_owned(),
                passed: tally.passed,
                trials: tally.trials,
            })
        })
        .collect();
    ToDecide {
        effect,
        power: MDE_POWER,
        rows: plan(&both, effect, MDE_POWER, confidence),
    }
}

/// Points; `+ 0.0` turns −0 into 0, so nothing prints "-0.0".
fn percent(fraction: f64) -> f64 {
    fraction * 100.0 + 0.0
}

/// `p=0.0123`, or `p<0.0001`.
pub fn p_text(p: f64) -> String {
    if p < 1e-4 {
        "p<0.0001".into()
    } else {
        format!("p={p:.4}")
    }
}

/// What the tasks that dropped significantly within their trials cost the pass rate: their
/// fraction changes summed over the shared tasks.
fn within_cost(cmp: &Comparison) -> f64 {
    cmp.dropped
        .iter()
        .filter_map(|name| cmp.task(name))
        .map(|t| -t.diff())
        .sum::<f64>()
        / cmp.tasks as f64
}

/// The rules of [`gate`] the comparison breaks, by the flag each comes from: `max_broken`
/// (tasks broken outright), `max_drop_across_tasks`, `max_drop_within_tasks`. Empty when the
/// gate passes.
pub fn failed_rules(cmp: &Comparison, max_drop: f64) -> Vec<&'static str> {
    let mut rules = Vec::new();
    if cmp.too_many_broken() {
        rules.push("max_broken");
    }
    if cmp.paired_drop() && cmp.interval.hi < -max_drop {
        rules.push("max_drop_across_tasks");
    }
    if !cmp.dropped.is_empty() && within_cost(cmp) > max_drop {
        rules.push("max_drop_within_tasks");
    }
    rules
}

/// The gate: fail when the candidate is worse by more than `max_drop` (a fraction: 0.05 is five
/// points) with the comparison's confidence, or breaks more tasks outright than its `max_broken`.
/// Returns (failed, the reason for humans).
///
/// A drop fails when
/// - the test across tasks finds it and its whole interval lies below −max_drop, or
/// - tasks dropped significantly within their own trials, and those tasks alone cost the pass
///   rate more than max_drop (their fraction changes summed over the shared tasks).
///
/// A significant drop within the tolerance passes, and says so.
pub fn gate(cmp: &Comparison, max_drop: f64) -> (bool, String) {
    let level = (cmp.confidence * 1000.0).round() / 10.0;
    // Signed: the interval is of a difference, as `compare` prints it.
    let ci = format!(
        "{level}% CI {:+.1} to {:+.1}",
        percent(cmp.interval.lo),
        percent(cmp.interval.hi)
    );
    let evidence = format!("{}, {}", p_text(cmp.p_value), cmp.test);
    let change = percent(cmp.diff.abs());
    let allowed = percent(max_drop);
    let counts = |names: &[String]| -> String {
        names
            .iter()
            .filter_map(|name| cmp.task(name))
            .map(TaskComparison::counts)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut failures = Vec::new();
    let mut tolerated = Vec::new();
    if cmp.too_many_broken() {
        failures.push(format!(
            "{} task(s) went from always passing to never passing ({}), more than --max-broken {}",
            cmp.broken_outright.len(),
            counts(&cmp.broken_outright),
            cmp.max_broken.unwrap_or_default()
        ));
    }
    if cmp.paired_drop() {
        let across = format!("candidate is worse by {change:.1} points ({ci})");
        if cmp.interval.hi < -max_drop {
            failures.push(format!(
                "{across}, more than the allowed {allowed:.1} ({evidence})"
            ));
        } else {
            tolerated.push(format!(
                "{across}, but not clearly by more than the allowed {allowed:.1} ({evidence})"
            ));
        }
    }
    if !cmp.dropped.is_empty() {
        let cost = within_cost(cmp);
        let within = format!(
            "{} dropped within its trials (Fisher exact, Holm-corrected over {} tasks, {} at most), costing {:.1} points",
            counts(&cmp.dropped),
            cmp.tasks,
            p_text(
                cmp.dropped
                    .iter()
                    .filter_map(|name| cmp.task(name))
                    .map(|t| t.adjusted_p)
                    .fold(0.0, f64::max)
            ),
            percent(cost)
        );
        if cost > max_drop {
            failures.push(format!("{within}, more than the allowed {allowed:.1}"));
        } else {
            tolerated.push(format!("{within}, within the allowed {allowed:.1}"));
        }
    }
    if !failures.is_empty() {
        return (true, failures.join("; "));
    }
    if !tolerated.is_empty() {
        return (false, tolerated.join("; "));
    }
    if cmp.paired_gain() {
        return (
            false,
            format!("candidate is better by {change:.1} points ({ci}; {evidence})"),
        );
    }
    let across = format!(
        "{:+.1} points ({ci}; {evidence}); on {} tasks only a change of about {:.1} points or more is reliably detected",
        percent(cmp.diff),
        cmp.tasks,
        percent(cmp.mde)
    );
    if cmp.gained.is_empty() {
        (false, format!("no significant difference: {across}"))
    } else {
        (
            false,
            format!(
                "{} improved within its trials; across tasks {across}",
                counts(&cmp.gained)
            ),
        )
    }
}

/// One row of a sample-size plan: this many trials per task needs this many tasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct PlanRow {
    /// Trials per task.
    pub trials: usize,
    /// Tasks needed with that many trials each.
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
    fn fisher_exact_p() {
        // 5/5 against 0/5: 5 passes among 10 trials; the observed table is one of the two most
        // extreme, each C(5,5)·C(5,0)/C(10,5) = 1/252: p = 2/252 = 0.0079365.
        close(fisher_exact(5, 5, 0, 5), 2.0 / 252.0, 1e-12);
        close(fisher_exact(0, 5, 5, 5), 2.0 / 252.0, 1e-12);
        // 5/5 against 2/5: 7 passes; side a holds 5, 4, 3 or 2 of them with probabilities
        // C(7,x)·C(3,5−x)/252 = 21, 105, 105, 21 (/252): p = (21 + 21)/252 = 1/6.
        close(fisher_exact(5, 5, 2, 5), 1.0 / 6.0, 1e-12);
        // One trial each side can never be significant.
        assert_eq!(fisher_exact(1, 1, 0, 1), 1.0);
        // 3/10 against 8/10: as R's fisher.test, p = 0.06978.
        close(fisher_exact(3, 10, 8, 10), 0.069_778_5, 1e-6);
        // Equal counts: the observed table is the most likely one, every table counts.
        close(fisher_exact(2, 4, 2, 4), 1.0, 1e-12);
        assert_eq!(fisher_exact(0, 0, 3, 5), 1.0);
    }

    #[test]
    fn holm_steps_down_and_stays_monotone() {
        // Sorted p 1/126, 1/6, 1: ×3, ×2, ×1 = 0.0238095, 0.333333, 1.
        let adjusted = holm(&[1.0 / 6.0, 1.0 / 126.0, 1.0]);
        close(adjusted[0], 1.0 / 3.0, 1e-12);
        close(adjusted[1], 3.0 / 126.0, 1e-12);
        assert_eq!(adjusted[2], 1.0);
        // [0.01, 0.04, 0.03]: 0.03, then max(0.03, 2·0.03) = 0.06, then max(0.06, 0.04) = 0.06.
        let adjusted = holm(&[0.01, 0.04, 0.03]);
        close(adjusted[0], 0.03, 1e-12);
        close(adjusted[1], 0.06, 1e-12);
        close(adjusted[2], 0.06, 1e-12);
        assert!(holm(&[]).is_empty());
    }

    /// The interval holds 0 exactly when the test does not reject.
    fn agrees(flip: &SignFlip, confidence: f64) {
        let not_significant = flip.p_value >= 1.0 - confidence;
        let holds_zero = flip.interval.lo <= 0.0 && 0.0 <= flip.interval.hi;
        assert_eq!(not_significant, holds_zero, "{flip:?} at {confidence}");
    }

    #[test]
    fn sign_flip_p_is_exact_and_its_interval_inverts_it() {
        // Eight −1s and two 0s: only all −1 or all +1 on the eight reach |sum| = 8, whatever the
        // zeros: 2·4/2^10 = 0.0078125. The interval: every δ whose centred diffs the test keeps;
        // the ends (checked by bisecting the test itself) are −1 and −0.5.
        let diffs = [-1.0, -1.0, -1.0, -1.0, -1.0, -1.0, -1.0, -1.0, 0.0, 0.0];
        let flip = sign_flip(&diffs, 0.95, 0, 1);
        assert!(flip.exact && !flip.powerless);
        assert_eq!(flip.p_value, 0.007_812_5);
        close(flip.interval.lo, -1.0, 1e-9);
        close(flip.interval.hi, -0.5, 1e-9);
        agrees(&flip, 0.95);
        // Eight −1, one +1, one 0: p = 0.0390625 (as McNemar 8 vs 1), interval [−1, −0.25].
        let mut diffs = vec![-1.0; 8];
        diffs.extend([1.0, 0.0]);
        let flip = sign_flip(&diffs, 0.95, 0, 1);
        close(flip.p_value, 0.039_062_5, 1e-12);
        close(flip.interval.lo, -1.0, 1e-9);
        close(flip.interval.hi, -0.25, 1e-9);
        // Mixed halves, mean −0.4375: p = 0.125, interval [−1, 0].
        let diffs = [-1.0, 0.0, -0.5, 0.5, -1.0, 0.0, -0.5, -1.0];
        let flip = sign_flip(&diffs, 0.95, 0, 1);
        close(flip.p_value, 0.125, 1e-12);
        close(flip.interval.lo, -1.0, 1e-9);
        assert_eq!(flip.interval.hi, 0.0);
        // Thirds over nine tasks: p = 17/32; [−0.555556, 0.25] at 95%, [−0.388889, 0.083333]
        // at 80%.
        let diffs = [
            -1.0 / 3.0,
            0.0,
            2.0 / 3.0,
            -1.0,
            0.0,
            0.0,
            -2.0 / 3.0,
            1.0 / 3.0,
            -1.0 / 3.0,
        ];
        let flip = sign_flip(&diffs, 0.95, 0, 1);
        close(flip.p_value, 17.0 / 32.0, 1e-12);
        close(flip.interval.lo, -5.0 / 9.0, 1e-9);
        close(flip.interval.hi, 0.25, 1e-9);
        let flip = sign_flip(&diffs, 0.8, 0, 1);
        close(flip.interval.lo, -7.0 / 18.0, 1e-9);
        close(flip.interval.hi, 1.0 / 12.0, 1e-9);
        // [1, −1]: observed |sum| 0, which all 4 assignments reach.
        assert_eq!(sign_flip(&[1.0, -1.0], 0.95, 0, 1).p_value, 1.0);
        // Nothing changed: p = 1 and the interval is the point 0.
        let flip = sign_flip(&[0.0; 8], 0.95, 0, 1);
        assert_eq!((flip.p_value, flip.interval), (1.0, Interval::point(0.0)));
        // [1/3, 1/3, 2/3]: only all-plus and all-minus reach |sum| = 4/3 despite the floating
        // point sum: 2/8.
        assert_eq!(
            sign_flip(&[1.0 / 3.0, 1.0 / 3.0, 2.0 / 3.0], 0.95, 0, 1).p_value,
            0.25
        );
        // 25 tasks, 3 of them changed: the 22 zeros are one group, so still exact: 2/2^3.
        let mut sparse = vec![0.0; 22];
        sparse.extend([0.5, 0.5, 0.5]);
        let flip = sign_flip(&sparse, 0.95, 0, 1);
        assert!(flip.exact);
        close(flip.p_value, 0.25, 1e-12);
        // 25 × +1 is one group: exact 2/2^25, and the interval is the point 1.
        let flip = sign_flip(&[1.0; 25], 0.95, 0, 1);
        assert!(flip.exact);
        close(flip.p_value, 2.0 / 33_554_432.0, 1e-18);
        assert_eq!(flip.interval, Interval::point(1.0));
    }

    #[test]
    fn sign_flip_with_one_trial_per_task_is_mcnemar() {
        for (broken, fixed, same) in [(8, 1, 1), (16, 6, 139), (3, 0, 2), (0, 0, 5), (2, 9, 40)] {
            let mut diffs = vec![-1.0; broken];
            diffs.extend(vec![1.0; fixed]);
            diffs.extend(vec![0.0; same]);
            let flip = sign_flip(&diffs, 0.95, 0, 1);
            assert!(flip.exact);
            close(flip.p_value, mcnemar_exact(broken, fixed), 1e-9);
            agrees(&flip, 0.95);
        }
    }

    #[test]
    fn sign_flip_samples_when_enumeration_is_too_large() {
        // 25 distinct positive diffs: 2^25 combinations, so 999 seeded draws; only all-plus or
        // all-minus reach the observed sum, which no draw almost surely is: p = 1/1000.
        let rising: Vec<f64> = (1..=25).map(|i| i as f64 / 25.0).collect();
        let flip = sign_flip(&rising, 0.95, 999, 7);
        assert!(!flip.exact);
        assert_eq!(flip.p_value, 0.001);
        assert_eq!(flip.min_p, 0.001);
        agrees(&flip, 0.95);
        let mean = rising.iter().sum::<f64>() / 25.0;
        assert!(flip.interval.lo < mean && mean < flip.interval.hi);
        assert!(flip.interval.lo >= 0.04 && flip.interval.hi <= 1.0);
        // Same seed, same answer; the interval and the test agree at every level.
        let noisy: Vec<f64> = (0..30).map(|i| (i % 7) as f64 / 3.0 - 0.9).collect();
        for confidence in [0.5, 0.8, 0.9, 0.95, 0.99] {
            let flip = sign_flip(&noisy, confidence, 2000, 42);
            assert_eq!(flip, sign_flip(&noisy, confidence, 2000, 42));
            agrees(&flip, confidence);
        }
    }

    #[test]
    fn sign_flip_on_few_tasks_is_powerless_and_says_so() {
        // Three tasks: the smallest p is 2/8 = 0.25, so no δ is ever rejected at 95% (nor at 80%:
        // 0.25 ≥ 0.2). The interval is the span of the diffs and 0, never an interval that
        // excludes 0 next to "not significant".
        for confidence in [0.95, 0.8] {
            let flip = sign_flip(&[-1.0, -0.6, 0.0], confidence, 0, 1);
            assert!(flip.powerless);
            assert_eq!(flip.min_p, 0.25);
            close(flip.p_value, 0.5, 1e-12);
            assert_eq!(flip.interval, Interval { lo: -1.0, hi: 0.0 });
            agrees(&flip, confidence);
        }
        let flip = sign_flip(&[-1.0; 3], 0.95, 0, 1);
        assert_eq!((flip.p_value, flip.powerless), (0.25, true));
        assert_eq!(flip.interval, Interval { lo: -1.0, hi: 0.0 });
        // Four tasks at 80%: 2/16 < 0.2, so the test can reject.
        assert!(!sign_flip(&[-1.0; 4], 0.8, 0, 1).powerless);
    }

    #[test]
    fn all_pass_baseline_against_a_candidate_passing_two_of_ten() {
        let base = tasks(&[(3, 3); 10]);
        let mut counts = [(0, 3); 10];
        counts[0] = (3, 3);
        counts[1] = (3, 3);
        let candidate = tasks(&counts);
        let cmp = compare(&base, &candidate, 0.95, None, 1).unwrap();
        assert_eq!(cmp.tasks, 10);
        assert_eq!(cmp.test, "paired-permutation");
        assert_eq!(cmp.flips.both_pass, ["t00", "t01"]);
        assert_eq!(cmp.flips.broken.len(), 8);
        assert_eq!(cmp.broken_outright.len(), 8);
        assert!(cmp.flips.fixed.is_empty() && cmp.flips.both_fail.is_empty());
        close(cmp.base_rate, 1.0, 1e-12);
        close(cmp.candidate_rate, 0.2, 1e-12);
        close(cmp.diff, -0.8, 1e-12);
        // Diffs: eight −1, two 0 → exact p = 2/2^8 = 0.0078125 < 0.05, interval [−1, −0.5].
        assert_eq!(cmp.p_value, 0.007_812_5);
        assert_eq!(cmp.verdict, Finding::Regressed);
        close(cmp.interval.lo, -1.0, 1e-9);
        close(cmp.interval.hi, -0.5, 1e-9);
        // Within tasks 3/3 → 0/3 is p = 0.1 each, 1 after Holm over 10: no single task proves it.
        close(cmp.per_task[2].p_value, 0.1, 1e-12);
        assert!(cmp.dropped.is_empty());
        // sd of diffs = √(10·0.8·0.2/9) = 0.421637; MDE = (1.959964 + 0.841621)·0.421637/√10
        // = 0.373545.
        close(cmp.mde, 0.373_545, 1e-6);

        let (failed, reason) = gate(&cmp, 0.0);
        assert!(failed);
        assert_eq!(
            reason,
            "candidate is worse by 80.0 points (95% CI -100.0 to -50.0), more than the allowed 0.0 (p=0.0078, paired-permutation)"
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
    fn one_task_broken_in_every_trial_regresses_a_three_task_suite() {
        // The reported case: 3 tasks × 5 trials; one task 5/5 → 0/5, another 5/5 → 2/5.
        let base = tasks(&[(5, 5); 3]);
        let candidate = tasks(&[(0, 5), (2, 5), (5, 5)]);
        for confidence in [0.95, 0.8] {
            let cmp = compare(&base, &candidate, confidence, None, 1).unwrap();
            // Across tasks 3 tasks cannot decide (p = 0.5, smallest possible 0.25) and the
            // interval says as much instead of excluding 0.
            close(cmp.p_value, 0.5, 1e-12);
            assert!(cmp.powerless);
            assert_eq!(cmp.interval, Interval { lo: -1.0, hi: 0.0 });
            // Within t00: Fisher 2/252, Holm ×3 = 0.0238 < α; t01: 1/6, ×2 = 1/3.
            close(cmp.per_task[0].adjusted_p, 6.0 / 252.0, 1e-12);
            close(cmp.per_task[1].adjusted_p, 1.0 / 3.0, 1e-12);
            assert_eq!(cmp.dropped, ["t00"]);
            assert_eq!(cmp.broken_outright, ["t00"]);
            assert_eq!(cmp.flips.broken, ["t00", "t01"]);
            assert_eq!(cmp.verdict, Finding::Regressed);
            close(cmp.candidate_interval.lo, 0.0, 0.2);
            assert!(cmp.candidate_interval.hi < 0.9, "{cmp:?}");
            let (failed, reason) = gate(&cmp, 0.0);
            assert!(failed, "{reason}");
            assert!(
                reason.starts_with("t00 5/5 -> 0/5 dropped within its trials (Fisher exact, Holm-corrected over 3 tasks, p=0.0238 at most), costing 33.3 points, more than the allowed 0.0"),
                "{reason}"
            );
        }
        // t00 alone costs 33.3 points: a 40-point tolerance lets it through, and says so.
        let cmp = compare(&base, &candidate, 0.95, None, 1).unwrap();
        let (failed, reason) = gate(&cmp, 0.4);
        assert!(!failed);
        assert!(reason.ends_with("within the allowed 40.0"), "{reason}");
    }

    #[test]
    fn max_broken_counts_tasks_that_went_from_always_to_never() {
        let base = tasks(&[(3, 3); 10]);
        let mut counts = [(3, 3); 10];
        counts[3] = (0, 3);
        counts[5] = (1, 3);
        let candidate = tasks(&counts);
        let cmp = compare(&base, &candidate, 0.95, None, 1).unwrap();
        // One task from always to never, one only worse: neither test can tell on 10 tasks.
        assert_eq!(cmp.broken_outright, ["t03"]);
        assert_eq!(cmp.verdict, Finding::Inconclusive);
        assert!(!gate(&cmp, 0.0).0);
        let cmp = compare(&base, &candidate, 0.95, Some(0), 1).unwrap();
        assert_eq!(cmp.verdict, Finding::Regressed);
        let (failed, reason) = gate(&cmp, 0.5);
        assert!(failed, "a tolerance for drops does not cover --max-broken");
        assert_eq!(
            reason,
            "1 task(s) went from always passing to never passing (t03 3/3 -> 0/3), more than --max-broken 0"
        );
        let cmp = compare(&base, &candidate, 0.95, Some(1), 1).unwrap();
        assert_eq!(cmp.verdict, Finding::Inconclusive);
    }

    #[test]
    fn newcombe_stays_inside_plus_minus_one_at_the_extremes() {
        let rate = |passed, trials| pass_rate(&tasks(&[(passed, trials)]), 0.95).unwrap();
        for n in [1, 3, 10, 100] {
            let (none, all) = (rate(0, n), rate(n, n));
            let down = newcombe(&all, &none);
            let up = newcombe(&none, &all);
            assert!(down.lo >= -1.0 && up.hi <= 1.0, "{n}: {down:?} {up:?}");
            // One trial a side cannot exclude no change; three can.
            assert_eq!(down.hi < 0.0, n >= 3, "{n}: {down:?}");
            close(down.lo, -up.hi, 1e-12);
        }
        // 10/10 -> 0/10: Wilson [0.7225, 1] and [0, 0.2775], so exactly −1 to −1 + 0.2775·√2.
        let down = newcombe(&rate(10, 10), &rate(0, 10));
        assert_eq!(down.lo, -1.0);
        close(down.hi, -1.0 + 2.0_f64.sqrt() * 0.277_533, 1e-5);
        // Newcombe's own example (1998, table II, 56/70 vs 48/80): 0.0524 to 0.3339.
        let a = RateEstimate {
            rate: 56.0 / 70.0,
            interval: wilson(56, 70, 0.95).unwrap(),
            method: "wilson",
            tasks: 1,
            trials: 70,
            passed: 56,
        };
        let b = RateEstimate {
            rate: 48.0 / 80.0,
            interval: wilson(48, 80, 0.95).unwrap(),
            method: "wilson",
            tasks: 1,
            trials: 80,
            passed: 48,
        };
        let i = newcombe(&b, &a);
        close(i.lo, 0.0524, 5e-4);
        close(i.hi, 0.3339, 5e-4);
    }

    #[test]
    fn broken_outright_needs_two_trials_a_side_and_names_its_rule() {
        // 1/1 -> 0/1 is one flip: not broken outright, so a default --max-broken 0 passes it.
        let mut counts = [(1, 1); 10];
        counts[3] = (0, 1);
        let cmp = compare(&tasks(&[(1, 1); 10]), &tasks(&counts), 0.95, Some(0), 1).unwrap();
        assert!(cmp.broken_outright.is_empty());
        assert_eq!(cmp.verdict, Finding::Inconclusive);
        assert!(failed_rules(&cmp, 0.0).is_empty());
        // 2/2 -> 0/2 is.
        let mut counts = [(2, 2); 10];
        counts[3] = (0, 2);
        let cmp = compare(&tasks(&[(2, 2); 10]), &tasks(&counts), 0.95, Some(0), 1).unwrap();
        assert_eq!(cmp.broken_outright, ["t03"]);
        assert_eq!(cmp.verdict, Finding::Regressed);
        assert_eq!(failed_rules(&cmp, 0.5), ["max_broken"]);
        assert!(cmp.to_decide.is_none());
    }

    #[test]
    fn an_inconclusive_comparison_says_what_would_decide_it() {
        let mut counts = [(3, 3); 10];
        counts[5] = (1, 3);
        let base = tasks(&[(3, 3); 10]);
        let cmp = compare(&base, &tasks(&counts), 0.95, Some(0), 1).unwrap();
        assert_eq!(cmp.verdict, Finding::Inconclusive);
        let plan_rows = {
            let mut both = base.clone();
            both.extend(tasks(&counts));
            plan(&both, 2.0 / 30.0, 0.8, 0.95)
        };
        let to_decide = cmp.to_decide.as_ref().unwrap();
        close(to_decide.effect, 2.0 / 30.0, 1e-12);
        assert_eq!(to_decide.rows, plan_rows);
        assert!(
            to_decide
                .text()
                .starts_with("to detect a 6.7-point change with 80% power it would take "),
            "{}",
            to_decide.text()
        );
        // Identical sides: nothing seen, so plan's default five points.
        let cmp = compare(&base, &base, 0.95, Some(0), 1).unwrap();
        close(cmp.to_decide.unwrap().effect, 0.05, 1e-12);
    }

    #[test]
    fn one_flipped_task_is_inconclusive() {
        let base = tasks(&[(1, 1); 10]);
        let mut counts = [(1, 1); 10];
        counts[3] = (0, 1);
        let cmp = compare(&base, &tasks(&counts), 0.95, None, 1).unwrap();
        assert_eq!(cmp.flips.broken, ["t03"]);
        assert!(!cmp.within_tested());
        // b = 1, c = 0: 2·P(X ≤ 0) with X ~ Bin(1, ½) = 1.
        assert_eq!(cmp.p_value, 1.0);
        assert_eq!(cmp.verdict, Finding::Inconclusive);
        close(cmp.diff, -0.1, 1e-12);
        close(cmp.interval.lo, -1.0 / 3.0, 1e-9);
        assert_eq!(cmp.interval.hi, 0.0);
        let (failed, reason) = gate(&cmp, 0.0);
        assert!(!failed);
        assert!(
            reason.starts_with("no significant difference: -10.0 points (95% CI -33.3 to +0.0"),
            "{reason}"
        );

        // With three trials: one diff of −1, 2/2 sign assignments reach it: p = 1.
        let base = tasks(&[(3, 3); 10]);
        let mut counts = [(3, 3); 10];
        counts[3] = (0, 3);
        let cmp = compare(&base, &tasks(&counts), 0.95, None, 1).unwrap();
        assert_eq!(cmp.p_value, 1.0);
        assert_eq!(cmp.verdict, Finding::Inconclusive);
    }

    #[test]
    fn identical_runs_are_inconclusive_with_p_one() {
        let one = tasks(&[(1, 1), (0, 1), (1, 1), (1, 1)]);
        let cmp = compare(&one, &one, 0.95, Some(0), 3).unwrap();
        assert_eq!(
            (cmp.test, cmp.p_value, cmp.verdict),
            ("paired-permutation", 1.0, Finding::Inconclusive)
        );
        assert_eq!(cmp.diff, 0.0);
        // Observed sd 0, so the floor 0.5/√1: MDE = (1.959964 + 0.841621)·0.5/√4 = 0.700396.
        close(cmp.mde, 0.700_396, 1e-5);

        let three = tasks(&[(3, 3), (1, 3), (0, 3), (2, 3)]);
        let cmp = compare(&three, &three, 0.95, Some(0), 3).unwrap();
        assert_eq!((cmp.p_value, cmp.verdict), (1.0, Finding::Inconclusive));
        assert!(cmp.per_task.iter().all(|t| t.p_value == 1.0));
        assert!(cmp.dropped.is_empty() && cmp.broken_outright.is_empty());
        // Four tasks: powerless at 95% (2/16 ≥ 0.05), so the span of the diffs and 0: the point 0.
        assert_eq!(cmp.interval, Interval { lo: 0.0, hi: 0.0 });
        // Floor 0.5/√3 = 0.288675: MDE = 2.801585·0.288675/√4 = 0.404374.
        close(cmp.mde, 0.404_374, 1e-5);
        let (failed, reason) = gate(&cmp, 0.0);
        assert!(!failed);
        assert!(reason.starts_with("no significant difference"), "{reason}");
    }

    #[test]
    fn compare_uses_only_shared_tasks() {
        let base = tasks(&[(1, 1), (1, 1), (1, 1)]);
        let candidate = vec![TaskOutcome {
            task: "t01".into(),
            passed: 0,
            trials: 1,
        }];
        let cmp = compare(&base, &candidate, 0.95, None, 0).unwrap();
        assert_eq!(cmp.tasks, 1);
        assert_eq!(cmp.flips.broken, ["t01"]);
        let elsewhere = vec![TaskOutcome {
            task: "other".into(),
            passed: 1,
            trials: 1,
        }];
        assert_eq!(compare(&base, &elsewhere, 0.95, None, 0), None);
    }

    #[test]
    fn improvement_is_reported_and_passes_the_gate() {
        let base = tasks(&[(0, 1); 12]);
        let candidate = tasks(&[(1, 1); 12]);
        let cmp = compare(&base, &candidate, 0.95, None, 0).unwrap();
        // 12 fixed, 0 broken: 2·2^−12 = 0.000488.
        close(cmp.p_value, 2.0 / 4096.0, 1e-12);
        assert_eq!(cmp.verdict, Finding::Improved);
        assert_eq!(cmp.interval, Interval::point(1.0));
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

        // One task fixed in all five trials of a three-task suite: improved within its trials.
        let cmp = compare(
            &tasks(&[(0, 5), (5, 5), (5, 5)]),
            &tasks(&[(5, 5), (5, 5), (5, 5)]),
            0.95,
            None,
            0,
        )
        .unwrap();
        assert_eq!(cmp.verdict, Finding::Improved);
        assert_eq!(
            (cmp.gained.as_slice(), cmp.fixed_outright.as_slice()),
            (&["t00".to_owned()][..], &["t00".to_owned()][..])
        );
        let (failed, reason) = gate(&cmp, 0.0);
        assert!(!failed);
        assert!(
            reason.starts_with(
                "t00 0/5 -> 5/5 improved within its trials; across tasks +33.3 points"
            ),
            "{reason}"
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

    #[test]
    fn the_verdict_is_a_regression_on_any_drop_else_an_improvement_on_any_gain() {
        let within = |dropped: &[&str], gained: &[&str]| Within {
            dropped: dropped.iter().map(|s| (*s).to_owned()).collect(),
            gained: gained.iter().map(|s| (*s).to_owned()).collect(),
            broken_outright: Vec::new(),
            fixed_outright: Vec::new(),
        };
        let none = within(&[], &[]);
        assert_eq!(finding(true, -0.1, &none, false), Finding::Regressed);
        assert_eq!(finding(true, 0.1, &none, false), Finding::Improved);
        assert_eq!(finding(false, -0.1, &none, false), Finding::Inconclusive);
        assert_eq!(finding(false, 0.0, &none, true), Finding::Regressed);
        // A task that dropped within its trials outweighs a paired gain and one that rose.
        let both = within(&["t1"], &["t2"]);
        assert_eq!(finding(true, 0.1, &both, false), Finding::Regressed);
        assert_eq!(
            finding(false, 0.0, &within(&[], &["t2"]), false),
            Finding::Improved
        );
    }

    fn record(task: &str, agent: &str, outcome: Outcome) -> TrialRecord {
        let mut record = TrialRecord::unscored(
            task,
            agent,
            1,
            crate::store::RecordedMetric::Delta,
            String::new(),
        );
        record.outcome = outcome;
        record
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
