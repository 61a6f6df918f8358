"""A table's cells -> table.tex: plain text escaped into LaTeX, labels grouped under spanning
headers as papers print them, the footnotes of the marks that occur, and a layout LaTeX picks
when it typesets (so the same file fits one- and two-column pages)."""

from __future__ import annotations

import math
import re
import unicodedata

import pandas as pd

from shared.reporting.summary import (
    NOT_IMPLEMENTED,
    REFERENCE_ROW,
    decimals,
    rank_marks,
    reading_notes,
    rounds_read_note,
    shown,
)
from shared.targets.table_declarations import Table, scale_seeds, seeds_text

# What a document needs to \input a table.tex (also written at its top).
LATEX_PACKAGES = ("booktabs", "graphicx", "rotating")


TEXT_SPECIALS = {
    "\\": r"\textbackslash{}",
    "{": r"\{",
    "}": r"\}",
    "$": r"\$",
    "&": r"\&",
    "%": r"\%",
    "#": r"\#",
    "_": r"\_",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "<": r"\textless{}",
    ">": r"\textgreater{}",
    "|": r"\textbar{}",
    "\u2013": "--",
    "\u2014": "---",
    "\u2018": "`",
    "\u2019": "'",
    "\u201c": "``",
    "\u201d": "''",
    "\u2026": r"\ldots{}",
    "\u00a0": "~",
    "\u2212": "-",
    "\u00b0": r"\textdegree{}",
}
MATH_SYMBOLS = {
    "±": r"\pm",
    "×": r"\times",
    "·": r"\cdot",
    "≤": r"\leq",
    "≥": r"\geq",
    "≈": r"\approx",
    "≠": r"\neq",
    "→": r"\rightarrow",
    "←": r"\leftarrow",
    "↑": r"\uparrow",
    "↓": r"\downarrow",
    "∞": r"\infty",
    "∼": r"\sim",
    "√": r"\surd",
    "✓": r"\surd",
    "✗": r"\times",
    "∈": r"\in",
    "ς": r"\varsigma",
    "ϵ": r"\epsilon",
    "ϑ": r"\vartheta",
    "ϕ": r"\phi",
    "∑": r"\sum",
}
MATH_ACCENTS = {
    "\u0302": "hat",
    "\u0303": "tilde",
    "\u0304": "bar",
    "\u0307": "dot",
    "\u0308": "ddot",
    "\u0301": "acute",
    "\u0300": "grave",
    "\u0306": "breve",
    "\u030c": "check",
    "\u20d7": "vec",
}
# Capital Greek letters that look Latin have no macro in LaTeX
LATIN_LOOKALIKES = {
    "ALPHA": "A",
    "BETA": "B",
    "EPSILON": "E",
    "ZETA": "Z",
    "ETA": "H",
    "IOTA": "I",
    "KAPPA": "K",
    "MU": "M",
    "NU": "N",
    "OMICRON": "O",
    "RHO": "P",
    "TAU": "T",
    "CHI": "X",
}
GREEK_MACRO_CAPITALS = {"GAMMA", "DELTA", "THETA", "LAMBDA", "XI", "PI", "SIGMA", "UPSILON", "PHI", "PSI", "OMEGA"}
TEXT_ACCENTS = {
    "\u0301": "'",
    "\u0300": "`",
    "\u0302": "^",
    "\u0308": '"',
    "\u0303": "~",
    "\u0304": "=",
    "\u0327": "c",
    "\u030c": "v",
    "\u0306": "u",
    "\u030a": "r",
    "\u0307": ".",
}


def math_symbol(char: str) -> str | None:
    """A character's LaTeX math form (Greek letters, ±, arrows, ...), or None."""
    if char in MATH_SYMBOLS:
        return MATH_SYMBOLS[char]
    name = unicodedata.name(char, "")
    for case, prefix in (("small", "GREEK SMALL LETTER "), ("capital", "GREEK CAPITAL LETTER ")):
        if name.startswith(prefix) and " " not in name[len(prefix) :]:
            letter = name[len(prefix) :].replace("LAMDA", "LAMBDA")
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
        parts.append((head.rstrip(","), latex[len(prefix) :].strip()))
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
    if math.isnan(s["mean"]) and not s.never:
        if s.failed or s.no_target:
            used.add("all failed")
            return r"\textit{failed}"
        if s.suspect:
            used.add("all suspect")
            return r"\textit{suspect}"
        used.add("no value")
        return "--"
    places = decimals(table.metric_for(column))
    text = f"{s['mean']:.{places}f}"
    if math.isnan(s["mean"]):  # a rounds column whose completed seeds never reached the target
        used.add("rounds never")
        text = "--"
    if s.n >= 2:
        text += rf"\,$\pm$\,{s['std']:.{places}f}"
        used.add("std")
    if column.label in table.rises:
        text += rise(summary, row.label, column.label, s["mean"], places, used)
    if s.n and s.never:
        text += rf"$^{{*{s.never}}}$"
        used.add("some never")
    if s.failed or s.no_target:
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


