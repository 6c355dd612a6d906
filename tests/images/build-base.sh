#!/usr/bin/env bash
# Builds the tests' local base image, localhost/deltabench-base:bookworm, from Debian packages
# (no container registry is needed): mmdebstrap writes a minimal bookworm root file system as a
# tarball, and `<runtime> import` turns it into a one-layer image. Installs nothing itself (the
# tools come from .ci/install: podman or docker, and mmdebstrap).
#
# Idempotent and cached at two levels:
#   - the image is left alone when it exists and carries this recipe's label
#     (deltabench.recipe=<hash of the package list, suite and extra CA certificates>);
#   - the root file system tarball is kept in $DELTABENCH_IMAGE_CACHE
#     (default ${XDG_CACHE_HOME:-$HOME/.cache}/deltabench/images), so a machine that lost its
#     images (a new container store) re-imports it in seconds instead of running mmdebstrap.
#
# Usage: tests/images/build-base.sh [--with-derived]
#   --with-derived  also builds every tests/images/<name>/Dockerfile as
#                   localhost/deltabench-<name>:latest (FROM the base, offline RUN steps)
#   --force         rebuild the image (and re-run mmdebstrap) even when cached
# Environment:
#   DELTABENCH_CONTAINER_RUNTIME  podman or docker (default: podman, else docker, on PATH)
#   DELTABENCH_IMAGE_CACHE        where the root file system tarball is cached
#   DELTABENCH_BASE_IMAGE         the image name (default localhost/deltabench-base:bookworm)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

with_derived=
force=
for arg in "$@"; do
  case "$arg" in
    --with-derived) with_derived=1 ;;
    --force) force=1 ;;
    *) echo "build-base: unknown argument $arg" >&2; exit 2 ;;
  esac
done

runtime=${DELTABENCH_CONTAINER_RUNTIME:-}
if [ -z "$runtime" ]; then
  if command -v podman >/dev/null; then runtime=podman
  elif command -v docker >/dev/null; then runtime=docker
  else echo "build-base: no container runtime (podman or docker) on PATH" >&2; exit 1
  fi
fi
image=${DELTABENCH_BASE_IMAGE:-localhost/deltabench-base:bookworm}
cache=${DELTABENCH_IMAGE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/deltabench/images}
suite=bookworm
# What tasks commonly need, and no more: bash, coreutils, git, python3 (minbase brings bash,
# coreutils, dpkg and apt); ca-certificates for HTTPS from RUN steps and verify commands that
# are given a network; procps for ps/kill in verify scripts; python3-pytest for the container
# verifier tests' pytest tasks (tests/it/container_verifier.rs).
packages=(git python3 ca-certificates procps python3-pytest)

now_ms() { date +%s%3N; }
t0=$(now_ms)
step() { echo "build-base: $* (+$(( $(now_ms) - t0 )) ms)"; }

# Extra CA certificates the host trusts (an intercepting egress proxy's, say) go into the image
# too, so HTTPS in a RUN step (pip, npm) works the same inside as on the host.
extra_cas=()
if [ -d /usr/local/share/ca-certificates ]; then
  while IFS= read -r f; do extra_cas+=("$f"); done \
    < <(find /usr/local/share/ca-certificates -name '*.crt' -type f | sort)
fi
recipe=$( {
  echo "v1 $suite minbase ${packages[*]}"
  for f in "${extra_cas[@]}"; do sha256sum < "$f"; done
} | sha256sum | cut -c1-16)

have_image() {
  local got
  got=$("$runtime" image inspect --format '{{index .Config.Labels "deltabench.recipe"}}' "$1" 2>/dev/null) || return 1
  [ "$got" = "$2" ]
}

if [ -z "$force" ] && have_image "$image" "$recipe"; then
  step "$image is up to date (recipe $recipe)"
else
  mkdir -p "$cache"
  tarball="$cache/deltabench-base-$suite-$recipe.tar"
  if [ -n "$force" ] || [ ! -s "$tarball" ]; then
    command -v mmdebstrap >/dev/null || {
      echo "build-base: mmdebstrap is needed to build $image (apt-get install mmdebstrap)" >&2; exit 1; }
    # The host's own apt sources (same mirror, and the security suite) when it has them.
    mirror=()
    [ -f /etc/apt/sources.list.d/debian.sources ] && mirror=(/etc/apt/sources.list.d/debian.sources)
    hooks=()
    if [ ${#extra_cas[@]} -gt 0 ]; then
      # "$1" is the root file system's path, expanded by mmdebstrap when the hook runs.
      # shellcheck disable=SC2016
      hooks+=(--customize-hook='mkdir -p "$1/usr/local/share/ca-certificates"')
      for f in "${extra_cas[@]}"; do
        hooks+=(--customize-hook="copy-in $f /usr/local/share/ca-certificates")
      done
      # shellcheck disable=SC2016
      hooks+=(--customize-hook='chroot "$1" update-ca-certificates >/dev/null 2>&1')
    fi
    step "mmdebstrap --variant=minbase $suite (${packages[*]}) -> $tarball"
    tmp="$tarball.tmp.$$"
    trap 'rm -f "$tmp"' EXIT
    mmdebstrap --quiet --variant=minbase --format=tar \
      --include="$(IFS=,; echo "${packages[*]}")" \
      --dpkgopt='path-exclude=/usr/share/man/*' \
      --dpkgopt='path-exclude=/usr/share/info/*' \
      --dpkgopt='path-exclude=/usr/share/locale/*' \
      --dpkgopt='path-include=/usr/share/locale/locale.alias' \
      --dpkgopt='path-exclude=/usr/share/doc/*' \
      --dpkgopt='path-include=/usr/share/doc/*/copyright' \
      "${hooks[@]}" \
      "$suite" "$tmp" "${mirror[@]}"
    mv "$tmp" "$tarball"
    trap - EXIT
    step "root file system built: $(du -h "$tarball" | cut -f1)"
  else
    step "root file system cached: $tarball"
  fi
  # Older tarballs of other recipes are dead weight.
  find "$cache" -maxdepth 1 -name "deltabench-base-$suite-*.tar" ! -name "$(basename "$tarball")" -delete
  quiet=()
  [ "$runtime" = podman ] && quiet=(--quiet)
  "$runtime" import "${quiet[@]}" \
    --change 'ENV LANG=C.UTF-8' \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["/bin/bash"]' \
    --change "LABEL deltabench.recipe=$recipe" \
    "$tarball" "$image" >/dev/null
  step "imported $image (recipe $recipe)"
fi

if [ -n "$with_derived" ]; then
  for dockerfile in "$here"/*/Dockerfile; do
    [ -e "$dockerfile" ] || continue
    dir=$(dirname "$dockerfile")
    name="localhost/deltabench-$(basename "$dir"):latest"
    # Rebuilt when the base changed or its folder's content did.
    key=$( { echo "$recipe"; cd "$dir" && find . -type f | sort | xargs sha256sum; } | sha256sum | cut -c1-16)
    if [ -z "$force" ] && have_image "$name" "$key"; then
      step "$name is up to date"
      continue
    fi
    pull=(--pull=never)
    [ "$runtime" = docker ] && pull=()
    "$runtime" build "${pull[@]}" --network=none --label "deltabench.recipe=$key" \
      -t "$name" "$dir" >/dev/null
    step "built $name"
  done
fi
step "done"
