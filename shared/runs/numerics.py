"""How a run computes on its device: deterministic kernels, cuDNN's benchmarking, no TF32, and
cuBLAS's fixed workspace; recorded in each run's environment (shared/runs/provenance.py)."""

from __future__ import annotations

import os

import torch

# cuBLAS sums a matrix product in the same order every time only with a fixed workspace, and it
# reads this once, when the process's first cuBLAS call initialises it: so it is set as soon as
# the trainer is imported (it imports this module), before any run could touch CUDA (torch's
# reproducibility notes; 8 buffers of 4 MiB), not in `set_numerics`, which a process may call
# after its first product. A value the user exported wins.
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")


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
