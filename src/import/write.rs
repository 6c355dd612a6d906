//! Writing an imported suite: its files, its `suite.yaml`, and the move into `--out`.
//!
//! Everything is written into a staging folder inside `--out` first (same filesystem, so the
//! final step is a rename per entry). Dropping the staging folder removes it, so an import that
//! fails half way leaves nothing behind.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::ImportError;

/// How long a grader may take; they parse text and finish in well under a second.
const GRADER_TIMEOUT: &str = "60s";

/// The staging folder inside `--out`.
pub(super) struct Staging {
    out: PathBuf,
    /// `None` once committed or dropped.
    dir: Option<tempfile::TempDir>,
    /// `out` did not exist before: remove it again if nothing is moved into it.
    created: bool,
}

impl Staging {
    /// Refuses an `out` that already holds a suite, unless `force`.
    pub(super) fn new(out: &Path, force: bool) -> Result<Self, ImportError> {
        if out.exists() && !out.is_dir() {
            return Err(ImportError::Usage(format!(
                "--out {}: not a folder",
                out.display()
            )));
        }
        if !force && let Some(found) = existing_suite(out) {
            return Err(ImportError::OutExists {
                out: out.to_owned(),
                found,
            });
        }
        let created = !out.exists();
        fs::create_dir_all(out).map_err(|source| ImportError::Write {
            path: out.to_owned(),
            source,
        })?;
        let dir = tempfile::Builder::new()
            .prefix(".deltabench-import-")
            .tempdir_in(out)
            .map_err(|source| ImportError::Write {
                path: out.to_owned(),
                source,
            })?;
        Ok(Self {
            out: out.to_owned(),
            dir: Some(dir),
            created,
        })
    }

    pub(super) fn path(&self) -> &Path {
        self.dir.as_ref().map_or(&self.out, |dir| dir.path())
    }

    /// Moves every staged entry into `out`. An entry already there is an error unless `force`,
    /// which replaces it; nothing is moved before every entry was checked. A suite lock in a
    /// folder being replaced is kept (its entries count only for tasks that did not change):
    /// the locks kept are returned, to be said.
    pub(super) fn commit(self, force: bool) -> Result<Vec<PathBuf>, ImportError> {
        let read_err = |source| ImportError::Read {
            path: self.path().to_owned(),
            source,
        };
        let entries: Vec<_> = fs::read_dir(self.path())
            .map_err(read_err)?
            .collect::<Result<_, _>>()
            .map_err(read_err)?;
        let targets: Vec<(PathBuf, PathBuf)> = entries
            .iter()
            .map(|e| (e.path(), self.out.join(e.file_name())))
            .collect();
        if !force && let Some((_, taken)) = targets.iter().find(|(_, t)| t.exists()) {
            return Err(ImportError::Conflict {
                path: taken.clone(),
            });
        }
        let mut kept = Vec::new();
        for (from, to) in targets {
            let write_err = |source| ImportError::Write {
                path: to.clone(),
                source,
            };
            if from.is_dir() && to.is_dir() {
                for lock in fs::read_dir(&to).into_iter().flatten().flatten() {
                    let name = lock.file_name();
                    if name.to_string_lossy().ends_with(".lock.json") && !from.join(&name).exists()
                    {
                        fs::rename(lock.path(), from.join(&name)).map_err(write_err)?;
                        kept.push(to.join(&name));
                    }
                }
            }
            match fs::symlink_metadata(&to) {
                Ok(meta) if meta.is_dir() => fs::remove_dir_all(&to).map_err(write_err)?,
                Ok(_) => fs::remove_file(&to).map_err(write_err)?,
                Err(_) => {}
            }
            fs::rename(&from, &to).map_err(write_err)?;
        }
        Ok(kept)
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        drop(self.dir.take());
        if self.created {
            // Only removes `out` when it is empty: nothing was moved in.
            let _ = fs::remove_dir(&self.out);
        }
    }
}

