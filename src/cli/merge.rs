//! `merge`: shard run directories into one, then the summary table of the whole.

use super::args::MergeArgs;
use super::exit::Exit;
use super::{CliError, ErrorKind, print_stdout};
use crate::report;
use crate::store::{self, MergeError};

const SHARDS_OF_ONE_PLAN: &str =
    "merge the shards of one plan: the same `deltabench run` arguments with --shard 1/N .. N/N";

pub(super) fn merge(args: MergeArgs) -> Result<Exit, CliError> {
    let merged = store::merge_runs(&args.inputs, &args.out).map_err(merge_error)?;

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
        report::table(&report::summarize(&merged.records, &agents)),
        merged.records.len(),
        args.out.display()
    ));
    print_stdout(&text);

    // An interrupted trial's record is no result: `resume` runs it again.
    let done = merged.records.iter().filter(|r| !r.interrupted).count();
    let missing = planned.saturating_sub(done);
    if missing == 0 {
        return Ok(Exit::Ok);
    }
    let (mut why, mut hints) = (Vec::new(), Vec::new());
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
            "`deltabench resume RUN_DIR` finishes an interrupted shard; then merge again into another --out"
                .to_owned(),
        );
    }
    if why.is_empty() {
        why.push("the inputs hold fewer trials than their plan".to_owned());
    }
    // Written, but planned trials have no result: like trials that could not be scored.
    let error = CliError::unscored(format!(
        "the merged run is missing {missing} of its {planned} planned trials: {}",
        why.join("; ")
    ));
    Err(hints.into_iter().fold(error, CliError::hint))
}

fn merge_error(err: MergeError) -> CliError {
    match err {
        MergeError::Read(err) => err.into(),
        MergeError::NotAShard(_) | MergeError::Mismatch { .. } | MergeError::SameShard { .. } => {
            CliError::new(ErrorKind::Usage, err).hint(SHARDS_OF_ONE_PLAN)
        }
        err if err.is_usage() => CliError::new(ErrorKind::Usage, err),
        err => CliError::new(ErrorKind::Harness, err),
    }
}
