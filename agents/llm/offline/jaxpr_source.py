"""Write a traced jaxpr out as standalone Python source, so a candidate file can carry it.

A candidate runs in a sandbox with nothing but its own file, so the reference's math is
copied in as code: one line per equation, written as the `jnp`/`lax` function or operator a
person would write, which binds the same primitive with the same params
(:mod:`agents.llm.offline.jaxpr_readable`: `jnp.square(x)`, `x / y`, `jnp.sum(x, axis=1)`),
its result named by what it holds; a primitive with no such form is written as its bind,
`lax.<prim>_p.bind(...)` with the params as literals. The jaxpr is traced with symbolic dimensions (`jax.export.symbolic_shape`), so
every shape in it is an expression of named dims; the emitted function takes those dims as
keyword arguments and a kernel binds them to its block sizes.

Two primitives the Mosaic TPU lowering has no general rule for are written as the ops that
compute them on a TPU (`REWRITES`): a take-along-the-last-axis `gather` becomes a one-hot
select and sum, and `top_k` on the last axis becomes a tournament on the vector unit, or k
rounds of max where its layout does not fit (:mod:`agents.llm.offline.topk_source`; the
order of `lax.top_k`); `is_finite` becomes |x| < inf. The helpers they call are written
once, above the function. Any other primitive the Mosaic TensorCore lowering has no rule for
(`conv_general_dilated`, `cumsum`, `reduce_window_sum`, ...) is an `EmitError` naming it.

Two are written in the form Mosaic accepts: a dot of bf16/f16 operands accumulates in f32
(`preferred_element_type`) and is rounded to its dtype after, as XLA does on a TPU; a float
`iota` counts in int32 and converts. Symbolic dims (`floordiv(D1, 512)`) become Python
operators, and no dtype is written as `np.<name>` numpy lacks (`np.bfloat16`).
"""

from __future__ import annotations

import ast
import enum
import functools
import math
import re
from collections.abc import Sequence
from typing import Any

import numpy as np
from jax import lax
from jax.extend import core as jcore

from agents.llm.offline import layout_rules
from agents.llm.offline.jaxpr_readable import Namer, expression
from agents.llm.offline.topk_source import HELPER as TOPK_HELPER
from kernelgraph import pyast

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
    names = getattr(getattr(jaxpr, "debug_info", None), "arg_names", None) or ()
    if len(names) == len(jaxpr.invars):
        if len(_INPUT_NAMES) > 4096:
            _INPUT_NAMES.clear()
        for var, name in zip(jaxpr.invars, names, strict=True):
            _INPUT_NAMES[id(var)] = (var, str(name))
    return list(jaxpr.invars), eqns, outs, consts


_INPUT_NAMES: dict[int, tuple[Any, str]] = {}
"""id(input var) -> (the var, the traced function's parameter name): bodies name their
inputs as the reference does (`x`, `w`) where those names are plain and free."""


def _input_names(inputs: Sequence[Any], taken: set[str]) -> list[str]:
    from agents.llm.offline.jaxpr_readable import RESERVED

    names: list[str] = []
    for i, v in enumerate(inputs):
        var, name = _INPUT_NAMES.get(id(v), (None, ""))
        plain = (var is v and name.isidentifier() and not re.fullmatch(r"a\d+|_.*", name)
                 and name not in RESERVED and name not in taken and name not in names)
        names.append(name if plain else f"a{i}")
    return names


_DIM_OPERATORS = {"floordiv": ast.FloorDiv, "mod": ast.Mod}
_DIM_BUILTINS = {"max", "min"}


class _DimRewriter(ast.NodeTransformer):
    """A symbolic dim's text (`floordiv(D1, 512) + mod(D0, 8)`) as plain Python operators;
    a call to anything but the dim operators is refused, so no undefined name is emitted."""

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        name = node.func.id if isinstance(node.func, ast.Name) else ""
        if name in _DIM_OPERATORS and len(node.args) == 2 and not node.keywords:
            return ast.BinOp(node.args[0], _DIM_OPERATORS[name](), node.args[1])
        if name == "non_negative" and len(node.args) == 1 and not node.keywords:
            return ast.Call(ast.Name("max", ast.Load()), [node.args[0], ast.Constant(0)], [])
        if name in _DIM_BUILTINS and not node.keywords:
            return node
        raise EmitError(f"dimension operator {name or ast.unparse(node.func)!r} has no Python form")


