"""The JAX Pallas TPU sparse guide's two kernels, rebuilt, with its benchmark's prefetch data.

The guide ('Scalar Prefetch and Block-Sparse Computation', data in
`data/pallas_sparse_guide_v5e.json`) times two scalar-prefetch kernels at 16384^3 bf16 on
v5e. They are rebuilt here from its description (grid, blocks, index maps, conditions; the
code is this project's) and priced by the model on the same prefetch values the guide's
benchmark used, so what the model evaluates is what ran:

- `dsd`: block-sparse @ dense. A has 512^3 blocks kept with probability 0.1, drawn as the
  guide draws them (`jax.random.bernoulli` on the first half of `split(key(0))`, with the
  threefry bits of the jax of its time: `jax_threefry_partitionable` off, its default until
  jax 0.5), stored as a list of non-zero blocks grouped by row; grid (N/512, blocks); the
  output is aliased to a zeros operand (blocks never visited stay zero) passed in by the
  caller, so XLA copies it first.
- `masked_output`: dense @ dense with a lower-triangular block-sparse output mask, blocks
  512 x 512 x 1024; a block whose mask is all zero skips its matmuls (`pl.when` on the
  prefetched block mask), and its index maps point at the next non-zero block so the
  pipeline fetches nothing new while skipping. Prefetch maps as the guide's `sparsify_mask`
  builds them (a reverse scan recording the next non-zero block and its mask type).

Lowered with abstract operands (an 8 GiB problem costs a lowering and the model); every
figure is simulated.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

SIZE = 16384


def dsd_blocks(size: int = SIZE, block: int = 512, density: float = 0.1,
               ) -> tuple[np.ndarray, np.ndarray]:
    """(row, column) block indices of A's non-zero blocks, grouped by row, as the guide draws
    them (`jnp.where` of the Bernoulli block mask)."""
    import jax

    with jax.threefry_partitionable(False):
        mask_key, _ = jax.random.split(jax.random.key(0))
        mask = np.asarray(jax.random.bernoulli(mask_key, p=density,
                                               shape=(size // block, size // block)))
    rows, cols = np.nonzero(mask)
    return rows.astype(np.int32), cols.astype(np.int32)


def _dsd_kernel(rows_ref, cols_ref, x_ref, y_ref, _zeros_ref, o_ref, acc_ref, *, n: int):
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    del cols_ref
    b = pl.program_id(1)
    starts_row = (b == 0) | (rows_ref[b] != rows_ref[jnp.maximum(b - 1, 0)])

    @pl.when(starts_row)
    def _zero():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(x_ref[0, :, :], y_ref[...], preferred_element_type=jnp.float32)
    # As in the guide: at the last block this reads one past the end of the row list (the
    # model cannot evaluate an out-of-range read, so it counts both sides of this branch).
    ends_row = (b == n - 1) | (rows_ref[b] != rows_ref[jnp.minimum(b + 1, n)])

    @pl.when(ends_row)
    def _store():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def dsd(n_blocks: int, size: int = SIZE, block: int = 512) -> Callable[..., Any]:
    """The guide's DSD kernel over `n_blocks` non-zero blocks: f(rows, cols, blocks, y, zeros)."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=2,
        grid=(size // block, n_blocks),
        in_specs=[pl.BlockSpec((1, block, block), lambda j, b, rows, cols: (b, 0, 0)),
                  pl.BlockSpec((block, block), lambda j, b, rows, cols: (cols[b], j)),
                  pl.BlockSpec((block, block), lambda j, b, rows, cols: (rows[b], j))],
        out_specs=pl.BlockSpec((block, block), lambda j, b, rows, cols: (rows[b], j)),
        scratch_shapes=[pltpu.VMEM((block, block), jnp.float32)],
    )
    return pl.pallas_call(functools.partial(_dsd_kernel, n=n_blocks), grid_spec=spec,
                          out_shape=jax.ShapeDtypeStruct((size, size), jnp.bfloat16),
                          input_output_aliases={4: 0})


def tril_prefetch_maps(blocks: int) -> tuple[np.ndarray, ...]:
    """(block_mask, mask type, next i, next j) for a lower-triangular mask of `blocks`^2
    blocks: per block, whether any element is set and, scanning in reverse row-major order
    as the guide's `sparsify_mask` does, the type (0 diagonal, 1 full: the order the scan
    meets them) and position of the next non-zero block at or after it."""
    block_mask = np.tril(np.ones((blocks, blocks), np.int32))
    kind = np.zeros_like(block_mask)
    next_i = np.zeros_like(block_mask)
    next_j = np.zeros_like(block_mask)
    cur = (0, blocks - 1, blocks - 1)
    for i in range(blocks - 1, -1, -1):
        for j in range(blocks - 1, -1, -1):
            if block_mask[i, j]:
                cur = (0 if i == j else 1, i, j)
            kind[i, j], next_i[i, j], next_j[i, j] = cur
    return block_mask, kind, next_i, next_j


