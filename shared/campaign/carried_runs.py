"""The runs a campaign state carries, each checked before it ships or is restored.

A finished run ships into the tables reviewers read, and a run in progress replaces what this
machine trains from, so each is checked as if an adversary wrote it (shared/campaign/state_reading.py
has checked the file around them):

- a finished run: its config.yaml hashes to its run id, which config.yaml, metrics.json and
  its directory name alike (`check_identity`, as unpacking an archive checks it); it is one of
  the runs the state's targets need at its scale and on its data; its summary records a
  result, after the config's rounds (fewer only where it diverged or is suspect); every
  accuracy is finite and within [0, 100]; and its summary is what its history (metrics.jsonl)
  says, round by round;
- a run in progress: the same identity and target; its history one record per round, at most
  the config's rounds; its checkpoint loads as tensors and plain values only, fits the config,
  and holds that same history.

A run that fails is named in one line and left out; the others go on.
"""

from __future__ import annotations

import json
import math
import warnings
import zipfile

from shared.campaign.run_schema import partition_problem, records_problem, status_problem
from shared.campaign.run_schema import summary_problem as fields_problem
from shared.campaign.state_reading import MEMBER
from shared.config.schema import RunConfig
from shared.runs.files import (
    RunFilesError,
    check_identity,
    history_problem,
    is_final,
    is_number,
    named_run_id,
    summary_problem,
)
from shared.runs.metrics import rounds_to_target
from shared.runs.strict_text import MAX_DEPTH, each_once, strict_json
from shared.runs.transfer import Content, member_file

ACCURACY_KEYS = ("acc", "accs")  # a record's accuracies: global_acc, local_accs, per_class_acc, ...
ACCURACIES = ("final_acc", "best_acc", "global_acc", "local_acc", "per_class_acc", "domain_acc")
# what a summary repeats of its history (shared/runs/metrics.py `summarize`), by the record's key
REPEATED = {"eval_rounds": "round", "global_acc": "global_acc", "global_loss": "global_loss", "local_acc": "local_acc"}
# A round's record: some 650 bytes at 10 classes and 10 clients, some 6 kB at 200 classes and 100
# clients; a longer line is refused before it is parsed (parsed JSON takes up to 24 times its text)
MAX_RECORD_BYTES = 2**16
MAX_TORCH_RECORDS = 100_000  # a model's file: a record per tensor's storage
VIEW_BYTES = 4  # a model's file: its tensors' bytes, at most so many times its own (views share a storage)


def carried_runs(members: dict[str, bytes]) -> dict[tuple[str, str], dict[str, bytes]]:
    """(kind, run id) -> file -> bytes of a state's runs."""
    runs: dict[tuple[str, str], dict[str, bytes]] = {}
    for name, content in members.items():
        kind, rid, file = MEMBER.fullmatch(name).groups()
        runs.setdefault((kind, rid), {})[file] = content
    return runs


def trusted(
    members: dict[str, bytes], expected: dict[str, RunConfig], where: str
) -> tuple[dict[str, bytes], list[str]]:
    """The members of the runs that pass their checks, and one line for each run that does not.
    `expected`: run id -> config of the runs the state's targets need; `where`: what it is
    (scale, data) for the message."""
    kept, refused = {}, []
    for (kind, rid), files in sorted(carried_runs(members).items()):
        cfg = expected.get(rid)
        check = finished_problem if kind == "finished" else progress_problem
        try:
            problem = f"is not one of the runs its targets need {where}" if cfg is None else check(rid, files, cfg)
        except Exception as exc:  # any: what no check foresaw refuses the run, never the reading
            problem = f"its files could not be checked ({type(exc).__name__})"
        if problem:
            refused.append(f"run {rid} ({kind}) is left out of the state: {problem}")
            continue
        kept.update({f"{kind}/{rid}/{file}": content for file, content in files.items()})
    return kept, refused


