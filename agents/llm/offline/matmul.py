"""Matmul with a fused epilogue: (i, j) output tiles `parallel`, K `arbitrary` into a VMEM
f32 accumulator, and the reference's elementwise tail (bias, scale, activation, residual)
applied to the tile at the last K step, so the product never goes back to HBM unfinished.
"""

from __future__ import annotations

from typing import Any

from agents.llm.offline.classify import TaskFacts
from agents.llm.offline.common import (
    LANES,
    SUBLANES,
    aligned,
    aligned_tunables,
    header,
    scoped_vmem,
    sublane_tile,
    tunables_literal,
)
from agents.llm.offline.jaxpr_source import NARY_HELPER


def fit_k(block: int, k: int) -> int:
    """The largest multiple of 128 <= block dividing K (a K tail would pollute the sum)."""
    if k <= block:
        return k
    for candidate in range(block - block % LANES, 0, -LANES):
        if k % candidate == 0:
            return candidate
    return k


def default_blocks(facts: TaskFacts, chip: dict[str, Any] | None) -> dict[str, int]:
    """Large tiles (fewer steps, fewer re-fetches) that fit half the scoped VMEM."""
    d = facts.detail
    m, k, n = (facts.dim_values[d[s]] for s in ("m", "k", "n"))
    mxu = int((chip or {}).get("mxu_dim") or (chip or {}).get("mxu_size") or 256)
    bm = min(512, _ceil_to(m, SUBLANES))
    bn = min(512, _ceil_to(n, LANES))
    bk = min(1024, k)
    budget = scoped_vmem(chip) // 2
    while 4 * (2 * (bm * bk + bk * bn) + 3 * bm * bn) > budget and bk > mxu:
        bk //= 2
    while 4 * (2 * (bm * bk + bk * bn) + 3 * bm * bn) > budget and bm > mxu:
        bm //= 2
        bn = max(LANES, bn // 2)
    return {"block_m": bm, "block_n": bn, "block_k": bk}


def _ceil_to(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def matmul_tunables(blocks: dict[str, int]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for name, value in blocks.items():
        floor = SUBLANES if name == "block_m" else LANES
        options = [value] + [v for v in (value // 2, value * 2) if v >= floor]
        out[name] = list(dict.fromkeys(options))
    return out


_TEMPLATE = '''

def _kernel(a_ref, b_ref, *refs, dims, n_epilogue):
    epilogue_refs = refs[:n_epilogue]
    o_ref, acc_ref = refs[n_epilogue], refs[n_epilogue + 1]
    k = pl.program_id(2)

    @pl.when(k == 0)
    def _zero():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    acc_ref[...] += jnp.dot(a_ref[...], b_ref[...], preferred_element_type=jnp.float32)

    @pl.when(k == pl.num_programs(2) - 1)
    def _epilogue_and_store():
        acc = acc_ref[...].astype(_DOT_DTYPE)
        (out,) = _epilogue(acc, *[ref[...] for ref in epilogue_refs], **dims)
        o_ref[...] = out.astype(o_ref.dtype)


def _fit_k(block, k):
    """The largest multiple of LANES <= block that divides K, else the whole K."""
    if k <= block:
        return k
    for candidate in range(block - block % LANES, 0, -LANES):
        if k % candidate == 0:
            return candidate
    return k


def _epilogue_spec(kind, bm, bn):
    if kind == "n":
        return pl.BlockSpec((bn,), lambda i, j, kk: (j,))
    if kind == "1n":
        return pl.BlockSpec((1, bn), lambda i, j, kk: (0, j))
    if kind == "m1":
        return pl.BlockSpec((bm, 1), lambda i, j, kk: (i, 0))
    return pl.BlockSpec((bm, bn), lambda i, j, kk: (i, j))


@functools.partial(jax.jit, static_argnames=("block_m", "block_n", "block_k"))
def %NAME%(%ARGS%, *, block_m: int = %BM%, block_n: int = %BN%, block_k: int = %BK%):
    args = (%ARGS%,)
    other_dims = %OTHER_DIMS%
    a, b = args[%A%], args[%B%]
    epilogue_args = tuple(args[i] for i in _EPILOGUE_ARGS)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"{a.shape=} and {b.shape=} do not chain")
    m, k = a.shape
    n = b.shape[1]
    if block_m % SUBLANES or block_n % LANES:
        raise ValueError(f"{block_m=} must be a multiple of {SUBLANES}, {block_n=} of {LANES}")
    for operand, kind in zip(epilogue_args, _EPILOGUE_KINDS, strict=True):
        want = {"n": (n,), "1n": (1, n), "m1": (m, 1), "mn": (m, n)}[kind]
        if operand.shape != want:
            raise ValueError(f"{operand.shape=} must be {want}")
    bm = m if m <= block_m else block_m
    bn = n if n <= block_n else block_n
    bk = _fit_k(block_k, k)
    dims = {**{_M: m, _K: k, _N: n}, **other_dims, _M: bm, _N: bn}
    return pl.pallas_call(
        functools.partial(_kernel, dims=dims, n_epilogue=len(epilogue_args)),
        out_shape=jax.ShapeDtypeStruct((m, n), %OUT_DTYPE%),
        grid=(pl.cdiv(m, bm), pl.cdiv(n, bn), k // bk),
        in_specs=[
            pl.BlockSpec((bm, bk), lambda i, j, kk: (i, kk)),
            pl.BlockSpec((bk, bn), lambda i, j, kk: (kk, j)),
            *[_epilogue_spec(kind, bm, bn) for kind in _EPILOGUE_KINDS],
        ],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, kk: (i, j)),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary")),
    )(a, b, *epilogue_args)


def build(block_m: int = %BM%, block_n: int = %BN%, block_k: int = %BK%):
    return functools.partial(%NAME%, block_m=block_m, block_n=block_n, block_k=block_k)
'''


def _kind(dims: tuple[Any, ...], m: str, n: str) -> str:
    return {(n,): "n", (1, n): "1n", (m, 1): "m1", (m, n): "mn"}[dims]


def matmul_source(facts: TaskFacts, params: dict[str, Any], task_name: str,
                  chip: dict[str, Any] | None = None) -> str:
    d = facts.detail
    blocks = default_blocks(facts, chip)
    for key in blocks:
        if isinstance(params.get(key), int) and params[key] > 0:
            blocks[key] = int(params[key])
    floors = {"block_m": sublane_tile([*(a.dtype for a in facts.args), *(o[1] for o in facts.outs)]),
              "block_n": LANES}
    blocks["block_m"] = aligned(blocks["block_m"], floors["block_m"])
    blocks["block_n"] = aligned(blocks["block_n"], LANES)
    tunables = aligned_tunables(params.get("tunables") or matmul_tunables(blocks), floors)
    names = [a.name for a in facts.args]
    epi = d["epilogue_args"]
    kinds = tuple(_kind(facts.args[i].dims, d["m"], d["n"]) for i in epi)
    other = {s: f"{names[i]}.shape[{ax}]" for i, a in enumerate(facts.args)
             for ax, s in enumerate(a.dims) if isinstance(s, str) and s not in (d["m"], d["k"], d["n"])}
    other_src = "{" + ", ".join(f"{s!r}: {expr}" for s, expr in other.items()) + "}"
    ops = ", ".join(o for o in d.get("epilogue_ops", []) if o not in ("broadcast_in_dim", "dim_as_value"))
    doc = (f"matmul + fused epilogue kernel for {task_name}: (i, j) tiles parallel, K arbitrary "
           f"into a VMEM f32 accumulator; epilogue ops ({ops or 'none'}) at the last K step.\n\n"
           + "\n".join(f"Class evidence: {r}" for r in facts.reasons))
    constants = "\n".join([
        tunables_literal(tunables),
        f"_M, _K, _N = {d['m']!r}, {d['k']!r}, {d['n']!r}",
        f"_EPILOGUE_ARGS = {tuple(epi)!r}",
        f"_EPILOGUE_KINDS = {kinds!r}",
        f"_DOT_DTYPE = jnp.{d['dot_dtype']}",
    ])
    body = (_TEMPLATE.replace("%NAME%", "matmul_epilogue_kernel").replace("%ARGS%", ", ".join(names))
            .replace("%A%", str(d["a"])).replace("%B%", str(d["b"]))
            .replace("%OTHER_DIMS%", other_src).replace("%OUT_DTYPE%", f"jnp.{facts.outs[0][1]}")
            .replace("%BM%", str(blocks["block_m"])).replace("%BN%", str(blocks["block_n"]))
            .replace("%BK%", str(blocks["block_k"])))
    return header(doc) + "\n" + constants + "\n" + NARY_HELPER + "\n\n" + d["epilogue_source"] + body
