#!/usr/bin/env bash
# Set up a fresh machine: a virtual environment in .venv with everything the project needs.
#
#   scripts/setup.sh                 # torch, then requirements.txt (run and test) and
#                                    # requirements-workflow.txt (Snakemake) at the versions of requirements.lock
#   scripts/setup.sh --text          # also the text extra (transformers, for AG News and SST-5 with DistilBERT)
#   scripts/setup.sh --tensorboard   # also TensorBoard (trainer.tensorboard=true: live curves)
#   scripts/setup.sh --no-lock       # the newest versions the ranges of the requirements allow
#   scripts/setup.sh --system-torch  # keep the machine's own torch (a site's CUDA PyTorch): the venv sees
#                                    # its packages (--system-site-packages) and no torch is installed
#   scripts/setup.sh --no-workflow   # without Snakemake (runs, tests and benchmarks only)
#   scripts/setup.sh --dry-run       # say which torch build it would install, and stop
#
# torch's build: where this machine has an NVIDIA driver (nvidia-smi answers, or /proc/driver/nvidia
# exists) pip's default, the CUDA build (about 3 GB with its NVIDIA libraries); where it has none,
# the CPU build from https://download.pytorch.org/whl/cpu (about 200 MB). The script says which.
# TORCH_INDEX_URL overrides the choice (set to an empty string: pip's configured indexes, e.g. a
# local wheel directory):
#   TORCH_INDEX_URL=https://download.pytorch.org/whl/cu126 scripts/setup.sh   # CUDA 12.6 build
#   TORCH_SPEC="torch==2.13.0" (the default) picks the version.
# The index is used for torch alone (--index-url), so nothing else is taken from it. Without
# network pip takes wheels from a folder: PIP_NO_INDEX=1 PIP_FIND_LINKS=/path/to/wheels scripts/setup.sh
# (docs/install.md: A GPU machine without network, which also runs everything with no install at all).
# A GPU workstation or cluster may use conda instead: conda env create -f environment.yml.
set -euo pipefail
cd "$(dirname "$0")/.."
TORCH_SPEC=${TORCH_SPEC:-torch==2.13.0}
CPU_INDEX=https://download.pytorch.org/whl/cpu
LOCK_PYTHON=3.11  # the Python requirements.lock was frozen on (its first lines)
text=0 tensorboard=0 workflow=1 system_torch=0 dry_run=0
lock=(-c requirements.lock)
for arg in "$@"; do
    case "$arg" in
        --text) text=1 ;;
        --tensorboard) tensorboard=1 ;;
        --no-lock) lock=() ;;
        --system-torch) system_torch=1 ;;
        --no-workflow) workflow=0 ;;
        --dry-run) dry_run=1 ;;
        *) echo "unknown option $arg (see the comments at the top of $0)" >&2; exit 2 ;;
    esac
done

has_nvidia_driver() {
    [[ -e /proc/driver/nvidia/version ]] || { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }
}

# which torch, decided before anything is made, so that --dry-run can say it
torch_args=()
if [[ $system_torch == 1 ]]; then
    choice="torch: the machine's own (the venv sees the system's packages)"
elif [[ -n ${TORCH_INDEX_URL+set} ]]; then
    source_of_torch=${TORCH_INDEX_URL:-"pip's configured indexes"}
    choice="torch: $TORCH_SPEC from $source_of_torch (TORCH_INDEX_URL)"
    torch_args=(${TORCH_INDEX_URL:+--index-url "$TORCH_INDEX_URL"} "$TORCH_SPEC")
elif [[ $(uname -s) == Linux ]] && ! has_nvidia_driver; then
    choice="torch: no NVIDIA driver here, so the CPU build of $TORCH_SPEC from $CPU_INDEX (TORCH_INDEX_URL overrides)"
    torch_args=(--index-url "$CPU_INDEX" "$TORCH_SPEC")
else
    choice="torch: an NVIDIA driver (or not Linux), so pip's default build of $TORCH_SPEC, CUDA on Linux (TORCH_INDEX_URL overrides)"
    torch_args=("$TORCH_SPEC")
fi
echo "$choice"
if [[ $dry_run == 1 ]]; then
    exit 0
fi

if [[ $system_torch == 1 ]]; then
    python3 -m venv --system-site-packages .venv
else
    python3 -m venv .venv
fi
. .venv/bin/activate
python_version=$(python -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
if [[ ${#lock[@]} -gt 0 && $python_version != "$LOCK_PYTHON" ]]; then
    echo "note: requirements.lock was frozen on Python $LOCK_PYTHON, this is $python_version; if pip finds no" \
         "wheel for a locked version, run again with --no-lock" >&2
fi
if [[ $system_torch == 1 ]]; then
    python -c 'import torch' 2>/dev/null || { echo "--system-torch: python3 has no torch to keep" >&2; exit 2; }
else
    pip install --quiet "${torch_args[@]}"
fi
pip install --quiet -r requirements.txt "${lock[@]}"
if [[ $workflow == 1 ]]; then
    pip install --quiet -r requirements-workflow.txt "${lock[@]}"
fi
if [[ $text == 1 ]]; then
    pip install --quiet -r requirements-text.txt "${lock[@]}"
fi
if [[ $tensorboard == 1 ]]; then
    pip install --quiet -r requirements-tensorboard.txt "${lock[@]}"
fi
python - <<'PY'
import torch
print(f"torch {torch.__version__}, CUDA {torch.version.cuda or 'none (CPU build)'}, "
      f"GPU available: {torch.cuda.is_available()}")
PY
