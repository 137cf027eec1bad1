"""The XLA ops around a candidate's kernels are priced from XLA:TPU's compiled program of
the candidate (its fusions, and the relayout copies it puts around a kernel whose operands
it lays out otherwise), by the rules that price the baseline; without that program, or
where it holds work with no rule, the lowered program's ops are priced one by one."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools import api
from tools.lowered import tpu_compiler
from tools.performance.chips import get_chip
from tools.performance.roofline import KERNEL_LAUNCH_S, OUTSIDE_FROM_XLA_TPU
from tools.performance.xla_tpu import price_outside

HERE = Path(__file__).parent / "outside"

# a kernel whose operand XLA relays out first (a copy) and whose result it copies back
PROGRAM = """HloModule m

ENTRY %main (p: f32[8,256,64]) -> f32[8,256,64] {
  %p = f32[8,256,64]{1,2,0:T(8,128)} parameter(0)
  %in = f32[8,256,64]{2,1,0:T(8,128)} copy(%p)
  %k = f32[8,256,64]{2,1,0:T(8,128)} custom-call(%in), custom_call_target="tpu_custom_call"
  ROOT %out = f32[8,256,64]{1,2,0:T(8,128)} copy(%k)
}
"""


def test_the_ops_around_a_kernel_are_priced_without_the_kernel() -> None:
    chip = get_chip("v6e")
    price = price_outside(PROGRAM, chip, kernels=1)
    assert price is not None and price.ops == ["in", "out"]
    array = 8 * 256 * 64 * 4
    assert price.hbm_bytes == 4 * array  # each copy reads and writes the array in HBM
    assert price.latency_s == pytest.approx(2 * (KERNEL_LAUNCH_S + 2 * array / chip.hbm_bytes_per_s))


def test_a_program_it_cannot_match_or_price_falls_back() -> None:
    chip = get_chip("v6e")
    assert price_outside(PROGRAM, chip, kernels=2) is None  # not the candidate's kernels
    mystery = PROGRAM.replace('%in = f32[8,256,64]{2,1,0:T(8,128)} copy(%p)',
                              '%in = f32[8,256,64]{2,1,0:T(8,128)} custom-call(%p), '
                              'custom_call_target="Mystery"')
    assert price_outside(mystery, chip, kernels=1) is None  # work with no rule


@pytest.mark.skipif(not tpu_compiler.available(), reason="libtpu is not installed "
                    "(pip install -e '.[tpu-compiler]'): no XLA:TPU program")
def test_a_kernel_reading_a_narrow_axis_row_major_pays_xla_tpus_relayout() -> None:
    """XLA:TPU keeps (8, 256, 64) floats with the 256-long axis minor; the kernel's operand
    and result are copied to and from row-major around it, which the lowered program does
    not show (no op outside the kernel)."""
    result = api.estimate(HERE / "narrow_double.py", HERE / "double_kernel.py")
    assert result.outside_priced_from == OUTSIDE_FROM_XLA_TPU
    assert result.outside_ops_s >= 2 * KERNEL_LAUNCH_S  # a copy in, a copy out
    (kernel,) = result.breakdown
    assert result.latency_s == pytest.approx(kernel.latency_s + result.outside_ops_s)


@pytest.mark.skipif(not tpu_compiler.available(), reason="libtpu is not installed "
                    "(pip install -e '.[tpu-compiler]'): no XLA:TPU program")
def test_a_kernel_reading_the_narrow_axis_transposed_gets_a_bitcast() -> None:
    """The same kernel on (64, 256) blocks, the wrapper swapping the axes: the lowered program
    holds two transposes, which XLA:TPU turns into bitcasts of its own layout: nothing to pay."""
    result = api.estimate(HERE / "narrow_double.py", HERE / "double_kernel_seq_on_lanes.py")
    assert result.outside_priced_from == OUTSIDE_FROM_XLA_TPU
    assert result.outside_ops_s == 0.0
    row_major = api.estimate(HERE / "narrow_double.py", HERE / "double_kernel.py")
    assert result.latency_s < row_major.latency_s
