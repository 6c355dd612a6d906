//! A run in rounds split over shards (`run --until-decided --shard`): each shard's `rounds.json`
//! says the last round whose trials it recorded, whether the stopping rule has decided, and when
//! the shard was last alive. Its siblings read it to know when every task's trial of a round is
//! in (the barrier between rounds) and when a sibling died instead of coming.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use super::layout::ROUNDS;

/// How often a shard in rounds refreshes its heartbeat, while it runs trials and while it waits.
pub const HEARTBEAT_SECS: u64 = 5;
/// A shard whose heartbeat is older than this (twelve missed beats) has died.
pub const STALE_SECS: u64 = 60;

/// One shard's place in a run in rounds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoundMark {
    /// The last round whose trials this shard recorded in full (0: none yet).
    pub round: u32,
    /// The stopping rule's outcome once it decided (or hit the cap); `None` while rounds go on.
    pub decided: Option<String>,
    /// Seconds since the Unix epoch when the shard was last alive.
    pub heartbeat: u64,
    /// The host the shard runs on.
    pub host: String,
    /// The shard's process id.
    pub pid: u32,
}

impl RoundMark {
    /// A mark of `round` from this process, its heartbeat now.
    pub fn new(round: u32) -> Self {
        Self {
            round,
            decided: None,
            heartbeat: now(),
            host: super::host_name(),
            pid: std::process::id(),
        }
    }

    /// Seconds since its last heartbeat.
    pub fn silent_for(&self, now: u64) -> u64 {
        now.saturating_sub(self.heartbeat)
    }

    /// Alive: it beat within [`STALE_SECS`].
    pub fn alive(&self, now: u64) -> bool {
        self.silent_for(now) <= STALE_SECS
    }
}

/// The run directory's mark; `None` when it has none (not a shard in rounds, or not started).
/// A mark being replaced is never seen half-written (it is renamed into place).
pub fn read_mark(run_dir: &Path) -> Option<RoundMark> {
    let text = std::fs::read_to_string(run_dir.join(ROUNDS)).ok()?;
    serde_json::from_str(&text).ok()
}

/// Writes the run directory's mark atomically (temp file + rename).
pub fn write_mark(run_dir: &Path, mark: &RoundMark) -> std::io::Result<()> {
    super::write_json_atomic(&run_dir.join(ROUNDS), mark)
}

/// Where a sibling shard stands against the round this shard waits to close.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sibling {
    /// It recorded this round's trials.
    Ready,
    /// No mark yet: its job has not started (or has not finished its first round's set-up).
    NotStarted,
    /// Still in an earlier round, and alive.
    Behind {
        /// The last round it recorded in full.
        round: u32,
    },
    /// Still in an earlier round, and silent for longer than [`STALE_SECS`].
    Gone {
        /// The last round it recorded in full.
        round: u32,
        /// Seconds since its last heartbeat.
        silent: u64,
        /// The host it ran on.
        host: String,
    },
}

/// Where the shard whose mark is `mark` stands against `round`, at `now` (seconds since the Unix
/// epoch).
pub fn sibling(mark: Option<&RoundMark>, round: u32, now: u64) -> Sibling {
    match mark {
        None => Sibling::NotStarted,
        Some(mark) if mark.round >= round => Sibling::Ready,
        Some(mark) if mark.alive(now) => Sibling::Behind { round: mark.round },
        Some(mark) => Sibling::Gone {
            round: mark.round,
            silent: mark.silent_for(now),
            host: mark.host.clone(),
        },
    }
}

/// Seconds since the Unix epoch (0 if the clock is before it).
pub(crate) fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sibling_is_ready_behind_or_gone_by_its_round_and_heartbeat() {
        let mut mark = RoundMark::new(2);
        mark.heartbeat = 1_000;
        assert_eq!(sibling(None, 3, 1_000), Sibling::NotStarted);
        assert_eq!(sibling(Some(&mark), 2, 5_000), Sibling::Ready);
        assert_eq!(sibling(Some(&mark), 3, 1_060), Sibling::Behind { round: 2 });
        assert_eq!(
            sibling(Some(&mark), 3, 1_061),
            Sibling::Gone {
                round: 2,
                silent: 61,
                host: mark.host.clone()
            }
        );
    }

    #[test]
    fn a_mark_reads_back_and_a_missing_or_torn_one_is_none() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read_mark(dir.path()), None);
        let mark = RoundMark::new(4);
        write_mark(dir.path(), &mark).unwrap();
        assert_eq!(read_mark(dir.path()), Some(mark));
        std::fs::write(dir.path().join(ROUNDS), "{\"round\": ").unwrap();
        assert_eq!(read_mark(dir.path()), None);
    }
}
