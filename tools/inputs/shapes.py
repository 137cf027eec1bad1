"""Unaligned shapes: a kernel's tail handling is only exercised by sizes off the TPU tile.

TPU arrays are laid out in (8, 128) tiles. When every input of every task shape is a whole
number of tiles, a kernel that ignores the remainder (the ``size % 1024`` tail, the last
partial block) cannot be told from a correct one. Such a task gets one derived shape: its
smallest declared shape with every size >= 16 moved off a multiple of 8 (an entry appended
to a kernelgraph task's ``SHAPES``, which its ``make_inputs`` reads; a JAXBench ``CONFIG``).
Where no such shape can be made, the task carries a note that says so, and the suite, the
receipt and the report repeat it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tools.inputs.tasks import Task

SUBLANES, LANES = 8, 128
_MIN_SIZE = 16  # smaller integers (heads, groups, kernel sizes) are left as they are
_OFFSET = 5  # a multiple of 8 minus 5 is never a multiple of 8 (nor of 128)


def is_aligned(arrays: Sequence[Any]) -> bool:
    """Whether every array is a whole number of (8, 128) tiles in its last two dimensions."""
    for array in arrays:
        shape = tuple(array.shape)
        if not shape:
            continue
        if shape[-1] % LANES or (len(shape) >= 2 and shape[-2] % SUBLANES):
            return False
    return True


def off_tile(size: Any) -> Any:
    """A size moved off the tile grid; small integers and non-integers are kept."""
    if isinstance(size, bool) or not isinstance(size, int) or size < _MIN_SIZE:
        return size
    return size - _OFFSET if (size - _OFFSET) % SUBLANES else size - _OFFSET + 2


def with_unaligned_shape(task: Task) -> Task:
    """``task`` with a derived unaligned shape appended when all its shapes are aligned, or
    with :attr:`Task.alignment_note` saying why none could be made. Never raises for the
    derivation itself: a task whose shapes cannot be varied is still a usable task."""
    from tools.inputs.tasks import TaskError

    try:  # shapes by abstract evaluation: no input is made here
        if not all(is_aligned(task.input_specs(i)) for i in range(len(task.shapes))):
            return task
    except TaskError:
        return task  # the task's own validation reports this
    derived, why = _derive(task)
    if derived is None:
        return dataclasses.replace(task, alignment_note=(
            "every task shape is a whole number of (8, 128) tiles and no unaligned shape "
            f"could be derived ({why}): tails (size % 1024, partial blocks) are NOT "
            "exercised; add an unaligned entry to SHAPES"))
    return derived


def _derive(task: Task) -> tuple[Task | None, str]:
    if task.format == "kernelgraph":
        return _derive_kernelgraph(task)
    return _derive_jaxbench(task)


def _derive_kernelgraph(task: Task) -> tuple[Task | None, str]:
    declared = getattr(task.module, "SHAPES", None)
    if not isinstance(declared, list | tuple) or not all(
        isinstance(s, list | tuple) and s and all(isinstance(d, int) for d in s)
        for s in declared
    ):
        return None, "SHAPES is not a list of integer tuples"
    smallest = min(declared, key=_volume)
    shape = tuple(off_tile(d) for d in smallest)
    if shape == tuple(smallest):
        return None, f"every size of {tuple(smallest)} is below {_MIN_SIZE}"
    task.module.SHAPES = [*declared, shape]
    candidate = dataclasses.replace(task, shapes=(*task.shapes, shape))
    return _checked(candidate, lambda: setattr(task.module, "SHAPES", declared))


def _derive_jaxbench(task: Task) -> tuple[Task | None, str]:
    configs = task._configs or ()
    if not configs:
        return None, "the task has no CONFIG"
    smallest = configs[-1]
    movable = task.config_sizes or tuple(smallest)  # only what scaling may change
    config = {k: off_tile(v) if k in movable else v for k, v in smallest.items()}
    if config == smallest:
        return None, f"no size in CONFIG is {_MIN_SIZE} or more"
    shape = {"scale": "unaligned", **{k: v for k, v in config.items() if v != smallest[k]}}
    candidate = dataclasses.replace(task, shapes=(*task.shapes, shape),
                                    _configs=(*configs, config))
    found, why = _checked(candidate, lambda: None)
    if found is not None and task.config_sizes:
        from tools.inputs.scaling import config_problem

        problem = config_problem(found, len(found.shapes) - 1)
        if problem is not None:
            return None, problem
    return found, why


def _checked(candidate: Task, undo: Any) -> tuple[Task | None, str]:
    """The candidate task when the derived shape gives unaligned inputs the reference
    accepts (both by abstract evaluation); else undo and say why."""
    from tools.inputs.abstract import output_specs

    index = len(candidate.shapes) - 1
    try:
        inputs = candidate.input_specs(index)
        if is_aligned(inputs):
            undo()
            return None, "the inputs do not follow the declared shapes"
        output_specs(candidate, index, inputs)
    except Exception as exc:  # any failure only means this task's shapes are not free
        undo()
        return None, f"the reference or inputs fail at the derived shape: {type(exc).__name__}"
    return dataclasses.replace(candidate, derived_shapes=(index,)), ""


def _volume(shape: Sequence[int]) -> int:
    volume = 1
    for size in shape:
        volume *= max(1, size)
    return volume
