//! The sequential gate: decide `regressed` / `not regressed` after every round of trials, with
//! error rates that hold however many rounds are looked at (see docs/decisions.md).
//!
//! A round gives every task one more trial on each side; `d = candidate − baseline` (−1, 0 or
//! +1) per task. The quantity tested is δ, the mean over the tasks of the per-task difference in
//! pass probability, i.e. the mean of a round's `d`s. Two betting e-processes run side by side:
//!
//! - **regression** tests H0: δ ≥ −max_drop with `z = −d − max_drop` (mean ≤ 0 under H0);
//! - **no regression** tests H1: δ ≤ −margin with `z = d + margin` (mean ≤ 0 under H1).
//!
//! Each multiplies its wealth by `∏ (1 + λ·z)` over a round's tasks, with one bet λ ≥ 0 per round
//! chosen from the earlier rounds only. The tasks of a round are independent trials with means
//! μᵢ, so the round's factor has expectation `∏ (1 + λμᵢ) ≤ (1 + λ·mean μ)ⁿ ≤ 1` under the null
//! (AM-GM; every factor is non-negative because λ stays below `1 / max |z|`): the wealth is a
//! non-negative supermartingale, and by Ville's inequality it ever reaches 1/α with probability
//! at most α. So `regressed` when δ ≥ −max_drop, and `not regressed` when δ ≤ −margin, are each
//! claimed falsely at most α of the time, whenever the run stops.

use std::collections::{BTreeMap, BTreeSet};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::store::{Outcome, TrialRecord};

/// How far a bet goes towards the largest safe one (`1 / max |z|`): a full bet can lose all the
/// wealth on one bad task.
const BET_CAP: f64 = 0.8;
/// The bet before any round: the process's prior is an effect of this size (in `z`), worth this
/// many task-trials, so round 1 counts without waiting for an estimate.
const PRIOR_MEAN: f64 = 0.15;
const PRIOR_WEIGHT: f64 = 10.0;

/// What the sequential gate tests: α for each claim, the tolerated drop, and the margin within
/// which `not regressed` is claimed.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct SequentialSpec {
    /// Probability of each false claim, `regressed` or `not regressed` (0.05 for 5%).
    pub alpha: f64,
    /// A drop in δ up to this fraction (0.05 is five points) is tolerated, not `regressed`.
    pub max_drop: f64,
    /// `not regressed` is claimed once δ > −margin, a fraction like `max_drop`.
    pub margin: f64,
}

/// Where the sequential gate stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SequentialDecision {
    /// δ < −max_drop: the candidate is worse.
    Regressed,
    /// δ > −margin: no regression as large as the margin.
    NotRegressed,
    /// Neither yet: run another round (or the cap was reached).
    Undecided,
}

/// The gate after some rounds: its decision, the round that decided it, and both wealths.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SequentialState {
    /// `Undecided` until one e-value reaches 1/α.
    pub decision: SequentialDecision,
    /// Rounds read (the deciding one, when decided).
    pub rounds: usize,
    /// The e-value against "no regression" (≥ 1/α: regressed).
    pub regression_evidence: f64,
    /// The e-value against "a regression of at least the margin" (≥ 1/α: not regressed).
    pub no_regression_evidence: f64,
}

/// One betting e-process over rounds: `z` has mean ≤ 0 under its null and lies in [lo, hi].
struct Bettor {
    log_wealth: f64,
    sum: f64,
    sum_sq: f64,
    count: f64,
    /// The largest safe bet: 1 / the largest loss a `z` can bring.
    max_bet: f64,
}

impl Bettor {
    fn new(lowest_z: f64) -> Self {
        Self {
            log_wealth: 0.0,
            sum: PRIOR_MEAN * PRIOR_WEIGHT,
            sum_sq: PRIOR_MEAN * PRIOR_MEAN * PRIOR_WEIGHT + 0.25 * PRIOR_WEIGHT,
            count: PRIOR_WEIGHT,
            max_bet: 1.0 / lowest_z.abs().max(1e-9),
        }
    }

