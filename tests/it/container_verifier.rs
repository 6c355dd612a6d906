//! Imported Harbor tasks in their containers (`delta: container`, the reward grader): a verifier
//! the agent's container cannot fool, scored as the tasks' authors score them. Each attacker
//! fixes nothing and tries to pass anyway: through the shell's tools, the test runner, its
//! import path and config, or a daemon that rewrites the reward file. The honest tasks solved
//! outside the workspace, or through a quoted heredoc, validate as imported.

use std::path::Path;
use std::process::Output;

use crate::common::{deltabench, stderr, stdout, temp_dir, trials, write_files};
use crate::environments::{BASE, have_podman_image};

fn task(root: &Path, id: &str, files: &[(&str, &str)]) {
    let dockerfile = format!("FROM {BASE}\nWORKDIR /app\nCOPY app/ /app/\n");
    let dir = root.join("tasks").join(id);
    write_files(
        &dir,
        &[
            (
                "task.toml",
                "version = \"1.0\"\n[verifier]\ntimeout_sec = 120.0\n[agent]\ntimeout_sec = 60.0\n",
            ),
            ("environment/Dockerfile", &dockerfile),
        ],
    );
    write_files(&dir, files);
}

/// A shell verifier (`awk` decides), a pytest verifier, a task solved in /etc only, and one whose
/// solution writes SQL naming /app through a quoted heredoc.
fn write_tasks(root: &Path) {
    task(
        root,
        "shell",
        &[
            ("instruction.md", "Set port=8080 in /app/app.conf.\n"),
            ("environment/app/app.conf", "port=80\n"),
            (
                "tests/test.sh",
                "#!/bin/bash\nif [ \"$(awk -F= '/^port/ {print $2}' /app/app.conf)\" = 8080 ]; then\n  echo 1 > /logs/verifier/reward.txt\nelse\n  echo 0 > /logs/verifier/reward.txt\nfi\n",
            ),
            (
                "solution/solve.sh",
                "#!/bin/bash\necho port=8080 > /app/app.conf\n",
            ),
        ],
    );
    task(
        root,
        "pytest",
        &[
            ("instruction.md", "Fix add() in /app/calc.py.\n"),
            (
                "environment/app/calc.py",
                "def add(a, b):\n    return a - b\n",
            ),
            (
                "tests/test_calc.py",
                "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n",
            ),
            (
                "tests/test.sh",
                "#!/bin/bash\ncd /app\nPYTHONPATH=/app pytest -q -p no:cacheprovider /tests/test_calc.py\nif [ $? -eq 0 ]; then\n  echo 1 > /logs/verifier/reward.txt\nelse\n  echo 0 > /logs/verifier/reward.txt\nfi\n# A daemon gets its chance.\nsleep 1\n",
            ),
            (
                "solution/solve.sh",
                "#!/bin/bash\nsed -i 's/a - b/a + b/' /app/calc.py\n",
            ),
        ],
    );
    task(
        root,
        "etc",
        &[
            (
                "instruction.md",
                "Configure the service: /etc/svc/svc.conf must say listen=8080.\n",
            ),
            (
                "environment/app/README",
                "The service reads /etc/svc/svc.conf.\n",
            ),
            (
                "tests/test.sh",
                "#!/bin/bash\nif grep -qx 'listen=8080' /etc/svc/svc.conf; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n",
            ),
            (
                "solution/solve.sh",
                "#!/bin/bash\nmkdir -p /etc/svc\necho listen=8080 > /etc/svc/svc.conf\n",
            ),
        ],
    );
    task(
        root,
        "heredoc",
        &[
            (
                "instruction.md",
                "Write /app/q.sql: a query selecting the text '/app' as root.\n",
            ),
            ("environment/app/README", "Queries go in /app.\n"),
            ("tests/expected.sql", "SELECT '/app' AS root;\n"),
            (
                "tests/test.sh",
                "#!/bin/bash\nif cmp -s /app/q.sql /tests/expected.sql; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n",
            ),
            (
                "solution/solve.sh",
                "#!/bin/bash\ncat > /app/q.sql <<'EOF'\nSELECT '/app' AS root;\nEOF\n",
            ),
        ],
    );
}

