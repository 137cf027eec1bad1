"""Pieces every generated candidate file shares: header, constants, dims, sizing helpers."""

from __future__ import annotations

import math
from typing import Any

LANES = 128
SUBLANES = 8
DEFAULT_VMEM = 32 * 1024 * 1024
VMEM_SHARE = 0.5  # blocks (double-buffered) may use this share of the scoped VMEM

HEADER = '''"""{doc}"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

LANES = 128
SUBLANES = 8
'''


def header(doc: str) -> str:
    return HEADER.format(doc=doc.replace('"""', "'''"))


def dims_expr(dims: tuple[Any, ...]) -> str:
    """A shape of symbol names / ints as a Python tuple expression."""
    parts = [str(d) if isinstance(d, int) else f"({d})" for d in dims]
    return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"


def tunables_literal(tunables: dict[str, list[int]]) -> str:
    return "TUNABLES = {" + ", ".join(f"{k!r}: {list(v)!r}" for k, v in tunables.items()) + "}"


def scoped_vmem(chip: dict[str, Any] | None) -> int:
    chip = chip or {}
    for key in ("scoped_vmem_limit_bytes", "vmem_limit_bytes"):
        if isinstance(chip.get(key), int | float) and chip[key] > 0:
            return int(chip[key])
    vmem = chip.get("vmem_bytes")
    if isinstance(vmem, int | float) and vmem > 0:
        return int(min(vmem // 4, DEFAULT_VMEM))
    return DEFAULT_VMEM


def round_down(value: int, multiple: int) -> int:
    return max(multiple, value // multiple * multiple)


def pow2_floor(value: float) -> int:
    return 1 << max(0, math.floor(math.log2(max(value, 1))))


def dim_check_source(arg_names: list[str], arg_dims: list[tuple[Any, ...]]) -> str:
    """Lines that bind every dim symbol from the arguments and raise on a mismatch."""
    lines = ["    dims = {}"]
    for name, dims in zip(arg_names, arg_dims, strict=True):
        lines.append(f"    if {name}.ndim != {len(dims)}:")
        lines.append(f'        raise ValueError(f"{{{name}.shape=}} must have {len(dims)} axes")')
        for axis, d in enumerate(dims):
            if isinstance(d, str):
                lines.append(f"    if dims.setdefault({d!r}, {name}.shape[{axis}]) != {name}.shape[{axis}]:")
                lines.append(f'        raise ValueError(f"{{{name}.shape=}} disagrees with the other inputs")')
    return "\n".join(lines)
