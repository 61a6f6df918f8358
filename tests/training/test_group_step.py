"""The batched group step of every method of the campaign's targets, on the CPU, as a GPU would
take it (benchmarks/group_step.py trains a small group of two runs of each for two rounds):

- the operators of one step of the second round hold no host synchronisation (a CUDA graph
  cannot capture one; eagerly it stalls the GPU's queue), no operator that torch's
  deterministic mode (trainer.deterministic, on by default) refuses on CUDA, and at most the
  method's ceiling of non-view operators, each a kernel on a GPU (CEILINGS);
- the group's training region (every lane's hooks, batches and steps) runs with torch's default
  device set to "meta", so that a tensor made without its device fails here, as it would fail
  beside CUDA tensors.

One training per method serves both (the first run with the meta default; where that fails,
the operators are recorded again without it).
"""

from __future__ import annotations

import functools
import traceback

import pytest
import torch

from benchmarks.group_step import non_view, record_group_step, small_group
from shared.campaign.gate_cases import GATE_DATASET, method_cases

# The campaign's targets whose every method the GPU session must take in a batched captured
# step (docs/gpu-sessions.md); the campaign trains them on a copy of CIFAR-10 (GATE_DATASET),
# so their rows' runs on other data are not among them.
CAMPAIGN_TARGETS = [
    "papers/fedssd/table2",
    "papers/fedgkd/table5",
    "papers/fedgkd/table7",
    "papers/fedgkd/table8",
    "papers/fedgkd/table9",
    "papers/fedcad/table2",
    "papers/fedcad/table3",
    "papers/fedcad/table4",
]

# Non-view operators of one group step per method: 2% above the count measured (after each
# ceiling; torch 2.13.0+cpu, 2026-11-26), so that a change that adds kernels to a step fails
# here and says how many. Lower a ceiling when a change takes kernels away.
CEILINGS = {
    "fedssd-table2-FedAvg": 92,  # 90
    "fedssd-table2-FedProx": 181,  # 177
    "fedssd-table2-FedCurv": 127,  # 124
    "fedssd-table2-MOON": 248,  # 243
    "fedssd-table2-FedNTD": 145,  # 142
    "fedssd-table2-FedCAD": 137,  # 134
    "fedssd-table2-FedSSD": 143,  # 140
    "fedssd-table2-FedSSD (weight M)": 142,  # 139
    "fedgkd-table5-FedAvg": 447,  # 438
    "fedgkd-table5-FedProx": 691,  # 677
    "fedgkd-table5-MOON": 689,  # 675
    "fedgkd-table5-FedDistill+": 469,  # 459
    "fedgkd-table5-FedGen": 504,  # 494
    "fedgkd-table5-FedGKD": 535,  # 524
    "fedgkd-table5-FedGKD-VOTE": 623,  # 610
    "fedgkd-table5-FedGKD+": 558,  # 547
    "fedgkd-table9-MSE": 529,  # 518
    "fedcad-table2-FedLSD": 137,  # 134
}

aten = torch.ops.aten
# Operators that wait for the device: a value read on the host, or an output whose size
# depends on the values
HOST_SYNC = {
    aten._local_scalar_dense,
    aten.item,
    aten.is_nonzero,
    aten.equal,
    aten.allclose,
    aten.nonzero,
    aten.nonzero_numpy,
    aten.argwhere,
    aten.masked_select,
    aten._unique,
    aten._unique2,
    aten.unique_dim,
    aten.unique_consecutive,
    aten.bincount,
    aten.histc,
}
# torch.use_deterministic_algorithms's documented list of operators that raise on CUDA (those it
# lists as made deterministic, index_add_ or scatter_add_ among them, take a deterministic path)
REFUSED_ON_CUDA = {
    aten.avg_pool3d_backward,
    aten._adaptive_avg_pool2d_backward,
    aten._adaptive_avg_pool3d_backward,
    aten.adaptive_max_pool2d_backward,
    aten.adaptive_max_pool3d_backward,
    aten.fractional_max_pool2d_backward,
    aten.fractional_max_pool3d_backward,
    aten.max_unpool2d,
    aten.max_unpool3d,
    aten.upsample_linear1d_backward,
    aten.upsample_bilinear2d_backward,
    aten.upsample_bicubic2d_backward,
    aten.upsample_trilinear3d_backward,
    aten._upsample_bilinear2d_aa_backward,
    aten._upsample_bicubic2d_aa_backward,
    aten.reflection_pad1d_backward,
    aten.reflection_pad2d_backward,
    aten.reflection_pad3d_backward,
    aten.nll_loss2d_forward,
    aten._ctc_loss_backward,
    aten.put_,
    aten.put,
    aten.histc,
    aten.grid_sampler_2d_backward,
    aten.grid_sampler_3d_backward,
}