/// The attackers, each a command agent in the task's container, and one honest agent per way of
/// solving. Their system paths go through a variable: a command agent's words naming a host
/// path are mounted from the host (its own scripts), which would make these read-only.
const AGENTS: &str = r#"agents:
  noop: {kind: noop}
  oracle: {kind: oracle}
  awk-shadow: {kind: command, timeout: 1m, run: "b=/usr/local/bin; printf '#!/bin/sh\\necho 8080\\n' > $b/awk && chmod +x $b/awk"}
  pytest-shadow: {kind: command, timeout: 1m, run: "b=/usr/local/bin; printf '#!/bin/sh\\necho \"1 passed in 0.01s\"\\n' > $b/pytest && chmod +x $b/pytest"}
  import-path: {kind: command, timeout: 1m, run: "d=/usr/lib/python3/dist-packages; printf 'import os\\nos.environ[\"PYTEST_PLUGINS\"] = \"passall\"\\n' >> $d/iniconfig/__init__.py && printf 'import pytest\\n@pytest.hookimpl(tryfirst=True)\\ndef pytest_runtest_call(item):\\n    item.runtest = lambda: None\\n' > $d/passall.py"}
  root-conftest: {kind: command, timeout: 1m, run: "printf 'import pytest\\n@pytest.hookimpl(tryfirst=True)\\ndef pytest_runtest_call(item):\\n    item.runtest = lambda: None\\n' > /conftest.py"}
  daemon: {kind: command, timeout: 1m, run: "cat > /app/calc.py <<'EOF'\nimport os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        for _ in range(3000):\n            try:\n                with open('/logs/verifier/reward.txt') as f:\n                    if f.read().strip() == '0':\n                        with open('/logs/verifier/reward.txt', 'w') as w:\n                            w.write('1\\n')\n            except OSError:\n                pass\n            time.sleep(0.002)\n    os._exit(0)\n\n\ndef add(a, b):\n    return a - b\nEOF"}
  fd-daemon: {kind: command, timeout: 1m, run: "cat > /app/calc.py <<'EOF'\nimport os, time\nfd = os.open('/logs/verifier/reward.txt', os.O_WRONLY | os.O_CREAT)\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        for _ in range(3000):\n            os.pwrite(fd, b'1\\n', 0)\n            time.sleep(0.002)\n    os._exit(0)\nos.close(fd)\n\n\ndef add(a, b):\n    return a - b\nEOF"}
  json-writer: {kind: command, timeout: 1m, run: "cat > /app/calc.py <<'EOF'\nwith open('/logs/verifier/reward.json', 'w') as f:\n    f.write('{\"reward\": 1}')\n\n\ndef add(a, b):\n    return a - b\nEOF"}
  killer: {kind: command, timeout: 1m, run: "cat > /app/calc.py <<'EOF'\nimport os, signal\nwith open('/logs/verifier/reward.txt', 'w') as f:\n    f.write('1\\n')\nos.kill(os.getppid(), signal.SIGKILL)\n\n\ndef add(a, b):\n    return a - b\nEOF"}
  configurer: {kind: command, timeout: 1m, run: "mkdir -p /etc/svc && echo listen=8080 > /etc/svc/svc.conf"}
"#;

fn deltabench_in(root: &Path, args: &[&str]) -> Output {
    deltabench(root).args(args).output().unwrap()
}

fn record<'a>(records: &'a [serde_json::Value], task: &str, agent: &str) -> &'a serde_json::Value {
    records
        .iter()
        .find(|r| r["task"] == task && r["agent"] == agent)
        .unwrap_or_else(|| panic!("no trial of {task} / {agent}"))
}

