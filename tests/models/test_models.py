import warnings

import pytest
import torch

from shared.models.registry import MODELS, build_model, count_parameters


@pytest.mark.parametrize(
    "name, channels, size, classes, params, features",
    [
        ("fedavg_cnn", 3, 32, 10, 62_006, 84),
        ("fedavg_cnn", 1, 28, 10, 44_426, 84),  # the FEMNIST CNN: 156 + 2416 + 256*120+120 + 10164 + 850
        ("resnet8", 3, 32, 10, 78_042, 64),
        ("resnet50", 3, 32, 100, 23_705_252, 2048),
        ("alexnet_bn", 3, 64, 10, None, 4096),
    ],
)
def test_output_shapes_and_parameter_counts(name, channels, size, classes, params, features):
    model = build_model(name, classes, channels, size).eval()
    x = torch.randn(2, channels, size, size)
    with torch.no_grad():
        f = model.features(x)
        assert f.shape == (2, features)
        assert model(x).shape == (2, classes)
        torch.testing.assert_close(model.classifier(f), model(x))
    if params is not None:
        assert count_parameters(model) == params


def test_projection_head_sits_between_features_and_classifier():
    model = build_model("fedavg_cnn", 10, projection_dim=256).eval()
    x = torch.randn(3, 3, 32, 32)
    assert model.backbone(x).shape == (3, 84)
    assert model.features(x).shape == (3, 256)
    assert model.classifier.in_features == 256
    # 84*84+84 + 84*256+256 more than the plain CNN, whose classifier shrinks from 84 to 256 inputs
    assert count_parameters(model) == 62_006 - 850 + (84 * 84 + 84) + (84 * 256 + 256) + (256 * 10 + 10)


def test_resnet8_uses_groupnorm_with_16_channels_per_group():
    model = build_model("resnet8", 10)
    norms = [m for m in model.modules() if isinstance(m, torch.nn.GroupNorm)]
    assert norms and all(m.num_channels // m.num_groups == 16 for m in norms)
    assert not any(isinstance(m, torch.nn.BatchNorm2d) for m in model.modules())


def test_fedavg_cnn_pools_before_relu_with_the_papers_numbers():
    """MOON's simple-cnn applies ReLU then max-pool; ours pools first (cheaper). ReLU is monotone,
    so outputs and every gradient are equal bit for bit."""
    import torch.nn.functional as F

    torch.manual_seed(0)
    model = build_model("fedavg_cnn", 10)
    x = torch.randn(16, 3, 32, 32)
    x[:, :, :8] = -1.0  # whole pooling windows below zero, where the order could matter

    def papers_order(net, x):
        cnn = net.backbone
        x = F.max_pool2d(F.relu(cnn.conv1(x)), 2)
        x = F.max_pool2d(F.relu(cnn.conv2(x)), 2)
        x = F.relu(cnn.fc2(F.relu(cnn.fc1(x.flatten(1)))))
        return net.classifier(x)

    grads = []
    for forward in (lambda x: model(x), lambda x: papers_order(model, x)):
        model.zero_grad()
        out = forward(x)
        out.square().sum().backward()
        grads.append((out.detach(), [p.grad.clone() for p in model.parameters()]))
    assert torch.equal(grads[0][0], grads[1][0])
    assert all(torch.equal(a, b) for a, b in zip(grads[0][1], grads[1][1]))


def test_inference_pooling_equals_max_pool2d():
    """Without autograd on a CPU, max_pool2x2 takes the maximum of four strided corners: the same
    numbers as max_pool2d, odd sizes, ties, NaN and channels_last included."""
    import torch.nn.functional as F

    from shared.models.nets import max_pool2x2

    torch.manual_seed(0)
    x = torch.randn(5, 6, 13, 10)
    x[0, 0, :4, :4] = 1.0  # ties inside windows
    x[1, 2, 3, 3] = float("nan")
    for layout in (x, x.contiguous(memory_format=torch.channels_last)):
        with torch.no_grad():
            fast = max_pool2x2(layout)
        torch.testing.assert_close(fast, F.max_pool2d(layout, 2), rtol=0, atol=0, equal_nan=True)
        assert fast[1, 2, 1, 1].isnan()
    model = build_model("fedavg_cnn", 10).eval()
    images = torch.randn(8, 3, 32, 32)
    with torch.no_grad():
        fast = model(images)
    assert torch.equal(fast, model(images).detach())  # with autograd: max_pool2d


@pytest.mark.parametrize("name", sorted(MODELS))
def test_each_image_models_smallest_side_is_what_its_layers_take(name):
    """MODELS[name].min_side, which the config check uses, against forward passes on the meta
    device (no memory, no arithmetic): the side itself goes through, one pixel less does not."""

    def fits(side):
        with torch.device("meta"), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a layer of zero size warns before the forward fails
            try:
                MODELS[name].build(3, side)(torch.empty(2, 3, side, side))
                return True
            except RuntimeError:
                return False

    side = MODELS[name].min_side
    assert fits(side) and (side == 1 or not fits(side - 1))


def test_model_init_kaiming_fan_out_draws_each_convolution_as_the_papers_code():
    """model.init=kaiming_fan_out: each convolution's weights N(0, 2 / (k^2 out_channels)), as
    MOON's, FedCSD's and FedDF's ResNets; unset, PyTorch's default (most of them narrower)."""
    from types import SimpleNamespace

    from shared.models.registry import model_for
    from shared.targets.configs import load_config

    federation = SimpleNamespace(num_classes=10, input_shape=(3, 32, 32), dataset=SimpleNamespace(text=None))

    def spreads(*overrides):
        torch.manual_seed(0)
        model = model_for(load_config(None, ["model.name=resnet50", *overrides]), federation)
        convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
        return [(m.weight.std() / (2 / (m.kernel_size[0] ** 2 * m.out_channels)) ** 0.5).item() for m in convs]

    kaiming, default = spreads("model.init=kaiming_fan_out"), spreads()
    assert len(kaiming) == 53 and all(0.9 < r < 1.1 for r in kaiming)
    assert sorted(default)[len(default) // 2] < 0.6
