"""Pooling windows (`reduce_window_sum`) rewritten into ops Mosaic lowers, before the jaxpr
is classified and written out.

Mosaic has no rule for `reduce_window_sum`. A window over the last axis only, as wide as its
stride and unpadded (an average pool's sum: JAXBench 49k's `AvgPool1d`), is a matmul by a
0/1 pooling matrix P[i, j] = (i // window == j) built from iotas: the sum moves to the MXU
(f32 accumulation, full precision), and the leading axes are merged first so the dot is 2-D.
Any other window (overlapping, padded, dilated, over a middle axis) is left as it is, and the
emitter's refusal names it.

The rewrite re-traces the flattened jaxpr over the same symbolic input shapes, binding every
other equation as it is, so dims stay symbolic and the classes see ordinary ops.
"""

from __future__ import annotations

import math
from typing import Any

from agents.llm.offline.jaxpr_source import flatten


def poolable(params: dict[str, Any], ndim: int) -> bool:
    """A non-overlapping, unpadded, undilated window over the last axis alone."""
    window, strides = params["window_dimensions"], params["window_strides"]
    return (all(w == 1 and s == 1 for w, s in zip(window[:-1], strides[:-1], strict=True))
            and window[-1] == strides[-1] and ndim >= 1
            and all(tuple(p) == (0, 0) for p in params["padding"])
            and all(d == 1 for d in (*params["base_dilation"], *params["window_dilation"])))


def _pooled(x: Any, params: dict[str, Any]) -> Any:
    import jax.numpy as jnp
    from jax import lax

    width = params["window_dimensions"][-1]
    size = x.shape[-1]
    out = (size - width) // width + 1
    lead = x.shape[:-1]
    rows = math.prod(lead) if lead else 1
    flat = x.reshape(rows, size)
    pick = (lax.broadcasted_iota(jnp.int32, (size, out), 0) // width
            == lax.broadcasted_iota(jnp.int32, (size, out), 1)).astype(x.dtype)
    summed = lax.dot_general(flat, pick, (((1,), (0,)), ((), ())), precision=lax.Precision.HIGHEST,
                             preferred_element_type=jnp.float32)
    return summed.astype(x.dtype).reshape(*lead, out)


def without_windows(closed: Any) -> Any | None:
    """`closed` with every poolable `reduce_window_sum` as a pooling matmul; None when it has
    none, or one that is not poolable."""
    _, eqns, _, _ = flatten(closed)
    windows = [e for e in eqns if e.primitive.name == "reduce_window_sum"]
    if not windows or not all(poolable(e.params, len(e.invars[0].aval.shape)) for e in windows):
        return None
    return rewritten(closed, {"reduce_window_sum": lambda ins, params: _pooled(ins[0], params)})


def rewritten(closed: Any, rules: dict[str, Any], by_equation: Any = None,
              flat: Any = None) -> Any:
    """`closed` re-traced over its own (symbolic) input shapes, each equation whose primitive
    has a rule computed by it (`rule(inputs, params) -> output`), every other one bound as is.
    `by_equation(eqn, read)`, where given, goes first: the equation's outputs, `()` to drop
    it (nothing reads its outputs), or None for the rules above; `read(var)` is any value
    computed so far. `flat`: `flatten(closed)` where the caller has it (its equations are
    the ones `by_equation` knows)."""
    import jax
    from jax.extend import core as jcore

    invars, eqns, outvars, consts = flat if flat is not None else flatten(closed)

    def run(*args: Any) -> list[Any]:
        env: dict[Any, Any] = dict(consts)
        env.update(zip(invars, args, strict=True))

        def read(v: Any) -> Any:
            return v.val if isinstance(v, jcore.Literal) else env[v]

        for e in eqns:
            own = by_equation(e, read) if by_equation is not None else None
            if own is not None:
                if own:  # else dropped
                    env.update(zip(e.outvars, own, strict=True))
                continue
            ins = [read(v) for v in e.invars]
            if e.primitive.name in rules:
                outs = [rules[e.primitive.name](ins, e.params)]
            else:
                got = e.primitive.bind(*ins, **e.params)
                outs = list(got) if e.primitive.multiple_results else [got]
            env.update(zip(e.outvars, outs, strict=True))
        return [read(v) for v in outvars]

    specs = [jax.ShapeDtypeStruct(v.aval.shape, v.aval.dtype) for v in invars]
    return jax.make_jaxpr(run)(*specs)
