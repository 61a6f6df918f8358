"""Finished runs -> a paper's table: table.csv, table.tex, comparison.csv/.md/.html/.png,
claims.csv/.md/.html (shared/reporting/claims.py), provenance.yaml and, where the paper shows them,
learning curves (curves.pdf/.png).

Reporting only: what a cell reports comes from shared/runs/metrics.py and the provenance header
from shared/runs/provenance.py; nothing here imports the training loop."""
from __future__ import annotations

import html
import math
import re
import unicodedata
from collections import defaultdict
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from shared.data.catalog import num_classes
from shared.reporting.claims import data_label, verdicts, write_claims
from shared.targets.experiments import Cell, Metric, Search, Table, expand, load_metrics, paper_tables, scale_seeds
from shared.reporting.figures import announce, draw, pyplot, same_runs
from shared.runs.metrics import cell_value
from shared.runs.provenance import commits_of, provenance_header

COMPLETED = "completed"
FAILED = "failed"
SUSPECT = "suspect"  # a run status starting with this: it finished, but its numbers are not trusted
NOT_IMPLEMENTED = "not implemented"
# What a document needs to \input a table.tex (also written at its top).
LATEX_PACKAGES = ("booktabs", "graphicx", "rotating")


def is_suspect(status: str) -> bool:
    return str(status).startswith(SUSPECT)


# A cell whose mean accuracy is within this of chance (100 / classes %) is marked "at chance": its
# models have not learnt (yet), so its place among the methods says nothing of them. The same
# margin as the trainer's suspect-at-chance judgement of a long run (shared/training/trainer.py `judge`).
CHANCE_MARGIN = 0.5
# Every method here is a term added to FedAvg's loop: an accuracy cell whose every seed equals
# FedAvg's (the same accuracy at the same seed) is marked, since that term then left the counted
# accuracy unchanged (a weight too small to act in a reduced scale's few rounds), and its rank
# beside FedAvg says nothing. Rounds-to-target columns are not marked: equal counts are common there.
REFERENCE_ROW = "FedAvg"
EQUALS_NOTE = f" (= {REFERENCE_ROW})"  # the comparison's mark of such a cell
ACCURACY_KINDS = ("final_acc", "best_acc", "acc_at", "domain_acc", "domain_avg")


def chance_level(metric: Metric, cell: Cell) -> float:
    """The value guessing scores on the cell's metric; NaN where that has no meaning (rounds)."""
    classes = num_classes(cell.config)
    return 100 / classes if metric.kind in ACCURACY_KINDS and classes else math.nan


def collect(table: Table, cells: list[Cell], runs_dir: Path) -> pd.DataFrame:
    """One row per run: row, column, seed, run id, status and the value of its column's metric."""
    metrics = {c.run_id: load_metrics(runs_dir, c.run_id) for c in cells}
    ok = lambda c: metrics[c.run_id]["status"] == COMPLETED
    finals = defaultdict(list)  # FedSSD's T: the reference row's final accuracy per setting
    for c in cells:
        metric = table.metric_for(c.column)
        if metric.kind == "rounds_to_row" and c.row.label == metric.reference and ok(c):
            finals[c.column.label].append(metrics[c.run_id]["final_acc"])
    reference_final = {k: float(np.mean(v)) for k, v in finals.items()}
    records = []
    for c in cells:
        m = metrics[c.run_id]
        value = cell_value(table.metric_for(c.column), m, reference_final.get(c.column.label)) if ok(c) else math.nan
        records.append(dict(row=c.row.label, column=c.column.label, seed=c.seed, run_id=c.run_id,
                            status=m["status"], value=value, chance=chance_level(table.metric_for(c.column), c), wall_time_s=m.get("wall_time_s", 0.0),
                            device=m.get("device", ""), device_name=m.get("device_name", ""),
                            environment=m.get("environment")))
    return pd.DataFrame.from_records(records)


def seed_values(runs: pd.DataFrame, row: str, column: str) -> dict[int, float]:
    """A cell's value per seed, over its completed runs."""
    sel = runs[(runs.row == row) & (runs.column == column) & (runs.status == COMPLETED)]
    return dict(zip(sel.seed, sel.value))


def equals_reference(runs: pd.DataFrame, row: str, column: str) -> bool:
    """Every seed of the cell has REFERENCE_ROW's value at that seed, and they share their seeds
    (a NaN never equals, so a value-less cell is never marked)."""
    if row == REFERENCE_ROW or not len(runs):
        return False
    ours = seed_values(runs, row, column)
    return bool(ours) and ours == seed_values(runs, REFERENCE_ROW, column)


def summarize_cells(table: Table, runs: pd.DataFrame) -> pd.DataFrame:
    """Mean, std (ddof=0, as FL papers report it over seeds), seed count and runs per cell, in
    the paper's row and column order; methods not implemented yet appear with no runs. Only
    completed runs enter the mean; `failed` counts the runs that failed or diverged, `suspect`
    those flagged suspect. A cell's status: ok, failed, suspect, no value or not implemented;
    `at_chance`: its mean accuracy is chance (within CHANCE_MARGIN); `equals_fedavg`: each seed's
    value is REFERENCE_ROW's (`equals_reference`)."""
    rows = []
    for row in table.rows:
        for column in table.columns:
            sel = runs[(runs.row == row.label) & (runs.column == column.label)] if len(runs) else runs
            good = sel[sel.status == COMPLETED]["value"].dropna() if len(sel) else pd.Series(dtype=float)
            suspect = int(sel.status.map(is_suspect).sum()) if len(sel) else 0
            failed = int((sel.status != COMPLETED).sum()) - suspect if len(sel) else 0
            if not row.implemented:
                status = NOT_IMPLEMENTED
            elif failed:
                status = FAILED
            elif suspect:
                status = SUSPECT
            else:
                status = "ok" if len(good) else "no value"
            chance = sel["chance"].iloc[0] if len(sel) else math.nan
            rows.append(dict(
                row=row.label, column=column.label,
                at_chance=bool(len(good) and good.mean() <= chance + CHANCE_MARGIN),
                equals_fedavg=table.metric_for(column).kind in ACCURACY_KINDS and equals_reference(runs, row.label, column.label),
                mean=good.mean() if len(good) else math.nan,
                std=good.std(ddof=0) if len(good) else math.nan,
                n=len(good), failed=failed, suspect=suspect, status=status,
                values=";".join(f"{v:.2f}" for v in good),
                runs=";".join(sel.run_id) if len(sel) else "",
                reading=row.reading,
            ))
    return pd.DataFrame.from_records(rows)


