"""The jaxpr equations a person would write by hand: `jnp`/`lax` functions and operators.

`jaxpr_source` writes a reference's math into a candidate file, and the winner is what a
kernel engineer reads and maintains. Each equation is written as the public function (or
operator) that binds exactly the primitive it came from, with the same params, so the
written body computes bit for bit what the bind form did: `jnp.square(x)`, `x / y`,
`jnp.sum(x, axis=1)`, `lax.rsqrt(x)`, `jnp.where(mask, x, y)`, `x.astype(jnp.bfloat16)`.
Where the function would compute something else (a `jnp.sum` of bf16 accumulates in f32;
`x / y` on integers is a true division; `jnp.power` picks its own primitive) the `lax` form
is written instead, and a primitive with no public function keeps its bind (the caller's
fallback). Intermediates are named by what they hold (`sq`, `total`, `rsqrt`, `mask`), each
name once, never one the kernel file or Python already uses.

A literal beside an array of its dtype is written as a plain Python number (`x + 1e-06`):
JAX gives it the array's dtype, so nothing is promoted; alone, or in a `lax` call, it keeps
its explicit numpy type.
"""

from __future__ import annotations

import builtins
import keyword
import re
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
from jax.extend import core as jcore

INFIX = {"add": "+", "sub": "-", "mul": "*", "eq": "==", "ne": "!=", "lt": "<", "le": "<=",
         "gt": ">", "ge": ">=", "and": "&", "or": "|", "xor": "^"}
JNP_BINARY = {"max": "jnp.maximum", "min": "jnp.minimum", "atan2": "jnp.arctan2"}
LAX_BINARY = {"pow", "rem", "nextafter", "shift_left", "shift_right_logical",
              "shift_right_arithmetic"}
JNP_UNARY = {"exp": "jnp.exp", "log": "jnp.log", "tanh": "jnp.tanh", "sqrt": "jnp.sqrt",
             "square": "jnp.square", "abs": "jnp.abs", "sin": "jnp.sin", "cos": "jnp.cos",
             "tan": "jnp.tan", "floor": "jnp.floor", "ceil": "jnp.ceil", "log1p": "jnp.log1p",
             "expm1": "jnp.expm1", "exp2": "jnp.exp2", "cbrt": "jnp.cbrt",
             "sinh": "jnp.sinh", "cosh": "jnp.cosh", "asin": "jnp.arcsin",
             "acos": "jnp.arccos", "atan": "jnp.arctan", "asinh": "jnp.arcsinh",
             "acosh": "jnp.arccosh", "atanh": "jnp.arctanh"}
LAX_UNARY = {"rsqrt", "logistic", "erf", "erfc", "erf_inv", "sign", "lgamma", "digamma",
             "is_finite", "population_count", "clz", "real", "imag", "conj"}
REDUCERS = {"reduce_sum": ("jnp.sum", "lax.add"), "reduce_max": ("jnp.max", "lax.max"),
            "reduce_min": ("jnp.min", "lax.min"), "reduce_prod": ("jnp.prod", "lax.mul")}
# jnp.sum/prod accumulate narrow floats in f32 and widen small ints: only these dtypes keep
# the primitive's own arithmetic (max and min are exact in every dtype)
_WIDE = {"float32", "float64", "int32", "int64", "uint32", "uint64"}

NAMES = {"add": "plus", "sub": "diff", "mul": "prod", "div": "quot", "max": "hi", "min": "lo",
         "neg": "neg", "integer_pow": "pow", "square": "sq", "reduce_sum": "total",
         "reduce_max": "peak", "reduce_min": "least", "reduce_prod": "product",
         "broadcast_in_dim": "wide", "convert_element_type": "cast", "select_n": "picked",
         "eq": "mask", "ne": "mask", "lt": "mask", "le": "mask", "gt": "mask", "ge": "mask",
         "and": "both", "or": "either", "not": "inverse", "dot_general": "dot",
         "transpose": "transposed", "reshape": "reshaped", "squeeze": "squeezed",
         "concatenate": "joined", "slice": "part", "dynamic_slice": "part", "iota": "iota",
         "logistic": "sigmoid", "abs": "magnitude", "dim_as_value": "size",
         "argmax": "argmax", "argmin": "argmin", "clamp": "clamped", "pad": "padded"}
