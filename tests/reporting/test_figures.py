"""Figures from hand-written runs: whole-round ticks, one look per method (told apart in black
and white, the same in every figure), a colour bar on every heatmap, axis labels and titles
that say what they show, and the warning where a reduced scale makes a sweep's points one run."""

import json

import numpy as np
import pandas as pd
import pytest
import yaml

from shared.config.dotted import flatten
from shared.reporting.figure_settings import (
    DATASET_NAMES,
    SWEPT,
    merged_settings,
    paper_overrides,
    setting_titles,
    sweep_label,
    sweep_panel,
    sweep_titles,
    swept_key,
)
from shared.reporting.figure_style import METHOD_ORDER, series_styles
from shared.reporting.figures import CURVE_METRICS, DOMAIN_MEAN, DRAW, build_figure, draw, figure_title
from shared.targets.figure_declarations import CURVE_ACCURACIES, FIGURE_KINDS, Figure, paper_figures
from shared.targets.papers import paper_names
from shared.targets.table_declarations import Column, Metric, Row, Table, expand

BASE = {"dataset": {"name": "synthetic"}, "federation": {"rounds": 3}}  # default ticks: 1, 1.5, ...
FINAL = Metric()  # the default metric: the final accuracy
ROWS = [
    Row("FedAvg", {"name": "fedavg"}),
    Row("FedProx", {"name": "fedprox", "mu": 0.01}),
    Row("MOON", {"name": "moon", "mu": 1.0}),
    Row("my variant", {"name": "fedavg"}),
]


def make_table(columns, rows=ROWS, metric=FINAL):
    return Table(
        paper="fedssd",
        name="figtest",
        caption="A test grid.",
        base=BASE,
        rows=rows,
        columns=columns,
        reported={},
        metric=metric,
        seeds=(0, 1),
    )


def write_runs(cells, runs_dir, classes=10, clients=10):
    """Every cell's run: rising accuracy each round, metrics.jsonl, and a partition.csv."""
    for i, cell in enumerate(cells):
        out = runs_dir / cell.run_id
        out.mkdir(parents=True, exist_ok=True)
        rng = np.random.default_rng(i)
        rounds = cell.config.federation.rounds
        accs = [float(v) for v in np.linspace(10, 40 + 5 * (i % 4), rounds) + rng.normal(0, 0.5, rounds)]
        metrics = {
            "status": "completed",
            "run_id": cell.run_id,
            "eval_rounds": list(range(1, rounds + 1)),
            "global_acc": accs,
            "local_acc": [a - 3 for a in accs],
            "global_loss": [2.0] * rounds,
            "final_acc": accs[-1],
            "best_acc": max(accs),
            "wall_time_s": 1.0,
        }
        (out / "metrics.json").write_text(json.dumps(metrics))
        (out / "metrics.jsonl").write_text(
            "".join(
                json.dumps({"round": r + 1, "global_acc": accs[r], "mask_filter_rate": 0.5 / (r + 1)}) + "\n"
                for r in range(rounds)
            )
        )
        counts = rng.integers(0, 20, size=(clients, classes))
        header = "client," + ",".join(str(k) for k in range(classes))
        (out / "partition.csv").write_text(
            "\n".join([header, *(f"{c}," + ",".join(map(str, row)) for c, row in enumerate(counts))]) + "\n"
        )


def round_axes(fig):
    return [ax for ax in fig.axes if ax.get_xlabel() == "communication round"]


def visible_ticks(ax):
    low, high = sorted(ax.get_xlim())
    return [t for t in ax.get_xticks() if low - 1e-9 <= t <= high + 1e-9]


def test_every_known_method_has_its_own_look_in_every_figure():
    looks = series_styles(METHOD_ORDER)
    pairs = {(s["marker"], s["linestyle"]) for s in looks.values()}
    assert len(pairs) == len(METHOD_ORDER)  # distinct in black and white, not by colour alone
    # the same method looks the same whatever else a figure draws
    assert series_styles(["FedSSD"])["FedSSD"] == looks["FedSSD"]
    assert series_styles(["MOON", "FedSSD", "FedAvg"])["FedSSD"] == looks["FedSSD"]
    # a label not listed takes a look that no other series of its figure has
    mixed = series_styles(["FedAvg", "FedProx", "a setting", "another"])
    assert len({(s["marker"], s["linestyle"]) for s in mixed.values()}) == 4
    # and no two series of a figure share a colour (FedCSD Fig. 6 draws FedCSD beside Base)
    for labels in (["FedAvg", "Base", "FedCSD"], METHOD_ORDER[:10], ["FedSSD", "x", "y", "z"]):
        colours = [look["color"] for look in series_styles(labels).values()]
        assert len(set(colours)) == len(colours), labels
    assert series_styles(["FedAvg", "Base", "FedCSD"])["FedCSD"]["color"] == looks["FedCSD"]["color"]


