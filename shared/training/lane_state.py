"""A method's local state, one copy per lane of a batched step.

A lane is one (run, client) pair. What a method's `local_loss` reads besides the model is the
state its hooks set: `prepare_round` (a teacher, per-class weights, FedProx's global weights)
and `start_client` (a client's previous model, control variates, class weights). Lanes of
different runs, and of different clients, hold different values, so the batched step takes a
snapshot of that state per lane, stacks it, and swaps each lane's slice in while vmap runs the
method's own `local_loss` on one template instance:

    Tensor                      a stack (lanes, *shape)
    nn.Module                   its parameters and buffers stacked; the template's attribute
                                becomes one module that functional_call runs with a lane's
    float                       as it is where every lane holds the same value, else a stack
                                (a 0-d tensor inside the loss, which arithmetic takes alike)
    list or tuple of the above  element by element

Every other attribute (hyperparameters, the config, the federation, a buffer of state dicts
that only the server reads) is the template's, copied from the lane's method as it was right
after that lane's hooks ran. Lanes whose int, bool, str or None attributes differ (a switch
that is off in a run's first round only) cannot take one code path, so they train in
separate passes of the step (`code_path`).

The stacks are static buffers, copied into each round, so that a CUDA graph captured once
replays every round as long as the layout (names, kinds, shapes) stays the same.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from torch import nn

from shared.methods.fedavg import FedAvg

SIMPLE = (int, bool, str, type(None))


def leaf_kind(value) -> str | None:
    if isinstance(value, torch.Tensor):
        return "tensor"
    if isinstance(value, nn.Module):
        return "module"
    if type(value) is float:
        return "float"
    return None


def state_leaves(method: FedAvg) -> dict[str, tuple[str, object]]:
    """key -> (kind, value) for every stackable attribute; a list's elements are `name[i]`."""
    leaves = {}
    for name, value in vars(method).items():
        if isinstance(value, (list, tuple)) and value and all(leaf_kind(v) for v in value):
            leaves.update({f"{name}[{i}]": (leaf_kind(v), v) for i, v in enumerate(value)})
        elif leaf_kind(value):
            leaves[name] = (leaf_kind(value), value)
    return leaves


def code_path(method: FedAvg) -> tuple:
    """The method's simple attributes: lanes whose values differ run different code."""
    return tuple(sorted((k, v) for k, v in vars(method).items() if type(v) in SIMPLE))


def module_tensors(module: nn.Module) -> dict[str, torch.Tensor]:
    return {**dict(module.named_parameters()), **dict(module.named_buffers())}


def layout_of(leaves: dict[str, tuple[str, object]]) -> tuple:
    """What a captured step depends on: each leaf's key, kind, and shapes and dtypes."""

    def shape(kind, value):
        if kind == "module":
            return tuple((n, tuple(t.shape), t.dtype) for n, t in value.tensors.items())
        return (tuple(value.shape), value.dtype) if kind == "tensor" else None

    return tuple((key, kind, shape(kind, value)) for key, (kind, value) in leaves.items())


@dataclass
class Snapshot:
    """One lane's state as its hooks left it."""

    leaves: dict[str, tuple[str, object]]  # a module's value: its ModuleState
    attributes: dict  # the method's vars at the time, for the template
    path: tuple


@dataclass
class ModuleState:
    """A module leaf as a lane's hooks left it: the module (its structure) and a copy of its
    parameters and buffers (a hook may load the next client's weights into the same module)."""

    module: nn.Module
    tensors: dict[str, torch.Tensor]


def take_snapshot(method: FedAvg) -> Snapshot:
    """The method's state now, its tensors copied: `start_client` often loads a client's state
    into the same module or tensor for every client (MOON's previous model), and the stacks are
    filled only once every lane's hooks have run."""
    leaves = {}
    for key, (kind, value) in state_leaves(method).items():
        if kind == "module":
            value = ModuleState(value, {n: t.detach().clone() for n, t in module_tensors(value).items()})
        elif kind == "tensor":
            value = value.detach().clone()
        leaves[key] = (kind, value)
    return Snapshot(leaves, dict(vars(method)), code_path(method))


