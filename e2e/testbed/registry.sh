#!/usr/bin/env bash
# Builds the test bed's OCI registry, CNCF Distribution's `registry`, and `crane`, the
# go-containerregistry client that pushes images to it, from their Go modules (./registry) into
# the user's cache, once per version and go.sum, and prints the directory (`--print-dir` only
# prints it). `make images` pushes the images there, the chart goes there with `helm push`, and
# the nodes' containerd pulls from it (e2e/src/registry.rs). Apart from build.sh so that their
# versions do not select a new control-plane cache.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
required() { awk -v m="$1" '$1 == m { print $2; exit }' "$here/registry/go.mod"; }
distribution=$(required github.com/distribution/distribution/v3)
crane=$(required github.com/google/go-containerregistry)
inputs_hash=$(cat "$here/registry/go.mod" "$here/registry/go.sum" "$here/registry.sh" | sha256sum | cut -c1-12)
dir="${MERIDIAN_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/meridian}/registry/distribution-$distribution-crane-$crane-$inputs_hash"
if [[ "${1:-}" == "--print-dir" ]]; then
  echo "$dir"
  exit 0
fi
export GOTOOLCHAIN=local GOFLAGS="-mod=readonly -trimpath -buildvcs=false" CGO_ENABLED=0
mkdir -p "$dir"
cd "$here/registry"
build() { # NAME PACKAGE LDFLAGS: builds one binary unless it is there
  local name=$1 package=$2 ldflags=$3
  [[ -x "$dir/$name" ]] && return 0
  echo "testbed: building $name from $package (the first build takes minutes)" >&2
  local started=$SECONDS
  go build -ldflags "-s -w $ldflags" -o "$dir/.$name.partial" "$package"
  mv "$dir/.$name.partial" "$dir/$name"
  echo "testbed: built $name in $((SECONDS - started)) s" >&2
}
build registry github.com/distribution/distribution/v3/cmd/registry \
  "-X github.com/distribution/distribution/v3/version.version=$distribution"
build crane github.com/google/go-containerregistry/cmd/crane ""
echo "$dir"
