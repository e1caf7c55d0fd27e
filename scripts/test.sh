#!/usr/bin/env bash
# `make test`'s last part: builds the images beside the tests that do not need them, then runs
# the tests that do. The tests mostly wait on the control planes they start (about 60 % of two
# cores sat idle over the test run when measured), and the release build fills that: at nice 19
# it gets the CPU only when the tests leave it idle, so their timing is what it is alone.
#
# Usage: test.sh IMAGE_TESTS CARGO_TEST_ARGS...
#   IMAGE_TESTS       the name (libtest filter) of the tests that run the images, all in
#                     e2e/tests/install.rs; any other test there waits for the images instead
#                     (meridian_e2e::built_images waits on scripts/images.sh's lock)
#   CARGO_TEST_ARGS   what `cargo test` gets, the tests already built
set -euo pipefail
cd "$(dirname "$0")/.."
cargo=${CARGO:-cargo}
image_tests=$1
shift

mkdir -p target
images_log=target/images-build.log
# Its own process group, so that an interrupted run stops the whole build.
set -m
CARGO="$cargo" nice -n 19 bash scripts/timed.sh "images (release build, beside the tests)" \
  bash scripts/images.sh > "$images_log" 2>&1 &
images=$!
set +m
trap 'kill -- -"$images" 2>/dev/null || true' EXIT

bash scripts/timed.sh "tests" "$cargo" test "$@" -- --skip "$image_tests"

echo "waiting for the images (log: $images_log)" >&2
if ! wait "$images"; then
  cat "$images_log" >&2
  echo "make images failed (above); the tests that run the images did not run" >&2
  exit 1
fi
trap - EXIT
bash scripts/timed.sh "tests of the images (install)" \
  "$cargo" test --locked -p meridian-e2e --test install -- "$image_tests"
