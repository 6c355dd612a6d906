//! Every subcommand through the real binary, snapshotted whole as in uv's CLI tests: the exit
//! code, stdout and stderr in one snapshot, with what changes from run to run (temp paths,
//! timings, timestamps, process ids, ports, the version) filtered out. For each command: its
//! `--help`, its main success path (on the bundled demo suite or a fixture), and its main
//! error paths.
//!
//! A snapshot that changes is a change of what users see: read the `.snap.new` before accepting
//! it (`cargo insta review`, or rename it after reading).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::LazyLock;

use regex::{Captures, Regex};

use crate::common::{deltabench, temp_dir};

/// Runs `$command` (a `std::process::Command`) and asserts the snapshot `it__cli__$name.snap` of
/// its filtered exit code, stdout and stderr. Returns the unfiltered `Output`.
macro_rules! deltabench_snapshot {
    ($cli:expr, $name:expr, $command:expr) => {{
        let command: &mut std::process::Command = $command;
        let (snapshot, output) = $cli.run_and_format(command);
        insta::with_settings!({
            description => $cli.command_line(command),
            omit_expression => true,
        }, {
            let name: &str = $name;
            insta::assert_snapshot!(name, snapshot);
        });
        output
    }};
}
pub(crate) use deltabench_snapshot;

/// The repository root: the bundled suites and fixtures live under it.
fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// One test's temp dir (the cwd of its commands, their cache) and how its output is filtered.
pub(crate) struct Cli {
    tmp: tempfile::TempDir,
}

impl Cli {
    pub(crate) fn new() -> Self {
        Self { tmp: temp_dir() }
    }

    pub(crate) fn path(&self, relative: &str) -> PathBuf {
        self.tmp.path().join(relative)
    }

    /// `deltabench ARGS` in the temp dir; its cache is `[TEMP]/cache`.
    pub(crate) fn command(&self, args: &[&str]) -> Command {
        let mut command = deltabench(self.tmp.path());
        command
            .args(args)
            // Help text is wrapped to the terminal's width: the same for everyone here.
            .env("COLUMNS", "100")
            .env("LINES", "50")
            .env_remove("CLICOLOR_FORCE");
        command
    }

    /// `deltabench ARGS` in the repository root (for `suites/demo` as the README writes it),
    /// with the cache still in the temp dir.
    pub(crate) fn in_repo(&self, args: &[&str]) -> Command {
        let mut command = self.command(args);
        command
            .current_dir(repo())
            .env("DELTABENCH_CACHE", self.path("cache"));
        command
    }

    /// Replaces what differs between runs and machines with placeholders.
    fn filter(&self, text: &str) -> String {
        let mut text = text.to_owned();
        // Paths first, longest first, each as given and as resolved.
        let mut paths: Vec<(String, &str)> = Vec::new();
        for (path, name) in [(self.tmp.path(), "[TEMP]"), (repo(), "[REPO]")] {
            paths.push((path.display().to_string(), name));
            if let Ok(real) = path.canonicalize() {
                paths.push((real.display().to_string(), name));
            }
        }
        paths.sort_by_key(|(path, _)| std::cmp::Reverse(path.len()));
        for (path, name) in paths {
            text = text.replace(&path, name);
        }
        for (pattern, replacement) in FILTERS.iter() {
            text = pattern.replace_all(&text, *replacement).into_owned();
        }
        // A duration keeps its width when spaces pad it (a table cell), so columns stay aligned
        // whatever the digits.
        text = DURATION
            .replace_all(&text, |caps: &Captures| {
                let width = caps["time"].len() + caps["pad"].len();
                let time = if caps["pad"].is_empty() {
                    "[TIME]".to_owned()
                } else {
                    format!("{:<width$}", "[TIME]", width = width.max("[TIME] ".len()))
                };
                format!("{}{time}", &caps["before"])
            })
            .into_owned();
        TRAILING_SPACE.replace_all(&text, "").into_owned()
    }

