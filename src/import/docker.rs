//! Container tasks: what a Dockerfile puts in the working directory, and the container paths in
//! task files rewritten to the workspace.
//!
//! The files a Dockerfile `COPY`s into its working directory are laid out in a directory: they
//! become the workspace, which is mounted over that directory. A Dockerfile made only of `FROM`,
//! `WORKDIR`, `COPY` into the working directory and metadata needs nothing else; anything more
//! (`RUN`, `ENV`, `USER`, `ADD` or a copy outside the working directory) is left to a build at
//! run time ([`Environment::build`]). A multi-stage build, a variable in a path, or an `ADD` or
//! `COPY --from` into the working directory (which the workspace would hide) cannot be imported.

use std::fs;
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};

/// Where an image's working directory is when the Dockerfile sets none (Harbor's convention).
const DEFAULT_WORKDIR: &str = "/app";

/// Instructions that only describe the image, never its files.
const METADATA: [&str; 8] = [
    "LABEL",
    "MAINTAINER",
    "EXPOSE",
    "CMD",
    "ENTRYPOINT",
    "STOPSIGNAL",
    "HEALTHCHECK",
    "ARG",
];

/// Where the workspace keeps what a container would have at its fixed paths.
pub(super) const TESTS_DIR: &str = ".deltabench/tests";
pub(super) const LOGS_DIR: &str = ".deltabench/logs";
pub(super) const SOLUTION_DIR: &str = ".deltabench/solution";

/// The files a Dockerfile lays out, and the directory the task works in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Environment {
    /// The final `WORKDIR`, absolute: the workspace root.
    pub workdir: String,
    pub copies: Vec<CopyStep>,
    /// Why the image must be built (the first instruction that needs it), or `None` when the
    /// staged files are all the Dockerfile adds.
    pub build: Option<String>,
    /// The `FROM` image.
    pub from: Option<String>,
    /// Absolute paths inside the working directory that a `RUN rm` removes: the workspace,
    /// mounted over that directory, would otherwise still hold them.
    pub removals: Vec<String>,
    /// Other `RUN` steps that change files in the working directory (the workspace hides what
    /// they do there): said at import.
    pub hidden_runs: Vec<String>,
}

/// One `COPY SRC... DEST`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct CopyStep {
    /// Paths in the build context; the last component may hold `*` or `?`.
    pub sources: Vec<String>,
    /// Absolute in the container; a trailing `/` is kept (it makes DEST a directory).
    pub dest: String,
    /// The instruction as written, for messages.
    pub line: String,
}

/// Why a Dockerfile cannot be imported as files: the task needs a real image build.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum DockerfileError {
    /// An instruction the importer cannot lay out; `line` is shortened for the message.
    #[error("cannot import its Dockerfile: {line} ({why})")]
    Unsupported { line: String, why: String },
    #[error("works in / (WORKDIR /): the workspace root cannot stand for the whole filesystem")]
    RootWorkdir,
}

