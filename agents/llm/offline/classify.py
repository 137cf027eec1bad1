"""Which kernel class a task's reference belongs to, read from its jaxpr (never its name).

The reference is traced with symbolic dimensions: a dimension that takes the same sizes in
every shape of the task gets one name (`D0`, `D1`, ...), so the jaxpr says which axes are
the same axis. The classes, tried in order:

1. `elementwise`: elementwise and broadcasting ops only, output shaped like the main input;
2. `rowwise`: reductions over the last axis only, broadcast back, rows independent;
3. `matmul_epilogue`: one dot_general of two inputs, then elementwise ops on its result;
4. `attention`: softmax(q k^T * scale) v (optionally causal, optionally grouped-query),
   checked against the numbers; so are `paged_attention`, `ragged_paged_attention`,
   `linear_attention` and `grouped_matmul` (`patterns`), tried first, then `convolution` (one
   `conv_general_dilated` fed by layout ops, then any epilogue: `conv_match`);
5. `rows_generic`: anything whose rows (leading axis) are independent, checked by probing;
6. `generic`: a grid over the output axes no op of the jaxpr mixes (`generic_axes`);
7. `single_block`: the whole arrays as one block, when no axis is independent (refused when
   even they do not fit a core's VMEM).

Before the classes are tried the jaxpr is rewritten where a kernel body needs other ops
(`rewrites`): pooling windows and cumulative sums as matmuls, a sum over a dot's free axis
taken before the dot.

A task that fits no class and whose reference cannot be written out as a kernel body gets
`TaskFacts.unsupported`, the reason the offline author refuses it.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from agents.llm.offline import batchdims, linear_sums, patterns, pershape
from agents.llm.offline.jaxpr_source import EmitError, flatten, function_source
from agents.llm.offline.rewrites import rewritten

CLASSES = ("elementwise", "rowwise", "matmul_epilogue", "attention", "paged_attention",
           "ragged_paged_attention", "linear_attention", "grouped_matmul", "convolution",
           "rows_generic", "generic", "single_block")

UNARY = {
    "exp", "exp2", "log", "log1p", "expm1", "tanh", "logistic", "neg", "abs", "sqrt", "rsqrt",
    "cbrt", "integer_pow", "square", "erf", "erfc", "erf_inv", "sin", "cos", "tan", "sign",
    "floor", "ceil", "round", "convert_element_type", "is_finite", "not", "reduce_precision",
    "asinh", "acosh", "atanh", "sinh", "cosh", "atan", "asin", "acos",
}
BINARY = {
    "add", "sub", "mul", "div", "max", "min", "pow", "atan2", "rem", "and", "or", "xor", "eq",
    "ne", "lt", "le", "gt", "ge", "nextafter", "select_n", "clamp",
}
SHAPE_ONLY = {"broadcast_in_dim", "dim_as_value"}
REDUCTIONS = {"reduce_sum", "reduce_max", "reduce_min", "reduce_prod", "argmax", "argmin",
              "reduce_and", "reduce_or"}


@dataclass(frozen=True)
class Arg:
    name: str
    dtype: str
    shape: tuple[int, ...]
    dims: tuple[Any, ...]  # a symbol name per axis, or 1 for a unit axis

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * np.dtype(self.dtype).itemsize


@dataclass
class TaskFacts:
    """Everything the planner and the kernel writers need to know about one task."""

    kernel_class: str
    args: list[Arg]
    outs: list[tuple[tuple[Any, ...], str]]  # (dim expressions, dtype) per output
    out_shapes: list[tuple[int, ...]]
    dim_values: dict[str, int]
    symbols: list[str]
    reasons: list[str]
    primitives: list[str]
    flops: int
    detail: dict[str, Any] = field(default_factory=dict)
    body_source: str = ""  # the whole reference as `_body(*args, <dims>)`, when it emits
    pinned: dict[str, int] = field(default_factory=dict)  # dims traced at their tuning size
    unsupported: str = ""  # why the offline author writes no kernel for this task, if it won't

    @property
    def io_bytes(self) -> int:
        out = sum(math.prod(s) * np.dtype(d).itemsize
                  for s, (_, d) in zip(self.out_shapes, self.outs, strict=True))
        return sum(a.nbytes for a in self.args) + out


def _symbols_for(shapes_per_case: list[list[tuple[int, ...]]]) -> tuple[list[tuple[Any, ...]], list[str]]:
    """A symbol per distinct size sequence across the task's shapes; unit axes stay 1."""
    names: dict[tuple[int, ...], str] = {}
    dims: list[tuple[Any, ...]] = []
    for arg_index, shape in enumerate(shapes_per_case[0]):
        arg_dims: list[Any] = []
        for axis in range(len(shape)):
            sizes = tuple(case[arg_index][axis] for case in shapes_per_case)
            if all(s == 1 for s in sizes):
                arg_dims.append(1)
                continue
            if sizes not in names:
                names[sizes] = f"D{len(names)}"
            arg_dims.append(names[sizes])
        dims.append(tuple(arg_dims))
    return dims, list(names.values())