    /// Runs `command`; returns its snapshot text and its unfiltered output.
    pub(crate) fn run_and_format(&self, command: &mut Command) -> (String, Output) {
        let output = command
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|err| panic!("cannot run {}: {err}", self.command_line(command)));
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        // What a failing snapshot filtered out.
        eprintln!(
            "$ {}\n--- unfiltered stdout ---\n{stdout}\n--- unfiltered stderr ---\n{stderr}",
            self.command_line(command)
        );
        (self.format(&output), output)
    }

    /// The snapshot text of `output`: success, exit code, stdout and stderr, filtered.
    pub(crate) fn format(&self, output: &Output) -> String {
        format!(
            "success: {}\nexit_code: {}\n----- stdout -----\n{}\n----- stderr -----\n{}",
            output.status.success(),
            output
                .status
                .code()
                .map_or_else(|| format!("none ({})", output.status), |c| c.to_string()),
            self.filter(&String::from_utf8_lossy(&output.stdout)),
            self.filter(&String::from_utf8_lossy(&output.stderr)),
        )
    }

    /// `deltabench ARGS`, filtered: the snapshot's description.
    pub(crate) fn command_line(&self, command: &Command) -> String {
        let args: Vec<String> = command
            .get_args()
            .map(|arg| arg.to_string_lossy().into_owned())
            .collect();
        self.filter(&format!("deltabench {}", args.join(" ")))
    }
}

/// (pattern, replacement), applied in order after the paths.
static FILTERS: LazyLock<Vec<(Regex, &'static str)>> = LazyLock::new(|| {
    let version = regex::escape(env!("CARGO_PKG_VERSION"));
    [
        // Another test's temp dir, or one made by the binary itself.
        (r"/(?:dev/shm|tmp)/deltabench-test-\w+", "[TEMP]"),
        // validate's scratch run: WORKDIR/deltabench-validate-PID-NANOS.
        (
            r"deltabench-validate-\d+-[0-9a-f]+",
            "deltabench-validate-[PID]-[ID]",
        ),
        // A run's workspaces: WORKDIR/deltabench-OUT-PID.
        (r"(deltabench-[\w.-]+?)-\d+\b", "$1-[PID]"),
        (r"\bpid \d+", "pid [PID]"),
        // A commit of a repo made by the test: its id depends on the time.
        (r"\b[0-9a-f]{40}\b", "[COMMIT]"),
        (r"127\.0\.0\.1:\d+", "127.0.0.1:[PORT]"),
        (
            r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z| UTC)?",
            "[TIMESTAMP]",
        ),
        // The default --out: reports/SUITE-20250102T030405Z.
        (r"\d{8}T\d{6}Z", "[TIMESTAMP]"),
        (&format!(r"\b{version}\b"), "[VERSION]"),
        // Which tasks' trials made or waited for a shared template depends on their order
        // (tests/it/prepared.rs checks the section itself).
        (
            r"\nPrepared once per task, not counted in its trials' times[^\n]*\n(?:[^\n]+\n)*",
            "",
        ),
    ]
    .into_iter()
    .map(|(pattern, replacement)| (Regex::new(pattern).unwrap(), replacement))
    .collect()
});

