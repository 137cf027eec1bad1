"""Kernels written to game the cost model are priced honestly or declared unsound."""

from __future__ import annotations

import importlib.util
import itertools
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

from tests.perf_kernels import good, lower
from tools.lowered.mosaic import parse_lowered
from tools.performance.chips import get_chip
from tools.performance.roofline import estimate_kernel

KERNELS = Path(__file__).parent / "perf_kernels"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, KERNELS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_unsigned_compare_hides_nothing() -> None:
    """`k <u 0xFFFFFFFF` always holds: every matmul and block fetch of the honest twin is
    counted (a signed reading would see `k < -1`, never true, and price it for free)."""
    gaming = _load("unsigned_compare_gaming")
    a = jax.ShapeDtypeStruct((1024, 1024), jnp.bfloat16)
    (k,) = parse_lowered(lower(gaming.build(), a, a)).kernels
    (twin,) = parse_lowered(lower(good.matmul, a, a)).kernels
    chip = get_chip("v6e")
    est, honest = estimate_kernel(k, chip), estimate_kernel(twin, chip)
    assert est.unsound == []
    assert est.matmul_flops == honest.matmul_flops == 2 * 1024**3
    assert est.fetches == honest.fetches
    assert est.latency_s >= honest.latency_s * 0.999


def test_serial_manual_dma_ranks_below_pipelined() -> None:
    """start(); wait(); compute in a loop exposes every transfer; double-buffering hides them."""
    from tests.perf_kernels import dma

    x = jax.ShapeDtypeStruct((4096, 1024), jnp.float32)
    chip = get_chip("v6e")
    est = {}
    for pipelined in (False, True):
        (k,) = parse_lowered(lower(lambda v, p=pipelined: dma.scale_tanh(v, pipelined=p), x)).kernels
        est[pipelined] = estimate_kernel(k, chip)
    serial, piped = est[False], est[True]
    from tools.performance.roofline import EXPOSED

    assert EXPOSED in serial.caveats
    assert serial.latency_s > piped.latency_s
    assert serial.unsound == piped.unsound == []


def _masked_inputs(density_rows: list[list[int]]):
    import numpy as np

    mask = np.array(density_rows, np.int32)
    prev = np.zeros_like(mask)
    for i, row in enumerate(mask):
        last = 0
        for k, bit in enumerate(row):
            last = k if bit else last
            prev[i, k] = last
    return mask.ravel(), prev.ravel()


def test_scalar_prefetch_values_price_the_masked_matmul() -> None:
    """With the case's mask, skipped blocks are neither multiplied nor fetched; without it,
    both branches count and every block is fetched every step (never cheaper)."""
    from tests.perf_kernels import sparse

    mask, prev = _masked_inputs([[1, 0, 0, 0], [1, 1, 0, 0], [0, 0, 0, 1], [1, 1, 1, 1]])
    a = jax.ShapeDtypeStruct((512, 512), jnp.bfloat16)
    text = lower(sparse.masked_matmul, jnp.asarray(mask), jnp.asarray(prev), a, a)
    program = parse_lowered(text)
    (k,) = program.kernels
    assert k.prefetch_sources == (0, 1) and k.prefetch_read_only
    chip = get_chip("v6e")
    blind = estimate_kernel(k, chip)
    seen = estimate_kernel(k, chip, [mask, prev])
    n_j = 4
    assert seen.matmul_flops == int(mask.sum()) * n_j * 2 * 128**3
    assert blind.matmul_flops == 64 * 2 * 128**3
    assert seen.latency_s < blind.latency_s
    # A's block (i, prev[i, k]) is fetched when it differs from the previous step's.
    order = [(i, j, kk) for i in range(4) for j in range(n_j) for kk in range(4)]
    blocks = [(i, int(prev[i * 4 + kk])) for i, _, kk in order]
    want = 1 + sum(x != y for x, y in itertools.pairwise(blocks))
    assert seen.fetches[0] == want < blind.fetches[0] == 64
    assert seen.prefetch_bytes == 2 * 16 * 4
    from tools.performance.roofline import estimate_program

    whole = estimate_program(program, chip, [mask, prev, None, None])
    assert whole.kernels[0].matmul_flops == seen.matmul_flops