def decimals(metric) -> int:
    return 2 if metric.higher_is_better else 1


def shown(value: float, places: int) -> float:
    """The number as printed: equal printed numbers are ties."""
    return float(f"{value:.{places}f}")


def rank_marks(table: Table, summary: pd.DataFrame) -> dict[tuple[str, str], str]:
    """Best in bold and second best underlined within each column, as the papers do. Ties (equal
    printed means) share their mark; only cells whose runs all completed are ranked (a cell with
    a failed, diverged or suspect run, or none, never takes a mark), and only the paper's rows
    (a reading that is not the paper's text competes for no mark the paper gives)."""
    marks = {}
    for column in table.columns:
        metric = table.metric_for(column)
        col = summary[(summary.column == column.label) & summary["mean"].notna() & (summary.status == "ok")
                      & (summary.reading == "")]
        values = {r.row: shown(r["mean"], decimals(metric)) for _, r in col.iterrows()}
        distinct = sorted(set(values.values()), reverse=metric.higher_is_better)
        for mark, level in zip(("best", "second"), distinct):
            marks.update({(row, column.label): mark for row, value in values.items() if value == level})
    return marks


def fmt(mean: float, std: float, n: int, decimals: int) -> str:
    if math.isnan(mean):
        return "-"
    return f"{mean:.{decimals}f}" if n < 2 else f"{mean:.{decimals}f} ± {std:.{decimals}f}"


# --- LaTeX ----------------------------------------------------------------------------------

TEXT_SPECIALS = {"\\": r"\textbackslash{}", "{": r"\{", "}": r"\}", "$": r"\$", "&": r"\&", "%": r"\%",
                 "#": r"\#", "_": r"\_", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}",
                 "<": r"\textless{}", ">": r"\textgreater{}", "|": r"\textbar{}",
                 "\u2013": "--", "\u2014": "---", "\u2018": "`", "\u2019": "'", "\u201c": "``", "\u201d": "''",
                 "\u2026": r"\ldots{}", "\u00a0": "~", "\u2212": "-", "\u00b0": r"\textdegree{}"}
MATH_SYMBOLS = {"±": r"\pm", "×": r"\times", "·": r"\cdot", "≤": r"\leq", "≥": r"\geq", "≈": r"\approx",
                "≠": r"\neq", "→": r"\rightarrow", "←": r"\leftarrow", "↑": r"\uparrow", "↓": r"\downarrow",
                "∞": r"\infty", "∼": r"\sim", "√": r"\surd", "✓": r"\surd", "✗": r"\times", "∈": r"\in",
                "ς": r"\varsigma", "ϵ": r"\epsilon", "ϑ": r"\vartheta", "ϕ": r"\phi", "∑": r"\sum"}
MATH_ACCENTS = {"\u0302": "hat", "\u0303": "tilde", "\u0304": "bar", "\u0307": "dot", "\u0308": "ddot",
                "\u0301": "acute", "\u0300": "grave", "\u0306": "breve", "\u030c": "check", "\u20d7": "vec"}
# Capital Greek letters that look Latin have no macro in LaTeX
LATIN_LOOKALIKES = {"ALPHA": "A", "BETA": "B", "EPSILON": "E", "ZETA": "Z", "ETA": "H", "IOTA": "I", "KAPPA": "K",
                    "MU": "M", "NU": "N", "OMICRON": "O", "RHO": "P", "TAU": "T", "CHI": "X"}
GREEK_MACRO_CAPITALS = {"GAMMA", "DELTA", "THETA", "LAMBDA", "XI", "PI", "SIGMA", "UPSILON", "PHI", "PSI", "OMEGA"}
TEXT_ACCENTS = {"\u0301": "'", "\u0300": "`", "\u0302": "^", "\u0308": '"', "\u0303": "~", "\u0304": "=",
                "\u0327": "c", "\u030c": "v", "\u0306": "u", "\u030a": "r", "\u0307": "."}


def math_symbol(char: str) -> str | None:
    """A character's LaTeX math form (Greek letters, ±, arrows, ...), or None."""
    if char in MATH_SYMBOLS:
        return MATH_SYMBOLS[char]
    name = unicodedata.name(char, "")
    for case, prefix in (("small", "GREEK SMALL LETTER "), ("capital", "GREEK CAPITAL LETTER ")):
        if name.startswith(prefix) and " " not in name[len(prefix):]:
            letter = name[len(prefix):].replace("LAMDA", "LAMBDA")
            if case == "small":
                return "o" if letter == "OMICRON" else "\\" + letter.lower()
            if letter in GREEK_MACRO_CAPITALS:
                return "\\" + letter.capitalize()
            return r"\mathrm{" + LATIN_LOOKALIKES.get(letter, "?") + "}"
    return None


