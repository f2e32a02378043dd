#!/usr/bin/python3
"""Python workers' figures, each against a reference measured in the same run.

1. PushPull through the Python bindings (numpy arrays in place) against the
   C++ client: the same session, the same ps, the same sizes, the C++ loop
   (`_cpp_push_pull_seconds`) with buffers of its own and no Python between
   calls. Rounds of each alternate, so drift on a noisy machine hits both.
   Sizes: the MLP's parameters (--hidden=128, 0.1M floats) and 16M floats
   (--hidden=4096,3072: 15.8M). Each job: 2 ps, 1 Python worker, SGD on
   zero gradients (values unchanged).
2. The CNN example (examples/torch_cnn_fashion_mnist.py): examples/s on a
   local cluster (2 ps, 2 Python workers, one torch thread each) against the
   same model trained in one torch process (no pstrain) with 1 and 2 threads.

    make bench-python                     # or:
    PSTRAIN_BIN=build/bin PYTHONPATH=build/python /usr/bin/python3 bench/python_workers.py
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
BIN = os.environ.get("PSTRAIN_BIN", os.path.join(REPO, "build", "bin"))
PYTHON = "/usr/bin/python3"
CNN = os.path.join(REPO, "examples", "torch_cnn_fashion_mnist.py")
EXAMPLES = 60000


def pushpull_worker(args):
    """Inside the job: warm up, then alternate rounds of Python and C++."""
    import pstrain
    worker = pstrain.Worker.from_env()
    grads = [np.zeros(shape, np.float32) for shape in worker.variables.values()]
    values = [np.zeros_like(g) for g in grads]
    batches = worker.batches(EXAMPLES)
    py_seconds, cpp_seconds = [], []

    def python_steps(n, into):
        for _ in range(n):
            next(batches)
            start = time.perf_counter()
            if worker.push_pull(grads, out=values) is None:
                raise RuntimeError("a step failed during the benchmark")
            into.append(time.perf_counter() - start)

    python_steps(args.warmup, [])
    for _ in range(args.rounds):
        python_steps(args.steps, py_seconds)
        cpp = worker._session._cpp_push_pull_seconds(args.steps, EXAMPLES)
        if len(cpp) != args.steps:
            raise RuntimeError("a C++ step failed during the benchmark")
        cpp_seconds.extend(cpp)
    for _ in batches:  # max_steps reached: the job ends
        pass
    floats = sum(g.size for g in grads)
    with open(args.result, "w") as f:
        json.dump({"floats": floats, "python_s": py_seconds, "cpp_s": cpp_seconds}, f)
    worker.close()


def pushpull_case(name, hidden, steps, rounds, warmup, tmp):
    result = os.path.join(tmp, f"pushpull-{name}.json")
    command = [os.path.join(BIN, "pstrain"), "local", "--ps=2", "--workers=1", "--progress=plain",
               f"--hidden={hidden}", "--optimizer=sgd", "--learning_rate=0.01", "--epochs=100000",
               f"--max_steps={warmup + 2 * rounds * steps}", "--timeout_s=600",
               f"--worker_command={PYTHON} {os.path.abspath(__file__)} --pushpull_worker "
               f"--result={result} --steps={steps} --rounds={rounds} --warmup={warmup}"]
    done = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{name}: pstrain local failed:\n{done.stdout[-4000:]}")
    with open(result) as f:
        r = json.load(f)
    gb = 2 * 4 * r["floats"] / 1e9  # pushed and pulled
    py, cpp = statistics.median(r["python_s"]), statistics.median(r["cpp_s"])
    return {"case": name, "floats": r["floats"], "python_ms": py * 1e3, "cpp_ms": cpp * 1e3,
            "python_gb_s": gb / py, "cpp_gb_s": gb / cpp, "ratio": cpp / py,
            "calls": len(r["python_s"])}


def cnn_case(tmp, epochs):
    out = {}
    result = os.path.join(tmp, "cnn-{worker}.json")
    done = subprocess.run([PYTHON, CNN, "--cluster", "--ps=2", "--workers=2", f"--epochs={epochs}",
                           f"--result={result}"], stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, env=dict(os.environ, PSTRAIN_BIN=BIN))
    if done.returncode != 0:
        sys.exit(f"cnn cluster failed:\n{done.stdout[-4000:]}{done.stderr[-2000:]}")
    workers = []
    for w in (0, 1):
        with open(result.replace("{worker}", str(w))) as f:
            workers.append(json.load(f))
    examples = sum(r["examples"] for r in workers)
    out["cluster_examples_per_sec"] = examples / max(r["seconds"] for r in workers)
    for threads in (1, 2):
        path = os.path.join(tmp, f"cnn-local-{threads}.json")
        done = subprocess.run([PYTHON, CNN, "--local", f"--epochs={epochs}",
                               f"--threads={threads}", f"--result={path}"],
                              stdin=subprocess.DEVNULL, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"cnn local failed:\n{done.stdout[-4000:]}{done.stderr[-2000:]}")
        with open(path) as f:
            out[f"local_{threads}_thread_examples_per_sec"] = json.load(f)["examples_per_sec"]
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pushpull_worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    parser.add_argument("--steps", type=int, default=20, help="PushPull calls per round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds of Python, then C++")
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--cnn_epochs", type=int, default=1, help="0: skip the CNN")
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    if args.pushpull_worker:
        pushpull_worker(args)
        return
    tmp = tempfile.mkdtemp(prefix="pstrain-bench-python-")
    figures = {"pushpull": [], "cnn": None}
    print(f"{'PushPull':10} {'floats':>10} {'python ms':>10} {'C++ ms':>8} "
          f"{'python GB/s':>11} {'C++ GB/s':>9} {'ratio':>6}")
    for name, hidden, steps in (("mlp", "128", args.steps * 5), ("16M", "4096,3072", args.steps)):
        row = pushpull_case(name, hidden, steps, args.rounds, args.warmup, tmp)
        figures["pushpull"].append(row)
        print(f"{row['case']:10} {row['floats']:>10} {row['python_ms']:>10.3f} "
              f"{row['cpp_ms']:>8.3f} {row['python_gb_s']:>11.3f} {row['cpp_gb_s']:>9.3f} "
              f"{row['ratio']:>6.2f}", flush=True)
    print("(medians of every call; ratio: the C++ client's time over Python's, 1.0 = no cost)")
    if args.cnn_epochs > 0:
        cnn = cnn_case(tmp, args.cnn_epochs)
        figures["cnn"] = cnn
        c = cnn["cluster_examples_per_sec"]
        print(f"\nCNN, {args.cnn_epochs} epoch(s), examples/s:")
        print(f"  2 ps + 2 Python workers (1 thread each)  {c:9.0f}")
        for threads in (1, 2):
            local = cnn[f"local_{threads}_thread_examples_per_sec"]
            print(f"  one torch process, {threads} thread(s)         {local:9.0f}"
                  f"   cluster/this {c / local:5.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=1)


if __name__ == "__main__":
    main()
