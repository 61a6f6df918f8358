"""A row that reads a method otherwise than the paper's text (Row.reading_of): beside the printed
row in every output, labelled so, never given a paper number or a rank mark, judged on the
printed row's claims beside them; FedSSD's weight-M reading in its Tables I-III, trained first."""

from collections import Counter

import pandas as pd
import pytest

import shared.reporting.claims
from shared.reporting.claim_verdicts import HELD, NOT_HELD
from shared.reporting.claims import Best
from shared.reporting.tables import build_table
from shared.targets.copies import campaign_runs
from shared.targets.table_declarations import Column, Reported, Row, Table, expand, get_table, keep_rows
from tests.reporting.test_tables import BASE, write_runs


def reading_table():
    return Table(
        paper="fedssd",
        name="tabletest",
        caption="A test table.",
        base=BASE,
        rows=[
            Row("FedAvg", {"name": "fedavg"}),
            Row("FedProx", {"name": "fedprox", "mu": 0.01}),
            Row("FedProx (mu 1)", {"name": "fedprox", "mu": 1.0}, reading_of="FedProx", reading="mu read as 1"),
        ],
        columns=[Column("a", {"partition": {"beta": 0.1}}), Column("b", {"partition": {"beta": 0.5}})],
        reported={"FedAvg": [Reported(50.0, 1.0), Reported(60.0, 1.0)], "FedProx": [Reported(52.0), Reported(62.0)]},
        seeds=(0, 1, 2),
    )


CURVES = {  # the reading beats everything at "a" and loses to FedAvg at "b"; the printed row the reverse
    ("FedAvg", "a"): [[10, 40, 50], [10, 45, 52], [10, 41, 48]],
    ("FedAvg", "b"): [[20, 50, 60], [20, 55, 61], [20, 58, 62]],
    ("FedProx", "a"): [[10, 30, 40], [12, 31, 41], [11, 32, 42]],
    ("FedProx", "b"): [[30, 60, 70], [31, 61, 71], [32, 62, 72]],
    ("FedProx (mu 1)", "a"): [[10, 60, 80], [12, 61, 81], [11, 62, 82]],
    ("FedProx (mu 1)", "b"): [[30, 40, 40], [31, 41, 41], [32, 42, 42]],
}


def test_a_reading_row_is_labelled_everywhere_and_has_no_paper_number_or_mark(tmp_path, monkeypatch):
    table = reading_table()
    claims = [Best("tabletest", "FedProx beats FedAvg.", "test", rows=("FedProx",))]
    monkeypatch.setattr(shared.reporting.claims, "paper_claims", lambda paper: claims)
    write_runs(table, tmp_path / "runs", CURVES)
    build_table(table, "paper", tmp_path / "runs", tmp_path / "out")
    out = tmp_path / "out"

    cells = pd.read_csv(out / "table.csv", keep_default_na=False).set_index(["row", "column"])
    assert cells.loc[("FedProx (mu 1)", "a"), "reading"] == "mu read as 1"
    assert cells.loc[("FedProx", "a"), "reading"] == ""
    comp = pd.read_csv(out / "comparison.csv").set_index(["row", "column"])
    assert comp.loc[("FedProx (mu 1)", "a"), "paper_mean"] != comp.loc[("FedProx (mu 1)", "a"), "paper_mean"]  # NaN
    assert comp.loc[("FedProx (mu 1)", "a"), "reading"] == "mu read as 1"

    tex = (out / "table.tex").read_text()
    assert r"FedProx (mu 1)$^\P$" in tex and r"$^\P$ FedProx (mu 1): a reading of FedProx that is not the paper" in tex
    # the reading's 80.00 is the column's largest, but the marks are the paper's rows' alone
    line = next(row for row in tex.splitlines() if row.startswith("FedProx (mu 1)"))
    assert r"\textbf" not in line and r"\underline" not in line
    assert r"\textbf{\boldmath 50.00" in tex
    for page in ("comparison.md", "comparison.html"):
        text = (out / page).read_text()
        assert "FedProx (mu 1) ¶" in text and "a reading of FedProx that is not the paper&#x27;s text" in text.replace(
            "'", "&#x27;"
        )

    verdicts = pd.read_csv(out / "claims.csv", keep_default_na=False, dtype={"claim": str})
    printed = verdicts[verdicts.reading == ""].set_index("group")
    twin = verdicts[verdicts.reading == "FedProx (mu 1)"].set_index("group")
    assert printed.verdict.to_dict() == {"a": NOT_HELD, "b": HELD}  # as without the reading
    assert twin.verdict.to_dict() == {"a": HELD, "b": NOT_HELD}
    assert set(twin.claim) == {"1 (FedProx (mu 1))"} and (twin.paper_verdict == printed.paper_verdict).all()
    assert "FedProx" not in set(twin.decisive.str.split(" vs ").str[1])  # never judged against what it reads
    assert "[read as FedProx (mu 1): mu read as 1; not the paper's text]" in (out / "claims.md").read_text()