def text_char(char: str) -> str:
    """A character outside math in LaTeX text: ASCII as is, Latin letters with accents through
    accent commands, anything else as '?'."""
    if ord(char) < 128:
        return char
    base, *accents = unicodedata.normalize("NFD", char)
    if ord(base) < 128 and accents and all(a in TEXT_ACCENTS for a in accents):
        out = base
        for accent in accents:
            out = rf"\{TEXT_ACCENTS[accent]}{{{out}}}"
        return out
    folded = unicodedata.normalize("NFKD", char).encode("ascii", "ignore").decode()
    return folded or "?"


def escape(text: str) -> str:
    """Plain text (labels, captions, notes) into LaTeX: the special characters escaped, Greek
    letters and mathematical signs set as math (α -> $\\alpha$, δ̂ -> $\\hat{\\delta}$, ± ->
    $\\pm$), accented Latin letters through accent commands; pure ASCII output, so it compiles
    with or without inputenc/fontenc."""
    text = unicodedata.normalize("NFC", str(text))
    out, math_run = [], []

    def flush():
        if math_run:
            joined = math_run[0]
            for token in math_run[1:]:  # \alpha followed by a letter needs a space
                joined += (" " if re.search(r"\\[a-zA-Z]+$", joined) and token[0].isalpha() else "") + token
            out.append("$" + joined + "$")
            math_run.clear()

    i = 0
    while i < len(text):
        char = text[i]
        accents = []
        while i + 1 + len(accents) < len(text) and text[i + 1 + len(accents)] in MATH_ACCENTS:
            accents.append(text[i + 1 + len(accents)])
        symbol = math_symbol(char)
        if symbol is None and accents and (char.isascii() and char.isalpha()):
            symbol = char  # a Latin letter with an accent no precomposed letter has: x̂ -> $\hat{x}$
        if symbol is not None:
            for accent in accents:
                symbol = rf"\{MATH_ACCENTS[accent]}{{{symbol}}}"
            math_run.append(symbol)
            i += 1 + len(accents)
            continue
        flush()
        if unicodedata.combining(char):
            i += 1  # a stray accent with nothing to sit on
            continue
        out.append(TEXT_SPECIALS.get(char) or text_char(char))
        i += 1
    flush()
    return "".join(out)


def split_groups(labels: list[tuple[str, str]], min_groups: int) -> list[tuple[str, list[str]]] | None:
    """Grouped labels, as papers print "CIFAR10: ACC, T" under one spanning header: each label
    (plain, LaTeX) split at its last space into a group and the rest ("CIFAR-10 α=0.1" ->
    CIFAR-10 / α=0.1, "CIFAR-10, M=1" -> CIFAR-10 / M=1). None unless consecutive labels form
    at least `min_groups` groups of two or more, each group appearing once."""
    parts = []
    for plain, latex in labels:
        head, space, rest = plain.rpartition(" ")
        prefix = escape(head) + " "
        if not space or not head or not rest or not latex.startswith(prefix):
            return None
        parts.append((head.rstrip(","), latex[len(prefix):].strip()))
    groups: list[tuple[str, list[str]]] = []
    for head, rest in parts:
        if groups and groups[-1][0] == head:
            groups[-1][1].append(rest)
        else:
            groups.append((head, [rest]))
    heads = [g for g, _ in groups]
    if len(groups) < min_groups or len(set(heads)) != len(heads) or any(len(members) < 2 for _, members in groups):
        return None
    return [(escape(head), members) for head, members in groups]


def cell_text(table: Table, summary: pd.DataFrame, marks: dict, row, column, used: set) -> str:
    """A cell as LaTeX; `used` collects the footnote marks that occur."""
    s = summary[(summary.row == row.label) & (summary.column == column.label)].iloc[0]
    if s.status == NOT_IMPLEMENTED:
        used.add("n/i")
        return "n/i"
    if math.isnan(s["mean"]):
        if s.failed:
            used.add("all failed")
            return r"\textit{failed}"
        if s.suspect:
            used.add("all suspect")
            return r"\textit{suspect}"
        used.add("rounds never" if table.metric_for(column).kind.startswith("rounds_to") and s.n == 0
                 and len(str(s.runs)) else "no value")
        return "--"
    places = decimals(table.metric_for(column))
    text = f"{s['mean']:.{places}f}"
    if s.n >= 2:
        text += rf"\,$\pm$\,{s['std']:.{places}f}"
        used.add("std")
    if s.failed:
        text += r"$^\dagger$"
        used.add("dagger")
    if s.suspect:
        text += r"$^\ddagger$"
        used.add("ddagger")
    if s.at_chance:
        text += r"$^\circ$"
        used.add("chance")
    if s.get("equals_fedavg", False):
        text += r"$^{=}$"
        used.add("equals")
    mark = marks.get((row.label, column.label))
    if mark:
        used.add("marks")
    return {"best": rf"\textbf{{\boldmath {text}}}", "second": rf"\underline{{{text}}}"}.get(mark, text)


