"""Batch rows per block: a leading axis of the generic kernel folded into the rows after it.

The generic class tiles a leading independent axis (a batch) one position per step, with the
body traced at size 1 there, so a block of rows never spans two batch positions: a gated MLP
over (batch, seq, features) fetches every weight again for each batch position, and its
blocks of rows stop at seq. Where every array holding the leading axis holds the tiled axis
right after it, every array holding that axis holds the leading one right before it, and
neither is an array's last axis, the two are one row-major axis in HBM. The wrapper then
reshapes them into one (a bitcast), the grid tiles the merged axis, and the kernel hands the
body each block with a unit axis in the leading one's place (a leading unit axis, which
Mosaic adds and drops without moving data). Positions along both axes are independent, so
rows of two batch positions in one block are computed as the reference computes each.

Not with the `narrow_lanes` knob (`generic_lanes`), whose swaps move the last two axes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agents.llm.offline.classify import TaskFacts
from agents.llm.offline.generic_lanes import lanes_knob, replaced


def candidate(units: Sequence[bool], arrays_axes: Sequence[Sequence[int | None]],
              reduced: bool) -> list[int] | None:
    """[leading grid axis, the tiled grid axis it folds into] for a tiling, or None."""
    last = len(units) - 1
    for g, unit in enumerate(units):
        if not unit:
            continue
        after: set[int | None] = set()
        for axes in arrays_axes:
            if g in axes:
                at = list(axes).index(g)
                after.add(axes[at + 1] if at + 2 < len(axes) else None)
        h = after.pop() if len(after) == 1 else None
        if h is None or units[h] or (reduced and h == last):
            continue
        if all((g in axes) == (h in axes) for axes in arrays_axes):
            return [g, h]
    return None


def fold(facts: TaskFacts) -> tuple[int, int] | None:
    """The (leading, rows) grid axes folded into one for this task's kernel, or None."""
    found = facts.detail.get("fold")
    if not found or lanes_knob(facts):
        return None
    return found[0], found[1]


def why_not(facts: TaskFacts) -> str:
    """Why this task's kernel keeps its leading axis one position per step."""
    units = facts.detail.get("units", [])
    if not any(units):
        return "no leading axis is tiled one position per step: the rows are already one axis"
    if facts.detail.get("fold") and lanes_knob(facts):
        return ("the arrays narrower than the lanes may swap their last two axes (`narrow_lanes`), "
                "which a folded axis would have to follow")
    return ("no array holds the leading axis right before a tiled axis of rows that is not its "
            "last, in every array that holds either")


def widened(facts: TaskFacts, shape: Sequence[Any], axes: Sequence[int | None]) -> tuple[Any, ...]:
    """`shape` (an array's or a body value's) with its rows as long as the folded axis: the
    leading axis's block is one position, the rows' block may hold every batch's rows."""
    found = fold(facts)
    if found is None or found[1] not in axes:
        return tuple(shape)
    g, h = found
    size = facts.dim_values[facts.detail["origins"][g]]
    return tuple(d * size if a == h else d for d, a in zip(shape, axes, strict=True))


def merged_axes(facts: TaskFacts, axes: Sequence[int | None]) -> tuple[int | None, ...]:
    """An array's grid axis per dim once folded (the leading axis's dim gone)."""
    found = fold(facts)
    return tuple(a for a in axes if found is None or a != found[0])


def positions(facts: TaskFacts, axes_list: Sequence[Sequence[int | None]]) -> tuple[int | None, ...]:
    """Per array, the dim the leading axis had (where the kernel puts the unit axis back)."""
    found = fold(facts)
    return tuple(list(axes).index(found[0]) if found and found[0] in axes else None
                 for axes in axes_list)


_HELPERS = '''

def _fold(x, at):
    """Axes `at` and `at + 1` as one (row-major: a bitcast)."""
    return x if at is None else x.reshape(_fold_shape(x.shape, at))


def _fold_shape(shape, at):
    return shape if at is None else (*shape[:at], shape[at] * shape[at + 1], *shape[at + 2:])


def _unfold(value, at):
    """The block as the body was traced: a unit axis where the leading axis was."""
    return value if at is None else jnp.expand_dims(value, at)


def _block_spec('''

_KERNEL_STEPS = (
    ("    values = [ref[...] for ref in refs[:n_in]]\n",
     "    values = [_unfold(ref[...], at) for ref, at in zip(refs[:n_in], _FOLD_IN, strict=True)]\n"),
    ("        ref[...] = value.astype(ref.dtype)\n",
     "        ref[...] = value.astype(ref.dtype).reshape(ref.shape)\n"),
)

_SUMMING_STEPS = (
    ("    values = [ref[...] for ref in ins]\n",
     "    values = [_unfold(ref[...], at) for ref, at in zip(ins, _FOLD_IN, strict=True)]\n"),
    ("            ref[...] = value.astype(ref.dtype)\n",
     "            ref[...] = value.astype(ref.dtype).reshape(ref.shape)\n"),
)


def with_fold(facts: TaskFacts, folded: tuple[int, int], wrapper: str, kernel: str,
              summing: bool) -> str:
    """The wrapper and kernel with grid axis `folded[0]` folded into `folded[1]` (`fold`)."""
    g, h = folded
    lead, rows = facts.detail["symbols"][g], facts.detail["symbols"][h]
    steps = [
        (kernel, replaced(kernel, _SUMMING_STEPS if summing else _KERNEL_STEPS)),
        ("\n\ndef _block_spec(", _HELPERS),
        ("    blocks = tuple(_legal(b, dims[t], a,",
         f"    sizes = {{**dims, {lead!r}: 1, {rows!r}: dims[{lead!r}] * dims[{rows!r}]}}"
         f"  # {lead} folded into {rows}\n"
         "    blocks = tuple(_legal(b, sizes[t], a,"),
        ("    args = (", "    args = tuple(_fold(x, at) for x, at in zip(("),
        (",)\n    out_avals = _out_avals(**dims)\n",
         ",), _FOLD_IN, strict=True))\n    out_avals = _out_avals(**dims)\n"
         "    folded = [(_fold_shape(shape, at), dtype)\n"
         "              for (shape, dtype), at in zip(out_avals, _FOLD_OUT, strict=True)]\n"),
        ("for shape, dtype in out_avals]", "for shape, dtype in folded]"),
        ("grid=tuple(pl.cdiv(dims[t], b)", "grid=tuple(pl.cdiv(sizes[t], b)"),
        ("zip(out_avals, _OUT_AXES, strict=True)]", "zip(folded, _OUT_AXES, strict=True)]"),
        ("    )(*args)\n", "    )(*args)\n    outs = [o.reshape(shape) for o, (shape, _) in zip(outs, out_avals, strict=True)]\n"),
    ]
    return replaced(wrapper, steps)


__all__ = ["candidate", "fold", "merged_axes", "positions", "why_not", "widened", "with_fold"]
