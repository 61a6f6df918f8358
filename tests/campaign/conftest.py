"""Fixtures of the trust tests of states and archives (test_campaign_trust, test_one_door,
test_one_door_review, test_transfer_formats)."""

import pytest

from shared.campaign.state import read_state
from shared.runs import transfer
from tests.campaign.carried_states import write_genuine_state


@pytest.fixture(scope="module")
def genuine(tmp_path_factory) -> tuple[dict, dict[str, bytes]]:
    """A genuine state of one finished FedAvg run and one FedProx run in progress, read back."""
    from tests.campaign.test_campaign_trust import ABOUT, FEDAVG, FEDPROX

    path = tmp_path_factory.mktemp("genuine") / "state.tar.gz"
    write_genuine_state(path, ABOUT, FEDAVG, [FEDPROX])
    return read_state(path)


@pytest.fixture
def small_floor(monkeypatch):
    """A bomb need not pass 64 MiB to show that reading stops where a state's budget ends: the
    genuine state is a few kB, and a floor of 1 MiB keeps the cases fast."""
    monkeypatch.setattr(transfer, "EXPANSION_FLOOR", 2**20)