def dim_source(d: Any) -> str:
    """A dimension (int or symbolic expression) as a Python expression of the dim names."""
    if isinstance(d, int | np.integer):
        return str(int(d))
    text = str(d).replace("^", "**")  # jax writes a power of a dim as `D0^2`; ^ is XOR in Python
    try:
        tree = pyast.parse_expression(text)
    except SyntaxError:
        raise EmitError(f"dimension {text} has no plain Python form") from None
    out = ast.unparse(_DimRewriter().visit(tree))
    return out if out.isidentifier() else f"({out})"  # a bare name needs no parentheses (UP034)


def bare_dim(d: Any) -> str:
    """`dim_source` without the parentheses that keep it whole beside an operator: for a
    call argument or a tuple element, where they are extraneous (UP034)."""
    text = dim_source(d)
    if text.startswith("(") and text.endswith(")"):
        inner = text[1:-1]
        depth = 0
        for char in inner:
            depth += {"(": 1, ")": -1}.get(char, 0)
            if depth < 0:
                return text  # `(a) + (b)`: the outer pair is not one group
        return inner
    return text


def dtype_source(dtype: Any) -> str:
    """`np.dtype('bfloat16')` works once JAX has registered ml_dtypes; `np.bfloat16` never."""
    return f"np.dtype({np.dtype(dtype).name!r})"


def literal_source(value: Any, dtype: Any) -> str:
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return f"np.bool_({bool(value)})"
    if dt.kind in "iu":
        return f"np.{dt.name}({int(value)})"
    if hasattr(np, dt.name):
        return f"np.{dt.name}({str(float(value))!r})"
    return f"{dtype_source(dt)}.type(float({str(float(value))!r}))"


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
        return dtype_source(value)
    if isinstance(value, enum.Enum) and hasattr(lax, type(value).__name__):
        return f"lax.{type(value).__name__}.{value.name}"
    shown = repr(value).splitlines()[0][:60] if repr(value) else ""
    raise EmitError(f"cannot write parameter {shown} ({type(value).__name__}) as a literal")


