#!/usr/bin/python3
"""The demo's MLP trained in one PyTorch process, no pstrain: the reference
bench/throughput.sh measures `pstrain reference` and the demo cluster
against.

The same model and loop as `pstrain reference --model=mlp`: Fashion-MNIST
(Debian's dataset-fashion-mnist, pixels / 255), 784-256-128-10 with ReLU,
Glorot-uniform kernels and zero biases, softmax cross-entropy, Adam at
0.001 (torch's form; pstrain's default is TensorFlow's, which costs the
same), batch 64, a fresh permutation each epoch. Examples/s counts the
training loop only (steps x batch / seconds), as pstrain's summary does.
Prints one JSON object: examples_per_sec, train_seconds, global_step,
test_accuracy, threads.

    /usr/bin/python3 bench/torch_mlp.py --threads=1 --epochs=3
"""

import argparse
import gzip
import json
import os
import time

import numpy as np
import torch

DATA = "/usr/share/datasets/fashion-mnist"


def read_idx(name, offset):
    with gzip.open(os.path.join(DATA, name), "rb") as f:
        return np.frombuffer(f.read(), dtype=np.uint8, offset=offset)


def load(prefix):
    images = read_idx(f"{prefix}-images-idx3-ubyte.gz", 16).reshape(-1, 784)
    labels = read_idx(f"{prefix}-labels-idx1-ubyte.gz", 8).astype(np.int64)
    return torch.from_numpy(images.astype(np.float32) / 255.0), torch.from_numpy(labels)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--hidden", default="256,128", help="hidden widths, comma-separated")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)

    x_train, y_train = load("train")
    x_test, y_test = load("t10k")
    dims = [784] + [int(h) for h in args.hidden.split(",") if h] + [10]
    layers = []
    for i in range(len(dims) - 1):
        dense = torch.nn.Linear(dims[i], dims[i + 1])
        torch.nn.init.xavier_uniform_(dense.weight)
        torch.nn.init.zeros_(dense.bias)
        layers.append(dense)
        if i + 2 < len(dims):
            layers.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*layers)
    opt = torch.optim.Adam(model.parameters(), lr=0.001)
    loss_fn = torch.nn.CrossEntropyLoss()

    n = x_train.shape[0]
    steps = 0
    start = time.perf_counter()
    for _ in range(args.epochs):
        order = torch.randperm(n)
        for b in range(0, n, args.batch_size):
            idx = order[b:b + args.batch_size]
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x_train[idx]), y_train[idx])
            loss.backward()
            opt.step()
            steps += 1
    seconds = time.perf_counter() - start
    with torch.no_grad():
        accuracy = (model(x_test).argmax(1) == y_test).float().mean().item()
    print(json.dumps({
        "examples_per_sec": steps * args.batch_size / seconds,
        "train_seconds": seconds,
        "global_step": steps,
        "test_accuracy": round(accuracy, 4),
        "threads": args.threads,
    }))


if __name__ == "__main__":
    main()
