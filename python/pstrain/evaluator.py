"""pstrain.Evaluator: TF_CONFIG's evaluator task, in Python.

The evaluator watches the job's checkpoint directory and hands each new
checkpoint to the user's evaluation, then reports the metrics: to
TensorBoard (eval/<metric> in <summary_dir>/eval), to <checkpoint_dir>/best
when it is the best so far by `best_metric`, and to the chief, which keeps
them in its summary JSON. It ends after the job's final checkpoint.

    import pstrain, pstrain.torch
    model = Net()
    def evaluate(checkpoint):
        checkpoint.load_into(model)
        return {"accuracy": accuracy(model, test_set)}
    pstrain.Evaluator.from_env().run(evaluate)

A corrupt checkpoint is reported as such and passed over. An exception in
the evaluation is reported to the chief (which then stops waiting for this
evaluator) and raised again, so the process exits nonzero.
"""

import os
import shutil
import tempfile
import time
from typing import Callable, Dict, Iterator, Optional

import numpy as np

from . import _pstrain, security

__all__ = ["Checkpoint", "Evaluator"]


class Checkpoint:
    """One checkpoint of the job, handed out by Evaluator.checkpoints()."""

    def __init__(self, evaluator: "Evaluator", info: dict):
        self._evaluator = evaluator
        self.path: str = info["path"]
        self.name: str = info["name"]          # ckpt-<step>
        self.step: int = info["step"]          # the global step it holds
        self.epochs_completed: int = info["epochs_completed"]
        self._exported: Optional[str] = None
        self.reported = False

    def __repr__(self) -> str:
        return f"Checkpoint({self.name}, step={self.step}, epochs={self.epochs_completed})"

    def export(self, path: Optional[str] = None) -> str:
        """The whole model as one safetensors file (partitions merged, as
        `pstrain checkpoint export` writes it); a temporary file unless
        `path` is given. Returns its path."""
        if path is None:
            if self._exported is None:
                self._exported = os.path.join(self._evaluator._scratch(), self.name + ".safetensors")
                _pstrain.export_checkpoint(self.path, self._exported)
            return self._exported
        _pstrain.export_checkpoint(self.path, path)
        return path

    def tensors(self) -> Dict[str, np.ndarray]:
        """Every variable by name, as float32 numpy arrays of its full shape."""
        from .safetensors import read_safetensors
        return read_safetensors(self.export())

    def load_into(self, module) -> None:
        """Loads a torch module's dense parameters from this checkpoint
        (pstrain.torch.load_safetensors)."""
        from .torch import load_safetensors
        load_safetensors(module, self.export())

    def _done(self) -> None:
        self.reported = True
        if self._exported is not None:
            try:
                os.remove(self._exported)
            except FileNotFoundError:
                pass
            self._exported = None


class Evaluator:
    """An evaluator task of a pstrain job."""

    def __init__(self, tf_config=None, *, checkpoint_dir: Optional[str] = None,
                 summary_dir: Optional[str] = None, best_metric: Optional[str] = None,
                 best_mode: Optional[str] = None, poll_interval: float = 1.0,
                 chief_timeout: float = 300.0, rpc_timeout: float = 10.0):
        """`tf_config`: a dict or JSON text whose task is an evaluator
        (default: the TF_CONFIG environment variable). `checkpoint_dir`:
        where the chief saves checkpoints (default: PSTRAIN_CHECKPOINT_DIR,
        which `pstrain local` sets). `summary_dir`, `best_metric` and
        `best_mode` likewise default to PSTRAIN_SUMMARY_DIR,
        PSTRAIN_BEST_METRIC and PSTRAIN_BEST_MODE. `best_metric` picks the
        checkpoint kept in <checkpoint_dir>/best ("": the first of
        test_accuracy, test_auc, accuracy, auc reported); `best_mode` is
        "max", "min" or "auto" (min for a name with "loss" or "error").

        Raises ValueError for a malformed TF_CONFIG, a task that is not an
        evaluator, no checkpoint directory, or a bad best_mode.
        """
        tf_config = security._tf_config_text(tf_config)
        security._from_env()
        env = os.environ.get
        checkpoint_dir = checkpoint_dir or env("PSTRAIN_CHECKPOINT_DIR", "")
        self.poll_interval = float(poll_interval)
        self._session = _pstrain.EvaluatorSession(
            tf_config, checkpoint_dir, summary_dir or env("PSTRAIN_SUMMARY_DIR", ""),
            best_metric if best_metric is not None else env("PSTRAIN_BEST_METRIC", ""),
            best_mode or env("PSTRAIN_BEST_MODE", "auto"), self.poll_interval,
            float(chief_timeout), float(rpc_timeout))
        self.checkpoint_dir = checkpoint_dir
        self._tmp: Optional[str] = None
        self.evaluated = 0

    @classmethod
    def from_env(cls, **kwargs) -> "Evaluator":
        """An evaluator from TF_CONFIG and the PSTRAIN_* environment."""
        return cls(None, **kwargs)

    def _scratch(self) -> str:
        if self._tmp is None:
            self._tmp = tempfile.mkdtemp(prefix="pstrain-eval-")
        return self._tmp

    def checkpoints(self) -> Iterator[Checkpoint]:
        """Each new checkpoint, oldest first, waiting for the next one;
        ends after the job's final checkpoint. Report each with report().
        Raises LookupError when the checkpoint directory still does not
        exist at the end of the job, ConnectionError when the chief stays
        unreachable."""
        try:
            while True:
                kind, info = self._session.look()
                if kind == "end":
                    return
                if kind == "wait":
                    time.sleep(self.poll_interval)
                    continue
                yield Checkpoint(self, info)
        finally:
            if self._tmp is not None:
                shutil.rmtree(self._tmp, ignore_errors=True)
                self._tmp = None

    def report(self, checkpoint: Checkpoint, metrics: Dict[str, float]) -> bool:
        """Reports `checkpoint`'s metrics (name -> number). Returns whether
        it is now the best checkpoint. ValueError for a value that is not a
        finite number."""
        clean = {}
        for name, value in metrics.items():
            try:
                clean[str(name)] = float(value)
            except (TypeError, ValueError):
                raise ValueError(f"metric '{name}' is {value!r}, not a number") from None
        best = self._session.report(checkpoint.name, clean)
        checkpoint._done()
        self.evaluated += 1
        return best

    def report_failure(self, checkpoint: Checkpoint, error: str) -> None:
        """`checkpoint` could not be evaluated: logged and told to the chief."""
        self._session.report_failure(checkpoint.name, str(error))
        checkpoint._done()

    def run(self, evaluate: Callable[[Checkpoint], Dict[str, float]]) -> int:
        """Evaluates every checkpoint with `evaluate` (checkpoint -> metrics)
        and reports each; returns how many were evaluated. An exception in
        `evaluate` is reported to the chief as this evaluator giving up,
        and raised again."""
        for checkpoint in self.checkpoints():
            try:
                metrics = evaluate(checkpoint)
            except BaseException as e:
                self._session.give_up(f"the evaluation of {checkpoint.name} raised "
                                      f"{type(e).__name__}: {e}")
                raise
            self.report(checkpoint, metrics)
        return self.evaluated