# names a body may not take: the kernel file's modules and helpers, Python's own
RESERVED = ({"jnp", "lax", "np", "jax", "pl", "pltpu", "functools", "math", "dims", "refs"}
            | set(dir(builtins)) | set(keyword.kwlist))


class Namer:
    """One readable name per value: by op, numbered from the second use on."""

    def __init__(self, reserved: set[str]) -> None:
        self.used = set(RESERVED) | reserved
        self.count: dict[str, int] = {}

    def fresh(self, base: str) -> str:
        base = base if base.isidentifier() else "value"
        n = self.count.get(base, 0)
        while True:
            name = base if n == 0 else f"{base}_{n}"
            n += 1
            if name not in self.used:
                self.count[base] = n
                self.used.add(name)
                return name

    def for_op(self, primitive: str) -> str:
        return self.fresh(NAMES.get(primitive, primitive))


def python_literal(value: Any, dtype: Any) -> str | None:
    """A plain Python number that JAX turns into exactly ``value`` in ``dtype`` (None: none)."""
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return repr(bool(value))
    if dt.kind in "iu":
        return repr(int(value))
    if dt.kind != "f":
        return None
    typed = np.asarray(value, dt)
    if np.isnan(typed):
        return "jnp.nan"
    if np.isinf(typed):
        return "jnp.inf" if typed > 0 else "-jnp.inf"
    for text in (str(typed), repr(float(typed))):  # the shortest that round-trips first
        try:
            if np.asarray(float(text), dt).tobytes() == typed.tobytes():
                return text
        except (ValueError, OverflowError):
            continue
    return None


def dtype_name(dtype: Any) -> str:
    """`jnp.float32`, `jnp.bfloat16`: the dtype as a kernel engineer writes it."""
    return f"jnp.{np.dtype(dtype).name}"


class Operands(Protocol):
    """What `expression` needs of the emitter: a value's source, and a literal's value."""

    consts: dict[Any, Any]

    def name(self, v: Any) -> str: ...

    def constant_of(self, v: Any) -> Any: ...


