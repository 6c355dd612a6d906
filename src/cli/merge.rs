//! `merge`: shard run directories into one, then the summary table of the whole.

use super::{CliError, EXIT_OK, MergeArgs, print_stdout};
use crate::report;
use crate::store::{self, MergeError};

pub(super) fn merge(args: MergeArgs) -> Result<u8, CliError> {
    let merged = store::merge_runs(&args.inputs, &args.out).map_err(|err| {
        let hint = match &err {
            MergeError::Read(_) => {
                Some("each RUN_DIR should be a run directory written by `deltabench run`".into())
            }
            MergeError::Mismatch { .. } | MergeError::SameShard { .. } => Some(
                "merge the shards of one plan: the same `deltabench run` arguments with --shard 1/N .. N/N"
                    .into(),
            ),
            _ => None,
        };
        let message = err.to_string();
        let error = if err.is_usage() {
            CliError::usage(message)
        } else {
            CliError::failed(message)
        };
        error.hint(hint)
    })?;

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
    Ok(EXIT_OK)
}
