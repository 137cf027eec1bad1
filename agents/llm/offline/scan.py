"""Causal linear attention as a chunked scan: o = tril(q k^T) v without the (seq x seq)
matrix, and without the step-by-step recurrence either.

Leading axes (batch, heads) are merged into one `parallel` grid axis outside the kernel (a
reshape, a layout op); the sequence is cut into chunks along an `arbitrary` axis, in order.
A (head_dim x head_dim) f32 state in VMEM scratch carries sum_s k_s v_s^T over the chunks
already done, so each chunk is two MXU products for its own causal block,
tril(q_c k_c^T) v_c, one for the past, q_c S, and one to update the state, S += k_c^T v_c.
A sequence tail (length not a multiple of the chunk) is masked out of k and v before it
can reach the state.

The block knob `block_groups` takes several (batch x head) groups per block, their products
batched: a short sequence then pays the fixed per-step cost once for many heads.

The knob `seq_on_lanes` runs the same chunks on (head_dim, chunk) blocks, the sequence on
the lanes (chunks of whole 128s): a narrow head_dim then pads no lanes, and XLA:TPU, which
keeps such arrays with the sequence minor-most, hands them over as bitcasts instead of
relayout copies.
"""

from __future__ import annotations

import math
from typing import Any

from agents.llm.offline.classify import TaskFacts
from agents.llm.offline.common import (
    SUBLANES,
    aligned,
    aligned_tunables,
    header,
    sublane_tile,
    tunables_literal,
)

LEVERS = ["chunked_scan", "state_in_vmem", "sequence_axis_arbitrary"]
STRATEGY = ("Chunked scan: per chunk the causal block on the MXU plus the carried "
            "(head_dim x head_dim) state; the state never leaves VMEM.")


