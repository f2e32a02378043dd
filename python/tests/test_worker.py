"""Python workers in real clusters: `pstrain local --worker_command`, real
ps and chief processes over gRPC, Fashion-MNIST."""

import json
import os
import re
import signal

import numpy as np
import pytest
import torch

from conftest import WORKERS, read_records, wait_for_record, worker_command

import sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "workers"))
import mlp_worker  # noqa: E402


def test_bad_calls_raise_exceptions_that_name_the_problem_and_change_nothing(cluster, tmp_path):
    c = cluster(["--ps=1", "--workers=1", "--max_steps=3", "--hidden=16",
                 "--worker_command=" + worker_command("mlp_worker.py", f"--record={tmp_path}",
                                                      "--bad_calls")])
    assert c.wait() == 0, c.output()
    (bad,) = [r for r in read_records(tmp_path, 0) if r["event"] == "bad_calls"]
    raised = bad["raised"]
    first = bad["names"][0]
    assert raised["float64 gradient"][0] == "TypeError"
    assert f"'{first}'" in raised["float64 gradient"][1] and "float64" in raised["float64 gradient"][1]
    assert raised["wrong shape"][0] == "ValueError"
    assert f"'{first}'" in raised["wrong shape"][1] and "expected" in raised["wrong shape"][1]
    assert raised["too few gradients"][0] == "ValueError"
    assert raised["strided tensor"][0] == "TypeError" and "contiguous" in raised["strided tensor"][1]
    assert raised["unknown table"][0] == "LookupError"
    assert "no_such_table" in raised["unknown table"][1]
    assert raised["int32 ids"][0] == "TypeError" and "int32" in raised["int32 ids"][1]
    assert raised["read-only values"][0] == "ValueError"
    assert raised["a list"][0] == "TypeError"
    assert bad["unchanged"], "a refused call changed the ps"
    ends = [r for r in read_records(tmp_path, 0) if r["event"] == "end"]
    assert ends and ends[0]["global_step"] == 3


def test_worker_without_a_chief_or_with_a_bad_tf_config_is_refused():
    import pstrain
    no_chief = {"cluster": {"worker": ["127.0.0.1:1"], "ps": ["127.0.0.1:2"]},
                "task": {"type": "worker", "index": 0}}
    with pytest.raises(ValueError, match="no chief"):
        pstrain.Worker(no_chief)
    with pytest.raises(ValueError, match="TF_CONFIG: not valid JSON"):
        pstrain.Worker("{bad")
    ps_task = dict(no_chief, cluster=dict(no_chief["cluster"], chief=["127.0.0.1:3"]),
                   task={"type": "ps", "index": 0})
    with pytest.raises(ValueError, match="task.type is 'ps'"):
        pstrain.Worker(ps_task)


def test_sync_two_workers_equal_one_process_with_the_combined_batch(cluster, tmp_path):
    steps = 12
    c = cluster(["--ps=2", "--workers=2", "--mode=sync", f"--max_steps={steps}", "--hidden=32",
                 "--optimizer=sgd", "--learning_rate=0.1", "--batch_size=32",
                 "--worker_command=" + worker_command("mlp_worker.py", f"--record={tmp_path}",
                                                      f"--save={tmp_path}")])
    assert c.wait() == 0, c.output()
    initial = np.load(tmp_path / "initial-0.npz")
    params = [torch.tensor(initial[k]) for k in sorted(initial.files, key=lambda f: int(f[4:]))]
    final = np.load(tmp_path / "final-0.npz")
    final = [final[k] for k in sorted(final.files, key=lambda f: int(f[4:]))]
    steps_of = [{r["position"]: r["examples"] for r in read_records(tmp_path, w)
                 if r["event"] == "step"} for w in (0, 1)]
    assert sorted(steps_of[0]) == list(range(steps)) == sorted(steps_of[1])
    import fashion_mnist
    images, labels = fashion_mnist.load("train")
    images = images.reshape(len(images), -1)
    # One process: the two workers' batches together, SGD on the mean loss.
    for p in range(steps):
        batch = steps_of[0][p] + steps_of[1][p]
        ps = [t.clone().requires_grad_() for t in params]
        loss = torch.nn.functional.cross_entropy(
            mlp_worker.forward(ps, torch.from_numpy(images[batch])), torch.from_numpy(labels[batch]))
        loss.backward()
        params = [(t - 0.1 * t.grad).detach() for t in ps]
    for got, want in zip(final, params):
        np.testing.assert_allclose(got, want.numpy(), atol=1e-5, rtol=0)
    final1 = np.load(tmp_path / "final-1.npz")
    for k in final1.files:
        np.testing.assert_array_equal(final1[k], np.load(tmp_path / "final-0.npz")[k])


