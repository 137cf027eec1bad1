"""Kernel classes recognised by their numbers, not by their ops: attention and its kin.

A reference may write attention in many ways (einsums, reshapes for grouped heads, a gather
of cache pages, a `lax.scan` over the sequence). The jaxpr says which inputs play which
part (their dtypes, ranks and the axes they share); a float64 model of the class, run on
the tuning inputs, must then give the reference's output, or the class is not claimed.

- `attention`: softmax(q k^T * scale) v, optionally causal; grouped-query when q has a
  multiple of k's heads (query head h reads key/value head h // (q_heads / kv_heads)).
- `paged_attention`: one query token per sequence over key/value pages gathered through a
  block table, the first `lengths[b]` cached tokens only.
- `ragged_paged_attention`: mixed prefill and decode: each active sequence's run of query
  rows (from cumulative query lengths) attends causally to its pages, whose keys and values
  share one array (K at even combined heads, V at odd); rows of no active sequence are 0.
- `linear_attention`: causal linear attention, o_t = q_t sum_{s<=t} k_s v_s^T.
- `grouped_matmul`: `ragged_dot`, consecutive row groups of lhs against one rhs each.
"""

from __future__ import annotations

from typing import Any

import numpy as np

RTOL, ATOL = 2e-3, 2e-4  # the float64 model against the reference in its own precision


def _close(got: np.ndarray, want: np.ndarray) -> bool:
    return got.shape == want.shape and bool(np.allclose(got, want, rtol=RTOL, atol=ATOL))


def _outputs(reference: Any, inputs: tuple[Any, ...]) -> list[np.ndarray]:
    import jax

    return [np.asarray(o, np.float64) for o in jax.tree.leaves(reference(*inputs))]


def _repeat_heads(q: np.ndarray, kv: np.ndarray) -> np.ndarray | None:
    """`kv` with each head repeated for its query heads; None when the heads do not group."""
    if q.shape[:-3] != kv.shape[:-3] or kv.ndim != q.ndim:
        return None
    if q.ndim < 4 or kv.shape[-3] == q.shape[-3]:
        return kv if q.shape[:-2] == kv.shape[:-2] else None
    if q.shape[-3] % kv.shape[-3]:
        return None
    return np.repeat(kv, q.shape[-3] // kv.shape[-3], axis=-3)


def softmax_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float,
                      causal: bool, bias: np.ndarray | None = None) -> np.ndarray:
    s = np.matmul(q, np.swapaxes(k, -1, -2)) * scale
    if bias is not None:
        s = s + bias
    if causal:
        n_q, n_k = s.shape[-2:]
        s = np.where(np.arange(n_q)[:, None] >= np.arange(n_k)[None, :], s, -np.inf)
    s = s - s.max(-1, keepdims=True)
    p = np.exp(s)
    p = p / p.sum(-1, keepdims=True)
    return np.matmul(p, v)


def _misfit(got: np.ndarray, want: np.ndarray) -> float:
    """Largest error relative to the output's largest magnitude; inf on a shape mismatch."""
    if got.shape != want.shape:
        return float("inf")
    return float(np.max(np.abs(got - want)) / max(float(np.max(np.abs(want))), 1e-30))


def _tolerance(dtype: Any) -> float:
    """How far a reference computed in `dtype` may sit from the float64 model: softmax, the
    probabilities and their product rounded to 16 bits lose about 2**-6 of the largest output."""
    return 2e-3 if np.dtype(dtype).itemsize >= 4 else 4e-2


def _to_bhsd(x: np.ndarray, layout: str) -> np.ndarray:
    return np.swapaxes(x, 1, 2) if layout == "bshd" else x


def _bias_fits(bias: np.ndarray, q: np.ndarray, k: np.ndarray) -> bool:
    """Additive score bias: trailing (q_len, kv_len), leading axes a suffix of q's heads."""
    lead = q.shape[:-2]
    return (bias.ndim >= 2 and bias.shape[-2:] == (q.shape[-2], k.shape[-2])
            and bias.ndim - 2 <= len(lead) and bias.shape[:-2] == lead[len(lead) - bias.ndim + 2:])