def identity_problem(rid: str, files: dict[str, bytes]) -> str | None:
    """config.yaml there, naming the run and hashing to it; metrics.json, where there, naming it."""
    if "config.yaml" not in files:
        return "it has no config.yaml"
    small = {f"runs/{rid}/{name}": files[name] for name in ("config.yaml", "metrics.json") if name in files}
    try:
        check_identity(rid, small)
    except RunFilesError as exc:
        return str(exc).removeprefix(f"run {rid}: ")
    named = named_run_id(files["config.yaml"])
    return None if named == rid else "its config.yaml names no run id"


def history_of(files: dict[str, bytes], cfg: RunConfig) -> tuple[list | None, str | None]:
    """metrics.jsonl's records, and what is wrong with them (None: nothing)."""
    rounds = cfg.federation.rounds
    if "metrics.jsonl" not in files:
        return None, "it has no metrics.jsonl"
    text = files["metrics.jsonl"]
    if b"\r" in text or not text.endswith(b"\n") and text:  # as the writer writes it, and history_rounds counts
        return None, "metrics.jsonl: its records are not one a line, each ended by a newline"
    lines = text.split(b"\n")[:-1]
    if len(lines) > rounds:
        return None, f"metrics.jsonl: it holds {len(lines)} records for the config's {rounds} rounds"
    if any(len(line) > MAX_RECORD_BYTES for line in lines):
        return None, f"metrics.jsonl: it holds a record of more than {MAX_RECORD_BYTES // 1024} kB"
    try:
        history = [strict_json(line) for line in lines]
    except (ValueError, RecursionError):
        return None, "its metrics.jsonl is not one JSON record a line"
    problem = history_problem(history, rounds) or accuracy_problem(history) or records_problem(history, cfg)
    return history, (f"metrics.jsonl: {problem}" if problem else None)


def accuracy_problem(value, name: str = "") -> str | None:
    """An accuracy (a percentage) anywhere in `value` that is not finite or not within [0, 100];
    a value is an accuracy where its key, or the nearest key above it, ends in acc or accs."""
    if isinstance(value, dict):
        items = [(key if key.endswith(ACCURACY_KEYS) else name, item) for key, item in value.items()]
    elif isinstance(value, list):
        items = [(name, item) for item in value]
    else:
        bad = (
            name.endswith(ACCURACY_KEYS)
            and value is not None
            and (not is_number(value) or not math.isfinite(value) or not 0 <= value <= 100)
        )
        return f"an accuracy ({name}) of {str(value)[:20]}, not a number within [0, 100]" if bad else None
    return next(filter(None, (accuracy_problem(item, key) for key, item in items)), None)


def finished_problem(rid: str, files: dict[str, bytes], cfg: RunConfig) -> str | None:
    """Why a finished run may not ship (None: it may)."""
    if "metrics.json" not in files:
        return "it has no metrics.json"
    problem = identity_problem(rid, files)
    if problem:
        return problem
    try:
        summary = strict_json(files["metrics.json"])
    except (ValueError, RecursionError):
        return "its metrics.json is not JSON"
    problem = summary_problem(summary)
    if problem or not is_final(summary["status"]):
        return f"its metrics.json {problem or 'records no result (' + repr(summary['status'][:60]) + ')'}"
    history, problem = history_of(files, cfg)
    if problem:
        return problem
    problem = fields_problem(summary, cfg) or status_problem(summary["status"], history, cfg)
    if problem:
        return f"its metrics.json's {problem}"
    if "partition.csv" not in files:
        return "it has no partition.csv"
    problem = partition_problem(files.get("partition.csv", b""), cfg, summary.get("client_samples"))
    if problem:
        return f"its partition.csv {problem}"
    rounds = summary.get("rounds_completed")
    if rounds != len(history) or (
        len(history) != cfg.federation.rounds and summary["status"].split(":")[0] not in ("diverged", "suspect")
    ):
        return (
            f"it records {rounds} rounds and its history {len(history)}, of the config's "
            f"{cfg.federation.rounds}, with status {summary['status'][:40]!r}"
        )
    return accuracy_problem({key: summary.get(key) for key in ACCURACIES}) or summary_mismatch(summary, history, cfg)


