"""A run's tensor files: checkpoint.pt, model.pt and the per-client state files, written
atomically and read with `weights_only=True` (tensors and plain values only: a planted pickle
cannot run code).

Per-client state is what a method keeps per client across rounds (MOON's previous local models,
FedCurv's Fisher information, SCAFFOLD's control variates), as a `ClientStates`.

Where it lives: in host memory, pinned where CUDA is (a client's state then moves to the GPU at
copy speed, as the client starts training), not on the GPU: for 100 clients of ResNet-50 it is
10-20 GB, more than the training needs, and it grows with every client that has trained.

How it is checkpointed: each client's tensors in a file of their own in the run directory's
`client_state/`, written only when that client's state changed (the round's sampled clients),
and named by the round that wrote it; the round's checkpoint holds the names alone (`persist`).
A file is removed once no checkpoint names it (`save_checkpoint`), so a kill between
writing a client's new file and the checkpoint that names it resumes from the files the last
checkpoint names, the same tensors bit for bit (`restore`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterator, Union

import torch

from shared.runs.files import CLIENT_STATE, CLIENT_STATE_MANIFEST, client_state_name, write_atomically


def save_tensors(obj, path: Path) -> None:
    write_atomically(path, lambda tmp: save_to(obj, tmp))


def save_to(obj, tmp: Path) -> None:
    """torch.save through a Python file whose failed write is kept: torch reports it as a
    RuntimeError, and a full disk must say so (OSError with its errno)."""
    with open(tmp, "wb") as f:
        writer = KeptWriteError(f)
        try:
            torch.save(obj, writer)
            f.flush()
        except RuntimeError:
            if writer.error is not None:
                raise writer.error from None
            raise


class KeptWriteError:
    """A binary file whose first failed write is kept in `error`."""

    def __init__(self, file):
        self.file, self.error = file, None

    def write(self, data) -> int:
        try:
            return self.file.write(data)
        except OSError as exc:
            self.error = self.error or exc
            raise

    def __getattr__(self, name):
        return getattr(self.file, name)


def load_tensors(path: Path, device: torch.device | str = "cpu"):
    """torch.load of tensors and plain types only; anything else is refused."""
    return torch.load(path, map_location=device, weights_only=True)


def client_state_path(run_path: Path, name: str) -> Path:
    return Path(run_path) / CLIENT_STATE / name


def prune_client_states(run_path: Path, keep: set[str]) -> None:
    """Remove the per-client state files not in `keep` (and a kill's temporary files); with
    nothing to keep (a finished run), the folder too."""
    folder = Path(run_path) / CLIENT_STATE
    if not folder.is_dir():
        return
    for file in folder.iterdir():
        if file.name not in keep:
            file.unlink(missing_ok=True)
    if not keep:
        folder.rmdir()


def named_client_states(method_state: dict) -> set[str]:
    """The per-client state files a checkpoint's method state names (`persist`)."""
    return {
        file
        for value in method_state.values()
        if isinstance(value, dict) and CLIENT_STATE_MANIFEST in value
        for file in value[CLIENT_STATE_MANIFEST].values()
    }


Tensors = Union[list[torch.Tensor], dict[str, torch.Tensor]]  # one client's state


def each(value: Tensors, fn) -> Tensors:
    return {k: fn(v) for k, v in value.items()} if isinstance(value, dict) else [fn(v) for v in value]


def to_host(t: torch.Tensor) -> torch.Tensor:
    """A copy in host memory, pinned where CUDA is; the copy is complete when this returns."""
    host = torch.empty(t.shape, dtype=t.dtype, device="cpu", pin_memory=torch.cuda.is_available())
    return host.copy_(t.detach())


class ClientStates:
    """client id -> that client's tensors (a list, or a dict such as a state dict), kept on the
    host. `states[c] = tensors` stores a host copy; `states.on(c, device)` gives them on a device."""

    def __init__(self, name: str):
        self.name = name  # the files' prefix, one per kind of state of the method
        self.tensors: dict[int, Tensors] = {}
        self.files: dict[int, str] = {}  # client -> the file that holds its current state (once written)

    def __contains__(self, client: int) -> bool:
        return client in self.tensors

    def __iter__(self) -> Iterator[int]:
        return iter(self.tensors)

    def __len__(self) -> int:
        return len(self.tensors)

    def __getitem__(self, client: int) -> Tensors:
        return self.tensors[client]

    def __setitem__(self, client: int, value: Tensors) -> None:
        self.tensors[client] = each(value, to_host)
        self.files.pop(client, None)  # changed: written again at the next checkpoint

    def on(self, client: int, device: torch.device) -> Tensors:
        return each(self.tensors[client], lambda t: t.to(device, non_blocking=True))

    def save(self, run_path: Path, round: int) -> dict:
        """Write the clients whose state changed since the last save; the manifest a checkpoint keeps."""
        for client, value in self.tensors.items():
            if client not in self.files:
                name = client_state_name(self.name, client, round)
                save_tensors(value, client_state_path(run_path, name))
                self.files[client] = name
        return {CLIENT_STATE_MANIFEST: {client: self.files[client] for client in self.tensors}}

    @classmethod
    def from_saved(cls, name: str, saved) -> "ClientStates":
        """The tensors themselves, as a checkpoint written before per-client files held them."""
        if isinstance(saved, cls):
            return saved
        states = cls(name)
        for client, value in saved.items():
            states[client] = value
        return states


def persist(method_state: dict, run_path: Path, round: int) -> dict:
    """A method's state_dict for a checkpoint: each ClientStates in it as its manifest, after
    writing the clients whose state changed."""
    return {k: v.save(run_path, round) if isinstance(v, ClientStates) else v for k, v in method_state.items()}


def save_checkpoint(state: dict, path: Path, round: int) -> None:
    """The round's checkpoint (`state`, its method state among it) at `path`: the clients whose
    state changed first, to files of their own that the checkpoint names (`persist`), then the
    checkpoint, then only the files it names are kept (a kill before that resumes from the
    files the last checkpoint names)."""
    method = persist(state["method"], path.parent, round)
    save_tensors({**state, "method": method}, path)
    prune_client_states(path.parent, named_client_states(method))


def restore(persisted: dict, run_path: Path) -> dict:
    """A checkpoint's method state with each manifest read back into a ClientStates (named by its key)."""
    restored = {}
    for key, value in persisted.items():
        if isinstance(value, dict) and CLIENT_STATE_MANIFEST in value:
            states = ClientStates(key)
            for client, file in value[CLIENT_STATE_MANIFEST].items():
                states.tensors[client] = each(load_tensors(client_state_path(run_path, file)), to_host)
                states.files[client] = file
            value = states
        restored[key] = value
    return restored
