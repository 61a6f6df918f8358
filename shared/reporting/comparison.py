"""Ours against the paper's: each cell's number beside the paper's (comparison.csv), each
setting's Kendall tau between the two rankings of the methods, and the same as Markdown, a
self-contained HTML page and a figure (comparison.md/.html/.png)."""

from __future__ import annotations

import html
import math
from pathlib import Path

import numpy as np
import pandas as pd

from shared.reporting.figure_style import pyplot
from shared.reporting.summary import (
    BY_DEFINITION_NOTE,
    EQUALS_NOTE,
    FAILED,
    NOT_IMPLEMENTED,
    READING_MARK,
    REFERENCE_ROW,
    SUSPECT,
    decimals,
    fmt,
    reading_notes,
    rounds_read_note,
    shown,
)
from shared.targets.table_declarations import Table, seeds_text


def kendall_tau(x, y) -> float:
    """Kendall's rank correlation tau-b of two equally long sequences (ties in either counted as
    scipy.stats.kendalltau does); NaN for fewer than two pairs or where one side is constant."""
    x, y = list(x), list(y)
    concordant = discordant = ties_x = ties_y = 0
    for i in range(len(x)):
        for j in range(i + 1, len(x)):
            dx, dy = (x[i] > x[j]) - (x[i] < x[j]), (y[i] > y[j]) - (y[i] < y[j])  # inf ties inf
            ties_x += dx == 0
            ties_y += dy == 0
            if dx and dy:
                concordant += dx == dy
                discordant += dx != dy
    pairs = len(x) * (len(x) - 1) // 2
    denominator = math.sqrt((pairs - ties_x) * (pairs - ties_y))
    return (concordant - discordant) / denominator if denominator else math.nan


def ranks(values: pd.Series, higher_is_better: bool) -> pd.Series:
    """1 = best; ties share the best of their ranks."""
    return values.rank(ascending=not higher_is_better, method="min")


def rank_values(column: pd.DataFrame, metric) -> tuple[pd.Series, pd.Series]:
    """A column's values to rank, ours and the paper's: the means, and in a rounds column a
    target never reached (every completed seed of ours; the paper's "_") as +inf, last; a cell
    of ours where only some seeds reached it, or some had no target, is not ranked (NaN), nor the
    reference row's own count, which is its rounds by definition (`by_definition`)."""
    if not metric.counts_rounds:
        return column.ours_mean, column.paper_mean
    ours = column.ours_mean.where(column.never == 0, np.where(column.n == 0, math.inf, math.nan))
    ours = ours.where((column.no_target == 0) & ~column.by_definition.astype(bool), math.nan)
    return ours, column.paper_mean.where(~column.paper_never.astype(bool), math.inf)


def comparison(table: Table, summary: pd.DataFrame, scale: str) -> pd.DataFrame:
    """The paper's number beside ours for every cell. `within_spread`: the paper's mean lies
    within two standard deviations of ours over seeds (or of the paper's own, if larger);
    left empty below paper scale, where the numbers are not comparable. Per column, the rank
    agreement of the methods that have both numbers (printed precision, so printed ties are
    ties; in a rounds column a target never reached ranks last, `rank_values`): each one's rank
    in ours and in the paper's (1 = best), and Kendall's tau-b between the two orders
    (`kendall_tau`, `rank_pairs` methods; NaN below two)."""
    rows = []
    notes = {(i.row, i.column): i.note for i in table.inconsistencies}
    for row in table.rows:
        printed = row.label in table.reported
        reported = table.reported.get(row.label, [None] * len(table.columns))
        for column, paper in zip(table.columns, reported):
            s = summary[(summary.row == row.label) & (summary.column == column.label)].iloc[0]
            paper_never = printed and paper is None and table.metric_for(column).counts_rounds
            paper_mean = paper.mean if paper and paper.mean is not None else math.nan
            paper_std = paper.std if paper and paper.std is not None else math.nan
            diff = s["mean"] - paper_mean
            spread = 2 * np.nanmax([s["std"], paper_std]) if s.n >= 2 and scale == "paper" else math.nan
            rows.append(
                dict(
                    row=row.label,
                    column=column.label,
                    ours_mean=s["mean"],
                    ours_std=s["std"],
                    n=s.n,
                    paper_mean=paper_mean,
                    paper_std=paper_std,
                    diff=diff,
                    within_spread=agreement(s, diff, spread, paper_mean, scale, paper_never),
                    never=s.get("never", 0),
                    no_target=s.get("no_target", 0),
                    by_definition=bool(s.by_definition),
                    paper_never=paper_never,
                    failed=s.failed,
                    suspect=s.get("suspect", 0),
                    status=s.status,
                    at_chance=bool(s.get("at_chance", False)),
                    equals_fedavg=bool(s.get("equals_fedavg", False)),
                    paper_note=notes.get((row.label, column.label), ""),
                    reading=row.reading,
                )
            )
    return with_rank_agreement(table, pd.DataFrame.from_records(rows))


