"""The reference loop: federated training the way the usual simulators do it.

NIID-Bench (`utils.get_dataloader`), MOON's code (which copies it), PFLlib and FL-bench keep
the training images on the CPU as HWC uint8 arrays, give each client a `DataLoader` that
transforms one sample at a time in Python, train the clients one after another in fp32 and
test the models every round. For CIFAR, NIID-Bench's transform is

    ToTensor, reflect-pad 4 (F.pad), ToPILImage, RandomCrop(32), RandomHorizontalFlip,
    ToTensor, Normalize            (test: ToTensor, Normalize)

torchvision is not needed by this project, so the transforms are written here with PIL and
torch, doing what torchvision's do (same calls, same random draws). What the reference shares
with our trainer, so that only the way of training differs: the partition, the model and its
initial weights, the method's own hooks (its loss, teacher, aggregation), and the same
evaluation (the global model and, with `eval.local`, every local model on the test set, in
batches of `eval.batch_size`).
"""

from __future__ import annotations

import copy
import time

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from torch.utils.data import DataLoader, Dataset

from shared.config.schema import RunConfig
from shared.data.federation import build_federation
from shared.methods.fedavg import ClientUpdate
from shared.methods.registry import build_method
from shared.models.registry import model_for
from shared.runs.numerics import resolve_device
from shared.training.trainer import sample_clients


def to_tensor(image) -> torch.Tensor:
    """torchvision's ToTensor: HWC uint8 (array or PIL image) -> CHW float in [0, 1]."""
    array = np.asarray(image)
    return torch.from_numpy(array.transpose(2, 0, 1).copy()).float().div(255)


class Normalize:
    def __init__(self, mean, std):
        self.mean, self.std = mean, std

    def __call__(self, x: torch.Tensor) -> torch.Tensor:  # torchvision: as_tensor per call, sub_, div_
        mean = torch.as_tensor(self.mean, dtype=x.dtype).view(-1, 1, 1)
        std = torch.as_tensor(self.std, dtype=x.dtype).view(-1, 1, 1)
        return x.sub_(mean).div_(std)


class NIIDBenchTrainTransform:
    """ToTensor, reflect pad, ToPILImage, RandomCrop, RandomHorizontalFlip, ToTensor, Normalize."""

    def __init__(self, mean, std, pad: int = 4):
        self.normalize, self.pad = Normalize(mean, std), pad

    def __call__(self, array: np.ndarray) -> torch.Tensor:
        x = to_tensor(array)
        x = F.pad(x.unsqueeze(0), (self.pad,) * 4, mode="reflect").squeeze(0)
        image = Image.fromarray(x.mul(255).byte().permute(1, 2, 0).numpy())  # ToPILImage
        h, w = array.shape[:2]
        top = int(torch.randint(0, image.height - h + 1, size=(1,)).item())  # RandomCrop.get_params
        left = int(torch.randint(0, image.width - w + 1, size=(1,)).item())
        image = image.crop((left, top, left + w, top + h))
        if torch.rand(1) < 0.5:  # RandomHorizontalFlip
            image = image.transpose(Image.FLIP_LEFT_RIGHT)
        return self.normalize(to_tensor(image))


class TestTransform:
    def __init__(self, mean, std):
        self.normalize = Normalize(mean, std)

    def __call__(self, array: np.ndarray) -> torch.Tensor:
        return self.normalize(to_tensor(array))


class ArrayDataset(Dataset):
    """NIID-Bench's CIFAR10_truncated: HWC uint8 images and labels, transformed per sample."""

    def __init__(self, images: np.ndarray, labels: np.ndarray, transform):
        self.images, self.labels, self.transform = images, labels, transform

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int):
        return self.transform(self.images[index]), int(self.labels[index])


@torch.no_grad()
def test_accuracy(model, loader, device) -> float:
    model.eval()
    correct = total = 0
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        correct += (model(x).argmax(1) == y).sum().item()
        total += len(y)
    model.train()
    return 100 * correct / total


