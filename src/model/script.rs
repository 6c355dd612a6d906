//! The script a [`super::ScriptedServer`] follows: YAML into checked steps, with
//! `file:line:col` errors.
//!
//! ```yaml
//! usage: {input_tokens: 1000, output_tokens: 20}   # per main model call
//! loop: false                                        # true: repeat the last step forever
//! split: 5                     # stream text and tool arguments in pieces of 5 characters
//! steps:
//!   - text: "I'll create hello.txt."
//!     write: {path: hello.txt, content: "hello\n"}
//!   - shell: cat hello.txt
//!   - text: Done.
//!   - error: {status: 429, message: slow down, retry_after: 2}
//! ```

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_saphyr::Spanned;

/// A script that could not be read or does not make sense.
#[derive(Debug, thiserror::Error)]
pub enum ScriptError {
    /// The script file could not be read.
    #[error("{}: cannot read the script: {source}", path.display())]
    Read {
        /// The script file.
        path: PathBuf,
        /// The read's error.
        #[source]
        source: std::io::Error,
    },
    /// The script is not valid YAML or asks for something impossible.
    #[error("{}:{line}:{column}: {message}", path.display())]
    Invalid {
        /// The script file.
        path: PathBuf,
        /// 1-based.
        line: u64,
        /// 1-based.
        column: u64,
        /// What is wrong there.
        message: String,
    },
}

/// Token counts reported for one model call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// Uncached input tokens.
    pub input_tokens: u64,
    /// Generated tokens.
    pub output_tokens: u64,
    /// Input tokens read from the prompt cache.
    pub cache_read_tokens: u64,
    /// Input tokens written to the prompt cache.
    pub cache_write_tokens: u64,
}

impl Usage {
    /// What every main call reports unless the script says otherwise.
    pub const DEFAULT: Usage = Usage {
        input_tokens: 1000,
        output_tokens: 20,
        cache_read_tokens: 0,
        cache_write_tokens: 0,
    };
    /// Side calls (titles, commit messages) report nothing, so run totals equal the script's.
    pub const ZERO: Usage = Usage {
        input_tokens: 0,
        output_tokens: 0,
        cache_read_tokens: 0,
        cache_write_tokens: 0,
    };
}

impl Default for Usage {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// The one thing a step asks the agent to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Create (or overwrite) a file; `path` is relative to the agent's working directory
    /// unless absolute.
    Write {
        /// Where to write.
        path: String,
        /// The file's whole content.
        content: String,
    },
    /// Run a shell command.
    Shell {
        /// The command line, run by the agent's shell tool.
        command: String,
    },
}

/// An answer the model gives at one step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// What the model says; `None` for a step with only an action.
    pub text: Option<String>,
    /// The tool call it makes; `None` for a step with only text.
    pub action: Option<Action>,
    /// What the call reports it used.
    pub usage: Usage,
}

/// An HTTP error the endpoint answers with at one step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpError {
    /// 400..=599.
    pub status: u16,
    /// The error's message, in the provider's error body.
    pub message: String,
    /// Seconds, sent as a `retry-after` header.
    pub retry_after: Option<u64>,
}

/// One step of the script.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// The model answers (text, a tool call, or both).
    Reply(Reply),
    /// The endpoint fails the call with an HTTP error.
    Error(HttpError),
}

/// What the endpoint answers, step by step.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(try_from = "RawScript")]
pub struct Script {
    /// Usage of a main call whose step does not set its own.
    pub usage: Usage,
    /// Past the last step, repeat it forever instead of answering "Done.".
    pub repeat_last: bool,
    /// Stream each text and tool call's arguments in pieces of this many characters, as real
    /// providers split them (anywhere, a path included); `None`: each in one piece.
    pub split: Option<usize>,
    /// In order, one per main model call; past the last, see `repeat_last`.
    pub steps: Vec<Step>,
}

impl Script {
    /// Reads and checks a script file.
    pub fn load(path: &Path) -> Result<Script, ScriptError> {
        let text = std::fs::read_to_string(path).map_err(|source| ScriptError::Read {
            path: path.to_owned(),
            source,
        })?;
        Self::parse(&text, path)
    }

    /// Checks a script's text; `path` only names it in errors.
    pub fn parse(text: &str, path: &Path) -> Result<Script, ScriptError> {
        let raw: RawScript = serde_saphyr::from_str(text).map_err(|err| {
            let (line, column) = err
                .location()
                .map(|l| (l.line(), l.column()))
                .unwrap_or((1, 1));
            ScriptError::Invalid {
                path: path.to_owned(),
                line,
                column,
                message: yaml_message(&err),
            }
        })?;
        raw.check()
            .map_err(|(line, column, message)| ScriptError::Invalid {
                path: path.to_owned(),
                line,
                column,
                message,
            })
    }

