"""Matmul with a fused epilogue: (i, j) output tiles `parallel`, K `arbitrary` into an f32
accumulator, and the reference's elementwise tail (bias, scale, activation, residual)
applied to the tile at the last K step, so the product never goes back to HBM unfinished.

The schedule is a `MatmulSpec`; levers (`matmul_levers`) map one spec to others and
`render` writes any spec out as a Pallas file.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

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
from agents.llm.offline.levers import deepest_buffering, raised_vmem_limit
from agents.llm.offline.matmul_blocks import MAX_TILE_ELEMENTS, best_blocks, footprint


@dataclass(frozen=True)
class MatmulSpec:
    """The schedule of one matmul + epilogue kernel (the algorithm never changes)."""

    block_m: int
    block_n: int
    block_k: int
    grid_order: str = "mn"  # "mn": M blocks outermost; "nm": N blocks outermost (K always last)
    buffers: int = 2  # pipeline depth of the a and b copies
    single_buffer: tuple[str, ...] = ()  # operands whose block never moves: "b", "epilogue"
    accumulate: str = "scratch"  # f32 sum in a VMEM "scratch", or in the f32 "output" block
    k_in_one_block: bool = False  # the whole K in one block: no K axis, no accumulator
    mxu_dtype: str = "input"  # MXU operands as given, or cast to "bfloat16" (f32 accumulation)
    epilogue_dtype: str = "dot"  # epilogue on the tile cast to the dot's dtype, or on "float32"
    sub_m: int = 1  # inner fori_loop sub-tiles along M per block
    vmem_limit_bytes: int | None = None
    tune_schedule: bool = False  # buffers and sub_m in TUNABLES too
    levers: tuple[str, ...] = field(default=(), compare=False)


def fit_k(block: int, k: int) -> int:
    """The largest multiple of 128 <= block dividing K (a K tail would pollute the sum)."""
    if k <= block:
        return k
    for candidate in range(block - block % LANES, 0, -LANES):
        if k % candidate == 0:
            return candidate
    return k


def _mkn(facts: TaskFacts) -> tuple[int, int, int]:
    d = facts.detail
    m, k, n = (facts.dim_values[d[s]] for s in ("m", "k", "n"))
    return m, k, n


def default_blocks(facts: TaskFacts, chip: dict[str, Any] | None) -> dict[str, int]:
    """The tile the chip's figures make cheapest (`matmul_blocks.best_blocks`): large enough
    that the MXU, not re-fetched operands or the per-step cost, bounds each step; small
    enough for VMEM and for the unoverlapped first fetch and last write-back."""
    blocks, _ = best_blocks(facts, chip, row_tile(facts), fit_k)
    return blocks


def vmem_limit_for(facts: TaskFacts, blocks: dict[str, int], chip: dict[str, Any] | None) -> int | None:
    """A raised `vmem_limit_bytes` where the blocks need more than the scoped default holds."""
    m, k, n = _mkn(facts)
    bk = fit_k(blocks["block_k"], k)
    need = footprint(facts, min(blocks["block_m"], m), min(blocks["block_n"], n), bk)
    return raised_vmem_limit(chip) if need > scoped_vmem(chip) * 3 // 4 else None


def _ceil_to(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def matmul_tunables(blocks: dict[str, int], facts: TaskFacts | None = None) -> dict[str, list[int]]:
    """Each block, its half and its double; with `facts`, a double the tuning point cannot
    use is left out: one past the dimension (the wrapper clamps it to the same kernel), a
    tile over `MAX_TILE_ELEMENTS` or one that fits no VMEM limit (the compile fails)."""
    out: dict[str, list[int]] = {}
    for name, value in blocks.items():
        floor = SUBLANES if name == "block_m" else LANES
        options = [value] + [v for v in (value // 2, value * 2) if v >= floor]
        if facts is not None:
            options = [value] + [v for v in options[1:] if v <= value or _usable(facts, {**blocks, name: v})]
        out[name] = list(dict.fromkeys(options))
    return out


def _usable(facts: TaskFacts, blocks: dict[str, int]) -> bool:
    m, k, n = _mkn(facts)
    bm, bn, bk = blocks["block_m"], blocks["block_n"], blocks["block_k"]
    if bm >= _ceil_to(m, SUBLANES) * 2 or bn >= _ceil_to(n, LANES) * 2 or bk > k:
        return False
    bm, bn = min(bm, m), min(bn, n)
    return bm * bn <= MAX_TILE_ELEMENTS and footprint(facts, bm, bn, fit_k(bk, k)) <= raised_vmem_limit(None) * 3 // 4


def row_tile(facts: TaskFacts) -> int:
    return sublane_tile([*(a.dtype for a in facts.args), *(o[1] for o in facts.outs)])


def default_spec(facts: TaskFacts, params: dict[str, Any], chip: dict[str, Any] | None) -> MatmulSpec:
    blocks = default_blocks(facts, chip)
    for key in blocks:
        if isinstance(params.get(key), int) and params[key] > 0:
            blocks[key] = int(params[key])
    blocks = {"block_m": aligned(blocks["block_m"], row_tile(facts)),
              "block_n": aligned(blocks["block_n"], LANES), "block_k": blocks["block_k"]}
    return MatmulSpec(**blocks, vmem_limit_bytes=vmem_limit_for(facts, blocks, chip))


def effective(facts: TaskFacts, spec: MatmulSpec) -> tuple[int, int, int]:
    """The blocks the wrapper uses at the tuning point (clamped as the wrapper clamps)."""
    m, k, n = _mkn(facts)
    bm = m if m <= spec.block_m else spec.block_m
    bn = n if n <= spec.block_n else spec.block_n
    bk = k if spec.k_in_one_block else fit_k(spec.block_k, k)
    return bm, bn, bk


def vmem_bytes(facts: TaskFacts, spec: MatmulSpec) -> int:
    bm, bn, bk = effective(facts, spec)
    isz = max(np.dtype(a.dtype).itemsize for a in facts.args)
    b_buffers = 1 if "b" in spec.single_buffer else spec.buffers
    total = isz * (spec.buffers * bm * bk + b_buffers * bk * bn) + 2 * 4 * bm * bn
    if not spec.k_in_one_block and spec.accumulate == "scratch":
        total += 4 * bm * bn
    return total + 2 * 4 * bn * len(facts.detail["epilogue_args"])


def vmem_text(facts: TaskFacts, spec: MatmulSpec) -> str:
    bm, bn, bk = effective(facts, spec)
    return (f"{spec.buffers} buffers x ({bm}x{bk}) a, {1 if 'b' in spec.single_buffer else spec.buffers} x "
            f"({bk}x{bn}) b, 2 x {bm}x{bn} out"
            + (f", 4 B x {bm}x{bn} f32 accumulator" if not spec.k_in_one_block and spec.accumulate == "scratch"
               else "") + f" = {vmem_bytes(facts, spec):,} B")


def _kind(dims: tuple[Any, ...], m: str, n: str) -> str:
    return {(n,): "n", (1, n): "1n", (m, 1): "m1", (m, n): "mn", (1,): "1"}[dims]


def _index_maps(spec: MatmulSpec) -> dict[str, str]:
    """Index-map lambdas for a, b, the output and each epilogue kind, in the grid's order."""
    axes = ["i", "j"] if spec.grid_order == "mn" else ["j", "i"]
    if not spec.k_in_one_block:
        axes.append("kk")
    head = "lambda " + ", ".join(axes) + ": "
    k = "0" if spec.k_in_one_block else "kk"
    return {"a": head + f"(i, {k})", "b": head + f"({k}, j)", "o": head + "(i, j)",
            "n": head + "(j,)", "1n": head + "(0, j)", "m1": head + "(i, 0)", "mn": head + "(i, j)",
            "1": head + "(0,)"}