/// Why an environment cannot be laid out as files.
#[derive(Debug, thiserror::Error)]
pub(super) enum StageError {
    /// The task needs a real image build: a skip reason.
    #[error(transparent)]
    Unsupported(#[from] DockerfileError),
    #[error("cannot copy {}: {source}", path.display())]
    Io { path: PathBuf, source: io::Error },
}

fn unsupported(line: &str, why: &str) -> DockerfileError {
    DockerfileError::Unsupported {
        line: shorten(line),
        why: why.to_owned(),
    }
}

fn shorten(line: &str) -> String {
    const MAX: usize = 100;
    let line = line.trim();
    match line.char_indices().nth(MAX) {
        Some((cut, _)) => format!("{}...", &line[..cut]),
        None => line.to_owned(),
    }
}

/// Reads a Dockerfile; `Err` is the skip reason when it cannot be imported.
pub(super) fn parse_dockerfile(text: &str) -> Result<Environment, DockerfileError> {
    let mut workdir: Option<String> = None;
    let mut copies = Vec::new();
    // ADD and COPY --from: built, never staged, so never into the working directory.
    let mut unstaged = Vec::new();
    let mut build = None;
    let mut images = 0;
    let (mut from, mut removals, mut hidden_runs) = (None, Vec::new(), Vec::new());
    for line in instructions(text) {
        let (keyword, rest) = line
            .split_once(char::is_whitespace)
            .map_or((line.as_str(), ""), |(k, r)| (k, r.trim()));
        let current = workdir.as_deref().unwrap_or("/");
        match keyword.to_ascii_uppercase().as_str() {
            "FROM" => {
                images += 1;
                if images > 1 {
                    return Err(unsupported(&line, "a multi-stage build"));
                }
                from = rest
                    .split_whitespace()
                    .find(|word| !word.starts_with("--"))
                    .map(str::to_owned);
            }
            "RUN" => {
                build.get_or_insert_with(|| shorten(&line));
                match run_removals(rest, current) {
                    Some(paths) => removals.extend(paths),
                    None if changes_files(rest) => {
                        hidden_runs.push((current.to_owned(), rest.to_owned(), shorten(&line)));
                    }
                    None => {}
                }
            }
            "WORKDIR" => {
                if rest.contains('$') {
                    return Err(unsupported(&line, "a variable in the path"));
                }
                workdir = Some(join_container(current, rest));
            }
            "COPY" | "ADD" => {
                let (step, staged) = copy_step(&line, rest, current)?;
                if staged && keyword.eq_ignore_ascii_case("COPY") {
                    copies.push(step);
                } else {
                    build.get_or_insert_with(|| shorten(&line));
                    unstaged.push(step);
                }
            }
            k if METADATA.contains(&k) => {}
            _ => {
                build.get_or_insert_with(|| shorten(&line));
            }
        }
    }
    let workdir = workdir.unwrap_or_else(|| DEFAULT_WORKDIR.to_owned());
    if workdir == "/" {
        return Err(DockerfileError::RootWorkdir);
    }
    if let Some(step) = unstaged
        .iter()
        .find(|s| inside(&workdir, &s.dest).is_some())
    {
        return Err(unsupported(
            &step.line,
            &format!("the workspace mounted at {workdir} would hide what it puts there"),
        ));
    }
    if build.is_none()
        && let Some(step) = copies.iter().find(|s| inside(&workdir, &s.dest).is_none())
    {
        build = Some(shorten(&step.line));
    }
    removals.retain(|path| inside(&workdir, path).is_some_and(|rel| !rel.is_empty()));
    // Only steps that name the working directory, or ran there and write a path that may be in
    // it, change what the workspace hides (`RUN mkdir -p /tests` in it does not).
    let hidden_runs = hidden_runs
        .into_iter()
        .filter(|(dir, command, _): &(String, String, String)| {
            command.contains(workdir.as_str())
                || (inside(&workdir, dir).is_some() && !writes_only_outside(command, &workdir))
        })
        .map(|(_, _, line)| line)
        .collect();
    Ok(Environment {
        workdir,
        copies,
        build,
        from,
        removals,
        hidden_runs,
    })
}

/// The paths a `RUN` made only of `rm [-f|-r|-rf] PATH...` steps (joined by `&&` or `;`)
/// removes, absolute; `None` when it does anything else or a path has a variable or a glob.
fn run_removals(command: &str, dir: &str) -> Option<Vec<String>> {
    let mut paths = Vec::new();
    for step in command.split("&&").flat_map(|part| part.split(';')) {
        let words = shell_words(step)?;
        let (program, args) = words.split_first()?;
        if program != "rm" {
            return None;
        }
        for arg in args {
            if arg.starts_with('-') {
                continue;
            }
            if arg.contains(['$', '*', '?', '[', '`']) {
                return None;
            }
            paths.push(join_container(dir, arg));
        }
    }
    (!paths.is_empty()).then_some(paths)
}

/// Commands that write, move or remove files.
const WRITERS: [&str; 13] = [
    "rm", "mv", "cp", "touch", "mkdir", "ln", "tar", "unzip", "patch", "git", "wget", "curl", "sed",
];

/// Whether a shell command looks like it writes, moves or removes files.
fn changes_files(command: &str) -> bool {
    command.contains('>')
        || command
            .split(|c: char| c.is_whitespace() || matches!(c, ';' | '&' | '|' | '(' | ')'))
            .any(|word| WRITERS.contains(&word))
}

/// Whether every step of `command` that changes files names only absolute paths outside
/// `workdir` (`mkdir -p /tests && echo x > /etc/x.conf`): then it changes nothing there, wherever
/// it runs. A path with a variable, a relative one, or a step that cannot be read counts as in it.
fn writes_only_outside(command: &str, workdir: &str) -> bool {
    let outside = |path: &str| {
        path.starts_with('/')
            && !path.contains(['$', '`'])
            && inside(workdir, &join_container("/", path)).is_none()
    };
    command
        .split("&&")
        .flat_map(|part| part.split(';'))
        .flat_map(|part| part.split('|'))
        .all(|step| {
            let mut parts = step.split('>');
            let head = parts.next().unwrap_or_default();
            // Each redirection's target: `>>` leaves an empty part, `2>&1` a descriptor.
            let targets_outside = parts.all(|target| {
                let target = target.trim_start();
                target.is_empty()
                    || target.starts_with('&')
                    || shell_words(target)
                        .is_some_and(|words| words.first().is_some_and(|word| outside(word)))
            });
            let Some(words) = shell_words(head) else {
                return false;
            };
            let Some((program, args)) = words.split_first() else {
                return targets_outside;
            };
            if !WRITERS.contains(&program.as_str()) {
                return targets_outside && !changes_files(head);
            }
            targets_outside
                && args
                    .iter()
                    .filter(|arg| !arg.starts_with('-'))
                    .all(|arg| outside(arg))
        })
}

/// `dest` relative to `workdir` ("" for `workdir` itself), or `None` outside it.
fn inside<'a>(workdir: &str, dest: &'a str) -> Option<&'a str> {
    let dest = dest.trim_end_matches('/');
    if dest == workdir {
        Some("")
    } else {
        dest.strip_prefix(workdir)
            .and_then(|rest| rest.strip_prefix('/'))
    }
}