    /// The step a request at `index` (tool results already in its history) gets.
    pub fn step(&self, index: usize) -> Step {
        match self.steps.get(index) {
            Some(step) => step.clone(),
            None if self.repeat_last && !self.steps.is_empty() => {
                self.steps[self.steps.len() - 1].clone()
            }
            None => Step::Reply(Reply {
                text: Some("Done.".into()),
                action: None,
                usage: self.usage,
            }),
        }
    }
}

/// A serde-saphyr message without its own " at line N, column M" (printed in front instead).
fn yaml_message(err: &serde_saphyr::Error) -> String {
    let text = err.without_snippet().to_string();
    match regex::Regex::new(r" at line \d+, column \d+")
        .ok()
        .and_then(|re| re.find(&text).map(|m| (m.start(), m.end())))
    {
        Some((start, end)) => format!("{}{}", &text[..start], &text[end..]),
        None => text,
    }
}

/// The script as written, with locations for errors.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScript {
    #[serde(default)]
    usage: Option<RawUsage>,
    #[serde(default, rename = "loop")]
    repeat_last: bool,
    #[serde(default)]
    split: Option<Spanned<usize>>,
    #[serde(default)]
    steps: Vec<Spanned<RawStep>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawUsage {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cache_read_tokens: Option<u64>,
    cache_write_tokens: Option<u64>,
}