def test_curves_whole_round_ticks_and_one_look_per_method(tmp_path):
    table = make_table([Column("δ=0.5", {"partition": {"beta": 0.5}}), Column("δ=5", {"partition": {"beta": 5.0}})])
    figure = Figure("fedcad", "fig4", "The learning curves on CIFAR-10.", kind="curves", table=table)
    cells = figure.cells("paper")
    write_runs(cells, tmp_path / "runs")
    fig = draw(
        "curves",
        cells,
        tmp_path / "runs",
        tmp_path / "figure",
        figure_title(figure, "paper"),
        table=table,
        scale="paper",
    )
    assert (tmp_path / "figure.png").stat().st_size > 0 and (tmp_path / "figure.pdf").stat().st_size > 0
    axes = round_axes(fig)
    assert len(axes) == 4  # global and local accuracy, per setting
    for ax in axes:
        ticks = visible_ticks(ax)
        assert ticks and all(float(t).is_integer() for t in ticks), ticks
        assert all(
            label.get_text().replace("−", "-").lstrip("-").isdigit()
            for label in ax.get_xticklabels()
            if label.get_text()
        )
        assert ax.get_ylabel().endswith("(%)")
        looks = {line.get_label(): (line.get_marker(), line.get_linestyle()) for line in ax.get_lines()}
        assert set(looks) == {r.label for r in ROWS}
        assert len(set(looks.values())) == len(ROWS)  # each method its own (marker, line style)
        assert looks["FedAvg"] == (series_styles(["FedAvg"])["FedAvg"]["marker"], "-")
        assert "Dir(0.5)" in ax.get_title() or "Dir(5)" in ax.get_title()
    texts = " ".join(t.get_text() for t in fig.texts)
    assert "FedCAD Fig. 4: The learning curves on CIFAR-10." in texts and "Scale: paper" in texts
    assert "Warning" not in texts


def test_partitions_colour_bar_on_every_panel_and_titles_from_the_setting(tmp_path):
    table = make_table(
        [
            Column("CIFAR10 ACC", {"dataset": {"name": "cifar10"}}),
            Column("CIFAR100 ACC", {"dataset": {"name": "cifar100"}}),
            Column("TinyImageNet ACC", {"dataset": {"name": "tiny_imagenet"}}),
        ]
    )
    figure = Figure(
        "fedssd", "fig6", "Visualization of statistical heterogeneity among clients.", kind="partitions", table=table
    )
    cells = figure.cells("smoke")  # synthetic stand-ins with 10, 100 and 200 classes
    assert len(cells) == 3
    for cell in cells:
        write_runs([cell], tmp_path / "runs", classes=cell.config.dataset.synthetic.num_classes)
    fig = draw(
        "partitions",
        cells,
        tmp_path / "runs",
        tmp_path / "figure",
        figure_title(figure, "smoke"),
        table=table,
        scale="smoke",
    )
    panels = [ax for ax in fig.axes if ax.get_xlabel() == "client"]
    bars = [ax for ax in fig.axes if ax.get_ylabel() == "training samples"]
    assert len(panels) == 3 and len(bars) == 3  # the 100- and 200-class panels have theirs too
    titles = [" ".join(ax.get_title().split()) for ax in panels]  # wrapped to the panel's width
    assert "CIFAR-10 (10 classes)" in titles[0] and "CIFAR-100 (100 classes)" in titles[1]
    assert "Tiny-ImageNet (200 classes)" in titles[2]
    assert not any("ACC" in t for t in titles)
    assert all("10 clients" in t and "Dir(0.5)" in t for t in titles)


def sweep_table():
    """FedSSD Fig. 9: the final accuracy against the local epochs E."""
    return make_table([Column(f"E={e}", {"local": {"epochs": e}}) for e in (1, 5, 10)], rows=ROWS[:3])


def test_sweep_axes_name_the_swept_variable_and_the_metric(tmp_path):
    table = sweep_table()
    figure = Figure(
        "fedssd", "fig9", "The final global model's performance with different local epochs.", kind="sweep", table=table
    )
    cells = figure.cells("paper")
    write_runs(cells, tmp_path / "runs")
    fig = draw(
        "sweep",
        cells,
        tmp_path / "runs",
        tmp_path / "figure",
        figure_title(figure, "paper"),
        table=table,
        scale="paper",
    )
    (ax,) = [ax for ax in fig.axes if ax.get_ylabel()]
    assert "local epochs" in ax.get_xlabel() and "E" in ax.get_xlabel() and ax.get_xlabel() != "value"
    assert ax.get_title() == "final acc against local epochs E"
    assert ax.get_ylabel() == "final global test accuracy (%)"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "5", "10"]
    looks = {}
    for container in ax.containers:  # errorbar: one per method
        line = container.lines[0]
        looks[container.get_label()] = (line.get_marker(), line.get_linestyle())
    assert set(looks) == {"FedAvg", "FedProx", "MOON"} and len(set(looks.values())) == 3
    assert not merged_settings("sweep", cells, table)  # at paper scale every E is its own run
    assert "Warning" not in " ".join(t.get_text() for t in fig.texts)


