"""Firing audit: the work must happen inside Pallas kernels, read from the lowered text.

Runs in the parent on the StableHLO text the child lowered for TPU (parsed by
:func:`tools.lowered.mosaic.parse_lowered`). It requires at least one ``tpu_custom_call`` (a
``pallas_call``), and outside the kernels only layout operations (reshape, broadcast,
transpose, slice, pad, convert, concatenate, constants). A program whose math runs in XLA
around a copy kernel fails with the ops named.

From the kernels' grid, block shapes and index maps it also checks two things the
interpreter can only catch by chance: every output block is written by some grid step,
and no output block is revisited along a grid axis declared ``parallel`` (an accumulation
over a parallel axis races once the axis is split between cores).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from typing import Any

import msgspec
import numpy as np

from tools.lowered.mosaic import LoweredProgram, MosaicError, MosaicKernel, Window, parse_lowered

LAYOUT_OPS = frozenset({
    "stablehlo.reshape", "stablehlo.broadcast_in_dim", "stablehlo.broadcast",
    "stablehlo.transpose", "stablehlo.slice", "stablehlo.pad", "stablehlo.convert",
    "stablehlo.concatenate", "stablehlo.constant", "stablehlo.reverse",
})
_LAYOUT_WORDS = "reshape, broadcast, transpose, slice, pad, convert, concatenate, reverse"
# Non-splat constants larger than this are data baked into the program (a lookup table of
# answers); a kernel's own constants are scalars or splats.
MAX_EMBEDDED_CONSTANT_BYTES = 64 * 1024
_CONSTANT = re.compile(r"stablehlo\.constant dense<(.)(?:.*?)>\s*:\s*tensor<([^>]*)>")
_BITS = {"f64": 64, "f32": 32, "bf16": 16, "f16": 16, "i64": 64, "i32": 32, "i16": 16,
         "i8": 8, "i1": 8, "ui32": 32, "ui16": 16, "ui8": 8}


class AuditReport(msgspec.Struct, frozen=True):
    ok: bool
    kernels: int
    outside_ops: dict[str, int]
    disallowed_ops: dict[str, int]
    outside_custom_calls: tuple[str, ...]
    problems: tuple[str, ...]
    kernel_summaries: tuple[dict[str, Any], ...] = ()


def audit_text(stablehlo_text: str, *, allowed: frozenset[str] = LAYOUT_OPS,
               program: LoweredProgram | None = None) -> AuditReport:
    """Audit the lowered text (``program``: its parse, when the caller already has it)."""
    try:
        program = program if program is not None else parse_lowered(stablehlo_text)
    except MosaicError as exc:
        return AuditReport(ok=False, kernels=0, outside_ops={}, disallowed_ops={},
                           outside_custom_calls=(),
                           problems=(f"the lowered program could not be read: {exc}",))
    report = audit_program(program, allowed=allowed)
    embedded = embedded_constant_bytes(stablehlo_text)
    if embedded > MAX_EMBEDDED_CONSTANT_BYTES:
        problem = (f"the program embeds {embedded} bytes of non-uniform constants: data baked "
                   "in at trace time (precomputed or memoised results?), not computed from "
                   "the inputs")
        return msgspec.structs.replace(report, ok=False, problems=(*report.problems, problem))
    return report


def embedded_constant_bytes(stablehlo_text: str) -> int:
    """Bytes of non-splat ``stablehlo.constant`` data (a splat like dense<0.0> is free)."""
    total = 0
    for line in stablehlo_text.splitlines():
        if "stablehlo.constant" not in line:
            continue
        m = _CONSTANT.search(line)
        if not m or m.group(1) not in "[\"":
            continue
        dims = m.group(2).split("x")
        bits = _BITS.get(dims[-1], 32)
        count = math.prod(int(d) for d in dims[:-1] if d.isdigit()) if len(dims) > 1 else 1
        total += count * bits // 8
    return total


def audit_program(program: LoweredProgram, *, allowed: frozenset[str] = LAYOUT_OPS
                  ) -> AuditReport:
    problems: list[str] = []
    outside = Counter(program.outside_ops)
    disallowed = {op: n for op, n in sorted(outside.items()) if op not in allowed}
    custom = tuple(program.outside_custom_calls)
    if not program.kernels:
        problems.append("no Pallas kernel: the lowered program contains no tpu_custom_call "
                        "(pallas_call); the work runs in plain XLA")
    if custom:
        problems.append("custom calls outside the kernel: " + ", ".join(
            f"@{c}" for c in sorted(set(custom))) + " (host callbacks or library calls do "
            "work outside Pallas)")
    math_ops = {op: n for op, n in disallowed.items() if op != "stablehlo.custom_call"}
    if math_ops and program.kernels:
        listed = ", ".join(f"{op} x{n}" if n > 1 else op for op, n in math_ops.items())
        problems.append(f"math runs in XLA outside the Pallas kernel: {listed}; only layout "
                        f"ops ({_LAYOUT_WORDS}) are allowed around a kernel")
    elif math_ops:
        problems.append("ops in XLA: " + ", ".join(sorted(math_ops)))
    for kernel in program.kernels:
        problems.extend(_grid_problems(kernel))
    return AuditReport(
        ok=not problems,
        kernels=len(program.kernels),
        outside_ops=dict(sorted(outside.items())),
        disallowed_ops=disallowed,
        outside_custom_calls=custom,
        problems=tuple(problems),
        kernel_summaries=tuple(k.summary() for k in program.kernels),
    )


def _grid_problems(kernel: MosaicKernel) -> list[str]:
    if not kernel.grid or kernel.grid_steps <= 0:
        return []
    try:
        steps = kernel.steps()
    except MosaicError:
        return []
    problems = []
    outputs = [w for w in kernel.windows if w.role == "output"]
    for number, window in enumerate(outputs):
        blocks = _block_indices(window, steps)
        if blocks is None:
            continue
        problems.extend(_coverage(kernel, number, window, blocks))
        problems.extend(_parallel_revisits(kernel, number, blocks))
    return problems


def _block_indices(window: Window, steps: np.ndarray) -> np.ndarray | None:
    """(n_block_dims, n_steps) block indices, or None when not knowable before running."""
    if window.index_map is None or window.block_shape is None:
        return None
    try:
        values = window.index_map.over(steps)
    except MosaicError:
        return None
    if any(v is None for v in values) or len(values) != len(window.block_shape):
        return None
    return np.stack([np.asarray(v, dtype=np.int64) for v in values]) if values else None


def _coverage(kernel: MosaicKernel, number: int, window: Window, blocks: np.ndarray
              ) -> list[str]:
    assert window.block_shape is not None
    counts = [math.ceil(a / b) if b else 1
              for a, b in zip(window.array_shape, window.block_shape, strict=False)]
    if len(counts) != blocks.shape[0]:
        return []
    in_range = all(((blocks[d] >= 0) & (blocks[d] < counts[d])).all() for d in range(len(counts)))
    if not in_range:
        return []  # element-offset index maps or padding: not a plain blocked layout
    visited = len({tuple(col) for col in blocks.T.tolist()})
    needed = math.prod(counts)
    if visited >= needed:
        return []
    return [f"kernel {kernel.name}: its grid {tuple(kernel.grid)} writes {visited} of the "
            f"{needed} blocks of output {number} (block {tuple(window.block_shape)}, output "
            f"{tuple(window.array_shape)}): the grid does not cover the output"]


def _parallel_revisits(kernel: MosaicKernel, number: int, blocks: np.ndarray) -> list[str]:
    problems = []
    grid = tuple(kernel.grid)
    keys = _encode(blocks).reshape(grid)
    for axis, semantics in enumerate(kernel.dimension_semantics):
        if "parallel" not in str(semantics) or grid[axis] <= 1:
            continue
        along = np.sort(np.moveaxis(keys, axis, -1), axis=-1)
        if np.any(along[..., 1:] == along[..., :-1]):
            problems.append(
                f"kernel {kernel.name}: output {number} is revisited along grid axis {axis}, "
                f"which is declared parallel: accumulation over a parallel axis (steps of a "
                f"parallel axis may run in any order or on another core; declare it "
                f"'arbitrary')")
    return problems


def _encode(blocks: np.ndarray) -> np.ndarray:
    """One int64 per step identifying its block tuple (mixed radix)."""
    key = np.zeros(blocks.shape[1], dtype=np.int64)
    for row in blocks:
        shifted = row - row.min()
        key = key * (int(shifted.max()) + 1) + shifted
    return key