def _masked_kernel(block_mask_ref, kind_ref, next_i_ref, next_j_ref, x_ref, y_ref, mask_ref,
                   o_ref, acc_ref, *, k_steps: int):
    import jax.numpy as jnp
    from jax.experimental import pallas as pl

    del kind_ref, next_i_ref, next_j_ref
    i, j, k = pl.program_id(0), pl.program_id(1), pl.program_id(2)

    @pl.when(k == 0)
    def _zero():
        o_ref[...] = jnp.zeros_like(o_ref)
        acc_ref[...] = jnp.zeros_like(acc_ref)

    @pl.when(block_mask_ref[i, j] != 0)
    def _compute():
        acc_ref[...] += jnp.dot(x_ref[...], y_ref[...], preferred_element_type=jnp.float32)

        @pl.when(k == k_steps - 1)
        def _store():
            o_ref[...] = (mask_ref[0, ...] * acc_ref[...]).astype(o_ref.dtype)


def masked_output(size: int = SIZE, bm: int = 512, bn: int = 512,
                  bk: int = 1024) -> Callable[..., Any]:
    """The guide's output-masked matmul: f(block_mask, kind, next_i, next_j, x, y, mask_types)."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    def k_fetch(i, j, k, block_mask):  # skipped blocks keep k at 0: nothing new to fetch
        return (block_mask[i, j] != 0).astype(jnp.int32) * k

    spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=4,
        grid=(size // bm, size // bn, size // bk),
        in_specs=[
            pl.BlockSpec((bm, bk), lambda i, j, k, m, t, ni, nj: (ni[i, j], k_fetch(i, j, k, m))),
            pl.BlockSpec((bk, bn), lambda i, j, k, m, t, ni, nj: (k_fetch(i, j, k, m), nj[i, j])),
            pl.BlockSpec((1, bm, bn), lambda i, j, k, m, t, ni, nj: (t[i, j], 0, 0)),
        ],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, k, *_: (i, j)),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
    )
    return pl.pallas_call(functools.partial(_masked_kernel, k_steps=size // bk), grid_spec=spec,
                          out_shape=jax.ShapeDtypeStruct((size, size), jnp.bfloat16))


def kernel_seconds(variant: str, chip_name: str = "v5e", *,
                   with_prefetch_values: bool = True) -> float:
    """Simulated latency of one of the guide's kernels ("dsd", "masked_output") at 16384^3,
    on the benchmark's prefetch values (or blind to them, for comparison)."""
    import jax
    import jax.numpy as jnp

    from tools.lowered.compile_check import lower_for_tpu
    from tools.lowered.mosaic import parse_lowered
    from tools.performance.chips import get_chip
    from tools.performance.roofline import estimate_program

    def spec(shape: tuple[int, ...], dtype: Any) -> Any:
        return jax.ShapeDtypeStruct(shape, dtype)

    square = spec((SIZE, SIZE), jnp.bfloat16)
    if variant == "dsd":
        rows, cols = dsd_blocks()
        n = len(rows)
        fn = dsd(n)
        args = [spec((n,), jnp.int32), spec((n,), jnp.int32),
                spec((n, 512, 512), jnp.bfloat16), square, square]
        values: list[Any] = [rows, cols, None, None, None]
    elif variant == "masked_output":
        maps = tril_prefetch_maps(SIZE // 512)
        fn = masked_output()
        args = [*(spec(m.shape, jnp.int32) for m in maps), square, square,
                spec((2, 512, 512), jnp.int32)]
        values = [*maps, None, None, None]
    else:
        raise ValueError(f"{variant=} is not one of the sparse guide's kernels")
    text = lower_for_tpu(jax.jit(fn).trace(*args), chip=chip_name)
    program = parse_lowered(text)
    chip = get_chip(chip_name)
    return float(estimate_program(program, chip, values if with_prefetch_values else None)
                 .latency_s)


__all__ = ["SIZE", "dsd", "dsd_blocks", "kernel_seconds", "masked_output",
           "tril_prefetch_maps"]
