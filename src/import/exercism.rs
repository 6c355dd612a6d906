//! Exercism exercises (as in Aider's polyglot benchmark) into one suite.
//!
//! An exercise folder holds `.docs/` (the instructions), `.meta/config.json` (which files are
//! the stub, the tests and the reference), the stub and the tests. The suite's repo is a plain
//! folder `repo/` holding every exercise's stub in `repo/<id>/`, with no tests and no `.meta`;
//! each task's hidden tests put the test files back, its solution puts the reference (from
//! `.meta/`) at the stub's path, and its verify command runs the language's tests in the
//! exercise's folder.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::docker::{StageError, copy_tree};
use super::write::{SuiteFile, TaskEntry, write_file};
use super::{Ids, ImportError, ImportOptions, Imported};
use crate::support::shell_quote;

/// How deep under SOURCE exercise folders are looked for (`python/exercises/practice/x`).
const MAX_DEPTH: usize = 5;
/// Folders that are build output or caches, never part of a stub.
const CACHES: [&str; 5] = [
    "__pycache__",
    ".pytest_cache",
    "target",
    "node_modules",
    ".git",
];

/// `.meta/config.json`, the keys the importer uses.
#[derive(Debug, Deserialize)]
struct Config {
    files: Files,
}

#[derive(Debug, Deserialize)]
struct Files {
    #[serde(default)]
    solution: Vec<String>,
    #[serde(default)]
    test: Vec<String>,
    /// Practice exercises' reference.
    #[serde(default)]
    example: Vec<String>,
    /// Concept exercises' reference.
    #[serde(default)]
    exemplar: Vec<String>,
}

/// A language whose tests deltabench knows how to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Language {
    name: &'static str,
    /// Run inside the exercise's folder.
    test_command: &'static str,
    timeout: Duration,
}

const LANGUAGES: [(&[&str], Language); 4] = [
    (
        &["py"],
        Language {
            name: "python",
            test_command: "python3 -m pytest -q",
            timeout: Duration::from_secs(300),
        },
    ),
    (
        &["rs"],
        Language {
            name: "rust",
            // Exercism marks all but the first test #[ignore] for students working step by step.
            test_command: "cargo test -- --include-ignored",
            timeout: Duration::from_secs(600),
        },
    ),
    (
        &["go"],
        Language {
            name: "go",
            test_command: "go test ./...",
            timeout: Duration::from_secs(300),
        },
    ),
    (
        &["js", "mjs", "cjs"],
        Language {
            name: "javascript",
            test_command: "npm test",
            timeout: Duration::from_secs(300),
        },
    ),
];

/// One exercise, read.
#[derive(Debug)]
struct Exercise {
    slug: String,
    dir: PathBuf,
    language: Language,
    instruction: String,
    tests: Vec<String>,
    /// (reference file in the exercise folder, the stub path it replaces).
    reference: Vec<(String, String)>,
}

pub(super) fn import(
    options: &ImportOptions,
    staging: &Path,
    name: &str,
) -> Result<Imported, ImportError> {
    let dirs = exercise_dirs(&options.source);
    if dirs.is_empty() {
        return Err(ImportError::Usage(format!(
            "{}: no exercise (a folder holding .meta/config.json) found, {MAX_DEPTH} levels deep",
            options.source.display()
        )));
    }
    let mut imported = Imported::default();
    let mut exercises = Vec::new();
    for dir in dirs {
        match read_exercise(&dir)? {
            Ok(exercise) => exercises.push(exercise),
            Err((slug, reason)) => imported.skip(slug, reason),
        }
    }
    // Ids are the slugs, unless several languages share the suite (`two-fer` in each).
    let mixed = exercises
        .iter()
        .any(|e| e.language != exercises[0].language);
    let mut ids = Ids::default();
    let mut suite = SuiteFile {
        name: name.to_owned(),
        description: format!(
            "Exercism exercises imported from {}",
            options.source.display()
        ),
        repo: "repo".to_owned(),
        origin: format!("deltabench import exercism {}", options.source.display()),
        tasks: Vec::new(),
    };
    for exercise in &exercises {
        let id = if mixed {
            ids.claim(&format!("{}-{}", exercise.language.name, exercise.slug))
        } else {
            ids.claim(&exercise.slug)
        };
        suite.tasks.push(write_exercise(exercise, &id, staging)?);
    }
    if suite.tasks.is_empty() {
        return Ok(imported);
    }
    suite.write(staging)?;
    imported.suites.push((PathBuf::new(), suite.tasks.len()));
    Ok(imported)
}

