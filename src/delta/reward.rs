//! A task's reward file (Harbor's `/logs/verifier/reward.txt` or `reward.json`), read by the
//! harness, never by a program of the task's image.
//!
//! The verify run gets a fresh, empty reward folder. While the command runs, a guard
//! (fanotify, on the host) refuses every open of a file in it by a process outside the test
//! script's process tree (a daemon that double-forked away from it, which a namespace's init
//! now holds) and notes any write by such a process. Once every process of the command has
//! ended (the container or sandbox is gone), the harness reads the files: regular files only,
//! not through a symlink, bounded in size.
//!
//! The value, by Harbor's rule: reward.json's numeric `"reward"`; else reward.txt; else
//! reward.json's only number; else the mean of its numbers (booleans are not numbers).

use std::collections::HashSet;
use std::io::Read;
use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

use nix::sys::fanotify::{
    EventFFlags, Fanotify, FanotifyResponse, InitFlags, MarkFlags, MaskFlags, Response,
};
use serde::{Deserialize, Serialize};

/// The most bytes of a reward file read.
const MAX_REWARD_BYTES: u64 = 64 * 1024;

/// What the harness read from the reward folder.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Reward {
    /// The reward, when the files hold one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<f64>,
    /// Which file it came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// Why the reward does not count (a file written by a process the test script did not
    /// start, a symlink, a value that is not a number): the trial cannot pass.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<String>,
    /// Whether the guard watched the folder (it needs root).
    #[serde(default)]
    pub guarded: bool,
}

impl Reward {
    /// A full reward that nothing casts doubt on.
    pub fn passed(&self) -> bool {
        self.problems.is_empty() && self.value.is_some_and(|v| v >= 1.0)
    }
}

/// Empties (or makes) the reward folder `dir`: nothing the agent left there counts. A symlink
/// on the way is replaced by a folder.
pub fn fresh_folder(root: &Path, dir: &Path) -> std::io::Result<PathBuf> {
    let mut at = root.to_owned();
    for part in dir.components() {
        at.push(part);
        match std::fs::symlink_metadata(&at) {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => std::fs::remove_file(&at)?,
            Err(_) => {}
        }
    }
    if at.exists() {
        std::fs::remove_dir_all(&at)?;
    }
    std::fs::create_dir_all(&at)?;
    Ok(at)
}

/// Reads the reward from `dir` once the command and all its processes have ended.
pub fn read(dir: &Path, guard: Option<Guarded>) -> Reward {
    let mut reward = Reward {
        guarded: guard.is_some(),
        problems: guard.map(|g| g.problems).unwrap_or_default(),
        ..Reward::default()
    };
    let mut file = |name: &str| -> Option<String> {
        let path = dir.join(name);
        let meta = std::fs::symlink_metadata(&path).ok()?;
        if !meta.is_file() {
            reward.problems.push(format!(
                "{name} is not a regular file (a symlink or a folder)"
            ));
            return None;
        }
        let opened = std::fs::File::options()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&path);
        let mut text = String::new();
        match opened.and_then(|f| f.take(MAX_REWARD_BYTES).read_to_string(&mut text)) {
            Ok(_) => Some(text),
            Err(e) => {
                reward.problems.push(format!("cannot read {name}: {e}"));
                None
            }
        }
    };
    let json = file("reward.json");
    let txt = file("reward.txt");
    let number = |text: &str| text.trim().parse::<f64>().ok().filter(|v| v.is_finite());
    if let Some(json) = json.as_deref().filter(|t| !t.trim().is_empty()) {
        match serde_json::from_str::<serde_json::Value>(json) {
            Ok(value) => {
                if let Some(v) = value.as_f64().filter(|_| value.is_number()) {
                    reward.value = Some(v);
                } else if let Some(v) = value.get("reward").and_then(|v| v.as_f64()) {
                    reward.value = Some(v);
                }
                if let Some(value) = reward.value {
                    reward.from = Some("reward.json".into());
                    // Both files, saying different things: one of them is not the test
                    // script's (code the tests imported wrote the one the rule prefers).
                    if let Some(other) = txt.as_deref().and_then(number).filter(|t| *t != value) {
                        reward.problems.push(format!(
                            "reward.json says {value} and reward.txt says {other}"
                        ));
                    }
                    return reward;
                }
                if let Some(v) = txt.as_deref().and_then(number) {
                    reward.value = Some(v);
                    reward.from = Some("reward.txt".into());
                    return reward;
                }
                let numbers: Vec<f64> = value
                    .as_object()
                    .map(|o| o.values().filter_map(|v| v.as_f64()).collect())
                    .unwrap_or_default();
                if numbers.is_empty() {
                    reward
                        .problems
                        .push("reward.json holds no number".to_owned());
                } else {
                    reward.value = Some(numbers.iter().sum::<f64>() / numbers.len() as f64);
                    reward.from = Some("reward.json".into());
                }
                return reward;
            }
            Err(e) => reward
                .problems
                .push(format!("reward.json is not JSON: {e}")),
        }
    }
    match txt.as_deref().map(str::trim) {
        Some("") | None => {}
        Some(text) => match number(text) {
            Some(v) => {
                reward.value = Some(v);
                reward.from = Some("reward.txt".into());
            }
            None => reward
                .problems
                .push(format!("reward.txt holds no number: {:?}", truncate(text))),
        },
    }
    reward
}

