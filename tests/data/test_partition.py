import numpy as np
import pytest

from shared.config.schema import ConfigError, PartitionConfig, RunConfig
from shared.data.partition import count_matrix, partition
from shared.runs.directory import RunDirectory
from shared.runs.partition_files import PARTITION_FILE, read_partition

LABELS = np.repeat(np.arange(10), 100)  # 1,000 samples, 10 balanced classes
rng = np.random.default_rng(0)
UNBALANCED = rng.integers(0, 10, 1500)


def check_disjoint_cover(parts, n):
    joined = np.concatenate(parts)
    assert len(joined) == n
    assert len(np.unique(joined)) == n


def test_iid_sizes_and_cover():
    parts = partition(LABELS, 10, PartitionConfig(kind="iid", clients=7), seed=1)
    check_disjoint_cover(parts, len(LABELS))
    sizes = [len(p) for p in parts]
    assert max(sizes) - min(sizes) <= 1


@pytest.mark.parametrize("beta", [0.1, 0.5, 10.0])
def test_dirichlet_covers_data_and_respects_min_size(beta):
    cfg = PartitionConfig(kind="dirichlet", clients=10, beta=beta, min_size=10)
    parts = partition(UNBALANCED, 10, cfg, seed=3)
    check_disjoint_cover(parts, len(UNBALANCED))
    assert min(len(p) for p in parts) >= 10
    counts = count_matrix(UNBALANCED, parts, 10)
    assert (counts.sum(0) == np.bincount(UNBALANCED, minlength=10)).all()  # every class fully used


def test_dirichlet_skew_grows_as_beta_shrinks():
    def mean_classes_held(beta):
        counts = count_matrix(LABELS, partition(LABELS, 10, PartitionConfig(beta=beta), seed=0), 10)
        return (counts > 0).sum(1).mean()

    assert mean_classes_held(0.05) < mean_classes_held(100.0)
    assert mean_classes_held(100.0) >= 9.5


def test_partition_is_determined_by_seed():
    cfg = PartitionConfig(kind="dirichlet", clients=10, beta=0.5)
    a, b = partition(LABELS, 10, cfg, seed=5), partition(LABELS, 10, cfg, seed=5)
    assert all((x == y).all() for x, y in zip(a, b))
    c = partition(LABELS, 10, cfg, seed=6)
    assert any(len(x) != len(y) or (x != y).any() for x, y in zip(a, c))


@pytest.mark.parametrize("k", [1, 2, 5])
def test_label_skew_k_classes_exact(k):
    parts = partition(LABELS, 10, PartitionConfig(kind="classes", clients=10, k=k), seed=2)
    counts = count_matrix(LABELS, parts, 10)
    assert ((counts > 0).sum(1) == k).all()
    for i in range(10):
        assert counts[i, i % 10] > 0  # client i always holds class i mod K
    for c in range(10):  # a class is split equally among its holders
        held = counts[:, c][counts[:, c] > 0]
        if len(held):
            assert held.max() - held.min() <= 1
            assert held.sum() == 100
    check_disjoint_cover(parts, int(counts.sum()))


def test_partition_csv_is_read_back_as_written(tmp_path):
    parts = partition(LABELS, 10, PartitionConfig(clients=5), seed=0)
    counts = count_matrix(LABELS, parts, 10)
    RunDirectory(tmp_path, RunConfig()).save_partition(counts, [f"c{i}" for i in range(10)])
    lines = (tmp_path / "partition.csv").read_text().splitlines()
    assert lines[0] == "client," + ",".join(f"c{i}" for i in range(10)) and len(lines) == 6
    assert read_partition(tmp_path / PARTITION_FILE) == counts.tolist()


@pytest.mark.parametrize(
    "cfg, message",
    [
        (PartitionConfig(kind="dirichlet", beta=0.0), "partition.beta=0.0 must be > 0"),
        (PartitionConfig(kind="dirichlet", beta=-1.0), "partition.beta=-1.0 must be > 0"),
        (PartitionConfig(kind="classes", k=11), r"partition.k=11 must lie in \[1, 10\]"),
        (PartitionConfig(kind="classes", k=0), r"partition.k=0 must lie in \[1, 10\]"),
        (PartitionConfig(clients=1001), r"partition.clients=1001 must lie in \[1, 1000\]"),
        (PartitionConfig(clients=200, min_size=10), r"valid min_size: \[0, 5\]"),
        (PartitionConfig(kind="shards"), "partition.kind='shards' is unknown"),
    ],
)
def test_invalid_parameters_are_named(cfg, message):
    with pytest.raises(ConfigError, match=message):
        partition(LABELS, 10, cfg, seed=0)


def test_domains_one_client_each_and_fedbn_equal_share():
    groups = np.repeat([0, 1, 2, 3], [50, 30, 8, 20])
    labels = np.arange(len(groups)) % 10
    whole = partition(labels, 10, PartitionConfig(kind="domains", clients=4), seed=0, groups=groups)
    assert [len(p) for p in whole] == [50, 30, 8, 20] and all((groups[p] == d).all() for d, p in enumerate(whole))
    # FedBN's fed_office.py: every domain keeps its first half-of-the-smallest samples
    trimmed = partition(labels, 10, PartitionConfig(kind="domains", clients=4, domain_share=0.5), seed=0, groups=groups)
    assert [p.tolist() for p in trimmed] == [w[:4].tolist() for w in whole]
    with pytest.raises(ConfigError, match="partition.domain_share=0.1 keeps no sample of the smallest domain"):
        partition(labels, 10, PartitionConfig(kind="domains", clients=4, domain_share=0.1), seed=0, groups=groups)
