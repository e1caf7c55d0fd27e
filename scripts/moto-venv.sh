#!/usr/bin/env bash
# Installs moto's server (Route53's stand-in for tests) into a virtualenv in the user's cache,
# once per version, and prints the path of its `moto_server` (`--print-path` only prints it). A stamp file marks a finished
# install, so an interrupted one is redone rather than trusted.
set -euo pipefail
version=5.2.5
venv="${MERIDIAN_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/meridian}/venv-moto-$version"
if [[ "${1:-}" == "--print-path" ]]; then
  echo "$venv/bin/moto_server"
  exit 0
fi
if [[ ! -f "$venv/.installed" ]]; then
  echo "installing moto[server]==$version into $venv" >&2
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "moto[server]==$version"
  touch "$venv/.installed"
fi
echo "$venv/bin/moto_server"
