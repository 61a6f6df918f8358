"""Every declared table and figure is a target the workflow's rules match: its name fits the
wildcard constraints of workflow/rules/tables.smk (a name that does not gets a
MissingInputException where the user asked for a table or a figure)."""

import re
from pathlib import Path

import pytest

from shared.targets.figure_declarations import paper_figures
from shared.targets.papers import paper_names
from shared.targets.table_declarations import paper_tables

RULES = Path(__file__).resolve().parents[2] / "workflow" / "rules" / "tables.smk"


def constraints(wildcard: str) -> list[str]:
    found = re.findall(rf'^\s+{wildcard}="([^"]+)",$', RULES.read_text(), re.M)
    assert found, f"{RULES} constrains no {wildcard}"
    return found


@pytest.mark.parametrize("paper", paper_names())
def test_every_declared_target_fits_its_rules_wildcard(paper):
    for kind, names in (("table", paper_tables(paper)), ("figure", paper_figures(paper))):
        for pattern in constraints(kind):
            unmatched = [name for name in names if not re.fullmatch(pattern, name)]
            assert not unmatched, f"{paper}: {kind}s {unmatched} do not fit {kind}={pattern!r} in {RULES.name}"
