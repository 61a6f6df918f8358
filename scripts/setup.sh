#!/usr/bin/env bash
# Set up a fresh machine: a virtual environment in .venv with everything the project needs.
# On a machine without a GPU this installs a CPU build of torch (set TORCH_SPEC to choose).
# --text adds the optional text extra (transformers, for AG News and SST-5 with DistilBERT).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
. .venv/bin/activate
pip install --quiet "${TORCH_SPEC:-torch==2.13.0}"
pip install --quiet -r requirements.txt
if [[ "${1:-}" == "--text" ]]; then
    pip install --quiet -r requirements-text.txt
fi
