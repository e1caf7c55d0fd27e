#!/usr/bin/env bash
# `make test`'s last part, once the tests are built: packs the images the tests run as pods from
# the binaries the test build made (seconds; a release build of the workspace beside the tests
# cost over 1,000 s of a cold run), then runs the test binaries side by side
# (scripts/run-tests.py).
#
# Usage: test.sh HEAVY_TESTS ALONE_TESTS FIRST CARGO_BUILD_ARGS...
#   HEAVY_TESTS       the integration tests (by target name, comma-separated) that take most
#                     of the machine (real nodes, several fleets): they run one at a time
#   ALONE_TESTS       the integration tests that run with nothing beside them
#   FIRST             the longest test binaries, in order, started first
#   CARGO_BUILD_ARGS  what `cargo build` got to build the tests
set -euo pipefail
cd "$(dirname "$0")/.."
cargo=${CARGO:-cargo}
heavy_tests=$1
alone_tests=$2
first=$3
shift 3

CARGO="$cargo" bash scripts/timed.sh "images for the tests (from the test build)" \
  bash scripts/images.sh --test-build >/dev/null
export MERIDIAN_IMAGES_DIR=target/test-images
# Two binaries at a time (each with its harness's two threads): the tests mostly wait on the
# control planes and nodes they start.
CARGO="$cargo" bash scripts/timed.sh "tests (${TEST_JOBS:-2} binaries at a time)" \
  python3 scripts/run-tests.py --jobs "${TEST_JOBS:-2}" --exclusive "$heavy_tests" --alone "$alone_tests" --first "$first" -- "$@"
