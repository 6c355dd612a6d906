//! A bad suite is a usage error (exit 2) found before any trial runs, and its message names the
//! file, line and column, shows the offending line with a caret, and says what would be valid.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use crate::common::{
    assert_tmp_snapshot, deltabench, git_repo, stderr, temp_dir, write_files, write_suite,
};

/// The smallest valid suite; every error case below starts from it.
const VALID: &str =
    "name: t\nrepo: repo\ntasks:\n  - id: t1\n    instruction: do it\n    verify: \"true\"\n";

/// A temp dir holding a git repo at `repo/` (one commit: `a.txt`).
fn fixture() -> tempfile::TempDir {
    let tmp = temp_dir();
    git_repo(tmp.path(), &[("a.txt", "a\n")]);
    tmp
}

/// `deltabench <command> <root>/suite.yaml --workdir <root>/work` plus `--out <root>/out` for
/// `run`, plus `extra`. The suite path is absolute so messages show the full path.
fn command(root: &Path, subcommand: &str, extra: &[&str]) -> Command {
    let work = root.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let mut command = deltabench(root);
    command
        .arg(subcommand)
        .arg(root.join("suite.yaml"))
        .arg("--workdir")
        .arg(&work);
    if subcommand == "run" {
        command.arg("--out").arg(root.join("out"));
    }
    command.args(extra);
    command
}

fn run(root: &Path, extra: &[&str]) -> Output {
    command(root, "run", extra).output().unwrap()
}

fn validate(root: &Path, extra: &[&str]) -> Output {
    command(root, "validate", extra).output().unwrap()
}

/// Nothing ran: no run directory, no workspace, no progress line.
fn assert_nothing_ran(root: &Path, output: &Output) {
    let out = root.join("out");
    assert!(
        !out.join("trials.jsonl").exists(),
        "a run directory was written at {}",
        out.display()
    );
    assert!(!out.exists(), "{} was created", out.display());
    let work = root.join("work");
    let left: Vec<_> = std::fs::read_dir(&work)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(left.is_empty(), "workspaces were created: {left:?}");
    assert!(
        !stderr(output).contains("running "),
        "trials started:\n{}",
        stderr(output)
    );
    assert!(
        output.stdout.is_empty(),
        "stdout: {}",
        String::from_utf8_lossy(&output.stdout)
    );
}

/// Writes `yaml` as the suite, checks that `run` and `validate` both fail with exit 2 before
/// anything runs and that the message has the `suite.yaml:LINE:COL: ` prefix and a caret
/// snippet, and returns `run`'s stderr.
fn load_error(root: &Path, yaml: &str, extra: &[&str]) -> String {
    write_suite(root, yaml);
    let output = run(root, extra);
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "run should exit 2:\n{err}");
    assert_nothing_ran(root, &output);
    let prefix = format!("error: {}:", root.join("suite.yaml").display());
    assert!(
        err.starts_with(&prefix),
        "no `{prefix}LINE:COL:` prefix:\n{err}"
    );
    let location = regex::Regex::new(r"suite\.yaml:\d+:\d+: ").unwrap();
    assert!(location.is_match(&err), "no line and column:\n{err}");
    assert!(err.contains(" | "), "no snippet:\n{err}");
    assert!(err.contains('^'), "no caret:\n{err}");
    assert!(err.contains("\nhint: "), "no hint:\n{err}");

    let checked = validate(root, extra);
    assert_eq!(
        checked.status.code(),
        Some(2),
        "validate should exit 2:\n{}",
        stderr(&checked)
    );
    assert_eq!(
        stderr(&checked),
        err,
        "validate and run should report the same error"
    );
    err
}

/// [`VALID`] with `extra` appended to its only task.
fn with_task_lines(extra: &str) -> String {
    format!("{VALID}{extra}")
}