def test_a_reading_must_name_its_row_say_what_it_reads_and_carry_no_paper_number():
    good = reading_table()
    bad_rows = [
        Row("X", {"name": "fedprox"}, reading_of="Nobody", reading="r"),
        Row("X", {"name": "fedprox"}, reading_of="FedProx"),
    ]
    for row in bad_rows:
        with pytest.raises(ValueError, match="the reading 'X' needs"):
            Table(**{**good.__dict__, "rows": [*good.rows[:2], row]})
    with pytest.raises(ValueError, match="the reading 'FedProx \\(mu 1\\)' needs"):
        Table(**{**good.__dict__, "reported": {**good.reported, "FedProx (mu 1)": [None, None]}})
    with pytest.raises(ValueError, match="train_first names unknown rows"):
        Table(**{**good.__dict__, "train_first": ("Nobody",)})


def test_fedssd_tables_carry_the_weight_m_reading_beside_the_printed_row():
    for name in ("table1", "table2"):
        table = get_table("fedssd", name)
        labels = [r.label for r in table.rows]
        assert labels[-2:] == ["FedSSD", "FedSSD (weight M)"] and "FedSSD (weight M)" not in table.reported
        reading = table.rows[-1]
        assert reading.reading_of == "FedSSD" and reading.method == {**table.rows[-2].method, "mask_weight": "m"}
        assert reading.per_column == table.rows[-2].per_column  # Table I: M_max 0.001 on CIFAR-100 and Tiny
    table3 = get_table("fedssd", "table3")
    ssd, twin = table3.rows[-2:]
    assert twin.label == "SSD (weight M)" and twin.reading_of == "SSD"
    assert twin.per_column == ssd.per_column and set(twin.per_column) == {c.label for c in table3.columns}
    cells = expand(get_table("fedssd", "table2"), "paper")
    assert len(cells) == 120 and len({c.run_id for c in cells}) == 120


def test_the_campaign_trains_fedavg_and_both_fedssd_rows_first_on_fedssd_table2():
    runs, _ = campaign_runs(["papers/fedssd/table2"], "paper", None)
    by_id = {c.run_id: c for c in expand(get_table("fedssd", "table2"), "paper")}
    order = [(by_id[rid].row.label, by_id[rid].seed) for rid in runs]
    assert Counter(order[:15]) == {(row, 0): 5 for row in ("FedAvg", "FedSSD", "FedSSD (weight M)")}
    assert {seed for _, seed in order[15:40]} == {0}  # then seed 0 of the other five rows, then further seeds
    assert [seed for _, seed in order] == sorted(seed for _, seed in order)


def test_a_table_cut_to_some_rows_drops_what_names_the_rows_cut_away():
    """A partial table (shared/targets/copies.py, `finished_part`) or a copy's part keeps a reading only beside its
    row, and the rows it trains first only where they are kept."""
    table = get_table("fedssd", "table2")
    by_label = {r.label: r for r in table.rows}
    cut = keep_rows(table, [by_label["FedAvg"], by_label["FedSSD (weight M)"]])
    assert [r.label for r in cut.rows] == ["FedAvg"] and cut.train_first == ("FedAvg",)
    assert set(cut.reported) == {"FedAvg"}
    both = keep_rows(table, [by_label["FedSSD"], by_label["FedSSD (weight M)"]], seeds=(0,))
    assert [r.label for r in both.rows] == ["FedSSD", "FedSSD (weight M)"] and both.seeds == (0,)
    assert both.train_first == ("FedSSD", "FedSSD (weight M)")
