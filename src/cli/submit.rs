//! `deltabench submit slurm|k8s`: a sharded run as a job engine's array, and a merge after it.
//!
//! The job script (Slurm) or manifests (Kubernetes) are written into the shared folder and
//! kept; `submission.json` there records what was submitted, so `status` can ask the engine
//! which shards are queued or running and `--resume` resubmits only the others.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};

use super::args::{Engine, SubmitArgs};
use super::exit::Exit;
use super::{CliError, ErrorKind, print_stdout};
use crate::store::shards::{self, ShardState};
use crate::store::{self, Shard};

/// What `submit` wrote and submitted, in `OUT/submission.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Submission {
    pub engine: Engine,
    pub shards: u32,
    pub suite: String,
    /// The shards' job script (Slurm) or Indexed Job manifest (Kubernetes).
    pub script: PathBuf,
    /// The merge job's script or manifest.
    pub merge: PathBuf,
    #[serde(default)]
    pub sbatch_args: Vec<String>,
    #[serde(default)]
    pub namespace: Option<String>,
    /// The Kubernetes Job's name.
    #[serde(default)]
    pub name: String,
    /// Every submission: the shards' job and the merge job, first and resubmitted.
    pub jobs: Vec<SubmittedJob>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct SubmittedJob {
    pub id: String,
    /// The shards the job runs, e.g. "1-4" or "2,3"; empty for a merge job.
    pub shards: String,
    pub merge: bool,
}

pub(super) const SUBMISSION: &str = "submission.json";

pub(super) fn read_submission(dir: &Path) -> Option<Submission> {
    serde_json::from_slice(&fs::read(dir.join(SUBMISSION)).ok()?).ok()
}

fn write_submission(dir: &Path, submission: &Submission) -> Result<(), CliError> {
    store::write_json_atomic(&dir.join(SUBMISSION), submission).map_err(|e| {
        CliError::with_cause(
            ErrorKind::Harness,
            format!("cannot write {}", dir.join(SUBMISSION).display()),
            e,
        )
    })
}

fn engine_name(engine: Engine) -> &'static str {
    match engine {
        Engine::Slurm => "slurm",
        Engine::K8s => "k8s",
    }
}

impl std::fmt::Display for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(engine_name(*self))
    }
}

/// The engine's client command, and what to install when it is missing.
fn client(engine: Engine) -> (&'static str, &'static str) {
    match engine {
        Engine::Slurm => (
            "sbatch",
            "install Slurm's client commands (Debian/Ubuntu: apt-get install slurm-client; the full single-node set: slurm-wlm munge) or run on the cluster's login node",
        ),
        Engine::K8s => (
            "kubectl",
            "install kubectl (https://kubernetes.io/docs/tasks/tools/, or apt/snap/brew's kubectl) and point it at the cluster (KUBECONFIG)",
        ),
    }
}

/// Where `name` is on PATH.
pub(super) fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(name))
            .find(|path| path.is_file())
    })
}

fn require_client(engine: Engine) -> Result<(), CliError> {
    let (command, install) = client(engine);
    if on_path(command).is_none() {
        return Err(CliError::usage(format!(
            "`submit {}` needs {command}, which is not on PATH",
            engine_name(engine)
        ))
        .hint(install)
        .hint("--dry-run writes the job files without submitting them"));
    }
    Ok(())
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> CliError + '_ {
    move |e| {
        CliError::with_cause(
            ErrorKind::Harness,
            format!("cannot write {}", path.display()),
            e,
        )
    }
}

fn absolute(path: &Path) -> Result<PathBuf, CliError> {
    std::path::absolute(path).map_err(|e| {
        CliError::with_cause(
            ErrorKind::Usage,
            format!("cannot resolve {}", path.display()),
            e,
        )
    })
}

