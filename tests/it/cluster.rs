//! `submit` on real job engines: a single-node Slurm started for the test (tests/slurm/cluster.sh,
//! Debian's slurm-wlm and munge from .ci/install), and Kubernetes manifests checked against the
//! API's schemas by kubernetes-validate (no cluster here).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::common::{
    deltabench, have_tool, one_file_repo, stderr, stdout, trials, write_files, write_suite,
};

const ENGINE_VARS: [&str; 7] = [
    "SLURM_ARRAY_TASK_ID",
    "SLURM_ARRAY_TASK_MIN",
    "SLURM_ARRAY_TASK_MAX",
    "SLURM_ARRAY_TASK_COUNT",
    "JOB_COMPLETION_INDEX",
    "DELTABENCH_SHARD",
    "DELTABENCH_SHARDS",
];

/// Eight tasks solved by writing `tN.txt`; agents oracle, noop, and `held`, which writes the even
/// tasks' files only, and first waits while the file `hold` exists (so a shard can be caught
/// mid-run). Every verdict is deterministic.
fn suite(root: &Path) {
    let hold = root.join("hold");
    let mut yaml = format!(
        "name: cluster\nrepo: repo\nagents:\n  oracle: {{kind: oracle}}\n  noop: {{kind: noop}}\n  \
         held: {{kind: command, timeout: 120s, run: \"while [ -f {} ]; do sleep 0.2; done; touch t0.txt t2.txt t4.txt t6.txt\"}}\ntasks:\n",
        hold.display()
    );
    for i in 0..8 {
        write_files(root, &[(&format!("solutions/t{i}/t{i}.txt"), "done\n")]);
        yaml.push_str(&format!(
            "  - {{id: t{i}, instruction: write t{i}.txt, verify: \"test -f t{i}.txt\", solution: solutions/t{i}}}\n"
        ));
    }
    write_suite(root, &yaml);
}

