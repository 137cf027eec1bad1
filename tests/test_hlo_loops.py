"""A while loop in XLA:TPU's program is priced as its body times its trip count, the count
read from the program (the compiler's `known_trip_count`, or the counter pattern a scan or
fori_loop lowers to); a loop whose count the program does not fix is named, never priced as
one trip; the counter's scalar ops run on the scalar unit, not as launched ops."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

from tools.lowered import tpu_compiler
from tools.performance.chips import get_chip
from tools.performance.hlo_compute import Module
from tools.performance.hlo_loops import trip_count
from tools.performance.roofline import KERNEL_LAUNCH_S
from tools.performance.simbaseline import simulated_baseline
from tools.performance.xla_tpu import price_program

# for (i = START; i < LIMIT; i += STEP) x = exp(x), the state (i, x) in VMEM
LOOP = """HloModule m

%fused_exp (param_0: f32[8,128]) -> f32[8,128] {
  %param_0 = f32[8,128]{1,0:T(8,128)S(1)} parameter(0)
  ROOT %e = f32[8,128]{1,0:T(8,128)S(1)} exponential(%param_0)
}

%body (state: (s32[], f32[8,128])) -> (s32[], f32[8,128]) {
  %state = (s32[]{:T(128)}, f32[8,128]{1,0:T(8,128)S(1)}) parameter(0)
  %i = s32[]{:T(128)} get-tuple-element(%state), index=0
  %i.copy = s32[]{:T(128)S(6)} copy(%i)
  %step = s32[]{:T(128)} constant(STEP)
  %next = s32[]{:T(128)} add(%i.copy, %step)
  %x = f32[8,128]{1,0:T(8,128)S(1)} get-tuple-element(%state), index=1
  %y = f32[8,128]{1,0:T(8,128)S(1)} fusion(%x), kind=kLoop, calls=%fused_exp
  ROOT %out = (s32[]{:T(128)}, f32[8,128]{1,0:T(8,128)S(1)}) tuple(%next, %y)
}

%cond (state.1: (s32[], f32[8,128])) -> pred[] {
  %state.1 = (s32[]{:T(128)}, f32[8,128]{1,0:T(8,128)S(1)}) parameter(0)
  %limit = s32[]{:T(128)} constant(LIMIT)
  %i.1 = s32[]{:T(128)} get-tuple-element(%state.1), index=0
  ROOT %go = pred[]{:T(512)} compare(%i.1, %limit), direction=DIR
}

ENTRY %main (p: f32[8,128], n: s32[]) -> f32[8,128] {
  %p = f32[8,128]{1,0:T(8,128)S(1)} parameter(0)
  %n = s32[]{:T(128)} parameter(1)
  %start = s32[]{:T(128)} constant(START)
  %start.copy = s32[]{:T(128)} copy(%start)
  %init = (s32[]{:T(128)}, f32[8,128]{1,0:T(8,128)S(1)}) tuple(%start.copy, %p)
  %loop = (s32[]{:T(128)}, f32[8,128]{1,0:T(8,128)S(1)}) while(%init), condition=%cond, body=%body
  ROOT %r = f32[8,128]{1,0:T(8,128)S(1)} get-tuple-element(%loop), index=1
}
"""


def _loop(start: int = 0, limit: int = 100, step: int = 1, direction: str = "LT") -> str:
    return (LOOP.replace("START", str(start)).replace("LIMIT", str(limit))
            .replace("STEP", str(step)).replace("DIR", direction))


def _trips(hlo: str) -> int | None:
    module = Module(hlo)
    entry = module.computations[module.entry or ""]
    (loop,) = [i for i in entry if i.opcode == "while"]
    return trip_count(module, loop, {i.name: i for i in entry})


@pytest.mark.parametrize(("start", "limit", "step", "direction", "trips"), [
    (0, 100, 1, "LT", 100), (0, 100, 1, "LE", 101), (3, 100, 1, "LT", 97),
    (0, 100, 7, "LT", 15), (100, 0, -1, "GT", 100), (100, 0, -4, "GE", 26),
    (0, 64, 2, "NE", 32), (5, 5, 1, "LT", 0),
])
def test_the_counter_pattern_gives_the_trip_count(start: int, limit: int, step: int,
                                                  direction: str, trips: int) -> None:
    assert _trips(_loop(start, limit, step, direction)) == trips


@pytest.mark.parametrize("hlo", [
    _loop(0, 100, -1, "LT"),  # counts away from its limit: never ends
    _loop(0, 63, 2, "NE"),  # steps over its limit
    _loop().replace("%limit = s32[]{:T(128)} constant(100)",
                    "%limit = s32[]{:T(128)} get-tuple-element(%state.1), index=0"),
    _loop().replace("tuple(%start.copy, %p)", "tuple(%n, %p)"),  # starts at data
    _loop().replace("add(%i.copy, %step)", "multiply(%i.copy, %step)"),
])
def test_a_count_the_program_does_not_fix_is_none(hlo: str) -> None:
    assert _trips(hlo) is None


def test_a_loop_is_its_body_times_its_trips_and_its_counter_costs_no_launch() -> None:
    chip = get_chip("v6e")
    short, long = (price_program(_loop(limit=n), chip) for n in (100, 200))
    assert not short.unpriced and not long.unpriced
    (body,) = [op for op in short.ops if op.name == "loop/y"]
    assert body.trips == 100 and body.bound != "unpriced"
    assert body.transcendentals == 100 * 8 * 128
    # the exp per trip, each a launched op; the counter's add, copy and compare are not
    assert short.latency_s == pytest.approx(100 * (KERNEL_LAUNCH_S + body.compute_s / 100),
                                            rel=0.01)
    scalars = [op for op in short.ops if op.bound == "scalar"]
    assert {op.name for op in scalars} == {"start.copy", "loop/go", "loop/i.copy", "loop/next"}
    assert [op.trips for op in scalars if op.name == "loop/go"] == [101]
    assert long.latency_s == pytest.approx(2 * short.latency_s, rel=0.01)


def test_a_loop_without_a_fixed_count_is_named_and_not_priced_as_one_trip() -> None:
    hlo = _loop().replace("tuple(%start.copy, %p)", "tuple(%n, %p)")
    price = price_program(hlo, get_chip("v6e"))
    assert price.unpriced == ["while loop (its trip count is not a constant of the program)"]
    assert not [op for op in price.ops if op.name.startswith("loop/")]


@pytest.mark.skipif(not tpu_compiler.available(), reason="libtpu is not installed "
                    "(pip install -e '.[tpu-compiler]'): no XLA:TPU program")
def test_a_scan_is_priced_from_xla_tpus_program_by_its_length() -> None:
    def scan(steps: int):
        def reference(x: jax.Array) -> jax.Array:
            return jax.lax.fori_loop(0, steps, lambda i, v: jnp.tanh(v * 1.5 + i), x)
        return reference

    x = jax.ShapeDtypeStruct((64, 256), jnp.float32)
    chip = get_chip("v6e")
    short, long = (simulated_baseline(scan(n), [x], chip) for n in (64, 128))
    assert short.priced_from == long.priced_from == "xla-tpu", (short.fallback, long.fallback)
    assert any(op["trips"] == 64 for op in short.xla_tpu["fusions"])
    assert long.latency_s == pytest.approx(2 * short.latency_s, rel=0.1)