#[test]
fn the_baseline_suite_is_valid_and_runs() {
    let tmp = fixture();
    write_suite(tmp.path(), VALID);
    let output = run(tmp.path(), &["--agent", "noop"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let records = crate::common::trials(&tmp.path().join("out"));
    assert_eq!(records.len(), 1);
}

#[test]
fn unknown_key_in_a_task() {
    let tmp = fixture();
    let err = load_error(
        tmp.path(),
        "name: t\nrepo: repo\ntasks:\n  - id: t1\n    instruction: do it\n    verfy: \"true\"\n",
        &[],
    );
    assert!(
        err.contains("suite.yaml:6:5: unknown field `verfy`"),
        "{err}"
    );
    assert!(
        err.contains("expected one of id, instruction, instruction_file"),
        "{err}"
    );
    assert!(err.contains("verify"), "{err}");
    assert_tmp_snapshot!(tmp.path(), err);
}

#[test]
fn duplicate_task_ids() {
    let tmp = fixture();
    let err = load_error(
        tmp.path(),
        "name: t\nrepo: repo\ntasks:\n  - id: x\n    instruction: do it\n    verify: \"true\"\n  - id: x\n    instruction: do it again\n    verify: \"true\"\n",
        &[],
    );
    assert!(
        err.contains("suite.yaml:7:9: duplicate task id 'x' (first defined on line 4)"),
        "{err}"
    );
    assert_tmp_snapshot!(tmp.path(), err);
}

#[test]
fn missing_tests_dir() {
    let tmp = fixture();
    let err = load_error(
        tmp.path(),
        &with_task_lines("    tests: tests/nope/\n"),
        &[],
    );
    assert!(
        err.contains("suite.yaml:7:12: tests 'tests/nope/' does not exist"),
        "{err}"
    );
    assert_tmp_snapshot!(tmp.path(), err);
}

#[test]
fn missing_solution() {
    let tmp = fixture();
    let err = load_error(
        tmp.path(),
        &with_task_lines("    solution: nope.patch\n"),
        &[],
    );
    assert!(
        err.contains("suite.yaml:7:15: solution 'nope.patch' does not exist"),
        "{err}"
    );
    assert_tmp_snapshot!(tmp.path(), err);
}

#[test]
fn missing_instruction_file() {
    let tmp = fixture();
    let err = load_error(
        tmp.path(),
        "name: t\nrepo: repo\ntasks:\n  - id: t1\n    instruction_file: nope.md\n    verify: \"true\"\n",
        &[],
    );
    assert!(
        err.contains("suite.yaml:5:23: instruction_file 'nope.md' does not exist"),
        "{err}"
    );
    assert_tmp_snapshot!(tmp.path(), err);
}

#[test]
fn missing_repo() {
    let tmp = fixture();
    let err = load_error(
        tmp.path(),
        &VALID.replace("repo: repo", "repo: nowhere"),
        &[],
    );
    assert!(
        err.contains("suite.yaml:2:7: repo 'nowhere' does not exist"),
        "{err}"
    );
    assert_tmp_snapshot!(tmp.path(), err);
}

/// Note: `10 minutes` is accepted (humantime parses it as 10m), so the bad value is in words.
#[test]
fn task_timeout_is_not_a_duration() {
    let tmp = fixture();
    let err = load_error(
        tmp.path(),
        &with_task_lines("    timeout: ten minutes\n"),
        &[],
    );
    assert!(
        err.contains("suite.yaml:7:14: invalid duration 'ten minutes'"),
        "{err}"
    );
    assert!(err.contains("e.g. 500ms, 90s, 10m or 1h"), "{err}");
    assert_tmp_snapshot!(tmp.path(), err);
}

#[test]
fn task_timeout_of_zero() {
    let tmp = fixture();
    let err = load_error(tmp.path(), &with_task_lines("    timeout: 0s\n"), &[]);
    assert!(
        err.contains("invalid duration '0s': it must be greater than zero"),
        "{err}"
    );
    assert_tmp_snapshot!(tmp.path(), err);
}

#[test]
fn verify_timeout_is_not_a_duration() {
    let tmp = fixture();
    let err = load_error(
        tmp.path(),
        "name: t\nrepo: repo\ntasks:\n  - id: t1\n    instruction: do it\n    verify: {run: x, timeout: soon}\n",
        &[],
    );
    assert!(err.contains("suite.yaml:6:"), "{err}");
    assert!(err.contains("invalid duration 'soon'"), "{err}");
    assert_tmp_snapshot!(tmp.path(), err);
}

#[test]
fn unknown_isolation_strategy() {
    let tmp = fixture();
    let err = load_error(
        tmp.path(),
        &with_task_lines("    isolation: container\n"),
        &[],
    );
    assert!(
        err.contains(
            "unknown isolation strategy: 'container'. Valid strategies: session, worktree, sandbox"
        ),
        "{err}"
    );
    assert!(err.contains("suite.yaml:7:16: "), "{err}");
    assert_tmp_snapshot!(tmp.path(), err);
}

#[test]
fn unknown_metric_name() {
    let tmp = fixture();
    // `grader` is a kind, but it is written `{grader: COMMAND}`, never as a name.
    for name in ["deltas", "grader"] {
        let err = load_error(
            tmp.path(),
            &with_task_lines(&format!("    metric: {name}\n")),
            &[],
        );
        assert!(
            err.contains(&format!(
                "unknown metric '{name}'. Valid metrics: delta, delta-token, exit-code, or {{grader: COMMAND}}"
            )),
            "{err}"
        );
        assert!(err.contains("suite.yaml:7:13: "), "{err}");
        assert_tmp_snapshot!(format!("unknown_metric_name_{name}"), tmp.path(), err);
    }
}

#[test]
fn unknown_agent_kind() {
    let tmp = fixture();
    let yaml = VALID.replace("tasks:\n", "agents:\n  a:\n    kind: robot\ntasks:\n");
    let err = load_error(tmp.path(), &yaml, &[]);
    assert!(
        err.contains("suite.yaml:5:11: unknown agent kind 'robot' for agent 'a'. Valid kinds: noop, oracle, mock, command"),
        "{err}"
    );
    assert_tmp_snapshot!(tmp.path(), err);
}

#[test]
fn key_that_does_not_apply_to_the_agent_kind() {
    let tmp = fixture();
    let yaml = VALID.replace("tasks:\n", "agents:\n  a: {kind: noop, run: x}\ntasks:\n");
    let err = load_error(tmp.path(), &yaml, &[]);
    assert!(
        err.contains("suite.yaml:4:24: `run` does not apply to agent 'a' of kind 'noop'. Valid keys for it: none"),
        "{err}"
    );
    assert_tmp_snapshot!(tmp.path(), err);
}

/// A suite with one claude-code agent against a scripted endpoint, with `budget` as given.
fn budget_suite(tmp: &Path, budget: &str) -> String {
    write_files(tmp, &[("model.yaml", "steps:\n  - text: Done.\n")]);
    VALID.replace(
        "tasks:\n",
        &format!(
            "agents:\n  a:\n    kind: claude-code\n    endpoint: scripted:model.yaml\n    budget: {budget}\ntasks:\n"
        ),
    )
}

#[test]
fn unknown_budget_key() {
    let tmp = fixture();
    let yaml = budget_suite(tmp.path(), "{tokens: 10, dollars: 5}");
    let err = load_error(tmp.path(), &yaml, &[]);
    assert!(err.contains("suite.yaml:7:26: "), "{err}");
    assert!(err.contains("dollars"), "{err}");
    assert!(
        err.contains("tokens, cost_usd, model_calls, wall"),
        "the valid keys: {err}"
    );
    assert_tmp_snapshot!(tmp.path(), err);
}

#[test]
fn negative_or_zero_budget() {
    let tmp = fixture();
    for (budget, at, value) in [
        ("{tokens: -5}", "7:22", "budget.tokens: -5"),
        ("{model_calls: 0}", "7:27", "budget.model_calls: 0"),
        ("{cost_usd: -0.5}", "7:24", "budget.cost_usd: -0.5"),
        ("{wall: 0s}", "7:20", "budget.wall: 0s"),
    ] {
        let yaml = budget_suite(tmp.path(), budget);
        let err = load_error(tmp.path(), &yaml, &[]);
        assert!(
            err.contains(&format!("suite.yaml:{at}: ")),
            "{budget}: {err}"
        );
        assert!(err.contains(value), "{budget}: {err}");
        assert!(
            err.contains("Valid keys: tokens, cost_usd, model_calls, wall"),
            "{err}"
        );
    }
    let yaml = budget_suite(tmp.path(), "{tokens: -5}");
    let err = load_error(tmp.path(), &yaml, &[]);
    assert_tmp_snapshot!(tmp.path(), err);
}

#[test]
fn a_command_budget_needs_the_gateway() {
    let tmp = fixture();
    let yaml = VALID.replace(
        "tasks:\n",
        "agents:\n  a:\n    kind: command\n    run: \"true\"\n    budget: {tokens: 5}\ntasks:\n",
    );
    let err = load_error(tmp.path(), &yaml, &[]);
    assert!(err.contains("suite.yaml:7:13: "), "{err}");
    assert_tmp_snapshot!(tmp.path(), err);
}

#[test]
fn yaml_syntax_error_unclosed_flow_sequence() {
    let tmp = fixture();
    let err = load_error(tmp.path(), &with_task_lines("    tags: [a, b\n"), &[]);
    assert!(
        err.contains("suite.yaml:7:11: unclosed bracket '['"),
        "{err}"
    );
    assert_tmp_snapshot!(tmp.path(), err);
}

#[test]
fn wrong_type_for_tags() {
    let tmp = fixture();
    let err = load_error(tmp.path(), &with_task_lines("    tags: 5\n"), &[]);
    assert!(err.contains("suite.yaml:7:11: "), "{err}");
    // The message itself does not repeat the value; the snippet shows it.
    assert!(err.contains("7 |     tags: 5\n"), "{err}");
    assert_tmp_snapshot!(tmp.path(), err);
}

/// Billion laughs: 8 levels of 10 aliases each (10^9 nodes if expanded), inside `args`, which
/// takes any YAML value, so the parser must stop it by its budget.
fn alias_bomb() -> String {
    let mut yaml = String::from(
        "name: t\nrepo: repo\nagents:\n  m:\n    kind: mock\n    responses:\n      - type: tool_call\n        name: x\n        args:\n",
    );
    yaml.push_str("          a0: &a0 [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n");
    for level in 1..=8 {
        let refs = vec![format!("*a{}", level - 1); 10].join(",");
        yaml.push_str(&format!("          a{level}: &a{level} [{refs}]\n"));
    }
    yaml.push_str("tasks:\n  - id: t1\n    instruction: do it\n    verify: \"true\"\n");
    yaml
}

#[test]
fn alias_bomb_is_refused_fast() {
    let tmp = fixture();
    let started = Instant::now();
    let err = load_error(tmp.path(), &alias_bomb(), &[]);
    let elapsed = started.elapsed();
    // Both `run` and `validate` ran in that time.
    assert!(elapsed < Duration::from_secs(15), "took {elapsed:?}");
    assert!(err.contains("alias bomb"), "{err}");
    assert_tmp_snapshot!(tmp.path(), err);
}

#[test]
fn task_id_that_is_not_a_safe_name() {
    let tmp = fixture();
    let err = load_error(tmp.path(), &VALID.replace("id: t1", "id: \"a b\""), &[]);
    assert!(
        err.contains(
            "suite.yaml:4:9: task id 'a b' is not allowed: use letters, digits, '.', '_' and '-'"
        ),
        "{err}"
    );
    assert_tmp_snapshot!(tmp.path(), err);
}

#[test]
fn empty_task_list() {
    let tmp = fixture();
    let err = load_error(tmp.path(), "name: t\nrepo: repo\ntasks: []\n", &[]);
    assert!(
        err.contains("suite.yaml:3:8: the suite has no tasks"),
        "{err}"
    );
    assert_tmp_snapshot!(tmp.path(), err);
}

#[test]
fn unknown_agent_flag_is_a_plan_error() {
    let tmp = fixture();
    write_suite(tmp.path(), VALID);
    let output = run(tmp.path(), &["--agent", "nosuch"]);
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{err}");
    assert!(
        err.contains("unknown agent 'nosuch'. Available agents: oracle, noop"),
        "{err}"
    );
    assert_nothing_ran(tmp.path(), &output);
    assert_tmp_snapshot!(tmp.path(), err);
}

#[test]
fn bad_entry_in_agents_file_names_that_file() {
    let tmp = fixture();
    write_files(
        tmp.path(),
        &[(
            "agents.yaml",
            "agents:\n  good:\n    kind: noop\n  bad:\n    kind: command\n    delay: 5s\n",
        )],
    );
    write_suite(tmp.path(), VALID);
    let agents = tmp.path().join("agents.yaml");
    let agents = agents.to_str().unwrap();
    let output = run(tmp.path(), &["--agents", agents]);
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{err}");
    assert_nothing_ran(tmp.path(), &output);
    assert!(
        err.starts_with(&format!(
            "error: {agents}:6:12: `delay` does not apply to agent 'bad' of kind 'command'"
        )),
        "{err}"
    );
    assert!(
        err.contains("Valid keys for it: run, timeout, env"),
        "{err}"
    );
    assert!(!err.contains("suite.yaml"), "blames the suite file:\n{err}");
    let checked = validate(tmp.path(), &["--agents", agents]);
    assert_eq!(checked.status.code(), Some(2), "{}", stderr(&checked));
    assert_tmp_snapshot!(tmp.path(), err);
}

#[test]
fn agents_file_with_a_syntax_error_names_that_file() {
    let tmp = fixture();
    write_files(
        tmp.path(),
        &[("agents.yaml", "agents:\n  good: {kind: noop\n")],
    );
    write_suite(tmp.path(), VALID);
    let agents = tmp.path().join("agents.yaml");
    let output = run(tmp.path(), &["--agents", agents.to_str().unwrap()]);
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{err}");
    assert_nothing_ran(tmp.path(), &output);
    assert!(
        err.starts_with(&format!("error: {}:2:", agents.display())),
        "{err}"
    );
}

#[test]
fn suite_path_that_does_not_exist() {
    let tmp = fixture();
    let missing = tmp.path().join("nope.yaml");
    let output = deltabench(tmp.path())
        .arg("run")
        .arg(&missing)
        .arg("--out")
        .arg(tmp.path().join("out"))
        .output()
        .unwrap();
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!("cannot read {}", missing.display())),
        "{err}"
    );
    assert!(!tmp.path().join("out").exists());
    let checked = deltabench(tmp.path())
        .arg("validate")
        .arg(&missing)
        .output()
        .unwrap();
    assert_eq!(checked.status.code(), Some(2), "{}", stderr(&checked));
    assert_tmp_snapshot!(tmp.path(), err);
}