def expression(eqn: Any, emitter: Operands, dims: Callable[[Any], str]) -> str | None:
    """The right-hand side a person would write for ``eqn`` (None: no public form that binds
    the same primitive with the same params; the caller writes the bind)."""
    prim = eqn.primitive.name
    params = eqn.params
    ins = eqn.invars
    out = eqn.outvars[0].aval if eqn.outvars else None
    typed_of = emitter.name
    named = [not (isinstance(v, jcore.Literal) or v in emitter.consts) for v in ins]

    def operand(i: int, others: range | list[int]) -> str:
        """Plain Python literals only beside a named array of the same dtype."""
        if named[i] or not any(named[j] for j in others if j != i):
            return typed_of(ins[i])
        if any(np.dtype(ins[j].aval.dtype) != np.dtype(ins[i].aval.dtype)
               for j in others if j != i and named[j]):
            return typed_of(ins[i])
        literal = python_literal(emitter.constant_of(ins[i]), ins[i].aval.dtype)
        return literal if literal is not None else typed_of(ins[i])

    pair = list(range(len(ins)))
    if prim in INFIX and len(ins) == 2 and not _extra(params, {"out_dtype"}):
        return f"{operand(0, pair)} {INFIX[prim]} {operand(1, pair)}"
    if prim == "div" and len(ins) == 2 and np.dtype(out.dtype).kind in "fc":
        return f"{operand(0, pair)} / {operand(1, pair)}"
    if prim in JNP_BINARY and len(ins) == 2 and not params:
        return f"{JNP_BINARY[prim]}({operand(0, pair)}, {operand(1, pair)})"
    if (prim in LAX_BINARY or prim == "div") and len(ins) == 2 and not params:
        return f"lax.{prim}({typed_of(ins[0])}, {typed_of(ins[1])})"
    if prim == "select_n" and len(ins) == 3 and np.dtype(ins[0].aval.dtype) == np.bool_:
        cases = [1, 2]
        return (f"jnp.where({typed_of(ins[0])}, {operand(2, cases)}, "
                f"{operand(1, cases)})")
    if prim == "select_n" or prim == "clamp":
        return f"lax.{prim}({', '.join(typed_of(v) for v in ins)})"
    if prim == "neg":
        return f"-{typed_of(ins[0])}"
    if prim == "not":
        return f"~{typed_of(ins[0])}"
    if prim in JNP_UNARY and not _extra(params, {"accuracy"}):
        return f"{JNP_UNARY[prim]}({typed_of(ins[0])})"
    if prim in LAX_UNARY and not _extra(params, {"accuracy"}):
        return f"lax.{prim}({typed_of(ins[0])})"
    if prim == "integer_pow" and not _extra(params, {"y"}):
        return f"lax.integer_pow({typed_of(ins[0])}, {int(params['y'])})"
    if prim == "convert_element_type" and not params.get("weak_type") and not _extra(
            params, {"new_dtype", "weak_type", "sharding"}):
        return f"{typed_of(ins[0])}.astype({dtype_name(params['new_dtype'])})"
    if prim in REDUCERS and not _extra(params, {"axes", "out_sharding"}):
        axes = _axes(params["axes"])
        jnp_fn, monoid = REDUCERS[prim]
        dtype = np.dtype(ins[0].aval.dtype)
        if prim in ("reduce_max", "reduce_min") or dtype.name in _WIDE:
            return f"{jnp_fn}({typed_of(ins[0])}, axis={axes})"
        init = {"reduce_sum": 0, "reduce_prod": 1}[prim]
        return (f"lax.reduce({typed_of(ins[0])}, {dtype_name(dtype)}({init}), {monoid}, "
                f"{tuple(int(a) for a in params['axes'])!r})")
    if prim in ("argmax", "argmin") and not _extra(params, {"axes", "index_dtype"}):
        (axis,) = params["axes"]
        return (f"lax.{prim}({typed_of(ins[0])}, {int(axis)}, "
                f"{dtype_name(params['index_dtype'])})")
    if prim == "broadcast_in_dim" and not _extra(
            params, {"shape", "broadcast_dimensions", "sharding"}):
        if not named[0] and not ins[0].aval.shape:  # a literal filling an array
            literal = python_literal(emitter.constant_of(ins[0]), ins[0].aval.dtype)
            return (f"jnp.full({_shape(out.shape, dims)}, {literal or typed_of(ins[0])}, "
                    f"{dtype_name(out.dtype)})")
        return _broadcast(typed_of(ins[0]), ins[0].aval.shape, out.shape,
                          tuple(params["broadcast_dimensions"]), dims)
    if prim == "reshape" and not _extra(params, {"new_sizes", "dimensions", "sharding"}):
        return f"{typed_of(ins[0])}.reshape({_shape(params['new_sizes'], dims)})"
    if prim == "transpose" and not _extra(params, {"permutation"}):
        perm = tuple(int(p) for p in params["permutation"])
        return (f"{typed_of(ins[0])}.T" if perm == (1, 0)
                else f"jnp.transpose({typed_of(ins[0])}, {perm!r})")
    if prim == "rev" and set(params) <= {"dimensions"}:
        return f"jnp.flip({typed_of(ins[0])}, {tuple(int(d) for d in params['dimensions'])!r})"
    if prim == "pad" and set(params) <= {"padding_config"} and not named[1]:
        fill = python_literal(emitter.constant_of(ins[1]), ins[1].aval.dtype)
        config = tuple(tuple(int(x) for x in c) for c in params["padding_config"])
        if fill is not None:
            return f"lax.pad({typed_of(ins[0])}, {dtype_name(ins[0].aval.dtype)}({fill}), {config!r})"
    if prim == "squeeze" and set(params) <= {"dimensions"}:
        return f"lax.squeeze({typed_of(ins[0])}, {tuple(int(d) for d in params['dimensions'])!r})"
    if prim == "concatenate" and not _extra(params, {"dimension"}):
        return (f"jnp.concatenate([{', '.join(typed_of(v) for v in ins)}], "
                f"axis={int(params['dimension'])})")
    if prim == "iota" and not _extra(params, {"dtype", "shape", "dimension", "sharding"}):
        return (f"lax.broadcasted_iota({dtype_name(params['dtype'])}, "
                f"{_shape(params['shape'], dims)}, {int(params['dimension'])})")
    if prim == "slice" and not _extra(params, {"start_indices", "limit_indices", "strides"}):
        strides = params.get("strides")
        return (f"lax.slice({typed_of(ins[0])}, {_shape(params['start_indices'], dims)}, "
                f"{_shape(params['limit_indices'], dims)}"
                + (f", {_shape(strides, dims)})" if strides is not None else ")"))
    if prim == "dot_general":
        return _dot(eqn, typed_of)
    return None


