"""The least time the model grants any kernel for a task's work: the floor its ceilings divide.

Simulated, and generous to kernels: no per-step cost, no pipeline fill, no exposed transfer.
Only the MXU's padding, which no layout avoids, is counted (assumption 4 of
:mod:`tools.performance.roofline`)."""

from __future__ import annotations

from collections.abc import Sequence

from tools.performance.baseline import DotShape
from tools.performance.chips import Chip
from tools.performance.roofline import padded_matmul_flops


def least_mxu_flops(dots: Sequence[DotShape], mxu: int) -> float:
    """The dots' MXU work as the model pads it (assumption 4), each laid out with its free axes
    on the sublanes or on the lanes, whichever pads less: no kernel's layout does better, and
    a contraction shorter than the MXU (attention's head_dim 64 on a 256-wide MXU) pads in
    every layout."""
    return float(sum(min(padded_matmul_flops(d.batch, d.m, d.n, d.k, mxu),
                         padded_matmul_flops(d.batch, d.n, d.m, d.k, mxu)) for d in dots))


def model_floor_s(flops: float, hbm_bytes: float, chip: Chip, dots: Sequence[DotShape] = (),
                  peak: float | None = None) -> float:
    """The least time the model grants any kernel for this work: `flops`, or the reference's
    `dots` padded as no layout avoids, whichever is more, at `peak` (the bf16 MXU peak by
    default), or the bytes at full bandwidth; no per-step cost, no exposed transfer.

    A task whose own count is below its reference's dots (a causal attention counts the
    half below the diagonal, which a kernel that skips blocks computes) needs that share of
    the padded dots only."""
    dot_flops = float(sum(2 * d.batch * d.m * d.n * d.k for d in dots))
    needed = min(1.0, flops / dot_flops) if dot_flops else 0.0
    work = max(flops, least_mxu_flops(dots, chip.mxu_dim) * needed)
    return max(work / (peak or chip.peak_bf16_flops), hbm_bytes / chip.hbm_bytes_per_s)


__all__ = ["least_mxu_flops", "model_floor_s"]