/// The Dockerfile's instructions, continuation lines joined, comments and blanks dropped.
fn instructions(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut pending = String::new();
    for raw in text.lines() {
        let trimmed = raw.trim();
        if trimmed.starts_with('#') || (trimmed.is_empty() && pending.is_empty()) {
            continue;
        }
        match trimmed.strip_suffix('\\') {
            Some(head) => {
                pending.push_str(head.trim_end());
                pending.push(' ');
            }
            None => {
                pending.push_str(trimmed);
                out.push(std::mem::take(&mut pending).trim().to_owned());
            }
        }
    }
    if !pending.trim().is_empty() {
        out.push(pending.trim().to_owned());
    }
    out
}

/// One COPY or ADD, and whether its sources are in the build context (not `--from` a stage or
/// an image).
fn copy_step(line: &str, rest: &str, workdir: &str) -> Result<(CopyStep, bool), DockerfileError> {
    let mut words: Vec<String> = if rest.starts_with('[') {
        serde_json::from_str(rest).map_err(|_| unsupported(line, "unreadable JSON form"))?
    } else {
        shell_words(rest).ok_or_else(|| unsupported(line, "an unclosed quote"))?
    };
    let mut staged = true;
    while words.first().is_some_and(|w| w.starts_with("--")) {
        let flag = words.remove(0);
        let name = flag.split('=').next().unwrap_or_default();
        match name {
            "--chown" | "--chmod" | "--link" => {}
            _ => staged = false,
        }
    }
    if words.iter().any(|w| w.contains('$') || w.starts_with("<<")) {
        return Err(unsupported(line, "a variable or here-document in a path"));
    }
    let Some(dest) = words.pop().filter(|_| !words.is_empty()) else {
        return Err(unsupported(line, "no source and destination"));
    };
    let trailing = if dest.ends_with('/') { "/" } else { "" };
    let absolute = join_container(workdir, &dest);
    let step = CopyStep {
        sources: words,
        dest: format!("{}{trailing}", absolute.trim_end_matches('/')),
        line: line.to_owned(),
    };
    Ok((step, staged))
}

/// Shell-form words, quotes removed as the builder removes them (`COPY "src/" "/dst/"`).
fn shell_words(text: &str) -> Option<Vec<String>> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut quote: Option<char> = None;
    for c in text.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.get_or_insert_with(String::new).push(c),
            (None, '"' | '\'') => {
                quote = Some(c);
                word.get_or_insert_with(String::new);
            }
            (None, c) if c.is_whitespace() => words.extend(word.take()),
            (None, c) => word.get_or_insert_with(String::new).push(c),
        }
    }
    words.extend(word);
    quote.is_none().then_some(words)
}

/// `path` made absolute against `dir`, with `.` and `..` resolved (as the container would).
fn join_container(dir: &str, path: &str) -> String {
    let joined = if path.starts_with('/') {
        path.to_owned()
    } else {
        format!("{dir}/{path}")
    };
    let mut parts: Vec<&str> = Vec::new();
    for part in joined.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            other => parts.push(other),
        }
    }
    format!("/{}", parts.join("/"))
}

/// Lays the environment's files out under `root` (the working directory), reading sources from
/// `context`. `harness` names files at the top of the context that are the task's own harness
/// (tests, solution, task file): a `COPY . DEST` leaves them out. A copy outside the working
/// directory is the build's (an environment without a build has none).
pub(super) fn stage(
    env: &Environment,
    context: &Path,
    root: &Path,
    harness: &[&str],
) -> Result<(), StageError> {
    fs::create_dir_all(root).map_err(io_at(root))?;
    for step in &env.copies {
        let Some(relative) = inside(&env.workdir, &step.dest) else {
            continue;
        };
        let target = root.join(relative);
        let into_dir = step.dest.ends_with('/')
            || step.sources.len() > 1
            || relative.is_empty()
            || target.is_dir();
        for source in &step.sources {
            let matches = expand(context, source).map_err(|why| {
                StageError::Unsupported(unsupported(&step.line, &why.to_string()))
            })?;
            for path in matches {
                let from = context.join(&path);
                let top = path.as_os_str().is_empty();
                if from.is_dir() {
                    copy_tree(&from, &target, if top { harness } else { &[] })?;
                } else if into_dir {
                    let name = from.file_name().unwrap_or_default();
                    copy_entry(&from, &target.join(name))?;
                } else {
                    copy_entry(&from, &target)?;
                }
            }
        }
    }
    for path in &env.removals {
        let Some(relative) = inside(&env.workdir, path) else {
            continue;
        };
        let target = root.join(relative);
        let removed = match fs::symlink_metadata(&target) {
            Ok(meta) if meta.is_dir() => fs::remove_dir_all(&target),
            Ok(_) => fs::remove_file(&target),
            Err(_) => Ok(()),
        };
        removed.map_err(io_at(&target))?;
    }
    Ok(())
}