def summary_mismatch(summary: dict, history: list[dict], cfg: RunConfig) -> str | None:
    """Where the summary says other than its history (as shared/runs/metrics.py summarizes it)."""
    evaluated = [h for h in history if "global_acc" in h]
    accs = [h["global_acc"] for h in evaluated]
    derived = {key: [h.get(field) for h in evaluated] for key, field in REPEATED.items()}
    derived.update(
        final_acc=accs[-1] if accs else None,
        best_acc=max(accs) if accs else None,
        per_class_acc=evaluated[-1].get("per_class_acc") if evaluated else None,
        domain_acc=evaluated[-1].get("domain_acc") if evaluated else None,
        rounds_to_target={f"{t:g}": rounds_to_target(derived["eval_rounds"], accs, t) for t in cfg.eval.target_acc},
    )
    for key, value in derived.items():
        if json.dumps(summary.get(key)) != json.dumps(value):  # as JSON: NaN and infinity compare too
            return f"its metrics.json's {key} is not what its metrics.jsonl records"
    return None


def progress_problem(rid: str, files: dict[str, bytes], cfg: RunConfig) -> str | None:
    """Why a run in progress may not be restored (None: it may)."""
    if "checkpoint.pt" not in files:
        return "it has no checkpoint.pt"
    problem = identity_problem(rid, files)
    if problem:
        return problem
    history, problem = history_of(files, cfg)
    problem = problem or partition_problem(files.get("partition.csv", b""), cfg, None)
    if problem:
        return problem if problem.startswith("metrics.jsonl") else f"its partition.csv {problem}"
    return checkpoint_mismatch(files["checkpoint.pt"], cfg, history) or client_states_problem(files)


def loaded(content: Content):
    """A model's file (bytes, or staged on disk) loaded as tensors and plain values only
    (torch.load with weights_only=True), or why it is not: (value, None) or (None, why)."""
    import pickle

    from shared.runs.tensor_files import load_tensors

    try:
        with warnings.catch_warnings(), member_file(content) as file:  # torch's warning: the refusal is the line
            problem = torch_file_problem(file)
            if problem:
                return None, problem
            size = file.seek(0, 2)
            file.seek(0)
            warnings.simplefilter("ignore")
            state = load_tensors(file)
    except pickle.UnpicklingError:
        return None, "holds something other than tensors and plain values (refused unread)"
    except (EOFError, RuntimeError, ValueError, TypeError, KeyError, OSError) as exc:
        return None, f"is unreadable ({type(exc).__name__})"
    problem = values_problem(state, size)  # before any checker walks it
    return (None, problem) if problem else (state, None)


def values_problem(state, size: int) -> str | None:
    """Why a loaded file's values would take more to check than its `size` in bytes (None: they
    would not). A pickle names an object it holds already in two bytes, and torch saves a view
    as its storage with strides: so each list, mapping and tensor is looked into once (again only
    where a longer path reaches it, so that nesting is measured on every path, at most MAX_DEPTH
    times), no deeper than MAX_DEPTH (a list within itself is as deep as that), and a tensor may
    hold no more elements than its storage (a stride-0 view of a few bytes would be gigabytes to
    check), nor the distinct tensors more than VIEW_BYTES times the file's bytes (views of one
    storage)."""
    import torch

    depths, stack, tensor_bytes = {}, [(state, 1)], 0
    while stack:
        item, depth = stack.pop()
        if not isinstance(item, (dict, list, tuple, torch.Tensor)) or depths.get(id(item), 0) >= depth:
            continue
        first = id(item) not in depths
        depths[id(item)] = depth
        if isinstance(item, torch.Tensor):
            if not first:
                continue
            if item.layout != torch.strided or item.device.type != "cpu" or item.is_quantized:
                return "holds a tensor that is not a dense one on the CPU"
            nbytes = item.numel() * item.element_size()
            if nbytes > item.untyped_storage().nbytes():
                return "holds a tensor of more elements than its storage (a view that repeats it)"
            tensor_bytes += nbytes
            if tensor_bytes > VIEW_BYTES * size:
                return "holds tensors of many times its size (views of one storage)"
        elif depth > MAX_DEPTH:
            return f"holds values nested more than {MAX_DEPTH} deep"
        else:
            stack.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return None


