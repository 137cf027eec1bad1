"""Flash-style attention: softmax(q k^T * scale) v with an online softmax over KV blocks.

Leading axes (batch, heads) are merged into one `parallel` grid axis outside the kernel
(a reshape, a layout op); q blocks are `parallel`, KV blocks `arbitrary` (running max, sum
and f32 accumulator in VMEM scratch). Grouped-query attention needs no copy of K and V:
the K/V index map sends query head h to key/value head h // (q_heads / kv_heads). Causal: KV blocks wholly above the diagonal are
skipped with `pl.when` and their index map is clamped, so they are not fetched either.
A KV tail (length not a multiple of the block) is masked.

Operands in (batch, seq, heads, depth) layout are swapped to (batch, heads, seq, depth)
outside the kernel (and the output back). An additive score bias (..., q_len, kv_len), its
leading axes a suffix of q's (batch, heads), is read block by block beside the scores.

The schedule is an `AttentionSpec` (heads per block, score layout, exp form, MXU dtype,
buffering, ...); `attention_levers` maps specs to specs and `render` writes one out.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from agents.llm.offline.attention_body import kernel_source
from agents.llm.offline.classify import TaskFacts
from agents.llm.offline.common import (
    SUBLANES,
    aligned,
    aligned_tunables,
    header,
    scoped_vmem,
    sublane_tile,
    tunables_literal,
)
from agents.llm.offline.levers import deepest_buffering


@dataclass(frozen=True)
class AttentionSpec:
    """The schedule of one attention kernel (the algorithm never changes)."""

    block_q: int
    block_kv: int
    heads_per_block: int = 1  # (batch x head) groups per block: batched dots over them
    layout: str = "rows"  # scores (q, kv) and acc (q, d); "transposed": (kv, q) and (d, q)
    operands: str = "rows"  # q, k, v and out blocks (seq, d); "transposed": (d, seq), seq on lanes
    exp: str = "exp"  # "exp2": log2(e) folded into the q scale, exp2 on the EUP
    mxu_dtype: str = "float32"  # MXU operands: "float32", "input" (the inputs' dtype) or "bfloat16"
    accumulate: str = "scratch"  # f32 acc in VMEM "scratch", or in the f32 "output" block
    normalize: str = "divide"  # acc / l, or "reciprocal": one 1/l per row, then a multiply
    hoist_q: bool = False  # q scaled and cast once per KV sweep into a scratch
    buffers: int = 2  # pipeline depth of the k and v copies
    single_buffer_q: bool = False  # q's block is fixed through a KV sweep: one buffer
    kv_in_one_block: bool = False  # the whole KV length in one block: a plain softmax, no carry
    grid_order: str = "gq"  # "gq": head groups outermost; "qg": q blocks outermost
    sub_q: int = 1  # inner fori_loop sub-tiles along q per block
    stair_tile: int = 0  # causal: the diagonal block as a staircase of q sub-tiles this wide
    vmem_limit_bytes: int | None = None
    tune_schedule: bool = False  # heads_per_block and buffers in TUNABLES too
    levers: tuple[str, ...] = field(default=(), compare=False)


def bhsd(facts: TaskFacts, role: str) -> tuple[int, ...]:
    """The tuning shape of operand `role` ("q", "k", "v") as (..., heads, seq, depth)."""
    shape = facts.args[facts.detail[role]].shape
    if facts.detail.get("layout") == "bshd":
        return (shape[0], shape[2], shape[1], *shape[3:])
    return shape


def has_bias(facts: TaskFacts) -> bool:
    return facts.detail.get("bias") is not None


def default_blocks(facts: TaskFacts, chip: dict[str, Any] | None) -> dict[str, int]:
    del chip
    q, k = bhsd(facts, "q"), bhsd(facts, "k")
    block_q = min(512, -(-q[-2] // SUBLANES) * SUBLANES)
    block_kv = min(512, -(-k[-2] // SUBLANES) * SUBLANES)
    return {"block_q": block_q, "block_kv": block_kv}


def row_tile(facts: TaskFacts) -> int:
    return sublane_tile([*(a.dtype for a in facts.args), *(o[1] for o in facts.outs)])


def default_spec(facts: TaskFacts, params: dict[str, Any], chip: dict[str, Any] | None) -> AttentionSpec:
    """Blocks of up to 512 along q and KV; a narrow head_dim with seq on the lanes; as many
    (batch x head) groups per block as keep the step's scores within `SCORES_PER_STEP`."""
    blocks = default_blocks(facts, chip)
    sub = row_tile(facts)
    for key in blocks:
        value = params[key] if isinstance(params.get(key), int) and params[key] > 0 else blocks[key]
        blocks[key] = aligned(value, sub)
    spec = AttentionSpec(block_q=blocks["block_q"], block_kv=blocks["block_kv"],
                         mxu_dtype=reference_mxu_dtype(facts))
    if seq_on_lanes_pays(facts):
        spec = replace(spec, operands="transposed", layout="transposed")
    return replace(spec, heads_per_block=default_heads(facts, spec, scoped_vmem(chip)))


