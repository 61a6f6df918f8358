"""Sums of per-sample values by class, the same in every run on every device.

`index_add_` on CUDA adds each sample into its class's row with atomics, in whatever order the
threads arrive, so the rounding of a sum differs from run to run (and a resumed run from an
uninterrupted one). Here the sum is a product with the one-hot matrix of the labels, which
cuBLAS computes in a fixed order (shared/runs/numerics.py fixes its workspace); on the CPU it is as
exact as the loop it replaces, in another order.
"""

from __future__ import annotations

import torch


def one_hot(labels: torch.Tensor, num_classes: int, dtype: torch.dtype) -> torch.Tensor:
    """(N,) labels -> (N, num_classes) indicators. A comparison rather than F.one_hot, which
    checks the labels' range on the host (a synchronisation a CUDA graph cannot hold)."""
    return (labels[:, None] == torch.arange(num_classes, device=labels.device)).to(dtype)


def sum_by_class(values: torch.Tensor, labels: torch.Tensor, num_classes: int) -> torch.Tensor:
    """sums[c] = sum of values[i] over the samples i with labels[i] == c: (N, ...) -> (num_classes, ...)."""
    flat = values.reshape(len(values), -1)
    sums = one_hot(labels, num_classes, flat.dtype).T @ flat
    return sums.reshape(num_classes, *values.shape[1:])


def count_by_class(labels: torch.Tensor, num_classes: int) -> torch.Tensor:
    """Samples per class, as float32 (integer counts are exact whatever the order of adding)."""
    return torch.bincount(labels, minlength=num_classes).float()
