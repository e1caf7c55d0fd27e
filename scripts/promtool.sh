#!/usr/bin/env bash
# Installs promtool (Prometheus' rule checker and rule unit tester) into the user's cache, once,
# and prints its path (`--print-path` only prints it). It comes out of Debian's prometheus
# package, unpacked rather than installed, so no Prometheus server is set up or started. A stamp
# file marks a finished install, so an interrupted one is redone rather than trusted.
set -euo pipefail
dir="${MERIDIAN_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/meridian}/promtool"
if [[ "${1:-}" == "--print-path" ]]; then
  echo "$dir/promtool"
  exit 0
fi
if [[ ! -f "$dir/.installed" ]]; then
  echo "unpacking promtool from Debian's prometheus package into $dir" >&2
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  download() {
    # apt's sandbox user cannot write to a root-owned temporary directory; the download is
    # verified against apt's lists either way.
    (cd "$work" && apt-get download -q prometheus 2>&1 | grep -v "unsandboxed" >&2 || true)
    compgen -G "$work/prometheus_*.deb" >/dev/null
  }
  if ! download; then
    sudo=""
    [[ "$(id -u)" -eq 0 ]] || sudo="sudo"
    $sudo apt-get update -qq
    download || { echo "could not download Debian's prometheus package" >&2; exit 1; }
  fi
  dpkg-deb -x "$work"/prometheus_*.deb "$work/root"
  rm -rf "$dir"
  mkdir -p "$dir"
  cp "$work/root/usr/bin/promtool" "$dir/promtool"
  basename "$work"/prometheus_*.deb > "$dir/.installed"
fi
echo "$dir/promtool"
