"""How this machine trains the campaign's runs: each run's config with the device, the data
root, the clients per step and the runtime settings of `train`'s --set and --set-for (none of
which changes a run's id)."""

from __future__ import annotations

from shared.campaign import unit_sizing
from shared.campaign.gate_cases import run_settings
from shared.campaign.state_reading import CampaignError
from shared.config.dotted import deep_merge
from shared.config.schema import RunConfig, identity, run_id


def resolved(cfg: RunConfig, args) -> RunConfig:
    """`cfg` as `train`'s arguments have it train on this machine (`with_runtime`)."""
    return with_runtime(cfg, args.device, args.data_root, args.clients_per_step, settings_of(cfg, args))


def settings_of(cfg: RunConfig, args) -> dict:
    """The runtime settings of `cfg`'s run: --set's, then its method's --set-for
    (shared/campaign/gate_cases.py), then a CPU's defaults where those leave room (`cpu_defaults`)."""
    own = run_settings(getattr(args, "settings", None) or {}, getattr(args, "by_method", None) or {}, cfg)
    return cpu_defaults(args.device, args.clients_per_step, own)


def with_runtime(
    cfg: RunConfig, device: str, data_root: str | None, clients_per_step: int | None = 1, settings: dict | None = None
) -> RunConfig:
    """The config with this machine's device, data root and clients per step, and the runtime
    `settings` of --set (none changes the run id; clients_per_step > 1 asks for the batched
    step, and so for groups, on a CPU too; None: on CUDA a round's clients in one batched step,
    as a small model's step there costs its kernel launches more than its arithmetic, and
    elsewhere one after another)."""
    from shared.targets.configs import load_config

    if clients_per_step is None:
        clients_per_step = unit_sizing.clients_per_round(cfg) if on_cuda(device) else 1
    runtime = deep_merge(
        {
            "trainer": {"device": device, "clients_per_step": clients_per_step},
            **({"data_root": data_root} if data_root else {}),
        },
        settings or {},
    )
    resolved = load_config(None, deep_merge(identity(cfg), runtime))
    if run_id(resolved) != run_id(cfg):  # a runtime key that is part of the id would retrain finished runs
        raise CampaignError(
            f"--device {device}, --data-root {data_root} or --clients-per-step {clients_per_step} "
            f"changes run {run_id(cfg)}'s id"
        )
    return resolved


def clients_alone(cfg: RunConfig, args) -> bool:
    """--clients-per-step 1, or trainer.clients_per_step=1 by --set or the run's --set-for (a GPU
    session's safest settings): no client shares a batched step, nor a run, which a group on
    CUDA does at any clients_per_step."""
    trainer = settings_of(cfg, args).get("trainer", {})
    return trainer.get("clients_per_step", args.clients_per_step) == 1


def on_cuda(device: str) -> bool:
    """Whether trainer.device names CUDA (auto: where this machine has it), read by name: the
    device is checked where a run starts (shared/runs/numerics.py resolve_device)."""
    import torch

    return device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())


def cpu_defaults(device: str, clients_per_step: int | None, settings: dict) -> dict:
    """The runtime settings, on a CPU with as many clients at once in threads as torch has
    threads, one core each, unless --set or --clients-per-step asks for another way (threads
    go with neither batched clients nor compilation): a small model's operators use one core
    well and two poorly (benchmarks/README.md, the CPU campaign)."""
    import torch

    trainer = settings.get("trainer", {})
    asked = trainer.get("clients_per_step", clients_per_step) or 1
    if on_cuda(device) or asked > 1 or {"client_threads", "compile"} & set(trainer):
        return settings
    return deep_merge({"trainer": {"client_threads": torch.get_num_threads()}}, settings)