    /// The bet for the next round: the plug-in Kelly fraction mean / second moment (GRAPA),
    /// from the rounds so far and the prior, never negative and below the safe cap.
    fn bet(&self) -> f64 {
        let mean = self.sum / self.count;
        let second = (self.sum_sq / self.count).max(1e-9);
        (mean / second).clamp(0.0, BET_CAP * self.max_bet)
    }

    fn round(&mut self, zs: &[f64]) {
        let bet = self.bet();
        for &z in zs {
            self.log_wealth += (1.0 + bet * z).ln();
            self.sum += z;
            self.sum_sq += z * z;
            self.count += 1.0;
        }
    }
}

/// Reads rounds in order (each a round's `d = candidate − baseline` per task, in [−1, 1]) and
/// stops at the first round where either wealth reaches 1/α; `Undecided` when none did.
/// Regressed wins a round where both cross (the conservative answer for a gate).
///
/// # Panics
/// When α is not in (0, 1), or max_drop or margin is not in [0, 1).
pub fn sequential(rounds: &[Vec<f64>], spec: SequentialSpec) -> SequentialState {
    assert!(spec.alpha > 0.0 && spec.alpha < 1.0, "alpha {}", spec.alpha);
    assert!(
        (0.0..1.0).contains(&spec.max_drop),
        "max_drop {}",
        spec.max_drop
    );
    assert!((0.0..1.0).contains(&spec.margin), "margin {}", spec.margin);
    let threshold = (1.0 / spec.alpha).ln();
    // z = −d − max_drop ≥ −1 − max_drop; z = d + margin ≥ −1 + margin.
    let mut regression = Bettor::new(1.0 + spec.max_drop);
    let mut no_regression = Bettor::new(1.0 - spec.margin);
    let mut state = SequentialState {
        decision: SequentialDecision::Undecided,
        rounds: 0,
        regression_evidence: 1.0,
        no_regression_evidence: 1.0,
    };
    for diffs in rounds {
        let against: Vec<f64> = diffs.iter().map(|d| -d - spec.max_drop).collect();
        let within: Vec<f64> = diffs.iter().map(|d| d + spec.margin).collect();
        regression.round(&against);
        no_regression.round(&within);
        state.rounds += 1;
        state.regression_evidence = regression.log_wealth.exp();
        state.no_regression_evidence = no_regression.log_wealth.exp();
        if regression.log_wealth >= threshold {
            state.decision = SequentialDecision::Regressed;
            break;
        }
        if no_regression.log_wealth >= threshold {
            state.decision = SequentialDecision::NotRegressed;
            break;
        }
    }
    state
}

/// The rounds of a paired comparison: round r holds, for each task both sides scored in their
/// trial r, `candidate − baseline` (−1, 0 or +1). Tasks in `left_out` (flaky ones) are skipped;
/// an unscored or interrupted trial leaves its task out of that round.
pub fn paired_rounds(
    (base, base_agent): (&[TrialRecord], &str),
    (candidate, candidate_agent): (&[TrialRecord], &str),
    rounds: u32,
    left_out: &BTreeSet<String>,
) -> Vec<Vec<f64>> {
    let scored = |records: &[TrialRecord], agent: &str| -> BTreeMap<(String, u32), f64> {
        records
            .iter()
            .filter(|r| {
                r.agent == agent
                    && r.outcome != Outcome::InfraError
                    && !r.interrupted
                    && !left_out.contains(&r.task)
            })
            .map(|r| {
                (
                    (r.task.clone(), r.trial),
                    f64::from(u8::from(r.outcome == Outcome::Pass)),
                )
            })
            .collect()
    };
    let (base, candidate) = (scored(base, base_agent), scored(candidate, candidate_agent));
    (1..=rounds)
        .map(|round| {
            candidate
                .iter()
                .filter(|((_, trial), _)| *trial == round)
                .filter_map(|(key, c)| base.get(key).map(|b| c - b))
                .collect()
        })
        .collect()
}