def agreement(s, diff: float, spread: float, paper_mean: float, scale: str, paper_never: bool = False) -> bool | None:
    """✓ (True) where our mean and the paper's lie within `spread` of each other, ✗ (False) where
    not, None (no mark) where that cannot be told. A rounds cell with a seed that never reached
    its target has a mean of the seeds that did: no mark, but ✗ where no seed reached what the
    paper's number says it reached (its paper scale runs, two seeds or more). Where the paper
    printed "_" (`paper_never`), ✓ where none of two seeds or more reached it either, ✗ where
    every one of two or more did."""
    if s.by_definition:
        return None
    never = s.get("never", 0)
    if paper_never:
        if scale != "paper":
            return None
        if never >= 2 and s.n == 0:  # neither reached it
            return True
        return False if never == 0 and s.n >= 2 else None  # we reached it on every seed
    if never and s.n == 0:
        return False if scale == "paper" and never >= 2 and not math.isnan(paper_mean) else None
    if never or math.isnan(spread) or math.isnan(diff):
        return None
    return bool(abs(diff) <= spread)


def with_rank_agreement(table: Table, comp: pd.DataFrame) -> pd.DataFrame:
    """`comp` with each cell's rank in ours and in the paper's, and each column's Kendall tau."""
    comp["rank_ours"] = comp["rank_paper"] = comp["kendall_tau"] = math.nan
    comp["rank_pairs"] = 0
    for column in table.columns:
        metric = table.metric_for(column)
        ours, paper = rank_values(comp[comp.column == column.label], metric)
        both = ours.notna() & paper.notna()
        if not both.any():
            continue
        places = decimals(metric)
        both = ours.index[both]
        ours = ours[both].map(lambda v, places=places: shown(v, places))
        paper = paper[both].map(lambda v, places=places: shown(v, places))
        comp.loc[both, "rank_ours"] = ranks(ours, metric.higher_is_better)
        comp.loc[both, "rank_paper"] = ranks(paper, metric.higher_is_better)
        in_column = comp.column == column.label
        comp.loc[in_column, "kendall_tau"] = kendall_tau(ours, paper)
        comp.loc[in_column, "rank_pairs"] = len(both)
    return comp


def column_agreement(table: Table, comp: pd.DataFrame) -> dict[str, tuple[float, int]]:
    """Column label -> (Kendall's tau, methods compared)."""
    first = comp.drop_duplicates("column").set_index("column")
    return {
        c.label: (float(first.loc[c.label, "kendall_tau"]), int(first.loc[c.label, "rank_pairs"]))
        for c in table.columns
    }


def tau_text(tau: float, pairs: int) -> str:
    return "-" if math.isnan(tau) else f"{tau:+.2f} ({pairs} methods)"


