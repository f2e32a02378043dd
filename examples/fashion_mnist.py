"""Fashion-MNIST from Debian's dataset-fashion-mnist, as float32 arrays."""

import gzip
import os

import numpy as np

DEFAULT_DIR = "/usr/share/datasets/fashion-mnist"


def load(split: str, data_dir: str = DEFAULT_DIR):
    """(images [n, 1, 28, 28] float32 in [0, 1], labels [n] int64) of
    split "train" or "t10k"."""
    def read(name, offset):
        path = os.path.join(data_dir, name)
        with gzip.open(path, "rb") as f:
            return np.frombuffer(f.read(), np.uint8, offset=offset)
    images = read(f"{split}-images-idx3-ubyte.gz", 16).reshape(-1, 1, 28, 28)
    labels = read(f"{split}-labels-idx1-ubyte.gz", 8).astype(np.int64)
    if len(images) != len(labels):
        raise ValueError(f"{data_dir}: {len(images)} {split} images but {len(labels)} labels")
    return images.astype(np.float32) / 255.0, labels