fn io_at(path: &Path) -> impl FnOnce(io::Error) -> StageError + '_ {
    move |source| StageError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Why a COPY source names no file of the build context.
#[derive(Debug, thiserror::Error)]
enum SourceError {
    #[error("source '{0}' leaves the build context")]
    LeavesContext(String),
    #[error("source '{0}' is not in the build context")]
    NotInContext(String),
    #[error("source '{0}': {1}")]
    Unreadable(String, io::Error),
    #[error("source '{0}' matches nothing in the build context")]
    MatchesNothing(String),
}

/// The context paths a COPY source names: itself, or the matches of a wildcard in its last
/// component. Paths leaving the context are refused.
fn expand(context: &Path, source: &str) -> Result<Vec<PathBuf>, SourceError> {
    let mut clean = PathBuf::new();
    for component in Path::new(source.trim_start_matches('/')).components() {
        match component {
            Component::Normal(part) => clean.push(part),
            Component::CurDir | Component::RootDir => {}
            _ => return Err(SourceError::LeavesContext(source.to_owned())),
        }
    }
    let name = clean
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    if !name.contains(['*', '?']) {
        return if context.join(&clean).exists() {
            Ok(vec![clean])
        } else {
            Err(SourceError::NotInContext(source.to_owned()))
        };
    }
    let dir = clean.parent().map(Path::to_owned).unwrap_or_default();
    let mut found: Vec<PathBuf> = fs::read_dir(context.join(&dir))
        .map_err(|e| SourceError::Unreadable(source.to_owned(), e))?
        .flatten()
        .filter(|entry| wildcard(&name, &entry.file_name().to_string_lossy()))
        .map(|entry| dir.join(entry.file_name()))
        .collect();
    found.sort();
    if found.is_empty() {
        return Err(SourceError::MatchesNothing(source.to_owned()));
    }
    Ok(found)
}

/// Matches `*` (any run) and `?` (one character).
fn wildcard(pattern: &str, name: &str) -> bool {
    let (p, n): (Vec<char>, Vec<char>) = (pattern.chars().collect(), name.chars().collect());
    let (mut pi, mut ni, mut star, mut mark) = (0, 0, None, 0);
    while ni < n.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ni;
            pi += 1;
        } else if let Some(s) = star {
            pi = s + 1;
            mark += 1;
            ni = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// Copies the contents of `from` into `to`, leaving out the top-level names in `skip`.
pub(super) fn copy_tree(from: &Path, to: &Path, skip: &[&str]) -> Result<(), StageError> {
    fs::create_dir_all(to).map_err(io_at(to))?;
    let mut entries: Vec<_> = fs::read_dir(from)
        .map_err(io_at(from))?
        .collect::<Result<_, _>>()
        .map_err(io_at(from))?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let name = entry.file_name();
        if skip.iter().any(|s| name == *s) {
            continue;
        }
        let path = entry.path();
        if entry.file_type().map_err(io_at(&path))?.is_dir() {
            copy_tree(&path, &to.join(&name), &[])?;
        } else {
            copy_entry(&path, &to.join(&name))?;
        }
    }
    Ok(())
}

/// Copies a file (with its mode) or a symlink (as a link).
fn copy_entry(from: &Path, to: &Path) -> Result<(), StageError> {
    if let Some(parent) = to.parent() {
        fs::create_dir_all(parent).map_err(io_at(parent))?;
    }
    let meta = fs::symlink_metadata(from).map_err(io_at(from))?;
    if meta.file_type().is_symlink() {
        let target = fs::read_link(from).map_err(io_at(from))?;
        let _ = fs::remove_file(to);
        std::os::unix::fs::symlink(target, to).map_err(io_at(to))?;
    } else {
        fs::copy(from, to).map_err(io_at(to))?;
        fs::set_permissions(to, fs::Permissions::from_mode(meta.permissions().mode()))
            .map_err(io_at(to))?;
    }
    Ok(())
}