def default_blocks(facts: TaskFacts, chip: dict[str, Any] | None) -> dict[str, int]:
    del chip
    seq = facts.args[facts.detail["q"]].shape[-2]
    return {"block_seq": min(128, -(-seq // SUBLANES) * SUBLANES), "block_groups": 1}


def _groups(facts: TaskFacts) -> int:
    return math.prod(facts.args[facts.detail["q"]].shape[:-2])


def extents(facts: TaskFacts) -> dict[str, int]:
    return {"block_seq": facts.args[facts.detail["q"]].shape[-2], "block_groups": _groups(facts)}


def grid_text(params: dict[str, int]) -> str:
    gb = params.get("block_groups", 1)
    return (f"grid (cdiv(batch*heads, {gb}), cdiv(seq, {params['block_seq']})): first parallel, "
            f"chunks arbitrary and in order; q/k/v/out ({gb} groups, a chunk); "
            "state in VMEM scratch.")


def vmem_bytes(facts: TaskFacts, params: dict[str, int]) -> tuple[int, str]:
    c, gb = params["block_seq"], params.get("block_groups", 1)
    depth = facts.args[facts.detail["q"]].shape[-1]
    dv = facts.args[facts.detail["v"]].shape[-1]
    total = gb * (2 * 4 * c * (2 * depth + dv) + 2 * 4 * c * dv + 4 * depth * dv + 4 * c * c)
    return total, (f"{gb} groups x (2 x 4 B x {c} x ({depth} q + {depth} k + {dv} v) + 2 x 4 B x "
                   f"{c}x{dv} out + 4 B x {depth}x{dv} state + 4 B x {c}x{c} scores) = {total:,} B")


_TEMPLATE = '''

_BATCH = ((0,), (0,))  # the groups of a block: the leading axis of every product


def _kernel(q_ref, k_ref, v_ref, o_ref, state_ref, *, seq, scale):
    """A chunk of `groups` (batch x head) rows: blocks (groups, chunk, head_dim)."""
    c = pl.program_id(1)
    chunk = q_ref.shape[1]

    @pl.when(c == 0)
    def _init():
        state_ref[...] = jnp.zeros_like(state_ref)

    rows = c * chunk + lax.broadcasted_iota(jnp.int32, (1, chunk, 1), 1)
    inside = rows < seq
    q = q_ref[...].astype(jnp.float32) * scale
    k = jnp.where(inside, k_ref[...].astype(jnp.float32), 0.0)
    v = jnp.where(inside, v_ref[...].astype(jnp.float32), 0.0)
    scores = lax.dot_general(q, k, (((2,), (2,)), _BATCH), preferred_element_type=jnp.float32)
    causal = (lax.broadcasted_iota(jnp.int32, scores.shape, 1)
              >= lax.broadcasted_iota(jnp.int32, scores.shape, 2))
    scores = jnp.where(causal, scores, 0.0)
    within = lax.dot_general(scores, v, (((2,), (1,)), _BATCH), preferred_element_type=jnp.float32)
    past = lax.dot_general(q, state_ref[...], (((2,), (1,)), _BATCH),
                           preferred_element_type=jnp.float32)
    o_ref[...] = (within + past).astype(o_ref.dtype)
    state_ref[...] += lax.dot_general(k, v, (((1,), (1,)), _BATCH),
                                      preferred_element_type=jnp.float32)


def _kernel_seq_on_lanes(q_ref, k_ref, v_ref, o_ref, state_ref, *, seq, scale):
    """The same chunk on (groups, head_dim, chunk) blocks: the sequence on the lanes, the
    state kept transposed, (groups, dv, depth), so every product but the scores is a plain one."""
    c = pl.program_id(1)
    chunk = q_ref.shape[2]

    @pl.when(c == 0)
    def _init():
        state_ref[...] = jnp.zeros_like(state_ref)

    cols = c * chunk + lax.broadcasted_iota(jnp.int32, (1, 1, chunk), 2)
    inside = cols < seq
    q = q_ref[...].astype(jnp.float32) * scale
    k = jnp.where(inside, k_ref[...].astype(jnp.float32), 0.0)
    v = jnp.where(inside, v_ref[...].astype(jnp.float32), 0.0)
    scores = lax.dot_general(k, q, (((1,), (1,)), _BATCH),
                             preferred_element_type=jnp.float32)  # (groups, key, query)
    causal = (lax.broadcasted_iota(jnp.int32, scores.shape, 1)
              <= lax.broadcasted_iota(jnp.int32, scores.shape, 2))
    scores = jnp.where(causal, scores, 0.0)
    within = lax.dot_general(v, scores, (((2,), (1,)), _BATCH), preferred_element_type=jnp.float32)
    past = lax.dot_general(state_ref[...], q, (((2,), (1,)), _BATCH),
                           preferred_element_type=jnp.float32)
    o_ref[...] = (within + past).astype(o_ref.dtype)
    state_ref[...] += lax.dot_general(v, k, (((2,), (2,)), _BATCH),
                                      preferred_element_type=jnp.float32)


@functools.partial(jax.jit, static_argnames=("block_seq", "block_groups", "seq_on_lanes"))
def %NAME%(%ARGS%, *, block_seq: int = %BS%, block_groups: int = %BG%, seq_on_lanes: int = %SOL%):
    q, k, v = %Q%, %K%, %V%
    if q.ndim not in (3, 4) or k.shape != q.shape or v.shape[:-1] != q.shape[:-1]:
        raise ValueError(f"{q.shape=}, {k.shape=}, {v.shape=} are not linear-attention operands")
    if block_seq % SUBLANES or block_groups < 1:
        raise ValueError(f"{block_seq=} must be a multiple of {SUBLANES}, {block_groups=} positive")
    seq, depth, dv = q.shape[-2], q.shape[-1], v.shape[-1]
    groups = int(np.prod(q.shape[:-2]))
    per_block = int(np.gcd(groups, block_groups))  # whole blocks of groups: no group tail to mask
    chunk = seq if seq <= block_seq else block_seq
    q3, k3, v3 = (x.reshape(groups, seq, x.shape[-1]) for x in (q, k, v))
    if seq_on_lanes:  # (groups, depth, seq): where XLA keeps a narrow head_dim minor-last, a bitcast
        chunk = min(seq, pl.cdiv(chunk, LANES) * LANES)
        q3, k3, v3 = (jnp.swapaxes(x, 1, 2) for x in (q3, k3, v3))

    def block(width):
        """`per_block` groups' chunk of a (groups, seq, width) array, or of its transpose."""
        if seq_on_lanes:
            return pl.BlockSpec((per_block, width, chunk), lambda g, c: (g, 0, c))
        return pl.BlockSpec((per_block, chunk, width), lambda g, c: (g, c, 0))

    out = pl.pallas_call(
        functools.partial(_kernel_seq_on_lanes if seq_on_lanes else _kernel, seq=seq,
                          scale=float(%SCALE%)),
        out_shape=jax.ShapeDtypeStruct((groups, dv, seq) if seq_on_lanes else (groups, seq, dv), v.dtype),
        grid=(groups // per_block, pl.cdiv(seq, chunk)),
        in_specs=[block(depth), block(depth), block(dv)],
        out_specs=block(dv),
        scratch_shapes=[pltpu.VMEM((per_block, dv, depth) if seq_on_lanes else (per_block, depth, dv),
                                   jnp.float32)],
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel", "arbitrary")),
    )(q3, k3, v3)
    return (jnp.swapaxes(out, 1, 2) if seq_on_lanes else out).reshape(v.shape)


def build(block_seq: int = %BS%, block_groups: int = %BG%, seq_on_lanes: int = %SOL%):
    return functools.partial(%NAME%, block_seq=block_seq, block_groups=block_groups,
                             seq_on_lanes=seq_on_lanes)
'''


CARRIED_KNOBS = ("seq_on_lanes",)
"""Knobs a child keeps at its parent's tuned value (the default of its TUNABLES): a block
move changes the blocks, not the layout the parent's tuner found faster."""


def scan_source(facts: TaskFacts, params: dict[str, Any], task_name: str,
                chip: dict[str, Any] | None = None) -> str:
    d = facts.detail
    blocks = default_blocks(facts, chip)
    sub = sublane_tile([*(a.dtype for a in facts.args), *(o[1] for o in facts.outs)])
    given = params.get("block_seq")
    value = aligned(given if isinstance(given, int) and given > 0 else blocks["block_seq"], sub)
    blocks["block_seq"] = value
    given = params.get("block_groups")
    groups = given if isinstance(given, int) and given > 0 else 1
    tunables = aligned_tunables(params.get("tunables") or {
        "block_seq": list(dict.fromkeys([value, max(SUBLANES, value // 2), value * 2])),
        "block_groups": list(dict.fromkeys([groups, max(1, groups // 2), groups * 2]))},
        {"block_seq": sub})
    lanes = 1 if params.get("seq_on_lanes") == 1 else 0  # a tuned parent's layout, carried
    tunables = {**tunables, "seq_on_lanes": [lanes, 1 - lanes]}
    names = [a.name for a in facts.args]
    scale = "depth ** -0.5" if d["scale"] == "rsqrt_d" else "1.0"
    doc = (f"chunked causal linear-attention kernel for {task_name}: intra-chunk causal block "
           "plus a (head_dim x head_dim) f32 state carried in VMEM across chunks.\n\n"
           + "\n".join(f"Class evidence: {r}" for r in facts.reasons))
    body = (_TEMPLATE.replace("%NAME%", "linear_attention_kernel").replace("%ARGS%", ", ".join(names))
            .replace("%Q%", names[d["q"]]).replace("%K%", names[d["k"]]).replace("%V%", names[d["v"]])
            .replace("%SCALE%", scale).replace("%BS%", str(value)).replace("%BG%", str(groups))
            .replace("%SOL%", str(lanes)))
    return header(doc) + "\n" + tunables_literal(tunables) + "\n" + body
