"""Grouped (ragged) matmul, `lax.ragged_dot`: consecutive row groups of lhs, each times its
own rhs, with the group sizes known only at run time.

The group sizes are scalar-prefetched into SMEM. Grid (row blocks, column blocks, group
blocks): the first two `parallel`, group blocks `arbitrary` and innermost, into an f32 VMEM
accumulator. A step holds `groups_per_step` (G) groups' rhs, a (G, K, block_n) block, and
loops over them (a static loop: G dots in the body): each group's rows [start, end) follow
from the sizes before it (a static scalar sum over the groups, masked to those before the
step's first, then a running sum: no loop whose trip count the cost model cannot read, so
the skips below are priced as they run), the matmul is skipped with `pl.when` when the row
block holds none of the group's rows,
and otherwise the block is multiplied with the rows outside the group selected to zero
(before the dot, and again after it, so an inf or NaN in this group's rhs never reaches
another group's rows): a row block that straddles groups gets each group's product on its
own rows. Rows in no group stay zero, as `ragged_dot` leaves them. K is one block.

The rhs index map clamps the group step to the steps whose groups hold some of the row
block's rows (the groups of its first and last rows, from the sizes): a step outside them
repeats its neighbour's block index, so the pipeline fetches no rhs block the body skips.
Without it every row block reads every group's rhs, rows/block_m times the weights.

Why G: with whole rows and columns in one tile, the grid is one step per group and the fixed
per-step cost dominates; G groups per step divide the steps by G at the same bytes and
flops. A tail step (groups % G != 0) holds slots past the last group: their rhs block rows
are padding, so such a slot reads no size from SMEM (an out-of-range SMEM read is not
checked) and contributes nothing. G = 1 is the class default (one group per step).
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

LEVERS = ["scalar_prefetch_group_sizes", "skip_blocks_outside_group", "skip_rhs_fetch_outside_row_block",
          "f32_accumulator"]
STRATEGY = ("Row and column tiles parallel, groups arbitrary and innermost: each tile sums "
            "its groups' products on their own rows; group sizes scalar-prefetched.")


def _sizes(facts: TaskFacts) -> tuple[int, int, int]:
    m, k = facts.args[facts.detail["lhs"]].shape
    return m, k, facts.args[facts.detail["rhs"]].shape[2]


def _groups(facts: TaskFacts) -> int:
    return facts.args[facts.detail["rhs"]].shape[0]


def default_blocks(facts: TaskFacts, chip: dict[str, Any] | None) -> dict[str, int]:
    """Tiles up to 256 x 512 that fit half the scoped VMEM, one group per step (G = 1): the
    first kernel of a run is the plain one; more groups per step is a move of the search."""
    m, _, n = _sizes(facts)
    blocks = {"block_m": min(256, -(-m // SUBLANES) * SUBLANES),
              "block_n": min(512, -(-n // LANES) * LANES), "groups_per_step": 1}
    while vmem_bytes(facts, blocks)[0] > scoped_vmem(chip) // 2 and blocks["block_m"] > SUBLANES:
        blocks["block_m"] //= 2
    return blocks


def extents(facts: TaskFacts) -> dict[str, int]:
    """The largest useful knob values: all rows, all columns, all groups in one step."""
    m, _, n = _sizes(facts)
    return {"block_m": m, "block_n": n, "groups_per_step": _groups(facts)}


def grid_text(params: dict[str, int]) -> str:
    g = params.get("groups_per_step", 1)
    return (f"grid (cdiv(M, {params['block_m']}), cdiv(N, {params['block_n']}), cdiv(groups, {g})): "
            f"tiles parallel, group blocks arbitrary innermost, {g} group(s) per step; "
            "lhs (i, 0), rhs (b, 0, j) of shape (G, K, block_n), out (i, j).")


def vmem_bytes(facts: TaskFacts, params: dict[str, int]) -> tuple[int, str]:
    _, k, _ = _sizes(facts)
    bm, bn, g = params["block_m"], params["block_n"], params.get("groups_per_step", 1)
    total = 2 * 4 * (bm * k + g * k * bn) + 2 * 4 * bm * bn + 4 * bm * bn
    return total, (f"2 x 4 B x ({bm}x{k} lhs + {g}x{k}x{bn} rhs of {g} group(s)) + 2 x 4 B x "
                   f"{bm}x{bn} out + 4 B x {bm}x{bn} f32 accumulator = {total:,} B")


_TEMPLATE = '''

def _kernel(sizes_ref, lhs_ref, rhs_ref, o_ref, acc_ref):
    i, step = pl.program_id(0), pl.program_id(2)
    block_m = lhs_ref.shape[0]
    groups_per_step = rhs_ref.shape[0]
    groups = sizes_ref.shape[0]
    first = i * block_m
    rows = first + lax.broadcasted_iota(jnp.int32, (block_m, 1), 0)

    @pl.when(step == 0)
    def _zero():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    def accumulate(slot, start, end):
        """Adds group `slot`'s product on its rows [start, end), skipped when the block has none."""

        @pl.when(jnp.logical_and(jnp.logical_and(start < end, start < first + block_m), end > first))
        def _group():
            mine = jnp.logical_and(rows >= start, rows < end)
            lhs = jnp.where(mine, lhs_ref[...], jnp.zeros_like(lhs_ref))
            product = jnp.dot(lhs, rhs_ref[slot], preferred_element_type=jnp.float32)
            # rows of other groups stay exactly 0 even when this group's rhs holds an inf or NaN
            acc_ref[...] += jnp.where(mine, product, 0.0)

    first_group = step * groups_per_step
    start = jnp.int32(0)
    for h in range(groups):  # the rows before the step's first group, in a loop the model can price
        start = start + jnp.where(h < first_group, sizes_ref[h], 0)
    for slot in range(groups_per_step):
        g = first_group + slot
        # a tail step's slots past the last group read no size (SMEM is not bounds-checked)
        # and, being empty, add nothing
        size = jnp.where(g < groups, sizes_ref[jnp.minimum(g, groups - 1)], 0)
        accumulate(slot, start, start + size)
        start = start + size

    @pl.when(step == pl.num_programs(2) - 1)
    def _store():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


