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

export_spec(module, path, optimizer=opt, scheduler=sched) writes the model
spec the chief plans from (`pstrain local --model=spec:PATH`), with the
module's own initial values, and the optimizer and schedule the ps run.
"""

import json
import math
import os
from typing import Dict, Iterator, List, Optional

import numpy as np
import torch

import pstrain
from pstrain import optim
from pstrain.safetensors import read_safetensors, write_safetensors

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
    its rows are made on first touch with the values the ps would give them
    (the same counter-based initializer, element by element), and
    apply_local() updates them with the ps's SGD or Adagrad rule. Every id
    counts as admitted there (admit_after is the ps's alone).
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
        # The local table: id -> row of _values (and of _slots, the local
        # optimizer's, made on the first apply_local; _steps counts them).
        self._index: Dict[int, int] = {}
        self._values = torch.zeros(0, self.embedding_dim)
        self._slots: Optional[List[torch.Tensor]] = None
        self._slot_init: List[float] = []
        self._steps = 0

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
            slots = self._local_slots(unique)  # may grow self._values
            rows = self._values[slots].requires_grad_(self.training)
        if self.training:
            self._pending.append((unique, rows))
        out = rows[inverse]  # its backward sums the gradients of repeated ids
        return out.reshape(*ids.shape, self.embedding_dim)

    def _local_slots(self, unique: torch.Tensor) -> torch.Tensor:
        """The local rows of `unique` ids, made (initialized) on first touch."""
        ids = unique.tolist()
        if not self.is_hash and ids and not 0 <= min(ids) <= max(ids) < self.num_embeddings:
            bad = next(i for i in ids if not 0 <= i < self.num_embeddings)
            raise ValueError(f"embedding '{self.table_name}': id {bad} out of range "
                             f"[0, {self.num_embeddings})")
        new = [i for i in ids if i not in self._index]
        if new:
            self._add_rows(np.array(new, np.int64),
                           _initial_rows(self.init, self.embedding_dim, np.array(new, np.int64),
                                         self.num_embeddings))
        return torch.tensor([self._index[i] for i in ids], dtype=torch.int64)

    def _add_rows(self, ids: np.ndarray, values: np.ndarray) -> None:
        first = len(self._index)
        for k, i in enumerate(ids.tolist()):
            self._index[i] = first + k
        self._values = torch.cat([self._values, torch.from_numpy(values)])
        if self._slots is not None:
            self._slots = [torch.cat([s, torch.full((len(ids), self.embedding_dim), v)])
                           for s, v in zip(self._slots, self._slot_init)]

    def load_rows(self, ids, values) -> None:
        """Without a worker: replaces the local table by these rows (ids
        [n] int64, values [n, dim]), e.g. a hash table's `.ids` and
        `.values` from `pstrain checkpoint export`. Other ids start afresh."""
        ids = np.asarray(ids, np.int64).reshape(-1)
        values = np.asarray(values, np.float32)
        if values.size != len(ids) * self.embedding_dim:
            raise ValueError(f"embedding '{self.table_name}': {values.size} values for "
                             f"{len(ids)} rows of width {self.embedding_dim}")
        values = values.reshape(len(ids), self.embedding_dim)
        if len(np.unique(ids)) != len(ids):
            raise ValueError(f"embedding '{self.table_name}': repeated ids")
        self._index, self._slots, self._steps = {}, None, 0
        self._values = torch.zeros(0, self.embedding_dim)
        self._add_rows(ids, values.copy())

    def take_gradients(self):
        """(unique ids, row gradients) of every forward since the last call."""
        pending, self._pending = self._pending, []
        for unique, rows in pending:
            if rows.grad is not None:
                yield unique, rows.grad

    # apply_local's rules: the initial value of each slot.
    _LOCAL_SLOTS = {"sgd": (), "adagrad": ("initial_accumulator",),
                    "ftrl": ("initial_accumulator", 0.0), "adam": (0.0, 0.0)}

    def apply_local(self, lr: float, optimizer: str = "sgd", initial_accumulator: float = 0.1,
                    *, beta1: float = 0.9, beta2: float = 0.999, epsilon: float = 1e-7,
                    l1: float = 0.0, l2: float = 0.0, lr_power: float = -0.5) -> None:
        """Without a worker: one step on the local rows read since the last
        call (the gradients of an id summed, as Trainer.step pushes them),
        by the ps's rule in TensorFlow's form (ps_server/store/
        optimizer_tensorflow.cc), lazily (the rows not read keep their
        slots), with the ps's float32 arithmetic:
          sgd:     row -= lr * g
          adagrad: accum += g * g; row -= lr * g / sqrt(accum)
                   (accum starts at initial_accumulator, the ps's
                   --initial_accumulator)
          ftrl:    ApplyFtrl with l1, l2, lr_power, per element in float64
          adam:    ApplyAdam, t = this table's steps (the table's version)
        This is the reference of a one-process run."""
        if optimizer not in self._LOCAL_SLOTS:
            raise ValueError(f"apply_local: optimizer '{optimizer}', expected one of "
                             f"{', '.join(self._LOCAL_SLOTS)}")
        init = [float(initial_accumulator) if v == "initial_accumulator" else v
                for v in self._LOCAL_SLOTS[optimizer]]
        taken = list(self.take_gradients())
        if not taken:
            return
        with torch.no_grad():
            # An id read more than once: its gradients summed, as pushed.
            unique, grad = _summed_by_id(torch.cat([u for u, _ in taken]),
                                         torch.cat([g for _, g in taken]))
            rows = self._local_slots(unique)
            if self._slots is None:
                self._slot_init = init
                self._slots = [torch.full_like(self._values, v) for v in init]
            elif self._slot_init != init:
                raise ValueError(f"apply_local: embedding '{self.table_name}' trained with "
                                 f"another optimizer before")
            self._steps += 1
            values = self._values[rows]
            slots = [s[rows] for s in self._slots]
            if optimizer == "sgd":
                values -= _f32(lr) * grad
            elif optimizer == "adagrad":
                slots[0] += grad * grad
                values -= _f32(lr) * grad / slots[0].sqrt()
            elif optimizer == "adam":
                t = self._steps
                lr_t = _f32(lr * math.sqrt(1 - beta2 ** t) / (1 - beta1 ** t))
                slots[0] = _f32(beta1) * slots[0] + _f32(1 - beta1) * grad
                slots[1] = _f32(beta2) * slots[1] + _f32(1 - beta2) * grad * grad
                values -= lr_t * slots[0] / (slots[1].sqrt() + _f32(epsilon))
            else:  # ftrl
                g, p = grad.double(), values.double()
                accum, linear = slots[0].double(), slots[1].double()
                new_accum = accum + g * g
                power = -float(np.float32(lr_power))
                lin = linear + g - (new_accum ** power - accum ** power) / lr * p
                quadratic = new_accum ** power / lr + 2 * float(np.float32(l2))
                l1_f = float(np.float32(l1))
                values = torch.where(lin.abs() > l1_f, (torch.sign(lin) * l1_f - lin) / quadratic,
                                     torch.zeros_like(lin)).float()
                slots = [new_accum.float(), lin.float()]
            self._values[rows] = values
            for s, new in zip(self._slots, slots):
                s[rows] = new

def _f32(x: float) -> float:
    """`x` rounded to float32, as the ps's kernels take a scalar."""
    return float(np.float32(x))