@pytest.mark.parametrize(
    ("label", "read"),
    [
        ("E=5", ("", "E", "5")),
        ("α=0.1 C=0.3", ("α=0.1", "C", "0.3")),
        ("CIFAR-10 α=0.1 C=0.3", ("CIFAR-10 α=0.1", "C", "0.3")),
        ("CIFAR10 acc", ("", "setting", "CIFAR10 acc")),
        (" α=0.1  C=0.3 ", ("α=0.1", "C", "0.3")),
    ],
)
def test_a_sweeps_label_names_what_it_holds_the_parameter_and_the_point(label, read):
    assert sweep_label(label) == read


def test_a_sweep_over_two_settings_draws_a_panel_per_fixed_setting(tmp_path):
    """FedGKD Fig. 3's lower half: the accuracy against C, a panel per α, one line per method."""
    columns = [
        Column(f"α={a:g} C={c:g}", {"partition": {"beta": a}, "federation": {"participation": c}})
        for a in (1.0, 0.1)
        for c in (0.5, 1.0)
    ]
    table = make_table(columns, rows=ROWS[:2])
    figure = Figure("fedgkd", "fig3_bottom", "Over α and participation.", kind="sweep", table=table)
    cells = figure.cells("paper")
    write_runs(cells, tmp_path / "runs")
    title = figure_title(figure, "paper")
    assert title.startswith("FedGKD Fig. 3 (bottom): Over α and participation.")  # the paper's "Bottom" of Fig. 3
    fig = draw("sweep", cells, tmp_path / "runs", tmp_path / "figure", title, table=table, scale="paper")
    axes = [ax for ax in fig.axes if ax.get_ylabel()]
    assert [ax.get_title() for ax in axes] == [
        "α=1: final acc against client sample ratio C",
        "α=0.1: final acc against client sample ratio C",
    ]
    for ax in axes:
        assert [t.get_text() for t in ax.get_xticklabels()] == ["0.5", "1"]
        assert {c.get_label() for c in ax.containers} == {"FedAvg", "FedProx"}
        assert "client sample ratio C (federation.participation)" == ax.get_xlabel()


def test_warning_where_a_reduced_scale_makes_the_points_the_same_runs(tmp_path, capsys):
    """Smoke trains 2 local epochs whatever E says: E=1, 5, 10 are one run per method and seed."""
    table = sweep_table()
    figure = Figure("fedssd", "fig9", "Local epochs.", kind="sweep", table=table)
    cells = figure.cells("smoke")
    assert len({c.run_id for c in cells}) == len(cells) // 3
    assert merged_settings("sweep", cells, table) == [["E=1", "E=5", "E=10"]]
    write_runs(cells, tmp_path / "runs")
    fig = draw(
        "sweep",
        cells,
        tmp_path / "runs",
        tmp_path / "figure",
        figure_title(figure, "smoke"),
        table=table,
        scale="smoke",
    )
    texts = " ".join(t.get_text().replace("\n", " ") for t in fig.texts)  # as read, whatever the wrapping
    assert "Warning: at scale smoke, E=1, E=5, E=10 are the same runs" in texts
    assert "same runs" in capsys.readouterr().err

    build_figure(figure, "smoke", tmp_path / "runs", tmp_path / "out")
    assert "E=1, E=5, E=10 are the same runs" in capsys.readouterr().err  # in the job's output
    provenance = yaml.safe_load((tmp_path / "out" / "provenance.yaml").read_text())
    assert "same runs" in provenance["warning"]


def test_a_table_whose_columns_are_the_same_runs_at_a_reduced_scale_says_so(tmp_path, capsys):
    """FedCAD Table 4's local epochs collapse at smoke scale as Fig. 9's do: the comparison, the
    provenance and the job's output say which columns are one experiment."""
    from shared.reporting.tables import build_table

    table = sweep_table()
    write_runs(expand(table, "smoke"), tmp_path / "runs")
    build_table(table, "smoke", tmp_path / "runs", tmp_path / "out")
    assert "E=1, E=5, E=10 are the same runs" in capsys.readouterr().err
    for name in ("comparison.md", "comparison.html"):
        assert "at scale smoke, E=1, E=5, E=10 are the same runs" in (tmp_path / "out" / name).read_text()
    assert yaml.safe_load((tmp_path / "out" / "provenance.yaml").read_text())["same_runs"] == [["E=1", "E=5", "E=10"]]
    write_runs(expand(table, "paper"), tmp_path / "runs")
    build_table(table, "paper", tmp_path / "runs", tmp_path / "paper")
    assert "same runs" not in (tmp_path / "paper" / "comparison.md").read_text()
    # columns that read different numbers off the same runs (best and final accuracy, a domain's
    # accuracy, rounds to a target) are one experiment by design, at every scale: no warning
    by_design = make_table([Column("best", {}, metric=Metric("best_acc")), Column("final", {})], rows=ROWS[:2])
    write_runs(expand(by_design, "smoke"), tmp_path / "runs")
    build_table(by_design, "smoke", tmp_path / "runs", tmp_path / "by_design")
    assert "same runs" not in (tmp_path / "by_design" / "comparison.md").read_text()
    assert "same runs" not in capsys.readouterr().err


