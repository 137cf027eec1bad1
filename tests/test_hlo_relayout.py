"""XLA:TPU's transposes and layout-changing copies cost the cross-lane unit's cycles, as a
kernel's transposes do (both sides of a speedup by the same rules); one that is a bitcast
in the layouts XLA gave it stays free, and a width without figures is named, never free."""

from __future__ import annotations

import pytest

from tools.performance.chips import get_chip
from tools.performance.xla_tpu import price_program

CHIP = get_chip("v6e")

PROGRAM = """HloModule m

%fused (param_0: DTYPE[1024,512]) -> DTYPE[512,1024] {
  %param_0 = DTYPE[1024,512]{1,0:T(8,128)} parameter(0)
  ROOT %t = DTYPE[512,1024]{OUT:T(8,128)} transpose(%param_0), dimensions={1,0}
}

ENTRY %main (p: DTYPE[1024,512]) -> DTYPE[512,1024] {
  %p = DTYPE[1024,512]{1,0:T(8,128)} parameter(0)
  ROOT %f = DTYPE[512,1024]{OUT:T(8,128)} fusion(%p), kind=kLoop, calls=%fused
}
"""

COPY = """HloModule m

ENTRY %main (p: f32[1024,512]) -> f32[1024,512] {
  %p = f32[1024,512]{1,0:T(8,128)} parameter(0)
  ROOT %c = f32[1024,512]{0,1:T(8,128)} copy(%p)
}
"""


def _price(dtype: str = "f32", out_layout: str = "1,0") -> object:
    return price_program(PROGRAM.replace("DTYPE", dtype).replace("OUT", out_layout), CHIP)


def test_a_transpose_between_lanes_costs_its_vregs_at_the_compilers_rate() -> None:
    price = _price()
    (fusion,) = [f for f in price.ops if f.opcode == "fusion"]
    vregs = 1024 * 512 * 4 / 4096
    assert fusion.xlu_s == pytest.approx(vregs * CHIP.xlu_cycles("transpose", 32) / CHIP.clock_hz)
    assert fusion.compute_s == pytest.approx(fusion.xlu_s) and not price.unpriced
    packed = _price("bf16")
    (fusion,) = [f for f in packed.ops if f.opcode == "fusion"]
    assert fusion.xlu_s == pytest.approx(
        1024 * 512 * 2 / 4096 * CHIP.xlu_cycles("transpose", 16) / CHIP.clock_hz)


def test_a_transpose_that_its_layouts_make_a_bitcast_is_free() -> None:
    """Result laid out {0,1}: its minor axis is the operand's minor axis, nothing moves."""
    (fusion,) = [f for f in _price(out_layout="0,1").ops if f.opcode == "fusion"]
    assert fusion.xlu_s == 0.0 and fusion.compute_s == 0.0


def test_a_copy_that_changes_the_layout_is_a_transpose_and_a_width_without_figures_is_named() -> None:
    (copy,) = [f for f in price_program(COPY, CHIP).ops if f.opcode == "copy"]
    assert copy.xlu_s == pytest.approx(
        1024 * 512 * 4 / 4096 * CHIP.xlu_cycles("transpose", 32) / CHIP.clock_hz)
    bytes_ = price_program(PROGRAM.replace("DTYPE", "s8").replace("OUT", "1,0"), CHIP)
    assert any("cross-lane" in u for u in bytes_.unpriced), bytes_.unpriced
