//! Each exit code of `deltabench::cli::exit`, produced by the real binary and snapshotted whole,
//! and the tables that list them (`--help`, README) checked against that module. Also covered
//! elsewhere: 1 by `compare::*regress*` and validate's tests, 3 by `crash::retries_*` and
//! `gaming::a_sandbox_that_cannot_start_*`, 4 by
//! `compare::max_broken_*` and `sequential::*`, 130 by `lifecycle::*interrupt*`.

use std::process::Stdio;
use std::time::Duration;

use deltabench::cli::exit::Exit;

use crate::cli::{Cli, deltabench_snapshot};
use crate::common::{
    descendant_running, git_repo, one_file_repo, run_suite, stderr, wait_until, write_files,
    write_suite,
};

const SUITE: &str = "name: exits\nrepo: repo\ntasks:\n  - {id: t, instruction: x, verify: \"grep -q fixed a.txt\", solution: sol}\n";

/// `deltabench run suite.yaml --workdir work --out OUT` plus `extra`, in the test's temp dir.
fn run(cli: &Cli, out: &str, extra: &[&str]) -> std::process::Command {
    let mut args = vec!["run", "suite.yaml", "--workdir", "work", "--out", out];
    args.extend(extra);
    cli.command(&args)
}

/// One binary run for each exit code, each code's snapshot named after it.
#[test]
fn each_exit_code_through_the_binary() {
    let cli = Cli::new();
    git_repo(cli.path(".").as_path(), &[("a.txt", "a\n")]);
    write_suite(&cli.path("."), SUITE);
    write_files(&cli.path("."), &[("sol/a.txt", "fixed\n")]);
    std::fs::create_dir_all(cli.path("work")).unwrap();
    let mut seen = Vec::new();
    let mut check = |exit: Exit, output: &std::process::Output| {
        assert_eq!(output.status.code(), Some(exit.code().into()), "{exit:?}");
        seen.push(exit);
    };

    // 0: every trial scored, a failing noop included.
    let ok = deltabench_snapshot!(
        cli,
        "exit_0_ok",
        &mut run(
            &cli,
            "out",
            &["--agent", "noop", "--agent", "oracle", "-j", "1"]
        )
    );
    check(Exit::Ok, &ok);

    // 4: a gate that cannot decide on one task and one trial, asked for a decided one.
    let inconclusive = deltabench_snapshot!(
        cli,
        "exit_4_inconclusive",
        &mut cli.command(&[
            "compare",
            "out",
            "noop",
            "oracle",
            "--gate",
            "--require-power"
        ])
    );
    check(Exit::Inconclusive, &inconclusive);

    // 2: a folder that holds no run, named as one; the chain says why.
    std::fs::create_dir_all(cli.path("not-a-run")).unwrap();
    let usage = deltabench_snapshot!(
        cli,
        "exit_2_usage",
        &mut cli.command(&["report", "not-a-run"])
    );
    check(Exit::Usage, &usage);

    // 3: the harness cannot create the run directory (its parent is a file).
    std::fs::write(cli.path("a-file"), "").unwrap();
    let harness = deltabench_snapshot!(
        cli,
        "exit_3_harness",
        &mut run(&cli, "a-file/out", &["--agent", "noop", "-j", "1"])
    );
    check(Exit::Unscored, &harness);

    // 3: a setup that fails is the harness's, not the agent's: the trial is not scored.
    write_suite(
        &cli.path("."),
        &SUITE.replace("verify:", "setup: \"exit 9\", verify:"),
    );
    let unscored = deltabench_snapshot!(
        cli,
        "exit_3_unscored",
        &mut run(&cli, "out-3", &["--agent", "noop", "-j", "1"])
    );
    check(Exit::Unscored, &unscored);

    // 1: validate finds the task unsound (the setup fails, so nothing is proven).
    let verdict = deltabench_snapshot!(
        cli,
        "exit_1_verdict_failed",
        &mut cli.command(&["validate", "suite.yaml", "--workdir", "work", "-j", "1"])
    );
    check(Exit::VerdictFailed, &verdict);

    // 130: SIGINT while the agent runs; the aborted trial is recorded, not scored.
    write_suite(
        &cli.path("."),
        &SUITE.replace(
            "tasks:",
            "agents:\n  sleeper: {kind: command, run: \"sleep 60\"}\ntasks:",
        ),
    );
    let interrupted = interrupt_when_started(
        &cli,
        &mut run(&cli, "out-130", &["--agent", "sleeper", "-j", "1"]),
    );
    check(Exit::Interrupted, &interrupted);

    seen.sort_by_key(|exit| exit.code());
    seen.dedup();
    assert_eq!(
        seen,
        Exit::ALL,
        "each exit code, produced through the binary"
    );
}

