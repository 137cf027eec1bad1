"""The generic class: any reference no specific class takes, tiled over its independent axes.

The fallback that keeps the search from refusing a task for want of a template. The kernel
body is the reference's own jaxpr written as readable `jnp`/`lax` code (`jaxpr_readable`),
traced again with each tiled axis given a size of its own (`generic_axes`), so one body
serves every block size. The grid has one `parallel` axis per tiled axis; inputs without a
tiled axis are one whole block fetched once. Blocks are sized so the double-buffered blocks
plus every intermediate of the body fit the scoped VMEM, with the limit raised when even the
smallest blocks need more. Slower than a specific class perhaps, but correct: a root the
search climbs from. Its levers are spec transformations in `generic_levers`; the layout of
arrays narrower than the lanes is also a knob the tuner reaches (`narrow_lanes`), and a
leading axis is folded into the rows where it can be (`generic_fold`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from agents.llm.offline.classify import TaskFacts
from agents.llm.offline.common import (
    LANES,
    SUBLANES,
    dim_check_source,
    header,
    scoped_vmem,
    tiled_bytes,
)
from agents.llm.offline.generic_fold import (
    fold,
    merged_axes,
    positions,
    widened,
    with_fold,
)
from agents.llm.offline.generic_lanes import lanes_knob, narrow_swaps, with_lanes
from agents.llm.offline.generic_summed import SUMMING_KERNEL

KNOBS = ("block_0", "block_1", "block_2", "block_3")  # per grid axis: tiled ones, then reduced
LEVERS = ["reference_jaxpr_in_kernel", "independent_axes_parallel"]
STRATEGY = ("A grid over the axes no op of the reference mixes (found from its jaxpr); each "
            "step evaluates the reference's own ops on one block of them in VMEM.")
RAISED_VMEM_BYTES = 96 * 1024 * 1024  # three quarters of the largest VMEM the targets model


@dataclass(frozen=True)
class GenericSpec:
    """Blocks along the tiled axes (0 where the task tiles fewer) and the VMEM limit asked for."""

    block_0: int = 0
    block_1: int = 0
    block_2: int = 0
    block_3: int = 0
    vmem_limit_bytes: int | None = None
    narrow_lanes: bool = False  # the default of the `narrow_lanes` knob (`narrow_swaps`)
    levers: tuple[str, ...] = field(default=(), compare=False)

    @property
    def blocks(self) -> tuple[int, ...]:
        return (self.block_0, self.block_1, self.block_2, self.block_3)


def _tiling(facts: TaskFacts) -> dict[str, Any]:
    return facts.detail


def units(facts: TaskFacts) -> list[bool]:
    """Per tiled axis: one position per step (a leading axis, the body traced at size 1)."""
    return list(_tiling(facts)["units"])


def sizes(facts: TaskFacts) -> list[int]:
    """The full size of each tiled axis at the tuning point (a folded leading axis: 1, and
    the rows it folds into as long as both; `generic_fold`)."""
    out = [facts.dim_values[o] for o in _tiling(facts)["origins"]]
    folded = fold(facts)
    if folded is not None:
        g, h = folded
        out[h], out[g] = out[h] * out[g], 1
    return out


def _arrays(facts: TaskFacts) -> list[tuple[tuple[int, ...], int, tuple[int | None, ...]]]:
    """(shape, itemsize, grid axis per dim) of every input and output."""
    t = _tiling(facts)
    ins = [(widened(facts, a.shape, axes), np.dtype(a.dtype).itemsize, axes)
           for a, axes in zip(facts.args, t["in_axes"], strict=True)]
    outs = [(widened(facts, s, axes), np.dtype(d).itemsize, axes)
            for s, (_, d), axes in zip(facts.out_shapes, facts.outs, t["out_axes"], strict=True)]
    return ins + outs


def aligns(facts: TaskFacts) -> list[int]:
    """Per tiled axis, the multiple its block must be (or the whole axis): 128 where it is some
    array's last axis, the dtype's sublane tile where it is a second-to-last, else 1."""
    out = []
    for g in range(len(_tiling(facts)["symbols"])):
        need = 1
        for shape, itemsize, axes in _arrays(facts):
            rank = len(shape)
            if rank and axes[-1] == g:
                need = max(need, LANES)
            elif rank >= 2 and axes[-2] == g:
                need = max(need, SUBLANES * max(1, 4 // itemsize))
        out.append(need)
    return out


def _block_shape(shape: tuple[int, ...], axes: tuple[int | None, ...], blocks: list[int]) -> tuple[int, ...]:
    return tuple(s if g is None else min(blocks[g], s) for s, g in zip(shape, axes, strict=True))


def block_vmem(facts: TaskFacts, blocks: list[int], narrow_lanes: bool = False) -> int:
    """Two buffers of every input and output block (one of an input that never moves) plus
    the most bytes of the body's values
    live at once (each from the equation that makes it to the last that reads it), at those
    blocks, with lane and sublane padding. With `narrow_lanes`, a swapped array's block is
    held transposed, and its value in the body's orientation besides."""
    ins, outs = narrow_swaps(facts)
    swapped = [*ins, *outs] if narrow_lanes else []
    io = 0
    for i, (s, size, axes) in enumerate(_arrays(facts)):
        block = _block_shape(s, axes, blocks)
        buffers = 1 if all(a is None for a in axes) else 2
        if swapped and swapped[i]:
            io += buffers * tiled_bytes((*block[:-2], block[-1], block[-2]), size)
            io += tiled_bytes(block, size)
        else:
            io += buffers * tiled_bytes(block, size)
    values = _tiling(facts)["values"]
    steps = 1 + max((v[4] for v in values), default=0)
    live = [0] * steps
    for shape, size, axes, born, dies in values:
        bytes_ = tiled_bytes(_block_shape(widened(facts, shape, axes), tuple(axes), blocks), size)
        for i in range(born, dies + 1):
            live[i] += bytes_
    return io + max(live, default=0)