def _pipeline(buffers: int) -> str:
    return "" if buffers == 2 else f", pipeline_mode=pl.Buffered({buffers})"


def _kernel_source(spec: MatmulSpec) -> str:
    cast = ".astype(jnp.bfloat16)" if spec.mxu_dtype == "bfloat16" else ""
    to_dot = "" if spec.epilogue_dtype == "float32" else ".astype(_DOT_DTYPE)"
    lines = ["", "", "def _kernel(a_ref, b_ref, *refs, dims, n_epilogue, sub_m):",
             '    """One (i, j) output tile; ' + ("the whole K in this step." if spec.k_in_one_block
                                                  else "K blocks accumulate in f32.") + '"""',
             "    epilogue_refs = refs[:n_epilogue]", "    o_ref = refs[n_epilogue]"]
    if spec.k_in_one_block:
        lines += [f"    a_tile = a_ref[...]{cast}", f"    b_tile = b_ref[...]{cast}",
                  "    product = jnp.dot(a_tile, b_tile, preferred_element_type=jnp.float32)",
                  f"    (out,) = _epilogue(product{to_dot}, *[ref[...] for ref in epilogue_refs], **dims)",
                  "    o_ref[...] = out.astype(o_ref.dtype)"]
        return "\n".join(lines) + "\n"
    acc = "o_ref" if spec.accumulate == "output" else "refs[n_epilogue + 1]"
    lines += [f"    acc_ref = {acc}", "    k_step = pl.program_id(2)", "",
              "    @pl.when(k_step == 0)", "    def _zero():", "        acc_ref[...] = jnp.zeros_like(acc_ref)", ""]
    if spec.sub_m > 1:
        lines += [f"    b_tile = b_ref[...]{cast}", "    rows = acc_ref.shape[0] // sub_m", "",
                  "    def _sub_tile(s, carry):", "        r = pl.multiple_of(s * rows, rows)",
                  f"        a_tile = a_ref[pl.ds(r, rows), :]{cast}",
                  "        acc_ref[pl.ds(r, rows), :] += jnp.dot(a_tile, b_tile, "
                  "preferred_element_type=jnp.float32)",
                  "        return carry", "", "    lax.fori_loop(0, sub_m, _sub_tile, 0, unroll=True)"]
    else:
        lines += [f"    a_tile = a_ref[...]{cast}", f"    b_tile = b_ref[...]{cast}",
                  "    acc_ref[...] += jnp.dot(a_tile, b_tile, preferred_element_type=jnp.float32)"]
    lines += ["", "    @pl.when(k_step == pl.num_programs(2) - 1)", "    def _epilogue_and_store():",
              f"        acc = acc_ref[...]{to_dot}",
              "        (out,) = _epilogue(acc, *[ref[...] for ref in epilogue_refs], **dims)",
              "        o_ref[...] = out.astype(o_ref.dtype)"]
    return "\n".join(lines) + "\n"


