//! `deltabench status DIR`: how far a run got: a run directory (plain, a shard, merged;
//! running or ended), or the folder the shards of a submitted or sharded run share.

use std::collections::BTreeMap;
use std::path::Path;

use super::exit::Exit;
use super::submit::{engine_live, read_submission};
use super::{CliError, ErrorKind, print_stdout};
use crate::store::shards::{self, ShardState};
use crate::store::{Manifest, TrialRecord};

/// `status DIR`, once or (with `watch`) every `watch` until the run ends or Ctrl-C.
pub(super) async fn status_watch(
    dir: &Path,
    watch: Option<std::time::Duration>,
) -> Result<Exit, CliError> {
    let Some(every) = watch else {
        return status(dir).map(|(exit, _)| exit);
    };
    loop {
        // Clears the screen only on a terminal; a log gets one report after another.
        if std::io::IsTerminal::is_terminal(&std::io::stdout()) {
            print_stdout("\x1b[2J\x1b[H");
        }
        let (exit, running) = status(dir)?;
        if !running {
            return Ok(exit);
        }
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            _ = tokio::signal::ctrl_c() => return Ok(exit),
        }
        print_stdout("\n");
    }
}

/// Prints the status once; returns the exit code and whether anything still runs.
fn status(dir: &Path) -> Result<(Exit, bool), CliError> {
    if dir.join(crate::store::layout::MANIFEST).exists() {
        return run_status(dir);
    }
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
    let mut text = table(&shard_rows(&progress, &engine), false);
    text.push_str(&shard_totals(&progress));
    text.push_str(&shard_advice(dir, &progress, submission.as_ref()));
    print_stdout(&text);
    let running = progress.iter().any(|p| p.state == ShardState::Running);
    Ok((Exit::Ok, running))
}

/// `rows` in columns two spaces apart, the first row the header; with `numbers`, every column
/// but the first is right-aligned.
fn table<const N: usize>(rows: &[[String; N]], numbers: bool) -> String {
    let widths: Vec<usize> = (0..N)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut text = String::new();
    for row in rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(i, (cell, &w))| {
                if numbers && i > 0 {
                    format!("{cell:>w$}")
                } else {
                    format!("{cell:<w$}")
                }
            })
            .collect();
        text.push_str(cells.join("  ").trim_end());
        text.push('\n');
    }
    text
}