def _splitmix64(x: np.ndarray) -> np.ndarray:
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _counter_uniform(seed: int, counters: np.ndarray) -> np.ndarray:
    """common/initializer.cc's CounterUniform: a double in [0, 1)."""
    bits = _splitmix64(_splitmix64(np.array([seed], np.uint64)) ^ counters)
    return (bits >> np.uint64(11)).astype(np.float64) * 2.0**-53


def _initial_rows(init: dict, dim: int, ids: np.ndarray, num_rows: int = 0) -> np.ndarray:
    """The initial rows [len(ids), dim] the ps gives these ids: element j of
    row `id` is element (id mod 2^62) * dim + j of the initializer
    (common/initializer.h, ps_server/store/variable_store.h). num_rows: the rows
    of a dense table (Glorot's fan-in), 0 for a hash table."""
    kind = init.get("kind", "zeros")
    if kind in ("zeros", "constant"):
        value = float(init.get("value", 0.0)) if kind == "constant" else 0.0
        return np.full((len(ids), dim), value, np.float32)
    seed = int(init.get("seed", 0))
    scale = float(np.float32(init.get("scale", 0.0)))  # a float in the ps's spec
    rows = ids.astype(np.uint64) & np.uint64((1 << 62) - 1)
    k = (rows[:, None] * np.uint64(dim) + np.arange(dim, dtype=np.uint64)[None, :]).reshape(-1)
    if kind == "normal":
        u1 = 1.0 - _counter_uniform(seed, np.uint64(2) * k)
        u2 = _counter_uniform(seed, np.uint64(2) * k + np.uint64(1))
        z = np.sqrt(-2.0 * np.log(u1)) * np.cos(2 * np.pi * u2) * scale
        return z.astype(np.float32).reshape(len(ids), dim)
    if kind in ("uniform", "glorot_uniform"):
        limit = scale
        if kind == "glorot_uniform":
            if num_rows <= 0:
                raise ValueError("glorot_uniform needs the table's rows; a hash table has none")
            limit = float(np.sqrt(6.0 / (num_rows + dim)))
        u = _counter_uniform(seed, k)
        return ((2.0 * u - 1.0) * limit).astype(np.float32).reshape(len(ids), dim)
    raise ValueError(f"unknown init kind '{kind}'")


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
        # --clip_norm, or the spec's clip_norm: the whole step's gradient is
        # clipped before any of it is pushed.
        self.clip_norm = float(worker.config.get("clip_norm", 0.0))

    def batches(self, data) -> Iterator["pstrain.Batch"]:
        """The worker's batches (worker.batches: `data` is the whole data
        set's size, or this worker's pstrain.Stream); pulls the parameters
        whenever they are stale (the first batch, and after a failed step)."""
        for batch in self.worker.batches(data):
            self.module.zero_grad(set_to_none=True)
            if batch.refresh:
                with torch.no_grad():
                    self.worker.pull(out=self._values)
            yield batch

    def step(self, loss=None) -> bool:
        """Pushes this batch's gradients (tables' rows first, then the dense
        ones fused with the pull of the next values). False when the step
        failed on the cluster and is retried."""
        # Every table's rows in one push (the ps take one row push a batch);
        # a table read more than once gets its pieces together, summed by id.
        pieces: Dict[str, list] = {}
        for e in self._embeddings:
            pieces.setdefault(e.table_name, []).extend(e.take_gradients())
        rows = {name: (torch.cat([u for u, _ in got]), torch.cat([g for _, g in got]).contiguous())
                for name, got in pieces.items() if got}
        if self.clip_norm > 0:
            # The rows as the table's gradient holds them: one per id.
            rows = {name: _summed_by_id(ids, g) for name, (ids, g) in rows.items()}
            optim.clip_by_global_norm([p.grad for p in self._params] +
                                      [g for _, g in rows.values()], self.clip_norm)
        rows = {name: (ids.numpy(), g.numpy()) for name, (ids, g) in rows.items()}
        ok = self.worker.push_rows(rows) if rows else True
        grads = [p.grad if p.grad is not None else z
                 for p, z in zip(self._params, self._zero_grads)]
        with torch.no_grad():
            pushed = self.worker.push_pull(
                [g.contiguous() for g in grads], out=self._values,
                loss=float(loss) if loss is not None else 0.0)
        return ok and pushed is not None


