"""Run configuration: a typed tree of dataclasses. Reading one from YAML and `key=value`
overrides is shared/config/reading.py's; resolving and checking it, shared/targets/configs.py's.

A run is identified by its fully resolved config (every default filled in, the method's
hyperparameters included), so the same experiment requested by two tables hashes to the same
run id. Keys that change where or how fast a run executes, but not its result, are listed in
`RUNTIME_KEYS` and left out of the id.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import reprlib
import types
import typing
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from shared.config.dotted import flatten, nested


class ConfigError(ValueError):
    """A configuration that cannot run; raised before any data is loaded or model trained."""


def excerpt(value: Any) -> str:
    """A short repr of a value for an error message: a huge or deeply nested value (a YAML
    alias bomb) is cut, so that the message stays one short line."""
    return _EXCERPT.repr(value)


_EXCERPT = reprlib.Repr()
_EXCERPT.maxlevel, _EXCERPT.maxstring, _EXCERPT.maxother, _EXCERPT.maxlong = 2, 40, 40, 40
_EXCERPT.maxdict = _EXCERPT.maxlist = _EXCERPT.maxtuple = _EXCERPT.maxset = 4


INT64 = (-(2**63), 2**63 - 1)  # what numpy, torch and JSON readers elsewhere take as an integer


def check(ok: bool, message: str) -> None:
    """A config check: ConfigError(message) unless ok."""
    if not ok:
        raise ConfigError(message)


@dataclass(frozen=True)
class Range:
    """The valid values of a number, declared with its field (`mu: NonNegative = 0.01`) and
    checked as the config is read; non-finite values never lie in a range."""

    low: float = -math.inf
    high: float = math.inf
    low_open: bool = False
    high_open: bool = False

    def __contains__(self, value: float) -> bool:
        above = self.low < value if self.low_open else self.low <= value
        below = value < self.high if self.high_open else value <= self.high
        return math.isfinite(value) and above and below

    def __str__(self) -> str:
        low, high = bound(self.low), bound(self.high)
        if math.isinf(self.high):
            return f"must be {'>' if self.low_open else '>='} {low}"
        return f"must lie in {'(' if self.low_open else '['}{low}, {high}{')' if self.high_open else ']'}"


def bound(value: float) -> str:
    """A range's bound as written: exact for integers (a seed's 2**63 - 1), short otherwise."""
    return str(value) if isinstance(value, int) else f"{value:g}"


Positive = Annotated[float, Range(0, low_open=True)]
NonNegative = Annotated[float, Range(0)]
Probability = Annotated[float, Range(0, 1)]
Count = Annotated[int, Range(1)]  # 1, 2, ...
NonNegativeInt = Annotated[int, Range(0)]


@dataclass
class SyntheticConfig:
    num_classes: Annotated[int, Range(2)] = 10
    # bounded, so that a slip (image_size=100000) is refused here rather than by the memory
    train_per_class: Annotated[int, Range(1, 100_000)] = 200
    test_per_class: Annotated[int, Range(1, 100_000)] = 50
    image_size: Annotated[int, Range(1, 1024)] = 32
    channels: Annotated[int, Range(1, 16)] = 3
    noise: NonNegative = 0.6  # pixel noise relative to the class signal; higher is harder
    # images: each sample mixes in another class's template by a share drawn from [0, overlap)
    # (shared.data.synthetic.blend); None (left out of run ids) mixes nothing, as before the key existed
    overlap: Annotated[float, Range(0, 1)] | None = None
    domains: list[str] = field(default_factory=list)  # names of domains that shift the images (partition.kind=domains)
    writers: NonNegativeInt = 0  # > 0: each training sample gets one of this many writers (partition.kind=writers)
    text_length: NonNegativeInt = 0  # > 0: token sequences of this length instead of images (text models)
    vocab_size: Annotated[int, Range(2)] = 1000  # text: ids lie in [1, vocab_size), 0 pads


@dataclass
class DatasetConfig:
    # cifar10 | cifar100 | femnist | femnist_digits | tiny_imagenet | office_caltech10 | ag_news | sst5
    # | imagefolder | synthetic  (shared.data.datasets.DATASETS)
    name: str = "cifar10"
    path: str | None = None  # imagefolder: a directory or a .zip holding train/<class>/*
    # How training images are augmented. None: the dataset's own (crop + flip on CIFAR and image
    # folders of at most 64x64, nothing on Tiny-ImageNet, FEMNIST or synthetic data); "none":
    # nothing; "always": the crop + flip on any image dataset; a paper's code's transform
    # (shared.data.catalog.AUGMENTATIONS: niid_bench, moon_cifar100, feddf) instead of the crop +
    # flip, where the dataset augments; "always:NAME": that transform on any image dataset. Configs
    # written with the former dataset.augment (a bool) read as these values (`augmentation_value`;
    # augment=false beside a transform as "none:NAME") and hash as they did (`augmentation_parts`).
    augmentation: str | None = None
    train_subset: Count | None = None  # keep this many training samples (stratified), for small scales
    val_fraction: Annotated[float, Range(0, 1, high_open=True)] = (
        0.0  # held out per class before partitioning (FedGKD keeps 10%)
    )
    # Where the validation split (FedGKD-VOTE's) comes from. None: val_fraction of the training
    # rows, held out before partitioning; "unused": val_fraction x train_subset rows, per class,
    # from the training rows that train_subset leaves out, so that the clients keep all of
    # train_subset (FedGKD's AG News); "dev": the dataset's development split, whole (SST-5's).
    val_source: Literal["unused", "dev"] | None = None
    # Text: tokens per sequence (truncated or padded). FedGKD does not state it; 128 is what the
    # DistilBERT scripts of FedDF, whose code FedGKD's builds on, use.
    max_length: Annotated[int, Range(2)] = 128  # a sequence holds [CLS] and [SEP]
    synthetic: SyntheticConfig = field(default_factory=SyntheticConfig)
    # The SHA-256 of a copy of the official data in the image-folder layout (a JPEG re-encoding
    # of CIFAR-10) to train on instead, found by content under <data root>/copies/: a run on a
    # copy is not a run on the official data, so the checksum, not the path, is in its id.
    copy: str | None = None

    @property
    def augmented(self) -> bool | None:
        """dataset.augmentation's switch: True or False forces augmentation on or off; None: the dataset's own."""
        return augmentation_parts(self.augmentation)[0]

    @property
    def has_validation(self) -> bool:
        return self.val_fraction > 0 or self.val_source == "dev"

    @property
    def transform(self) -> str | None:
        """dataset.augmentation's transform (shared.data.catalog.AUGMENTATIONS), if it names one."""
        return augmentation_parts(self.augmentation)[1]


