"""A sum over a dot's free axes, taken before the dot: the matmul becomes a matrix-vector
product, rewritten before the jaxpr is classified and written out.

`sum_j (x @ W)[i, j] = x @ (sum_j W[:, j])`. A reference that sums a product over one of
its operands' free axes (JAXBench 21k's Gemm_Divide_Sum, 23k's Matmul_Sum) makes the MXU do
the whole matmul for numbers it then adds up; summing that operand first leaves a dot of
width one, and the kernel moves the operands' bytes once with almost no arithmetic. Taken
only where the product is read by nothing else, through ops the sum passes through exactly:

* the value flows from the dot to the `reduce_sum` through a chain of `neg`, `mul` or `div`
  by a scalar, and `add` or `sub` of a value that is not broadcast along a summed axis
  (a bias; its own sum is added instead), each step read by nothing but the next;
* every summed axis is a free axis of one operand (never a batch axis), the operands are
  float32, and each operand is summed over its own summed axes in float32.

The sums run in another order than the reference's, so the rounding differs; the frozen
suite's tolerance judges the kernel as it judges any other. Anything else is left as it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agents.llm.offline.jaxpr_source import flatten

_LINEAR = {"neg", "mul", "div", "add", "sub"}


@dataclass(frozen=True)
class _Chain:
    dot: Any  # the dot_general equation
    steps: tuple[Any, ...]  # equations between it and the sum, in order
    total: Any  # the reduce_sum equation
    summed: dict[int, tuple[int, ...]]  # operand index -> its axes the sum runs over


def _scalar(v: Any) -> bool:
    return tuple(getattr(v.aval, "shape", ())) == ()


def _readers(eqns: list[Any], outvars: list[Any]) -> dict[Any, int]:
    from jax.extend import core as jcore

    count: dict[Any, int] = {}
    for v in [*(u for e in eqns for u in e.invars), *outvars]:
        if not isinstance(v, jcore.Literal):
            count[v] = count.get(v, 0) + 1
    return count


def _step_ok(eqn: Any, value: Any) -> bool:
    """Whether the sum passes through `eqn` exactly, `value` being the chain's input to it."""
    name = eqn.primitive.name
    if name == "neg":
        return True
    if len(eqn.invars) != 2:
        return False
    other = eqn.invars[1] if eqn.invars[0] is value else eqn.invars[0]
    if other is value:
        return False
    if name == "mul":
        return _scalar(other)
    if name == "div":
        return eqn.invars[0] is value and _scalar(other)
    return len(other.aval.shape) == len(value.aval.shape) and all(  # add, sub: its sum is added
        o == v or o == 1 for o, v in zip(other.aval.shape, value.aval.shape, strict=True))


def _broadcast_along(steps: tuple[Any, ...], axes: tuple[int, ...]) -> bool:
    """Whether an added value is broadcast along a summed axis (its sum would need the
    axis's length as a factor): such a chain is left as it is."""
    for step in steps:
        if step.primitive.name in ("add", "sub"):
            value = step.outvars[0]
            if any(x.aval.shape[a] == 1 and value.aval.shape[a] != 1
                   for x in step.invars for a in axes):
                return True
    return False


def _free_axes(dot: Any) -> list[tuple[int, int]]:
    """(operand, axis) for each output axis of `dot`; (-1, -1) for a batch axis."""
    (lc, rc), (lb, rb) = dot.params["dimension_numbers"]
    lhs, rhs = (len(v.aval.shape) for v in dot.invars)
    out = [(-1, -1)] * len(lb)
    out += [(0, a) for a in range(lhs) if a not in lc and a not in lb]
    out += [(1, a) for a in range(rhs) if a not in rc and a not in rb]
    return out


def _matrix_dot(dot: Any) -> bool:
    """A float32 product of two matrices: one contracted axis each, no batch axis."""
    import numpy as np

    (lc, rc), (lb, rb) = dot.params["dimension_numbers"]
    return (all(len(v.aval.shape) == 2 and np.dtype(v.aval.dtype) == np.float32
                for v in dot.invars)
            and len(lc) == len(rc) == 1 and not lb and not rb)


def _chains(eqns: list[Any], outvars: list[Any]) -> list[_Chain]:
    from jax.extend import core as jcore

    readers = _readers(eqns, outvars)
    reader_of = {v: e for e in eqns for v in e.invars
                 if not isinstance(v, jcore.Literal) and readers.get(v) == 1}
    found = []
    for eqn in eqns:
        if eqn.primitive.name != "dot_general" or not _matrix_dot(eqn):
            continue
        value, steps = eqn.outvars[0], []
        while readers.get(value) == 1 and value in reader_of:
            nxt = reader_of[value]
            if nxt.primitive.name == "reduce_sum":
                axes = _free_axes(eqn)
                picked = [axes[a] for a in nxt.params["axes"]]
                if len(picked) == 1 and not _broadcast_along(
                        tuple(steps), tuple(nxt.params["axes"])):
                    summed = {op: tuple(sorted(a for o, a in picked if o == op)) for op, _ in picked}
                    found.append(_Chain(eqn, tuple(steps), nxt, summed))
                break
            if nxt.primitive.name not in _LINEAR or not _step_ok(nxt, value):
                break
            steps.append(nxt)
            value = nxt.outvars[0]
    return found


