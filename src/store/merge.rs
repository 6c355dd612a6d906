//! Merging the run directories of a sharded run (`--shard I/N`) into one run directory.
//!
//! Every check runs before anything is written: the inputs must come from the same plan (suite
//! digest, agent configs, trials per task, task list, shard count), be distinct shards, hold
//! only trials of that plan and of their own shard (`read_run` checks each record), and hold
//! disjoint trials. The output is what the unsharded run would have written: each trial's
//! folder, `trials.jsonl` in plan order, and one manifest covering them all.

use std::collections::{BTreeSet, HashMap};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::{Manifest, ReadRunError, RunDir, Shard, StoredRun, TrialRecord, layout, read_run};

/// Why run directories cannot be merged.
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    /// No run directory was given.
    #[error("nothing to merge: name at least one run directory")]
    NoInputs,
    /// An input's run directory could not be read.
    #[error(transparent)]
    Read(#[from] ReadRunError),
    /// `input` was run without `--shard`, so it is no part of a sharded plan.
    #[error(
        "{} is not a shard: it was run without --shard, so there is nothing to merge it with",
        .0.display()
    )]
    NotAShard(PathBuf),
    /// `input` belongs to another plan than the first input.
    #[error(
        "{} is not a shard of the plan {} is a shard of: its {field} is {found}, not {expected}",
        input.display(),
        first.display()
    )]
    Mismatch {
        /// The input that differs.
        input: PathBuf,
        /// The first input, whose plan the others must share.
        first: PathBuf,
        /// The manifest field that differs (`suite_digest`, `tasks`, ...).
        field: String,
        /// That field in the first input.
        expected: String,
        /// That field in `input`.
        found: String,
    },
    /// Two inputs hold the same shard (or are both whole runs).
    #[error("{} and {} are both {shard}", first.display(), second.display())]
    SameShard {
        /// The input read first.
        first: PathBuf,
        /// The input read second.
        second: PathBuf,
        /// The shard both hold, as `I/N`.
        shard: String,
    },
    /// Two inputs hold a record of the same trial.
    #[error(
        "trial {task} / {agent} #{trial} is in both {} and {}",
        first.display(),
        second.display()
    )]
    SameTrial {
        /// The trial's task.
        task: String,
        /// The trial's agent.
        agent: String,
        /// The trial's number.
        trial: u32,
        /// The input read first.
        first: PathBuf,
        /// The input read second.
        second: PathBuf,
    },
    /// A record's trial folder is not in its run directory.
    #[error("{}: the folder of a recorded trial is missing", dir.display())]
    MissingTrialDir {
        /// The folder expected.
        dir: PathBuf,
    },
    /// The `--out` directory already holds a run.
    #[error("{} already holds a run; choose another --out", .0.display())]
    OutHoldsRun(PathBuf),
    /// Writing the merged run failed.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The file or folder written.
        path: PathBuf,
        /// The write's error.
        source: io::Error,
    },
}

impl MergeError {
    /// True when the inputs or `--out` are at fault (exit 2), false for a failed write.
    pub fn is_usage(&self) -> bool {
        !matches!(self, Self::Write { .. })
    }
}

/// What a merge wrote, for the caller to report.
#[derive(Debug, Clone)]
pub struct Merged {
    /// The merged run's manifest, as written.
    pub manifest: Manifest,
    /// The merged records, in plan order.
    pub records: Vec<TrialRecord>,
    /// Each input with its shard and the number of trials it held, in the order given.
    pub inputs: Vec<(PathBuf, Option<Shard>, usize)>,
    /// Shard indexes of 1..=N that no input held; empty when every shard is present.
    pub missing_shards: Vec<u32>,
    /// Inputs whose run was interrupted (or never finished).
    pub interrupted: Vec<PathBuf>,
}