def test_round_metric_whole_round_ticks(tmp_path):
    table = make_table(
        [Column("β=0.5", {"partition": {"beta": 0.5}}), Column("β=5", {"partition": {"beta": 5.0}})], rows=ROWS[:1]
    )
    figure = Figure(
        "fedcsd",
        "fig5",
        "The filter rate of the adaptive mask.",
        kind="round_metric",
        table=table,
        value="mask_filter_rate",
    )
    cells = figure.cells("paper")
    write_runs(cells, tmp_path / "runs")
    fig = draw(
        "round_metric",
        cells,
        tmp_path / "runs",
        tmp_path / "figure",
        figure_title(figure, "paper"),
        table=table,
        value="mask_filter_rate",
        scale="paper",
    )
    (ax,) = round_axes(fig)
    assert all(float(t).is_integer() for t in visible_ticks(ax))
    assert "mask filter rate" in ax.get_ylabel()
    looks = [(line.get_marker(), line.get_linestyle()) for line in ax.get_lines()]
    assert len(looks) == 2 and len(set(looks)) == 2


@pytest.mark.parametrize("paper", ["fedcad", "fedssd", "fedcsd", "fedgkd"])
def test_papers_figures_are_titled_with_their_caption(paper):
    for figure in paper_figures(paper).values():
        title = figure_title(figure, "smoke")
        assert figure.caption in title and "Scale: smoke" in title and "Fig." in title


# How a panel title names a setting that differs between a figure's panels (others, such as the
# model a dataset brings along, need not be named).
NAMED = {
    "dataset.name": lambda v: DATASET_NAMES.get(v, v),
    "partition.beta": lambda v: f"Dir({v:g})",
    "federation.participation": lambda v: f"C={v:g}",
    "partition.clients": lambda v: f"{v} clients",
    "partition.k": lambda v: f"{v} classes per client",
    "partition.kind": lambda v: {
        "dirichlet": "Dir(",
        "dirichlet_balanced": "balanced Dir(",
        "iid": "IID",
        "classes": "classes per client",
        "writers": "split by writer",
        "domains": "one domain per client",
    }[v],
}


def panel_titles(figure):
    """A declared figure's panel titles at smoke scale, as its kind titles them."""
    cells, table = figure.cells("smoke"), figure.source
    if figure.kind in ("curves", "partitions"):
        return setting_titles(cells, table), cells
    if figure.kind == "sweep":
        return sweep_titles(cells, table), cells
    return {}, cells  # one panel (round_metric), or a paper's own drawing (custom)


DECLARED = [f for paper in paper_names() for f in paper_figures(paper).values()]


@pytest.mark.parametrize("figure", DECLARED, ids=[f"{f.paper}-{f.name}" for f in DECLARED])
def test_every_declared_figures_panels_are_told_apart_by_their_titles(figure):
    titles, cells = panel_titles(figure)
    assert len(set(titles.values())) == len(titles), f"{figure.paper}/{figure.name}: {titles}"
    if figure.kind == "sweep":  # each panel varies one setting along its x axis: its title names it
        panel = sweep_panel(figure.source)
        for key, title in titles.items():
            swept = swept_key([c for c in cells if panel(c) == key], figure.source)
            assert swept in SWEPT and f"{SWEPT[swept]} {key[0]}" in title, (
                f"{figure.paper}/{figure.name}: {title!r} lacks {swept}"
            )
    if figure.kind not in ("curves", "partitions"):
        return
    settings = {c.column.label: flatten(paper_overrides(c, figure.source)) for c in cells}
    for key, name in NAMED.items():
        values = {label: s.get(key) for label, s in settings.items()}
        if len(set(map(repr, values.values()))) > 1:  # the setting varies between panels: each names it
            for label, value in values.items():  # None: the default, which the title may leave unsaid
                assert value is None or name(value) in titles[label], (
                    f"{figure.paper}/{figure.name}: {titles[label]!r} lacks {key}={value}"
                )


def test_titles_of_settings_that_read_the_same_add_the_settings_label():
    table = make_table(
        [
            Column("seed-split A", {"partition": {"beta": 0.5}, "local": {"lr": 0.1}}),
            Column("seed-split B", {"partition": {"beta": 0.5}, "local": {"lr": 0.01}}),
        ]
    )
    titles = setting_titles(expand(table, "paper"), table)
    assert titles["seed-split A"].endswith("; seed-split A") and titles["seed-split B"].endswith("; seed-split B")


def test_heatmap_ticks_at_round_steps(tmp_path):
    """200 classes tick at 0, 20, 40, ... (not at seaborn's 0, 11, 22, ...), 10 at every class."""
    table = make_table(
        [Column("many", {"dataset": {"synthetic": {"num_classes": 200}}}), Column("few", {"partition": {"beta": 0.5}})]
    )
    cells = [c for c in expand(table, "paper") if c.row.label == "FedAvg" and c.seed == 0]
    for cell in cells:
        write_runs([cell], tmp_path / "runs", classes=cell.config.dataset.synthetic.num_classes)
    fig = draw("partitions", cells, tmp_path / "runs", tmp_path / "figure", "Partitions")
    many, few = [ax for ax in fig.axes if ax.get_ylabel() == "class"]
    assert [t.get_text() for t in many.get_yticklabels()] == [str(k) for k in range(0, 200, 20)]
    assert [t.get_text() for t in few.get_yticklabels()] == [str(k) for k in range(10)]
    assert all("\n" not in ax.get_title().split("\n")[0] for ax in (many, few))


