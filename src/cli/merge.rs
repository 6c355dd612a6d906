//! `merge`: shard run directories into one, then the summary table of the whole.

use super::args::MergeArgs;
use super::exit::Exit;
use super::{CliError, ErrorKind, print_stdout};
use crate::report;
use crate::store::{self, MergeError};

pub(super) fn merge(args: MergeArgs) -> Result<Exit, CliError> {
    let merged = store::merge_runs(&args.inputs, &args.out).map_err(merge_error)?;

    let mut text = String::new();
    for (path, shard, trials) in &merged.inputs {
        let shard = shard.map_or("unsharded".to_owned(), |s| format!("shard {s}"));
        text.push_str(&format!("{} ({shard}): {trials} trials\n", path.display()));
    }
    let agents: Vec<String> = merged.manifest.agents.keys().cloned().collect();
    text.push_str(&format!(
        "{}\nmerged {} of {} planned trials into {}\n",
        report::table(&report::summarize(&merged.records, &agents)),
        merged.records.len(),
        merged.manifest.planned_trials,
        args.out.display()
    ));
    print_stdout(&text);

    if let Some(total) = merged
        .inputs
        .first()
        .and_then(|(_, shard, _)| *shard)
        .map(|s| s.total)
        && !merged.missing_shards.is_empty()
    {
        let missing: Vec<String> = merged.missing_shards.iter().map(u32::to_string).collect();
        eprintln!(
            "warning: no input holds shard {} of {total}: the merged run covers only part of the plan",
            missing.join(", ")
        );
    }
    for path in &merged.interrupted {
        eprintln!(
            "warning: {} was interrupted: some of its planned trials are missing",
            path.display()
        );
    }
    Ok(Exit::Ok)
}

fn merge_error(err: MergeError) -> CliError {
    match err {
        MergeError::Read(err) => err.into(),
        MergeError::Mismatch { .. } | MergeError::SameShard { .. } => {
            CliError::new(ErrorKind::Usage, err).hint(
                "merge the shards of one plan: the same `deltabench run` arguments with --shard 1/N .. N/N",
            )
        }
        err if err.is_usage() => CliError::new(ErrorKind::Usage, err),
        err => CliError::new(ErrorKind::Harness, err),
    }
}
