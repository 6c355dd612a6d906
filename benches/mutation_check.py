#!/usr/bin/env python3
"""What the mutation check costs a passing trial, side by side with the same run without it.

    python3 benches/mutation_check.py [--trials N] [--bin DELTABENCH]

Runs the demo suite (suites/demo, validated: its lock holds each task's biting mutants) with the
`oracle` agent, whose every trial passes, N times per task, -j1, on tmpfs: once as shipped
(`mutants: 3`, so each passing trial runs a second verify run with a sample of mutants), once with
`mutants: 0` under `defaults:` (the check off). The two runs alternate, ABAB, so drift on a shared
machine hits both. Reported per trial (median of the records' phase timings): the probe phase
(diff, verify, and the mutant run when on) and the whole trial.

With --row, the same on one real SWE-bench row instead of the demo:

    python3 benches/mutation_check.py --row ID --rows ROWS.jsonl --repos DIR --env ENV.yaml
        [--trials N] [--bin DELTABENCH]

imports row ID of ROWS.jsonl with `deltabench import swebench --repos DIR --env ENV.yaml` (the env
file gives its test command on this machine: docs/import.md, "Real rows on this machine"),
validates it (the lock's biting mutants), then runs it as above. Its verify run, and so the
check, is the row's test command.

Not a test: numbers on a shared machine are noisy; read the differences and ratios.
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def arg(name, default=None):
    return sys.argv[sys.argv.index(name) + 1] if name in sys.argv else default


def run(binary, suite, work, out, trials):
    subprocess.run([binary, "run", suite, "--agent", "oracle", "--trials", str(trials), "-j", "1",
                    "--workdir", work, "--out", out], check=True,
                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    records = [json.loads(line) for line in open(os.path.join(out, "trials.jsonl"))]
    assert all(r["outcome"] == "pass" for r in records), records
    mutants = sum(os.path.exists(os.path.join(out, "trials", r["task"], "oracle", str(r["trial"]),
                                              "mutants.json")) for r in records)
    probe = [sum(us for n, us in r["phases"] if n == "probe") / 1000 for r in records]
    verify = [r["verify"]["duration_ms"] for r in records]
    return probe, [r["duration_ms"] for r in records], mutants, verify


def real_row(binary, base):
    """Imports and validates --row; returns its suite file."""
    row, rows, repos, env = (arg(name) for name in ("--row", "--rows", "--repos", "--env"))
    if not (rows and repos and env):
        sys.exit("--row needs --rows ROWS.jsonl, --repos DIR and --env ENV.yaml")
    line = next((line for line in open(rows) if json.loads(line)["instance_id"] == row), None)
    if line is None:
        sys.exit(f"{rows} holds no row {row}")
    folder = os.path.join(base, "row")
    os.makedirs(folder)
    with open(os.path.join(folder, "row.jsonl"), "w") as f:
        f.write(line)
    subprocess.run([binary, "import", "swebench", "row.jsonl", "--out", "suite", "--repos",
                    os.path.abspath(repos), "--env", os.path.abspath(env)], cwd=folder, check=True,
                   stdout=subprocess.PIPE)
    suite = os.path.join(folder, "suite", "suite.yaml")
    work = os.path.join(base, "work-validate")
    os.makedirs(work)
    done = subprocess.run([binary, "validate", suite, "--workdir", work], check=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    print("".join(l + "\n" for l in done.stdout.splitlines() if "mutants:" in l), end="")
    return suite


def main():
    trials = int(arg("--trials", "5"))
    binary = arg("--bin")
    if not binary:
        subprocess.run(["cargo", "build", "--release", "--locked", "--quiet"], cwd=ROOT, check=True)
        binary = os.path.join(ROOT, "target", "release", "deltabench")
    binary = os.path.abspath(binary)
    base = tempfile.mkdtemp(dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    try:
        if arg("--row"):
            on = real_row(binary, base)
        else:
            demo = os.path.join(base, "demo")
            shutil.copytree(os.path.join(ROOT, "suites", "demo"), demo)
            on = os.path.join(demo, "suite.yaml")
        folder = os.path.dirname(on)
        suites = {"on": on, "off": os.path.join(folder, "off.yaml")}
        text = open(on).read()
        if "\ndefaults:\n" in text:
            text = text.replace("\ndefaults:\n", "\ndefaults:\n  mutants: 0\n", 1)
        else:
            text = text.rstrip("\n") + "\ndefaults:\n  mutants: 0\n"
        open(suites["off"], "w").write(text)
        # The lock is per suite file: the same entries serve the copy (mutants: does not count).
        shutil.copy(os.path.join(folder, "suite.lock.json"), os.path.join(folder, "off.lock.json"))
        got = {"on": ([], [], 0, []), "off": ([], [], 0, [])}
        for i in range(2):
            for label in ("on", "off"):
                work = os.path.join(base, f"work-{label}-{i}")
                os.makedirs(work)
                probe, trial, mutants, verify = run(binary, suites[label], work,
                                                    os.path.join(base, f"out-{label}-{i}"), trials)
                p, t, m, v = got[label]
                got[label] = (p + probe, t + trial, m + mutants, v + verify)
        print(f"{'mutation check':<16}{'trials':>8}{'mutant runs':>13}{'verify ms':>11}"
              f"{'probe ms':>10}{'trial ms':>10}")
        for label in ("off", "on"):
            probe, trial, mutants, verify = got[label]
            print(f"{label:<16}{len(trial):>8}{mutants:>13}{statistics.median(verify):>11.1f}"
                  f"{statistics.median(probe):>10.1f}{statistics.median(trial):>10.1f}")
        (p_off, t_off, _, _), (p_on, t_on, _, _) = got["off"], got["on"]
        print(f"extra per passing trial: probe +{statistics.median(p_on) - statistics.median(p_off):.1f} ms, "
              f"trial x{statistics.median(t_on) / statistics.median(t_off):.2f}")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
