"""The examples, run as a user runs them: each trains on a local pstrain
cluster of Python workers and is checked against its target."""

import json
import os
import re
import signal
import subprocess

import pytest

from conftest import BIN, PYTHON, REPO

import sys
sys.path.insert(0, os.path.join(REPO, "examples"))
import fashion_mnist  # noqa: E402


def run(args, env=None, **kwargs):
    return subprocess.run(args, env=dict(os.environ, PSTRAIN_BIN=BIN, **(env or {})),
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, **kwargs)


@pytest.mark.parametrize("clip_norm", [0.0, 0.5])
def test_cnn_sync_job_with_adadelta_and_steplr_ends_where_the_script_alone_does(tmp_path,
                                                                                 clip_norm):
    """The example's own Adadelta(lr=1.0) and StepLR(gamma=0.7), run by the
    ps in a sync job of one Python worker, against the same script training
    the same batches in one process with torch's optimizer and scheduler;
    with clip_norm, the worker clips each step's gradient as the script's
    torch.nn.utils.clip_grad_norm_ does (most of these steps' gradients
    are above 0.5)."""
    import pstrain.torch
    script = os.path.join(REPO, "examples", "torch_cnn_fashion_mnist.py")
    common = ["--epochs=3", "--batch_size=64", "--train_examples=1280",
              f"--clip_norm={clip_norm}"]
    ckpt, batches = tmp_path / "ckpt", tmp_path / "batches.json"
    # One thread for torch and its BLAS in the worker and in the script
    # alone, whatever the cores: their gradients are then the same bits.
    one_thread = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    done = run([PYTHON, script, "--cluster", "--ps=1", "--workers=1", *common,
                f"--record_batches={batches}", "--", "--mode=sync", f"--checkpoint_dir={ckpt}",
                "--timeout_s=300"], env=one_thread, timeout=400)
    assert done.returncode == 0, done.stdout + done.stderr
    alone = run([PYTHON, script, "--local", *common, f"--batches={batches}",
                 f"--save={tmp_path}/alone.safetensors"], env=one_thread, timeout=300)
    assert alone.returncode == 0, alone.stdout + alone.stderr
    exported = tmp_path / "job.safetensors"
    out = run([os.path.join(BIN, "pstrain"), "checkpoint", "export", str(ckpt), str(exported)])
    assert out.returncode == 0, out.stdout + out.stderr
    job = pstrain.torch.read_safetensors(str(exported))
    want = pstrain.torch.read_safetensors(str(tmp_path / "alone.safetensors"))
    assert sorted(job) == sorted(want)
    assert len(json.loads(batches.read_text())) == 3 * 20  # every batch, once
    for name in want:
        scale = float(abs(want[name]).max())
        err = float(abs(job[name] - want[name]).max())
        print(f"{name}: max error {err:.3g} on values up to {scale:.3g}")
    for name in want:
        assert float(abs(job[name] - want[name]).max()) <= 1e-5 * float(abs(want[name]).max()), name


def test_cnn_on_two_ps_and_two_python_workers_reaches_089(tmp_path):
    import pstrain.torch
    sys.path.insert(0, os.path.join(REPO, "examples"))
    import torch_cnn_fashion_mnist as example
    ckpt = tmp_path / "ckpt"
    summary = tmp_path / "summary.json"
    done = run([PYTHON, os.path.join(REPO, "examples", "torch_cnn_fashion_mnist.py"), "--cluster",
                "--ps=2", "--workers=2", "--epochs=4", f"--result={tmp_path}/result-{{worker}}.json",
                "--evaluator", "--", f"--checkpoint_dir={ckpt}", "--checkpoint_every_epochs=1",
                f"--summary_json={summary}", f"--summary_dir={tmp_path}/tb", "--timeout_s=900"],
               timeout=1000)
    assert done.returncode == 0, done.stdout + done.stderr
    results = [json.loads((tmp_path / f"result-{w}.json").read_text()) for w in (0, 1)]
    assert all(r["examples"] > 0 for r in results)
    # The final checkpoint (the chief saves one at the end), exported and
    # scored here: the model the job trained.
    exported = tmp_path / "cnn.safetensors"
    out = run([os.path.join(BIN, "pstrain"), "checkpoint", "export", str(ckpt), str(exported)])
    assert out.returncode == 0, out.stdout + out.stderr
    model = example.Cnn()
    pstrain.torch.load_safetensors(model, str(exported))
    images, labels = fashion_mnist.load("t10k")
    accuracy = example.accuracy(model, images, labels)
    print(f"test accuracy {accuracy:.4f}; workers: {results}")
    assert accuracy >= 0.89
    # The example scored the same checkpoint itself and printed it.
    saved = sorted(p.name for p in ckpt.iterdir() if p.name.startswith("ckpt-"))
    printed = re.search(r"^test accuracy (\d\.\d+) \(final checkpoint (ckpt-\d+), step (\d+)\)$",
                        done.stdout, re.MULTILINE)
    assert printed, done.stdout[-3000:]
    assert abs(float(printed.group(1)) - accuracy) <= 5e-5, printed.group(0)
    assert printed.group(2) == saved[-1], (printed.group(0), saved)
    assert int(printed.group(3)) == int(saved[-1].split("-")[1]), printed.group(0)

    # The Python evaluator (the example under an evaluator task) saw every
    # checkpoint, one per epoch, and scored the final one as we do here.
    evaluations = json.loads(summary.read_text())["evaluations"]
    assert [e["checkpoint"] for e in evaluations] == saved, evaluations
    assert [e["epochs_completed"] for e in evaluations] == [1, 2, 3, 4], evaluations
    assert all(e["source"] == "evaluator 0" for e in evaluations)
    assert abs(evaluations[-1]["metrics"]["test_accuracy"] - accuracy) < 1e-9
    best = json.loads((ckpt / "best" / "BEST.json").read_text())
    assert best["metric"] == "test_accuracy"
    assert best["value"] == max(e["metrics"]["test_accuracy"] for e in evaluations)
    assert any((tmp_path / "tb" / "eval").iterdir())