// A suite folder without suite.yaml (exit 2, "the folder has no suite.yaml"): the snapshot
// `cli::run_folder_without_suite_yaml`.

/// A suite that is not UTF-8 is refused with exit 2 and names the file (it has no location).
#[test]
fn suite_that_is_not_utf8() {
    let tmp = fixture();
    std::fs::write(tmp.path().join("suite.yaml"), b"name: t\nrepo: repo\ntasks:\n  - id: t1\n    instruction: do \xff it\n    verify: \"true\"\n").unwrap();
    let output = run(tmp.path(), &["--agent", "noop"]);
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "{err}");
    assert_nothing_ran(tmp.path(), &output);
    assert!(err.contains("suite.yaml"), "{err}");
}

/// Product bug: the message of an error at an alias loses its tail, leaving `(defined`
/// dangling, because the " at line " cut in `yaml_message` hits the "(defined at line N,
/// column M)" part first.
#[test]
fn error_at_an_alias_keeps_its_whole_message() {
    let tmp = fixture();
    let yaml = "name: t\nrepo: repo\ntasks:\n  - id: t1\n    instruction: do it\n    verify: \"true\"\n    tags: &t [a]\n  - id: t2\n    instruction: *t\n    verify: \"true\"\n";
    let err = load_error(tmp.path(), yaml, &[]);
    assert!(!err.contains("(defined\n"), "{err}");
}