def rise(summary: pd.DataFrame, row: str, column: str, mean: float, places: int, used: set) -> str:
    """The mean's rise or fall against REFERENCE_ROW's in the column, as printed: "(0.87)↑";
    the reference's own "(base)"; nothing where either has no mean."""
    if row == REFERENCE_ROW:
        used.add("rise")
        return r"\,(base)"
    reference = summary[(summary.row == REFERENCE_ROW) & (summary.column == column)]["mean"]
    if not len(reference) or math.isnan(reference.iloc[0]) or math.isnan(mean):
        return ""
    used.add("rise")
    change = shown(mean, places) - shown(reference.iloc[0], places)  # between the numbers as printed
    arrow = r"$\uparrow$" if change > 0 else r"$\downarrow$" if change < 0 else ""
    return rf"\,({abs(change):.{places}f}){arrow}"


def seeds_in_words(table: Table, scale: str) -> str:
    """ "3 seeds"; a partial table's columns with different seeds by their seeds."""
    counts = {len(scale_seeds(table, scale, column)) for column in table.columns}
    if len(counts) == 1:
        count = counts.pop()
        return f"{count} seed{'s' if count != 1 else ''}"
    return f"seeds {seeds_text(table, scale, lambda column: column.latex or escape(column.label))}"


def footnote(table: Table, used: set, scale: str) -> str:
    notes = {
        "std": rf"Mean $\pm$ standard deviation over {seeds_in_words(table, scale)} (population, ddof = 0).",
        "marks": r"Bold: best; underlined: second best (ties share the mark; cells with a failed, diverged "
        r"or suspect run, or a seed that never reached the target or had none, are not ranked).",
        "n/i": "n/i: method not implemented yet.",
        "rise": rf"(x)$\uparrow$ and (x)$\downarrow$: the mean's rise and fall against {REFERENCE_ROW}'s "
        "(base) in the column.",
        "rounds never": "--: the target accuracy was not reached.",
        "some never": r"$^{*k}$: k seeds never reached the target accuracy; the mean is over the others.",
        "no value": "--: no value.",
        "dagger": r"$^\dagger$: some seeds failed or diverged (in a column of rounds to another row's accuracy, "
        r"or that row's run at the seed did: no target); the mean is over the others.",
        "ddagger": r"$^\ddagger$: some seeds were flagged suspect and are left out of the mean.",
        "all failed": r"\textit{failed}: no seed completed (each failed, diverged or was flagged suspect), or "
        r"none had a target.",
        "all suspect": r"\textit{suspect}: every seed was flagged suspect.",
        "chance": r"$^\circ$: at chance (100/classes \%): these models have not learnt (yet).",
        "equals": rf"$^{{=}}$: each seed's value is {REFERENCE_ROW}'s at that seed: the method's own term "
        r"left the counted accuracy unchanged.",
    }
    if table.components:
        notes["components"] = r"$\surd$, $\times$: the variant keeps, drops the component; -: no variant of the method."
        used = used | {"components"}
    if note := rounds_read_note(table, scale, r"$\lceil tR/P \rceil$"):
        notes["rounds read"] = note
        used = used | {"rounds read"}
    text = " ".join(
        [
            *(note for key, note in notes.items() if key in used),
            *(rf"$^\P$ {escape(note)}" for note in reading_notes(table)),
        ]
    )
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
    "LANDSCAPE_ABOVE", f"{1 / MIN_SCALE:g}"
)
FIT = r"""\ifdim\wd\fedreprobox>\linewidth
  \typeout{table.tex: a tabular of \the\wd\fedreprobox\space scaled to the line, \the\linewidth}%
  \resizebox{\linewidth}{!}{\usebox{\fedreprobox}}%
\else\usebox{\fedreprobox}\fi"""


def body_lines(
    row_labels: list[tuple[str, str]], row_groups: list[tuple[str, list[str]]] | None, grid: list[list[str]]
) -> list[str]:
    """The tabular's body: one line per row; a rule between row groups, whose name is printed once."""
    if not row_groups:
        return [" & ".join([label, *cells]) + r" \\" for (_, label), cells in zip(row_labels, grid)]
    names = [name for name, members in row_groups for name in [name] + [""] * (len(members) - 1)]
    subs = [member for _, members in row_groups for member in members]
    starts = {sum(len(m) for _, m in row_groups[:k]) for k in range(1, len(row_groups))}
    body = []
    for i, (name, sub, cells) in enumerate(zip(names, subs, grid)):
        if i in starts:
            body.append(r"\midrule")
        body.append(" & ".join([name, sub, *cells]) + r" \\")
    return body


