"""Where a run's random numbers come from, so that a round replays identically after a resume,
whatever the client order or the way clients are trained."""

from __future__ import annotations

import numpy as np
import torch


def derive_seed(*parts: int) -> int:
    """An independent 63-bit seed for each (seed, round, client, ...) tuple."""
    return int(np.random.SeedSequence(list(parts)).generate_state(2, np.uint64)[0] >> np.uint64(1))


def client_generator(seed: int, round: int, client: int, device: torch.device) -> torch.Generator:
    """The generator of one client's local training in one round: its shuffles and augmentation."""
    return torch.Generator(device).manual_seed(derive_seed(seed, round, client))