class Emitter:
    """Names variables and writes equations as source lines."""

    def __init__(self, consts: dict[Any, Any] | None = None,
                 reserved: Sequence[str] = (), readable: bool = True,
                 kernel: bool = True, wide: Sequence[Any] = ()) -> None:
        self.readable = readable  # False: every equation as its primitive's bind
        self.kernel = kernel  # False: XLA code outside the kernel, no Mosaic rule needed
        self.wide = set(wide)  # dot results kept in float32 (partial sums to accumulate)
        self.names: dict[Any, str] = {}
        self.consts = consts or {}
        self.helpers: dict[str, str] = {}  # rewrite helpers the emitted lines call
        self.splats: dict[Any, Any] = {}  # one-element arrays broadcast from a literal
        self.producers: dict[Any, Any] = {}  # each value's equation (`layout_rules` reads it)
        self.namer = Namer(set(reserved))

    def constant_of(self, v: Any) -> Any:
        """The value of a literal or of a one-element array broadcast from one, else None."""
        if isinstance(v, jcore.Literal):
            return np.asarray(v.val).item()
        if v in self.consts and np.asarray(self.consts[v]).size == 1:
            return np.asarray(self.consts[v]).reshape(()).item()
        return self.splats.get(v)

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
            self.names[v] = self.namer.fresh("value")
        return self.names[v]

    def bind_name(self, v: Any, name: str) -> None:
        self.names[v] = name
        self.namer.used.add(name)

    def line(self, eqn: Any) -> str:
        name = eqn.primitive.name
        args = [self.name(v) for v in eqn.invars]
        for v in eqn.outvars:
            if v not in self.names and not isinstance(v, jcore.Literal):
                self.names[v] = self.namer.for_op(name)
        outs = [self.name(v) for v in eqn.outvars]
        target = ", ".join(outs) + ("," if len(outs) == 1 and eqn.primitive.multiple_results else "")
        if (name == "broadcast_in_dim" and isinstance(eqn.invars[0], jcore.Literal)
                and all(isinstance(d, int) for d in eqn.outvars[0].aval.shape)
                and math.prod(eqn.outvars[0].aval.shape) == 1):
            self.splats[eqn.outvars[0]] = np.asarray(eqn.invars[0].val).item()
        if name == "dim_as_value":
            return f"{target} = np.int32({bare_dim(eqn.params['dim'])})"
        if self.kernel and name in LAYOUT_RULES:
            written = LAYOUT_RULES[name](eqn, self)
            if written is not None:
                return f"{target} = {written}"
        if name in REWRITES:
            helper, call = REWRITES[name](eqn, args, self)
            if helper:
                self.helpers.setdefault(helper, HELPERS[helper])
            return f"{target} = {call}"
        if not hasattr(lax, f"{name}_p"):
            raise EmitError(f"primitive {name!r} has no public jax.lax form")
        lowerable = mosaic_primitives() if self.kernel else None
        if lowerable is not None and name not in lowerable:
            raise EmitError(f"primitive {name!r} has no Mosaic TPU lowering")
        params = dict(eqn.params)
        if name == "dot_general" and len(params["dimension_numbers"][1][0]) > 1:
            raise EmitError("a dot_general with more than one batch dimension (Mosaic's matmul "
                            "takes at most one)")
        cast = ""
        if name == "dot_general" and eqn.outvars[0] in self.wide:
            params["preferred_element_type"] = np.dtype(np.float32)
        elif name == "dot_general" and _narrow_float_dot(eqn):
            # bf16/f16 operands: accumulate in f32 as XLA does on a TPU, round once at the end
            params["preferred_element_type"] = np.dtype(np.float32)
            cast = f".astype({readable_dtype(eqn.outvars[0].aval.dtype)})"
        if name == "iota" and np.dtype(params["dtype"]).kind not in "iu":
            # Mosaic's iota is integer-only: count in int32, then convert (exact below 2**24)
            params["dtype"] = np.dtype(np.int32)
            cast = f".astype({readable_dtype(eqn.outvars[0].aval.dtype)})"
        readable = (expression(eqn.replace(params=params), self, bare_dim)
                    if self.readable else None)
        if readable is not None:
            return f"{target} = {readable}{cast}"
        kwargs = [f"{k}={param_source(v)}" for k, v in sorted(params.items())
                  if k not in _DROPPED_PARAMS]
        kwargs += [f"{k}=None" for k in sorted(params) if k in _DROPPED_PARAMS]
        if name in ELEMENTWISE_NARY and len(args) > 1:
            self.helpers.setdefault("nary", HELPERS["nary"])
            return f"{target} = _nary(lax.{name}_p, dict({', '.join(kwargs)}), {', '.join(args)})"
        return f"{target} = lax.{name}_p.bind({', '.join(args + kwargs)}){cast}"


def _narrow_float_dot(eqn: Any) -> bool:
    """A dot of bf16/f16 operands whose result is that narrow float too."""
    narrow = {np.dtype(np.float16), np.dtype("bfloat16")}
    operands = {np.dtype(v.aval.dtype) for v in eqn.invars}
    return bool(operands & narrow) and np.dtype(eqn.outvars[0].aval.dtype) in narrow


@functools.cache
def mosaic_primitives() -> frozenset[str] | None:
    """Names of the primitives the Mosaic TPU kernel lowering has a rule for (None: this JAX
    does not expose the table, and no check is made)."""
    try:
        import jax.experimental.pallas.tpu  # noqa: F401  (registers every TPU rule)

        from tools import jaxprivate

        rules = jaxprivate.mosaic_lowering().lowering_rules
        tensor_core = next(k for k in rules if getattr(k, "name", str(k)).upper() == "TC")
        return frozenset(p.name for p in rules[tensor_core])
    except Exception:  # a JAX that moved its rule table: skip the check, the compile check still runs
        return None


