"""What the pages say is shipped at paper scale is what results/shipped/ holds: README.md's
status (the runs in all, and per paper the runs its tables read: a run is shared by every
table whose cell resolves to its config, so papers share runs) and each paper README's
"Expected results": the runs it says are shipped so far, and every cell of its
expected-results tables ("ours / the paper's", a reading's "ours" alone, empty while nothing
of it is shipped), which is what the shipped runs give over all their seeds, formatted as the
generated table prints it (mean ± std with ddof 0, one seed alone without ±), beside the
paper's number as declared. Hand-written numbers drift: a FedProx run was once listed under
the wrong setting."""

import re
from pathlib import Path

import pytest
import yaml

from shared.campaign.ship import tables_reading
from shared.reporting.summary import collect, decimals, fmt, summarize_cells
from shared.runs.files import holds_result
from shared.targets.copies import Copy, copy_part, copy_runtime, data_folder
from shared.targets.papers import paper_names
from shared.targets.resolve import target_parts
from shared.targets.table_declarations import expand, get_table
from tests.workflow.test_doc_numbers import markdown_tables

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "results" / "shipped" / "runs"
ROMAN = {"I": 1, "II": 2, "III": 3, "IV": 4, "V": 5, "VI": 6, "VII": 7, "VIII": 8, "IX": 9}


def table_name(header: str) -> str | None:
    """ "Table II" or "Table 6" -> the declared name "table2" or "table6"; None for another header."""
    found = re.fullmatch(r"Table (\d+|[IVX]+)", header)
    return found and f"table{ROMAN.get(found.group(1), found.group(1))}"


def shipped_copies(runs_dir: Path) -> set[Copy]:
    """The copies (dataset, SHA-256) the shipped runs trained on."""
    copies = set()
    for path in runs_dir.glob("*/config.yaml"):
        dataset = yaml.safe_load(path.read_text())["dataset"]
        copies.add(Copy(dataset["name"], dataset["copy"]) if dataset.get("copy") else None)
    return copies


def shipped_part(paper: str, name: str, runs_dir: Path):
    """The table's part on the data its shipped runs trained on (a copy's dataset), with those
    runs' cells; (None, []) where none is shipped."""
    table = get_table(paper, name)
    found = []
    for copy in shipped_copies(runs_dir):
        part = copy_part(table, "paper", copy) if copy else table
        cells = [c for c in expand(part, "paper", copy_runtime(copy)) if holds_result(runs_dir / c.run_id)]
        found += [(part, cells)] if cells else []
    assert len(found) <= 1, f"{paper} {name}: shipped runs on several data; the README must say which it lists"
    return found[0] if found else (None, [])


def expected_cells(paper: str, name: str, runs_dir: Path) -> dict[tuple[str, str], str]:
    """(row, setting) -> the cell as the README writes it, from the shipped runs of the table."""
    table = get_table(paper, name)
    part, cells = shipped_part(paper, name, runs_dir)
    summary = summarize_cells(part, collect(part, cells, runs_dir)) if cells else None
    expected = {}
    for row in table.rows:
        for i, column in enumerate(table.columns):
            places, ours = decimals(table.metric_for(column)), ""
            shown = summary[(summary.row == row.label) & (summary.column == column.label)] if cells else []
            if len(shown) and shown.n.iloc[0]:
                ours = fmt(shown["mean"].iloc[0], shown["std"].iloc[0], shown.n.iloc[0], places)
            reported = table.reported.get(row.label)
            paper_number = reported[i] if reported else None
            theirs = f"{paper_number.mean:.{places}f}" if paper_number and paper_number.mean is not None else ""
            expected[(row.label, column.label)] = " / ".join(filter(None, (ours, ours and theirs)))
    return expected


def expected_results_mismatches(paper: str, text: str, runs_dir: Path) -> list[str]:
    """What the README's expected-results tables, and the runs it says are shipped so far,
    state that the shipped runs in `runs_dir` do not give."""
    shipped = paper_runs(paper, runs_dir)
    said = re.search(r"\*\*Expected results\*\*(: none yet|, so far (\d+) runs)", text)
    if said is None or said.group(2) is None and shipped or said.group(2) and int(said.group(2)) != len(shipped):
        return [f"{paper}: the README's expected results are not {len(shipped)} runs shipped"]
    headers = [t[0][0] for t in markdown_tables(text) if t[0][0].startswith("Table")]
    wrong = [f"{paper}: {h!r} names no table (Table II, Table 6)" for h in headers if not table_name(h)]
    if shipped and not headers:
        wrong.append(f"{paper}: {len(shipped)} runs shipped, no expected-results table")
    for table in [t for t in markdown_tables(text) if table_name(t[0][0])]:
        name, settings = table_name(table[0][0]), table[0][1:]
        expected = expected_cells(paper, name, runs_dir)
        listed = {(row[0], setting): found for row in table[1:] for setting, found in zip(settings, row[1:])}
        wrong += [f"{paper} {name}: no cell {cell}" for cell in listed if cell not in expected]
        wrong += [
            f"{paper} {name} {cell}: {listed.get(cell, 'not listed')!r}, the shipped runs give {ours!r}"
            for cell, ours in expected.items()
            if listed.get(cell, "") != ours
        ]
    return wrong