def test_curves_that_coincide_are_named_in_their_panel(tmp_path):
    """FedAvg and "my variant" (also FedAvg) are the same runs: the panel says they coincide."""
    table = make_table([Column("δ=0.5", {"partition": {"beta": 0.5}})])
    cells = expand(table, "paper")
    write_runs(cells, tmp_path / "runs")
    fig = draw("curves", cells, tmp_path / "runs", tmp_path / "figure", "Curves")
    notes = [t.get_text().replace("\n", " ") for ax in fig.axes for t in ax.texts]
    assert notes.count("same curve: FedAvg = my variant") == 2  # global and local accuracy


def test_curves_laid_out_in_the_papers_rows_of_panels(tmp_path):
    """FedGKD Fig. 4: a dataset a row, α from 0.1 to 1 from left to right, the global model's
    accuracy alone; a row shorter than the others leaves its last places empty."""
    figure = paper_figures("fedgkd")["fig4"]
    cells = figure.cells("smoke")
    write_runs(cells, tmp_path / "runs")
    options = {"table": figure.source, "accuracies": figure.accuracies, "panels": figure.panels}
    fig = draw("curves", cells, tmp_path / "runs", tmp_path / "figure", "", **options)
    axes = round_axes(fig)
    assert len(axes) == 9 and {ax.get_ylabel() for ax in axes} == {CURVE_METRICS["global_acc"]}
    by_place = sorted(axes, key=lambda ax: (-round(ax.get_position().y0, 3), ax.get_position().x0))
    titles = [ax.get_title().replace("\n", " ") for ax in by_place]
    places = [(data, alpha) for data in ("CIFAR-10 ", "CIFAR-100 ", "Tiny-ImageNet ") for alpha in ("0.1", "0.5", "1")]
    for title, (data, alpha) in zip(titles, places, strict=True):
        assert title.startswith(data) and f"Dir({alpha})" in title, title

    shipped = [c for c in cells if c.column.label.startswith("CIFAR-10 ")]  # a partial figure: CIFAR-10 alone
    fig = draw("curves", shipped, tmp_path / "runs", tmp_path / "partial", "", **options)
    assert len(round_axes(fig)) == 3 and not [ax for ax in fig.axes if not ax.axison]

    table = make_table([Column(label, {"partition": {"beta": b}}) for label, b in (("a", 0.1), ("b", 0.5), ("c", 5.0))])
    ragged = Figure("fedssd", "figx", "Ragged.", kind="curves", table=table, panels=[["c", "a"], ["b"]])
    assert ragged.columns == ["c", "a", "b"]
    write_runs(ragged.cells("paper"), tmp_path / "runs")
    fig = draw("curves", ragged.cells("paper"), tmp_path / "runs", tmp_path / "ragged", "", panels=ragged.panels)
    assert len(round_axes(fig)) == 6 and sum(not ax.axison for ax in fig.axes) == 2  # 2 accuracies x 3 settings


