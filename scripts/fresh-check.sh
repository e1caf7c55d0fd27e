#!/usr/bin/env bash
# Proves the cold path without a fresh machine: runs every install step that `make test` and
# `make demo` take with empty caches in a temporary directory (Go's module and build caches,
# Meridian's cache, XDG_CACHE_HOME, pip's cache, Cargo's registry), and stops at the first step
# that breaks. Debian packages stay installed: the step that installs them still runs (and
# installs whatever is missing).
#
# Usage: scripts/fresh-check.sh         the install steps (`make fresh-check`)
#        scripts/fresh-check.sh --full  then the whole of `CI=true bash .ci/run` in a fresh clone
#                                       of HEAD with the same empty caches: every cargo build, the
#                                       images and the tests, timed per step (`make fresh-check-full`)
# KEEP_FRESH_CHECK=1 keeps the temporary directory (it is printed) for a look afterwards.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
full=false
[[ "${1:-}" == "--full" ]] && full=true

scratch=$(mktemp -d "${TMPDIR:-/tmp}/meridian-fresh-check.XXXXXX")
cleanup() {
  if [[ -n "${KEEP_FRESH_CHECK:-}" ]]; then
    echo "fresh-check: kept $scratch" >&2
  else
    # The Go module cache is read-only by design.
    chmod -R u+w "$scratch" 2>/dev/null || true
    rm -rf "$scratch"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

export GOMODCACHE=$scratch/go-mod GOCACHE=$scratch/go-build
export MERIDIAN_CACHE_DIR=$scratch/meridian XDG_CACHE_HOME=$scratch/xdg
export PIP_CACHE_DIR=$scratch/pip CARGO_HOME=$scratch/cargo
# Toolchains stay where they are: rustup's proxies find theirs through RUSTUP_HOME.
export RUSTUP_HOME=${RUSTUP_HOME:-$HOME/.rustup}
unset KUBEBUILDER_ASSETS MERIDIAN_MOTO_SERVER MERIDIAN_HELM MERIDIAN_TESTBED_DIR \
  MERIDIAN_NODE_DIR MERIDIAN_EXTERNAL_DNS_DIR MERIDIAN_TRAEFIK_DIR MERIDIAN_REGISTRY_DIR
MERIDIAN_STEP_TIMES=$scratch/step-times.tsv
export MERIDIAN_STEP_TIMES
: > "$MERIDIAN_STEP_TIMES"
echo "fresh-check: empty caches under $scratch" >&2

status=0
if $full; then
  if [[ -n "$(git status --porcelain --untracked-files=no)" ]]; then
    echo "fresh-check: uncommitted changes are not in the clone; it checks HEAD $(git rev-parse --short HEAD)" >&2
  fi
  git clone --quiet --no-hardlinks "$repo" "$scratch/clone"
  started=$SECONDS
  # .ci/run prints its own step table; the clone's target/ starts empty.
  (cd "$scratch/clone" && CI=true bash .ci/run) || status=$?
  echo "fresh-check: the cold CI run took $((SECONDS - started)) s and exited $status" >&2
else
  started=$SECONDS
  # The same targets `make test` runs first (Traefik among the test bed), then what its
  # later steps fetch: the image base and the crates.
  make --no-print-directory packages testbed || status=$?
  if ((status == 0)); then
    bash scripts/timed.sh "image base (Debian downloads)" bash scripts/image-base.sh >/dev/null || status=$?
  fi
  if ((status == 0)); then
    bash scripts/timed.sh "crates (cargo fetch)" cargo fetch --locked --quiet || status=$?
  fi
  bash scripts/step-times.sh "$MERIDIAN_STEP_TIMES" "$((SECONDS - started))"
  if ((status == 0)); then
    echo "fresh-check: every install step passed from empty caches" >&2
  else
    echo "fresh-check: FAILED (the last step above is the one that broke)" >&2
  fi
fi
exit "$status"