@functools.cache
def cases() -> dict:
    return method_cases(CAMPAIGN_TARGETS, GATE_DATASET)


@functools.cache
def trained(case: str):
    """(the recorded step, why the training region failed with the meta default or None)."""
    cfgs = small_group(cases()[case])
    try:
        return record_group_step(cfgs, default="meta"), None
    except Exception:
        return record_group_step(cfgs), traceback.format_exc(limit=-4)


def syncs_or_is_refused(op, args, kwargs) -> str | None:
    """Why this call of `op` may not be in the step (None where it may)."""
    packet = op.overloadpacket
    if packet in HOST_SYNC:
        return "synchronises with the host"
    if packet in (aten.index, aten.index_put, aten.index_put_, aten._index_put_impl_) and any(
        isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in args[1] if i is not None
    ):
        return "indexes by a mask (its size waits for the host)"
    if packet is aten.repeat_interleave and op is aten.repeat_interleave.Tensor and kwargs.get("output_size") is None:
        return "repeat_interleave without output_size waits for the host"
    if packet in REFUSED_ON_CUDA:
        return "is refused on CUDA by torch.use_deterministic_algorithms"
    if packet in (aten.cumsum, aten.cumsum_) and (kwargs.get("dtype") or args[0].dtype).is_floating_point:
        return "cumsum of floats is refused on CUDA by torch.use_deterministic_algorithms"
    if op in (aten.median.dim, aten.nanmedian.dim):
        return "median with indices is refused on CUDA by torch.use_deterministic_algorithms"
    if packet in (aten.scatter_reduce, aten.scatter_reduce_) and args[3] == "prod":
        return "scatter_reduce prod is refused on CUDA by torch.use_deterministic_algorithms"
    return None


def test_the_cases_are_every_method_of_the_campaigns_targets():
    names = {cfg.method["name"] for cfg in cases().values()}
    assert {
        "fedavg",
        "fedprox",
        "fedcurv",
        "moon",
        "fedntd",
        "fedcad",
        "fedssd",
        "feddistill",
        "fedgen",
        "fedgkd",
        "fedlsd",
    } <= names
    assert set(CEILINGS) == set(cases())  # one ceiling per method


@pytest.mark.parametrize("case", sorted(cases()))
def test_a_group_step_neither_synchronises_nor_refuses_determinism_and_stays_under_its_ceiling(case):
    recorder, _ = trained(case)
    assert recorder.calls, "no batched step was recorded"
    bad = sorted(
        {f"{op} {why}" for op, args, kwargs in recorder.calls if (why := syncs_or_is_refused(op, args, kwargs))}
    )
    assert not bad, bad
    count = len(non_view(recorder.ops))
    assert count <= CEILINGS[case], f"{case}: {count} non-view operators a step, the ceiling is {CEILINGS[case]}"


@pytest.mark.parametrize("case", sorted(cases()))
def test_a_group_trains_with_the_meta_default_device(case):
    """A tensor made without a device inside the training region is on "meta", and mixing it
    with the CPU's tensors raises, as a CPU tensor among CUDA tensors would."""
    _, failure = trained(case)
    assert failure is None, failure


def test_a_tensor_made_without_its_device_fails_beside_the_devices_tensors():
    with torch.device("meta"), pytest.raises(RuntimeError, match="not on the expected device"):
        torch.ones(3, device="cpu") + torch.ones(3)