def footnote(table: Table, used: set, scale: str) -> str:
    seeds = len(scale_seeds(table, scale))
    notes = {
        "std": rf"Mean $\pm$ standard deviation over {seeds} seeds.",
        "marks": r"Bold: best; underlined: second best (ties share the mark; cells with a failed, diverged "
                 r"or suspect run are not ranked).",
        "n/i": "n/i: method not implemented yet.",
        "rounds never": "--: the target accuracy was not reached.",
        "no value": "--: no value.",
        "dagger": r"$^\dagger$: some seeds failed or diverged; the mean is over the others.",
        "ddagger": r"$^\ddagger$: some seeds were flagged suspect and are left out of the mean.",
        "all failed": r"\textit{failed}: no seed completed (each failed, diverged or was flagged suspect).",
        "all suspect": r"\textit{suspect}: every seed was flagged suspect.",
        "chance": r"$^\circ$: at chance (100/classes \%): these models have not learnt (yet).",
        "equals": rf"$^{{=}}$: each seed's value is {REFERENCE_ROW}'s at that seed: the method's own term "
                  r"left the counted accuracy unchanged.",
    }
    text = " ".join([*(note for key, note in notes.items() if key in used),
                     *(rf"$^\P$ {escape(note)}" for note in reading_notes(table))])
    if table.notes:
        text += " " + escape(table.notes)
    return text.strip()


# The layout is chosen by LaTeX when the table is typeset, so that the same table.tex fits a
# one-column article and a two-column (IEEE) page: the tabular is set in \small (in \footnotesize
# with narrower column gaps where it is wider than the text), spans both columns (table*) where it
# is more than a tenth wider than a column, and turns onto a landscape page (rotating's
# sidewaystable*, across both columns where there are two) where the text is too narrow to hold
# it at MIN_SCALE of its size (a table of many methods in a one-column article); what is still wider
# is scaled down to the line.
MIN_SCALE = 0.8
LAYOUT = r"""\ifdefined\fedreprobox\else\newsavebox{\fedreprobox}\fi
\sbox{\fedreprobox}{\small\fedreprotabular}%
\ifdim\wd\fedreprobox>\textwidth
  \sbox{\fedreprobox}{\footnotesize\setlength{\tabcolsep}{4pt}\fedreprotabular}%
\fi
\ifdim\wd\fedreprobox>1.1\columnwidth\def\fedreprofloat{table*}\else\def\fedreprofloat{table}\fi
\ifdim\wd\fedreprobox>LANDSCAPE_ABOVE\textwidth\def\fedreprofloat{sidewaystable*}\fi""".replace(
    "LANDSCAPE_ABOVE", f"{1 / MIN_SCALE:g}")
FIT = r"""\ifdim\wd\fedreprobox>\linewidth
  \typeout{table.tex: a tabular of \the\wd\fedreprobox\space scaled to the line, \the\linewidth}%
  \resizebox{\linewidth}{!}{\usebox{\fedreprobox}}%
\else\usebox{\fedreprobox}\fi"""


def latex_table(table: Table, summary: pd.DataFrame, scale: str) -> str:
    """booktabs, laid out as the paper prints it: methods as rows, or as columns where the paper
    prints them so (FedGKD); labels sharing a prefix grouped (a spanning header over "ACC" and
    "T", or a dataset beside its settings); sized to the page by LaTeX (`LAYOUT`)."""
    marks, used = rank_marks(table, summary), set()
    grid = [[cell_text(table, summary, marks, row, column, used) for column in table.columns] for row in table.rows]
    row_labels = [(r.label, escape(r.label) + (r"$^\P$" if r.reading_of else "")) for r in table.rows]
    column_labels = [(c.label, c.latex or escape(c.label)) for c in table.columns]
    corner = "Method"
    if table.methods_as_columns:
        grid = [list(line) for line in zip(*grid)]
        row_labels, column_labels, corner = column_labels, row_labels, "Setting"
    row_groups = split_groups(row_labels, min_groups=2)
    column_groups = split_groups(column_labels, min_groups=1)
    label_columns = 2 if row_groups else 1

    # the body: one line per row; a rule between row groups, whose name is printed once
    if row_groups:
        names = [name for name, members in row_groups for name in [name] + [""] * (len(members) - 1)]
        subs = [member for _, members in row_groups for member in members]
        starts = {sum(len(m) for _, m in row_groups[:k]) for k in range(1, len(row_groups))}
        body = []
        for i, (name, sub, cells) in enumerate(zip(names, subs, grid)):
            if i in starts:
                body.append(r"\midrule")
            body.append(" & ".join([name, sub, *cells]) + r" \\")
    else:
        body = [" & ".join([label, *cells]) + r" \\" for (_, label), cells in zip(row_labels, grid)]
    corner_cell = corner if label_columns == 1 else rf"\multicolumn{{2}}{{l}}{{{corner}}}"
    if column_groups:
        tops, rules, first = [], [], label_columns + 1
        for name, members in column_groups:
            tops.append(rf"\multicolumn{{{len(members)}}}{{c}}{{{name}}}")
            rules.append(rf"\cmidrule(lr){{{first}-{first + len(members) - 1}}}")
            first += len(members)
        header = [" & ".join([""] * label_columns + tops) + r" \\", "".join(rules),
                  " & ".join([corner_cell, *(m for _, members in column_groups for m in members)]) + r" \\"]
    else:
        header = [" & ".join([corner_cell, *(label for _, label in column_labels)]) + r" \\"]

    scale_note = "" if scale == "paper" else rf" \textbf{{[Scale: {escape(scale)}; not a paper result.]}}"
    notes = footnote(table, used, scale)
    return "\n".join([
        (f"% {table.paper}/{table.name} at scale {scale}, written by shared/reporting/tables.py; "
         rf"needs \usepackage{{{','.join(LATEX_PACKAGES)}}}"),
        r"\def\fedreprotabular{%",
        rf"\begin{{tabular}}{{{'l' * label_columns}{'c' * len(column_labels)}}}", r"\toprule",
        *header, r"\midrule", *body,
        r"\bottomrule", r"\end{tabular}}",
        LAYOUT,
        r"\begin{\fedreprofloat}[t]", r"\centering",
        rf"\caption{{{escape(table.caption)}{scale_note}}}",
        rf"\label{{tab:{table.paper}-{table.name}}}",
        FIT,
        *([r"\par\smallskip", rf"{{\footnotesize\raggedright {notes}\par}}"] if notes else []),
        r"\end{\fedreprofloat}", ""])