/// The shard table: a header, then one row per shard with what its engine says of it.
fn shard_rows(
    progress: &[shards::ShardProgress],
    engine: &BTreeMap<u32, String>,
) -> Vec<[String; 8]> {
    let mut rows: Vec<[String; 8]> = vec![
        [
            "shard", "state", "planned", "recorded", "passed", "host", "engine", "eta",
        ]
        .map(String::from),
    ];
    for p in progress {
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
    rows
}

fn count(progress: &[shards::ShardProgress], state: ShardState) -> usize {
    progress.iter().filter(|p| p.state == state).count()
}

/// The line under the shard table: trials recorded and passed, shards in each state, the ETA.
fn shard_totals(progress: &[shards::ShardProgress]) -> String {
    let count = |state| count(progress, state);
    let recorded: usize = progress.iter().map(|p| p.recorded).sum();
    let passed: usize = progress.iter().map(|p| p.passed).sum();
    let planned: Option<usize> = progress
        .iter()
        .all(|p| p.planned.is_some())
        .then(|| progress.iter().filter_map(|p| p.planned).sum());
    let eta = progress.iter().filter_map(|p| p.eta_secs).max();
    format!(
        "{recorded} of {} trials recorded, {passed} passed; shards: {} finished, {} running or queued, {} stopped, {} not started{}\n",
        planned.map_or("?".into(), |n| n.to_string()),
        count(ShardState::Finished),
        count(ShardState::Running),
        count(ShardState::Stopped),
        count(ShardState::NotStarted),
        eta.map_or(String::new(), |s| format!("; ETA {}", duration(s))),
    )
}

/// What to do next: shards nobody here can see, shards to resubmit or resume, the merge.
fn shard_advice(
    dir: &Path,
    progress: &[shards::ShardProgress],
    submission: Option<&super::submit::Submission>,
) -> String {
    let count = |state| count(progress, state);
    let mut text = String::new();
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
        text.push_str(&match submission {
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
    text
}

/// One run directory: its state, per agent planned, recorded and passed trials, the trials
/// running now (a trial folder without a record yet), and the ETA at the pace so far.
fn run_status(dir: &Path) -> Result<(Exit, bool), CliError> {
    let shard = crate::store::read_run(dir)?.manifest.shard;
    // The shard's own progress decides running/finished/stopped the way the shard table does.
    let progress = shards::progress_of(dir, shard);
    let run = crate::store::read_run(dir)?;
    let manifest = &run.manifest;
    let done: Vec<&TrialRecord> = run.trials.iter().filter(|r| !r.interrupted).collect();
    let mut text = format!(
        "{}: suite '{}'{}, {}\n",
        dir.display(),
        manifest.suite,
        shard.map_or(String::new(), |s| format!(", shard {s}")),
        run_state(progress.state, manifest)
    );
    text.push_str(&table(&agent_rows(manifest, &done), true));
    let running = progress.state == ShardState::Running;
    if running {
        let in_flight = running_trials(dir, &run);
        if !in_flight.is_empty() {
            text.push_str(&format!("running now: {}\n", in_flight.join(", ")));
        }
    }
    text.push_str(&format!(
        "{} of {} trials recorded, {} passed{}\n",
        done.len(),
        manifest.planned_trials,
        done.iter().filter(|r| r.passed()).count(),
        progress
            .eta_secs
            .map_or(String::new(), |s| format!("; ETA {}", duration(s)))
    ));
    if matches!(progress.state, ShardState::Stopped | ShardState::NotStarted)
        && done.len() < manifest.planned_trials
    {
        text.push_str(&format!(
            "finish it: deltabench resume {}\n",
            crate::support::shell_quote(&dir.display().to_string())
        ));
    }
    print_stdout(&text);
    Ok((Exit::Ok, running))
}

/// How a run directory stands, in words, from its shard state and its manifest.
fn run_state(state: ShardState, manifest: &Manifest) -> String {
    match state {
        ShardState::Finished => "finished".to_owned(),
        ShardState::Running => "running".to_owned(),
        ShardState::Elsewhere => format!(
            "not finished, on host {} (whether it still runs is not visible from here)",
            manifest.host
        ),
        ShardState::Stopped | ShardState::NotStarted if manifest.interrupted => {
            "interrupted".to_owned()
        }
        ShardState::Stopped | ShardState::NotStarted => {
            "stopped without finishing (killed?)".to_owned()
        }
    }
}

/// The per-agent table: a header, then each agent's planned (`-` for an agent the manifest
/// does not name), recorded and passed trials.
fn agent_rows(manifest: &Manifest, done: &[&TrialRecord]) -> Vec<[String; 4]> {
    let mut agents: Vec<String> = manifest.agents.keys().cloned().collect();
    for record in done {
        if !agents.contains(&record.agent) {
            agents.push(record.agent.clone());
        }
    }
    let planned_for = |agent: &str| -> usize {
        let mut n = 0;
        for task in &manifest.tasks {
            for trial in 1..=manifest.trials_per_task {
                if manifest
                    .shard
                    .is_none_or(|s| s.contains(task, agent, trial))
                {
                    n += 1;
                }
            }
        }
        n
    };
    let mut rows: Vec<[String; 4]> =
        vec![["agent", "planned", "recorded", "passed"].map(String::from)];
    for agent in &agents {
        let mine = done.iter().filter(|r| &r.agent == agent);
        rows.push([
            agent.clone(),
            if manifest.agents.contains_key(agent) {
                planned_for(agent).to_string()
            } else {
                "-".into()
            },
            mine.clone().count().to_string(),
            mine.filter(|r| r.passed()).count().to_string(),
        ]);
    }
    rows
}

/// `task / agent #n` of each trial folder that holds no record yet: started, not ended.
fn running_trials(dir: &Path, run: &crate::store::StoredRun) -> Vec<String> {
    let recorded: std::collections::HashSet<(&str, &str, u32)> =
        run.trials.iter().map(|r| r.key()).collect();
    let mut running = Vec::new();
    for task in &run.manifest.tasks {
        for agent in run.manifest.agents.keys() {
            for trial in 1..=run.manifest.trials_per_task {
                let folder = crate::store::layout::trial_path(dir, task, agent, trial);
                if folder.join("instruction.md").exists()
                    && !recorded.contains(&(task.as_str(), agent.as_str(), trial))
                {
                    running.push(format!("{task} / {agent} #{trial}"));
                }
            }
        }
    }
    running
}

fn duration(secs: u64) -> String {
    match secs {
        0..60 => format!("{secs}s"),
        60..3600 => format!("{}m{:02}s", secs / 60, secs % 60),
        _ => format!("{}h{:02}m", secs / 3600, secs % 3600 / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_pads_columns_and_right_aligns_numbers() {
        let rows = [
            ["agent", "n"].map(String::from),
            ["a", "10"].map(String::from),
        ];
        assert_eq!(table(&rows, false), "agent  n\na      10\n");
        assert_eq!(table(&rows, true), "agent   n\na      10\n");
    }
}
