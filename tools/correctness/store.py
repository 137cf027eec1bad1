"""A frozen suite's arrays on disk, and its hash computed without holding it in memory.

A production-size suite is gigabytes: inputs, float64 oracles and slack for every case.
Each array larger than a small threshold is written as a ``.npy`` file as soon as its case
is built and replaced by a read-only memory map of that file (the suite's ``WireArray``
then holds a ``memoryview`` of the mapping instead of ``bytes``; everything that reads it,
``numpy()`` and the msgpack encoder, reads either). The file is unlinked at once: it lives
as long as its mapping and never outlives the process. Pages come from disk when read and
the kernel may drop them again, so the process holds about one case at a time.

The suite's sha256 is unchanged: :func:`stream_sha256` feeds the hash the very bytes that
``msgspec.msgpack.Encoder(order="sorted")`` would produce, piece by piece, reading mapped
arrays in chunks and telling the kernel after each chunk that its pages are not needed.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import struct
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from tools.sandbox.wire import WireArray, contiguous

SPILL_BYTES = 1 << 20  # arrays at least this large go to disk
_CHUNK = 16 << 20
_ENCODE = msgspec.msgpack.Encoder(order="sorted").encode
_PAGE = mmap.PAGESIZE


def suite_directory() -> Path:
    """Where suite arrays are written: $KERNELGRAPH_SUITE_DIR, else the user's cache (a
    disk, where /tmp may be memory), else the temporary directory."""
    chosen = os.environ.get("KERNELGRAPH_SUITE_DIR")
    if chosen:
        root = Path(chosen)
    else:
        cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        root = Path(cache) / "kernelgraph" / "suites"
    try:
        root.mkdir(parents=True, exist_ok=True)
        probe = tempfile.NamedTemporaryFile(dir=root)  # noqa: SIM115 - only a write probe
        probe.close()
        return root
    except OSError:
        return Path(tempfile.gettempdir())


def spill(array: np.ndarray, directory: Path, spill_bytes: int = SPILL_BYTES) -> WireArray:
    """``array`` as a WireArray: in memory when small, else memory-mapped from an unlinked
    ``.npy`` file in ``directory``."""
    host = contiguous(array)
    if host.nbytes < max(spill_bytes, 1):
        return WireArray.of(host)
    fd, name = tempfile.mkstemp(suffix=".npy", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            np.save(f, host, allow_pickle=False)
            size = f.tell()
        with open(name, "rb") as f:
            mapping = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ)
    finally:
        os.unlink(name)
    start = size - host.nbytes  # after the .npy header
    return WireArray(host.dtype.name, tuple(host.shape), memoryview(mapping)[start:])  # type: ignore[arg-type]


def release(array: WireArray) -> None:
    """Let the kernel drop the resident pages of a mapped array (they stay on disk)."""
    mapping = _mapping_of(array.data)
    if mapping is not None:
        mapping.madvise(mmap.MADV_DONTNEED)


def is_mapped(array: WireArray) -> bool:
    return _mapping_of(array.data) is not None


def _mapping_of(data: Any) -> mmap.mmap | None:
    return data.obj if isinstance(data, memoryview) and isinstance(data.obj, mmap.mmap) else None


def stream_sha256(obj: Any, skip: Callable[[Any, str], bool] = lambda owner, name: False) -> str:
    """sha256 of ``msgspec.msgpack.Encoder(order="sorted").encode(obj)``, without building
    that encoding: structs, sequences and bytes that hold arrays are walked, everything else
    is encoded by msgspec itself. ``skip(struct, field)`` leaves a field out."""
    digest = hashlib.sha256()
    _feed(digest, obj, skip)
    return digest.hexdigest()


def _feed(digest: Any, obj: Any, skip: Callable[[Any, str], bool]) -> None:
    if isinstance(obj, msgspec.Struct):
        names = sorted(n for n in obj.__struct_fields__ if not skip(obj, n))
        digest.update(_header(len(names), 0x80, 0xDE, 0xDF, small=16))
        for name in names:
            digest.update(_ENCODE(name))
            _feed(digest, getattr(obj, name), skip)
    elif isinstance(obj, tuple | list) and any(_holds_data(x) for x in obj):
        digest.update(_header(len(obj), 0x90, 0xDC, 0xDD, small=16))
        for item in obj:
            _feed(digest, item, skip)
    elif isinstance(obj, bytes | bytearray | memoryview):
        view = memoryview(obj).cast("B")
        digest.update(_header(len(view), None, 0xC5, 0xC6, small=0, bin8=True))
        _feed_bytes(digest, view)
    else:
        digest.update(_ENCODE(obj))


def _holds_data(x: Any) -> bool:
    return isinstance(x, msgspec.Struct | bytes | bytearray | memoryview | tuple | list)


def _header(n: int, fix: int | None, c16: int, c32: int, *, small: int,
            bin8: bool = False) -> bytes:
    if fix is not None and n < small:
        return bytes([fix | n])
    if bin8 and n < 256:
        return bytes([0xC4, n])
    if n < 1 << 16:
        return bytes([c16]) + struct.pack(">H", n)
    return bytes([c32]) + struct.pack(">I", n)


def _feed_bytes(digest: Any, view: memoryview) -> None:
    mapping = _mapping_of(view.obj) if isinstance(view.obj, memoryview) else (
        view.obj if isinstance(view.obj, mmap.mmap) else None)
    if mapping is None:
        digest.update(view)
        return
    base = len(mapping) - len(view)  # a mapped array is the tail of its file
    for start in range(0, len(view), _CHUNK):
        digest.update(view[start:start + _CHUNK])
        low = (base + start) // _PAGE * _PAGE
        high = min(base + start + _CHUNK, len(mapping))
        mapping.madvise(mmap.MADV_DONTNEED, low, high - low)
