"""A figure's probe on a finished run (FedCAD's per-class forgetting, FedSSD's confusion matrices
after local training): the run's final global model set up as the run trained it, and one
client trained from it by any method, as a round's sampled client would be."""

from __future__ import annotations

import copy
from pathlib import Path

from shared.config.schema import RunConfig
from shared.data.federation import Federation
from shared.methods.registry import build_method
from shared.models.nets import Net
from shared.runs.tensor_files import load_tensors
from shared.training.clients import train_client
from shared.training.trainer import set_up


def final_model(cfg: RunConfig, run_dir: Path) -> tuple[Federation, Net]:
    """The run's federation and its final global model (model.pt), on the run's device with its
    numerics."""
    setup = set_up(cfg, train_clients=False)
    setup.global_model.load_state_dict(load_tensors(Path(run_dir) / "model.pt", setup.device))
    return setup.federation, setup.global_model


def trained_from(global_model: Net, federation: Federation, cfg: RunConfig, client: int, round: int) -> Net:
    """A copy of `global_model` after `client`'s local training (cfg's method, local.epochs) in
    round `round`, the method's server-side step for that round done from `global_model`."""
    method = build_method(cfg, federation)
    method.prepare_round(round, global_model)
    model = copy.deepcopy(global_model)
    train_client(method, federation.clients[client], model, cfg, round)
    return model
