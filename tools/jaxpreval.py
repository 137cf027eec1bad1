"""A jaxpr evaluated equation by equation, its calls inlined: the loop every interpreter
here shares (the sandboxed child's interpret-mode run, the test suite's op-by-op reference).
What happens to each remaining equation is the caller's `bind`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

# Call primitives whose body is evaluated in place, and the parameter holding it.
INLINED = {
    "pjit": "jaxpr",
    "jit": "jaxpr",
    "closed_call": "call_jaxpr",
    "core_call": "call_jaxpr",
    "remat": "jaxpr",
    "checkpoint": "jaxpr",
    "custom_jvp_call": "call_jaxpr",
    "custom_vjp_call": "call_jaxpr",
    "custom_vjp_call_jaxpr": "fun_jaxpr",
}


def inner(eqn: Any) -> Any | None:
    """The closed jaxpr a call equation runs, or None (not a call this module inlines)."""
    key = INLINED.get(eqn.primitive.name)
    return eqn.params.get(key) if key else None


def evaluate(jaxpr: Any, consts: Sequence[Any], args: Sequence[Any],
             bind: Callable[[Any, list[Any]], Any]) -> list[Any]:
    """The outputs of `jaxpr`; `bind(eqn, values)` gives each non-call equation's result (a
    list where the primitive has several)."""
    from tools import jaxprivate

    core = jaxprivate.core()
    env: dict[Any, Any] = {}

    def read(v: Any) -> Any:
        return v.val if isinstance(v, core.Literal) else env[v]

    for var, value in zip(jaxpr.constvars, consts, strict=True):
        env[var] = value
    for var, value in zip(jaxpr.invars, args, strict=True):
        env[var] = value
    for eqn in jaxpr.eqns:
        values = [read(v) for v in eqn.invars]
        called = inner(eqn)
        if called is not None:
            outs = evaluate(called.jaxpr, called.consts, values, bind)
        else:
            outs = bind(eqn, values)
            if not eqn.primitive.multiple_results:
                outs = [outs]
        for var, value in zip(eqn.outvars, outs, strict=True):
            env[var] = value
    return [read(v) for v in jaxpr.outvars]
