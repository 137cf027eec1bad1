"""Pieces every generated candidate file shares: header, constants, dims, sizing helpers."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Any

import numpy as np

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


_SCHEDULE = re.compile(r"^(?:Schedule|Strategy): (.*?)\.?$")
_LEVERS = re.compile(r"^Levers applied: (.*?)\.?$")
_EVIDENCE = re.compile(r"^Class evidence: (.*)$")


def header(doc: str) -> str:
    """The file's module docstring, laid out for the person who reads the winner: what the
    kernel does (the author's first paragraph), its blocks and schedule one per line, the
    levers applied, why the task got this kernel class, and where to look in the file."""
    lines = doc.strip().splitlines()
    kept: list[str] = []
    schedule: list[str] = []
    levers = ""
    evidence: list[str] = []
    for line in lines:
        if m := _SCHEDULE.match(line):
            schedule += [p.strip() for p in m.group(1).split("; ") if p.strip()]
        elif m := _LEVERS.match(line):
            levers = m.group(1)
        elif m := _EVIDENCE.match(line):
            evidence.append(m.group(1))
        else:
            kept.append(line)
    while kept and not kept[-1].strip():
        kept.pop()
    text = "\n".join(kept)
    if schedule:
        text += "\n\nBlocks and schedule:\n" + "\n".join(f"- {p}" for p in schedule)
    if levers:
        text += f"\n\nLevers applied: {levers}."
    if evidence:
        text += "\n\nWhy this kernel class:\n" + "\n".join(f"- {e}" for e in evidence)
    text += ("\n\nReading this file: `build(...)` returns the kernel, its keyword arguments the "
             "knobs; `TUNABLES` lists the values the autotuner tries, the first the default.")
    return HEADER.format(doc=text.replace('"""', "'''"))


def dims_expr(dims: tuple[Any, ...]) -> str:
    """A shape of symbol names / ints as a Python tuple expression."""
    parts = [str(d) if isinstance(d, int) else f"({d})" for d in dims]
    return "(" + ", ".join(parts) + ("," if len(parts) == 1 else "") + ")"


def tunables_literal(tunables: dict[str, list[int]]) -> str:
    return "TUNABLES = {" + ", ".join(f"{k!r}: {list(v)!r}" for k, v in tunables.items()) + "}"


def tiled_bytes(shape: tuple[int, ...], itemsize: int) -> int:
    """Bytes of a VMEM block: the last axis padded to 128 lanes, the one before to the
    dtype's sublane tile (8 rows of 32 bits)."""
    dims = list(shape) or [1]
    dims[-1] = -(-dims[-1] // LANES) * LANES
    if len(dims) >= 2:
        rows = SUBLANES * max(1, 4 // max(itemsize, 1))
        dims[-2] = -(-dims[-2] // rows) * rows
    return math.prod(dims) * itemsize


def scoped_vmem(chip: dict[str, Any] | None) -> int:
    chip = chip or {}
    for key in ("scoped_vmem_limit_bytes", "vmem_limit_bytes"):
        if isinstance(chip.get(key), int | float) and chip[key] > 0:
            return int(chip[key])
    vmem = chip.get("vmem_bytes")
    if isinstance(vmem, int | float) and vmem > 0:
        return int(min(vmem // 4, DEFAULT_VMEM))
    return DEFAULT_VMEM


def sublane_tile(dtypes: Iterable[Any]) -> int:
    """Rows of one (rows, 128) VMEM tile for the narrowest of `dtypes`: 8 for 32-bit, 16 for
    16-bit (bf16 packs two rows per sublane), 32 for 8-bit; a block's second-to-last dim must
    be a multiple of it (or the whole dim)."""
    sizes = [np.dtype(d).itemsize for d in dtypes]
    return SUBLANES * max(1, 4 // max(1, min(sizes, default=4)))


LANE_KNOBS = frozenset({"block_n", "block_k"})
SUBLANE_KNOBS = frozenset({"block_rows", "block_m", "block_q", "block_kv", "block_seq"})
"""Knobs that size a block's last (lane) or second-to-last (sublane) axis; every other knob
counts whole units per step (images, groups, pages, sequences) and needs no alignment."""


def knob_floor(knob: str) -> int:
    """The least value of a block knob: one lane tile, one sublane tile, or one unit."""
    return LANES if knob in LANE_KNOBS else SUBLANES if knob in SUBLANE_KNOBS else 1


def aligned(value: int, floor: int) -> int:
    """`value` rounded down to a multiple of `floor`, at least `floor`."""
    return max(floor, int(value) // floor * floor)


def aligned_tunables(tunables: dict[str, list[int]], floors: dict[str, int]) -> dict[str, list[int]]:
    """Every value of every knob aligned to its floor (order kept, duplicates dropped)."""
    return {k: list(dict.fromkeys(aligned(v, floors[k]) if k in floors else v for v in vs))
            for k, vs in tunables.items()}


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


_OPTIONAL_IMPORTS = (("import functools\n", r"\bfunctools\."), ("import numpy as np\n", r"\bnp\."),
                     ("from jax import lax\n", r"\blax\."), ("import jax.numpy as jnp\n", r"\bjnp\."),
                     ("from jax.experimental.pallas import tpu as pltpu\n", r"\bpltpu\."))


def drop_unused_imports(source: str) -> str:
    """The header's imports that the file never uses removed, so a written kernel is lint-clean."""
    for line, use in _OPTIONAL_IMPORTS:
        if line in source and not re.search(use, source.replace(line, "", 1)):
            source = source.replace(line, "", 1)
    return source
