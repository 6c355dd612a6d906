//! Mutation-checked assertions: a pass counts only if the hidden tests' assertions still bite in
//! the run that judged it.
//!
//! An agent whose code runs inside the test process can neutralise the assertions (patch
//! `assertEqual` into a no-op, return a value equal to anything) instead of fixing the bug. A
//! mutant changes one assertion of a hidden test (its expected value, or a truth assertion
//! negated) so that a correct program fails it. `validate` lists the mutants of the hidden test
//! files (`mutate/mutate.py`: Python through `ast`, Rust's `assert!`/`assert_eq!` through a
//! scanner) and keeps those that make their test fail against the reference ("bite"). Every
//! passing trial then runs a random sample of them in a second verify run: a mutated test that
//! still passes there means the assertions did not bite, and the trial is `invalid`.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde::{Deserialize, Serialize};

/// The lister, run by the harness (never inside the verify command) on the hidden test files.
const LISTER: &str = include_str!("mutate/mutate.py");

/// Test mutants checked per passing trial when the suite says nothing.
pub const DEFAULT_MUTANTS: u32 = 3;
/// Rounds of `validate`'s search: each round runs one candidate of each test function.
pub const DISCOVERY_ROUNDS: usize = 3;

/// One change to one assertion of a hidden test file.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Mutant {
    /// The file, relative to the workspace root.
    pub file: String,
    /// The test function holding the assertion (`Class.test_x`, `tests::adds`).
    pub test: String,
    /// The assertion's line in the file, from 1.
    pub line: u32,
    /// Byte range of `original` in the file.
    pub start: usize,
    /// End (exclusive) of that byte range.
    pub end: usize,
    /// The source text the mutant replaces (the bytes `start..end`).
    pub original: String,
    /// The text put in its place.
    pub replacement: String,
    /// What the change is, for a reason a user reads.
    pub what: String,
}

impl Mutant {
    /// `tests/test_calc.py:6 (assertEqual: expected 5 -> 6)`.
    pub fn describe(&self) -> String {
        format!("{}:{} ({})", self.file, self.line, self.what)
    }

    /// Whether a runner's test id names this mutant's test: a pytest node id
    /// (`tests/test_calc.py::TestCalc::test_add[1]`), a unittest id
    /// (`tests.test_calc.TestCalc.test_add`) or a `cargo test` name (`tests::adds`).
    pub fn names(&self, id: &str) -> bool {
        let id = id.split('[').next().unwrap_or(id);
        if self.file.ends_with(".rs") {
            return id == self.test || id.ends_with(&format!("::{}", self.test));
        }
        if let Some((path, rest)) = id.split_once("::") {
            // pytest: the path is relative to its rootdir, which may be below the workspace.
            return self.file.ends_with(path) && rest.replace("::", ".") == self.test;
        }
        let module = self
            .file
            .trim_end_matches(".py")
            .trim_end_matches("/__init__")
            .replace('/', ".");
        id.strip_suffix(&self.test)
            .and_then(|head| head.strip_suffix('.'))
            .is_some_and(|head| module.ends_with(head) && !head.is_empty())
    }
}

/// A mutant that bit the reference, with the ids of the tests it made fail.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BitingMutant {
    /// The mutant (its fields are flattened into this record's JSON).
    #[serde(flatten)]
    pub mutant: Mutant,
    /// Ids of the tests that failed with the mutant in, as the test runner named them.
    pub failed: Vec<String>,
}

/// What the mutant lister found in a set of files.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Listing {
    /// Every mutant found, in file order.
    pub mutants: Vec<Mutant>,
    /// Files it could not read, as `file: why`; they give no mutants, the rest still do.
    pub errors: Vec<String>,
}

/// Whether a file is one the lister mutates.
pub fn has_mutator(path: &str) -> bool {
    path.ends_with(".py") || path.ends_with(".rs")
}