def _assignments(arrays: list[np.ndarray], hint: tuple[int, int, int] | None
                 ) -> list[tuple[int, int, int, int | None, str]]:
    """(q, k, v, bias, layout) whose shapes make attention, the jaxpr's hint first."""
    import itertools

    import jax.numpy as jnp

    floats = [i for i, x in enumerate(arrays) if jnp.issubdtype(x.dtype, jnp.floating)]  # bf16 too
    found = []
    for q, k, v in itertools.permutations(floats, 3):
        if arrays[k].shape != arrays[v].shape or arrays[q].ndim not in (3, 4):
            continue
        rest = [i for i in floats if i not in (q, k, v)]
        for layout in ("bhsd", "bshd") if arrays[q].ndim == 4 else ("bhsd",):
            qs, ks = (_to_bhsd(arrays[i], layout) for i in (q, k))
            if ks.ndim != qs.ndim or qs.shape[-1] != ks.shape[-1] or _repeat_heads(qs, ks) is None:
                continue
            biases = [b for b in rest if _bias_fits(arrays[b], qs, ks)]
            if len(rest) - len(biases) > 0 or len(biases) > 1:
                continue  # an input the model would leave unread
            found.append((q, k, v, biases[0] if biases else None, layout))
    found.sort(key=lambda a: (a[:3] != hint, a[:3] != (0, 1, 2)))
    return found


def match_attention(reference: Any, inputs: tuple[Any, ...], hint: tuple[int, int, int] | None,
                    causal_hint: bool) -> dict[str, Any] | None:
    """Which inputs are q, k, v (and an additive score bias), their layout ((batch, heads,
    seq, depth) or (batch, seq, heads, depth)), the scale, causality and head grouping that
    reproduce the reference, or None. Compared on the first batch entry, in float64."""
    import jax

    arrays = [np.asarray(x) for x in inputs]
    outs = jax.tree.leaves(reference(*inputs))
    if len(outs) != 1:
        return None
    want, tol = np.asarray(outs[0], np.float64), _tolerance(outs[0].dtype)
    for q_i, k_i, v_i, b_i, layout in _assignments(arrays, hint):
        q, k, v = (_to_bhsd(arrays[i][:1].astype(np.float64), layout) for i in (q_i, k_i, v_i))
        k_full, v_full = _repeat_heads(q, k), _repeat_heads(q, v)
        if k_full is None or v_full is None or want.shape != arrays[q_i].shape[:-1] + v.shape[-1:]:
            continue
        bias = None if b_i is None else arrays[b_i].astype(np.float64)
        if bias is not None and bias.ndim == q.ndim:
            bias = bias[:1]
        target = want[:1]
        fits = []
        for causal in (causal_hint, not causal_hint):
            for scale_kind in ("rsqrt_d", "one"):
                scale = q.shape[-1] ** -0.5 if scale_kind == "rsqrt_d" else 1.0
                got = _to_bhsd(softmax_attention(q, k_full, v_full, scale, causal, bias), layout)
                fits.append((_misfit(got, target), causal, scale_kind))
        error, causal, scale_kind = min(fits, key=lambda f: f[0])
        if error <= tol:
            grouped = q.ndim == 4 and k.shape[-3] != q.shape[-3]
            return {"q": q_i, "k": k_i, "v": v_i, "bias": b_i, "layout": layout, "causal": causal,
                    "scale": scale_kind, "kv_heads": int(k.shape[-3]) if grouped else None}
    return None


def _paged_model(q: np.ndarray, k_pages: np.ndarray, v_pages: np.ndarray, tables: np.ndarray,
                 lengths: np.ndarray, scale: float) -> np.ndarray:
    heads, _, page, depth = k_pages.shape
    batch, pages = tables.shape
    k = k_pages[:, tables].reshape(heads, batch, pages * page, depth)
    v = v_pages[:, tables].reshape(heads, batch, pages * page, depth)
    s = np.einsum("bhd,hbtd->bht", q, k) * scale
    cached = np.arange(pages * page)[None, None, :] < lengths[:, None, None]
    s = np.where(cached, s, -np.inf)
    s = s - s.max(-1, keepdims=True)
    p = np.exp(s)
    p = p / p.sum(-1, keepdims=True)
    return np.einsum("bht,hbtd->bhd", p, v)


