#!/usr/bin/env python3
"""Speed and scale benchmarks for deltabench. Prints ratios measured side by side.

    python3 benches/scale.py            # everything; the figures benches/README.md records
    python3 benches/scale.py --quick    # the check to run before calling a trial-path change done

1. provision + dispose per trial: deltabench's path (overlay over a template, from the trial
   records' phase timings) vs `git worktree add`/`remove` vs `git clone --shared` + `rm -rf`,
   on generated repos of 1k, 10k and 40k files, on tmpfs (/dev/shm) and the default temp dir.
2. a noop suite of 50 trials on a 10k-file repo (tmpfs): deltabench -j1 and -j2 vs a bash loop
   doing the same work (clone --shared, agent, git diff, verify, rm -rf), with a fresh commit per
   trial and with one commit for all; and a few trials on a 40k-file repo on the default temp dir
   (a slow disk here), a fresh commit each. The loop runs before and after deltabench; the
   ratios use their mean, and their spread is the noise of that row.
3. startup, and the peak RSS and time per trial of 1,000-, 10,000- and 100,000-trial noop runs
   on a tiny repo.

--quick runs section 1 on tmpfs only, section 2 without the 40k-file row, section 3 at 1,000
trials, then compares every row with the figures recorded in benches/README.md and names each row
that got worse by more than noise: a ratio of section 2 by more than twice its loop's spread (at
least 20 %), anything else by more than 25 % (deltabench's side of section 1 is sub-millisecond,
and section 3 is absolute time on a shared machine), peak RSS by more than 10 %. It exits 1 when
a row got worse.

Not a test: numbers on a shared machine are noisy; read the ratios.
"""
import re
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "target", "release", "deltabench")
QUICK = "--quick" in sys.argv
GIT_ENV = dict(os.environ, GIT_CONFIG_GLOBAL="/dev/null", GIT_CONFIG_NOSYSTEM="1",
               GIT_AUTHOR_NAME="b", GIT_AUTHOR_EMAIL="b@b", GIT_COMMITTER_NAME="b", GIT_COMMITTER_EMAIL="b@b")


