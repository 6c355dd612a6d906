//! A new user's first hour (issue 39), each point through the real binary on a suite `init`
//! wrote: what a typo, a closed pipe or a plain run directory does.

use crate::cli::{Cli, deltabench_snapshot};
use crate::common::{descendant_running, stderr, trials, wait_until};

/// `deltabench init suite` in a fresh temp dir, and a `work` folder for the workspaces.
fn init_suite() -> Cli {
    let cli = Cli::new();
    let init = cli.command(&["init", "suite"]).output().unwrap();
    assert_eq!(init.status.code(), Some(0), "{}", stderr(&init));
    std::fs::create_dir_all(cli.path("work")).unwrap();
    cli
}

/// Replaces `from` with `to` in the init suite's suite.yaml.
fn edit_suite(cli: &Cli, from: &str, to: &str) {
    let path = cli.path("suite/suite.yaml");
    let yaml = std::fs::read_to_string(&path).unwrap();
    assert!(yaml.contains(from), "{yaml}");
    std::fs::write(&path, yaml.replace(from, to)).unwrap();
}

#[test]
fn a_verify_program_that_is_not_there_refuses_the_run_naming_the_task() {
    let cli = init_suite();
    edit_suite(&cli, "run: python3 -m", "run: pytohn3 -m");
    let output = deltabench_snapshot!(
        cli,
        "verify_program_missing",
        &mut cli.command(&["run", "suite", "--workdir", "work", "--out", "out"])
    );
    assert_eq!(output.status.code(), Some(2));
    assert!(!cli.path("out").exists(), "nothing was run");
}

