"""The convolution's window geometry, shared by the author's sizing and the kernel file (its
`geometry` is written into every conv candidate as `_geometry`): taps per matmul, and the
phase-split, flattened slab every tap reads as one contiguous row range."""

from __future__ import annotations

import itertools
import math

MXU_DEPTH = 256
"""The MXU's contraction depth on v6e and v7 (128 on v5e, where a deeper pack costs nothing)."""


def packed_taps(group_in: int, taps: int, depth: int = MXU_DEPTH) -> int:
    """Taps per matmul: as many as keep the packed contraction (taps x channels) within one
    MXU depth, at least one."""
    return max(1, min(taps, depth // max(1, group_in)))


def taps_choices(group_in: int, taps: int, depth: int = MXU_DEPTH) -> list[int]:
    """The tuner's `taps_per_dot` values, the default first: one MXU depth, one tap per
    matmul, and the whole window in one matmul."""
    return list(dict.fromkeys([packed_taps(group_in, taps, depth), 1, taps]))


def geometry(space: tuple[int, ...], kernel: tuple[int, ...], strides: tuple[int, ...],
             padding: tuple[tuple[int, int], ...], dilation: tuple[int, ...], sublanes: int
             ) -> tuple[list[int], list[int], tuple[tuple[int, int], ...], int, int]:
    """(output sizes, phase sizes, (phase, row offset) per tap, output rows, slab rows) of one
    image: the phase-split, flattened layout every tap reads as one contiguous row range. The
    first phase axis gets the extra rows the last tap's window reaches past the image, so one
    pad makes the whole slab."""
    nd = len(space)
    padded = [space[i] + padding[i][0] + padding[i][1] for i in range(nd)]
    outs = [max(0, (padded[i] - dilation[i] * (kernel[i] - 1) - 1) // strides[i] + 1)
            for i in range(nd)]
    phase_dims = [max(1, -(-padded[i] // strides[i])) for i in range(nd)]
    phase_dims[-1] = -(-phase_dims[-1] // sublanes) * sublanes
    flat = [math.prod(phase_dims[i + 1:]) for i in range(nd)]
    taps = []
    for k in itertools.product(*(range(n) for n in kernel)):
        where = [k[i] * dilation[i] for i in range(nd)]
        phase = 0
        for i in range(nd):
            phase = phase * strides[i] + where[i] % strides[i]
        taps.append((phase, sum(where[i] // strides[i] * flat[i] for i in range(nd))))
    rows = outs[0] * flat[0]
    reach = -(-(rows + max(offset for _, offset in taps)) // flat[0])
    phase_dims[0] = max(phase_dims[0], -(-reach // sublanes) * sublanes if nd == 1 else reach)
    return outs, phase_dims, tuple(taps), rows, math.prod(phase_dims)
