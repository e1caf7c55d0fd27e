#!/usr/bin/env bash
# step-times.sh FILE [TOTAL_SECONDS]: prints the steps scripts/timed.sh recorded in FILE as a table,
# with the total wall time when given.
set -euo pipefail
file=$1
total=${2:-}
[[ -s "$file" ]] || exit 0
echo "time per step:"
awk -F'\t' '{ printf "  %-44s %6d s  %s\n", $1, $2, ($3 == "ok" ? "" : $3) }' "$file"
if [[ -n "$total" ]]; then
  printf '  %-44s %6d s  (%d min)\n' "total wall time" "$total" "$((total / 60))"
fi