#[test]
fn a_verify_program_gone_during_the_run_is_infra_error_not_the_agents_failure() {
    let cli = init_suite();
    // A verify program on PATH when the run starts, which the agent removes (worktree isolation
    // does not stop it): its trial is unscored and says why, naming the command.
    let bin = cli.path("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let tool = bin.join("check-median");
    std::fs::write(&tool, "#!/bin/sh\nexec python3 \"$@\"\n").unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    edit_suite(&cli, "run: python3 -m", "run: check-median -m");
    edit_suite(
        &cli,
        "run: ./agents/my-agent.sh\n",
        &format!("run: './agents/my-agent.sh && rm {}'\n", tool.display()),
    );
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let output = cli
        .command(&[
            "run",
            "suite",
            "--workdir",
            "work",
            "--out",
            "out",
            "--agent",
            "my-agent",
        ])
        .env("PATH", path)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    let records = trials(&cli.path("out"));
    assert_eq!(records.len(), 1);
    assert_eq!(records[0]["outcome"], "infra_error", "{records:?}");
    let why = records[0]["infra_error"].as_str().unwrap();
    assert!(
        why.starts_with("the verify command's program `check-median` was not found (exit 127; command: `check-median -m unittest -v tests.test_median`)"),
        "{why}"
    );
    assert!(stderr(&output).contains("INFRA"), "{}", stderr(&output));
}

#[test]
fn an_ablation_effect_from_all_to_none_stays_inside_a_hundred_points() {
    let cli = init_suite();
    let agent = cli.path("suite/agents/my-agent.sh");
    std::fs::write(
        cli.path("ablation.yaml"),
        format!(
            "agents:\n  fixer:\n    kind: command\n    run: 'if [ \"$FIX\" = on ]; then {}; fi'\n    matrix:\n      env.FIX: [on, off]\n",
            agent.display()
        ),
    )
    .unwrap();
    let output = cli
        .command(&[
            "run",
            "suite",
            "--agents",
            "ablation.yaml",
            "--agent",
            "fixer",
            "--trials",
            "3",
            "--workdir",
            "work",
            "--out",
            "out",
        ])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    // 3/3 with FIX on, 0/3 off: -100 points, and its interval cannot reach below -100.
    let report = cli
        .command(&["report", "out", "--ablation", "--format", "json"])
        .output()
        .unwrap();
    let json: serde_json::Value =
        serde_json::from_slice(&report.stdout).unwrap_or_else(|e| panic!("{e}: {report:?}"));
    let effect = &json["ablations"][0]["factors"][0]["levels"][1]["effect"];
    assert_eq!(effect["diff"], -1.0, "{json}");
    assert_eq!(effect["lo"], -1.0, "{json}");
    let hi = effect["hi"].as_f64().unwrap();
    assert!(-1.0 < hi && hi < 0.0, "{json}");
    let text = cli
        .command(&["report", "out", "--ablation"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&text.stdout);
    let line = text
        .lines()
        .find(|l| l.contains("-100.0 ("))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains("-100.0 (-100.0 to -"), "{line}");
}

/// The run directory's manifest.
fn manifest(cli: &Cli, out: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(cli.path(out).join("manifest.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

#[test]
fn a_closed_pipe_never_kills_a_run() {
    use std::io::BufRead as _;
    let cli = init_suite();
    // `deltabench run ... 2>&1 | head -1`: both outputs into one pipe, closed after a line.
    let (reader, writer) = std::io::pipe().unwrap();
    let mut child = cli
        .command(&[
            "run",
            "suite",
            "--trials",
            "3",
            "-j",
            "1",
            "--workdir",
            "work",
            "--out",
            "out",
        ])
        .stdin(std::process::Stdio::null())
        .stdout(writer.try_clone().unwrap())
        .stderr(writer)
        .spawn()
        .unwrap();
    let mut first = String::new();
    std::io::BufReader::new(reader)
        .read_line(&mut first)
        .unwrap();
    // The reader is dropped here: every later write fails with EPIPE.
    assert!(!first.is_empty());
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{status}");
    let manifest = manifest(&cli, "out");
    assert!(manifest["finished_at"].is_string(), "{manifest}");
    assert_eq!(manifest["interrupted"], false, "{manifest}");
    assert_eq!(trials(&cli.path("out")).len(), 6);
    crate::common::assert_no_leftovers(&cli.path("work"));
}

#[test]
fn a_run_ended_by_sighup_is_recorded_as_interrupted() {
    let cli = init_suite();
    edit_suite(&cli, "run: ./agents/my-agent.sh\n", "run: 'sleep 60'\n");
    let mut child = cli
        .command(&[
            "run",
            "suite",
            "--agent",
            "my-agent",
            "--workdir",
            "work",
            "--out",
            "out",
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let instruction = cli.path("out/trials/fix-median/my-agent/1/instruction.md");
    wait_until(
        std::time::Duration::from_secs(60),
        "the agent's `sleep 60` running",
        || instruction.exists() && descendant_running(child.id(), &["sleep", "60"]),
    );
    let pid = nix::unistd::Pid::from_raw(child.id().try_into().unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGHUP).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130), "{status}");
    let manifest = manifest(&cli, "out");
    assert!(manifest["finished_at"].is_string(), "{manifest}");
    assert_eq!(manifest["interrupted"], true, "{manifest}");
}

#[test]
fn status_reads_any_run_directory_running_or_finished() {
    let cli = init_suite();
    let finished = cli
        .command(&[
            "run",
            "suite",
            "--trials",
            "2",
            "--workdir",
            "work",
            "--out",
            "done",
        ])
        .output()
        .unwrap();
    assert_eq!(finished.status.code(), Some(0), "{}", stderr(&finished));
    let status = deltabench_snapshot!(
        cli,
        "status_finished",
        &mut cli.command(&["status", "done"])
    );
    assert_eq!(status.status.code(), Some(0));

    // A run still going: its running trial is named; then, killed outright, it is stopped.
    edit_suite(&cli, "run: ./agents/my-agent.sh\n", "run: 'sleep 60'\n");
    let mut child = cli
        .command(&[
            "run",
            "suite",
            "--agent",
            "my-agent",
            "--agent",
            "noop",
            "-j",
            "1",
            "--workdir",
            "work",
            "--out",
            "going",
        ])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let instruction = cli.path("going/trials/fix-median/my-agent/1/instruction.md");
    wait_until(
        std::time::Duration::from_secs(60),
        "the agent's start (its instruction file)",
        || instruction.exists(),
    );
    let running = cli.command(&["status", "going"]).output().unwrap();
    let text = String::from_utf8_lossy(&running.stdout);
    assert_eq!(running.status.code(), Some(0), "{text}");
    assert!(text.contains(", running\n"), "{text}");
    assert!(
        text.contains("running now: fix-median / my-agent #1"),
        "{text}"
    );
    assert!(text.contains("0 of 2 trials recorded, 0 passed"), "{text}");
    child.kill().unwrap();
    child.wait().unwrap();
    let stopped = cli.command(&["status", "going"]).output().unwrap();
    let text = String::from_utf8_lossy(&stopped.stdout);
    assert!(
        text.contains(", stopped without finishing (killed?)"),
        "{text}"
    );
    assert!(text.contains("finish it: deltabench resume "), "{text}");
}

#[test]
fn an_agents_file_replaces_the_suites_agents() {
    let cli = init_suite();
    std::fs::write(
        cli.path("three.yaml"),
        "agents:\n  a: {kind: command, run: 'true'}\n  b: {kind: command, run: 'true'}\n  noop: {kind: noop}\n",
    )
    .unwrap();
    // Three agents in the file, two in the suite: the file's three run, and nothing else.
    let output = cli
        .command(&[
            "run",
            "suite",
            "--agents",
            "three.yaml",
            "--workdir",
            "work",
            "--out",
            "out",
        ])
        .output()
        .unwrap();
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(0), "{err}");
    let mut agents: Vec<String> = trials(&cli.path("out"))
        .iter()
        .map(|r| r["agent"].as_str().unwrap().to_owned())
        .collect();
    agents.sort();
    assert_eq!(agents, ["a", "b", "noop"]);
    assert!(
        err.contains("\nagents: a (--agents three.yaml), b (--agents three.yaml), noop (--agents three.yaml)\n"),
        "{err}"
    );
    // A suite agent runs when named.
    let output = cli
        .command(&[
            "run",
            "suite",
            "--agents",
            "three.yaml",
            "--agent",
            "my-agent",
            "--agent",
            "a",
            "--workdir",
            "work",
            "--out",
            "named",
        ])
        .output()
        .unwrap();
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(0), "{err}");
    assert!(
        err.contains("\nagents: my-agent (suite), a (--agents three.yaml)\n"),
        "{err}"
    );
    assert_eq!(trials(&cli.path("named")).len(), 2);
}

#[test]
fn more_jobs_than_trials_are_clamped_and_a_folder_of_notes_is_no_out() {
    let cli = init_suite();
    let output = cli
        .command(&[
            "run",
            "suite",
            "-j",
            "100000",
            "--workdir",
            "work",
            "--out",
            "out",
        ])
        .output()
        .unwrap();
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(0), "{err}");
    assert!(
        err.contains("note: -j 100000 is more than the 2 trial(s) planned: running 2 at once\n"),
        "{err}"
    );
    assert!(err.contains(", -j 2) into "), "{err}");
    let manifest = manifest(&cli, "out");
    assert_eq!(manifest["jobs"], 2, "{manifest}");

    // A folder holding the user's own files is not a run directory to write into.
    std::fs::create_dir_all(cli.path("notes")).unwrap();
    std::fs::write(cli.path("notes/todo.md"), "mine\n").unwrap();
    let output = deltabench_snapshot!(
        cli,
        "out_into_notes",
        &mut cli.command(&["run", "suite", "--workdir", "work", "--out", "notes"])
    );
    assert_eq!(output.status.code(), Some(2));
    let mut left: Vec<String> = std::fs::read_dir(cli.path("notes"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(left, ["todo.md"], "nothing written beside the notes");
}

#[test]
fn with_no_suite_named_the_current_folders_is_used() {
    let cli = init_suite();
    let in_suite = |args: &[&str]| {
        let mut command = cli.command(args);
        command.current_dir(cli.path("suite"));
        command
    };
    let output = in_suite(&["validate", "--workdir", "../work"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert!(
        String::from_utf8_lossy(&output.stdout).contains("all 1 tasks are sound"),
        "{output:?}"
    );
    let output = in_suite(&["run", "--workdir", "../work", "--out", "../out"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_eq!(trials(&cli.path("out")).len(), 2);
    let output = in_suite(&["prepare"]).output().unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    // Elsewhere, the message says where it looked.
    let output = deltabench_snapshot!(cli, "no_suite_here", &mut cli.command(&["validate"]));
    assert_eq!(output.status.code(), Some(2));
}

#[test]
fn uncommitted_changes_in_the_suites_repo_are_named() {
    let cli = init_suite();
    let project = cli.path("suite/project");
    let file = std::fs::read_dir(&project)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "py"))
        .unwrap();
    std::fs::write(&file, "# edited, not committed\n").unwrap();
    std::fs::write(project.join("new.txt"), "new\n").unwrap();
    let mut names = [
        file.file_name().unwrap().to_string_lossy().into_owned(),
        "new.txt".to_owned(),
    ];
    names.sort();
    let names = names.join(", ");
    for args in [
        &["validate", "suite", "--workdir", "work"][..],
        &[
            "run",
            "suite",
            "--agent",
            "noop",
            "--workdir",
            "work",
            "--out",
            "out",
        ][..],
    ] {
        let output = cli.command(args).output().unwrap();
        let err = stderr(&output);
        assert!(
            err.contains(&format!(
                "/suite/project has 2 uncommitted change(s) that no trial sees ({names}): trials clone the committed tree, HEAD "
            )),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn completions_for_every_shell() {
    let cli = Cli::new();
    for (shell, marker) in [
        ("bash", "complete -F _deltabench"),
        ("zsh", "#compdef deltabench"),
        ("fish", "complete -c deltabench"),
        ("elvish", "edit:completion:arg-completer[deltabench]"),
        ("powershell", "Register-ArgumentCompleter"),
    ] {
        let output = cli.command(&["completions", shell]).output().unwrap();
        let text = String::from_utf8_lossy(&output.stdout);
        assert_eq!(output.status.code(), Some(0), "{shell}");
        assert!(text.contains(marker), "{shell}: {text}");
        assert!(
            text.contains("until-decided"),
            "{shell}: every flag is completed"
        );
    }
    let output = deltabench_snapshot!(
        cli,
        "completions_unknown_shell",
        &mut cli.command(&["completions", "tcsh"])
    );
    assert_eq!(output.status.code(), Some(2));
}

#[test]
fn a_dry_run_prints_the_plan_and_writes_nothing() {
    let cli = init_suite();
    let before = crate::common::leftovers(&cli.path("."));
    let output = deltabench_snapshot!(
        cli,
        "dry_run",
        &mut cli.command(&[
            "run",
            "suite",
            "--trials",
            "3",
            "-j",
            "1",
            "--dry-run",
            "--workdir",
            "work"
        ])
    );
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(
        crate::common::leftovers(&cli.path(".")),
        before,
        "nothing written"
    );
    assert!(!cli.path("reports").exists());

    // With an earlier run under reports/, an estimate of time from its trials.
    let run = cli
        .command(&[
            "run",
            "suite",
            "--workdir",
            "work",
            "--out",
            "reports/first",
        ])
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
    let output = cli
        .command(&[
            "run",
            "suite",
            "--trials",
            "3",
            "--dry-run",
            "--workdir",
            "work",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        text.contains("estimate: about ")
            && text.contains(
                "(6 of 6 trial(s) seen in 1 earlier run(s) under reports; no cost recorded)"
            ),
        "{text}"
    );
}

#[test]
fn a_typo_gets_a_did_you_mean() {
    let cli = init_suite();
    // A key, a kind, a path: each load error names the close name.
    edit_suite(&cli, "instruction_file:", "instrction_file:");
    let key = deltabench_snapshot!(cli, "typo_key", &mut cli.command(&["validate", "suite"]));
    assert_eq!(key.status.code(), Some(2));
    edit_suite(
        &cli,
        "instrction_file: tasks/fix-median.md",
        "instruction_file: tasks/fix-medain.md",
    );
    let path = cli.command(&["validate", "suite"]).output().unwrap();
    assert!(
        stderr(&path).contains("does not exist ([TEMP]/suite/tasks/fix-medain.md); did you mean 'tasks/fix-median.md'?".replace("[TEMP]", &cli.path(".").canonicalize().unwrap().display().to_string()).as_str()),
        "{}",
        stderr(&path)
    );
    edit_suite(&cli, "tasks/fix-medain.md", "tasks/fix-median.md");
    edit_suite(&cli, "kind: command", "kind: comand");
    let kind = cli.command(&["validate", "suite"]).output().unwrap();
    assert!(
        stderr(&kind).contains("unknown agent kind 'comand' for agent 'my-agent'. Valid kinds: ")
            && stderr(&kind).contains("; did you mean 'command'?"),
        "{}",
        stderr(&kind)
    );
    edit_suite(&cli, "kind: comand", "kind: command");
    // An agent and a task on the command line.
    let run = |args: &[&str]| {
        let mut all = vec!["run", "suite", "--workdir", "work"];
        all.extend(args);
        stderr(&cli.command(&all).output().unwrap())
    };
    let err = run(&["--agent", "my-agnet"]);
    assert!(
        err.contains(
            "unknown agent 'my-agnet'. Available agents: my-agent, noop, oracle; did you mean 'my-agent'?"
        ),
        "{err}"
    );
    let err = run(&["--task", "fix-medan"]);
    assert!(
        err.contains(
            "unknown task 'fix-medan'. Tasks in suite 'suite': fix-median; did you mean 'fix-median'?"
        ),
        "{err}"
    );
}

#[test]
fn noop_claims_nothing_and_reports_filter_by_task_and_outcome() {
    let cli = init_suite();
    let output = cli
        .command(&[
            "run",
            "suite",
            "--trials",
            "2",
            "--workdir",
            "work",
            "--out",
            "out",
        ])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let json = |extra: &[&str]| -> serde_json::Value {
        let mut args = vec!["report", "out", "--format", "json"];
        args.extend(extra);
        let output = cli.command(&args).output().unwrap();
        assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
        serde_json::from_slice(&output.stdout).unwrap()
    };
    let all = json(&[]);
    let agent = |value: &serde_json::Value, name: &str| {
        value["agents"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["agent"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("{name}: {value}"))
    };
    // noop ends `completed` and fails: a baseline, not a false claim.
    let noop = agent(&all, "noop");
    assert_eq!(
        (&noop["claimed"], &noop["false_claims"]),
        (&serde_json::json!(0), &serde_json::json!(0)),
        "{noop}"
    );
    assert_eq!(agent(&all, "my-agent")["claimed"], 2);
    // Only the failed trials: noop's two.
    let failed = json(&["--outcome", "fail"]);
    assert_eq!(agent(&failed, "noop")["trials"], 2, "{failed}");
    assert_eq!(agent(&failed, "my-agent")["trials"], 0, "{failed}");
    let table = cli
        .command(&["report", "out", "--task", "fix-*", "--outcome", "pass"])
        .output()
        .unwrap();
    assert_eq!(table.status.code(), Some(0));
    let unknown = deltabench_snapshot!(
        cli,
        "report_unknown_task",
        &mut cli.command(&["report", "out", "--task", "fix-medain"])
    );
    assert_eq!(unknown.status.code(), Some(2));
}

/// Two more tasks after the init suite's one; the third names a solution folder not there.
const TWO_MORE_TASKS: &str = "    tags: [bugfix, python]
  - id: second
    instruction: Do the second thing.
    verify: \"true\"
  - id: third
    instruction: Do the third thing.
    verify: \"true\"
    solution: solutions/third/
";

#[test]
fn every_load_error_of_a_suite_is_reported_at_once() {
    let cli = init_suite();
    edit_suite(&cli, "    tags: [bugfix, python]\n", TWO_MORE_TASKS);
    // An unknown key in task 1, a bad agent kind, a missing solution folder in task 3 and a
    // bad timeout: a shape error and three of values, each at its line.
    edit_suite(&cli, "    tests: tests/", "    tsets: tests/");
    edit_suite(&cli, "kind: command", "kind: comand");
    edit_suite(&cli, "  timeout: 10m", "  timeout: 10 mintues");
    let output = deltabench_snapshot!(
        cli,
        "four_errors_at_once",
        &mut cli.command(&["validate", "suite"])
    );
    assert_eq!(output.status.code(), Some(2));
    let run = cli
        .command(&["run", "suite", "--workdir", "work"])
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(2));
    assert_eq!(stderr(&run), stderr(&output), "run reports the same errors");
}

#[test]
fn past_twenty_errors_the_rest_are_counted() {
    let cli = init_suite();
    let tasks: String = (1..=24)
        .map(|n| {
            format!(
                "  - id: t{n}\n    instruction: Do {n}.\n    verify: \"true\"\n    timout: 1m\n"
            )
        })
        .collect();
    edit_suite(
        &cli,
        "    tags: [bugfix, python]\n",
        &format!("    tags: [bugfix, python]\n{tasks}"),
    );
    let output = cli.command(&["validate", "suite"]).output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    let err = stderr(&output);
    assert_eq!(err.matches("error: ").count(), 20, "{err}");
    assert!(
        err.contains("unknown field `timout`") && err.contains("did you mean 'timeout'?"),
        "{err}"
    );
    assert!(
        err.ends_with(
            "... and 4 more errors (24 in all)\nhint: `deltabench schema` prints every key the suite file accepts\n"
        ),
        "{err}"
    );
}

#[test]
fn a_broken_indentation_is_said_in_plain_words_at_its_line() {
    let cli = init_suite();
    let original = std::fs::read_to_string(cli.path("suite/suite.yaml")).unwrap();
    // A task key by 3 spaces instead of 4, a tab, the list item of a task moved to column 0,
    // and a first key of `defaults` off the file's 2-space step (the parser fails a line later).
    for (name, from, to) in [
        ("indent_3_not_4", "    tests: tests/", "   tests: tests/"),
        ("indent_tab", "    tests: tests/", "\ttests: tests/"),
        (
            "indent_dedented_list_item",
            "  - id: fix-median",
            "- id: fix-median",
        ),
        (
            "indent_first_key_off_step",
            "  isolation: worktree",
            "   isolation: worktree",
        ),
    ] {
        std::fs::write(cli.path("suite/suite.yaml"), &original).unwrap();
        edit_suite(&cli, from, to);
        let output = deltabench_snapshot!(cli, name, &mut cli.command(&["validate", "suite"]));
        assert_eq!(output.status.code(), Some(2), "{name}");
    }
}