/// (task, agent, trial, outcome) of every record of a run directory.
fn outcomes(dir: &Path) -> BTreeSet<(String, String, u64, String)> {
    trials(dir)
        .iter()
        .map(|r| {
            (
                r["task"].as_str().unwrap().to_owned(),
                r["agent"].as_str().unwrap().to_owned(),
                r["trial"].as_u64().unwrap(),
                r["outcome"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// A single-node Slurm, up while this lives.
struct Slurm {
    state: PathBuf,
    conf: PathBuf,
}

impl Slurm {
    fn script() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/slurm/cluster.sh")
    }

    /// Starts the daemons; None (the test skipped, or failed under CI) when they cannot start.
    fn start(test: &str, state: &Path) -> Option<Self> {
        // Ports of this process's own, so two test runs on one machine do not meet.
        let port = 20_000 + (std::process::id() % 10_000) * 2;
        let output = Command::new("bash")
            .env("DELTABENCH_SLURM_PORT", port.to_string())
            .arg(Self::script())
            .arg("up")
            .arg(state)
            .output()
            .unwrap();
        let slurm = Self {
            state: state.to_owned(),
            conf: state.join("slurm.conf"),
        };
        if output.status.success() {
            return Some(slurm);
        }
        drop(slurm);
        let why = format!(
            "a single-node Slurm (tests/slurm/cluster.sh up failed: {})",
            String::from_utf8_lossy(&output.stderr).trim()
        );
        have_tool(test, &why, false);
        None
    }

    fn command(&self, program: &str) -> Command {
        let mut command = Command::new(program);
        command.env("SLURM_CONF", &self.conf);
        command
    }

    /// `deltabench ARGS` in `root`, as a user on the login node runs it.
    fn deltabench(&self, root: &Path, args: &[&str]) -> Output {
        let mut command = deltabench(root);
        for name in ENGINE_VARS {
            command.env_remove(name);
        }
        command
            .env("SLURM_CONF", &self.conf)
            .args(args)
            .output()
            .unwrap()
    }

    /// Whether a job (any of its array tasks) is still queued or running.
    fn active(&self, job: &str) -> bool {
        let output = self
            .command("squeue")
            .args(["-h", "-r", "-o", "%i", "-j", job])
            .output()
            .unwrap();
        !String::from_utf8_lossy(&output.stdout).trim().is_empty()
    }

    fn wait_for(&self, job: &str) {
        let start = Instant::now();
        while self.active(job) {
            assert!(
                start.elapsed() < Duration::from_secs(180),
                "job {job} still in the queue after 3 minutes: {}",
                self.queue()
            );
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    fn queue(&self) -> String {
        let output = self.command("squeue").output().unwrap();
        String::from_utf8_lossy(&output.stdout).into_owned()
    }
}

impl Drop for Slurm {
    fn drop(&mut self) {
        // This test's own cluster (its own ports and state): cancel what is left, then stop it.
        let _ = self.command("scancel").args(["--user", "root"]).output();
        let _ = Command::new("bash")
            .arg(Self::script())
            .arg("down")
            .arg(&self.state)
            .output();
    }
}

/// The ids `submit slurm` printed: (array job, merge job).
fn job_ids(output: &Output) -> (String, String) {
    let text = stdout(output);
    let line = text
        .lines()
        .find(|l| l.starts_with("submitted job array "))
        .unwrap_or_else(|| panic!("no job ids in: {text}"));
    let words: Vec<&str> = line.split_whitespace().collect();
    let merge = words
        .iter()
        .position(|w| *w == "merge")
        .map(|i| words[i + 2].to_owned())
        .unwrap();
    (words[3].to_owned(), merge)
}

/// The Slurm path end to end: a 4-shard `submit slurm` merges into the unsharded run's trials
/// and verdicts; then a shard cancelled mid-run is named by `status` and by the merge job,
/// `submit --resume` resubmits that shard only, and the merge is complete again.
#[test]
fn slurm_submit_merges_like_one_run_and_resubmits_a_cancelled_shard() {
    const TEST: &str = "slurm_submit_merges_like_one_run_and_resubmits_a_cancelled_shard";
    let found = ["sbatch", "slurmctld", "slurmd", "munged"]
        .iter()
        .all(|tool| {
            Command::new("sh")
                .args(["-c", &format!("command -v {tool}")])
                .output()
                .is_ok_and(|o| o.status.success())
        });
    if !have_tool(
        TEST,
        "Slurm and munge (apt-get install slurm-wlm munge)",
        found,
    ) {
        return;
    }
    let tmp = one_file_repo();
    let root = tmp.path();
    suite(root);
    std::fs::create_dir_all(root.join("work")).unwrap();
    let Some(slurm) = Slurm::start(TEST, &root.join("slurm")) else {
        return;
    };

    let full = slurm.deltabench(
        root,
        &[
            "run",
            "suite.yaml",
            "-j",
            "2",
            "--workdir",
            "work",
            "--out",
            "full",
        ],
    );
    assert_eq!(full.status.code(), Some(0), "{}", stderr(&full));
    let expected = outcomes(&root.join("full"));
    assert_eq!(expected.len(), 24);
    assert_eq!(expected.iter().filter(|o| o.3 == "pass").count(), 12);

    let submit = |out: &str| {
        slurm.deltabench(
            root,
            &[
                "submit",
                "slurm",
                "suite.yaml",
                "--shards",
                "4",
                "--out",
                out,
                "-j",
                "1",
                "--workdir",
                "work",
            ],
        )
    };
    let output = submit("one");
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    // The test's folders are on /dev/shm where there is one: the warning says so.
    if nix_is_tmpfs(root) {
        assert!(
            stderr(&output).contains("is on a node-local tmpfs"),
            "{}",
            stderr(&output)
        );
    }
    let (array, merge) = job_ids(&output);
    slurm.wait_for(&merge);
    let log = std::fs::read_to_string(root.join(format!("one/logs/merge-{merge}.out"))).unwrap();
    assert!(log.contains("merged 24 of 24 planned trials"), "{log}");
    assert_eq!(outcomes(&root.join("one/merged")), expected);
    for i in 1..=4 {
        let m: Value = serde_json::from_str(
            &std::fs::read_to_string(root.join(format!("one/shard-{i}-of-4/manifest.json")))
                .unwrap(),
        )
        .unwrap();
        assert_eq!(m["shard"]["index"], i, "array task {i} ran shard {i}");
    }
    assert!(!slurm.active(&array));

    // A shard cancelled mid-run: the `held` agent waits while `hold` exists.
    std::fs::write(root.join("hold"), "").unwrap();
    let output = submit("two");
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let (array, merge) = job_ids(&output);
    let start = Instant::now();
    // A shard that recorded a trial and waits on a held one (oracle and noop run first).
    let victim = loop {
        let found = (1..=4).find(|i| {
            let dir = root.join(format!("two/shard-{i}-of-4"));
            dir.join("manifest.json").is_file() && {
                let n = trials(&dir).len();
                let planned = serde_json::from_str::<Value>(
                    &std::fs::read_to_string(dir.join("manifest.json")).unwrap(),
                )
                .unwrap()["planned_trials"]
                    .as_u64()
                    .unwrap() as usize;
                n >= 1 && n < planned
            }
        });
        if let Some(i) = found {
            break i;
        }
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "no shard recorded a trial: {}",
            slurm.queue()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let task = format!("{array}_{victim}");
    let cancel = slurm.command("scancel").arg(&task).output().unwrap();
    assert!(cancel.status.success(), "{cancel:?}");
    slurm.wait_for(&task);
    let status = slurm.deltabench(root, &["status", "two"]);
    let text = stdout(&status);
    assert_eq!(status.status.code(), Some(0), "{}", stderr(&status));
    let name = format!("shard {victim}/4 (two/shard-{victim}-of-4): stopped without finishing");
    assert!(text.contains(&name), "{text}");
    assert!(
        text.contains("resubmit them: deltabench submit slurm --resume two"),
        "{text}"
    );
    assert!(
        text.contains("running"),
        "the other shards still run: {text}"
    );
    std::fs::remove_file(root.join("hold")).unwrap();
    slurm.wait_for(&merge);
    let log = std::fs::read_to_string(root.join(format!("two/logs/merge-{merge}.out"))).unwrap();
    let absolute = format!(
        "shard {victim}/4 ({}): stopped without finishing",
        root.join(format!("two/shard-{victim}-of-4")).display()
    );
    assert!(
        log.contains(&absolute),
        "the merge job names the shard: {log}"
    );
    let merged = slurm.deltabench(root, &["merge", "two"]);
    assert_eq!(merged.status.code(), Some(3), "{}", stderr(&merged));
    assert!(stderr(&merged).contains(&name), "{}", stderr(&merged));
    let kept = trials(&root.join(format!("two/shard-{victim}-of-4")))
        .iter()
        .filter(|r| r["interrupted"] != Value::Bool(true))
        .count();
    assert!(kept >= 1);

    let again = slurm.deltabench(root, &["submit", "slurm", "--resume", "two"]);
    assert_eq!(again.status.code(), Some(0), "{}", stderr(&again));
    assert!(
        stderr(&again).contains(&format!("resubmitting shard {victim}/4\n")),
        "only the cancelled shard: {}",
        stderr(&again)
    );
    assert!(
        stdout(&again).contains(&format!("(shards {victim} of 4)")),
        "{}",
        stdout(&again)
    );
    let (_, merge) = job_ids(&again);
    slurm.wait_for(&merge);
    let log = std::fs::read_to_string(root.join(format!("two/logs/merge-{merge}.out"))).unwrap();
    assert!(log.contains("merged 24 of 24 planned trials"), "{log}");
    assert_eq!(outcomes(&root.join("two/merged")), expected);
    // What the shard had recorded before it was cancelled was kept, not run again.
    let log = std::fs::read_to_string(root.join(format!("two/logs/shard-{victim}.out"))).unwrap();
    assert!(
        log.contains("holds this shard's earlier attempt: finishing it"),
        "{log}"
    );
    let status = stdout(&slurm.deltabench(root, &["status", "two"]));
    assert!(
        status.contains("every shard finished; merged into two/merged"),
        "{status}"
    );

    // A run in rounds over the array: the shards meet after each round and stop together, at
    // the round and with the decision of one unsharded run.
    let rounds = [
        "--agent",
        "oracle",
        "--agent",
        "noop",
        "--until-decided",
        "--max-trials",
        "6",
    ];
    let whole = slurm.deltabench(
        root,
        &[
            &["run", "suite.yaml", "--workdir", "work", "--out", "whole"][..],
            &rounds,
        ]
        .concat(),
    );
    assert_eq!(whole.status.code(), Some(1), "{}", stderr(&whole));
    let gate = |text: &str| {
        text.lines()
            .find(|l| l.starts_with("sequential gate"))
            .map(str::to_owned)
            .unwrap_or_else(|| format!("(no gate line in) {text}"))
    };
    let output = slurm.deltabench(
        root,
        &[
            &[
                "submit",
                "slurm",
                "suite.yaml",
                "--shards",
                "2",
                "--out",
                "three",
                "-j",
                "1",
                "--workdir",
                "work",
            ][..],
            &rounds,
        ]
        .concat(),
    );
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let (array, merge) = job_ids(&output);
    slurm.wait_for(&merge);
    for i in 1..=2 {
        let log = std::fs::read_to_string(root.join(format!("three/logs/shard-{i}.out"))).unwrap();
        assert_eq!(gate(&log), gate(&stdout(&whole)), "shard {i}");
    }
    assert_eq!(
        outcomes(&root.join("three/merged")),
        outcomes(&root.join("whole"))
    );
    assert!(!slurm.active(&array));
}

fn nix_is_tmpfs(path: &Path) -> bool {
    Command::new("stat")
        .args(["-f", "-c", "%T"])
        .arg(path)
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "tmpfs")
}

/// The kubernetes-validate venv .ci/install sets up.
fn kubernetes_validate() -> Option<PathBuf> {
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache")))?;
    let path = cache.join("deltabench/kubernetes-validate/bin/kubernetes-validate");
    path.is_file().then_some(path)
}

/// `submit k8s --dry-run` writes an Indexed Job and a merge Job: snapshots, and valid against
/// the Kubernetes API's schemas (strict: no unknown field). A broken manifest is refused by the
/// same check, so the check is not a no-op. No cluster ran these here.
#[test]
fn k8s_manifests_are_valid_indexed_jobs() {
    let validator = kubernetes_validate();
    if !have_tool(
        "k8s_manifests_are_valid_indexed_jobs",
        "kubernetes-validate (.ci/install puts it in ~/.cache/deltabench/kubernetes-validate)",
        validator.is_some(),
    ) {
        return;
    }
    let validator = validator.unwrap();
    let tmp = one_file_repo();
    let root = tmp.path();
    suite(root);
    let output = deltabench(root)
        .args([
            "submit",
            "k8s",
            "suite.yaml",
            "--shards",
            "16",
            "--out",
            "k",
            "--dry-run",
            "--k8s-image",
            "registry.example.com/evals/deltabench:1.0",
            "--namespace",
            "evals",
            "--claim",
            "eval-results",
            "--cpus",
            "2",
            "--memory",
            "8G",
            "--trials",
            "5",
            "--agent",
            "oracle",
            "--parallelism",
            "8",
        ])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let shards = std::fs::read_to_string(root.join("k/k8s/shards.yaml")).unwrap();
    let merge = std::fs::read_to_string(root.join("k/k8s/merge.yaml")).unwrap();
    insta::assert_snapshot!("k8s_shards_manifest", shards);
    insta::assert_snapshot!("k8s_merge_manifest", merge);
    for needed in [
        "completionMode: Indexed",
        "completions: 16",
        "parallelism: 8",
        "claimName: \"eval-results\"",
        "\"--shard\", \"auto\", \"--shards\", \"16\"",
    ] {
        assert!(shards.contains(needed), "{needed}: {shards}");
    }
    let validate = |file: &Path| {
        Command::new(&validator)
            .args(["--strict", "--kubernetes-version", "1.33.0"])
            .arg(file)
            .output()
            .unwrap()
    };
    for file in ["k/k8s/shards.yaml", "k/k8s/merge.yaml"] {
        let output = validate(&root.join(file));
        assert!(
            output.status.success(),
            "{file}: {}{}",
            stdout(&output),
            stderr(&output)
        );
    }
    // A resubmission applies a renamed copy of the Indexed Job: valid too.
    let output = deltabench(root)
        .args(["submit", "k8s", "--resume", "k", "--dry-run"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let again = root.join("k/k8s/deltabench-cluster-r1.yaml");
    let text = std::fs::read_to_string(&again).unwrap();
    assert!(text.contains("name: \"deltabench-cluster-r1\""), "{text}");
    assert!(validate(&again).status.success());
    let broken = root.join("broken.yaml");
    std::fs::write(
        &broken,
        shards.replace("completions: 16", "completions: sixteen"),
    )
    .unwrap();
    assert!(
        !validate(&broken).status.success(),
        "a count that is no number passes"
    );
    std::fs::write(&broken, shards.replace("  parallelism:", "  paralelism:")).unwrap();
    assert!(
        !validate(&broken).status.success(),
        "an unknown field passes"
    );
}

/// `submit` without the engine's client exits 2 and says what to install; `--dry-run` needs
/// neither; a second submit into the same folder is refused.
#[test]
fn submit_without_the_engine_client_says_what_to_install() {
    let tmp = one_file_repo();
    let root = tmp.path();
    suite(root);
    let empty = root.join("empty-path");
    std::fs::create_dir_all(&empty).unwrap();
    let submit_into = |engine: &str, out: &str, extra: &[&str]| {
        deltabench(root)
            .env("PATH", &empty)
            .args([
                "submit",
                engine,
                "suite.yaml",
                "--shards",
                "2",
                "--out",
                out,
            ])
            .args(extra)
            .output()
            .unwrap()
    };
    let submit = |engine: &str, extra: &[&str]| submit_into(engine, "o", extra);
    let output = submit("slurm", &[]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    crate::common::assert_tmp_snapshot!("submit_slurm_without_sbatch", root, stderr(&output));
    let output = submit("k8s", &["--k8s-image", "x"]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    crate::common::assert_tmp_snapshot!("submit_k8s_without_kubectl", root, stderr(&output));
    assert!(!root.join("o").exists(), "nothing written");

    let output = submit("slurm", &["--dry-run", "--cpus", "2", "--memory", "4G"]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let script = std::fs::read_to_string(root.join("o/slurm/shards.sbatch")).unwrap();
    assert!(script.contains("#SBATCH --array=1-2"), "{script}");
    assert!(
        script.contains("#SBATCH --cpus-per-task=2\n#SBATCH --mem=4G\n"),
        "{script}"
    );
    assert!(script.contains("--shard auto --shards 2 --out"), "{script}");
    let output = submit("slurm", &["--dry-run"]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("already holds a submitted run"),
        "{}",
        stderr(&output)
    );

    // A run in rounds: every shard gets the rule and the baseline, at the path every node reads.
    let output = submit_into(
        "slurm",
        "r",
        &[
            "--dry-run",
            "--until-decided",
            "--baseline",
            "base",
            "--max-trials",
            "8",
            "--confidence",
            "0.9",
            "--include-flaky",
        ],
    );
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    let script = std::fs::read_to_string(root.join("r/slurm/shards.sbatch")).unwrap();
    let base = root.join("base").display().to_string();
    assert!(
        script.contains(&format!(
            "--baseline {base} --until-decided --margin 0.1 --max-trials 8 --confidence 0.9 --include-flaky"
        )),
        "{script}"
    );
    // A fixed run's shards decide nothing: its confidence belongs to `compare`.
    let output = submit_into("slurm", "f", &["--dry-run", "--confidence", "0.9"]);
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("--confidence is for a run in rounds"),
        "{}",
        stderr(&output)
    );
    assert!(!root.join("f").exists());
    // Shards of a run in rounds wait for each other: fewer pods than shards would never finish.
    let output = deltabench(root)
        .args([
            "submit",
            "k8s",
            "suite.yaml",
            "--shards",
            "4",
            "--out",
            "k",
            "--dry-run",
            "--k8s-image",
            "x",
            "--until-ci-width",
            "0.2",
            "--parallelism",
            "2",
        ])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
    assert!(
        stderr(&output).contains(
            "--parallelism 2 runs fewer pods than the 4 shards, and the shards of a run in rounds wait for each other"
        ),
        "{}",
        stderr(&output)
    );
    assert!(!root.join("k").exists());
}