# The mark on a paper's printed number that the paper contradicts elsewhere (the note says how)
INCONSISTENT = " §"


def row_name(row) -> str:
    """The row's label, marked where it is a reading that is not the paper's text."""
    return f"{row.label} {READING_MARK}" if row.reading_of else row.label


def inconsistency_notes(table: Table) -> list[tuple[str, str, str]]:
    """(row, column, note) of each printed cell the paper contradicts, for under the comparison."""
    return [(i.row, i.column, f"the paper's printed number; {i.note}") for i in table.inconsistencies]


def paper_text(c, places: int) -> str:
    """The paper's number of comparison row `c`, with its std where the paper prints one and
    marked where the paper contradicts it."""
    has_std = not math.isnan(c.paper_std)
    text = fmt(c.paper_mean, c.paper_std if has_std else 0.0, 2 if has_std else 1, places)
    return text + (INCONSISTENT if c.paper_note else "")


def comparison_markdown(table: Table, comp: pd.DataFrame, scale: str, warning: str | None = None) -> str:
    """`warning`: settings that are the same runs at this scale (shared.reporting.figure_settings.same_runs_warning)."""
    metrics = sorted({table.metric_for(c).label for c in table.columns})
    lines = [
        f"# {table.paper} {table.name}: ours vs. the paper",
        "",
        f"{table.caption}",
        "",
        f"Scale: **{scale}**"
        + ("" if scale == "paper" else " (not comparable with the paper's numbers; a check that the pipeline runs)"),
        f"Metric: {', '.join(metrics)}; ours are mean ± std over seeds {seeds_text(table, scale)} "
        f"(population std, ddof=0). {rounds_read_note(table, scale, '⌈tR/P⌉')}".rstrip(),
        "",
        "| Method | " + " | ".join(c.label for c in table.columns) + " |",
        "|---|" + "---|" * len(table.columns),
    ]
    for row in table.rows:
        cells = []
        for column in table.columns:
            c = comp[(comp.row == row.label) & (comp.column == column.label)].iloc[0]
            places = decimals(table.metric_for(column))
            ours = "n/i" if c.status == NOT_IMPLEMENTED else fmt(c.ours_mean, c.ours_std, c.n, places) + notes(c)
            paper = paper_text(c, places)
            flag = {True: " ✓", False: " ✗"}.get(c.within_spread, "")
            diff = "" if math.isnan(c["diff"]) else f" ({c['diff']:+.{places}f})"
            cells.append(f"{ours} / {paper}{diff}{flag}")
        lines.append(f"| {row_name(row)} | " + " | ".join(cells) + " |")
    agreement = column_agreement(table, comp)
    lines.append("| *Kendall τ* | " + " | ".join(tau_text(*agreement[c.label]) for c in table.columns) + " |")
    lines += [
        "",
        "Each cell: ours / paper (difference). ✓: within two standard deviations (the larger of ours over "
        "seeds and the paper's; marked where ours has two seeds or more, at paper scale); ✗: outside "
        "(none in a rounds cell with a seed that never reached its target, "
        'unless no seed did; where the paper\'s is "_", never reached: ✓ if none of two seeds or more of ours '
        "reached it, ✗ if every one of two or more did); n/i: method not implemented yet; (k failed): k seeds "
        "failed or diverged, (k suspect): k seeds flagged suspect, (k never reached): k seeds never reached a rounds "
        "column's target, (k without a target): k seeds whose run of the row a rounds column counts to "
        "failed, the mean is over the others; (at chance): the mean "
        f"accuracy is chance, 100/classes %;{EQUALS_NOTE}: each seed's value is {REFERENCE_ROW}'s;"
        f"{BY_DEFINITION_NOTE}: the rounds of the row whose final accuracy is the target, neither "
        "compared nor ranked. "
        "Kendall τ: rank agreement (tau-b, -1 to +1) between our order of the methods and the paper's "
        "in that column, over the methods with both numbers.",
    ]
    if warning:
        lines += ["", f"**{warning}**"]
    if table.inconsistencies:
        lines += [
            "",
            *(
                f"- {INCONSISTENT.strip()} {row} at {column}: {note}"
                for row, column, note in inconsistency_notes(table)
            ),
        ]
    lines += ["", *(f"- {READING_MARK} {note}" for note in reading_notes(table))] if reading_notes(table) else []
    if table.notes:
        lines += ["", f"Notes: {table.notes}"]
    return "\n".join(lines) + "\n"