@pytest.mark.parametrize("mode", ["ssp", "backup"])
def test_ssp_and_backup_workers_bound_python_workers_as_cpp_ones(cluster, tmp_path, mode):
    # Worker 1 is slow, and worker 0 starts when it does. ssp (staleness 2):
    # worker 0 may run at most 2 steps ahead, so it waits at the ps's
    # barrier. sync with a backup worker (replicas_to_aggregate=1 of 2): an
    # update takes the first gradient of its version, so worker 0 does not
    # wait and the slow worker's late gradients are dropped.
    flags = ["--mode=ssp", "--staleness=2"] if mode == "ssp" else \
        ["--mode=sync", "--replicas_to_aggregate=1"]
    summary = tmp_path / "summary.json"
    c = cluster(["--ps=2", "--workers=2", "--epochs=1", "--hidden=16", "--batch_size=1024",
                 f"--summary_json={summary}", *flags,
                 "--worker_command=" + worker_command("mlp_worker.py", f"--record={tmp_path}",
                                                      "--slow=1:40", "--wait_for=1")])
    assert c.wait() == 0, c.output()
    figures = json.loads(summary.read_text())
    steps = [[r["position"] for r in read_records(tmp_path, w) if r["event"] == "step"]
             for w in (0, 1)]
    for w in (0, 1):  # every batch of its shard trained once, in order
        assert steps[w] == list(range(30)), (w, steps[w])
    assert figures["pushes"] == 60, figures
    # Each Python worker reported where its 30 steps went: the slow one's
    # 40 ms sleep before each push is compute, worker 0's waits at the
    # ssp barrier or for its pushes are communication, all of it exposed.
    times = figures["step_times"]
    assert [t["steps"] for t in times] == [30, 30], times
    assert times[1]["compute_ms"] >= 40, times
    for t in times:
        assert t["communication_ms"] > 0 and t["exposed_ms"] == t["communication_ms"], times
        assert t["pushed_kb"] > 0, times
    assert "slowest_worker" in figures and isinstance(figures["advice"], str), figures
    if mode == "ssp":
        assert figures["global_step"] == 60, figures
        assert 0 < figures["max_clock_gap"] <= 2, figures
        assert figures["barrier_wait_seconds"] > 0, figures
    else:
        assert figures["stale_dropped"] > 0, figures
        assert figures["global_step"] == 60 - figures["stale_dropped"], figures


def test_killed_python_worker_is_restarted_and_goes_on_from_its_position(cluster, tmp_path):
    c = cluster(["--ps=1", "--workers=2", "--epochs=1", "--hidden=16", "--restart_failed",
                 "--peer_timeout_s=5", "--recovery_timeout_s=60", "--batch_size=256",
                 "--worker_command=" + worker_command("mlp_worker.py", f"--record={tmp_path}",
                                                      "--kill_at=20")])
    assert c.wait() == 0, c.output()
    for w in (0, 1):
        records = read_records(tmp_path, w)
        starts = [r for r in records if r["event"] == "start"]
        kill = [r for r in records if r["event"] == "kill"]
        assert len(kill) == 1 and kill[0]["position"] == 20
        assert len(starts) == 2, records
        assert starts[0]["position"] == 0
        # The ps recorded its push of position 20: the new process goes on at 21.
        assert starts[1]["position"] == 21 and starts[1]["refresh"]
        positions = [r["position"] for r in records if r["event"] == "step"]
        # Every batch trained once: no position redone or skipped.
        assert positions == list(range(len(positions)))
        assert records[-1]["event"] == "end"
    assert "job succeeded" in c.output()


