"""The papers' models. Each is a backbone producing a feature vector, wrapped by `Net`, which
adds the optional projection head and the classifier, so that every method can reach
features and logits separately (MOON, FedProto, FedGen, FedCSD need them)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class Net(nn.Module):
    """backbone -> [projection head] -> classifier.

    `features(x)` is what the classifier sees: the backbone's feature vector, or the projection
    head's output when there is one (MOON's simple-cnn and ResNet variants, FedGKD+).
    """

    def __init__(self, backbone: nn.Module, feature_dim: int, num_classes: int, projection_dim: int | None = None):
        super().__init__()
        self.backbone = backbone
        if projection_dim:
            self.projection = nn.Sequential(
                nn.Linear(feature_dim, feature_dim), nn.ReLU(inplace=True), nn.Linear(feature_dim, projection_dim)
            )
            feature_dim = projection_dim
        else:
            self.projection = nn.Identity()
        self.feature_dim = feature_dim
        self.classifier = nn.Linear(feature_dim, num_classes)

    def features(self, x: torch.Tensor) -> torch.Tensor:
        return self.projection(self.backbone(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(self.features(x))


def max_pool2x2(x: torch.Tensor) -> torch.Tensor:
    """2x2 max pooling (stride 2). Without autograd on a CPU (teacher passes, evaluation) it is
    the maximum of the four strided corners of each window: the same numbers as max_pool2d,
    which is 5-10x slower on maps of few channels. With autograd max_pool2d's backward is the
    faster one, and on a GPU one pooling kernel beats three."""
    if torch.is_grad_enabled() or x.device.type != "cpu":
        return F.max_pool2d(x, 2)
    x = x[..., : x.shape[-2] // 2 * 2, : x.shape[-1] // 2 * 2]  # max_pool2d drops an odd last row/column
    return torch.maximum(
        torch.maximum(x[..., 0::2, 0::2], x[..., 0::2, 1::2]), torch.maximum(x[..., 1::2, 0::2], x[..., 1::2, 1::2])
    )


class FedAvgCNN(nn.Module):
    """NIID-Bench / MOON "simple-cnn": 62,006 parameters with the 10-class classifier on 3x32x32;
    with one input channel on 28x28 it is the FEMNIST CNN (flatten 256)."""

    def __init__(self, in_channels: int = 3, image_size: int = 32):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, 6, 5)
        self.conv2 = nn.Conv2d(6, 16, 5)
        side = ((image_size - 4) // 2 - 4) // 2
        self.fc1 = nn.Linear(16 * side * side, 120)
        self.fc2 = nn.Linear(120, 84)
        self.out_dim = 84

    def forward(self, x):
        # max-pool before ReLU: the same numbers, forward and backward, as the paper's ReLU then
        # pool (ReLU is monotone), with ReLU on a quarter of the values; on a CPU the step is
        # 1.3x faster in channels_last (tests/models/test_models.py checks the equality)
        x = F.relu(max_pool2x2(self.conv1(x)))
        x = F.relu(max_pool2x2(self.conv2(x)))
        x = F.relu(self.fc1(x.flatten(1)))
        return F.relu(self.fc2(x))


def kaiming_fan_out(model: nn.Module) -> None:
    """Every convolution's weights from N(0, 2 / (k * k * out_channels)), as MOON's and FedCSD's
    ResNets (kaiming_normal_, fan_out) and FedDF's, which FedGKD's code takes, are initialised;
    norm layers keep PyTorch's weight 1 and bias 0, linear layers PyTorch's default."""
    for module in model.modules():
        if isinstance(module, nn.Conv2d):
            nn.init.kaiming_normal_(module.weight, mode="fan_out", nonlinearity="relu")


def group_norm(channels: int) -> nn.GroupNorm:
    return nn.GroupNorm(channels // 16, channels)  # FedGKD: 16 channels per group


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, norm):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.norm1 = norm(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.norm2 = norm(cout)
        self.shortcut = nn.Identity()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), norm(cout))

    def forward(self, x):
        out = F.relu(self.norm1(self.conv1(x)))
        return F.relu(self.norm2(self.conv2(out)) + self.shortcut(x))


class ResNet8(nn.Module):
    """FedGKD's ResNet-8 (from FedDF): 16-32-64 channels, one BasicBlock per stage, GroupNorm."""

    def __init__(self, in_channels: int = 3):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(in_channels, 16, 3, 1, 1, bias=False), group_norm(16), nn.ReLU(inplace=True)
        )
        self.layers = nn.Sequential(
            BasicBlock(16, 16, 1, group_norm), BasicBlock(16, 32, 2, group_norm), BasicBlock(32, 64, 2, group_norm)
        )
        self.out_dim = 64

    def forward(self, x):
        return F.adaptive_avg_pool2d(self.layers(self.stem(x)), 1).flatten(1)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, width: int, stride: int, norm=nn.BatchNorm2d):
        super().__init__()
        cout = width * self.expansion
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = norm(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = norm(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = norm(cout)
        self.shortcut = nn.Identity()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), norm(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        return F.relu(self.bn3(self.conv3(out)) + self.shortcut(x))


class ResNet50(nn.Module):
    """ResNet-50 for small images (MOON): 3x3 stride-1 stem, no max-pool, 2048 features.
    BatchNorm by default; FedGKD trains it with GroupNorm (16 channels per group) on
    Tiny-ImageNet, except for MOON and FedGKD+ (`resnet50_gn`)."""

    def __init__(self, in_channels: int = 3, blocks=(3, 4, 6, 3), norm=nn.BatchNorm2d):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(in_channels, 64, 3, 1, 1, bias=False), norm(64), nn.ReLU(inplace=True))
        stages, cin = [], 64
        for i, (width, count) in enumerate(zip((64, 128, 256, 512), blocks)):
            for j in range(count):
                stages.append(Bottleneck(cin, width, stride=2 if i > 0 and j == 0 else 1, norm=norm))
                cin = width * Bottleneck.expansion
        self.layers = nn.Sequential(*stages)
        self.out_dim = cin

    def forward(self, x):
        return F.adaptive_avg_pool2d(self.layers(self.stem(x)), 1).flatten(1)


class AdaptiveAvgPool(nn.Module):
    """nn.AdaptiveAvgPool2d as two products with averaging matrices: the same windows and means
    (PyTorch's: rows floor(i H / h) to ceil((i + 1) H / h)), but a backward pass that CUDA
    computes deterministically (AdaptiveAvgPool2d's sums atomically, and raises under
    torch.use_deterministic_algorithms)."""

    def __init__(self, size: tuple[int, int]):
        super().__init__()
        self.size = size
        # the matrices by (length, out, dtype, device), built once rather than in every
        # training step (a model sees one input size, so this holds two of them)
        self.matrices: dict[tuple, torch.Tensor] = {}

    @staticmethod
    def averaging(length: int, out: int, like: torch.Tensor) -> torch.Tensor:
        """(out, length): row i averages input positions floor(i L / out) .. ceil((i + 1) L / out) - 1."""
        matrix = torch.zeros(out, length, dtype=like.dtype, device=like.device)
        for i in range(out):
            start, stop = (i * length) // out, -(-((i + 1) * length) // out)
            matrix[i, start:stop] = 1.0 / (stop - start)
        return matrix

    def averaging_for(self, length: int, out: int, like: torch.Tensor) -> torch.Tensor:
        key = (length, out, like.dtype, like.device)
        if key not in self.matrices:
            self.matrices[key] = self.averaging(length, out, like)
        return self.matrices[key]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = self.averaging_for(x.shape[-2], self.size[0], x)
        cols = self.averaging_for(x.shape[-1], self.size[1], x)
        return rows @ x @ cols.T


class AlexNetBN(nn.Module):
    """FedBN's AlexNet with BatchNorm after every layer (Office-Caltech-10, 256x256 inputs)."""

    def __init__(self, in_channels: int = 3):
        super().__init__()

        def conv(cin, cout, k, s, p):
            return [nn.Conv2d(cin, cout, k, s, p), nn.BatchNorm2d(cout), nn.ReLU(inplace=True)]

        self.conv = nn.Sequential(
            *conv(in_channels, 64, 11, 4, 2),
            nn.MaxPool2d(3, 2),
            *conv(64, 192, 5, 1, 2),
            nn.MaxPool2d(3, 2),
            *conv(192, 384, 3, 1, 1),
            *conv(384, 256, 3, 1, 1),
            *conv(256, 256, 3, 1, 1),
            nn.MaxPool2d(3, 2),
            AdaptiveAvgPool((6, 6)),
        )
        self.fc = nn.Sequential(
            nn.Linear(256 * 6 * 6, 4096),
            nn.BatchNorm1d(4096),
            nn.ReLU(inplace=True),
            nn.Linear(4096, 4096),
            nn.BatchNorm1d(4096),
            nn.ReLU(inplace=True),
        )
        self.out_dim = 4096

    def forward(self, x):
        return self.fc(self.conv(x).flatten(1))


class DistilBert(nn.Module):
    """DistilBERT (Sanh et al., 2019) as Hugging Face's DistilBertForSequenceClassification uses
    it, up to its classifier: the first ([CLS]) position's hidden state -> pre_classifier
    (768 x 768) -> ReLU -> dropout; `Net` adds the classifier. The encoder starts from the
    pretrained weights (`model.pretrained`: a hub id or a local directory); the head, as in
    Hugging Face, from scratch (here seeded by the run's seed). Needs `transformers`."""

    def __init__(self, pretrained: str, pad_id: int):
        super().__init__()
        from shared.data.text import from_pretrained

        self.encoder = from_pretrained("AutoModel", pretrained, "DistilBERT weights")
        dim = self.encoder.config.hidden_size
        self.pre_classifier = nn.Linear(dim, dim)
        self.dropout = nn.Dropout(self.encoder.config.seq_classif_dropout)
        self.pad_id = pad_id
        self.out_dim = dim

    def forward(self, ids):
        hidden = self.encoder(input_ids=ids, attention_mask=(ids != self.pad_id).long()).last_hidden_state
        return self.dropout(F.relu(self.pre_classifier(hidden[:, 0])))


class MeanEmbeddingText(nn.Module):
    """A small text model that needs no `transformers` (the smoke scale's stand-in for
    DistilBERT): the mean of a sequence's token embeddings, padding left out, then a hidden
    layer with ReLU."""

    def __init__(self, vocab_size: int, pad_id: int, dim: int = 64):
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, dim, padding_idx=pad_id)
        self.hidden = nn.Linear(dim, dim)
        self.pad_id = pad_id
        self.out_dim = dim

    def forward(self, ids):
        mask = (ids != self.pad_id).unsqueeze(-1).float()
        mean = (self.embedding(ids) * mask).sum(1) / mask.sum(1).clamp(min=1)
        return F.relu(self.hidden(mean))