/// The checked inputs of a merge and the merged run, not written yet: what `merge` writes and
/// what `report` shows of an unfinished set of shards.
#[derive(Debug, Clone)]
pub struct Gathered {
    /// The merged run's manifest.
    pub manifest: Manifest,
    /// Each record with the run directory holding its folder, in plan order.
    pub records: Vec<(PathBuf, TrialRecord)>,
    /// As [`Merged::inputs`].
    pub inputs: Vec<(PathBuf, Option<Shard>, usize)>,
    /// As [`Merged::missing_shards`].
    pub missing_shards: Vec<u32>,
    /// As [`Merged::interrupted`].
    pub interrupted: Vec<PathBuf>,
}

/// Reads and checks the run directories `inputs` (shards of one plan) and puts their records
/// in plan order; nothing is written.
pub fn gather(inputs: &[PathBuf]) -> Result<Gathered, MergeError> {
    let runs: Vec<StoredRun> = inputs
        .iter()
        .map(|path| read_run(path))
        .collect::<Result<_, _>>()?;
    let Some(first) = runs.first() else {
        return Err(MergeError::NoInputs);
    };
    if runs.len() > 1
        && let Some(whole) = runs.iter().find(|run| run.manifest.shard.is_none())
    {
        return Err(MergeError::NotAShard(whole.path.clone()));
    }
    for run in &runs[1..] {
        same_plan(first, run)?;
    }
    let mut shards: HashMap<Option<Shard>, &Path> = HashMap::new();
    for run in &runs {
        if let Some(other) = shards.insert(run.manifest.shard, &run.path) {
            return Err(MergeError::SameShard {
                first: other.to_owned(),
                second: run.path.clone(),
                shard: shard_label(run.manifest.shard),
            });
        }
    }
    let mut owners: HashMap<(&str, &str, u32), &Path> = HashMap::new();
    for run in &runs {
        for record in &run.trials {
            let key = (record.task.as_str(), record.agent.as_str(), record.trial);
            if let Some(other) = owners.insert(key, &run.path) {
                return Err(MergeError::SameTrial {
                    task: record.task.clone(),
                    agent: record.agent.clone(),
                    trial: record.trial,
                    first: other.to_owned(),
                    second: run.path.clone(),
                });
            }
            let dir = layout::record_path(&run.path, record);
            if !dir.is_dir() {
                return Err(MergeError::MissingTrialDir { dir });
            }
        }
    }

    let manifest = merged_manifest(&runs);
    let mut records: Vec<(PathBuf, TrialRecord)> = runs
        .iter()
        .flat_map(|run| run.trials.iter().map(|r| (run.path.clone(), r.clone())))
        .collect();
    // Plan order (task, then agent, then trial), as an unsharded run schedules them.
    let (tasks, agents) = (ranks(manifest.tasks.iter()), ranks(manifest.agents.keys()));
    // `read_run` refused any record whose task or agent the manifest does not list.
    let at = |ranks: &HashMap<&str, usize>, name: &str| ranks.get(name).map_or(usize::MAX, |&i| i);
    records.sort_by_key(|(_, r)| (at(&tasks, &r.task), at(&agents, &r.agent), r.trial));

    let missing_shards = match first.manifest.shard {
        Some(shard) => (1..=shard.total)
            .filter(|&index| !shards.contains_key(&Some(Shard { index, ..shard })))
            .collect(),
        None => Vec::new(),
    };
    Ok(Gathered {
        inputs: runs
            .iter()
            .map(|r| (r.path.clone(), r.manifest.shard, r.trials.len()))
            .collect(),
        missing_shards,
        interrupted: runs
            .iter()
            .filter(|r| unfinished(&r.manifest))
            .map(|r| r.path.clone())
            .collect(),
        records,
        manifest,
    })
}