def test_curves_of_test_data_in_domains_draw_the_mean_over_domains(tmp_path):
    """FedCSD Fig. 6 (d): on Office-Caltech-10 the global accuracy a round is the mean of its four
    domains', as Table II's Average is, not the accuracy on their test images pooled."""
    table = make_table([Column("Office", {}), Column("pooled", {"partition": {"beta": 5.0}})], rows=ROWS[:1])
    cells = expand(table, "paper")
    write_runs(cells, tmp_path / "runs")
    for cell in cells[:2]:  # the Office runs: their records hold each domain's accuracy
        run = tmp_path / "runs" / cell.run_id
        records = [{"round": r, "global_acc": 50.0, "domain_acc": {"A": 10.0 * r, "C": 30.0 * r}} for r in (1, 2, 3)]
        run.joinpath("metrics.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))
        metrics = json.loads(run.joinpath("metrics.json").read_text())
        run.joinpath("metrics.json").write_text(json.dumps({**metrics, "domain_acc": records[-1]["domain_acc"]}))
    fig = draw("curves", cells, tmp_path / "runs", tmp_path / "figure", "", accuracies=("global_acc",))
    office, pooled = round_axes(fig)
    assert list(office.get_lines()[0].get_ydata()) == [20.0, 40.0, 60.0]
    assert office.get_ylabel() == DOMAIN_MEAN == "global mean test accuracy over domains (%)"
    assert pooled.get_ylabel() == CURVE_METRICS["global_acc"] and len(pooled.get_lines()[0].get_ydata()) == 3


def test_panels_are_lettered_as_the_papers_text_cites_them(tmp_path):
    """FedCSD Fig. 6 (a)-(d), FedCAD's "Figure 4(b)" (the local accuracy): a letter stays its
    panel's in a figure drawn from part of its settings."""
    for paper, name, letters in (("fedcsd", "fig6", "abcd"), ("fedcad", "fig4", "ab")):
        figure = paper_figures(paper)[name]
        cells = figure.cells("smoke")
        write_runs(cells, tmp_path / "runs")
        options = {"accuracies": figure.accuracies, "panels": figure.panels, "lettered": figure.lettered}
        fig = draw("curves", cells, tmp_path / "runs", tmp_path / name, "", **options)
        assert [ax.get_title()[:4] for ax in round_axes(fig)] == [f"({letter}) " for letter in letters]
    fig6 = paper_figures("fedcsd")["fig6"]
    office = [c for c in fig6.cells("smoke") if c.column.label.startswith("Office")]
    fig = draw(
        "curves",
        office,
        tmp_path / "runs",
        tmp_path / "office",
        "",
        panels=fig6.panels,
        lettered=True,
        accuracies=fig6.accuracies,
    )
    assert [ax.get_title()[:4] for ax in round_axes(fig)] == ["(d) "]


@pytest.mark.parametrize(
    "options, why",
    [
        ({"panels": [["a"], ["a"]]}, "each once"),
        ({"panels": [[]]}, "each once"),
        ({"panels": [["a"]], "columns": ["b"]}, "different settings"),
        ({"panels": [["a"]], "kind": "sweep"}, "curves figure"),
        ({"accuracies": ("train_loss",)}, "accuracies="),
        ({"accuracies": ()}, "accuracies="),
        ({"accuracies": ("global_acc",), "kind": "sweep"}, "goes with a curves figure"),
        ({"lettered": True}, "lettered= goes with"),
    ],
)
def test_a_figures_panels_are_checked_where_it_is_declared(options, why):
    table = make_table([Column("a", {}), Column("b", {"partition": {"beta": 5.0}})])
    with pytest.raises(ValueError, match=why):
        Figure("fedssd", "figx", "X.", **{"kind": "curves", "table": table, **options})


def test_every_declared_figures_panels_are_settings_of_its_table():
    for paper in paper_names():
        for figure in paper_figures(paper).values():
            labels = {c.label for c in figure.source.columns}
            assert set(figure.columns or labels) <= labels, (paper, figure.name)


def test_a_curves_figure_declares_what_its_drawing_draws():
    assert set(CURVE_ACCURACIES) == set(CURVE_METRICS)


def test_fedcad_fig1_heatmaps_fill_their_canvas(tmp_path, monkeypatch):
    """The long title wraps to the heatmaps' width instead of widening the PNG (it was 2,383 px
    for 7 inches of heatmaps)."""
    from PIL import Image

    from papers.fedcad import forgetting

    figure = paper_figures("fedcad")["fig1"]
    monkeypatch.setattr(forgetting, "probe", lambda *args, **kwargs: forgetting.REPORTED)  # no training here
    forgetting.draw_per_class(
        figure.cells("smoke"), tmp_path, tmp_path / "figure", figure_title(figure, "smoke"), table=figure.source
    )
    width, _ = Image.open(tmp_path / "figure.png").size
    assert width <= 7 * 150 * 1.1  # the figure's 7 inches at 150 dpi, give or take the labels


def test_every_declarable_figure_kind_is_drawn():
    """A figure is declared (shared/targets/figure_declarations.py) apart from its drawing; the
    kinds a declaration accepts are the kinds shared/reporting/figures.py draws."""
    assert set(DRAW) == FIGURE_KINDS


def test_fedssd_fig2_pairs_the_model_a_round_starts_from_with_its_local_models(tmp_path):
    """Acc_G^t is the accuracy of w^t, the model round t's clients start from: the record of
    round t-1; Acc_L^t is round t's local models'. (a) every such round, (b) Acc_G - Acc_L per
    setting, over FedAvg's runs of Table II."""
    from papers.fedssd.forgetting import forgetting_points

    history = [
        {"round": 1, "global_acc": 30.0, "local_acc": 12.0},
        {"round": 2, "global_acc": 40.0, "local_acc": 25.0},
        {"round": 3, "local_acc": 33.0},  # an unevaluated round's global model: no point at round 4
        {"round": 4, "global_acc": 50.0, "local_acc": 38.0},
    ]
    assert forgetting_points(history) == [(2, 30.0, 25.0), (3, 40.0, 33.0)]

    figure = paper_figures("fedssd")["fig2"]
    cells = figure.cells("smoke")
    assert {c.row.label for c in cells} == {"FedAvg"} and len({c.column.label for c in cells}) == 5
    for cell in cells:
        out = tmp_path / "runs" / cell.run_id
        out.mkdir(parents=True, exist_ok=True)
        (out / "metrics.json").write_text(json.dumps({"status": "completed", "run_id": cell.run_id}))
        gap = 5.0 * (1 + cell.seed)
        records = [{"round": r, "global_acc": 10.0 * r, "local_acc": 10.0 * (r - 1) - gap} for r in (1, 2, 3)]
        (out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    build_figure(figure, "smoke", tmp_path / "runs", tmp_path / "out")
    points = pd.read_csv(tmp_path / "out" / "figure.csv")
    assert len(points) == 2 * len(cells) and (points.acc_g - points.acc_l).isin([5.0, 10.0]).all()
    assert (tmp_path / "out" / "figure.png").stat().st_size > 0


def test_fedssd_fig3_pairs_each_class_of_the_starting_model_with_client_0s_local_model(tmp_path):
    """Acc_G^t(k) is the per-class accuracy of the model round t starts from (round t-1's
    record), Acc_0^t(k) client 0's local model's in round t, found by its place in `clients`."""
    from papers.fedssd.class_wise import class_wise_points

    history = [
        {"round": 1, "clients": [0, 1], "per_class_acc": [10.0, 20.0], "local_per_class_acc": [[1, 2], [3, 4]]},
        {"round": 2, "clients": [1, 0], "per_class_acc": [30.0, 40.0], "local_per_class_acc": [[5, 6], [7, 8]]},
        {"round": 3, "clients": [1], "per_class_acc": [50.0, 60.0], "local_per_class_acc": [[9, 9]]},
        {"round": 4, "clients": [0], "local_per_class_acc": [[11, 12]]},
    ]
    assert class_wise_points(history, 0) == [(2, 0, 10.0, 7), (2, 1, 20.0, 8), (4, 0, 50.0, 11), (4, 1, 60.0, 12)]

    figure = paper_figures("fedssd")["fig3"]
    cells = figure.cells("smoke")
    assert [c.column.label for c in cells] == ["δ=0.5", "IID"] and {c.config.eval.local for c in cells} == {"per_class"}
    for cell in cells:
        out = tmp_path / "runs" / cell.run_id
        out.mkdir(parents=True)
        (out / "metrics.json").write_text(json.dumps({"status": "completed", "run_id": cell.run_id}))
        (out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in history))
        (out / "partition.csv").write_text("client,0,1\n0,3,1\n1,2,2\n")
    build_figure(figure, "smoke", tmp_path / "runs", tmp_path / "out")
    points = pd.read_csv(tmp_path / "out" / "figure.csv")
    assert len(points) == 8 and list(points.acc_local[:2]) == [7, 8]
    assert (tmp_path / "out" / "figure.png").stat().st_size > 0


def test_fedssd_fig4_trains_client_8_from_the_fedavg_runs_global_model(tmp_path):
    """The global model's confusion matrix agrees with its run's final accuracy; each method's
    local model is trained on client 8 from it; the data panel is client 8's row of the partition."""
    from shared.runs.files import read_summary
    from shared.runs.partition_files import PARTITION_FILE, read_partition
    from shared.training.trainer import run

    figure = paper_figures("fedssd")["fig4"]
    (cell,) = figure.cells("smoke")
    runs = tmp_path / "runs"
    run(cell.config, runs / cell.run_id)
    build_figure(figure, "smoke", runs, tmp_path / "out")
    counts = pd.read_csv(tmp_path / "out" / "figure.csv")
    panels = {
        name: part.pivot(index="true", columns="predicted", values="count")
        for name, part in counts.groupby("panel")
        if name != "data"
    }
    methods = ("FedAvg", "FedSSD", "FedSSD (weight M)")
    assert set(panels) == {"global model", *(f"{m} local model" for m in methods)}
    assert list(counts[counts.panel == "data"]["count"]) == read_partition(runs / cell.run_id / PARTITION_FILE)[8]
    tested = panels["global model"].to_numpy()
    final_acc = read_summary(runs / cell.run_id)["final_acc"]
    assert 100 * np.trace(tested) / tested.sum() == pytest.approx(final_acc, abs=1e-3)
    local = {m: panels[f"{m} local model"].to_numpy() for m in methods}
    assert all(matrix.sum() == tested.sum() for matrix in local.values())
    assert not np.array_equal(local["FedAvg"], tested)
    # each row's own objective: weight M distils far more than the printed M^2 (at most 1e-4)
    assert not np.array_equal(local["FedSSD (weight M)"], local["FedAvg"])


def test_fedcsd_fig1_probes_the_exploratory_round_from_table_1s_fedavg_model(tmp_path, capsys):
    """Table I's FedAvg run (β = 0.5, seed 0; the same id) gives the global model; the probe job
    trains every client from it with each objective, measuring each epoch; the figure draws the
    probe's frame, and without it says which probe is missing."""
    from shared import probe_job
    from shared.runs.files import read_summary
    from shared.targets.probes import probe_code, probe_path
    from shared.targets.table_declarations import get_table
    from shared.training.trainer import run

    figure = paper_figures("fedcsd")["fig1"]
    (cell,) = figure.cells("smoke")
    table1 = [c for c in expand(get_table("fedcsd", "table1"), "smoke") if c.row.label == "FedAvg"]
    assert cell.run_id == next(c.run_id for c in table1 if c.column.label == "CIFAR-100 β=0.5" and c.seed == 0)
    runs = tmp_path / "runs"
    run(cell.config, runs / cell.run_id)
    with pytest.raises(FileNotFoundError, match=f"fedcsd/fig1's probe of run {cell.run_id}"):
        build_figure(figure, "smoke", runs, tmp_path / "out")

    path = probe_path(runs, "fedcsd", "fig1", cell.run_id, probe_code(figure))
    job = ["papers/fedcsd/fig1", "--run", str(runs / cell.run_id), "--out", str(path), "--scale", "smoke"]
    assert probe_job.main(job[:1] + ["--run", str(runs / ("0" * 16)), *job[3:]]) == 2  # no such run: one line
    assert probe_job.main(["papers/fedcsd/fig3", *job[1:]]) == 2 and not path.exists()  # no probe to run
    model = runs / cell.run_id / "model.pt"
    model.rename(tmp_path / "model.pt")  # as a run restored from results/shipped/: refused before any GPU
    assert probe_job.main(job) == 2 and "has no model.pt" in capsys.readouterr().err and not path.exists()
    (tmp_path / "model.pt").rename(model)
    assert probe_job.main([*job, "trainer.client_threads=1"]) == 0  # as the workflow's probe job calls it
    frame = pd.read_csv(path)
    variants = ["FedAvg", "logit distillation", "feature distillation"]
    assert list(frame.variant.unique()) == variants
    assert len(frame) == len(variants) * 2 * 4  # global and local, epochs 0-3 (a reduced scale's three)
    start = frame[frame.epoch == 0]
    assert start.test_acc.to_numpy() == pytest.approx(read_summary(runs / cell.run_id)["final_acc"], abs=1e-3)
    own_data = frame[frame.epoch > 0].groupby("variant").train_acc.count()
    assert own_data.to_dict() == {"FedAvg": 6, "feature distillation": 0, "logit distillation": 0}  # panel (d)'s
    trained = frame[frame.epoch > 0].set_index(["variant", "model", "epoch"]).sort_index()
    assert (trained.logit_distance > 0).all() and (trained.feature_distance > 0).all()
    for other in variants[1:]:  # each its own objective: not FedAvg's local models
        assert not np.allclose(trained.loc[other, "local"].to_numpy(), trained.loc["FedAvg", "local"].to_numpy())

    build_figure(figure, "smoke", runs, tmp_path / "out")
    assert pd.read_csv(tmp_path / "out" / "figure.csv").equals(pd.read_csv(path))
    assert (tmp_path / "out" / "figure.png").stat().st_size > 0


def test_a_probe_measuring_each_epoch_leaves_local_training_as_it_was(tmp_path):
    """train_client's each_epoch: evaluating the model after each epoch (eval mode and back)
    changes nothing of what the client trains."""
    import copy

    import torch

    from papers.fedcsd.exploratory import measured, outputs
    from shared.methods.registry import build_method
    from shared.training.clients import train_client
    from shared.training.probe import final_model
    from shared.training.trainer import run

    (cell,) = paper_figures("fedssd")["fig4"].cells("smoke")  # FedAvg-CNN: a probe in seconds
    cfg = cell.config
    run(cfg, tmp_path / cell.run_id)
    federation, global_model = final_model(cfg, tmp_path / cell.run_id)
    reference = outputs(global_model, federation.test.x, federation, cfg)
    client = federation.clients[0]
    trained, epochs = [], []

    def measure(epoch, model):
        epochs.append(measured(model, reference, federation, cfg, [client]))
        assert model.training  # back in train mode for the next epoch (BatchNorm, dropout)

    for each_epoch in (None, measure):
        method = build_method(cfg, federation)
        method.prepare_round(cfg.federation.rounds, global_model)
        model = copy.deepcopy(global_model)
        train_client(method, client, model, cfg, cfg.federation.rounds, each_epoch=each_epoch)
        trained.append(model.state_dict())
    assert len(epochs) == cfg.local.epochs
    assert all(torch.equal(trained[0][k], trained[1][k]) for k in trained[0])


def test_feature_distillation_adds_mu_times_the_features_mse_to_the_cross_entropy():
    """Eq. 5 beside the cross-entropy: the teacher is the round's global model, frozen."""
    import torch
    import torch.nn.functional as F

    from papers.fedcsd.exploratory import FeatureDistillation
    from shared.models.nets import Net

    torch.manual_seed(0)
    global_model = Net(torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, 8)), 8, 3)
    method = FeatureDistillation(FeatureDistillation.Params(mu=0.5), cfg=None, federation=None)
    method.prepare_round(1, global_model)
    local = Net(torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(12, 8)), 8, 3)
    x, y = torch.randn(5, 3, 2, 2), torch.tensor([0, 1, 2, 0, 1])
    expected = F.cross_entropy(local(x), y) + 0.5 * F.mse_loss(local.features(x), global_model.features(x))
    assert method.local_loss(local, x, y, client=None).item() == pytest.approx(expected.item())
    assert not any(p.requires_grad for p in method.teacher.parameters())
