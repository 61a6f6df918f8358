"""What a carried run's files cost to check, and what they may hold where plain values belong:
a checkpoint whose pickle names one list many times (checked once a list), a stride-0 view
that expands a few bytes into gigabytes (or is named many times), a tensor where a config's
identity or a round's number belongs, a history that encodes far longer than metrics.jsonl,
metrics.jsonl not ended by a newline (its rounds counted otherwise when restored), and a config
whose model cannot be built (a projection of 2^62 features) met while the state's headers are
sized. Each but the first is refused in one line naming its run, quickly, and the state's other
runs are imported."""

import dataclasses
import io
import time

import pytest
import torch

from shared.config.schema import identity, run_id
from tests.campaign.carried_states import config_yaml, history, jsonl, model_state, partition_csv, progress_files
from tests.campaign.test_campaign_trust import FEDPROX, OTHER, PROX, SHOT, crafted, err_lines, import_crafted, set_run

SECONDS = 20  # each case is checked in about a second; walked as the old checks walked it, in minutes or never


def saved(state) -> bytes:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.getvalue()


def with_checkpoint(records=None, **changes) -> dict[str, bytes]:
    """Run PROX's files in progress (one round), its checkpoint's values changed."""
    records = history(FEDPROX, 1) if records is None else records
    state = {
        "identity": identity(FEDPROX),
        "history": records,
        "global": model_state(FEDPROX),
        "method": {},
        "elapsed": 3.0,
        **changes,
    }
    return {**progress_files(FEDPROX), "checkpoint.pt": saved(state)}


def costly_runs():
    """name -> run PROX's files as the forged state carries them."""
    inner = [0.0] * 10_000
    record = history(FEDPROX, 1)[0]
    yield "a stride-0 view of 2^26 elements", with_checkpoint(method={"m": torch.zeros(1).expand(2**26)})
    yield "a view named 1,000 times", with_checkpoint(method={"m": [torch.zeros(1).expand(2**16)] * 1000})
    chain, links = [], []
    for _ in range(100):  # 100 deep, each link also named at the top: first reached 2 deep
        links.append(chain)
        chain.append([])
        chain = chain[0]
    yield "a list 100 deep, its links named at the top too", with_checkpoint(method={"m": links[::-1]})
    own = identity(FEDPROX)
    yield (
        "a tensor in its identity",
        with_checkpoint(identity={**own, "federation": {**own["federation"], "rounds": torch.zeros(2)}}),
    )
    yield "a tensor as a round's number", with_checkpoint(records=[{**record, "round": torch.ones(2)}])
    yield "a history of one list named 10,000 times", with_checkpoint(records=[{**record, "x": [inner] * 10_000}])
    files = progress_files(FEDPROX)
    yield "metrics.jsonl without its last newline", {**files, "metrics.jsonl": files["metrics.jsonl"].rstrip(b"\n")}
    yield "metrics.jsonl in carriage returns", {**files, "metrics.jsonl": files["metrics.jsonl"].replace(b"\n", b"\r")}


COSTLY = dict(costly_runs())


@pytest.mark.parametrize("case", COSTLY)
def test_a_checkpoint_that_costs_more_than_its_bytes_is_refused_alone_in_one_line(
    genuine, tmp_path, monkeypatch, capsys, case
):
    state = crafted(genuine)
    set_run(state, "progress", PROX, COSTLY[case])
    started = time.monotonic()
    code, root, _ = import_crafted(state, tmp_path, monkeypatch)
    assert time.monotonic() - started < SECONDS
    err = [line for line in err_lines(capsys) if not line.startswith("note: ")]
    assert code == 2 and len(err) == 1 and err[0].startswith(f"error: run {PROX} (progress) is left out"), err
    assert not (root / "results" / "runs" / PROX / "checkpoint.pt").exists()
    assert {p.parent.name for p in (root / "results" / "shipped" / "runs").glob("*/metrics.json")} == {SHOT, OTHER}


def test_a_method_state_naming_one_list_10000_times_is_checked_once_a_list(genuine, tmp_path, monkeypatch, capsys):
    """10^8 values as the pickle names them, 10^4 as it holds them: checked in the time of the
    latter (the old walk took minutes), and imported as the values it holds."""
    state = crafted(genuine)
    set_run(state, "progress", PROX, with_checkpoint(method={"m": [[0.0] * 10_000] * 10_000}))
    started = time.monotonic()
    code, root, _ = import_crafted(state, tmp_path, monkeypatch)
    assert time.monotonic() - started < SECONDS
    assert code == 0 and (root / "results" / "runs" / PROX / "checkpoint.pt").is_file(), err_lines(capsys)


def test_a_config_whose_model_cannot_be_built_is_refused_alone_while_headers_are_sized(
    genuine, tmp_path, monkeypatch, capsys
):
    """A run in progress whose config asks for a projection of 2^62 features (building it on the
    meta device overflows) before its checkpoint's header: its run refused in one line."""
    huge = dataclasses.replace(FEDPROX, model=dataclasses.replace(FEDPROX.model, projection_dim=2**62))
    rid = run_id(huge)
    state = crafted(genuine)
    files = {
        "config.yaml": config_yaml(huge),
        "partition.csv": partition_csv(huge),
        "metrics.jsonl": jsonl(history(huge, 1)),
        "checkpoint.pt": b"x",
    }
    state.members += [(f"progress/{rid}/{name}", data) for name, data in files.items()]
    code, root, _ = import_crafted(state, tmp_path, monkeypatch)
    err = [line for line in err_lines(capsys) if not line.startswith("note: ")]
    assert code == 2 and len(err) == 1 and err[0].startswith(f"error: run {rid} (progress) is left out"), err
    assert (root / "results" / "runs" / PROX / "checkpoint.pt").is_file()
