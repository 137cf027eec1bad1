"""The roofline model against numbers worked out by hand from the chip figures."""

from __future__ import annotations

import functools

import jax.numpy as jnp
import pytest

from tests.perf_kernels import good, lower
from tools.lowered.mosaic import parse_lowered
from tools.performance.baseline import estimate_baseline, reference_cost
from tools.performance.chips import get_chip
from tools.performance.roofline import KERNEL_LAUNCH_S, estimate_kernel, estimate_program

V6E_BW = 1.64e12
V5E_BW = 8.2e11
STEP = 0.33e-6
V6E_VPU = 1.75e9 * 8 * 128 * 4


def _kernel(fn, *args):
    (k,) = parse_lowered(lower(fn, *args)).kernels
    return k


def test_elementwise_kernel_by_hand() -> None:
    k = _kernel(good.scale, jnp.ones((1024, 128), jnp.float32))
    est = estimate_kernel(k, get_chip("v6e"))
    block = 256 * 128 * 4
    assert est.grid_steps == 4
    assert est.fetches == [4, 4]
    assert est.hbm_bytes == 8 * block
    assert est.flops == 1024 * 128
    # A step takes max(compute + overhead, DMA): its 32768 VPU ops plus the fixed overhead
    # outlast its DMAs (next input + previous output), so the time is launch + prologue +
    # 4 busy steps + epilogue.
    assert 2 * block / V6E_BW < STEP
    want = KERNEL_LAUNCH_S + 2 * block / V6E_BW + 4 * (STEP + 256 * 128 / V6E_VPU)
    assert est.latency_s == pytest.approx(want, rel=1e-9)
    assert est.bound == "overhead"  # 1.4 us of step overhead vs 0.64 us of traffic


def test_matmul_refetch_over_k() -> None:
    """grid (i, j, k): A's block (i, k) and B's (k, j) change every step; C's (i, j) every 4."""
    a = jnp.ones((256, 512), jnp.bfloat16)
    b = jnp.ones((512, 384), jnp.bfloat16)
    est = estimate_kernel(_kernel(good.matmul, a, b), get_chip("v6e"))
    tile = 128 * 128 * 2
    assert est.grid_steps == 24
    assert est.fetches == [24, 24, 6]
    assert est.hbm_bytes == (24 + 24 + 6) * tile
    assert est.matmul_flops == 24 * 2 * 128**3
    # v6e's MXU is 256 wide: a 128-wide N and K use a quarter of it.
    assert est.matmul_padded_flops == 24 * 2 * 128 * 256 * 256
    v5e = estimate_kernel(_kernel(good.matmul, a, b), get_chip("v5e"))
    assert v5e.matmul_padded_flops == v5e.matmul_flops


def test_matmul_full_k_fetches_a_once_per_row_and_times_by_hand() -> None:
    """bk = K: grid (2, 3, 1); A's block (i, 0) stays put while j moves: fetched twice."""
    a = jnp.ones((256, 512), jnp.bfloat16)
    b = jnp.ones((512, 384), jnp.bfloat16)
    fn = functools.partial(good.matmul, bk=512)
    est = estimate_kernel(_kernel(fn, a, b), get_chip("v5e"))
    a_blk = b_blk = 128 * 512 * 2
    o_blk = 128 * 128 * 2
    assert est.fetches == [2, 6, 6]
    assert est.hbm_bytes == 2 * a_blk + 6 * b_blk + 6 * o_blk
    # Per step: the 128x128x512 matmul at v5e's bf16 peak vs the DMAs overlapping it.
    mxu = 2 * 128 * 128 * 512 / 1.97e14
    overlapped = [b_blk, b_blk + o_blk, a_blk + b_blk + o_blk, b_blk + o_blk, b_blk + o_blk, o_blk]
    steps = sum(max(mxu + STEP, x / V5E_BW) for x in overlapped)
    want = KERNEL_LAUNCH_S + (a_blk + b_blk) / V5E_BW + steps + o_blk / V5E_BW
    assert est.latency_s == pytest.approx(want, rel=1e-9)
    assert mxu > o_blk / V5E_BW  # the last step is compute-bound, as the sum above assumes


def test_data_dependent_index_is_fetched_every_step() -> None:
    idx = jnp.array([0, 0, 2, 2], jnp.int32)
    k = _kernel(good.gather_rows, idx, jnp.ones((32, 128), jnp.float32))
    est = estimate_kernel(k, get_chip("v6e"))
    assert est.fetches == [4, 4]
    assert any("depends on data" in c for c in est.caveats)


def test_baseline_from_post_fusion_cost() -> None:
    a = jnp.ones((256, 512), jnp.bfloat16)
    b = jnp.ones((512, 384), jnp.bfloat16)
    cost = reference_cost(lambda x, y: jnp.dot(x, y), (a, b))
    # XLA:CPU widens bf16 to f32 around its dot; the TPU program reads bf16 and writes bf16.
    assert cost.bytes_accessed == (256 * 512 + 512 * 384 + 256 * 384) * 2
    assert cost.raw_bytes_accessed > cost.bytes_accessed
    assert [(d.m, d.n, d.k, d.dtype) for d in cost.dots] == [(256, 384, 512, "bfloat16")]
    base = estimate_baseline(cost, get_chip("v6e"))
    # N=384 padded to 512 on the 256-wide MXU, at XLA's achievable 95% of peak.
    mxu = 2 * 256 * 512 * 512 / (9.2e14 * 0.95)
    memory = cost.bytes_accessed / V6E_BW
    assert base.latency_s == pytest.approx(max(mxu, memory) + cost.n_kernels * KERNEL_LAUNCH_S)
    assert cost.n_kernels == 1