/// The container paths a task's files use, and where they are in the workspace.
#[derive(Debug, Clone)]
pub(super) struct ContainerPaths {
    /// (container path, workspace-relative path), longest container path first.
    mappings: Vec<(String, &'static str)>,
}

impl ContainerPaths {
    pub(super) fn new(workdir: &str) -> Self {
        let mut mappings = vec![
            (workdir.to_owned(), ""),
            ("/tests".to_owned(), TESTS_DIR),
            ("/logs".to_owned(), LOGS_DIR),
            ("/solution".to_owned(), SOLUTION_DIR),
        ];
        mappings.sort_by_key(|(path, _)| std::cmp::Reverse(path.len()));
        Self { mappings }
    }

    /// For shell scripts: absolute at run time, through `$DELTABENCH_WORKSPACE`, so a `cd`
    /// inside the script does not break them. Where the shell expands nothing, the script is
    /// left as written: the body of a quoted heredoc (`<<'EOF'`) is data. Inside a
    /// single-quoted string the quote is closed around the variable (`'"${...}"'`).
    pub(super) fn in_shell(&self, text: &str) -> String {
        let variable = |relative: &str| match relative {
            "" => "${DELTABENCH_WORKSPACE}".to_owned(),
            // Where the oracle (or --run-solutions) put the solution's files.
            SOLUTION_DIR => "${DELTABENCH_SOLUTION}".to_owned(),
            rel => format!("${{DELTABENCH_WORKSPACE}}/{rel}"),
        };
        shell_spans(text)
            .into_iter()
            .map(|(span, quoting)| match quoting {
                Quoting::Expands => self.rewrite(span, |rel, _| variable(rel)),
                Quoting::Single => self.rewrite(span, |rel, _| format!("'\"{}\"'", variable(rel))),
                Quoting::Data => span.to_owned(),
            })
            .collect()
    }

    /// For everything else (Python tests, the instruction): relative to the workspace root,
    /// where the verify command starts. The root alone is `./` (a bare `.` would read as the
    /// end of a sentence), or `.` before a slash.
    pub(super) fn relative(&self, text: &str) -> String {
        self.rewrite(text, |relative, before_slash| match relative {
            "" if before_slash => ".".to_owned(),
            "" => "./".to_owned(),
            rel => format!("./{rel}"),
        })
    }

    /// Replaces each container path with `replace(workspace-relative path, a '/' follows)`.
    fn rewrite(&self, text: &str, replace: impl Fn(&str, bool) -> String) -> String {
        let bytes = text.as_bytes();
        let mut out = String::with_capacity(text.len());
        let mut i = 0;
        'scan: while i < text.len() {
            // A container path starts a word: not `$HOME/app`, `/usr/app` or `x/tests`.
            let starts_word = i == 0
                || (!b"_.~/$})-".contains(&bytes[i - 1]) && !bytes[i - 1].is_ascii_alphanumeric())
                // A shell default: `${APP_DIR:-/app}`.
                || (i >= 2 && &bytes[i - 2..i] == b":-");
            if bytes[i] == b'/' && starts_word {
                for (path, relative) in &self.mappings {
                    let end = i + path.len();
                    if text[i..].starts_with(path.as_str()) && ends_word(bytes, end) {
                        out.push_str(&replace(relative, bytes.get(end) == Some(&b'/')));
                        i = end;
                        continue 'scan;
                    }
                }
            }
            let c = text[i..].chars().next().unwrap_or_default();
            out.push(c);
            i += c.len_utf8().max(1);
        }
        out
    }
}

/// How the shell reads a span of a script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Quoting {
    /// Code, a double-quoted string, an unquoted heredoc's body: `${VAR}` expands.
    Expands,
    /// Inside a single-quoted string.
    Single,
    /// A quoted heredoc's body: nothing expands.
    Data,
}

