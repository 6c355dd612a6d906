//! Redaction of secrets from a trial's artifacts.
//!
//! A secret is the value of an environment variable whose name looks secret (`*_API_KEY`,
//! `*_TOKEN`, `*SECRET*`, `*PASSWORD*`), from deltabench's own environment (the agent inherits
//! it) or a command agent's `env:`. After the trial every file of its directory and the record
//! are rewritten with each value replaced by `[REDACTED:NAME]`, and so are the names of its
//! files, folders and symlinks (the agent's `home/` is kept there) and the targets of its
//! symlinks. Values shorter than [`MIN_SECRET_LEN`] are left alone (they would match ordinary
//! text). What this cannot reach: a value the agent transformed (encoded, split, reversed), one
//! JSON-escaped differently in `events.jsonl` or `trajectory.json` (a value holding quotes or
//! backslashes), one holding `/` spread over nested folder names, and copies outside the run
//! directory.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::fs::{File, FileType};
use std::io::{self, BufWriter, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// How much of a file is read at a time.
const CHUNK: usize = 1 << 20;

/// The longest file name Linux file systems take, in bytes.
const NAME_MAX: usize = 255;

/// Shorter values are not redacted.
pub(super) const MIN_SECRET_LEN: usize = 8;

/// Secret values and their variable names, longest value first (so a secret containing another
/// is replaced whole).
#[derive(Debug, Default)]
pub(super) struct Secrets(Vec<(String, String)>);

pub(crate) use crate::support::is_secret_name;

impl Secrets {
    pub(super) fn collect<'a>(vars: impl IntoIterator<Item = (&'a str, &'a str)>) -> Self {
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
    pub(super) fn of_trial(
        agent_env: Option<&BTreeMap<String, String>>,
        api_key: Option<&str>,
    ) -> Self {
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

    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub(super) fn redact<'a>(&self, text: &'a str) -> Cow<'a, str> {
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

    /// Redacts everything under `dir`: the contents of regular files, the targets of symlinks,
    /// and the names of all entries. Symlinks are never followed, so nothing outside `dir` is
    /// read or changed. A name whose redacted form is taken gets `~2`, `~3`, ... (entries of a
    /// folder are renamed in byte order of their names), so no file is lost to a collision.
    pub(super) fn redact_dir(&self, dir: &Path) -> io::Result<()> {
        if self.is_empty() {
            return Ok(());
        }
        let mut stack = vec![dir.to_owned()];
        while let Some(dir) = stack.pop() {
            // Listed whole before anything is renamed: a folder changed while it is read may
            // list an entry twice or not at all.
            let mut entries: Vec<(OsString, FileType)> = std::fs::read_dir(&dir)?
                .map(|entry| entry.and_then(|e| Ok((e.file_name(), e.file_type()?))))
                .collect::<io::Result<_>>()?;
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            for (name, kind) in entries {
                let path = dir.join(&name);
                if kind.is_file() {
                    self.redact_file(&path)?;
                } else if kind.is_symlink() {
                    self.redact_link(&path)?;
                }
                let path = self.redact_name(&dir, &name)?.unwrap_or(path);
                if kind.is_dir() {
                    stack.push(path);
                }
            }
        }
        Ok(())
    }

    /// Rewrites the regular file `path` when it holds a secret, keeping its permissions.
    fn redact_file(&self, path: &Path) -> io::Result<()> {
        if !self.redact_stream(File::open(path)?, None)? {
            return Ok(());
        }
        // Through a fresh temp file and a rename, so a reader never sees a half-written file
        // and no other file of the folder is overwritten.
        let parent = path.parent().unwrap_or(Path::new("."));
        let tmp = tempfile::NamedTempFile::new_in(parent)?;
        let mut out = BufWriter::new(tmp);
        self.redact_stream(File::open(path)?, Some(&mut out))?;
        let tmp = out.into_inner().map_err(|e| e.into_error())?;
        tmp.as_file()
            .set_permissions(std::fs::symlink_metadata(path)?.permissions())?;
        tmp.persist(path).map_err(|e| e.error)?;
        Ok(())
    }

    /// Points the symlink `path` at its target with every secret replaced.
    fn redact_link(&self, path: &Path) -> io::Result<()> {
        let target = std::fs::read_link(path)?;
        let Some(redacted) = self.redact_bytes(target.as_os_str().as_bytes())? else {
            return Ok(());
        };
        let redacted = PathBuf::from(OsStr::from_bytes(&redacted));
        let parent = path.parent().unwrap_or(Path::new("."));
        // A new link beside the old one, renamed over it: the link is never missing.
        let tmp = tempfile::Builder::new()
            .make_in(parent, |tmp| std::os::unix::fs::symlink(&redacted, tmp))?;
        tmp.persist(path).map_err(|e| e.error)?;
        Ok(())
    }

    /// Renames the entry `name` of `dir` when its name holds a secret; returns its new path.
    fn redact_name(&self, dir: &Path, name: &OsStr) -> io::Result<Option<PathBuf>> {
        let Some(redacted) = self.redact_bytes(name.as_bytes())? else {
            return Ok(None);
        };
        let from = dir.join(name);
        for n in 1u64.. {
            let candidate = numbered(&redacted, n);
            // A suffix could complete a secret the name ends with the start of.
            if self.redact_stream(&candidate[..], None)? {
                continue;
            }
            let to = dir.join(OsStr::from_bytes(&candidate));
            match rename_noreplace(&from, &to) {
                Ok(()) => return Ok(Some(to)),
                Err(err) if err.kind() == io::ErrorKind::AlreadyExists => {}
                Err(err) => return Err(err),
            }
        }
        unreachable!("a folder holds fewer than 2^64 entries")
    }

    /// `bytes` with every secret replaced, or None when it holds none.
    fn redact_bytes(&self, bytes: &[u8]) -> io::Result<Option<Vec<u8>>> {
        let mut out = Vec::new();
        Ok(self.redact_stream(bytes, Some(&mut out))?.then_some(out))
    }
}

/// The `n`th candidate name for a redacted `name`: itself, then `name~2`, `name~3`, ...; cut to
/// [`NAME_MAX`] bytes (at a character boundary when the name is UTF-8).
fn numbered(name: &[u8], n: u64) -> Vec<u8> {
    let suffix = if n == 1 {
        String::new()
    } else {
        format!("~{n}")
    };
    let mut keep = name.len().min(NAME_MAX - suffix.len());
    if let Ok(text) = std::str::from_utf8(name) {
        while !text.is_char_boundary(keep) {
            keep -= 1;
        }
    }
    let mut candidate = name[..keep].to_vec();
    candidate.extend_from_slice(suffix.as_bytes());
    candidate
}

/// Renames `from` to `to` unless `to` exists (`AlreadyExists` then), atomically where the file
/// system supports it.
fn rename_noreplace(from: &Path, to: &Path) -> io::Result<()> {
    use nix::errno::Errno;
    use nix::fcntl::{AT_FDCWD, RenameFlags, renameat2};
    match renameat2(AT_FDCWD, from, AT_FDCWD, to, RenameFlags::RENAME_NOREPLACE) {
        Ok(()) => Ok(()),
        // Not supported here: check, then rename (nothing else writes the trial folder now).
        Err(Errno::EINVAL) => {
            if std::fs::symlink_metadata(to).is_ok() {
                return Err(io::ErrorKind::AlreadyExists.into());
            }
            std::fs::rename(from, to)
        }
        Err(errno) => Err(errno.into()),
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

    const KEY: &str = "sk-test-1234567890";

    fn secrets() -> Secrets {
        Secrets::collect([("OPENAI_API_KEY", KEY)])
    }

    /// Every entry under `dir` as (relative path, what it is: file contents, `dir`, or
    /// `-> target`), sorted.
    fn tree(dir: &Path) -> Vec<(String, String)> {
        let mut found = Vec::new();
        let mut stack = vec![dir.to_owned()];
        while let Some(current) = stack.pop() {
            for entry in std::fs::read_dir(&current).unwrap() {
                let entry = entry.unwrap();
                let path = entry.path();
                let kind = entry.file_type().unwrap();
                let what = if kind.is_symlink() {
                    format!("-> {}", std::fs::read_link(&path).unwrap().display())
                } else if kind.is_dir() {
                    stack.push(path.clone());
                    "dir".into()
                } else {
                    std::fs::read_to_string(&path).unwrap()
                };
                let relative = path.strip_prefix(dir).unwrap().display().to_string();
                found.push((relative, what));
            }
        }
        found.sort();
        found
    }

    fn pairs(expected: &[(&str, &str)]) -> Vec<(String, String)> {
        expected
            .iter()
            .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
            .collect()
    }

    #[test]
    fn names_of_files_folders_and_symlinks_and_link_targets_are_redacted() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("trial");
        let home = dir.join("home");
        std::fs::create_dir_all(home.join(format!("cfg-{KEY}/{KEY}"))).unwrap();
        std::fs::write(home.join(KEY), "plain").unwrap();
        std::fs::write(home.join(format!("cfg-{KEY}/{KEY}/{KEY}.txt")), KEY).unwrap();
        std::os::unix::fs::symlink(format!("/nowhere/{KEY}"), home.join("link")).unwrap();
        std::os::unix::fs::symlink(format!("../{KEY}"), home.join(format!("to-{KEY}"))).unwrap();
        secrets().redact_dir(&dir).unwrap();
        let tag = "[REDACTED:OPENAI_API_KEY]";
        let mut expected = vec![
            ("home".to_owned(), "dir".to_owned()),
            (format!("home/cfg-{tag}"), "dir".into()),
            (format!("home/cfg-{tag}/{tag}"), "dir".into()),
            (format!("home/cfg-{tag}/{tag}/{tag}.txt"), tag.into()),
            ("home/link".into(), format!("-> /nowhere/{tag}")),
            (format!("home/to-{tag}"), format!("-> ../{tag}")),
            (format!("home/{tag}"), "plain".into()),
        ];
        expected.sort();
        assert_eq!(tree(&dir), expected);
    }

    #[test]
    fn symlinks_are_not_followed_out_of_the_folder() {
        let root = tempfile::tempdir().unwrap();
        let outside = root.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join(KEY), KEY).unwrap();
        let dir = root.path().join("trial");
        std::fs::create_dir(&dir).unwrap();
        std::os::unix::fs::symlink(&outside, dir.join("out")).unwrap();
        std::os::unix::fs::symlink(outside.join(KEY), dir.join("file")).unwrap();
        secrets().redact_dir(&dir).unwrap();
        assert_eq!(tree(&outside), pairs(&[(KEY, KEY)]));
        let tag = "[REDACTED:OPENAI_API_KEY]";
        let file = format!("-> {}/{tag}", outside.display());
        let out = format!("-> {}", outside.display());
        assert_eq!(tree(&dir), pairs(&[("file", &file), ("out", &out)]));
    }

    /// Names that redact to the same one keep every file: the first in byte order takes the
    /// name, the others get `~2`, `~3`, ...; a name already there is never replaced.
    #[test]
    fn colliding_names_keep_every_file_deterministically() {
        let dir = tempfile::tempdir().unwrap();
        let secrets = Secrets::collect([("API_KEY", "aaaaaaaa1"), ("API_KEY", "bbbbbbbb2")]);
        for (name, text) in [
            ("x-aaaaaaaa1", "first"),
            ("x-bbbbbbbb2", "second"),
            ("x-[REDACTED:API_KEY]", "was there"),
        ] {
            std::fs::write(dir.path().join(name), text).unwrap();
        }
        std::fs::create_dir(dir.path().join("d-aaaaaaaa1")).unwrap();
        std::fs::write(dir.path().join("d-aaaaaaaa1/f"), "in a").unwrap();
        std::fs::create_dir(dir.path().join("d-bbbbbbbb2")).unwrap();
        std::fs::write(dir.path().join("d-bbbbbbbb2/f"), "in b").unwrap();
        secrets.redact_dir(dir.path()).unwrap();
        assert_eq!(
            tree(dir.path()),
            pairs(&[
                ("d-[REDACTED:API_KEY]", "dir"),
                ("d-[REDACTED:API_KEY]/f", "in a"),
                ("d-[REDACTED:API_KEY]~2", "dir"),
                ("d-[REDACTED:API_KEY]~2/f", "in b"),
                ("x-[REDACTED:API_KEY]", "was there"),
                ("x-[REDACTED:API_KEY]~2", "first"),
                ("x-[REDACTED:API_KEY]~3", "second"),
            ])
        );
    }

    #[test]
    fn a_redacted_name_too_long_for_the_file_system_is_cut() {
        let dir = tempfile::tempdir().unwrap();
        let secrets = Secrets::collect([("MY_TOKEN", "12345678")]);
        // 250 bytes, two-byte characters then the secret: the tag makes it 257.
        let long = format!("{}12345678", "é".repeat(121));
        std::fs::write(dir.path().join(&long), "kept").unwrap();
        std::fs::write(dir.path().join(format!("{long}.b")), "too").unwrap();
        secrets.redact_dir(dir.path()).unwrap();
        // 242 bytes of the name, then as much of the tag (and the suffix) as fits in 255.
        let head = "é".repeat(121);
        assert_eq!(
            tree(dir.path()),
            pairs(&[
                (&format!("{head}[REDACTED:MY_"), "kept"),
                (&format!("{head}[REDACTED:M~2"), "too"),
            ])
        );
        // Cut at a character boundary.
        assert_eq!(numbered("é".repeat(200).as_bytes(), 1).len(), 254);
    }

    /// The temp file of a rewrite never replaces another file of the folder, and the rewritten
    /// file keeps its mode.
    #[test]
    fn a_rewrite_keeps_the_other_files_and_the_mode() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.sh"), KEY).unwrap();
        std::fs::set_permissions(
            dir.path().join("a.sh"),
            std::fs::Permissions::from_mode(0o751),
        )
        .unwrap();
        std::fs::write(dir.path().join("a.redacting"), "mine").unwrap();
        secrets().redact_dir(dir.path()).unwrap();
        assert_eq!(
            tree(dir.path()),
            pairs(&[
                ("a.redacting", "mine"),
                ("a.sh", "[REDACTED:OPENAI_API_KEY]")
            ])
        );
        let mode = std::fs::metadata(dir.path().join("a.sh"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o751);
    }
}
