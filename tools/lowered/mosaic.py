"""Read a lowered program's Mosaic kernels from its StableHLO text, without the candidate's code.

The child process lowers the candidate for TPU and returns the StableHLO text; everything
the verdict and the cost model need is read in the parent, from that text alone: each
`stablehlo.custom_call @tpu_custom_call` carries JSON in `backend_config` whose
`custom_call_config.body` is base64 Mosaic MLIR bytecode. This module is the reader's
public face; the work is split by stage: :mod:`tools.lowered.types` (dtypes and shaped
types), :mod:`tools.lowered.scalar` (index maps and conditions evaluated with numpy),
:mod:`tools.lowered.kernel` (the kernel record), :mod:`tools.lowered.parse` (StableHLO and
Mosaic modules to records, with :mod:`tools.lowered.ops` for single ops) and
:mod:`tools.lowered.body` (body ops and their costs).
"""

from __future__ import annotations

from tools.lowered.kernel import (
    BodyOp,
    Branch,
    Loop,
    LoweredProgram,
    MosaicKernel,
    Scratch,
    VectorValue,
    Window,
    kernel_prefetch,
    prefetch_value,
)
from tools.lowered.parse import parse_lowered
from tools.lowered.scalar import IndexMap
from tools.lowered.types import MAX_GRID_STEPS, MosaicError, dtype_bits, nbytes

__all__ = [
    "MAX_GRID_STEPS",
    "BodyOp",
    "Branch",
    "IndexMap",
    "Loop",
    "LoweredProgram",
    "MosaicError",
    "MosaicKernel",
    "Scratch",
    "VectorValue",
    "Window",
    "dtype_bits",
    "kernel_prefetch",
    "nbytes",
    "parse_lowered",
    "prefetch_value",
]