@dataclass
class PartitionConfig:
    # iid | dirichlet | classes (#K=k label skew) | writers (FEMNIST: writers permuted and grouped
    # into `clients` groups) | domains (one client per domain: Office-Caltech-10)
    kind: str = "dirichlet"
    clients: Count = 10
    beta: Positive = 0.5  # Dirichlet concentration
    k: Count = 2  # classes per client for kind=classes
    min_size: NonNegativeInt = 10  # Dirichlet: redraw until every client holds this many samples
    # None: our generator | niid_bench: NIID-Bench's draws (np.random / random seeded with the
    # seed; kinds iid, dirichlet, classes)
    rng: str | None = None
    # kind=domains: every domain keeps only its first share x (the smallest domain's training
    # size) samples, FedBN's equal-size domains (its fed_office.py: 0.5); None keeps them all
    domain_share: Annotated[float, Range(0, 1, low_open=True)] | None = None
    # kind=writers: a seeded choice of this many writers (a paper's "about 2,000"); None: every writer
    writers: Count | None = None


@dataclass
class AuxConfig:
    """The server's small balanced auxiliary set (FedCAD 32, FedSSD 64 per class)."""

    per_class: NonNegativeInt = 0
    source: Literal["train_head", "holdout"] = "train_head"  # train_head: first n of each class (overlaps clients)