def pytorch_defaults() -> None:
    """How the codes the reference stands for compute: PyTorch's defaults (nondeterministic
    kernels allowed, no cuDNN benchmarking, TF32 in cuDNN's convolutions, not in matmuls),
    whatever a run of ours in this process set before (shared.runs.numerics.set_numerics)."""
    torch.use_deterministic_algorithms(False)
    torch.backends.cudnn.deterministic = torch.backends.cudnn.benchmark = False
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = False, True


def run_reference(cfg: RunConfig, rounds: int | None = None) -> dict:
    """Train `rounds` rounds (default: the config's) the reference way; per-round seconds,
    samples trained and accuracies."""
    device = resolve_device(cfg.trainer.device)
    pytorch_defaults()
    federation = build_federation(cfg, device)  # the partition, the method's server-side data
    dataset = federation.dataset
    train_images = federation.train_x.cpu().permute(0, 2, 3, 1).numpy()  # HWC uint8, as torchvision keeps CIFAR
    train_labels = federation.train_y.cpu().numpy()
    train_transform = (
        NIIDBenchTrainTransform(dataset.mean, dataset.std)
        if dataset.augment
        else TestTransform(dataset.mean, dataset.std)
    )
    client_sets = [
        ArrayDataset(train_images[c.index.cpu().numpy()], train_labels[c.index.cpu().numpy()], train_transform)
        for c in federation.clients
    ]
    test_set = ArrayDataset(
        federation.test.x.cpu().permute(0, 2, 3, 1).numpy(),
        federation.test.y.cpu().numpy(),
        TestTransform(dataset.mean, dataset.std),
    )
    test_loader = DataLoader(test_set, batch_size=cfg.eval.batch_size, shuffle=False)

    torch.manual_seed(cfg.seed)
    global_model = model_for(cfg, federation).to(device)
    net = copy.deepcopy(global_model)
    method = build_method(cfg, federation)
    loc = cfg.local
    history = []
    for round in range(rounds or cfg.federation.rounds):
        started = time.perf_counter()
        sampled = sample_clients(cfg, round)
        method.prepare_round(round, global_model)
        global_state = copy.deepcopy(global_model.state_dict())
        updates, local_accs, samples = [], [], 0
        for cid in sampled:
            client = federation.clients[cid]
            net.load_state_dict(global_state)
            net.train()
            optimizer = torch.optim.SGD(
                net.parameters(), lr=loc.lr, momentum=loc.momentum, weight_decay=loc.weight_decay
            )
            loader = DataLoader(client_sets[cid], batch_size=loc.batch_size, shuffle=True)
            method.start_client(client, net)
            steps, loss_sum = 0, 0.0
            for _ in range(loc.epochs):
                for x, y in loader:
                    x, y = x.to(device), y.to(device)
                    loss = method.local_loss(net, x, y, client)
                    optimizer.zero_grad()
                    loss.backward()
                    if loc.grad_clip:
                        torch.nn.utils.clip_grad_norm_(net.parameters(), loc.grad_clip)
                    optimizer.step()
                    loss_sum += loss.item()
                    steps += 1
                    samples += len(y)
            update = ClientUpdate(cid, copy.deepcopy(net.state_dict()), client.num_samples, steps, loss_sum / steps)
            method.finish_client(client, net, update)
            updates.append(update)
            if cfg.eval.local:
                local_accs.append(test_accuracy(net, test_loader, device))
        method.aggregate(global_model, updates)
        acc = test_accuracy(global_model, test_loader, device)
        history.append(
            {
                "round": round + 1,
                "global_acc": acc,
                "local_acc": float(np.mean(local_accs)) if local_accs else None,
                "samples": samples,
                "seconds": time.perf_counter() - started,
            }
        )
    return {"history": history, "final_acc": history[-1]["global_acc"]}