/// Trials per task a fixed design needs for a one-sided test at α to find a drop of `effect`
/// with `power`, when a round's mean difference has variance `round_variance`:
/// `⌈(z_{1−α} + z_power)² · V / effect²⌉` (the normal approximation `plan` uses).
pub fn fixed_trials(alpha: f64, power: f64, effect: f64, round_variance: f64) -> usize {
    let z = super::z_for(1.0 - 2.0 * alpha) + super::z_for(2.0 * power - 1.0);
    ((z * z * round_variance / (effect * effect)).ceil() as usize).max(1)
}

/// The fixed trials per task `plan`'s reasoning asks for to find a drop of `effect` with
/// `power` (one-sided at α) on these tasks: each task's Bernoulli variance p(1−p) on each side
/// from its observed fraction, or the worst case ¼ when nothing observed varies (as `plan`).
pub fn planned_fixed_trials(
    base: &[super::TaskOutcome],
    candidate: &[super::TaskOutcome],
    alpha: f64,
    power: f64,
    effect: f64,
) -> Option<usize> {
    let n = base.len();
    if n == 0 || effect <= 0.0 {
        return None;
    }
    let bernoulli = |o: &super::TaskOutcome| {
        let p = o.passed as f64 / o.trials.max(1) as f64;
        p * (1.0 - p)
    };
    let sum: f64 = base.iter().chain(candidate).map(bernoulli).sum();
    let per_task = if sum > 0.0 { sum / n as f64 } else { 0.5 };
    Some(fixed_trials(alpha, power, effect, per_task / n as f64))
}

/// The power of the fixed design a run in rounds is compared with (as `plan`'s default).
const FIXED_POWER: f64 = 0.8;

/// The two agents a sequential gate pairs, `(base, candidate)`: against a baseline run, the
/// run's (first) agent against the baseline's agent of that name, else the baseline's first;
/// within one run, its first agent against its second. A missing agent is `""`.
pub fn gate_sides(agents: &[String], baseline_agents: Option<&[String]>) -> (String, String) {
    let first = |names: &[String]| names.first().cloned().unwrap_or_default();
    match baseline_agents {
        Some(base) => {
            let candidate = first(agents);
            let base = if base.contains(&candidate) {
                candidate.clone()
            } else {
                first(base)
            };
            (base, candidate)
        }
        None => (first(agents), agents.get(1).cloned().unwrap_or_default()),
    }
}

/// The sequential gate after some rounds of a run in rounds, and what a fixed design would ask.
#[derive(Debug, Clone, PartialEq)]
pub struct GateReading {
    /// Decision and evidence after the rounds read.
    pub state: SequentialState,
    /// The candidate's trials in the rounds the gate read, each paired with a baseline trial.
    pub paired_trials: usize,
    /// Trials per task a fixed design (80% power to find a drop of the margin) asks for.
    pub fixed_trials: Option<usize>,
    /// The rounds stop here: the gate decided, or the sides hold fewer rounds than asked.
    pub stop: bool,
}

/// Reads rounds 1..=`round` of `base` against `candidate` (records and agent each) with the
/// sequential gate; tasks in `left_out` (flaky ones) count nowhere.
pub fn gate_after(
    base: (&[TrialRecord], &str),
    candidate: (&[TrialRecord], &str),
    round: u32,
    left_out: &BTreeSet<String>,
    spec: SequentialSpec,
) -> GateReading {
    let rounds = paired_rounds(base, candidate, round, left_out);
    let state = sequential(&rounds, spec);
    let paired_trials = rounds.iter().take(state.rounds).map(Vec::len).sum();
    let kept = |(records, agent): (&[TrialRecord], &str)| -> Vec<super::TaskOutcome> {
        super::outcomes_of(records, agent)
            .into_iter()
            .filter(|t| !left_out.contains(&t.task))
            .collect()
    };
    let fixed_trials = planned_fixed_trials(
        &kept(base),
        &kept(candidate),
        spec.alpha,
        FIXED_POWER,
        spec.margin,
    );
    let stop = state.decision != SequentialDecision::Undecided || round as usize > rounds.len();
    GateReading {
        state,
        paired_trials,
        fixed_trials,
        stop,
    }
}

