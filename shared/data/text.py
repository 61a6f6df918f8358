"""AG News and SST-5, FedGKD's text datasets (Table 4): download, verify, parse, tokenise once.

- AG News (Zhang et al. 2015; 4 classes, 120,000 train / 7,600 test): the CSV files (class
  1-4, title, description) from the address torchtext downloads them from, MD5-checked. A
  sample's text is its title and description joined by a space, as in Hugging Face's ag_news.
  FedGKD trains on half of the training set (60,000): `dataset.train_subset=60000`.
- SST-5 (Socher et al. 2013; 5 classes, 8,544 train / 2,210 test sentences): the Stanford
  Sentiment Treebank's trainDevTestTrees_PTB.zip, SHA-256-checked; a sentence's label is its
  tree's root label and its text the tree's leaves. Its dev split (1,101 sentences) is the
  validation split of `dataset.val_source=dev` (FedGKD-VOTE's on SST-5).

Token ids come from the tokenizer of `model.pretrained` (a hub id, or a local directory saved
with save_pretrained), truncated and padded to `dataset.max_length`, and are cached as
<data root>/cache/<name>-<tokenizer hash>-len<max_length>.pt: a second run neither parses nor
tokenises. Needs the optional `transformers` (requirements-text.txt); nothing else does.
"""

from __future__ import annotations

import csv
import hashlib
import json
import re
import zipfile
from pathlib import Path

import torch

from shared.config.schema import DatasetConfig
from shared.data.catalog import dataset_info
from shared.data.datasets import (
    SPLITS,
    Archive,
    DataError,
    Dataset,
    TextVocabulary,
    cached,
    dataset_from_arrays,
    fetch_archive,
)

AG_NEWS = {
    "train": Archive(
        "https://raw.githubusercontent.com/mhjabreel/CharCnn_Keras/master/data/ag_news_csv/train.csv",
        "ag_news_train.csv",
        "b1a00f826fdfbd249f79597b59e1dc12",
    ),
    "test": Archive(
        "https://raw.githubusercontent.com/mhjabreel/CharCnn_Keras/master/data/ag_news_csv/test.csv",
        "ag_news_test.csv",
        "d52ea96a97a2d943681189a97654912d",
    ),
}
AG_NEWS_CLASSES = ["World", "Sports", "Business", "Sci/Tech"]
SST = Archive(
    "https://nlp.stanford.edu/sentiment/trainDevTestTrees_PTB.zip",
    "trainDevTestTrees_PTB.zip",
    sha256="5c613a4f673fc74097d523a2c83f38e0cc462984d847b82c7aaf36b01cbbbfcc",
)
SST5_CLASSES = ["very negative", "negative", "neutral", "positive", "very positive"]
PTB_ESCAPES = {"-LRB-": "(", "-RRB-": ")"}


def import_transformers():
    """`transformers`, or an error that names the optional extra it comes with."""
    try:
        import transformers
    except ImportError as exc:
        raise DataError(
            "AG News, SST-5 and model.name=distilbert need the optional text extra: "
            "pip install -r requirements-text.txt (transformers)"
        ) from exc
    return transformers


def read_ag_news(path: Path) -> tuple[list[str], list[int]]:
    texts, labels = [], []
    with open(path, newline="", encoding="utf-8") as f:
        for line, row in enumerate(csv.reader(f), 1):
            if len(row) != 3 or row[0] not in ("1", "2", "3", "4"):
                raise DataError(f"{path}:{line} is not an AG News row (class 1-4, title, description)")
            labels.append(int(row[0]) - 1)
            texts.append(f"{row[1]} {row[2]}")
    return texts, labels


def parse_sentiment_tree(line: str) -> tuple[str, int]:
    """'(3 (2 It) (4 works))' -> ('It works', 3): the leaves and the root's label."""
    tokens = re.findall(r"\(|\)|[^\s()]+", line)
    if len(tokens) < 4 or tokens[0] != "(" or not tokens[1].isdigit() or not 0 <= int(tokens[1]) < len(SST5_CLASSES):
        raise ValueError("not a sentiment tree")
    leaves = [t for before, t in zip(tokens, tokens[1:]) if t not in "()" and before != "("]
    return " ".join(PTB_ESCAPES.get(leaf, leaf) for leaf in leaves), int(tokens[1])