# --- ours against the paper's ------------------------------------------------------------------

def kendall_tau(x, y) -> float:
    """Kendall's rank correlation tau-b of two equally long sequences (ties in either counted as
    scipy.stats.kendalltau does); NaN for fewer than two pairs or where one side is constant."""
    x, y = list(x), list(y)
    concordant = discordant = ties_x = ties_y = 0
    for i in range(len(x)):
        for j in range(i + 1, len(x)):
            dx, dy = np.sign(x[i] - x[j]), np.sign(y[i] - y[j])
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


def comparison(table: Table, summary: pd.DataFrame, scale: str) -> pd.DataFrame:
    """The paper's number beside ours for every cell. `within_spread`: the paper's mean lies
    within two standard deviations of ours over seeds (or of the paper's own, if larger);
    left empty below paper scale, where the numbers are not comparable. Per column, the rank
    agreement of the methods that have both numbers (printed precision, so printed ties are
    ties): each one's rank in ours and in the paper's (1 = best), and Kendall's tau-b between
    the two orders (`kendall_tau`, `rank_pairs` methods; NaN below two)."""
    rows = []
    notes = {(i.row, i.column): i.note for i in table.inconsistencies}
    for row in table.rows:
        reported = table.reported.get(row.label, [None] * len(table.columns))
        for column, paper in zip(table.columns, reported):
            s = summary[(summary.row == row.label) & (summary.column == column.label)].iloc[0]
            paper_mean = paper.mean if paper and paper.mean is not None else math.nan
            paper_std = paper.std if paper and paper.std is not None else math.nan
            diff = s["mean"] - paper_mean
            spread = 2 * np.nanmax([s["std"], paper_std]) if s.n >= 2 and scale == "paper" else math.nan
            rows.append(dict(row=row.label, column=column.label, ours_mean=s["mean"], ours_std=s["std"], n=s.n,
                             paper_mean=paper_mean, paper_std=paper_std, diff=diff,
                             within_spread=bool(abs(diff) <= spread) if not math.isnan(spread) and not math.isnan(diff) else None,
                             failed=s.failed, suspect=s.get("suspect", 0), status=s.status,
                             at_chance=bool(s.get("at_chance", False)),
                             equals_fedavg=bool(s.get("equals_fedavg", False)), paper_note=notes.get((row.label, column.label), ""),
                             reading=row.reading))
    comp = pd.DataFrame.from_records(rows)
    comp["rank_ours"] = comp["rank_paper"] = comp["kendall_tau"] = math.nan
    comp["rank_pairs"] = 0
    for column in table.columns:
        metric = table.metric_for(column)
        both = comp[(comp.column == column.label) & comp.ours_mean.notna() & comp.paper_mean.notna()]
        if not len(both):
            continue
        places = decimals(metric)
        ours = both.ours_mean.map(lambda v, places=places: shown(v, places))
        paper = both.paper_mean.map(lambda v, places=places: shown(v, places))
        comp.loc[both.index, "rank_ours"] = ranks(ours, metric.higher_is_better)
        comp.loc[both.index, "rank_paper"] = ranks(paper, metric.higher_is_better)
        in_column = comp.column == column.label
        comp.loc[in_column, "kendall_tau"] = kendall_tau(ours, paper)
        comp.loc[in_column, "rank_pairs"] = len(both)
    return comp


def column_agreement(table: Table, comp: pd.DataFrame) -> dict[str, tuple[float, int]]:
    """Column label -> (Kendall's tau, methods compared)."""
    first = comp.drop_duplicates("column").set_index("column")
    return {c.label: (float(first.loc[c.label, "kendall_tau"]), int(first.loc[c.label, "rank_pairs"]))
            for c in table.columns}


def tau_text(tau: float, pairs: int) -> str:
    return "-" if math.isnan(tau) else f"{tau:+.2f} ({pairs} methods)"


# The mark on a paper's printed number that the paper contradicts elsewhere (the note says how)
INCONSISTENT = " §"
READING_MARK = "¶"  # a row that is a reading of a method, not the paper's text


def reading_notes(table: Table) -> list[str]:
    """What each reading row is, for under the table and the comparison (READING_MARK)."""
    return [f"{row.label}: a reading of {row.reading_of} that is not the paper's text ({row.reading}); the paper "
            "prints no number for it." for row in table.rows if row.reading_of]


def row_name(row) -> str:
    """The row's label, marked where it is a reading that is not the paper's text."""
    return f"{row.label} {READING_MARK}" if row.reading_of else row.label


def inconsistency_notes(table: Table) -> list[tuple[str, str, str]]:
    """(row, column, note) of each printed cell the paper contradicts, for under the comparison."""
    return [(i.row, i.column, f"the paper's printed number; {i.note}") for i in table.inconsistencies]


