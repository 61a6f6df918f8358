"""The four papers' methods held to their equations, on hand-made tensors, and to the
reductions the papers state."""

import json
import math
from types import SimpleNamespace

import pytest
import torch

from shared.training import trainer
from tests.methods.test_baselines import CE, CLIENT, W, X, Y, kl, linear_net, make, softmax


def runs_match(a, b):
    """Identical accuracy curves of the global and the local models."""
    assert a["global_acc"] == b["global_acc"] and a["local_acc"] == b["local_acc"]


# --- FedCAD --------------------------------------------------------------------------------


def test_fedcad_class_wise_weights_eq6():
    from papers.fedcad.fedcad import class_wise_weights

    p = torch.tensor([[0.7, 0.2, 0.1], [0.5, 0.5, 0.0], [0.1, 0.8, 0.1]])
    y = torch.tensor([0, 0, 1])
    a = class_wise_weights(p, y, beta=0.2, gamma=0.6)
    # phi: 0.7 - 0.3 = 0.4, 0.5 - 0.5 = 0, 0.8 - 0.2 = 0.6 ; E[phi | 0] = 0.2, E[phi | 1] = 0.6
    expected = [0.2 * 0.2 + 0.4, 0.2 * 0.6 + 0.4, 0.4]  # (gamma - beta)/2 * E + (gamma + beta)/2
    torch.testing.assert_close(a, torch.tensor(expected))


def test_fedcad_loss_weights_each_sample_by_its_class():
    method = make("fedcad", beta=0.0, gamma=1.0, estimate_on="local")
    method.prepare_round(0, linear_net([[0.0, 0.0], [1.0, 0.0], [0.0, 0.0]]))  # teacher logits [0, 1, 0]
    method.alpha_y = torch.tensor([0.25, 0.5, 0.5], dtype=torch.float64)
    loss = method.local_loss(linear_net(W), X, Y, CLIENT)
    assert loss.item() == pytest.approx(0.75 * CE + 0.25 * kl(softmax([0, 0.5, 0]), softmax([0.5, 0, 0])))


def test_fedcad_reductions(tiny_cfg, tmp_path):
    fedavg = trainer.run(tiny_cfg("aux.per_class=5"), tmp_path / "fedavg")
    cad_zero = trainer.run(
        tiny_cfg("aux.per_class=5", "method=fedcad", "method.beta=0", "method.gamma=0"), tmp_path / "cad0"
    )
    runs_match(fedavg, cad_zero)  # beta = gamma = 0: FedAvg
    lsd = trainer.run(tiny_cfg("method=fedlsd", "method.alpha=0.3"), tmp_path / "lsd")
    cad = trainer.run(
        tiny_cfg("aux.per_class=5", "method=fedcad", "method.beta=0.3", "method.gamma=0.3"), tmp_path / "cad"
    )
    assert cad["global_acc"] == lsd["global_acc"]  # beta = gamma = c: FedLSD with weight c
    wa, wb = torch.load(tmp_path / "lsd" / "model.pt"), torch.load(tmp_path / "cad" / "model.pt")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


# --- FedSSD --------------------------------------------------------------------------------


def test_fedssd_credibility_by_hand():
    from papers.fedssd.fedssd import class_credibility, credibility_matrix

    y = torch.tensor([0, 0, 0, 0, 1, 1, 2, 2])
    pred = torch.tensor([0, 0, 0, 1, 1, 0, 1, 1])  # class 2 is never predicted correctly
    A = credibility_matrix(pred, y, 3)
    torch.testing.assert_close(A, torch.tensor([[0.75, 0.25, 0.0], [0.5, 0.5, 0.0], [0.0, 1.0, 0.0]]))
    # M_class[k] = A[k,k] * (1 - max_{j != k} A[j,k])
    torch.testing.assert_close(class_credibility(A), torch.tensor([0.75 * 0.5, 0.5 * 0.0, 0.0]))