/// Each agent's pass-rate interval width at `confidence` (1 when it has no scored trial), in
/// the order given, and whether every one is at most `target` (`run --until-ci-width`).
pub fn interval_widths(
    records: &[TrialRecord],
    agents: &[String],
    confidence: f64,
    target: f64,
) -> (Vec<(String, f64)>, bool) {
    let widths: Vec<(String, f64)> = agents
        .iter()
        .map(|agent| {
            let outcomes = super::outcomes_of(records, agent);
            let width = super::pass_rate(&outcomes, confidence)
                .map_or(1.0, |r| r.interval.hi - r.interval.lo);
            (agent.clone(), width)
        })
        .collect();
    let widest = widths.iter().map(|(_, w)| *w).fold(0.0f64, f64::max);
    (widths, widest <= target)
}

/// A simulated suite: each task's baseline pass probability; the candidate's is lower by `drop`.
#[derive(Debug, Clone)]
pub struct SimSuite {
    /// Each task's baseline pass probability, in [0, 1].
    pub base: Vec<f64>,
}

impl SimSuite {
    /// `tasks` tasks whose baseline pass probabilities are spread evenly over [lo, hi].
    pub fn spread(tasks: usize, lo: f64, hi: f64) -> Self {
        let base = (0..tasks)
            .map(|i| lo + (hi - lo) * i as f64 / (tasks.max(2) - 1) as f64)
            .collect();
        Self { base }
    }

    fn candidate(&self, drop: f64) -> Vec<f64> {
        self.base.iter().map(|p| (p - drop).max(0.0)).collect()
    }

    /// The candidate's true δ (clamping at 0 can make it smaller than `drop`).
    pub fn delta(&self, drop: f64) -> f64 {
        let candidate = self.candidate(drop);
        self.base
            .iter()
            .zip(&candidate)
            .map(|(b, c)| c - b)
            .sum::<f64>()
            / self.base.len() as f64
    }

    /// Variance of a round's mean difference.
    pub fn round_variance(&self, drop: f64) -> f64 {
        let n = self.base.len() as f64;
        self.base
            .iter()
            .zip(self.candidate(drop))
            .map(|(b, c)| b * (1.0 - b) + c * (1.0 - c))
            .sum::<f64>()
            / (n * n)
    }
}

/// What many simulated sequential runs did.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SimResult {
    /// Simulated gates run.
    pub runs: usize,
    /// Runs that ended `regressed`.
    pub regressed: usize,
    /// Runs that ended `not regressed`.
    pub not_regressed: usize,
    /// Runs still undecided at the round cap.
    pub undecided: usize,
    /// Mean trials per task and side the runs used.
    pub mean_trials: f64,
}

/// Simulates `runs` sequential gates of `suite` against a candidate `drop` lower on every task,
/// each stopping at a decision or after `max_trials` rounds. Seeded: the same arguments give
/// the same result.
pub fn simulate(
    suite: &SimSuite,
    drop: f64,
    spec: SequentialSpec,
    max_trials: usize,
    runs: usize,
    seed: u64,
) -> SimResult {
    let mut rng = SmallRng::seed_from_u64(seed);
    let candidate = suite.candidate(drop);
    let mut result = SimResult {
        runs,
        regressed: 0,
        not_regressed: 0,
        undecided: 0,
        mean_trials: 0.0,
    };
    let mut total = 0usize;
    for _ in 0..runs {
        // Rounds are drawn up front: the decision reads them in order and stops where it may.
        let rounds: Vec<Vec<f64>> = (0..max_trials)
            .map(|_| {
                suite
                    .base
                    .iter()
                    .zip(&candidate)
                    .map(|(&b, &c)| {
                        f64::from(u8::from(rng.random_bool(c)))
                            - f64::from(u8::from(rng.random_bool(b)))
                    })
                    .collect()
            })
            .collect();
        let state = sequential(&rounds, spec);
        total += state.rounds;
        match state.decision {
            SequentialDecision::Regressed => result.regressed += 1,
            SequentialDecision::NotRegressed => result.not_regressed += 1,
            SequentialDecision::Undecided => result.undecided += 1,
        }
    }
    result.mean_trials = total as f64 / runs as f64;
    result
}

