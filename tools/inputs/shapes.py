"""Unaligned shapes: a kernel's tail handling is only exercised by sizes off the TPU tile.

TPU arrays are laid out in (8, 128) tiles. When every input of a shape is a whole number of
tiles, a kernel that ignores the remainder (the ``size % 1024`` tail, the last partial
block) cannot be told from a correct one; and a shape that moves every axis off the tile at
once cannot tell a kernel that handles one tail only while the other axes are whole tiles
(the last ``rows % 8`` rows dropped whenever the columns are a multiple of 128). So a task
with an aligned declared shape gets derived shapes, from the smallest aligned one (the base):

* per size that can move (an integer of 16 or more in a ``SHAPES`` entry; a JAXBench
  ``CONFIG`` size), one shape with only that size off the tile and the other sizes shrunk to
  at most ``SHRINK_TO`` (still whole tiles), so interpret mode stays fast;
* one shape with every size moved at once, at the base's sizes (several blocks, then tails).

Each is an entry appended to a kernelgraph task's ``SHAPES`` (which its ``make_inputs``
reads) or a JAXBench ``CONFIG``. One is kept only when the reference accepts it and its
inputs leave the tile in a pattern (which input, lanes or sublanes: :func:`tile_pattern`)
no declared or earlier derived shape already has, so a task that declares its own unaligned
shapes gets only the patterns it lacks. A task none of whose shapes is off the tile and for
which none can be derived carries a note that says so; the suite, the receipt and the
report repeat it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tools.inputs.tasks import Task

SUBLANES, LANES = 8, 128
SHRINK_TO = 256  # the other sizes of a one-size shape: a multiple of 128, so still aligned
_MIN_SIZE = 16  # smaller integers (heads, groups, kernel sizes) are left as they are
_OFFSET = 5  # a multiple of 8 minus 5 is never a multiple of 8 (nor of 128)
DEGENERATE_CHECK_BYTES = 64 << 20
"""Inputs larger than this are not run to see whether a derived shape is degenerate: a
shape derived from a large tuning point (one size near full, 1 GiB of inputs) would cost
seconds before anything else is checked, a memory refusal included. The suite's own
vacuity check still runs every shape it freezes."""

Pattern = frozenset[tuple[int, str]]


def tile_pattern(arrays: Sequence[Any]) -> Pattern:
    """Which inputs leave the (8, 128) tile, and where: (input index, "lanes" | "sublanes")."""
    found: set[tuple[int, str]] = set()
    for index, array in enumerate(arrays):
        shape = tuple(array.shape)
        if shape and shape[-1] % LANES:
            found.add((index, "lanes"))
        if len(shape) >= 2 and shape[-2] % SUBLANES:
            found.add((index, "sublanes"))
    return frozenset(found)


def is_aligned(arrays: Sequence[Any]) -> bool:
    """Whether every array is a whole number of (8, 128) tiles in its last two dimensions."""
    return not tile_pattern(arrays)


def off_tile(size: Any) -> Any:
    """A size moved off the tile grid; small integers and non-integers are kept."""
    if not _movable(size):
        return size
    return size - _OFFSET if (size - _OFFSET) % SUBLANES else size - _OFFSET + 2


def shrunk(size: Any) -> Any:
    """An aligned size cut to ``SHRINK_TO`` when larger (a multiple of 128, so it stays
    aligned whether it lies along lanes or sublanes); anything else is kept."""
    if not _movable(size) or size <= SHRINK_TO or size % SUBLANES:
        return size
    return SHRINK_TO


def with_unaligned_shapes(task: Task, *, check_derived: bool = False) -> Task:
    """``task`` with the derived unaligned shapes it lacks appended (module doc), or with
    :attr:`Task.alignment_note` saying why none could be made when no shape leaves the tile.
    Never raises for the derivation itself: a task whose shapes cannot be varied is still a
    usable task."""
    from tools.inputs.tasks import TaskError

    try:  # shapes by abstract evaluation: no input is made here
        patterns = [tile_pattern(task.input_specs(i)) for i in range(len(task.shapes))]
    except TaskError:
        return task  # the task's own validation reports this
    aligned = [i for i, p in enumerate(patterns) if not p]
    if not aligned:
        return task  # every declared shape already leaves the tile somewhere
    derived, why = _derive(task, aligned, set(patterns), check_derived)
    if derived.derived_shapes or len(aligned) < len(patterns):
        return derived
    return dataclasses.replace(task, alignment_note=(
        "every task shape is a whole number of (8, 128) tiles and no unaligned shape "
        f"could be derived ({why}): tails (size % 1024, partial blocks) are NOT "
        "exercised; add an unaligned entry to SHAPES"))


def _derive(task: Task, aligned: list[int], seen: set[Pattern],
            check: bool) -> tuple[Task, str]:
    if task.format == "kernelgraph":
        return _derive_kernelgraph(task, aligned, seen)
    return _derive_jaxbench(task, aligned, seen, check)


def _proposals(base: Sequence[tuple[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any], str]]:
    """Per movable size alone, then every size at once: (name -> size, the same with the
    other sizes kept whole rather than cut to ``SHRINK_TO``, what it shows). The whole
    sizes are the fallback where cutting breaks the reference."""
    movable = [name for name, size in base if _movable(size)]
    found = [({n: off_tile(s) if n == name else shrunk(s) for n, s in base},
              {n: off_tile(s) if n == name else s for n, s in base},
              f"only {name} off the tile") for name in movable]
    if movable:
        every = {n: off_tile(s) for n, s in base}
        found.append((every, every, "every size off the tile"))
    return found


def _derive_kernelgraph(task: Task, aligned: list[int], seen: set[Pattern]) -> tuple[Task, str]:
    declared = getattr(task.module, "SHAPES", None)
    if not isinstance(declared, list | tuple) or not all(
        isinstance(s, list | tuple) and s and all(isinstance(d, int) for d in s)
        for s in declared
    ):
        return task, "SHAPES is not a list of integer tuples"
    base = tuple(min((declared[i] for i in aligned), key=_volume))
    proposals = _proposals([(f"size {j}", s) for j, s in enumerate(base)])
    if not proposals:
        return task, f"every size of {base} is below {_MIN_SIZE}"
    why, module = "", task.module
    for sizes, _, what in proposals:
        shape = tuple(sizes.values())
        saved = module.SHAPES
        module.SHAPES = [*saved, shape]

        def undo(saved: Any = saved) -> None:
            module.SHAPES = saved

        found, problem = _accepted(dataclasses.replace(task, shapes=(*task.shapes, shape)),
                                   what, seen, undo)
        task, why = (found, why) if found is not None else (task, why or problem)
    return task, why


def _derive_jaxbench(task: Task, aligned: list[int], seen: set[Pattern],
                     check: bool) -> tuple[Task, str]:
    """The JAXBench derivation. A one-size shape keeps the other sizes whole (not cut to
    ``SHRINK_TO``) for the entries the file names in ``DERIVED_WHOLE``; with ``check``, also
    where the reference's output is degenerate with them cut (:func:`_degenerate`, one run
    per such shape), and the task says which (:attr:`Task.derived_whole`) so that
    :func:`tools.api.scaled_task` writes them into the scaled file: later loads run nothing."""
    configs = task._configs or ()
    if not configs:
        return task, "the task has no CONFIG"
    movable = task.config_sizes or tuple(configs[aligned[0]])  # what scaling may change
    smallest = min((configs[i] for i in aligned),
                   key=lambda c: _volume([c[k] for k in movable if isinstance(c.get(k), int)]))
    proposals = _proposals([(k, v) for k, v in smallest.items() if k in movable])
    if not proposals:
        return task, f"no size in CONFIG is {_MIN_SIZE} or more"
    why = ""
    named = set(getattr(task.module, "DERIVED_WHOLE", ()))
    kept_whole: list[str] = []
    for sizes, whole, what in proposals:
        moved = what.split()[1]
        kept = moved in named and whole != sizes  # the file says: do not cut here
        found, problem = _jaxbench_shape(task, smallest, whole if kept else sizes, what, seen)
        if (found is not None and check and not kept and whole != sizes
                and _degenerate(found, len(found.shapes) - 1)):
            index = len(found.shapes) - 1
            _give_up(found, index, seen)
            found, problem = _jaxbench_shape(task, smallest, whole, what, seen)
            if found is not None and _degenerate(found, index):
                _give_up(found, index, seen)
                found, problem = None, "the reference's output is degenerate there"
            kept = found is not None
        if found is not None and kept:
            kept_whole.append(moved)
        task, why = (found, why) if found is not None else (task, why or problem)
    return dataclasses.replace(task, derived_whole=tuple(kept_whole)), why


def _jaxbench_shape(task: Task, smallest: dict[str, Any], sizes: dict[str, Any], what: str,
                    seen: set[Pattern]) -> tuple[Task | None, str]:
    """``task`` with the config ``smallest`` updated by ``sizes`` appended as a derived shape,
    when the reference accepts it and it keeps the task's structure; else None and why."""
    config = {**smallest, **sizes}
    scale = "unaligned" if what.startswith("every") else f"unaligned {what.split()[1]}"
    shape = {"scale": scale, **{k: v for k, v in config.items() if v != smallest[k]}}
    candidate = dataclasses.replace(task, shapes=(*task.shapes, shape),
                                    _configs=(*(task._configs or ()), config))
    found, problem = _accepted(candidate, what, seen, lambda: None)
    if found is not None and task.config_sizes:
        from tools.inputs.scaling import config_problem

        index = len(found.shapes) - 1
        problem = config_problem(found, index) or ""
        if problem:
            _give_up(found, index, seen)
            found = None
    return found, problem