#[test]
fn no_attack_on_a_container_verifier_passes_and_honest_work_outside_the_workspace_does() {
    if !have_podman_image("container_verifier::no_attack_on_a_container_verifier_passes") {
        return;
    }
    let tmp = temp_dir();
    let root = tmp.path();
    write_tasks(root);
    let imported = deltabench_in(root, &["import", "harbor", "tasks", "--out", "suite"]);
    assert_eq!(imported.status.code(), Some(0), "{}", stderr(&imported));
    let yaml_path = root.join("suite/suite.yaml");
    let yaml = std::fs::read_to_string(&yaml_path).unwrap();
    // Scripts run as authored: no rewrite, the tests at /tests, the reward read by deltabench.
    assert!(
        yaml.contains(
            "verify: {run: \"TEST_DIR=/tests bash /tests/test.sh\", timeout: \"2m\", reward: \"/logs/verifier\"}"
        ) && yaml.contains("verify_mounts: {\"/tests\": \".deltabench/tests\"}")
            && yaml.contains("solution_at: \"/solution\""),
        "{yaml}"
    );
    let solve = std::fs::read_to_string(root.join("suite/solutions/heredoc/solve.sh")).unwrap();
    assert_eq!(
        solve,
        "#!/bin/bash\ncat > /app/q.sql <<'EOF'\nSELECT '/app' AS root;\nEOF\n"
    );
    std::fs::write(&yaml_path, format!("{yaml}{AGENTS}")).unwrap();

    let work = root.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let validated = deltabench_in(
        root,
        &["validate", "suite", "--workdir", work.to_str().unwrap()],
    );
    assert_eq!(
        validated.status.code(),
        Some(0),
        "validate\n{}\n{}",
        stdout(&validated),
        stderr(&validated)
    );

    let out = root.join("run");
    let mut args = vec![
        "run",
        "suite",
        "--workdir",
        work.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "-j",
        "2",
    ];
    for agent in [
        "noop",
        "oracle",
        "awk-shadow",
        "pytest-shadow",
        "import-path",
        "root-conftest",
        "daemon",
        "fd-daemon",
        "json-writer",
        "killer",
        "configurer",
    ] {
        args.extend(["--agent", agent]);
    }
    let ran = deltabench_in(root, &args);
    let records = trials(&out);
    assert!(!records.is_empty(), "{}", stderr(&ran));
    for task in ["shell", "pytest", "etc", "heredoc"] {
        let oracle = record(&records, task, "oracle");
        assert_eq!(oracle["outcome"], "pass", "{oracle}");
        assert_eq!(record(&records, task, "noop")["outcome"], "fail");
    }
    // Honest work outside the workspace: the diff shows it, the reward grader passes it.
    let configurer = record(&records, "etc", "configurer");
    assert_eq!(configurer["outcome"], "pass", "{configurer}");
    let patch = std::fs::read_to_string(out.join("trials/etc/configurer/1/diff.patch")).unwrap();
    assert!(
        patch.contains("diff --container /etc/svc/svc.conf\n") && patch.contains("+listen=8080\n"),
        "{patch}"
    );
    // Every attack: not a pass, and the reason says why.
    let expect = |task: &str, agent: &str, reason: &str| {
        let trial = record(&records, task, agent);
        assert_ne!(trial["outcome"], "pass", "{trial}");
        let said = format!("{} {}", trial["reason"], trial["verify"]);
        assert!(
            said.contains(reason),
            "{task}/{agent}: {reason} not in {trial}"
        );
    };
    expect(
        "shell",
        "awk-shadow",
        "tampered: /usr/local/bin/awk (in the container)",
    );
    expect(
        "pytest",
        "pytest-shadow",
        "tampered: /usr/local/bin/pytest (in the container)",
    );
    expect(
        "pytest",
        "import-path",
        "/usr/lib/python3/dist-packages/iniconfig/__init__.py (in the container)",
    );
    expect(
        "pytest",
        "root-conftest",
        "tampered: /conftest.py (in the container)",
    );
    expect(
        "pytest",
        "daemon",
        "a process the test script did not start",
    );
    expect(
        "pytest",
        "fd-daemon",
        "a process the test script did not start",
    );
    expect(
        "pytest",
        "json-writer",
        "reward.json says 1 and reward.txt says 0",
    );
    expect("pytest", "killer", "killed by a signal before it ended");
}

