#!/usr/bin/env bash
# Builds the OCI images of meridian-hub and meridian-agent (and the test bed's demo app, which
# stands behind each spoke's gateway) without a container engine (see
# docs/images.md). Writes target/images/<name>-<tag>.oci.tar, which `ctr images import` reads,
# and target/images/digests.txt (reference, manifest digest, compressed size), which manifests
# pin. The same commit builds the same digests in any clone: the binaries are built with their
# source paths remapped, and every time in the image is the commit's. (`--test-build` images
# hold the tests' debug binaries, whose paths are not remapped: the same in one clone only.)
#
# IMAGE_REGISTRY (default ghcr.io/meridian-dev) and IMAGE_TAG (default the crate version) name
# the images.
#
# Usage: images.sh               release binaries, reproducible, into target/images (`make images`)
#        images.sh --test-build  the binaries `make test` already built (target/debug), stripped,
#                                into target/test-images: the images the tests run, in seconds
#                                instead of a release build of the whole workspace (over 1,000 s
#                                of a cold CI run, beside the tests)
set -euo pipefail
cd "$(dirname "$0")/.."
cargo=${CARGO:-cargo}
test_build=false
[[ "${1:-}" == "--test-build" ]] && test_build=true

version=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)
tag=${IMAGE_TAG:-$version}
registry=${IMAGE_REGISTRY:-ghcr.io/meridian-dev}
source_url=https://github.com/meridian-dev/meridian
if revision=$(git rev-parse HEAD 2>/dev/null); then
  epoch=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}
else
  revision=unknown
  epoch=${SOURCE_DATE_EPOCH:-0}
fi

out=target/images
$test_build && out=target/test-images
mkdir -p "$out"
# Held until the images are written: tests that run them (meridian_e2e::built_images) wait for
# it, so a test started while `make images` runs takes the images it finishes.
exec 9> "$out/.build.lock"
flock 9

# The base layer: Debian's runtime files at the versions installed here (scripts/image-base.sh).
base=$(bash scripts/image-base.sh)

if $test_build; then
  # The test build's own binaries (`cargo build --all-targets` builds every binary beside the
  # tests), without their debug line tables: a third of their size to import into each node.
  built=${CARGO_TARGET_DIR:-target}/debug
  binaries=$out/binaries
  mkdir -p "$binaries"
  for name in meridian-hub meridian-agent meridian-demo-app; do
    objcopy --strip-debug "$built/$name" "$binaries/$name"
  done
  builder=$built/meridian-image
else
  # The binaries, in their own target directory: remapped paths and stripped symbols are flags
  # the other builds do not share. The image builder is built there too (a second invocation,
  # so its features do not change the hub's and agent's dependencies), sharing their compiled
  # crates instead of compiling its own in target/release.
  image_target=target/image-build
  export RUSTFLAGS="--remap-path-prefix=$PWD=/meridian --remap-path-prefix=${CARGO_HOME:-$HOME/.cargo}=/cargo -C strip=symbols"
  export CARGO_TARGET_DIR=$image_target
  "$cargo" build --quiet --locked --release -p meridian-hub -p meridian-agent -p meridian-demo-app
  "$cargo" build --quiet --locked --release -p meridian-image
  binaries=$image_target/release
  builder=$image_target/release/meridian-image
fi

: > "$out/digests.txt.new"
for name in meridian-hub meridian-agent meridian-demo-app; do
  "$builder" \
    --binary "$binaries/$name" \
    --base "$base" \
    --repository "$registry/$name" \
    --tag "$tag" \
    --version "$version" \
    --revision "$revision" \
    --source "$source_url" \
    --epoch "$epoch" \
    --out "$out/$name-$tag.oci.tar" >> "$out/digests.txt.new"
done
mv "$out/digests.txt.new" "$out/digests.txt"
cat "$out/digests.txt"
