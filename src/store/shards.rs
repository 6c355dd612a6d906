//! A cluster run's shard folders (`DIR/shard-I-of-N/`): how `--shard auto` finds its slice in
//! a job engine's environment, which shard folders a parent holds, and how far each shard got.

use std::collections::BTreeMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::{Shard, leases, read_run};

/// The variables `--shard auto` reads, as its errors name them.
pub const AUTO_VARIABLES: &str = "SLURM_ARRAY_TASK_ID (with SLURM_ARRAY_TASK_MIN and SLURM_ARRAY_TASK_COUNT: a Slurm job array), JOB_COMPLETION_INDEX (with --shards N or DELTABENCH_SHARDS: a Kubernetes Indexed Job) and DELTABENCH_SHARD=I/N (a CI matrix)";

/// The folder a shard writes under a shared `--out`: `shard-I-of-N`.
pub fn dir_name(shard: Shard) -> String {
    format!("shard-{}-of-{}", shard.index, shard.total)
}

/// The shard a folder name `shard-I-of-N` stands for.
pub fn parse_dir_name(name: &str) -> Option<Shard> {
    let (index, total) = name.strip_prefix("shard-")?.split_once("-of-")?;
    let shard = Shard {
        index: index.parse().ok()?,
        total: total.parse().ok()?,
    };
    (shard.total > 0 && (1..=shard.total).contains(&shard.index)).then_some(shard)
}

/// Why `--shard auto` found no slice.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AutoShardError {
    /// None of the variables `--shard auto` reads is set: give `--shard I/N` instead.
    #[error(
        "--shard auto found no shard in the environment: it looks for {AUTO_VARIABLES}, and none is set"
    )]
    Nothing,
    /// A variable is set without the one it needs beside it.
    #[error("--shard auto: {variable} is set but {missing} is not: {why}")]
    Missing {
        /// The variable that is set.
        variable: String,
        /// What is not set (a variable, or the shard count).
        missing: String,
        /// What to do, or why it is needed.
        why: String,
    },
    /// A variable's value names no shard of the plan.
    #[error("--shard auto: {variable}={value}: {why}")]
    Bad {
        /// The variable read.
        variable: String,
        /// Its value.
        value: String,
        /// What is wrong with it.
        why: String,
    },
    /// Two sources name different shards.
    #[error(
        "--shard auto: the environment contradicts itself: {first} says shard {a}, {second} says shard {b}; unset one of them"
    )]
    Contradiction {
        /// The first source (a variable's name).
        first: String,
        /// The shard it names.
        a: Shard,
        /// The second source.
        second: String,
        /// The shard it names.
        b: Shard,
    },
}

/// The shard this process is, from the engine's variables (`var` looks one up) and the shard
/// count given by `--shards` or `DELTABENCH_SHARDS` (`total`, with the name it came from).
///
/// Slurm: `SLURM_ARRAY_TASK_ID - SLURM_ARRAY_TASK_MIN + 1` of `SLURM_ARRAY_TASK_COUNT`; with a
/// shard count given, the task id itself (an array numbered 1..N, so that resubmitting some
/// tasks, `--array=3,4`, keeps their numbers). Kubernetes: `JOB_COMPLETION_INDEX + 1` of the
/// given count. A CI matrix: `DELTABENCH_SHARD=I/N`. Two sources that disagree are refused.
pub fn resolve_auto(
    var: impl Fn(&str) -> Option<String>,
    total: Option<(u32, &str)>,
) -> Result<Shard, AutoShardError> {
    let mut found: Vec<(String, Shard)> = Vec::new();
    if let Some(value) = var("DELTABENCH_SHARD") {
        let shard = value.parse::<Shard>().map_err(|e| AutoShardError::Bad {
            variable: "DELTABENCH_SHARD".into(),
            value: value.clone(),
            why: e.to_string(),
        })?;
        found.push((format!("DELTABENCH_SHARD={value}"), shard));
    }
    if let Some(id) = env_number(&var, "SLURM_ARRAY_TASK_ID")? {
        let shard = slurm_shard(&var, id, total)?;
        found.push((format!("SLURM_ARRAY_TASK_ID={id}"), shard));
    }
    if let Some(index) = env_number(&var, "JOB_COMPLETION_INDEX")? {
        let Some((total, _)) = total else {
            return Err(AutoShardError::Missing {
                variable: "JOB_COMPLETION_INDEX".into(),
                missing: "the shard count".into(),
                why: "an Indexed Job's pod does not see its completions; pass --shards N or set DELTABENCH_SHARDS".into(),
            });
        };
        let shard = in_range(
            "JOB_COMPLETION_INDEX",
            index.to_string(),
            Shard {
                index: index + 1,
                total,
            },
        )?;
        found.push((format!("JOB_COMPLETION_INDEX={index}"), shard));
    }
    agreed(found)
}

