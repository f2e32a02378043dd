#!/usr/bin/python3
"""A small CNN on Fashion-MNIST, its parameters on pstrain's ps.

One command trains it on a local cluster (2 ps, 2 Python workers):
    /usr/bin/python3 examples/torch_cnn_fashion_mnist.py --cluster
which writes the model spec (the module's own initial values), runs
    pstrain local --model=spec:SPEC --checkpoint_dir=CKPT \\
        --worker_command='/usr/bin/python3 THIS'
then exports the final checkpoint and prints its test accuracy
(`test accuracy 0.9031 (final checkpoint ckpt-..., step N)`). Flags after
`--` go to pstrain local; CKPT is their --checkpoint_dir, or a temporary
directory. Under TF_CONFIG (what pstrain local, Docker or Kubernetes give
a task) it is that task: a worker, or with --cluster --evaluator an
evaluator that scores every checkpoint on the test set
(pstrain.Evaluator). --local trains the same model in this one process,
with torch's own optimizer and no pstrain: the reference.

The optimizer and its schedule are the script's own, as in PyTorch's MNIST
example: Adadelta(lr=1.0) and StepLR(step_size=1, gamma=0.7), made by
make_optimizer. --local steps them itself; --cluster hands the same objects
to pstrain.torch.export_spec, and the ps run torch's Adadelta at the
rates StepLR would give (docs/optimizers.md).
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fashion_mnist  # noqa: E402


class Cnn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(16, 32, 3, padding=1)
        self.fc1 = torch.nn.Linear(32 * 7 * 7, 128)
        self.fc2 = torch.nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def make_optimizer(model, args):
    """The training script's optimizer and scheduler, stepped per epoch."""
    if args.optimizer == "adam":
        optimizer = torch.optim.Adam(model.parameters(), lr=args.learning_rate or 0.001)
    else:
        optimizer = torch.optim.Adadelta(model.parameters(), lr=args.learning_rate or 1.0)
    return optimizer, torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=args.gamma)