def _arg_names(fn: Any, count: int) -> list[str]:
    import inspect

    try:
        params = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        params = []
    return [params[i] if i < len(params) else f"arg{i}" for i in range(count)]


def _symbolic_jaxpr(reference: Any, args: list[Arg], symbols: list[str],
                    minimum: dict[str, int], pinned: dict[str, int], merge: bool = True) -> Any:
    """The jaxpr over symbolic dims, each known to be at least its smallest task size (so
    `D1 < 8` in a reference is decidable); `pinned` symbols are traced at their value. `merge`:
    dots with several batch dims re-traced through one (all Mosaic lowers)."""
    import jax
    from jax import export

    free = [s for s in symbols if s not in pinned]
    constraints = [f"{s} >= {minimum[s]}" for s in free if minimum.get(s, 0) > 1]
    scope = dict(zip(free, export.symbolic_shape(", ".join(free), constraints=constraints),
                     strict=True)) if free else {}
    scope.update(pinned)
    specs = [jax.ShapeDtypeStruct(tuple(scope[d] if isinstance(d, str) else d for d in a.dims),
                                  np.dtype(a.dtype)) for a in args]
    closed = jax.make_jaxpr(reference)(*specs)
    return batchdims.merge_batch_dims(closed) if merge else closed


def _trace(reference: Any, args: list[Arg], symbols: list[str], minimum: dict[str, int],
           dim_values: dict[str, int]) -> tuple[Any, dict[str, int], str]:
    """(jaxpr, pinned symbols, note). A symbol the reference does Python arithmetic on
    (`depth ** -0.5`) is pinned to its tuning value and the trace retried; the error names it."""
    pinned: dict[str, int] = {}
    while True:
        try:
            return _symbolic_jaxpr(reference, args, symbols, minimum, pinned), pinned, ""
        except Exception as exc:  # a symbolic dim used where only an integer works
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            named = [s for s in symbols if s not in pinned and re.search(rf"\b{s}\b", first)]
            if not named:
                return None, pinned, first[:120]
            for one in reversed(named[1:]):  # pin as few as work, inner (later) dims first
                try:
                    fewer = {**pinned, one: dim_values[one]}
                    return _symbolic_jaxpr(reference, args, symbols, minimum, fewer), fewer, ""
                except Exception:  # this one alone is not enough: pin them all
                    continue
            pinned.update({s: dim_values[s] for s in named})


def out_dims(aval_shape: tuple[Any, ...]) -> tuple[Any, ...]:
    """An output's dims as the classes compare them: sizes, and symbols by name."""
    return tuple(d if isinstance(d, int) else str(d) for d in aval_shape)


