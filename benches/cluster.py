#!/usr/bin/env python3
"""Cluster benchmarks: a sharded run through a real single-node Slurm, and merging many shards.

    sudo python3 benches/cluster.py     # root: it starts Slurm's daemons (tests/slurm/cluster.sh)

1. A 200-trial suite (100 tasks x oracle and noop, a tiny repo, tmpfs) as one `run -j 2`, then
   through `deltabench submit slurm` as 1 shard (-j 2 in it), 4 and 16 shards (-j 1 each; the
   node runs at most 8 tasks at once), wall time from submit until the merge job has ended, as a
   ratio to the `run -j 2` measured before and after (their mean; their spread is the noise);
   and the time of `deltabench merge DIR` of each set on its own.
2. `merge` of 100 shards of 100 trials each (10,000 trials, one agent, 1,000 tasks x 10
   trials), the shards written from one real trial's files so that only the merge is measured:
   wall time and peak RSS (/usr/bin/time), merging into an empty folder and merging again over
   the earlier merge (the idempotent path).

BIN is target/release/deltabench (CARGO_TARGET_DIR honoured); DELTABENCH_BIN overrides.
Not a test: numbers on a shared 2-core machine are noisy; read the ratios.
"""
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
BIN = os.environ.get("DELTABENCH_BIN", os.path.join(TARGET, "release", "deltabench"))
GIT_ENV = dict(os.environ, GIT_CONFIG_GLOBAL="/dev/null", GIT_CONFIG_NOSYSTEM="1",
               GIT_AUTHOR_NAME="b", GIT_AUTHOR_EMAIL="b@b", GIT_COMMITTER_NAME="b", GIT_COMMITTER_EMAIL="b@b")
for name in ["SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_COUNT",
             "JOB_COMPLETION_INDEX", "DELTABENCH_SHARD", "DELTABENCH_SHARDS"]:
    GIT_ENV.pop(name, None)


