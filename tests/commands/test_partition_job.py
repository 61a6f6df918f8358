"""The workflow's partition job (shared/partition_job.py): a run's partition without training
it, byte for byte the partition.csv the run itself writes; an unknown run is one line."""

import dataclasses

from shared import partition_job
from shared.runs.partition_files import PARTITION_FILE
from shared.targets.figure_declarations import get_figure
from shared.training.trainer import run


def test_a_partition_job_writes_the_partition_its_run_trains_on(tmp_path):
    """FedGKD's Fig. 3 at smoke scale: each panel's partition (α = 1, 0.5, 0.1) as its run,
    trained for one round here, saves it."""
    for cell in get_figure("fedgkd", "fig3").cells("smoke"):
        out = tmp_path / "partitions" / f"{cell.run_id}.csv"
        out.parent.mkdir(exist_ok=True)
        assert (
            partition_job.main(["--scale", "smoke", "--run", cell.run_id, "--out", str(out), "trainer.device=cpu"]) == 0
        )
        cfg = cell.config
        one_round = dataclasses.replace(cfg, federation=dataclasses.replace(cfg.federation, rounds=1))
        run(one_round, tmp_path / "runs" / cell.run_id)
        assert out.read_bytes() == (tmp_path / "runs" / cell.run_id / PARTITION_FILE).read_bytes()


def test_a_run_of_no_target_is_one_line_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "partition.csv"
    assert partition_job.main(["--scale", "smoke", "--run", "0" * 16, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "belong to no table, figure or search" in err and not out.exists()


def test_a_runs_own_partition_is_taken_without_the_data_and_a_damaged_one_computed(tmp_path):
    """With the run's partition.csv in the runs folder (trained, restored or unpacked) the job
    writes that file and loads no data: FedSSD's Fig. 6 at paper scale, its CIFAR-10 panel, with
    an empty data root. A damaged one is computed anew: FedGKD's Fig. 3 at smoke scale."""
    from shared.runs.partition_files import write_partition

    for figure, scale, damaged in (("fedssd", "paper", False), ("fedgkd", "smoke", True)):
        cell = get_figure(figure, "fig6" if figure == "fedssd" else "fig3").cells(scale)[0]
        own, out = tmp_path / scale / "runs" / cell.run_id / PARTITION_FILE, tmp_path / scale / "p.csv"
        own.parent.mkdir(parents=True)
        write_partition(own, [[5, 0], [1, 4]], ["a", "b"])
        if damaged:
            own.write_text("client,a,b\n0,5,x\n")
        job = ["--scale", scale, "--run", cell.run_id, "--runs", str(own.parent.parent), "--out", str(out)]
        assert partition_job.main([*job, f"data_root={tmp_path / 'empty'}"]) == 0
        assert (out.read_bytes() == own.read_bytes()) is not damaged
        assert damaged is (len(out.read_text().splitlines()) == 21)  # FedGKD's 20 clients, under the header


def test_a_figure_of_partitions_uses_runs_it_draws_and_trains_none():
    """FedSSD's Fig. 6: no run to train (shared.plan, the campaign, archives), no user of the
    runs it draws when the workflow groups runs (so they group as their tables' runs do), and
    the runs a shipped Fig. 6 is built from are its panels' (import checks they can be read)."""
    from shared.campaign.ship import drawn_runs
    from shared.config.schema import run_id
    from shared.targets.copies import Copy, campaign_runs, on_copy
    from shared.targets.expansion_cache import expand_all

    copy = Copy("cifar10", "dfaab4e52462da5f2baf35d333e6aa72ada7483fb4698fce91e39ac959e4b228", "JPEG")
    assert campaign_runs(["papers/fedssd/fig6"], "paper", copy)[0] == {}
    panels = [c for c in get_figure("fedssd", "fig6").cells("paper") if c.config.dataset.name == "cifar10"]
    assert drawn_runs("papers/fedssd/fig6", "paper", copy) == {run_id(on_copy(c.config, copy)) for c in panels}
    expansion = expand_all("smoke", {})
    drawn = expansion.target_runs("fedssd", "figure", "fig6")
    assert drawn and not any("fedssd/fig6" in expansion.used_by()[rid] for rid in drawn)
