"""pstrain.torch.Embedding: tables on the ps, trained by a Python worker,
equal the same module trained in one process without pstrain."""

import json
import os
import subprocess
import sys

import numpy as np
import torch

from conftest import BIN, WORKERS, worker_command

sys.path.insert(0, WORKERS)
import embedding_worker  # noqa: E402
import pstrain.torch  # noqa: E402


def test_embeddings_on_the_ps_equal_the_local_module_step_by_step(cluster, tmp_path):
    torch.manual_seed(1)  # the worker's local module starts from these values too
    spec = pstrain.torch.export_spec(embedding_worker.Model(), str(tmp_path / "emb.json"))
    out = tmp_path / "figures.json"
    ckpt = tmp_path / "ckpt"
    c = cluster(["--ps=2", "--workers=1", f"--model=spec:{spec}", "--epochs=2",
                 "--batch_size=32", "--optimizer=adagrad", "--learning_rate=0.1",
                 "--initial_accumulator=0.1", f"--checkpoint_dir={ckpt}",
                 "--worker_command=" + worker_command("embedding_worker.py", f"--out={out}")],
                timeout=120)
    assert c.wait() == 0, c.output()
    figures = json.loads(out.read_text())
    assert figures["batches"] == 2 * embedding_worker.NUM_EXAMPLES // 32
    # Every table's rows, the pairs' table read twice a forward included,
    # start with the ps's initial values and take the same updates.
    assert figures["max_row_diff"] < 1e-5, figures
    assert figures["max_dense_diff"] < 1e-5, figures
    assert "second row push" in figures["second_push"], figures["second_push"]

    # The exported checkpoint loads back into the module, tables included.
    exported = tmp_path / "emb.safetensors"
    done = subprocess.run([os.path.join(BIN, "pstrain"), "checkpoint", "export", str(ckpt),
                           str(exported)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    tensors = pstrain.torch.read_safetensors(str(exported))
    assert tensors["emb.ids"].dtype == np.int64
    model = embedding_worker.Model()
    pstrain.torch.load_safetensors(model, str(exported))
    for name in ("first", "emb", "table"):
        e = getattr(model, name)
        rows = figures["rows"][name]
        ids = torch.tensor(rows["ids"], dtype=torch.int64)
        if e.is_hash:
            assert sorted(tensors[name + ".ids"].tolist()) == rows["ids"]
        loaded = e._values[e._local_slots(ids)].numpy()
        assert np.abs(loaded - np.array(rows["values"], np.float32)).max() < 1e-5, name
