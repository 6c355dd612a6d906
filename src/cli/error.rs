//! The error a command ends with: its kind (which alone decides the exit code), the error with
//! its chain of causes, and what helps the user fix it (the offending line, hints). Printed as
//!
//! ```text
//! error: <message>
//!   caused by: <source>
//! <snippet>
//! hint: <hint>
//! ```

use std::error::Error as StdError;
use std::fmt;
use std::io;

use super::exit::Exit;
use crate::import::ImportError;
use crate::model::ScriptError;
use crate::runner::{PlanError, ResumeError, RunError};
use crate::store::{ReadRunError, layout};
use crate::suite::SuiteError;

/// An error and its sources, kept whole so each is printed as a `caused by:` line.
pub(super) type Source = Box<dyn StdError + Send + Sync + 'static>;

/// What kind of failure ended the command; its exit code follows from it alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ErrorKind {
    /// The user's to fix: the command line, a suite or agents file, a run directory named, an
    /// `--out` in use. Nothing was run.
    Usage,
    /// Trials that could not be scored (`infra_error`) leave nothing to decide on.
    Unscored,
    /// The harness itself failed: a file it cannot write, a runtime it cannot start.
    Harness,
}

impl ErrorKind {
    pub(crate) fn exit(self) -> Exit {
        match self {
            Self::Usage => Exit::Usage,
            Self::Unscored | Self::Harness => Exit::Unscored,
        }
    }
}

/// The error a command ends with (see the module's docs).
#[derive(Debug)]
pub(crate) struct CliError {
    kind: ErrorKind,
    /// Its Display is the first line; its `source()` chain, the `caused by:` lines.
    error: Source,
    /// The offending line of a file, with a caret under the column.
    snippet: Option<String>,
    hints: Vec<String>,
    /// More errors of the same command (a suite file's), each printed as its own block.
    more: Vec<CliError>,
}

/// The most errors printed; past them, how many more there are.
const SHOWN_ERRORS: usize = 20;

/// A message with what caused it.
#[derive(Debug)]
struct Message {
    text: String,
    cause: Option<Source>,
}

impl fmt::Display for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl StdError for Message {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.cause
            .as_deref()
            .map(|cause| cause as &(dyn StdError + 'static))
    }
}

impl CliError {
    /// `error` as the message, its sources as the causes.
    pub(crate) fn new(kind: ErrorKind, error: impl Into<Source>) -> Self {
        Self {
            kind,
            error: error.into(),
            snippet: None,
            hints: Vec::new(),
            more: Vec::new(),
        }
    }

    /// `message`, caused by `cause` (and what caused that).
    pub(crate) fn with_cause(
        kind: ErrorKind,
        message: impl Into<String>,
        cause: impl Into<Source>,
    ) -> Self {
        Self::new(
            kind,
            Message {
                text: message.into(),
                cause: Some(cause.into()),
            },
        )
    }

    fn message(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self::new(
            kind,
            Message {
                text: message.into(),
                cause: None,
            },
        )
    }

    pub(crate) fn usage(message: impl Into<String>) -> Self {
        Self::message(ErrorKind::Usage, message)
    }

    pub(crate) fn unscored(message: impl Into<String>) -> Self {
        Self::message(ErrorKind::Unscored, message)
    }

    pub(crate) fn harness(message: impl Into<String>) -> Self {
        Self::message(ErrorKind::Harness, message)
    }

    pub(crate) fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hints.push(hint.into());
        self
    }

    /// `hint`, when there is one.
    fn maybe_hint(mut self, hint: Option<impl Into<String>>) -> Self {
        self.hints.extend(hint.map(Into::into));
        self
    }

    pub(crate) fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// What is printed on stderr, each line ending in a newline.
    pub(crate) fn render(&self) -> String {
        let mut text = String::new();
        for err in std::iter::once(self).chain(&self.more).take(SHOWN_ERRORS) {
            text.push_str(&err.render_error());
        }
        let all = 1 + self.more.len();
        if all > SHOWN_ERRORS {
            text.push_str(&format!(
                "... and {} more errors ({all} in all)\n",
                all - SHOWN_ERRORS
            ));
        }
        for hint in &self.hints {
            text.push_str(&format!("hint: {hint}\n"));
        }
        text
    }

    /// The error's own lines: its message, its causes and its snippet.
    fn render_error(&self) -> String {
        let mut text = format!("error: {}\n", self.error);
        let mut above = self.error.to_string();
        let mut cause = self.error.source();
        while let Some(err) = cause {
            let line = err.to_string();
            // Many errors already end with their source's text (`cannot read X: <io error>`):
            // it is not said twice.
            if !above.ends_with(&line) {
                text.push_str(&format!("  caused by: {line}\n"));
                above = line;
            }
            cause = err.source();
        }
        if let Some(snippet) = &self.snippet {
            text.push_str(snippet);
            text.push('\n');
        }
        text
    }
}

