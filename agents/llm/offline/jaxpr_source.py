"""Write a traced jaxpr out as standalone Python source, so a candidate file can carry it.

A candidate runs in a sandbox with nothing but its own file, so the reference's math is
copied in as code: one line per equation, `jax.lax.<prim>_p.bind(...)` with the params as
literals. The jaxpr is traced with symbolic dimensions (`jax.export.symbolic_shape`), so
every shape in it is an expression of named dims; the emitted function takes those dims as
keyword arguments and a kernel binds them to its block sizes.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any

import numpy as np
from jax import lax
from jax.extend import core as jcore

INLINED = {"pjit": "jaxpr", "jit": "jaxpr", "closed_call": "call_jaxpr",
           "core_call": "call_jaxpr", "remat": "jaxpr", "checkpoint": "jaxpr",
           "custom_jvp_call": "call_jaxpr", "custom_vjp_call": "call_jaxpr",
           "custom_vjp_call_jaxpr": "fun_jaxpr"}
IDENTITY = {"stop_gradient", "optimization_barrier", "copy", "copy_p"}
ELEMENTWISE_NARY = {
    "add", "sub", "mul", "div", "max", "min", "pow", "atan2", "rem", "and", "or", "xor",
    "eq", "ne", "lt", "le", "gt", "ge", "nextafter", "select_n", "clamp",
    "shift_left", "shift_right_logical", "shift_right_arithmetic",
}
_DROPPED_PARAMS = {"sharding", "out_sharding"}


class EmitError(ValueError):
    """The jaxpr holds something that cannot be written as a standalone kernel body."""


def flatten(closed: Any) -> tuple[list[Any], list[Any], list[Any], dict[Any, Any]]:
    """(invars, eqns, outvars, consts) of a closed jaxpr with every call inlined."""
    jaxpr = closed.jaxpr
    consts = dict(zip(jaxpr.constvars, closed.consts, strict=True))
    eqns: list[Any] = []
    alias: dict[Any, Any] = {}

    def resolve(v: Any) -> Any:
        while not isinstance(v, jcore.Literal) and v in alias:
            v = alias[v]
        return v

    def walk(inner: Any, inputs: Sequence[Any], inner_consts: dict[Any, Any]) -> list[Any]:
        consts.update(inner_consts)
        for var, actual in zip(inner.invars, inputs, strict=True):
            if var is not actual:
                alias[var] = actual
        for eqn in inner.eqns:
            name = eqn.primitive.name
            args = [resolve(v) for v in eqn.invars]
            if name in INLINED and INLINED[name] in eqn.params:
                sub = eqn.params[INLINED[name]]
                sub_jaxpr = getattr(sub, "jaxpr", sub)
                sub_consts = dict(zip(sub_jaxpr.constvars, getattr(sub, "consts", ()), strict=True))
                outs = walk(sub_jaxpr, args[len(args) - len(sub_jaxpr.invars):], sub_consts)
                for var, actual in zip(eqn.outvars, outs, strict=True):
                    alias[var] = actual
            elif name in IDENTITY and len(args) == len(eqn.outvars):
                for var, actual in zip(eqn.outvars, args, strict=True):
                    alias[var] = actual
            else:
                eqns.append(eqn.replace(invars=args))
        return [resolve(v) for v in inner.outvars]

    outs = walk(jaxpr, jaxpr.invars, {})
    return list(jaxpr.invars), eqns, outs, consts


def dim_source(d: Any) -> str:
    """A dimension (int or symbolic expression) as a Python expression of the dim names."""
    if isinstance(d, int | np.integer):
        return str(int(d))
    text = str(d)
    if any(word in text for word in ("mod(", "max(", "min(", "non_negative")):
        raise EmitError(f"dimension {text} has no plain Python form")
    return f"({text})"


def literal_source(value: Any, dtype: Any) -> str:
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return f"np.bool_({bool(value)})"
    if dt.kind in "iu":
        return f"np.{dt.name}({int(value)})"
    return f"np.{dt.name}({str(float(value))!r})"


def param_source(value: Any) -> str:
    if value is None or isinstance(value, bool | str):
        return repr(value)
    if isinstance(value, int | np.integer) or type(value).__module__.endswith("shape_poly"):
        return dim_source(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, tuple | list):
        inner = ", ".join(param_source(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if isinstance(value, np.dtype) or (isinstance(value, type) and issubclass(value, np.generic)):
        return f"np.dtype({np.dtype(value).name!r})"
    if isinstance(value, enum.Enum) and hasattr(lax, type(value).__name__):
        return f"lax.{type(value).__name__}.{value.name}"
    raise EmitError(f"cannot write parameter {value!r} ({type(value).__name__}) as a literal")


class Emitter:
    """Names variables and writes equations as source lines."""

    def __init__(self, consts: dict[Any, Any] | None = None) -> None:
        self.names: dict[Any, str] = {}
        self.consts = consts or {}

    def name(self, v: Any) -> str:
        if isinstance(v, jcore.Literal):
            return literal_source(np.asarray(v.val).item(), v.aval.dtype)
        if v in self.consts:
            value = np.asarray(self.consts[v])
            if value.size != 1:
                raise EmitError(f"the reference captures a constant array of shape {value.shape}; "
                                "a kernel may not bake in tables")
            return literal_source(value.reshape(()).item(), value.dtype)
        if v not in self.names:
            self.names[v] = f"v{len(self.names)}"
        return self.names[v]

    def bind_name(self, v: Any, name: str) -> None:
        self.names[v] = name

    def line(self, eqn: Any) -> str:
        name = eqn.primitive.name
        args = [self.name(v) for v in eqn.invars]
        outs = [self.name(v) for v in eqn.outvars]
        target = ", ".join(outs) + ("," if len(outs) == 1 and eqn.primitive.multiple_results else "")
        if name == "dim_as_value":
            return f"{target} = np.int32({dim_source(eqn.params['dim'])})"
        if not hasattr(lax, f"{name}_p"):
            raise EmitError(f"primitive {name!r} has no public jax.lax form")
        params = ", ".join(f"{k}={param_source(v)}" for k, v in sorted(eqn.params.items())
                           if k not in _DROPPED_PARAMS)
        params = params + ", " if params else ""
        dropped = [k for k in eqn.params if k in _DROPPED_PARAMS]
        extra = "".join(f"{k}=None, " for k in sorted(dropped))
        if name in ELEMENTWISE_NARY and len(args) > 1:
            return f"{target} = _nary(lax.{name}_p, dict({params}{extra}), {', '.join(args)})"
        return f"{target} = lax.{name}_p.bind({', '.join(args)}, {params}{extra})".replace(", )", ")")


NARY_HELPER = '''

def _nary(prim, params, *args):
    """An n-ary elementwise primitive with scalar operands broadcast to the others' shape."""
    shape = jnp.broadcast_shapes(*(jnp.shape(a) for a in args))
    args = [jnp.broadcast_to(jnp.asarray(a), shape) if jnp.shape(a) != shape else a for a in args]
    return prim.bind(*args, **params)
'''


def function_source(
    fn_name: str,
    eqns: Sequence[Any],
    inputs: Sequence[Any],
    outputs: Sequence[Any],
    dims: Sequence[str],
    consts: dict[Any, Any] | None = None,
) -> str:
    """`def fn_name(*inputs, <dims>)` evaluating `eqns`; returns the outputs as a tuple."""
    emitter = Emitter(consts)
    for i, v in enumerate(inputs):
        emitter.bind_name(v, f"a{i}")
    body = [emitter.line(e) for e in eqns]
    results = [emitter.name(v) for v in outputs]
    arg_list = ", ".join(f"a{i}" for i in range(len(inputs)))
    dim_list = ", ".join(f"{d}=None" for d in dims)
    signature = ", ".join(p for p in (arg_list, "*" if dims else "", dim_list) if p)
    lines = [f"def {fn_name}({signature}):"]
    lines += [f"    {b}" for b in body]
    lines.append(f"    return ({', '.join(results)}{',' if len(results) == 1 else ''})")
    return "\n".join(lines)
