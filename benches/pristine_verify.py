#!/usr/bin/env python3
"""The cost of verifying in a fresh workspace, side by side with verifying in the agent's own.

    python3 benches/pristine_verify.py --baseline-bin OLD_DELTABENCH [--trials N]

OLD_DELTABENCH is a build from before the pristine verify (e.g. commit 0bff34b:
`git worktree add /tmp/old 0bff34b && cargo build --release --manifest-path /tmp/old/Cargo.toml`).
Both binaries run the same suite, one after the other, on generated repos of 1k and 10k files on
tmpfs: a command agent edits one file, the verify command checks it. Reported per trial (median
of the trial records' phase timings): the probe phase (diff + verify; now also the fresh
workspace, its provisioning, the diff applied and its disposal) and the whole trial.

Not a test: numbers on a shared machine are noisy; read the differences and ratios.
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NEW = os.path.join(ROOT, "target", "release", "deltabench")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from scale import make_repo  # noqa: E402  (the same generated repos as the scale bench)


def arg(name, default=None):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


def run(binary, d, label, trials):
    suite = os.path.join(d, "suite.yaml")
    with open(suite, "w") as f:
        f.write("name: bench\nrepo: repo\nagents:\n  edit: {kind: command, run: \"echo fixed >> d0/f0.txt\"}\n"
                "tasks:\n  - {id: t, instruction: x, verify: \"grep -q fixed d0/f0.txt\"}\n")
    work, out = os.path.join(d, f"work-{label}"), os.path.join(d, f"out-{label}")
    os.makedirs(work)
    cache = os.path.join(d, f"cache-{label}")
    start = time.perf_counter()
    subprocess.run([binary, "run", suite, "--agent", "edit", "--trials", str(trials), "-j", "1",
                    "--workdir", work, "--out", out], check=True, env=dict(os.environ, DELTABENCH_CACHE=cache),
                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wall = time.perf_counter() - start
    records = [json.loads(l) for l in open(os.path.join(out, "trials.jsonl"))]
    assert all(r["outcome"] == "pass" for r in records), records
    # The first trial builds the template; the rest are the steady state.
    records = sorted(records, key=lambda r: r["trial"])[1:]
    probe = statistics.median(sum(us for n, us in r["phases"] if n == "probe") / 1000 for r in records)
    trial = statistics.median(r["duration_ms"] for r in records)
    return probe, trial, wall


def main():
    old = arg("--baseline-bin")
    if not old:
        sys.exit(__doc__)
    trials = int(arg("--trials", "21"))
    print(f"# pristine verify: {trials} trials per row, -j1, tmpfs; ms per trial (median)")
    print(f"{'files':>6} {'probe old':>10} {'probe new':>10} {'extra':>7} {'trial old':>10} {'trial new':>10} {'new/old':>8}")
    for files in [1000, 10000]:
        d = tempfile.mkdtemp(prefix="db-pristine-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
        try:
            make_repo(os.path.join(d, "repo"), files)
            p_old, t_old, _ = run(old, d, "old", trials)
            p_new, t_new, _ = run(NEW, d, "new", trials)
            print(f"{files:>6} {p_old:>10.1f} {p_new:>10.1f} {p_new - p_old:>7.1f} {t_old:>10.1f} {t_new:>10.1f} {t_new / t_old:>8.2f}")
        finally:
            subprocess.run(["bash", "-c", f"grep -o ' {d}[^ ]*merged' /proc/mounts | xargs -r -n1 umount -l"])
            shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
