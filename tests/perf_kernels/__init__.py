"""Small Pallas TPU kernels the compile-check, Mosaic and cost-model tests lower."""

from __future__ import annotations

from typing import Any


def lower(fn: Any, *args: Any, chip: str = "v6e") -> str:
    """StableHLO text of `fn(*args)` lowered for TPU, as the sandbox child produces it."""
    import jax

    from tools.lowered.compile_check import lower_for_tpu

    return lower_for_tpu(jax.jit(fn).trace(*args), chip=chip)
