"""Scalar-core work is priced: scalar ALU ops, SMEM loads and stores, vector -> scalar
extracts and loop trips cost scalar-unit time (assumption 4b of tools/performance/roofline.py),
the same for `estimate`, the verifier's executor and the tuner (one function prices)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from tests.perf_kernels import lower
from tools.lowered.mosaic import Loop, parse_lowered
from tools.performance import chips
from tools.performance.baseline import reference_cost
from tools.performance.chips import get_chip
from tools.performance.executors import SimExecutor
from tools.performance.roofline import estimate_program

CANDIDATES = Path(__file__).parent / "candidates"


def _topk():
    spec = importlib.util.spec_from_file_location("scalar_topk", CANDIDATES / "scalar_topk.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("chip", ["v5e", "v6e", "v7"])
def test_scalar_loop_top_k_is_priced_slower_than_its_vector_twin(chip: str) -> None:
    """8192 trips of SMEM loads, compares and stores against one max-reduction per value:
    with scalar work free the scalar loop was the faster (0.57x the vector twin's time on
    v6e); priced, it is far slower."""
    module = _topk()
    x = jax.ShapeDtypeStruct((1024,), jnp.float32)
    c = get_chip(chip)
    scalar = estimate_program(parse_lowered(lower(module.build(), x)), c)
    vector = estimate_program(parse_lowered(lower(module.vector_twin(), x)), c)
    assert scalar.sound and vector.sound
    assert scalar.latency_s > 10 * vector.latency_s
    (k,) = scalar.kernels
    trips = 1024 * 8 + 1024  # the inner loop's trips, then the outer loop's
    floor = (trips * chips.LOOP_TRIP_CYCLES + 1024 * 8 * chips.SMEM_LOAD_CYCLES) / c.clock_hz
    assert k.scalar_s >= floor and k.compute_s >= k.scalar_s


def test_scalar_work_by_hand() -> None:
    """A loop of 100 trips summing SMEM words: per trip an index cast, an SMEM load, an add
    and the trip's overhead; around it the bound's add, a load and the result's store;
    compute is the scalar unit's time."""

    def kernel(x_ref, o_ref):
        o_ref[0] = jax.lax.fori_loop(0, 100, lambda i, acc: acc + x_ref[i], jnp.int32(0))

    spec = pl.BlockSpec(memory_space=pltpu.SMEM)

    def call(x):
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((1,), jnp.int32),
                              in_specs=[spec], out_specs=spec)(x)

    c = get_chip("v6e")
    (k,) = parse_lowered(lower(call, jax.ShapeDtypeStruct((128,), jnp.int32))).kernels
    (loop,) = [item for item in k.body if isinstance(item, Loop)]
    assert [(op.name, op.scalar_ops, op.smem_loads) for op in loop.body] == [
        ("arith.index_cast", 1, 0), ("memref.load", 0, 1), ("arith.addi", 1, 0)]
    assert sum(op.smem_loads for op in k.body_ops()) == 2
    assert sum(op.smem_stores for op in k.body_ops()) == 1
    est = estimate_program(parse_lowered(lower(call, jax.ShapeDtypeStruct((128,), jnp.int32))),
                           c).kernels[0]
    per_trip = chips.LOOP_TRIP_CYCLES + chips.SMEM_LOAD_CYCLES + 2 / chips.SCALAR_ALU_SLOTS
    around = 1 / chips.SCALAR_ALU_SLOTS + chips.SMEM_LOAD_CYCLES + chips.SMEM_STORE_CYCLES
    assert est.scalar_s == pytest.approx((100 * per_trip + around) / c.clock_hz)
    assert est.compute_s == pytest.approx(est.scalar_s)


def test_the_verifiers_executor_prices_as_estimate_does() -> None:
    """The simulated executor (the verifier's and the tuner's timing) and `estimate` both
    price with `estimate_program`: the same latency for the scalar kernel."""
    module = _topk()
    x = jax.ShapeDtypeStruct((1024,), jnp.float32)
    lowered = parse_lowered(lower(module.build(), x))
    cost = reference_cost(lambda v: jax.lax.top_k(v, 8)[0], (x,))
    measured = SimExecutor("sim-tpu-v6e").estimate(lowered, cost)
    assert measured.latency_s == estimate_program(lowered, get_chip("v6e")).latency_s