// ---------------------------------------------------------------------------------------------
// Malformed variants: never a panic, never a hang, always a location.

/// A valid suite using most keys, the source of the truncation variants.
const RICH: &str = r#"name: prop
description: property test
repo: repo
defaults:
  verify: "true"
  timeout: 30s
  tags: [base]
agents:
  quiet:
    kind: noop
tasks:
  - id: t1
    instruction: do it
    metric: exit-code
    tags: [one, two]
  - id: t2
    instruction: "do it again"
    verify: {run: "true", timeout: 5s}
    isolation: worktree
"#;

/// xorshift64*: deterministic junk without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// [`VALID`] with a mock agent whose one tool call has `args` (any YAML value) set to `value`.
fn with_mock_args(value: &str) -> String {
    VALID.replace(
        "tasks:\n",
        &format!("agents:\n  m:\n    kind: mock\n    responses:\n      - type: tool_call\n        name: x\n        args: {value}\ntasks:\n"),
    )
}

fn variants() -> Vec<(String, String)> {
    let mut variants = Vec::new();
    // Truncated at every 17th byte (RICH is ASCII, so every cut is a char boundary).
    for cut in (0..RICH.len()).step_by(17) {
        variants.push((format!("truncated at {cut}"), RICH[..cut].to_owned()));
    }
    // Junk: YAML indicators, quotes, tabs and control characters at random places.
    let junk: &[char] = &[
        ':', '-', '[', ']', '{', '}', '&', '*', '!', '|', '>', '\'', '"', '%', '@', '`', '#', ',',
        '?', '\t', '\n', ' ', '\u{0}', '\u{1}', '\u{7f}', '\u{feff}', 'é', '\u{2028}',
    ];
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    for round in 0..10 {
        let mut text: Vec<char> = RICH.chars().collect();
        for _ in 0..1 + rng.below(4) {
            let at = rng.below(text.len() + 1);
            text.insert(at, junk[rng.below(junk.len())]);
        }
        variants.push((format!("junk round {round}"), text.into_iter().collect()));
    }
    // Deep nesting where the shape is checked early (`tags:`) and where any value is taken
    // (a mock's `args:`), so the parser itself must bound its recursion.
    let deep = 10_000;
    let nested_seqs = format!("{}{}", "[".repeat(deep), "]".repeat(deep));
    let nested_maps = format!("{}1{}", "{a: ".repeat(deep), "}".repeat(deep));
    variants.push((
        "10k nested sequences in tags".into(),
        with_task_lines(&format!("    tags: {nested_seqs}\n")),
    ));
    variants.push((
        "10k unclosed sequences".into(),
        with_task_lines(&format!("    tags: {}\n", "[".repeat(deep))),
    ));
    variants.push((
        "10k nested sequences in args".into(),
        with_mock_args(&nested_seqs),
    ));
    variants.push((
        "10k nested maps in args".into(),
        with_mock_args(&nested_maps),
    ));
    let mut block = String::from("\n");
    for level in 0..2_000 {
        block.push_str(&" ".repeat(10 + level));
        block.push_str("-\n");
    }
    variants.push((
        "2k nested block sequences in args".into(),
        with_mock_args(&block),
    ));
    let big = "x".repeat(5 * 1024 * 1024);
    variants.push((
        "5 MB instruction".into(),
        VALID.replace("do it", &format!("\"{big}\"")),
    ));
    variants.push((
        "5 MB unclosed string".into(),
        VALID.replace("do it\n", &format!("\"{big}\n")),
    ));
    variants.push(("alias bomb".into(), alias_bomb()));
    variants.push(("empty file".into(), String::new()));
    variants
}