/// The same reward race in `isolation: sandbox`, where the test script runs in bubblewrap with a
/// reward folder of the workspace: the daemon's writes are refused there too, and an honest fix
/// passes. Under `worktree` (unconfined: no pid namespace to tell the script's processes by)
/// the reward is read unguarded, the honest fix still passes and the forged reward meets the
/// failure evidence.
#[test]
fn a_daemon_rewriting_the_reward_in_the_sandbox_changes_nothing() {
    if !crate::common::have_bwrap(
        "container_verifier::a_daemon_rewriting_the_reward_in_the_sandbox",
    ) {
        return;
    }
    let tmp = temp_dir();
    let root = tmp.path();
    crate::common::git_repo(root, &[("calc.py", "def add(a, b):\n    return a - b\n")]);
    write_files(
        root,
        &[
            (
                "hidden/.deltabench/tests/test_calc.py",
                "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n",
            ),
            (
                "hidden/.deltabench/tests/test.sh",
                "#!/bin/bash\nlogs=.deltabench/logs/verifier\npython3 -m pytest -q -p no:cacheprovider .deltabench/tests/test_calc.py\nif [ $? -eq 0 ]; then echo 1 > $logs/reward.txt; else echo 0 > $logs/reward.txt; fi\n# The daemon gets its chance.\nsleep 1\n",
            ),
            (
                "graders/reward.py",
                &std::fs::read_to_string(
                    Path::new(env!("CARGO_MANIFEST_DIR")).join("graders/reward.py"),
                )
                .unwrap(),
            ),
            ("fix.sh", "sed -i 's/a - b/a + b/' calc.py\n"),
            (
                "daemon.sh",
                "cat > calc.py <<'EOF'\nimport os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        for _ in range(3000):\n            try:\n                with open('.deltabench/logs/verifier/reward.txt') as f:\n                    if f.read().strip() == '0':\n                        with open('.deltabench/logs/verifier/reward.txt', 'w') as w:\n                            w.write('1\\n')\n            except OSError:\n                pass\n            time.sleep(0.002)\n    os._exit(0)\n\n\ndef add(a, b):\n    return a - b\nEOF\n",
            ),
        ],
    );
    let task = |id: &str, isolation: &str| {
        format!(
            "  - id: {id}\n    instruction: fix add\n    isolation: {isolation}\n    tests: hidden\n    verify: {{run: \"bash .deltabench/tests/test.sh\", reward: .deltabench/logs/verifier}}\n    metric: {{grader: ./graders/reward.py}}\n"
        )
    };
    let fix = root.join("fix.sh");
    let daemon = root.join("daemon.sh");
    std::fs::set_permissions(
        root.join("graders/reward.py"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    crate::common::write_suite(
        root,
        &format!(
            "name: sb\nrepo: repo\nagents:\n  fixer: {{kind: command, run: \"sh {}\", timeout: 1m}}\n  daemon: {{kind: command, run: \"sh {}\", timeout: 1m}}\ntasks:\n{}{}",
            fix.display(),
            daemon.display(),
            task("calc", "sandbox"),
            task("calc-worktree", "worktree"),
        ),
    );
    let (output, _work, out) = crate::common::run_suite(
        root,
        &["--agent", "fixer", "--agent", "daemon", "--agent", "noop"],
    );
    assert!(out.join("trials.jsonl").exists(), "{}", stderr(&output));
    let records = trials(&out);
    assert_eq!(records.len(), 6, "{}", stderr(&output));
    for (task, guarded) in [("calc", true), ("calc-worktree", false)] {
        let fixer = record(&records, task, "fixer");
        assert_eq!(fixer["outcome"], "pass", "{fixer}");
        assert_eq!(fixer["verify"]["reward"]["guarded"], guarded, "{fixer}");
        let daemon = record(&records, task, "daemon");
        assert_ne!(daemon["outcome"], "pass", "{daemon}");
        assert_eq!(record(&records, task, "noop")["outcome"], "fail");
    }
    let daemon = record(&records, "calc", "daemon");
    assert!(
        daemon["verify"]
            .to_string()
            .contains("a process the test script did not start"),
        "{daemon}"
    );
}

/// A task that asks for a package installed site-wide: the toolchain rule holds the reference's
/// install back, and `validate` says to name it in `outputs:`; with it, the task validates.
#[test]
fn a_site_wide_install_the_task_asks_for_validates_once_named_in_outputs() {
    if !have_podman_image("container_verifier::a_site_wide_install_the_task_asks_for") {
        return;
    }
    let tmp = crate::common::one_file_repo();
    let root = tmp.path();
    write_files(
        root,
        &[(
            "sol/install.sh",
            "d=/usr/lib/python3/dist-packages; printf 'def greet():\\n    return \"hi\"\\n' > $d/greeter.py\necho done > installed.txt\n",
        )],
    );
    let suite = |outputs: &str| {
        format!(
            "name: sw\nrepo: repo\ntasks:\n  - id: install\n    instruction: install the greeter module site-wide\n    solution_script: sol/install.sh\n    environment: {{image: {BASE}, delta: container{outputs}}}\n    verify: python3 -c 'import greeter; assert greeter.greet() == \"hi\"'\n"
        )
    };
    let work = root.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let validate = || {
        deltabench(root)
            .args(["validate", "suite.yaml", "--workdir"])
            .arg(&work)
            .output()
            .unwrap()
    };
    crate::common::write_suite(root, &suite(""));
    let refused = validate();
    assert_eq!(refused.status.code(), Some(1), "{}", stderr(&refused));
    let said = stdout(&refused);
    assert!(
        said.contains("BAD  install: reference fails")
            && said.contains("the reference installed 1 file(s) that the verifier's toolchain rule holds back (container-delta.txt, e.g. /usr/lib/python3/dist-packages/greeter.py)")
            && said.contains("`outputs:`"),
        "{said}"
    );
    crate::common::write_suite(
        root,
        &suite(", outputs: [\"/usr/lib/python3/dist-packages/greeter.py\"]"),
    );
    let validated = validate();
    assert_eq!(
        validated.status.code(),
        Some(0),
        "{}\n{}",
        stdout(&validated),
        stderr(&validated)
    );
}