def _summed_by_id(ids: torch.Tensor, grads: torch.Tensor):
    """(unique ids, their gradients summed): a table read more than once in
    a step names some ids twice."""
    unique, inverse = torch.unique(ids, return_inverse=True)
    if len(unique) == len(ids):
        return ids, grads
    return unique, torch.zeros(len(unique), grads.shape[1]).index_add_(0, inverse, grads)


def load_safetensors(module: torch.nn.Module, path: str) -> None:
    """Loads a module from a safetensors file (an exported checkpoint):
    every dense parameter must be there with its shape, and every
    pstrain.torch.Embedding's table: `<table>` [rows, dim] for a table,
    `<table>.ids` and `<table>.values` for a hash table (its rows, loaded
    into the local table: see Embedding.load_rows)."""
    tensors = read_safetensors(path)

    def tensor(name, shape=None, dtype=np.float32):
        if name not in tensors:
            raise ValueError(f"{path}: no tensor '{name}'")
        t = tensors[name]
        if t.dtype != dtype:
            raise ValueError(f"{path}: tensor '{name}' is {t.dtype}, expected "
                             f"{np.dtype(dtype).name}")
        if shape is not None and tuple(t.shape) != tuple(shape):
            raise ValueError(f"{path}: tensor '{name}' has shape {list(t.shape)}, "
                             f"the module's is {list(shape)}")
        return t

    with torch.no_grad():
        for name, p in _dense_parameters(module).items():
            p.copy_(torch.from_numpy(tensor(name, p.shape)))
    for e in _embeddings(module):
        if e.is_hash:
            ids = tensor(e.table_name + ".ids", dtype=np.int64)
            e.load_rows(ids, tensor(e.table_name + ".values", (len(ids), e.embedding_dim)))
        else:
            e.load_rows(np.arange(e.num_embeddings),
                        tensor(e.table_name, (e.num_embeddings, e.embedding_dim)))


