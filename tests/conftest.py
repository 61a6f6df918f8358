import pytest
import torch

from shared.targets.configs import load_config

# A federation small enough to train in about a second on one CPU core.
TINY = [
    "dataset=synthetic",
    "dataset.synthetic.train_per_class=60",
    "dataset.synthetic.test_per_class=20",
    "partition.clients=4",
    "federation.rounds=2",
    "local.epochs=1",
    "local.batch_size=32",
    "local.lr=0.03",
    "trainer.device=cpu",
    "trainer.progress=false",
]


@pytest.fixture
def tiny_cfg(tmp_path):
    """Build a tiny synthetic config; extra `key=value` overrides win."""

    def make(*overrides: str):
        return load_config(None, [*TINY, f"data_root={tmp_path / 'data'}", *overrides])

    return make


@pytest.fixture
def kill_in_round(monkeypatch):
    """kill_in_round(cfg, out, r): run `cfg` into `out`, killed as round r (from 0) starts
    training its clients, so that its checkpoint holds rounds 1..r."""
    from benchmarks.resume_matrix import killed_at_round
    from shared.training import trainer

    def kill(cfg, out, round):
        with killed_at_round(round), pytest.raises(KeyboardInterrupt):
            trainer.run(cfg, out)

    return kill


@pytest.fixture
def float64():
    """float64 as torch's default dtype for the test: weights then agree to round-off only."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)


@pytest.fixture
def no_tf32():
    """fp32 convolutions and matrix products in fp32 (cuDNN allows TF32 by default), as a run sets them."""
    previous = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = previous
