"""pstrain.Stream: Criteo and libsvm input read as a stream from Python,
against the files' own lines: order, shares, exact positions, errors; and
Python workers streaming their shares (worker.stream) in a real cluster,
one of them killed and restarted."""

import gzip
import os
import subprocess
import sys

import numpy as np
import pytest

import pstrain
from conftest import BIN, WORKERS, read_records, worker_command

sys.path.insert(0, WORKERS)
import stream_worker  # noqa: E402


def generate(kind, path, rows, seed):
    done = subprocess.run([os.path.join(BIN, "pstrain"), f"generate_{kind}", f"--out={path}",
                           f"--rows={rows}", f"--seed={seed}"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    with open(path) as f:
        return f.readlines()


def write_parts(directory, lines, ext):
    """lines split over part-0.gz (gzip), part-1 and part-2.gz in `directory`."""
    os.makedirs(directory)
    third = len(lines) // 3
    for k, (begin, end) in enumerate([(0, third), (third, 2 * third), (2 * third, len(lines))]):
        path = os.path.join(directory, f"part-{k}{ext}" + (".gz" if k != 1 else ""))
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "wt") as f:
            f.writelines(lines[begin:end])


def labels_of(lines):
    return np.array([1.0 if line.split(maxsplit=1)[0] in ("1", "+1") else 0.0 for line in lines],
                    np.float32)


def examples(batch):
    """Each example of a batch as a hashable tuple of its label and features."""
    if isinstance(batch, pstrain.CriteoBatch):
        return [(float(batch.labels[i]), tuple(batch.ids[i]), tuple(batch.dense[i]))
                for i in range(len(batch.labels))]
    o = batch.offsets
    return [(float(batch.labels[i]), tuple(batch.ids[o[i]:o[i + 1]]),
             tuple(batch.values[o[i]:o[i + 1]])) for i in range(len(batch.labels))]


@pytest.mark.parametrize("kind,ext", [("criteo", ".tsv"), ("libsvm", ".svm")])
def test_in_order_the_stream_is_the_files_lines(tmp_path, kind, ext):
    lines = generate(kind, tmp_path / f"all{ext}", 1000, 1)
    write_parts(tmp_path / "parts", lines, ext)
    stream = pstrain.Stream(str(tmp_path / "parts"), kind, batch_size=128)
    assert stream.examples == 1000
    assert stream.batches_per_epoch == 8
    got = [batch for _, batch in stream]
    assert [len(b.labels) for b in got] == [128] * 7 + [104]
    np.testing.assert_array_equal(np.concatenate([b.labels for b in got]), labels_of(lines))
    first = got[0]
    if kind == "criteo":
        assert first.dense.shape == (128, 13) and first.dense.dtype == np.float32
        assert first.ids.shape == (128, 26) and first.ids.dtype == np.int64
        # The first integer feature of the first line, log(1 + x) as the C++ reader makes it.
        x = lines[0].split("\t")[1]
        assert first.dense[0, 0] == pytest.approx(np.log1p(max(0, int(x or 0))), rel=1e-6)
    else:
        assert first.offsets[0] == 0 and first.offsets[-1] == len(first.ids) == len(first.values)


@pytest.mark.parametrize("spec", ["parts", "parts/part-*", "all.svm"])
def test_shares_of_w_workers_hold_every_example_once(tmp_path, spec):
    lines = generate("libsvm", tmp_path / "all.svm", 900, 2)
    write_parts(tmp_path / "parts", lines, ".svm")
    whole = sorted(e for _, b in pstrain.Stream(str(tmp_path / spec), "libsvm", batch_size=100)
                   for e in examples(b))
    assert len(whole) == 900
    for workers in (2, 3):
        shares = []
        for w in range(workers):
            s = pstrain.Stream(str(tmp_path / spec), "libsvm", worker=w, num_workers=workers,
                               shuffle_buffer=64, seed=5, batch_size=50)
            assert s.examples > 0
            shares.extend(e for _, b in s for e in examples(b))
        assert sorted(shares) == whole, (spec, workers)


def test_any_position_reads_the_batch_a_run_from_the_start_reads(tmp_path):
    lines = generate("criteo", tmp_path / "all.tsv", 1500, 3)
    write_parts(tmp_path / "parts", lines, ".tsv")

    def open_stream(seed=9):
        return pstrain.Stream(str(tmp_path / "parts"), "criteo", shuffle_buffer=100, seed=seed,
                              epochs=3, batch_size=64)

    run = [examples(b) for _, b in open_stream()]
    assert len(run) == 3 * 24
    # Each epoch holds every example once, shuffled: epochs differ in order.
    for epoch in range(3):
        epoch_examples = [e for b in run[epoch * 24:(epoch + 1) * 24] for e in b]
        assert len(set(epoch_examples)) == 1500
    assert run[0] != run[24]
    # Fresh streams at scattered positions (a restarted worker's), then on.
    for position in (0, 5, 23, 24, 40, 71):
        s = open_stream()
        assert examples(s.read(position)) == run[position], position
        if position + 1 < len(run):
            assert examples(s.read(position + 1)) == run[position + 1], position
    # Going back reopens the stream: the same batch again.
    s = open_stream()
    s.read(30)
    assert examples(s.read(2)) == run[2]
    # Another seed, another order.
    assert examples(open_stream(seed=10).read(0)) != run[0]
    with pytest.raises(IndexError):
        open_stream().read(72)


def test_bad_input_raises_naming_it(tmp_path):
    lines = generate("libsvm", tmp_path / "all.svm", 100, 4)
    lines[41] = "1 5:oops\n"
    (tmp_path / "bad.svm").write_text("".join(lines))
    with pytest.raises(ValueError, match=r"bad\.svm:42.*oops"):
        pstrain.Stream(str(tmp_path / "bad.svm"), "libsvm")  # counted, so parsed, at once
    with pytest.raises(LookupError, match="no input file matches"):
        pstrain.Stream(str(tmp_path / "none-*"), "libsvm")
    with pytest.raises(ValueError, match="format must be 'criteo' or 'libsvm'"):
        pstrain.Stream(str(tmp_path / "all.svm"), "csv")
    with pytest.raises(ValueError, match="batch_size"):
        pstrain.Stream(str(tmp_path / "all.svm"), "libsvm", batch_size=0)


def test_killed_python_worker_resumes_its_stream_at_the_exact_example(cluster, tmp_path):
    lines = generate("libsvm", tmp_path / "all.svm", 6000, 6)
    write_parts(tmp_path / "parts", lines[:5000], ".svm")
    (tmp_path / "eval.svm").write_text("".join(lines[5000:]))
    record = tmp_path / "record"
    record.mkdir()
    c = cluster(["--model=logreg", "--stream_data", f"--data={tmp_path / 'parts'}",
                 f"--eval_data={tmp_path / 'eval.svm'}", "--shuffle_buffer=300", "--seed=7",
                 "--ps=2", "--workers=2", "--epochs=2", "--batch_size=100", "--restart_failed",
                 "--peer_timeout_s=5", "--recovery_timeout_s=60",
                 "--worker_command=" + worker_command("stream_worker.py", f"--record={record}",
                                                      "--kill_at=7")])
    assert c.wait() == 0, c.output()
    seen = []
    for w in (0, 1):
        records = read_records(record, w)
        starts = [r for r in records if r["event"] == "start"]
        # Killed after its pushes of position 7: the new process goes on at 8.
        assert [s["position"] for s in starts] == [0, 8], records
        # The reader a run from the start would use, with the job's settings.
        expected = pstrain.Stream(str(tmp_path / "parts"), "libsvm", worker=w, num_workers=2,
                                  shuffle_buffer=300, seed=7 ^ (w << 32), epochs=2,
                                  batch_size=100)
        assert starts[0]["examples"] == starts[1]["examples"] == expected.examples
        steps = [r for r in records if r["event"] == "step"]
        # Every batch trained once, none skipped, each of exactly the
        # examples a reader from the start gives at its position.
        assert [r["position"] for r in steps] == list(range(2 * expected.batches_per_epoch))
        for r in steps:
            batch = expected.read(r["position"])
            assert r["signature"] == stream_worker.signature(batch), r["position"]
            if r["position"] < expected.batches_per_epoch:
                seen.extend(examples(batch))
        assert records[-1]["event"] == "end"
    # The two shares' first epochs: every training example once.
    whole = [e for _, b in pstrain.Stream(str(tmp_path / "parts"), "libsvm") for e in examples(b)]
    assert sorted(seen) == sorted(whole)
    assert "job succeeded" in c.output()