def _group_of(sizes_ref, row):
    """The group that holds `row`: how many groups end at or before it (the last group for a
    row in no group)."""
    groups = sizes_ref.shape[0]
    end, before = jnp.int32(0), jnp.int32(0)
    for h in range(groups):
        end = end + sizes_ref[h]
        before = before + jnp.where(end <= row, 1, 0)
    return jnp.minimum(before, groups - 1)


def _clamped_step(sizes_ref, b, i, *, bm, m, per_step):
    """Group step `b` of row block `i`, clamped to the steps whose groups hold some of the
    block's rows: outside them the body adds nothing, and the clamped index repeats its
    neighbour's, so no rhs block is fetched for them."""
    first = _group_of(sizes_ref, i * bm) // per_step
    last = _group_of(sizes_ref, jnp.minimum((i + 1) * bm, m) - 1) // per_step
    return jnp.minimum(jnp.maximum(b, first), last)


@functools.partial(jax.jit, static_argnames=("block_m", "block_n", "groups_per_step"))
def %NAME%(%ARGS%, *statics, block_m: int = %BM%, block_n: int = %BN%,
        groups_per_step: int = %G%):
    del statics  # a task's trailing Python scalars (JAXBench 11p's group capacity): unused
    lhs, rhs, group_sizes = %LHS%, %RHS%, %SIZES%
    if (lhs.ndim != 2 or rhs.ndim != 3 or rhs.shape[1] != lhs.shape[1]
            or group_sizes.shape != (rhs.shape[0],)):
        raise ValueError(f"{lhs.shape=}, {rhs.shape=}, {group_sizes.shape=} are not "
                         "grouped-matmul operands")
    if block_m % SUBLANES or block_n % LANES:
        raise ValueError(f"{block_m=} must be a multiple of {SUBLANES}, {block_n=} of {LANES}")
    if groups_per_step < 1:
        raise ValueError(f"{groups_per_step=} must be positive")
    m, k = lhs.shape
    groups, _, n = rhs.shape
    bm = m if m <= block_m else block_m
    bn = n if n <= block_n else block_n
    per_step = min(groups_per_step, groups)  # no slot beyond the last group at these shapes
    spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=1,
        grid=(pl.cdiv(m, bm), pl.cdiv(n, bn), pl.cdiv(groups, per_step)),
        in_specs=[
            pl.BlockSpec((bm, k), lambda i, j, b, sizes: (i, 0)),
            pl.BlockSpec((per_step, k, bn), lambda i, j, b, sizes: (
                _clamped_step(sizes, b, i, bm=bm, m=m, per_step=per_step), 0, j)),
        ],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, b, sizes: (i, j)),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
    )
    return pl.pallas_call(
        _kernel,
        out_shape=jax.ShapeDtypeStruct((m, n), %OUT_DTYPE%),
        grid_spec=spec,
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary")),
    )(group_sizes.astype(jnp.int32), lhs, rhs)


def build(block_m: int = %BM%, block_n: int = %BN%, groups_per_step: int = %G%):
    return functools.partial(%NAME%, block_m=block_m, block_n=block_n,
                             groups_per_step=groups_per_step)
'''


def grouped_source(facts: TaskFacts, params: dict[str, Any], task_name: str,
                   chip: dict[str, Any] | None = None) -> str:
    d = facts.detail
    blocks = default_blocks(facts, chip)
    floors = {"block_m": sublane_tile([*(a.dtype for a in facts.args), *(o[1] for o in facts.outs)]),
              "block_n": LANES, "groups_per_step": 1}  # G counts groups: no lane or sublane
    for key, floor in floors.items():
        value = params[key] if isinstance(params.get(key), int) and params[key] > 0 else blocks[key]
        blocks[key] = aligned(value, floor)
    most = {"groups_per_step": _groups(facts)}  # more groups per step than there are is the same kernel
    tunables = aligned_tunables(params.get("tunables") or {
        key: list(dict.fromkeys([v, max(floors[key], v // 2), min(v * 2, most.get(key, v * 2))]))
        for key, v in blocks.items()}, floors)
    names = [a.name for a in facts.args]
    doc = (f"grouped (ragged) matmul kernel for {task_name}: group sizes scalar-prefetched, "
           f"groups accumulated per output tile in f32, {blocks['groups_per_step']} group(s) per "
           "grid step, blocks outside a group skipped.\n\n"
           + "\n".join(f"Class evidence: {r}" for r in facts.reasons))
    body = (_TEMPLATE.replace("%NAME%", "grouped_matmul_kernel").replace("%ARGS%", ", ".join(names))
            .replace("%LHS%", names[d["lhs"]]).replace("%RHS%", names[d["rhs"]])
            .replace("%SIZES%", names[d["group_sizes"]])
            .replace("%OUT_DTYPE%", f"jnp.{facts.outs[0][1]}")
            .replace("%BM%", str(blocks["block_m"])).replace("%BN%", str(blocks["block_n"]))
            .replace("%G%", str(blocks["groups_per_step"])))
    return header(doc) + "\n" + tunables_literal(tunables) + "\n" + body