def export_spec(module: torch.nn.Module, path: str, *, optimizer=None, scheduler=None,
                steps_per_epoch: int = 1, clip_norm: float = 0.0,
                table_optimizer: Optional[dict] = None) -> str:
    """Writes the model spec of `module` to `path` (JSON) and its dense
    parameters' current values beside it (<path stem>.safetensors), so the
    job trains from this module's own initialization. Returns `path`.

    With `optimizer` (a torch.optim optimizer of the module's parameters)
    and `scheduler` (its lr_scheduler, stepped every `steps_per_epoch`
    optimizer steps), the spec carries them as the job's optimizer: the ps
    run torch's update rule with torch's rates (pstrain.optim). With
    `clip_norm`, every worker clips each step's gradient to that global
    norm, as torch.nn.utils.clip_grad_norm_. Param groups with settings of
    their own become optimizer groups of their parameters. The tables
    (pstrain.torch.Embedding, not the optimizer's) train with the job's
    optimizer, or with `table_optimizer`: OptimizerConfig fields, e.g.
    {"name": "adagrad", "learning_rate": 0.05}. ValueError names what
    cannot be mapped."""
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
    spec = {"format": "pstrain.model_spec/1",
            "initial_values": os.path.basename(values_path),
            "variables": variables}
    groups = []
    if optimizer is not None:
        spec["optimizer"], groups = optim.optimizer_groups(module, optimizer, scheduler,
                                                           steps_per_epoch)
    elif scheduler is not None:
        raise ValueError("a scheduler needs its optimizer (export_spec(..., optimizer=...))")
    if table_optimizer is not None:
        if not _embeddings(module):
            raise ValueError("table_optimizer: the module has no pstrain.torch.Embedding")
        groups.append({"match": ["tables"], "optimizer": dict(table_optimizer)})
    if groups:
        spec["optimizer_groups"] = groups
    if clip_norm:
        if not clip_norm > 0 or not np.isfinite(clip_norm):
            raise ValueError(f"clip_norm must be positive and finite, got {clip_norm}")
        spec["clip_norm"] = float(clip_norm)
    write_safetensors(values_path, values)
    with open(path + ".tmp", "w") as f:
        json.dump(spec, f, indent=1)
    os.replace(path + ".tmp", path)
    return path