/// One row of the simulation table (docs/measurement.md): the sequential gate at one drop, next
/// to the fixed design with the same α and the same power.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SimRow {
    /// The candidate's drop on every task, a fraction (0.1 is ten points).
    pub drop: f64,
    /// What the sequential runs did at this drop.
    pub result: SimResult,
    /// Trials per task a fixed design needs for the power the sequential gate reached
    /// (capped at 99%); `None` under no difference.
    pub fixed: Option<usize>,
}

/// The table's rows: no difference, then drops of 10, 20 and 30 points.
pub fn simulation_table(
    suite: &SimSuite,
    spec: SequentialSpec,
    max_trials: usize,
    runs: usize,
    seed: u64,
) -> Vec<SimRow> {
    [0.0, 0.1, 0.2, 0.3]
        .into_iter()
        .enumerate()
        .map(|(i, drop)| {
            let result = simulate(suite, drop, spec, max_trials, runs, seed + i as u64);
            let power = (result.regressed as f64 / runs as f64).min(0.99);
            let fixed = (drop > 0.0 && power > 0.5).then(|| {
                fixed_trials(
                    spec.alpha,
                    power,
                    -suite.delta(drop) - spec.max_drop,
                    suite.round_variance(drop),
                )
            });
            SimRow {
                drop,
                result,
                fixed,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPEC: SequentialSpec = SequentialSpec {
        alpha: 0.05,
        max_drop: 0.0,
        margin: 0.1,
    };

    #[test]
    fn a_task_broken_every_round_is_a_regression_within_a_few_rounds() {
        let round = {
            let mut d = vec![0.0; 10];
            d[3] = -1.0;
            d
        };
        let state = sequential(&vec![round; 10], SPEC);
        assert_eq!(state.decision, SequentialDecision::Regressed, "{state:?}");
        assert!(state.rounds <= 6, "{state:?}");
        let same = sequential(&vec![vec![0.0; 10]; 10], SPEC);
        assert_eq!(same.decision, SequentialDecision::NotRegressed, "{same:?}");
        assert!(same.rounds <= 6, "{same:?}");
    }

    #[test]
    fn no_rounds_and_mixed_rounds_stay_undecided() {
        assert_eq!(
            sequential(&[], SPEC).decision,
            SequentialDecision::Undecided
        );
        // Half the tasks better, half worse, every round: δ = 0 is neither below 0 nor clearly
        // above −0.1 within three rounds of four tasks.
        let mixed = vec![vec![1.0, -1.0, 1.0, -1.0]; 3];
        assert_eq!(
            sequential(&mixed, SPEC).decision,
            SequentialDecision::Undecided
        );
    }

    /// `agent`'s trials 1..=`rounds` of tasks t0..t9; `fails` says which (task, trial) fail.
    fn trials(agent: &str, rounds: u32, fails: impl Fn(usize, u32) -> bool) -> Vec<TrialRecord> {
        let mut records = Vec::new();
        for trial in 1..=rounds {
            for task in 0..10 {
                let mut record = TrialRecord::unscored(
                    &format!("t{task}"),
                    agent,
                    trial,
                    crate::store::RecordedMetric::Delta,
                    String::new(),
                );
                record.outcome = if fails(task, trial) {
                    Outcome::Fail
                } else {
                    Outcome::Pass
                };
                records.push(record);
            }
        }
        records
    }

    #[test]
    fn the_gate_pairs_the_baselines_same_agent_else_its_first_else_the_runs_two() {
        let names = |n: &[&str]| n.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let pair = |b: &str, c: &str| (b.to_owned(), c.to_owned());
        let base = names(&["old", "new"]);
        assert_eq!(
            gate_sides(&names(&["new"]), Some(&base)),
            pair("new", "new")
        );
        assert_eq!(gate_sides(&names(&["x"]), Some(&base)), pair("old", "x"));
        assert_eq!(gate_sides(&names(&["a", "b"]), None), pair("a", "b"));
        assert_eq!(gate_sides(&names(&["a"]), None), pair("a", ""));
    }

    #[test]
    fn each_outcome_of_the_gate_after_rounds() {
        let spec = SequentialSpec {
            alpha: 0.05,
            max_drop: 0.0,
            margin: 0.1,
        };
        let none = BTreeSet::new();
        let base = trials("base", 10, |_, _| false);
        let broken = trials("cand", 10, |task, _| task == 9);
        let regressed = gate_after((&base, "base"), (&broken, "cand"), 10, &none, spec);
        assert_eq!(regressed.state.decision, SequentialDecision::Regressed);
        assert!(regressed.stop);
        assert_eq!(regressed.paired_trials, 10 * regressed.state.rounds);
        assert!(
            regressed.fixed_trials.is_some_and(|n| n > 0),
            "{regressed:?}"
        );

        let same = trials("cand", 10, |_, _| false);
        let not_regressed = gate_after((&base, "base"), (&same, "cand"), 10, &none, spec);
        assert_eq!(
            not_regressed.state.decision,
            SequentialDecision::NotRegressed
        );
        assert!(not_regressed.stop);

        // One round of a small drop is evidence for neither claim: the rounds go on.
        let undecided = gate_after((&base, "base"), (&broken, "cand"), 1, &none, spec);
        assert_eq!(undecided.state.decision, SequentialDecision::Undecided);
        assert!(!undecided.stop);
        assert_eq!(undecided.paired_trials, 10);

        // The broken task left out (flaky): nothing is lost, and no trial of it is paired.
        let flaky = BTreeSet::from(["t9".to_owned()]);
        let without = gate_after((&base, "base"), (&broken, "cand"), 10, &flaky, spec);
        assert_eq!(without.state.decision, SequentialDecision::NotRegressed);
        assert_eq!(without.paired_trials, 9 * without.state.rounds);
    }

    #[test]
    fn interval_widths_meet_the_target_or_not() {
        let agents = vec!["a".to_owned(), "gone".to_owned()];
        let records = trials("a", 10, |task, trial| task < 5 && trial % 2 == 0);
        let (widths, met) = interval_widths(&records, &agents, 0.95, 1.0);
        assert_eq!(widths.len(), 2);
        assert!(widths[0].1 > 0.0 && widths[0].1 < 1.0, "{widths:?}");
        // An agent without a scored trial is as wide as can be, and a target of 1 still holds.
        assert_eq!(widths[1], ("gone".to_owned(), 1.0));
        assert!(met);
        let (_, met) = interval_widths(&records, &agents[..1], 0.95, widths[0].1 / 2.0);
        assert!(!met);
        let (_, met) = interval_widths(&records, &agents[..1], 0.95, widths[0].1);
        assert!(met);
    }

    /// The acceptance simulation: under no difference the false-`regressed` rate stays within α
    /// plus Monte Carlo error; at 20 points the gate has fixed-N's power with at most 60% of its
    /// trials.
    #[test]
    fn simulation_keeps_alpha_and_saves_trials() {
        let suite = SimSuite::spread(20, 0.35, 0.95);
        let runs = 2000;
        let rows = simulation_table(&suite, SPEC, 30, runs, 26);
        let null = &rows[0].result;
        let rate = null.regressed as f64 / runs as f64;
        // α + 3 binomial standard errors.
        let slack = 3.0 * (SPEC.alpha * (1.0 - SPEC.alpha) / runs as f64).sqrt();
        assert!(
            rate <= SPEC.alpha + slack,
            "false regressed {rate}: {null:?}"
        );
        let twenty = &rows[2];
        let fixed = twenty.fixed.expect("power above one half") as f64;
        assert!(
            twenty.result.mean_trials <= 0.6 * fixed,
            "20 points: {} mean trials vs fixed {fixed}: {twenty:?}",
            twenty.result.mean_trials
        );
        for row in &rows[1..] {
            assert!(row.result.regressed > row.result.not_regressed, "{row:?}");
        }
    }
}