def torch_file_problem(file) -> str | None:
    """Why a model's file is not as torch.save writes it (None: it is): a zip of stored records,
    none compressed and none read twice (their sizes add up to at most the file's), so that
    loading it takes no more memory than the file's size (torch.load would inflate a compressed
    record of a few kB into gigabytes, and read a record that many entries name once for each).
    `file` is left at its start."""
    try:
        size = file.seek(0, 2)
        with zipfile.ZipFile(file) as archive:  # it reads the central directory from the end
            records = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError):
        return "is not a file torch.save writes (a zip of records)"
    finally:
        file.seek(0)
    if len(records) > MAX_TORCH_RECORDS or any(
        r.compress_type != zipfile.ZIP_STORED or r.file_size != r.compress_size for r in records
    ):
        return "holds compressed records or too many of them (torch.save writes neither)"
    if sum(r.file_size for r in records) > size:
        return "names more bytes in its records than it holds (records read more than once)"
    return None


def checkpoint_mismatch(checkpoint: Content, cfg: RunConfig, history: list[dict]) -> str | None:
    """A checkpoint that loads as tensors and plain values, fits the config and holds the history."""
    from shared.runs.directory import checkpoint_problem

    state, why = loaded(checkpoint)
    if why:
        return f"its checkpoint {why}"
    problem = checkpoint_problem(state, cfg) or tensors_problem(state, cfg)
    if problem:
        return f"its checkpoint {problem}"
    return None if same_json(state["history"], history) else "its metrics.jsonl is not the history its checkpoint holds"


def same_json(value, reference) -> bool:
    """Whether `value` is written in JSON as `reference` is (keys sorted: NaN and infinity
    compare too), `value` encoded no further than `reference`'s length: a value that names one
    list many times costs no more than the reference."""
    expected = json.dumps(reference, sort_keys=True)
    chunks, length = [], 0
    try:
        for chunk in json.JSONEncoder(sort_keys=True).iterencode(value):
            length += len(chunk)
            if length > len(expected):
                return False
            chunks.append(chunk)
    except (TypeError, ValueError):  # a tensor, a key that is not a string, a list within itself
        return False
    return "".join(chunks) == expected


def tensors_problem(state: dict, cfg: RunConfig) -> str | None:
    """Every tensor finite, and the global model's the config's model's, name by name and shape
    by shape (where its data does not decide them: text models, image folders)."""
    from shared.models.registry import known_state_shapes

    if not all_finite(state):
        return "holds a tensor that is not finite"
    shapes = known_state_shapes(cfg)
    model = {name: tuple(getattr(t, "shape", ())) for name, t in state["global"].items()}
    if shapes is not None and model != shapes:
        return "does not fit the config's model (its tensors' names or shapes differ)"
    return None


def model_problem(model: Content, cfg: RunConfig) -> str | None:
    """A finished run's model.pt checked as a checkpoint's model is: tensors only, loaded with
    weights_only=True, each finite, named and shaped as the config's model's (where its data
    does not decide them)."""
    import torch

    state, why = loaded(model)
    if why:
        return f"its model.pt {why}"
    if not isinstance(state, dict) or not all(isinstance(t, torch.Tensor) for t in state.values()):
        return "its model.pt is not a model's tensors by name"
    problem = tensors_problem({"global": state}, cfg)
    return f"its model.pt {problem}" if problem else None


def all_finite(value) -> bool:
    """Whether every tensor and number in a loaded checkpoint (nested dicts and lists) is
    finite; each object looked into once (`each_once`)."""
    import torch

    def finite(item) -> bool:
        if isinstance(item, float):
            return math.isfinite(item)
        return not isinstance(item, torch.Tensor) or not item.is_floating_point() or bool(torch.isfinite(item).all())

    return all(finite(item) for item in each_once(value))


def client_states_problem(files: dict[str, bytes]) -> str | None:
    """Each per-client state file tensors and plain values only, every tensor finite."""
    for name in sorted(file for file in files if file.startswith("client_state/")):
        state, why = loaded(files[name])
        if why:
            return f"its {name} {why}"
        if not all_finite(state):
            return f"its {name} holds a tensor that is not finite"
    return None
