//! Small helpers every layer may use: shell quoting and human durations. This module imports
//! nothing from the crate, so anything can depend on it.

use std::time::Duration;

/// Whether a variable name looks like it holds a secret (`*API_KEY`, `*_TOKEN`, `*SECRET*`,
/// `*PASSWORD*`): its value is redacted from a trial's files and kept out of command lines.
pub(crate) fn is_secret_name(name: &str) -> bool {
    let name = name.to_ascii_uppercase();
    name.ends_with("API_KEY")
        || name.ends_with("_TOKEN")
        || name.contains("SECRET")
        || name.contains("PASSWORD")
}

/// The candidate `word` was most likely meant to be (a typo: `instrction_file`, `claude` for
/// `claude-code`), when one is close enough; `None` for a word like none of them.
pub(crate) fn did_you_mean<'a>(
    word: &str,
    candidates: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    let word = word.to_ascii_lowercase();
    candidates
        .into_iter()
        .filter(|candidate| !candidate.is_empty() && candidate.to_ascii_lowercase() != word)
        .map(|candidate| {
            let other = candidate.to_ascii_lowercase();
            (
                strsim::jaro_winkler(&word, &other),
                strsim::levenshtein(&word, &other),
                candidate,
            )
        })
        // Close by edit distance (a third of the word), or sharing a long prefix.
        .filter(|&(similarity, distance, _)| {
            distance <= (word.len() / 3).max(1) || similarity >= 0.88
        })
        .max_by(|a, b| a.0.total_cmp(&b.0).then(b.1.cmp(&a.1)))
        .map(|(_, _, candidate)| candidate)
}

/// `; did you mean 'X'?`, or nothing.
pub(crate) fn suggestion<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> String {
    did_you_mean(word, candidates).map_or(String::new(), |c| format!("; did you mean '{c}'?"))
}

/// Quotes `text` for `sh` when it holds anything but safe characters (an empty string too).
pub(crate) fn shell_quote(text: &str) -> String {
    if !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-+=:,@%".contains(c))
    {
        text.to_owned()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

/// A duration [`parse_duration`] refuses, with the text as written.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub(crate) enum DurationError {
    #[error(
        "invalid duration '{text}': {source}; write a number and a unit, e.g. 500ms, 90s, 10m or 1h"
    )]
    Unreadable {
        text: String,
        #[source]
        source: humantime::DurationError,
    },
    #[error("invalid duration '{text}': it must be greater than zero")]
    Zero { text: String },
    #[error("invalid duration '{text}': the longest allowed is 366d")]
    TooLong { text: String },
}

/// Parses `500ms`, `90s`, `10m`, `1h30m`.
pub(crate) fn parse_duration(text: &str) -> Result<Duration, DurationError> {
    let parsed =
        humantime::parse_duration(text.trim()).map_err(|source| DurationError::Unreadable {
            text: text.to_owned(),
            source,
        })?;
    if parsed.is_zero() {
        return Err(DurationError::Zero {
            text: text.to_owned(),
        });
    }
    // Deadlines are added to the clock: an absurd one would overflow it.
    const MAX: Duration = Duration::from_secs(366 * 24 * 3600);
    if parsed > MAX {
        return Err(DurationError::TooLong {
            text: text.to_owned(),
        });
    }
    Ok(parsed)
}

/// Serde for `Option<Duration>` as a human string (`90s`).
pub(crate) mod duration_opt {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub(crate) fn serialize<S: Serializer>(
        value: &Option<Duration>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match value {
            Some(d) => s.serialize_str(&humantime::format_duration(*d).to_string()),
            None => s.serialize_none(),
        }
    }

    pub(crate) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        Option::<String>::deserialize(d)?
            .map(|text| super::parse_duration(&text).map_err(serde::de::Error::custom))
            .transpose()
    }
}

/// The text of a panic payload.
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = panic.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = panic.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_owned()
    }
}

/// Copies the folder `from` to `to` (created), files with their permissions and symlinks as
/// links.
pub(crate) fn copy_folder(from: &std::path::Path, to: &std::path::Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let (source, target) = (entry.path(), to.join(entry.file_name()));
        let kind = entry.file_type()?;
        if kind.is_dir() {
            copy_folder(&source, &target)?;
        } else if kind.is_symlink() {
            let _ = std::fs::remove_file(&target);
            std::os::unix::fs::symlink(std::fs::read_link(&source)?, &target)?;
        } else {
            std::fs::copy(&source, &target)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn did_you_mean_finds_typos_and_prefixes_only() {
        let keys = ["instruction", "instruction_file", "verify", "tests"];
        assert_eq!(
            did_you_mean("instrction_file", keys),
            Some("instruction_file")
        );
        assert_eq!(did_you_mean("verfy", keys), Some("verify"));
        let kinds = ["noop", "oracle", "command", "claude-code", "codex"];
        assert_eq!(did_you_mean("claude", kinds), Some("claude-code"));
        assert_eq!(did_you_mean("kubernetes", kinds), None);
        assert_eq!(
            suggestion("verify", keys),
            "",
            "an exact name needs no hint"
        );
    }

    use super::*;

    #[test]
    fn durations_parse_and_absurd_ones_are_refused() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(
            parse_duration("0s").unwrap_err().to_string(),
            "invalid duration '0s': it must be greater than zero"
        );
        // Added to the clock, this would overflow it and panic the runner.
        assert!(matches!(
            parse_duration("500000000000y"),
            Err(DurationError::TooLong { .. })
        ));
        assert!(
            parse_duration("soon")
                .unwrap_err()
                .to_string()
                .ends_with("e.g. 500ms, 90s, 10m or 1h")
        );
    }

    #[test]
    fn shell_quote_leaves_safe_words_and_quotes_the_rest() {
        assert_eq!(shell_quote("tests/a.py::test_x"), "tests/a.py::test_x");
        assert_eq!(shell_quote("50%"), "50%");
        assert_eq!(shell_quote("t[a b]"), "'t[a b]'");
        assert_eq!(shell_quote("it's"), r"'it'\''s'");
        assert_eq!(shell_quote(""), "''");
    }
}