def _rows_independent(reference: Any, inputs: tuple[Any, ...], row_inputs: list[bool]) -> bool:
    """Probe: a perturbed first row moves only the first output row, and a prefix of rows
    gives the prefix of the output."""
    import jax
    import jax.numpy as jnp

    rows = next(x.shape[0] for x, r in zip(inputs, row_inputs, strict=True) if r)
    if rows < 16:
        return False
    full = [np.asarray(o) for o in jax.tree.leaves(reference(*inputs))]
    bumped = tuple(x.at[0].add(jnp.asarray(0.5, x.dtype)) if r and jnp.issubdtype(x.dtype, jnp.floating)
                   else x for x, r in zip(inputs, row_inputs, strict=True))
    moved = [np.asarray(o) for o in jax.tree.leaves(reference(*bumped))]
    for a, b in zip(full, moved, strict=True):
        if a.ndim == 0 or not np.array_equal(a[1:], b[1:], equal_nan=True):
            return False
    half = (rows // 2) // 8 * 8
    prefix = tuple(x[:half] if r else x for x, r in zip(inputs, row_inputs, strict=True))
    part = [np.asarray(o) for o in jax.tree.leaves(reference(*prefix))]
    return all(np.allclose(p, f[:half], rtol=1e-5, atol=1e-5, equal_nan=True)
               for p, f in zip(part, full, strict=True))


def _producer_map(eqns: list[Any]) -> dict[Any, Any]:
    return {v: e for e in eqns for v in e.outvars}


def _trace_to_input(v: Any, producers: dict[Any, Any], invars: list[Any]) -> int | None:
    while v not in invars:
        e = producers.get(v)
        if e is None or e.primitive.name not in ("convert_element_type", "transpose", "reshape"):
            return None
        v = e.invars[0]
    return invars.index(v)


def classify_task(task_path: str | Path) -> TaskFacts:
    """Trace the task's reference and classify it; see the module docstring for the order."""
    return _classify_cached(str(Path(task_path).resolve()), Path(task_path).stat().st_mtime_ns)


@functools.lru_cache(maxsize=32)
def _classify_cached(path: str, _mtime: int) -> TaskFacts:
    import jax

    from tools.api import load_task

    task = load_task(path)
    reference = task.reference
    inputs = task.make_inputs(0, 0)
    shapes = [[tuple(x.shape) for x in inputs]]
    for index in task.unseen_shape_indices:
        shapes.append([tuple(x.shape) for x in jax.eval_shape(lambda i=index: task.make_inputs(0, i))])
    names = _arg_names(reference, len(inputs))
    dims, symbols = _symbols_for(shapes)
    args = [Arg(n, str(x.dtype), tuple(x.shape), d) for n, x, d in zip(names, inputs, dims, strict=True)]
    dim_values = {d: size for a in args for d, size in zip(a.dims, a.shape, strict=True)
                  if isinstance(d, str)}
    sizes = {d: [case[i][axis] for case in shapes] for i, a in enumerate(args)
             for axis, d in enumerate(a.dims) if isinstance(d, str)}
    minimum = {d: min(s) for d, s in sizes.items()}
    varying = {d for d, s in sizes.items() if len(set(s)) > 1}
    closed, pinned, failure = _trace(reference, args, symbols, minimum, dim_values)
    shape_note = ""
    if closed is None:  # the reference does Python arithmetic on a dimension
        closed = batchdims.merge_batch_dims(jax.make_jaxpr(reference)(*inputs))
        shape_note = f"traced at the tuning shapes only (symbolic tracing failed: {failure})"
        pinned = dict(dim_values)
    elif pinned:
        shape_note = ("dims " + ", ".join(f"{s}={v}" for s, v in pinned.items())
                      + " traced at their tuning sizes (the reference computes with them in "
                      "Python)")
    summed_first = linear_sums.described(closed)
    closed = rewritten(closed)
    invars, eqns, outvars, consts = flatten(closed)
    concrete_outs = jax.eval_shape(reference, *inputs)
    out_shapes = [tuple(o.shape) for o in jax.tree.leaves(concrete_outs)]
    outs = [(out_dims(v.aval.shape), str(v.aval.dtype)) for v in outvars]
    prims = sorted({e.primitive.name for e in eqns})
    cost = jax.jit(reference).lower(*inputs).cost_analysis()  # before XLA's passes: no compile
    cost = cost[0] if isinstance(cost, list) else cost
    facts = TaskFacts("single_block", args, outs, out_shapes, dim_values, symbols, [], prims,
                      int((cost or {}).get("flops", 0)))
    if shape_note:
        facts.reasons.append(shape_note)
    if summed_first:
        facts.reasons.append(summed_first)
    facts.pinned = pinned
    fixed = sorted(set(pinned) & varying)
    if fixed:  # a body traced at one size of a dim that takes others is wrong there: one per shape
        per = _per_shape_bodies(task, args, symbols, minimum, sorted(pinned), shapes)
        if isinstance(per, str):
            facts.reasons.append("the reference cannot be written out as a kernel body: it fixes "
                                 f"dims {', '.join(fixed)} in Python, and they take other sizes "
                                 f"at the unseen shapes ({per})")
        else:
            facts.body_source, facts.outs = per.source, per.outs
            facts.pinned = {s: dim_values[s] for s in per.pinned}
            facts.reasons.append(f"one body per shape: the reference fixes {', '.join(fixed)} in "
                                 f"Python; bodies traced at {len(per.keys)} sets of their sizes")
    else:
        try:
            facts.body_source = function_source("_body", eqns, invars, outvars, symbols, consts)
        except EmitError as exc:
            facts.reasons.append(f"the reference cannot be written out as a kernel body: {exc}")
    _decide(facts, reference, inputs, invars, eqns, outvars, consts)
    weighted = facts.kernel_class == "rows_generic" and any(
        e.primitive.name == "dot_general" for e in eqns)
    if (facts.kernel_class == "single_block" or weighted) and facts.body_source and not fixed:
        from agents.llm.offline import generic_decide

        trace = _tiled_tracer(reference, args, symbols, minimum, pinned)
        if weighted:
            generic_decide.consider_summing(facts, trace, (invars, eqns, outvars, consts))
        else:
            generic_decide.decide(facts, trace, (invars, eqns, outvars, consts))
    if facts.kernel_class == "single_block" and not facts.body_source:
        why = "; ".join(r for r in facts.reasons if "kernel body" in r or "symbolic" in r)
        facts.unsupported = ((why or "no kernel body can be written") + "; and no other "
                             "kernel class fits (" + facts.reasons[-1] + ")")
    return facts


def _tiled_tracer(reference: Any, args: list[Arg], symbols: list[str], minimum: dict[str, int],
                  pinned: dict[str, int]) -> Any:
    """`trace(dims, merge)`: the reference's flat jaxpr with the inputs' dims renamed as
    given (tiled axes, a summed axis), for the generic class to check and write its body."""
    from agents.llm.offline.generic_axes import TILE_SYMBOLS, lowerable
    from agents.llm.offline.generic_summed import REDUCE_SYMBOL

    def trace(dims: list[tuple[Any, ...]], merge: bool) -> Any:
        tiled = [Arg(a.name, a.dtype, a.shape, d) for a, d in zip(args, dims, strict=True)]
        scope = [*symbols, *TILE_SYMBOLS, REDUCE_SYMBOL]
        least = dict(minimum)  # a summed axis is at least as long as the axis it replaces
        for a, d in zip(args, dims, strict=True):
            least.update((REDUCE_SYMBOL, minimum[o]) for o, n in zip(a.dims, d, strict=True)
                         if n == REDUCE_SYMBOL and o in minimum)
        again = rewritten(_symbolic_jaxpr(reference, tiled, scope, least, pinned, merge))
        return flatten(lowerable(again) if merge else again)

    return trace


def _per_shape_bodies(task: Any, args: list[Arg], symbols: list[str], minimum: dict[str, int],
                      pinned: list[str], shapes: list[list[tuple[int, ...]]]) -> Any:
    """`pershape.bodies` for the task's shapes (the tuning point, then the unseen ones)."""
    import jax

    indices = [0, *task.unseen_shape_indices]
    references = [task.reference_at(i) for i in indices]
    out_shapes = [[tuple(o.shape) for o in jax.tree.leaves(jax.eval_shape(r, *task.input_specs(i)))]
                  for r, i in zip(references, indices, strict=True)]
    out_dtypes = [str(o.dtype) for o in jax.tree.leaves(jax.eval_shape(references[0], *task.input_specs(0)))]

    def trace(reference: Any, index: int, sizes: dict[str, int]) -> Any:
        del index
        return _symbolic_jaxpr(reference, args, symbols, minimum, sizes)

    per = pershape.bodies(references, [a.dims for a in args], shapes, symbols, pinned, trace,
                          out_shapes, out_dtypes)
    if isinstance(per, str) and set(pinned) != set(symbols):  # every dim concrete per shape
        whole = pershape.bodies(references, [a.dims for a in args], shapes, symbols, symbols,
                                trace, out_shapes, out_dtypes)
        return per if isinstance(whole, str) else whole
    return per


def _decide(facts: TaskFacts, reference: Any, inputs: tuple[Any, ...], invars: list[Any],
            eqns: list[Any], outvars: list[Any], consts: dict[Any, Any]) -> None:
    names = set(facts.primitives)
    dots = [e for e in eqns if e.primitive.name == "dot_general"]
    reductions = [e for e in eqns if e.primitive.name in REDUCTIONS]
    args = facts.args
    if _decide_special(facts, reference, inputs, names):
        return
    if "cumsum" in names:
        from agents.llm.offline import cumulative

        offsets = cumulative.match_grouped_offsets(reference, inputs, names)
        if offsets is not None:
            facts.kernel_class, facts.detail = "grouped_matmul", offsets
            facts.reasons.append("a scan over groups from the cumsum of integer group sizes: "
                                 "consecutive row groups of lhs times one rhs each (checked on "
                                 "the tuning inputs and with the groups halved)")
            return
    if "conv_general_dilated" in names:
        from agents.llm.offline import conv_match

        conv, why = conv_match.match(facts, reference, inputs, invars, eqns, outvars, consts)
        if conv is not None:
            facts.kernel_class, facts.detail = "convolution", conv
            facts.reasons.append(f"one conv_general_dilated ({conv['spatial']}-D, strides "
                                 f"{conv['strides']}, {conv['groups']} group(s)) fed by layout ops, "
                                 "then an epilogue" + (" that keeps images independent"
                                                       if conv["batch"] else " over the whole batch"))
            return
        facts.reasons.append(f"a convolution, but not the convolution class: {why}")
    if len(dots) == 2 and "exp" in names and reductions:
        producers = _producer_map(eqns)
        q = _trace_to_input(dots[0].invars[0], producers, invars)
        k = _trace_to_input(dots[0].invars[1], producers, invars)
        v = _trace_to_input(dots[1].invars[1], producers, invars)
        hint = (q, k, v) if None not in (q, k, v) and len({q, k, v}) == 3 else None
        match = patterns.match_attention(reference, inputs, hint, "iota" in names)
        if match:  # q, k, v (and a score bias) found by the numbers: no kernel body needed
            facts.kernel_class = "attention"
            facts.detail = match
            operand_dtypes = {str(v.aval.dtype) for e in dots for v in e.invars}
            match["dots_dtype"] = operand_dtypes.pop() if len(operand_dtypes) == 1 else None
            q_heads = _bhsd_heads(args[match["q"]].shape, match["layout"])
            grouped = (f", grouped-query ({q_heads} query heads over {match['kv_heads']} "
                       "key/value heads)" if match["kv_heads"] else "")
            extra = ("" if match["layout"] == "bhsd" else ", (batch, seq, heads, depth) layout")
            extra += "" if match["bias"] is None else f", additive score bias {args[match['bias']].name}"
            facts.reasons.append(f"two dot_generals around exp/{reductions[0].primitive.name}: "
                                 f"softmax(q k^T) v, scale {match['scale']}, "
                                 f"causal={match['causal']}{grouped}{extra} (checked on the "
                                 "tuning inputs)")
            if match["dots_dtype"] and np.dtype(match["dots_dtype"]).itemsize < 4:
                facts.reasons.append(f"the reference's own dots take {match['dots_dtype']} "
                                     "operands: the MXU takes them as they are, accumulating in "
                                     "float32")
            return
        facts.reasons.append("two dots and a softmax, but not q k^T / v shaped")
    if len(dots) == 1:
        from agents.llm.offline.matmul_match import match_matmul

        detail, why = match_matmul(invars, eqns, outvars, args, facts.symbols, consts)
        if detail is not None and facts.body_source:
            facts.kernel_class = "matmul_epilogue"
            facts.detail = detail
            epi = ", ".join(o for o in detail["epilogue_ops"] if o not in SHAPE_ONLY) or "none"
            facts.reasons.append(f"one dot_general (M,K)x(K,N) then elementwise ops ({epi})")
            return
        facts.reasons.append(f"one dot_general, not a matmul with epilogue: {why}")
    _decide_rows(facts, reference, inputs, eqns, dots, reductions)


def _bhsd_heads(shape: tuple[int, ...], layout: str) -> int:
    return shape[2] if layout == "bshd" else shape[-3]


def _decide_special(facts: TaskFacts, reference: Any, inputs: tuple[Any, ...],
                    names: set[str]) -> bool:
    """The classes told apart by a float64 model on the tuning inputs (`patterns`)."""
    if "gather" in names and "exp" in names:
        paged = (patterns.match_paged_attention(reference, inputs)
                 or patterns.match_ragged_paged_attention(reference, inputs))
        if paged is not None:
            facts.kernel_class, facts.detail = "paged_attention", paged
            facts.reasons.append("softmax attention of one query per sequence over key/value "
                                 "pages gathered through an integer block table, masked to "
                                 f"`lengths`; scale {paged['scale']} (checked on the tuning inputs)")
            return True
        mixed = patterns.match_mixed_paged_attention(reference, inputs)
        if mixed is not None:
            facts.kernel_class, facts.detail = "ragged_paged_attention", mixed
            facts.reasons.append("causal softmax attention of each active sequence's run of query "
                                 "rows (cumulative query lengths, an active count) over its "
                                 "key/value pages, keys and values in one page array, gathered "
                                 "through an integer block table and masked to `lengths`; scale "
                                 f"{mixed['scale']} (checked on the tuning inputs)")
            return True
    if names & {"scan", "cumsum", "while"}:
        linear = patterns.match_linear_attention(reference, inputs)
        if linear is not None:
            facts.kernel_class, facts.detail = "linear_attention", linear
            facts.reasons.append(f"a scan ({', '.join(sorted(names & {'scan', 'cumsum', 'while'}))}) "
                                 "computing causal linear attention tril(q k^T) v, scale "
                                 f"{linear['scale']} (checked on the tuning inputs)")
            return True
    grouped = patterns.match_grouped_matmul(reference, inputs, names)
    if grouped is not None:
        facts.kernel_class, facts.detail = "grouped_matmul", grouped
        facts.reasons.append("ragged_dot: consecutive row groups of lhs times one rhs each, group "
                             "sizes from an integer input (checked on the tuning inputs)")
        return True
    return False


def _decide_rows(facts: TaskFacts, reference: Any, inputs: tuple[Any, ...], eqns: list[Any],
                 dots: list[Any], reductions: list[Any]) -> None:
    args = facts.args
    row_sym = facts.outs[0][0][0] if facts.outs and facts.outs[0][0] else None
    row_inputs = [bool(a.dims) and a.dims[0] == row_sym for a in args]
    rows_ok = (isinstance(row_sym, str) and row_sym in facts.dim_values and any(row_inputs)
               and row_sym not in facts.pinned
               and all(o[0] and o[0][0] == row_sym for o in facts.outs) and bool(facts.body_source))
    independent = rows_ok and _rows_independent(reference, inputs, row_inputs)
    if independent:
        facts.detail = {"row": row_sym, "row_inputs": row_inputs}
    main = max((a for a, r in zip(args, row_inputs, strict=True) if r), key=lambda a: a.nbytes,
               default=None)
    same_shape = main is not None and all(o[0] == main.dims for o in facts.outs)
    simple = all(e.primitive.name in UNARY | BINARY | SHAPE_ONLY for e in eqns)
    if independent and not dots and not reductions and simple and same_shape:
        facts.kernel_class = "elementwise"
        facts.reasons.append("elementwise and broadcasting ops only; output shaped like the input")
        return
    last_axis = all(tuple(e.params.get("axes", ())) == (len(e.invars[0].aval.shape) - 1,)
                    for e in reductions)
    broadcast_back = simple is False and all(
        e.primitive.name in UNARY | BINARY | SHAPE_ONLY | REDUCTIONS for e in eqns)
    if independent and not dots and reductions and last_axis and broadcast_back and same_shape:
        facts.kernel_class = "rowwise"
        ops = sorted({e.primitive.name for e in reductions})
        facts.reasons.append(f"reductions over the last axis only ({', '.join(ops)}), broadcast "
                             "back to the input's shape; rows independent")
        return
    if independent:
        facts.kernel_class = "rows_generic"
        facts.reasons.append("rows (leading axis) independent by probing; ops "
                             f"{', '.join(facts.primitives)} fit no specialised class")
        return
    facts.kernel_class = "single_block"
    facts.reasons.append("rows are not independent (or the output has no row axis)")