def match_paged_attention(reference: Any, inputs: tuple[Any, ...]) -> dict[str, Any] | None:
    """q (B, H, D); k and v pages (H, P, S, D); int block table (B, n); int lengths (B,)."""
    arrays = [np.asarray(x) for x in inputs]
    floats = [i for i, x in enumerate(arrays) if np.issubdtype(x.dtype, np.floating)]
    ints = [i for i, x in enumerate(arrays) if np.issubdtype(x.dtype, np.integer)]
    if len(floats) != 3 or len(ints) != 2:
        return None
    qi = next((i for i in floats if arrays[i].ndim == 3), None)
    pages = [i for i in floats if arrays[i].ndim == 4]
    ti = next((i for i in ints if arrays[i].ndim == 2), None)
    li = next((i for i in ints if arrays[i].ndim == 1), None)
    if qi is None or len(pages) != 2 or ti is None or li is None:
        return None
    ki, vi = pages
    q, k, v, tables, lengths = (arrays[i] for i in (qi, ki, vi, ti, li))
    batch, heads, depth = q.shape
    if (k.shape != v.shape or k.shape[0] != heads or k.shape[-1] != depth
            or tables.shape[0] != batch or lengths.shape != (batch,)):
        return None
    (want,) = _outputs(reference, inputs)[:1]
    for scale_kind in ("rsqrt_d", "one"):
        scale = depth ** -0.5 if scale_kind == "rsqrt_d" else 1.0
        got = _paged_model(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64),
                           tables, lengths, scale)
        if _close(got, want):
            return {"q": qi, "k": ki, "v": vi, "tables": ti, "lengths": li, "scale": scale_kind}
    return None


