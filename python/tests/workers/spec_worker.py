"""A Python worker for a spec model: a linear classifier on Fashion-MNIST,
trained with pstrain.torch.Trainer.

  --wrong_shape_worker=I   worker I builds its layer with 11 outputs, so its
                           module does not match the job's spec.
"""

import argparse
import os
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "examples"))
import fashion_mnist  # noqa: E402
import pstrain  # noqa: E402
import pstrain.torch  # noqa: E402


def model(outputs=10):
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, outputs))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--wrong_shape_worker", type=int, default=-1)
    args = parser.parse_args()
    torch.set_num_threads(1)
    images, labels = fashion_mnist.load("train")
    with pstrain.Worker.from_env() as worker:
        module = model(11 if worker.index == args.wrong_shape_worker else 10)
        trainer = pstrain.torch.Trainer(worker, module)  # ValueError on a mismatch
        for batch in trainer.batches(len(images)):
            loss = F.cross_entropy(module(torch.from_numpy(images[batch.examples])),
                                   torch.from_numpy(labels[batch.examples]))
            loss.backward()
            trainer.step(loss)


if __name__ == "__main__":
    main()