def read_sst5(archive: Path, split: str) -> tuple[list[str], list[int]]:
    texts, labels = [], []
    with zipfile.ZipFile(archive) as z:
        member = f"trees/{split}.txt"
        for line_number, line in enumerate(z.read(member).decode("utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                text, label = parse_sentiment_tree(line)
            except ValueError as exc:
                raise DataError(f"{archive}:{member}:{line_number}: {exc}") from exc
            texts.append(text)
            labels.append(label)
    return texts, labels


def read_raw(name: str, root: Path) -> dict[str, tuple[list[str], list[int]]]:
    """{"train"/"test"(/"dev"): (texts, labels)}, downloading and verifying the files first."""
    if name == "ag_news":
        return {split: read_ag_news(fetch_archive(archive, root)) for split, archive in AG_NEWS.items()}
    archive = fetch_archive(SST, root)
    return {split: read_sst5(archive, split) for split in ("train", "test", "dev")}


def from_pretrained(auto_class: str, pretrained: str, what: str):
    """transformers' `auto_class` (AutoModel, AutoTokenizer) loaded from `model.pretrained`; a
    DataError saying how to provide it where that fails (not a saved directory, and the hub
    unreachable or without it). `what`: what it loads, for the message."""
    transformers = import_transformers()
    try:
        return getattr(transformers, auto_class).from_pretrained(pretrained)
    except (OSError, ValueError) as exc:
        raise DataError(
            f"model.pretrained={pretrained!r}: cannot load {what} ({exc}). Give a directory holding a saved "
            f"model and tokenizer (on a machine with network: AutoModel.from_pretrained(...).save_pretrained(DIR) "
            f"and the same for AutoTokenizer), or a hub id with the hub reachable."
        ) from exc


def load_tokenizer(pretrained: str):
    return from_pretrained("AutoTokenizer", pretrained, "its tokenizer")


def tokenizer_fingerprint(tokenizer) -> str:
    """Equal for tokenizers that map text to the same ids, wherever they were loaded from."""
    identity = [
        type(tokenizer).__name__,
        getattr(tokenizer, "do_lower_case", None),
        sorted(tokenizer.get_vocab().items()),
    ]
    return hashlib.sha256(json.dumps(identity).encode()).hexdigest()[:12]


def tokenize(texts: list[str], tokenizer, max_length: int) -> torch.Tensor:
    encoded = tokenizer(
        texts, max_length=max_length, truncation=True, padding="max_length", return_attention_mask=False
    )
    return torch.tensor(encoded["input_ids"], dtype=torch.int64)


def convert_text(name: str, root: Path, tokenizer, max_length: int) -> dict:
    arrays: dict = {
        "classes": AG_NEWS_CLASSES if name == "ag_news" else SST5_CLASSES,
        "vocab_size": len(tokenizer),
        "pad_id": tokenizer.pad_token_id,
    }
    for split, (texts, labels) in read_raw(name, root).items():
        arrays[f"{split}_x"] = tokenize(texts, tokenizer, max_length)
        arrays[f"{split}_y"] = torch.tensor(labels, dtype=torch.int64)
    return arrays


def load_text_dataset(name: str, cfg: DatasetConfig, root: Path, tokenizer: str) -> Dataset:
    loaded = load_tokenizer(tokenizer)
    cache = root / "cache" / f"{name}-{tokenizer_fingerprint(loaded)}-len{cfg.max_length}.pt"
    splits = (*SPLITS, "dev") if dataset_info(name).dev else SPLITS
    arrays = cached(cache, lambda: convert_text(name, root, loaded, cfg.max_length), splits)
    return dataset_from_arrays(
        name,
        arrays,
        mean=(),
        std=(),
        augment=False,
        text=TextVocabulary(int(arrays["vocab_size"]), int(arrays["pad_id"])),
    )
