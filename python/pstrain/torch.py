"""Train a torch.nn.Module whose parameters live on pstrain's ps.

The dense parameters are the ps's dense variables, by their names in
module.named_parameters(). Each step pulls nothing extra: the fused
PushPull that pushes a step's gradients brings the values the next step
computes from, written straight into the parameters' memory. The optimizer
runs on the ps. pstrain.torch.Embedding keeps its table on the ps and
exchanges only the rows of a batch's unique ids.

    worker = pstrain.Worker.from_env()
    trainer = pstrain.torch.Trainer(worker, model)
    for batch in trainer.batches(len(train)):
        x, y = train[batch.examples]
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        trainer.step(loss)

export_spec(module, path) writes the model spec the chief plans from
(`pstrain local --model=spec:PATH`), with the module's own initial values.
"""

import json
import os
import struct
from typing import Dict, Iterator, List, Optional

import numpy as np
import torch

import pstrain

__all__ = ["Embedding", "Trainer", "export_spec", "load_safetensors", "read_safetensors",
           "write_safetensors"]


class Embedding(torch.nn.Module):
    """An embedding table held by the ps.

    num_embeddings: rows, ids in [0, num_embeddings); None or 0 for a hash
    table over any int64 id (rows made on first touch, after `admit_after`
    touches). `init` is the spec's initializer, e.g. {"kind": "normal",
    "scale": 0.01}. `name` is the table's name on the ps (default: the
    module's path, set when a Trainer or export_spec sees it).

    Without a worker attached (one process, no pstrain) it trains locally:
    a dense table, or for a hash table a local dict of rows.
    """

    def __init__(self, num_embeddings: Optional[int], embedding_dim: int, *,
                 name: Optional[str] = None, init: Optional[dict] = None,
                 admit_after: int = 0):
        super().__init__()
        self.num_embeddings = int(num_embeddings or 0)
        self.embedding_dim = int(embedding_dim)
        self.table_name = name
        self.init = dict(init or {"kind": "normal", "scale": 0.01})
        self.admit_after = int(admit_after)
        self._worker: Optional[pstrain.Worker] = None
        self._pending: List[tuple] = []
        self._local: Dict[int, torch.Tensor] = {}
        self._local_opt = None

    @property
    def is_hash(self) -> bool:
        return self.num_embeddings == 0

    def attach(self, worker: Optional["pstrain.Worker"]) -> None:
        self._worker = worker

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        if ids.dtype != torch.int64:
            raise TypeError(f"embedding '{self.table_name}': ids of dtype {ids.dtype}, "
                            "expected torch.int64")
        flat = ids.reshape(-1)
        unique, inverse = torch.unique(flat, return_inverse=True)
        if self._worker is not None:
            rows_np = self._worker.pull_rows(self.table_name, unique.numpy())
            if rows_np is None:  # the step failed; it is dropped
                rows_np = np.zeros((len(unique), self.embedding_dim), np.float32)
            rows = torch.from_numpy(rows_np).requires_grad_(self.training)
        else:
            rows = self._local_rows(unique).requires_grad_(self.training)
        if self.training:
            self._pending.append((unique, rows))
        out = rows[inverse]  # its backward sums the gradients of repeated ids
        return out.reshape(*ids.shape, self.embedding_dim)

    def _local_rows(self, unique: torch.Tensor) -> torch.Tensor:
        rows = []
        for i in unique.tolist():
            row = self._local.get(i)
            if row is None:
                row = _initial_row(self.init, self.embedding_dim, i)
                self._local[i] = row
            rows.append(row)
        return torch.stack(rows) if rows else torch.zeros(0, self.embedding_dim)

    def take_gradients(self):
        """(unique ids, row gradients) of every forward since the last call."""
        pending, self._pending = self._pending, []
        for unique, rows in pending:
            if rows.grad is not None:
                yield unique, rows.grad

    def apply_local(self, lr: float) -> None:
        """Without a worker: an SGD step on the local rows (the reference
        of a one-process run)."""
        for unique, grad in self.take_gradients():
            for i, g in zip(unique.tolist(), grad):
                self._local[i] = self._local[i] - lr * g


