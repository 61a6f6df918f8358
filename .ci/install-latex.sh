#!/usr/bin/env bash
# LaTeX for the `latex` tests (tests/test_latex.py compiles every table.tex with pdflatex; the
# tables need booktabs and graphicx): Debian's texlive-latex-base and -recommended. Idempotent and
# quick when they are there already: dpkg is asked first, `apt-get update` runs only when the
# package lists do not know the packages (or an install from stale lists fails).
set -euo pipefail

PACKAGES=(texlive-latex-base texlive-latex-recommended)

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

missing=()
for package in "${PACKAGES[@]}"; do
    installed "$package" || missing+=("$package")
done
if ((${#missing[@]} == 0)) && command -v pdflatex >/dev/null; then
    echo "install-latex: ${PACKAGES[*]} already installed ($(pdflatex --version | head -n 1))"
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
command -v pdflatex >/dev/null
echo "install-latex: installed ${missing[*]} ($(pdflatex --version | head -n 1))"
