import torch

from shared.methods.fedavg import weighted_average


def test_weighted_average_is_exact_on_hand_made_states():
    a = {
        "w": torch.tensor([[1.0, 2.0]]),
        "bn.running_mean": torch.tensor([0.0, 4.0]),
        "bn.num_batches_tracked": torch.tensor(10),
    }
    b = {
        "w": torch.tensor([[5.0, 6.0]]),
        "bn.running_mean": torch.tensor([8.0, 0.0]),
        "bn.num_batches_tracked": torch.tensor(20),
    }
    avg = weighted_average([a, b], [1, 3])  # client b holds three times the data of a
    assert torch.equal(avg["w"], torch.tensor([[4.0, 5.0]]))  # (1*1 + 3*5)/4, (1*2 + 3*6)/4
    assert torch.equal(avg["bn.running_mean"], torch.tensor([6.0, 1.0]))  # BN statistics averaged too
    assert avg["bn.num_batches_tracked"].dtype == torch.int64
    assert avg["bn.num_batches_tracked"].item() == 18  # round(17.5) -> 18 (round half to even)


def test_uniform_weights_give_plain_mean():
    states = [{"w": torch.full((3,), float(v))} for v in (1, 2, 6)]
    assert torch.equal(weighted_average(states, [1, 1, 1])["w"], torch.full((3,), 3.0))
