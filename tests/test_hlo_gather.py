"""A gather in XLA:TPU's program has a rule: it moves rows (free, as a dynamic slice is),
the array it gathers from is read for the rows it returns, and XLA:TPU's index bookkeeping
before it is one VPU op per index; an array something else reads too is read whole."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from tools.lowered import tpu_compiler
from tools.performance.chips import get_chip
from tools.performance.simbaseline import simulated_baseline
from tools.performance.xla_tpu import price_program

FUSED = """HloModule m

%fused_gather (param_0: f32[1024,256], param_1: s32[8,1]) -> f32[8,256] {
  %param_0 = f32[1024,256]{1,0:T(8,128)} parameter(0)
  %param_1 = s32[8,1]{1,0:T(8,128)} parameter(1)
  %custom-call.1 = s32[8,1]{1,0:T(8,128)} custom-call(%param_1), custom_call_target="AssumeGatherIndicesInBound"
  ROOT %gather.1 = f32[8,256]{1,0:T(8,128)} gather(%param_0, %custom-call.1), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,256}
}

ENTRY %main (p: f32[1024,256], i: s32[8,1]) -> f32[8,256] {
  %p = f32[1024,256]{1,0:T(8,128)} parameter(0)
  %i = s32[8,1]{1,0:T(8,128)} parameter(1)
  ROOT %g = f32[8,256]{1,0:T(8,128)} fusion(%p, %i), kind=kCustom, calls=%fused_gather
}
"""
# the same fusion also adds up the whole array: it is read whole
READ_WHOLE = FUSED.replace(
    "  ROOT %gather.1 = f32[8,256]",
    "  %total = f32[] reduce(%param_0, %zero), dimensions={0,1}, to_apply=%add\n"
    "  %gather.1 = f32[8,256]").replace(
    "slice_sizes={1,256}\n}", "slice_sizes={1,256}\n"
    "  ROOT %out = f32[8,256]{1,0:T(8,128)} add(%gather.1, %gather.1)\n}").replace(
    "  %param_1 = s32[8,1]{1,0:T(8,128)} parameter(1)\n",
    "  %param_1 = s32[8,1]{1,0:T(8,128)} parameter(1)\n  %zero = f32[] constant(0)\n")

needs_libtpu = pytest.mark.skipif(
    not tpu_compiler.available(),
    reason="libtpu is not installed (pip install -e '.[tpu-compiler]'): no XLA:TPU program")


def test_a_gather_reads_the_rows_it_returns() -> None:
    chip = get_chip("v6e")
    price = price_program(FUSED, chip)
    (op,) = price.ops
    assert not price.unpriced and op.bound != "unpriced"
    rows = 8 * 256 * 4
    assert op.hbm_bytes == rows + rows + 8 * 4  # the result, the rows read, the indices
    assert op.vpu_ops == 8  # the index bookkeeping
    whole = price_program(READ_WHOLE, chip)
    assert not whole.unpriced
    assert whole.ops[0].hbm_bytes == rows + 1024 * 256 * 4 + 8 * 4


@needs_libtpu
def test_a_reference_that_gathers_is_priced_from_xla_tpus_program() -> None:
    table = jax.ShapeDtypeStruct((4096, 512), jnp.float32)
    ids = jax.ShapeDtypeStruct((256,), jnp.int32)
    found = simulated_baseline(lambda t, i: jnp.take(t, i, axis=0) * 2.0, [table, ids],
                               get_chip("v6e"))
    assert found.priced_from == "xla-tpu", found.fallback
    gathers = [op for op in found.xla_tpu["fusions"] if "gather" in op["name"]]
    assert gathers and all(op["bound"] != "unpriced" for op in gathers)
