#!/usr/bin/env bash
# Real Terminal-Bench and Harbor task sets on this machine: import, prepare and validate them
# with local base images (no container registry is reachable). docs/import.md, "Real task sets on
# this machine", has the figures this measured.
#
# Usage:
#   benches/real_tasks.sh extract TB_GIT COOKBOOK_GIT TASKS   # once: the tasks out of two git dirs
#   benches/real_tasks.sh images                              # once: the local base images
#   benches/real_tasks.sh run TASKS [OUT]                     # import, prepare, validate each set
#
# TB_GIT is a git directory of a terminal-bench datasets repository (the public
# laude-institute/terminal-bench-datasets layout: datasets/<adapter>/<task>/), COOKBOOK_GIT one of
# harbor-framework/harbor-cookbook. `extract` writes the first 10 tasks of the aider_polyglot,
# deveval and evoeval adapters, in directory order, to TASKS/tb-<adapter>/ (a task whose files the
# git dir lacks is left out and the next one taken), the first 2 of each other language of
# aider_polyglot (its first 10 are all C++), and every harbor_cookbook/recipes/ task to
# TASKS/harbor-cookbook/.
#
# `images` builds, FROM tests/images' localhost/deltabench-base:bookworm (Debian 12), with the
# network (Debian's package mirror):
#   localhost/rt/buildpack-deps:jammy     for buildpack-deps:jammy (aider_polyglot)
#   localhost/rt/t-bench-python:3         for ghcr.io/laude-institute/t-bench/python-3-13:20250620
#   localhost/rt/t-bench-deveval:latest   for ghcr.io/laude-institute/t-bench/deveval:latest
# and ubuntu:24.04 (harbor-cookbook) is the base image itself.
#
# `run` imports with --run-solutions (a task whose Dockerfile only copies files runs on this
# machine, and so does its solution script, once, at import), and writes OUT/<set>/ (the suite), OUT/<set>.import.log, .prepare.log, .validate.log, and
# prints one line per set. OUT defaults to TASKS/../out. The release binary of this checkout is
# built first. Environment: DELTABENCH_WORKDIR (default /dev/shm/rt-work), DELTABENCH_CACHE
# (default OUT/cache), JOBS (default 2).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

base_images=(
  --base-image buildpack-deps:jammy=localhost/rt/buildpack-deps:jammy
  --base-image ghcr.io/laude-institute/t-bench/python-3-13:20250620=localhost/rt/t-bench-python:3
  --base-image ghcr.io/laude-institute/t-bench/deveval:latest=localhost/rt/t-bench-deveval:latest
  --base-image ubuntu:24.04=localhost/deltabench-base:bookworm
)

extract() {
  local tb=$1 cookbook=$2 tasks=$3 adapter task want have
  mkdir -p "$tasks"
  for adapter in aider_polyglot deveval evoeval; do
    mkdir -p "$tasks/tb-$adapter"
    have=0
    for task in $(git --git-dir="$tb" ls-tree --name-only HEAD:"datasets/$adapter"); do
      [ "$have" -ge 10 ] && break
      rm -rf "${tasks:?}/tb-$adapter/$task"
      git --git-dir="$tb" archive HEAD "datasets/$adapter/$task" 2>/dev/null |
        tar -x -C "$tasks/tb-$adapter" --strip-components=2
      want=$(git --git-dir="$tb" ls-tree -r --name-only HEAD:"datasets/$adapter/$task" | wc -l)
      if [ "$(find "$tasks/tb-$adapter/$task" -type f 2>/dev/null | wc -l)" != "$want" ]; then
        echo "extract: $adapter/$task: files missing from $tb, left out" >&2
        rm -rf "${tasks:?}/tb-$adapter/$task"
        continue
      fi
      have=$((have + 1))
    done
  done
  # aider_polyglot's first 10 are all C++: the first 2 of each of its other languages too.
  for lang in go java javascript python rust; do
    for task in $(git --git-dir="$tb" ls-tree --name-only HEAD:datasets/aider_polyglot | grep "^polyglot_${lang}_" | head -2); do
      git --git-dir="$tb" archive HEAD "datasets/aider_polyglot/$task" 2>/dev/null |
        tar -x -C "$tasks/tb-aider_polyglot" --strip-components=2
    done
  done
  mkdir -p "$tasks/harbor-cookbook"
  git --git-dir="$cookbook" archive HEAD harbor_cookbook/recipes |
    tar -x -C "$tasks/harbor-cookbook" --strip-components=2
  rm -f "$tasks/harbor-cookbook/registry.json"
  echo "extract: tb $(git --git-dir="$tb" rev-parse HEAD), cookbook $(git --git-dir="$cookbook" rev-parse HEAD)"
}

images() {
  "$root/tests/images/build-base.sh" || exit 1
  local dir
  dir=$(mktemp -d)
  build() { # NAME PACKAGES...
    local name=$1
    shift
    if podman image exists "$name"; then echo "images: $name exists"; return; fi
    printf 'FROM localhost/deltabench-base:bookworm\nRUN apt-get update && apt-get install -y --no-install-recommends %s && rm -rf /var/lib/apt/lists/*\n' "$*" \
      >"$dir/Dockerfile"
    podman build --pull=never -t "$name" "$dir" >/dev/null || { echo "images: $name failed" >&2; exit 1; }
    echo "images: built $name"
  }
  build localhost/rt/buildpack-deps:jammy curl wget gnupg openssl libssl-dev build-essential
  build localhost/rt/t-bench-python:3 curl python3-pip python3-venv python-is-python3
  build localhost/rt/t-bench-deveval:latest curl build-essential cmake python3-pip python3-venv python-is-python3
  rm -rf "$dir"
}

run() {
  local tasks out bin set format
  tasks=$(cd "$1" && pwd)
  out=${2:-$tasks/../out}
  mkdir -p "$out"
  out=$(cd "$out" && pwd)
  (cd "$root" && cargo build --release --quiet) || exit 1
  bin=$root/target/release/deltabench
  export DELTABENCH_WORKDIR=${DELTABENCH_WORKDIR:-/dev/shm/rt-work}
  export DELTABENCH_CACHE=${DELTABENCH_CACHE:-$out/cache}
  mkdir -p "$DELTABENCH_WORKDIR"
  for set in "$tasks"/*/; do
    set=$(basename "$set")
    case "$set" in
      harbor-*) format=harbor ;;
      *) format=terminal-bench ;;
    esac
    "$bin" import "$format" "$tasks/$set" --out "$out/$set" --force --run-solutions >"$out/$set.import.log" 2>&1
    echo "$set: import exit $?"
    "$bin" prepare "$out/$set" "${base_images[@]}" >"$out/$set.prepare.log" 2>&1
    echo "$set: prepare exit $?"
    "$bin" validate "$out/$set" "${base_images[@]}" -j "${JOBS:-2}" >"$out/$set.validate.log" 2>&1
    echo "$set: validate exit $?"
  done
}

case "${1:-}" in
  extract) shift; [ $# = 3 ] || { echo "usage: $0 extract TB_GIT COOKBOOK_GIT TASKS" >&2; exit 2; }; extract "$@" ;;
  images) images ;;
  run) shift; [ $# -ge 1 ] || { echo "usage: $0 run TASKS [OUT]" >&2; exit 2; }; run "$@" ;;
  *) echo "usage: $0 extract TB_GIT COOKBOOK_GIT TASKS | images | run TASKS [OUT]" >&2; exit 2 ;;
esac