/// Merges the run directories `inputs` (shards of one plan) into a new run directory `out`.
///
/// An `out` that holds an earlier merge of the same plan is replaced when the new merge holds
/// every trial it held (merging again after a shard was finished, or the same inputs again);
/// anything else there is refused.
pub fn merge_runs(inputs: &[PathBuf], out: &Path) -> Result<Merged, MergeError> {
    let gathered = gather(inputs)?;
    let replace = out.join(layout::TRIALS_LOG).exists() || out.join(layout::MANIFEST).exists();
    if replace && !replaceable(out, &gathered) {
        return Err(MergeError::OutHoldsRun(out.to_owned()));
    }
    let write_err = |path: &Path| {
        let path = path.to_owned();
        move |source| MergeError::Write { path, source }
    };
    // An earlier merge is replaced whole, only once the new one is written.
    let target = if replace {
        let name = out.file_name().map(|n| n.to_string_lossy().into_owned());
        let tmp = out.with_file_name(format!(
            ".{}.merging-{}",
            name.unwrap_or_default(),
            std::process::id()
        ));
        let _ = fs::remove_dir_all(&tmp);
        tmp
    } else {
        out.to_owned()
    };
    let mut store = RunDir::create(&target).map_err(write_err(out))?;
    for (input, record) in &gathered.records {
        let to = store
            .trial_dir(&record.task, &record.agent, record.trial)
            .map_err(write_err(out))?;
        copy_tree(&layout::record_path(input, record), &to).map_err(write_err(&to))?;
        store.append(record).map_err(write_err(out))?;
    }
    // Written last: a merge that failed part-way leaves no manifest, so no readable run.
    store
        .write_manifest(&gathered.manifest)
        .map_err(write_err(&out.join(layout::MANIFEST)))?;
    if replace {
        let old = target.with_extension("old");
        fs::rename(out, &old).map_err(write_err(out))?;
        fs::rename(&target, out).map_err(write_err(out))?;
        fs::remove_dir_all(&old).map_err(write_err(&old))?;
    }
    let Gathered {
        manifest,
        records,
        inputs,
        missing_shards,
        interrupted,
    } = gathered;
    Ok(Merged {
        records: records.into_iter().map(|(_, r)| r).collect(),
        inputs,
        missing_shards,
        interrupted,
        manifest,
    })
}

/// Whether `out` holds an earlier merge of the plan `gathered` is, all of whose trials it holds.
fn replaceable(out: &Path, gathered: &Gathered) -> bool {
    let Ok(old) = read_run(out) else {
        return false;
    };
    let (a, b) = (&old.manifest, &gathered.manifest);
    if a.merged_from.is_empty()
        || a.suite_digest != b.suite_digest
        || a.tasks != b.tasks
        || a.agents != b.agents
        || a.trials_per_task != b.trials_per_task
    {
        return false;
    }
    let new: BTreeSet<(&str, &str, u32)> = gathered.records.iter().map(|(_, r)| r.key()).collect();
    old.trials.iter().all(|r| new.contains(&r.key()))
}

/// Refuses `run` unless it was planned exactly like `first`.
fn same_plan(first: &StoredRun, run: &StoredRun) -> Result<(), MergeError> {
    same_design(first, run)?;
    let (a, b) = (&first.manifest, &run.manifest);
    if a.trials_per_task != b.trials_per_task {
        return Err(mismatch(first, run)(
            "trials_per_task",
            a.trials_per_task.to_string(),
            b.trials_per_task.to_string(),
        ));
    }
    Ok(())
}

fn mismatch<'a>(
    first: &'a StoredRun,
    run: &'a StoredRun,
) -> impl Fn(&str, String, String) -> MergeError + 'a {
    |field: &str, expected: String, found: String| MergeError::Mismatch {
        input: run.path.clone(),
        first: first.path.clone(),
        field: field.to_owned(),
        expected,
        found,
    }
}