_WRAPPER = '''

def _fit_k(block, k):
    """The largest multiple of LANES <= block that divides K, else the whole K."""
    if k <= block:
        return k
    for candidate in range(block - block % LANES, 0, -LANES):
        if k % candidate == 0:
            return candidate
    return k


def _epilogue_spec(kind, bm, bn, single):
    index_map = _EPILOGUE_MAPS[kind]
    shape = {"n": (bn,), "1n": (1, bn), "m1": (bm, 1), "mn": (bm, bn), "1": (1,)}[kind]
    if single:
        return pl.BlockSpec(shape, index_map, pipeline_mode=pl.Buffered(1))
    return pl.BlockSpec(shape, index_map)


@functools.partial(jax.jit, static_argnames=("block_m", "block_n", "block_k", "buffers", "sub_m"))
def %NAME%(%ARGS%, *, block_m: int = %BM%, block_n: int = %BN%, block_k: int = %BK%,
           buffers: int = %BUFFERS%, sub_m: int = %SUB_M%):
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
        want = {"n": (n,), "1n": (1, n), "m1": (m, 1), "mn": (m, n), "1": (1,)}[kind]
        if operand.shape != want:
            raise ValueError(f"{operand.shape=} must be {want}")
    bm = m if m <= block_m else block_m
    bn = n if n <= block_n else block_n
    bk = %BK_EXPR%
    sub = sub_m if bm % (sub_m * SUBLANES) == 0 else 1  # sub-tiles only where they stay aligned
    dims = {**{_M: m, _K: k, _N: n}, **other_dims, _M: bm, _N: bn}
    b_single = _B_SINGLE and bk == k and bn == n  # b's block never moves: one buffer
    epilogue_single = [_E_SINGLE and (bn == n if kind in ("n", "1n") else bm == m if kind == "m1"
                                       else kind == "1" or (bm == m and bn == n))
                       for kind in _EPILOGUE_KINDS]
    a_spec = pl.BlockSpec((bm, bk), %A_MAP%%PIPELINE%)
    b_spec = (pl.BlockSpec((bk, bn), %B_MAP%, pipeline_mode=pl.Buffered(1)) if b_single
              else pl.BlockSpec((bk, bn), %B_MAP%%PIPELINE%))
    return pl.pallas_call(
        functools.partial(_kernel, dims=dims, n_epilogue=len(epilogue_args), sub_m=sub),
        out_shape=jax.ShapeDtypeStruct((m, n), %OUT_DTYPE%),
        grid=%GRID%,
        in_specs=[
            a_spec,
            b_spec,
            *[_epilogue_spec(kind, bm, bn, single)
              for kind, single in zip(_EPILOGUE_KINDS, epilogue_single, strict=True)],
        ],
        out_specs=pl.BlockSpec((bm, bn), %O_MAP%),
        scratch_shapes=%SCRATCH%,
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=%SEMANTICS%,
            vmem_limit_bytes=VMEM_LIMIT_BYTES),
    )(a, b, *epilogue_args)


def build(block_m: int = %BM%, block_n: int = %BN%, block_k: int = %BK%, buffers: int = %BUFFERS%,
          sub_m: int = %SUB_M%):
    return functools.partial(%NAME%, block_m=block_m, block_n=block_n, block_k=block_k,
                             buffers=buffers, sub_m=sub_m)
'''


