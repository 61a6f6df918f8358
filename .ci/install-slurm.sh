#!/usr/bin/env bash
# CI: a one-node SLURM on loopback for tests/workflow/test_slurm.py (marker `slurm`), from Debian's
# packages; a second call on a running cluster returns in well under a second.
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ $(id -u) -ne 0 ]]; then
    exec sudo -n bash scripts/slurm-local.sh
fi
exec bash scripts/slurm-local.sh