def test_fedssd_mask_range_and_zero_for_a_never_right_class():
    from papers.fedssd.fedssd import sample_credibility, selective_mask

    torch.manual_seed(0)
    logits, y = torch.randn(256, 3) * 5, torch.randint(0, 3, (256,))
    m_sample = sample_credibility(logits, y)
    assert ((0 <= m_sample) & (m_sample <= 1)).all()
    mask = selective_mask(torch.tensor([1.0, 0.4, 0.0]), m_sample, m_max=0.01)
    assert (mask >= 0).all() and (mask <= 0.01).all()
    assert (mask[:, 2] == 0).all()


def test_fedssd_loss_by_hand(tiny_cfg):
    method = make("fedssd", m_max=0.5, loss="mse")  # construct without aux; set credibility by hand
    method.params.loss = "ssd"
    method.teacher = linear_net([[2.0, 0.0], [0.0, 0.0], [0.0, 0.0]]).eval()  # z_g = [2, 0, 0]
    method.m_class = torch.tensor([0.8, 0.5, 0.0], dtype=torch.float64)
    loss = method.local_loss(linear_net(W), X, Y, CLIENT)  # z = [1, 0, 0]
    p_true = softmax([2, 0, 0])[0]
    m_sample = 1 - math.sqrt(1 - p_true)
    m = [0.5 * max(0.0, c * m_sample - 0.1) for c in (0.8, 0.5, 0.0)]
    assert loss.item() == pytest.approx(CE + (m[0] * 2 - m[0] * 1) ** 2)


def test_fedssd_mask_weight_m_weights_the_squared_difference_by_m_not_m_squared(tiny_cfg):
    method = make("fedssd", m_max=0.5, loss="mse", mask_weight="m")
    method.params.loss = "ssd"
    method.teacher = linear_net([[2.0, 0.0], [0.0, 0.0], [0.0, 0.0]]).eval()  # z_g = [2, 0, 0], z = [1, 0, 0]
    method.m_class = torch.tensor([0.8, 0.5, 0.0], dtype=torch.float64)
    m_sample = 1 - math.sqrt(1 - softmax([2, 0, 0])[0])
    m0 = 0.5 * max(0.0, 0.8 * m_sample - 0.1)
    assert method.local_loss(linear_net(W), X, Y, CLIENT).item() == pytest.approx(CE + m0 * (2 - 1) ** 2)


def test_fedssd_mask_weight_stays_out_of_the_run_id_while_unset():
    from shared.config.schema import identity, run_id
    from shared.targets.configs import load_config

    paper = load_config(None, ["method=fedssd", "aux.per_class=64"])
    assert "mask_weight" not in str(identity(paper))
    assert run_id(paper) == "5251700813d2c418"  # tests/config/test_config.py's known id
    assert run_id(load_config(None, ["method=fedssd", "aux.per_class=64", "method.mask_weight=m"])) != run_id(paper)


def test_fedssd_class_reduction_mean_divides_by_k():
    method = make("fedssd", m_max=0.1, loss="mse", class_reduction="mean")
    method.teacher = linear_net([[2.0, 0.0], [0.0, 0.0], [0.0, 1.0]]).eval()  # z_g = [2, 0, 0], z = [1, 0, 0]
    assert method.local_loss(linear_net(W), X, Y, CLIENT).item() == pytest.approx(CE + 0.1 * 1.0 / 3)


def test_fedssd_table3_variants_by_hand():
    method = make("fedssd", m_max=0.1, loss="mse")
    method.teacher = linear_net([[2.0, 0.0], [0.0, 0.0], [0.0, 1.0]]).eval()  # z_g = [2, 0, 0]
    assert method.local_loss(linear_net(W), X, Y, CLIENT).item() == pytest.approx(CE + 0.1 * 1.0)
    method.params.loss = "kl"
    assert method.local_loss(linear_net(W), X, Y, CLIENT).item() == pytest.approx(
        CE + 0.1 * kl(softmax([2, 0, 0]), softmax([1, 0, 0]))
    )


