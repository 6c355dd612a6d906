//! Errors located in a suite or agents file: path, line, column and the line with a caret.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::LazyLock;
use std::time::Duration;

use regex::Regex;
use serde_saphyr::Spanned;

use super::indentation::find_break;
use super::raw::loc;
use crate::support::parse_duration;

/// A suite file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SuiteError {
    /// SUITE names no suite: no such path, or a folder without `suite.yaml`.
    #[error("cannot read {}: {why}", path.display())]
    NotFound {
        /// The path given as SUITE.
        path: PathBuf,
        /// What is missing: the path itself, or the folder's `suite.yaml`.
        why: &'static str,
    },
    /// The suite or agents file could not be read (a missing `--agents` file too).
    #[error("cannot read {}", path.display())]
    Read {
        /// The file read.
        path: PathBuf,
        /// Why reading failed.
        #[source]
        source: std::io::Error,
    },
    /// A mistake at one place in the suite or agents file: fix it there.
    #[error("{}:{line}:{column}: {message}", path.display())]
    At {
        /// The file holding the mistake.
        path: PathBuf,
        /// Line of the mistake, as the message prints it.
        line: u64,
        /// Column of the mistake, as the message prints it.
        column: u64,
        /// What is wrong there, in words.
        message: String,
        /// The offending line with a caret under the column.
        snippet: String,
        /// The parser's own words, for a syntax error said in plainer ones.
        #[source]
        cause: Option<Box<ParserSaid>>,
    },
    /// An error in a file the suite refers to (a model script), located in that file.
    #[error("{0}")]
    Referenced(String),
    /// Every error found in the suite and agents files, in file order; two or more.
    #[error("{}", summary(.0))]
    Several(Vec<SuiteError>),
}

/// What the YAML parser said of a syntax error, and where.
#[derive(Debug, thiserror::Error)]
#[error("the YAML parser, at {line}:{column}: {message}")]
pub struct ParserSaid {
    line: u64,
    column: u64,
    message: String,
}

fn summary(errors: &[SuiteError]) -> String {
    match errors {
        [first, rest @ ..] => format!("{first} (and {} more errors)", rest.len()),
        [] => String::new(),
    }
}

impl SuiteError {
    /// The offending line with a caret under the column, for an [`At`](Self::At) error.
    pub fn snippet(&self) -> Option<&str> {
        match self {
            Self::At { snippet, .. } => Some(snippet),
            Self::NotFound { .. } | Self::Read { .. } | Self::Referenced(_) | Self::Several(_) => {
                None
            }
        }
    }

    fn place(&self) -> Option<(&Path, u64, u64)> {
        match self {
            Self::At {
                path, line, column, ..
            } => Some((path, *line, *column)),
            _ => None,
        }
    }
}

/// The errors of a load so far: the checks go on past one, so that all are reported at once.
#[derive(Default)]
pub(super) struct Errors {
    found: Vec<SuiteError>,
    /// The files in the order their errors are reported; others follow.
    files: Vec<PathBuf>,
}

impl Errors {
    pub(super) fn in_files<'a>(files: impl IntoIterator<Item = &'a Path>) -> Self {
        Errors {
            found: Vec::new(),
            files: files.into_iter().map(Path::to_owned).collect(),
        }
    }

    pub(super) fn push(&mut self, err: SuiteError) {
        match err {
            SuiteError::Several(errors) => self.found.extend(errors),
            err => self.found.push(err),
        }
    }

    /// How many errors were found so far.
    pub(super) fn count(&self) -> usize {
        self.found.len()
    }

    /// The value of `result`, or None with its error kept.
    pub(super) fn keep<T>(&mut self, result: Result<T, SuiteError>) -> Option<T> {
        result.map_err(|err| self.push(err)).ok()
    }

    /// `value` if no error was found; else the error, or all of them in file order (each
    /// file's from its top).
    pub(super) fn finish<T>(self, value: Option<T>) -> Result<T, SuiteError> {
        // A default's error is found once for each task using it, and said once.
        let mut said = HashSet::new();
        let mut errors: Vec<SuiteError> = (self.found.into_iter())
            .filter(|err| said.insert(err.to_string()))
            .collect();
        if errors.is_empty() {
            return Ok(value.expect("a check that gives up records why"));
        }
        if errors.len() == 1 {
            return Err(errors.remove(0));
        }
        let files = self.files;
        errors.sort_by_key(|err| {
            err.place()
                .map_or((usize::MAX, 0, 0), |(path, line, column)| {
                    let file = files.iter().position(|file| file == path);
                    (file.unwrap_or(usize::MAX - 1), line, column)
                })
        });
        Err(SuiteError::Several(errors))
    }
}

/// Where the source text of one file is, for error messages.
pub(super) struct Source<'a> {
    pub path: &'a Path,
    pub text: &'a str,
    pub dir: PathBuf,
    /// Where each line starts: a file with thousands of errors shows each line without a scan.
    line_starts: Vec<usize>,
}

impl<'a> Source<'a> {
    pub(super) fn new(path: &'a Path, text: &'a str) -> Self {
        let line_starts = std::iter::once(0)
            .chain(text.match_indices('\n').map(|(at, _)| at + 1))
            .collect();
        Source {
            path,
            text,
            dir: path.parent().map(Path::to_owned).unwrap_or_default(),
            line_starts,
        }
    }

    /// Line `line` (from 1), without its line break.
    fn line(&self, line: u64) -> Option<&str> {
        let start = *self.line_starts.get(line.checked_sub(1)? as usize)?;
        let rest = &self.text[start..];
        let content = rest.split('\n').next().unwrap_or_default();
        (start < self.text.len()).then(|| content.strip_suffix('\r').unwrap_or(content))
    }

