"""A task checked without running its workload: abstract evaluation of inputs and reference.

Loading a task used to make the tuning inputs twice and run the reference eagerly, which at
production sizes means gigabytes and minutes before anything else happens. Here instead:

* the input maker is traced (``jax.make_jaxpr``), not run: the traced program gives the
  input shapes and dtypes, and two traces that differ (a key from the clock, an unseeded
  NumPy draw folded in as a constant) show that the maker is not deterministic;
* the reference is evaluated abstractly (``jax.eval_shape``) on those shapes: its outputs
  must be JAX arrays of a checkable dtype. The suite later runs it under ``jax.jit``.

Where tracing is not possible (an input maker that converts to NumPy, a reference that is
not jit-compatible) the task falls back to running for real, once, so the error the user
sees is the one their code raises.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from tools.inputs.tasks import Task

# A maker that cannot be traced is run twice for the determinism check only up to this size.
MAX_DOUBLE_BUILD_BYTES = 64 << 20


@dataclass(frozen=True)
class InputTrace:
    """The input maker's traced program: its outputs' shapes and a fingerprint of it."""

    specs: tuple[Any, ...]  # jax.ShapeDtypeStruct per input
    fingerprint: str


def trace_inputs(task: Task, seed: int, shape_index: int) -> InputTrace | None:
    """Trace the input maker for one (seed, shape); None when it cannot be traced."""
    import jax

    from tools.inputs.tasks import TaskError

    def traced() -> tuple[Any, ...]:
        return task.checked_inputs(task.call_input_maker(seed, shape_index), seed, shape_index)

    try:  # a fresh function each time: JAX caches traces by function identity
        closed = jax.make_jaxpr(lambda: traced())()
    except TaskError:
        raise
    except Exception:  # not traceable (NumPy conversions, Python control on values)
        return None
    digest = hashlib.sha256(str(closed.jaxpr).encode())
    for const in closed.consts:
        host = np.asarray(const)
        digest.update(f"{host.dtype.str}{host.shape}".encode())
        digest.update(np.ascontiguousarray(host).tobytes())
    specs = tuple(jax.ShapeDtypeStruct(tuple(a.shape), a.dtype) for a in closed.out_avals)
    return InputTrace(specs, digest.hexdigest())


def specs_of(arrays: Sequence[Any]) -> tuple[Any, ...]:
    import jax

    return tuple(jax.ShapeDtypeStruct(tuple(a.shape), a.dtype) for a in arrays)


def input_specs(task: Task, shape_index: int, *, check_determinism: bool = False
                ) -> tuple[Any, ...]:
    """The inputs' shapes and dtypes at one shape (seed 0), by tracing the maker; a maker
    that cannot be traced is run once (twice, when small, for ``check_determinism``)."""
    from tools.inputs.tasks import TaskError

    first = trace_inputs(task, 0, shape_index)
    if first is not None:
        if check_determinism:
            second = trace_inputs(task, 0, shape_index)
            if second is None or second.fingerprint != first.fingerprint:
                raise TaskError(task.path, _not_deterministic(task))
        return first.specs
    made = task.make_inputs(0, shape_index)
    if check_determinism and sum(int(np.asarray(a).nbytes) for a in made) \
            <= MAX_DOUBLE_BUILD_BYTES and _hash(made) != _hash(task.make_inputs(0, shape_index)):
        raise TaskError(task.path, _not_deterministic(task))
    return specs_of(made)


def output_specs(task: Task, shape_index: int, inputs: Sequence[Any]) -> list[Any]:
    """The reference's outputs at one shape, by abstract evaluation on ``inputs`` (arrays or
    ShapeDtypeStructs); every problem is a TaskError."""
    import jax

    from tools.inputs.tasks import TaskError, check_reference_output

    reference = task.reference_at(shape_index)

    def checked(*args: Any) -> Any:
        out = reference(*args)
        check_reference_output(task, out)
        return out

    try:
        out = jax.eval_shape(checked, *specs_of(inputs))
    except TaskError:
        raise
    except Exception as exc:  # not traceable, or a real error: run it for what it says
        return _concrete_outputs(task, shape_index, exc)
    return check_reference_output(task, out)


def _concrete_outputs(task: Task, shape_index: int, traced_error: Exception) -> list[Any]:
    """Run the reference un-jitted on real inputs: its own error, or that it cannot be jitted."""
    from tools.inputs.tasks import TaskError, check_reference_output, where_in

    inputs = task.make_inputs(0, shape_index)
    fn = "reference" if task.format == "kernelgraph" else "workload"
    try:
        out = task.reference_at(shape_index)(*inputs)
    except Exception as exc:
        raise TaskError(task.path, f"{fn} raised {type(exc).__name__}: {exc}"
                        f"{where_in(exc, task.path)}") from None
    check_reference_output(task, out)
    raise TaskError(task.path, f"{fn} runs eagerly but cannot be traced with jax.jit, which "
                    f"the suite and the baseline use: {type(traced_error).__name__}: "
                    f"{traced_error}{where_in(traced_error, task.path)}")


def _not_deterministic(task: Task) -> str:
    maker = "make_inputs" if task.format == "kernelgraph" else "create_inputs"
    return (f"{maker} is not deterministic: two calls for the same seed returned different "
            "inputs (derive every random value from the key)")


def _hash(arrays: Sequence[Any]) -> str:
    digest = hashlib.sha256()
    for a in arrays:
        host = np.asarray(a)
        digest.update(f"{host.dtype.str}{host.shape}".encode())
        digest.update(np.ascontiguousarray(host).tobytes())
    return digest.hexdigest()
