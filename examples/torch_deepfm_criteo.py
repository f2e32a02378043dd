#!/usr/bin/python3
"""DeepFM on Criteo-format data, its embeddings in hash tables on pstrain's ps.

Generate data, then train on a local cluster (2 ps, 2 Python workers):
    build/bin/pstrain generate_criteo --out=/tmp/criteo.tsv --rows=40000 --vocab=2000
    /usr/bin/python3 examples/torch_deepfm_criteo.py --cluster --data=/tmp/criteo.tsv
which writes the model spec (the module's own initial values; two hash
tables) and runs
    pstrain local --model=spec:SPEC --optimizer=adagrad --checkpoint_dir=CKPT \\
        --worker_command='/usr/bin/python3 THIS --data=...'
with the file's lines but its held-out tail (--eval_fraction) as the
workers' --data: each worker streams its share of them (pstrain.Stream,
through worker.stream: its byte range of the file, shuffled in blocks,
parsed by pstrain's C++ reader; its memory does not grow with the file).
It then exports the final checkpoint, scores it on the held-out tail and
prints its AUC (`test AUC 0.7944, log loss 0.5155 on the held-out
8000 rows (final checkpoint ckpt-..., step N)`). Under TF_CONFIG (what
pstrain local, Docker or Kubernetes give a worker) it is one worker.
--local trains the same model in this one process, with no pstrain: the
same initial values (the ps's initializer for the tables' rows), the same
update rule (--optimizer, the ps's Adagrad or SGD, for the dense
parameters and the rows), the same reader over the whole training part:
the reference. --dense_optimizer=adam trains the dense layers with torch's
Adam and the tables with --optimizer, the CTR recipe: the job gets them as
two optimizer groups (docs/optimizers.md).

The model (Guo et al., 2017): a first-order term (a 1-wide hash table over
the 26 categorical fields, plus a linear layer over the 13 integer ones),
the factorization machine's pairwise term over the fields' embeddings (an
--dim wide hash table), and an MLP over the embeddings and the integer
features, summed into one logit.
"""

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import torch.nn.functional as F

import pstrain.torch

NUM_DENSE = 13
NUM_FIELDS = 26
SHUFFLE_BUFFER = 10000  # examples per shuffled block, in the cluster and in --local


def split_file(path, eval_fraction, work):
    """(train, held-out): paths in `work` of the file's lines but its last
    eval_fraction, and of those last lines. Two passes over the file, a line
    at a time: nothing of it is held in memory."""
    with open(path) as f:
        lines = sum(1 for _ in f)
    keep = lines - int(round(lines * eval_fraction))
    train, held_out = os.path.join(work, "train.tsv"), os.path.join(work, "held_out.tsv")
    with open(path) as f, open(train, "w") as t, open(held_out, "w") as h:
        for number, line in enumerate(f):
            (t if number < keep else h).write(line)
    return train, held_out


def stream(path, args, shuffle_buffer=1, epochs=1, batch_size=4096):
    """A Criteo-format file read by pstrain's streaming reader, all of it
    in one process: batches of (dense [n, 13] float32, the integer features
    as log(1 + max(0, x)); ids [n, 26] int64, each categorical value hashed
    into an id of its field; labels [n] float32). The workers read their
    shares with the same reader (worker.stream), so ids are the same
    everywhere. ValueError naming file:line for a malformed line."""
    return pstrain.Stream(path, "criteo", shuffle_buffer=shuffle_buffer, seed=args.seed,
                          epochs=epochs, batch_size=batch_size)


class DeepFM(torch.nn.Module):
    def __init__(self, dim=8, hidden=(64, 32)):
        super().__init__()
        # The tables live on the ps (hash tables: any int64 id, rows made on
        # first touch); without a worker, in this process.
        self.first_order = pstrain.torch.Embedding(None, 1, init={"kind": "zeros"})
        self.embedding = pstrain.torch.Embedding(
            None, dim, init={"kind": "normal", "scale": 0.01, "seed": 1})
        self.dense_linear = torch.nn.Linear(NUM_DENSE, 1)
        layers, width = [], NUM_FIELDS * dim + NUM_DENSE
        for h in hidden:
            layers += [torch.nn.Linear(width, h), torch.nn.ReLU()]
            width = h
        layers.append(torch.nn.Linear(width, 1))
        self.mlp = torch.nn.Sequential(*layers)

    def forward(self, ids, dense):
        first = self.first_order(ids).sum((1, 2)) + self.dense_linear(dense).squeeze(1)
        e = self.embedding(ids)  # [batch, fields, dim]
        fm = 0.5 * (e.sum(1).square() - e.square().sum(1)).sum(1)
        deep = self.mlp(torch.cat([e.flatten(1), dense], 1)).squeeze(1)
        return first + fm + deep


def build_model(args):
    return DeepFM(args.dim, tuple(int(h) for h in args.hidden.split(",") if h))