def _dot(eqn: Any, typed_of: Callable[[Any], str]) -> str | None:
    params = dict(eqn.params)
    if params.get("precision") is not None or _extra(
            params, {"dimension_numbers", "precision", "preferred_element_type", "out_sharding"}):
        return None
    (lc, rc), (lb, rb) = params["dimension_numbers"]
    a, b = (typed_of(v) for v in eqn.invars)
    pet = params.get("preferred_element_type")
    tail = "" if pet is None else f", preferred_element_type={dtype_name(pet)}"
    if (len(eqn.invars[0].aval.shape) == 2 and len(eqn.invars[1].aval.shape) == 2
            and tuple(lc) == (1,) and tuple(rc) == (0,) and not lb and not rb):
        return f"jnp.dot({a}, {b}{tail})"
    numbers = ((tuple(int(i) for i in lc), tuple(int(i) for i in rc)),
               (tuple(int(i) for i in lb), tuple(int(i) for i in rb)))
    return f"lax.dot_general({a}, {b}, {numbers!r}{tail})"


def _broadcast(x: str, shape: tuple[Any, ...], out: tuple[Any, ...], kept: tuple[int, ...],
               dims: Callable[[Any], str]) -> str:
    """`x[:, None]` where only unit axes are added, `jnp.broadcast_to` where numpy's trailing
    alignment says the same, else `lax.broadcast_in_dim`."""
    rank = len(out)
    added = [i for i in range(rank) if i not in kept]
    if all(str(out[i]) == "1" for i in added) and all(
            str(shape[j]) == str(out[i]) for j, i in enumerate(kept)) and added:
        index = ", ".join("None" if i in added else ":" for i in range(rank))
        return f"lax.expand_dims({x}, {tuple(added)!r})" if not kept else f"{x}[{index}]"
    if kept == tuple(range(rank - len(shape), rank)):
        return f"jnp.broadcast_to({x}, {_shape(out, dims)})"
    return f"lax.broadcast_in_dim({x}, {_shape(out, dims)}, {kept!r})"


def _shape(values: Any, dims: Callable[[Any], str]) -> str:
    parts = [dims(v) for v in values]
    return f"({parts[0]},)" if len(parts) == 1 else f"({', '.join(parts)})"


def _axes(axes: Any) -> str:
    axes = tuple(int(a) for a in axes)
    return str(axes[0]) if len(axes) == 1 else repr(axes)


_DEFAULT_NONE = {"accuracy", "sharding", "out_sharding", "out_dtype", "dimensions"}


def _extra(params: dict[str, Any], handled: set[str]) -> bool:
    """Params the form does not write (beyond ``handled``), or one it leaves at its default
    (None: accuracy, sharding) set otherwise: then the form would bind something else."""
    return any(k not in handled or (v is not None and k in _DEFAULT_NONE)
               for k, v in params.items())


_DIVISION = re.compile(r"^(\s+[\w, ]+ = )(\S+) / (\S+)$", re.M)


def has_float_division(source: str) -> bool:
    """Whether an emitted body divides floats (`x / y`: integer division is `lax.div`)."""
    return bool(_DIVISION.search(source))


def divisions_as(source: str, function: str) -> str:
    """An emitted body with each float division `x / y` written `function(x, y)`."""
    return _DIVISION.sub(lambda m: f"{m.group(1)}{function}({m.group(2)}, {m.group(3)})", source)
