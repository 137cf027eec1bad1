"""What a receipt records of how its verdict was reached, beside the checks: where the
verification child spent its time, by check (the figures `benchmarks/verify.py` reports as
the cost of each coverage check), and the environment it ran in. Neither decides a verdict."""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Collection
from typing import Any

from tools.correctness.testsuite import FrozenSuite
from tools.sandbox import wire
from tools.sandbox.launcher import Limits, SandboxResult
from tools.sandbox.policy import WEAK_LABEL
from tools.verification.deadlines import PhaseLimits

_DEFAULT_REQUEST = wire.EvalRequest(candidate_file="", config={}, groups=(), order_seed=0)


def child_timings(response: wire.EvalResponse, suite: FrozenSuite,
                  derived_shapes: Collection[int]) -> dict[str, float]:
    """The child's total, each check it timed itself, each derived unaligned shape (its
    trace, lowering and cases but the non-finite one) and the non-finite case."""
    timings = {"child_s": response.seconds}
    timings.update({f"child_{name}": seconds for name, seconds in response.check_seconds.items()})
    kinds = {c.case_id: c.kind for c in suite.cases}
    derived = {g.shape_index: g.trace_seconds + g.lower_seconds + sum(
        c.seconds for c in g.cases if kinds.get(c.case_id) != "nonfinite")
        for g in response.groups if g.shape_index in derived_shapes}
    timings.update({f"child_derived_shape{i}_s": s for i, s in derived.items()})
    timings["child_derived_shapes_s"] = sum(derived.values())
    timings["child_nonfinite_s"] = sum(c.seconds for g in response.groups for c in g.cases
                                       if kinds.get(c.case_id) == "nonfinite")
    return timings


def environment(response: wire.EvalResponse | None, sandbox: SandboxResult | None,
                limits: Limits, deadlines: PhaseLimits | None, *, order_seed: int,
                chip: str) -> dict[str, Any]:
    """Versions, machine, the isolation that applied (the weak-sandbox opt-in among it), the
    limits and the interpret-mode settings every case ran under."""
    import jax

    return {
        "python": sys.version.split()[0],
        "jax": jax.__version__,
        "child_jax": response.jax_version if response else None,
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "isolation": list(sandbox.isolation) if sandbox else [],
        # the user's opt-in ran the candidate without the full sandbox
        "weak_sandbox": bool(sandbox) and WEAK_LABEL in sandbox.isolation,
        "limits": limits.describe(),
        "phase_limits": deadlines,
        "interpret": {**{name: getattr(_DEFAULT_REQUEST, name) for name in (
            "uninitialized_memory", "detect_races", "num_cores", "multicore_cases",
            "second_poison", "eager_cases")}, "randomised_parallel_grid_order": True,
            "second_poison_cases_per_shape": _DEFAULT_REQUEST.second_poison_cases,
            "order_seed": order_seed},
        "chip": chip,
    }
