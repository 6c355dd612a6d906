//! What the user asked to run, as the manifest records it, and the slice of it a shard runs.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// What the user asked to run. Recorded in the manifest, so `resume` can finish the same plan.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RunRequest {
    /// Agent names; empty means the suite's agents (or `oracle` and `noop`).
    pub agents: Vec<String>,
    /// Trials per (task, agent) pair (`--trials`); for a run in rounds, the rounds begun.
    pub trials: u32,
    /// Trials at once (`--jobs`).
    pub jobs: usize,
    /// Task ids to run (`--task`); empty means every task.
    pub tasks: Vec<String>,
    /// Run only tasks with one of these tags (`--tag`); empty means no filter.
    pub tags: Vec<String>,
    /// Where workspaces are created (`--workdir`).
    pub workdir: PathBuf,
    /// Prepared sources and workspace templates, reused across runs.
    pub cache: PathBuf,
    /// Keep the workspaces after the run (`--keep-workspaces`).
    pub keep_workspaces: bool,
    /// Keep what each CLI writes of its own in its trial's home (bundled skills, plugin
    /// installs, caches); pruned otherwise.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub keep_homes: bool,
    /// Run only this slice of the plan.
    pub shard: Option<Shard>,
    /// The `--agents` file the suite was loaded with.
    #[serde(default)]
    pub agents_file: Option<PathBuf>,
    /// Times an `infra_error` trial is run again; only the last attempt is recorded.
    #[serde(default)]
    pub retries: u32,
    /// Bytes the cache's templates may take after the run; the least recently used go first.
    #[serde(default)]
    pub cache_max: Option<u64>,
    /// Keep each gateway trial's model calls in its folder (`run --record`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub record: bool,
    /// Answer each gateway trial's model calls from this run's recording (`run --replay`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replay: Option<PathBuf>,
    /// `run --until-decided` / `--until-ci-width`: trials run in rounds, `trials` being the
    /// rounds begun, until the stopping rule holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sequential: Option<Sequential>,
}

/// A run in rounds: one more trial per task and agent each round, until the rule is met or
/// `max_trials` rounds ran. Recorded, so `resume` goes on from the last round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sequential {
    /// What stops the rounds.
    pub rule: StoppingRule,
    /// Rounds at most: trials per task and agent.
    pub max_trials: u32,
    /// Leave the lock's flaky tasks in the gate.
    #[serde(default)]
    pub include_flaky: bool,
}

/// When a run in rounds stops.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum StoppingRule {
    /// The sequential gate decided: `regressed` or `not regressed` within `margin`. Against the
    /// baseline run's same agent, or (no baseline) the run's first agent against its second.
    Decided {
        /// The run to compare with (`--baseline`); null compares the run's first agent with its second.
        baseline: Option<PathBuf>,
        /// `not regressed` means the candidate is not worse by this much: a fraction in (0, 1).
        margin: f64,
        /// The drop in pass rate (0..1) tolerated.
        max_drop: f64,
        /// The test's confidence (0.95 by default): each false claim stays under 1 − confidence.
        confidence: f64,
    },
    /// Every agent's pass-rate interval is at most `width` wide.
    CiWidth {
        /// The widest interval accepted, a fraction (0.1 for ±5 points).
        width: f64,
        /// The intervals' confidence level.
        confidence: f64,
    },
}

/// Slice `index` (1-based) of `total` of a plan: the trials whose key hashes to it.
///
/// Membership hashes the trial's `task\0agent\0trial` key, never its position in the plan, so
/// every machine computes the same slices and adding a task or an agent moves no other trial.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Shard {
    /// 1-based, at most `total`.
    pub index: u32,
    /// How many shards the plan is split into, at least 1.
    pub total: u32,
}

impl Shard {
    /// Whether the trial (task id, agent name, 1-based trial) belongs to this shard.
    pub fn contains(self, task: &str, agent: &str, trial: u32) -> bool {
        let digest = Sha256::digest(format!("{task}\0{agent}\0{trial}"));
        let mut head = [0u8; 8];
        head.copy_from_slice(&digest[..8]);
        u64::from_be_bytes(head) % u64::from(self.total) == u64::from(self.index - 1)
    }
}

impl fmt::Display for Shard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.index, self.total)
    }
}

/// Why a `--shard` value is not `I/N` with `1 <= I <= N`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShardParseError {
    /// The value is not of the form `I/N`.
    #[error("'{0}' is not of the form I/N (e.g. --shard 2/4)")]
    Form(String),
    /// I or N is not a whole number.
    #[error("'{0}': I and N must be whole numbers (e.g. --shard 2/4)")]
    Number(String),
    /// N is 0.
    #[error("'{0}': the shard count N must be at least 1 (e.g. --shard 2/4)")]
    ZeroTotal(String),
    /// I is 0 or greater than N.
    #[error("'{value}': the shard index must be between 1 and {total} (e.g. --shard 2/4)")]
    Index {
        /// The value given.
        value: String,
        /// Its N.
        total: u32,
    },
}

impl FromStr for Shard {
    type Err = ShardParseError;

    fn from_str(value: &str) -> Result<Self, Self::Err> {
        let (index, total) = value
            .split_once('/')
            .ok_or_else(|| ShardParseError::Form(value.into()))?;
        let number = |part: &str| {
            part.parse::<u32>()
                .map_err(|_| ShardParseError::Number(value.into()))
        };
        let (index, total) = (number(index)?, number(total)?);
        if total == 0 {
            return Err(ShardParseError::ZeroTotal(value.into()));
        }
        if !(1..=total).contains(&index) {
            return Err(ShardParseError::Index {
                value: value.into(),
                total,
            });
        }
        Ok(Self { index, total })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_parses_i_of_n_and_names_bad_values() {
        assert_eq!("2/4".parse(), Ok(Shard { index: 2, total: 4 }));
        assert_eq!("1/1".parse(), Ok(Shard { index: 1, total: 1 }));
        for bad in ["0/3", "4/3", "x", "1/0", "1/", "-1/3", "1/3/5", ""] {
            let err = bad.parse::<Shard>().unwrap_err().to_string();
            assert!(err.contains(&format!("'{bad}'")), "{bad}: {err}");
            assert!(err.contains("--shard 2/4"), "{bad}: {err}");
        }
    }

    #[test]
    fn each_trial_is_in_exactly_one_shard_and_the_slices_are_pinned() {
        let shards: Vec<Shard> = (1..=3).map(|index| Shard { index, total: 3 }).collect();
        for task in ["t0", "t1", "add-subtract"] {
            for trial in 1..=5 {
                let owners = shards
                    .iter()
                    .filter(|s| s.contains(task, "oracle", trial))
                    .count();
                assert_eq!(owners, 1, "{task} #{trial}");
            }
        }
        // Pinned: a change here reshuffles every user's shards between versions.
        let slice: Vec<u32> = (1..=6)
            .map(|trial| {
                shards
                    .iter()
                    .find(|s| s.contains("t0", "noop", trial))
                    .unwrap()
                    .index
            })
            .collect();
        assert_eq!(slice, [2, 2, 1, 1, 3, 1]);
    }
}