/// Why the mutant lister could not run.
#[derive(Debug, thiserror::Error)]
pub(crate) enum MutateError {
    #[error("cannot run the mutant lister with {python}: {source}")]
    Spawn {
        python: String,
        source: std::io::Error,
    },
    #[error("the mutant lister failed ({status}): {stderr}")]
    Failed { status: String, stderr: String },
    #[error("cannot write the mutant lister to {}: {source}", path.display())]
    Write {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
}

/// Lists the mutants of `files` (relative to `root`) with `python3`.
pub(crate) fn list(root: &Path, files: &[String]) -> Result<Listing, MutateError> {
    let files: Vec<&String> = files.iter().filter(|f| has_mutator(f)).collect();
    if files.is_empty() {
        return Ok(Listing::default());
    }
    let script = tempfile::Builder::new()
        .prefix("deltabench-mutate-")
        .suffix(".py")
        .tempfile()
        .map_err(|source| MutateError::Write {
            path: std::env::temp_dir(),
            source,
        })?;
    std::fs::write(script.path(), LISTER).map_err(|source| MutateError::Write {
        path: script.path().to_owned(),
        source,
    })?;
    let output = std::process::Command::new("python3")
        // The harness's own run: no hook, no bytecode, no user site.
        .env_remove("PYTHONPATH")
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("PYTHONNOUSERSITE", "1")
        .arg("-I")
        .arg(script.path())
        .arg(root)
        .args(files)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|source| MutateError::Spawn {
            python: "python3".into(),
            source,
        })?;
    if !output.status.success() {
        return Err(MutateError::Failed {
            status: output.status.to_string(),
            stderr: String::from_utf8_lossy(&output.stderr).trim().to_owned(),
        });
    }
    let mut listing = Listing::default();
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        #[derive(Deserialize)]
        struct Error {
            file: String,
            error: String,
        }
        if let Ok(mutant) = serde_json::from_str::<Mutant>(line) {
            listing.mutants.push(mutant);
        } else if let Ok(e) = serde_json::from_str::<Error>(line) {
            listing.errors.push(format!("{}: {}", e.file, e.error));
        }
    }
    Ok(listing)
}

/// Splices mutants into the hidden test files as they are laid, before they are written: a
/// mutated file is written once, exactly as an unmutated one is, so nothing but the changed
/// literal tells a mutant run from the judged run (no second write, no mode change).
#[derive(Debug, Default)]
pub(crate) struct Splicer {
    pending: BTreeMap<String, Vec<Mutant>>,
    applied: Vec<Mutant>,
    skipped: Vec<String>,
}

impl Splicer {
    pub(crate) fn new(mutants: &[Mutant]) -> Self {
        let mut pending: BTreeMap<String, Vec<Mutant>> = BTreeMap::new();
        for mutant in mutants {
            pending
                .entry(mutant.file.clone())
                .or_default()
                .push(mutant.clone());
        }
        Self {
            pending,
            ..Self::default()
        }
    }

    /// The overlay's edit: `bytes` of the workspace-relative `path` with its mutants applied,
    /// each only where its original text still stands.
    pub(crate) fn edit(&mut self, path: &Path, bytes: &mut Vec<u8>) {
        let Some(mut mutants) = self.pending.remove(&*path.to_string_lossy()) else {
            return;
        };
        // From the end, so earlier offsets stay valid.
        mutants.sort_by_key(|m| std::cmp::Reverse(m.start));
        let mut last_start = usize::MAX;
        for mutant in mutants {
            let stands = mutant.end <= last_start
                && bytes.get(mutant.start..mutant.end) == Some(mutant.original.as_bytes());
            if !stands {
                self.skipped
                    .push(format!("{}: the file changed there", mutant.describe()));
                continue;
            }
            bytes.splice(mutant.start..mutant.end, mutant.replacement.bytes());
            last_start = mutant.start;
            self.applied.push(mutant);
        }
    }