def _static_index(eqn: Any, args: list[str], emitter: Emitter) -> tuple[str, str] | None:
    """`x[:, 0]` traced over symbolic dims: a gather of one constant index along one axis,
    written as a static slice."""
    operand, indices = (v.aval for v in eqn.invars)
    dn = eqn.params["dimension_numbers"]
    rank = len(operand.shape)
    if len(dn.collapsed_slice_dims) != 1 or tuple(dn.start_index_map) != tuple(dn.collapsed_slice_dims):
        return None
    (axis,) = dn.collapsed_slice_dims
    kept = [str(d) for i, d in enumerate(operand.shape) if i != axis]
    sizes = [str(s) for i, s in enumerate(eqn.params["slice_sizes"]) if i != axis]
    constant = emitter.constant_of(eqn.invars[1])
    if (tuple(dn.operand_batching_dims) or tuple(indices.shape) != (1,) or constant is None
            or tuple(dn.offset_dims) != tuple(range(rank - 1)) or kept != sizes
            or int(eqn.params["slice_sizes"][axis]) != 1):
        return None
    return "", f"lax.index_in_dim({args[0]}, {int(constant)}, {axis}, keepdims=False)"


def _gather_rewrite(eqn: Any, args: list[str], emitter: Emitter) -> tuple[str, str]:
    """`jnp.take_along_axis(x, idx, axis=-1)`-shaped gathers (one index per row), and a
    constant index along one axis (a static slice)."""
    static = _static_index(eqn, args, emitter)
    if static is not None:
        return static
    operand, indices = (v.aval for v in eqn.invars)
    out = eqn.outvars[0].aval
    dn = eqn.params["dimension_numbers"]
    rank = len(operand.shape)
    last = (rank - 1,)
    batch = tuple(range(rank - 1))
    if not (rank >= 1 and len(out.shape) == rank and tuple(dn.offset_dims) == ()
            and tuple(dn.collapsed_slice_dims) == last and tuple(dn.start_index_map) == last
            and tuple(dn.operand_batching_dims) == batch
            and tuple(dn.start_indices_batching_dims) == batch
            and tuple(eqn.params["slice_sizes"]) == (1,) * rank
            and len(indices.shape) == rank + 1 and str(out.shape[-1]) == "1"):
        raise EmitError("a gather that is not take_along_axis on the last axis (one index "
                        "per row) has no Mosaic form the offline author writes")
    mode = eqn.params["mode"]
    mode_name = getattr(mode, "name", str(mode))
    fill = eqn.params.get("fill_value")
    if mode_name == "FILL_OR_DROP":
        fill_src = repr(float("nan") if fill is None else float(fill)).replace("nan", "float('nan')")
    elif mode_name in ("PROMISE_IN_BOUNDS", "CLIP"):
        fill_src = "None"
    else:
        raise EmitError(f"gather mode {mode_name} is not rewritten")
    clip = mode_name == "CLIP"
    return "take_along_last", f"_take_along_last({args[0]}, {args[1]}, {fill_src}, clip={clip})"


def _top_k_rewrite(eqn: Any, args: list[str], emitter: Emitter) -> tuple[str, str]:
    del emitter
    operand = eqn.invars[0].aval
    axis = eqn.params.get("axis", len(operand.shape) - 1)
    if axis not in (-1, len(operand.shape) - 1):
        raise EmitError(f"top_k along axis {axis}, not the last, is not rewritten")
    return "top_k_last", f"_top_k_last({args[0]}, {int(eqn.params['k'])})"


def _is_finite_rewrite(eqn: Any, args: list[str], emitter: Emitter) -> tuple[str, str]:
    """|x| < inf: the same answer (NaN and +-inf give False) from ops the TPU cost model
    prices; `is_finite` lowers to a Mosaic op it has no rule for."""
    del eqn, emitter
    return "", f"jnp.abs({args[0]}) < jnp.inf"


REWRITES = {"gather": _gather_rewrite, "top_k": _top_k_rewrite, "is_finite": _is_finite_rewrite}
LAYOUT_RULES = {"transpose": layout_rules.unit_reshape_transpose,
                "reshape": layout_rules.unit_free_reshape,
                "dot_general": layout_rules.matvec_on_vpu}