def strategy_line(spec: MatmulSpec) -> str:
    parts = [f"blocks {spec.block_m}x{spec.block_n}x{spec.block_k}",
             "grid (i, j, k)" if spec.grid_order == "mn" else "grid (j, i, k)"]
    if spec.k_in_one_block:
        parts.append("the whole K in one block (no K axis, no accumulator)")
    else:
        parts.append("f32 sum in the output block" if spec.accumulate == "output" else "f32 VMEM accumulator")
    if spec.buffers != 2:
        parts.append(f"{spec.buffers}-deep a/b pipeline")
    if spec.single_buffer:
        parts.append("single buffer for " + ", ".join(spec.single_buffer))
    if spec.mxu_dtype == "bfloat16":
        parts.append("bf16 MXU operands, f32 accumulation")
    if spec.epilogue_dtype == "float32":
        parts.append("epilogue in f32")
    if spec.sub_m > 1:
        parts.append(f"{spec.sub_m} fori_loop sub-tiles along M")
    if spec.vmem_limit_bytes:
        parts.append(f"vmem_limit_bytes {spec.vmem_limit_bytes:,}")
    return "; ".join(parts)


def render(facts: TaskFacts, spec: MatmulSpec, task_name: str,
           tunables: dict[str, list[int]] | None = None) -> str:
    d = facts.detail
    floors = {"block_m": row_tile(facts), "block_n": LANES}
    blocks = {"block_m": spec.block_m, "block_n": spec.block_n, "block_k": spec.block_k}
    tunables = aligned_tunables(tunables or matmul_tunables(blocks, facts), floors)
    if spec.tune_schedule:
        tunables = {**tunables, **({"buffers": list(dict.fromkeys([spec.buffers, 2, 3]))} if deepest_buffering() > 2 else {}),
                    "sub_m": list(dict.fromkeys([spec.sub_m, 1, 2]))}
    names = [a.name for a in facts.args]
    epi = d["epilogue_args"]
    kinds = tuple(_kind(facts.args[i].dims, d["m"], d["n"]) for i in epi)
    other = {s: f"{names[i]}.shape[{ax}]" for i, a in enumerate(facts.args)
             for ax, s in enumerate(a.dims) if isinstance(s, str) and s not in (d["m"], d["k"], d["n"])}
    other_src = "{" + ", ".join(f"{s!r}: {expr}" for s, expr in other.items()) + "}"
    ops = ", ".join(o for o in d.get("epilogue_ops", []) if o not in ("broadcast_in_dim", "dim_as_value"))
    doc = (f"matmul + fused epilogue kernel for {task_name}: (i, j) tiles parallel, K arbitrary "
           f"into an f32 accumulator; epilogue ops ({ops or 'none'}) at the last K step.\n\n"
           f"Schedule: {strategy_line(spec)}.\n"
           f"Levers applied: {', '.join(spec.levers) or 'none (the class default)'}.\n\n"
           + "\n".join(f"Class evidence: {r}" for r in facts.reasons))
    maps = _index_maps(spec)
    constants = "\n".join([
        tunables_literal(tunables),
        f"_M, _K, _N = {d['m']!r}, {d['k']!r}, {d['n']!r}",
        f"_EPILOGUE_ARGS = {tuple(epi)!r}",
        f"_EPILOGUE_KINDS = {kinds!r}",
        "_EPILOGUE_MAPS = {" + ", ".join(f"{k!r}: {maps[k]}" for k in ("n", "1n", "m1", "mn", "1")) + "}",
        f"_DOT_DTYPE = jnp.{d['dot_dtype']}",
        f"VMEM_LIMIT_BYTES = {spec.vmem_limit_bytes!r}",
        f"_B_SINGLE = {'b' in spec.single_buffer}  # b single-buffered where its block never moves",
        f"_E_SINGLE = {'epilogue' in spec.single_buffer}",
    ])
    if spec.k_in_one_block:
        grid = "(pl.cdiv(m, bm), pl.cdiv(n, bn))" if spec.grid_order == "mn" else "(pl.cdiv(n, bn), pl.cdiv(m, bm))"
        semantics, scratch = '("parallel", "parallel")', "[]"
    else:
        grid = ("(pl.cdiv(m, bm), pl.cdiv(n, bn), k // bk)" if spec.grid_order == "mn"
                else "(pl.cdiv(n, bn), pl.cdiv(m, bm), k // bk)")
        semantics = '("parallel", "parallel", "arbitrary")'
        scratch = "[]" if spec.accumulate == "output" else "[pltpu.VMEM((bm, bn), jnp.float32)]"
    body = (_WRAPPER.replace("%NAME%", "matmul_epilogue_kernel").replace("%ARGS%", ", ".join(names))
            .replace("%A%", str(d["a"])).replace("%B%", str(d["b"]))
            .replace("%OTHER_DIMS%", other_src).replace("%OUT_DTYPE%", f"jnp.{facts.outs[0][1]}")
            .replace("%BK_EXPR%", "k" if spec.k_in_one_block else "_fit_k(block_k, k)")
            .replace("%A_MAP%", maps["a"]).replace("%B_MAP%", maps["b"]).replace("%O_MAP%", maps["o"])
            .replace("%PIPELINE%", _pipeline(spec.buffers) if not spec.tune_schedule else
                     ", pipeline_mode=pl.Buffered(buffers)")
            .replace("%GRID%", grid).replace("%SCRATCH%", scratch).replace("%SEMANTICS%", semantics)
            .replace("%BM%", str(spec.block_m)).replace("%BN%", str(spec.block_n))
            .replace("%BK%", str(spec.block_k)).replace("%BUFFERS%", str(spec.buffers))
            .replace("%SUB_M%", str(spec.sub_m)))
    return (header(doc) + "\n" + constants + "\n" + NARY_HELPER + "\n\n" + d["epilogue_source"]
            + _kernel_source(spec) + body)


def matmul_source(facts: TaskFacts, params: dict[str, Any], task_name: str,
                  chip: dict[str, Any] | None = None, spec: MatmulSpec | None = None) -> str:
    spec = spec or default_spec(facts, params, chip)
    return render(facts, spec, task_name, params.get("tunables"))
