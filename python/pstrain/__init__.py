"""pstrain for Python workers.

A Python process joins a pstrain cluster as one of its workers: it reads
TF_CONFIG, registers with the chief, heartbeats (on a C++ thread that does
not hold the GIL), and exchanges parameters and gradients with the ps. The
chief plans, checkpoints and recovers the job as it does for C++ workers.

    import pstrain
    with pstrain.Worker.from_env() as worker:
        values = None
        for batch in worker.batches(len(dataset)):
            if batch.refresh:
                values = worker.pull()
            grads = compute(values, dataset[batch.examples])
            worker.push_pull(grads, out=values)

Arrays are float32 (values, gradients) and int64 (ids), C-contiguous numpy
arrays or CPU torch tensors; they are read and written in place, without
copies. Anything else raises TypeError or ValueError naming the tensor.

A step that fails because a ps or the chief went away is dropped: the call
returns None (or False), later calls of the same batch do nothing, and the
next batch the iterator gives is the one to train next once the cluster is
back: the same one, or the position of the checkpoint the ps were restored
from. Pushes are tagged with their data position, so none is applied twice.
"""

from typing import Dict, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from . import _pstrain
from . import security
from .evaluator import Checkpoint, Evaluator
from .security import set_security

__all__ = ["Batch", "Checkpoint", "CriteoBatch", "Evaluator", "LibsvmBatch", "Stream", "Worker",
           "set_security"]


class CriteoBatch(NamedTuple):
    """Criteo examples as pstrain's C++ reader makes them."""

    dense: np.ndarray   # float32 [n, 13], log(1 + max(0, x)); empty cells 0
    ids: np.ndarray     # int64 [n, 26]: field-bucketed rows, or hash ids with buckets=0
    labels: np.ndarray  # float32 [n], 0 or 1


class LibsvmBatch(NamedTuple):
    """libsvm examples: example i's features are ids/values[offsets[i]:offsets[i + 1]]."""

    offsets: np.ndarray  # int64 [n + 1]
    ids: np.ndarray      # int64: feature ids (folded into `buckets` rows when given)
    values: np.ndarray   # float32
    labels: np.ndarray   # float32 [n], 0 or 1


class Batch(NamedTuple):
    """One batch to train."""

    position: int  # batches this worker trained since the job began
    epoch: int
    refresh: bool  # the values held are stale: pull() before computing
    # int64 indices into the whole data set; for a Stream, into the epoch's
    # order of this worker's share
    examples: np.ndarray
    data: Optional[tuple] = None  # for a Stream: the batch's examples, read


class Stream:
    """An input read as a stream, whatever its size: a file, a directory, a
    glob or a comma list of them, plain or .gz, in Criteo TSV ("criteo") or
    libsvm ("libsvm") format. Worker `worker` of `num_workers` reads only its
    share (every num_workers-th file, or its byte range of a single plain
    file), shuffled in blocks of `shuffle_buffer` examples (1: in order)
    with `seed`, for `epochs` epochs, in batches of `batch_size`; memory is
    one block and one batch.

    The share's examples are counted, every line parsed, once, here: a bad
    line raises ValueError naming file:line now rather than mid-epoch. Batch
    b of epoch e is the examples [b * batch_size, ...) of the epoch's order,
    so data position p = e * batches_per_epoch + b names the same examples
    in every run, and read(p) returns them: a worker restarted at a position
    resumes at the exact example (C++ workers' --stream_data reads the same
    batches). Reading on from the last position read costs only its
    examples; another position reopens the stream at its epoch's start and
    passes over the examples before it without parsing them.
    Iterating yields (position, batch) for every position in order.
    """

    def __init__(self, data: str, format: str = "criteo", *, worker: int = 0,
                 num_workers: int = 1, shuffle_buffer: int = 1, seed: int = 0, epochs: int = 1,
                 batch_size: int = 4096, buckets: int = 0):
        if isinstance(data, (list, tuple)):
            data = ",".join(data)
        self.format = format
        self._stream = _pstrain.Stream(str(data), format, int(worker), int(num_workers),
                                       int(shuffle_buffer), int(seed) & (2**64 - 1), int(epochs),
                                       int(batch_size), int(buckets))
        self.epochs = int(epochs)
        self.batch_size = int(batch_size)

    @property
    def examples(self) -> int:
        """This share's examples in one epoch."""
        return self._stream.examples

    @property
    def batches_per_epoch(self) -> int:
        return self._stream.batches_per_epoch

    def read(self, position: int):
        """The examples of data position `position`: a CriteoBatch or a
        LibsvmBatch. IndexError past the last epoch."""
        arrays = self._stream.read(int(position))
        return CriteoBatch(*arrays) if self.format == "criteo" else LibsvmBatch(*arrays)

    def __iter__(self):
        for position in range(self.epochs * self.batches_per_epoch):
            yield position, self.read(position)