impl From<SuiteError> for CliError {
    fn from(err: SuiteError) -> Self {
        let hint = match err {
            SuiteError::Several(errors) => return Self::several(errors),
            SuiteError::At { .. } => {
                Some("`deltabench schema` prints every key the suite file accepts")
            }
            SuiteError::Referenced(_) => {
                Some("`deltabench model serve --help` describes the script format")
            }
            // A file that cannot be read: its message says why; the key list would not help.
            SuiteError::NotFound { .. } | SuiteError::Read { .. } => None,
        };
        let snippet = err.snippet().map(str::to_owned);
        let mut error = Self::new(ErrorKind::Usage, err).maybe_hint(hint);
        error.snippet = snippet;
        error
    }
}

impl CliError {
    /// A suite's several errors: one block each, the hints of all said once at the end.
    fn several(errors: Vec<SuiteError>) -> Self {
        let mut all = errors.into_iter().map(Self::from);
        let mut first = all.next().expect("several errors are two or more");
        for mut other in all {
            for hint in std::mem::take(&mut other.hints) {
                if !first.hints.contains(&hint) {
                    first.hints.push(hint);
                }
            }
            first.more.push(other);
        }
        first
    }
}

impl From<PlanError> for CliError {
    fn from(mut err: PlanError) -> Self {
        let hint = err.hint.take();
        Self::new(ErrorKind::Usage, err).maybe_hint(hint)
    }
}

impl From<RunError> for CliError {
    fn from(err: RunError) -> Self {
        match err {
            // The cause on the same line: it is what the user fixes in the suite.
            RunError::Config {
                context,
                at,
                source,
            } => {
                let place = at.map_or_else(String::new, |(path, line, column)| {
                    format!("{}:{line}:{column}: ", path.display())
                });
                let cause = source.map_or_else(String::new, |source| format!(": {source}"));
                Self::usage(format!("{place}{context}{cause}"))
            }
            RunError::Io { .. }
            | RunError::Reopen { .. }
            | RunError::Task { .. }
            | RunError::Gateway { .. } => Self::new(ErrorKind::Harness, err),
        }
    }
}

impl From<ResumeError> for CliError {
    fn from(err: ResumeError) -> Self {
        let hint = err
            .forcible()
            .then_some("pass --force to finish the run with the files as they are now");
        Self::new(ErrorKind::Usage, err).maybe_hint(hint)
    }
}

impl From<ScriptError> for CliError {
    fn from(err: ScriptError) -> Self {
        Self::new(ErrorKind::Usage, err)
            .hint("`deltabench model serve --help` describes the script")
    }
}

impl From<ImportError> for CliError {
    fn from(err: ImportError) -> Self {
        let kind = if err.is_usage() {
            ErrorKind::Usage
        } else {
            ErrorKind::Harness
        };
        Self::new(kind, err)
    }
}

/// A run directory named on the command line that cannot be read: the user's to fix.
impl From<ReadRunError> for CliError {
    fn from(err: ReadRunError) -> Self {
        let file = match &err {
            ReadRunError::Io { path, .. }
            | ReadRunError::Parse { path, .. }
            | ReadRunError::Record { path, .. } => path.clone(),
        };
        let dir = file.parent().unwrap_or(&file).to_owned();
        let missing_manifest = matches!(
            &err,
            ReadRunError::Io { path, source }
                if source.kind() == io::ErrorKind::NotFound && path.ends_with(layout::MANIFEST)
        );
        if missing_manifest {
            Self::with_cause(
                ErrorKind::Usage,
                format!("{} is not a run directory (no manifest.json)", dir.display()),
                err,
            )
            .hint("RUN_DIR is a folder written by `deltabench run`: its --out, reports/SUITE-TIME by default")
        } else {
            Self::new(ErrorKind::Usage, err).hint(format!(
                "{} should be a run directory written by `deltabench run`",
                dir.display()
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cause_chain_is_printed_once_each() {
        let io = io::Error::new(io::ErrorKind::PermissionDenied, "Permission denied");
        // A library error whose message already ends with its source's.
        let read = ReadRunError::Io {
            path: "run/trials.jsonl".into(),
            source: io,
        };
        let err = CliError::with_cause(ErrorKind::Harness, "cannot merge", read)
            .hint("check the permissions")
            .hint("or choose another --out");
        assert_eq!(
            err.render(),
            "error: cannot merge\n  caused by: run/trials.jsonl: Permission denied\nhint: check the permissions\nhint: or choose another --out\n"
        );
        assert_eq!(err.kind().exit(), Exit::Unscored);
    }

    #[test]
    fn an_io_failure_of_the_run_keeps_its_source() {
        let err = CliError::from(RunError::Io {
            context: "cannot write the manifest".into(),
            source: io::Error::new(io::ErrorKind::StorageFull, "No space left on device"),
        });
        assert_eq!(
            err.render(),
            "error: cannot write the manifest\n  caused by: No space left on device\n"
        );
        assert_eq!(err.kind(), ErrorKind::Harness);
    }

    #[test]
    fn a_missing_manifest_is_not_a_run_directory() {
        let err = CliError::from(ReadRunError::Io {
            path: "nope/manifest.json".into(),
            source: io::Error::from(io::ErrorKind::NotFound),
        });
        let text = err.render();
        assert!(
            text.starts_with("error: nope is not a run directory (no manifest.json)\n  caused by: nope/manifest.json: "),
            "{text}"
        );
        assert_eq!(err.kind().exit(), Exit::Usage);
    }
}
