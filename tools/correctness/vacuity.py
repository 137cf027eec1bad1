"""What makes a reference's output useless to a suite, checked as the suite is built
(:mod:`tools.correctness.testsuite`) and by the loader on the shapes it derives
(:mod:`tools.inputs.shapes`): an output that is empty, all zero or constant, or one that does
not change when an input is perturbed, cannot tell a right kernel from a wrong one."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tools.correctness.suitedata import VacuousSuite

_PERTURB_SEED = 20240917
# what the suite adds to each refusal, by what :func:`degenerate` found
CONSEQUENCE = {"empty": "",
               "all zero": "; a suite built on it cannot tell a right kernel from one that "
                           "writes nothing",
               "constant": "; it does not depend on the inputs"}


def degenerate(output: np.ndarray) -> str | None:
    """Why one output cannot tell right from wrong: ``"empty"``, ``"all zero"`` or
    ``"constant (<value>)"``; None when it can."""
    if output.size == 0:
        return "empty"
    if not np.any(output):
        return "all zero"
    finite = output[np.isfinite(output)] if is_float(output) else output
    if output.size > 1 and finite.size and np.all(finite == finite.flat[0]):
        return f"constant ({finite.flat[0]!r})"
    return None


def refuse_insensitive(where: str, reference: Any, tuning_inputs: Sequence[Any],
                       base: Sequence[np.ndarray] | None = None) -> None:
    """Refuse a reference whose output stays the same when one float input is perturbed.
    ``base`` is its output on ``tuning_inputs`` where the caller has it already (the suite
    has just run it: at a 4096^3 tuning point one more run is seconds)."""
    import jax

    if base is None:
        base = [np.asarray(o) for o in jax.tree.leaves(reference(*tuning_inputs))]
    rng = np.random.default_rng(_PERTURB_SEED)
    for i, x in enumerate(tuning_inputs):
        host = np.asarray(x)
        if not is_float(host) or host.size == 0:
            continue
        wide = host.astype(np.float64)
        spread = float(np.std(wide)) or 1.0
        noisy = (wide + 0.5 * spread * rng.standard_normal(wide.shape)).astype(host.dtype)
        del wide
        changed = list(tuning_inputs)
        changed[i] = noisy
        outs = [np.asarray(o) for o in jax.tree.leaves(reference(*changed))]
        del changed, noisy
        if all(np.array_equal(p, q, equal_nan=True) for p, q in zip(base, outs, strict=True)):
            raise VacuousSuite(
                f"{where}: reference output does not change when input {i} is perturbed; "
                "a suite cannot check that a kernel uses it")


def is_float(x: np.ndarray) -> bool:
    return np.issubdtype(x.dtype, np.floating) or x.dtype.name.startswith(("bfloat", "float"))
