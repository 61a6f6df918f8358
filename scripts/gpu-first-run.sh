#!/usr/bin/env bash
# The first command on a GPU machine (README: On a GPU machine without network): environment,
# `pytest -m gpu` as JUnit XML, the speed benchmark, a profiler trace of one FedSSD round and a
# summary table, all in OUTDIR, in under ten minutes. No install: the checkout goes on PYTHONPATH
# and the machine's own Python (PYTHON, default python3) with its CUDA torch runs it.
#
#   scripts/gpu-first-run.sh OUTDIR [CIFAR10_JPEG_ZIP] [--minutes M]
set -euo pipefail
if [[ $# -lt 1 || $1 == -* ]]; then
    echo "usage: $0 OUTDIR [CIFAR10_JPEG_ZIP] [--minutes M]" >&2
    exit 2
fi
repo="$(cd "$(dirname "$0")/.." && pwd)"
out=$1
shift
data=()
if [[ $# -gt 0 && $1 != -* ]]; then
    data=(--data "$1")
    shift
fi
export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}"
cd "$repo"
exec "${PYTHON:-python3}" -m benchmarks.first_run --out "$out" "${data[@]}" "$@"
