"""What runs is what is audited: platform-dependent choices, host callbacks and kernel-body
primitives off the allowlist are refused (in-process traces; the end-to-end candidate is
tests/candidates/platform_dependent_body.py)."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from tools.correctness.testsuite import build_suite
from tools.inputs.tasks import load_task
from tools.sandbox.launcher import Limits
from tools.verification.allowlist import program_problems
from tools.verification.receipts import check_receipt
from tools.verification.verify import evaluate

ROOT = Path(__file__).resolve().parent.parent
_X = jax.ShapeDtypeStruct((16, 128), jnp.float32)


def _traced(body, outside=None):
    def kernel(x):
        y = pl.pallas_call(body, out_shape=_X)(x)
        return outside(y) if outside else y

    return jax.jit(kernel).trace(_X).jaxpr


def _copy(x_ref, o_ref):
    o_ref[...] = x_ref[...]


def test_honest_kernels_have_no_problems() -> None:
    assert program_problems(_traced(_copy)) == []

    def exp_body(x_ref, o_ref):
        o_ref[...] = jnp.exp(x_ref[...]) / jnp.sum(x_ref[...], axis=-1, keepdims=True)

    assert program_problems(_traced(exp_body)) == []


def test_platform_dependent_code_is_refused_inside_and_outside_kernels() -> None:
    def body(x_ref, o_ref):
        o_ref[...] = jax.lax.platform_dependent(x_ref[...], mosaic=lambda x: x,
                                                default=jnp.tanh)

    inside = program_problems(_traced(body))
    assert any("platform-dependent code (in the body of kernel" in p for p in inside), inside
    outside = program_problems(_traced(_copy, lambda y: jax.lax.platform_dependent(
        y, tpu=lambda y: y, default=jnp.tanh)))
    assert any("platform-dependent code (outside the kernels)" in p for p in outside), outside


def test_kernel_primitives_off_the_allowlist_fail_closed_by_name() -> None:
    def prng(x_ref, o_ref):
        pltpu.prng_seed(0)
        bits = pltpu.prng_random_bits(x_ref.shape)
        o_ref[...] = x_ref[...] + bits.astype(jnp.float32)

    found = program_problems(_traced(prng))
    assert any("`prng_seed`" in p and "hardware PRNG" in p for p in found), found

    def approx(x_ref, o_ref):
        o_ref[...] = pl.reciprocal(x_ref[...], approx=True)

    found = program_problems(_traced(approx))
    assert any("reciprocal(approx=True)" in p for p in found), found

    def callback(x_ref, o_ref):
        o_ref[...] = jax.pure_callback(lambda v: v, jax.ShapeDtypeStruct((16, 128), jnp.float32),
                                       x_ref[...])

    found = program_problems(_traced(callback))
    assert any("host callback `pure_callback`" in p for p in found), found


@pytest.mark.slow
def test_a_platform_dependent_kernel_body_fails_verification() -> None:
    task = load_task(ROOT / "tests" / "evaltasks" / "rmsnorm_small.py")
    verdict = evaluate(task.path, ROOT / "tests" / "candidates" / "platform_dependent_body.py",
                       suite=build_suite(task, seeds=(0,)), limits=Limits(wall_s=120.0))
    assert verdict.verdict == "fail"
    assert any("platform-dependent code (in the body of kernel" in r for r in verdict.reasons), \
        verdict.reasons
    assert check_receipt(verdict.receipt).ok
