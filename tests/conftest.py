import pytest

from shared.config_loading import load_config

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