def test_fedssd_runs_with_auxiliary_data(tiny_cfg, tmp_path):
    summary = trainer.run(tiny_cfg("method=fedssd", "aux.per_class=5"), tmp_path / "r")
    assert summary["status"] == "completed"


# --- FedGKD --------------------------------------------------------------------------------


def test_fedgkd_teacher_averages_the_last_m_global_models():
    method = make("fedgkd", buffer=2)
    for value in (1.0, 3.0, 7.0):
        method.prepare_round(0, linear_net([[value] * 2] * 3))
    (teacher,) = method.teachers
    assert torch.allclose(teacher.classifier.weight, torch.full((3, 2), 5.0, dtype=torch.float64))  # (3 + 7) / 2
    assert method.teacher_weights == [0.1]  # gamma / 2


def test_fedgkd_loss_by_hand():
    method = make("fedgkd", gamma=0.4, buffer=1)
    method.prepare_round(1, linear_net([[0.0, 0.0], [1.0, 0.0], [0.0, 0.0]]))  # teacher [0, 1, 0]
    loss = method.local_loss(linear_net(W), X, Y, CLIENT)
    assert loss.item() == pytest.approx(CE + 0.2 * kl(softmax([0, 1, 0]), softmax([1, 0, 0])))


def test_fedgkd_mse_regulariser_is_a_mean_over_the_classes():
    """Table IX's MSE: a mean squared error over the logits (the released F.mse_loss); `sum` is K times it."""
    teacher = linear_net([[0.0, 0.0], [1.0, 0.0], [0.0, 0.0]])  # teacher logits [0, 1, 0]; ours [1, 0, 0]
    for reduction, squared in ((None, 2 / 3), ("sum", 2.0)):
        method = make(
            "fedgkd",
            gamma=0.4,
            buffer=1,
            regulariser="mse",
            **({} if reduction is None else {"class_reduction": reduction}),
        )
        method.prepare_round(1, teacher)
        assert method.local_loss(linear_net(W), X, Y, CLIENT).item() == pytest.approx(CE + 0.2 * squared)


def test_fedgkd_released_code_is_the_released_loop():
    """CGCL-codes/FedGKD: aggregated models only in the buffer (no distillation in the first
    round), gamma / 2 * T^2 * KL, gradient norms clipped at 10, uniform averaging."""
    from shared.targets.configs import load_config

    cfg = load_config(None, ["method=fedgkd", "method.released_code=true"])
    assert cfg.local.grad_clip == 10.0 and cfg.federation.weighting == "uniform"
    paper = load_config(None, ["method=fedgkd"])
    assert paper.local.grad_clip is None and paper.federation.weighting == "samples"
    assert "class_reduction" not in {k for k, v in paper.method.items() if v is not None}  # KL run ids unchanged

    method = make("fedgkd", gamma=0.2, buffer=2, temperature=2.0, released_code=True)
    initial, aggregated = linear_net([[5.0, 5.0]] * 3), linear_net([[0.0, 0.0], [1.0, 0.0], [0.0, 0.0]])
    method.prepare_round(0, initial)
    assert not method.distil and len(method.buffer) == 0
    assert method.local_loss(linear_net(W), X, Y, CLIENT).item() == pytest.approx(CE)
    method.prepare_round(1, aggregated)
    (teacher,) = method.teachers  # the aggregated model alone, not averaged with the initial one
    torch.testing.assert_close(teacher.classifier.weight, aggregated.classifier.weight)
    kl_t2 = kl(softmax([0, 0.5, 0]), softmax([0.5, 0, 0]))
    assert method.local_loss(linear_net(W), X, Y, CLIENT).item() == pytest.approx(CE + 0.1 * 4 * kl_t2)


