"""Grouped (ragged) matmul, `lax.ragged_dot`: consecutive row groups of lhs, each times its
own rhs, with the group sizes known only at run time.

The group sizes are scalar-prefetched into SMEM. Grid (row blocks, column blocks, groups):
the first two `parallel`, groups `arbitrary` and innermost, into an f32 VMEM accumulator.
At group g a step finds the group's rows [start, end) by summing the sizes before it (a
short scalar loop), skips the matmul with `pl.when` when the row block holds none of them,
and otherwise multiplies the block with the rows outside the group selected to zero (before
the dot, and again after it, so an inf or NaN in this group's rhs never reaches another
group's rows): a row block that straddles groups gets each group's product on its own rows.
Rows in no group stay zero, as `ragged_dot` leaves them. K is one block (whole rows of lhs).
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

LEVERS = ["scalar_prefetch_group_sizes", "skip_blocks_outside_group", "f32_accumulator"]
STRATEGY = ("Row and column tiles parallel, groups arbitrary and innermost: each tile sums "
            "its groups' products on their own rows; group sizes scalar-prefetched.")


def _sizes(facts: TaskFacts) -> tuple[int, int, int]:
    m, k = facts.args[facts.detail["lhs"]].shape
    return m, k, facts.args[facts.detail["rhs"]].shape[2]


def default_blocks(facts: TaskFacts, chip: dict[str, Any] | None) -> dict[str, int]:
    m, k, n = _sizes(facts)
    bm = min(256, -(-m // SUBLANES) * SUBLANES)
    bn = min(512, -(-n // LANES) * LANES)
    while 4 * (2 * (bm * k + k * bn) + 3 * bm * bn) > scoped_vmem(chip) // 2 and bm > SUBLANES:
        bm //= 2
    return {"block_m": bm, "block_n": bn}


def extents(facts: TaskFacts) -> dict[str, int]:
    m, _, n = _sizes(facts)
    return {"block_m": m, "block_n": n}


def grid_text(params: dict[str, int]) -> str:
    return (f"grid (cdiv(M, {params['block_m']}), cdiv(N, {params['block_n']}), groups): tiles "
            "parallel, groups arbitrary innermost; lhs (i, 0), rhs (g, 0, j), out (i, j).")


def vmem_bytes(facts: TaskFacts, params: dict[str, int]) -> tuple[int, str]:
    _, k, _ = _sizes(facts)
    bm, bn = params["block_m"], params["block_n"]
    total = 2 * 4 * (bm * k + k * bn) + 2 * 4 * bm * bn + 4 * bm * bn
    return total, (f"2 x 4 B x ({bm}x{k} lhs + {k}x{bn} rhs) + 2 x 4 B x {bm}x{bn} out "
                   f"+ 4 B x {bm}x{bn} f32 accumulator = {total:,} B")


_TEMPLATE = '''

def _kernel(sizes_ref, lhs_ref, rhs_ref, o_ref, acc_ref):
    i, g = pl.program_id(0), pl.program_id(2)
    block_m = lhs_ref.shape[0]

    @pl.when(g == 0)
    def _zero():
        acc_ref[...] = jnp.zeros_like(acc_ref)

    start = lax.fori_loop(0, g, lambda h, total: total + sizes_ref[h], jnp.int32(0))
    end = start + sizes_ref[g]
    first = i * block_m

    @pl.when(jnp.logical_and(start < first + block_m, end > first))
    def _group():
        rows = first + lax.broadcasted_iota(jnp.int32, (block_m, 1), 0)
        mine = jnp.logical_and(rows >= start, rows < end)
        lhs = jnp.where(mine, lhs_ref[...], jnp.zeros_like(lhs_ref))
        product = jnp.dot(lhs, rhs_ref[...], preferred_element_type=jnp.float32)
        # rows of other groups stay exactly 0 even when this group's rhs holds an inf or NaN
        acc_ref[...] += jnp.where(mine, product, 0.0)

    @pl.when(g == pl.num_programs(2) - 1)
    def _store():
        o_ref[...] = acc_ref[...].astype(o_ref.dtype)


@functools.partial(jax.jit, static_argnames=("block_m", "block_n"))
def %NAME%(%ARGS%, *statics, block_m: int = %BM%, block_n: int = %BN%):
    del statics  # a task's trailing Python scalars (JAXBench 11p's group capacity): unused
    lhs, rhs, group_sizes = %LHS%, %RHS%, %SIZES%
    if (lhs.ndim != 2 or rhs.ndim != 3 or rhs.shape[1] != lhs.shape[1]
            or group_sizes.shape != (rhs.shape[0],)):
        raise ValueError(f"{lhs.shape=}, {rhs.shape=}, {group_sizes.shape=} are not "
                         "grouped-matmul operands")
    if block_m % SUBLANES or block_n % LANES:
        raise ValueError(f"{block_m=} must be a multiple of {SUBLANES}, {block_n=} of {LANES}")
    m, k = lhs.shape
    groups, _, n = rhs.shape
    bm = m if m <= block_m else block_m
    bn = n if n <= block_n else block_n
    spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=1,
        grid=(pl.cdiv(m, bm), pl.cdiv(n, bn), groups),
        in_specs=[
            pl.BlockSpec((bm, k), lambda i, j, g, sizes: (i, 0)),
            pl.BlockSpec((None, k, bn), lambda i, j, g, sizes: (g, 0, j)),
        ],
        out_specs=pl.BlockSpec((bm, bn), lambda i, j, g, sizes: (i, j)),
        scratch_shapes=[pltpu.VMEM((bm, bn), jnp.float32)],
    )
    return pl.pallas_call(
        _kernel,
        out_shape=jax.ShapeDtypeStruct((m, n), %OUT_DTYPE%),
        grid_spec=spec,
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=("parallel", "parallel", "arbitrary")),
    )(group_sizes.astype(jnp.int32), lhs, rhs)


def build(block_m: int = %BM%, block_n: int = %BN%):
    return functools.partial(%NAME%, block_m=block_m, block_n=block_n)
'''


def grouped_source(facts: TaskFacts, params: dict[str, Any], task_name: str,
                   chip: dict[str, Any] | None = None) -> str:
    d = facts.detail
    blocks = default_blocks(facts, chip)
    floors = {"block_m": sublane_tile([*(a.dtype for a in facts.args), *(o[1] for o in facts.outs)]),
              "block_n": LANES}
    for key, floor in floors.items():
        value = params[key] if isinstance(params.get(key), int) and params[key] > 0 else blocks[key]
        blocks[key] = aligned(value, floor)
    tunables = aligned_tunables(params.get("tunables") or {
        key: list(dict.fromkeys([v, max(floors[key], v // 2), v * 2])) for key, v in blocks.items()},
        floors)
    names = [a.name for a in facts.args]
    doc = (f"grouped (ragged) matmul kernel for {task_name}: group sizes scalar-prefetched, "
           "groups accumulated per output tile in f32, blocks outside a group skipped.\n\n"
           + "\n".join(f"Class evidence: {r}" for r in facts.reasons))
    body = (_TEMPLATE.replace("%NAME%", "grouped_matmul_kernel").replace("%ARGS%", ", ".join(names))
            .replace("%LHS%", names[d["lhs"]]).replace("%RHS%", names[d["rhs"]])
            .replace("%SIZES%", names[d["group_sizes"]])
            .replace("%OUT_DTYPE%", f"jnp.{facts.outs[0][1]}")
            .replace("%BM%", str(blocks["block_m"])).replace("%BN%", str(blocks["block_n"])))
    return header(doc) + "\n" + tunables_literal(tunables) + "\n" + body