def test_killed_ps_python_workers_rewind_to_the_checkpoint(cluster, tmp_path):
    ckpt = tmp_path / "ckpt"
    c = cluster(["--ps=2", "--workers=2", "--epochs=1", "--hidden=16", "--restart_failed",
                 "--peer_timeout_s=5", "--recovery_timeout_s=60", "--batch_size=128",
                 f"--checkpoint_dir={ckpt}", "--save_checkpoints_steps=150",
                 f"--summary_json={tmp_path}/summary.json",
                 "--worker_command=" + worker_command("mlp_worker.py", f"--record={tmp_path}",
                                                      "--pause_at=75,100")])

    def pause(position):
        for w in (0, 1):
            wait_for_record(tmp_path, w,
                            lambda r: r["event"] == "paused" and r["position"] == position, c)

    # Both workers hold still at position 75 (global step 150), where the
    # chief saves a checkpoint; then at 100 (step 200, no checkpoint), where
    # ps 1 is killed. Once the chief has restored every ps, they go on.
    pause(75)
    c.wait_for_line(r"saved checkpoint .*ckpt-000000000150")
    (tmp_path / "resume-75").touch()
    pause(100)
    os.kill(c.pid_of("ps:1"), signal.SIGKILL)
    c.wait_for_line(r"recovered in .* restored to step 150")
    (tmp_path / "resume-100").touch()
    assert c.wait() == 0, c.output()

    manifest = json.loads((ckpt / "ckpt-000000000150" / "MANIFEST.json").read_text())
    assert [int(p) for p in manifest["worker_positions"]] == [75, 75]
    for w in (0, 1):
        records = read_records(tmp_path, w)
        # One rewind, from the last push before the kill to the position the
        # checkpoint recorded; every batch from there trained once more.
        rewinds = [(r["from"], r["to"]) for r in records if r["event"] == "rewind"]
        assert rewinds == [(99, 75)], records
        steps = [r["position"] for r in records if r["event"] == "step"]
        assert steps[:100] == list(range(100))
        assert steps[100:] == list(range(75, steps[-1] + 1))
        assert records[-1]["event"] == "end"
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["global_step"] > 150


def test_killed_primary_python_workers_go_on_without_a_rewind(cluster, tmp_path):
    # --ps_replicas=2 and no checkpoint: ps 1's shard fails over to its
    # backup on ps 0, and the Python workers' calls in flight are sent there.
    c = cluster(["--ps=2", "--workers=2", "--epochs=1", "--hidden=16", "--restart_failed",
                 "--peer_timeout_s=5", "--batch_size=128", "--ps_replicas=2",
                 f"--summary_json={tmp_path}/summary.json",
                 "--worker_command=" + worker_command("mlp_worker.py", f"--record={tmp_path}",
                                                      "--pause_at=100")])
    for w in (0, 1):
        wait_for_record(tmp_path, w, lambda r: r["event"] == "paused" and r["position"] == 100, c)
    # The chief fails a shard over only to a backup it has heard is in sync:
    # on a fast machine the workers pause before its first word of them.
    c.wait_for_line(r"backups 2/2 in sync")
    os.kill(c.pid_of("ps:1"), signal.SIGKILL)
    c.wait_for_line(r"failed over to their backups on ps \[0\]")
    (tmp_path / "resume-100").touch()
    assert c.wait() == 0, c.output()

    for w in (0, 1):
        records = read_records(tmp_path, w)
        assert [r for r in records if r["event"] == "rewind"] == [], records
        steps = [r["position"] for r in records if r["event"] == "step"]
        assert steps == list(range(len(steps))) and len(steps) > 100, steps
        assert records[-1]["event"] == "end"
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["recoveries"] == []
    assert [f["lost_ps"] for f in summary["failovers"]] == [1]
    assert summary["failovers"][0]["steps_lost"] == 0


def test_worker_whose_module_does_not_match_the_spec_exits_naming_both_shapes(cluster, tmp_path):
    import pstrain.torch
    sys.path.insert(0, WORKERS)
    import spec_worker
    spec = pstrain.torch.export_spec(spec_worker.model(), str(tmp_path / "linear.json"))
    # Worker 1's module does not match. Its exit status is echoed and
    # swallowed, so that the launcher does not end the job for it: the chief
    # must go on and finish with worker 0 alone.
    command = worker_command("spec_worker.py", "--wrong_shape_worker=1")
    c = cluster(["--ps=1", "--workers=2", "--epochs=1", f"--model=spec:{spec}",
                 f"--worker_command=/bin/sh -c '{command}; echo python exit status $?'"])
    assert c.wait() == 0, c.output()
    out = c.output()
    assert re.search(r"worker:1 .*ValueError: parameter '1.weight' has shape \[11, 784\], but the "
                     r"job's variable has shape \[10, 784\]", out), out
    assert re.search(r"worker:1 .*python exit status 1", out), out
    assert not re.search(r"worker:0 .*python exit status [^0]", out), out
    assert "job succeeded" in out