def _as_array(x, what: str, dtype, writable: bool) -> np.ndarray:
    """A numpy view of `x` (a numpy array or a CPU torch tensor), checked."""
    if type(x).__module__.startswith("torch"):
        if x.device.type != "cpu":
            raise TypeError(f"{what}: a tensor on {x.device}; pstrain exchanges CPU tensors")
        if not x.is_contiguous():
            raise TypeError(f"{what}: not contiguous (call .contiguous() first)")
        x = x.detach().numpy()
    elif not isinstance(x, np.ndarray):
        raise TypeError(f"{what}: expected a numpy array or a torch tensor, got {type(x).__name__}")
    if x.dtype != dtype:
        raise TypeError(f"{what}: dtype {x.dtype}, expected {np.dtype(dtype).name}")
    if not x.flags.c_contiguous:
        raise TypeError(f"{what}: not C-contiguous (use np.ascontiguousarray)")
    if writable and not x.flags.writeable:
        raise ValueError(f"{what}: read-only")
    return x


class Worker:
    """A worker task of a pstrain job, driven from Python."""

    def __init__(self, tf_config=None, *, heartbeat_interval: float = 1.0,
                 startup_timeout: float = 120.0, rpc_timeout: float = 60.0,
                 recovery_timeout: float = 300.0):
        """Registers with the chief named in `tf_config` (a dict or JSON
        text; default: the TF_CONFIG environment variable).

        Raises ValueError for a malformed TF_CONFIG or one whose task is not
        a worker, ConnectionError when the chief did not answer within
        `startup_timeout` seconds.
        """
        tf_config = security._tf_config_text(tf_config)
        security._from_env()
        self._session = _pstrain.Session(tf_config, heartbeat_interval, startup_timeout,
                                         rpc_timeout, recovery_timeout)
        self._dense: List[Tuple[str, Tuple[int, ...]]] = list(self._session.dense_variables)
        self._tables: Dict[str, int] = dict(self._session.tables)  # the plan's: fixed
        self._batch: Optional[Batch] = None

    @classmethod
    def from_env(cls, **kwargs) -> "Worker":
        """A worker from the TF_CONFIG environment variable."""
        return cls(None, **kwargs)

    # -- what the chief said --------------------------------------------
    @property
    def index(self) -> int:
        return self._session.worker_index

    @property
    def config(self) -> dict:
        """The job's training settings: batch_size, epochs, max_steps, seed,
        mode (ASYNC, SYNC, SSP), optimizer, learning_rate, clip_norm (0:
        no clipping), num_workers, num_ps, model, data."""
        return self._session.training

    @property
    def variables(self) -> Dict[str, Tuple[int, ...]]:
        """The dense variables, in the order pull() and push_pull() use."""
        return dict(self._dense)

    @property
    def tables(self) -> Dict[str, int]:
        """The tables read by rows, with their widths."""
        return dict(self._tables)

    @property
    def global_step(self) -> int:
        return self._session.global_step

    def check_variables(self, shapes: Dict[str, Sequence[int]]) -> None:
        """Raises ValueError unless `shapes` (name -> shape) are exactly the
        job's dense variables, naming the first that differs."""
        planned = dict(self._dense)
        for name, shape in shapes.items():
            if name not in planned:
                raise ValueError(f"parameter '{name}' is not a dense variable of the job "
                                 f"(the job has: {', '.join(planned) or 'none'})")
            if tuple(shape) != tuple(planned[name]):
                raise ValueError(f"parameter '{name}' has shape {list(shape)}, but the job's "
                                 f"variable has shape {list(planned[name])}")
        missing = [name for name in planned if name not in shapes]
        if missing:
            raise ValueError(f"the job's dense variable '{missing[0]}' is not a parameter here")

    # -- the loop -----------------------------------------------------
    def stream(self, data: Optional[str] = None, format: str = "criteo", *,
               shuffle_buffer: Optional[int] = None, buckets: int = 0) -> Stream:
        """This worker's share of `data` (default: the job's --data) read as
        a Stream, with the job's seed (and this worker's index), epochs and
        batch size, and the job's --shuffle_buffer unless given. Give it to
        batches()."""
        config = self.config
        if shuffle_buffer is None:
            shuffle_buffer = config.get("shuffle_buffer") or 10000
        return Stream(config["data"] if data is None else data, format, worker=self.index,
                      num_workers=config["num_workers"], shuffle_buffer=shuffle_buffer,
                      seed=config["seed"] ^ (self.index << 32), epochs=config["epochs"],
                      batch_size=config["batch_size"], buckets=buckets)

    def batches(self, data):
        """Yields the batches this worker trains, until its epochs are over
        and the chief ends the job; waits (without the GIL) while the
        cluster recovers. `data` is the number of examples of the whole data
        set, which the workers share (each batch's `examples` index it), or
        this worker's Stream (each batch's `data` holds its examples)."""
        stream = data if isinstance(data, Stream) else None
        while True:
            if stream is not None:
                b = self._session.next(stream.examples, True)
            else:
                b = self._session.next(int(data))
            if b is None:
                self._batch = None
                return
            self._batch = Batch(*b) if stream is None else Batch(*b, data=stream.read(b[0]))
            yield self._batch

    def _dense_arrays(self, arrays, what: str, writable: bool) -> List[np.ndarray]:
        if len(arrays) != len(self._dense):
            raise ValueError(f"{len(arrays)} {what} for {len(self._dense)} dense variables "
                             f"({', '.join(n for n, _ in self._dense)})")
        return [_as_array(a, f"{what[:-1]} of '{name}'", np.float32, writable)
                for a, (name, _) in zip(arrays, self._dense)]

    def _new_values(self) -> List[np.ndarray]:
        return [np.zeros(shape, np.float32) for _, shape in self._dense]

    def pull(self, out=None) -> Optional[list]:
        """The dense variables' values, into `out` (arrays or tensors, one
        per variable) or new arrays. None when the step failed."""
        if out is None:
            out = self._new_values()
        arrays = self._dense_arrays(out, "values", writable=True)
        return out if self._session.pull(arrays) else None

    def push_pull(self, grads, out=None, *, loss: float = 0.0,
                  examples: Optional[int] = None) -> Optional[list]:
        """Pushes the batch's gradients (one per dense variable) and fetches
        the values after them into `out`, in one round trip per ps. `loss`
        and `examples` (default: the batch's) feed the chief's progress.
        None when the step failed (it is dropped, and retried)."""
        if out is None:
            out = self._new_values()
        g = self._dense_arrays(grads, "gradients", writable=False)
        v = self._dense_arrays(out, "values", writable=True)
        if examples is None:
            examples = len(self._batch.examples) if self._batch is not None else 0
        return out if self._session.push_pull(g, v, int(examples), float(loss)) else None

    def pull_rows(self, table: str, ids, out=None) -> Optional[np.ndarray]:
        """Rows of `table` for `ids` (int64, any shape): [len(ids), dim].
        None when the step failed."""
        ids = _as_array(ids, f"ids for '{table}'", np.int64, writable=False)
        dim = self._tables.get(table)
        if dim is None:
            raise LookupError(f"no table '{table}' in the job (tables: "
                              f"{', '.join(self._tables) or 'none'})")
        if out is None:
            out = np.empty((ids.size, dim), np.float32)
        rows = _as_array(out, f"rows of '{table}'", np.float32, writable=True)
        return out if self._session.pull_rows(table, ids, rows) else None

    def push_rows(self, table, ids=None, grads=None) -> bool:
        """Adds gradient rows ([len(ids), dim]) of `table`; duplicate ids'
        rows are summed. `table` may instead be a dict {table: (ids,
        grads)}: the rows of several tables in one push.

        Once per batch: the ps apply a worker's row push of a batch once and
        would drop a second one as a retry, so a second call in the same
        batch raises RuntimeError and sends nothing; push every table's rows
        in one call. False when the step failed."""
        if isinstance(table, dict):
            if ids is not None or grads is not None:
                raise TypeError("push_rows({table: (ids, grads)}) takes no ids or grads")
            rows = list(table.items())
        else:
            rows = [(table, (ids, grads))]
        entries = []
        for name, (t_ids, t_grads) in rows:
            entries.append((name, _as_array(t_ids, f"ids for '{name}'", np.int64, writable=False),
                            _as_array(t_grads, f"row gradients of '{name}'", np.float32,
                                      writable=False)))
        return self._session.push_rows(entries)

    def close(self) -> None:
        """Leaves the job; the chief hears of it unless the worker finished."""
        if self._session is not None:
            self._session.close()
            self._session = None

    def __enter__(self) -> "Worker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