    /// The mutants applied and, for the others, why not.
    pub(crate) fn finish(mut self) -> (Vec<Mutant>, Vec<String>) {
        for mutant in std::mem::take(&mut self.pending).into_values().flatten() {
            self.skipped.push(format!(
                "{}: not a file the hidden tests lay",
                mutant.describe()
            ));
        }
        (self.applied, self.skipped)
    }
}

/// `validate`'s rounds: round N holds the N-th candidate of each test function, so a failure
/// in a test is that one mutant's doing.
pub fn rounds(candidates: &[Mutant]) -> Vec<Vec<Mutant>> {
    let mut by_test: BTreeMap<(&str, &str), Vec<&Mutant>> = BTreeMap::new();
    for mutant in candidates {
        by_test
            .entry((&mutant.file, &mutant.test))
            .or_default()
            .push(mutant);
    }
    (0..DISCOVERY_ROUNDS)
        .map(|round| {
            by_test
                .values()
                .filter_map(|mutants| mutants.get(round).map(|m| (*m).clone()))
                .collect::<Vec<_>>()
        })
        .filter(|round| !round.is_empty())
        .collect()
}

/// Up to `n` biting mutants, at most one per test function, drawn afresh with `seed`.
pub fn sample(biting: &[BitingMutant], n: u32, seed: u64) -> Vec<BitingMutant> {
    use rand::SeedableRng;
    use rand::seq::SliceRandom;
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let mut shuffled: Vec<&BitingMutant> = biting.iter().collect();
    shuffled.shuffle(&mut rng);
    let mut tests = BTreeSet::new();
    shuffled
        .into_iter()
        .filter(|b| tests.insert((b.mutant.file.clone(), b.mutant.test.clone())))
        .take(n as usize)
        .cloned()
        .collect()
}

/// A seed no run can predict: what the sample holds, and which verify run goes first.
pub fn fresh_seed() -> u64 {
    uuid::Uuid::new_v4().as_u128() as u64
}

/// The ids of `outcomes`' failed tests that name `mutant`'s test: what `validate` records as the
/// tests a mutant bites (the reference is trusted; a trial's check then wants these exact ids).
pub fn failed_by(outcomes: &super::Outcomes, mutant: &Mutant) -> Vec<String> {
    outcomes
        .failed
        .iter()
        .filter(|id| mutant.names(id))
        .cloned()
        .collect()
}

impl BitingMutant {
    /// Whether this mutant bit in a trial's mutant run: one of the exact ids `validate` saw it
    /// make fail is reported failed there (a forged failure of a look-alike id, `test_x[y]` for
    /// `test_x`, is not its bite).
    pub fn bit(&self, outcomes: &super::Outcomes) -> bool {
        self.failed.iter().any(|id| outcomes.failed.contains(id))
    }
}

/// What the mutation check found in a trial.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MutationReport {
    /// `validate`: the candidates that bit the reference. A trial: the sample that was run.
    pub biting: Vec<BitingMutant>,
    /// A trial: the sampled mutants whose tests did not fail (the assertions did not bite).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub survived: Vec<Mutant>,
    /// `validate`: candidates listed; a trial: mutants run.
    pub tried: usize,
    /// Files the lister could not read and mutants that could not be applied, with why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

