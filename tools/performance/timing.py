"""Device timing shared by both sides: the request and result the timing child exchanges with
its parent, the interleaved timer the child runs, and the XProf reader the parent uses.

Nothing here imports candidate code; :mod:`tools.child.timing` is the child that does.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

CANDIDATE_FILE = "candidate.py"


class TimingRequest(msgspec.Struct, frozen=True):
    platform: str
    task_path: str
    candidate_path: str
    """Relative to the child's box."""
    config: dict[str, Any]
    warmup: int
    runs: int
    trace_runs: int
    shape_index: int = 0
    seed: int = 0
    # A verified candidate's audited trace as data (tools.child.programs): when given, it is
    # what is timed and no candidate file is read or imported.
    program: bytes = b""


class TimingResult(msgspec.Struct, frozen=True):
    platform: str
    device_kind: str
    candidate_wall_s: list[float]
    baseline_wall_s: list[float]
    xplane: bytes = b""
    error: str = ""
    program_sha256: str = ""  # of the program that was timed ("" for a candidate file)


def device_times(
    xplane: bytes, modules: Sequence[str], *, plane_prefix: str = "/device:"
) -> dict[str, list[float]]:
    """Per-execution device seconds of each jitted module, from an XProf trace.

    TPU traces have an "XLA Modules" line per device with one event per execution; other
    traces are grouped by the `hlo_module` and `run_id` stats of each op event.
    """
    out: dict[str, list[float]] = {m: [] for m in modules}
    if not xplane:
        return out
    from jax.profiler import ProfileData

    data = ProfileData.from_serialized_xspace(xplane)
    for plane in data.planes:
        if not plane.name.startswith(plane_prefix):
            continue
        lines = {line.name: line for line in plane.lines}
        if "XLA Modules" in lines:
            for event in lines["XLA Modules"].events:
                for m in modules:
                    if event.name.startswith(m):
                        out[m].append(event.duration_ns * 1e-9)
            continue
        runs: dict[tuple[str, Any], float] = {}
        for line in plane.lines:
            for event in line.events:
                stats = dict(event.stats)
                module = str(stats.get("hlo_module", ""))
                for m in modules:
                    if module.startswith(m):
                        key = (m, stats.get("run_id"))
                        runs[key] = runs.get(key, 0.0) + event.duration_ns * 1e-9
        for (m, _), seconds in runs.items():
            out[m].append(seconds)
    return out


def interleaved_times(
    candidate: Callable[..., Any], baseline: Callable[..., Any], args: Sequence[Any],
    *, warmup: int, runs: int,
) -> tuple[list[float], list[float], list[str]]:
    """Wall seconds of each call, candidate and baseline alternating which goes first.

    Warm-up rounds (compilation, caches) are run and discarded; every call waits for its
    result with `block_until_ready`. Returns (candidate times, baseline times, call order).
    """
    import jax

    def timed(fn: Callable[..., Any]) -> float:
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        return time.perf_counter() - start

    for _ in range(warmup):
        timed(candidate)
        timed(baseline)
    times: dict[str, list[float]] = {"candidate": [], "baseline": []}
    order: list[str] = []
    fns = {"candidate": candidate, "baseline": baseline}
    for r in range(runs):
        for name in (("candidate", "baseline") if r % 2 == 0 else ("baseline", "candidate")):
            times[name].append(timed(fns[name]))
            order.append(name)
    return times["candidate"], times["baseline"], order


__all__ = ["CANDIDATE_FILE", "TimingRequest", "TimingResult", "device_times", "interleaved_times"]