/// The variable `name` as a whole number, if it is set.
fn env_number(
    var: &dyn Fn(&str) -> Option<String>,
    name: &str,
) -> Result<Option<u32>, AutoShardError> {
    match var(name) {
        None => Ok(None),
        Some(value) => value
            .trim()
            .parse::<u32>()
            .map(Some)
            .map_err(|_| AutoShardError::Bad {
                variable: name.into(),
                value,
                why: "not a whole number".into(),
            }),
    }
}

/// `shard`, if its index is one of its total; else the error that `variable=value` named it.
fn in_range(variable: &str, value: String, shard: Shard) -> Result<Shard, AutoShardError> {
    if shard.total > 0 && (1..=shard.total).contains(&shard.index) {
        Ok(shard)
    } else {
        Err(AutoShardError::Bad {
            variable: variable.into(),
            value,
            why: format!(
                "that is shard {}/{}, outside 1..{}",
                shard.index, shard.total, shard.total
            ),
        })
    }
}

/// The shard a Slurm array task `id` is: the id itself of a given count, else its place in the
/// array (`SLURM_ARRAY_TASK_MIN`, `SLURM_ARRAY_TASK_COUNT`).
fn slurm_shard(
    var: &dyn Fn(&str) -> Option<String>,
    id: u32,
    total: Option<(u32, &str)>,
) -> Result<Shard, AutoShardError> {
    let count = env_number(var, "SLURM_ARRAY_TASK_COUNT")?;
    let Some((total, from)) = total else {
        let min = env_number(var, "SLURM_ARRAY_TASK_MIN")?;
        let (Some(min), Some(count)) = (min, count) else {
            return Err(AutoShardError::Missing {
                variable: "SLURM_ARRAY_TASK_ID".into(),
                missing: "SLURM_ARRAY_TASK_MIN and SLURM_ARRAY_TASK_COUNT".into(),
                why: "run inside an sbatch --array job, or give the shard count with --shards N"
                    .into(),
            });
        };
        let index = id.saturating_add(1).saturating_sub(min);
        return in_range(
            "SLURM_ARRAY_TASK_ID",
            id.to_string(),
            Shard {
                index,
                total: count,
            },
        );
    };
    if let Some(count) = count.filter(|&c| c > total) {
        return Err(AutoShardError::Bad {
            variable: "SLURM_ARRAY_TASK_COUNT".into(),
            value: count.to_string(),
            why: format!("the array has more tasks than the {total} shards of {from}"),
        });
    }
    in_range(
        "SLURM_ARRAY_TASK_ID",
        id.to_string(),
        Shard { index: id, total },
    )
    .map_err(|e| match e {
        AutoShardError::Bad {
            variable, value, ..
        } => AutoShardError::Bad {
            variable,
            value,
            why: format!(
                "with {from} giving {total} shards, the array's task ids must be 1..{total} (sbatch --array=1-{total})"
            ),
        },
        e => e,
    })
}

/// The one shard every source named, or the first two that disagree.
fn agreed(found: Vec<(String, Shard)>) -> Result<Shard, AutoShardError> {
    let Some((first, shard)) = found.first().cloned() else {
        return Err(AutoShardError::Nothing);
    };
    if let Some((second, other)) = found.iter().find(|(_, s)| *s != shard) {
        return Err(AutoShardError::Contradiction {
            first,
            a: shard,
            second: second.clone(),
            b: *other,
        });
    }
    Ok(shard)
}

/// The shard folders a parent folder holds, by index.
#[derive(Debug, Clone)]
pub struct ShardSet {
    /// The shard count N, the same for every folder.
    pub total: u32,
    /// Each folder, by its shard index I.
    pub dirs: BTreeMap<u32, PathBuf>,
}

/// Why a folder is not a parent of shard folders.
#[derive(Debug, thiserror::Error)]
pub enum ShardSetError {
    /// The folder could not be listed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The folder listed.
        path: PathBuf,
        /// The listing's error.
        source: io::Error,
    },
    /// The folder holds no `shard-I-of-N` folder.
    #[error(
        "{} holds no shard folders (shard-I-of-N, written by `run --shard auto --out {}`)",
        .0.display(),
        .0.display()
    )]
    Empty(PathBuf),
    /// The folder holds shards of two different counts N.
    #[error(
        "{} holds shards of two counts: {} and {}; keep one run's shards per folder",
        parent.display(),
        first.display(),
        second.display()
    )]
    MixedTotals {
        /// The folder listed.
        parent: PathBuf,
        /// A shard folder of the first count.
        first: PathBuf,
        /// A shard folder of another count.
        second: PathBuf,
    },
}

