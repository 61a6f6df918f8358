"""`--first`: the cells a user whose time is short trains before the rest of the targets.

    --first rows=FedAvg,FedSSD,"FedSSD (weight M)" --first settings=δ=0.5 --first seeds=0

Each `--first KEY=NAMES` narrows the choice to the cells whose row (method), setting (column)
or seed is one of NAMES, comma-separated; the cells that pass every key given train first, in
the order the names are given (seeds, then rows, then settings), before the targets' other runs
in their usual order. A name that matches no cell of the targets is refused in one line that
lists the valid ones. The choice is kept in the state file, so that the next session of the same
campaign, on this machine or a GPU, continues with the same cells first.
"""

from __future__ import annotations

import dataclasses

from shared.campaign.state_reading import CampaignError
from shared.config.schema import run_id
from shared.targets.copies import Copy, on_copy
from shared.targets.resolve import target_cells

KEYS = ("seeds", "rows", "settings")  # the order in which a choice orders its cells


@dataclasses.dataclass(frozen=True)
class ChosenCell:
    """A cell that trains first: its run id, and what a person calls it."""

    run_id: str
    row: str
    setting: str
    seed: int
    rounds: int

    @property
    def name(self) -> str:
        return f"{self.row} at {self.setting}, seed {self.seed}"


def parse_first(values: list[str] | None) -> dict[str, list[str]]:
    """KEY -> the names given for it ({}: no choice); CampaignError in one line for a value
    that is not rows=, settings= or seeds= with at least one name."""
    choice: dict[str, list[str]] = {}
    for value in values or []:
        key, sep, names = value.partition("=")
        if not sep or key not in KEYS:
            raise CampaignError(f"--first {value!r}: expected {'|'.join(KEYS)}=NAME[,NAME...]")
        listed = [n.strip() for n in names.split(",") if n.strip()]
        if not listed:
            raise CampaignError(f"--first {value!r}: names no {key[:-1]}")
        choice.setdefault(key, []).extend(n for n in listed if n not in choice.get(key, []))
    return choice


def cell_names(cell) -> dict[str, str]:
    return {"seeds": str(cell.seed), "rows": cell.row.label, "settings": cell.column.label}


def chosen_cells(values: list[str] | None, targets: list[str], scale: str, copy: Copy | None) -> list[ChosenCell]:
    """The targets' cells that `--first values` names, in the order it names them; [] without
    a choice. A name that is no row, setting or seed of the targets is refused in one line."""
    choice = parse_first(values)
    if not choice:
        return []
    cells = [cell for target in targets for cell in target_cells(target, scale)]
    for key, names in choice.items():
        valid = list(dict.fromkeys(cell_names(c)[key] for c in cells))
        unknown = [n for n in names if n not in valid]
        if unknown:
            raise CampaignError(
                f"--first {key}={','.join(unknown)}: no such {key[:-1]} in {' '.join(targets)} at scale {scale}; "
                f"valid: {', '.join(valid)}"
            )
    picked = [c for c in cells if all(cell_names(c)[key] in names for key, names in choice.items())]
    if not picked:
        raise CampaignError(f"--first {' '.join(values)}: no cell of {' '.join(targets)} has all of these")

    def order(cell) -> tuple:
        names = cell_names(cell)
        return tuple(choice[key].index(names[key]) if key in choice else 0 for key in KEYS)

    chosen: dict[str, ChosenCell] = {}
    for cell in sorted(picked, key=order):  # stable: the table's order where the names leave it open
        cfg = on_copy(cell.config, copy)
        if cfg is not None:
            rid = run_id(cfg)
            chosen.setdefault(rid, ChosenCell(rid, cell.row.label, cell.column.label, cell.seed, cfg.federation.rounds))
    return list(chosen.values())