/// `text` cut into spans by how the shell reads them (a lexer for quotes, escapes, comments
/// and heredocs; enough to keep rewrites out of text the shell never expands).
fn shell_spans<'a>(text: &'a str) -> Vec<(&'a str, Quoting)> {
    let bytes = text.as_bytes();
    let mut spans = Vec::new();
    let (mut start, mut i) = (0, 0);
    // Heredocs whose bodies start at the next line.
    let mut pending: Vec<Heredoc> = Vec::new();
    let push = |spans: &mut Vec<(&'a str, Quoting)>, from: usize, to: usize, quoting: Quoting| {
        if to > from {
            spans.push((&text[from..to], quoting));
        }
    };
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'\'' => {
                push(&mut spans, start, i + 1, Quoting::Expands);
                let end = text[i + 1..].find('\'').map_or(bytes.len(), |n| i + 1 + n);
                push(&mut spans, i + 1, end, Quoting::Single);
                start = end;
                i = end + 1;
            }
            b'"' => {
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            }
            b'#' if i == 0 || bytes[i - 1].is_ascii_whitespace() => {
                i = text[i..].find('\n').map_or(bytes.len(), |n| i + n);
            }
            b'<' if bytes.get(i + 1) == Some(&b'<') && bytes.get(i + 2) != Some(&b'<') => {
                let (heredoc, end) = heredoc_operator(text, i + 2);
                pending.extend(heredoc);
                i = end;
            }
            b'\n' if !pending.is_empty() => {
                i += 1;
                push(&mut spans, start, i, Quoting::Expands);
                for heredoc in pending.drain(..) {
                    let body = i;
                    let (end, next) = heredoc_end(text, body, &heredoc);
                    let quoting = if heredoc.quoted {
                        Quoting::Data
                    } else {
                        Quoting::Expands
                    };
                    push(&mut spans, body, end, quoting);
                    i = next;
                    start = end;
                }
            }
            _ => i += 1,
        }
    }
    push(
        &mut spans,
        start.min(bytes.len()),
        bytes.len(),
        Quoting::Expands,
    );
    spans
}

/// A heredoc whose body is still to come.
#[derive(Debug, PartialEq, Eq)]
struct Heredoc {
    delimiter: String,
    /// A quoted delimiter: nothing in the body expands.
    quoted: bool,
    /// `<<-`: leading tabs are stripped from the body's lines.
    strip: bool,
}

/// The heredoc of the `<<` operator whose text starts at `at` (past `<<`), and where its word
/// ends; None when the word is empty.
fn heredoc_operator(text: &str, mut at: usize) -> (Option<Heredoc>, usize) {
    let bytes = text.as_bytes();
    let strip = bytes.get(at) == Some(&b'-');
    if strip {
        at += 1;
    }
    while bytes.get(at).is_some_and(|c| *c == b' ' || *c == b'\t') {
        at += 1;
    }
    let word_end = text[at..]
        .find(|c: char| c.is_whitespace() || matches!(c, ';' | '&' | '|' | '<' | '>' | ')'))
        .map_or(bytes.len(), |n| at + n);
    let word = &text[at..word_end];
    let quoted = word.contains(['\'', '"', '\\']);
    let delimiter: String = word
        .chars()
        .filter(|c| !matches!(c, '\'' | '"' | '\\'))
        .collect();
    let heredoc = (!delimiter.is_empty()).then_some(Heredoc {
        delimiter,
        quoted,
        strip,
    });
    (heredoc, word_end)
}

/// Where the heredoc's body starting at `body` ends, and where the text after its delimiter
/// line resumes; both the text's end when the delimiter never comes.
fn heredoc_end(text: &str, body: usize, heredoc: &Heredoc) -> (usize, usize) {
    let len = text.len();
    let mut at = body;
    while at < len {
        let line_end = text[at..].find('\n').map_or(len, |n| at + n);
        let line = &text[at..line_end];
        let line = if heredoc.strip {
            line.trim_start_matches('\t')
        } else {
            line
        };
        if line == heredoc.delimiter {
            return (at, line_end);
        }
        at = line_end + 1;
    }
    (len, len)
}