SCORES_PER_STEP = 1 << 20
"""f32 scores one grid step may hold (4 MiB): heads are packed up to this, so short
sequences do not pay the per-step cost once per head, nor long ones spill."""


def seq_on_lanes_pays(facts: TaskFacts) -> bool:
    """A head_dim that does not fill the lanes pads every (seq, head_dim) block up to them,
    and XLA:TPU keeps such arrays seq-minor, so a kernel reading them row-major gets relayout
    copies around it; (head_dim, seq) blocks are dense and a bitcast there (a score bias
    block is then transposed in VMEM). Not for sequences shorter than the lanes."""
    g = geometry(facts)
    return g["depth"] % 128 != 0 and min(g["q_len"], g["kv_len"]) >= 128


def head_choices(facts: TaskFacts, spec: AttentionSpec, vmem_budget: int) -> list[int]:
    """Heads per block that pack the groups and fit 3/4 of `vmem_budget`, ascending."""
    g = geometry(facts)
    return [h for h in (1, 2, 4, 8, 16) if h == 1 or (
        packs(g["groups"], g["repeat"], h) and bias_packs(facts, h)
        and vmem_bytes(facts, replace(spec, heads_per_block=h)) <= vmem_budget * 3 // 4)]


def default_heads(facts: TaskFacts, spec: AttentionSpec, vmem_budget: int) -> int:
    _, bq, bkv = effective(facts, replace(spec, heads_per_block=1))
    return max(h for h in head_choices(facts, spec, vmem_budget) if h == 1 or h * bq * bkv <= SCORES_PER_STEP)


def reference_mxu_dtype(facts: TaskFacts) -> str:
    """"input" where the reference's own dots take the inputs' narrow dtype (bf16 q and k,
    bf16 probabilities and v): the MXU gets them as they are, with float32 accumulation, no
    less precise than the reference; else float32 operands."""
    q_dtype = facts.args[facts.detail["q"]].dtype
    narrow = np.dtype(q_dtype).itemsize < 4
    return "input" if narrow and facts.detail.get("dots_dtype") == str(q_dtype) else "float32"


def geometry(facts: TaskFacts) -> dict[str, int]:
    """Groups, heads, lengths and depth at the tuning point."""
    d = facts.detail
    q, k = bhsd(facts, "q"), bhsd(facts, "k")
    q_heads, kv_heads = (q[-3], k[-3]) if len(q) == 4 else (1, 1)
    return {"groups": int(np.prod(q[:-2])), "q_len": q[-2], "kv_len": k[-2], "depth": q[-1],
            "repeat": q_heads // max(kv_heads, 1), "itemsize": np.dtype(facts.args[d["q"]].dtype).itemsize}


def effective(facts: TaskFacts, spec: AttentionSpec) -> tuple[int, int, int]:
    g = geometry(facts)
    bq = g["q_len"] if g["q_len"] <= spec.block_q else spec.block_q
    bkv = g["kv_len"] if spec.kv_in_one_block or g["kv_len"] <= spec.block_kv else spec.block_kv
    hb = spec.heads_per_block if packs(g["groups"], g["repeat"], spec.heads_per_block) else 1
    if has_bias(facts):  # a bias block spans lanes
        hb, bkv = hb if bias_packs(facts, hb) else 1, min(g["kv_len"], -(-bkv // 128) * 128)
    if spec.operands == "transposed":  # q and kv blocks span the lanes
        bq, bkv = min(g["q_len"], -(-bq // 128) * 128), min(g["kv_len"], -(-bkv // 128) * 128)
    return hb, bq, bkv


def bias_packs(facts: TaskFacts, heads: int) -> bool:
    """Can a block of `heads` query groups read one score-bias block? Query group g reads bias
    group g % bias_groups: consecutive ones where `heads` divides the bias groups, the same
    one (broadcast over the block) where there is one; always without a bias."""
    if not has_bias(facts):
        return True
    shape = facts.args[facts.detail["bias"]].shape
    bias_groups = int(np.prod(shape[:-2]))
    return heads == 1 or bias_groups == 1 or bias_groups % heads == 0


def packs(groups: int, repeat: int, heads: int) -> bool:
    """Can `heads` (batch x head) groups share a block? When they divide the groups; with
    grouped-query heads also when they divide one kv head's query heads (which then share its
    k and v block) or are whole multiples of them (the block then holds as many kv heads, each
    read by its own query heads)."""
    if repeat == 1 or heads % repeat == 0:
        return groups % heads == 0
    return repeat % heads == 0


def vmem_bytes(facts: TaskFacts, spec: AttentionSpec) -> int:
    g = geometry(facts)
    hb, bq, bkv = effective(facts, spec)
    isz, d = g["itemsize"], g["depth"]
    total = (1 if spec.single_buffer_q else 2) * hb * bq * d * isz + spec.buffers * 2 * hb * bkv * d * isz
    total += 2 * hb * bq * d * isz + 2 * 4 * hb * bq * bkv  # out blocks, scores and probabilities
    if has_bias(facts):
        total += 2 * hb * bq * bkv * np.dtype(facts.args[facts.detail["bias"]].dtype).itemsize
    if not spec.kv_in_one_block:
        stats = 2 * hb * (bq * 128 if spec.layout == "rows" else 8 * bq) * 4
        total += stats + (4 * hb * bq * d if spec.accumulate == "scratch" else 0)
        total += 4 * hb * bq * d if spec.hoist_q else 0
    return total


def strategy_line(spec: AttentionSpec) -> str:
    parts = [f"blocks q {spec.block_q} x kv {spec.block_kv}",
             "grid (groups, q, kv)" if spec.grid_order == "gq" else "grid (q, groups, kv)"]
    if spec.heads_per_block > 1:
        parts.append(f"{spec.heads_per_block} heads per block (batched dots)")
    if spec.operands == "transposed":
        parts.append("q, k, v and the output in (head_dim, seq) blocks: seq on the lanes")
    if spec.layout == "transposed":
        parts.append("transposed scores (kv, q) and accumulator (d, q): q on the lanes")
    if spec.kv_in_one_block:
        parts.append("the whole KV in one block (plain softmax, no running state)")
    elif spec.accumulate == "output":
        parts.append("f32 accumulator is the output block")
    parts.append({"float32": "f32 MXU operands", "input": "MXU operands in the inputs' dtype",
                  "bfloat16": "bf16 MXU operands"}[spec.mxu_dtype] + ", f32 accumulation")
    if spec.exp == "exp2":
        parts.append("exp2 with log2(e) folded into the q scale")
    if spec.normalize == "reciprocal":
        parts.append("one reciprocal of the row sum, then a multiply")
    if spec.hoist_q:
        parts.append("q scaled once per KV sweep (VMEM scratch)")
    if spec.buffers != 2:
        parts.append(f"{spec.buffers}-deep k/v pipeline")
    if spec.single_buffer_q:
        parts.append("single-buffered q")
    if spec.sub_q > 1:
        parts.append(f"{spec.sub_q} fori_loop sub-tiles along q")
    if spec.stair_tile:
        parts.append(f"the diagonal block as a staircase of {spec.stair_tile}-wide q sub-tiles, "
                     "each reading only the keys it sees")
    if spec.vmem_limit_bytes:
        parts.append(f"vmem_limit_bytes {spec.vmem_limit_bytes:,}")
    return "; ".join(parts)


_WRAPPER = '''

def _batch_dims(x):
    """Head groups batched in the block (3-D) or squeezed out of it (2-D)."""
    return ((0,), (0,)) if x.ndim == 3 else ((), ())
%PER_HEAD%

@functools.partial(jax.jit, static_argnames=("block_q", "block_kv", "heads_per_block", "buffers"))
def %NAME%(%ARGS%, *, block_q: int = %BQ%, block_kv: %BKV_TYPE% = %BKV%, heads_per_block: int = %HB%,
           buffers: int = %BUFFERS%):
    q, k, v = %Q%, %K%, %V%
%SQUARE%    if BSHD:  # (batch, seq, heads, depth) -> (batch, heads, seq, depth): a layout op outside
        q, k, v = (jnp.swapaxes(x, 1, 2) if x.ndim == 4 else x for x in (q, k, v))
    if (q.ndim not in (3, 4) or k.shape != v.shape or k.ndim != q.ndim
            or q.shape[:-3] != k.shape[:-3] or q.shape[-1] != k.shape[-1]):
        raise ValueError(f"{q.shape=}, {k.shape=}, {v.shape=} are not attention operands")
    q_heads, kv_heads = (q.shape[-3], k.shape[-3]) if q.ndim == 4 else (1, 1)
    if (q.ndim == 3 and q.shape[0] != k.shape[0]) or q_heads % kv_heads:
        raise ValueError(f"{q.shape=} and {k.shape=}: query heads must be a multiple of kv heads")
    if block_q % SUBLANES or block_kv % SUBLANES:
        raise ValueError(f"{block_q=} and {block_kv=} must be multiples of {SUBLANES}")
    lead, (q_len, depth), kv_len = q.shape[:-2], q.shape[-2:], k.shape[-2]
    groups, kv_groups = int(np.prod(lead)), int(np.prod(k.shape[:-2]))
    repeat = q_heads // kv_heads  # query head h reads key/value head h // repeat
    if repeat == 1 or heads_per_block % repeat == 0:  # whole kv heads' query heads per block
        packed = groups % heads_per_block == 0
    else:  # some of one kv head's query heads
        packed = repeat % heads_per_block == 0
    hb = heads_per_block if packed else 1
    bq = q_len if q_len <= block_q else block_q
    bkv = kv_len if KV_IN_ONE_BLOCK or kv_len <= block_kv else block_kv
    if BIAS:  # the bias block's last axis is on the lanes; q group g reads bias group g % groups
        bias_groups = int(np.prod(%BIAS%.shape[:-2]))
        hb = hb if bias_groups == 1 or bias_groups % hb == 0 else 1
        bkv = min(kv_len, pl.cdiv(bkv, LANES) * LANES)
    if SEQ_ON_LANES:  # the q and kv blocks are the lane axis of theirs: whole lengths or 128s
        bq, bkv = min(q_len, pl.cdiv(bq, LANES) * LANES), min(kv_len, pl.cdiv(bkv, LANES) * LANES)
    sub = SUB_Q if bq % (SUB_Q * SUBLANES) == 0 else 1
%DIAGONAL%    q3 = q.reshape(groups, q_len, depth)
    k3, v3 = k.reshape(kv_groups, kv_len, depth), v.reshape(kv_groups, kv_len, depth)
    if SEQ_ON_LANES:  # (groups, depth, seq): where XLA keeps a narrow head_dim minor-last, a bitcast
        q3, k3, v3 = (jnp.swapaxes(x, 1, 2) for x in (q3, k3, v3))
    head = hb if hb > 1 else None  # several groups per block, or one squeezed out
    # the kv heads of a block: as many as its query groups, or (grouped-query) one per `repeat`
    # of them, or none squeezed out where the block's query heads all read one kv head
    kv_head = head if repeat == 1 else (hb // repeat if hb > repeat else None)
%PER_BLOCK%
    def q_index(%GRID_ARGS%):
        return (g, 0, i) if SEQ_ON_LANES else (g, i, 0)

    def kv_index(%GRID_ARGS%):
        if CAUSAL:  # a block above the diagonal repeats the last needed one: no new fetch
            j = jnp.minimum(j, (i * bq + bq - 1) // bkv)
        h = g if kv_head is not None else (  # else the kv head of the block's first query group
            ((g * hb) // q_heads) * kv_heads + ((g * hb) % q_heads) // repeat)
        return (h, 0, j) if SEQ_ON_LANES else (h, j, 0)

    q_block = (head, depth, bq) if SEQ_ON_LANES else (head, bq, depth)
    kv_block = (kv_head, depth, bkv) if SEQ_ON_LANES else (kv_head, bkv, depth)
    q_spec = (pl.BlockSpec(q_block, q_index, pipeline_mode=pl.Buffered(1)) if SINGLE_BUFFER_Q
              else pl.BlockSpec(q_block, q_index))
    kv_spec = %KV_SPEC%
    operands, in_specs = [q3, k3, v3], [q_spec, kv_spec, kv_spec]
    if BIAS:
        bias = %BIAS%
        if (bias.ndim < 2 or bias.ndim - 2 > len(lead) or bias.shape[-2:] != (q_len, kv_len)
                or bias.shape[:-2] != lead[len(lead) - bias.ndim + 2:]):
            raise ValueError(f"{bias.shape=} is not a score bias for {q.shape=} and {k.shape=}")
        bias_head = hb if hb > 1 and bias_groups % hb == 0 else None  # else one, broadcast

        def bias_index(%GRID_ARGS%):
            if CAUSAL:
                j = jnp.minimum(j, (i * bq + bq - 1) // bkv)
            return ((g * hb) % bias_groups // (bias_head or 1), i, j)

        operands.append(bias.reshape(bias_groups, q_len, kv_len))
        in_specs.append(pl.BlockSpec((bias_head, bq, bkv), bias_index))
    out = pl.pallas_call(
        functools.partial(_kernel, scale=float(%SCALE%)%LOG2E%, block_q=bq, block_kv=bkv, kv_len=kv_len,
                          sub_q=sub%DIAGONAL_ARG%),
        out_shape=jax.ShapeDtypeStruct(q3.shape, q.dtype),
        grid=%GRID%,
        in_specs=in_specs,
        out_specs=pl.BlockSpec(q_block, q_index),
        scratch_shapes=%SCRATCH%,
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary"),
            vmem_limit_bytes=VMEM_LIMIT_BYTES),
    )(*operands)
    out = (jnp.swapaxes(out, 1, 2) if SEQ_ON_LANES else out).reshape(q.shape)
    return jnp.swapaxes(out, 1, 2) if BSHD and out.ndim == 4 else out


def build(block_q: int = %BQ%, block_kv: %BKV_TYPE% = %BKV%, heads_per_block: int = %HB%, buffers: int = %BUFFERS%):
    return functools.partial(%NAME%, block_q=block_q, block_kv=block_kv, heads_per_block=heads_per_block,
                             buffers=buffers)
'''


_PER_HEAD = '''

def _per_head(x, like):
    """The block's kv heads, each read by its own query heads (grouped-query): one kv head's
    block broadcast to all of them, or each of several repeated for its `repeat` in turn."""
    if x.ndim < like.ndim:
        return jnp.broadcast_to(x, (like.shape[0], *x.shape))
    repeat = like.shape[0] // x.shape[0]
    if repeat == 1:
        return x
    return jnp.broadcast_to(x[:, None], (x.shape[0], repeat, *x.shape[1:])).reshape(
        like.shape[0], *x.shape[1:])
'''


_SQUARE = """\
    block_kv = block_q if block_kv is None else block_kv  # a staircase wants square blocks
"""

_DIAGONAL = """\
    # a staircase needs square blocks on the diagonal, of two sub-tiles or more
    diagonal = (bq // STAIR_TILE if bq == bkv and q_len == kv_len and bq % STAIR_TILE == 0
                else 1)
"""


def _scratch(spec: AttentionSpec) -> str:
    if spec.kv_in_one_block:
        return "[]"
    stats = "(*per_block, bq, 1)" if spec.layout == "rows" else "(*per_block, 1, bq)"
    acc = "(*per_block, bq, depth)" if spec.layout == "rows" else "(*per_block, depth, bq)"
    out = [f"pltpu.VMEM({stats}, jnp.float32)", f"pltpu.VMEM({stats}, jnp.float32)"]
    if spec.accumulate == "scratch":
        out.append(f"pltpu.VMEM({acc}, jnp.float32)")
    if spec.hoist_q:
        dtype = {"float32": "jnp.float32", "input": "q.dtype", "bfloat16": "jnp.bfloat16"}[spec.mxu_dtype]
        q_shape = "depth, bq" if spec.operands == spec.layout == "transposed" else "bq, depth"
        out.append(f"pltpu.VMEM((*per_block, {q_shape}), {dtype})")
    return "[" + ", ".join(out) + "]"


def render(facts: TaskFacts, spec: AttentionSpec, task_name: str,
           tunables: dict[str, list[int]] | None = None) -> str:
    d = facts.detail
    sub = row_tile(facts)
    blocks = {"block_q": spec.block_q, "block_kv": spec.block_kv}
    tunables = aligned_tunables(tunables or {
        name: list(dict.fromkeys([v, max(SUBLANES, v // 2), v * 2])) for name, v in blocks.items()},
        dict.fromkeys(blocks, sub))
    hb, packing = spec.heads_per_block, head_choices(facts, spec, scoped_vmem(None))
    heads = [h for h in dict.fromkeys([hb, 2 * hb, hb // 2, *([1] if spec.tune_schedule else [])])
             if h == hb or h in packing]
    if len(heads) > 1:
        tunables = {**tunables, "heads_per_block": heads}
    if spec.stair_tile:  # square blocks: block_kv follows block_q
        tunables = {k: v for k, v in tunables.items() if k != "block_kv"}
    if spec.tune_schedule and deepest_buffering() > 2:
        tunables = {**tunables, "buffers": list(dict.fromkeys([spec.buffers, 2, 3]))}
    names = [a.name for a in facts.args]
    scale = "depth ** -0.5" if d["scale"] == "rsqrt_d" else "1.0"
    kind = ("causal" if d["causal"] else "non-causal") + (" grouped-query" if d.get("kv_heads") else "")
    kind += " biased" if has_bias(facts) else ""
    doc = (f"{kind} flash attention kernel for {task_name}: online softmax over KV blocks, "
           "f32 running max/sum/accumulator in VMEM.\n\n"
           f"Schedule: {strategy_line(spec)}.\n"
           f"Levers applied: {', '.join(spec.levers) or 'none (the class default)'}.\n\n"
           + "\n".join(f"Class evidence: {r}" for r in facts.reasons))
    constants = "\n".join([
        tunables_literal(tunables), f"CAUSAL = {bool(d['causal'])}",
        f"KV_IN_ONE_BLOCK = {spec.kv_in_one_block}", f"SINGLE_BUFFER_Q = {spec.single_buffer_q}",
        f"SUB_Q = {spec.sub_q}", f"VMEM_LIMIT_BYTES = {spec.vmem_limit_bytes!r}",
        *([f"STAIR_TILE = {spec.stair_tile}  # causal: the diagonal block's q sub-tiles"]
          if spec.stair_tile else []),
        f"SEQ_ON_LANES = {spec.operands == 'transposed'}  # q, k, v and out in (head_dim, seq) blocks",
        f"BSHD = {d.get('layout') == 'bshd'}  # operands given as (batch, seq, heads, depth)",
        f"BIAS = {has_bias(facts)}  # an additive score bias input",
        "LANES = 128",
        "MASK_VALUE = -0.7 * float(np.finfo(np.float32).max)",
        *(["_LOG2E = 1.4426950408889634  # exp(x) == exp2(x * log2(e))"] if spec.exp == "exp2" else [])])
    grouped = geometry(facts)["repeat"] > 1
    pipelined = spec.buffers != 2 or spec.tune_schedule
    kv_spec = ("pl.BlockSpec(kv_block, kv_index, pipeline_mode=pl.Buffered(buffers))" if pipelined
               else "pl.BlockSpec(kv_block, kv_index)")
    grid = ("(groups // hb, pl.cdiv(q_len, bq), pl.cdiv(kv_len, bkv))" if spec.grid_order == "gq"
            else "(pl.cdiv(q_len, bq), groups // hb, pl.cdiv(kv_len, bkv))")
    body = (_WRAPPER.replace("%NAME%", "attention_kernel").replace("%ARGS%", ", ".join(names))
            .replace("%Q%", names[d["q"]]).replace("%K%", names[d["k"]]).replace("%V%", names[d["v"]])
            .replace("%BIAS%", names[d["bias"]] if has_bias(facts) else "None")
            .replace("%SCALE%", scale).replace("%LOG2E%", " * _LOG2E" if spec.exp == "exp2" else "")
            .replace("%PER_BLOCK%", "" if spec.kv_in_one_block else "    per_block = (hb,) if hb > 1 else ()\n")
            .replace("%PER_HEAD%", _PER_HEAD if grouped else "")
            .replace("%DIAGONAL%", _DIAGONAL if spec.stair_tile else "")
            .replace("%DIAGONAL_ARG%", ", diagonal=diagonal" if spec.stair_tile else "")
            .replace("%KV_SPEC%", kv_spec).replace("%GRID%", grid).replace("%SCRATCH%", _scratch(spec))
            .replace("%GRID_ARGS%", "g, i, j" if spec.grid_order == "gq" else "i, g, j")
            .replace("%SQUARE%", _SQUARE if spec.stair_tile else "")
            .replace("%BKV_TYPE%", "int | None" if spec.stair_tile else "int")
            .replace("%BQ%", str(spec.block_q))
            .replace("%BKV%", "None" if spec.stair_tile else str(spec.block_kv))
            .replace("%HB%", str(spec.heads_per_block)).replace("%BUFFERS%", str(spec.buffers)))
    kernel = kernel_source(spec, bias=has_bias(facts), grouped=grouped,
                           summary=strategy_line(spec).split(";")[0])
    return header(doc) + "\n" + constants + "\n" + kernel + body


def attention_source(facts: TaskFacts, params: dict[str, Any], task_name: str,
                     chip: dict[str, Any] | None = None, spec: AttentionSpec | None = None) -> str:
    spec = spec or default_spec(facts, params, chip)
    return render(facts, spec, task_name, params.get("tunables"))
