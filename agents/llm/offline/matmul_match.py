"""Whether a reference is one matmul of two inputs with an elementwise epilogue: the
`matmul_epilogue` class's test, read from the jaxpr (`classify` tries it in its order)."""

from __future__ import annotations

from typing import Any

from agents.llm.offline.classify import BINARY, SHAPE_ONLY, UNARY, Arg, out_dims
from agents.llm.offline.jaxpr_source import EmitError, function_source


def match_matmul(invars: list[Any], eqns: list[Any], outvars: list[Any], args: list[Arg],
                 symbols: list[str], consts: dict[Any, Any]) -> tuple[dict[str, Any] | None, str]:
    """The `matmul_epilogue` class's detail when the jaxpr is one plain (M, K) x (K, N) dot of
    two inputs followed by elementwise ops whose other inputs tile with (M, N) (or are one
    element), with the epilogue written out; else None and why not."""
    dots = [e for e in eqns if e.primitive.name == "dot_general"]
    dot = dots[0]
    (lc, rc), (lb, rb) = dot.params["dimension_numbers"]
    if tuple(lb) or tuple(rb) or tuple(lc) != (1,) or tuple(rc) != (0,):
        return None, "the dot is not a plain (M,K)x(K,N) contraction"
    if dot.invars[0] not in invars or dot.invars[1] not in invars:
        return None, "the dot's operands are computed, not inputs"
    ia, ib = invars.index(dot.invars[0]), invars.index(dot.invars[1])
    a, b = args[ia], args[ib]
    if len(a.shape) != 2 or len(b.shape) != 2:
        return None, "the dot's operands are not 2-D"
    rest = [e for e in eqns if e is not dot]
    if any(e.primitive.name not in UNARY | BINARY | SHAPE_ONLY for e in rest):
        return None, "ops after the dot are not all elementwise"
    if any(v in (dot.invars[0], dot.invars[1]) for e in rest for v in e.invars):
        return None, "the dot's operands are used again outside it"
    m_sym, n_sym = a.dims[0], b.dims[1]
    epilogue_args = [i for i in range(len(args)) if i not in (ia, ib)]
    allowed = {(n_sym,), (1, n_sym), (m_sym, n_sym), (m_sym, 1), (1,)}
    for i in epilogue_args:
        if args[i].dims not in allowed:
            return None, f"epilogue input {args[i].name} {args[i].shape} does not tile with the output"
    if len(outvars) != 1 or out_dims(outvars[0].aval.shape) != (m_sym, n_sym):
        return None, "the output is not the dot's (M, N)"
    try:
        source = function_source("_epilogue", rest, [dot.outvars[0]] + [invars[i] for i in epilogue_args],
                                 outvars, symbols, consts)
    except EmitError as exc:
        return None, f"the epilogue cannot be written out: {exc}"
    return {"a": ia, "b": ib, "epilogue_args": epilogue_args, "m": m_sym, "k": a.dims[1],
            "n": n_sym, "epilogue_ops": sorted({e.primitive.name for e in rest}),
            "epilogue_source": source, "dot_dtype": str(dot.outvars[0].aval.dtype)}, ""
