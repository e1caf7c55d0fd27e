#!/usr/bin/env bash
# Installs the Debian packages named on the command line, skipping those already installed, so
# a warm run costs one dpkg query per package and asks no mirror anything.
set -euo pipefail
missing=()
for package in "$@"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
((${#missing[@]})) || exit 0
sudo=""
[[ "$(id -u)" -eq 0 ]] || sudo="sudo"
echo "installing Debian packages: ${missing[*]}" >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