@dataclass
class FederationConfig:
    rounds: Count = 100
    participation: Annotated[float, Range(0, 1, low_open=True)] = (
        1.0  # C: fraction of clients sampled per round, ceil(C * N)
    )
    weighting: Literal["samples", "uniform"] = "samples"  # samples: FedAvg weights by data size; uniform: FedGKD's code


@dataclass
class LocalConfig:
    epochs: Count = 10
    batch_size: Count = 64
    optimizer: Literal["sgd", "adam"] = "sgd"  # adam: FedGKD's DistilBERT runs (momentum does not apply)
    lr: Positive = 0.01
    momentum: Annotated[float, Range(0, 1, high_open=True)] = 0.9
    weight_decay: NonNegative = 0.0
    grad_clip: Positive | None = None  # max gradient norm (FedGKD's released code clips at 10)


@dataclass
class ModelConfig:
    name: str = "fedavg_cnn"  # fedavg_cnn | resnet8 | resnet50 | alexnet_bn | distilbert | text_bow
    projection_dim: Count | None = None  # MOON / FedGKD+ projection head output size (256)
    # the convolutions' initial weights: None, PyTorch's defaults; kaiming_fan_out, N(0, 2 / (k^2
    # out_channels)) as the papers' ResNets are initialised in their code (MOON's, FedDF's)
    init: Literal["kaiming_fan_out"] | None = None
    # distilbert's weights and the text datasets' tokenizer: a Hugging Face hub id or a local
    # directory holding both (save_pretrained)
    pretrained: str = "distilbert-base-uncased"


@dataclass
class EvalConfig:
    every: Count = 1  # evaluate every k rounds (and always at the last round)
    # also test each round's local models (the "local average accuracy"); per_class: and record
    # each one's per-class accuracy too (local_per_class_acc)
    local: bool | Literal["per_class"] = True
    batch_size: Count = 1000
    target_acc: list[Annotated[float, Range(0, 100, low_open=True)]] = field(
        default_factory=list
    )  # % ; report the first round reaching each


@dataclass
class TrainerConfig:
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    amp: bool = False  # bf16 autocast
    channels_last: bool = False
    progress: bool = True  # one line per round on stderr (a job's log shows how far a run is)
    # > 1: train up to this many clients in one vmapped step (shared/training/batched.py: models without
    # dropout, SGD, methods with its capabilities); others train one after another
    clients_per_step: Count = 1
    # > 1: train up to this many clients at once in threads, each on its own copy of the model,
    # with the CPU's threads shared out among them (small models keep more cores busy this
    # way than with one client's operators); methods as for clients_per_step
    client_threads: Count = 1
    compile: bool = False  # torch.compile the local model (clients trained one after another)
    cuda_graphs: bool = True  # on CUDA: replay the batched step, or the compiled model, as CUDA graphs
    # deterministic kernels (torch.use_deterministic_algorithms, cuDNN without benchmarking): on
    # CUDA the same seed then gives the same numbers, and a resumed run the uninterrupted run's
    # (docs/performance.md); false trades that for cuDNN's fastest, atomics-summing kernels
    deterministic: bool = True
    tensorboard: bool = (
        False  # also write each round's metrics as TensorBoard events (shared/training/tensorboard_log.py)
    )
    # the GPU session gate's verdict the runtime keys above follow (shared/campaign/gate.py), kept
    # in metrics.json's runtime record beside them; None where no gate ran
    gate: str | None = None