/// A word for `sh`, quoted when it needs to be.
fn sh_quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// The run options every shard gets, as `deltabench run` flags.
fn run_flags(args: &SubmitArgs, local_paths: bool) -> Result<Vec<String>, CliError> {
    let mut flags = Vec::new();
    let path = |p: &Path| -> Result<String, CliError> {
        Ok(if local_paths {
            absolute(p)?.display().to_string()
        } else {
            p.display().to_string()
        })
    };
    if let Some(file) = &args.agents {
        flags.extend(["--agents".to_owned(), path(file)?]);
    }
    for agent in &args.agent {
        flags.extend(["--agent".to_owned(), agent.clone()]);
    }
    if let Some(n) = args.trials {
        flags.extend(["--trials".to_owned(), n.to_string()]);
    }
    for task in &args.task {
        flags.extend(["--task".to_owned(), task.clone()]);
    }
    for tag in &args.tag {
        flags.extend(["--tag".to_owned(), tag.clone()]);
    }
    if let Some(run) = &args.baseline {
        flags.extend(["--baseline".to_owned(), path(run)?]);
    }
    let rounds = &args.rounds;
    if rounds.until_decided {
        flags.extend([
            "--until-decided".to_owned(),
            "--margin".to_owned(),
            rounds.margin.to_string(),
        ]);
    }
    if let Some(width) = rounds.until_ci_width {
        flags.extend(["--until-ci-width".to_owned(), width.to_string()]);
    }
    if in_rounds(args) {
        flags.extend(["--max-trials".to_owned(), rounds.max_trials.to_string()]);
    }
    if let Some(level) = args.confidence {
        flags.extend(["--confidence".to_owned(), level.to_string()]);
    }
    if let Some(drop) = args.max_drop {
        flags.extend(["--max-drop".to_owned(), drop.to_string()]);
    }
    if args.include_flaky {
        flags.push("--include-flaky".to_owned());
    }
    if let Some(n) = args.jobs {
        flags.extend(["-j".to_owned(), n.to_string()]);
    }
    if let Some(n) = args.retries {
        flags.extend(["--retries".to_owned(), n.to_string()]);
    }
    // Node-local folders: the path as given, resolved on each node.
    if let Some(dir) = &args.workdir {
        flags.extend(["--workdir".to_owned(), dir.display().to_string()]);
    }
    if let Some(dir) = &args.cache {
        flags.extend(["--cache".to_owned(), dir.display().to_string()]);
    }
    Ok(flags)
}

fn in_rounds(args: &SubmitArgs) -> bool {
    args.rounds.until_decided || args.rounds.until_ci_width.is_some()
}

