#!/usr/bin/env bash
# `make test`'s last part: runs the tests, already built, while the release images build beside
# them at nice 19, then the tests that run the images. The tests mostly wait on the control
# planes they start (about 60 % of two cores sat idle over the test run when measured), and the
# niced build fills that. Started earlier, beside the Go test bed, clippy and the tests' build,
# it slowed each of them more than it gained (a cold run took 2,715 s that way, about 80 s more).
#
# Usage: test.sh IMAGE_TESTS CARGO_TEST_ARGS...
#   IMAGE_TESTS       parts of the names (libtest filters, space-separated) of the tests that
#                     run the images; any other test that asks for the images waits for them
#                     instead
#                     (meridian_e2e::built_images waits on scripts/images.sh's lock)
#   CARGO_TEST_ARGS   what `cargo test` got to build the tests
set -euo pipefail
cd "$(dirname "$0")/.."
cargo=${CARGO:-cargo}
read -ra image_tests <<< "$1"
shift
skip_image_tests=()
for name in "${image_tests[@]}"; do
  skip_image_tests+=(--skip "$name")
done

mkdir -p target
images_log=target/images-build.log
# Its own process group, so that an interrupted run stops the whole build.
set -m
CARGO="$cargo" nice -n 19 bash scripts/timed.sh "images (release build, beside the tests)" \
  bash scripts/images.sh > "$images_log" 2>&1 &
images=$!
set +m
trap 'kill -- -"$images" 2>/dev/null || true' EXIT
trap 'exit 130' INT TERM

bash scripts/timed.sh "tests" "$cargo" test "$@" -- "${skip_image_tests[@]}"

echo "waiting for the images (log: $images_log)" >&2
waited=$SECONDS
images_status=0
wait "$images" || images_status=$?
if [[ -n "${MERIDIAN_STEP_TIMES:-}" ]]; then
  printf '%s\t%d\tok\n' "waiting for the images" "$((SECONDS - waited))" >> "$MERIDIAN_STEP_TIMES"
fi
if ((images_status != 0)); then
  cat "$images_log" >&2
  echo "make images failed (above); the tests that run the images did not run" >&2
  exit 1
fi
trap - EXIT
# The same arguments as above, so that nothing is built again (selecting only the install test
# resolves other features and rebuilds half the dependencies); every other binary runs no test.
bash scripts/timed.sh "tests of the images (install, partition, real traffic)" "$cargo" test "$@" -- "${image_tests[@]}"
