#!/usr/bin/env bash
# Builds what a test-bed node runs besides the API server: kubelet, kube-controller-manager and
# kube-scheduler from k8s.io/kubernetes (./node, the same release as ./kube), and the pod
# sandbox's static `pause` (./node/pause), into the user's cache, once per version and go.sum;
# prints the directory (`--print-dir` only prints it).
# containerd, runc and the CNI plugins come from Debian (scripts/debian-packages.sh, `make
# packages`). Apart from build.sh so that nodes do not select a new control-plane cache.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
version_of() { awk '$1 == "k8s.io/kubernetes" { print $2; exit }' "$1"; }
version=$(version_of "$here/node/go.mod")
if [[ "$version" != "$(version_of "$here/kube/go.mod")" ]]; then
  echo "testbed: node/go.mod and kube/go.mod name different k8s.io/kubernetes releases" >&2
  exit 1
fi
inputs_hash=$(cat "$here/node/go.mod" "$here/node/go.sum" "$here/nodes.sh" | sha256sum | cut -c1-12)
dir="${MERIDIAN_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/meridian}/node/k8s-$version-$inputs_hash"
if [[ "${1:-}" == "--print-dir" ]]; then
  echo "$dir"
  exit 0
fi
mkdir -p "$dir"
# Stamped like the API server (build.sh): an unstamped kubelet reports v0.0.0 and is refused.
minor=${version#v1.}
minor=${minor%%.*}
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
for name in kubelet kube-controller-manager kube-scheduler; do
  [[ -x "$dir/$name" ]] && continue
  echo "testbed: building $name $version from its Go module (the first build takes minutes)" >&2
  started=$SECONDS
  (cd "$here/node" && GOTOOLCHAIN=local GOFLAGS="-mod=readonly -trimpath -buildvcs=false" \
    go build -ldflags "$ldflags" -o "$dir/.$name.partial" "k8s.io/kubernetes/cmd/$name")
  mv "$dir/.$name.partial" "$dir/$name"
  echo "testbed: built $name in $((SECONDS - started)) s" >&2
done
if [[ ! -x "$dir/pause" ]]; then
  (cd "$here/node" && GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS="-mod=readonly -trimpath -buildvcs=false" \
    go build -ldflags "-s -w" -o "$dir/.pause.partial" ./pause)
  mv "$dir/.pause.partial" "$dir/pause"
fi
echo "$dir"