HELPERS = {
    "take_along_last": '''def _take_along_last(x, idx, fill, clip=False):
    """take_along_axis on the last axis as a one-hot select and sum (one non-zero term,
    so the sum is exact); out-of-range indices give `fill` (FILL_OR_DROP) or are clamped."""
    idx = idx.reshape(idx.shape[:-1]).astype(jnp.int32)
    size = x.shape[-1]
    if clip:
        idx = jnp.clip(idx, 0, size - 1)
    cols = lax.broadcasted_iota(jnp.int32, x.shape, x.ndim - 1)
    picked = jnp.sum(jnp.where(cols == idx, x, jnp.zeros_like(x)), axis=-1, keepdims=True)
    if fill is None:
        return picked
    inside = jnp.logical_and(idx >= 0, idx < size)
    return jnp.where(inside, picked, jnp.full_like(picked, fill))


''',
    "top_k_last": TOPK_HELPER,
}


HELPERS["nary"] = '''def _nary(prim, params, *args):
    """An n-ary elementwise primitive with scalar operands broadcast to the others' shape."""
    shape = jnp.broadcast_shapes(*(jnp.shape(a) for a in args))
    args = [jnp.broadcast_to(jnp.asarray(a), shape) if jnp.shape(a) != shape else a for a in args]
    return prim.bind(*args, **params)


'''

# Helpers a body needs are written above it by `function_source` itself (`_nary` only for an
# n-ary primitive with no public form); a kernel file that prepends this adds nothing.
NARY_HELPER = ""

def readable_dtype(dtype: Any) -> str:
    """`jnp.bfloat16`, `jnp.float32`: a dtype as written in a kernel."""
    from agents.llm.offline.jaxpr_readable import dtype_name

    return dtype_name(dtype)


def live(eqns: Sequence[Any], outputs: Sequence[Any]) -> list[Any]:
    """The equations the outputs depend on (a reference's unused intermediates, such as the
    sign `logsumexp` computes and drops, are not written)."""
    needed = {v for v in outputs if not isinstance(v, jcore.Literal)}
    kept: list[Any] = []
    for eqn in reversed(eqns):
        if eqn.effects or any(v in needed for v in eqn.outvars):
            kept.append(eqn)
            needed.update(v for v in eqn.invars if not isinstance(v, jcore.Literal))
    return kept[::-1]


def _read_lines(lines: Sequence[tuple[str, bool]], results: Sequence[str]) -> list[str]:
    """The lines whose values are read (by a later line or as a result), or that have
    effects: a producer `layout_rules` bypassed is not written."""
    needed = set(results)
    kept: list[str] = []
    for line, pure in reversed(lines):
        targets, _, value = line.partition(" = ")
        if pure and not any(t.strip() in needed for t in targets.split(",")):
            continue
        kept.append(line)
        needed.update(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", value))
    return kept[::-1]


def function_source(
    fn_name: str,
    eqns: Sequence[Any],
    inputs: Sequence[Any],
    outputs: Sequence[Any],
    dims: Sequence[str],
    consts: dict[Any, Any] | None = None,
    *,
    readable: bool = True,
    kernel: bool = True,
    wide: Sequence[Any] = (),
) -> str:
    """`def fn_name(*inputs, <dims>)` evaluating `eqns`; returns the outputs as a tuple.
    ``readable=False`` writes every equation as its primitive's bind (the form the readable
    one is checked against); ``kernel=False`` writes code that runs outside a kernel, as
    XLA ops, so a primitive needs no Mosaic rule; the dots making the values in ``wide``
    return float32 whatever their dtype (partial sums a kernel accumulates)."""
    params = _input_names(inputs, {fn_name, *dims}) if readable else [
        f"a{i}" for i in range(len(inputs))]
    emitter = Emitter(consts, reserved=[fn_name, *dims, *params], readable=readable,
                      kernel=kernel, wide=wide)
    for name, v in zip(params, inputs, strict=True):
        emitter.bind_name(v, name)
    kept = live(eqns, outputs)
    emitter.producers = {v: e for e in kept for v in e.outvars}
    lines = [(emitter.line(e), not e.effects) for e in kept]
    results = [emitter.name(v) for v in outputs]
    body = _read_lines(lines, results)
    arg_list = ", ".join(params)
    dim_list = ", ".join(f"{d}=None" for d in dims)
    signature = ", ".join(p for p in (arg_list, "*" if dims else "", dim_list) if p)
    lines = [*emitter.helpers.values(), f"def {fn_name}({signature}):"]
    lines += [f"    {b}" for b in body]
    lines.append(f"    return ({', '.join(results)}{',' if len(results) == 1 else ''})")
    return "\n".join(lines)
