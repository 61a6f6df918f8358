"""Which runs a target needs: a Snakemake-style target (papers/<paper>/<name>, a whole paper,
<paper>_searches) resolved to its cells, through the same declarations the workflow expands, so
the run ids agree with it; and every grid the workflow trains. shared.archive, shared.campaign,
shared.plan and the workflow's expansion (shared/targets/expansion_cache.py) all resolve names here.
Imports no torch: the declarations (shared/targets/table_declarations.py) import none."""

from __future__ import annotations

from shared.config.schema import ConfigError
from shared.targets.figure_declarations import get_figure, paper_figures
from shared.targets.papers import paper_names
from shared.targets.table_declarations import (
    all_tables,
    check_scale,
    expand,
    get_search,
    get_table,
    paper_searches,
    paper_tables,
)


class TargetError(Exception):
    """A target that names nothing the papers declare; the message is one line."""


def workflow_grids() -> list[tuple[str, str, object]]:
    """Every grid the workflow trains, as (paper, target name, Table): each table, each figure
    with a grid of its own (the others draw a table's runs) and each search."""

    grids = [(t.paper, t.name, t) for t in all_tables()]
    for paper in paper_names():
        grids += [(paper, name, f.table) for name, f in paper_figures(paper).items() if not isinstance(f.table, str)]
        grids += [(paper, name, s.as_table()) for name, s in paper_searches(paper).items()]
    return grids


def workflow_cells(scale: str, runtime: dict | None = None) -> list[tuple[str, str, object]]:
    """(paper, target name, Cell) for every run of every grid at `scale`."""

    return [(paper, name, cell) for paper, name, grid in workflow_grids() for cell in expand(grid, scale, runtime)]


def target_cells(target: str, scale: str) -> list:
    """The cells (shared.targets.table_declarations.Cell) of one Snakemake-style target at `scale`, found
    through the same declarations the workflow expands, so the run ids agree with it."""

    command_targets([target])  # one line naming the valid targets where it names none
    parts = target_parts(target)
    try:
        if len(parts) == 1 and parts[0].endswith("_searches"):
            return searches_cells(parts[0][: -len("_searches")], scale)
        if len(parts) == 1:
            return paper_cells(parts[0], scale)
        return named_cells(parts[0], parts[1], scale)  # command_targets left one or two parts
    except ConfigError as exc:  # a scale the target cannot take
        raise TargetError(f"target {target}: {exc}") from None


def target_parts(target: str) -> list[str]:
    """A Snakemake-style target's parts: papers/<paper>/<name> -> [paper, name], <paper> -> [paper]."""
    parts = [p for p in target.strip().split("/") if p]
    return parts[1:] if parts[:1] == ["papers"] else parts


def named_cells(paper: str, name: str, scale: str) -> list:
    """A table, a figure or a search, told apart by name as the workflow's rules tell them apart."""

    if name.startswith("table"):
        return expand(get_table(paper, name), scale)
    if name.startswith("fig"):
        figure = get_figure(paper, name)
        return figure.cells(scale) if figure.needs_training else []
    if name.startswith("search_"):
        return expand(get_search(paper, name).as_table(), scale)
    valid = sorted([*paper_tables(paper), *paper_figures(paper), *paper_searches(paper)])
    raise ConfigError(f"{paper} has no target {name!r}; valid: {valid}")


def paper_cells(paper: str, scale: str) -> list:
    """A whole paper: its tables and figures (not its searches), as `snakemake <paper>`."""

    names = [*paper_tables(paper), *paper_figures(paper)]
    return [cell for name in names for cell in named_cells(paper, name, scale)]


def searches_cells(paper: str, scale: str) -> list:
    """Every search of a paper, as `snakemake <paper>_searches`."""

    return [cell for name in paper_searches(paper) for cell in named_cells(paper, name, scale)]


def needed_runs(targets: list[str], scale: str) -> list[str]:
    """The run ids the targets need, each once, in the order the targets list them."""

    try:
        check_scale(scale)
    except ConfigError as exc:
        raise TargetError(str(exc)) from None
    ids: dict[str, None] = {}
    for target in targets:
        ids.update((cell.run_id, None) for cell in target_cells(target, scale))
    return list(ids)


def paper_target_names(paper: str) -> list[str]:
    """Every target of a paper, in the order it declares them: its tables, figures, searches."""

    return [*paper_tables(paper), *paper_figures(paper), *paper_searches(paper)]


def command_targets(words: list[str]) -> tuple[str, list[str]]:
    """(paper, its target names) that a command line's words name, as Snakemake takes a target
    (`papers/<paper>/<name>`, `papers/<paper>`, a trailing slash allowed, `<paper>_searches`) or as
    two words (`<paper> <name>`); a paper alone is every table, figure and search of it.
    TargetError, one line naming the valid ones, where the words name nothing."""

    shown = " ".join(words)
    parts = [part for word in words for part in target_parts(word)]
    searches_only = len(parts) == 1 and parts[0].endswith("_searches") and parts[0] not in paper_names()
    if searches_only:
        parts = [parts[0].removesuffix("_searches")]
    if len(parts) not in (1, 2) or parts[0] not in paper_names():
        raise TargetError(
            f"{shown} is not a target (papers/<paper>[/<name>]); valid papers: {', '.join(paper_names())}"
        )
    paper, names = parts[0], paper_target_names(parts[0])
    if searches_only:
        return paper, [name for name in names if name.startswith("search_")]
    if len(parts) == 2 and parts[1] not in names:
        raise TargetError(f"{shown} is not a target; valid for {paper}: {', '.join(names)}")
    return paper, names if len(parts) == 1 else [parts[1]]
