"""Which runs may train together in one batched step, and the groups they form.

Runs of one method that share their model, optimizer and the hyperparameters that shape a
local step (a table row across its settings and seeds) can train as one group: every (run,
client) pair of a round in one vmapped step. Each run keeps its own data, partition, global
model, aggregation, random streams, evaluation, checkpoint and files, so what may differ
within a group is everything that decides *which* samples a step sees and what happens between
rounds; what must be equal is everything that decides the step's code and shapes.
"""

from __future__ import annotations

import json

from shared.config.schema import RunConfig, identity

# Keys a group's runs may differ in (dotted prefixes of the identity): the seed, which data
# each client holds, the federation around the local steps, and how the global model is
# evaluated. Local epochs may differ too: the batched step pads clients with fewer steps.
MAY_DIFFER = (
    "seed",
    "partition",
    "federation",
    "aux",
    "eval",
    "local.epochs",
    "dataset.train_subset",
    "dataset.val_fraction",
    "dataset.val_source",
)
# Runtime keys (not in the id) that still decide how the group's step runs
STEP_RUNTIME = ("device", "deterministic", "cuda_graphs", "compile")


def group_key(cfg: RunConfig) -> str:
    """Equal for runs that may train in one group."""
    flat = {}
    for section, values in identity(cfg).items():
        items = values.items() if isinstance(values, dict) else [(None, values)]
        for key, value in items:
            dotted = section if key is None else f"{section}.{key}"
            if not any(dotted == p or dotted.startswith(p + ".") for p in MAY_DIFFER):
                flat[dotted] = value
    flat.update({f"trainer.{k}": getattr(cfg.trainer, k) for k in STEP_RUNTIME})
    return json.dumps(flat, sort_keys=True, default=str)


def form_groups(
    runs: dict[str, RunConfig], largest: int, used_by: dict[str, frozenset] | None = None
) -> list[list[str]]:
    """Run ids in groups of at most `largest` runs with one `group_key`, each group's runs in
    (seed, run id) order, groups in the order their first run appears in `runs`. `used_by`: the
    targets that use each run; runs group only with runs of the same targets, so that a job
    trains no run that the targets asked for do not need. The groups depend on `runs` (and
    `used_by`) alone, never on what is finished, so every process that forms them (the
    workflow's main process, a SLURM job's, the campaign) forms the same."""
    by_key: dict[tuple, list[str]] = {}
    for rid, cfg in runs.items():
        by_key.setdefault((group_key(cfg), (used_by or {}).get(rid)), []).append(rid)
    groups = []
    for members in by_key.values():
        members.sort(key=lambda rid: (runs[rid].seed, rid))
        groups += [members[i : i + largest] for i in range(0, len(members), largest)]
    return groups
