"""What of the CUDA path can be shown on a CPU: the numerics switches and their record, sums by
class without atomics, the decisions about several runs and compiled steps, per-client state on
the host and in files of its own, the offline install's pieces, and the GPU machine's first
command rehearsed at a tiny budget (tests/training/test_gpu.py checks the rest on CUDA)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from benchmarks import first_run
from shared.config.schema import RUNTIME_KEYS, run_id
from shared.methods.class_sums import count_by_class, sum_by_class
from shared.models.nets import AdaptiveAvgPool
from shared.runs.tensor_files import ClientStates
from shared.targets.configs import load_config

REPO = Path(__file__).resolve().parents[2]


# --- determinism and TF32 ---------------------------------------------------------------------


def test_deterministic_is_a_runtime_switch_on_by_default_that_keeps_run_ids():
    default, off = load_config(None, []), load_config(None, ["trainer.deterministic=false"])
    assert default.trainer.deterministic is True and "trainer.deterministic" in RUNTIME_KEYS
    assert run_id(default) == run_id(off)


def test_a_run_records_its_numerics_and_deterministic_mode_changes_no_cpu_result(tiny_cfg, tmp_path):
    from shared.training.trainer import run

    on = run(tiny_cfg("federation.rounds=1"), tmp_path / "on")
    assert on["environment"]["numerics"] == {
        "deterministic_algorithms": True,
        "cudnn_deterministic": True,
        "cudnn_benchmark": False,
        "tf32_matmul": False,
        "tf32_cudnn": False,
        "cublas_workspace_config": os.environ["CUBLAS_WORKSPACE_CONFIG"],
    }
    off = run(tiny_cfg("federation.rounds=1", "trainer.deterministic=false"), tmp_path / "off")
    assert off["environment"]["numerics"]["deterministic_algorithms"] is False
    assert on["global_acc"] == off["global_acc"] and on["run_id"] == off["run_id"]
    assert torch.equal(
        torch.load(tmp_path / "on" / "model.pt")["classifier.weight"],
        torch.load(tmp_path / "off" / "model.pt")["classifier.weight"],
    )


def test_cublas_gets_a_fixed_workspace_before_any_run_touches_cuda():
    code = "import shared.training.trainer, os; print(os.environ['CUBLAS_WORKSPACE_CONFIG'])"
    env = {k: v for k, v in os.environ.items() if k != "CUBLAS_WORKSPACE_CONFIG"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=env)
    assert proc.stdout.strip() == ":4096:8", proc.stderr


def test_a_rounds_laps_wait_for_the_cuda_device_so_each_phase_holds_its_kernels(monkeypatch):
    """Aggregation queues kernels and waits for none: a lap that did not wait would bill them to
    the phase after it. On the CPU a lap waits for nothing."""
    from shared.training.round_timing import Laps

    waited = []
    monkeypatch.setattr(torch.cuda, "synchronize", waited.append)
    Laps(torch.device("cpu")).lap("aggregation")
    assert waited == []
    laps = Laps(torch.device("cuda", 1))
    laps.lap("aggregation")
    laps.lap("evaluation")
    assert waited == [torch.device("cuda", 1)] * 2 and laps.seconds["aggregation"] >= 0


def test_sums_by_class_equal_index_add_in_float64():
    generator = torch.Generator().manual_seed(0)
    labels = torch.randint(0, 7, (300,), generator=generator)
    values = torch.randn(300, 5, generator=generator, dtype=torch.float64)
    expected = torch.zeros(7, 5, dtype=torch.float64).index_add_(0, labels, values)
    assert torch.allclose(sum_by_class(values, labels, 7), expected, rtol=0, atol=1e-12)
    assert torch.allclose(sum_by_class(values[:, 0], labels, 7), expected[:, 0], rtol=0, atol=1e-12)
    assert count_by_class(labels, 7).tolist() == torch.bincount(labels, minlength=7).float().tolist()
    assert sum_by_class(values, labels, 9)[7:].abs().sum() == 0  # absent classes sum to zero


@pytest.mark.parametrize("side", [6, 7, 15, 13])
def test_adaptive_pooling_by_products_equals_torchs_forward_and_backward(side):
    x = torch.randn(2, 3, side, side + 2, dtype=torch.float64, requires_grad=True)
    ours, theirs = AdaptiveAvgPool((6, 6))(x), F.adaptive_avg_pool2d(x, (6, 6))
    assert torch.allclose(ours, theirs, rtol=0, atol=1e-12)
    (grad_ours,) = torch.autograd.grad(ours.square().sum(), x)
    (grad_theirs,) = torch.autograd.grad(theirs.square().sum(), x)
    assert torch.allclose(grad_ours, grad_theirs, rtol=0, atol=1e-12)


# --- compiled steps ----------------------------------------------------


def test_only_a_full_batch_takes_the_compiled_model():
    from shared.training.clients import step_model

    model, compiled = torch.nn.Linear(2, 2), torch.nn.Identity()
    assert step_model(model, compiled, 16, 16) is compiled
    assert step_model(model, compiled, 5, 16) is model  # a client's last batch: another shape
    assert step_model(model, None, 16, 16) is model


# --- per-client state --------------------------------------------------------------------------


def test_client_state_lives_on_the_host_and_is_a_copy():
    states = ClientStates("c")
    weights = [torch.ones(3)]
    states[4] = weights
    weights[0].add_(1)  # later training of the same tensors leaves the stored state as it was
    assert states[4][0].tolist() == [1.0, 1.0, 1.0] and states[4][0].device.type == "cpu"
    assert 4 in states and list(states) == [4] and states.on(4, torch.device("cpu"))[0].tolist() == [1.0] * 3


def test_a_checkpoint_rewrites_only_the_clients_whose_state_changed(tmp_path):
    from shared.runs.tensor_files import named_client_states, persist, prune_client_states, restore

    states = ClientStates("u")
    states[0], states[1] = [torch.zeros(2)], {"w": torch.ones(2)}
    first = persist({"u": states, "step": 1}, tmp_path, round=0)
    prune_client_states(tmp_path, named_client_states(first))
    written = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "client_state").iterdir()}
    assert sorted(written) == ["u-0-r0.pt", "u-1-r0.pt"] and first["step"] == 1
    states[1] = {"w": torch.full((2,), 5.0)}  # only client 1 trained in round 1
    second = persist({"u": states}, tmp_path, round=1)
    assert sorted(p.name for p in (tmp_path / "client_state").iterdir()) == ["u-0-r0.pt", "u-1-r0.pt", "u-1-r1.pt"]
    prune_client_states(tmp_path, named_client_states(second))  # after the checkpoint that names the new file
    now = {p.name: p.stat().st_mtime_ns for p in (tmp_path / "client_state").iterdir()}
    assert sorted(now) == ["u-0-r0.pt", "u-1-r1.pt"] and now["u-0-r0.pt"] == written["u-0-r0.pt"]
    back = restore(second, tmp_path)["u"]
    assert back[0][0].tolist() == [0.0, 0.0] and back[1]["w"].tolist() == [5.0, 5.0]
    assert persist({"u": back}, tmp_path, round=2) == second  # nothing changed: nothing written


PER_CLIENT = {"moon": ["previous"], "fedcurv": ["u", "v"], "scaffold": ["c_client"]}


@pytest.mark.parametrize("method", sorted(PER_CLIENT))
def test_per_client_state_is_checkpointed_in_its_own_files_and_a_finished_run_keeps_none(
    method, tiny_cfg, tmp_path, kill_in_round
):
    from shared.runs.files import CLIENT_STATE_MANIFEST
    from shared.training.trainer import run

    extra = ["model.projection_dim=8"] if method == "moon" else []
    cfg = tiny_cfg(f"method={method}", "federation.rounds=3", "federation.participation=0.5", *extra)
    kill_in_round(cfg, tmp_path / "killed", 2)
    checkpoint = torch.load(tmp_path / "killed" / "checkpoint.pt", weights_only=True)
    named = {file for key in PER_CLIENT[method] for file in checkpoint["method"][key][CLIENT_STATE_MANIFEST].values()}
    assert named and named == {p.name for p in (tmp_path / "killed" / "client_state").iterdir()}  # nothing else kept
    resumed = run(cfg, tmp_path / "killed")
    straight = run(cfg, tmp_path / "straight")
    assert resumed["global_acc"] == straight["global_acc"] and resumed["global_loss"] == straight["global_loss"]
    assert torch.equal(
        torch.load(tmp_path / "killed" / "model.pt")["classifier.weight"],
        torch.load(tmp_path / "straight" / "model.pt")["classifier.weight"],
    )
    assert not (tmp_path / "killed" / "client_state").exists() and not (tmp_path / "straight" / "client_state").exists()


def test_the_speed_benchmark_keeps_each_finished_variant_when_a_later_one_dies(tmp_path, monkeypatch):
    from benchmarks import speed

    real, calls = speed.run_ours, []

    def dies_on_the_second_variant(cfg, rounds):
        calls.append(cfg)
        if len(calls) == 2:
            raise KeyboardInterrupt("the job's time limit")
        return real(cfg, rounds)

    monkeypatch.setattr(speed, "run_ours", dies_on_the_second_variant)
    out = tmp_path / "speed.json"
    tiny = [
        "dataset=synthetic",
        "dataset.synthetic.train_per_class=20",
        "dataset.synthetic.test_per_class=5",
        "dataset.synthetic.image_size=16",
        "partition.clients=2",
        "local.epochs=1",
        "aux.per_class=2",
        "trainer.device=cpu",
        f"data_root={tmp_path}",
    ]
    with pytest.raises(KeyboardInterrupt):
        speed.main(["cpu", *tiny, "--variants", "sequential", "batched", "--out", str(out)])
    report = json.loads(out.read_text())
    assert list(report["variants"]) == ["sequential"] and report["skipped"] == ["batched"]
    assert report["rounds"] == 3  # the cpu config's 3 rounds, below the default of 5
    assert speed.main(["cpu", *tiny, "--minutes", "0", "--out", str(out)]) == 0  # a budget spent at once
    assert json.loads(out.read_text())["variants"] == {}


# --- the install and the GPU machine's first command ------------------------------------------------


def setup_choice(extra_path: str = "", **env) -> str:
    environment = {**{k: v for k, v in os.environ.items() if k != "TORCH_INDEX_URL"}, **env}
    environment["PATH"] = f"{extra_path}:{environment['PATH']}" if extra_path else environment["PATH"]
    proc = subprocess.run(
        ["bash", "scripts/setup.sh", "--dry-run"], capture_output=True, text=True, cwd=REPO, env=environment
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.skipif(Path("/proc/driver/nvidia").exists(), reason="this machine has an NVIDIA driver")
def test_setup_picks_the_cpu_build_without_a_driver_and_the_cuda_build_with_one(tmp_path):
    assert "CPU build" in setup_choice() and "whl/cpu" in setup_choice()
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    assert "NVIDIA driver" in setup_choice(str(tmp_path)) and "CUDA" in setup_choice(str(tmp_path))
    assert "cu126 (TORCH_INDEX_URL)" in setup_choice(TORCH_INDEX_URL="https://download.pytorch.org/whl/cu126")


def test_snakemake_is_an_extra_and_nothing_run_or_tested_needs_tqdm():
    import tomllib

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert not any(d.startswith(("snakemake", "tqdm")) for d in project["dependencies"])
    assert any(d.startswith("snakemake") for d in project["optional-dependencies"]["workflow"])
    assert "snakemake" in (REPO / "requirements-workflow.txt").read_text()


def test_the_first_run_rehearses_on_a_cpu_into_one_folder(tmp_path):
    out = tmp_path / "first"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.first_run", "--out", str(out), "--minutes", "2"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert {p.name for p in out.iterdir()} == {
        "environment.json",
        "gpu-tests.xml",
        "speed.json",
        "trace.json",
        "profile.txt",
        "first-run.log",
        "summary.md",
        "summary.json",
    }  # 8
    summary = json.loads((out / "summary.json").read_text())
    assert [s["step"] for s in summary] == ["environment", "gpu tests", "speed", "profile"]
    assert all(s["ok"] for s in summary)
    assert "0 failed" in summary[1]["detail"] and "skipped" in summary[1]["detail"]
    speed = json.loads((out / "speed.json").read_text())
    assert speed["variants"] and all(v["seconds_per_round"] > 0 for v in speed["variants"].values())
    assert json.loads((out / "trace.json").read_text())["traceEvents"]
    assert f"{first_run.PROFILED_STEPS} group steps of " in summary[3]["detail"]
    assert "| profile | ok |" in proc.stdout


def test_gpu_tests_collect_and_runs_go_without_snakemake_tqdm_or_transformers(tmp_path):
    """The GPU machines' Python: this one's packages less those (python -S, its site-packages
    linked in one by one), the checkout on PYTHONPATH."""
    import site

    bare = tmp_path / "site-packages"
    bare.mkdir()
    absent = ("snakemake", "tqdm", "transformers")
    for entry in Path(site.getsitepackages()[0]).iterdir():
        if not entry.name.lower().startswith(absent):
            (bare / entry.name).symlink_to(entry)
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{bare}"}
    code = (
        "import importlib.util, sys, pytest; "
        "assert not any(importlib.util.find_spec(m) for m in ('snakemake', 'tqdm', 'transformers')); "
        "from shared.targets.configs import load_config; "
        "print(load_config(None, ['eval.target_acc=[60, 70]']).eval.target_acc); "
        "sys.exit(pytest.main(['-m', 'gpu', '--collect-only', '-q', '-p', 'no:cacheprovider', 'tests']))"
    )
    proc = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, cwd=REPO, env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = proc.stdout.strip().splitlines()
    assert lines[0] == "[60.0, 70.0]"
    assert int(lines[-1].split("/")[0]) >= 50  # gpu tests collected