def sh(cmd, cwd=None, env=None, check=True):
    return subprocess.run(cmd, cwd=cwd, env=env or GIT_ENV, shell=isinstance(cmd, str), check=check,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def suite(root, tasks):
    os.makedirs(os.path.join(root, "repo"))
    sh("git init -q -b main . && echo hi > README && git add -A && git commit -qm c0", cwd=os.path.join(root, "repo"))
    lines = ["name: bench", "repo: repo", "agents:", "  oracle: {kind: oracle}", "  noop: {kind: noop}", "tasks:"]
    for i in range(tasks):
        d = os.path.join(root, "solutions", f"t{i}")
        os.makedirs(d)
        with open(os.path.join(d, f"t{i}.txt"), "w") as f:
            f.write("done\n")
        lines.append(f'  - {{id: t{i}, instruction: write t{i}.txt, verify: "test -f t{i}.txt", solution: solutions/t{i}}}')
    with open(os.path.join(root, "suite.yaml"), "w") as f:
        f.write("\n".join(lines) + "\n")


def squeue_empty(env, jobs):
    out = sh(["squeue", "-h", "-r", "-o", "%i", "-j", ",".join(jobs)], env=env, check=False).stdout
    return not out.strip()


def submit_and_wait(root, env, shards, jobs):
    out = os.path.join(root, f"sub-{shards}")
    start = time.monotonic()
    p = sh([BIN, "submit", "slurm", "suite.yaml", "--shards", str(shards), "--out", out, "-j", str(jobs),
            "--workdir", os.path.join(root, "work")], cwd=root, env=env)
    words = p.stdout.split()
    array, merge = words[3], words[words.index("merge") + 2]
    while not squeue_empty(env, [array, merge]):
        time.sleep(0.1)
    wall = time.monotonic() - start
    with open(os.path.join(out, "merged", "trials.jsonl")) as f:
        n = sum(1 for _ in f)
    assert n == 200, f"{shards} shards merged {n} trials"
    start = time.monotonic()
    sh([BIN, "merge", out, "--out", os.path.join(out, "again")], cwd=root, env=env)
    return wall, time.monotonic() - start


def section1(tmp):
    root = os.path.join(tmp, "s1")
    os.makedirs(os.path.join(root, "work"))
    suite(root, 100)
    state = os.path.join(tmp, "slurm")
    up = sh(["bash", os.path.join(ROOT, "tests/slurm/cluster.sh"), "up", state],
            env=dict(GIT_ENV, DELTABENCH_SLURM_PORT="16917"), check=False)
    if up.returncode != 0:
        sys.exit(f"Slurm did not start: {up.stderr}")
    env = dict(GIT_ENV, SLURM_CONF=os.path.join(state, "slurm.conf"),
               DELTABENCH_CACHE=os.path.join(root, "cache"))
    try:
        runs = []

        def plain(k):
            start = time.monotonic()
            sh([BIN, "run", "suite.yaml", "-j", "2", "--workdir", "work", "--out", f"plain-{k}"], cwd=root, env=env)
            runs.append(time.monotonic() - start)

        plain(0)  # warm: the cache's source and template
        runs.clear()
        plain(1)
        rows = []
        for shards, jobs in [(1, 2), (4, 1), (16, 1)]:
            wall, merge = submit_and_wait(root, env, shards, jobs)
            rows.append((shards, jobs, wall, merge))
        plain(2)
    finally:
        sh(["bash", os.path.join(ROOT, "tests/slurm/cluster.sh"), "down", state], check=False)
    base = statistics.mean(runs)
    spread = abs(runs[0] - runs[1]) / base
    print(f"\n## 1. 200 trials: `run -j 2` {base:.1f} s (two runs, spread {spread:.0%})")
    print("| shards | -j per shard | submit to merged (s) | ratio to run -j 2 | merge DIR alone (s) |")
    print("|---|---|---|---|---|")
    for shards, jobs, wall, merge in rows:
        print(f"| {shards} | {jobs} | {wall:.1f} | {wall / base:.2f}x | {merge:.2f} |")


def shard_of(task, agent, trial, total):
    digest = hashlib.sha256(f"{task}\0{agent}\0{trial}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % total + 1


def section2(tmp):
    root = os.path.join(tmp, "s2")
    os.makedirs(os.path.join(root, "work"))
    suite(root, 1)
    sh([BIN, "run", "suite.yaml", "--agent", "noop", "--workdir", "work", "--out", "one", "--shard", "1/1"], cwd=root)
    with open(os.path.join(root, "one", "manifest.json")) as f:
        manifest = json.load(f)
    with open(os.path.join(root, "one", "trials.jsonl")) as f:
        record = json.loads(f.readline())
    trial_dir = os.path.join(root, "one", "trials", "t0", "noop", "1")
    total, tasks, trials = 100, 1000, 10
    task_ids = [f"t{i}" for i in range(tasks)]
    manifest.update(tasks=task_ids, trials_per_task=trials)
    owned = {i: [] for i in range(1, total + 1)}
    for t in task_ids:
        for n in range(1, trials + 1):
            owned[shard_of(t, "noop", n, total)].append((t, n))
    parent = os.path.join(root, "set")
    for i, keys in owned.items():
        d = os.path.join(parent, f"shard-{i}-of-{total}")
        os.makedirs(os.path.join(d, "trials"))
        with open(os.path.join(d, "manifest.json"), "w") as f:
            json.dump(dict(manifest, shard={"index": i, "total": total}, planned_trials=len(keys)), f)
        with open(os.path.join(d, "trials.jsonl"), "w") as f:
            for t, n in keys:
                f.write(json.dumps(dict(record, task=t, trial=n)) + "\n")
                shutil.copytree(trial_dir, os.path.join(d, "trials", t, "noop", str(n)), symlinks=True)
    sizes = [len(k) for k in owned.values()]
    files = sum(len(fs) for _, _, fs in os.walk(trial_dir))
    print(f"\n## 2. merge of {total} shards, {sum(sizes)} trials ({min(sizes)}-{max(sizes)} per shard, {files} files per trial)")
    print("| merge | wall (s) | peak RSS (MiB) |")
    print("|---|---|---|")
    for label in ["into an empty folder", "again, over that merge"]:
        p = sh(["/usr/bin/time", "-f", "%e %M", BIN, "merge", "set"], cwd=root)
        wall, rss = p.stderr.strip().splitlines()[-1].split()
        print(f"| {label} | {float(wall):.2f} | {int(rss) / 1024:.1f} |")
        assert "merged 10000 of 10000 planned trials" in p.stdout, p.stdout[-300:]


def main():
    if not os.access(BIN, os.X_OK):
        sys.exit(f"no binary at {BIN}: cargo build --release (or set DELTABENCH_BIN)")
    base = "/dev/shm" if os.path.isdir("/dev/shm") else None
    with tempfile.TemporaryDirectory(prefix="deltabench-cluster-bench-", dir=base) as tmp:
        print(f"binary: {BIN}; {os.cpu_count()} cores")
        if "--merge-only" not in sys.argv:
            section1(tmp)
        section2(tmp)


if __name__ == "__main__":
    main()