def paper_runs(paper: str, runs_dir: Path) -> set[str]:
    """The shipped runs that some table of the paper reads."""
    from shared.targets.table_declarations import declared

    ids = set()
    for table in declared(paper, "TABLES").values():
        for copy in shipped_copies(runs_dir):
            part = copy_part(table, "paper", copy) if copy else table
            if part.rows and part.columns:
                ids |= {c.run_id for c in expand(part, "paper", copy_runtime(copy))}
    return {i for i in ids if holds_result(runs_dir / i)}


def status_mismatches(readme: str, runs_dir: Path) -> list[str]:
    """What README.md's status says is shipped (its runs in all, and per paper "none yet" or
    "N runs") that the shipped runs in `runs_dir` contradict."""
    runs = len(list(runs_dir.glob("*/metrics.json")))
    status = readme.split("## Status", 1)[1].split("\n## ", 1)[0]
    (table,) = [t for t in markdown_tables(status) if t[0][0] == "paper"]
    column = next(i for i, name in enumerate(table[0]) if "shipped" in name)
    wrong = [] if runs == 0 or f"{runs} runs" in status.split("|", 1)[0] else [f"README: not {runs} runs shipped"]
    for row in table[1:]:
        paper = re.search(r"papers/(\w+)/README\.md", row[0]).group(1)
        shipped = len(paper_runs(paper, runs_dir))
        if not re.match(rf"{shipped} runs?\b" if shipped else "none yet$", row[column]):
            wrong.append(f"README: {paper}'s shipped runs: {row[column]!r}, {shipped} shipped")
    return wrong + [f"{table}: reads a shipped run, not shipped (import again)" for table in unbuilt_tables(runs_dir)]


def unbuilt_tables(runs_dir: Path) -> list[str]:
    """The tables that read a shipped run (`import` builds each) and have no shipped folder."""
    unbuilt = []
    for copy in shipped_copies(runs_dir):
        data = f"*-copy-{copy.sha256[:7]}" if copy else data_folder("paper", None)  # a copy's kind is in its slug
        for target in tables_reading(runs_dir, "paper", copy):
            paper, name = target_parts(target)
            unbuilt += [] if any(runs_dir.parent.glob(f"tables/{data}/{paper}/{name}/provenance.yaml")) else [target]
    return unbuilt


def test_the_readmes_status_says_what_is_shipped():
    assert status_mismatches((ROOT / "README.md").read_text(), SHIPPED) == []


def test_a_shipped_paper_the_readme_calls_none_yet_is_found():
    readme = (ROOT / "README.md").read_text()
    row = next(line for line in readme.splitlines() if "papers/fedssd/README.md" in line and line.startswith("|"))
    cells = row.split("|")
    cells[3] = " none yet "
    assert status_mismatches(readme.replace(row, "|".join(cells)), SHIPPED) == [
        f"README: fedssd's shipped runs: 'none yet', {len(paper_runs('fedssd', SHIPPED))} shipped"
    ]


@pytest.mark.parametrize("paper", paper_names())
def test_a_papers_expected_results_are_the_shipped_runs(paper):
    text = (ROOT / "papers" / paper / "README.md").read_text()
    assert expected_results_mismatches(paper, text, SHIPPED) == []


def test_a_wrong_or_missing_expected_number_is_found():
    text = (ROOT / "papers" / "fedssd" / "README.md").read_text()
    (table,) = [t for t in markdown_tables(text) if table_name(t[0][0])]
    row = next(r for r in table[1:] if r[0] == "FedAvg")
    line = "| " + " | ".join(row) + " |"
    assert line in text, "the test's reading of the table's rows"
    ours, theirs = row[1].split(" / ")
    wrong = text.replace(line, line.replace(row[1], f"{float(ours) + 0.01:.2f} / {theirs}"))
    paper_wrong = text.replace(line, line.replace(row[1], f"{ours} / {float(theirs) + 1:.2f}"))
    emptied = text.replace(line, line.replace(row[1], ""))
    for changed in (wrong, paper_wrong, emptied):
        assert any("FedAvg" in w for w in expected_results_mismatches("fedssd", changed, SHIPPED))
    miscounted = re.sub(r"so far \d+ runs", "so far 1 runs", text)
    assert expected_results_mismatches("fedssd", miscounted, SHIPPED) == [
        f"fedssd: the README's expected results are not {len(paper_runs('fedssd', SHIPPED))} runs shipped"
    ]
