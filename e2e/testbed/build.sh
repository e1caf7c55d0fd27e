#!/usr/bin/env bash
# Builds the test bed from Go modules into a per-version cache directory outside the checkout:
#   bin/kube-apiserver, bin/kubectl   k8s.io/kubernetes            (./kube)
#   bin/etcd                          go.etcd.io/etcd/server/v3     (./etcd)
#   bin/work, bin/placement,
#   bin/registration, bin/addon       open-cluster-management.io/ocm (./ocm)
#   crds/{gateway-api,ocm,openshift}  upstream CRD YAML from the modules' own files (./crds)
#
# Every artefact is built only when missing, so a second run rebuilds nothing. The cache key
# is the pinned versions plus a hash of the go.mod/go.sum files and this script: a change to any
# of them selects a fresh directory, and clones of the same revision share one.
#
# KUBEBUILDER_ASSETS (the controller-runtime convention), when it names a directory holding
# kube-apiserver and etcd, is used instead of building those two (and kubectl, if present).
#
# Usage: build.sh            build what is missing, print the directory on the last line
#        build.sh --print-dir  only print the directory
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

required_version() { # module go.mod -> the version the go.mod requires
  awk -v m="$1" '$1 == m || ($1 == "require" && $2 == m) { print ($1 == "require" ? $3 : $2); exit }' "$2"
}

k8s_version=$(required_version k8s.io/kubernetes "$here/kube/go.mod")
etcd_version=$(required_version go.etcd.io/etcd/server/v3 "$here/etcd/go.mod")
ocm_version=$(required_version open-cluster-management.io/ocm "$here/ocm/go.mod")
inputs_hash=$(cat "$here"/{kube,etcd,ocm,crds}/go.{mod,sum} "$here/build.sh" | sha256sum | cut -c1-12)

cache_root=${MERIDIAN_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/meridian}
dir="$cache_root/testbed/k8s-$k8s_version-etcd-$etcd_version-ocm-$ocm_version-$inputs_hash"

if [[ "${1:-}" == "--print-dir" ]]; then
  echo "$dir"
  exit 0
fi

export GOTOOLCHAIN=local GOFLAGS="-mod=readonly -trimpath -buildvcs=false"
mkdir -p "$dir/bin" "$dir/crds"

log() { printf 'testbed: %s\n' "$*" >&2; }

# go_build MODULE_DIR OUTPUT_NAME PACKAGE [LDFLAGS]: builds one binary unless it exists; the
# binary appears under its final name only once the build succeeded.
go_build() {
  local module_dir=$1 name=$2 package=$3 ldflags=${4:-}
  if [[ -x "$dir/bin/$name" ]]; then
    return 0
  fi
  log "building $name from $package (first build of this version takes minutes)"
  local started=$SECONDS
  (cd "$here/$module_dir" && go build -ldflags "-s -w $ldflags" -o "$dir/bin/.$name.partial" "$package")
  mv "$dir/bin/.$name.partial" "$dir/bin/$name"
  log "built $name in $((SECONDS - started)) s"
}

assets=${KUBEBUILDER_ASSETS:-}
if [[ -n "$assets" && -x "$assets/kube-apiserver" && -x "$assets/etcd" ]]; then
  log "using kube-apiserver and etcd from KUBEBUILDER_ASSETS=$assets"
else
  if [[ -n "$assets" ]]; then
    log "KUBEBUILDER_ASSETS=$assets lacks kube-apiserver or etcd; building them"
  fi
  # Stamp the release so /version reports it; unstamped builds claim v0.0.0 and the apiserver's
  # emulation-version checks then refuse to start.
  minor=${k8s_version#v1.}
  minor=${minor%%.*}
  version_ldflags=""
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    version_ldflags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    version_ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  go_build kube kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "$version_ldflags"
  go_build kube kubectl k8s.io/kubernetes/cmd/kubectl "$version_ldflags"
  go_build etcd etcd go.etcd.io/etcd/server/v3
fi
go_build ocm work open-cluster-management.io/ocm/cmd/work
go_build ocm placement open-cluster-management.io/ocm/cmd/placement
# Registration: the hub controller that accepts clusters, and the spoke agent that joins with a
# bootstrap token and a CSR, as `clusteradm join` deploys it.
go_build ocm registration open-cluster-management.io/ocm/cmd/registration
# The addon manager: installs add-ons by their ClusterManagementAddOn's placements and rollout
# strategy, renders AddOnTemplates into ManifestWorks, and approves add-on agents' CSRs.
go_build ocm addon open-cluster-management.io/ocm/cmd/addon

# Upstream CRDs, copied from the module zips the Go module cache verified against go.sum.
if [[ ! -f "$dir/crds/.complete" ]]; then
  module_dir() { (cd "$here/crds" && go mod download -json "$1" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p'); }
  gateway=$(module_dir sigs.k8s.io/gateway-api)
  ocm_api=$(module_dir open-cluster-management.io/api)
  openshift=$(module_dir github.com/openshift/api)
  staging="$dir/crds.partial"
  rm -rf "$staging"
  mkdir -p "$staging"/{gateway-api,ocm,openshift}
  # Standard channel: only the CRDs, not the ValidatingAdmissionPolicy beside them.
  cp "$gateway"/config/crd/standard/gateway.networking.k8s.io_*.yaml "$staging/gateway-api/"
  rm -f "$staging"/gateway-api/*vap*
  # OCM cluster and work kinds, and the addon kinds in their v1alpha1-only form: the v1beta1
  # files serve two versions through a conversion webhook the test bed does not run.
  cp "$ocm_api"/cluster/*/*.crd.yaml "$ocm_api"/work/*/*.crd.yaml "$ocm_api"/addon/v1alpha1/*.crd.yaml \
    "$staging/ocm/"
  cp "$openshift"/route/v1/zz_generated.crd-manifests/routes.crd.yaml "$staging/openshift/"
  chmod -R u+w "$staging"
  rm -rf "$dir/crds"
  mv "$staging" "$dir/crds"
  touch "$dir/crds/.complete"
  log "gathered $(find "$dir/crds" -name '*.yaml' | wc -l) upstream CRD files"
fi

echo "$dir"
