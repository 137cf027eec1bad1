"""Recognise a convolution task: one `conv_general_dilated` between layout-only prologues
and an epilogue, read from the jaxpr (the `convolution` class of `classify`).

The reference splits in three: the prologue (the ops that turn inputs into the conv's lhs
and rhs: transposes, reshapes, dtype converts, flips, pads, and the strided scatter into
zeros that dilates the input of a transposed convolution, read as the interior pad it is;
they stay layout work outside the kernel, as XLA ops),
the convolution itself (written by `conv` as window-tap matmuls inside a Pallas kernel),
and the epilogue (everything after it: bias, activations, normalisations, pooling, the
layout back), written out as a `_epilogue` body that runs in a second Pallas kernel.

When the epilogue keeps images independent (probed: a bumped first image moves only the
first output row, and a prefix of the batch gives the prefix of the output), the reference
is traced again with the batch axis under its own symbol, so the epilogue runs on blocks of
images; otherwise it runs on the whole batch in one block (a batch norm, say).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from agents.llm.offline.generic_axes import same_dim
from agents.llm.offline.jaxpr_source import EmitError, flatten, function_source

LAYOUT = {"transpose", "reshape", "convert_element_type", "broadcast_in_dim", "squeeze",
          "expand_dims", "rev", "pad"}
BATCH = "NB"  # the batch axis's own symbol in the per-image trace


def _operand(e: Any) -> Any | None:
    """The one array a layout op reads (a pad's padding value is a literal), else None."""
    from jax.extend import core

    arrays = [v for v in e.invars if not isinstance(v, core.Literal)]
    if e.primitive.name == "pad" and (len(arrays) != 1 or arrays[0] is not e.invars[0]):
        return None
    return arrays[0] if len(arrays) == 1 else None


def _input_of(v: Any, producers: dict[Any, Any],
              invars: list[Any]) -> tuple[int | None, list[Any], list[Any]]:
    """The input a conv operand comes from through layout ops, those ops (in order, a
    dilation scatter written as the pad it is) and the ops only a dilation scatter reads."""
    chain: list[Any] = []
    feeding: list[Any] = []
    while v not in invars:
        e = producers.get(v)
        if e is not None and e.primitive.name == "scatter":
            found = dilation_pad(e, producers)
            if found is None:
                return None, [], []
            feeding.append(e)
            e, only_for_it = found
            feeding.extend(only_for_it)
        if e is None or e.primitive.name not in LAYOUT or _operand(e) is None:
            return None, [], []
        chain.append(e)
        v = _operand(e)
    return invars.index(v), chain[::-1], feeding


def _closure(v: Any, producers: dict[Any, Any]) -> list[Any] | None:
    """The equations computing `v` from literals and constants alone (None: it reads an
    input)."""
    from jax.extend import core

    seen: dict[int, Any] = {}
    stack = [v]
    while stack:
        w = stack.pop()
        if isinstance(w, core.Literal):
            continue
        e = producers.get(w)
        if e is None:
            return None
        if id(e) not in seen:
            seen[id(e)] = e
            stack.extend(e.invars)
    order = {id(e): i for i, e in enumerate(producers.values())}
    return sorted(seen.values(), key=lambda e: order[id(e)])


def _affine(v: Any, producers: dict[Any, Any]) -> tuple[int, int, Any] | None:
    """A 1-D index vector `start + stride * iota(count)` as (start, stride, count)."""
    from jax.extend import core

    e = producers.get(v)
    if e is None:
        return None
    name = e.primitive.name
    if name == "iota" and len(e.params["shape"]) == 1:
        return 0, 1, e.params["shape"][0]
    if name == "convert_element_type":
        return _affine(e.invars[0], producers)
    if name in ("add", "mul") and len(e.invars) == 2:
        literal = [isinstance(w, core.Literal) and np.ndim(w.val) == 0 for w in e.invars]
        if literal.count(True) != 1:
            return None
        c = int(np.asarray(e.invars[literal.index(True)].val))
        inner = _affine(e.invars[literal.index(False)], producers)
        if inner is None:
            return None
        start, stride, count = inner
        return (start + c, stride, count) if name == "add" else (start * c, stride * c, count)
    return None


def _strided_indices(v: Any, producers: dict[Any, Any]) -> list[tuple[int, int, Any]] | None:
    """Scatter indices that are a strided grid, per index column (start, stride, count): the
    concatenation along the last axis of one affine vector broadcast along each axis."""
    e = producers.get(v)
    if e is None or e.primitive.name != "concatenate":
        return None
    rank = len(v.aval.shape)
    if e.params["dimension"] != rank - 1 or len(e.invars) != rank - 1:
        return None
    found = []
    for j, part in enumerate(e.invars):
        b = producers.get(part)
        if (b is None or b.primitive.name != "broadcast_in_dim"
                or tuple(b.params["broadcast_dimensions"]) != (j,)):
            return None
        axis = _affine(b.invars[0], producers)
        if axis is None:
            return None
        found.append(axis)
    return found


def dilation_pad(scatter: Any, producers: dict[Any, Any]) -> tuple[Any, list[Any]] | None:
    """`zeros.at[:, ::s, ::s, :].set(x)`, the input dilation of a transposed convolution
    written out, as the `pad` with interior padding it equals, and the equations that only
    built its zeros and indices; None for any other scatter."""
    from jax import lax
    from jax.extend import core

    p = scatter.params
    if p.get("update_jaxpr") is not None or len(scatter.invars) != 3:
        return None
    base, indices, updates = scatter.invars
    zeros = producers.get(base)
    if (zeros is None or zeros.primitive.name != "broadcast_in_dim"
            or not isinstance(zeros.invars[0], core.Literal)
            or np.asarray(zeros.invars[0].val).item() != 0):
        return None
    dn = p["dimension_numbers"]
    spatial = tuple(dn.scatter_dims_to_operand_dims)
    out_shape, in_shape = base.aval.shape, updates.aval.shape
    rank = len(out_shape)
    window = [d for d in range(rank) if d not in spatial]
    if (tuple(dn.inserted_window_dims) != spatial or tuple(dn.operand_batching_dims)
            or len(in_shape) != rank or tuple(dn.update_window_dims) != tuple(window)
            or spatial != tuple(sorted(spatial))):
        return None
    builders = _closure(indices, producers)
    axes = _strided_indices(indices, producers) if builders is not None else None
    counts = [in_shape[d] for d in spatial]
    if axes is None or len(axes) != len(spatial):
        return None
    config = [(0, 0, 0)] * rank
    for j, d in enumerate(spatial):
        start, stride, count = axes[j]
        if not same_dim(count, counts[j]) or stride < 1 or start < 0:
            return None
        try:
            high = int(out_shape[d] - (start + (counts[j] - 1) * stride + 1))
        except Exception:  # a size that is not a constant past the last position
            return None
        if high < 0:
            return None
        config[d] = (start, high, stride - 1)
    zero = core.Literal(np.zeros((), updates.aval.dtype), updates.aval.update(shape=()))
    pad = core.new_jaxpr_eqn([updates, zero], list(scatter.outvars), lax.pad_p,
                             {"padding_config": tuple(config)}, set(), scatter.source_info)
    return pad, [zeros, *builders]


def conv_parts(invars: list[Any], eqns: list[Any], outvars: list[Any]
               ) -> tuple[dict[str, Any] | None, str]:
    """(parts, "") for a single conv fed by layout ops, else (None, why not)."""
    convs = [e for e in eqns if e.primitive.name == "conv_general_dilated"]
    if len(convs) != 1:
        return None, f"{len(convs)} convolutions (the convolution class takes one)"
    conv = convs[0]
    p = conv.params
    if p["batch_group_count"] != 1:
        return None, "batch_group_count > 1"
    padding = tuple(tuple(pair) for pair in p["padding"])
    if not all(isinstance(v, int) for pair in padding for v in pair):
        return None, "the padding depends on the shapes (symbolic)"
    if any(v < 0 for pair in padding for v in pair):
        return None, "a negative padding (the conv crops its input)"
    producers = {v: e for e in eqns for v in e.outvars}
    lhs, lhs_chain, lhs_feeding = _input_of(conv.invars[0], producers, invars)
    rhs, rhs_chain, rhs_feeding = _input_of(conv.invars[1], producers, invars)
    if lhs is None or rhs is None or lhs == rhs:
        return None, "the conv's operands are not two inputs reached through layout ops"
    prologue = list(dict.fromkeys([*lhs_chain, *rhs_chain]))
    skip = set(map(id, [*prologue, *lhs_feeding, *rhs_feeding])) | {id(conv)}
    epilogue = [e for e in eqns if id(e) not in skip]
    private = {id(v) for e in prologue for v in e.outvars}
    used = {id(v) for e in epilogue for v in e.invars} | {id(v) for v in outvars}
    if used & private:
        return None, "the epilogue reuses the conv's transformed operands"
    epilogue_args = [i for i, v in enumerate(invars) if id(v) in used]
    dn = p["dimension_numbers"]
    return {
        "conv": conv, "prologue": prologue, "epilogue": epilogue, "lhs": lhs, "rhs": rhs,
        "epilogue_args": epilogue_args,
        "strides": tuple(int(s) for s in p["window_strides"]), "padding": padding,
        "dilation": tuple(int(d) for d in p["rhs_dilation"]),
        "lhs_dilation": tuple(int(d) for d in p["lhs_dilation"]),
        "lhs_spec": tuple(dn.lhs_spec), "rhs_spec": tuple(dn.rhs_spec), "out_spec": tuple(dn.out_spec),
        "groups": int(p["feature_group_count"]), "out_dtype": str(conv.outvars[0].aval.dtype),
        "spatial": len(p["window_strides"]),
    }, ""


def images_independent(reference: Any, inputs: tuple[Any, ...], lhs: int) -> bool:
    """A bumped first image moves only the first output row, and a batch prefix gives the
    output's prefix (every output leads with the batch axis)."""
    import jax
    import jax.numpy as jnp

    x = inputs[lhs]
    n = x.shape[0]
    if n < 2 or not jnp.issubdtype(x.dtype, jnp.floating):
        return False
    full = [np.asarray(o) for o in jax.tree.leaves(reference(*inputs))]
    if any(o.ndim == 0 or o.shape[0] != n for o in full):
        return False
    bumped = tuple(a.at[0].add(jnp.asarray(0.5, a.dtype)) if i == lhs else a
                   for i, a in enumerate(inputs))
    moved = [np.asarray(o) for o in jax.tree.leaves(reference(*bumped))]
    if not all(np.array_equal(a[1:], b[1:], equal_nan=True) for a, b in zip(full, moved, strict=True)):
        return False
    half = n // 2
    prefix = tuple(a[:half] if i == lhs else a for i, a in enumerate(inputs))
    part = [np.asarray(o) for o in jax.tree.leaves(reference(*prefix))]
    return all(np.allclose(p, f[:half], rtol=1e-5, atol=1e-5, equal_nan=True)
               for p, f in zip(part, full, strict=True))


def _sources(parts: dict[str, Any], invars: list[Any], outvars: list[Any], symbols: list[str],
             consts: dict[Any, Any]) -> tuple[str, str]:
    conv = parts["conv"]
    operands = function_source("_operands", parts["prologue"], invars, list(conv.invars), symbols,
                               consts, kernel=False)
    epilogue = function_source("_epilogue", parts["epilogue"],
                               [conv.outvars[0], *(invars[i] for i in parts["epilogue_args"])],
                               outvars, symbols, consts)
    return operands, epilogue


def _per_image_trace(facts: Any, reference: Any, lhs: int) -> tuple[Any, list[Any]] | None:
    """The jaxpr with the batch axis of the conv's input under its own symbol, or None."""
    from agents.llm.offline.classify import Arg, _symbolic_jaxpr

    x = facts.args[lhs]
    if not x.dims or x.dims[0] == 1:
        return None
    args = [Arg(a.name, a.dtype, a.shape, (BATCH, *a.dims[1:]) if i == lhs else a.dims)
            for i, a in enumerate(facts.args)]
    symbols = [*facts.symbols, BATCH]
    try:
        closed = _symbolic_jaxpr(reference, args, symbols, {}, dict(facts.pinned))
    except Exception:  # the reference computes with the batch size in Python: no per-image body
        return None
    return closed, [a.dims for a in args]


def match(facts: Any, reference: Any, inputs: tuple[Any, ...], invars: list[Any],
          eqns: list[Any], outvars: list[Any], consts: dict[Any, Any]) -> tuple[dict[str, Any] | None, str]:
    """The convolution class's detail for `classify`, or (None, why not)."""
    if any("fixes dims" in r for r in facts.reasons):
        return None, "the reference fixes dims in Python that take other sizes"
    parts, why = conv_parts(invars, eqns, outvars)
    if parts is None:
        return None, why
    per_image = images_independent(reference, inputs, parts["lhs"])
    arg_dims = [a.dims for a in facts.args]
    symbols = list(facts.symbols)
    if per_image:
        traced = _per_image_trace(facts, reference, parts["lhs"])
        again = None
        if traced is not None:
            inv2, eqns2, outs2, consts2 = flatten(traced[0])
            again, _ = conv_parts(inv2, eqns2, outs2)
        if again is None:
            per_image = False
        else:
            parts, invars, outvars, consts = again, inv2, outs2, consts2
            arg_dims, symbols = traced[1], [*symbols, BATCH]
    try:
        operands, epilogue = _sources(parts, invars, outvars, symbols, consts)
    except EmitError as exc:
        return None, f"the conv's prologue or epilogue cannot be written out: {exc}"
    import jax

    concrete = flatten(jax.make_jaxpr(reference)(*inputs))[1]
    (at_tuning,) = [e for e in concrete if e.primitive.name == "conv_general_dilated"]
    detail = {k: v for k, v in parts.items() if k not in ("conv", "prologue", "epilogue")}
    detail.update(lhs_shape=tuple(at_tuning.invars[0].aval.shape),
                  rhs_shape=tuple(at_tuning.invars[1].aval.shape))
    detail.update(operands_source=operands, epilogue_source=epilogue, symbols=symbols,
                  arg_dims=arg_dims, batch=BATCH if per_image else None,
                  epilogue_ops=sorted({e.primitive.name for e in parts["epilogue"]}))
    return detail, ""