def comparison_markdown(table: Table, comp: pd.DataFrame, scale: str, warning: str | None = None) -> str:
    """`warning`: settings that are the same runs at this scale (shared.reporting.figures.same_runs_warning)."""
    metrics = sorted({table.metric_for(c).label for c in table.columns})
    lines = [f"# {table.paper} {table.name}: ours vs. the paper", "",
             f"{table.caption}", "", f"Scale: **{scale}**" + ("" if scale == "paper" else
             " (not comparable with the paper's numbers; a check that the pipeline runs)"),
             f"Metric: {', '.join(metrics)}; ours are mean ± std over seeds {list(scale_seeds(table, scale))}.", "",
             "| Method | " + " | ".join(c.label for c in table.columns) + " |",
             "|---|" + "---|" * len(table.columns)]
    for row in table.rows:
        cells = []
        for column in table.columns:
            c = comp[(comp.row == row.label) & (comp.column == column.label)].iloc[0]
            places = decimals(table.metric_for(column))
            ours = "n/i" if c.status == NOT_IMPLEMENTED else fmt(c.ours_mean, c.ours_std, c.n, places)
            ours += f" ({c.failed} failed)" if c.failed and c.status != NOT_IMPLEMENTED else ""
            ours += f" ({c.suspect} suspect)" if c.suspect and c.status != NOT_IMPLEMENTED else ""
            ours += " (at chance)" if c.at_chance else ""
            ours += EQUALS_NOTE if c.equals_fedavg else ""
            paper = fmt(c.paper_mean, c.paper_std if not math.isnan(c.paper_std) else 0.0,
                        2 if not math.isnan(c.paper_std) else 1, places) + (INCONSISTENT if c.paper_note else "")
            flag = {True: " ✓", False: " ✗"}.get(c.within_spread, "")
            diff = "" if math.isnan(c["diff"]) else f" ({c['diff']:+.{places}f})"
            cells.append(f"{ours} / {paper}{diff}{flag}")
        lines.append(f"| {row_name(row)} | " + " | ".join(cells) + " |")
    agreement = column_agreement(table, comp)
    lines.append("| *Kendall τ* | " + " | ".join(tau_text(*agreement[c.label]) for c in table.columns) + " |")
    lines += ["", "Each cell: ours / paper (difference). ✓: within two standard deviations; "
              "✗: outside; n/i: method not implemented yet; (k failed): k seeds failed or diverged, "
              "(k suspect): k seeds flagged suspect, the mean is over the others; (at chance): the mean "
              f"accuracy is chance, 100/classes %;{EQUALS_NOTE}: each seed's value is {REFERENCE_ROW}'s. Kendall τ: rank agreement "
              "(tau-b, -1 to +1) between our order of the methods and the paper's in that column, over the "
              "methods with both numbers."]
    if warning:
        lines += ["", f"**{warning}**"]
    if table.inconsistencies:
        lines += ["", *(f"- {INCONSISTENT.strip()} {row} at {column}: {note}"
                        for row, column, note in inconsistency_notes(table))]
    lines += ["", *(f"- {READING_MARK} {note}" for note in reading_notes(table))] if reading_notes(table) else []
    if table.notes:
        lines += ["", f"Notes: {table.notes}"]
    return "\n".join(lines) + "\n"


GREEN, RED = "#1a7f37", "#cf222e"
CELL_STYLE = "border:1px solid #d0d7de;padding:4px 8px;vertical-align:top;text-align:right;white-space:nowrap"
HEAD_STYLE = "border:1px solid #d0d7de;padding:4px 8px;background:#f6f8fa;text-align:center"
ROW_HEAD_STYLE = "border:1px solid #d0d7de;padding:4px 8px;background:#f6f8fa;text-align:left;white-space:nowrap"


def comparison_html(table: Table, comp: pd.DataFrame, scale: str, warning: str | None = None) -> str:
    """The comparison as a self-contained HTML page (inline styles only, so that its <table>
    can be embedded as it is): per cell ours, the paper's number, the difference and ✓ (green,
    within two standard deviations) or ✗ (red); a last row with each column's Kendall tau."""
    e = html.escape
    head = "".join(f'<th style="{HEAD_STYLE}">{e(c.label)}<br><span style="font-weight:normal;color:#57606a">'
                   f"{e(table.metric_for(c).label)}</span></th>" for c in table.columns)
    body = []
    for row in table.rows:
        cells = []
        for column in table.columns:
            c = comp[(comp.row == row.label) & (comp.column == column.label)].iloc[0]
            places = decimals(table.metric_for(column))
            if c.status == NOT_IMPLEMENTED:
                ours = "n/i"
            else:
                ours = fmt(c.ours_mean, c.ours_std, c.n, places)
                ours += f" ({c.failed} failed)" if c.failed else ""
                ours += f" ({c.suspect} suspect)" if c.suspect else ""
                ours += " (at chance)" if c.at_chance else ""
                ours += EQUALS_NOTE if c.equals_fedavg else ""
            paper = fmt(c.paper_mean, c.paper_std if not math.isnan(c.paper_std) else 0.0,
                        2 if not math.isnan(c.paper_std) else 1, places) + (INCONSISTENT if c.paper_note else "")
            diff = "" if math.isnan(c["diff"]) else f"{c['diff']:+.{places}f}"
            flag = {True: f'<span style="color:{GREEN};font-weight:bold" title="within two standard deviations">✓</span>',
                    False: f'<span style="color:{RED};font-weight:bold" title="outside two standard deviations">✗</span>'
                    }.get(c.within_spread, "")
            cells.append(f'<td style="{CELL_STYLE}"><div>{e(ours)}</div>'
                         f'<div style="color:#57606a">paper {e(paper)}</div>'
                         f'<div>{e(diff)} {flag}</div></td>')
        body.append(f'<tr><th style="{ROW_HEAD_STYLE}">{e(row_name(row))}</th>{"".join(cells)}</tr>')
    agreement = column_agreement(table, comp)
    body.append(f'<tr><th style="{ROW_HEAD_STYLE}">Kendall τ</th>' + "".join(
        f'<td style="{CELL_STYLE}">{e(tau_text(*agreement[c.label]))}</td>' for c in table.columns) + "</tr>")
    scale_note = "" if scale == "paper" else (f' <strong style="color:{RED}">Scale: {e(scale)}; not comparable with '
                                              "the paper's numbers.</strong>")
    caption = (f'<caption style="caption-side:top;text-align:left;padding:4px 0">'
               f"<strong>{e(table.paper)} {e(table.name)}</strong>: {e(table.caption)}{scale_note}</caption>")
    legend = ("<p style=\"font-size:12px;color:#57606a\">Each cell: ours (mean ± std over seeds "
              f"{e(str(list(scale_seeds(table, scale))))}), the paper's number, ours minus the paper's, and "
              f'<span style="color:{GREEN}">✓</span> within two standard deviations or '
              f'<span style="color:{RED}">✗</span> outside (paper scale only). n/i: not implemented; '
              "(k failed) / (k suspect): seeds left out of the mean; (at chance): the mean accuracy is "
              f"chance, 100/classes %;{e(EQUALS_NOTE)}: each seed's value is {REFERENCE_ROW}'s. Kendall τ: rank agreement of the methods "
              "between ours and the paper's in that column (tau-b, -1 to +1).</p>")
    if warning:
        legend += f'<p style="font-size:13px;color:{RED};font-weight:bold">{e(warning)}</p>'
    legend += "".join(f'<p style="font-size:12px;color:#57606a">{INCONSISTENT.strip()} {e(row)} at {e(column)}: '
                      f"{e(note)}</p>" for row, column, note in inconsistency_notes(table))
    legend += "".join(f'<p style="font-size:12px;color:#57606a">{READING_MARK} {e(note)}</p>'
                      for note in reading_notes(table))
    if table.notes:
        legend += f'<p style="font-size:12px;color:#57606a">Notes: {e(table.notes)}</p>'
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{e(table.paper)} {e(table.name)}: ours vs. the paper</title></head>",
        '<body style="font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;font-size:14px">',
        f'<table style="border-collapse:collapse">{caption}',
        f'<thead><tr><th style="{HEAD_STYLE}">Method</th>{head}</tr></thead>',
        "<tbody>", *body, "</tbody></table>", legend, "</body></html>", ""])


