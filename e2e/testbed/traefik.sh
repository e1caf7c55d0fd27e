#!/usr/bin/env bash
# Builds Traefik from its Go module (./traefik) into the user's cache, once per version and
# go.sum, and prints the directory (`--print-dir` only prints it). Traefik is the Gateway API
# implementation the test bed runs on its spokes (GatewayClass controller
# traefik.io/gateway-controller). Static (CGO_ENABLED=0), without ACME's DNS providers (below).
# Apart from build.sh so that its version does not select a new control-plane cache. The first
# build took 503 s on two cores with every DNS provider.
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
  export GOTOOLCHAIN=local GOFLAGS="-mod=readonly -trimpath -buildvcs=false"
  # Without ACME's DNS-01 providers: Traefik's ACME resolver asks lego for one by name, which
  # links all of lego's 190-odd DNS providers and their cloud SDKs, about half of the Go files the
  # build compiles. The test bed never requests a certificate. lego's module is copied from the
  # module cache (verified against go.sum) with that one registry file replaced, and the build
  # takes it through a copy of go.mod with one more replace line.
  lego=github.com/go-acme/lego/v4
  lego_source=$(go mod download -json "$lego" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  [[ -d "$lego_source" ]] || { echo "testbed: could not download $lego" >&2; exit 1; }
  # The copies go whether the build succeeds or not (the module cache's modes are read-only;
  # the copy's are not, so a rerun can always remove them).
  trap 'rm -rf "$dir/lego" "$dir/build"' EXIT
  rm -rf "$dir/lego" "$dir/build"
  mkdir -p "$dir/build"
  cp -r --no-preserve=mode "$lego_source" "$dir/lego"
  rm "$dir/lego/providers/dns/"*.go
  cat > "$dir/lego/providers/dns/providers.go" <<'GO'
// Package dns: the test bed's copy of lego without its DNS-01 providers (see traefik.sh).
package dns

import (
	"fmt"

	"github.com/go-acme/lego/v4/challenge"
)

// NewDNSChallengeProviderByName refuses every provider: none is built in.
func NewDNSChallengeProviderByName(name string) (challenge.Provider, error) {
	return nil, fmt.Errorf("DNS provider %q: this Traefik is built without ACME DNS providers", name)
}
GO
  { cat go.mod; echo "replace $lego => $dir/lego"; } > "$dir/build/go.mod"
  cp go.sum "$dir/build/go.sum"
  CGO_ENABLED=0 go build -modfile="$dir/build/go.mod" \
    -ldflags "-s -w -X $module/pkg/version.Version=$version" \
    -o "$dir/.traefik.partial" "$module/cmd/traefik"
  mv "$dir/.traefik.partial" "$dir/traefik"
  echo "testbed: built Traefik in $((SECONDS - started)) s" >&2
fi
echo "$dir"
