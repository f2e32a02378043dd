"""A Python worker that trains a module with embeddings on the ps (two hash
tables, one read twice a forward, and a table of 50 rows) through
pstrain.torch, and beside it, in the same process and on the same batches,
the same module with no pstrain (Embedding.apply_local and torch's
Adagrad). After every batch it pulls the rows it touched and records how
far the two are apart; it writes the figures and the final rows to --out.
"""

import argparse
import json

import numpy as np
import torch
import torch.nn.functional as F

import pstrain
import pstrain.torch

NUM_EXAMPLES = 384
LEARNING_RATE = 0.1


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.first = pstrain.torch.Embedding(None, 1, init={"kind": "uniform", "scale": 0.05,
                                                            "seed": 3})
        self.emb = pstrain.torch.Embedding(None, 4, init={"kind": "normal", "scale": 0.1,
                                                          "seed": 5})
        self.table = pstrain.torch.Embedding(50, 2, init={"kind": "glorot_uniform", "seed": 2})
        self.out = torch.nn.Linear(4 + 2, 1)

    def forward(self, ids):
        pair = self.emb(ids[:, 0]) * self.emb(ids[:, 1])  # the table read twice
        deep = self.out(torch.cat([pair, self.table(ids[:, 2])], 1)).squeeze(1)
        return self.first(ids[:, :2]).sum((1, 2)) + deep


def data():
    """ids [n, 3] (two hash ids of any int64, a row of 50) and labels [n]."""
    rng = np.random.default_rng(7)
    vocab = rng.integers(-2**63, 2**63 - 1, size=40, dtype=np.int64)
    ids = np.stack([vocab[rng.integers(0, 40, NUM_EXAMPLES)],
                    vocab[rng.integers(0, 40, NUM_EXAMPLES)],
                    rng.integers(0, 50, NUM_EXAMPLES)], 1)
    labels = (rng.random(NUM_EXAMPLES) < 0.4).astype(np.float32)
    return ids, labels


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    torch.set_num_threads(1)
    ids, labels = data()
    torch.manual_seed(1)
    local = Model()  # the spec's initial values: the test made them with this seed
    remote = Model()
    optimizer = torch.optim.Adagrad(local.parameters(), lr=LEARNING_RATE, eps=0.0,
                                    initial_accumulator_value=0.1)
    tables = {"first": (remote.first, local.first), "emb": (remote.emb, local.emb),
              "table": (remote.table, local.table)}
    figures = {"batches": 0, "max_row_diff": 0.0, "max_dense_diff": 0.0}
    with pstrain.Worker.from_env() as worker:
        trainer = pstrain.torch.Trainer(worker, remote)
        for batch in trainer.batches(NUM_EXAMPLES):
            x = torch.from_numpy(ids[batch.examples])
            y = torch.from_numpy(labels[batch.examples])
            F.binary_cross_entropy_with_logits(remote(x), y).backward()
            assert trainer.step(), "a step failed"
            optimizer.zero_grad()
            F.binary_cross_entropy_with_logits(local(x), y).backward()
            optimizer.step()
            for _, mine in tables.values():
                mine.apply_local(LEARNING_RATE, "adagrad", 0.1)
            if figures["batches"] == 0:
                try:
                    worker.push_rows("emb", np.array([1], np.int64), np.zeros((1, 4), np.float32))
                    figures["second_push"] = "accepted"
                except RuntimeError as e:
                    figures["second_push"] = str(e)
            figures["batches"] += 1
            for name, (_, mine) in tables.items():
                seen = np.array(sorted(mine._index), np.int64)
                theirs = worker.pull_rows(name, seen)
                ours = mine._values[mine._local_slots(torch.from_numpy(seen))].numpy()
                figures["max_row_diff"] = max(figures["max_row_diff"],
                                              float(np.abs(theirs - ours).max()))
            for (_, p), q in zip(remote.named_parameters(), local.parameters()):
                figures["max_dense_diff"] = max(figures["max_dense_diff"],
                                                float((p - q).abs().max()))
        figures["rows"] = {name: {"ids": sorted(mine._index),
                                  "values": mine._values[mine._local_slots(
                                      torch.tensor(sorted(mine._index)))].tolist()}
                           for name, (_, mine) in tables.items()}
    with open(args.out, "w") as f:
        json.dump(figures, f)


if __name__ == "__main__":
    main()
