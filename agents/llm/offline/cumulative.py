"""References that use a cumulative sum for bookkeeping a kernel class already does its own way.

A grouped matmul written with `jnp.cumsum(group_sizes)` for each group's first row and a
`lax.scan` over the groups (masked fixed-size dynamic slices, as JAXBench's megablox
reference does) computes `lax.ragged_dot`: the `grouped_matmul` kernel finds the same first
rows with a short scalar loop over the scalar-prefetched sizes (a carried sequential scan in
SMEM), so the cumsum never has to run on the vector units. Recognised by its numbers, on the
tuning inputs and again with every group half as large (rows past the groups stay zero), so a
reference that only agrees for full groups is not taken. The float64 model is compared with
the reference within its output dtype's rounding (a bf16 output is good to 2**-8).
"""

from __future__ import annotations

from typing import Any

import numpy as np

RTOL, ATOL = 2e-3, 2e-4  # as `patterns`, widened to the output dtype's own rounding


def _ragged_dot(lhs: np.ndarray, rhs: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    out = np.zeros((lhs.shape[0], rhs.shape[2]))
    start = 0
    for g, size in enumerate(sizes.tolist()):
        out[start:start + size] = lhs[start:start + size].astype(np.float64) @ rhs[g].astype(np.float64)
        start += size
    return out


def _agrees(reference: Any, inputs: tuple[Any, ...]) -> bool:
    import jax
    import jax.numpy as jnp

    outs = jax.tree.leaves(reference(*inputs))
    if len(outs) != 1 or not jnp.issubdtype(outs[0].dtype, jnp.floating):
        return False
    want = np.asarray(outs[0], np.float64)
    lhs, rhs, sizes = (np.asarray(x) for x in inputs)
    got = _ragged_dot(lhs, rhs, sizes)
    rounding = float(jnp.finfo(outs[0].dtype).eps)
    scale = float(np.max(np.abs(got))) or 1.0
    return got.shape == want.shape and bool(np.allclose(
        got, want, rtol=max(RTOL, 2 * rounding), atol=max(ATOL, 2 * rounding * scale)))


def match_grouped_offsets(reference: Any, inputs: tuple[Any, ...],
                          primitives: set[str]) -> dict[str, Any] | None:
    """`grouped_matmul`'s detail when a cumsum-and-scan reference computes a ragged dot of
    lhs (M, K), rhs (G, K, N) and integer group sizes (G,)."""
    if "cumsum" not in primitives or "ragged_dot_general" in primitives or len(inputs) != 3:
        return None
    lhs, rhs, sizes = inputs
    if (lhs.ndim != 2 or rhs.ndim != 3 or sizes.ndim != 1 or rhs.shape[0] != sizes.shape[0]
            or rhs.shape[1] != lhs.shape[1] or not np.issubdtype(np.dtype(sizes.dtype), np.integer)):
        return None
    if not _agrees(reference, inputs) or not _agrees(reference, (lhs, rhs, sizes // 2)):
        return None
    return {"lhs": 0, "rhs": 1, "group_sizes": 2}