def _initial_row(init: dict, dim: int, row_id: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed((int(init.get("seed", 0)) * 1000003 + row_id) % (2**63))
    kind = init.get("kind", "zeros")
    scale = float(init.get("scale", 0.0))
    if kind == "normal":
        return torch.randn(dim, generator=gen) * scale
    if kind == "uniform":
        return (torch.rand(dim, generator=gen) * 2 - 1) * scale
    if kind == "constant":
        return torch.full((dim,), float(init.get("value", 0.0)))
    return torch.zeros(dim)


def _embeddings(module: torch.nn.Module) -> List[Embedding]:
    found = []
    for path, sub in module.named_modules():
        if isinstance(sub, Embedding):
            if sub.table_name is None:
                sub.table_name = path or "embedding"
            found.append(sub)
    return found


def _dense_parameters(module: torch.nn.Module) -> Dict[str, torch.nn.Parameter]:
    return dict(module.named_parameters())


class Trainer:
    """Trains `module` through `worker`: its parameters are the job's dense
    variables, its pstrain.torch.Embedding modules the job's tables.

    Raises ValueError at once, naming the parameter and both shapes, when
    the module does not match the job the chief planned.
    """

    def __init__(self, worker: "pstrain.Worker", module: torch.nn.Module):
        self.worker = worker
        self.module = module
        params = _dense_parameters(module)
        worker.check_variables({name: tuple(p.shape) for name, p in params.items()})
        for p in params.values():
            if p.dtype != torch.float32 or not p.is_contiguous():
                raise TypeError("pstrain.torch trains float32, contiguous parameters")
        order = list(worker.variables)
        self._params = [params[name] for name in order]
        self._values = [p.data for p in self._params]
        self._embeddings = _embeddings(module)
        tables = worker.tables
        for e in self._embeddings:
            if e.table_name not in tables:
                raise ValueError(f"embedding '{e.table_name}' is not a table of the job "
                                 f"(tables: {', '.join(tables) or 'none'})")
            if tables[e.table_name] != e.embedding_dim:
                raise ValueError(f"embedding '{e.table_name}' has width {e.embedding_dim}, but "
                                 f"the job's table has width {tables[e.table_name]}")
            e.attach(worker)
        self._zero_grads = [torch.zeros_like(p) for p in self._params]

    def batches(self, num_examples: int) -> Iterator["pstrain.Batch"]:
        """The worker's batches; pulls the parameters whenever they are stale
        (the first batch, and after a failed step)."""
        for batch in self.worker.batches(num_examples):
            self.module.zero_grad(set_to_none=True)
            if batch.refresh:
                with torch.no_grad():
                    self.worker.pull(out=self._values)
            yield batch

    def step(self, loss=None) -> bool:
        """Pushes this batch's gradients (tables' rows first, then the dense
        ones fused with the pull of the next values). False when the step
        failed on the cluster and is retried."""
        ok = True
        for e in self._embeddings:
            for unique, grad in e.take_gradients():
                ok = self.worker.push_rows(e.table_name, unique.numpy(),
                                           grad.contiguous().numpy()) and ok
        grads = [p.grad if p.grad is not None else z
                 for p, z in zip(self._params, self._zero_grads)]
        with torch.no_grad():
            pushed = self.worker.push_pull(
                [g.contiguous() for g in grads], out=self._values,
                loss=float(loss) if loss is not None else 0.0)
        return ok and pushed is not None


def write_safetensors(path: str, tensors: Dict[str, np.ndarray]) -> None:
    """Writes float32 arrays in the safetensors format."""
    header, offset, blobs = {}, 0, []
    for name, array in tensors.items():
        data = np.ascontiguousarray(array, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)
    os.replace(tmp, path)


def read_safetensors(path: str) -> Dict[str, np.ndarray]:
    """The float32 tensors of a safetensors file (`pstrain checkpoint
    export` writes them). ValueError for a file that is not one."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError(f"{path}: too short for a safetensors file")
    (length,) = struct.unpack("<Q", data[:8])
    if length > len(data) - 8:
        raise ValueError(f"{path}: header of {length} bytes past the end of the file")
    try:
        header = json.loads(data[8:8 + length])
    except ValueError as e:
        raise ValueError(f"{path}: header is not JSON: {e}") from None
    body = memoryview(data)[8 + length:]
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        if entry.get("dtype") != "F32":
            raise ValueError(f"{path}: tensor '{name}' is {entry.get('dtype')}, not F32")
        begin, end = entry["data_offsets"]
        shape = tuple(entry["shape"])
        if not 0 <= begin <= end <= len(body) or end - begin != 4 * int(np.prod(shape)):
            raise ValueError(f"{path}: tensor '{name}' has bad offsets {begin}, {end}")
        tensors[name] = np.frombuffer(body[begin:end], "<f4").reshape(shape).copy()
    return tensors


def load_safetensors(module: torch.nn.Module, path: str) -> None:
    """Loads a module's dense parameters from a safetensors file (an
    exported checkpoint): every parameter must be there with its shape."""
    tensors = read_safetensors(path)
    with torch.no_grad():
        for name, p in _dense_parameters(module).items():
            if name not in tensors:
                raise ValueError(f"{path}: no tensor for parameter '{name}'")
            if tuple(tensors[name].shape) != tuple(p.shape):
                raise ValueError(f"{path}: tensor '{name}' has shape {list(tensors[name].shape)}, "
                                 f"the parameter {list(p.shape)}")
            p.copy_(torch.from_numpy(tensors[name]))


def export_spec(module: torch.nn.Module, path: str) -> str:
    """Writes the model spec of `module` to `path` (JSON) and its dense
    parameters' current values beside it (<path stem>.safetensors), so the
    job trains from this module's own initialization. Returns `path`."""
    base = os.path.splitext(path)[0]
    values_path = base + ".safetensors"
    variables, values = [], {}
    for name, p in _dense_parameters(module).items():
        if p.dim() == 0:
            raise ValueError(f"parameter '{name}' is a scalar; pstrain variables have a shape")
        variables.append({"name": name, "shape": list(p.shape), "kind": "dense", "init": "file"})
        values[name] = p.detach().cpu().numpy().astype(np.float32)
    for e in _embeddings(module):
        entry = {"name": e.table_name, "init": e.init}
        if e.is_hash:
            entry.update(kind="hash", dim=e.embedding_dim, admit_after=e.admit_after)
        else:
            entry.update(kind="table", shape=[e.num_embeddings, e.embedding_dim])
        variables.append(entry)
    write_safetensors(values_path, values)
    spec = {"format": "pstrain.model_spec/1",
            "initial_values": os.path.basename(values_path),
            "variables": variables}
    with open(path + ".tmp", "w") as f:
        json.dump(spec, f, indent=1)
    os.replace(path + ".tmp", path)
    return path