def run_bounded(args, timeout):
    """Runs `args` in a process group of its own, killed whole (pstrain
    local, its daemons and workers) if it runs past `timeout` seconds."""
    proc = subprocess.Popen(args, env=dict(os.environ, PSTRAIN_BIN=BIN), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        raise AssertionError(f"{' '.join(args)} ran past {timeout} s:\n{output}") from None
    return proc.returncode, output


def test_deepfm_on_two_ps_and_two_python_workers_is_within_001_auc_of_one_process(tmp_path):
    # Generated Criteo-format data with signal: the true probabilities score
    # about 0.86 AUC on it.
    data = tmp_path / "criteo.tsv"
    generated = run([os.path.join(BIN, "pstrain"), "generate_criteo", f"--out={data}",
                     "--rows=40000", "--vocab=2000", "--seed=1"], timeout=120)
    assert generated.returncode == 0, generated.stdout + generated.stderr
    best_auc = json.loads(generated.stdout)["best_auc"]
    script = os.path.join(REPO, "examples", "torch_deepfm_criteo.py")
    # The CTR recipe: Adagrad on the tables, Adam on the dense layers (two
    # optimizer groups on the ps; torch's Adam and the ps's Adagrad alone).
    flags = [f"--data={data}", "--epochs=2", "--batch_size=256", "--optimizer=adagrad",
             "--learning_rate=0.1", "--dense_optimizer=adam", "--dense_learning_rate=0.002"]
    code, output = run_bounded([PYTHON, script, "--local", *flags,
                                f"--result={tmp_path}/local.json"], timeout=300)
    assert code == 0, output
    local = json.loads((tmp_path / "local.json").read_text())
    # Async: each worker's pushes are applied as they come, so the ps take
    # as many Adagrad steps of one batch each as the one process does, at a
    # staleness of about one step.
    code, output = run_bounded([PYTHON, script, "--cluster", "--ps=2", "--workers=2",
                                "--mode=async", *flags, f"--result={tmp_path}/cluster.json",
                                "--", "--timeout_s=300", "--progress=plain"], timeout=400)
    assert code == 0, output
    clustered = json.loads((tmp_path / "cluster.json").read_text())
    print(f"best AUC {best_auc:.4f}; local {local}; cluster {clustered}")
    # The example prints the final checkpoint's score.
    printed = re.search(r"^test AUC (\d\.\d+), log loss (\d+\.\d+) on the held-out 8000 rows "
                        r"\(final checkpoint ckpt-\d+, step (\d+)\)$", output, re.MULTILINE)
    assert printed, output[-3000:]
    assert abs(float(printed.group(1)) - clustered["test_auc"]) <= 5e-5, printed.group(0)
    assert abs(float(printed.group(2)) - clustered["test_log_loss"]) <= 5e-5, printed.group(0)
    assert int(printed.group(3)) == clustered["global_step"] > 0, printed.group(0)
    assert clustered["examples"] == local["examples"]
    assert all(rows > 0 for rows in clustered["hash_rows"].values())
    assert local["test_auc"] >= 0.75, local  # well above chance (0.5)
    assert abs(clustered["test_auc"] - local["test_auc"]) <= 0.01, (local, clustered)