def test_fedgkd_vote_weights_by_validation_loss():
    """gamma_m / 2 = lambda * softmax_m(-L_m / beta), beta = 1 / M unless set."""
    for beta, scale in ((None, 2.0), (0.25, 4.0)):
        method = make("fedgkd", buffer=2, **({} if beta is None else {"vote_beta": beta}))
        method.params.vote = True  # make() builds without a validation split; give it one
        method.federation.val = SimpleNamespace(x=X, y=Y)
        method.federation.augmenter = SimpleNamespace(normalize=lambda x: x)
        method.prepare_round(0, linear_net([[1.0, 0.0], [0.0, 0.0], [0.0, 0.0]]))  # right on X
        method.prepare_round(1, linear_net([[0.0, 0.0], [1.0, 0.0], [0.0, 0.0]]))  # wrong on X
        losses = torch.tensor([-math.log(softmax([1, 0, 0])[0]), -math.log(softmax([0, 1, 0])[0])])
        expected = (0.1 * torch.softmax(-losses * scale, 0)).tolist()
        assert method.teacher_weights == pytest.approx(expected)


def test_fedgkd_m1_distils_the_last_global_model_and_vote_m1_equals_it(tiny_cfg, tmp_path):
    plain = trainer.run(tiny_cfg("method=fedgkd", "method.buffer=1", "dataset.val_fraction=0.1"), tmp_path / "m1")
    vote = trainer.run(
        tiny_cfg("method=fedgkd", "method.buffer=1", "method.vote=true", "dataset.val_fraction=0.1"), tmp_path / "vote"
    )
    assert plain["global_acc"] == vote["global_acc"]
    wa, wb = torch.load(tmp_path / "m1" / "model.pt"), torch.load(tmp_path / "vote" / "model.pt")
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


# --- FedCSD --------------------------------------------------------------------------------


def test_fedcsd_similarity_refinement_and_masks_by_hand():
    from papers.fedcsd.fedcsd import adaptive_mask, forcible_mask, similarity_refined

    z = torch.tensor([[1.0, 0.0]])
    prototypes = torch.tensor([[2.0, 0.0], [0.0, 3.0]])  # cos = [1, 0]
    refined = similarity_refined(z, torch.tensor([[4.0, 2.0]]), prototypes)
    torch.testing.assert_close(refined, torch.tensor([[4 * E1 / (E1 + 1), 2 * 1 / (E1 + 1)]]))
    z_teacher = torch.tensor([[2.0, 1.0, 0.0], [0.0, 0.1, 0.0]])
    y = torch.tensor([1, 1])
    # softmax([2,1,0])[1] = 0.245 < 1/3 -> 0 ; softmax([0,.1,0])[1] = 0.35 > 1/3 -> 1
    assert adaptive_mask(z_teacher, y).tolist() == [0.0, 1.0]
    assert forcible_mask(z_teacher, y).tolist() == [0.0, 1.0]


def test_fedcsd_global_prototypes_over_holders_or_all_clients_refine_alike():
    """P_G averaged over the clients holding a class or over all of them (zeros for the others)
    differ by a positive factor per class, which the cosine of Eq. 8 does not see."""
    from papers.fedcsd.fedcsd import similarity_refined
    from shared.methods.baselines.class_stats import average_per_class

    generator = torch.Generator().manual_seed(0)
    means = [torch.randn(4, 4, generator=generator) for _ in range(3)]
    counts = [
        torch.tensor([5.0, 0.0, 2.0, 0.0]),
        torch.tensor([1.0, 3.0, 0.0, 0.0]),
        torch.tensor([2.0, 2.0, 2.0, 0.0]),
    ]
    means = [m * (c > 0)[:, None] for m, c in zip(means, counts)]  # class_means is zero where a client lacks it
    holders, _ = average_per_class(means, counts, weighted=False)
    all_clients = torch.stack(means).mean(0)
    assert not torch.allclose(holders, all_clients)
    z, z_teacher = torch.randn(8, 4, generator=generator), torch.randn(8, 4, generator=generator)
    torch.testing.assert_close(similarity_refined(z, z_teacher, holders), similarity_refined(z, z_teacher, all_clients))


E1 = math.e