/// The `shard-I-of-N` folders directly under `parent`.
pub fn shard_dirs(parent: &Path) -> Result<ShardSet, ShardSetError> {
    let io_err = |source| ShardSetError::Io {
        path: parent.to_owned(),
        source,
    };
    let mut found: Vec<(Shard, PathBuf)> = Vec::new();
    for entry in fs::read_dir(parent).map_err(io_err)? {
        let entry = entry.map_err(io_err)?;
        let Some(shard) = entry.file_name().to_str().and_then(parse_dir_name) else {
            continue;
        };
        if entry.path().is_dir() {
            found.push((shard, entry.path()));
        }
    }
    found.sort_by_key(|(s, _)| (s.total, s.index));
    let Some((first, first_dir)) = found.first().cloned() else {
        return Err(ShardSetError::Empty(parent.to_owned()));
    };
    if let Some((_, other)) = found.iter().find(|(s, _)| s.total != first.total) {
        return Err(ShardSetError::MixedTotals {
            parent: parent.to_owned(),
            first: first_dir,
            second: other.clone(),
        });
    }
    Ok(ShardSet {
        total: first.total,
        dirs: found.into_iter().map(|(s, p)| (s.index, p)).collect(),
    })
}

/// Where a shard stands, as `status` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardState {
    /// No run directory (yet): not started, or its job never ran.
    NotStarted,
    /// Its run holds a live lease on this host.
    Running,
    /// Every planned trial is recorded and the run ended.
    Finished,
    /// The run ended (or died) with planned trials not recorded: resume it.
    Stopped,
    /// Not finished, and run on another host: this host cannot see its process.
    Elsewhere,
}

impl ShardState {
    /// How `status` shows it (`STOPPED` in capitals, so a stopped shard stands out).
    pub fn label(self) -> &'static str {
        match self {
            Self::NotStarted => "not started",
            Self::Running => "running",
            Self::Finished => "finished",
            Self::Stopped => "STOPPED",
            Self::Elsewhere => "elsewhere",
        }
    }
}

/// How far one shard got.
#[derive(Debug, Clone)]
pub struct ShardProgress {
    /// The shard the folder's name says it is.
    pub shard: Shard,
    /// The shard's folder.
    pub dir: PathBuf,
    /// Where it stands.
    pub state: ShardState,
    /// Planned trials; None until the shard's run wrote its manifest.
    pub planned: Option<usize>,
    /// Recorded trials (an interrupted trial's record does not count).
    pub recorded: usize,
    /// Recorded trials that passed.
    pub passed: usize,
    /// The host its manifest says ran it; empty until it wrote one.
    pub host: String,
    /// Seconds until the shard is done at its pace so far, while it runs.
    pub eta_secs: Option<u64>,
    /// Why the shard's folder could not be read, if it could not.
    pub unreadable: Option<String>,
    /// The shard its manifest says it ran, when it is not the one its folder's name says.
    pub misnamed: Option<Option<Shard>>,
}

impl ShardProgress {
    /// Ended, or never started, with planned trials missing.
    pub fn unfinished(&self) -> bool {
        !matches!(self.state, ShardState::Finished)
    }
}

/// How far every shard 1..=`total` under `parent` got. `live` says whether a shard is known to
/// run (or to be queued) by other means, e.g. the job engine: then it is not `Stopped`.
pub fn progress(parent: &Path, total: u32, live: &dyn Fn(Shard) -> bool) -> Vec<ShardProgress> {
    let host = super::host_name();
    (1..=total)
        .map(|index| {
            let shard = Shard { index, total };
            let dir = parent.join(dir_name(shard));
            shard_progress(shard, dir, &host, live(shard))
        })
        .collect()
}

/// How far the one run directory `dir` got (a plain run holds the whole plan: shard 1/1).
pub fn progress_of(dir: &Path, shard: Option<Shard>) -> ShardProgress {
    let shard = shard.unwrap_or(Shard { index: 1, total: 1 });
    shard_progress(shard, dir.to_path_buf(), &super::host_name(), false)
}