/// Refuses `run` unless it is a shard of the same plan as `first` but for the trials per task:
/// the siblings of a run in rounds, which may be a round apart.
pub fn same_design(first: &StoredRun, run: &StoredRun) -> Result<(), MergeError> {
    let (a, b) = (&first.manifest, &run.manifest);
    let mismatch = mismatch(first, run);
    if a.suite_digest != b.suite_digest {
        return Err(mismatch(
            "suite_digest",
            format!("{} ({})", a.suite_digest, a.suite),
            format!("{} ({})", b.suite_digest, b.suite),
        ));
    }
    // Agents as a set: `--agent a --agent b` and `--agent b --agent a` plan the same trials.
    let names = |m: &Manifest| m.agents.keys().cloned().collect::<BTreeSet<_>>();
    if names(a) != names(b) {
        let list =
            |m: &Manifest| format!("[{}]", names(m).into_iter().collect::<Vec<_>>().join(", "));
        return Err(mismatch("agents", list(a), list(b)));
    }
    for (name, config) in &a.agents {
        if b.agents.get(name) != Some(config) {
            let other = b.agents.get(name).map(ToString::to_string);
            return Err(mismatch(
                &format!("agents.{name}"),
                config.to_string(),
                other.unwrap_or_default(),
            ));
        }
    }
    if a.tasks != b.tasks {
        let index = a
            .tasks
            .iter()
            .zip(&b.tasks)
            .take_while(|(x, y)| x == y)
            .count();
        let at = |tasks: &[String]| {
            tasks
                .get(index)
                .map_or("(none)".to_owned(), |t| format!("'{t}'"))
        };
        return Err(mismatch(
            &format!("tasks[{index}]"),
            format!("{} of {} tasks", at(&a.tasks), a.tasks.len()),
            format!("{} of {} tasks", at(&b.tasks), b.tasks.len()),
        ));
    }
    let total = |m: &Manifest| m.shard.map(|s| s.total);
    if total(a) != total(b) {
        return Err(mismatch(
            "shard",
            shard_label(a.shard),
            shard_label(b.shard),
        ));
    }
    Ok(())
}

/// The manifest of the merged run: the first input's, widened to cover every input.
fn merged_manifest(runs: &[StoredRun]) -> Manifest {
    let mut manifest = runs[0].manifest.clone();
    let manifests = || runs.iter().map(|r| &r.manifest);
    manifest.shard = None;
    manifest.merged_from = runs.iter().map(|r| r.path.display().to_string()).collect();
    // The whole plan, even when a shard is missing: the caller tells the two apart.
    manifest.planned_trials =
        manifest.tasks.len() * manifest.agents.len() * manifest.trials_per_task as usize;
    // Timestamps are RFC 3339 UTC with a fixed precision, so string order is time order.
    manifest.started_at = manifests()
        .map(|m| m.started_at.clone())
        .min()
        .unwrap_or_default();
    manifest.finished_at = manifests().filter_map(|m| m.finished_at.clone()).max();
    manifest.interrupted = manifests().any(unfinished);
    manifest.host = distinct(manifests().map(|m| m.host.as_str()));
    manifest.workdir = distinct(manifests().map(|m| m.workdir.as_str()));
    manifest
}

/// Each name's position in the run's order.
fn ranks<'a>(names: impl Iterator<Item = &'a String>) -> HashMap<&'a str, usize> {
    names.enumerate().map(|(i, n)| (n.as_str(), i)).collect()
}

/// Interrupted, or killed before it could record its end.
fn unfinished(manifest: &Manifest) -> bool {
    manifest.interrupted || manifest.finished_at.is_none()
}

/// The distinct values, in first-seen order, joined with ", ".
fn distinct<'a>(values: impl Iterator<Item = &'a str>) -> String {
    let mut seen: Vec<&str> = Vec::new();
    for value in values {
        if !seen.contains(&value) {
            seen.push(value);
        }
    }
    seen.join(", ")
}

fn shard_label(shard: Option<Shard>) -> String {
    match shard {
        Some(shard) => format!("shard {shard}"),
        None => "unsharded".into(),
    }
}

/// Copies the folder `from` into `to` (created), keeping symlinks as symlinks.
fn copy_tree(from: &Path, to: &Path) -> io::Result<()> {
    fs::create_dir_all(to)?;
    for entry in fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        let kind = entry.file_type()?;
        if kind.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else if kind.is_symlink() {
            std::os::unix::fs::symlink(fs::read_link(entry.path())?, &target)?;
        } else {
            fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}
