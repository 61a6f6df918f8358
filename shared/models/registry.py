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
    the vocabulary and the pretrained weights (`federation`: shared.data.federation.Federation)."""
    return build_model(
        cfg.model.name,
        federation.num_classes,
        federation.input_shape[0],
        federation.input_shape[-1],
        cfg.model.projection_dim,
        text=federation.dataset.text,
        pretrained=cfg.model.pretrained,
    )


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