MARKERS = "osD^vP*Xh<>p"


def comparison_figure(table: Table, comp: pd.DataFrame, scale: str, path: Path) -> None:
    """Ours against the paper's number, one panel per metric (accuracy and rounds do not share
    an axis): error bars of one std each way, the diagonal where they agree, a marker per method
    and a colour per setting (its Kendall tau in the legend)."""
    plt = pyplot()
    from matplotlib.lines import Line2D

    panels = list(dict.fromkeys(table.metric_for(c).label for c in table.columns))
    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 4.4), squeeze=False)
    colours = plt.get_cmap("tab10" if len(table.columns) <= 10 else "tab20")
    colour = {c.label: colours(i % colours.N) for i, c in enumerate(table.columns)}
    marker = {r.label: MARKERS[i % len(MARKERS)] for i, r in enumerate(table.rows)}
    for ax, panel in zip(axes[0], panels):
        labels = [c.label for c in table.columns if table.metric_for(c).label == panel]
        sel = comp[comp.column.isin(labels) & comp.ours_mean.notna() & comp.paper_mean.notna()]
        for _, c in sel.iterrows():
            ax.errorbar(c.paper_mean, c.ours_mean, xerr=0 if math.isnan(c.paper_std) else c.paper_std,
                        yerr=0 if math.isnan(c.ours_std) else c.ours_std, fmt=marker[c.row], color=colour[c.column],
                        markersize=6, capsize=2, elinewidth=0.8, alpha=0.9,
                        markerfacecolor="none" if c.status != "ok" else colour[c.column])
        if len(sel):
            low = float(np.nanmin([sel.ours_mean - sel.ours_std.fillna(0), sel.paper_mean - sel.paper_std.fillna(0)]))
            high = float(np.nanmax([sel.ours_mean + sel.ours_std.fillna(0), sel.paper_mean + sel.paper_std.fillna(0)]))
            pad = 0.05 * (high - low or 1.0)
            ax.plot([low - pad, high + pad], [low - pad, high + pad], color="0.4", linestyle="--", linewidth=0.8)
            ax.set_xlim(low - pad, high + pad)
            ax.set_ylim(low - pad, high + pad)
            ax.set_aspect("equal", adjustable="box")
        else:
            ax.text(0.5, 0.5, "no cell has both our number\nand the paper's", ha="center", va="center",
                    transform=ax.transAxes, color="0.4")
        ax.set_xlabel(f"paper: {panel}")
        ax.set_ylabel(f"ours: {panel}")
        ax.grid(alpha=0.3)
    agreement = column_agreement(table, comp)
    method_handles = [Line2D([], [], marker=marker[r.label], color="0.3", linestyle="", label=r.label)
                      for r in table.rows if r.label in set(comp[comp.ours_mean.notna()].row)]
    if (comp.ours_mean.notna() & comp.status.isin([FAILED, SUSPECT])).any():
        method_handles.append(Line2D([], [], marker="o", color="0.3", markerfacecolor="none", linestyle="",
                                     label="hollow: seeds failed\nor suspect"))
    setting_handles = [Line2D([], [], marker="s", color=colour[c.label], linestyle="",
                              label=f"{c.label} (τ {tau_text(*agreement[c.label]).split(' (')[0]})")
                       for c in table.columns]
    fig.legend(handles=method_handles, title="method", loc="upper left", bbox_to_anchor=(1.0, 0.95), fontsize=8)
    fig.legend(handles=setting_handles, title="setting (Kendall τ)", loc="lower left", bbox_to_anchor=(1.0, 0.02),
               fontsize=8)
    title = f"{table.paper} {table.name}: ours against the paper's (scale: {scale})"
    if scale != "paper":
        title += "\nnot comparable below paper scale"
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=150, bbox_inches="tight")
    plt.close(fig)


