#!/usr/bin/env bash
# timed.sh LABEL COMMAND...: runs COMMAND and records how long it took as "LABEL<TAB>seconds<TAB>ok|failed"
# in $MERIDIAN_STEP_TIMES when that names a file (.ci/run and scripts/fresh-check.sh set it and
# print the table at the end). COMMAND's exit status is kept.
set -uo pipefail
label=$1
shift
started=$SECONDS
"$@"
status=$?
if [[ -n "${MERIDIAN_STEP_TIMES:-}" ]]; then
  outcome=ok
  ((status == 0)) || outcome=failed
  printf '%s\t%d\t%s\n' "$label" "$((SECONDS - started))" "$outcome" >> "$MERIDIAN_STEP_TIMES"
fi
exit "$status"
