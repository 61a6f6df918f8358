#!/usr/bin/env bash
# One GPU session of the campaign (docs/gpu-sessions.md), as the first command of the machine:
#
#     scripts/gpu-session.sh OUTDIR TARGET... --minutes M [--scale S] [--device D]
#                            [--max-files N] [--max-file-mib X] [--max-total-mib T] [--set KEY=VALUE ...]
#
# environment.json, then the bundle checked ($CARRY/state.tar.gz and $CARRY/data, default
# CARRY=.carry, made by `python -m shared.campaign bundle ... -o .carry`), a gate of the gpu
# tests on the campaign's path (gate.xml; its verdict sets what training may use), `campaign
# train` until M minutes are up (the state rewritten at least once a minute), timing.json,
# session.log: all in OUTDIR (shared/campaign/session.py). M: at least a minute less than
# whatever kills this command. No Snakemake, no network: the machine's own Python (PYTHON,
# default python3, the one with CUDA's torch) with the checkout on PYTHONPATH; PyYAML from
# $CARRY/wheels where the machine lacks it.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
carry=${CARRY:-.carry}
python=${PYTHON:-python3}
if ! "$python" -c "import yaml" 2>/dev/null && [ -d "$carry/wheels" ]; then
    "$python" -m pip install -q --no-index --find-links "$carry/wheels" --target "$carry/site" pyyaml
fi
if [ -d "$carry/site" ]; then
    export PYTHONPATH="$(cd "$carry/site" && pwd)${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
exec "$python" -m shared.campaign.session "$@" --carry "$carry"
