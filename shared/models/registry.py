"""Models by name (model.name): the image models with the smallest image each takes, the text
models built from a dataset's vocabulary; a run's model checked against its data and built."""

from __future__ import annotations

from typing import Callable, NamedTuple

from torch import nn

from shared.config.schema import ConfigError, RunConfig, check
from shared.data.catalog import TextVocabulary, image_shape, is_text, names_where, num_classes
from shared.models.nets import (
    AlexNetBN,
    DistilBert,
    FedAvgCNN,
    MeanEmbeddingText,
    Net,
    ResNet8,
    ResNet50,
    group_norm,
    kaiming_fan_out,
)


class ImageModel(NamedTuple):
    build: Callable[[int, int], nn.Module]  # (channels, side) -> backbone
    min_side: int  # the smallest image its convolutions and pools leave a pixel of (tests/models/test_models.py)


MODELS = {
    "fedavg_cnn": ImageModel(lambda channels, side: FedAvgCNN(channels, side), 16),
    "resnet8": ImageModel(lambda channels, side: ResNet8(channels), 1),
    "resnet50": ImageModel(lambda channels, side: ResNet50(channels), 1),
    "resnet50_gn": ImageModel(lambda channels, side: ResNet50(channels, norm=group_norm), 1),
    "alexnet_bn": ImageModel(lambda channels, side: AlexNetBN(channels), 63),
}


# Models of token ids: built from the dataset's vocabulary and model.pretrained.
TEXT_MODELS = {
    "distilbert": lambda text, pretrained: DistilBert(pretrained, text.pad_id),
    "text_bow": lambda text, pretrained: MeanEmbeddingText(text.size, text.pad_id),
}


def build_model(
    name: str,
    num_classes: int,
    in_channels: int = 3,
    image_size: int = 32,
    projection_dim: int | None = None,
    text: TextVocabulary | None = None,
    pretrained: str | None = None,
) -> Net:
    """An image model from the input's channels and side, or a text model (TEXT_MODELS) from
    the text dataset's vocabulary and, for distilbert, the pretrained weights' hub id or path."""
    if name in TEXT_MODELS:
        if text is None:
            raise ValueError(f"model {name!r} reads token ids: it needs a text dataset's vocabulary")
        backbone = TEXT_MODELS[name](text, pretrained)
    elif name in MODELS:
        backbone = MODELS[name].build(in_channels, image_size)
    else:
        raise ValueError(f"model {name!r} is unknown; valid: {sorted([*MODELS, *TEXT_MODELS])}")
    return Net(backbone, backbone.out_dim, num_classes, projection_dim)


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def validate_model(cfg: RunConfig) -> None:
    """The model section: a known name that fits the dataset (text models read token ids)."""
    name, text = cfg.model.name, is_text(cfg)
    models = sorted([*MODELS, *TEXT_MODELS])
    if name not in models:
        raise ConfigError(f"model.name={name!r} is unknown; valid: {models}")
    if text != (name in TEXT_MODELS):
        texts = ", ".join(names_where(lambda info: info.text))
        raise ConfigError(
            f"model.name={name} does not fit dataset.name={cfg.dataset.name}: text datasets ({texts}, "
            f"synthetic with synthetic.text_length > 0) take the text models {sorted(TEXT_MODELS)}, "
            f"image datasets the others"
        )
    if not cfg.model.pretrained:
        raise ConfigError("model.pretrained must name a hub id or a directory")
    check(
        cfg.model.init is None or name in MODELS,
        f"model.init={cfg.model.init} initialises convolutions, which model.name={name} has not",
    )
    if (shape := image_shape(cfg)) is not None:
        channels, side = shape
        smallest = MODELS[name].min_side
        check(
            side >= smallest,
            f"model.name={name} cannot take dataset.name={cfg.dataset.name}'s {channels}x{side}x{side} "
            f"images: it needs a side of at least {smallest} pixels",
        )


