"""The papers' models. Each is a backbone producing a feature vector, wrapped by `Net`, which
adds the optional projection head and the classifier, so that every method can reach
features and logits separately (MOON, FedProto, FedGen, FedCSD need them)."""
from __future__ import annotations

import torch
from torch import nn
import torch.nn.functional as F


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
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(x.flatten(1)))
        return F.relu(self.fc2(x))


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
        self.stem = nn.Sequential(nn.Conv2d(in_channels, 16, 3, 1, 1, bias=False), group_norm(16), nn.ReLU(inplace=True))
        self.layers = nn.Sequential(
            BasicBlock(16, 16, 1, group_norm), BasicBlock(16, 32, 2, group_norm), BasicBlock(32, 64, 2, group_norm)
        )
        self.out_dim = 64

    def forward(self, x):
        return F.adaptive_avg_pool2d(self.layers(self.stem(x)), 1).flatten(1)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin: int, width: int, stride: int):
        super().__init__()
        cout = width * self.expansion
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Identity()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        return F.relu(self.bn3(self.conv3(out)) + self.shortcut(x))


class ResNet50(nn.Module):
    """ResNet-50 for small images (MOON): 3x3 stride-1 stem, no max-pool, 2048 features."""

    def __init__(self, in_channels: int = 3, blocks=(3, 4, 6, 3)):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(in_channels, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True))
        stages, cin = [], 64
        for i, (width, count) in enumerate(zip((64, 128, 256, 512), blocks)):
            for j in range(count):
                stages.append(Bottleneck(cin, width, stride=2 if i > 0 and j == 0 else 1))
                cin = width * Bottleneck.expansion
        self.layers = nn.Sequential(*stages)
        self.out_dim = cin

    def forward(self, x):
        return F.adaptive_avg_pool2d(self.layers(self.stem(x)), 1).flatten(1)


class AlexNetBN(nn.Module):
    """FedBN's AlexNet with BatchNorm after every layer (Office-Caltech-10, 256x256 inputs)."""

    def __init__(self, in_channels: int = 3):
        super().__init__()

        def conv(cin, cout, k, s, p):
            return [nn.Conv2d(cin, cout, k, s, p), nn.BatchNorm2d(cout), nn.ReLU(inplace=True)]

        self.conv = nn.Sequential(
            *conv(in_channels, 64, 11, 4, 2), nn.MaxPool2d(3, 2),
            *conv(64, 192, 5, 1, 2), nn.MaxPool2d(3, 2),
            *conv(192, 384, 3, 1, 1), *conv(384, 256, 3, 1, 1), *conv(256, 256, 3, 1, 1), nn.MaxPool2d(3, 2),
            nn.AdaptiveAvgPool2d((6, 6)),
        )
        self.fc = nn.Sequential(
            nn.Linear(256 * 6 * 6, 4096), nn.BatchNorm1d(4096), nn.ReLU(inplace=True),
            nn.Linear(4096, 4096), nn.BatchNorm1d(4096), nn.ReLU(inplace=True),
        )
        self.out_dim = 4096

    def forward(self, x):
        return self.fc(self.conv(x).flatten(1))


MODELS = {
    "fedavg_cnn": lambda channels, size: FedAvgCNN(channels, size),
    "resnet8": lambda channels, size: ResNet8(channels),
    "resnet50": lambda channels, size: ResNet50(channels),
    "alexnet_bn": lambda channels, size: AlexNetBN(channels),
}


def build_model(name: str, num_classes: int, in_channels: int = 3, image_size: int = 32,
                projection_dim: int | None = None) -> Net:
    if name not in MODELS:
        raise ValueError(f"model {name!r} is unknown; valid: {sorted(MODELS)}")
    backbone = MODELS[name](in_channels, image_size)
    return Net(backbone, backbone.out_dim, num_classes, projection_dim)


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
