"""Where a run's random numbers come from, so that a round replays identically after a resume,
whatever the client order or the way clients are trained."""

from __future__ import annotations

import os

import numpy as np
import torch

# cuBLAS sums a matrix product in the same order every time only with a fixed workspace, and it
# reads this once, when the process's first cuBLAS call initialises it: so it is set as soon as
# anything of the trainer is imported, before any run could touch CUDA (torch's reproducibility
# notes; 8 buffers of 4 MiB). A value the user exported wins.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")


def derive_seed(*parts: int) -> int:
    """An independent 63-bit seed for each (seed, round, client, ...) tuple."""
    return int(np.random.SeedSequence(list(parts)).generate_state(2, np.uint64)[0] >> np.uint64(1))


def client_generator(seed: int, round: int, client: int, device: torch.device) -> torch.Generator:
    """The generator of one client's local training in one round: its shuffles and augmentation."""
    return torch.Generator(device).manual_seed(derive_seed(seed, round, client))


def set_numerics(device: torch.device, deterministic: bool) -> None:
    """How this process computes, set before a run's first kernel and recorded in the run's
    environment (shared/runs/provenance.py). torch's switches are process-wide: the runs of one
    process share them (a group's runs have one `trainer.deterministic`, shared/targets/run_groups.py).

    deterministic  use_deterministic_algorithms (an operation without a deterministic kernel
                   raises instead of summing atomically; new memory is not NaN-filled), cuDNN
                   without benchmarking, whose choice of algorithm varies with timing; off:
                   cuDNN benchmarks, the fastest
    TF32           off, always: float32 products in float32, as on the CPU the tests compare
                   with (on Ampere and later cuDNN would use TF32 for convolutions by default,
                   rounding inputs to 10 mantissa bits); bf16 is `trainer.amp`, part of a run's id
    """
    torch.use_deterministic_algorithms(deterministic, warn_only=False)
    # deterministic mode would also fill every new tensor's memory (each operator's output) with
    # NaN first, a debugging aid against reading uninitialised memory that costs a write of every
    # output and changes no result of correct code
    torch.utils.deterministic.fill_uninitialized_memory = False
    torch.backends.cudnn.deterministic = deterministic
    torch.backends.cudnn.benchmark = device.type == "cuda" and not deterministic
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
