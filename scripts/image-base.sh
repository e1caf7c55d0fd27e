#!/usr/bin/env bash
# Prepares the images' base layer: the Debian packages of the runtime files at the versions
# installed here (the binaries are linked against this C library), downloaded once per set of
# versions into the user's cache and extracted; prints the extracted root (`--print-dir` only
# prints it). scripts/images.sh builds on it.
set -euo pipefail
packages=()
# gcc-12-base carries libgcc-s1's copyright file.
for package in libc6 libgcc-s1 gcc-12-base ca-certificates; do
  packages+=("$package=$(dpkg-query -W -f='${Version}' "$package")")
done
base="${MERIDIAN_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/meridian}/image-base/$(printf '%s\n' "${packages[@]}" | sha256sum | cut -c1-16)"
if [[ "${1:-}" == "--print-dir" ]]; then
  echo "$base/root"
  exit 0
fi

# download: fetches the pinned packages into ./ (apt verifies them against its lists).
download() {
  rm -f ./*.deb
  # apt's sandbox user cannot write to a root-owned cache; the download is verified either way.
  apt-get download -q "${packages[@]}" 2>&1 | grep -v "unsandboxed" >&2 || true
  local debs=(./*.deb)
  [[ ${#debs[@]} -eq ${#packages[@]} && -f "${debs[0]}" ]]
}

if [[ ! -f "$base/extracted" ]]; then
  rm -rf "$base"
  mkdir -p "$base/debs" "$base/root"
  echo "downloading the image base: ${packages[*]}" >&2
  cd "$base/debs"
  # A machine whose package lists were never fetched (or are older than what is installed)
  # knows no download address for these versions: fetch the lists once, then try again.
  if ! download; then
    sudo=""
    [[ "$(id -u)" -eq 0 ]] || sudo="sudo"
    echo "image base: updating the package lists and retrying" >&2
    $sudo apt-get update -qq
    download || { echo "could not download ${packages[*]}" >&2; exit 1; }
  fi
  for deb in ./*.deb; do dpkg-deb -x "$deb" "$base/root"; done
  touch "$base/extracted"
fi
echo "$base/root"
