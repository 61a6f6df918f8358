#!/usr/bin/env bash
# Install Debian packages that CI's services need, idempotently and quickly when they are there:
#
#   .ci/apt-install.sh COMMAND PACKAGE...
#
# COMMAND is what must then be on PATH (pdflatex, chromium). dpkg is asked first; `apt-get update`
# runs only when the package lists do not know a package, or an install from stale lists fails.
set -euo pipefail

COMMAND=$1
shift
PACKAGES=("$@")

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

missing=()
for package in "${PACKAGES[@]}"; do
    installed "$package" || missing+=("$package")
done
if ((${#missing[@]} == 0)) && command -v "$COMMAND" >/dev/null; then
    echo "apt-install: ${PACKAGES[*]} already installed ($("$COMMAND" --version 2>/dev/null | head -n 1))"
    exit 0
fi

SUDO=()
if [[ $(id -u) -ne 0 ]]; then SUDO=(sudo); fi
export DEBIAN_FRONTEND=noninteractive

known() {  # every missing package has an installation candidate in the current lists
    local package
    for package in "${missing[@]}"; do
        apt-cache policy "$package" 2>/dev/null | grep -q "Candidate: [^(]" || return 1
    done
}

if ! known; then
    "${SUDO[@]}" apt-get update
fi
if ! "${SUDO[@]}" apt-get install -y --no-install-recommends "${missing[@]}"; then
    "${SUDO[@]}" apt-get update  # lists out of date: the archive moved on
    "${SUDO[@]}" apt-get install -y --no-install-recommends "${missing[@]}"
fi
command -v "$COMMAND" >/dev/null
echo "apt-install: installed ${missing[*]} ($("$COMMAND" --version 2>/dev/null | head -n 1))"