# --- provenance and the outputs ------------------------------------------------------------------

def provenance(table: Table, runs: pd.DataFrame, scale: str, merged: list[list[str]] | None = None) -> dict:
    gpu = runs[runs.device.str.startswith("cuda")] if len(runs) else runs
    header = provenance_header(scale)
    return {
        "table": f"{table.paper}/{table.name}",
        "scale": scale,
        "git_commit": header["git_commit"],
        "seeds": list(scale_seeds(table, scale)),
        "metric": {c.label: table.metric_for(c).label for c in table.columns},
        "runs": int(len(runs)),
        "runs_failed": int((runs.status != COMPLETED).sum()) if len(runs) else 0,
        "runs_suspect": int(runs.status.map(is_suspect).sum()) if len(runs) else 0,
        "methods_not_implemented": [r.label for r in table.rows if not r.implemented],
        "same_runs": merged or [],  # columns that are one experiment at this scale (it caps what they vary)
        "devices": sorted(set(runs.device)) if len(runs) else [],
        "device_names": sorted(set(runs.device_name)) if len(runs) else [],
        "gpu_hours": float(gpu.wall_time_s.sum() / 3600) if len(gpu) else 0.0,
        "compute_hours": float(runs.wall_time_s.sum() / 3600) if len(runs) else 0.0,
        # the code each run ran: a table whose runs come from several commits says so
        **commits_of(list(runs.environment) if len(runs) else []),
        **{k: v for k, v in header.items() if k not in ("scale", "git_commit")},
    }


def build_table(table: Table, scale: str, runs_dir: str | Path, out_dir: str | Path, runtime: dict | None = None) -> None:
    runs_dir, out = Path(runs_dir), Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cells = expand(table, scale, runtime)
    runs = collect(table, cells, runs_dir)
    summary = summarize_cells(table, runs)
    merged = same_runs(cells)
    warning = announce(merged, out / "table", scale)
    (out / "table.tex").write_text(latex_table(table, summary, scale))
    comp = comparison(table, summary, scale)
    (out / "comparison.md").write_text(comparison_markdown(table, comp, scale, warning))
    (out / "comparison.html").write_text(comparison_html(table, comp, scale, warning))
    comparison_figure(table, comp, scale, out / "comparison.png")
    summary.insert(0, "scale", scale)
    summary.to_csv(out / "table.csv", index=False)
    comp.insert(0, "scale", scale)
    comp.to_csv(out / "comparison.csv", index=False)
    (out / "provenance.yaml").write_text(yaml.safe_dump(provenance(table, runs, scale, merged), sort_keys=False))
    write_claims(verdicts(table, runs), f"{table.paper} {table.name}: the paper's claims on our runs", scale,
                 data_label(table, cells), out)
    if table.curves and cells:
        draw("curves", cells, runs_dir, out / "curves", f"{table.paper} {table.name} learning curves (scale: {scale})")


def build_search(search: Search, scale: str, runs_dir: str | Path, out_dir: str | Path, runtime: dict | None = None) -> None:
    """search.csv (every grid point's mean and std per setting), best.yaml (the best point per
    setting, the values to put in the paper's table) and provenance.yaml."""
    runs_dir, out = Path(runs_dir), Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    grid = search.as_table()
    runs = collect(grid, expand(grid, scale, runtime), runs_dir)
    summary = summarize_cells(grid, runs)
    points = {row.label: point for row, point in zip(grid.rows, search.points())}
    summary.insert(0, "scale", scale)
    summary.to_csv(out / "search.csv", index=False)
    best = {}
    for column in grid.columns:
        col = summary[(summary.column == column.label) & summary["mean"].notna()]
        if len(col):
            top = col.sort_values("mean", ascending=not grid.metric_for(column).higher_is_better).iloc[0]
            best[column.label] = {"point": dict(points[top.row]),  # a copy: no YAML alias when two settings agree
                                  "mean": float(top["mean"]), "std": float(top["std"])}
    (out / "best.yaml").write_text(yaml.safe_dump(
        {"search": f"{search.paper}/{search.name}", "method": search.row, "grid": search.grid, "best": best},
        sort_keys=False, allow_unicode=True))
    (out / "provenance.yaml").write_text(yaml.safe_dump(provenance(grid, runs, scale), sort_keys=False))


def build_paper_claims(paper: str, scale: str, runs_dir: str | Path, out_dir: str | Path,
                       runtime: dict | None = None) -> None:
    """claims.md / .csv / .html: every claim of `paper` on the runs finished so far (a claim
    whose cells have no finished run yet is not yet measured)."""
    runs_dir, out = Path(runs_dir), Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    frames, datasets = [], []
    for table in paper_tables(paper).values():
        expanded = expand(table, scale, runtime)
        finished = [c for c in expanded if (runs_dir / c.run_id / "metrics.json").exists()]
        frames.append(verdicts(table, collect(table, finished, runs_dir) if finished else pd.DataFrame(
            columns=["row", "column", "seed", "status", "value"])))
        datasets += data_label(table, expanded).split(", ")
    write_claims(pd.concat(frames, ignore_index=True), f"{paper}: the paper's claims on our runs", scale,
                 ", ".join(sorted(set(datasets))), out)
