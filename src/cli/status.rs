//! `deltabench status DIR`: how far the shards of a submitted or sharded run got.

use std::path::Path;

use super::exit::Exit;
use super::submit::{engine_live, read_submission};
use super::{CliError, ErrorKind, print_stdout};
use crate::store::shards::{self, ShardState};

pub(super) fn status(dir: &Path) -> Result<Exit, CliError> {
    let submission = read_submission(dir);
    let total = match (&submission, shards::shard_dirs(dir)) {
        (Some(submission), _) => submission.shards,
        (None, Ok(set)) => set.total,
        (None, Err(err)) => {
            return Err(CliError::new(ErrorKind::Usage, err).hint(
                "DIR is the folder a `deltabench submit --out` or `run --shard auto --out` wrote its shards into",
            ));
        }
    };
    let engine = submission.as_ref().map(engine_live).unwrap_or_default();
    let progress = shards::progress(dir, total, &|s| engine.contains_key(&s.index));

    let mut rows: Vec<[String; 8]> = vec![
        [
            "shard", "state", "planned", "recorded", "passed", "host", "engine", "eta",
        ]
        .map(String::from),
    ];
    for p in &progress {
        rows.push([
            p.shard.to_string(),
            p.state.label().to_owned(),
            p.planned.map_or("-".into(), |n| n.to_string()),
            p.recorded.to_string(),
            p.passed.to_string(),
            if p.host.is_empty() {
                "-".into()
            } else {
                p.host.clone()
            },
            engine
                .get(&p.shard.index)
                .cloned()
                .unwrap_or_else(|| "-".into()),
            p.eta_secs.map_or("-".into(), duration),
        ]);
    }
    let widths: Vec<usize> = (0..8)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut text = String::new();
    for row in &rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, &w)| format!("{cell:<w$}"))
            .collect();
        text.push_str(cells.join("  ").trim_end());
        text.push('\n');
    }
    let count = |state: ShardState| progress.iter().filter(|p| p.state == state).count();
    let recorded: usize = progress.iter().map(|p| p.recorded).sum();
    let passed: usize = progress.iter().map(|p| p.passed).sum();
    let planned: Option<usize> = progress
        .iter()
        .all(|p| p.planned.is_some())
        .then(|| progress.iter().filter_map(|p| p.planned).sum());
    let eta = progress.iter().filter_map(|p| p.eta_secs).max();
    text.push_str(&format!(
        "{recorded} of {} trials recorded, {passed} passed; shards: {} finished, {} running or queued, {} stopped, {} not started{}\n",
        planned.map_or("?".into(), |n| n.to_string()),
        count(ShardState::Finished),
        count(ShardState::Running),
        count(ShardState::Stopped),
        count(ShardState::NotStarted),
        eta.map_or(String::new(), |s| format!("; ETA {}", duration(s))),
    ));
    let stopped = super::merge::unfinished_lines(
        &progress
            .iter()
            .filter(|p| matches!(p.state, ShardState::Stopped | ShardState::NotStarted))
            .cloned()
            .collect::<Vec<_>>(),
    );
    let elsewhere = count(ShardState::Elsewhere);
    if elsewhere > 0 {
        text.push_str(&format!(
            "{elsewhere} shard(s) ran on another host without finishing: whether they still run is not visible from here{}\n",
            if submission.is_none() { "" } else { " (ask the engine: squeue, kubectl get pods)" }
        ));
    }
    if !stopped.is_empty() && count(ShardState::Running) < progress.len() {
        text.push_str("not finished and not running:\n");
        for line in &stopped {
            text.push_str(&format!("  {line}\n"));
        }
        text.push_str(&match &submission {
            Some(s) => format!(
                "resubmit them: deltabench submit {} --resume {}\n",
                s.engine,
                dir.display()
            ),
            None => "finish each: deltabench resume SHARD_DIR\n".to_owned(),
        });
    }
    if progress.iter().all(|p| p.state == ShardState::Finished) {
        let merged = dir.join("merged");
        text.push_str(&if merged.join(crate::store::layout::MANIFEST).exists() {
            format!("every shard finished; merged into {}\n", merged.display())
        } else {
            format!("every shard finished: deltabench merge {}\n", dir.display())
        });
    }
    print_stdout(&text);
    Ok(Exit::Ok)
}

fn duration(secs: u64) -> String {
    match secs {
        0..60 => format!("{secs}s"),
        60..3600 => format!("{}m{:02}s", secs / 60, secs % 60),
        _ => format!("{}h{:02}m", secs / 3600, secs % 3600 / 60),
    }
}
