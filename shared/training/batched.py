"""Several clients' local training in one step: `trainer.clients_per_step=k`.

A small model's step is a few hundred tiny kernels, and the GPU waits on Python and launches.
This trainer keeps the k clients' weights stacked, one tensor of shape (k, *shape) per
parameter, and runs every client's step at once (docs/performance.md has the design in full):

    x, y      every client's batch of the step, (k, B, ...), from a window of its next batches
              laid out ahead (`fill_window`), its samples and augmentation the sequential
              trainer's; a shorter last batch is padded, a client out of steps weighted 0
    sizes     (k,): each client's batch size at the step; `inputs`: the method's step_inputs
    loss      vmap over clients of  sum_i weight_i * local_loss(model_c, x_i, y_i),  the inner
              vmap over samples (weight 1/s on a client's s real samples, 0 on padding)
    update    torch.optim.SGD's arithmetic on the stacks (shared/training/stacked_sgd.py), only
              for the clients that had a batch

A model with BatchNorm (`uses_batch_statistics`) takes its loss on each lane's whole batch, its
running statistics stacked per lane; no padding: the full batches take `step`, a shorter last
batch `step_rows`, eagerly. On CUDA (`trainer.cuda_graphs`) the step is captured into a CUDA
graph and replayed, captured again only when `graph_key` changes. A lane is one (run, client)
pair, so the lanes of a step may belong to several runs of a group (shared/targets/run_groups.py),
each method's state stacked per lane (shared/training/lane_state.py). What it covers (SGD,
models without dropout, methods with the per_sample_loss and no_global_rng capabilities) is
checked in shared/training/clients.py, which trains anything else one client after another.

The results equal the sequential trainer's up to floating-point rounding (tests/training/test_batched.py
and tests/training/test_batched_batchnorm.py, in float64), so `trainer.clients_per_step` is not part
of a run's id.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from itertools import groupby
from typing import Iterator

import numpy as np
import torch
from torch import nn
from torch.func import functional_call, grad_and_value, vmap

from shared.config.schema import RunConfig
from shared.data.federation import Client, Federation
from shared.methods.fedavg import ClientUpdate, Diverged, FedAvg
from shared.models.nets import Net
from shared.runs.seeding import client_generator
from shared.training.lane_state import LaneState, Snapshot, shared_floats, take_snapshot
from shared.training.stacked_sgd import StackedSGD, view_per_client

# Input values a window of steps' batches laid out ahead holds at most (2 GiB as float32): 18
# steps of a Table II group's 150 FedAvg-CNN lanes (CIFAR-10, B=64). A window costs each lane
# one copy per run of its batches, not one per step; a lane keeps at most its current augmented
# chunk (let go once its last batch is copied), as a per-lane batch iterator would.
WINDOW_VALUES = 1 << 29


@dataclass
class Lane:
    """One (run, client) pair of a batched step, with what its run trains with."""

    method: FedAvg
    client: Client
    cfg: RunConfig
    round: int
    global_model: Net


# The most that a step's stacked state may take: its lanes' parameters, momentum, gradients and
# buffers, about four copies of the model's state each. FedAvg-CNN (0.25 MB) and ResNet-8 never
# reach it; a step takes up to 11 ResNet-50s (94 MB) or 4 AlexNet-BNs (228 MB), whose
# activations take several times that again, and the rest of the lanes go in further passes.
STEP_STATE_BYTES = 4 << 30


def lanes_that_fit(model: nn.Module, wanted: int) -> int:
    """The lanes a step takes: `wanted`, or as many as STEP_STATE_BYTES allows (at least one)."""
    state_bytes = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    return max(1, min(wanted, STEP_STATE_BYTES // (4 * state_bytes)))


def uses_batch_statistics(model: nn.Module) -> bool:
    """BatchNorm in training normalises by its batch's statistics and updates running ones
    (buffers, as any module with buffers may): the loss must see each lane's batch whole."""
    batch_norm = any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())
    return batch_norm or any(True for _ in model.buffers())