def test_elementwise_baseline_and_program() -> None:
    x = jnp.ones((1024, 128), jnp.float32)
    cost = reference_cost(lambda v: v * 2.0, (x,))
    assert cost.bytes_accessed == 2 * 1024 * 128 * 4
    assert cost.flops == 1024 * 128
    base = estimate_baseline(cost, get_chip("v6e"))
    assert base.latency_s == pytest.approx(2 * 1024 * 128 * 4 / V6E_BW + KERNEL_LAUNCH_S)
    program = estimate_program(parse_lowered(lower(good.scale, x)), get_chip("v6e"))
    assert program.outside_bytes == 0 and len(program.kernels) == 1


def test_loop_trips_gridless_kernel_and_outside_ops() -> None:
    x = jnp.ones((4, 8, 128), jnp.float32)
    chip = get_chip("v6e")
    program = estimate_program(parse_lowered(lower(good.looped_then_whole, x)), chip)
    looped, whole = program.kernels
    assert looped.transcendentals == 4 * 3 * 8 * 128  # 4 steps x 3 trips x one (8, 128) exp
    assert whole.grid_steps == 1 and whole.fetches == [1, 1]
    nbytes = 4 * 8 * 128 * 4
    # No grid: copy in, compute, copy out, one step of overhead, one launch; nothing overlaps.
    compute = nbytes / 4 / chip.vpu_ops_per_s
    assert whole.latency_s == pytest.approx(KERNEL_LAUNCH_S + 2 * nbytes / V6E_BW + compute + STEP)
    assert program.outside_bytes == 2 * nbytes
    assert program.outside_ops_s == pytest.approx(KERNEL_LAUNCH_S + 2 * nbytes / V6E_BW)


def test_unfused_elementwise_pass_around_a_matmul_is_priced() -> None:
    """XLA does not fuse `mask * (x @ y)` into the dot: the multiply is its own pass over
    HBM (read mask and the product, write the result), after the matmul, not hidden under it."""
    import jax

    x = jax.ShapeDtypeStruct((4096, 4096), jnp.bfloat16)
    chip = get_chip("v5e")
    plain = estimate_baseline(reference_cost(lambda a, b: a @ b, [x, x]), chip)
    masked = estimate_baseline(reference_cost(lambda m, a, b: m * (a @ b), [x, x, x]), chip)
    elementwise = 3 * 4096 * 4096 * 2 / chip.hbm_bytes_per_s
    assert masked.latency_s - plain.latency_s == pytest.approx(elementwise + KERNEL_LAUNCH_S,
                                                                rel=1e-6)


def test_transposes_that_cancel_are_free() -> None:
    """`y.T.T` around a kernel: XLA removes the pair, so the model charges nothing for it."""
    import jax

    from tools.performance.calibration import guide_matmul

    x = jax.ShapeDtypeStruct((512, 512), jnp.bfloat16)
    program = parse_lowered(lower(guide_matmul(128, 128, 128, "transposed_rhs"), x, x))
    assert program.outside_ops == ["stablehlo.transpose", "stablehlo.transpose"]
    assert estimate_program(program, get_chip("v6e")).outside_ops_s == 0
    single = parse_lowered(lower(good.looped_then_whole, jnp.ones((4, 8, 128), jnp.float32)))
    assert estimate_program(single, get_chip("v6e")).outside_ops_s > 0


def test_convolution_is_priced_as_a_matmul_on_the_mxu() -> None:
    """A conv is the MXU's work in XLA:TPU: M = batch x output positions, N = output
    channels, K = input channels x window, padded like a dot; a grouped conv is a batch."""
    import jax

    x = jax.ShapeDtypeStruct((8, 64, 64, 128), jnp.bfloat16)  # NHWC
    w = jax.ShapeDtypeStruct((3, 3, 128, 200), jnp.bfloat16)  # HWIO

    def conv(a, b):
        return jax.lax.conv_general_dilated(a, b, (1, 1), "VALID",
                                            dimension_numbers=("NHWC", "HWIO", "NHWC"))

    cost = reference_cost(conv, (x, w))
    assert [(d.batch, d.m, d.n, d.k, d.dtype) for d in cost.dots] == [
        (1, 8 * 62 * 62, 200, 128 * 9, "bfloat16")]
    assert cost.dot_flops == pytest.approx(cost.flops, rel=1e-2)  # none left to the VPU
    chip = get_chip("v6e")
    base = estimate_baseline(cost, chip)
    # N = 200 padded to 256, K = 1152 to 1280 on the 256-wide MXU, at XLA's 95% of peak.
    mxu = 2 * (8 * 62 * 62) * 256 * 1280 / (chip.matmul_peak("bfloat16") * 0.95)
    assert base.matmul_padded_flops == 2 * (8 * 62 * 62) * 256 * 1280
    assert base.latency_s >= mxu
    assert base.compute_s == pytest.approx(mxu)

    grouped_w = jax.ShapeDtypeStruct((32, 4, 3, 3), jnp.float32)  # OIHW, 2 groups of 4 -> 16
    grouped = reference_cost(
        lambda a, b: jax.lax.conv_general_dilated(a, b, (2, 2), "VALID", feature_group_count=2),
        (jax.ShapeDtypeStruct((2, 8, 17, 17), jnp.float32), grouped_w))
    assert [(d.batch, d.m, d.n, d.k) for d in grouped.dots] == [(2, 2 * 8 * 8, 16, 4 * 9)]
