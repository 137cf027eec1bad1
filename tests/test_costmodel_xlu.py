"""The cross-lane unit: transposes and lane rotations inside VMEM cost what the TPU compiler
schedules for them (they were free), while renamings of vregs stay free."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from tests.perf_kernels import lower
from tools.lowered import tpu_compiler
from tools.lowered.mosaic import parse_lowered
from tools.performance.chips import get_chip
from tools.performance.roofline import KernelEstimate, estimate_program

CHIP = get_chip("v6e")
STEPS = 16


def _kernel(op: Callable[[Any], Any], block: tuple[int, ...], *, moving: bool = True,
            dtype: Any = jnp.float32) -> tuple[str, jax.ShapeDtypeStruct]:
    """`op` on one block per grid step. ``moving`` off: the same block every step (fetched
    once, written once), so the step's own work is all there is to price."""
    out_block = jax.eval_shape(op, jax.ShapeDtypeStruct(block, dtype)).shape
    zeros = (0,) * (len(block) - 1)

    def body(x_ref, o_ref):
        o_ref[...] = op(x_ref[...])

    def call(x):
        index = (lambda i: (i, *zeros)) if moving else (lambda i: (0, *zeros))
        rows = STEPS if moving else 1
        return pl.pallas_call(
            body, grid=(STEPS,), in_specs=[pl.BlockSpec(block, index)],
            out_specs=pl.BlockSpec(out_block, index),
            out_shape=jax.ShapeDtypeStruct((out_block[0] * rows, *out_block[1:]), dtype))(x)

    spec = jax.ShapeDtypeStruct((block[0] * (STEPS if moving else 1), *block[1:]), dtype)
    return lower(call, spec), spec


def _estimate(op: Callable[[Any], Any], block: tuple[int, ...], **kw: Any) -> KernelEstimate:
    text, _ = _kernel(op, block, **kw)
    (kernel,) = estimate_program(parse_lowered(text), CHIP).kernels
    assert not kernel.unsound, kernel.unsound
    return kernel


def _xlu(kind: str, bits: int, vregs: float) -> float:
    return STEPS * vregs * CHIP.xlu_cycles(kind, bits) / CHIP.clock_hz


def test_a_transpose_costs_the_compilers_cycles_per_vreg_and_a_copy_nothing() -> None:
    assert _estimate(lambda x: x, (1024, 1024)).xlu_s == 0.0
    transposed = _estimate(jnp.transpose, (1024, 1024))
    assert transposed.xlu_s == pytest.approx(_xlu("transpose", 32, 1024))
    packed = _estimate(jnp.transpose, (1024, 1024), dtype=jnp.bfloat16)
    assert packed.xlu_s == pytest.approx(_xlu("transpose", 16, 512))
    assert CHIP.xlu_cycles("transpose", 16) > CHIP.xlu_cycles("transpose", 32)


def test_a_narrow_axis_pays_its_padding() -> None:
    """(32, 512) -> (512, 32): the result fills 64 lane-padded vregs, the operand 16."""
    narrow = _estimate(jnp.transpose, (32, 512))
    assert narrow.xlu_s == pytest.approx(_xlu("transpose", 32, 64))


def test_what_moves_between_lanes_or_sublanes_is_priced_and_renamings_are_free() -> None:
    assert _estimate(lambda x: pltpu.roll(x, 3, 1), (512, 1024)).xlu_s == pytest.approx(
        _xlu("rotate", 32, 512))
    assert _estimate(lambda x: pltpu.roll(x, 3, 0), (512, 1024)).xlu_s == 0.0
    sublanes = _estimate(lambda x: jnp.transpose(x, (1, 0, 2)), (16, 64, 512))
    assert sublanes.xlu_s == pytest.approx(_xlu("shuffle", 32, 512))
    assert _estimate(lambda x: jnp.transpose(x, (1, 0, 2, 3)), (4, 4, 64, 512)).xlu_s == 0.0


def test_a_kernel_bound_by_its_transposes_is_slower_than_its_copy() -> None:
    """Nothing moves between steps: the transposes are the step, and they now cost time."""
    copy = _estimate(lambda x: x, (1024, 1024), moving=False)
    transposed = _estimate(lambda x: jnp.transpose(jnp.transpose(x)), (1024, 1024),
                           moving=False)
    assert transposed.xlu_s == pytest.approx(2 * _xlu("transpose", 32, 1024))
    assert transposed.latency_s > copy.latency_s + 0.9 * transposed.xlu_s


@pytest.mark.slow
@pytest.mark.skipif(not tpu_compiler.available(),
                    reason="libtpu is not installed (pip install -e '.[tpu-compiler]')")
def test_the_figures_are_the_real_compilers(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The model's cross-lane time of a step that only transposes (or rotates) a block is
    within 10% of the compiler's static cycles for that step, on every chip."""
    monkeypatch.setenv(tpu_compiler.CACHE_ENV, str(tmp_path / "cache"))
    for name in ("v5e", "v6e"):
        chip = get_chip(name)
        for kind, op, block in (("transpose", jnp.transpose, (1024, 1024)),
                                ("rotate", lambda x: pltpu.roll(x, 3, 1), (512, 1024))):
            text, _ = _kernel(op, block)
            (compiled,) = tpu_compiler.compile_all([text], name, cycles=True)
            (cycles,) = compiled.kernel_cycles
            vregs = block[0] * block[1] * 4 / 4096
            model = vregs * chip.xlu_cycles(kind, 32)
            assert model == pytest.approx(cycles.step_cycles, rel=0.10), (name, kind)


def test_a_transpose_read_only_by_a_matmul_costs_what_the_compiler_takes_to_fold_it() -> None:
    """`x @ w.T`: the compiler folds the transpose into the MXU's operand (on v6e its step is
    within 3% of `x @ w`'s), so it costs the chip's `into_matmul` figure, not a transpose."""

    def call(x, w):
        def body(x_ref, w_ref, o_ref):
            o_ref[...] = jnp.dot(x_ref[...], w_ref[...].T, preferred_element_type=jnp.float32)

        return pl.pallas_call(
            body, grid=(STEPS,), in_specs=[pl.BlockSpec((8, 1024), lambda i: (i, 0)),
                                           pl.BlockSpec((1024, 1024), lambda i: (0, 0))],
            out_specs=pl.BlockSpec((8, 1024), lambda i: (i, 0)),
            out_shape=jax.ShapeDtypeStruct((8 * STEPS, 1024), jnp.float32))(x, w)

    text = lower(call, jax.ShapeDtypeStruct((8 * STEPS, 1024), jnp.float32),
                 jax.ShapeDtypeStruct((1024, 1024), jnp.float32))
    (kernel,) = estimate_program(parse_lowered(text), CHIP).kernels
    assert kernel.xlu_s == pytest.approx(_xlu("into_matmul", 32, 1024))
    assert kernel.xlu_s < 0.1 * _xlu("transpose", 32, 1024)