    fn snippet(&self, line: u64, column: u64) -> String {
        self.line(line)
            .map_or_else(String::new, |content| snippet(content, line, column))
    }

    pub(super) fn error(
        &self,
        (line, column): (u64, u64),
        message: impl Into<String>,
    ) -> SuiteError {
        SuiteError::At {
            path: self.path.to_owned(),
            line,
            column,
            message: message.into(),
            snippet: self.snippet(line, column),
            cause: None,
        }
    }

    pub(super) fn at<T>(&self, spanned: &Spanned<T>, message: impl Into<String>) -> SuiteError {
        self.error(loc(spanned), message)
    }

    /// A path relative to this file that must exist.
    pub(super) fn existing_path(
        &self,
        spanned: &Spanned<String>,
        what: &str,
    ) -> Result<PathBuf, SuiteError> {
        let path = self.dir.join(&spanned.value);
        if path.exists() {
            Ok(path)
        } else {
            // A sibling of the same folder that is close: `tasks/fix-medain.md`.
            let siblings: Vec<String> = path
                .parent()
                .and_then(|dir| std::fs::read_dir(dir).ok())
                .into_iter()
                .flatten()
                .flatten()
                .map(|entry| entry.file_name().to_string_lossy().into_owned())
                .collect();
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let hint = crate::support::did_you_mean(&name, siblings.iter().map(String::as_str))
                .map_or(String::new(), |close| {
                    let shown = Path::new(&spanned.value).with_file_name(close);
                    format!("; did you mean '{}'?", shown.display())
                });
            Err(self.at(
                spanned,
                format!(
                    "{what} '{}' does not exist ({}){hint}",
                    spanned.value,
                    path.display()
                ),
            ))
        }
    }

    pub(super) fn duration(&self, spanned: &Spanned<String>) -> Result<Duration, SuiteError> {
        parse_duration(&spanned.value).map_err(|message| self.at(spanned, message.to_string()))
    }

    /// A YAML error from reading a part of this file that starts `line_shift` lines down.
    pub(super) fn yaml_error(&self, err: &serde_saphyr::Error, line_shift: u64) -> SuiteError {
        let (line, column) = yaml_location(err);
        self.error((line + line_shift, column), yaml_message(err))
    }

    /// A syntax error, at the line whose indentation broke when that is what it is.
    pub(super) fn syntax_error(&self, err: &serde_saphyr::Error) -> SuiteError {
        let (line, column) = yaml_location(err);
        match find_break(self.text, line) {
            Some(found) => SuiteError::At {
                path: self.path.to_owned(),
                line: found.line,
                column: found.column,
                message: found.message,
                snippet: self.snippet(found.line, found.column),
                cause: Some(Box::new(ParserSaid {
                    line,
                    column,
                    message: yaml_message(err),
                })),
            },
            None => self.yaml_error(err, 0),
        }
    }
}

fn yaml_location(err: &serde_saphyr::Error) -> (u64, u64) {
    err.location()
        .map(|l| (l.line(), l.column()))
        .unwrap_or((1, 1))
}

/// The message of a YAML error without its own "at line N, column M" (the location is printed
/// in front); a "(defined at line ...)" note about an alias stays.
fn yaml_message(err: &serde_saphyr::Error) -> String {
    static LOCATION: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r" at line \d+, column \d+").expect("a valid pattern"));
    let text = err.without_snippet().to_string();
    let own_location = LOCATION.find_iter(&text).find(|m| {
        let before = &text[..m.start()];
        !before.ends_with("(defined") && !before.ends_with("(used")
    });
    let text = match own_location {
        Some(m) => format!("{}{}", &text[..m.start()], &text[m.end()..]),
        None => text,
    };
    let text = with_suggestion(text);
    if text.starts_with("budget breached") {
        format!(
            "the document exceeds the parser's limits (too deeply nested, or an alias bomb): {text}"
        )
    } else {
        text
    }
}

/// serde's "unknown field `x`, expected one of a, b" (or "unknown variant"), with the closest
/// of the expected names: `; did you mean 'instruction_file'?`.
fn with_suggestion(text: String) -> String {
    static UNKNOWN: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"unknown (?:field|variant) `([^`]*)`, expected (?:one of )?(.*)$")
            .expect("a valid pattern")
    });
    let Some(caps) = UNKNOWN.captures(&text) else {
        return text;
    };
    let expected: Vec<&str> = caps[2]
        .split(", ")
        .flat_map(|part| part.split(" or "))
        .map(|name| name.trim().trim_matches('`'))
        .collect();
    let hint = crate::support::suggestion(&caps[1], expected);
    format!("{text}{hint}")
}

/// `content`, line `line` of a file, with a caret under `column`.
fn snippet(content: &str, line: u64, column: u64) -> String {
    // Long lines (a 5 MB value) are cut to a window around the column.
    const WINDOW: usize = 120;
    let chars: Vec<char> = content.chars().collect();
    let col = (column.saturating_sub(1) as usize).min(chars.len());
    let start = col.saturating_sub(WINDOW / 2);
    let end = (start + WINDOW).min(chars.len());
    let mut shown: String = chars[start..end].iter().collect();
    let mut offset = col - start;
    if start > 0 {
        shown.insert_str(0, "...");
        offset += 3;
    }
    if end < chars.len() {
        shown.push_str("...");
    }
    let gutter = line.to_string().len();
    let pad = " ".repeat(gutter);
    let caret = " ".repeat(offset);
    format!("{pad} |\n{line} | {shown}\n{pad} | {caret}^")
}
