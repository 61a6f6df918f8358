"""`--set KEY=VALUE` of a campaign session: runtime keys only (config.RUNTIME_KEYS), which change
how runs train and not what they compute, so not their ids (a finished run stays finished).
A session's fallbacks are such keys: `trainer.cuda_graphs=false` (eager CUDA where a capture
fails), `trainer.deterministic=false`. Each run records the runtime settings it trained with
in its metrics.json (shared/training/trainer.py, `runtime_settings`)."""

from __future__ import annotations

from shared.config.dotted import deep_merge
from shared.config.reading import SHORTHANDS, parse_override
from shared.config.schema import RUNTIME_KEYS, ConfigError


def parse_settings(texts: list[str] | None) -> dict:
    """The nested overrides of --set KEY=VALUE ...; a key that is not a runtime key is refused
    in one line (it would change the runs' ids and train finished runs again)."""
    merged: dict = {}
    for text in texts or []:
        key = text.split("=", 1)[0]
        override = parse_override(text)
        if SHORTHANDS.get(key, key) not in RUNTIME_KEYS:
            raise ConfigError(
                f"--set {text}: {key} is not a runtime key ({', '.join(RUNTIME_KEYS)}); it would change the runs' ids"
            )
        merged = deep_merge(merged, override)
    return merged
