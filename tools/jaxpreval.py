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
    list where the primitive has several). Each value is let go after the last equation that
    reads it, so the peak is what is live at once, not every intermediate of the program."""
    from tools import jaxprivate

    core = jaxprivate.core()
    env: dict[Any, Any] = {}
    kept = {v for v in jaxpr.outvars if not isinstance(v, core.Literal)}
    last: dict[Any, int] = {}
    for i, eqn in enumerate(jaxpr.eqns):
        for v in eqn.invars:
            if not isinstance(v, core.Literal):
                last[v] = i

    def read(v: Any) -> Any:
        return v.val if isinstance(v, core.Literal) else env[v]

    for var, value in zip(jaxpr.constvars, consts, strict=True):
        env[var] = value
    for var, value in zip(jaxpr.invars, args, strict=True):
        env[var] = value
    for i, eqn in enumerate(jaxpr.eqns):
        values = [read(v) for v in eqn.invars]
        for v in eqn.invars:
            if not isinstance(v, core.Literal) and last.get(v) == i and v not in kept:
                env.pop(v, None)
        called = inner(eqn)
        if called is not None:
            outs = evaluate(called.jaxpr, called.consts, values, bind)
        else:
            outs = bind(eqn, values)
            if not eqn.primitive.multiple_results:
                outs = [outs]
        del values
        for var, value in zip(eqn.outvars, outs, strict=True):
            if var in last or var in kept:  # a result nothing reads is not held
                env[var] = value
    return [read(v) for v in jaxpr.outvars]
