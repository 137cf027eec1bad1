"""The source the offline author writes for `lax.top_k` on the last axis inside a kernel.

Mosaic has no lowering for `top_k`, so a kernel body computes it from ops it has. Two
ways, both exact (the order of `lax.top_k`: largest first, ties to the lowest index, and,
on floats, its total order, where +0 ranks above -0):

- the tournament (`TOPK_GROUP` columns per group, the default on floats): the block is
  put with its rows along lanes (one transpose in VMEM, the layout XLA:TPU gives its own
  TopK), so each row is one lane and every step below is a select between whole vregs.
  Floats become int32 keys that order as the floats do. Each run of `group` columns keeps
  its largest key (one op per element); k rounds over those group maxima pick the best k
  groups (the k largest elements all lie in them: a group holding one of them has a
  maximum ranked at least as high, and fewer than k groups can rank above it); those k
  groups are gathered (a select per element and group picked) and k rounds over their
  k x group keys give the values and indices. About 23 VPU ops per element at k=8 and
  group 8, against about 70 for the rounds below.
- k rounds of max over the columns not yet taken (floats by the same keys): any shape and
  dtype; the fallback where
  the tournament's layout does not fit (rows not a multiple of 128, a width not a multiple
  of the group, an integer dtype, more picks than groups).

`TOPK_GROUP` is the `reduction_layout` lever's knob (:func:`with_group`): 8, 16 or 32
columns per group, or 0 for the rounds everywhere.
"""

from __future__ import annotations

import re

GROUPS = (8, 16, 32)
DEFAULT_GROUP = 8