def test_fedcsd_loss_by_hand():
    method = make("fedcsd", mu=0.5, tau=2.0, similarity=False, mask="none")
    method.teacher = linear_net([[0.0, 0.0], [1.0, 0.0], [0.0, 0.0]]).eval()  # z_xi = [0, 1, 0]
    loss = method.local_loss(linear_net(W), X, Y, CLIENT)
    assert loss.item() == pytest.approx(CE + 0.5 * 4 * kl(softmax([0, 0.5, 0]), softmax([0.5, 0, 0])))
    method.params.mask = "adaptive"  # softmax([0,1,0])[0] = 0.21 < 1/3: the sample is masked out
    assert method.local_loss(linear_net(W), X, Y, CLIENT).item() == pytest.approx(CE)
    assert method.round_metrics()["mask_filter_rate"] == pytest.approx(0.5)  # 1 of the 2 samples seen


def test_fedcsd_logs_the_share_of_wrong_soft_labels_its_mask_removes():
    """Fig. 5's "filter rate for wrong soft labels": of the samples whose teacher predicts another
    class, the share the mask removes; mask_filter_rate is the share of all samples."""
    method = make("fedcsd", similarity=False)
    method.teacher = linear_net(W).eval()  # z_xi = [x1, x2, 0]
    x = torch.tensor([[2.0, 0.0], [0.0, 2.0], [1.0, 1.1], [0.0, 1.0]], dtype=torch.float64)
    y = torch.tensor([0, 0, 0, 1])
    # right and kept; wrong and masked (p_y 0.11); wrong and kept (p_y 0.40 > 1/3); right and kept
    method.local_loss(linear_net(W), x, y, CLIENT)
    assert method.round_metrics() == pytest.approx({"mask_filter_rate": 0.25, "wrong_label_filter_rate": 0.5})
    assert method.round_metrics() == {"mask_filter_rate": 0.0, "wrong_label_filter_rate": 0.0}  # a new round


def test_fedcsd_teacher_is_a_moving_average():
    method = make("fedcsd", tma=0.9, similarity=False)
    method.prepare_round(0, linear_net([[1.0] * 2] * 3))
    method.prepare_round(1, linear_net([[3.0] * 2] * 3))
    assert torch.allclose(method.teacher.classifier.weight, torch.full((3, 2), 0.9 * 1 + 0.1 * 3, dtype=torch.float64))


def test_fedcsd_released_code_defaults_to_its_mu_and_tau_unless_set():
    from shared.targets.configs import load_config

    def method(*overrides):
        params = load_config(None, ["method=fedcsd", *overrides]).method
        return params["mu"], params["tau"]

    assert method() == (0.001, 10.0)  # the paper's (CIFAR-100, FEMNIST)
    assert method("method.released_code=true") == (0.5, 4.0)  # train_ours.py's defaults
    assert method("method.released_code=true", "method.mu=0.1", "method.tau=2") == (0.1, 2.0)


def test_fedcsd_released_code_refines_by_each_clients_own_prototypes():
    """train_ours.py: P_k from the client's own full (augmented) batches through the teacher in
    train mode, zero for a class it lacks; no server average."""
    from papers.fedcsd.fedcsd import own_prototypes

    x = torch.tensor([[1.0, 0.0], [0.0, 2.0], [3.0, 0.0], [9.0, 9.0]], dtype=torch.float64)
    y = torch.tensor([0, 0, 1, 1])
    client = SimpleNamespace(
        id=0, index=torch.zeros(1), batches=lambda batch_size, generator: iter([(x[:3], y[:3]), (x[3:], y[3:])])
    )
    teacher = linear_net([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])  # logits [x1, x2, x1 + x2]
    got = own_prototypes(teacher, client, 3, 3, torch.Generator())  # the last batch (1 sample) is dropped
    torch.testing.assert_close(
        got, torch.tensor([[0.5, 1.0, 1.5], [3.0, 0.0, 3.0], [0.0, 0.0, 0.0]], dtype=torch.float64).float()
    )

    released = make("fedcsd", released_code=True)
    released.federation.clients = [client]
    released.cfg.local.batch_size = 3
    released.prepare_round(0, teacher)
    assert released.teacher.training  # never put in eval mode: BatchNorm normalises by each batch
    released.start_client(client, teacher)
    torch.testing.assert_close(released.prototypes, got)
    paper = make("fedcsd", similarity=False)
    paper.prepare_round(0, teacher)
    assert not paper.teacher.training