/// A measured duration: `1.23s`, `45ms`, `1m 2.30s`, and the spaces padding it; not a configured
/// `60s`, nor a quoted example (`250ms` in the schema).
static DURATION: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?P<before>^|[^`\w.])(?P<time>(?:\d+m )?\d+(?:\.\d+s|ms))\b(?P<pad> *)").unwrap()
});

static TRAILING_SPACE: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"(?m)[ \t]+$").unwrap());

/// Every subcommand's path (`["model", "serve"]`), from the command line's own definition.
fn subcommands(command: &clap::Command, path: &[String]) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    for sub in command
        .get_subcommands()
        .filter(|c| c.get_name() != "help" && !c.is_hide_set())
    {
        let mut sub_path = path.to_vec();
        sub_path.push(sub.get_name().to_owned());
        found.push(sub_path.clone());
        found.extend(subcommands(sub, &sub_path));
    }
    found
}

/// Each help snapshot, a new subcommand's included. The commands run with `DELTABENCH_CACHE`
/// set: the help names the variable, never its value.
#[test]
fn help_of_every_subcommand() {
    let cli = Cli::new();
    deltabench_snapshot!(cli, "help", &mut cli.command(&["--help"]));
    let all = subcommands(&deltabench::cli::command(), &[]);
    assert!(all.len() > 10, "{all:?}");
    for path in all {
        let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
        let name = format!("help_{}", args.join("_"));
        args.push("--help");
        deltabench_snapshot!(cli, &name, &mut cli.command(&args));
    }
    deltabench_snapshot!(cli, "version", &mut cli.command(&["--version"]));
    deltabench_snapshot!(cli, "no_subcommand", &mut cli.command(&[]));
    deltabench_snapshot!(cli, "unknown_subcommand", &mut cli.command(&["frobnicate"]));
}

/// One demo run, then each command that reads a run directory on it.
#[test]
fn demo_run_then_report_compare_plan_resume() {
    let cli = Cli::new();
    std::fs::create_dir_all(cli.path("work")).unwrap();
    let (work, base) = (cli.path("work"), cli.path("base"));
    let (work, base) = (work.to_str().unwrap(), base.to_str().unwrap());
    // -j 1: the progress lines in plan order.
    let run = [
        "run",
        "suites/demo",
        "-j",
        "1",
        "--workdir",
        work,
        "--out",
        base,
    ];
    deltabench_snapshot!(cli, "run_demo", &mut cli.in_repo(&run));
    deltabench_snapshot!(cli, "run_out_in_use", &mut cli.in_repo(&run));

    deltabench_snapshot!(cli, "report_table", &mut cli.command(&["report", base]));
    deltabench_snapshot!(
        cli,
        "report_missing_run_dir",
        &mut cli.command(&["report", "no-such-run"])
    );
    deltabench_snapshot!(
        cli,
        "report_unknown_format",
        &mut cli.command(&["report", base, "--format", "xml"])
    );

    deltabench_snapshot!(
        cli,
        "compare_two_agents",
        &mut cli.command(&["compare", base, "oracle", "sed-fixer"])
    );
    deltabench_snapshot!(
        cli,
        "compare_unknown_agent",
        &mut cli.command(&["compare", base, "oracle", "nosuch"])
    );
    deltabench_snapshot!(
        cli,
        "compare_unknown_format",
        &mut cli.command(&["compare", base, "oracle", "noop", "--format", "yaml"])
    );
    deltabench_snapshot!(
        cli,
        "compare_missing_run_dir",
        &mut cli.command(&["compare", base, "no-such-run"])
    );
    deltabench_snapshot!(
        cli,
        "compare_one_target",
        &mut cli.command(&["compare", base])
    );

    deltabench_snapshot!(cli, "plan", &mut cli.command(&["plan", base]));
    deltabench_snapshot!(
        cli,
        "plan_missing_run_dir",
        &mut cli.command(&["plan", "no-such-run"])
    );

    // A run that died after 16 of its 18 trials: the copy without its last two records.
    let partial = cli.path("partial");
    copy_dir(Path::new(base), &partial);
    let records = std::fs::read_to_string(partial.join("trials.jsonl")).unwrap();
    let kept: Vec<&str> = records.lines().take(16).collect();
    std::fs::write(partial.join("trials.jsonl"), kept.join("\n") + "\n").unwrap();
    let partial = partial.to_str().unwrap();
    deltabench_snapshot!(
        cli,
        "resume",
        &mut cli.command(&["resume", partial, "-j", "1"])
    );
    // Finished now: nothing is left to run.
    deltabench_snapshot!(
        cli,
        "resume_finished",
        &mut cli.command(&["resume", partial])
    );
    deltabench_snapshot!(
        cli,
        "resume_missing_run_dir",
        &mut cli.command(&["resume", "no-such-run"])
    );
    deltabench_snapshot!(
        cli,
        "resume_zero_jobs",
        &mut cli.command(&["resume", partial, "-j", "0"])
    );

    // Two run directories: the resumed run against the first.
    deltabench_snapshot!(
        cli,
        "compare_two_runs_gate",
        &mut cli.command(&["compare", base, partial, "--agent", "sed-fixer", "--gate"])
    );
}

#[test]
fn run_errors() {
    let cli = Cli::new();
    std::fs::create_dir_all(cli.path("empty")).unwrap();
    deltabench_snapshot!(
        cli,
        "run_missing_suite",
        &mut cli.command(&["run", "no-such-suite"])
    );
    deltabench_snapshot!(
        cli,
        "run_folder_without_suite_yaml",
        &mut cli.command(&["run", "empty"])
    );
    deltabench_snapshot!(
        cli,
        "run_trials_not_a_number",
        &mut cli.in_repo(&["run", "suites/demo", "--trials", "zero"])
    );
    deltabench_snapshot!(
        cli,
        "run_missing_workdir",
        &mut cli.in_repo(&["run", "suites/demo", "--workdir", "/no/such/workdir"])
    );
    // An agents file that cannot be read: the io error is kept as the cause.
    let agents = cli.path("agents.yaml");
    std::fs::create_dir_all(&agents).unwrap();
    deltabench_snapshot!(
        cli,
        "run_agents_file_unreadable",
        &mut cli.in_repo(&["run", "suites/demo", "--agents", agents.to_str().unwrap()])
    );
}

#[test]
fn validate_the_demo_and_its_errors() {
    let cli = Cli::new();
    std::fs::create_dir_all(cli.path("work")).unwrap();
    let work = cli.path("work");
    let work = work.to_str().unwrap();
    deltabench_snapshot!(
        cli,
        "validate_demo",
        &mut cli.in_repo(&["validate", "suites/demo", "-j", "1", "--workdir", work])
    );
    deltabench_snapshot!(
        cli,
        "validate_unknown_task",
        &mut cli.in_repo(&[
            "validate",
            "suites/demo",
            "--task",
            "nope",
            "--workdir",
            work
        ])
    );
    deltabench_snapshot!(
        cli,
        "validate_missing_suite",
        &mut cli.command(&["validate", "no-such-suite"])
    );
}

/// Two shards of a small plan (oracle on three tasks), merged; then merges that go wrong.
#[test]
fn shards_then_merge() {
    let cli = Cli::new();
    std::fs::create_dir_all(cli.path("work")).unwrap();
    let work = cli.path("work");
    for shard in ["1/2", "2/2"] {
        let out = cli.path(&format!("shard{}", &shard[..1]));
        let output = cli
            .in_repo(&[
                "run",
                "suites/demo",
                "--agent",
                "oracle",
                "--task",
                "word-count",
                "--task",
                "slugify",
                "--task",
                "title-case",
                "--shard",
                shard,
                "-j",
                "1",
                "--workdir",
                work.to_str().unwrap(),
                "--out",
                out.to_str().unwrap(),
            ])
            .output()
            .unwrap();
        assert!(output.status.success(), "{output:?}");
    }
    deltabench_snapshot!(
        cli,
        "merge",
        &mut cli.command(&["merge", "shard1", "shard2", "--out", "merged"])
    );
    // Merging again is safe: the earlier merge of the same trials is replaced.
    deltabench_snapshot!(
        cli,
        "merge_again",
        &mut cli.command(&["merge", "shard1", "shard2", "--out", "merged"])
    );
    // A merge that would drop trials the earlier one holds is refused.
    deltabench_snapshot!(
        cli,
        "merge_out_in_use",
        &mut cli.command(&["merge", "shard1", "--out", "merged"])
    );
    deltabench_snapshot!(
        cli,
        "merge_missing_shard",
        &mut cli.command(&["merge", "shard1", "--out", "half"])
    );
    // Shard 2 as a run killed before its trial was recorded.
    copy_dir(&cli.path("shard2"), &cli.path("shard2-killed"));
    std::fs::write(cli.path("shard2-killed/trials.jsonl"), "").unwrap();
    let manifest = cli.path("shard2-killed/manifest.json");
    let mut value: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&manifest).unwrap()).unwrap();
    value["interrupted"] = true.into();
    std::fs::write(&manifest, value.to_string()).unwrap();
    deltabench_snapshot!(
        cli,
        "merge_interrupted_shard",
        &mut cli.command(&["merge", "shard1", "shard2-killed", "--out", "cut"])
    );
    deltabench_snapshot!(
        cli,
        "merge_not_a_run",
        &mut cli.command(&["merge", "shard1", "no-such-run", "--out", "none"])
    );
    // An unsharded run of other agents.
    let output = cli
        .in_repo(&[
            "run",
            "suites/demo",
            "--agent",
            "noop",
            "--task",
            "word-count",
            "--workdir",
            work.to_str().unwrap(),
            "--out",
            cli.path("unsharded").to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    deltabench_snapshot!(
        cli,
        "merge_not_a_shard",
        &mut cli.command(&["merge", "shard1", "unsharded", "--out", "none"])
    );
    assert!(!cli.path("none").exists(), "a refused merge writes nothing");
}

#[test]
fn init_then_init_again() {
    let cli = Cli::new();
    deltabench_snapshot!(cli, "init", &mut cli.command(&["init", "first"]));
    deltabench_snapshot!(cli, "init_again", &mut cli.command(&["init", "first"]));
}

/// The lock is written, and said to be, only when what the reference showed changed.
#[test]
fn validate_records_the_lock_once() {
    let cli = Cli::new();
    std::fs::create_dir_all(cli.path("work")).unwrap();
    let output = cli.command(&["init", "suite"]).output().unwrap();
    assert!(output.status.success(), "{output:?}");
    let validate = ["validate", "suite", "-j", "1", "--workdir", "work"];
    deltabench_snapshot!(
        cli,
        "validate_records_the_lock",
        &mut cli.command(&validate)
    );
    let lock = std::fs::read_to_string(cli.path("suite/suite.lock.json")).unwrap();
    deltabench_snapshot!(cli, "validate_lock_unchanged", &mut cli.command(&validate));
    assert_eq!(
        std::fs::read_to_string(cli.path("suite/suite.lock.json")).unwrap(),
        lock,
        "an unchanged lock is not rewritten"
    );
}

#[test]
fn import_fixtures_and_its_errors() {
    let cli = Cli::new();
    let fixtures = repo().join("tests/fixtures/import");
    let harbor = fixtures.join("harbor");
    let harbor = harbor.to_str().unwrap();
    let exercism = fixtures.join("exercism");
    deltabench_snapshot!(
        cli,
        "import_harbor",
        &mut cli.command(&["import", "harbor", harbor, "--out", "plain"])
    );
    deltabench_snapshot!(
        cli,
        "import_harbor_run_solutions",
        &mut cli.command(&[
            "import",
            "harbor",
            harbor,
            "--out",
            "suite",
            "--run-solutions"
        ])
    );
    deltabench_snapshot!(
        cli,
        "import_exercism",
        &mut cli.command(&[
            "import",
            "exercism",
            exercism.to_str().unwrap(),
            "--out",
            "ex"
        ])
    );
    deltabench_snapshot!(
        cli,
        "import_out_in_use",
        &mut cli.command(&["import", "harbor", harbor, "--out", "plain"])
    );
    deltabench_snapshot!(
        cli,
        "import_unknown_format",
        &mut cli.command(&["import", "nope", harbor, "--out", "other"])
    );
    deltabench_snapshot!(
        cli,
        "import_missing_source",
        &mut cli.command(&["import", "harbor", "no-such-folder", "--out", "other"])
    );
}

/// gc on a cache no run used: nothing to clean (other tests' dead cgroups are theirs).
#[test]
fn gc_with_nothing_to_clean() {
    let cli = Cli::new();
    let cgroups = Regex::new(r"(?m)^(would remove|removed) empty cgroup .*\n").unwrap();
    for (name, args) in [
        ("gc_dry_run", &["gc", "--dry-run", "--cache", "cache"][..]),
        ("gc", &["gc", "--cache", "cache"][..]),
    ] {
        let (snapshot, _) = cli.run_and_format(&mut cli.command(args));
        let snapshot = cgroups.replace_all(&snapshot, "");
        insta::with_settings!({
            description => cli.command_line(&cli.command(args)),
            omit_expression => true,
        }, {
            insta::assert_snapshot!(name, snapshot);
        });
    }
    deltabench_snapshot!(
        cli,
        "gc_unknown_flag",
        &mut cli.command(&["gc", "--everything"])
    );
}

#[test]
fn model_serve_until_sigterm_and_its_errors() {
    use std::io::BufRead;

    let cli = Cli::new();
    std::fs::write(cli.path("script.yaml"), "steps:\n  - text: Done.\n").unwrap();
    let mut child = cli
        .command(&["model", "serve", "script.yaml"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Ready once it prints its URL, its SIGTERM handler in place: SIGTERM at once stops it
    // cleanly (exit 0, not death by the signal).
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    let pid = nix::unistd::Pid::from_raw(child.id().try_into().unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let mut rest = Vec::new();
    std::io::Read::read_to_end(&mut stdout, &mut rest).unwrap();
    let mut output = child.wait_with_output().unwrap();
    output.stdout = [line.into_bytes(), rest].concat();
    let snapshot = cli.format(&output);
    insta::with_settings!({
        description => "deltabench model serve script.yaml, then SIGTERM",
        omit_expression => true,
    }, {
        insta::assert_snapshot!("model_serve", snapshot);
    });

    std::fs::write(cli.path("bad.yaml"), "steps: [{bogus: 1}]\n").unwrap();
    deltabench_snapshot!(
        cli,
        "model_serve_bad_script",
        &mut cli.command(&["model", "serve", "bad.yaml"])
    );
    deltabench_snapshot!(
        cli,
        "model_serve_missing_script",
        &mut cli.command(&["model", "serve", "no-such-script.yaml"])
    );
}

#[test]
fn schema_is_the_suite_files_json_schema() {
    let cli = Cli::new();
    let output = deltabench_snapshot!(cli, "schema", &mut cli.command(&["schema"]));
    let schema: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert!(schema["properties"]["tasks"].is_object(), "{schema}");
}

/// Copies a folder tree (files and folders only).
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}
