"""A table's claims and their verdicts as pages: claims.md, claims.html (for the report) and
claims.csv, written beside the table (shared/reporting/claims.py judges them)."""

from __future__ import annotations

import html
from pathlib import Path

import pandas as pd

from shared.reporting.claim_verdicts import HELD, NOISE_TEST, NOT_HELD, NOT_MEASURED, VERDICTS, WITHIN_NOISE


def tally(rows: pd.DataFrame) -> str:
    counts = rows.verdict.value_counts()
    parts = [f"{verdict} in {counts[verdict]}" for verdict in VERDICTS if verdict in counts]
    return f"{', '.join(parts)} of {len(rows)} group{'s' if len(rows) != 1 else ''}"


def detail(r) -> str:
    if r.verdict == NOT_MEASURED:
        return f"missing: {r.missing}"
    claimed = getattr(r, "claimed_margin", 0.0)
    noise = ("-" if pd.isna(r.noise) else f"{r.noise:.2f}") + (
        f"; the claim: a lead of more than {claimed:.2f}" if claimed and not pd.isna(claimed) else ""
    )
    also = "".join(
        f"; {label}: {text}"
        for label, text in (("worst outcomes", getattr(r, "worst", "")), ("left out", r.left_out))
        if isinstance(text, str) and text
    )
    if not pd.isna(r.margin):  # our runs' values are finite (claim_verdicts.run_values)
        return f"margin {r.margin:+.2f} (closest: {r.decisive}; noise {noise}{also})"
    return f"short by {r.shortfall:.2f} (furthest behind: {r.decisive}; noise {noise}{also})"


def scale_line(scale: str, data: str) -> str:
    note = (
        ""
        if scale == "paper"
        else (" (a reduced scale: the verdicts show the check runs, not whether the paper's claim holds)")
    )
    return f"Scale: **{scale}**{note}. Data: {data}."


def claims_markdown(title: str, df: pd.DataFrame, scale: str, data: str) -> str:
    lines = [
        f"# {title}",
        "",
        scale_line(scale, data),
        "",
        "Verdicts on our runs, per group (a column, or a trend), on the means over the seeds every cell "
        "of the group has, each rounded as the table rounds (equal rounded means are a tie):",
        "",
        "- held: every comparison leads by more than its noise (margin: the smallest lead);",
        "- within noise: none misses by more than its noise, some leads or misses by at most it: the runs cannot tell;",
        "- not held: a comparison misses by more than its noise (short by: the largest miss);",
        "- not yet measured: a cell has no value yet, or the cells share no seed (the missing cells are named);",
        f"- {NOISE_TEST}.",
        "",
        "A run that diverged or ended suspect counts at chance accuracy (100/classes %, or the column's lowest "
        "if lower), and in a rounds column as never reaching the target, which counts as one round more than "
        "the run's rounds; they are named (worst outcomes). A seed some cell lacks (a failed run, no target) is "
        "left out and named.",
        "",
        "Seeds held: the seeds on which every comparison of the group holds.",
        "",
    ]
    for (table, number), rows in df.groupby(["table", "claim"], sort=False):
        first = rows.iloc[0]
        lines += [
            f"## {table}, claim {number}: {first.statement}",
            "",
            f"Source: {first.source}. "
            f"On the paper's numbers: {tally(rows.assign(verdict=rows.paper_verdict))}. "
            f"On our runs: **{tally(rows)}**.",
            "",
            "| group | verdict | detail | seeds held |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {r.group} | {r.verdict} | {detail(r)} | {r.seeds_held if isinstance(r.seeds_held, str) else '-'} |"
            for r in rows.itertuples()
        ]
        lines.append("")
    if not len(df):
        lines.append(NO_CLAIM)
    return "\n".join(lines).rstrip() + "\n"


# A partial table (shipped runs) leaves out a claim while none of its comparisons is measured
NO_CLAIM = (
    "No claim of the paper is judged here: none is declared for this table, or, in a partial table, "
    "none of a claim's comparisons is measured yet."
)

COLOURS = {HELD: "#1a7f37", WITHIN_NOISE: "#9a6700", NOT_HELD: "#cf222e", NOT_MEASURED: "#57606a"}


def claims_html(title: str, df: pd.DataFrame, scale: str, data: str) -> str:
    """The claims as one self-contained HTML page (inline styles), for the report."""
    e = html.escape
    cell = "border:1px solid #d0d7de;padding:4px 8px;text-align:left;vertical-align:top"
    parts = [
        f"<h2>{e(title)}</h2>",
        f"<p>{e(scale_line(scale, data).replace('**', ''))}</p>",
        f'<p style="font-size:12px;color:#57606a">{e(NOISE_TEST)}.</p>',
    ]
    for (table, number), rows in df.groupby(["table", "claim"], sort=False):
        first = rows.iloc[0]
        parts.append(
            f"<h3>{e(table)}, claim {number}: {e(first.statement)}</h3>"
            f"<p>Source: {e(first.source)}. On the paper's numbers: "
            f"{e(tally(rows.assign(verdict=rows.paper_verdict)))}. On our runs: <strong>{e(tally(rows))}"
            "</strong>.</p>"
        )
        body = "".join(
            f'<tr><td style="{cell}">{e(r.group)}</td><td style="{cell};color:{COLOURS[r.verdict]};'
            f'font-weight:bold">{e(r.verdict)}</td><td style="{cell}">{e(detail(r))}</td>'
            f'<td style="{cell}">{e(r.seeds_held if isinstance(r.seeds_held, str) else "-")}</td></tr>'
            for r in rows.itertuples()
        )
        parts.append(
            f'<table style="border-collapse:collapse"><tr><th style="{cell}">group</th>'
            f'<th style="{cell}">verdict</th><th style="{cell}">detail</th><th style="{cell}">seeds held</th>'
            f"</tr>{body}</table>"
        )
    if not len(df):
        parts.append(f"<p>{NO_CLAIM}</p>")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<title>{e(title)}</title></head><body style="font-family:system-ui,sans-serif;font-size:14px">'
        + "\n".join(parts)
        + "</body></html>\n"
    )


def write_claims(df: pd.DataFrame, title: str, scale: str, data: str, out: Path) -> None:
    """claims.md, claims.html and claims.csv (with the scale and data in every row)."""
    (out / "claims.md").write_text(claims_markdown(title, df, scale, data))
    (out / "claims.html").write_text(claims_html(title, df, scale, data))
    df.assign(scale=scale, data=data).to_csv(out / "claims.csv", index=False)