def auc(scores, labels):
    """The area under the ROC curve, from ranks (ties share their mean rank)."""
    labels = np.asarray(labels) > 0.5
    positives, negatives = int(labels.sum()), int((~labels).sum())
    if positives == 0 or negatives == 0:
        return float("nan")
    _, inverse, counts = np.unique(np.asarray(scores), return_inverse=True, return_counts=True)
    ranks = (np.cumsum(counts) - (counts - 1) / 2.0)[inverse]  # 1-based
    return float((ranks[labels].sum() - positives * (positives + 1) / 2) / (positives * negatives))


def evaluate(model, path, args):
    """(AUC, mean log loss, examples) of the model on a Criteo-format file,
    read as a stream in chunks."""
    model.eval()
    logits, labels = [], []
    with torch.no_grad():
        for _, chunk in stream(path, args):
            logits.append(model(torch.from_numpy(chunk.ids), torch.from_numpy(chunk.dense)))
            labels.append(torch.from_numpy(chunk.labels))
    model.train()
    logits, labels = torch.cat(logits), torch.cat(labels)
    loss = F.binary_cross_entropy_with_logits(logits, labels)
    return auc(logits.numpy(), labels.numpy()), float(loss), len(labels)


def batch_loss(model, batch):
    logits = model(torch.from_numpy(batch.ids), torch.from_numpy(batch.dense))
    return F.binary_cross_entropy_with_logits(logits, torch.from_numpy(batch.labels))


def report(result_path, **figures):
    print("result: " + json.dumps(figures), flush=True)
    if result_path:
        with open(result_path + ".tmp", "w") as f:
            json.dump(figures, f)
        os.replace(result_path + ".tmp", result_path)


def train_worker(args):
    import pstrain
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    worker = pstrain.Worker.from_env()
    model = build_model(args)
    trainer = pstrain.torch.Trainer(worker, model)  # checks the module against the job
    # This worker's share of the file (its byte range), streamed: the
    # batches of the job's data positions, shuffled in blocks of the job's
    # --shuffle_buffer.
    data = worker.stream(args.data, "criteo")
    start, end, seen = None, None, 0
    for batch in trainer.batches(data):
        start = start or time.time()
        loss = batch_loss(model, batch.data)
        loss.backward()
        trainer.step(loss)
        seen += len(batch.examples)
        end = time.time()  # the last batch's: not the wait for the others to finish
    elapsed = end - start if seen else 0.0
    figures = {"worker": worker.index, "examples": seen, "seconds": elapsed,
               "examples_per_sec": seen / elapsed if elapsed > 0 else 0.0,
               "global_step": worker.global_step}
    worker.close()
    if args.result:
        args.result = args.result.replace("{worker}", str(figures["worker"]))
    report(args.result, **figures)


def train_local(args):
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    work = tempfile.mkdtemp(prefix="pstrain-deepfm-local-")
    try:
        train, held_out = split_file(args.data, args.eval_fraction, work)
        train_local_on(args, train, held_out)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def dense_adam(model, args):
    """--dense_optimizer=adam: the dense layers' optimizer, torch's own."""
    return torch.optim.Adam(model.parameters(), lr=args.dense_learning_rate)


def train_local_on(args, train, held_out):
    model = build_model(args)
    # The ps's update rules (ps_server/store/optimizer.h), for the dense
    # parameters here and for the tables' rows in apply_local.
    if args.dense_optimizer == "adam":
        optimizer = dense_adam(model, args)
    elif args.optimizer == "adagrad":
        optimizer = torch.optim.Adagrad(model.parameters(), lr=args.learning_rate, eps=0.0,
                                        initial_accumulator_value=args.initial_accumulator)
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=args.learning_rate)
    tables = [model.first_order, model.embedding]
    start, seen = time.time(), 0
    # The same reader and block shuffle as the workers', over the whole file.
    for _, batch in stream(train, args, shuffle_buffer=SHUFFLE_BUFFER, epochs=args.epochs,
                           batch_size=args.batch_size):
        optimizer.zero_grad()
        batch_loss(model, batch).backward()
        optimizer.step()
        for table in tables:
            table.apply_local(args.learning_rate, args.optimizer, args.initial_accumulator)
        seen += len(batch.labels)
    elapsed = time.time() - start
    test_auc, test_loss, _ = evaluate(model, held_out, args)
    report(args.result, mode="local", examples=seen, seconds=elapsed,
           examples_per_sec=seen / elapsed, test_auc=test_auc, test_log_loss=test_loss)