def without_summed_dots(closed: Any) -> Any | None:
    """`closed` with every sum over a dot's free axes taken before the dot (module doc);
    None when it has none."""
    import jax.numpy as jnp
    from jax import lax

    from agents.llm.offline.windows import rewritten

    flat = flatten(closed)
    _, eqns, outvars, _ = flat
    chains = _chains(eqns, outvars)
    if not chains:
        return None
    starts = {c.dot: c for c in chains}
    ends = {c.total: c for c in chains}
    inside = {e for c in chains for e in c.steps}

    def by_equation(e: Any, read: Any) -> Any:
        if e in inside:  # carried through at the sum, on the summed dot
            return ()
        if e in ends:
            return [_through_steps(ends[e], read, jnp, lax)]
        if e in starts:  # the dot of summed operands; the steps run at the sum, where
            return [_summed_dot(starts[e], [read(v) for v in e.invars], jnp)]  # all is made
        return None

    return rewritten(closed, {}, by_equation, flat)


def _summed_dot(chain: _Chain, ins: list[Any], jnp: Any) -> Any:
    """The chain's dot with the summed operand summed over its free axis first (kept, length
    one), plus a width-one dot that gives the sum the reference's NaN and infinities.

    The reference adds the terms `a[i, k] * b[j, k]` over `j` and `k`; a float sum is NaN
    when a term is NaN or terms of both infinite signs meet, else the infinity of its
    infinite terms, else finite, in any order. Along `j`, the largest and the smallest
    `b[j, k]` are terms' factors whose products with `a[i, k]` carry every class those terms
    have (a zero among them makes one of the two zero when no sign change already gives NaN).
    Their sum, zero where finite, is added through a second dot: finite inputs get exactly
    the summed-first product, non-finite ones the reference's class."""
    (summed, axes), = chain.summed.items()
    other = 1 - summed
    (lc, rc), _ = chain.dot.params["dimension_numbers"]
    its = (lc if other == 0 else rc)[0]  # the other operand's contracted axis
    b, a = ins[summed], ins[other]
    shape = [1, 1]
    shape[its] = -1  # the extremes lie along the contracted axis
    extremes = (a * jnp.max(b, axis=axes).reshape(shape)
                + a * jnp.min(b, axis=axes).reshape(shape))
    signal = jnp.where(jnp.isfinite(extremes), 0.0, extremes).astype(a.dtype)
    total = jnp.sum(b, axis=axes, keepdims=True)
    operands = [None, None]
    operands[summed], operands[other] = total, a
    fast = chain.dot.primitive.bind(*operands, **chain.dot.params)
    operands[summed], operands[other] = jnp.ones_like(total), signal
    return fast + chain.dot.primitive.bind(*operands, **chain.dot.params)


def _through_steps(chain: _Chain, read: Any, jnp: Any, lax: Any) -> Any:
    """The chain's sum: the summed dot carried through its steps, each added value summed."""
    out_axes = tuple(chain.total.params["axes"])
    previous = chain.dot.outvars[0]
    value = read(previous)
    for step in chain.steps:
        if step.primitive.name == "neg":
            value = -value
        else:
            a, b = step.invars
            other = read(b if a is previous else a)
            if step.primitive.name in ("add", "sub"):
                other = jnp.sum(other, axis=out_axes, keepdims=True)
            left, right = (value, other) if a is previous else (other, value)
            value = step.primitive.bind(left, right, **step.params)
        previous = step.outvars[0]
    return lax.squeeze(value, out_axes).astype(chain.total.outvars[0].aval.dtype)


def described(closed: Any) -> str | None:
    """Why the body sums before a dot, for the kernel's docstring; None when it does not."""
    _, eqns, outvars, _ = flatten(closed)
    chains = _chains(eqns, outvars)
    if not chains:
        return None
    names = "; ".join(f"{'lhs' if op == 0 else 'rhs'} over its axes {list(axes)}"
                      for c in chains for op, axes in sorted(c.summed.items()))
    return (f"the dot's product is only summed over its free axes, so the sum is taken before "
            f"the dot ({names}): a dot of width one moves the same bytes with almost no MXU "
            "work (the rounding differs; the frozen suite judges it)")
