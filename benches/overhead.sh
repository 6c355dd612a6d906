#!/usr/bin/env bash
# Per-trial harness overhead of deltabench vs a hand-written bash loop, on the demo suite, noop agent.
# Usage: bash benches/overhead.sh [REPEATS]   (default 5; each repeat runs the 6 demo tasks)
set -euo pipefail
cd "$(dirname "$0")/.."
repeats=${1:-5}
root=$(mktemp -d "${BENCH_DIR:-/dev/shm}/deltabench-bench-XXXX")
trap 'rm -rf "$root"' EXIT

cargo build --release --quiet
bin=target/release/deltabench

# 1. deltabench: noop on every demo task, one trial at a time.
start=$(date +%s%N)
"$bin" run suites/demo --agent noop --trials "$repeats" -j 1 --workdir "$root" --out "$root/run" >/dev/null 2>&1 || true
db_ms=$(( ($(date +%s%N) - start) / 1000000 ))

# 2. The same work by hand: a repo snapshot, then per trial clone, hidden tests, verify, diff, rm.
src="$root/src"
cp -r suites/demo/project "$src"
git -C "$src" init -q && git -C "$src" add -A && git -C "$src" -c user.name=b -c user.email=b@b commit -qm base
tasks=$(python3 - <<'PY'
import re
text = open("suites/demo/suite.yaml").read()
for block in text.split("  - id: ")[1:]:
    tid = block.split("\n", 1)[0].strip()
    verify = re.search(r'verify: "([^"]+)"', block).group(1)
    print(f"{tid}\t{verify}")
PY
)
start=$(date +%s%N)
n=0
for r in $(seq "$repeats"); do
  while IFS=$'\t' read -r tid verify; do
    ws="$root/loop-$tid-$r"
    git clone -q --shared --no-checkout "$src" "$ws" && git -C "$ws" checkout -q --detach HEAD
    (cd "$ws" && git add -A && git diff --cached --binary HEAD > /dev/null)
    cp -r "suites/demo/tests/$tid/." "$ws/"
    (cd "$ws" && sh -c "$verify" >/dev/null 2>&1) || true
    rm -rf "$ws"
    n=$((n + 1))
  done <<< "$tasks"
done
loop_ms=$(( ($(date +%s%N) - start) / 1000000 ))

python3 - "$root/run/trials.jsonl" "$db_ms" "$loop_ms" "$n" <<'PY'
import json, statistics, sys
path, db_ms, loop_ms, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
records = [json.loads(line) for line in open(path)]
overhead = [r["duration_ms"] - r["verify"]["duration_ms"] - (r["agent_duration_ms"] or 0) for r in records]
phases = {}
for r in records:
    for name, us in r["phases"]:
        phases.setdefault(name, []).append(us / 1000)
print(f"trials: {len(records)} deltabench, {n} bash loop (noop on the demo's 6 tasks, -j 1)")
print(f"{'':32}{'deltabench':>12}{'bash loop':>12}{'ratio':>8}")
print(f"{'wall per trial (ms, incl. startup)':32}{db_ms/len(records):12.1f}{loop_ms/n:12.1f}{(db_ms/len(records))/(loop_ms/n):8.2f}")
print(f"{'harness overhead per trial (ms)':32}{statistics.median(overhead):12.1f}   (median; trial - verify - agent)")
for name in ["provision", "construct", "run", "probe", "dispose", "score"]:
    if name in phases:
        print(f"  {name:30}{statistics.median(phases[name]):12.2f} ms median")
PY
