//! `merge`: shard run directories into one, then the summary table of the whole.

use std::path::{Path, PathBuf};

use super::args::MergeArgs;
use super::exit::Exit;
use super::{CliError, ErrorKind, print_stdout};
use crate::report;
use crate::store::shards::{self, ShardProgress, ShardState};
use crate::store::{self, MergeError};

const SHARDS_OF_ONE_PLAN: &str =
    "merge the shards of one plan: the same `deltabench run` arguments with --shard 1/N .. N/N";

/// The run directories to merge: the inputs as given, or the shard folders of one parent
/// folder, with how far each shard got.
pub(super) struct Inputs {
    pub dirs: Vec<PathBuf>,
    /// With a parent folder: every shard 1..N, present or not.
    pub shards: Option<(PathBuf, Vec<ShardProgress>)>,
}

/// Expands a single parent folder (no manifest of its own, shard-I-of-N folders inside).
pub(super) fn inputs(given: &[PathBuf]) -> Result<Inputs, CliError> {
    if let [parent] = given
        && parent.is_dir()
        && !parent.join(store::layout::MANIFEST).exists()
    {
        let set = shards::shard_dirs(parent).map_err(|e| CliError::new(ErrorKind::Usage, e))?;
        let progress = shards::progress(parent, set.total, &|_| false);
        // A folder is taken for the shard its name says: one holding another shard's run
        // (renamed, copied over) would be counted twice or stand in for a missing one.
        if let Some(p) = progress.iter().find(|p| p.misnamed.is_some()) {
            let held = p
                .misnamed
                .flatten()
                .map_or("an unsharded run".to_owned(), |s| format!("shard {s}"));
            return Err(CliError::usage(format!(
                "{} holds {held}, not shard {}: put each shard's run in the folder of its own number",
                p.dir.display(),
                p.shard
            )));
        }
        let dirs = progress
            .iter()
            .filter(|p| p.planned.is_some())
            .map(|p| p.dir.clone())
            .collect();
        return Ok(Inputs {
            dirs,
            shards: Some((parent.clone(), progress)),
        });
    }
    Ok(Inputs {
        dirs: given.to_vec(),
        shards: None,
    })
}

/// One line per shard that is not finished: what it holds and what to do.
pub(super) fn unfinished_lines(progress: &[ShardProgress]) -> Vec<String> {
    progress
        .iter()
        .filter(|p| p.unfinished())
        .map(|p| {
            let held = match p.planned {
                Some(planned) => format!("{} of {planned} trials recorded", p.recorded),
                None => "no run directory".to_owned(),
            };
            let state = match p.state {
                ShardState::NotStarted => "never started",
                ShardState::Running => "still running",
                ShardState::Stopped => "stopped without finishing",
                ShardState::Elsewhere => "unfinished, on another host",
                ShardState::Finished => "finished",
            };
            format!("shard {} ({}): {state}, {held}", p.shard, p.dir.display())
        })
        .collect()
}

pub(super) fn merge(args: MergeArgs) -> Result<Exit, CliError> {
    let inputs = inputs(&args.inputs)?;
    let out = match (&args.out, &inputs.shards) {
        (Some(out), _) => out.clone(),
        (None, Some((parent, _))) => parent.join("merged"),
        (None, None) => {
            return Err(CliError::usage(
                "name the merged run directory with --out DIR (it defaults to DIR/merged only when merging one folder of shard-I-of-N folders)",
            ));
        }
    };
    if inputs.dirs.is_empty() {
        let lines = inputs
            .shards
            .as_ref()
            .map(|(_, p)| unfinished_lines(p))
            .unwrap_or_default();
        return Err(CliError::unscored(format!(
            "no shard has written a run yet:\n  {}",
            lines.join("\n  ")
        )));
    }
    let merged = store::merge_runs(&inputs.dirs, &out).map_err(merge_error)?;

    print_stdout(&merged_text(&merged, &out));
    // An interrupted trial's record is no result: `resume` runs it again.
    let done = merged.records.iter().filter(|r| !r.interrupted).count();
    let missing = merged.manifest.planned_trials.saturating_sub(done);
    if missing == 0 {
        return Ok(Exit::Ok);
    }
    Err(missing_error(&inputs, &merged, missing))
}

