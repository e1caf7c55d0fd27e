#!/usr/bin/env bash
# Builds Traefik from its Go module (./traefik) into the user's cache, once per version and
# go.sum, and prints the directory (`--print-dir` only prints it). Traefik is the Gateway API
# implementation the test bed runs on its spokes (GatewayClass controller
# traefik.io/gateway-controller). Static (CGO_ENABLED=0). Apart from build.sh so that its
# version does not select a new control-plane cache. The first build takes about ten minutes
# on two cores.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
module=github.com/traefik/traefik/v3
version=$(awk -v m="$module" '$1 == m { print $2; exit }' "$here/traefik/go.mod")
inputs_hash=$(cat "$here/traefik/go.mod" "$here/traefik/go.sum" "$here/traefik.sh" | sha256sum | cut -c1-12)
dir="${MERIDIAN_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/meridian}/traefik/$version-$inputs_hash"
if [[ "${1:-}" == "--print-dir" ]]; then
  echo "$dir"
  exit 0
fi
if [[ ! -x "$dir/traefik" ]]; then
  echo "testbed: building Traefik $version from its Go module (the first build takes minutes)" >&2
  mkdir -p "$dir"
  started=$SECONDS
  cd "$here/traefik"
  CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS="-mod=readonly -trimpath -buildvcs=false" \
    go build -ldflags "-s -w -X $module/pkg/version.Version=$version" \
    -o "$dir/.traefik.partial" "$module/cmd/traefik"
  mv "$dir/.traefik.partial" "$dir/traefik"
  echo "testbed: built Traefik in $((SECONDS - started)) s" >&2
fi
echo "$dir"
