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