fn truncate(text: &str) -> &str {
    let end = text.char_indices().nth(40).map_or(text.len(), |(i, _)| i);
    &text[..end]
}

/// Watches a reward folder while the verify command runs (see the module's header).
pub struct Guard {
    stop: Arc<AtomicBool>,
    problems: Arc<Mutex<Vec<String>>>,
    thread: Option<JoinHandle<()>>,
}

/// What the guard saw, once stopped.
pub struct Guarded {
    problems: Vec<String>,
}

impl Guard {
    /// Starts guarding `dir`, or `None` where fanotify's permission events are not allowed
    /// (not root): the reward is then read unguarded, and the record says so.
    pub fn start(dir: &Path) -> Option<Self> {
        let group = Fanotify::init(
            InitFlags::FAN_CLASS_CONTENT | InitFlags::FAN_CLOEXEC | InitFlags::FAN_NONBLOCK,
            EventFFlags::O_RDONLY | EventFFlags::O_CLOEXEC,
        )
        .ok()?;
        group
            .mark(
                MarkFlags::FAN_MARK_ADD,
                MaskFlags::FAN_OPEN_PERM | MaskFlags::FAN_MODIFY | MaskFlags::FAN_EVENT_ON_CHILD,
                std::fs::File::open(dir).ok()?.as_fd(),
                None::<&Path>,
            )
            .ok()?;
        let stop = Arc::new(AtomicBool::new(false));
        let problems = Arc::new(Mutex::new(Vec::new()));
        let (stop_seen, noted) = (stop.clone(), problems.clone());
        let thread = std::thread::Builder::new()
            .name("reward-guard".into())
            .spawn(move || serve(&group, &stop_seen, &noted))
            .ok()?;
        Some(Self {
            stop,
            problems,
            thread: Some(thread),
        })
    }

    /// Stops the guard (after every process of the command has ended) and says what it saw.
    pub fn stop(mut self) -> Guarded {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        let problems =
            std::mem::take(&mut *self.problems.lock().unwrap_or_else(|p| p.into_inner()));
        Guarded { problems }
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn serve(group: &Fanotify, stop: &AtomicBool, problems: &Mutex<Vec<String>>) {
    // Processes seen opening a file there, and whether each is the test script's.
    let mut known: std::collections::HashMap<i32, bool> = std::collections::HashMap::new();
    let mut noted: HashSet<String> = HashSet::new();
    let mut note = |text: String| {
        if noted.insert(text.clone()) {
            problems
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(text);
        }
    };
    loop {
        let events = match group.read_events() {
            Ok(events) => events,
            Err(nix::errno::Errno::EAGAIN) => {
                if stop.load(Ordering::SeqCst) {
                    return;
                }
                let mut fds = [nix::poll::PollFd::new(
                    group.as_fd(),
                    nix::poll::PollFlags::POLLIN,
                )];
                let _ = nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(50u16));
                continue;
            }
            Err(_) => return,
        };
        for event in events {
            let pid = event.pid();
            let mask = event.mask();
            if mask.contains(MaskFlags::FAN_OPEN_PERM) {
                let ours = of_the_test_script(pid);
                known.insert(pid, ours == Some(true));
                let allow = ours == Some(true);
                if !allow {
                    note(format!(
                        "a process the test script did not start ({}) opened a file of the reward folder (refused)",
                        describe(pid)
                    ));
                }
                if let Some(fd) = event.fd() {
                    let response = if allow {
                        Response::FAN_ALLOW
                    } else {
                        Response::FAN_DENY
                    };
                    let _ = group.write_response(FanotifyResponse::new(fd, response));
                }
            } else if mask.contains(MaskFlags::FAN_MODIFY) {
                let ours = known.get(&pid).copied().or_else(|| of_the_test_script(pid));
                if ours != Some(true) {
                    note(format!(
                        "a process the test script did not start ({}) wrote a file of the reward folder",
                        describe(pid)
                    ));
                }
            }
        }
    }
}

/// Whether `pid` belongs to the test script's process tree. Walking up its parents to the one
/// whose parent is the namespace's init (the runtime's or bubblewrap's, pid 1 in the command's
/// own pid namespace, the first below ours): that one is the test script when it is the init's
/// eldest child (an orphan the init took in started after the script that made it). `None` when
/// a process on the way is gone.
fn of_the_test_script(pid: i32) -> Option<bool> {
    let mut at = pid;
    for _ in 0..4096 {
        let (inside, parent) = ids(at)?;
        match inside.as_deref() {
            // Out of the namespace (the runtime, deltabench), or its init itself.
            None | Some("1") => return Some(false),
            Some(_) => {}
        }
        if parent <= 0 {
            return Some(false);
        }
        if ids(parent)?.0.as_deref() == Some("1") {
            return Some(eldest_child(parent) == Some(at));
        }
        at = parent;
    }
    Some(false)
}

/// `pid`'s id in the first pid namespace below ours (none when it is in ours) and its parent.
fn ids(pid: i32) -> Option<(Option<String>, i32)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| status.lines().find_map(|l| l.strip_prefix(name));
    let inside = field("NSpid:")?
        .split_whitespace()
        .nth(1)
        .map(str::to_owned);
    let parent = field("PPid:")?.trim().parse().ok()?;
    Some((inside, parent))
}