def _degenerate(task: Task, index: int) -> bool:
    """Whether the reference's output at a derived shape is all zero or constant (what the
    suite would refuse as vacuous), run on the first seed's inputs: a shape derived with the
    other sizes shrunk can break a relation the reference fixes in Python (a group count
    that leaves one feature per group normalises every value to zero). A failure to run is
    the task's own checks' to report."""
    import jax
    import numpy as np

    from tools.correctness.testsuite import input_bytes
    from tools.correctness.vacuity import degenerate

    try:
        if input_bytes(task, index) > DEGENERATE_CHECK_BYTES:
            return False
        outputs = jax.tree.leaves(jax.jit(task.reference_at(index))(*task.make_inputs(0, index)))
    except Exception:  # the suite runs it again and says why
        return False
    return any(degenerate(np.asarray(output)) is not None for output in outputs)


def _accepted(candidate: Task, what: str, seen: set[Pattern],
              undo: Callable[[], None]) -> tuple[Task | None, str]:
    """The candidate task when its new last shape gives inputs the reference accepts, off
    the tile in a pattern not in ``seen`` (both by abstract evaluation); else undo and say
    why."""
    from tools.inputs.abstract import output_specs

    index = len(candidate.shapes) - 1
    try:
        inputs = candidate.input_specs(index)
        pattern = tile_pattern(inputs)
        if not pattern:
            problem = "the inputs do not follow the declared shapes"
        elif pattern in seen:
            problem = ""  # a declared or earlier shape already leaves the tile this way
        else:
            output_specs(candidate, index, inputs)
            seen.add(pattern)
            return dataclasses.replace(
                candidate, derived_shapes=(*candidate.derived_shapes, index),
                derived_what=(*candidate.derived_what, what)), ""
    except Exception as exc:  # any failure only means this task's shapes are not free
        problem = f"the reference or inputs fail at the derived shape: {type(exc).__name__}"
    undo()
    _forget(candidate, index)
    return None, problem


def _give_up(task: Task, index: int, seen: set[Pattern]) -> None:
    """Give up a derived shape that was accepted: its tile pattern may be proposed again."""
    seen.discard(tile_pattern(task.input_specs(index)))
    _forget(task, index)


def _forget(task: Task, index: int) -> None:
    """Drop what was cached for a shape index that is given up (the caches are shared with
    the task it was derived from, and the index may be proposed again)."""
    task._specs.pop(index, None)
    task._statics.pop(index, None)


def _movable(size: Any) -> bool:
    return not isinstance(size, bool) and isinstance(size, int) and size >= _MIN_SIZE


def _volume(shape: Sequence[Any]) -> int:
    volume = 1
    for size in shape:
        volume *= max(1, size) if isinstance(size, int) else 1
    return volume