GREEN, RED = "#1a7f37", "#cf222e"
CELL_STYLE = "border:1px solid #d0d7de;padding:4px 8px;vertical-align:top;text-align:right;white-space:nowrap"
HEAD_STYLE = "border:1px solid #d0d7de;padding:4px 8px;background:#f6f8fa;text-align:center"
ROW_HEAD_STYLE = "border:1px solid #d0d7de;padding:4px 8px;background:#f6f8fa;text-align:left;white-space:nowrap"


def notes(c) -> str:
    """What follows our number in a cell of the comparison (comparison row `c`; its legend says
    what each means)."""
    return "".join(
        [
            f" ({c.never} never reached)" if c.never else "",
            f" ({c.no_target} without a target)" if c.no_target else "",
            f" ({c.failed} failed)" if c.failed else "",
            f" ({c.suspect} suspect)" if c.suspect else "",
            " (at chance)" if c.at_chance else "",
            EQUALS_NOTE if c.equals_fedavg else "",
            BY_DEFINITION_NOTE if c.by_definition else "",
        ]
    )


def html_cell(c, places: int) -> str:
    """One cell of the HTML comparison (comparison row `c`): ours, the paper's number, ours minus
    the paper's and ✓ (green) or ✗ (red)."""
    e = html.escape
    ours = "n/i" if c.status == NOT_IMPLEMENTED else fmt(c.ours_mean, c.ours_std, c.n, places) + notes(c)
    diff = "" if math.isnan(c["diff"]) else f"{c['diff']:+.{places}f}"
    flag = {
        True: f'<span style="color:{GREEN};font-weight:bold" title="within two standard deviations">✓</span>',
        False: f'<span style="color:{RED};font-weight:bold" title="outside two standard deviations">✗</span>',
    }.get(c.within_spread, "")
    return (
        f'<td style="{CELL_STYLE}"><div>{e(ours)}</div>'
        f'<div style="color:#57606a">paper {e(paper_text(c, places))}</div>'
        f"<div>{e(diff)} {flag}</div></td>"
    )


def html_legend(table: Table, scale: str, warning: str | None) -> str:
    """The paragraphs under the HTML comparison: what a cell shows, the warning, the paper's
    contradictions, our readings and the table's notes."""
    e = html.escape
    legend = (
        '<p style="font-size:12px;color:#57606a">Each cell: ours (mean ± population std, ddof=0, over seeds '
        f"{e(seeds_text(table, scale))}), the paper's number, ours minus the paper's, and "
        f'<span style="color:{GREEN}">✓</span> within two standard deviations (the larger of ours over '
        f'seeds and the paper\'s) or <span style="color:{RED}">✗</span> outside (paper scale, two seeds or more; '
        "in a rounds "
        'column a target never reached, on each of our seeds or as the paper\'s "_", agrees only with one never '
        "reached). n/i: not "
        "implemented; (k failed) / (k suspect) / (k never reached) / (k without a target): seeds left out of the "
        "mean; (at chance): "
        "the mean accuracy is "
        f"chance, 100/classes %;{e(EQUALS_NOTE)}: each seed's value is {REFERENCE_ROW}'s;"
        f"{e(BY_DEFINITION_NOTE)}: the rounds of the row whose final accuracy is the target, neither compared "
        "nor ranked. "
        "Kendall τ: rank agreement of the methods between ours and the paper's in that column "
        "(tau-b, -1 to +1).</p>"
    )
    if warning:
        legend += f'<p style="font-size:13px;color:{RED};font-weight:bold">{e(warning)}</p>'
    legend += "".join(
        f'<p style="font-size:12px;color:#57606a">{INCONSISTENT.strip()} {e(row)} at {e(column)}: {e(note)}</p>'
        for row, column, note in inconsistency_notes(table)
    )
    legend += "".join(
        f'<p style="font-size:12px;color:#57606a">{READING_MARK} {e(note)}</p>' for note in reading_notes(table)
    )
    if table.notes:
        legend += f'<p style="font-size:12px;color:#57606a">Notes: {e(table.notes)}</p>'
    return legend


