#!/usr/bin/env bash
# Builds Helm from its Go module (./helm: helm.sh/helm/v4 as a tool) into the user's cache,
# once per version and go.sum, and prints the binary's path (`--print-path` only prints it).
# Apart from build.sh so that Helm's version does not select a new control-plane cache.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
version=$(awk '$1 == "helm.sh/helm/v4" { print $2; exit }' "$here/helm/go.mod")
inputs_hash=$(cat "$here/helm/go.mod" "$here/helm/go.sum" "$here/helm.sh" | sha256sum | cut -c1-12)
dir="${MERIDIAN_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/meridian}/helm/$version-$inputs_hash"
if [[ "${1:-}" == "--print-path" ]]; then
  echo "$dir/helm"
  exit 0
fi
if [[ ! -x "$dir/helm" ]]; then
  echo "testbed: building helm $version from its Go module (the first build takes minutes)" >&2
  mkdir -p "$dir"
  started=$SECONDS
  version_ldflags="-X helm.sh/helm/v4/internal/version.version=$version"
  (cd "$here/helm" && GOTOOLCHAIN=local GOFLAGS="-mod=readonly -trimpath -buildvcs=false" \
    go build -ldflags "-s -w $version_ldflags" -o "$dir/.helm.partial" helm.sh/helm/v4/cmd/helm)
  mv "$dir/.helm.partial" "$dir/helm"
  echo "testbed: built helm in $((SECONDS - started)) s" >&2
fi
echo "$dir/helm"