/// `out/suite.yaml`, or a `suite.yaml` one folder down (per-repository suites).
fn existing_suite(out: &Path) -> Option<PathBuf> {
    let top = out.join("suite.yaml");
    if top.is_file() {
        return Some(top);
    }
    let mut found: Vec<PathBuf> = fs::read_dir(out)
        .ok()?
        .flatten()
        .map(|e| e.path().join("suite.yaml"))
        .filter(|p| p.is_file())
        .collect();
    found.sort();
    found.into_iter().next()
}

/// Writes `bytes` to `path`, creating its folders; `executable` sets mode 755.
pub(super) fn write_file(
    path: &Path,
    bytes: impl AsRef<[u8]>,
    executable: bool,
) -> Result<(), ImportError> {
    let err = |source| ImportError::Write {
        path: path.to_owned(),
        source,
    };
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).map_err(err)?;
    }
    fs::write(path, bytes).map_err(err)?;
    if executable {
        fs::set_permissions(path, fs::Permissions::from_mode(0o755)).map_err(err)?;
    }
    Ok(())
}

/// A `suite.yaml` to write.
#[derive(Debug, Clone)]
pub(super) struct SuiteFile {
    pub name: String,
    pub description: String,
    /// Relative to the suite file, or absolute.
    pub repo: String,
    /// The command line that produced it, for the header comment.
    pub origin: String,
    pub tasks: Vec<TaskEntry>,
}

/// One task of a [`SuiteFile`]; paths are relative to the suite file.
#[derive(Debug, Clone, Default)]
pub(super) struct TaskEntry {
    pub id: String,
    pub instruction_file: String,
    pub base: Option<String>,
    pub setup: Option<String>,
    pub tests: Option<String>,
    pub verify: String,
    pub verify_timeout: Option<Duration>,
    /// The folder the test script writes its reward file in (`verify.reward`).
    pub verify_reward: Option<String>,
    pub solution: Option<String>,
    /// The reference as a script the oracle runs (`solution_script:`).
    pub solution_script: Option<String>,
    /// A grader command (its first word a `./` path inside the suite folder).
    pub grader: Option<String>,
    pub timeout: Option<Duration>,
    pub tags: Vec<String>,
    /// The `environment:` mapping's (key, value) pairs; empty for none.
    pub environment: Vec<(&'static str, String)>,
    /// The setup runs once per template (`prepare: true`).
    pub prepare: bool,
}

impl SuiteFile {
    /// The YAML text. Every string is written as a JSON string, which is a valid YAML
    /// double-quoted scalar, so no id, path or command can break the document.
    pub(super) fn render(&self) -> String {
        let mut out = format!(
            "# Written by `{}`.\n# Check it with `deltabench validate`; edit freely.\nname: {}\ndescription: {}\nrepo: {}\ntasks:\n",
            self.origin,
            quote(&self.name),
            quote(&self.description),
            quote(&self.repo)
        );
        for task in &self.tasks {
            out.push_str(&format!("  - id: {}\n", quote(&task.id)));
            let mut field = |key: &str, value: String| {
                out.push_str(&format!("    {key}: {value}\n"));
            };
            field("instruction_file", quote(&task.instruction_file));
            if let Some(base) = &task.base {
                field("base", quote(base));
            }
            if let Some(setup) = &task.setup {
                field("setup", quote(setup));
            }
            if task.prepare {
                field("prepare", "true".to_owned());
            }
            if let Some(tests) = &task.tests {
                field("tests", quote(tests));
            }
            let mut verify = vec![format!("run: {}", quote(&task.verify))];
            verify.extend(
                task.verify_timeout
                    .map(|t| format!("timeout: {}", duration(t))),
            );
            verify.extend(
                task.verify_reward
                    .as_ref()
                    .map(|r| format!("reward: {}", quote(r))),
            );
            field(
                "verify",
                match verify.len() {
                    1 => quote(&task.verify),
                    _ => format!("{{{}}}", verify.join(", ")),
                },
            );
            if let Some(solution) = &task.solution {
                field("solution", quote(solution));
            }
            if let Some(script) = &task.solution_script {
                field("solution_script", quote(script));
            }
            if let Some(grader) = &task.grader {
                field(
                    "metric",
                    format!(
                        "{{grader: {}, timeout: \"{GRADER_TIMEOUT}\"}}",
                        quote(grader)
                    ),
                );
            }
            if let Some(timeout) = task.timeout {
                field("timeout", duration(timeout));
            }
            if !task.environment.is_empty() {
                let pairs: Vec<String> = task
                    .environment
                    .iter()
                    // `cpus` is a number and `verify_mounts` a mapping, written as YAML already;
                    // every other value a string.
                    .map(|(key, value)| match *key {
                        "cpus" | "verify_mounts" => format!("{key}: {value}"),
                        _ => format!("{key}: {}", quote(value)),
                    })
                    .collect();
                field("environment", format!("{{{}}}", pairs.join(", ")));
            }
            if !task.tags.is_empty() {
                let tags: Vec<String> = task.tags.iter().map(|t| quote(t)).collect();
                field("tags", format!("[{}]", tags.join(", ")));
            }
        }
        out
    }