pub(super) fn submit(args: SubmitArgs) -> Result<Exit, CliError> {
    if let Some(dir) = &args.resume {
        return resubmit(&args, dir);
    }
    let (Some(suite), Some(total), Some(out)) = (&args.suite_path, args.shards, &args.out) else {
        return Err(CliError::usage(
            "name SUITE, --shards N and --out DIR (or --resume DIR)",
        ));
    };
    if !args.dry_run {
        require_client(args.engine)?;
    }
    if args.confidence.is_some() && !in_rounds(&args) {
        // A fixed run's shards decide nothing: its confidence is `compare`'s, after the merge.
        return Err(CliError::usage(
            "--confidence is for a run in rounds (--until-decided, --until-ci-width)",
        )
        .hint("a fixed run is compared after the merge: `deltabench compare --confidence LEVEL`"));
    }
    if in_rounds(&args)
        && let Some(parallelism) = args.parallelism.filter(|&p| p < total)
    {
        // Round r closes only when every shard recorded it: shards left queued never come.
        return Err(CliError::usage(format!(
            "--parallelism {parallelism} runs fewer pods than the {total} shards, and the shards of a run in rounds wait for each other after every round"
        ))
        .hint("leave --parallelism out (every shard at once), or give fewer --shards"));
    }
    if args.engine == Engine::K8s && args.k8s_image.is_none() {
        return Err(CliError::usage(
            "`submit k8s` needs --k8s-image IMAGE: an image holding deltabench, git, the suite (at --k8s-suite, default /suite) and what the agents need",
        ));
    }
    let suite = absolute(suite)?;
    if !suite.exists() {
        return Err(CliError::usage(format!(
            "SUITE {}: no such file or folder",
            suite.display()
        )));
    }
    // Loaded here, so a suite that does not load fails once, not in every shard.
    let loaded = crate::suite::load(&suite, args.agents.as_deref())?;
    let out = absolute(out)?;
    if out.join(SUBMISSION).exists() || shards::shard_dirs(&out).is_ok() {
        return Err(
            CliError::usage(format!("{} already holds a submitted run", out.display())).hint(
                format!(
                    "`deltabench submit {} --resume {}` finishes it; or choose another --out",
                    engine_name(args.engine),
                    out.display()
                ),
            ),
        );
    }
    if args.engine == Engine::Slurm && total > 1 {
        warn_node_local(&out);
    }
    fs::create_dir_all(out.join("logs")).map_err(io_err(&out))?;
    let name = k8s_name(&loaded.name);
    let mut submission = match args.engine {
        Engine::Slurm => write_slurm(&args, &suite, total, &out, &name)?,
        Engine::K8s => write_k8s(&args, total, &out, &name, &name)?,
    };
    write_submission(&out, &submission)?;
    if args.dry_run {
        print_stdout(&format!(
            "wrote {} and {} (not submitted: --dry-run)\n",
            submission.script.display(),
            submission.merge.display()
        ));
        return Ok(Exit::Ok);
    }
    let all: Vec<u32> = (1..=total).collect();
    match args.engine {
        Engine::Slurm => submit_slurm(&mut submission, &all, &out)?,
        Engine::K8s => submit_k8s(&mut submission, &out)?,
    }
    write_submission(&out, &submission)?;
    Ok(Exit::Ok)
}

/// Warns when `out` is on a node-local tmpfs: shards on other nodes would write elsewhere.
fn warn_node_local(out: &Path) {
    let existing = out.ancestors().find(|p| p.exists()).unwrap_or(out);
    let Ok(stat) = nix::sys::statfs::statfs(existing) else {
        return;
    };
    let kind = stat.filesystem_type();
    // ramfs (0x858458f6) has no constant in nix.
    if kind == nix::sys::statfs::TMPFS_MAGIC || kind.0 == 0x8584_58f6 {
        eprintln!(
            "warning: --out {} is on a node-local tmpfs: a shard that runs on another node writes into that node's own copy, which the merge here never sees; give a folder every node mounts (NFS, Lustre, a shared home) unless every shard runs on this node",
            out.display()
        );
    }
}

/// A job name (a Kubernetes RFC 1123 label) for the suite's jobs: `deltabench-<suite name>`.
fn k8s_name(suite: &str) -> String {
    let mut name: String = suite
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    name.truncate(40);
    let name = name.trim_matches('-');
    if name.is_empty() {
        "deltabench".into()
    } else {
        format!("deltabench-{name}")
    }
}