def run_cluster(args):
    torch.manual_seed(args.seed)
    work = tempfile.mkdtemp(prefix="pstrain-deepfm-")
    try:
        model = build_model(args)
        if args.dense_optimizer == "adam":
            # Two groups: the script's Adam for the dense layers, the ps's
            # --optimizer (TensorFlow's form, as apply_local) for the tables.
            spec = pstrain.torch.export_spec(
                model, os.path.join(work, "deepfm.json"), optimizer=dense_adam(model, args),
                table_optimizer={"name": args.optimizer, "learning_rate": args.learning_rate,
                                 "initial_accumulator": args.initial_accumulator})
            optimizer_flags = []
        else:
            spec = pstrain.torch.export_spec(model, os.path.join(work, "deepfm.json"))
            optimizer_flags = [f"--optimizer={args.optimizer}",
                               f"--learning_rate={args.learning_rate}",
                               f"--initial_accumulator={args.initial_accumulator}"]
        train, held_out = split_file(args.data, args.eval_fraction, work)
        ckpt = args.checkpoint_dir or os.path.join(work, "ckpt")
        pstrain_bin = os.environ.get("PSTRAIN_BIN", "build/bin")
        worker = [sys.executable, os.path.abspath(__file__), f"--data={train}", f"--dim={args.dim}",
                  f"--hidden={args.hidden}", f"--result={work}/worker-{{worker}}.json"]
        command = [os.path.join(pstrain_bin, "pstrain"), "local", f"--ps={args.ps}",
                   f"--workers={args.workers}", f"--model=spec:{spec}", f"--mode={args.mode}",
                   f"--epochs={args.epochs}", f"--batch_size={args.batch_size}",
                   *optimizer_flags, f"--seed={args.seed}",
                   f"--shuffle_buffer={SHUFFLE_BUFFER}",
                   f"--checkpoint_dir={ckpt}",
                   "--worker_command=" + " ".join(shlex.quote(a) for a in worker)]
        command += args.pstrain_flags
        print("running: " + " ".join(command), flush=True)
        start = time.time()
        code = subprocess.call(command)
        elapsed = time.time() - start
        if code != 0:
            return code
        # The final checkpoint (the chief saves one at the end), exported
        # and scored here: the model the job trained, tables included.
        exported = os.path.join(work, "deepfm.safetensors")
        done = subprocess.run([os.path.join(pstrain_bin, "pstrain"), "checkpoint", "export",
                               ckpt, exported], capture_output=True, text=True)
        print(done.stdout + done.stderr, end="", flush=True)
        if done.returncode != 0:
            return done.returncode
        # "<out>: N tensors, B bytes, step S (from <dir>)"
        found = re.search(r"step (\d+) \(from (.*)\)", done.stdout)
        step = int(found.group(1)) if found else None
        checkpoint = os.path.basename(found.group(2)) if found else None
        model = build_model(args)
        pstrain.torch.load_safetensors(model, exported)
        test_auc, test_loss, held_out_rows = evaluate(model, held_out, args)
        workers = []
        for w in range(args.workers):
            with open(os.path.join(work, f"worker-{w}.json")) as f:
                workers.append(json.load(f))
        tensors = pstrain.torch.read_safetensors(exported)
        hash_rows = {e.table_name: len(tensors[e.table_name + ".ids"])
                     for e in (model.first_order, model.embedding)}
        print(f"test AUC {test_auc:.4f}, log loss {test_loss:.4f} on the held-out "
              f"{held_out_rows} rows (final checkpoint {checkpoint}, step {step})", flush=True)
        report(args.result, mode="cluster", seconds=elapsed,
               examples=sum(w["examples"] for w in workers), test_auc=test_auc,
               test_log_loss=test_loss, global_step=step, checkpoint=checkpoint,
               hash_rows=hash_rows, workers=workers)
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cluster", action="store_true", help="train on a local pstrain cluster")
    parser.add_argument("--local", action="store_true", help="train in this process, no pstrain")
    parser.add_argument("--data", required=True,
                        help="a Criteo-format file (a worker: its training part, streamed)")
    parser.add_argument("--eval_fraction", type=float, default=0.2,
                        help="the held-out tail of the file, scored at the end")
    parser.add_argument("--dim", type=int, default=8, help="embedding width")
    parser.add_argument("--hidden", default="64,32", help="the MLP's hidden layers")
    parser.add_argument("--ps", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--mode", default="async", choices=["async", "ssp"],
                        help="--cluster: how workers agree (pstrain's sync mode aggregates dense "
                             "variables only, and refuses a model with tables)")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch_size", type=int, default=256)
    parser.add_argument("--optimizer", choices=["adagrad", "sgd"], default="adagrad")
    parser.add_argument("--learning_rate", type=float, default=0.1)
    parser.add_argument("--initial_accumulator", type=float, default=0.1,
                        help="Adagrad's accumulator start value")
    parser.add_argument("--dense_optimizer", choices=["same", "adam"], default="same",
                        help="adam: torch's Adam for the dense layers, --optimizer for the tables")
    parser.add_argument("--dense_learning_rate", type=float, default=0.001,
                        help="--dense_optimizer=adam: its rate")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1, help="--local: torch threads")
    parser.add_argument("--checkpoint_dir", help="--cluster: keep the checkpoints here")
    parser.add_argument("--result", help="write the figures as JSON here ({worker}: its index)")
    parser.add_argument("pstrain_flags", nargs="*", help="--cluster: more pstrain local flags")
    args = parser.parse_args()
    if args.local:
        train_local(args)
    elif args.cluster:
        sys.exit(run_cluster(args))
    else:
        train_worker(args)


if __name__ == "__main__":
    main()