fn shard_progress(shard: Shard, dir: PathBuf, this_host: &str, live: bool) -> ShardProgress {
    let mut progress = ShardProgress {
        shard,
        dir: dir.clone(),
        state: if live {
            ShardState::Running
        } else {
            ShardState::NotStarted
        },
        planned: None,
        recorded: 0,
        passed: 0,
        host: String::new(),
        eta_secs: None,
        unreadable: None,
        misnamed: None,
    };
    if !dir.join(super::layout::MANIFEST).exists() {
        return progress;
    }
    let run = match read_run(&dir) {
        Ok(run) => run,
        Err(err) => {
            progress.unreadable = Some(err.to_string());
            progress.state = ShardState::Stopped;
            return progress;
        }
    };
    let manifest = &run.manifest;
    if manifest.shard != Some(shard) {
        progress.misnamed = Some(manifest.shard);
    }
    let done: Vec<_> = run.trials.iter().filter(|r| !r.interrupted).collect();
    progress.planned = Some(manifest.planned_trials);
    progress.recorded = done.len();
    progress.passed = done.iter().filter(|r| r.passed()).count();
    progress.host = manifest.host.clone();
    let ended = manifest.finished_at.is_some();
    let complete = ended && !manifest.interrupted && done.len() >= manifest.planned_trials;
    let leased = manifest.request.as_ref().is_some_and(|request| {
        let me = dir.canonicalize().unwrap_or_else(|_| dir.clone());
        leases(&request.cache)
            .iter()
            .any(|l| l.lease.run_dir == me && l.is_alive())
    });
    // A shard of a run in rounds has finished only when the rule decided; between rounds it
    // beats its heartbeat while it waits for its siblings.
    let rounds_left = super::rounds::read_mark(&dir).filter(|mark| mark.decided.is_none());
    let beating = rounds_left
        .as_ref()
        .is_some_and(|mark| mark.alive(super::rounds::now()));
    progress.state = if complete && rounds_left.is_none() {
        ShardState::Finished
    } else if leased || live || beating {
        ShardState::Running
    } else if !ended && manifest.host != this_host {
        ShardState::Elsewhere
    } else {
        ShardState::Stopped
    };
    if progress.state == ShardState::Running
        && let Ok(started) = chrono::DateTime::parse_from_rfc3339(&manifest.started_at)
    {
        let elapsed = (chrono::Utc::now() - started.to_utc()).num_seconds().max(0) as u64;
        let left = manifest.planned_trials.saturating_sub(done.len()) as u64;
        if !done.is_empty() {
            progress.eta_secs = Some(elapsed * left / done.len() as u64);
        }
    }
    progress
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        }
    }

    #[test]
    fn auto_reads_each_engine_and_refuses_contradictions() {
        let s = |index, total| Shard { index, total };
        let slurm = [
            ("SLURM_ARRAY_TASK_ID", "5"),
            ("SLURM_ARRAY_TASK_MIN", "4"),
            ("SLURM_ARRAY_TASK_COUNT", "3"),
        ];
        assert_eq!(resolve_auto(env(&slurm), None), Ok(s(2, 3)));
        // A resubmitted subset (--array=3) keeps its number when the count is given.
        let subset = [
            ("SLURM_ARRAY_TASK_ID", "3"),
            ("SLURM_ARRAY_TASK_MIN", "3"),
            ("SLURM_ARRAY_TASK_COUNT", "1"),
        ];
        assert_eq!(
            resolve_auto(env(&subset), Some((4, "--shards"))),
            Ok(s(3, 4))
        );
        let k8s = [("JOB_COMPLETION_INDEX", "0")];
        assert_eq!(resolve_auto(env(&k8s), Some((4, "--shards"))), Ok(s(1, 4)));
        assert_eq!(
            resolve_auto(env(&[("DELTABENCH_SHARD", "2/4")]), None),
            Ok(s(2, 4))
        );
        let err = resolve_auto(env(&[]), None).unwrap_err().to_string();
        for name in [
            "SLURM_ARRAY_TASK_ID",
            "JOB_COMPLETION_INDEX",
            "DELTABENCH_SHARD",
        ] {
            assert!(err.contains(name), "{err}");
        }
        let err = resolve_auto(env(&k8s), None).unwrap_err().to_string();
        assert!(err.contains("--shards N or set DELTABENCH_SHARDS"), "{err}");
        let both = [("JOB_COMPLETION_INDEX", "0"), ("DELTABENCH_SHARD", "2/4")];
        let err = resolve_auto(env(&both), Some((4, "--shards")))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(
                "DELTABENCH_SHARD=2/4 says shard 2/4, JOB_COMPLETION_INDEX=0 says shard 1/4"
            ),
            "{err}"
        );
        let err = resolve_auto(env(&[("SLURM_ARRAY_TASK_ID", "2")]), None)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("SLURM_ARRAY_TASK_MIN and SLURM_ARRAY_TASK_COUNT"),
            "{err}"
        );
        let err = resolve_auto(env(&[("JOB_COMPLETION_INDEX", "4")]), Some((4, "--shards")))
            .unwrap_err()
            .to_string();
        assert!(err.contains("JOB_COMPLETION_INDEX=4"), "{err}");
    }

    #[test]
    fn shard_folder_names_round_trip() {
        let shard = Shard {
            index: 3,
            total: 16,
        };
        assert_eq!(dir_name(shard), "shard-3-of-16");
        assert_eq!(parse_dir_name("shard-3-of-16"), Some(shard));
        for bad in [
            "shard-0-of-3",
            "shard-4-of-3",
            "shard-1",
            "merged",
            "shard-x-of-2",
        ] {
            assert_eq!(parse_dir_name(bad), None, "{bad}");
        }
    }
}
