"""The shared equation-by-equation loop: calls are inlined, results are the jitted ones, and
a value is let go once the last equation reading it has run (the op-by-op reference of a
large task holds what is live at once, not every intermediate)."""

from __future__ import annotations

import gc
import weakref
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from tools.jaxpreval import evaluate


def _numpy_bind(seen: list[Any], alive_at: list[list[bool]]):
    def bind(eqn: Any, values: list[Any]) -> Any:
        gc.collect()
        alive_at.append([ref() is not None for ref in seen])
        out = np.asarray(eqn.primitive.bind(*values, **eqn.primitive.get_bind_params(eqn.params)))
        seen.append(weakref.ref(out))
        return out
    return bind


def test_values_are_released_after_their_last_reader_and_calls_are_inlined() -> None:
    inner = jax.jit(lambda a: jnp.sin(a) * 2.0)

    def f(x):
        a = x + 1.0  # read once, by the next line
        b = jnp.exp(a)
        c = inner(b)  # a jitted call: its sin and mul run here one by one
        return c - x, b

    x = jnp.linspace(0.0, 1.0, 16, dtype=jnp.float32)
    closed = jax.make_jaxpr(f)(x)
    seen: list[Any] = []
    alive_at: list[list[bool]] = []
    got = evaluate(closed.jaxpr, closed.consts, [x], _numpy_bind(seen, alive_at))
    want = jax.jit(f)(x)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-6)
    assert len(alive_at) == 5  # add, exp, sin, mul, sub: the call was inlined
    assert alive_at[2] == [False, True]  # at sin: `a` is gone, `b` (an output) is kept
    assert alive_at[4][1] and not alive_at[4][2]  # at sub: `b` still held, sin's result gone