def spanned(span: str, labels: list[tuple[str, str]]) -> list[tuple[str, list[str]]]:
    """One spanning header, the paper's, over all the columns: under it each label without the
    words before its last that all labels share ("10" of "round 10": the span says "round"),
    else whole."""
    groups = split_groups(labels, min_groups=1)
    members = groups[0][1] if groups and len(groups) == 1 else [latex for _, latex in labels]
    return [(escape(span), members)]


def header_lines(
    column_labels: list[tuple[str, str]],
    column_groups: list[tuple[str, list[str]]] | None,
    leading_columns: int,
    corner_cell: str,
) -> list[str]:
    """The tabular's header: the column labels, under a spanning name (ruled) for each group;
    `corner_cell` heads the `leading_columns` before them (labels, components)."""
    if not column_groups:
        return [" & ".join([corner_cell, *(label for _, label in column_labels)]) + r" \\"]
    tops, rules, first = [], [], leading_columns + 1
    for name, members in column_groups:
        tops.append(rf"\multicolumn{{{len(members)}}}{{c}}{{{name}}}")
        rules.append(rf"\cmidrule(lr){{{first}-{first + len(members) - 1}}}")
        first += len(members)
    return [
        " & ".join([""] * leading_columns + tops) + r" \\",
        "".join(rules),
        " & ".join([corner_cell, *(m for _, members in column_groups for m in members)]) + r" \\",
    ]


def components_kept(table: Table, row) -> list[str]:
    """A row's ticks and crosses, as FedCSD prints Table III: which of the method's components
    its variant keeps; "-" beside a row that is no variant of the method (FedAvg)."""
    if row.components is None:
        return ["-"] * len(table.components)
    return [r"$\surd$" if name in row.components else r"$\times$" for name in table.components]


def corner_text(corner: tuple[str, ...], label_columns: int) -> str:
    """The header over the label columns: one name each, or the names as one where the rows
    stand in no groups ("Dataset / Setting" over FedGKD Table 4's "AG News α=0.1": one setting
    a data set; a partial table's rows of one data set)."""
    if len(corner) == label_columns:
        return " & ".join(escape(name) for name in corner)
    text = escape(" / ".join(corner))
    return text if label_columns == 1 else rf"\multicolumn{{{label_columns}}}{{l}}{{{text}}}"


def latex_table(table: Table, summary: pd.DataFrame, scale: str) -> str:
    """booktabs, laid out as the paper prints it: methods as rows, or as columns where the paper
    prints them so (FedGKD); labels sharing a prefix grouped (a spanning header over "ACC" and
    "T", or a dataset beside its settings); sized to the page by LaTeX (`LAYOUT`)."""
    marks, used = rank_marks(table, summary), set()
    grid = [[cell_text(table, summary, marks, row, column, used) for column in table.columns] for row in table.rows]
    row_labels = [(r.label, (r.latex or escape(r.label)) + (r"$^\P$" if r.reading_of else "")) for r in table.rows]
    column_labels = [(c.label, c.latex or escape(c.label)) for c in table.columns]
    corner = table.corner or ("Method",)
    ticks = len(table.components)
    if ticks:  # the components' columns come first, outside any spanning header over the values
        grid = [components_kept(table, row) + line for row, line in zip(table.rows, grid)]
    if table.methods_as_columns:
        grid = [list(line) for line in zip(*grid)]
        row_labels, column_labels, corner = column_labels, row_labels, table.corner or ("Setting",)
    row_groups = split_groups(row_labels, min_groups=2)
    column_groups = spanned(table.span, column_labels) if table.span else split_groups(column_labels, min_groups=1)
    label_columns = 2 if row_groups else 1
    corner_cell = " & ".join([corner_text(corner, label_columns), *map(escape, table.components)])
    header = header_lines(column_labels, column_groups, label_columns + ticks, corner_cell)
    body = body_lines(row_labels, row_groups, grid)
    scale_note = "" if scale == "paper" else rf" \textbf{{[Scale: {escape(scale)}; not a paper result.]}}"
    notes = footnote(table, used, scale)
    return "\n".join(
        [
            (
                f"% {table.paper}/{table.name} at scale {scale}, written by shared/reporting/tables.py; "
                rf"needs \usepackage{{{','.join(LATEX_PACKAGES)}}}"
            ),
            r"\def\fedreprotabular{%",
            rf"\begin{{tabular}}{{{'l' * label_columns}{'c' * (ticks + len(column_labels))}}}",
            r"\toprule",
            *header,
            r"\midrule",
            *body,
            r"\bottomrule",
            r"\end{tabular}}",
            LAYOUT,
            r"\begin{\fedreprofloat}[t]",
            r"\centering",
            rf"\caption{{{escape(table.caption)}{scale_note}}}",
            rf"\label{{tab:{table.paper}-{table.name}}}",
            FIT,
            *([r"\par\smallskip", rf"{{\footnotesize\raggedright {notes}\par}}"] if notes else []),
            r"\end{\fedreprofloat}",
            "",
        ]
    )