class LaneFeed:
    """One lane's batches of its round, from the generator `train_client` seeds: its epochs'
    chunks (`Client.chunks`), read forward a run of whole batches at a time, as columns "x",
    "y" and the method's `step_inputs` of each batch (drawn from the same generator right
    after the chunk's augmentation, batch after batch: the order `train_client` draws them)."""

    def __init__(self, lane: Lane, batch_size: int, device: torch.device):
        self.lane, self.batch_size = lane, batch_size
        self.chunks = self.columns(client_generator(lane.cfg.seed, lane.round, lane.client.id, device))
        self.chunk, self.start = None, 0

    def columns(self, generator: torch.Generator) -> Iterator[dict[str, torch.Tensor]]:
        lane, batch = self.lane, self.batch_size
        for _ in range(lane.cfg.local.epochs):
            for x, y in lane.client.chunks(batch, generator):
                drawn = [
                    lane.method.step_inputs(lane.client, min(batch, len(y) - i), generator)
                    for i in range(0, len(y), batch)
                ]
                yield {"x": x, "y": y, **{name: torch.cat([d[name] for d in drawn]) for name in drawn[0]}}

    def take(self, batches: int) -> dict[str, torch.Tensor]:
        """Up to `batches` next batches end to end: fewer where a chunk (so at least an epoch) ends."""
        if self.chunk is None:
            self.chunk, self.start = next(self.chunks), 0
        length = len(self.chunk["y"])
        stop = min(length, self.start + batches * self.batch_size)
        taken = {name: column[self.start : stop] for name, column in self.chunk.items()}
        self.start = stop
        if stop == length:  # the chunk's memory goes once its last batches are copied
            self.chunk = None
        return taken


def overrides(method: FedAvg, hook: str) -> bool:
    return getattr(type(method), hook) is not getattr(FedAvg, hook)


class LaneLoss(nn.Module):
    """The method's `local_loss` as a module whose submodules are the model and the lanes'
    method modules (`state`), so that functional_call runs it with one lane's weights and
    state; `template` is the method instance whose own code runs, its attributes pointed at
    that lane's state for the call."""

    def __init__(self, model: Net, state: LaneState):
        super().__init__()
        self.model, self.state = model, state
        self.template: FedAvg | None = None
        self.leaves: dict = {}

    def use(self, method: FedAvg, snapshot: Snapshot) -> None:
        self.template = copy.copy(method)
        vars(self.template).update(snapshot.attributes)
        self.leaves = snapshot.leaves

    def forward(
        self, x: torch.Tensor, y: torch.Tensor, tensors: dict[str, torch.Tensor], inputs: dict[str, torch.Tensor]
    ) -> torch.Tensor:
        saved = dict(vars(self.template))
        self.state.assign(self.template, tensors, self.leaves)
        try:
            return self.template.local_loss(self.model, x, y, None, **inputs)
        finally:  # no lane's (vmapped) state outlives the call
            vars(self.template).clear()
            vars(self.template).update(saved)


class CaptureFailed(RuntimeError):
    """The batched step could not be recorded into a CUDA graph (torch's error is its cause):
    it may still train without graphs (trainer.cuda_graphs=false)."""