impl MutationReport {
    /// Why the trial's pass is no evidence, when a mutant survived.
    pub fn survivor_reason(&self) -> Option<String> {
        let first = self.survived.first()?;
        let more = self.survived.len() - 1;
        Some(format!(
            "the hidden tests' assertions do not bite: a mutant of {} still passed in {}{}",
            first.describe(),
            first.test,
            if more > 0 {
                format!(" (+{more} more of {} mutants)", self.tried)
            } else {
                String::new()
            }
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mutant(file: &str, test: &str, start: usize, original: &str, replacement: &str) -> Mutant {
        Mutant {
            file: file.into(),
            test: test.into(),
            line: 1,
            start,
            end: start + original.len(),
            original: original.into(),
            replacement: replacement.into(),
            what: "x".into(),
        }
    }

    #[test]
    fn a_mutant_names_the_ids_of_its_test_in_each_runner() {
        let py = mutant("tests/test_calc.py", "TestCalc.test_add", 0, "5", "6");
        assert!(py.names("tests/test_calc.py::TestCalc::test_add"));
        assert!(py.names("test_calc.py::TestCalc::test_add[1-2]"));
        assert!(py.names("tests.test_calc.TestCalc.test_add"));
        assert!(py.names("test_calc.TestCalc.test_add"));
        assert!(!py.names("tests/test_calc.py::TestCalc::test_add_more"));
        assert!(!py.names("tests.test_other.TestCalc.test_add"));
        let bare = mutant("test_a.py", "test_x", 0, "5", "6");
        assert!(bare.names("test_a.py::test_x"));
        assert!(!bare.names("test_x"));
        let rs = mutant("src/lib.rs", "tests::adds", 0, "3", "4");
        assert!(rs.names("tests::adds"));
        assert!(rs.names("calc::tests::adds"));
        assert!(!rs.names("tests::adds_more"));
    }

    #[test]
    fn mutants_splice_where_their_text_stands_and_round_one_per_test() {
        let five = mutant("t.py", "A.t", 5, "5", "6");
        let seven = mutant("t.py", "A.u", 16, "7", "70");
        let stale = mutant("t.py", "A.u", 0, "x", "y");
        let elsewhere = mutant("u.py", "A.v", 0, "1", "2");
        let mut splicer = Splicer::new(&[five.clone(), seven.clone(), stale, elsewhere]);
        let mut bytes = b"a == 5 and b == 7\n".to_vec();
        splicer.edit(Path::new("t.py"), &mut bytes);
        let mut other = b"untouched".to_vec();
        splicer.edit(Path::new("v.py"), &mut other);
        let (applied, skipped) = splicer.finish();
        assert_eq!(applied.len(), 2);
        assert_eq!(skipped.len(), 2, "{skipped:?}");
        assert!(
            skipped[1].contains("not a file the hidden tests lay"),
            "{skipped:?}"
        );
        assert_eq!(bytes, b"a == 6 and b == 70\n");
        assert_eq!(other, b"untouched");
        let rounds = rounds(&[
            five.clone(),
            seven.clone(),
            mutant("t.py", "A.t", 0, "a", "b"),
        ]);
        assert_eq!(rounds.len(), 2);
        assert_eq!(rounds[0], vec![five, seven]);
    }

    #[test]
    fn a_mutant_bites_only_through_the_exact_ids_validate_saw() {
        let biting = BitingMutant {
            mutant: mutant("tests/test_x.py", "C.test_y", 0, "5", "6"),
            failed: vec!["tests/test_x.py::C::test_y".into()],
        };
        let forged = crate::delta::Outcomes {
            failed: ["tests/test_x.py::C::test_y[x]".to_owned()].into(),
            ..Default::default()
        };
        assert!(!biting.bit(&forged));
        assert_eq!(failed_by(&forged, &biting.mutant).len(), 1);
        let real = crate::delta::Outcomes {
            failed: ["tests/test_x.py::C::test_y".to_owned()].into(),
            ..Default::default()
        };
        assert!(biting.bit(&real));
    }

    #[test]
    fn a_sample_takes_one_mutant_per_test_and_changes_with_the_seed() {
        let biting: Vec<BitingMutant> = (0..20)
            .map(|i| BitingMutant {
                mutant: mutant("t.py", &format!("T.t{}", i % 10), i, "1", "2"),
                failed: vec![],
            })
            .collect();
        let one = sample(&biting, 5, 1);
        assert_eq!(one.len(), 5);
        let tests: BTreeSet<_> = one.iter().map(|b| &b.mutant.test).collect();
        assert_eq!(tests.len(), 5);
        let differs = (2..10).any(|seed| sample(&biting, 5, seed) != one);
        assert!(differs);
        assert_eq!(sample(&biting, 50, 1).len(), 10);
    }
}
