#!/usr/bin/env bash
# Builds the OCI images of meridian-hub and meridian-agent without a container engine (see
# docs/images.md). Writes target/images/<name>-<tag>.oci.tar, which `ctr images import` reads,
# and target/images/digests.txt (reference, manifest digest, compressed size), which manifests
# pin. The same commit builds the same digests in any clone: the binaries are built with their
# source paths remapped, and every time in the image is the commit's.
#
# IMAGE_REGISTRY (default ghcr.io/meridian-dev) and IMAGE_TAG (default the crate version) name
# the images.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo=${CARGO:-cargo}

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

# The base: the Debian packages of the runtime files, at the versions installed here (the
# binaries are linked against this C library), downloaded once per set of versions.
packages=()
# gcc-12-base carries libgcc-s1's copyright file.
for package in libc6 libgcc-s1 gcc-12-base ca-certificates; do
  packages+=("$package=$(dpkg-query -W -f='${Version}' "$package")")
done
base=${XDG_CACHE_HOME:-$HOME/.cache}/meridian/image-base/$(printf '%s\n' "${packages[@]}" | sha256sum | cut -c1-16)
if [[ ! -f "$base/extracted" ]]; then
  rm -rf "$base"
  mkdir -p "$base/debs" "$base/root"
  echo "downloading the image base: ${packages[*]}" >&2
  # apt's sandbox user cannot write to a root-owned cache; the download is verified by apt either way.
  (cd "$base/debs" && apt-get download -q "${packages[@]}" 2>&1 | grep -v "unsandboxed" >&2 || true)
  debs=("$base"/debs/*.deb)
  [[ ${#debs[@]} -eq ${#packages[@]} && -f "${debs[0]}" ]] || { echo "could not download ${packages[*]}" >&2; exit 1; }
  for deb in "${debs[@]}"; do dpkg-deb -x "$deb" "$base/root"; done
  touch "$base/extracted"
fi

# The binaries, in their own target directory: remapped paths and stripped symbols are flags
# the other builds do not share.
image_target=target/image-build
RUSTFLAGS="--remap-path-prefix=$PWD=/meridian --remap-path-prefix=${CARGO_HOME:-$HOME/.cargo}=/cargo -C strip=symbols" \
  CARGO_TARGET_DIR=$image_target "$cargo" build --quiet --locked --release -p meridian-hub -p meridian-agent
"$cargo" build --quiet --locked --release -p meridian-image

out=target/images
mkdir -p "$out"
: > "$out/digests.txt.new"
for name in meridian-hub meridian-agent; do
  target/release/meridian-image \
    --binary "$image_target/release/$name" \
    --base "$base/root" \
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
