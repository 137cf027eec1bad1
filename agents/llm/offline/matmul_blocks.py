"""Choosing a GEMM's blocks from the chip's figures, as a kernel engineer sizes tiles.

A (bm, bn, bk) schedule of the matmul class runs its grid (i, j, k) on a double-buffered
pipeline: before step 0 the first a and b blocks arrive (the prologue), during each step
the next step's blocks arrive and the previous tile's output leaves, and after the last
step the last output tile is written (the epilogue). A step takes the longer of its MXU
work (padded to the MXU, at the peak of its operand dtype) plus the chip's fixed per-step
cost, and its transfers at HBM bandwidth. So small tiles lose to re-fetched operands
(each a block is read N/bn times, each b block M/bm times) and to the per-step cost; large
ones to the prologue and epilogue, which nothing overlaps, and to VMEM.

`pipeline_seconds` prices one schedule by those rules (a planning figure, never a
measurement); `best_blocks` takes the cheapest tile that fits VMEM, under the scoped
default where that costs at most `RAISE_GAIN` more than the best under a raised limit.
Tiles are capped at `MAX_TILE_ELEMENTS` output elements: beyond that the compiler's time
and the body's f32 temporaries (the product, the epilogue's values) grow faster than the
tile pays back.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from agents.llm.offline.classify import TaskFacts
from agents.llm.offline.common import LANES, SUBLANES, scoped_vmem
from agents.llm.offline.levers import raised_vmem_limit

TILE_SIDES = (256, 512, 1024, 2048)
K_SIDES = (256, 512, 1024, 2048, 4096)
MAX_TILE_ELEMENTS = 2048 * 1024
RAISE_GAIN = 0.02  # a raised VMEM limit only where it makes the kernel this much faster


def _ceil_to(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def _figure(chip: dict[str, Any], key: str, default: float) -> float:
    value = chip.get(key)
    return float(value) if isinstance(value, int | float) and value > 0 else default


def footprint(facts: TaskFacts, bm: int, bn: int, bk: int, buffers: int = 2) -> int:
    """VMEM of a schedule: pipelined a and b blocks, the output tile twice, the f32
    accumulator, the product and (with an epilogue) one f32 temporary of the tile, and the
    epilogue operands' blocks twice."""
    d = facts.detail
    isz_a = np.dtype(facts.args[d["a"]].dtype).itemsize
    isz_b = np.dtype(facts.args[d["b"]].dtype).itemsize
    osz = np.dtype(facts.outs[0][1]).itemsize
    tile = bm * bn
    temporaries = 4 * tile * (2 if _epilogue_ops(facts) else 1)
    total = buffers * bk * (bm * isz_a + bn * isz_b) + 2 * osz * tile + 4 * tile + temporaries
    return total + 2 * sum(_epilogue_block(facts, i, bm, bn) for i in d["epilogue_args"])


def _epilogue_ops(facts: TaskFacts) -> int:
    skip = ("broadcast_in_dim", "dim_as_value", "convert_element_type", "reshape")
    return sum(1 for o in facts.detail.get("epilogue_ops", []) if o not in skip)


def _epilogue_block(facts: TaskFacts, index: int, bm: int, bn: int) -> int:
    arg = facts.args[index]
    d = facts.detail
    rows = bm if d["m"] in arg.dims else 1
    cols = bn if d["n"] in arg.dims else 1
    return rows * cols * np.dtype(arg.dtype).itemsize


