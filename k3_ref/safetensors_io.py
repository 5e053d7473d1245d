"""Reading and writing safetensors files, with or without the `safetensors` package.

The format: 8 bytes little-endian u64 N, then N bytes of JSON header
{name: {"dtype": "BF16"|"F32"|"U8"|..., "shape": [...], "data_offsets": [begin, end]}, "__metadata__": {...}},
then the raw little-endian data; offsets count from the first byte after the header.

`open_shard(path)` returns an object with `.names()`, `.info(name)` -> (dtype string, shape list) and
`.get(name)` -> a CPU torch tensor in the stored dtype (torch.bfloat16, torch.float32, torch.uint8, ...).
It uses the `safetensors` package when importable, else the small reader below. `write_shard` always uses the
small writer (deterministic bytes, no dependency).
"""

import json
import os
import struct

import numpy as np
import torch

# dtype string -> (numpy dtype used to read the raw bytes, torch dtype of the returned tensor)
_DTYPES = {
    "BF16": (np.int16, torch.bfloat16),  # read as int16, reinterpreted as bfloat16 (same 2 bytes)
    "F16": (np.float16, torch.float16),
    "F32": (np.float32, torch.float32),
    "F64": (np.float64, torch.float64),
    "U8": (np.uint8, torch.uint8),
    "I8": (np.int8, torch.int8),
    "I16": (np.int16, torch.int16),
    "I32": (np.int32, torch.int32),
    "I64": (np.int64, torch.int64),
}
_TORCH_TO_NAME = {torch.bfloat16: "BF16", torch.float16: "F16", torch.float32: "F32", torch.float64: "F64",
                  torch.uint8: "U8", torch.int8: "I8", torch.int16: "I16", torch.int32: "I32", torch.int64: "I64"}


class SafetensorsError(Exception):
    """A malformed or inconsistent safetensors file; the message names the file and tensor."""


def dtype_size(dtype):
    if dtype not in _DTYPES:
        raise SafetensorsError("unknown dtype %r" % dtype)
    return np.dtype(_DTYPES[dtype][0]).itemsize


def read_header(path):
    """Returns (header dict without __metadata__, data start offset). Validates every entry's extent."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise SafetensorsError("%s: shorter than the 8-byte header length" % path)
        (n,) = struct.unpack("<Q", raw)
        if 8 + n > size:
            raise SafetensorsError("%s: header of %d bytes overruns the file (%d bytes)" % (path, n, size))
        header = json.loads(f.read(n).decode("utf-8"))
    header.pop("__metadata__", None)
    start = 8 + n
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        count = int(np.prod(entry["shape"], dtype=np.int64)) if entry["shape"] else 1
        want = count * dtype_size(entry["dtype"])
        if end - begin != want:
            raise SafetensorsError("%s: tensor %s: %s %s needs %d bytes, offsets give %d"
                                   % (path, name, entry["dtype"], entry["shape"], want, end - begin))
        if begin < 0 or start + end > size:
            raise SafetensorsError("%s: tensor %s: data [%d, %d) overruns the file (%d bytes of data)"
                                   % (path, name, begin, end, size - start))
    return header, start


class _Shard:
    """A shard's validated header; subclasses add get(name)."""

    def __init__(self, path):
        self.path = path
        self.header, self.start = read_header(path)

    def names(self):
        return list(self.header)

    def info(self, name):
        e = self.header[name]
        return e["dtype"], list(e["shape"])


class _BuiltinShard(_Shard):
    """The small reader: tensors read through a read-only numpy memmap."""

    def __init__(self, path):
        super().__init__(path)
        self._map = np.memmap(path, dtype=np.uint8, mode="r")

    def get(self, name):
        e = self.header[name]
        np_dtype, torch_dtype = _DTYPES[e["dtype"]]
        begin, end = e["data_offsets"]
        raw = np.array(self._map[self.start + begin:self.start + end])  # copy out of the map
        t = torch.from_numpy(raw.view(np_dtype).reshape(e["shape"]))
        if torch_dtype == torch.bfloat16:
            t = t.view(torch.bfloat16)
        return t


class _PackageShard(_Shard):
    """The `safetensors` package reader (the header is still validated by read_header)."""

    def __init__(self, path, safe_open):
        super().__init__(path)
        self._f = safe_open(path, framework="pt", device="cpu")

    def get(self, name):
        return self._f.get_tensor(name)


def open_shard(path, prefer_package=True):
    if prefer_package:
        try:
            from safetensors import safe_open
        except ImportError:
            safe_open = None
        if safe_open is not None:
            return _PackageShard(path, safe_open)
    return _BuiltinShard(path)


def reader_kind():
    """'safetensors <version>' when the package is used, else 'builtin'."""
    try:
        import safetensors
        return "safetensors " + getattr(safetensors, "__version__", "?")
    except ImportError:
        return "builtin"


def tensor_bytes(t):
    """Raw little-endian bytes of a CPU tensor (bfloat16 reinterpreted as int16)."""
    t = t.detach().contiguous().cpu()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return t.numpy().tobytes()


def write_shard(path, tensors, metadata=None):
    """Writes {name: torch tensor} to path in safetensors format (tensors in sorted name order).

    The header is padded with spaces to a multiple of 8 bytes, as the reference writer does."""
    names = sorted(tensors)
    header = {"__metadata__": dict(metadata or {"format": "pt"})}
    offset = 0
    blobs = []
    for name in names:
        t = tensors[name]
        blob = tensor_bytes(t)
        header[name] = {"dtype": _TORCH_TO_NAME[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((-len(text)) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)
    return offset