/// Runs `command` with its output in files under `dir`; kills it and fails past `deadline`.
fn output_within(
    mut command: Command,
    dir: &Path,
    deadline: Duration,
    what: &str,
) -> (i32, String) {
    let out_path = dir.join("stdout.txt");
    let err_path = dir.join("stderr.txt");
    let mut child = command
        .stdout(File::create(&out_path).unwrap())
        .stderr(File::create(&err_path).unwrap())
        .spawn()
        .unwrap();
    let mut exited = None;
    if !crate::common::eventually(deadline, || {
        exited = child.try_wait().unwrap();
        exited.is_some()
    }) {
        let _ = child.kill();
        let _ = child.wait();
        panic!("{what}: no exit within {deadline:?} (a hang)");
    }
    let status = exited.unwrap();
    let err = String::from_utf8_lossy(&std::fs::read(&err_path).unwrap()).into_owned();
    let Some(code) = status.code() else {
        panic!(
            "{what}: killed by a signal ({status}); stderr:\n{}",
            head(&err)
        );
    };
    (code, err)
}

fn head(text: &str) -> &str {
    let mut end = text.len().min(2000);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[test]
fn malformed_variants_never_panic_hang_or_lose_the_location() {
    let tmp = temp_dir();
    let suite_dir = tmp.path().join("s");
    std::fs::create_dir_all(&suite_dir).unwrap();
    git_repo(&suite_dir, &[("a.txt", "a\n")]);
    let work = tmp.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let location = regex::Regex::new(r"suite\.yaml:\d+:\d+").unwrap();
    let variants = variants();
    assert!(variants.len() >= 30, "{} variants", variants.len());
    let mut outcomes = Vec::new();
    for (index, (name, yaml)) in variants.iter().enumerate() {
        let suite: PathBuf = write_suite(&suite_dir, yaml);
        let mut command = deltabench(tmp.path());
        command
            .arg("run")
            .arg(&suite)
            .arg("--agent")
            .arg("noop")
            .arg("--workdir")
            .arg(&work)
            .arg("--out")
            .arg(tmp.path().join(format!("out-{index}")));
        let what = format!("variant {index} ({name})");
        let (code, err) = output_within(command, tmp.path(), Duration::from_secs(20), &what);
        match code {
            0 | 1 => {}
            2 => assert!(
                location.is_match(&err),
                "{what}: exit 2 without `suite.yaml:LINE:COL`:\n{}\n--- suite:\n{}",
                head(&err),
                head(yaml)
            ),
            other => panic!("{what}: exit {other}:\n{}", head(&err)),
        }
        eprintln!(
            "{what}: exit {code}: {}",
            err.lines()
                .next()
                .unwrap_or("")
                .chars()
                .take(160)
                .collect::<String>()
        );
        outcomes.push(code);
    }
    // The seed itself is valid, and most variants are not: the loop tested both paths.
    assert!(outcomes.contains(&0), "{outcomes:?}");
    assert!(
        outcomes.iter().filter(|&&c| c == 2).count() >= 10,
        "{outcomes:?}"
    );
}

/// `network: model` needs a network of the agent's own (the sandbox's, a container's), and calls
/// that pass the gateway.
#[test]
fn network_model_needs_the_sandbox_and_the_gateway() {
    let tmp = fixture();
    let agent = "agents:\n  a:\n    kind: command\n    run: \"true\"\n    gateway: true\n    network: model\ntasks:\n";
    let yaml = VALID.replace("tasks:\n", agent);
    let err = load_error(tmp.path(), &yaml, &[]);
    assert!(
        err.contains("suite.yaml:8:14: agent 'a' sets `network: model`, which needs `isolation: sandbox` or an `environment:` (a network of the agent's own), and task 't1' runs under `isolation: worktree` on this machine. Valid networks there: none, host"),
        "{err}"
    );

    let sandboxed = yaml.replace("    verify:", "    isolation: sandbox\n    verify:");
    let no_gateway = sandboxed.replace("    gateway: true\n", "");
    let err = load_error(tmp.path(), &no_gateway, &[]);
    assert!(
        err.contains(
            "suite.yaml:7:14: `network: model` on agent 'a' of kind 'command' needs `gateway: true`"
        ),
        "{err}"
    );
    let opencode = sandboxed.replace(
        "    kind: command\n    run: \"true\"\n    gateway: true\n",
        "    kind: opencode\n",
    );
    let err = load_error(tmp.path(), &opencode, &[]);
    assert!(
        err.contains("suite.yaml:6:14: `network: model` on agent 'a' needs its calls to pass deltabench's gateway, which opencode without `endpoint:` bypasses"),
        "{err}"
    );
}

#[test]
fn an_environments_network_is_none_or_host() {
    let tmp = fixture();
    let yaml = with_task_lines("    environment: {image: localhost/x, network: model}\n");
    let err = load_error(tmp.path(), &yaml, &[]);
    assert!(
        err.contains("network `model` is an agent's setting (set it on the agent, for this container too), not an environment's. Valid networks for an environment: none, host"),
        "{err}"
    );
}

/// A cost budget for a model deltabench cannot price would never trip: refused up front.
#[test]
fn a_cost_budget_needs_a_priced_model() {
    let tmp = fixture();
    let agent = "agents:\n  a:\n    kind: claude-code\n    model: mystery-model\n    budget: {cost_usd: 1}\ntasks:\n";
    let err = load_error(tmp.path(), &VALID.replace("tasks:\n", agent), &[]);
    assert!(
        err.contains("suite.yaml:7:13: `budget.cost_usd` on agent 'a' needs the price of model 'mystery-model', which deltabench's price table does not have: set `price: {input: USD, output: USD}` (per million tokens) on the agent"),
        "{err}"
    );
    // With a price, or a budget of another kind, it loads.
    for budget in [
        "budget: {cost_usd: 1}\n    price: {input: 1, output: 2}",
        "budget: {tokens: 1000}",
    ] {
        let yaml = VALID.replace(
            "tasks:\n",
            &format!("agents:\n  a:\n    kind: claude-code\n    model: mystery-model\n    {budget}\ntasks:\n"),
        );
        let tmp = fixture();
        write_suite(tmp.path(), &yaml);
        let output = run(tmp.path(), &["--agent", "noop"]);
        assert_eq!(
            output.status.code(),
            Some(0),
            "{budget}: {}",
            stderr(&output)
        );
    }
}
