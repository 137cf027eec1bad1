"""Mosaic types: element dtypes, their widths, and shaped-type text (`memref<8x128xf32>`).

Shared by every reader of a lowered program; no MLIR bindings needed.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from kernelgraph.errors import KernelgraphError

PREFIX = "stable_mosaic."
MAX_GRID_STEPS = 1 << 22


class MosaicError(KernelgraphError, ValueError):
    """The lowered text is not a program this module can read; the message says what."""


_DTYPES = {
    "f64": "float64", "f32": "float32", "bf16": "bfloat16", "f16": "float16",
    "f8E4M3FN": "float8_e4m3fn", "f8E5M2": "float8_e5m2", "f8E4M3B11FNUZ": "float8_e4m3b11fnuz",
    "i64": "int64", "i32": "int32", "i16": "int16", "i8": "int8", "i4": "int4", "i1": "bool",
    "ui32": "uint32", "ui16": "uint16", "ui8": "uint8", "ui4": "uint4", "index": "int64",
}
DTYPE_BITS = {
    "float64": 64, "float32": 32, "bfloat16": 16, "float16": 16, "float8_e4m3fn": 8,
    "float8_e5m2": 8, "float8_e4m3b11fnuz": 8, "int64": 64, "int32": 32, "int16": 16,
    "int8": 8, "int4": 4, "bool": 8, "uint32": 32, "uint16": 16, "uint8": 8, "uint4": 4,
}


def dtype_name(mlir_type: str) -> str:
    """`f32` -> `float32`; unknown element types keep their MLIR spelling."""
    return _DTYPES.get(mlir_type, mlir_type)


def dtype_bits(dtype: str) -> int:
    if dtype not in DTYPE_BITS:
        raise MosaicError(f"unknown element type {dtype!r}")
    return DTYPE_BITS[dtype]


def nbytes(shape: Sequence[int], dtype: str) -> int:
    return math.ceil(math.prod(shape) * dtype_bits(dtype) / 8)


VREG_BYTES = 8 * 128 * 4  # one vector register: (8 sublanes, 128 lanes) of 32 bits


XLU_BITS = (16, 32)  # the element widths the cross-lane unit's figures cover


def cross_lane_kind(held: Sequence[int], made: Sequence[int]) -> str:
    """What a relayout asks of the cross-lane unit, from the axes in physical order (major to
    minor) of its operand (``held``) and of its result, each named by the operand axis it
    comes from (``made``): "transpose" where the minor (lane) axis changes, "shuffle" where
    only the second minor (sublane) one does, "" where only leading axes move (a renaming)."""
    if not held or len(held) != len(made):
        return ""
    if held[-1] != made[-1]:
        return "transpose"
    if len(held) >= 2 and held[-2] != made[-2]:
        return "shuffle"
    return ""


def cross_lane_vregs(source: Sequence[int], result: Sequence[int], dtype: str) -> float:
    """Vregs a relayout moves: the larger of operand and result, tile-padded."""
    return max(tile_padded_bytes(source, dtype), tile_padded_bytes(result, dtype)) / VREG_BYTES


def tile_padded_bytes(shape: Sequence[int], dtype: str) -> int:
    """Bytes an array occupies in VMEM with the last two dims padded to Mosaic's
    (8 x packing, 128) tiles (a 1-D array as one row)."""
    bits = dtype_bits(dtype)
    dims = list(shape) or [1]
    if len(dims) == 1:
        dims = [1, *dims]
    packing = max(1, 32 // bits)
    dims[-1] = -(-dims[-1] // 128) * 128
    dims[-2] = -(-dims[-2] // (8 * packing)) * (8 * packing)
    return math.ceil(math.prod(dims) * bits / 8)


_SHAPED = re.compile(r"^(memref|vector|tensor)<(.*)>$", re.S)


def split_shaped(type_text: str) -> tuple[str, tuple[int, ...], str, str]:
    """`memref<8x128xf32, #tpu.memory_space<vmem>>` -> ("memref", (8, 128), "float32", "vmem")."""
    m = _SHAPED.match(type_text.strip())
    if not m:
        return ("scalar", (), dtype_name(type_text.strip()), "")
    kind, inner = m.groups()
    space = ""
    sm = re.search(r"#tpu\.memory_space<(\w+)>", inner)
    if sm:
        space = sm.group(1)
    head = inner.split(",")[0].strip()
    if head.startswith("!"):
        return (kind, (), head, space)
    parts = head.split("x")
    dims: list[int] = []
    for p in parts[:-1]:
        if not p.isdigit():
            raise MosaicError(f"dynamic or unreadable dimension in {type_text!r}")
        dims.append(int(p))
    return (kind, tuple(dims), dtype_name(parts[-1]), space)