def comparison_html(table: Table, comp: pd.DataFrame, scale: str, warning: str | None = None) -> str:
    """The comparison as a self-contained HTML page (inline styles only, so that its <table>
    can be embedded as it is): per cell ours, the paper's number, the difference and ✓ (green,
    within two standard deviations) or ✗ (red); a last row with each column's Kendall tau."""
    e = html.escape
    head = "".join(
        f'<th style="{HEAD_STYLE}">{e(c.label)}<br><span style="font-weight:normal;color:#57606a">'
        f"{e(table.metric_for(c).label)}</span></th>"
        for c in table.columns
    )
    body = []
    for row in table.rows:
        cells = []
        for column in table.columns:
            c = comp[(comp.row == row.label) & (comp.column == column.label)].iloc[0]
            cells.append(html_cell(c, decimals(table.metric_for(column))))
        body.append(f'<tr><th style="{ROW_HEAD_STYLE}">{e(row_name(row))}</th>{"".join(cells)}</tr>')
    agreement = column_agreement(table, comp)
    body.append(
        f'<tr><th style="{ROW_HEAD_STYLE}">Kendall τ</th>'
        + "".join(f'<td style="{CELL_STYLE}">{e(tau_text(*agreement[c.label]))}</td>' for c in table.columns)
        + "</tr>"
    )
    scale_note = (
        ""
        if scale == "paper"
        else (f' <strong style="color:{RED}">Scale: {e(scale)}; not comparable with the paper\'s numbers.</strong>')
    )
    caption = (
        f'<caption style="caption-side:top;text-align:left;padding:4px 0">'
        f"<strong>{e(table.paper)} {e(table.name)}</strong>: {e(table.caption)}{scale_note}</caption>"
    )
    return "\n".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            f"<title>{e(table.paper)} {e(table.name)}: ours vs. the paper</title></head>",
            '<body style="font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;font-size:14px">',
            f'<table style="border-collapse:collapse">{caption}',
            f'<thead><tr><th style="{HEAD_STYLE}">Method</th>{head}</tr></thead>',
            "<tbody>",
            *body,
            "</tbody></table>",
            html_legend(table, scale, warning),
            "</body></html>",
            "",
        ]
    )


MARKERS = "osD^vP*Xh<>p"