def model_for(cfg: RunConfig, federation) -> Net:
    """The run's model, sized for its federation's data: classes, input shape and, for text,
    the vocabulary and the pretrained weights (`federation`: shared.data.federation.Federation),
    initialised as model.init says."""
    model = build_model(
        cfg.model.name,
        federation.num_classes,
        federation.input_shape[0],
        federation.input_shape[-1],
        cfg.model.projection_dim,
        text=federation.dataset.text,
        pretrained=cfg.model.pretrained,
    )
    if cfg.model.init == "kaiming_fan_out":
        kaiming_fan_out(model)
    return model


def known_state_shapes(cfg: RunConfig) -> dict[str, tuple[int, ...]] | None:
    """name -> shape of every tensor in the run's model state, built without memory (torch's
    meta device); None where they depend on data not yet loaded (text vocabularies, image folders)."""
    import torch

    shape, classes = image_shape(cfg), num_classes(cfg)
    if shape is None or classes is None or cfg.model.name not in MODELS:
        return None
    with torch.device("meta"):
        model = build_model(cfg.model.name, classes, shape[0], shape[1], cfg.model.projection_dim)
    return {name: tuple(tensor.shape) for name, tensor in model.state_dict().items()}


# Pretrained text models whose size is known without loading them: model.pretrained -> (the
# tokenizer's vocabulary, the DistilBERT encoder's parameters) as Hugging Face publishes them
KNOWN_PRETRAINED = {"distilbert-base-uncased": (30522, 66_362_880)}
TEXT_BOW_DIM = 64  # MeanEmbeddingText's default width, as TEXT_MODELS builds it


def state_bytes(cfg: RunConfig, classes: int | None = None) -> int | None:
    """The bytes of the run's model state (parameters and buffers, float32 as the trainer saves
    them), before its data loads, built without memory (torch's meta device). Where the data
    decides the model:

    - an image folder: its classes are `classes` (as the run's partition.csv counts them), its
      images RGB (convert_image_folder), and every model but fedavg_cnn pools adaptively, so
      its size does not depend on the images' side; fedavg_cnn's first dense layer grows with
      the side of the folder's images, which no file of a run states: None;
    - text: text_bow's embedding is as large as the tokenizer's vocabulary and distilbert's
      encoder is the pretrained weights, both named by model.pretrained: known for
      KNOWN_PRETRAINED (synthetic text's vocabulary is its config's); another hub id or a
      local directory would have to be loaded (transformers, perhaps a download) to know it,
      and a checkpoint is checked without loading anything: None.

    None: the caller's blanket limit (MAX_MODEL_BYTES) applies."""
    import torch

    name, shape, n = cfg.model.name, image_shape(cfg), num_classes(cfg)
    if cfg.dataset.name == "imagefolder" and name in MODELS and name != "fedavg_cnn":
        shape, n = (3, max(MODELS[name].min_side, 32)), classes
    if n is None or not 0 < n <= 10**6:
        return None
    if name in TEXT_MODELS:
        return text_state_bytes(cfg, n)
    if shape is None or name not in MODELS:
        return None
    with torch.device("meta"):
        model = build_model(name, n, shape[0], shape[1], cfg.model.projection_dim)
    return 4 * sum(t.numel() for t in model.state_dict().values())


def text_state_bytes(cfg: RunConfig, classes: int) -> int | None:
    """`state_bytes` of a text model: its backbone counted from the vocabulary and the
    pretrained encoder (KNOWN_PRETRAINED), its head built on the meta device."""
    import torch

    vocab, encoder = KNOWN_PRETRAINED.get(cfg.model.pretrained, (None, None))
    if cfg.dataset.name == "synthetic" and cfg.model.name == "text_bow":
        vocab = cfg.dataset.synthetic.vocab_size
    if cfg.model.name == "text_bow" and vocab is not None:
        width, backbone = TEXT_BOW_DIM, vocab * TEXT_BOW_DIM + TEXT_BOW_DIM * TEXT_BOW_DIM + TEXT_BOW_DIM
    elif cfg.model.name == "distilbert" and encoder is not None:
        width, backbone = 768, encoder + 768 * 768 + 768  # the encoder, then pre_classifier
    else:
        return None
    with torch.device("meta"):
        head = Net(nn.Identity(), width, classes, cfg.model.projection_dim)
    return 4 * (backbone + sum(t.numel() for t in head.state_dict().values()))
