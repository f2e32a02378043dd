"""A Python worker for the built-in logreg model (the chief's --model=logreg
plan: the hash table logreg/weights and the dense bias) that streams its
share of the job's --data (worker.stream, libsvm) and trains logistic
regression on it with numpy.

Options (argv):
  --record=DIR    append one JSON line per event to DIR/worker-<i>.jsonl:
                  start (the first batch's position), step (position and
                  the batch's signature: its examples' labels, ids and
                  values summed), end.
  --kill_at=P     SIGKILL this process right after the pushes of position
                  P, once (a marker file in DIR says it happened).
"""

import argparse
import json
import os
import signal

import numpy as np

import pstrain


def signature(batch):
    """What identifies a batch's examples, in order: a test reading the same
    position compares it."""
    return [len(batch.labels), float(batch.labels.sum()),
            int(np.bitwise_xor.reduce(batch.ids * np.arange(1, len(batch.ids) + 1)))
            if len(batch.ids) else 0,
            float(batch.values.sum())]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--record", required=True)
    parser.add_argument("--kill_at", type=int, default=-1)
    args = parser.parse_args()
    worker = pstrain.Worker.from_env(heartbeat_interval=0.2)

    def record(event):
        with open(os.path.join(args.record, f"worker-{worker.index}.jsonl"), "a") as f:
            f.write(json.dumps(event) + "\n")

    stream = worker.stream(format="libsvm")
    values, first = None, True
    for batch in worker.batches(stream):
        if first:
            record({"event": "start", "position": batch.position, "examples": stream.examples})
            first = False
        if batch.refresh:
            values = worker.pull()
            if values is None:
                continue
        d = batch.data
        unique, slot = np.unique(d.ids, return_inverse=True)
        rows = worker.pull_rows("logreg/weights", unique)
        if rows is None:
            continue
        weights = rows[:, 0]
        example = np.repeat(np.arange(len(d.labels)), np.diff(d.offsets))
        logits = np.bincount(example, weights=weights[slot] * d.values,
                             minlength=len(d.labels)) + values[0][0]
        dz = (1 / (1 + np.exp(-logits)) - d.labels).astype(np.float32)
        row_grads = np.bincount(slot, weights=dz[example] * d.values,
                                minlength=len(unique)).astype(np.float32).reshape(-1, 1)
        if not worker.push_rows("logreg/weights", unique, row_grads):
            continue
        if worker.push_pull([np.array([dz.sum()], np.float32)], out=values) is None:
            continue
        record({"event": "step", "position": batch.position, "signature": signature(d)})
        marker = os.path.join(args.record, f"killed-{worker.index}")
        if batch.position == args.kill_at and not os.path.exists(marker):
            open(marker, "w").close()
            os.kill(os.getpid(), signal.SIGKILL)
    record({"event": "end", "global_step": worker.global_step})
    worker.close()


if __name__ == "__main__":
    main()