/// What went in, each input's trials, and the merged run's summary table.
fn merged_text(merged: &store::Merged, out: &Path) -> String {
    let mut text = String::new();
    for (path, shard, trials) in &merged.inputs {
        let shard = shard.map_or("unsharded".to_owned(), |s| format!("shard {s}"));
        text.push_str(&format!("{} ({shard}): {trials} trials\n", path.display()));
    }
    let manifest = &merged.manifest;
    let agents: Vec<String> = manifest.agents.keys().cloned().collect();
    let planned = manifest.planned_trials;
    text.push_str(&format!(
        "{}\nmerged {} of {planned} planned trials into {}\n",
        report::table(
            &report::summarize(&merged.records, &agents, &merged.manifest.agents),
            super::terminal_width()
        ),
        merged.records.iter().filter(|r| !r.interrupted).count(),
        out.display()
    ));
    text
}

/// Why the merged run lacks `missing` of its planned trials, and how to fill them in: the
/// shards unfinished, missing or interrupted. Written, but planned trials have no result: like
/// trials that could not be scored.
fn missing_error(inputs: &Inputs, merged: &store::Merged, missing: usize) -> CliError {
    let planned = merged.manifest.planned_trials;
    let (mut why, mut hints) = (Vec::new(), Vec::new());
    if let Some((parent, progress)) = &inputs.shards {
        why.extend(unfinished_lines(progress));
        hints.push(format!(
            "finish each: `deltabench resume SHARD_DIR` (or `deltabench submit ENGINE --resume {}` for a submitted run), then merge again",
            parent.display()
        ));
        let why = why.join("\n  ");
        let error = CliError::unscored(format!(
            "the merged run is missing {missing} of its {planned} planned trials:\n  {why}"
        ));
        return hints.into_iter().fold(error, CliError::hint);
    }
    if let Some(total) = merged
        .inputs
        .first()
        .and_then(|(_, shard, _)| *shard)
        .map(|s| s.total)
        && !merged.missing_shards.is_empty()
    {
        let shards: Vec<String> = merged.missing_shards.iter().map(u32::to_string).collect();
        why.push(format!(
            "no input holds shard {} of {total}",
            shards.join(", ")
        ));
        hints.push(format!(
            "merge the run directories of every shard, 1/{total} .. {total}/{total}, into another --out"
        ));
    }
    if !merged.interrupted.is_empty() {
        let paths: Vec<String> = merged
            .interrupted
            .iter()
            .map(|p| p.display().to_string())
            .collect();
        why.push(format!("{} was interrupted", paths.join(", ")));
        hints.push(
            "`deltabench resume RUN_DIR` finishes an interrupted shard; then merge again"
                .to_owned(),
        );
    }
    if why.is_empty() {
        why.push("the inputs hold fewer trials than their plan".to_owned());
    }
    let error = CliError::unscored(format!(
        "the merged run is missing {missing} of its {planned} planned trials: {}",
        why.join("; ")
    ));
    hints.into_iter().fold(error, CliError::hint)
}

pub(super) fn merge_error(err: MergeError) -> CliError {
    match err {
        MergeError::Read(err) => err.into(),
        MergeError::NotAShard(_) | MergeError::Mismatch { .. } | MergeError::SameShard { .. } => {
            CliError::new(ErrorKind::Usage, err).hint(SHARDS_OF_ONE_PLAN)
        }
        err if err.is_usage() => CliError::new(ErrorKind::Usage, err),
        err => CliError::new(ErrorKind::Harness, err),
    }
}

/// Whether `path` is a folder of shard folders rather than a run directory.
pub(super) fn is_shard_parent(path: &Path) -> bool {
    path.is_dir()
        && !path.join(store::layout::MANIFEST).exists()
        && shards::shard_dirs(path).is_ok()
}
