"""Phase time limits for the sandboxed child, scaled from the reference's own run time.

A candidate that hangs would otherwise hold an executor for the whole wall limit. The child
enforces a limit on ``build()``, on tracing and lowering each shape, and on each case run
(:mod:`tools.child.watchdog`); the sandbox's wall limit stays the backstop. Each limit is
a floor (what an honest kernel needs on a loaded two-core machine: interpret mode compiles
its program on a shape's first case) or a multiple of the reference's own time, whichever
is larger, and never more than the wall limit.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import msgspec

BUILD_FLOOR_S = 20.0
TRACE_FLOOR_S = 30.0
CASE_FLOOR_S = 30.0
TRACE_FACTOR = 50.0  # tracing + lowering a kernel vs compiling the reference
CASE_FACTOR = 2000.0  # interpret mode (a Python callback per grid step) vs XLA's run


class PhaseLimits(msgspec.Struct, frozen=True):
    build_s: float
    trace_s: float
    case_s: float
    reference_compile_s: float  # what they were scaled from
    reference_run_s: float


def phase_limits(reference: Any, inputs: Sequence[Any], wall_s: float) -> PhaseLimits:
    """Time the reference on ``inputs`` (compile, then one run) and scale the floors. A
    compile JAX's persistent cache answered (:mod:`tools.compilecache`) counts as long as
    the compile it saved (JAX keeps whole seconds), so a slow-to-compile reference keeps
    its long limits when the cache holds it."""
    import jax

    fn = jax.jit(reference)
    with _compile_time_saved() as saved:
        started = time.perf_counter()
        jax.block_until_ready(fn(*inputs))
        compiled = time.perf_counter()
    jax.block_until_ready(fn(*inputs))
    ran = time.perf_counter()
    compile_s, run_s = compiled - started + saved[0], ran - compiled

    def capped(seconds: float) -> float:
        return round(min(seconds, wall_s), 3)

    return PhaseLimits(
        build_s=capped(BUILD_FLOOR_S),
        trace_s=capped(max(TRACE_FLOOR_S, TRACE_FACTOR * compile_s)),
        case_s=capped(max(CASE_FLOOR_S, CASE_FACTOR * run_s)),
        reference_compile_s=compile_s, reference_run_s=run_s,
    )


_SAVED_EVENT = "/jax/compilation_cache/compile_time_saved_sec"
_saving = threading.local()  # the current thread's running total, while one is kept
_listening = threading.Lock()
_listener_installed = False


def _on_duration(event: str, seconds: float, **_: Any) -> None:
    total = getattr(_saving, "total", None)
    if event == _SAVED_EVENT and total is not None:
        total[0] += max(seconds, 0.0)


@contextlib.contextmanager
def _compile_time_saved() -> Iterator[list[float]]:
    """The compile seconds JAX's persistent cache saved this thread inside the block (JAX
    reports them synchronously, on the compiling thread)."""
    global _listener_installed
    import jax

    with _listening:
        if not _listener_installed:
            jax.monitoring.register_event_duration_secs_listener(_on_duration)
            _listener_installed = True
    total = [0.0]
    _saving.total = total
    try:
        yield total
    finally:
        _saving.total = None


# per (task, suite, wall limit): the reference is timed once per process, not per candidate
_TIMED: dict[tuple[str, str, float], PhaseLimits] = {}
_TIMED_MAX = 64


def suite_limits(task: Any, suite: Any, wall_s: float) -> PhaseLimits:
    """The limits for a suite, scaled from the reference on its largest case. An executor
    judges many candidates on one suite: the reference is timed on the first (at a 4096^3
    tuning point, seconds of compile and run), and the later ones reuse its limits."""
    import numpy as np

    key = (task.source_sha256, suite.sha256, wall_s)
    if suite.sha256 and key in _TIMED:
        return _TIMED[key]
    largest = max(suite.cases, key=lambda c: sum(int(np.prod(a.shape)) for a in c.inputs))
    limits = phase_limits(task.reference_at(largest.shape_index),
                          [a.numpy() for a in largest.inputs], wall_s)
    if suite.sha256:
        if len(_TIMED) >= _TIMED_MAX:
            _TIMED.pop(next(iter(_TIMED)))
        _TIMED[key] = limits
    return limits