/// Exercise folders under `source` (or `source` itself), sorted.
fn exercise_dirs(source: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![(source.to_owned(), 0)];
    while let Some((dir, depth)) = stack.pop() {
        if dir.join(".meta/config.json").is_file() {
            found.push(dir);
            continue;
        }
        if depth == MAX_DEPTH {
            continue;
        }
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !name.starts_with('.')
                && !CACHES.contains(&name.as_str())
                && entry.file_type().is_ok_and(|t| t.is_dir())
            {
                stack.push((entry.path(), depth + 1));
            }
        }
    }
    found.sort();
    found
}

/// An exercise, or its slug and why it cannot be imported.
fn read_exercise(dir: &Path) -> Result<Result<Exercise, (String, String)>, ImportError> {
    let slug = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let config_path = dir.join(".meta/config.json");
    let text = std::fs::read_to_string(&config_path).map_err(|source| ImportError::Read {
        path: config_path.clone(),
        source,
    })?;
    let config: Config =
        serde_json::from_str(&text).map_err(|err| ImportError::json(&config_path, &err))?;
    let skip = |reason: String| Ok(Err((slug.clone(), reason)));
    let files = config.files;
    let reference = if files.example.is_empty() {
        &files.exemplar
    } else {
        &files.example
    };
    let Some(first) = files.solution.first() else {
        return skip("config.json lists no files.solution".into());
    };
    if files.test.is_empty() {
        return skip("config.json lists no files.test".into());
    }
    if reference.is_empty() {
        return skip("config.json lists no files.example (or files.exemplar)".into());
    }
    let extension = Path::new(first)
        .extension()
        .map(|e| e.to_string_lossy().into_owned())
        .unwrap_or_default();
    let Some(language) = LANGUAGES
        .iter()
        .find(|(extensions, _)| extensions.contains(&extension.as_str()))
        .map(|(_, language)| *language)
    else {
        let known: Vec<&str> = LANGUAGES.iter().map(|(_, l)| l.name).collect();
        return skip(format!(
            "no test command for .{extension} exercises (known: {})",
            known.join(", ")
        ));
    };
    let Some(pairs) = pair(reference, &files.solution) else {
        return skip(format!(
            "cannot tell which reference file ({}) replaces which solution file ({})",
            reference.join(", "),
            files.solution.join(", ")
        ));
    };
    for path in reference.iter().chain(&files.test).chain(&files.solution) {
        if !safe_relative(path) {
            return skip(format!(
                "config.json names a path outside the exercise: {path}"
            ));
        }
    }
    if let Some(missing) = reference
        .iter()
        .chain(&files.test)
        .find(|p| !dir.join(p).is_file())
    {
        return skip(format!("{missing} (listed in config.json) does not exist"));
    }
    let mut instruction = String::new();
    for doc in [
        "introduction.md",
        "instructions.md",
        "instructions.append.md",
    ] {
        if let Ok(text) = std::fs::read_to_string(dir.join(".docs").join(doc)) {
            instruction.push_str(text.trim());
            instruction.push_str("\n\n");
        }
    }
    if instruction.trim().is_empty() {
        return skip("no .docs/instructions.md".into());
    }
    Ok(Ok(Exercise {
        slug,
        dir: dir.to_owned(),
        language,
        instruction,
        tests: files.test.clone(),
        reference: pairs,
    }))
}

