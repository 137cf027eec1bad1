"""The oracle: the reference re-run in higher precision, and what to do when it cannot be.

Tried in order, for each shape, by abstract evaluation first (nothing runs until one mode
traces to the reference's own output shapes), then for real:

1. ``float64``: 64-bit types enabled for the call only; floating inputs widened to float64
   and integer inputs (indices, lengths, group sizes) to 64 bits, so that they agree with
   the 64-bit integers JAX then makes for ``arange``, loop counters and literals.
2. ``float64-narrow-int``: the same with integer inputs kept as they are (a reference that
   bit-twiddles its integers, or needs exactly int32 indices).
3. ``float32-highest``: where the reference cannot run in float64 at all (a concatenation of
   mixed dtypes that float64 breaks, a float32-only primitive), floating inputs are widened
   only to float32 and matmuls and convolutions run at ``highest`` precision. It is a weaker
   oracle, so the suite records it per case and says so in a note, rather than refusing the
   task.

Outputs come back as float64 (floating) or in the reference's own dtype (integers computed
in 64 bits are narrowed back, as the reference's own arithmetic would wrap).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from tools.inputs.tasks import Task, TaskError

OraclePrecision = Literal["float64", "float64-narrow-int", "float32-highest"]
PRECISIONS: tuple[OraclePrecision, ...] = ("float64", "float64-narrow-int", "float32-highest")
FULL_PRECISION: OraclePrecision = "float64"


def is_float(dtype: Any) -> bool:
    """Floating, bfloat16 and the 8-bit floats included."""
    dtype = np.dtype(dtype)
    return bool(np.issubdtype(dtype, np.floating) or dtype.name.startswith(("bfloat", "float")))


def widened_dtype(dtype: Any, precision: OraclePrecision) -> np.dtype:
    """The dtype an input of ``dtype`` is given to the oracle in."""
    dtype = np.dtype(dtype)
    if is_float(dtype):
        wide = np.float32 if precision == "float32-highest" else np.float64
        return np.dtype(wide) if dtype.itemsize < np.dtype(wide).itemsize else dtype
    if precision == "float64" and np.issubdtype(dtype, np.integer) and dtype.itemsize < 8:
        return np.dtype(np.int64 if np.issubdtype(dtype, np.signedinteger) else np.uint64)
    return dtype


@contextlib.contextmanager
def precision_mode(precision: OraclePrecision) -> Iterator[None]:
    import jax

    if precision == "float32-highest":
        with jax.enable_x64(False), jax.default_matmul_precision("highest"):
            yield
    else:
        with jax.enable_x64(True):
            yield


@dataclass
class Oracle:
    """The reference of one shape in the precision that works for it; call it on host arrays."""

    task: Task
    shape_index: int
    precision: OraclePrecision
    out_dtypes: tuple[np.dtype, ...]  # the reference's own output dtypes
    why: str = ""  # why a higher precision was not used ("" for float64)

    def __post_init__(self) -> None:
        import jax

        self._fn = jax.jit(self.task.reference_at(self.shape_index))

    def __call__(self, host: Sequence[np.ndarray]) -> list[np.ndarray]:
        import jax

        with precision_mode(self.precision):
            wide = [np.asarray(x).astype(widened_dtype(np.asarray(x).dtype, self.precision),
                                         copy=False) for x in host]
            outs = jax.tree.leaves(self._fn(*wide))
            del wide
            return [_as_host(o, d) for o, d in zip(outs, self.out_dtypes, strict=True)]


def _as_host(out: Any, dtype: np.dtype) -> np.ndarray:
    host = np.asarray(out)
    return host.astype(np.float64 if is_float(dtype) else dtype, copy=False)


def choose_oracle(task: Task, shape_index: int, inputs: Sequence[Any],
                  expected: Sequence[Any], precisions: Sequence[OraclePrecision] = PRECISIONS,
                  why: Sequence[str] = ()) -> Oracle:
    """The first of ``precisions`` whose abstract evaluation gives the reference's output
    shapes (``expected``: arrays or ShapeDtypeStructs); TaskError when none does."""
    problems = list(why)
    for precision in precisions:
        problem = _abstract_problem(task, shape_index, inputs, expected, precision)
        if problem is None:
            return Oracle(task, shape_index, precision,
                          tuple(np.dtype(e.dtype) for e in expected), why="; ".join(problems))
        problems.append(f"{precision}: {problem}")
    raise TaskError(task.path, "the reference cannot be re-run in higher precision for the "
                    "oracle (" + "; ".join(problems) + ")")


def run_oracle(oracle: Oracle, host: Sequence[np.ndarray],
               expected: Sequence[Any]) -> tuple[Oracle, list[np.ndarray]]:
    """Run the oracle; a precision that traced but fails when run falls to the next one
    (the oracle that finally ran is returned with the outputs)."""
    while True:
        try:
            return oracle, oracle(host)
        except Exception as exc:  # a runtime failure of this precision only: try the next
            problem = f"{oracle.precision}: {type(exc).__name__}: {_first_line(exc)}"
            later = PRECISIONS[PRECISIONS.index(oracle.precision) + 1:]
            if not later:
                raise TaskError(oracle.task.path, "the reference fails on widened inputs "
                                f"(the oracle): {problem}") from None
            why = [w for w in (oracle.why, problem) if w]
            oracle = choose_oracle(oracle.task, oracle.shape_index, host, expected, later, why)


def _abstract_problem(task: Task, shape_index: int, inputs: Sequence[Any],
                      expected: Sequence[Any], precision: OraclePrecision) -> str | None:
    """Why the reference does not trace in ``precision`` (None: it does, to the right shapes)."""
    import jax

    with precision_mode(precision):
        args = [jax.ShapeDtypeStruct(tuple(x.shape), widened_dtype(x.dtype, precision))
                for x in inputs]
        try:
            outs = jax.tree.leaves(jax.eval_shape(task.reference_at(shape_index), *args))
        except Exception as exc:  # the reason this precision is not used, kept for the note
            return f"{type(exc).__name__}: {_first_line(exc)}"
    shapes = [tuple(o.shape) for o in outs]
    want = [tuple(e.shape) for e in expected]
    if shapes != want:
        return f"outputs of shapes {shapes}, not the reference's {want}"
    return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else ""
