"""Kernel bodies keep layouts Mosaic handles: a transpose is never made through padded unit
axes, and a batched matrix-vector product runs on the vector unit in its operand's own
layout. Each rule computes what the traced equations do, and the VMEM count of a body
counts what is written, not what was traced."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from agents.llm.offline.generic_axes import live_values
from agents.llm.offline.jaxpr_source import flatten, function_source


def _weighted_experts(a: Any, w: Any) -> Any:
    """An MoE's weighting as XLA traces it: expert outputs kept (n, e, s), viewed as
    (s, n, e) through a unit axis, then `einsum("sne,sn->se")` as a batched dot."""
    n, e, s = a.shape
    viewed = jnp.transpose(a.reshape(n, e, 1, s), (2, 3, 0, 1)).reshape(s, n, e)
    return lax.dot_general(jnp.transpose(viewed, (0, 2, 1)), w.reshape(s, n, 1),
                           (((2,), (1,)), ((0,), (0,))), preferred_element_type=jnp.float32)


def _body(fn: Any, *avals: Any, kernel: bool = True) -> tuple[str, Any]:
    invars, eqns, outvars, consts = flatten(jax.make_jaxpr(fn)(*avals))
    return function_source("_body", eqns, invars, outvars, [], consts, kernel=kernel), eqns


def _call(source: str, *inputs: Any) -> np.ndarray:
    namespace: dict[str, Any] = {"jax": jax, "jnp": jnp, "np": np, "lax": lax}
    exec(compile(source, "body.py", "exec"), namespace)
    (out,) = namespace["_body"](*inputs)
    return np.asarray(out)


def test_the_weighting_is_a_sum_in_the_experts_layout_and_computes_the_einsum() -> None:
    a = jax.random.normal(jax.random.key(0), (8, 256, 64), jnp.bfloat16)
    w = jax.random.uniform(jax.random.key(1), (64, 8), jnp.float32)
    source, _ = _body(_weighted_experts, a, w)
    assert "jnp.transpose(a, (2, 0, 1))" in source, source
    assert "dot_general" not in source and "jnp.sum(" in source
    assert ", 1, " not in source.split("def _body")[1].split("jnp.sum")[0], source
    want = np.einsum("nes,sn->se", np.asarray(a, np.float64), np.asarray(w, np.float64))
    got = _call(source, a, w)
    assert got.shape == (64, 256, 1) and got.dtype == np.float32
    np.testing.assert_allclose(got[..., 0], want, rtol=1e-5, atol=1e-5)


def test_outside_a_kernel_the_equations_are_written_as_traced() -> None:
    a = jnp.ones((8, 256, 64), jnp.float32)
    w = jnp.ones((64, 8), jnp.float32)
    source, _ = _body(_weighted_experts, a, w, kernel=False)
    assert "dot_general" in source and "jnp.sum(" not in source


def test_a_matmul_with_columns_stays_on_the_mxu() -> None:
    def batched(x: Any, y: Any) -> Any:
        return lax.dot_general(x, y, (((2,), (1,)), ((0,), (0,))))

    source, _ = _body(batched, jnp.ones((4, 16, 32)), jnp.ones((4, 32, 8)))
    assert "dot_general" in source and "jnp.sum(" not in source


def test_a_dot_of_integers_is_not_moved_to_floats() -> None:
    def batched(x: Any, y: Any) -> Any:
        return lax.dot_general(x, y, (((2,), (1,)), ((0,), (0,))))

    source, _ = _body(batched, jnp.ones((4, 16, 32), jnp.int32), jnp.ones((4, 32, 1), jnp.int32))
    assert "dot_general" in source


def test_the_vmem_count_leaves_out_the_padded_views_the_body_never_makes() -> None:
    a = jax.ShapeDtypeStruct((8, 512, 256), jnp.bfloat16)
    w = jax.ShapeDtypeStruct((256, 8), jnp.float32)
    _, eqns = _body(_weighted_experts, a, w)
    values = live_values(eqns, eqns[-1].outvars, {}, lambda s: (None,) * len(s))
    shapes = [(tuple(v[0]), v[1]) for v in values]
    assert not [s for s, _ in shapes if s in ((8, 512, 1, 256), (256, 512, 8))], shapes
    assert ((256, 8, 512), 4) in shapes  # the float32 product the sum reads