fn write_slurm(
    args: &SubmitArgs,
    suite: &Path,
    total: u32,
    out: &Path,
    name: &str,
) -> Result<Submission, CliError> {
    let binary = match &args.deltabench {
        Some(path) => absolute(path)?,
        None => std::env::current_exe().map_err(|e| {
            CliError::with_cause(ErrorKind::Harness, "cannot find this binary's path", e)
        })?,
    };
    let dir = out.join("slurm");
    fs::create_dir_all(&dir).map_err(io_err(&dir))?;
    let job = name.to_owned();
    let mut run: Vec<String> = vec![
        binary.display().to_string(),
        "run".into(),
        suite.display().to_string(),
        "--shard".into(),
        "auto".into(),
        "--shards".into(),
        total.to_string(),
        "--out".into(),
        out.display().to_string(),
    ];
    run.extend(run_flags(args, true)?);
    let mut resources = String::new();
    if let Some(cpus) = args.cpus {
        resources.push_str(&format!("#SBATCH --cpus-per-task={cpus}\n"));
    }
    if let Some(memory) = &args.memory {
        resources.push_str(&format!("#SBATCH --mem={memory}\n"));
    }
    let quoted = |words: &[String]| {
        words
            .iter()
            .map(|w| sh_quote(w))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let logs = out.join("logs");
    let script = format!(
        "#!/bin/sh\n\
         # Written by `deltabench submit slurm`: one array task per shard. Array task I runs shard\n\
         # I of {total} into {out}/shard-I-of-{total}/; a task run again finishes what its shard had\n\
         # recorded. Edit freely; resubmit some shards with: sbatch --array=2,3 {script}\n\
         #SBATCH --job-name={job}\n\
         #SBATCH --array=1-{total}\n\
         #SBATCH --output={logs}/shard-%a.out\n\
         {resources}\
         exec {run}\n",
        out = out.display(),
        script = dir.join("shards.sbatch").display(),
        logs = logs.display(),
        run = quoted(&run),
    );
    let merge = format!(
        "#!/bin/sh\n\
         # Written by `deltabench submit slurm`: merges the shards once every array task has ended\n\
         # (submitted with --dependency=afterany on the array). Exit 3 names a shard that stopped\n\
         # without finishing: `deltabench submit slurm --resume {out}` resubmits it.\n\
         #SBATCH --job-name={job}-merge\n\
         #SBATCH --output={logs}/merge-%j.out\n\
         exec {merge}\n",
        out = out.display(),
        logs = logs.display(),
        merge = quoted(&[
            binary.display().to_string(),
            "merge".into(),
            out.display().to_string()
        ]),
    );
    let (script_path, merge_path) = (dir.join("shards.sbatch"), dir.join("merge.sbatch"));
    fs::write(&script_path, script).map_err(io_err(&script_path))?;
    fs::write(&merge_path, merge).map_err(io_err(&merge_path))?;
    Ok(Submission {
        engine: Engine::Slurm,
        shards: total,
        suite: suite.display().to_string(),
        script: script_path,
        merge: merge_path,
        sbatch_args: args.sbatch_args.clone(),
        namespace: None,
        name: job,
        jobs: Vec::new(),
    })
}

/// Runs `sbatch --parsable ARGS` and returns the job id.
fn sbatch(args: &[String]) -> Result<String, CliError> {
    let output = Command::new("sbatch")
        .arg("--parsable")
        .args(args)
        .output()
        .map_err(|e| CliError::with_cause(ErrorKind::Harness, "cannot run sbatch", e))?;
    if !output.status.success() {
        return Err(CliError::harness(format!(
            "sbatch {} failed ({}): {}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    // `--parsable` prints `id` or `id;cluster`.
    let text = String::from_utf8_lossy(&output.stdout);
    let id = text.trim().split(';').next().unwrap_or_default().to_owned();
    if id.is_empty() {
        return Err(CliError::harness("sbatch printed no job id"));
    }
    Ok(id)
}

/// A list of shard numbers as Slurm's array syntax: `1-4`, `2,3`.
fn array_spec(shards: &[u32]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < shards.len() {
        let start = shards[i];
        let mut end = start;
        while i + 1 < shards.len() && shards[i + 1] == end + 1 {
            i += 1;
            end = shards[i];
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    parts.join(",")
}

fn submit_slurm(submission: &mut Submission, shards: &[u32], out: &Path) -> Result<(), CliError> {
    let spec = array_spec(shards);
    let mut args = vec![format!("--array={spec}")];
    args.extend(submission.sbatch_args.iter().cloned());
    args.push(submission.script.display().to_string());
    let array = sbatch(&args)?;
    submission.jobs.push(SubmittedJob {
        id: array.clone(),
        shards: spec.clone(),
        merge: false,
    });
    let mut args = vec![format!("--dependency=afterany:{array}")];
    args.extend(submission.sbatch_args.iter().cloned());
    args.push(submission.merge.display().to_string());
    let merge = sbatch(&args)?;
    submission.jobs.push(SubmittedJob {
        id: merge.clone(),
        shards: String::new(),
        merge: true,
    });
    print_stdout(&format!(
        "submitted job array {array} (shards {spec} of {total}) and merge job {merge} (after every shard has ended)\n\
         watch:   deltabench status {out}    (or: squeue -j {array},{merge})\n\
         result:  {out}/merged once job {merge} has run (its log: {out}/logs/merge-{merge}.out)\n\
         a shard that stopped without finishing: deltabench submit slurm --resume {out}\n",
        total = submission.shards,
        out = out.display(),
    ));
    Ok(())
}

/// A JSON string, which is also a YAML scalar.
fn y(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_default()
}

fn write_k8s(
    args: &SubmitArgs,
    total: u32,
    out: &Path,
    name: &str,
    base_name: &str,
) -> Result<Submission, CliError> {
    let dir = out.join("k8s");
    fs::create_dir_all(&dir).map_err(io_err(&dir))?;
    let mut run: Vec<String> = vec![
        "deltabench".into(),
        "run".into(),
        args.k8s_suite.clone(),
        "--shard".into(),
        "auto".into(),
        "--shards".into(),
        total.to_string(),
        "--out".into(),
        args.mount.clone(),
    ];
    run.extend(run_flags(args, false)?);
    let job = K8sJob::new(args, base_name);
    let suffix = if name == base_name {
        String::new()
    } else {
        format!(
            "-{}",
            name.trim_start_matches(base_name).trim_start_matches('-')
        )
    };
    let (script_path, merge_path) = (
        dir.join(format!("shards{suffix}.yaml")),
        dir.join("merge.yaml"),
    );
    fs::write(&script_path, job.shards(args, name, total, &run)).map_err(io_err(&script_path))?;
    fs::write(&merge_path, job.merge(args, base_name)).map_err(io_err(&merge_path))?;
    Ok(Submission {
        engine: Engine::K8s,
        shards: total,
        suite: args.k8s_suite.clone(),
        script: script_path,
        merge: merge_path,
        sbatch_args: Vec::new(),
        namespace: args.namespace.clone(),
        name: base_name.to_owned(),
        jobs: Vec::new(),
    })
}

/// A YAML flow list of JSON strings.
fn yaml_list(words: &[String]) -> String {
    format!(
        "[{}]",
        words.iter().map(|w| y(w)).collect::<Vec<_>>().join(", ")
    )
}

/// Slurm's memory size (`8G`) as Kubernetes spells it (`8Gi`).
fn k8s_memory(memory: &str) -> String {
    let m = memory.trim();
    match m.chars().last() {
        Some('K' | 'M' | 'G' | 'T') => format!("{m}i"),
        _ => m.to_owned(),
    }
}

/// The container's `resources:` block for `--cpus` and `--memory` (empty with neither).
fn k8s_resources(cpus: Option<u32>, memory: Option<&str>) -> String {
    let mut resources = String::new();
    if cpus.is_none() && memory.is_none() {
        return resources;
    }
    resources.push_str("          resources:\n            requests:\n");
    if let Some(cpus) = cpus {
        resources.push_str(&format!("              cpu: {}\n", y(&cpus.to_string())));
    }
    if let Some(memory) = memory.map(k8s_memory) {
        resources.push_str(&format!("              memory: {}\n", y(&memory)));
        resources.push_str(&format!(
            "            limits:\n              memory: {}\n",
            y(&memory)
        ));
    }
    resources
}

/// What the shards' Job and the merge Job share: image, namespace, labels and the claim.
struct K8sJob {
    image: String,
    namespace: String,
    labels: String,
    pod_labels: String,
    volume: String,
}

impl K8sJob {
    fn new(args: &SubmitArgs, base_name: &str) -> Self {
        let namespace = args
            .namespace
            .as_ref()
            .map(|ns| format!("  namespace: {}\n", y(ns)))
            .unwrap_or_default();
        let labels = format!(
            "    app.kubernetes.io/name: deltabench\n    deltabench/run: {}\n",
            y(base_name)
        );
        let pod_labels = labels
            .replace("\n    ", "\n        ")
            .replacen("    ", "        ", 1);
        let volume = format!(
            "          volumeMounts:\n            - name: results\n              mountPath: {mount}\n      volumes:\n        - name: results\n          persistentVolumeClaim:\n            claimName: {claim}\n",
            mount = y(&args.mount),
            claim = y(&args.claim),
        );
        Self {
            image: y(args.k8s_image.as_deref().unwrap_or_default()),
            namespace,
            labels,
            pod_labels,
            volume,
        }
    }

    /// The Indexed Job whose pod I runs shard I+1 of `total` with the command `run`.
    fn shards(&self, args: &SubmitArgs, name: &str, total: u32, run: &[String]) -> String {
        let Self {
            image,
            namespace,
            labels,
            pod_labels,
            volume,
        } = self;
        let parallelism = args.parallelism.unwrap_or(total).min(total);
        let resources = k8s_resources(args.cpus, args.memory.as_deref());
        format!(
            "# Written by `deltabench submit k8s`: pod JOB_COMPLETION_INDEX=I runs shard I+1 of {total} into\n\
             # {mount}/shard-<I+1>-of-{total}/ on the claim {claim}; a pod retried finishes what its shard\n\
             # had recorded. Edit freely, then: kubectl apply -f shards.yaml\n\
             apiVersion: batch/v1\n\
             kind: Job\n\
             metadata:\n  name: {name}\n{namespace}  labels:\n{labels}\
             spec:\n\
             \x20 completions: {total}\n\
             \x20 parallelism: {parallelism}\n\
             \x20 completionMode: Indexed\n\
             \x20 backoffLimit: {backoff}\n\
             \x20 template:\n\
             \x20   metadata:\n      labels:\n{pod_labels}\
             \x20   spec:\n\
             \x20     restartPolicy: Never\n\
             \x20     containers:\n\
             \x20       - name: shard\n\
             \x20         image: {image}\n\
             \x20         command: {run}\n\
             \x20         env:\n\
             \x20           - name: DELTABENCH_SHARDS\n\
             \x20             value: {total_s}\n\
             {resources}{volume}",
            mount = args.mount,
            claim = args.claim,
            name = y(name),
            run = yaml_list(run),
            backoff = total * 2,
            total_s = y(&total.to_string()),
        )
    }

    /// The Job that merges the shards once every one has ended.
    fn merge(&self, args: &SubmitArgs, base_name: &str) -> String {
        let Self {
            image,
            namespace,
            labels,
            pod_labels,
            volume,
        } = self;
        format!(
            "# Written by `deltabench submit k8s`: merges the shards into {mount}/merged. Apply it once\n\
             # every shard has ended (delete an earlier merge Job first to merge again):\n\
             #   kubectl wait --for=condition=complete job/{base_name} && kubectl apply -f merge.yaml\n\
             apiVersion: batch/v1\n\
             kind: Job\n\
             metadata:\n  name: {merge_name_q}\n{namespace}  labels:\n{labels}\
             spec:\n\
             \x20 backoffLimit: 0\n\
             \x20 template:\n\
             \x20   metadata:\n      labels:\n{pod_labels}\
             \x20   spec:\n\
             \x20     restartPolicy: Never\n\
             \x20     containers:\n\
             \x20       - name: merge\n\
             \x20         image: {image}\n\
             \x20         command: {cmd}\n\
             {volume}",
            mount = args.mount,
            merge_name_q = y(&format!("{base_name}-merge")),
            cmd = yaml_list(&["deltabench".into(), "merge".into(), args.mount.clone()]),
        )
    }
}

fn kubectl(args: &[String]) -> Result<String, CliError> {
    let output = Command::new("kubectl")
        .args(args)
        .output()
        .map_err(|e| CliError::with_cause(ErrorKind::Harness, "cannot run kubectl", e))?;
    if !output.status.success() {
        return Err(CliError::harness(format!(
            "kubectl {} failed ({}): {}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

fn submit_k8s(submission: &mut Submission, out: &Path) -> Result<(), CliError> {
    let mut args = vec!["apply".to_owned(), "-f".to_owned()];
    args.push(submission.script.display().to_string());
    if let Some(ns) = &submission.namespace {
        args.extend(["--namespace".to_owned(), ns.clone()]);
    }
    let applied = kubectl(&args)?;
    let job = applied
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_owned();
    submission.jobs.push(SubmittedJob {
        id: job.clone(),
        shards: format!("1-{}", submission.shards),
        merge: false,
    });
    let ns = submission
        .namespace
        .as_ref()
        .map(|ns| format!(" -n {ns}"))
        .unwrap_or_default();
    print_stdout(&format!(
        "applied {job} ({total} shards)\n\
         watch:  kubectl get pods{ns} -l deltabench/run={name}   (and `deltabench status DIR` where the claim is mounted)\n\
         merge, once every shard has ended:\n  kubectl wait{ns} --for=condition=complete --timeout=24h {job} && kubectl delete{ns} --ignore-not-found job/{name}-merge && kubectl apply{ns} -f {merge}\n\
         a shard that stopped without finishing: deltabench submit k8s --resume {out}\n",
        total = submission.shards,
        name = submission.name,
        merge = submission.merge.display(),
        out = out.display(),
    ));
    Ok(())
}

/// `submit ENGINE --resume DIR`: the shards that stopped without finishing, submitted again.
fn resubmit(args: &SubmitArgs, dir: &Path) -> Result<Exit, CliError> {
    let Some(mut submission) = read_submission(dir) else {
        return Err(CliError::usage(format!(
            "{} holds no {SUBMISSION}: it was not written by `deltabench submit`",
            dir.display()
        ))
        .hint("finish a shard folder with `deltabench resume SHARD_DIR`"));
    };
    if submission.engine != args.engine {
        return Err(CliError::usage(format!(
            "{} was submitted to {}, not {}: use `deltabench submit {} --resume {}`",
            dir.display(),
            submission.engine,
            engine_name(args.engine),
            submission.engine,
            dir.display()
        )));
    }
    if !args.dry_run {
        require_client(args.engine)?;
    }
    let live = engine_live(&submission);
    let progress = shards::progress(dir, submission.shards, &|s| live.contains_key(&s.index));
    let running: Vec<String> = progress
        .iter()
        .filter(|p| p.state == ShardState::Running)
        .map(|p| p.shard.to_string())
        .collect();
    let redo: Vec<u32> = progress
        .iter()
        .filter(|p| matches!(p.state, ShardState::NotStarted | ShardState::Stopped))
        .map(|p| p.shard.index)
        .collect();
    if !running.is_empty() {
        eprintln!(
            "left alone, still queued or running: shard {}",
            running.join(", ")
        );
    }
    if redo.is_empty() {
        print_stdout(&format!(
            "no shard of {} stopped without finishing: nothing to resubmit{}\n",
            dir.display(),
            if running.is_empty() {
                format!("; `deltabench merge {}` merges them", dir.display())
            } else {
                String::new()
            }
        ));
        return Ok(Exit::Ok);
    }
    let list: Vec<String> = redo
        .iter()
        .map(|&index| {
            Shard {
                index,
                total: submission.shards,
            }
            .to_string()
        })
        .collect();
    eprintln!("resubmitting shard {}", list.join(", "));
    match args.engine {
        Engine::Slurm => {
            if args.dry_run {
                print_stdout(&format!(
                    "would run: sbatch --array={} {}\n",
                    array_spec(&redo),
                    submission.script.display()
                ));
                return Ok(Exit::Ok);
            }
            submit_slurm(&mut submission, &redo, dir)?;
        }
        Engine::K8s => {
            // An Indexed Job runs every index: the finished shards' pods find their run
            // complete and end at once.
            let round = submission.jobs.iter().filter(|j| !j.merge).count() + 1;
            let name = format!("{}-r{round}", submission.name);
            let base = submission.name.clone();
            let mut again = write_k8s_again(&submission, dir, &name, &base)?;
            if args.dry_run {
                print_stdout(&format!("wrote {}\n", again.script.display()));
                return Ok(Exit::Ok);
            }
            submit_k8s(&mut again, dir)?;
            submission.jobs.extend(again.jobs);
        }
    }
    write_submission(dir, &submission)?;
    Ok(Exit::Ok)
}

/// A copy of the submitted Indexed Job under another name (a Job's spec cannot be applied
/// twice under one name once it ran).
fn write_k8s_again(
    submission: &Submission,
    dir: &Path,
    name: &str,
    base: &str,
) -> Result<Submission, CliError> {
    let text = fs::read_to_string(&submission.script).map_err(|e| {
        CliError::with_cause(
            ErrorKind::Usage,
            format!("cannot read {}", submission.script.display()),
            e,
        )
    })?;
    let from = format!("  name: {}\n", y(base));
    let renamed = text.replacen(&from, &format!("  name: {}\n", y(name)), 1);
    let path = dir.join("k8s").join(format!("{name}.yaml"));
    fs::write(&path, renamed).map_err(io_err(&path))?;
    Ok(Submission {
        script: path,
        jobs: Vec::new(),
        ..submission.clone()
    })
}

/// The shards the engine has queued or running, with its state (Slurm's `squeue`); empty when
/// the engine cannot be asked.
pub(super) fn engine_live(submission: &Submission) -> std::collections::BTreeMap<u32, String> {
    let mut live = std::collections::BTreeMap::new();
    if submission.engine != Engine::Slurm || on_path("squeue").is_none() {
        return live;
    }
    let ids: Vec<&str> = submission
        .jobs
        .iter()
        .filter(|j| !j.merge)
        .map(|j| j.id.as_str())
        .collect();
    if ids.is_empty() {
        return live;
    }
    let Ok(output) = Command::new("squeue")
        .args(["-h", "-r", "-o", "%K %T", "-j", &ids.join(",")])
        .output()
    else {
        return live;
    };
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let mut words = line.split_whitespace();
        if let (Some(index), Some(state)) = (words.next(), words.next())
            && let Ok(index) = index.parse::<u32>()
            && matches!(
                state,
                "PENDING"
                    | "RUNNING"
                    | "CONFIGURING"
                    | "COMPLETING"
                    | "REQUEUED"
                    | "RESIZING"
                    | "SUSPENDED"
            )
        {
            live.insert(index, state.to_lowercase());
        }
    }
    live
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engine_keeps_its_json_spelling() {
        for (engine, json) in [(Engine::Slurm, "\"slurm\""), (Engine::K8s, "\"k8s\"")] {
            assert_eq!(serde_json::to_string(&engine).unwrap(), json);
            assert_eq!(serde_json::from_str::<Engine>(json).unwrap(), engine);
            assert_eq!(format!("\"{engine}\""), json);
        }
    }

    #[test]
    fn k8s_resources_follow_cpus_and_memory() {
        assert_eq!(k8s_memory(" 8G "), "8Gi");
        assert_eq!(k8s_memory("512Mi"), "512Mi");
        assert_eq!(k8s_resources(None, None), "");
        assert_eq!(
            k8s_resources(Some(2), None),
            "          resources:\n            requests:\n              cpu: \"2\"\n"
        );
        assert!(
            k8s_resources(None, Some("4G"))
                .ends_with("            limits:\n              memory: \"4Gi\"\n")
        );
    }

    #[test]
    fn arrays_and_words() {
        assert_eq!(array_spec(&[1, 2, 3, 4]), "1-4");
        assert_eq!(array_spec(&[2, 3, 7]), "2-3,7");
        assert_eq!(array_spec(&[5]), "5");
        assert_eq!(sh_quote("/a/b"), "/a/b");
        assert_eq!(sh_quote("it's"), r"'it'\''s'");
        assert_eq!(k8s_name("My Suite"), "deltabench-my-suite");
    }
}