class BatchedClients:
    """Trains up to `lanes` (run, client) pairs at once (fewer where they would not fit:
    `lanes_that_fit`, then `self.lanes`); `train` takes any number, a step's worth at a time.
    `federation`: any of the runs' (the batch's shape, dtype and device)."""

    def __init__(self, model: Net, federation: Federation, cfg: RunConfig, lanes: int):
        self.model, self.cfg = model, cfg
        lanes = lanes_that_fit(model, lanes)
        self.device = federation.device
        # one stack per entry of the model's state (parameters, and buffers: BatchNorm's running
        # statistics), in a state dict's order; the dicts as the step passes them, built once
        self.stacks = {
            f"model.{name}": t.detach().unsqueeze(0).repeat(lanes, *[1] * t.dim())
            for name, t in model.state_dict(keep_vars=True).items()
        }
        parameters = {f"model.{name}" for name, _ in model.named_parameters()}
        self.named_params = {name: t for name, t in self.stacks.items() if name in parameters}
        self.named_buffers = {name: t for name, t in self.stacks.items() if name not in parameters}
        self.names = list(self.named_params)
        self.optimizer = StackedSGD(list(self.named_params.values()), cfg.local)
        # the parameters' stacks are the optimizer's, views into its one flat tensor
        self.named_params = dict(zip(self.names, self.optimizer.params))
        self.stacks.update(self.named_params)
        self.params = self.optimizer.params
        sample = federation.augmenter.normalize(federation.train_x[:1])  # dtype and layout of a batch
        batch = cfg.local.batch_size
        self.x = torch.zeros(lanes, batch, *sample.shape[1:], dtype=sample.dtype, device=self.device)
        self.y = torch.zeros(lanes, batch, dtype=federation.train_y.dtype, device=self.device)
        self.sizes = torch.zeros(lanes, dtype=torch.long, device=self.device)  # this step's batch sizes
        self.inputs: dict[str, torch.Tensor] = {}  # the method's step_inputs, (lanes, batch, ...) each (arrange_inputs)
        self.window: dict[str, torch.Tensor] = {}  # the steps' columns laid out ahead, (lanes, steps, batch, ...)
        self.rows_on_device: dict[bytes, torch.Tensor] = {}  # short-batch rows (device_rows)
        self.loss_sums = torch.zeros(lanes, device=self.device)
        self.positions = torch.arange(batch, device=self.device)
        self.state = LaneState(lanes, self.device)
        self.loss = LaneLoss(model, self.state)

        def per_sample_loss(params, buffers, state_params, tensors, inputs, x, y, weight):  # buffers: none
            def call(xi, yi, row):  # one sample, with its row of each step input
                row = {name: value[None] for name, value in row.items()}
                return functional_call(self.loss, {**params, **state_params}, (xi[None], yi[None], tensors, row))

            return (vmap(call)(x, y, inputs) * weight).sum()

        def whole_batch_loss(params, buffers, state_params, tensors, inputs, x, y):
            # BatchNorm updates the lane's `buffers` in place (vmap writes into their stacks)
            return functional_call(self.loss, {**params, **buffers, **state_params}, (x, y, tensors, inputs))

        self.whole_batches = uses_batch_statistics(model)
        self.loss_and_grads = vmap(grad_and_value(whole_batch_loss if self.whole_batches else per_sample_loss))
        self.use_graph = self.device.type == "cuda" and cfg.trainer.cuda_graphs
        self.graph, self.graph_key, self.graph_pool = None, None, None

    @property
    def lanes(self) -> int:
        return len(self.sizes)

    def autocast(self):
        # cache_enabled=False: autocast's weight cache cannot live across CUDA graph replays
        return torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.cfg.trainer.amp, cache_enabled=False)

    def step(self) -> None:
        """One SGD step of every lane with a batch in self.x / self.y / self.sizes (with batch
        statistics: a full batch; `step_rows` takes the shorter ones); no host synchronisation,
        so that it can be captured in a CUDA graph."""
        if self.whole_batches:
            batch = (self.x, self.y)
        else:
            weight = (self.positions < self.sizes[:, None]).to(self.params[0].dtype)
            batch = (self.x, self.y, weight / self.sizes.clamp(min=1)[:, None].to(weight.dtype))
        buffers = {name: b.clone() for name, b in self.named_buffers.items()}  # kept below for active lanes only
        with self.autocast():
            grads, losses = self.loss_and_grads(
                self.named_params, buffers, self.state.parameters_by_name, self.state.tensor_stacks, self.inputs, *batch
            )
        self.optimizer.step([grads[name] for name in self.names])  # the lanes take_step selected
        # one sample at a time, a lane without a batch has weights 0 and so a loss of 0; a whole batch
        # at a time, an inactive lane computed a loss on its stale or short batch (step_rows counts the latter)
        losses = losses.detach().float()
        if self.whole_batches:
            active = self.active(self.sizes)
            for stack, updated in zip(self.named_buffers.values(), buffers.values()):
                stack.copy_(torch.where(view_per_client(active, stack), updated, stack))
            losses = torch.where(active, losses, 0.0)
        self.loss_sums += losses

    def active(self, sizes: np.ndarray | torch.Tensor) -> np.ndarray | torch.Tensor:
        """The lanes `step` updates, from their batch sizes (on the host or the device): with batch
        statistics those with a full batch, else those with any."""
        return sizes == self.cfg.local.batch_size if self.whole_batches else sizes > 0

    def step_rows(self, host_rows: np.ndarray, size: int) -> None:
        """One SGD step of the lanes `rows` alone, on the first `size` samples of their batches:
        a shorter last batch of a model with batch statistics, which BatchNorm must take from
        those samples only, so it goes through at its own shape (eagerly: clients' last batches
        have about as many sizes as there are clients)."""
        rows = self.device_rows(host_rows)

        def of_rows(stacks: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
            return {name: t[rows] for name, t in stacks.items()}

        buffers = of_rows(self.named_buffers)
        with self.autocast():
            grads, losses = self.loss_and_grads(
                of_rows(self.named_params),
                buffers,
                of_rows(self.state.parameters_by_name),
                of_rows(self.state.tensor_stacks),
                {name: t[rows, :size] for name, t in self.inputs.items()},
                self.x[rows, :size],
                self.y[rows, :size],
            )
        for stack, updated in zip(self.named_buffers.values(), buffers.values()):
            stack.index_copy_(0, rows, updated)
        self.optimizer.step_rows(rows, [grads[name] for name in self.names], ("rows", host_rows.tobytes()))
        self.loss_sums[rows] += losses.detach().float()

    def take_step(self, sizes: np.ndarray) -> None:
        """One step of every lane, `sizes` its batch's (0: none; self.sizes on the host). With
        batch statistics, the lanes with a full batch step together (the captured step) and
        those with a shorter last batch step apart, a step per size (`step_rows`)."""
        full = self.cfg.local.batch_size
        if not self.whole_batches or (sizes == full).any():
            self.optimizer.select(self.active(sizes).tobytes(), lambda: self.active(self.sizes))
            if self.graph is not None:
                self.graph.replay()
            else:
                self.step()
        if self.whole_batches:
            for size in np.unique(sizes[(sizes > 0) & (sizes < full)]):
                self.step_rows(np.flatnonzero(sizes == size), int(size))

    def device_rows(self, rows: np.ndarray) -> torch.Tensor:
        """`rows` as an index on the device, copied there once: a copy from the host waits for
        the GPU's queue, and the same few sets of short-batch rows come back every epoch."""
        key = rows.tobytes()
        if key not in self.rows_on_device:
            self.rows_on_device[key] = torch.as_tensor(rows, device=self.device)
        return self.rows_on_device[key]

    def capture(self) -> None:
        """Record `step` into a CUDA graph. Warm-up steps run with every lane inactive, which
        changes no weight, momentum, running statistic or loss."""
        self.graph = None
        self.sizes.zero_()
        self.optimizer.select(
            self.active(np.zeros(self.lanes, dtype=np.int64)).tobytes(), lambda: self.active(self.sizes)
        )
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            for _ in range(2):
                self.step()
        torch.cuda.current_stream(self.device).wait_stream(side)
        self.graph_pool = self.graph_pool or torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph, pool=self.graph_pool, stream=side):
                self.step()
        except RuntimeError as exc:  # its own type: a GPU session's gate tells it from a wrong step
            # (CUDA's errors are RuntimeErrors; a deadline's OutOfTime, raised by a SIGTERM's handler
            # mid-capture, is no failure to capture and goes on as it is)
            raise CaptureFailed(f"the batched step could not be captured in a CUDA graph: {exc}") from exc
        self.graph = graph

    def schedule(self, lanes: list[Lane], taking: list[int]) -> np.ndarray:
        """(steps, lanes) batch sizes: lane c's epochs of `num_batches` each, then zeros; zeros
        throughout for lanes not in `taking` (they train in another pass)."""
        batch = self.cfg.local.batch_size
        per_lane = [[] for _ in lanes]
        for c in taking:
            length, count = lanes[c].client.epoch_length(batch), lanes[c].client.num_batches(batch)
            per_lane[c] = [min(batch, length - batch * i) for i in range(count)] * lanes[c].cfg.local.epochs
        table = np.zeros((max(map(len, per_lane), default=0), self.lanes), dtype=np.int64)
        for c, sizes in enumerate(per_lane):
            table[: len(sizes), c] = sizes
        return table

    def train(self, lanes: list[Lane]) -> list[ClientUpdate | Diverged]:
        """Local training of these lanes from their runs' global weights, in passes of
        `self.lanes`: for each, the update `shared.training.clients.train_client` gives up to
        floating-point rounding, or Diverged where its weights became non-finite."""
        return [
            update
            for start in range(0, len(lanes), self.lanes)
            for update in self.train_pass(lanes[start : start + self.lanes])
        ]

    def train_pass(self, lanes: list[Lane]) -> list[ClientUpdate | Diverged]:
        """`train` of up to `self.lanes` lanes, in one batched step."""
        self.model.train()
        self.load_globals(lanes)
        snapshots = self.start_clients(lanes)
        self.optimizer.reset()
        self.loss_sums.zero_()
        by_path: dict[tuple, list[int]] = {}
        for c, snapshot in enumerate(snapshots):
            by_path.setdefault(snapshot.path, []).append(c)
        for taking in by_path.values():  # one pass, nearly always
            first = snapshots[taking[0]]
            self.loss.use(lanes[taking[0]].method, first)
            if self.arrange_inputs(lanes[taking[0]]):
                self.graph = None
            self.run_steps(lanes, taking, (first.path, shared_floats(first, self.state.stacked_floats)))
        return self.finish_clients(lanes)

    @torch.no_grad()
    def load_globals(self, lanes: list[Lane]) -> None:
        """Each lane's weights and buffers from its run's global model, one copy per run's lanes."""
        start = 0
        for model, run_lanes in groupby(lanes, key=lambda s: s.global_model):
            rows = slice(start, start + len(list(run_lanes)))
            state = model.state_dict()
            for name, stack in self.stacks.items():
                stack[rows].copy_(state[name.removeprefix("model.")].expand_as(stack[rows]))
            start = rows.stop

    def start_clients(self, lanes: list[Lane]) -> list[Snapshot]:
        """Each lane's `start_client` on a model holding its run's global weights, and the
        method state it leaves; a run without the hook shares one snapshot among its lanes."""
        snapshots = []
        for lane in lanes:
            if overrides(lane.method, "start_client"):
                self.model.load_state_dict(lane.global_model.state_dict())
                lane.method.start_client(lane.client, self.model)
            elif snapshots and lanes[len(snapshots) - 1].method is lane.method:
                snapshots.append(snapshots[-1])
                continue
            snapshots.append(take_snapshot(lane.method))
        floats = {k for k, (kind, _) in snapshots[0].leaves.items() if kind == "float"}
        differ = {k for k in floats if len({s.leaves[k][1] for s in snapshots if k in s.leaves}) > 1}
        if self.state.arrange(snapshots[0], differ):
            self.graph = None
        start = 0
        for _, same in groupby(snapshots, key=id):
            same = list(same)
            rows = slice(start, start + len(same))
            self.state.fill(rows, same[0])
            start = rows.stop
        return snapshots

    def run_steps(self, lanes: list[Lane], taking: list[int], constants: tuple) -> None:
        """Every step of the lanes `taking`; `constants`: what a captured step holds fixed
        besides the layout of its buffers (the template's code path and shared floats)."""
        if self.use_graph and (self.graph is None or self.graph_key != constants):
            self.capture()
            self.graph_key = constants
        table = self.schedule(lanes, taking)
        table_on_device = torch.as_tensor(table, device=self.device)
        feeds = [
            LaneFeed(lane, self.cfg.local.batch_size, self.device) if c in taking else None
            for c, lane in enumerate(lanes)
        ]
        steps_per_window = self.window_steps(len(table))
        statics = [(static, self.window[name]) for name, static in self.columns.items()]
        for first in range(0, len(table), steps_per_window):
            window = table[first : first + steps_per_window]
            self.fill_window(feeds, window)
            for i in range(len(window)):  # one copy of all lanes' batches a step, into the static buffers
                for static, laid_out in statics:
                    static.copy_(laid_out[:, i])
                self.sizes.copy_(table_on_device[first + i])
                self.take_step(window[i])

    @property
    def columns(self) -> dict[str, torch.Tensor]:
        """The static buffers a step reads its batches from: x, y and the method's step inputs."""
        return {"x": self.x, "y": self.y, **self.inputs}

    def arrange_inputs(self, lane: Lane) -> bool:
        """Buffers for a pass's step inputs, shaped as the method gives them for a full batch
        (drawn here from a throwaway generator); True if their layout changed."""
        sample = lane.method.step_inputs(lane.client, self.cfg.local.batch_size, torch.Generator(self.device))
        layout = {name: (value.shape, value.dtype) for name, value in sample.items()}
        if layout == {name: (value.shape[1:], value.dtype) for name, value in self.inputs.items()}:
            return False
        self.inputs = {name: value.new_zeros(self.lanes, *value.shape) for name, value in sample.items()}
        return True

    def window_steps(self, steps: int) -> int:
        """Steps laid out at once: the round's, or as many as WINDOW_VALUES input values hold;
        the window's buffers grow to that and stay (a step reads its rows in place)."""
        columns = self.columns
        window = max(1, min(steps, WINDOW_VALUES // sum(t.numel() for t in columns.values())))
        if any(
            name not in self.window or self.window[name].shape[1] < window or self.window[name].shape[2:] != t.shape[1:]
            for name, t in columns.items()
        ):
            # padding: finite, weighted 0
            self.window = {name: t.new_zeros(self.lanes, window, *t.shape[1:]) for name, t in columns.items()}
        return window

    def fill_window(self, feeds: list[LaneFeed | None], sizes: np.ndarray) -> None:
        """Each lane's batches of these steps (rows of the schedule `sizes`) into its rows of
        the window, a run of whole batches (one copy, short last batch and all) at a time."""
        batch = self.cfg.local.batch_size
        # (lanes, window * batch, ...): a lane's batches end to end
        rows = {name: self.window[name].flatten(1, 2) for name in self.columns}
        for c, feed in enumerate(feeds):
            done, steps = 0, int(np.count_nonzero(sizes[:, c]))  # a lane's steps come first, then zeros
            while done < steps:
                taken = feed.take(steps - done)
                length = len(taken["y"])
                for name, column in taken.items():
                    rows[name][c, done * batch : done * batch + length].copy_(column)
                done += -(-length // batch)

    def finish_clients(self, lanes: list[Lane]) -> list[ClientUpdate | Diverged]:
        steps = [lane.client.num_batches(self.cfg.local.batch_size) * lane.cfg.local.epochs for lane in lanes]
        floating = [t for t in self.stacks.values() if t.is_floating_point()]
        finite = torch.stack([t.reshape(len(t), -1).isfinite().all(1) for t in floating]).all(0).tolist()
        loss_sums = self.loss_sums.tolist()
        # one copy of each stack, then a view per lane: the stacks train the next lanes
        per_lane = zip(*[t[: len(lanes)].clone().unbind() for t in self.stacks.values()])
        keys = [name.removeprefix("model.") for name in self.stacks]
        results = []
        for c, (lane, tensors) in enumerate(zip(lanes, per_lane)):
            if not finite[c]:
                results.append(Diverged.client(lane.client.id, lane.round))
                continue
            state = dict(zip(keys, tensors))
            update = ClientUpdate(
                lane.client.id, state, lane.client.num_samples, steps[c], loss_sums[c] / max(steps[c], 1)
            )
            if overrides(lane.method, "finish_client"):
                self.model.load_state_dict(state)
                lane.method.finish_client(lane.client, self.model, update)
            results.append(update)
        return results
