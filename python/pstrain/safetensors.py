"""The safetensors format, float32 and int64 tensors: what `pstrain
checkpoint export` writes and pstrain.torch.export_spec's initial values.
numpy only, so that reading an export needs no torch (pstrain.Evaluator's
Checkpoint.tensors)."""

import json
import os
import struct
from typing import Dict

import numpy as np

__all__ = ["read_safetensors", "write_safetensors"]


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


_SAFETENSORS_DTYPES = {"F32": "<f4", "I64": "<i8"}


def read_safetensors(path: str) -> Dict[str, np.ndarray]:
    """The tensors of a safetensors file (`pstrain checkpoint export` writes
    them): F32 as float32, I64 (a hash table's `.ids`) as int64 arrays.
    ValueError for a file that is not one, or another dtype."""
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
        dtype = _SAFETENSORS_DTYPES.get(entry.get("dtype"))
        if dtype is None:
            raise ValueError(f"{path}: tensor '{name}' is {entry.get('dtype')}, not F32 or I64")
        begin, end = entry["data_offsets"]
        shape = tuple(entry["shape"])
        size = np.dtype(dtype).itemsize * int(np.prod(shape))
        if not 0 <= begin <= end <= len(body) or end - begin != size:
            raise ValueError(f"{path}: tensor '{name}' has bad offsets {begin}, {end}")
        tensors[name] = np.frombuffer(body[begin:end], dtype).reshape(shape).copy()
    return tensors
