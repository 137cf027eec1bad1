"""Dots narrower than the MXU are priced on the MXU's tile, kernel and XLA alike.

The MXU is a square systolic array, 128 wide on v5e and 256 on v6e: a dot whose contraction
or output-lane dimension is 128 leaves half of v6e's array idle, so it takes as long as the
256-wide dot with twice its flops, while on v5e the two use the whole array. Attention at
head dim 128 (contraction of q @ k.T, output lanes of p @ v) is the common case.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import pytest

from tests.perf_kernels import causal, good, lower
from tools.lowered.mosaic import parse_lowered
from tools.performance.baseline import estimate_baseline, reference_cost
from tools.performance.chips import get_chip
from tools.performance.roofline import KernelEstimate, estimate_program

SEQ = 1024


def _kernel(fn, *args, chip: str) -> KernelEstimate:
    (est,) = estimate_program(parse_lowered(lower(fn, *args, chip=chip)), get_chip(chip)).kernels
    return est


def _attention_reference(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
    s = (q @ k.T).astype(jnp.float32)
    s = jnp.where(jnp.tril(jnp.ones(s.shape, bool)), s, -jnp.inf)
    return (jax.nn.softmax(s, axis=-1).astype(v.dtype) @ v).astype(q.dtype)


def _mxu_s_per_flop(est: KernelEstimate, chip: str) -> float:
    return est.matmul_padded_flops / get_chip(chip).matmul_peak("bfloat16") / est.matmul_flops


@pytest.mark.parametrize(("chip", "penalty"), [("v6e", 2.0), ("v5e", 1.0)])
def test_head_dim_128_attention_pays_for_the_idle_half_of_a_256_wide_mxu(
    chip: str, penalty: float,
) -> None:
    kernel, xla = {}, {}
    for d in (128, 256):
        q = jax.ShapeDtypeStruct((SEQ, d), jnp.bfloat16)
        fn = functools.partial(causal.causal_attention, bq=512, bkv=512)
        kernel[d] = _kernel(fn, q, q, q, chip=chip)
        cost = reference_cost(_attention_reference, [q, q, q])
        xla[d] = estimate_baseline(cost, get_chip(chip)).matmul_padded_flops / cost.dot_flops
    # Both dots of the causal kernel run on the 3 blocks at or below the diagonal.
    assert kernel[128].matmul_flops == 3 * 2 * (2 * 512 * 512 * 128)
    assert kernel[256].matmul_flops == 2 * kernel[128].matmul_flops
    ratio = _mxu_s_per_flop(kernel[128], chip) / _mxu_s_per_flop(kernel[256], chip)
    assert ratio == pytest.approx(penalty, rel=1e-9)
    assert xla[128] / xla[256] == pytest.approx(penalty, rel=1e-9)  # XLA pads the same way


def test_128_wide_contraction_matmul_costs_more_per_flop_on_v6e_than_on_v5e() -> None:
    """An MXU-bound blocked matmul (1024^2 output block, K = 4096) with bk = 128 vs 256: the
    same compute time per step on v6e for half the flops, the same time per flop on v5e."""
    per_flop: dict[tuple[str, int], float] = {}
    latency_per_flop: dict[tuple[str, int], float] = {}
    for chip in ("v5e", "v6e"):
        for bk in (128, 256):
            a = jax.ShapeDtypeStruct((1024, 4096), jnp.bfloat16)
            b = jax.ShapeDtypeStruct((4096, 1024), jnp.bfloat16)
            fn = functools.partial(good.matmul, bm=1024, bn=1024, bk=bk)
            est = _kernel(fn, a, b, chip=chip)
            # Every step's DMAs hide behind its MXU time and overhead (compute-bound steps).
            assert est.exposed_dma_s < 0.2 * est.latency_s, (chip, bk)
            per_flop[chip, bk] = est.compute_s / est.matmul_flops
            latency_per_flop[chip, bk] = est.latency_s / est.matmul_flops
        xla = {}
        for k in (128, 256):
            lhs = jax.ShapeDtypeStruct((1024, k), jnp.bfloat16)
            rhs = jax.ShapeDtypeStruct((k, 1024), jnp.bfloat16)
            cost = reference_cost(jnp.matmul, [lhs, rhs])
            xla[k] = estimate_baseline(cost, get_chip(chip)).compute_s / cost.dot_flops
        penalty = 2.0 if chip == "v6e" else 1.0
        assert xla[128] / xla[256] == pytest.approx(penalty, rel=1e-9)
    assert per_flop["v6e", 128] / per_flop["v6e", 256] == pytest.approx(2.0, rel=1e-9)
    assert per_flop["v5e", 128] / per_flop["v5e", 256] == pytest.approx(1.0, rel=1e-9)
    # End to end the idle half shows: twice the steps at the same MXU time each on v6e,
    # where on v5e only the extra per-step overhead separates the two.
    v6e = latency_per_flop["v6e", 128] / latency_per_flop["v6e", 256]
    v5e = latency_per_flop["v5e", 128] / latency_per_flop["v5e", 256]
    assert v6e > 1.5 > v5e > 1.0
