"""Static arguments: Python scalars an input maker returns beside its arrays.

A JAXBench ``create_inputs`` may return a Python ``int`` (a group size, a slice length)
that the workload uses for a static shape: under ``jax.jit`` it must stay a Python value,
never become an array. Such a value is a static argument of its shape, not an input:

* the suite's cases hold the arrays only (``Task.make_inputs``, ``Task.input_specs``);
* the reference and the candidate are called with the statics put back at their positions
  (:func:`bind`), so both keep the workload's own argument list;
* a static belongs to the shape, so every seed must give the same one (:func:`record`); the
  frozen suite records it per shape, under its hash, and sends it to the sandboxed child as
  plain data.

Only ``bool``, ``int`` and ``float`` (exactly those types) qualify: they cross the sandbox
as msgpack scalars, never as pickled objects.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tools.inputs.tasks import Task

StaticValue = bool | int | float
Statics = tuple[tuple[int, StaticValue], ...]  # (position in the argument list, value)
STATIC_TYPES: tuple[type, ...] = (bool, int, float)


def is_static(value: Any) -> bool:
    """A Python scalar (not a NumPy or JAX scalar, which are data)."""
    return type(value) in STATIC_TYPES


def split(values: Sequence[Any]) -> tuple[list[Any], Statics]:
    """The arrays, and the statics with their positions in ``values``."""
    arrays: list[Any] = []
    statics: list[tuple[int, StaticValue]] = []
    for position, value in enumerate(values):
        if is_static(value):
            statics.append((position, value))
        else:
            arrays.append(value)
    return arrays, tuple(statics)


def insert(arrays: Sequence[Any], statics: Sequence[tuple[int, Any]]) -> list[Any]:
    """The full argument list: ``arrays`` with each static put back at its position.
    ValueError when the arrays do not fit the statics (a position past the end)."""
    args = list(arrays)
    for position, value in checked(statics):
        if position > len(args):
            raise ValueError(f"static argument at position {position} does not fit "
                             f"{len(arrays)} array argument(s) with statics at "
                             f"{[p for p, _ in statics]}")
        args.insert(position, value)
    return args


def checked(statics: Sequence[tuple[int, Any]]) -> Statics:
    """``statics`` as a tuple, or ValueError: positions must increase from 0 and every
    value must be a plain bool, int or float (what crosses the sandbox is checked again)."""
    last = -1
    for position, value in statics:
        if type(position) is not int or position <= last:
            raise ValueError(f"static argument positions must increase, got "
                             f"{[p for p, _ in statics]}")
        if not is_static(value):
            raise ValueError(f"static argument {position} is {type(value).__name__}, "
                             "expected bool, int or float")
        last = position
    return tuple((p, v) for p, v in statics)


def bind(fn: Callable[..., Any], statics: Sequence[tuple[int, Any]],
         name: str | None = None) -> Callable[..., Any]:
    """``fn`` as a function of the arrays alone (``fn`` itself when there are no statics)."""
    if not statics:
        return fn
    fixed = checked(statics)

    def bound(*arrays: Any) -> Any:
        return fn(*insert(arrays, fixed))

    bound.__name__ = name or getattr(fn, "__name__", "bound")
    return bound


def record(task: Task, shape_index: int, seed: int, statics: Statics) -> None:
    """Remember the statics of one shape; TaskError when another seed gave other ones."""
    from tools.inputs.tasks import TaskError

    seen = task._statics.get(shape_index)
    if seen is None:
        task._statics[shape_index] = (seed, statics)
        return
    first_seed, first = seen
    if _typed(first) == _typed(statics):
        return
    before, now = dict(first), dict(statics)
    position = next(p for p in sorted({*before, *now})
                    if _typed_value(before, p) != _typed_value(now, p))
    when = (f"for seed {seed} but {_show(before, position)} for seed {first_seed}"
            if seed != first_seed else f"on one call for seed {seed} but "
            f"{_show(before, position)} on another")
    raise TaskError(
        task.path,
        f"{task._inputs_fn_name} returns {_show(now, position)} at position {position} "
        f"{when} (shape {shape_index}): a Python scalar is a static argument and must be "
        "the same for every seed (return a JAX array if it is data)")


def _typed(statics: Statics) -> tuple[tuple[int, type, str], ...]:
    return tuple((p, type(v), repr(v)) for p, v in sorted(statics))  # repr: nan equals nan


def _typed_value(values: dict[int, StaticValue], position: int) -> tuple[type, str]:
    value = values.get(position)
    return type(value), repr(value)


def _show(values: dict[int, StaticValue], position: int) -> str:
    return repr(values[position]) if position in values else "an array"


def parameter_names(fn: Callable[..., Any]) -> list[str]:
    """The positional parameter names of ``fn`` ([] when it has no readable signature)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # a builtin or a callable object without a signature
        return []
    return [p.name for p in params
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def describe(statics: Statics, names: Sequence[str] = ()) -> str:
    """``static max_expert_size=256 (argument 3)``: how a shape's statics are shown."""
    parts = [f"{names[p]}={v!r} (argument {p})" if p < len(names) else f"argument {p}={v!r}"
             for p, v in statics]
    return "static " + ", ".join(parts) if parts else ""


def shape_note(task: Task, statics: Statics) -> str:
    """``; static max_expert_size=256 (argument 3)`` for a shape's description ("" for none),
    named after the reference's (or workload's) parameters."""
    if not statics:
        return ""
    fn = getattr(task.module, "reference" if task.format == "kernelgraph" else "workload", None)
    return f"; {describe(statics, parameter_names(fn) if fn is not None else [])}"