def match_ragged_paged_attention(reference: Any, inputs: tuple[Any, ...]) -> dict[str, Any] | None:
    """Decode attention over pages laid out (pages, page_size, kv_heads, depth): queries
    (tokens, heads, depth), each sequence's query the row its start (`cu_q_lens[b]`) points
    at; an int block table (B, n), int lengths (B,) and int query starts (B + 1,); query head
    h reads key/value head h // (heads / kv_heads)."""
    import jax.numpy as jnp

    arrays = [np.asarray(x) for x in inputs]
    floats = [i for i, x in enumerate(arrays) if jnp.issubdtype(x.dtype, jnp.floating)]
    ints = [i for i, x in enumerate(arrays) if np.issubdtype(x.dtype, np.integer)]
    if len(floats) != 3 or len(ints) != 3 or len(arrays) != 6:
        return None
    qi = next((i for i in floats if arrays[i].ndim == 3), None)
    pages = [i for i in floats if arrays[i].ndim == 4]
    ti = next((i for i in ints if arrays[i].ndim == 2), None)
    if qi is None or len(pages) != 2 or ti is None:
        return None
    batch = arrays[ti].shape[0]
    li = next((i for i in ints if arrays[i].shape == (batch,)), None)
    si = next((i for i in ints if arrays[i].shape == (batch + 1,)), None)
    ki, vi = pages
    q, k, v = (arrays[i].astype(np.float64) for i in (qi, ki, vi))
    if li is None or si is None or k.shape != v.shape or k.shape[-1] != q.shape[-1]:
        return None
    heads, kv_heads, page = q.shape[1], k.shape[2], k.shape[1]
    if heads % kv_heads:
        return None
    tables, lengths, starts = arrays[ti], arrays[li], arrays[si]
    if np.any(starts[:batch] < 0) or np.any(starts[:batch] >= q.shape[0]):
        return None
    want, tol = np.asarray(reference(*inputs), np.float64), _tolerance(arrays[qi].dtype)
    keys = np.repeat(k[tables].reshape(batch, -1, kv_heads, q.shape[-1]), heads // kv_heads, axis=2)
    values = np.repeat(v[tables].reshape(batch, -1, kv_heads, q.shape[-1]), heads // kv_heads, axis=2)
    rows = q[starts[:batch]]  # (B, heads, depth)
    fits = []
    for scale_kind in ("rsqrt_d", "one"):
        scale = q.shape[-1] ** -0.5 if scale_kind == "rsqrt_d" else 1.0
        s = np.einsum("bhd,bshd->bhs", rows, keys) * scale
        s = np.where(np.arange(keys.shape[1])[None, None, :] < lengths[:, None, None], s, -np.inf)
        p = np.exp(s - s.max(-1, keepdims=True))
        got = np.einsum("bhs,bshd->bhd", p / p.sum(-1, keepdims=True), values)
        fits.append((_misfit(got, want), scale_kind))
    error, scale_kind = min(fits)
    if error > tol:
        return None
    del page
    return {"q": qi, "k": ki, "v": vi, "tables": ti, "lengths": li, "starts": si,
            "scale": scale_kind, "layout": "pshd"}


def _mixed_model(q: np.ndarray, kv: np.ndarray, tables: np.ndarray, lengths: np.ndarray,
                 starts: np.ndarray, count: int, scale: float) -> np.ndarray:
    """Sequence b < count: query rows starts[b]..starts[b + 1] - 1 against its first
    lengths[b] cached tokens, row r seeing key j <= lengths[b] - q_len + r (the query rows
    are the sequence's last ones); every other row 0."""
    tokens, heads, depth = q.shape
    page, kv_heads = kv.shape[1], kv.shape[2] // 2
    out = np.zeros((tokens, heads, depth))
    for b in range(count):
        start, end = int(starts[b]), int(starts[b + 1])
        length = min(int(lengths[b]), tables.shape[1] * page)
        if end <= start or length <= 0:
            continue
        pages = kv[tables[b]].reshape(-1, 2 * kv_heads, depth)[:length]
        k, v = (np.repeat(pages[:, i::2], heads // kv_heads, axis=1).transpose(1, 0, 2)
                for i in (0, 1))  # (heads, length, depth)
        s = np.matmul(q[start:end].transpose(1, 0, 2), k.transpose(0, 2, 1)) * scale
        frontier = length - (end - start) + np.arange(end - start)
        s = np.where(np.arange(length)[None, :] <= frontier[:, None], s, -np.inf)
        top = np.max(s, axis=-1, keepdims=True)
        p = np.exp(s - np.where(np.isfinite(top), top, 0.0))
        p = p / np.maximum(p.sum(-1, keepdims=True), 1e-300)
        out[start:end] = np.matmul(p, v).transpose(1, 0, 2)
    return out


def _mixed_roles(arrays: list[np.ndarray]) -> list[dict[str, int]]:
    """(q, kv, tables, lengths, starts, count) by shape: q (tokens, heads, depth), kv (pages,
    page_size, 2 x kv_heads, depth), int tables (B, n), lengths (B,), starts (B + 1,) and
    the active count (1,); both orders where lengths and count are alike (B = 1)."""
    import itertools

    import jax.numpy as jnp

    floats = [i for i, x in enumerate(arrays) if jnp.issubdtype(x.dtype, jnp.floating)]
    ints = [i for i, x in enumerate(arrays) if np.issubdtype(x.dtype, np.integer)]
    if len(floats) != 2 or len(ints) != 4 or len(arrays) != 6:
        return []
    qi = next((i for i in floats if arrays[i].ndim == 3), None)
    ki = next((i for i in floats if arrays[i].ndim == 4), None)
    ti = next((i for i in ints if arrays[i].ndim == 2), None)
    if qi is None or ki is None or ti is None:
        return []
    (_, heads, depth), kv = arrays[qi].shape, arrays[ki].shape
    combined = kv[2]
    if kv[3] != depth or combined % 2 or heads % (combined // 2):
        return []
    batch = arrays[ti].shape[0]
    found = []
    for li, si, ci in itertools.permutations([i for i in ints if i != ti]):
        if (arrays[li].shape, arrays[si].shape, arrays[ci].shape) == ((batch,), (batch + 1,), (1,)):
            found.append({"q": qi, "kv": ki, "tables": ti, "lengths": li, "starts": si, "count": ci})
    return found


def match_mixed_paged_attention(reference: Any, inputs: tuple[Any, ...]) -> dict[str, Any] | None:
    """Ragged paged attention of mixed prefill and decode sequences (`_mixed_model`): which
    inputs play which part, and the scale, or None. The integer inputs must describe sequences
    in the buffers (ordered starts, known pages) for the model to be run at all."""
    arrays = [np.asarray(x) for x in inputs]
    roles = _mixed_roles(arrays)
    if not roles:
        return None
    want, tol = np.asarray(reference(*inputs), np.float64), _tolerance(arrays[roles[0]["q"]].dtype)
    q, kv = (arrays[roles[0][k]].astype(np.float64) for k in ("q", "kv"))
    tables = arrays[roles[0]["tables"]]
    if want.shape != q.shape or np.any(tables < 0) or np.any(tables >= kv.shape[0]):
        return None
    for role in roles:
        lengths, starts, count = (arrays[role[k]] for k in ("lengths", "starts", "count"))
        active = int(count[0])
        if not 0 <= active <= tables.shape[0] or np.any(np.diff(starts[:active + 1]) < 0) or (
                active and (starts[0] < 0 or starts[active] > q.shape[0])):
            continue
        fits = []
        for scale_kind in ("rsqrt_d", "one"):
            scale = q.shape[-1] ** -0.5 if scale_kind == "rsqrt_d" else 1.0
            got = _mixed_model(q, kv, tables, lengths, starts, active, scale)
            fits.append((_misfit(got, want), scale_kind))
        error, scale_kind = min(fits)
        if error <= tol:
            return {**role, "scale": scale_kind}
    return None


def match_linear_attention(reference: Any, inputs: tuple[Any, ...]) -> dict[str, Any] | None:
    """Three same-shaped float inputs (..., S, D), in the order q, k, v: the output is
    tril(q k^T) v (causal, no normalisation), with or without a 1/sqrt(D) scale."""
    arrays = [np.asarray(x) for x in inputs]
    if len(arrays) != 3 or any(not np.issubdtype(x.dtype, np.floating) for x in arrays):
        return None
    q, k, v = (x.astype(np.float64) for x in arrays)
    if q.shape != k.shape or q.shape[:-1] != v.shape[:-1] or q.ndim not in (3, 4):
        return None
    (want,) = _outputs(reference, inputs)[:1]
    seq = q.shape[-2]
    s = np.einsum("...qd,...kd->...qk", q, k) * np.tril(np.ones((seq, seq)))
    base = np.einsum("...qk,...kd->...qd", s, v)
    for scale_kind, scale in (("one", 1.0), ("rsqrt_d", q.shape[-1] ** -0.5)):
        if _close(base * scale, want):
            return {"q": 0, "k": 1, "v": 2, "scale": scale_kind}
    return None


def match_grouped_matmul(reference: Any, inputs: tuple[Any, ...],
                         primitives: set[str]) -> dict[str, Any] | None:
    """lhs (M, K), rhs (G, K, N), int group sizes (G,): consecutive row groups of lhs times
    their rhs, rows past the groups zero (`lax.ragged_dot`)."""
    if "ragged_dot_general" not in primitives or len(inputs) != 3:
        return None
    arrays = [np.asarray(x) for x in inputs]
    lhs, rhs, sizes = arrays
    if (lhs.ndim != 2 or rhs.ndim != 3 or sizes.ndim != 1 or rhs.shape[0] != sizes.shape[0]
            or rhs.shape[1] != lhs.shape[1] or not np.issubdtype(sizes.dtype, np.integer)):
        return None
    (want,) = _outputs(reference, inputs)[:1]
    got = np.zeros((lhs.shape[0], rhs.shape[2]))
    start = 0
    for g, size in enumerate(sizes.tolist()):
        got[start:start + size] = lhs[start:start + size].astype(np.float64) @ rhs[g].astype(np.float64)
        start += size
    return {"lhs": 0, "rhs": 1, "group_sizes": 2} if _close(got, want) else None