def test_fedcsd_logs_its_filter_rates_each_round(tiny_cfg, tmp_path):
    trainer.run(tiny_cfg("method=fedcsd", "federation.rounds=4"), tmp_path / "r")
    rows = [json.loads(line) for line in (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()]
    rates = [r["mask_filter_rate"] for r in rows]
    assert len(rates) == 4 and all(0 < r < 1 for r in rates)
    assert rates[-1] < rates[0]  # the mask filters less as the teacher improves (Fig. 5)
    assert all(r["mask_filter_rate"] <= r["wrong_label_filter_rate"] <= 1 for r in rows)


def test_the_readings_benchmark_trains_fedavg_both_fedssd_readings_and_the_constant_mse(tmp_path, monkeypatch):
    """benchmarks/fedssd_readings.py on a generated image folder (70 images a class: FedSSD's
    server takes 64 of each), one round of one epoch: a curve per arm, written as JSON and CSV,
    and a figure; two processes' outputs joined into one."""
    import numpy as np
    from PIL import Image

    from benchmarks import fedssd_readings

    rng = np.random.default_rng(0)
    for split, n in (("train", 70), ("test", 5)):
        for c in range(10):
            (tmp_path / "imgs" / split / f"c{c}").mkdir(parents=True)
            for i in range(n):
                Image.fromarray(rng.integers(0, 256, (32, 32, 3), dtype=np.uint8)).save(
                    tmp_path / "imgs" / split / f"c{c}" / f"{i}.png"
                )
    monkeypatch.setenv("FEDREPRO_DATA", str(tmp_path / "root"))
    out = tmp_path / "bench" / "readings.json"
    fedssd_readings.main([str(tmp_path / "imgs"), "--rounds", "1", "--epochs", "1", "--out", str(out)])
    curves = json.loads(out.read_text())["curves"]
    arms = [
        "FedAvg",
        "FedSSD, M^2 (the paper's text)",
        "FedSSD, M (mask_weight=m)",
        "Constant MSE, alpha 0.01 (Table III's MSE row)",
    ]
    assert list(curves) == arms
    assert all(len(c["global_acc"]) == 1 for c in curves.values())
    rows = out.with_suffix(".csv").read_text().splitlines()
    assert rows[0] == "round,arm,global_acc" and len(rows) == 1 + len(arms)
    assert out.with_suffix(".png").stat().st_size > 0

    # one arm per process, joined: the same curves (each arm's run directory is reused)
    half = [tmp_path / "bench" / f"{n}.json" for n in ("a", "b")]
    for path, chosen in zip(half, (["fedavg", "fedssd-m2"], ["fedssd-m", "mse"])):
        fedssd_readings.main(
            [str(tmp_path / "imgs"), "--rounds", "1", "--epochs", "1", "--arms", *chosen, "--out", str(path)]
        )
    joined = tmp_path / "bench" / "joined.json"
    fedssd_readings.main(["--join", *map(str, half), "--out", str(joined)])
    assert json.loads(joined.read_text())["curves"] == curves


@pytest.mark.parametrize(("data", "dataset"), [(None, "cifar10"), ("cifar10-folder", "imagefolder")])
def test_the_readings_benchmark_takes_the_official_cifar10_or_a_folder(data, dataset):
    from benchmarks.fedssd_readings import protocol
    from shared.targets.configs import load_config

    args = SimpleNamespace(data=data, rounds=1, epochs=1, seed=0, train_subset=None)
    assert load_config(None, protocol(args)).dataset.name == dataset
