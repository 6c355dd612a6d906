//! Errors located in a suite or agents file: path, line, column and the line with a caret.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_saphyr::Spanned;

use super::raw::loc;
use crate::support::parse_duration;

/// A suite file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SuiteError {
    /// SUITE names no suite: no such path, or a folder without `suite.yaml`.
    #[error("cannot read {}: {why}", path.display())]
    NotFound { path: PathBuf, why: &'static str },
    #[error("cannot read {}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}:{line}:{column}: {message}", path.display())]
    At {
        path: PathBuf,
        line: u64,
        column: u64,
        message: String,
        /// The offending line with a caret under the column.
        snippet: String,
    },
    /// An error in a file the suite refers to (a model script), located in that file.
    #[error("{0}")]
    Referenced(String),
}

impl SuiteError {
    pub fn snippet(&self) -> Option<&str> {
        match self {
            Self::At { snippet, .. } => Some(snippet),
            Self::NotFound { .. } | Self::Read { .. } | Self::Referenced(_) => None,
        }
    }
}

/// Where the source text of one file is, for error messages.
pub(super) struct Source<'a> {
    pub path: &'a Path,
    pub text: &'a str,
    pub dir: PathBuf,
}

impl Source<'_> {
    pub fn error(&self, (line, column): (u64, u64), message: impl Into<String>) -> SuiteError {
        SuiteError::At {
            path: self.path.to_owned(),
            line,
            column,
            message: message.into(),
            snippet: snippet(self.text, line, column),
        }
    }

    pub fn at<T>(&self, spanned: &Spanned<T>, message: impl Into<String>) -> SuiteError {
        self.error(loc(spanned), message)
    }

    /// A path relative to this file that must exist.
    pub fn existing_path(
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

    pub fn duration(&self, spanned: &Spanned<String>) -> Result<Duration, SuiteError> {
        parse_duration(&spanned.value).map_err(|message| self.at(spanned, message.to_string()))
    }

    pub fn parse<T: for<'de> serde::Deserialize<'de>>(&self) -> Result<T, SuiteError> {
        serde_saphyr::from_str(self.text).map_err(|err| {
            let (line, column) = err
                .location()
                .map(|l| (l.line(), l.column()))
                .unwrap_or((1, 1));
            self.error((line, column), yaml_message(&err))
        })
    }
}

/// The message of a YAML error without its own "at line N, column M" (the location is printed
/// in front); a "(defined at line ...)" note about an alias stays.
fn yaml_message(err: &serde_saphyr::Error) -> String {
    let text = err.without_snippet().to_string();
    let own_location = regex::Regex::new(r" at line \d+, column \d+")
        .ok()
        .and_then(|re| {
            re.find_iter(&text).find(|m| {
                let before = &text[..m.start()];
                !before.ends_with("(defined") && !before.ends_with("(used")
            })
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
    let Some(caps) =
        regex::Regex::new(r"unknown (?:field|variant) `([^`]*)`, expected (?:one of )?(.*)$")
            .ok()
            .and_then(|re| re.captures(&text))
    else {
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

fn snippet(text: &str, line: u64, column: u64) -> String {
    let Some(content) = text.lines().nth(line.saturating_sub(1) as usize) else {
        return String::new();
    };
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
