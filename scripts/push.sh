#!/usr/bin/env bash
# Pushes a release to a registry, as users then pull it: the images `make images` built
# (target/images) with crane, and the chart, packaged, with `helm push`. Both tools are the test
# bed's (e2e/testbed/registry.sh, helm.sh); log in first with `crane auth login` and
# `helm registry login` when the registry asks for credentials.
#
#   IMAGE_REGISTRY  where the images go: <registry>/meridian-hub:<tag>, …/meridian-agent:<tag>
#                   (required, e.g. registry.example.com/meridian)
#   IMAGE_TAG       the tag (default the crate version, which is also the chart's version)
#   CHART_REGISTRY  where the chart goes (default oci://$IMAGE_REGISTRY/charts)
#   PLAIN_HTTP=1    for a registry without TLS
set -euo pipefail
cd "$(dirname "$0")/.."
: "${IMAGE_REGISTRY:?set IMAGE_REGISTRY, e.g. registry.example.com/meridian}"
version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)
tag=${IMAGE_TAG:-$version}
chart_registry=${CHART_REGISTRY:-oci://$IMAGE_REGISTRY/charts}
crane="$(bash e2e/testbed/registry.sh)/crane"
helm=$(bash e2e/testbed/helm.sh)
crane_flags=() helm_flags=()
if [[ "${PLAIN_HTTP:-}" == 1 ]]; then
  crane_flags=(--insecure) helm_flags=(--plain-http)
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for name in meridian-hub meridian-agent; do
  archive=target/images/$name-$tag.oci.tar
  [[ -f "$archive" ]] || { echo "push: $archive is missing: run make images (IMAGE_TAG=$tag)" >&2; exit 1; }
  # crane reads an OCI layout from a directory.
  mkdir -p "$work/$name"
  tar -xf "$archive" -C "$work/$name"
  "$crane" push "${crane_flags[@]}" "$work/$name" "$IMAGE_REGISTRY/$name:$tag"
done
"$helm" package deploy/helm/meridian --version "$version" --app-version "$tag" --destination "$work" >/dev/null
"$helm" push "${helm_flags[@]}" "$work/meridian-$version.tgz" "$chart_registry"
echo "pushed $IMAGE_REGISTRY/meridian-{hub,agent}:$tag and $chart_registry/meridian $version"