/// The child of `parent` that started first.
fn eldest_child(parent: i32) -> Option<i32> {
    let mut eldest: Option<(u64, i32)> = None;
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // After the command's name, in parentheses: state, ppid, ... starttime is field 22.
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let (Some(ppid), Some(start)) = (fields.get(1), fields.get(19)) else {
            continue;
        };
        if ppid.parse::<i32>().ok() != Some(parent) {
            continue;
        }
        let Ok(start) = start.parse::<u64>() else {
            continue;
        };
        if eldest.is_none_or(|(s, p)| (start, pid) < (s, p)) {
            eldest = Some((start, pid));
        }
    }
    eldest.map(|(_, pid)| pid)
}

fn describe(pid: i32) -> String {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    match comm.trim() {
        "" => format!("pid {pid}"),
        comm => format!("pid {pid}, {comm}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reward_of(files: &[(&str, &str)]) -> Reward {
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in files {
            std::fs::write(dir.path().join(name), text).unwrap();
        }
        read(dir.path(), None)
    }

    #[test]
    fn the_value_follows_harbors_rule() {
        let value = |files: &[(&str, &str)]| reward_of(files).value;
        assert_eq!(value(&[("reward.txt", "1\n")]), Some(1.0));
        assert_eq!(value(&[("reward.txt", " 0.5 ")]), Some(0.5));
        let both = reward_of(&[
            ("reward.json", r#"{"reward": 1, "x": 1}"#),
            ("reward.txt", "0"),
        ]);
        assert_eq!(both.value, Some(1.0));
        assert!(!both.passed(), "{both:?}");
        assert_eq!(both.problems, ["reward.json says 1 and reward.txt says 0"]);
        assert_eq!(
            value(&[("reward.json", r#"{"reward": 0, "x": 1}"#)]),
            Some(0.0)
        );
        assert_eq!(
            value(&[
                ("reward.json", r#"{"a": true, "b": 0.25}"#),
                ("reward.txt", "1")
            ]),
            Some(1.0)
        );
        assert_eq!(value(&[("reward.json", r#"{"a": 1, "b": 0}"#)]), Some(0.5));
        assert_eq!(value(&[("reward.json", "1")]), Some(1.0));
        assert_eq!(value(&[]), None);
        let bad = reward_of(&[("reward.txt", "yes")]);
        assert!(!bad.passed());
        assert_eq!(bad.problems, [r#"reward.txt holds no number: "yes""#]);
    }

    #[test]
    fn a_symlinked_reward_file_is_a_problem_and_the_folder_starts_empty() {
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("outside");
        std::fs::write(&outside, "1").unwrap();
        let folder = fresh_folder(dir.path(), Path::new("logs/verifier")).unwrap();
        std::os::unix::fs::symlink(&outside, folder.join("reward.txt")).unwrap();
        let reward = read(&folder, None);
        assert_eq!(reward.value, None);
        assert!(!reward.passed());
        assert!(
            reward.problems[0].contains("not a regular file"),
            "{reward:?}"
        );
        let again = fresh_folder(dir.path(), Path::new("logs/verifier")).unwrap();
        assert_eq!(std::fs::read_dir(again).unwrap().count(), 0);
        // A symlink on the way is replaced, never followed.
        std::fs::remove_dir_all(dir.path().join("logs")).unwrap();
        std::os::unix::fs::symlink(dir.path(), dir.path().join("logs")).unwrap();
        let made = fresh_folder(dir.path(), Path::new("logs/verifier")).unwrap();
        assert!(
            !std::fs::symlink_metadata(dir.path().join("logs"))
                .unwrap()
                .is_symlink()
        );
        assert!(made.is_dir() && outside.exists());
    }
}