impl RawUsage {
    fn over(&self, base: Usage) -> Usage {
        Usage {
            input_tokens: self.input_tokens.unwrap_or(base.input_tokens),
            output_tokens: self.output_tokens.unwrap_or(base.output_tokens),
            cache_read_tokens: self.cache_read_tokens.unwrap_or(base.cache_read_tokens),
            cache_write_tokens: self.cache_write_tokens.unwrap_or(base.cache_write_tokens),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStep {
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    write: Option<Spanned<RawWrite>>,
    #[serde(default)]
    shell: Option<Spanned<String>>,
    #[serde(default)]
    usage: Option<Spanned<RawUsage>>,
    #[serde(default)]
    error: Option<Spanned<RawError>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWrite {
    path: Spanned<String>,
    content: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawError {
    status: Spanned<u16>,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    retry_after: Option<u64>,
}

type Located = (u64, u64, String);

fn at<T>(spanned: &Spanned<T>, message: String) -> Located {
    (
        spanned.referenced.line(),
        spanned.referenced.column(),
        message,
    )
}

impl RawScript {
    fn check(self) -> Result<Script, Located> {
        let usage = self
            .usage
            .as_ref()
            .map_or(Usage::DEFAULT, |u| u.over(Usage::DEFAULT));
        let steps = self
            .steps
            .iter()
            .enumerate()
            .map(|(i, step)| step_of(i, step, usage))
            .collect::<Result<_, _>>()?;
        if let Some(split) = self.split.as_ref().filter(|s| s.value == 0) {
            return Err(at(
                split,
                "`split` is 0: give the characters per streamed piece (1 or more)".into(),
            ));
        }
        Ok(Script {
            usage,
            repeat_last: self.repeat_last,
            split: self.split.map(|s| s.value),
            steps,
        })
    }
}

fn step_of(index: usize, spanned: &Spanned<RawStep>, default: Usage) -> Result<Step, Located> {
    let step = &spanned.value;
    if let Some(error) = &step.error {
        let status = &error.value.status;
        if !(400..=599).contains(&status.value) {
            return Err(at(
                status,
                format!(
                    "step {index}: error status {} is not an HTTP error: use 400..=599 (e.g. 429, 500, 529)",
                    status.value
                ),
            ));
        }
        let others: Vec<&str> = [
            ("text", step.text.is_some()),
            ("write", step.write.is_some()),
            ("shell", step.shell.is_some()),
            ("usage", step.usage.is_some()),
        ]
        .into_iter()
        .filter_map(|(name, set)| set.then_some(name))
        .collect();
        if !others.is_empty() {
            return Err(at(
                error,
                format!(
                    "step {index}: an `error` step answers only the HTTP error, but it also sets {}: keep `error` alone, or move the rest to another step",
                    others.join(", ")
                ),
            ));
        }
        return Ok(Step::Error(HttpError {
            status: status.value,
            message: error
                .value
                .message
                .clone()
                .unwrap_or_else(|| "scripted failure".into()),
            retry_after: error.value.retry_after,
        }));
    }
    let action = match (&step.write, &step.shell) {
        (Some(_), Some(shell)) => {
            return Err(at(
                shell,
                format!(
                    "step {index}: a step takes at most one action, but it has both `write` and `shell`: split them into two steps"
                ),
            ));
        }
        (Some(write), None) => {
            if write.value.path.value.trim().is_empty() {
                return Err(at(
                    &write.value.path,
                    format!("step {index}: `write.path` is empty: name the file to write"),
                ));
            }
            Some(Action::Write {
                path: write.value.path.value.clone(),
                content: write.value.content.clone(),
            })
        }
        (None, Some(shell)) => {
            if shell.value.trim().is_empty() {
                return Err(at(
                    shell,
                    format!("step {index}: `shell` is empty: give the command to run"),
                ));
            }
            Some(Action::Shell {
                command: shell.value.clone(),
            })
        }
        (None, None) => None,
    };
    if action.is_none() && step.text.is_none() {
        return Err(at(
            spanned,
            format!(
                "step {index} is empty: give it `text`, an action (`write` or `shell`), or an `error`"
            ),
        ));
    }
    Ok(Step::Reply(Reply {
        text: step.text.clone(),
        action,
        usage: step
            .usage
            .as_ref()
            .map_or(default, |u| u.value.over(default)),
    }))
}

impl TryFrom<RawScript> for Script {
    type Error = String;

    fn try_from(raw: RawScript) -> Result<Self, Self::Error> {
        raw.check()
            .map_err(|(line, column, message)| format!("{message} (line {line}, column {column})"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Script, ScriptError> {
        Script::parse(text, Path::new("s.yaml"))
    }

    /// The message of the error `text` is refused with.
    fn refusal(text: &str) -> String {
        parse(text).unwrap_err().to_string()
    }

    #[test]
    fn parses_the_documented_example() {
        let script = parse(
            "usage: {input_tokens: 1000, output_tokens: 20, cache_read_tokens: 5, cache_write_tokens: 0}\n\
             loop: false\n\
             split: 5\n\
             steps:\n\
             \x20 - text: \"I'll create hello.txt.\"\n\
             \x20   write: {path: hello.txt, content: \"hello\\n\"}\n\
             \x20 - shell: cat hello.txt\n\
             \x20   usage: {input_tokens: 1200, output_tokens: 25}\n\
             \x20 - text: Done.\n\
             \x20 - error: {status: 429, message: \"slow down\", retry_after: 2}\n",
        )
        .unwrap();
        assert_eq!(script.steps.len(), 4);
        assert_eq!(script.split, Some(5));
        let Step::Reply(second) = &script.steps[1] else {
            panic!()
        };
        assert_eq!(
            second.usage,
            Usage {
                input_tokens: 1200,
                output_tokens: 25,
                cache_read_tokens: 5,
                cache_write_tokens: 0
            }
        );
        assert_eq!(
            script.steps[3],
            Step::Error(HttpError {
                status: 429,
                message: "slow down".into(),
                retry_after: Some(2)
            })
        );
        // Past the end: "Done." with the default usage.
        let Step::Reply(past) = script.step(9) else {
            panic!()
        };
        assert_eq!(past.text.as_deref(), Some("Done."));
        assert_eq!(past.usage.cache_read_tokens, 5);
    }

    #[test]
    fn loop_repeats_the_last_step() {
        let script = parse("loop: true\nsteps:\n  - shell: ls\n").unwrap();
        assert_eq!(script.step(7), script.steps[0]);
    }

    #[test]
    fn errors_name_the_place_and_the_valid_set() {
        let err = refusal("steps:\n  - write: {path: a, content: b}\n    shell: ls\n");
        assert!(
            err.starts_with("s.yaml:3:12: step 0: a step takes at most one action"),
            "{err}"
        );
        let err = refusal("steps:\n  - error: {status: 200}\n");
        assert!(err.starts_with("s.yaml:2:21:"), "{err}");
        assert!(err.contains("400..=599"), "{err}");
        let err = refusal("steps:\n  - txt: hi\n");
        assert!(err.starts_with("s.yaml:2:"), "{err}");
        assert!(err.contains("txt") && err.contains("text"), "{err}");
        let err = refusal("stepz: []\n");
        assert!(err.contains("stepz") && err.contains("steps"), "{err}");
        let err = refusal("steps:\n  - {}\n");
        assert!(err.contains("step 0 is empty"), "{err}");
        let err = refusal("split: 0\nsteps: []\n");
        assert!(err.starts_with("s.yaml:1:8: `split` is 0"), "{err}");
    }

    #[test]
    fn deserializes_through_the_checks() {
        let err =
            serde_saphyr::from_str::<Script>("steps:\n  - error: {status: 99}\n").unwrap_err();
        assert!(err.to_string().contains("400..=599"), "{err}");
    }
}
