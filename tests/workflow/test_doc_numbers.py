"""The numbers of the user's pages are the code's: the runs and GPU-hours of every target table of
README.md and papers/*/README.md are what `python -m shared.plan` computes (with its assumed
throughputs, as the pages say), and every smoke run count the pages give is the number of run
jobs Snakemake schedules for that command in a fresh project. What they say is shipped:
tests/workflow/test_expected_results.py."""

import re
from pathlib import Path

import pytest

from shared.plan import subtotals, target_costs
from shared.targets.papers import paper_names
from shared.targets.resolve import paper_target_names
from tests.workflow.test_workflow import job_counts, make_project, snakemake

ROOT = Path(__file__).resolve().parents[2]
NUMBER = r"\d[\d,]*(?:\.\d+)?"


def paper_costs(paper: str) -> dict[str, dict]:
    """Every target of `paper` in `shared.plan <paper>`'s order, at paper scale, throughput assumed."""
    return target_costs([(paper, name) for name in paper_target_names(paper)], "paper", {})[0]


def as_printed(value: float, printed: str) -> str:
    """`value` written as `printed` is: its decimals, and thousands separated where it has them."""
    decimals = len(printed.split(".")[1]) if "." in printed else 0
    return f"{value:,.{decimals}f}" if "," in printed else f"{value:.{decimals}f}"


def markdown_tables(text: str) -> list[list[list[str]]]:
    """Each table of a markdown page as rows of cells (the header first, the rule left out)."""
    tables, rows = [], []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            if not re.fullmatch(r"\|[-| ]+\|", line):
                rows.append([cell.strip() for cell in line.strip("|").split("|")])
        elif rows:
            tables.append(rows)
            rows = []
    return tables


def target_table_mismatches(paper: str, text: str) -> list[str]:
    """What the target table of a paper's README says that `shared.plan` does not compute."""
    costs = paper_costs(paper)
    (table,) = [t for t in markdown_tables(text) if t[0][0] == "target"]
    runs_col = next(i for i, name in enumerate(table[0]) if "runs" in name)
    hours_col = next(i for i, name in enumerate(table[0]) if "GPU-hours" in name)
    wrong = []
    for row in table[1:]:
        names = re.findall(r"`([a-z0-9_]+)`", row[0])
        assert names, row
        runs = "0" if row[runs_col].startswith("from ") else re.match(NUMBER, row[runs_col]).group(0)
        hours = re.match(NUMBER, row[hours_col]).group(0)
        for name in names:
            found = (int(runs.replace(",", "")), hours)
            computed = (costs[name]["runs"], as_printed(costs[name]["gpu_hours"], hours))
            if found != computed:
                wrong.append(f"{paper} {name}: the page says {found}, shared.plan {computed}")
    return wrong


@pytest.mark.parametrize("paper", paper_names())
def test_a_papers_target_table_is_what_shared_plan_computes(paper):
    text = (ROOT / "papers" / paper / "README.md").read_text()
    assert target_table_mismatches(paper, text) == []


def test_a_stale_number_in_a_target_table_is_found():
    text = (ROOT / "papers" / "fedcad" / "README.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith("| `table2` |"))
    *start, hours, end = row.split("|")
    planted = text.replace(row, "|".join([*start, f" {float(hours) + 1:.1f} ", end]))
    assert target_table_mismatches("fedcad", planted) == [
        f"fedcad table2: the page says (36, '{float(hours) + 1:.1f}'), shared.plan (36, '{float(hours):.1f}')"
    ]


def test_the_readmes_gpu_hours_are_the_tables_subtotal_of_shared_plan():
    text = (ROOT / "README.md").read_text()
    (table,) = [t for t in markdown_tables(text) if t[0][0] == "paper"]
    assert "`tables`" in table[0][-1] and "shared.plan" in table[0][-1]  # quoted by the subtotal's name
    papers = set()
    for row in table[1:]:
        paper = re.search(r"papers/(\w+)/README\.md", row[0]).group(1)
        papers.add(paper)
        hours = re.match(NUMBER, row[-1]).group(0)
        assert hours == as_printed(subtotals(paper_costs(paper))["tables"]["gpu_hours"], hours), row
    assert papers == set(paper_names())


def figure_numbers(listed: str) -> set[int]:
    """ "Figs. 1, 3-6" -> {1, 3, 4, 5, 6}."""
    numbers = set()
    for part in listed.split(","):
        first, _, last = part.strip().partition("-")
        numbers.update(range(int(first), int(last or first) + 1))
    return numbers


def test_the_readme_lists_each_papers_figures():
    """The README's targets column names every figure a paper declares, and no other."""
    from shared.targets.figure_declarations import paper_figures

    (table,) = [t for t in markdown_tables((ROOT / "README.md").read_text()) if t[0][0] == "paper"]
    for row in table[1:]:
        paper = re.search(r"papers/(\w+)/README\.md", row[0]).group(1)
        listed = figure_numbers(re.search(r"Figs\. ([\d,\- ]+)", row[1]).group(1))
        assert listed == {int(re.match(r"\d+", f.number).group()) for f in paper_figures(paper).values()}, row[1]


def smoke_counts() -> list[tuple[str, str, int]]:
    """(page, target, runs) of every smoke command with its run count in the pages: "Try it first"
    of README.md (its target's runs) and each paper's "Smoke check on a CPU"."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Try it first", 1)[1].split("\n## ", 1)[0]
    found = [("README.md", re.search(r"-- (papers/\w+/\w+)", section).group(1), re.search(r"(\d+)\s+runs\)", section))]
    for paper in paper_names():
        text = (ROOT / "papers" / paper / "README.md").read_text()
        line = next(line for line in text.splitlines() if line.startswith("Smoke check on a CPU"))
        found.append(
            (f"papers/{paper}/README.md", re.search(r"-- (\S+)`", line).group(1), re.search(r"(\d+) runs", line))
        )
    return [(page, target, int(match.group(1))) for page, target, match in found]


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    return make_project(tmp_path_factory.mktemp("numbers"))


@pytest.mark.parametrize(("page", "target", "runs"), smoke_counts())
def test_a_smoke_run_count_is_what_snakemake_schedules(project, page, target, runs):
    dry = snakemake(project, "-n", "--config", "scale=smoke", "device=cpu", "--", target)
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert job_counts(dry.stdout)["run"] == runs, f"{page}: {target}"