def test_prefetch_operands_a_wrapper_lays_out_are_known_and_computed_ones_are_not() -> None:
    """A table the wrapper flattens, transposes, slices or widens moves values the model can
    follow from the case's inputs (priced as if passed as they are); an operand it computes
    (a cumulative sum) stays unknown, so every block counts, never fewer."""
    import numpy as np

    from tests.perf_kernels import sparse
    from tools.performance.roofline import estimate_program

    mask, prev = _masked_inputs([[1, 0, 0, 0], [1, 1, 0, 0], [0, 0, 0, 1], [1, 1, 1, 1]])
    mask_2d = mask.reshape(4, 4)
    prev_wide = np.concatenate([prev.reshape(4, 4).T, np.zeros((4, 2), np.int32)], 1).astype(np.int16)

    def laid_out(m2, pw, a, b):
        return sparse.masked_matmul(m2.reshape(-1), pw[:, :4].T.reshape(-1).astype(jnp.int32), a, b)

    def computed(m2, pw, a, b):
        return sparse.masked_matmul(m2.reshape(-1), jnp.cumsum(pw[:, :4].reshape(-1)).astype(jnp.int32), a, b)

    a = jax.ShapeDtypeStruct((512, 512), jnp.bfloat16)
    chip = get_chip("v6e")
    direct = estimate_kernel(parse_lowered(lower(sparse.masked_matmul, jnp.asarray(mask), jnp.asarray(prev), a, a)).kernels[0],
                             chip, [mask, prev])
    program = parse_lowered(lower(laid_out, jnp.asarray(mask_2d), jnp.asarray(prev_wide), a, a))
    (k,) = program.kernels
    assert k.prefetch_sources == (0, 1)
    assert [[kind for kind, _ in steps] for steps in k.prefetch_steps] == [
        ["reshape"], ["slice", "transpose", "reshape", "convert"]]
    seen = estimate_program(program, chip, [mask_2d, prev_wide, None, None]).kernels[0]
    assert (seen.matmul_flops, seen.fetches) == (direct.matmul_flops, direct.fetches)
    program = parse_lowered(lower(computed, jnp.asarray(mask_2d), jnp.asarray(prev_wide), a, a))
    assert program.kernels[0].prefetch_sources[1] is None
    blind = estimate_program(program, chip, [mask_2d, prev_wide, None, None]).kernels[0]
    assert blind.matmul_flops == 64 * 2 * 128**3 > seen.matmul_flops


def test_causal_attention_is_priced_on_the_blocks_it_runs() -> None:
    """Conditions and clamped index maps on program ids are evaluated per step: 10 of the
    16 (q, kv) blocks are multiplied, 9 of 16 k/v blocks fetched (not all 16)."""
    from tests.perf_kernels import causal

    q = jax.ShapeDtypeStruct((512, 128), jnp.bfloat16)
    (k,) = parse_lowered(lower(causal.causal_attention, q, q, q)).kernels
    est = estimate_kernel(k, get_chip("v6e"))
    assert est.unsound == [] and est.caveats == []
    assert est.matmul_flops == 10 * 2 * (2 * 128**3)  # QK^T and PV per computed block
    assert est.fetches == [4, 9, 9, 4]
    assert [runs for *runs, _ in est.branch_runs] == [[4, 12], [10, 6], [4, 12]]
    assert all(known for *_, known in est.branch_runs)


def test_run_scoped_regions_are_counted_in_place() -> None:
    """`pl.run_scoped` lowers to a `tpu.region`: its body runs once per step, not unpriced."""
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    def kernel(x_ref, o_ref):
        def body(tmp):
            tmp[...] = x_ref[...] * 2.0
            o_ref[...] = jnp.exp(tmp[...])

        pl.run_scoped(body, pltpu.VMEM((8, 128), jnp.float32))

    spec = pl.BlockSpec((8, 128), lambda i: (i, 0))

    def call(x):
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              grid=(4,), in_specs=[spec], out_specs=spec)(x)

    (k,) = parse_lowered(lower(call, jax.ShapeDtypeStruct((32, 128), jnp.float32))).kernels
    est = estimate_kernel(k, get_chip("v6e"))
    assert k.unmodelled_ops == () and est.unsound == []
    assert est.transcendentals == 4 * 8 * 128


def test_an_aliased_argument_the_caller_keeps_is_copied_first() -> None:
    """`input_output_aliases` on an argument that was not donated: XLA copies it before the
    kernel writes into it; a donated one is written in place."""
    from jax.experimental import pallas as pl

    from tools.lowered.compile_check import lower_for_tpu
    from tools.performance.roofline import KERNEL_LAUNCH_S, estimate_program

    def kernel(x_ref, z_ref, o_ref):
        o_ref[...] = x_ref[...] + z_ref[...]

    def call(x, z):
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(x.shape, x.dtype),
                              input_output_aliases={1: 0})(x, z)

    x = jax.ShapeDtypeStruct((512, 256), jnp.float32)
    chip = get_chip("v6e")
    kept = parse_lowered(lower(call, x, x))
    donated = parse_lowered(lower_for_tpu(jax.jit(call, donate_argnums=1).trace(x, x)))
    assert kept.kernels[0].output_operand_aliases == ((0, 1),)
    assert kept.alias_copies == [(kept.kernels[0].name, 512 * 256 * 4)]
    assert donated.alias_copies == []
    extra = estimate_program(kept, chip).latency_s - estimate_program(donated, chip).latency_s
    assert extra == pytest.approx(KERNEL_LAUNCH_S + 2 * 512 * 256 * 4 / chip.hbm_bytes_per_s)