def shared_floats(snapshot: Snapshot, stacked: set[str]) -> tuple:
    """The float leaves every lane shares: they stay Python floats, so a captured step holds
    them as constants and is stale once they change."""
    return tuple((k, v) for k, (kind, v) in snapshot.leaves.items() if kind == "float" and k not in stacked)


class LaneState(nn.Module):
    """The stacked state of every lane, and the modules the template's attributes point to
    while the loss runs (`modules`, submodules of the loss module)."""

    def __init__(self, lanes: int, device: torch.device):
        super().__init__()
        self.lanes, self.device = lanes, device
        self.layout: tuple | None = None
        self.modules_by_key = nn.ModuleDict()
        self.stacks: dict[str, torch.Tensor] = {}  # "module key.tensor name" or tensor key -> stack
        self.stacked_floats: set[str] = set()
        self.split_stacks()

    def arrange(self, first: Snapshot, floats_differ: set[str]) -> bool:
        """Allocate the stacks for this layout; True if it changed (a captured step is stale)."""
        layout = (layout_of(first.leaves), tuple(sorted(floats_differ)))
        if layout == self.layout:
            return False
        self.layout, self.stacked_floats = layout, set(floats_differ)
        self.modules_by_key = nn.ModuleDict()
        self.stacks = {}
        for key, (kind, value) in first.leaves.items():
            if kind == "module":  # a copy of its structure; the weights come from the stacks
                self.modules_by_key[key] = copy.deepcopy(value.module)
                for name, t in value.tensors.items():
                    self.stacks[f"{key}.{name}"] = t.new_zeros(self.lanes, *t.shape)
            elif kind == "tensor":
                self.stacks[key] = value.new_zeros(self.lanes, *value.shape)
            elif key in floats_differ:
                self.stacks[key] = torch.zeros(self.lanes, dtype=torch.get_default_dtype(), device=self.device)
        self.split_stacks()
        return True

    @torch.no_grad()
    def fill(self, rows: slice, snapshot: Snapshot) -> None:
        """Copy one snapshot into lanes `rows` (one lane, or all lanes of a run whose clients
        share the state)."""
        if layout_of(snapshot.leaves) != self.layout[0]:
            raise RuntimeError(
                "lanes of one batched step hold method state of different shapes: "
                f"{[k for k, _, _ in layout_of(snapshot.leaves)]}"
            )
        for key, (kind, value) in snapshot.leaves.items():
            if kind == "module":
                for name, t in value.tensors.items():
                    stack = self.stacks[f"{key}.{name}"]
                    stack[rows].copy_(t.expand_as(stack[rows]))
            elif kind == "tensor":  # on the stack's device, with its dtype (new_zeros in `arrange`)
                self.stacks[key][rows].copy_(value.expand_as(self.stacks[key][rows]))
            elif key in self.stacked_floats:  # a fill, not a copy from the host (which waits for the device)
                self.stacks[key][rows].fill_(value)

    def split_stacks(self) -> None:
        """The stacks as the batched step passes them, split once per layout rather than at
        every step: the module stacks named as functional_call over the loss module wants
        them, and the tensor (and float) stacks."""
        is_module = {k: k.split(".", 1)[0] in self.modules_by_key for k in self.stacks}
        self.parameters_by_name = {f"state.modules_by_key.{k}": v for k, v in self.stacks.items() if is_module[k]}
        self.tensor_stacks = {k: v for k, v in self.stacks.items() if not is_module[k]}

    def assign(self, template: FedAvg, tensors: dict[str, torch.Tensor], leaves: dict[str, tuple[str, object]]) -> None:
        """Point the template's attributes at one lane's state (inside vmap: its slices)."""
        values = {}
        for key, (kind, value) in leaves.items():
            if kind == "module":
                values[key] = self.modules_by_key[key]
            elif key in tensors:
                values[key] = tensors[key]
            else:
                values[key] = value  # a float every lane shares
        for name, value in list(vars(template).items()):
            if isinstance(value, (list, tuple)) and f"{name}[0]" in values:
                setattr(template, name, type(value)(values[f"{name}[{i}]"] for i in range(len(value))))
            elif name in values:
                setattr(template, name, values[name])