def pipeline_seconds(facts: TaskFacts, bm: int, bn: int, bk: int, chip: dict[str, Any] | None,
                     *, bf16_operands: bool = False) -> float:
    """One schedule's time by the pipeline rules of the module docstring (grid (i, j, k),
    K innermost). `bf16_operands`: the MXU takes bf16 whatever the inputs are."""
    chip = chip or {}
    d = facts.detail
    m, k, n = (facts.dim_values[d[s]] for s in ("m", "k", "n"))
    bm, bn, bk = min(bm, m), min(bn, n), min(bk, k)
    ni, nj, nk = -(-m // bm), -(-n // bn), max(1, k // bk)
    bw = _figure(chip, "hbm_bytes_per_s", 1.64e12)
    bf16 = bf16_operands or all(str(facts.args[d[s]].dtype) == "bfloat16" for s in ("a", "b"))
    peak = _figure(chip, "peak_bf16_flops" if bf16 else "peak_f32_flops", 9.2e14 if bf16 else 3.07e14)
    mxu = int(_figure(chip, "mxu_dim", 256))
    step = _figure(chip, "per_step_overhead_s", 0.33e-6)
    vpu = _figure(chip, "vpu_ops_per_s", 7.0e12)
    isz_a = np.dtype(facts.args[d["a"]].dtype).itemsize
    isz_b = np.dtype(facts.args[d["b"]].dtype).itemsize
    osz = np.dtype(facts.outs[0][1]).itemsize
    a_bytes, b_bytes, out_bytes = bm * bk * isz_a, bk * bn * isz_b, bm * bn * osz
    epi_bytes = sum(_epilogue_block(facts, i, bm, bn) for i in d["epilogue_args"])
    mxu_s = 2 * _ceil_to(bm, SUBLANES) * _ceil_to(bn, mxu) * _ceil_to(bk, mxu) / peak
    last_s = max(mxu_s, _epilogue_ops(facts) * bm * bn / vpu)  # the epilogue at the last K step

    steps = ni * nj * nk
    i, j, kk = np.unravel_index(np.arange(steps), (ni, nj, nk))
    first = np.ones(steps, bool)
    a_moves = first.copy()
    a_moves[1:] = (i[1:] != i[:-1]) | (kk[1:] != kk[:-1])
    b_moves = first.copy()
    b_moves[1:] = (j[1:] != j[:-1]) | (kk[1:] != kk[:-1])
    tile_starts = kk == 0
    fetched = a_moves * a_bytes + b_moves * b_bytes + tile_starts * epi_bytes
    written = (kk == nk - 1) * out_bytes  # after the tile's last step
    overlapped = np.zeros(steps)
    overlapped[:-1] += fetched[1:]
    overlapped[1:] += written[:-1]
    busy = np.where(kk == nk - 1, last_s, mxu_s) + step
    launch = 1.0e-6
    return float(launch + fetched[0] / bw + np.maximum(busy, overlapped / bw).sum() + out_bytes / bw)


def _sides(extent: int, floor: int, sides: tuple[int, ...]) -> list[int]:
    whole = _ceil_to(extent, floor)
    return sorted({s for s in sides if s < whole} | {min(whole, max(sides))})


def best_blocks(facts: TaskFacts, chip: dict[str, Any] | None, row_floor: int = SUBLANES,
                fit_k: Any = None) -> tuple[dict[str, int], int | None]:
    """The cheapest (block_m, block_n, block_k) by `pipeline_seconds` that fits VMEM, and
    the raised VMEM limit it needs (None: the scoped default holds it)."""
    d = facts.detail
    m, k, n = (facts.dim_values[d[s]] for s in ("m", "k", "n"))
    scoped = scoped_vmem(chip) * 3 // 4
    raised = raised_vmem_limit(chip) * 3 // 4
    ks = sorted({fit_k(s, k) if fit_k else min(s, k) for s in K_SIDES})
    best: dict[bool, tuple[float, tuple[int, int, int]]] = {}
    for bm, bn, bk in itertools.product(_sides(m, row_floor, TILE_SIDES), _sides(n, LANES, TILE_SIDES), ks):
        if min(bm, m) * min(bn, n) > MAX_TILE_ELEMENTS:
            continue
        need = footprint(facts, min(bm, m), min(bn, n), bk)
        if need > raised:
            continue
        seconds = pipeline_seconds(facts, bm, bn, bk, chip)
        for under_scoped in {need <= scoped, False}:
            if under_scoped not in best or seconds < best[under_scoped][0]:
                best[under_scoped] = (seconds, (bm, bn, bk))
    if not best:  # nothing fits even raised: the smallest tile, and the caller's checks
        return {"block_m": row_floor * 32, "block_n": LANES * 2, "block_k": ks[0]}, None
    use_raised = True not in best or best[True][0] > (1 + RAISE_GAIN) * best[False][0]
    _, (bm, bn, bk) = best[False] if use_raised else best[True]
    need = footprint(facts, min(bm, m), min(bn, n), bk)
    return {"block_m": bm, "block_n": bn, "block_k": bk}, (raised_vmem_limit(chip) if need > scoped else None)