HELPER = '''TOPK_GROUP = 8  # columns per group of the top-k tournament; 0: k rounds of max everywhere
TOPK_LANES = 128


def _top_k_last(x, k):
    """lax.top_k on the last axis: the largest first, ties to the lowest index. A tournament
    on the vector unit where the block fits its layout, else k rounds of max."""
    fits = (x.ndim == 2 and TOPK_GROUP and x.shape[0] % TOPK_LANES == 0
            and x.shape[1] % TOPK_GROUP == 0 and k <= min(x.shape[1] // TOPK_GROUP, TOPK_LANES)
            and jnp.issubdtype(x.dtype, jnp.floating) and jnp.finfo(x.dtype).bits <= 32)
    if fits:
        return _top_k_tournament(x, k, TOPK_GROUP)
    return _top_k_rounds(x, k)


def _order_keys(bits):
    """int32 keys that order as the floats whose bits they are (-0 below +0); self-inverse."""
    return bits ^ ((bits >> 31) & 0x7FFFFFFF)


def _lanes_to_rows(a, k):
    """(sublane-padded k, rows) -> (rows, k): one whole (128, rows) transpose in VMEM."""
    filler = jnp.zeros((TOPK_LANES - a.shape[0], a.shape[1]), a.dtype)
    return jnp.concatenate([a, filler], axis=0).T[:, :k]


def _top_k_tournament(x, k, group):
    """Rows along lanes; the best of each group of columns; k rounds pick the best k groups
    (the k largest lie in them); k rounds over the gathered groups give the answer."""
    rows, width = x.shape
    groups = width // group
    k_pad = -(-k // 8) * 8
    low = jnp.iinfo(jnp.int32).min  # below every key of an ordered float
    keys = _order_keys(lax.bitcast_convert_type(x.astype(jnp.float32), jnp.int32)).T
    runs = keys.reshape(groups, group, rows)
    group_best = jnp.max(runs, axis=1)
    group_id = lax.broadcasted_iota(jnp.int32, (groups, rows), 0)
    slot = lax.broadcasted_iota(jnp.int32, (k_pad, rows), 0)
    picked = jnp.full((k_pad, rows), -1, jnp.int32)
    for j in range(k):
        best = jnp.max(group_best, axis=0, keepdims=True)
        first = jnp.min(jnp.where(group_best == best, group_id, groups), axis=0, keepdims=True)
        picked = jnp.where(slot == j, first, picked)
        group_best = jnp.where(group_id == first, low, group_best)
    candidates = jnp.full((k_pad, group, rows), low, jnp.int32)
    for g in range(groups):
        candidates = jnp.where((picked == g)[:, None, :], runs[g][None], candidates)
    position = lax.broadcasted_iota(jnp.int32, (k_pad, group, rows), 1)
    columns = (picked[:, None, :] * group + position).reshape(k_pad * group, rows)
    candidates = candidates.reshape(k_pad * group, rows)
    top_keys = jnp.zeros((k_pad, rows), jnp.int32)
    top_columns = jnp.zeros((k_pad, rows), jnp.int32)
    for j in range(k):
        best = jnp.max(candidates, axis=0, keepdims=True)
        first = jnp.min(jnp.where(candidates == best, columns, width), axis=0, keepdims=True)
        top_keys = jnp.where(slot == j, best, top_keys)
        top_columns = jnp.where(slot == j, first, top_columns)
        candidates = jnp.where(columns == first, low, candidates)
    values = lax.bitcast_convert_type(_order_keys(top_keys), jnp.float32)
    return (_lanes_to_rows(values, k).astype(x.dtype), _lanes_to_rows(top_columns, k))


def _top_k_rounds(x, k):
    """k rounds of max over the columns not yet taken: the largest first, ties to the lowest
    index (floats by their order keys, so +0 ranks above -0)."""
    if jnp.issubdtype(x.dtype, jnp.floating) and jnp.finfo(x.dtype).bits <= 32:
        keys = _order_keys(lax.bitcast_convert_type(x.astype(jnp.float32), jnp.int32))
        top_keys, indices = _top_k_rounds(keys, k)
        values = lax.bitcast_convert_type(_order_keys(top_keys), jnp.float32)
        return values.astype(x.dtype), indices
    width = x.shape[-1]
    cols = lax.broadcasted_iota(jnp.int32, x.shape, x.ndim - 1)
    out_shape = (*x.shape[:-1], k)
    slot = lax.broadcasted_iota(jnp.int32, out_shape, x.ndim - 1)
    low = -jnp.inf if jnp.issubdtype(x.dtype, jnp.floating) else jnp.iinfo(x.dtype).min
    values = jnp.zeros(out_shape, x.dtype)
    indices = jnp.zeros(out_shape, jnp.int32)
    taken = jnp.zeros(x.shape, jnp.bool_)
    for j in range(k):
        best = jnp.max(jnp.where(taken, jnp.full_like(x, low), x), axis=-1, keepdims=True)
        hit = jnp.logical_and(jnp.logical_not(taken), x == best)
        first = jnp.min(jnp.where(hit, cols, width), axis=-1, keepdims=True)
        values = jnp.where(slot == j, best, values)
        indices = jnp.where(slot == j, first, indices)
        taken = jnp.logical_or(taken, cols == first)
    return values, indices


'''

_GROUP_LINE = re.compile(r"^TOPK_GROUP = \d+", re.M)


def has_top_k(source: str) -> bool:
    """Whether a kernel body holds the top-k helper."""
    return bool(_GROUP_LINE.search(source or ""))


def group_of(source: str) -> int | None:
    """The body's `TOPK_GROUP`, or None where it holds no top-k."""
    m = _GROUP_LINE.search(source or "")
    return int(m.group(0).rsplit(" ", 1)[1]) if m else None


def with_group(source: str, group: int) -> str:
    """The body with `TOPK_GROUP = group` (0: the rounds everywhere)."""
    if group and (group % 8 or group < 8):
        raise ValueError(f"{group=} must be 0 or a multiple of 8 (whole sublane tiles)")
    if not has_top_k(source):
        raise ValueError("the body holds no top-k helper")
    return _GROUP_LINE.sub(f"TOPK_GROUP = {int(group)}", source, count=1)


__all__ = ["DEFAULT_GROUP", "GROUPS", "HELPER", "group_of", "has_top_k", "with_group"]
