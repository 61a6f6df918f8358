"""benchmarks/speed.py and its reference loop, on a federation small enough for seconds."""

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from benchmarks.reference import NIIDBenchTrainTransform
from benchmarks.speed import main

TINY_FEDSSD = [
    "dataset=synthetic",
    "dataset.synthetic.train_per_class=30",
    "dataset.synthetic.test_per_class=10",
    "dataset.synthetic.image_size=16",
    "partition.clients=4",
    "local.epochs=1",
    "aux.per_class=5",
    "trainer.device=cpu",
]


def test_reference_transform_crops_the_reflect_padded_image_and_flips_it():
    image = np.arange(8 * 8 * 3, dtype=np.uint8).reshape(8, 8, 3)
    transform = NIIDBenchTrainTransform(mean=(0.0, 0.0, 0.0), std=(1 / 255,) * 3)
    padded = F.pad(torch.from_numpy(image).permute(2, 0, 1).float()[None], (4, 4, 4, 4), mode="reflect")[0]
    crops = [padded[:, i : i + 8, j : j + 8] for i in range(9) for j in range(9)]
    crops += [c.flip(-1) for c in crops]
    torch.manual_seed(0)
    outputs = [transform(image) for _ in range(64)]
    assert all(any(torch.allclose(o, c) for c in crops) for o in outputs)
    assert len({tuple(o.flatten()[:16].tolist()) for o in outputs}) > 8  # crops and flips vary


def test_speed_benchmark_runs_every_small_model_variant_and_writes_json(tmp_path):
    out = tmp_path / "speed.json"
    assert main(["cpu", *TINY_FEDSSD, f"data_root={tmp_path}", "--rounds", "1", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert set(report["variants"]) == {
        "reference",
        "sequential",
        "bf16",
        "batched",
        "batched-bf16",
        "threads",
        "threads-bf16",
        "threads-nchw",  # the CPU campaign's: client threads in the default layout,
        "channels-last",  # and the two speed-ups a run id holds
        "no-local-eval",
    }
    assert report["variants"]["threads-nchw"]["final_acc"] == pytest.approx(
        report["variants"]["sequential"]["final_acc"], abs=2
    )  # threads of one core each train the same samples as one after another
    for variant in report["variants"].values():
        assert variant["rounds"] == 1 and variant["samples_per_s"] > 0 and variant["accuracy_comparable"]
    # the same partition, initial weights and samples: fp32 runs agree to float rounding (a test
    # image or two of 100 may flip)
    assert report["variants"]["batched"]["final_acc"] == pytest.approx(
        report["variants"]["sequential"]["final_acc"], abs=2
    )
    assert report["variants"]["reference"]["speedup_vs_reference"] == 1.0
    assert "python -m benchmarks.speed cpu" in report["command"]


def test_repeats_alternate_the_variants_and_report_each_ones_median(tmp_path):
    out = tmp_path / "speed.json"
    assert (
        main(
            [
                "cpu",
                *TINY_FEDSSD,
                f"data_root={tmp_path}",
                "--rounds",
                "1",
                "--variants",
                "reference",
                "sequential",
                "--repeats",
                "3",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    report = json.loads(out.read_text())["variants"]
    for variant in report.values():
        times = variant["seconds_per_round_repeats"]
        assert len(times) == 3 and variant["seconds_per_round"] == sorted(times)[1]
    ratios = report["sequential"]["speedup_per_repeat"]
    assert (
        len(ratios) == 3
        and ratios[0]
        == report["reference"]["seconds_per_round_repeats"][0] / report["sequential"]["seconds_per_round_repeats"][0]
    )
