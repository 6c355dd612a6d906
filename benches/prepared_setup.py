#!/usr/bin/env python3
"""Prepared setup against setup in every trial, side by side in one run.

    python3 benches/prepared_setup.py [--trials N] [--functions N]

A generated cargo workspace: a `heavy` crate (N generated functions, seconds to compile) and an
`app` crate on top of it whose `answer()` is off by one. The task's setup builds everything
(`cargo build --offline --tests`); a command agent fixes `app`; the verify command runs `cargo
test`. The same suite runs twice with the release binary, -j1, on tmpfs: `prepare: false` (setup
in each trial's two workspaces) and `prepare: true` (setup once, in the template). Reported per
trial (medians; the first trial, which builds the template, reported apart): provisioning (setup
included), the verify command, the whole trial, and the crates the verify command compiled.

Not a test: numbers on a shared machine are noisy; read the ratios. Needs root (overlay mounts).
"""
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "target", "release", "deltabench")


def arg(name, default):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def make_repo(repo, functions):
    write(os.path.join(repo, "Cargo.toml"), '[workspace]\nmembers = ["heavy", "app"]\nresolver = "2"\n')
    write(os.path.join(repo, ".gitignore"), "/target\n")
    write(os.path.join(repo, "heavy/Cargo.toml"), '[package]\nname = "heavy"\nversion = "0.1.0"\nedition = "2021"\n')
    body = ["pub trait Step { fn step(&self, x: u64) -> u64; }"]
    for i in range(functions):
        body.append(
            f"pub struct S{i}(pub u64);\n"
            f"impl Step for S{i} {{ fn step(&self, x: u64) -> u64 {{ "
            f"let v: Vec<u64> = (0..(x % 7 + {i % 5})).map(|k| k.wrapping_mul(self.0 ^ {i})).collect(); "
            f"v.iter().fold(x, |a, b| a.rotate_left(3) ^ b) }} }}\n"
            f"pub fn f{i}(x: u64) -> u64 {{ match x % 4 {{ 0 => S{i}(x).step(x), 1 => x.wrapping_add({i}), "
            f"2 => format!(\"{{x}}-{i}\").len() as u64, _ => S{i}({i}).step(x ^ 1) }} }}"
        )
    body.append("pub fn all(x: u64) -> u64 { " + " ^ ".join(f"f{i}(x)" for i in range(functions)) + " }")
    write(os.path.join(repo, "heavy/src/lib.rs"), "\n".join(body) + "\n")
    write(os.path.join(repo, "app/Cargo.toml"),
          '[package]\nname = "app"\nversion = "0.1.0"\nedition = "2021"\n\n[dependencies]\nheavy = { path = "../heavy" }\n')
    write(os.path.join(repo, "app/src/lib.rs"), "pub fn answer() -> u64 {\n    heavy::all(0) * 0 + 41\n}\n")
    write(os.path.join(repo, "app/tests/answer.rs"), "#[test]\nfn answers() {\n    assert_eq!(app::answer(), 42);\n}\n")
    git = ["git", "-C", repo, "-c", "user.name=b", "-c", "user.email=b@b"]
    subprocess.run(["git", "init", "-q", "-b", "main", repo], check=True)
    subprocess.run(git + ["add", "-A"], check=True)
    subprocess.run(git + ["commit", "-q", "-m", "base"], check=True)


def run(d, prepare, trials):
    label = "prepared" if prepare else "per-trial"
    suite = os.path.join(d, f"suite-{label}.yaml")
    write(suite,
          "name: bench\nrepo: repo\nagents:\n"
          "  fix: {kind: command, run: \"sed -i s/41/42/ app/src/lib.rs\"}\n"
          "tasks:\n  - id: t\n    instruction: fix answer\n"
          f"    prepare: {'true' if prepare else 'false'}\n"
          "    setup: cargo build --offline --tests --quiet\n"
          "    verify: {run: cargo test --offline, timeout: 10m}\n"
          "    timeout: 10m\n")
    work, out = os.path.join(d, f"work-{label}"), os.path.join(d, f"out-{label}")
    os.makedirs(work)
    env = dict(os.environ, DELTABENCH_CACHE=os.path.join(d, f"cache-{label}"))
    env.pop("CARGO_TARGET_DIR", None)
    start = time.perf_counter()
    subprocess.run([BIN, "run", suite, "--agent", "fix", "--trials", str(trials), "-j", "1",
                    "--workdir", work, "--out", out], check=True, env=env,
                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wall = time.perf_counter() - start
    records = sorted((json.loads(l) for l in open(os.path.join(out, "trials.jsonl"))), key=lambda r: r["trial"])
    assert all(r["outcome"] == "pass" for r in records), records

    def figures(r):
        log = open(os.path.join(out, "trials", "t", "fix", str(r["trial"]), "verify.log")).read()
        return {
            "provision": sum(us for n, us in r["phases"] if n == "provision") / 1e6,
            "probe": sum(us for n, us in r["phases"] if n == "probe") / 1e6,
            "verify": r["verify"]["duration_ms"] / 1e3,
            "trial": r["duration_ms"] / 1e3,
            "compiled": len(re.findall(r"^\s*Compiling ", log, re.M)),
        }

    first, rest = figures(records[0]), [figures(r) for r in records[1:]]
    median = {k: statistics.median(f[k] for f in rest) for k in first}
    return first, median, wall


def main():
    trials = int(arg("--trials", "5"))
    functions = int(arg("--functions", "400"))
    subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT, check=True)
    d = tempfile.mkdtemp(prefix="db-prepared-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    try:
        make_repo(os.path.join(d, "repo"), functions)
        rows = [("per-trial",) + run(d, False, trials), ("prepared",) + run(d, True, trials)]
        print(f"# prepared setup: {trials} trials per row, -j1, tmpfs; seconds per trial "
              f"(median of trials 2..{trials}; trial 1 apart)")
        print(f"{'setup':>10} {'provision':>10} {'verify':>7} {'compiled':>9} {'probe':>7} {'trial':>7} "
              f"{'trial 1':>8} {'run wall':>9}")
        for label, first, m, wall in rows:
            print(f"{label:>10} {m['provision']:>10.2f} {m['verify']:>7.2f} {m['compiled']:>9.0f} "
                  f"{m['probe']:>7.2f} {m['trial']:>7.2f} {first['trial']:>8.2f} {wall:>9.1f}")
        per, prep = rows[0][2], rows[1][2]
        print(f"per-trial / prepared, whole trial: {per['trial'] / prep['trial']:.1f}x")
    finally:
        subprocess.run(["bash", "-c", f"grep -o ' {d}[^ ]*merged' /proc/mounts | xargs -r -n1 umount -l"])
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