def updates_per_epoch(examples, workers, batch_size, mode):
    """The ps's updates in one epoch: each worker's batches (worker i reads
    examples i, i + W, ...); async applies every push, sync one per step."""
    batches = [-(-((examples - i + workers - 1) // workers) // batch_size) for i in range(workers)]
    return max(batches) if mode == "sync" else sum(batches)


def train_images(args):
    images, labels = fashion_mnist.load("train", args.data_dir)
    if args.train_examples:
        images, labels = images[:args.train_examples], labels[:args.train_examples]
    return images, labels


def accuracy(model, images, labels):
    model.eval()
    with torch.no_grad():
        logits = torch.cat([model(torch.from_numpy(images[i:i + 1000]))
                            for i in range(0, len(images), 1000)])
    model.train()
    return float((logits.argmax(1).numpy() == labels).mean())


def report(result_path, **figures):
    print("result: " + json.dumps(figures), flush=True)
    if result_path:
        with open(result_path + ".tmp", "w") as f:
            json.dump(figures, f)
        os.replace(result_path + ".tmp", result_path)


def train_worker(args):
    import pstrain
    import pstrain.torch
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    images, labels = train_images(args)
    worker = pstrain.Worker.from_env()
    model = Cnn()
    trainer = pstrain.torch.Trainer(worker, model)  # checks the module against the job
    start, seen, trained = time.time(), 0, []
    for batch in trainer.batches(len(images)):
        x = torch.from_numpy(images[batch.examples])
        y = torch.from_numpy(labels[batch.examples])
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        if trainer.step(loss) and args.record_batches:
            trained.append({"epoch": batch.epoch, "examples": batch.examples.tolist()})
        seen += len(batch.examples)
    if args.record_batches:
        with open(args.record_batches.replace("{worker}", str(worker.index)), "w") as f:
            json.dump(trained, f)
    elapsed = time.time() - start
    # The model is scored by the evaluator task (--evaluator) or from the
    # final checkpoint: a worker leaves as soon as the job is over.
    figures = {"worker": worker.index, "examples": seen, "seconds": elapsed,
               "examples_per_sec": seen / elapsed if elapsed > 0 else 0.0,
               "global_step": worker.global_step}
    worker.close()
    if args.result:
        args.result = args.result.replace("{worker}", str(figures["worker"]))
    report(args.result, **figures)


def evaluate_checkpoints(args):
    """The evaluator task: the test accuracy of every checkpoint the job
    saves, reported to the chief, TensorBoard and <checkpoint_dir>/best."""
    import pstrain
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    test_images, test_labels = fashion_mnist.load("t10k", args.data_dir)
    model = Cnn()

    def evaluate(checkpoint):
        checkpoint.load_into(model)
        return {"test_accuracy": accuracy(model, test_images, test_labels)}

    evaluated = pstrain.Evaluator.from_env().run(evaluate)
    print(f"evaluated {evaluated} checkpoint(s)", flush=True)


def train_local(args):
    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    images, labels = train_images(args)
    test_images, test_labels = fashion_mnist.load("t10k", args.data_dir)
    model = Cnn()
    optimizer, scheduler = make_optimizer(model, args)
    if args.batches:
        # The batches a one-worker job trained (--record_batches), in order.
        with open(args.batches) as f:
            trained = json.load(f)
        epochs = [[np.array(b["examples"]) for b in trained if b["epoch"] == e]
                  for e in range(args.epochs)]
    else:
        rng = np.random.default_rng(args.seed)
        epochs = []
        for _ in range(args.epochs):
            order = rng.permutation(len(images))
            epochs.append([order[i:i + args.batch_size]
                           for i in range(0, len(order), args.batch_size)])
    start, seen = time.time(), 0
    for batches in epochs:
        for idx in batches:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(torch.from_numpy(images[idx])), torch.from_numpy(labels[idx]))
            loss.backward()
            if args.clip_norm:
                torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip_norm)
            optimizer.step()
            seen += len(idx)
        scheduler.step()
    elapsed = time.time() - start
    if args.save:
        import pstrain.torch
        pstrain.torch.write_safetensors(
            args.save, {n: p.detach().numpy() for n, p in model.named_parameters()})
    report(args.result, examples=seen, seconds=elapsed, examples_per_sec=seen / elapsed,
           test_accuracy=accuracy(model, test_images, test_labels))


def flag_value(flags, name):
    """The value of --name in a list of pstrain flags (--name=V or --name V), or None."""
    for i, flag in enumerate(flags):
        if flag.startswith(f"--{name}="):
            return flag.split("=", 1)[1]
        if flag == f"--{name}" and i + 1 < len(flags):
            return flags[i + 1]
    return None


def score_final_checkpoint(ckpt, work, data_dir):
    """Exports the newest checkpoint under `ckpt` (the final one: the chief
    saves one at the end) and scores it on the test set. Returns the
    figures: test_accuracy, global_step, checkpoint."""
    import pstrain.torch
    exported = os.path.join(work, "trained.safetensors")
    pstrain_bin = os.environ.get("PSTRAIN_BIN", "build/bin")
    done = subprocess.run([os.path.join(pstrain_bin, "pstrain"), "checkpoint", "export", ckpt,
                           exported], capture_output=True, text=True)
    print(done.stdout + done.stderr, end="", flush=True)
    if done.returncode != 0:
        raise RuntimeError(f"pstrain checkpoint export {ckpt} exited with {done.returncode}")
    # "<out>: 8 tensors, N bytes, step S (from <dir>)"
    found = re.search(r"step (\d+) \(from (.*)\)", done.stdout)
    model = Cnn()
    pstrain.torch.load_safetensors(model, exported)
    images, labels = fashion_mnist.load("t10k", data_dir)
    return {"test_accuracy": accuracy(model, images, labels),
            "global_step": int(found.group(1)) if found else None,
            "checkpoint": os.path.basename(found.group(2)) if found else None}


def run_cluster(args):
    """Trains on `pstrain local` (the workers, and the evaluator, run this
    script), then scores the final checkpoint on the test set and prints
    its accuracy. The checkpoints go to the pstrain flags' --checkpoint_dir,
    or to a temporary directory removed at the end."""
    import pstrain.torch
    torch.manual_seed(args.seed)
    work = tempfile.mkdtemp(prefix="pstrain-cnn-")
    try:
        flags = list(args.pstrain_flags)
        model = Cnn()
        # The script's optimizer and scheduler, run by the ps: its rule, and
        # StepLR's rate each epoch of updates.
        optimizer, scheduler = make_optimizer(model, args)
        per_epoch = updates_per_epoch(len(train_images(args)[0]), args.workers, args.batch_size,
                                      flag_value(flags, "mode") or "async")
        spec = pstrain.torch.export_spec(model, os.path.join(work, "cnn.json"),
                                         optimizer=optimizer, scheduler=scheduler,
                                         steps_per_epoch=per_epoch, clip_norm=args.clip_norm)
        ckpt = flag_value(flags, "checkpoint_dir")
        if ckpt is None:
            ckpt = os.path.join(work, "ckpt")
            flags.append(f"--checkpoint_dir={ckpt}")
        script = ["/usr/bin/python3", os.path.abspath(__file__)]
        if args.data_dir != fashion_mnist.DEFAULT_DIR:
            script.append(f"--data_dir={os.path.abspath(args.data_dir)}")
        if args.train_examples:
            script.append(f"--train_examples={args.train_examples}")
        worker = script + ([f"--result={args.result}"] if args.result else [])
        if args.record_batches:
            worker.append(f"--record_batches={args.record_batches}")
        pstrain_bin = os.path.join(os.environ.get("PSTRAIN_BIN", "build/bin"), "pstrain")
        command = [pstrain_bin, "local", f"--ps={args.ps}", f"--workers={args.workers}",
                   f"--model=spec:{spec}", f"--epochs={args.epochs}",
                   f"--batch_size={args.batch_size}", f"--seed={args.seed}",
                   "--worker_command=" + " ".join(shlex.quote(a) for a in worker)] + flags
        if args.evaluator:
            command.append("--evaluator_command=" + " ".join(shlex.quote(a) for a in script))
        print("running: " + " ".join(command), flush=True)
        start = time.time()
        code = subprocess.call(command)
        elapsed = time.time() - start
        if code != 0:
            return code
        figures = score_final_checkpoint(ckpt, work, args.data_dir)
        print(f"test accuracy {figures['test_accuracy']:.4f} (final checkpoint "
              f"{figures['checkpoint']}, step {figures['global_step']})", flush=True)
        report(None, mode="cluster", seconds=elapsed, **figures)
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cluster", action="store_true", help="train on a local pstrain cluster")
    parser.add_argument("--local", action="store_true", help="train in this process, no pstrain")
    parser.add_argument("--export_spec", metavar="PATH", help="write the model spec and exit")
    parser.add_argument("--evaluator", action="store_true",
                        help="--cluster: add an evaluator task that scores every checkpoint")
    parser.add_argument("--ps", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--optimizer", choices=["adadelta", "adam"], default="adadelta")
    parser.add_argument("--learning_rate", type=float, default=0.0,
                        help="0: the optimizer's (adadelta 1.0, adam 0.001)")
    parser.add_argument("--gamma", type=float, default=0.7, help="StepLR's decay per epoch")
    parser.add_argument("--clip_norm", type=float, default=0.0,
                        help="clip each step's gradient to this global norm (0: off)")
    parser.add_argument("--train_examples", type=int, default=0,
                        help="train on the first N examples only (0: all)")
    parser.add_argument("--record_batches", metavar="PATH",
                        help="worker: write the batches it trained as JSON ({worker}: its index)")
    parser.add_argument("--batches", metavar="PATH",
                        help="--local: train these batches (a one-worker job's --record_batches)")
    parser.add_argument("--save", metavar="PATH",
                        help="--local: write the trained parameters here (safetensors)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1, help="--local: torch threads")
    parser.add_argument("--data_dir", default=fashion_mnist.DEFAULT_DIR)
    parser.add_argument("--result", help="write the figures as JSON here ({worker}: its index)")
    parser.add_argument("pstrain_flags", nargs="*", help="--cluster: more pstrain local flags")
    args = parser.parse_args()
    if args.export_spec:
        import pstrain.torch
        torch.manual_seed(args.seed)
        model = Cnn()
        optimizer, scheduler = make_optimizer(model, args)
        per_epoch = updates_per_epoch(len(train_images(args)[0]), args.workers, args.batch_size,
                                      "async")
        print(pstrain.torch.export_spec(model, args.export_spec, optimizer=optimizer,
                                        scheduler=scheduler, steps_per_epoch=per_epoch))
    elif args.local:
        train_local(args)
    elif args.cluster:
        sys.exit(run_cluster(args))
    elif json.loads(os.environ.get("TF_CONFIG", "{}")).get("task", {}).get("type") == "evaluator":
        evaluate_checkpoints(args)
    else:
        train_worker(args)


if __name__ == "__main__":
    main()
