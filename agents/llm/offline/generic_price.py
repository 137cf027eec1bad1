"""Pricing a summed generic schedule, so its blocks (and whether to sum at all) are chosen
the way a kernel engineer sizes a GEMM's tiles.

A summed tiling (`generic_summed`) is a matmul in disguise: its tiled axes are the rows, the
summed axis the contraction, and the dots' float32 sums the tile. Its grid runs the summed
axis innermost on a double-buffered pipeline, so the same rules as `matmul_blocks` price it:
before step 0 the first blocks arrive (the prologue), during each step the next step's
blocks arrive and the last finished output block leaves, and after the last step the last
output block is written (the epilogue); a step takes the longer of its MXU work (every dot
of `_partial`, the ones that make the summed axis's values as well as the ones that
contract it, padded to the MXU, at the operands' peak; `_finish`'s dots at the last step)
plus the chip's fixed per-step cost, and its transfers at HBM bandwidth. A block whose
index does not change between two steps is not fetched again.

That is why the summed axis pays even where every weight fits VMEM: one summed block of the
whole axis fetches all weights before any work starts, while smaller blocks hide all but the
first behind the MXU. `best_blocks` weighs that against the per-step cost and the weights
fetched again for every block of rows. A planning figure, never a measurement.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from agents.llm.offline.classify import TaskFacts
from agents.llm.offline.common import SUBLANES, tiled_bytes
from agents.llm.offline.matmul_blocks import _figure

SUMMED_SIDES = (256, 512, 1024, 2048, 4096)  # multiples of the MXU's depth
ROW_SIDES = (8, 16, 32, 64, 128, 256, 512, 1024, 2048)
GAIN = 0.02  # summing must be this much faster than fetching every weight at once


def _ceil_to(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def _finish_ops(body: str) -> int:
    """Statements of `_finish`: each one vector op over the summed tile, near enough."""
    _, _, finish = body.partition("def _finish(")
    return sum(1 for line in finish.splitlines()[1:] if " = " in line)


def schedule_seconds(facts: TaskFacts, blocks: Sequence[int], chip: dict[str, Any] | None) -> float:
    """One summed schedule's time by the rules of the module docstring."""
    from agents.llm.offline import generic

    chip = chip or {}
    t = facts.detail
    sizes = generic.sizes(facts)
    blocks = [min(b, s) for b, s in zip(blocks, sizes, strict=True)]
    counts = [-(-s // b) for s, b in zip(sizes, blocks, strict=True)]
    steps = math.prod(counts)
    index = np.stack(np.unravel_index(np.arange(steps), counts), axis=1)  # summed axis fastest
    bw = _figure(chip, "hbm_bytes_per_s", 1.64e12)
    mxu = int(_figure(chip, "mxu_dim", 256))
    step_s = _figure(chip, "per_step_overhead_s", 0.33e-6)
    vpu = _figure(chip, "vpu_ops_per_s", 7.0e12)
    summed_dtypes = {str(a.dtype) for a, axes in zip(facts.args, t["in_axes"], strict=True)
                     if len(sizes) - 1 in axes}
    bf16 = summed_dtypes == {"bfloat16"}
    peak = _figure(chip, "peak_bf16_flops" if bf16 else "peak_f32_flops",
                   9.2e14 if bf16 else 3.07e14)

    def moves(axes: Sequence[int | None]) -> np.ndarray:
        tiled = [g for g in axes if g is not None]
        changed = np.ones(steps, bool)
        if tiled:
            changed[1:] = (index[1:, tiled] != index[:-1, tiled]).any(axis=1)
        else:
            changed[1:] = False
        return changed

    fetched = np.zeros(steps)
    for (shape, itemsize, axes) in generic._arrays(facts)[:len(facts.args)]:
        block = generic._block_shape(tuple(shape), tuple(axes), blocks)
        fetched += moves(axes) * tiled_bytes(block, itemsize)
    written = np.zeros(steps)
    last = np.zeros(steps, bool)
    last[:-1] = moves([g for g in range(len(sizes) - 1)])[1:]
    last[-1] = True
    for (shape, itemsize, axes) in generic._arrays(facts)[len(facts.args):]:
        block = generic._block_shape(tuple(shape), tuple(axes), blocks)
        written += last * tiled_bytes(block, itemsize)

    def resolved(dims: Sequence[Any]) -> list[int]:
        return [int(blocks[t["symbols"].index(d)] if d in t["symbols"]
                    else (facts.dim_values.get(d, d) if isinstance(d, str) else d))
                for d in dims] or [1]

    at_blocks = {**facts.dim_values, **dict(zip(t["symbols"], blocks, strict=True))}

    def evaluated(dims: Sequence[Any]) -> list[int]:  # a dot's dims: sizes or expressions
        scope = {"max": max, "min": min, "__builtins__": {}}
        return [d if isinstance(d, int) else int(eval(d, scope, dict(at_blocks)))  # names and ints only
                for d in dims] or [1]

    def dot_s(out: Sequence[int], contracted: int) -> float:
        rows = math.prod(out[:-1])
        return 2 * _ceil_to(rows, SUBLANES) * _ceil_to(out[-1], mxu) * _ceil_to(contracted, mxu) / peak

    tile = 0
    for dims, _ in t.get("partials", ()):
        shape = resolved(dims)
        tile += math.prod(shape)
    if t.get("dots"):  # every dot of the body: the ones before the sums are MXU work too
        mxu_s = sum(dot_s(evaluated(o), math.prod(evaluated(c))) for o, c, every in t["dots"] if every)
        finish_mxu_s = sum(dot_s(evaluated(o), math.prod(evaluated(c)))
                           for o, c, every in t["dots"] if not every)
    else:
        mxu_s = sum(dot_s(resolved(d), blocks[-1]) for d, _ in t.get("partials", ()))
        finish_mxu_s = 0.0
    finish_s = _finish_ops(t.get("body", "")) * tile / vpu + finish_mxu_s
    busy = np.full(steps, mxu_s) + last * finish_s + step_s
    overlapped = np.zeros(steps)
    overlapped[:-1] += fetched[1:]
    overlapped[1:] += written[:-1]
    return float(1.0e-6 + fetched[0] / bw + np.maximum(busy, overlapped / bw).sum() + written[-1] / bw)


def _choices(size: int, align: int, sides: Sequence[int], summed: bool) -> list[int]:
    """Blocks worth pricing along one axis: aligned sides below it, and the whole axis."""
    out = {size}
    for side in sides:
        if side < size and side % align == 0 and (not summed or size % side == 0):
            out.add(side)
    return sorted(out)


def best_blocks(facts: TaskFacts, chip: dict[str, Any] | None, budget: int
                ) -> tuple[list[int], float, float] | None:
    """(the cheapest blocks that fit `budget` bytes of VMEM, their time, the cheapest time
    with the whole summed axis in one block) for a summed tiling; None when no block fits."""
    from agents.llm.offline import generic

    sizes, align, units = generic.sizes(facts), generic.aligns(facts), generic.units(facts)
    axes = [[1] if unit else _choices(size, a, SUMMED_SIDES if g == len(sizes) - 1 else ROW_SIDES,
                                      g == len(sizes) - 1)
            for g, (size, a, unit) in enumerate(zip(sizes, align, units, strict=True))]
    best: tuple[float, list[int]] | None = None
    whole = math.inf
    for blocks in itertools.product(*axes):
        if generic.block_vmem(facts, list(blocks)) > budget:
            continue
        seconds = schedule_seconds(facts, blocks, chip)
        if blocks[-1] >= sizes[-1]:
            whole = min(whole, seconds)
        if best is None or seconds < best[0]:
            best = (seconds, list(blocks))
    if best is None:
        return None
    return best[1], best[0], whole


def sums_faster(found: tuple[list[int], float, float] | None) -> bool:
    """Is the best summed schedule worth its grid axis over fetching every weight at once?"""
    return found is not None and found[1] * (1 + GAIN) < found[2]


__all__ = ["GAIN", "best_blocks", "schedule_seconds", "sums_faster"]
