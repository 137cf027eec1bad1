"""Dots with several batch dimensions, rewritten as one batch dimension for Mosaic.

Mosaic's matmul takes at most one (leading) batch dimension, and `jnp.einsum("bhqd,bhkd->bhqk")`
binds a `dot_general` with two. A traced jaxpr is re-traced with every such dot written as
the form Mosaic takes: each operand's batch axes moved to the front (no transpose when they
are there already; the other axes keep their order, so a q k^T stays a contraction over
both last axes), merged into one by a reshape, one batched matmul, and the result's batch
axis split back. Every other equation is bound again unchanged, so the numbers are the
same: only the layout of the batched products moves.
"""

from __future__ import annotations

from typing import Any

from agents.llm.offline.jaxpr_source import flatten


def _several_batch_dims(eqn: Any) -> bool:
    return eqn.primitive.name == "dot_general" and len(eqn.params["dimension_numbers"][1][0]) > 1


def needs_merge(closed: Any) -> bool:
    """Whether the jaxpr (calls inlined) holds a dot with more than one batch dimension."""
    return any(_several_batch_dims(e) for e in flatten(closed)[1])


def _moved(x: Any, order: list[int]) -> Any:
    from jax import lax

    return x if order == list(range(x.ndim)) else lax.transpose(x, tuple(order))


def merged_dot(lhs: Any, rhs: Any, *, dimension_numbers: Any, precision: Any = None,
               preferred_element_type: Any = None, **_: Any) -> Any:
    """`lax.dot_general(lhs, rhs, dimension_numbers, ...)` through one merged batch axis."""
    from jax import lax

    (lc, rc), (lb, rb) = (tuple(map(tuple, pair)) for pair in dimension_numbers)
    l_order = [*lb, *(d for d in range(lhs.ndim) if d not in lb)]
    r_order = [*rb, *(d for d in range(rhs.ndim) if d not in rb)]
    left, right = _moved(lhs, l_order), _moved(rhs, r_order)
    batch = left.shape[:len(lb)]
    left = left.reshape((-1, *left.shape[len(lb):]))
    right = right.reshape((-1, *right.shape[len(rb):]))
    contract = (tuple(l_order.index(d) - len(lb) + 1 for d in lc),
                tuple(r_order.index(d) - len(rb) + 1 for d in rc))
    out = lax.dot_general(left, right, (contract, ((0,), (0,))), precision=precision,
                          preferred_element_type=preferred_element_type)
    return out.reshape((*batch, *out.shape[1:]))


def merge_batch_dims(closed: Any) -> Any:
    """The closed jaxpr re-traced with every several-batch-dimension dot merged (`merged_dot`);
    the same jaxpr when it has none."""
    from jax import lax

    from agents.llm.offline.windows import rewritten

    if not needs_merge(closed):
        return closed

    def dot(ins: list[Any], params: dict[str, Any]) -> Any:
        if len(params["dimension_numbers"][1][0]) > 1:
            return merged_dot(*ins, **params)
        return lax.dot_general_p.bind(*ins, **params)

    return rewritten(closed, {"dot_general": dot})