def agreement_panel(ax, sel: pd.DataFrame, panel: str, marker: dict[str, str], colour: dict) -> None:
    """One metric's panel of the comparison figure: each cell of `sel` at (paper, ours) with
    error bars of one std each way (hollow where seeds failed or are suspect), and the diagonal
    where the two agree."""
    for _, c in sel.iterrows():
        ax.errorbar(
            c.paper_mean,
            c.ours_mean,
            xerr=0 if math.isnan(c.paper_std) else c.paper_std,
            yerr=0 if math.isnan(c.ours_std) else c.ours_std,
            fmt=marker[c.row],
            color=colour[c.column],
            markersize=6,
            capsize=2,
            elinewidth=0.8,
            alpha=0.9,
            markerfacecolor="none" if c.status != "ok" else colour[c.column],
        )
    if len(sel):
        low = float(np.nanmin([sel.ours_mean - sel.ours_std.fillna(0), sel.paper_mean - sel.paper_std.fillna(0)]))
        high = float(np.nanmax([sel.ours_mean + sel.ours_std.fillna(0), sel.paper_mean + sel.paper_std.fillna(0)]))
        pad = 0.05 * (high - low or 1.0)
        ax.plot([low - pad, high + pad], [low - pad, high + pad], color="0.4", linestyle="--", linewidth=0.8)
        ax.set_xlim(low - pad, high + pad)
        ax.set_ylim(low - pad, high + pad)
        ax.set_aspect("equal", adjustable="box")
    else:
        ax.text(
            0.5,
            0.5,
            "no cell has both our number\nand the paper's",
            ha="center",
            va="center",
            transform=ax.transAxes,
            color="0.4",
        )
    ax.set_xlabel(f"paper: {panel}")
    ax.set_ylabel(f"ours: {panel}")
    ax.grid(alpha=0.3)


def method_handles(table: Table, comp: pd.DataFrame, marker: dict[str, str]) -> list:
    """The legend's methods (those with a number of ours), and what a hollow marker means where
    one is drawn."""
    from matplotlib.lines import Line2D

    handles = [
        Line2D([], [], marker=marker[r.label], color="0.3", linestyle="", label=r.label)
        for r in table.rows
        if r.label in set(comp[comp.ours_mean.notna()].row)
    ]
    if (comp.ours_mean.notna() & comp.status.isin([FAILED, SUSPECT])).any():
        handles.append(
            Line2D(
                [],
                [],
                marker="o",
                color="0.3",
                markerfacecolor="none",
                linestyle="",
                label="hollow: seeds failed\nor suspect",
            )
        )
    return handles


def setting_handles(table: Table, comp: pd.DataFrame, colour: dict) -> list:
    """The legend's settings, each with its Kendall tau."""
    from matplotlib.lines import Line2D

    agreement = column_agreement(table, comp)
    return [
        Line2D(
            [],
            [],
            marker="s",
            color=colour[c.label],
            linestyle="",
            label=f"{c.label} (τ {tau_text(*agreement[c.label]).split(' (')[0]})",
        )
        for c in table.columns
    ]


def comparison_figure(table: Table, comp: pd.DataFrame, scale: str, path: Path) -> None:
    """Ours against the paper's number, one panel per metric (accuracy and rounds do not share
    an axis): error bars of one std each way, the diagonal where they agree, a marker per method
    and a colour per setting (its Kendall tau in the legend)."""
    plt = pyplot()
    panels = list(dict.fromkeys(table.metric_for(c).label for c in table.columns))
    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 4.4), squeeze=False)
    colours = plt.get_cmap("tab10" if len(table.columns) <= 10 else "tab20")
    colour = {c.label: colours(i % colours.N) for i, c in enumerate(table.columns)}
    marker = {r.label: MARKERS[i % len(MARKERS)] for i, r in enumerate(table.rows)}
    for ax, panel in zip(axes[0], panels):
        labels = [c.label for c in table.columns if table.metric_for(c).label == panel]
        sel = comp[comp.column.isin(labels) & comp.ours_mean.notna() & comp.paper_mean.notna()]
        agreement_panel(ax, sel, panel, marker, colour)
    fig.legend(
        handles=method_handles(table, comp, marker),
        title="method",
        loc="upper left",
        bbox_to_anchor=(1.0, 0.95),
        fontsize=8,
    )
    fig.legend(
        handles=setting_handles(table, comp, colour),
        title="setting (Kendall τ)",
        loc="lower left",
        bbox_to_anchor=(1.0, 0.02),
        fontsize=8,
    )
    title = f"{table.paper} {table.name}: ours against the paper's (scale: {scale})"
    if scale != "paper":
        title += "\nnot comparable below paper scale"
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=150, bbox_inches="tight")
    plt.close(fig)