@dataclass
class RunConfig:
    seed: Annotated[int, Range(0, INT64[1])] = 0  # torch.manual_seed and numpy take any 64-bit seed
    data_root: str | None = None  # default: $FEDREPRO_DATA or ./data
    dataset: DatasetConfig = field(default_factory=DatasetConfig)
    partition: PartitionConfig = field(default_factory=PartitionConfig)
    aux: AuxConfig = field(default_factory=AuxConfig)
    federation: FederationConfig = field(default_factory=FederationConfig)
    local: LocalConfig = field(default_factory=LocalConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    method: dict[str, Any] = field(default_factory=lambda: {"name": "fedavg"})
    eval: EvalConfig = field(default_factory=EvalConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)

    @property
    def clients_per_round(self) -> int:
        """The clients a round samples: the participation rate of the clients, at least one."""
        return max(1, math.ceil(self.federation.participation * self.partition.clients - 1e-9))


# Keys that do not change a run's result (up to floating-point nondeterminism across devices, and
# trainer.device's random stream: training's draws (clients' shuffles and augmentation, FedGen's
# and FedCurv's own) come from the device's generator, Mersenne Twister on a CPU and Philox on
# CUDA, so they differ between the two; a seed's partition, initial weights and sampled clients
# do not).
# The speed switches belong here too: batched clients, compilation and CUDA graphs compute the
# same samples' gradients with the same arithmetic, in another order and kernels (the batched
# trainer's test shows the weights agree to float rounding), much as another GPU would.
RUNTIME_KEYS = (
    "data_root",
    "trainer.device",
    "trainer.progress",
    "trainer.clients_per_step",
    "trainer.client_threads",
    "trainer.compile",
    "trainer.cuda_graphs",
    "trainer.deterministic",
    "trainer.tensorboard",
    "trainer.gate",
)

# --- building a config from dicts ---------------------------------------------------------


def coerce(value: Any, annotation: Any, where: str) -> Any:
    """Check (and gently convert) a YAML value against a dataclass field's type and range."""
    if dataclasses.is_dataclass(annotation):
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {excerpt(value)}")
        return from_dict(annotation, value, where)
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is Annotated:
        value = coerce(value, args[0], where)
        for valid in (a for a in annotation.__metadata__ if isinstance(a, Range)):
            if not math.isfinite(value):
                raise ConfigError(f"{where}={value!r} must be a finite number")
            if value not in valid:
                raise ConfigError(f"{where}={value!r} {valid}")
        return value
    if origin is typing.Literal:
        if not isinstance(value, str) or value not in args:
            raise ConfigError(f"{where}={excerpt(value)} is unknown; valid: {sorted(args)}")
        return value
    if origin in (typing.Union, types.UnionType):
        return coerce_union(value, args, where)
    if origin is list:
        if not isinstance(value, (list, tuple)):
            value = [value]
        return [coerce(v, args[0], f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: expected a mapping, got {excerpt(value)}")
        return dict(value)
    if annotation is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{where}: expected true or false, got {excerpt(value)}")
    if isinstance(value, str) and annotation in (int, float):
        try:  # YAML 1.1 reads `1e-3` (no dot) as a string
            value = float(value)
        except ValueError:
            pass
    if annotation is int:
        return coerce_int(value, where)
    if annotation is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            try:
                return float(value)
            except OverflowError:  # an integer beyond any float
                raise ConfigError(f"{where}={excerpt(value)} must be a finite number") from None
        raise ConfigError(f"{where}: expected a number, got {excerpt(value)}")
    if annotation is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{where}: expected a string, got {excerpt(value)}")
    return value


def coerce_union(value: Any, args: tuple, where: str) -> Any:
    """The value as the first of the union's types that takes it (None where the union has it)."""
    if value is None and type(None) in args:
        return None
    kinds = [a for a in args if a is not type(None)]
    for kind in kinds:
        try:
            return coerce(value, kind, where)
        except ConfigError as exc:
            refused = exc
    words = choices(kinds) if len(kinds) > 1 else None
    raise ConfigError(f"{where}: expected {words}, got {excerpt(value)}") if words else refused


def choices(kinds: list) -> str | None:
    """The values a union of true/false and named choices takes, in words ("true, false or
    per_class"); None for a union of other types."""
    words = []
    for kind in kinds:
        if kind is bool:
            words += ["true", "false"]
        elif typing.get_origin(kind) is typing.Literal:
            words += [str(a) for a in typing.get_args(kind)]
        else:
            return None
    return ", ".join(words[:-1]) + " or " + words[-1]


def coerce_int(value: Any, where: str) -> int:
    """An integer that fits in 64 bits (a longer one overflows numpy and torch far from here)."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise ConfigError(f"{where}: expected an integer, got {excerpt(value)}")
    if not INT64[0] <= value <= INT64[1]:
        raise ConfigError(f"{where}={excerpt(value)} does not fit in a 64-bit integer")
    return value


@functools.cache
def field_types(cls: type) -> dict[str, Any]:
    """A dataclass's fields and their types, postponed annotations resolved (ranges kept)."""
    hints = typing.get_type_hints(cls, include_extras=True)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def from_dict(cls: type, values: dict, where: str = "") -> Any:
    """A dataclass from a mapping, every value checked; `where` is the mapping's dotted key."""
    if cls is DatasetConfig and "augment" in values:
        values = without_augment_key(values, where)
    known = field_types(cls)
    unknown = sorted(str(key) for key in set(values) - set(known))
    if unknown:
        raise ConfigError(f"{where or 'config'}: unknown key(s) {excerpt(unknown)}; valid keys: {sorted(known)}")
    kwargs = {name: coerce(v, known[name], f"{where}.{name}" if where else name) for name, v in values.items()}
    return cls(**kwargs)


def to_dict(cfg: Any) -> dict:
    return dataclasses.asdict(cfg)


# --- dataset.augmentation and the former dataset.augment --------------------------------------

FORCED_ON = "always"
FORCED_OFF = "none"


def augmentation_parts(value: str | None) -> tuple[bool | None, str | None]:
    """dataset.augmentation as (augmented: True, False or None for the dataset's own, the paper's
    transform or None): the two keys it replaced, which run ids still hash."""
    if value == FORCED_ON or value == FORCED_OFF:
        return value == FORCED_ON, None
    for forced in (FORCED_ON, FORCED_OFF):
        if isinstance(value, str) and value.startswith(f"{forced}:"):
            return forced == FORCED_ON, value.removeprefix(f"{forced}:")
    return None, value


def augmentation_value(augment: bool | None, transform: str | None) -> str | None:
    """The dataset.augmentation that says what dataset.augment and a transform said together:
    `none:NAME` (augment=false beside a transform) augments nothing, as it did, and keeps its id."""
    if augment is None:
        return transform
    forced = FORCED_ON if augment else FORCED_OFF
    return forced if transform is None else f"{forced}:{transform}"


def without_augment_key(values: dict, where: str) -> dict:
    """A dataset section that names dataset.augment (a config or run written before it folded into
    dataset.augmentation), with the one key that says the same: it loads, under the same run id."""
    values = dict(values)
    augment = values.pop("augment")
    augment = None if augment is None else coerce(augment, bool, f"{where}.augment" if where else "augment")
    return {**values, "augmentation": augmentation_value(augment, values.get("augmentation"))}


# --- identity -----------------------------------------------------------------------------


def identity(cfg: RunConfig) -> dict:
    """The resolved config without the keys that do not change the result, and without the
    keys left unset (None): a new optional switch, off by default, keeps every finished run.
    dataset.augmentation is hashed as the two keys it replaced, so that no run id changed."""
    flat = flatten(to_dict(cfg))
    flat.update({"dataset.augment": cfg.dataset.augmented, "dataset.augmentation": cfg.dataset.transform})
    return nested({k: v for k, v in flat.items() if k not in RUNTIME_KEYS and v is not None})


def run_id(cfg: RunConfig) -> str:
    canonical = json.dumps(identity(cfg), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]
