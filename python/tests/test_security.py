"""Python tasks in a cluster whose servers take each caller's role from its
own token (docs/security.md): pstrain local hands the Python worker and
evaluator their TLS files and per-task token (PSTRAIN_TLS_*,
PSTRAIN_AUTH_TOKEN_FILE), and the job trains and is evaluated."""

import json
import os
import shutil
import subprocess

import numpy as np
import pytest

from conftest import PYTHON, WORKERS, worker_command

import pstrain.torch

TASKS = ["chief-0", "ps-0", "ps-1", "worker-0", "worker-1", "evaluator-0"]


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def make_cluster_certificate(d):
    """A CA, and one certificate for every task, for 127.0.0.1."""
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    (d / "cluster.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2",
            "-subj", "/CN=test-ca", cwd=d)
    openssl("req", *ec, "-keyout", "cluster.key", "-out", "cluster.csr", "-subj",
            "/CN=test-node", cwd=d)
    openssl("x509", "-req", "-in", "cluster.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "cluster.pem", "-days", "2", "-extfile", "cluster.ext",
            cwd=d)


def make_role_tokens(d, tasks):
    """<task>.token (a secret) for each task, and the servers' table of
    their SHA-256 digests."""
    import hashlib
    lines = []
    for task in tasks:
        token = os.urandom(32).hex()
        (d / f"{task}.token").write_text(token)
        lines.append(f"{hashlib.sha256(token.encode()).hexdigest()} {task}.pstrain")
    (d / "role-tokens").write_text("\n".join(lines) + "\n")


@pytest.mark.skipif(shutil.which("openssl") is None, reason="no openssl to make certificates")
def test_python_worker_and_evaluator_train_under_per_task_tokens(cluster, tmp_path):
    make_cluster_certificate(tmp_path)
    make_role_tokens(tmp_path, TASKS)
    ckpt, summary = tmp_path / "ckpt", tmp_path / "summary.json"
    c = cluster(["--ps=2", "--workers=2", "--epochs=1", "--max_steps=120", "--hidden=16",
                 "--batch_size=64", f"--checkpoint_dir={ckpt}", "--save_checkpoints_steps=40",
                 f"--summary_json={summary}", f"--tls_cert={tmp_path}/cluster.pem",
                 f"--tls_key={tmp_path}/cluster.key", f"--tls_ca={tmp_path}/ca.pem",
                 f"--role_tokens_file={tmp_path}/role-tokens",
                 f"--auth_token_file={tmp_path}/{{task}}.token",
                 "--worker_command=" + worker_command("mlp_worker.py", f"--record={tmp_path}"),
                 f"--evaluator_command={PYTHON} {os.path.join(WORKERS, 'norm_evaluator.py')}"])
    assert c.wait() == 0, c.output()
    assert "mutual TLS, token, role tokens" in c.output()
    evaluations = json.loads(summary.read_text())["evaluations"]
    saved = sorted(p.name for p in ckpt.iterdir() if p.name.startswith("ckpt-"))
    assert [e["checkpoint"] for e in evaluations] == saved, evaluations
    # The evaluator's norm of the final checkpoint is that of its export.
    exported = tmp_path / "final.safetensors"
    subprocess.run([os.path.join(os.environ.get("PSTRAIN_BIN", "build/bin"), "pstrain"),
                    "checkpoint", "export", str(ckpt / saved[-1]), str(exported)], check=True,
                   capture_output=True)
    tensors = pstrain.torch.read_safetensors(str(exported))
    norm = np.sqrt(sum(float(np.square(t.astype(np.float64)).sum()) for t in tensors.values()))
    assert evaluations[-1]["metrics"]["tensors"] == len(tensors) == 4
    assert abs(evaluations[-1]["metrics"]["l2_norm"] - norm) < 1e-9 * norm


def test_bad_security_files_raise_naming_them(tmp_path):
    with pytest.raises(LookupError, match="tls_ca"):
        pstrain.set_security(tls_ca=str(tmp_path / "missing.pem"))
    (tmp_path / "token").write_text("secret")
    with pytest.raises(ValueError, match="auth_token_file"):
        pstrain.set_security(auth_token_file=str(tmp_path / "token"))  # a token without TLS