/// True when a path ending at `end` is a whole component: `/app` in `/app/x`, `"/app"` or
/// `/app.` at the end of a sentence, but not in `/application` or `/app.py`.
fn ends_word(bytes: &[u8], end: usize) -> bool {
    match bytes.get(end) {
        None => true,
        Some(b'.') => !bytes.get(end + 1).is_some_and(u8::is_ascii_alphanumeric),
        Some(&c) => !(c.is_ascii_alphanumeric() || c == b'_' || c == b'-'),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_heredoc_operator_gives_its_delimiter_and_its_body_ends_at_it() {
        let text = "cat <<-'EOF' > f\n\tbody\n\tEOF\nnext";
        let (heredoc, end) = heredoc_operator(text, 6);
        let heredoc = heredoc.unwrap();
        assert_eq!(
            heredoc,
            Heredoc {
                delimiter: "EOF".into(),
                quoted: true,
                strip: true
            }
        );
        assert_eq!(&text[end..], " > f\n\tbody\n\tEOF\nnext");
        let body = text.find('\t').unwrap();
        let (body_end, next) = heredoc_end(text, body, &heredoc);
        assert_eq!(&text[body..body_end], "\tbody\n");
        assert_eq!(&text[next..], "\nnext");
        assert_eq!(heredoc_operator("<< ;", 2).0, None);
        let open = Heredoc {
            delimiter: "END".into(),
            quoted: false,
            strip: false,
        };
        assert_eq!(heredoc_end("a\nb", 0, &open), (3, 3));
    }

    #[test]
    fn a_files_only_dockerfile_is_read() {
        let env = parse_dockerfile(
            "# syntax=docker/dockerfile:1\nFROM python:3.12-slim\nLABEL a=b\nWORKDIR /app\nCOPY data/ ./data/\nCOPY [\"run.py\", \"helper.py\", \"/app/bin/\"]\nCOPY --chown=1000 notes.txt \\\n  /app/notes.txt\nCMD [\"bash\"]\n",
        )
        .unwrap();
        assert_eq!(env.workdir, "/app");
        assert_eq!(env.copies.len(), 3);
        assert_eq!(env.copies[0].dest, "/app/data/");
        assert_eq!(env.copies[1].sources, ["run.py", "helper.py"]);
        assert_eq!(env.copies[2].dest, "/app/notes.txt");
    }

    #[test]
    fn what_only_a_build_can_do_is_left_to_one() {
        let env = parse_dockerfile(
            "FROM ubuntu\nWORKDIR /app\nRUN apt-get update && \\\n  apt-get install -y jq\nCOPY a.txt ./\nWORKDIR /app/src\n",
        )
        .unwrap();
        assert_eq!(
            env.build.as_deref(),
            Some("RUN apt-get update && apt-get install -y jq")
        );
        assert_eq!(env.workdir, "/app/src", "the final WORKDIR");
        assert_eq!(env.copies.len(), 1, "COPYs are still staged");
        for (text, line) in [
            ("FROM a\nENV X=1\n", "ENV X=1"),
            ("FROM a\nUSER nobody\n", "USER nobody"),
            ("FROM a\nADD https://example.com/x /opt/\n", "ADD"),
            ("FROM a\nCOPY --from=img:1 /x /opt/x\n", "--from"),
            (
                "FROM a\nWORKDIR /app\nCOPY a.txt /etc/a.txt\n",
                "/etc/a.txt",
            ),
        ] {
            let env = parse_dockerfile(text).unwrap();
            assert!(env.build.unwrap().contains(line), "{text:?}");
        }
        let files_only = parse_dockerfile("FROM a\nCOPY a.txt /app/\n").unwrap();
        assert_eq!(
            (files_only.workdir.as_str(), files_only.build),
            ("/app", None)
        );
    }

    /// A `RUN rm` of a file in the working directory takes it out of the workspace (an answer
    /// the image deletes must not be in the starting files); other file-changing steps there
    /// are listed to be said.
    #[test]
    fn run_steps_in_the_working_directory_are_applied_or_said() {
        let env = parse_dockerfile(
            "FROM python:3.12-slim AS base\nRUN mkdir -p /opt/tool && apt-get update\nWORKDIR /app\nCOPY . .\n\
             RUN rm -f solution.py && rm -rf /app/answers\nRUN pip install -r requirements.txt\nRUN sed -i s/a/b/ main.py\n\
             RUN mkdir -p /tests && echo '{}' > /tmp/x.json 2>&1\nRUN mkdir -p /tests logs\nRUN echo x >> notes.txt\n",
        )
        .unwrap();
        assert_eq!(env.from.as_deref(), Some("python:3.12-slim"));
        assert_eq!(env.removals, ["/app/solution.py", "/app/answers"]);
        assert_eq!(
            env.hidden_runs,
            [
                "RUN sed -i s/a/b/ main.py",
                "RUN mkdir -p /tests logs",
                "RUN echo x >> notes.txt"
            ]
        );
        let tmp = tempfile::tempdir().unwrap();
        let (context, root) = (tmp.path().join("ctx"), tmp.path().join("ws"));
        fs::create_dir_all(context.join("answers")).unwrap();
        fs::write(context.join("solution.py"), "42").unwrap();
        fs::write(context.join("main.py"), "a").unwrap();
        fs::write(context.join("answers/x"), "42").unwrap();
        stage(&env, &context, &root, &[]).unwrap();
        assert!(root.join("main.py").is_file());
        assert!(!root.join("solution.py").exists() && !root.join("answers").exists());
    }

    #[test]
    fn quoted_shell_form_copies_are_unquoted() {
        let env = parse_dockerfile(
            "FROM a\nWORKDIR /app\nCOPY \"src/\" \"/app/src/\"\nCOPY 'my file.txt' ./\n",
        )
        .unwrap();
        assert_eq!(env.copies[0].sources, ["src/"]);
        assert_eq!(env.copies[0].dest, "/app/src/");
        assert_eq!(env.copies[1].sources, ["my file.txt"]);
        let open = parse_dockerfile("FROM a\nCOPY \"src/ /app/\n")
            .unwrap_err()
            .to_string();
        assert!(open.contains("an unclosed quote"), "{open}");
    }

    #[test]
    fn what_cannot_be_imported_is_a_skip_reason() {
        for (text, why) in [
            ("FROM a\nFROM b\n", "multi-stage"),
            ("FROM a\nCOPY --from=build /x /app/x\n", "would hide"),
            ("FROM a\nADD https://example.com/x /app/\n", "would hide"),
            ("FROM a\nWORKDIR $HOME\n", "a variable"),
            ("FROM a\nWORKDIR /\n", "WORKDIR /"),
        ] {
            let reason = parse_dockerfile(text).unwrap_err().to_string();
            assert!(reason.contains(why), "{text:?}: {reason}");
        }
    }

    #[test]
    fn staging_follows_copy_rules() {
        let tmp = tempfile::tempdir().unwrap();
        let context = tmp.path().join("ctx");
        for (path, text) in [
            ("a.txt", "a"),
            ("src/m.py", "m"),
            ("src/n.py", "n"),
            ("tests/hidden.py", "h"),
        ] {
            fs::create_dir_all(context.join(path).parent().unwrap()).unwrap();
            fs::write(context.join(path), text).unwrap();
        }
        let env = parse_dockerfile(
            "FROM x\nWORKDIR /app\nCOPY a.txt renamed.txt\nCOPY src/*.py lib/\nCOPY . /app/all\n",
        )
        .unwrap();
        let root = tmp.path().join("root");
        stage(&env, &context, &root, &["tests"]).unwrap();
        assert_eq!(fs::read_to_string(root.join("renamed.txt")).unwrap(), "a");
        assert_eq!(fs::read_to_string(root.join("lib/n.py")).unwrap(), "n");
        assert!(root.join("all/src/m.py").is_file());
        assert!(!root.join("all/tests").exists(), "harness files stay out");

        let outside =
            parse_dockerfile("FROM x\nWORKDIR /app\nCOPY a.txt /etc/a.txt\nCOPY a.txt b.txt\n")
                .unwrap();
        let elsewhere = tmp.path().join("elsewhere");
        stage(&outside, &context, &elsewhere, &[]).unwrap();
        let staged: Vec<_> = fs::read_dir(&elsewhere).unwrap().flatten().collect();
        assert_eq!(staged.len(), 1, "only b.txt: /etc is the build's");
        assert!(elsewhere.join("b.txt").is_file());
        let escape = parse_dockerfile("FROM x\nCOPY ../secret /app/\n").unwrap();
        let err = stage(&escape, &context, &root, &[]).unwrap_err();
        assert!(
            err.to_string().contains("leaves the build context"),
            "{err}"
        );
    }

    #[test]
    fn container_paths_become_workspace_paths() {
        let paths = ContainerPaths::new("/app");
        assert_eq!(
            paths.relative(
                "open('/app/out.txt'); cd /app; ls /tests/data /logs/verifier/reward.txt"
            ),
            "open('./out.txt'); cd ./; ls ./.deltabench/tests/data ./.deltabench/logs/verifier/reward.txt"
        );
        assert_eq!(
            paths.in_shell("echo 1 > /logs/verifier/reward.txt\nbash /solution/x.sh \"/app\""),
            "echo 1 > ${DELTABENCH_WORKSPACE}/.deltabench/logs/verifier/reward.txt\nbash ${DELTABENCH_SOLUTION}/x.sh \"${DELTABENCH_WORKSPACE}\""
        );
        // aider-polyglot's solution.sh: `cd "${APP_DIR:-/app}"`.
        assert_eq!(
            paths.in_shell("cd \"${APP_DIR:-/app}\" && ls ${T:-/tests/x}"),
            "cd \"${APP_DIR:-${DELTABENCH_WORKSPACE}}\" && ls ${T:-${DELTABENCH_WORKSPACE}/.deltabench/tests/x}"
        );
        // Quoted heredocs are data; a single-quoted path gets its quote closed around it.
        let script = "cat > /app/q.sql <<'EOF'\nCOPY t FROM '/app/data.csv';\nEOF\ncat '/app/x y' \"/app\" <<-END\n\t/tests/t\n\tEND\necho \"it's /app\" # /app\n";
        assert_eq!(
            paths.in_shell(script),
            "cat > ${DELTABENCH_WORKSPACE}/q.sql <<'EOF'\nCOPY t FROM '/app/data.csv';\nEOF\ncat ''\"${DELTABENCH_WORKSPACE}\"'/x y' \"${DELTABENCH_WORKSPACE}\" <<-END\n\t${DELTABENCH_WORKSPACE}/.deltabench/tests/t\n\tEND\necho \"it's ${DELTABENCH_WORKSPACE}\" # ${DELTABENCH_WORKSPACE}\n"
        );
        let untouched =
            "/application /app.py $HOME/app /usr/tests https://x/app #!/bin/bash x-/app";
        assert_eq!(paths.relative(untouched), untouched);
        assert_eq!(
            paths.relative("Write to /app. Or /app/."),
            "Write to ./. Or ./."
        );
    }
}
