#!/usr/bin/env bash
# Set up a fresh machine: a virtual environment in .venv with everything the project needs.
#
#   scripts/setup.sh            # torch, then requirements.txt at the versions of requirements.lock
#   scripts/setup.sh --text     # also the text extra (transformers, for AG News and SST-5 with DistilBERT)
#   scripts/setup.sh --no-lock  # the newest versions the ranges of requirements.txt allow
#
# torch comes first, and its build is yours to choose (pip's default for torch on Linux is the
# CUDA build, about 3 GB with its NVIDIA libraries):
#   TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu scripts/setup.sh     # CPU-only build
#   TORCH_INDEX_URL=https://download.pytorch.org/whl/cu126 scripts/setup.sh   # CUDA 12.6 build
#   TORCH_SPEC="torch==2.13.0" (the default) picks the version; unset TORCH_INDEX_URL means pip's
#   configured indexes (PyPI, or a local wheel directory where pip is set up with one).
# The index is used for torch alone (--index-url), so nothing else is taken from it.
# A GPU workstation or cluster may use conda instead: conda env create -f environment.yml.
set -euo pipefail
cd "$(dirname "$0")/.."
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
TORCH_INDEX_URL=${TORCH_INDEX_URL:-}
text=0
lock=(-c requirements.lock)
for arg in "$@"; do
    case "$arg" in
        --text) text=1 ;;
        --no-lock) lock=() ;;
        *) echo "unknown option $arg (see the comments at the top of $0)" >&2; exit 2 ;;
    esac
done
python3 -m venv .venv
. .venv/bin/activate
if [[ -n "$TORCH_INDEX_URL" ]]; then
    pip install --quiet --index-url "$TORCH_INDEX_URL" "$TORCH_SPEC"
else
    pip install --quiet "$TORCH_SPEC"
fi
pip install --quiet -r requirements.txt "${lock[@]}"
if [[ $text == 1 ]]; then
    pip install --quiet -r requirements-text.txt "${lock[@]}"
fi
python - <<'PY'
import torch
print(f"torch {torch.__version__}, CUDA {torch.version.cuda or 'none (CPU build)'}, "
      f"GPU available: {torch.cuda.is_available()}")
PY
