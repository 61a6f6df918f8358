"""The GPU session gate's cases, and which runs each one's verdict holds for.

The gate (shared/campaign/gate.py) tests one case per distinct method of a session's targets:
the first row that declares each `method_key` (its method, its switches, its model; not its
numbers), named `<paper>-<table>-<row>`. What a case found holds for every run of the targets
with its method_key, so that a method that fails on a GPU sends its own runs to the safer
settings and leaves the others theirs:

    python -m shared.campaign train papers/fedssd/table2 ... \\
        --set-for "fedssd-table2-MOON:trainer.clients_per_step=1"

sets a runtime key, over --set's, for MOON's runs only.

A session tests its cases in the order it trains their methods from its carried state
(`cases_in_turn`; shared/campaign/session.py `gate_order`: the state's --first cells, then the
campaign's order, less what is finished), so that a gate cut short by its time limit has
tested the methods the session trains.
"""

from __future__ import annotations

from collections.abc import Callable

from shared.campaign.state_reading import CampaignError
from shared.config.dotted import deep_merge
from shared.config.schema import RunConfig
from shared.targets.copies import training_order
from shared.targets.resolve import target_cells
from shared.targets.runtime_settings import parse_settings

GATE_DATASET = "cifar10"  # the campaign trains on a copy of CIFAR-10: the gate's cases are its rows'


def method_key(cfg: RunConfig) -> tuple:
    """What sets a run's step apart: its method, its switches (not its numbers), its model."""
    switches = tuple(sorted((k, v) for k, v in cfg.method.items() if v is None or isinstance(v, (bool, str))))
    return switches, cfg.model.name, cfg.model.projection_dim is not None


def method_cases(targets: list[str], dataset: str | None = None) -> dict[str, RunConfig]:
    """ "<paper>-<table>-<row>" -> the first run of each distinct method (`method_key`) of the
    targets' rows at paper scale (on `dataset` only, where given), in the order a campaign of
    the targets first trains a run of each method (`training_order`), so that a gate cut short
    by its time limit has tested those; a campaign's own `--first` and its finished runs are not
    taken into account."""
    cells = [
        (target, cell)
        for target in targets
        for cell in target_cells(target, "paper")
        if dataset is None or cell.config.dataset.name == dataset
    ]
    named: dict[tuple, tuple[str, RunConfig]] = {}
    for target, cell in cells:
        paper, table = target.strip("/").split("/")[-2:]
        named.setdefault(method_key(cell.config), (f"{paper}-{table}-{cell.row.label}", cell.config))
    first: dict[tuple, int] = {}
    for _, cell in sorted(cells, key=lambda tc: training_order(tc[1])):
        first.setdefault(method_key(cell.config), len(first))
    return dict(named[key] for key in sorted(named, key=first.__getitem__))


def cases_in_turn(
    cases: dict[str, RunConfig], runs: dict[str, RunConfig], finished: Callable[[str], bool]
) -> list[str]:
    """The cases' names in the order a campaign trains the first unfinished run of each one's
    method (`runs`: run id -> config, in the campaign's order, `shared.targets.copies.campaign_runs`);
    a method with none left comes after, in the cases' own order."""
    turn: dict[tuple, int] = {}
    for rid, cfg in runs.items():
        if not finished(rid):
            turn.setdefault(method_key(cfg), len(turn))
    return sorted(cases, key=lambda case: turn.get(method_key(cases[case]), len(turn)))


def in_given_order(cases: dict[str, RunConfig], names: list[str]) -> dict[str, RunConfig]:
    """The cases, those `names` names first in its order (`cases_in_turn`'s, a session's), then the rest."""
    rank = {name: i for i, name in enumerate(names)}
    return {case: cases[case] for case in sorted(cases, key=lambda case: rank.get(case, len(rank)))}


def settings_by_method(texts: list[str] | None, targets: list[str]) -> dict[tuple, dict]:
    """method_key -> the nested runtime settings of `--set-for CASE:KEY=VALUE ...`; a CASE that
    is no gate case of the targets, or a key that is no runtime key, is refused in one line."""
    if not texts:
        return {}
    cases = method_cases(targets, GATE_DATASET)
    by_case: dict[str, list[str]] = {}
    for text in texts:
        # a row's label may hold "=" or ":" (FedGKD's "M=1"): the case is the known one the text starts with
        case = max((c for c in cases if text.startswith(f"{c}:")), key=len, default=None)
        if case is None:
            valid = ", ".join(sorted(cases))
            raise CampaignError(
                f"--set-for {text!r}: expected CASE:KEY=VALUE with CASE a gate case of {' '.join(targets)}: {valid}"
            )
        by_case.setdefault(case, []).append(text[len(case) + 1 :])
    return {method_key(cases[case]): parse_settings(settings) for case, settings in by_case.items()}


def run_settings(settings: dict, by_method: dict[tuple, dict], cfg: RunConfig) -> dict:
    """The runtime settings `cfg`'s run trains with: --set's, then its method's --set-for."""
    own = by_method.get(method_key(cfg))
    return deep_merge(settings, own) if own else settings