/// Runs `command` (a run into `out-130` of task `t` by agent `sleeper`), sends SIGINT once the
/// agent runs (its instruction file is written as it starts), and snapshots what was printed.
fn interrupt_when_started(cli: &Cli, command: &mut std::process::Command) -> std::process::Output {
    let instruction = cli.path("out-130/trials/t/sleeper/1/instruction.md");
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until(
        Duration::from_secs(60),
        "the agent's `sleep 60` running",
        || instruction.exists() && descendant_running(child.id(), &["sleep", "60"]),
    );
    let pid = nix::unistd::Pid::from_raw(child.id().try_into().unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let output = child.wait_with_output().unwrap();
    insta::with_settings!({
        description => format!("{}, then SIGINT once the agent runs", cli.command_line(command)),
        omit_expression => true,
    }, {
        insta::assert_snapshot!("exit_130_interrupted", cli.format(&output));
    });
    output
}

/// README's "Exit codes" table: one row per code of the exit module, in its order, each
/// starting with the words `--help` prints for it.
#[test]
fn the_readme_table_is_the_exit_module() {
    let readme =
        std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
            .unwrap();
    let rows: Vec<(u8, &str)> = readme
        .lines()
        .skip_while(|line| *line != "## Exit codes")
        .skip_while(|line| !line.starts_with('|'))
        .take_while(|line| line.starts_with('|'))
        .skip(2)
        .map(|row| {
            let cells: Vec<&str> = row.trim_matches('|').splitn(2, '|').collect();
            (cells[0].trim().parse().unwrap(), cells[1].trim())
        })
        .collect();
    assert_eq!(
        rows.iter().map(|(code, _)| *code).collect::<Vec<_>>(),
        Exit::ALL.map(Exit::code),
        "README's codes"
    );
    for (exit, (_, meaning)) in Exit::ALL.iter().zip(&rows) {
        assert!(
            meaning.starts_with(exit.meaning()),
            "README's row for {}: {meaning:?} does not start with {:?}",
            exit.code(),
            exit.meaning()
        );
    }
    // `--help` prints the table from the module (the snapshot `cli::help`).
    let help = deltabench::cli::command().render_help().to_string();
    for exit in Exit::ALL {
        assert!(
            help.contains(&format!("{:>3}  {}", exit.code(), exit.meaning())),
            "{help}"
        );
    }
}

/// The plain progress lines (no TTY): one per trial, with the reason a trial did not pass.
#[test]
fn progress_lines_give_the_reason() {
    let tmp = one_file_repo();
    write_files(tmp.path(), &[("hidden/check.txt", "x\n")]);
    write_suite(
        tmp.path(),
        "name: progress\nrepo: repo\nagents:\n  \
         fixer: {kind: command, run: \"echo fixed > a.txt\"}\n  \
         cheat: {kind: command, run: \"echo fixed > a.txt; echo y > check.txt\"}\n  \
         crash: {kind: command, run: \"echo oops >&2; exit 4\"}\n\
         tasks:\n  - {id: t, instruction: x, tests: hidden, verify: \"grep -q fixed a.txt\"}\n",
    );
    let (output, _, _) = run_suite(
        tmp.path(),
        &[
            "-j", "1", "--agent", "fixer", "--agent", "cheat", "--agent", "crash", "--agent",
            "noop",
        ],
    );
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let lines: Vec<String> = stderr(&output)
        .lines()
        .filter(|l| l.starts_with('['))
        .map(str::to_owned)
        .collect();
    insta::with_settings!({filters => vec![(r"\(\d+\.\d\ds\)", "([TIME])")]}, {
        insta::assert_snapshot!(lines.join("\n"));
    });
}