    /// Writes `suite.yaml` into `dir`.
    pub(super) fn write(&self, dir: &Path) -> Result<(), ImportError> {
        write_file(&dir.join("suite.yaml"), self.render(), false)
    }
}

pub(super) fn quote(text: &str) -> String {
    serde_json::Value::from(text).to_string()
}

fn duration(d: Duration) -> String {
    quote(&humantime::format_duration(d).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rendered_suites_quote_everything() {
        let suite = SuiteFile {
            name: "n".into(),
            description: "rows: \"quoted\"\nand a newline".into(),
            repo: "/abs/repo".into(),
            origin: "deltabench import swebench rows.jsonl".into(),
            tasks: vec![TaskEntry {
                id: "a-1".into(),
                instruction_file: "instructions/a-1.md".into(),
                verify: "python3 -m pytest -rA 'tests/t.py::test[a: b]'".into(),
                verify_timeout: Some(Duration::from_secs(150)),
                grader: Some("./graders/swebench.py tests/a-1.json".into()),
                tags: vec!["x: y".into()],
                environment: vec![
                    ("image", "localhost/x:1".into()),
                    ("workdir", "/app".into()),
                ],
                ..TaskEntry::default()
            }],
        };
        let text = suite.render();
        assert!(text.contains(
            "verify: {run: \"python3 -m pytest -rA 'tests/t.py::test[a: b]'\", timeout: \"2m 30s\"}"
        ), "{text}");
        assert!(text.contains("tags: [\"x: y\"]"), "{text}");
        assert!(
            text.contains("environment: {image: \"localhost/x:1\", workdir: \"/app\"}"),
            "{text}"
        );
        assert!(
            text.contains("description: \"rows: \\\"quoted\\\"\\nand a newline\""),
            "{text}"
        );
    }

    #[test]
    fn staging_refuses_an_existing_suite_without_force() {
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join("out");
        write_file(&out.join("sub/suite.yaml"), "x", false).unwrap();
        let err = Staging::new(&out, false).err().unwrap();
        assert!(matches!(err, ImportError::OutExists { .. }), "{err}");

        let staging = Staging::new(&out, true).unwrap();
        write_file(&staging.path().join("sub/suite.yaml"), "new", false).unwrap();
        staging.commit(true).unwrap();
        assert_eq!(
            fs::read_to_string(out.join("sub/suite.yaml")).unwrap(),
            "new"
        );
        assert_eq!(
            fs::read_dir(&out).unwrap().count(),
            1,
            "the staging folder is gone"
        );
    }
}