def spec_vmem(facts: TaskFacts, spec: GenericSpec) -> int:
    return block_vmem(facts, _blocks(facts, spec), spec.narrow_lanes)


def reduced(facts: TaskFacts) -> bool:
    """The last grid axis is a contracted one, summed over block by block."""
    return bool(_tiling(facts).get("reduced"))


def dividing(block: int, size: int, align: int) -> int:
    """The largest block of at most `block` that is a multiple of `align` and divides `size`
    (the whole axis when none does): a summed axis has no tail block to mask."""
    b = min(block, size) // align * align
    while b >= align:
        if size % b == 0:
            return b
        b -= align
    return size


def _blocks(facts: TaskFacts, spec: GenericSpec) -> list[int]:
    """The spec's blocks made legal: at most the axis, a multiple of its alignment or whole
    (and dividing the axis, for a summed one)."""
    out = []
    n = len(sizes(facts))
    for g, (b, size, align, unit) in enumerate(zip(spec.blocks, sizes(facts), aligns(facts),
                                                   units(facts), strict=False)):
        if unit:
            out.append(1)
            continue
        b = size if b <= 0 else min(b, size)
        if reduced(facts) and g == n - 1:
            out.append(dividing(b, size, align))
            continue
        out.append(b if b == size else max(align, b // align * align))
    return out


def _steps(facts: TaskFacts, blocks: list[int]) -> int:
    return math.prod(-(-s // b) for s, b in zip(sizes(facts), blocks, strict=False))


def default_blocks(facts: TaskFacts, chip: dict[str, Any] | None) -> tuple[list[int], int | None]:
    """Blocks for about `rows.pipeline_steps` steps that fit the scoped VMEM (halving the axis
    with the most aligned units left), and the VMEM limit to ask for (None: the default)."""
    from agents.llm.offline.rows import pipeline_steps

    if reduced(facts):
        priced = _priced_blocks(facts, chip)
        if priced is not None:
            return priced
    blocks = [1 if u else s for s, u in zip(sizes(facts), units(facts), strict=True)]
    align = aligns(facts)
    budget = scoped_vmem(chip)
    target = pipeline_steps(facts.io_bytes, chip)
    while block_vmem(facts, blocks) > budget or _steps(facts, blocks) < target:
        left = [b // a if b > a else 0 for b, a in zip(blocks, align, strict=True)]
        g = max(range(len(blocks)), key=lambda i: left[i])
        if left[g] <= 1:
            break
        blocks[g] = max(align[g], blocks[g] // 2 // align[g] * align[g])
        if reduced(facts) and g == len(blocks) - 1:
            blocks[g] = dividing(blocks[g], sizes(facts)[g], align[g])
    limit = None if block_vmem(facts, blocks) <= budget else RAISED_VMEM_BYTES
    return blocks, limit


def _priced_blocks(facts: TaskFacts, chip: dict[str, Any] | None
                   ) -> tuple[list[int], int | None] | None:
    """A summed tiling's cheapest blocks by `generic_price` that fit the scoped VMEM, or the
    raised limit where none does (the body's count of VMEM is an estimate: larger blocks
    are not bought with it); None when none fits either."""
    from agents.llm.offline import generic_price

    scoped = generic_price.best_blocks(facts, chip, scoped_vmem(chip))
    if scoped is not None:
        return scoped[0], None
    raised = generic_price.best_blocks(facts, chip, RAISED_VMEM_BYTES)
    return (raised[0], RAISED_VMEM_BYTES) if raised is not None else None


def default_spec(facts: TaskFacts, params: dict[str, Any], chip: dict[str, Any] | None) -> GenericSpec:
    blocks, limit = default_blocks(facts, chip)
    given = [int(params.get(k) or 0) for k in KNOBS]
    blocks = [g if g > 0 else b for g, b in zip(given, blocks, strict=False)]
    padded = [*blocks, 0, 0, 0, 0][:len(KNOBS)]
    return GenericSpec(*padded, vmem_limit_bytes=limit)


def vmem_bytes(facts: TaskFacts, params: dict[str, int]) -> tuple[int, str]:
    """The planner's VMEM line for the blocks in `params` (the class default where absent)."""
    spec = default_spec(facts, params, None)
    blocks = _blocks(facts, spec)
    total = block_vmem(facts, blocks)
    return total, (f"2 buffers of every input and output block plus every intermediate of the "
                   f"body at blocks {blocks} (lane and sublane padding counted) = {total:,} B")


def grid_text(params: dict[str, int]) -> str:
    del params
    return ("grid (cdiv(size, block) per tiled axis,), every axis parallel; arrays holding a "
            "tiled axis blocked along it, the others one whole block at index 0.")


def axis_names(facts: TaskFacts) -> list[str]:
    """Each tiled axis's name in the task's symbols (a folded pair: `D0*D1`)."""
    names = list(_tiling(facts)["origins"])
    folded = fold(facts)
    if folded is not None:
        names[folded[1]] = f"{names[folded[0]]}*{names[folded[1]]}"
    return names


def strategy_line(facts: TaskFacts, spec: GenericSpec) -> str:
    t = _tiling(facts)
    blocks = _blocks(facts, spec)
    folded = fold(facts)
    names = axis_names(facts)
    parts = [f"one position of the {s}-long axis {o} per step (grid {s})" if u else
             f"block_{g} = {b} of the {s}-long axis {o} (grid {-(-s // b)})"
             for g, (b, s, o, u) in enumerate(zip(blocks, sizes(facts), names, units(facts), strict=False))]
    if folded is not None:
        g, h = folded
        lead = t["origins"][g]
        parts[g] = (f"the {facts.dim_values[lead]}-long axis {lead} folded into the rows of "
                    f"{t['origins'][h]} (one row-major axis in HBM, reshaped outside the kernel)")
    if reduced(facts):
        parts[-1] += (", last and arbitrary: the dots contracting it are summed in float32 "
                      "VMEM scratch, and the rest of the body runs once on the sums")
    if spec.vmem_limit_bytes:
        parts.append(f"vmem_limit_bytes {spec.vmem_limit_bytes:,}")
    if lanes_knob(facts):
        parts.append("the arrays narrower than the lanes go as (..., width, rows) blocks, "
                     "transposed in VMEM" if spec.narrow_lanes else
                     "the arrays narrower than the lanes go as laid out (`narrow_lanes` swaps them)")
    return "; ".join(parts)


_KERNEL = '''

def _kernel(*refs, dims, n_in):
    """One block of every tiled axis: the reference's ops on it in VMEM."""
    values = [ref[...] for ref in refs[:n_in]]
    outs = _body(*values, **dims)
    for ref, value in zip(refs[n_in:], outs, strict=True):
        ref[...] = value.astype(ref.dtype)
'''

_WRAPPER = '''

%KERNEL_FN%

def _block_spec(shape, axes, blocks):
    """`axes[i]`: the grid axis that tiles array axis i, or None (the whole axis). A block that
    never moves (no tiled axis) gets one buffer."""
    block = tuple(size if g is None else blocks[g] for size, g in zip(shape, axes, strict=True))

    def index(*ids):
        return tuple(0 if g is None else ids[g] for g in axes)

    if all(g is None for g in axes):
        return pl.BlockSpec(block, index, pipeline_mode=pl.Buffered(1))
    return pl.BlockSpec(block, index)


def _legal(block, size, align, name, summed):
    if block <= 0 or (block < size and block % align):
        raise ValueError(f"{name}={block} must be positive and a multiple of {align} (or >= {size})")
    if not summed:
        return min(block, size)
    for b in range(min(block, size) // align * align, 0, -align):  # no tail block to mask
        if size % b == 0:
            return b
    return size


@functools.partial(jax.jit, static_argnames=%STATIC%)
def generic_kernel(%SIGNATURE%):
%CHECKS%
    blocks = tuple(_legal(b, dims[t], a, f"block_{g}", summed)
                   for g, (b, t, a, summed) in enumerate(
                       zip((%KNOB_NAMES%,), _TILED, _ALIGN, _SUMMED, strict=True)))
    args = (%ARGS%,)
    out_avals = _out_avals(**dims)
    block_dims = {**dims, **dict(zip(_TILED, blocks, strict=True))}
    outs = pl.pallas_call(
        %KERNEL%,
        out_shape=[jax.ShapeDtypeStruct(shape, dtype) for shape, dtype in out_avals],
        grid=tuple(pl.cdiv(dims[t], b) for t, b in zip(_TILED, blocks, strict=True)),
        in_specs=[_block_spec(x.shape, axes, blocks) for x, axes in zip(args, _IN_AXES, strict=True)],
        out_specs=[_block_spec(shape, axes, blocks)
                   for (shape, _), axes in zip(out_avals, _OUT_AXES, strict=True)],%SCRATCH%
        compiler_params=pltpu.CompilerParams(
            dimension_semantics=tuple("arbitrary" if s else "parallel" for s in _SUMMED),
            vmem_limit_bytes=VMEM_LIMIT_BYTES),
    )(*args)
    return %RETURN%


def build(%KNOBS%):
    return functools.partial(generic_kernel, %KNOB_PASS%)
'''


def _tunables(facts: TaskFacts, blocks: list[int], narrow_lanes: bool = False) -> dict[str, list[int]]:
    """Each block, then half and twice it where legal: a summed axis's blocks divide it (a
    block that does not would lower to the same kernel as the divisor below it); last, both
    layouts of the narrow arrays where they can swap (the spec's first)."""
    out = {}
    last = len(sizes(facts)) - 1
    for g, (b, size, align, unit) in enumerate(zip(blocks, sizes(facts), aligns(facts), units(facts),
                                                    strict=False)):
        if unit:
            continue
        values = [b]
        for v in (b // 2, b * 2):
            v = min(v, size)
            if reduced(facts) and g == last and size % v:
                continue
            if v >= max(align, 1) and (v % align == 0 or v == size) and v not in values:
                values.append(v)
        out[f"block_{g}"] = values
    if lanes_knob(facts):
        out["narrow_lanes"] = [int(narrow_lanes), 1 - int(narrow_lanes)]
    return out


def render(facts: TaskFacts, spec: GenericSpec, task_name: str,
           tunables: dict[str, list[int]] | None = None) -> str:
    """The candidate file for `spec`."""
    from agents.llm.offline.common import dims_expr, tunables_literal

    t = _tiling(facts)
    blocks = _blocks(facts, spec)
    lanes = lanes_knob(facts)
    swap_in, swap_out = narrow_swaps(facts)
    knob_names = [f"block_{g}" for g, unit in enumerate(units(facts)) if not unit]
    knob_names += ["narrow_lanes"] if lanes else []
    block_args = ", ".join("1" if unit else f"block_{g}" for g, unit in enumerate(units(facts)))
    tunables = ({k: v for k, v in (tunables or {}).items() if k in knob_names}
                or _tunables(facts, blocks, spec.narrow_lanes))
    names = [a.name for a in facts.args]
    ret = "outs[0]" if len(facts.outs) == 1 else "tuple(outs)"
    folded = fold(facts)
    tiled_doc = "; ".join(("" if folded and g == folded[0] else "one position per step of " if units(facts)[g]
                           else f"block_{g} tiles ")
                          + f"{o} (size {s})"
                          + (" folded into the rows after it: " if folded and g == folded[0] else ": ")
                          + ", ".join(
        f"{n} axis {axes.index(g)}" for n, axes in zip([*names, *[f'output {i}' for i in range(len(facts.outs))]],
                                                        [*t["in_axes"], *t["out_axes"]], strict=True) if g in axes)
        for g, (o, s) in enumerate(zip(t["origins"], [facts.dim_values[o] for o in t["origins"]],
                                       strict=True)))
    doc = (f"generic kernel for {task_name}: a grid over the axes no op of the reference mixes, "
           "the reference's own ops evaluated on each block in VMEM.\n\n"
           f"Tiled axes: {tiled_doc}.\n\n"
           f"Schedule: {strategy_line(facts, spec)}.\n"
           f"Levers applied: {', '.join(spec.levers) or 'none (the class default)'}.\n\n"
           + "\n".join(f"Class evidence: {r}" for r in facts.reasons))
    summing = reduced(facts)
    constants = "\n".join([
        tunables_literal(tunables),
        f"_TILED = {tuple(t['symbols'])!r}",
        f"_SUMMED = {tuple(summing and g == len(blocks) - 1 for g in range(len(blocks)))!r}",
        f"_ALIGN = {tuple(aligns(facts))!r}",
        f"_IN_AXES = {tuple(merged_axes(facts, a) for a in t['in_axes'])!r}",
        f"_OUT_AXES = {tuple(merged_axes(facts, a) for a in t['out_axes'])!r}",
        *([f"_FOLD_IN = {positions(facts, t['in_axes'])!r}  # where the leading axis was",
           f"_FOLD_OUT = {positions(facts, t['out_axes'])!r}"] if folded else []),
        f"VMEM_LIMIT_BYTES = {spec.vmem_limit_bytes!r}",
        *([f"_SWAP_IN = {tuple(swap_in)!r}  # (..., width, rows) with narrow_lanes",
           f"_SWAP_OUT = {tuple(swap_out)!r}"] if lanes else []),
    ])
    symbols = [*facts.symbols, *t["symbols"]]
    dims = ", ".join(f"{s}=None" for s in symbols)
    items = ", ".join(f"({dims_expr(tuple(d))}, {dtype!r})" for d, (_, dtype) in zip(t["out_dims"], facts.outs, strict=True))
    out_avals = f"def _out_avals(*, {dims}):\n    return [{items}]"
    if summing:
        sums = ", ".join(f"({dims_expr(tuple(d))}, {dtype!r})" for d, dtype in t["partials"])
        out_avals += f"\n\n\ndef _partial_avals(*, {dims}):\n    return [{sums}]"
    knobs = ", ".join([f"block_{g}: int = {b}" for g, b in enumerate(blocks) if not units(facts)[g]]
                      + ([f"narrow_lanes: int = {int(spec.narrow_lanes)}"] if lanes else []))
    wrapper = (_WRAPPER.replace("%STATIC%", repr(tuple(knob_names))).replace("%ARGS%", ", ".join(names))
               .replace("%SIGNATURE%", ", ".join(names) + (f", *, {knobs}" if knobs else ""))
               .replace("%KNOBS%", knobs).replace("%KNOB_NAMES%", block_args)
               .replace("%KNOB_PASS%", ", ".join(f"{k}={k}" for k in knob_names))
               .replace("%CHECKS%", dim_check_source(names, [tuple(d) for d in t["arg_dims"]]))
               .replace("%RETURN%", ret)
               .replace("%KERNEL_FN%", SUMMING_KERNEL if summing else _KERNEL)

               .replace("%KERNEL%", "functools.partial(_summing_kernel, dims=block_dims, "
                        "n_in=len(args), n_out=len(out_avals))" if summing else
                        "functools.partial(_kernel, dims=block_dims, n_in=len(args))")
               .replace("%SCRATCH%", "\n        scratch_shapes=[pltpu.VMEM(shape, jnp.float32) "
                        "for shape, _ in _partial_avals(**block_dims)]," if summing else ""))
    if lanes:
        wrapper = with_lanes(wrapper, SUMMING_KERNEL if summing else _KERNEL, summing)
    elif folded:
        wrapper = with_fold(facts, folded, wrapper, SUMMING_KERNEL if summing else _KERNEL, summing)
    return header(doc) + "\n" + constants + "\n\n\n" + t["body"] + "\n\n\n" + out_avals + wrapper


def safer_steps(facts: TaskFacts, chip: dict[str, Any] | None) -> list[tuple[dict[str, Any], str]]:
    """The fixer's ladder for this class: halved blocks, the smallest blocks, then the
    smallest with the VMEM limit raised (params as `default_spec` reads them)."""
    spec = default_spec(facts, {}, chip)
    blocks = _blocks(facts, spec)
    align = aligns(facts)
    half = [max(a, b // 2 // a * a) for b, a in zip(blocks, align, strict=False)]
    least = list(align[:len(blocks)])
    if half == blocks and least == blocks:
        return []
    steps: list[tuple[dict[str, Any], str]] = []
    for chosen, what in ((half, "halved every block"), (least, "the smallest aligned blocks")):
        params = dict(zip(KNOBS, chosen, strict=False))
        steps.append(({**params, "tunables": {k: [v] for k, v in params.items()}}, what))
    params = dict(zip(KNOBS, least, strict=False))
    steps.append(({**params, "vmem_limit_bytes": RAISED_VMEM_BYTES,
                   "tunables": {k: [v] for k, v in params.items()}},
                  f"the smallest blocks with vmem_limit_bytes raised to {RAISED_VMEM_BYTES:,}"))
    return steps