/// Pairs reference files with the solution files they replace: in order when the lists are as
/// long, else by file name.
fn pair(reference: &[String], solution: &[String]) -> Option<Vec<(String, String)>> {
    if reference.len() == solution.len() {
        return Some(
            reference
                .iter()
                .cloned()
                .zip(solution.iter().cloned())
                .collect(),
        );
    }
    let name = |p: &str| Path::new(p).file_name().map(|n| n.to_owned());
    reference
        .iter()
        .map(|r| {
            solution
                .iter()
                .find(|s| name(s) == name(r))
                .map(|s| (r.clone(), s.clone()))
        })
        .collect()
}

fn safe_relative(path: &str) -> bool {
    Path::new(path).components().all(|c| {
        matches!(
            c,
            std::path::Component::Normal(_) | std::path::Component::CurDir
        )
    })
}

/// Writes the exercise's stub into `repo/<id>/`, its tests, solution and instruction; returns its
/// entry.
fn write_exercise(exercise: &Exercise, id: &str, staging: &Path) -> Result<TaskEntry, ImportError> {
    let stage_err = |err: StageError| match err {
        StageError::Io { path, source } => ImportError::Write { path, source },
        StageError::Unsupported(message) => ImportError::Usage(message.to_string()),
    };
    let stub = staging.join("repo").join(id);
    copy_tree(&exercise.dir, &stub, &[".meta", ".docs", ".exercism"]).map_err(stage_err)?;
    for cache in CACHES {
        let _ = std::fs::remove_dir_all(stub.join(cache));
    }
    let copy = |from: &Path, to: &Path| -> Result<(), ImportError> {
        let bytes = std::fs::read(from).map_err(|source| ImportError::Read {
            path: from.to_owned(),
            source,
        })?;
        write_file(to, bytes, false)
    };
    for test in &exercise.tests {
        let _ = std::fs::remove_file(stub.join(test));
        copy(
            &exercise.dir.join(test),
            &staging.join("tests").join(id).join(id).join(test),
        )?;
    }
    for (reference, solution) in &exercise.reference {
        let _ = std::fs::remove_file(stub.join(reference));
        copy(
            &exercise.dir.join(reference),
            &staging.join("solutions").join(id).join(id).join(solution),
        )?;
    }
    let stubs: Vec<String> = exercise
        .reference
        .iter()
        .map(|(_, solution)| format!("`{id}/{solution}`"))
        .collect();
    let instruction = format!(
        "{}The exercise is in the `{id}/` folder; write your solution in {}. Its tests are not \
         in the workspace.\n",
        exercise.instruction,
        stubs.join(", ")
    );
    let instruction_file = format!("instructions/{id}.md");
    write_file(&staging.join(&instruction_file), instruction, false)?;
    Ok(TaskEntry {
        id: id.to_owned(),
        instruction_file,
        tests: Some(format!("tests/{id}/")),
        verify: format!(
            "cd {} && {}",
            shell_quote(id),
            exercise.language.test_command
        ),
        verify_timeout: Some(exercise.language.timeout),
        solution: Some(format!("solutions/{id}/")),
        tags: vec![exercise.language.name.to_owned()],
        ..TaskEntry::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_files_pair_with_stubs() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(
            pair(&s(&[".meta/example.rs"]), &s(&["src/lib.rs"])).unwrap(),
            [(".meta/example.rs".to_owned(), "src/lib.rs".to_owned())]
        );
        assert_eq!(
            pair(&s(&[".meta/src/b.go"]), &s(&["a.go", "b.go"])).unwrap(),
            [(".meta/src/b.go".to_owned(), "b.go".to_owned())]
        );
        assert!(pair(&s(&[".meta/x.go"]), &s(&["a.go", "b.go"])).is_none());
    }
}
