//! Redaction of secrets from a trial's artifacts.
//!
//! A secret is the value of an environment variable whose name looks secret (`*_API_KEY`,
//! `*_TOKEN`, `*SECRET*`, `*PASSWORD*`), from deltabench's own environment (the agent inherits
//! it) or a command agent's `env:`. After the trial every file of its directory and the record
//! are rewritten with each value replaced by `[REDACTED:NAME]`. Values shorter than
//! [`MIN_SECRET_LEN`] are left alone (they would match ordinary text). What this cannot reach:
//! a value the agent transformed (encoded, split, reversed), one JSON-escaped differently in
//! `events.jsonl` (a value holding quotes or backslashes), and copies outside the run directory.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::path::Path;

/// How much of a file is read at a time.
const CHUNK: usize = 1 << 20;

/// Shorter values are not redacted.
pub const MIN_SECRET_LEN: usize = 8;

/// Secret values and their variable names, longest value first (so a secret containing another
/// is replaced whole).
#[derive(Debug, Default)]
pub struct Secrets(Vec<(String, String)>);

/// Whether a variable name looks like it holds a secret.
pub fn is_secret_name(name: &str) -> bool {
    let name = name.to_ascii_uppercase();
    name.ends_with("API_KEY")
        || name.ends_with("_TOKEN")
        || name.contains("SECRET")
        || name.contains("PASSWORD")
}