def sh(cmd, cwd=None, check=True):
    return subprocess.run(cmd, cwd=cwd, env=GIT_ENV, shell=isinstance(cmd, str), check=check,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def make_repo(path, files, commits=1):
    """A repo of `files` small files in 100-file folders; `commits` commits touching one file each."""
    os.makedirs(path)
    sh(["git", "init", "-q", "-b", "main", path])
    for i in range(files):
        d = os.path.join(path, f"d{i // 100}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"f{i}.txt"), "w") as f:
            f.write(f"file {i}\n" * 8)
    sh("git add -A && git commit -qm c0", cwd=path)
    for c in range(1, commits):
        with open(os.path.join(path, "d0", "f0.txt"), "a") as f:
            f.write(f"commit {c}\n")
        sh(f"git commit -qam c{c}", cwd=path)
    return [l for l in sh("git rev-list --reverse HEAD", cwd=path).stdout.split()]


def timed(fn, n):
    samples = []
    for i in range(n):
        start = time.perf_counter()
        fn(i)
        samples.append((time.perf_counter() - start) * 1000)
    return statistics.median(samples)


def write_suite(dir, repo, bases, trials_note=""):
    lines = [f"name: bench\nrepo: {repo}\ntasks:"]
    for i, base in enumerate(bases):
        lines.append(f"  - {{id: t{i}, instruction: x, base: {base}, verify: \"true\"}}")
    path = os.path.join(dir, "suite.yaml")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


def deltabench(suite, work, out, *args):
    start = time.perf_counter()
    sh([BIN, "run", suite, "--agent", "noop", "--workdir", work, "--out", out, *args])
    wall = time.perf_counter() - start
    records = [json.loads(l) for l in open(os.path.join(out, "trials.jsonl"))]
    return wall, records


def phase_ms(records, names):
    per = [sum(us for name, us in r["phases"] if name in names) / 1000 for r in records]
    return statistics.median(per)


def bench_provision(base_dir):
    print("\n## 1. provision + dispose per trial (ms, median)")
    print(f"{'filesystem':10} {'files':>6} {'deltabench':>11} {'worktree':>9} {'clone':>8} {'wt/db':>7} {'clone/db':>9}")
    sizes = [1000, 10000] if QUICK else [1000, 10000, 40000]
    places = [("tmpfs", "/dev/shm")] + ([] if QUICK else [("temp dir", tempfile.gettempdir())])
    for fs_name, fs_dir in places:
        for files in sizes:
            n = 3 if files >= 10000 and fs_name != "tmpfs" else 5
            d = tempfile.mkdtemp(prefix="db-bench-", dir=fs_dir)
            try:
                repo = os.path.join(d, "repo")
                (head,) = make_repo(repo, files)
                ws = os.path.join(d, "ws")
                os.makedirs(ws)

                def worktree(i):
                    sh(["git", "-C", repo, "worktree", "add", "-q", "--detach", f"{ws}/w{i}", head])
                    sh(["git", "-C", repo, "worktree", "remove", "--force", f"{ws}/w{i}"])

                def clone(i):
                    sh(["git", "clone", "-q", "--shared", "--no-checkout", repo, f"{ws}/c{i}"])
                    sh(["git", "-C", f"{ws}/c{i}", "checkout", "-q", "--detach", head])
                    shutil.rmtree(f"{ws}/c{i}")

                wt, cl = timed(worktree, n), timed(clone, n)
                suite = write_suite(d, repo, ["HEAD"])
                work = os.path.join(d, "work")
                os.makedirs(work)
                # The first trial builds the template; the rest are the steady state.
                _, records = deltabench(suite, work, os.path.join(d, "out"), "--trials", str(n + 1), "-j", "1")
                records.sort(key=lambda r: r["trial"])
                db = phase_ms(records[1:], {"provision", "dispose"})
                print(f"{fs_name:10} {files:>6} {db:>11.1f} {wt:>9.1f} {cl:>8.1f} {wt / db:>7.1f} {cl / db:>9.1f}")
                MEASURED[("provision", fs_name, files)] = ({"clone/db": cl / db}, 0.0)
            finally:
                subprocess.run(["bash", "-c", f"grep -o ' {d}[^ ]*merged' /proc/mounts | xargs -r -n1 umount -l"])
                shutil.rmtree(d, ignore_errors=True)


def bash_loop(repo, bases, ws):
    script = f"""
for base in {' '.join(bases)}; do
  w={ws}/w
  git clone -q --shared --no-checkout {repo} $w && git -C $w checkout -q --detach $base
  (cd $w && true)                                   # the agent
  (cd $w && git add -A && git diff --cached --binary $base > /dev/null)
  (cd $w && true)                                   # verify
  rm -rf $w
done"""
    start = time.perf_counter()
    sh(script)
    return time.perf_counter() - start


def suite_row(case, d, repo, bases, trials, one_commit, loop_reps=2):
    """One row of section 2: the loop, deltabench -j1 and -j2, the loop again."""
    ws = os.path.join(d, "loop")
    os.makedirs(ws, exist_ok=True)
    loops = [bash_loop(repo, bases, ws)]
    results = []
    for jobs in ["1", "2"]:
        sd = tempfile.mkdtemp(dir=d)
        if one_commit:
            suite = write_suite(sd, repo, [bases[0]])
            args = ["--trials", str(trials)]
        else:
            suite = write_suite(sd, repo, bases)
            args = []
        wall, _ = deltabench(suite, sd, os.path.join(sd, "out"), "-j", jobs, *args)
        results.append(wall)
        subprocess.run(["bash", "-c", f"grep -o ' {sd}[^ ]*merged' /proc/mounts | xargs -r -n1 umount -l"])
        shutil.rmtree(sd, ignore_errors=True)
    if loop_reps > 1:
        loops.append(bash_loop(repo, bases, ws))
    loop = statistics.mean(loops)
    spread = (max(loops) - min(loops)) / loop
    print(f"{case:34} {loop:>10.2f} {results[0]:>8.2f} {results[1]:>8.2f} {results[0] / loop:>8.2f} {results[1] / loop:>8.2f} {spread * 100:>6.0f}%")
    MEASURED[("suite", case)] = ({"j1/loop": results[0] / loop, "j2/loop": results[1] / loop}, spread)


def bench_suite(base_dir):
    print("\n## 2. noop suites, deltabench against a bash loop (wall seconds; spread: the loop's two runs)")
    trials = 50
    print(f"{'case':34} {'bash loop':>10} {'db -j1':>8} {'db -j2':>8} {'j1/loop':>8} {'j2/loop':>8} {'spread':>7}")
    d = tempfile.mkdtemp(prefix="db-bench-", dir="/dev/shm")
    try:
        repo = os.path.join(d, "repo")
        commits = make_repo(repo, 10000, commits=trials)
        suite_row("fresh commit per trial", d, repo, commits, trials, False)
        suite_row("one commit for all", d, repo, [commits[-1]] * trials, trials, True)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    if QUICK:
        return
    # A checkout of 40k files takes tens of seconds on a slow disk: a few trials, one loop run.
    slow = 3
    d = tempfile.mkdtemp(prefix="db-bench-", dir=tempfile.gettempdir())
    try:
        repo = os.path.join(d, "repo")
        commits = make_repo(repo, 40000, commits=slow)
        suite_row(f"fresh commit, 40k files, temp dir", d, repo, commits, slow, False, loop_reps=1)
    finally:
        shutil.rmtree(d, ignore_errors=True)


def bench_memory(base_dir):
    print("\n## 3. startup, memory and per-trial time as the trial count grows (tiny repo, tmpfs)")
    start_ms = timed(lambda i: sh([BIN, "--version"]), 20)
    print(f"startup (deltabench --version): {start_ms:.1f} ms median")
    d = tempfile.mkdtemp(prefix="db-bench-", dir="/dev/shm")
    try:
        repo = os.path.join(d, "repo")
        make_repo(repo, 10)
        suite = write_suite(d, repo, ["HEAD"])
        counts = [1000] if QUICK else [1000, 10000, 100000]
        for count in counts:
            out = os.path.join(d, f"out{count}")
            start = time.perf_counter()
            run = subprocess.run(["/usr/bin/time", "-f", "%M", BIN, "run", suite, "--agent", "noop",
                                  "--trials", str(count), "-j", "2", "--workdir", d, "--out", out],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            wall = time.perf_counter() - start
            rss_kib = int(run.stderr.strip().splitlines()[-1])
            print(f"{count:>6} trials: {wall:6.1f} s, {wall / count * 1000:5.1f} ms/trial, peak RSS {rss_kib / 1024:6.1f} MiB")
            MEASURED[("trials", count)] = ({"ms/trial": wall / count * 1000, "MiB": rss_kib / 1024}, 0.0)
            shutil.rmtree(out)
    finally:
        shutil.rmtree(d, ignore_errors=True)


# What this run measured: row key -> ({figure: value}, noise), for the comparison.
MEASURED = {}


def recorded_figures():
    """The rows of the figures block in benches/README.md's "Speed and scale" section."""
    text = open(os.path.join(ROOT, "benches", "README.md")).read()
    # The section's first fenced block (its lines start with "## " too).
    block = text.split("## Speed and scale", 1)[1].split("```", 2)[1]
    rows, part = {}, None
    number = r"([0-9.]+)"
    for line in block.splitlines():
        if line.startswith("## "):
            part = line.split(".")[0][3:]
            continue
        if part == "1" and (m := re.match(rf"(tmpfs|temp dir)\s+(\d+)\s+{number}\s+{number}\s+{number}\s+{number}\s+{number}", line)):
            rows[("provision", m[1], int(m[2]))] = {"clone/db": float(m[7])}
        elif part == "2" and (m := re.match(rf"(\S.*?)\s+{number}\s+{number}\s+{number}\s+{number}\s+{number}", line)):
            rows[("suite", m[1])] = {"j1/loop": float(m[5]), "j2/loop": float(m[6])}
        elif part == "3" and (m := re.match(rf"\s*(\d+) trials:.*?{number} ms/trial, peak RSS\s+{number} MiB", line)):
            rows[("trials", int(m[1]))] = {"ms/trial": float(m[2]), "MiB": float(m[3])}
    return rows


def compare():
    """Each measured row against the recorded one; True when none got worse beyond noise."""
    recorded = recorded_figures()
    print("\n## against benches/README.md (now / recorded; worse: beyond the noise allowed)")
    ok = True
    for key, (now, spread) in MEASURED.items():
        then = recorded.get(key)
        if then is None:
            print(f"{' / '.join(map(str, key[1:])):34} not recorded")
            continue
        for figure, value in now.items():
            if figure not in then:
                continue
            # Higher is better for clone/db, lower for the rest.
            change = then[figure] / value if figure == "clone/db" else value / then[figure]
            allowed = {"suite": max(0.20, 2 * spread)}.get(key[0], 0.25)
            if figure == "MiB":
                allowed = 0.10
            worse = change - 1 > allowed
            ok &= not worse
            verdict = f"WORSE by {(change - 1) * 100:.0f}% (noise allows {allowed * 100:.0f}%)" if worse else "ok"
            label = f"{' / '.join(map(str, key[1:]))} {figure}"
            print(f"{label:44} {value:>9.2f} / {then[figure]:<9.2f} {verdict}")
    return ok


def main():
    subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT, check=True)
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    print(f"# deltabench scale benchmarks: {os.cpu_count()} cores, {cpu}, git {sh(['git', '--version']).stdout.split()[-1]}")
    load = open("/proc/loadavg").read().split()[:3]
    print(f"# load average before: {' '.join(load)}")
    bench_provision(None)
    bench_suite(None)
    bench_memory(None)
    print(f"# load average after: {' '.join(open('/proc/loadavg').read().split()[:3])}")
    if QUICK and not compare():
        sys.exit(1)


if __name__ == "__main__":
    main()
