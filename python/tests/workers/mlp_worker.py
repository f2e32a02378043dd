"""A Python worker for the tests: the built-in MLP's variables (the
chief's --model=mlp plan) trained with torch on Fashion-MNIST.

Options (argv):
  --record=DIR    append one JSON line per event to DIR/worker-<i>.jsonl:
                  start (the first batch's position, refresh), step
                  (position, examples, global step), rewind, end.
  --kill_at=P     SIGKILL this process right after the push of position P,
                  once (a marker file in DIR says it happened).
  --pause_at=P,.. before training position P (once each), record "paused"
                  and wait until the file DIR/resume-P exists.
  --bad_calls     first make calls the bindings must refuse, and record
                  what they raised and that the ps did not change.
  --save=DIR      write the initial and final values (npz) to DIR.
  --slow=W:MS     worker W sleeps MS milliseconds before each push.
  --wait_for=W    before its first batch, wait until worker W has recorded
                  its start (so the two train at the same time).
"""

import argparse
import json
import os
import signal
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "examples"))
import fashion_mnist  # noqa: E402
import pstrain  # noqa: E402


def forward(params, x):
    h = x
    for i in range(0, len(params) - 2, 2):
        h = torch.relu(h @ params[i] + params[i + 1])
    return h @ params[-2] + params[-1]


def bad_calls(worker, record):
    """Every refusal, by exception type and message; then whether the ps's
    values are unchanged."""
    before = worker.pull()
    names = list(worker.variables)
    zeros = [np.zeros(v.shape, np.float32) for v in before]
    tries = {
        "float64 gradient": lambda: worker.push_pull(
            [z.astype(np.float64) for z in zeros], out=[z.copy() for z in zeros]),
        "wrong shape": lambda: worker.push_pull(
            [np.zeros(5, np.float32)] + zeros[1:], out=[z.copy() for z in zeros]),
        "too few gradients": lambda: worker.push_pull(zeros[:-1]),
        "strided tensor": lambda: worker.push_pull(
            [torch.zeros(z.shape[::-1]).t() if z.ndim == 2 else torch.zeros(z.shape)
             for z in zeros]),
        "unknown table": lambda: worker.pull_rows("no_such_table", np.arange(3)),
        "int32 ids": lambda: worker.push_rows("no_such_table", np.arange(3, dtype=np.int32),
                                              np.zeros((3, 4), np.float32)),
        "read-only values": lambda: worker.pull(out=[np.broadcast_to(z, z.shape) for z in zeros]),
        "a list": lambda: worker.push_pull([[0.0]] * len(names)),
    }
    raised = {}
    for what, call in tries.items():
        try:
            call()
            raised[what] = None
        except Exception as e:  # noqa: BLE001 - recorded for the test to judge
            raised[what] = [type(e).__name__, str(e)]
    after = worker.pull()
    unchanged = all(np.array_equal(a, b) for a, b in zip(before, after))
    record({"event": "bad_calls", "raised": raised, "unchanged": unchanged, "names": names})


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--record")
    parser.add_argument("--kill_at", type=int, default=-1)
    parser.add_argument("--pause_at", default="")
    parser.add_argument("--bad_calls", action="store_true")
    parser.add_argument("--save")
    parser.add_argument("--slow", default="")
    parser.add_argument("--wait_for", type=int, default=-1)
    args = parser.parse_args()
    torch.set_num_threads(1)
    images, labels = fashion_mnist.load("train")
    images = images.reshape(len(images), -1)
    worker = pstrain.Worker.from_env(heartbeat_interval=0.2)

    def record(event):
        if args.record:
            with open(os.path.join(args.record, f"worker-{worker.index}.jsonl"), "a") as f:
                f.write(json.dumps(event) + "\n")

    if args.bad_calls:
        bad_calls(worker, record)
    values, first, last = None, True, -1
    pauses = {int(p) for p in args.pause_at.split(",") if p}
    slow_worker, slow_ms = (int(x) for x in args.slow.split(":")) if args.slow else (-1, 0)
    for batch in worker.batches(len(images)):
        if first:
            record({"event": "start", "position": batch.position, "refresh": batch.refresh,
                    "pid": os.getpid()})
            first = False
            other = os.path.join(args.record or ".", f"worker-{args.wait_for}.jsonl")
            while args.wait_for not in (-1, worker.index) and not os.path.exists(other):
                time.sleep(0.01)
        elif batch.position <= last:
            record({"event": "rewind", "from": last, "to": batch.position})
        if batch.position in pauses:
            pauses.remove(batch.position)
            record({"event": "paused", "position": batch.position})
            resume = os.path.join(args.record, f"resume-{batch.position}")
            while not os.path.exists(resume):  # the test creates it
                time.sleep(0.05)
        if batch.refresh:
            values = worker.pull()
            if values is None:
                continue
            if args.save and batch.position == 0:
                np.savez(os.path.join(args.save, f"initial-{worker.index}.npz"), *values)
        params = [torch.from_numpy(v.copy()).requires_grad_() for v in values]
        x = torch.from_numpy(images[batch.examples])
        y = torch.from_numpy(labels[batch.examples])
        loss = torch.nn.functional.cross_entropy(forward(params, x), y)
        loss.backward()
        if worker.index == slow_worker:
            time.sleep(slow_ms / 1000)
        pushed = worker.push_pull([p.grad for p in params], out=values, loss=float(loss))
        if pushed is None:
            continue
        last = batch.position
        record({"event": "step", "position": batch.position, "global_step": worker.global_step,
                "examples": [int(e) for e in batch.examples] if args.save else len(batch.examples)})
        marker = os.path.join(args.record or ".", f"killed-{worker.index}")
        if batch.position == args.kill_at and not os.path.exists(marker):
            open(marker, "w").close()
            record({"event": "kill", "position": batch.position})
            os.kill(os.getpid(), signal.SIGKILL)
    if args.save:
        np.savez(os.path.join(args.save, f"final-{worker.index}.npz"), *values)
    record({"event": "end", "global_step": worker.global_step})
    worker.close()


if __name__ == "__main__":
    main()