impl Secrets {
    pub fn collect<'a>(vars: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
        let mut found: Vec<(String, String)> = vars
            .into_iter()
            .filter(|(name, value)| is_secret_name(name) && value.len() >= MIN_SECRET_LEN)
            .map(|(name, value)| (name.to_owned(), value.to_owned()))
            .collect();
        found.sort_by(|a, b| b.1.len().cmp(&a.1.len()).then_with(|| a.cmp(b)));
        found.dedup_by(|a, b| a.1 == b.1);
        Self(found)
    }

    /// Deltabench's own environment plus a command agent's `env:`.
    pub fn of_trial(agent_env: Option<&BTreeMap<String, String>>, api_key: Option<&str>) -> Self {
        let process: Vec<(String, String)> = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
            .collect();
        Self::collect(
            process
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .chain(
                    agent_env
                        .into_iter()
                        .flatten()
                        .map(|(k, v)| (k.as_str(), v.as_str())),
                )
                .chain(api_key.map(|key| ("API_KEY", key))),
        )
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut text = Cow::Borrowed(text);
        for (name, value) in &self.0 {
            if text.contains(value.as_str()) {
                text = Cow::Owned(text.replace(value.as_str(), &format!("[REDACTED:{name}]")));
            }
        }
        text
    }

    /// Copies `input` to `output` (when given) with every secret replaced; returns whether one
    /// was found. Streams in chunks, so a huge log never sits in memory whole.
    fn redact_stream(
        &self,
        mut input: impl Read,
        mut output: Option<&mut dyn Write>,
    ) -> io::Result<bool> {
        let longest = self.0.first().map_or(1, |(_, value)| value.len());
        let tags: Vec<Vec<u8>> = self
            .0
            .iter()
            .map(|(name, _)| format!("[REDACTED:{name}]").into_bytes())
            .collect();
        let mut buf: Vec<u8> = Vec::with_capacity(CHUNK + longest);
        let mut chunk = vec![0; CHUNK];
        let mut found = false;
        loop {
            let read = input.read(&mut chunk)?;
            buf.extend_from_slice(&chunk[..read]);
            let eof = read == 0;
            // Bytes past `safe` may begin a secret that the next chunk completes.
            let safe = if eof {
                buf.len()
            } else {
                buf.len().saturating_sub(longest - 1)
            };
            let mut i = 0;
            let mut plain = 0;
            while i < safe {
                let hit = self
                    .0
                    .iter()
                    .position(|(_, value)| buf[i..].starts_with(value.as_bytes()));
                match hit {
                    Some(k) => {
                        found = true;
                        if let Some(out) = output.as_mut() {
                            out.write_all(&buf[plain..i])?;
                            out.write_all(&tags[k])?;
                        }
                        i += self.0[k].1.len();
                        plain = i;
                    }
                    None => i += 1,
                }
            }
            if let Some(out) = output.as_mut() {
                out.write_all(&buf[plain..i])?;
            }
            buf.drain(..i);
            if eof {
                return Ok(found);
            }
        }
    }

    /// Rewrites every regular file under `dir` (symlinks are not followed) that holds a secret.
    pub fn redact_dir(&self, dir: &Path) -> io::Result<()> {
        if self.is_empty() {
            return Ok(());
        }
        let mut stack = vec![dir.to_owned()];
        while let Some(dir) = stack.pop() {
            for entry in std::fs::read_dir(&dir)? {
                let entry = entry?;
                let kind = entry.file_type()?;
                if kind.is_dir() {
                    stack.push(entry.path());
                } else if kind.is_file() {
                    let path = entry.path();
                    if self.redact_stream(File::open(&path)?, None)? {
                        // Through a rename, so a reader never sees a half-written file.
                        let tmp = path.with_extension("redacting");
                        let mut out = BufWriter::new(File::create(&tmp)?);
                        self.redact_stream(File::open(&path)?, Some(&mut out))?;
                        out.into_inner().map_err(|e| e.into_error())?;
                        std::fs::rename(&tmp, &path)?;
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_look_secret() {
        for name in [
            "OPENAI_API_KEY",
            "GITHUB_TOKEN",
            "AWS_SECRET_ACCESS_KEY",
            "DB_PASSWORD",
        ] {
            assert!(is_secret_name(name), "{name}");
        }
        for name in ["PATH", "HOME", "TOKENIZERS_PARALLELISM", "MAX_TOKENS"] {
            assert!(!is_secret_name(name), "{name}");
        }
    }

    #[test]
    fn long_values_are_replaced_short_ones_kept() {
        let secrets = Secrets::collect([
            ("OPENAI_API_KEY", "sk-test-1234567890"),
            ("SHORT_TOKEN", "abc"),
            ("PATH", "/usr/bin:/bin"),
        ]);
        assert_eq!(
            secrets.redact("key=sk-test-1234567890 abc /usr/bin:/bin"),
            "key=[REDACTED:OPENAI_API_KEY] abc /usr/bin:/bin"
        );
        let mut out = Vec::new();
        let bytes: &[u8] = b"\xff sk-test-1234567890\n";
        assert!(secrets.redact_stream(bytes, Some(&mut out)).unwrap());
        assert_eq!(out, b"\xff [REDACTED:OPENAI_API_KEY]\n");
        assert!(!secrets.redact_stream(&b"nothing here"[..], None).unwrap());
    }

    #[test]
    fn a_secret_split_across_chunks_is_still_replaced() {
        let secrets = Secrets::collect([("OPENAI_API_KEY", "sk-test-1234567890")]);
        let mut input = vec![b'x'; CHUNK - 5];
        input.extend_from_slice(b"sk-test-1234567890 tail");
        let mut out = Vec::new();
        assert!(secrets.redact_stream(&input[..], Some(&mut out)).unwrap());
        let mut expected = vec![b'x'; CHUNK - 5];
        expected.extend_from_slice(b"[REDACTED:OPENAI_API_KEY] tail");
        assert_eq!(out, expected);
    }

    #[test]
    fn redact_dir_rewrites_files_in_place() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/agent.log"), "x sk-test-1234567890 y").unwrap();
        std::fs::write(dir.path().join("clean.log"), "clean").unwrap();
        Secrets::collect([("OPENAI_API_KEY", "sk-test-1234567890")])
            .redact_dir(dir.path())
            .unwrap();
        let text = std::fs::read_to_string(dir.path().join("sub/agent.log")).unwrap();
        assert_eq!(text, "x [REDACTED:OPENAI_API_KEY] y");
        assert_eq!(
            std::fs::read_to_string(dir.path().join("clean.log")).unwrap(),
            "clean"
        );
    }
}
