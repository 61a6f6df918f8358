"""python -m shared.plan: a total, and GPU-hours calibrated from this machine's measurements
(finished runs, run benchmarks, speed benchmark results) where they exist."""

import json

import pytest
import yaml

from shared import plan
from shared.reporting import shared_runs
from shared.targets import cost
from shared.targets.figure_declarations import get_figure
from shared.targets.table_declarations import Metric, expand, get_table


def test_prints_a_total_and_says_the_throughput_is_assumed(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no measurements here
    plan.main(["fedssd", "table2"])
    out = capsys.readouterr().out
    lines = {line.split()[0]: line.split() for line in out.splitlines() if line.strip()}
    assert lines["total"][1] == lines["table2"][1] and lines["total"][2] == lines["table2"][2]
    assert "fedavg_cnn" in out and "assumed" in out


def write_run(runs, rid, cfg, seconds, device="cuda:0"):
    run = runs / rid
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(yaml.safe_dump(cfg))
    (run / "metrics.json").write_text(
        json.dumps(
            {
                "status": "completed",
                "device": device,
                "wall_time_s": seconds,
                "rounds_completed": cfg["federation"]["rounds"],
                "client_samples": [5000] * 10,
                "eval_rounds": list(range(1, cfg["federation"]["rounds"] + 1)),
            }
        )
    )


def test_finished_runs_calibrate_the_estimate(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = {
        "model": {"name": "fedavg_cnn"},
        "dataset": {"name": "cifar10"},
        "federation": {"rounds": 10},
        "local": {"epochs": 1},
        "eval": {"local": False},
    }
    # 10 rounds x 50,000 samples + 10 tests of 10,000 / 3 in 100 s
    write_run(tmp_path / "results" / "runs", "a" * 16, cfg, 100.0)
    write_run(tmp_path / "results" / "runs", "b" * 16, cfg, 50.0, device="cpu")  # another device: ignored
    # a reduced scale's synthetic stand-in times steps, not samples: ignored
    write_run(tmp_path / "results" / "runs", "c" * 16, {**cfg, "dataset": {"name": "synthetic"}}, 5000.0)
    measured = cost.measured_throughput("cuda")
    assert abs(measured["fedavg_cnn"]["samples_per_s"] - (500_000 + 100_000 / 3) / 100) < 1e-6
    assert "finished runs" in measured["fedavg_cnn"]["source"]

    plan.main(["fedssd", "table2"])
    calibrated = capsys.readouterr().out
    assert "measured: 1 finished runs" in calibrated
    cells = expand(get_table("fedssd", "table2"), "paper")
    runs = {c.run_id: c.config for c in cells}
    speed = (500_000 + 100_000 / 3) / 100
    expected = sum(cost.gpu_hours(c, {"fedavg_cnn": speed}) for c in runs.values())
    total = next(line for line in calibrated.splitlines() if line.startswith("total")).split()
    assert abs(float(total[2]) - expected) < 0.06
    plan.main(["fedssd", "table2", "--assumed"])
    assert "assumed" in capsys.readouterr().out


def test_a_synthetic_stand_in_counts_its_own_samples():
    """The smoke scale's stand-in for CIFAR-10 is 10 classes of a few images each: a plan at that
    scale counts those, not CIFAR's 50,000."""
    cell = next(c for c in expand(get_table("fedssd", "table2"), "smoke") if c.seed == 0)
    synthetic = cell.config.dataset.synthetic
    trained, tested = cost.samples(cell.config)
    federation, local = cell.config.federation, cell.config.local
    assert trained == federation.rounds * local.epochs * synthetic.num_classes * synthetic.train_per_class
    assert tested % (synthetic.num_classes * synthetic.test_per_class) == 0 and trained < 50_000


def test_a_speed_benchmark_result_calibrates_where_no_runs_exist(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    (tmp_path / "benchmarks" / "results" / "fedgkd-cuda.json").write_text(
        json.dumps(
            {
                "config": "fedgkd",
                "model": "resnet8",
                "device": "cuda",
                "variants": {
                    "reference": {"samples_per_s": 1000.0},
                    "batched": {"samples_per_s": 90_000.0},
                    "sequential": {"samples_per_s": 30_000.0},
                },
            }
        )
    )
    measured = cost.measured_throughput("cuda")
    assert measured["resnet8"]["samples_per_s"] == 90_000.0 and "speed benchmark" in measured["resnet8"]["source"]
    assert cost.measured_throughput("cpu") == {}


def test_shared_lists_one_experiment_with_every_papers_number_and_ours(capsys, tmp_path):
    """FedAvg on CIFAR-10 under Dir(0.5): one experiment for FedCAD's and FedSSD's tables."""
    fedavg = next(
        c
        for c in expand(get_table("fedssd", "table2"), "smoke")
        if c.row.label == "FedAvg" and c.column.label == "δ=0.5" and c.seed == 0
    )
    (tmp_path / fedavg.run_id).mkdir()
    (tmp_path / fedavg.run_id / "metrics.json").write_text(
        json.dumps(
            {"status": "completed", "final_acc": 42.5, "eval_rounds": [1, 2, 3], "global_acc": [20.0, 30.0, 42.5]}
        )
    )
    df = shared_runs.shared_runs("smoke", tmp_path)
    rows = df[df.experiment == shared_runs.experiment_id(fedavg)].set_index(["paper", "table", "column"])
    assert rows.loc[("fedssd", "table2", "δ=0.5"), "paper_number"] == "70.49 ± 0.23"
    assert rows.loc[("fedcad", "table2", "δ=0.5"), "paper_number"] == "71.29"
    assert rows.loc[("fedcad", "table4", "E=10"), "paper_number"] == "70.81 §"  # contradicted by Tables 1 and 2
    assert rows.loc[("fedssd", "table2", "δ=0.5"), "ours"] == "42.50 ± 0.00 (1 seed)"
    # the seeds left out of our mean are named with why
    assert shared_runs.ours([fedavg], Metric("rounds_to", target=30), tmp_path) == "2.00 ± 0.00 (1 seed)"
    assert shared_runs.ours([fedavg], Metric("rounds_to", target=65), tmp_path) == "- (1 never reached)"
    assert df.groupby("experiment").paper.nunique().min() >= 2  # only experiments of several papers
    shared_runs.write_shared_runs("smoke", tmp_path, tmp_path / "out")
    assert "One experiment, several papers (scale: smoke)" in (tmp_path / "out" / "shared.html").read_text()
    plan.main(["--shared", "--scale", "smoke"])
    assert "## fedavg on synthetic (stand-in for cifar10)" in capsys.readouterr().out


def test_shared_with_out_builds_the_listing_once(tmp_path, monkeypatch, capsys):
    built = []
    real = plan.shared_runs
    monkeypatch.setattr(plan, "shared_runs", lambda *args: built.append(args) or real(*args))
    plan.main(["--shared", "--scale", "smoke", "--out", str(tmp_path)])
    assert len(built) == 1
    assert capsys.readouterr().out == (tmp_path / "shared.md").read_text() + "\n"  # what it printed, written


def test_a_target_named_as_snakemake_takes_it_prints_its_runs_and_gpu_hours(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no measurements here
    plan.main(["fedssd", "table2"])
    old_form = capsys.readouterr().out
    for target in ("papers/fedssd/table2", "papers/fedssd/table2/"):
        plan.main([target])
        out = capsys.readouterr().out
        assert out == old_form, target
    runs = len({c.run_id for c in expand(get_table("fedssd", "table2"), "paper")})
    table2 = next(line for line in old_form.splitlines() if line.startswith("table2")).split()
    assert int(table2[1]) == runs and float(table2[2]) > 0 and "GPU-hours" in old_form


def test_several_targets_count_a_run_they_share_once(capsys, tmp_path, monkeypatch):
    """As Snakemake takes several targets: FedGKD's Table 6 reads Table 3's runs, and Fig. 3's
    lower half shares some with it; of two papers, each target is named with its paper."""
    monkeypatch.chdir(tmp_path)
    plan.main(["papers/fedgkd/table6", "papers/fedgkd/fig3_bottom"])
    lines = {line.split()[0]: line.split()[1:] for line in capsys.readouterr().out.splitlines() if line[:1].isalnum()}
    table6 = {c.run_id for c in expand(get_table("fedgkd", "table6"), "paper")}
    fig = {c.run_id for c in get_figure("fedgkd", "fig3_bottom").cells("paper")}
    assert int(lines["table6"][0]) == len(table6) and int(lines["fig3_bottom"][0]) == len(fig - table6)
    assert int(lines["total"][0]) == len(table6 | fig) and len(fig & table6) > 0
    plan.main(["papers/fedgkd/table6", "papers/fedcsd/table2"])
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines() if line[:1].isalnum()]
    assert listed[:3] == ["target", "fedgkd/table6", "fedcsd/table2"] and "tables" in listed


@pytest.mark.parametrize(
    ("words", "alone"), [(["fedgkd", "papers/fedgkd/table6"], ["fedgkd"]), (["fedgkd"] * 2, ["fedgkd"])]
)
def test_a_target_named_twice_is_planned_once(words, alone, capsys, tmp_path, monkeypatch):
    """A paper and one of its tables, or a target repeated: as Snakemake builds each once."""
    monkeypatch.chdir(tmp_path)
    plan.main(alone)
    once = capsys.readouterr().out
    plan.main(words)
    assert capsys.readouterr().out == once
    assert plan.planned_targets(["fedssd", "fedssd_searches"])[-1] == ("fedssd", "search_fedssd")


def test_a_paper_alone_lists_every_target_of_it_in_either_form(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    plan.main(["fedssd"])
    old_form = capsys.readouterr().out
    plan.main(["papers/fedssd/"])
    assert capsys.readouterr().out == old_form
    listed = [line.split()[0] for line in old_form.splitlines()[1:] if line.strip() and not line.startswith(" ")]
    assert {"table1", "table2", "fig6", "search_fedprox", "total"} <= set(listed)


@pytest.mark.parametrize(
    "words, valid",
    [
        (["papers/fedssd/table9"], "valid for fedssd: table1, table2, table3, fig2, fig3, fig4, fig6"),
        (["fedssd", "table9"], "valid for fedssd: table1, table2, table3, fig2, fig3, fig4, fig6"),
        (["papers/fedfoo/table2"], "valid papers: fedcad, fedcsd, fedgkd, fedssd"),
    ],
)
def test_a_name_that_is_no_target_is_one_line_naming_the_valid_ones(words, valid, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit:
        plan.main(words)
    assert exit.value.code == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert captured.out == "" and len(err) == 1 and "Traceback" not in captured.err, captured
    assert err[0].startswith(f"error: {' '.join(words)} is not a target") and valid in err[0], err
    assert not any(tmp_path.iterdir())  # nothing written


def test_a_paper_prints_the_subtotals_of_its_tables_figures_and_searches(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no measurements here
    plan.main(["fedcad"])
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if line[:1].isalnum()]
    listed = {row[0]: (int(row[1]), float(row[2])) for row in rows if len(row) == 3 and row[1].isdigit()}
    for subtotal, start in (("tables", "table"), ("figures", "fig"), ("searches", "search_")):
        parts = [value for name, value in listed.items() if name.startswith(start) and name != subtotal]
        assert listed[subtotal][0] == sum(runs for runs, _ in parts)
        assert abs(listed[subtotal][1] - sum(hours for _, hours in parts)) < 0.05 * len(parts)
    assert listed["total"][0] == sum(listed[name][0] for name in ("tables", "figures", "searches"))
