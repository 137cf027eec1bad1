"""Phase time limits: a candidate that hangs in build() or on one case is killed at that
phase's limit, well under the overall wall limit, and the verdict names the limit."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from tools.sandbox.launcher import Limits
from tools.verification.deadlines import (
    BUILD_FLOOR_S,
    CASE_FACTOR,
    CASE_FLOOR_S,
    TRACE_FLOOR_S,
    phase_limits,
    suite_limits,
)
from tools.verification.receipts import check_receipt
from tools.verification.verify import evaluate

ROOT = Path(__file__).resolve().parent.parent
TASK = ROOT / "tests" / "evaltasks" / "rmsnorm_small.py"
CANDIDATES = ROOT / "tests" / "candidates"
WALL_S = 300.0


def test_limits_have_floors_scale_with_the_reference_and_stay_under_the_wall() -> None:
    x = np.ones((64, 128), np.float32)
    quick = phase_limits(lambda a: a * 2, [x], WALL_S)
    # the rule, from the times it measured (a loaded machine makes any run slow)
    assert quick.build_s == BUILD_FLOOR_S
    assert quick.case_s == round(min(WALL_S, max(CASE_FLOOR_S,
                                                 CASE_FACTOR * quick.reference_run_s)), 3)
    assert quick.case_s >= CASE_FLOOR_S and quick.trace_s >= TRACE_FLOOR_S

    def slow(a):
        time.sleep(0.05)  # at trace time and never again: only the compile is slow
        return a * 2

    assert phase_limits(slow, [x], WALL_S).trace_s >= 50 * 0.05
    assert phase_limits(lambda a: a, [x], 10.0).case_s == 10.0


def test_a_compile_the_persistent_cache_saved_counts_as_the_compile(monkeypatch) -> None:
    """A reference JAX's persistent cache held (tools/compilecache.py) keeps the trace limit
    its compile earned: the seconds the cache reports saved are added back, and only those
    reported on this thread while the reference is timed."""
    import jax

    from tools.verification import deadlines

    x = np.ones((64, 128), np.float32)

    def cached(a):  # a stand-in for the cache's report, made at compile time
        jax.monitoring.record_event_duration_secs(deadlines._SAVED_EVENT, 2.0)
        return a * 3

    limits = phase_limits(cached, [x], WALL_S)
    assert limits.reference_compile_s >= 2.0 and limits.trace_s >= 50 * 2.0
    jax.monitoring.record_event_duration_secs(deadlines._SAVED_EVENT, 5.0)  # outside: ignored
    assert phase_limits(lambda a: a * 4, [x], WALL_S).reference_compile_s < 2.0


def test_a_suite_reference_is_timed_once_per_process_and_per_wall_limit() -> None:
    """An executor judges many candidates on one suite: the second asks for its limits
    without running the reference again; another suite or wall limit times it anew."""
    from types import SimpleNamespace

    from tools.sandbox.wire import WireArray

    calls: list[int] = []

    def reference_at(shape_index: int):
        calls.append(shape_index)  # what is timed is asked for once per timing
        return lambda a: a * 2

    case = SimpleNamespace(inputs=(WireArray.of(np.ones((8, 128), np.float32)),),
                           shape_index=0)
    task = SimpleNamespace(source_sha256="t" * 64, reference_at=reference_at)
    suite = SimpleNamespace(sha256="s" * 64, cases=[case])
    first = suite_limits(task, suite, WALL_S)
    assert suite_limits(task, suite, WALL_S) == first and len(calls) == 1
    suite_limits(task, SimpleNamespace(sha256="u" * 64, cases=[case]), WALL_S)
    assert len(calls) == 2
    assert suite_limits(task, suite, 10.0).case_s == 10.0 and len(calls) == 3


@pytest.mark.slow
@pytest.mark.parametrize(("candidate", "expected", "within_s"), [
    ("never_returns.py", "build() did not return within the build time limit", BUILD_FLOOR_S),
    ("hangs_on_one_case.py", "shape0-seed0-large did not finish within the per-case time "
                             "limit", CASE_FLOOR_S),
])
def test_a_hang_is_killed_at_its_phase_limit(candidate: str, expected: str,
                                             within_s: float) -> None:
    started = time.monotonic()
    verdict = evaluate(TASK, CANDIDATES / candidate, limits=Limits(wall_s=WALL_S))
    elapsed = time.monotonic() - started
    assert verdict.verdict == "fail"
    assert any(expected in r for r in verdict.reasons), verdict.reasons
    # the phase limit plus what ran before it (start, import, earlier cases), never the wall
    assert elapsed < within_s + 90.0 < WALL_S, elapsed
    limits = verdict.receipt["environment"]["phase_limits"]
    assert limits["build_s"] >= BUILD_FLOOR_S and limits["case_s"] >= CASE_FLOOR_S
    assert check_receipt(verdict.receipt).ok
