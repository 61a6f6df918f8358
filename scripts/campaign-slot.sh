#!/usr/bin/env bash
# One slot of the campaign on an offline GPU machine (docs/gpu-sessions.md), e.g. a batch job:
#
#     scripts/campaign-slot.sh 9 papers/fedssd/table2 papers/fedgkd/table5 ...
#
# trains for MINUTES (whole minutes) from $CARRY/state.tar.gz (default CARRY=.carry), the data
# under $CARRY/data (`python -m shared.campaign bundle ... -o .carry`), PyYAML installed from
# $CARRY/wheels where the machine lacks it; then copies the state file (or its parts) into $OUT
# if set. `timeout` ends a round that overruns the budget: campaign stops on its SIGTERM as
# on its own budget, state written, exit status 0 (a campaign still running 20 s later is killed).
set -euo pipefail
minutes=$1
shift
carry=${CARRY:-.carry}
# python3, as scripts/gpu-session.sh: on CUDA images it is the one with CUDA's torch (a plain
# `python` may be absent there)
python=${PYTHON:-python3}
export PYTHONUNBUFFERED=1  # a slot killed at its limit still returns every line printed
if ! "$python" -c "import yaml" 2>/dev/null; then
    "$python" -m pip install -q --no-index --find-links "$carry/wheels" --target "$carry/site" pyyaml
fi
if [ -d "$carry/site" ]; then
    export PYTHONPATH="$carry/site${PYTHONPATH:+:$PYTHONPATH}"
fi
status=0
timeout --preserve-status -k 20 $((minutes * 60 + 30)) "$python" -m shared.campaign train "$@" --minutes "$minutes" \
    --data-root "$carry/data" --state "$carry/state.tar.gz" || status=$?
if [ -n "${OUT:-}" ]; then
    # only what train wrote (none where it was refused): an unmatched glob would fail `cp` and
    # replace train's exit status
    for file in "$carry"/state.tar.gz "$carry"/state.tar.gz.part-[0-9][0-9]; do
        if [ -f "$file" ]; then
            cp "$file" "$OUT"/ || status=$?
        fi
    done
fi
exit "$status"
