"""Figure: seconds to verify one candidate on a 1M-element task (`verify_s`).

The task is tasks/rmsnorm.py (tuning point 2048 x 512 = 1M float32 elements) with three
PRNG seeds, its two unseen shapes, its derived unaligned shape and the two magnitude
probes; the candidate is kernels/rmsnorm.py at its default configuration. Each run is one
full `evaluate()` on the default target (sim-tpu-v6e): suite build with the float64 oracle,
the two sandboxed children (the worker that imports, builds and traces the candidate; the
runner that lowers and runs its programs under interpret mode, never importing it), the
parent-side checks and the simulated timing. The parent has imported JAX before the clock
starts, as a long-running verifier would have; the first run of the process compiles the
input makers and references, later runs find them in JAX's in-process caches.

Wall time depends on what else the machine runs, so every run also reports its CPU seconds
(this process and every child it waited for: both sandboxes) and the 1-minute load average
when it started; the CPU figure is the steadier one on a shared machine, and
`cpu_s_last_run` splits it between the parent and each sandbox. `--cli` adds
`kernelgraph verify` in a fresh process (what a user waits for, imports included), twice:
on an empty JAX compilation cache and on the one the first run left.

The cost of the coverage checks is reported per check (`checks_s`: the second poison, the
direct calls, the phase limits' reference timing, the derived unaligned shapes' share of the
children, the non-finite case's run and, in the parent, the oracle runs that find which of
its elements depend on a planted value), each derived shape's share on its own
(`unaligned_shapes_s`, by what it moves off the tile), and as one evaluation without any of
them (`verify_s_without_new_checks`).
Prints one JSON object with --json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def _cpu_s() -> float:
    """CPU seconds of this process and of every child it has waited for."""
    own, children = (resource.getrusage(w) for w in (resource.RUSAGE_SELF,
                                                      resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _timed(run: Callable[[], Any]) -> tuple[Any, dict[str, float]]:
    load = os.getloadavg()[0]
    cpu, started = _cpu_s(), time.perf_counter()
    result = run()
    return result, {"wall_s": round(time.perf_counter() - started, 3),
                    "cpu_s": round(_cpu_s() - cpu, 3), "load_1m": round(load, 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--runs", type=int, default=3, help="full evaluations to time")
    parser.add_argument("--cli", action="store_true",
                        help="also time one `kernelgraph verify` in a fresh process")
    parser.add_argument("--task", default=str(ROOT / "tasks" / "rmsnorm.py"))
    parser.add_argument("--candidate", default=str(ROOT / "kernels" / "rmsnorm.py"))
    args = parser.parse_args(argv)

    import jax  # noqa: F401  (imported before timing, as in a running verifier)

    from tools.inputs.tasks import load_task
    from tools.verification.verify import evaluate

    task = load_task(args.task)
    runs, phases, verdicts = [], [], []
    for _ in range(args.runs):
        with _dependence_clock() as dependence_s:
            verdict, figures = _timed(lambda: evaluate(args.task, args.candidate,
                                                       seeds=(0, 1, 2)))
        runs.append(figures)
        phases.append({**verdict.timings, "nonfinite_dependence_s": sum(dependence_s)})
        verdicts.append(verdict.verdict)
    with _without_new_checks():
        bare, bare_figures = _timed(lambda: evaluate(args.task, args.candidate,
                                                     seeds=(0, 1, 2)))
    last = verdicts[-1]
    elements = 1
    for size in task.input_specs(0)[0].shape:
        elements *= size
    result: dict[str, Any] = {
        "figure": "verify_s",
        "verify_s": round(statistics.median(r["wall_s"] for r in runs), 3),
        "verify_cpu_s": round(statistics.median(r["cpu_s"] for r in runs), 3),
        "runs_s": [r["wall_s"] for r in runs],
        "runs_cpu_s": [r["cpu_s"] for r in runs],
        "runs_load_1m": [r["load_1m"] for r in runs],
        "verdicts": verdicts,
        "target": "sim-tpu-v6e",
        "task": Path(args.task).name,
        "candidate": Path(args.candidate).name,
        "elements_at_tuning_point": elements,
        "seeds": 3,
        "unseen_shapes": len(task.unseen_shape_indices),
        "cases": len(verdict.cases),
        "verify_s_without_new_checks": bare_figures["wall_s"],
        "verify_cpu_s_without_new_checks": bare_figures["cpu_s"],
        "verdict_without_new_checks": bare.verdict,
        "cases_without_new_checks": len(bare.cases),
        "checks_s": {name: round(phases[-1].get(key, 0.0), 3) for name, key in (
            ("second_poison", "child_second_poison_s"), ("direct_calls", "child_eager_s"),
            ("phase_limits", "deadlines_s"), ("unaligned_shapes", "child_derived_shapes_s"),
            ("nonfinite_case", "child_nonfinite_s"),
            ("nonfinite_dependence", "nonfinite_dependence_s"))},
        "unaligned_shapes_added": len(task.derived_shapes),
        "unaligned_shapes_s": {
            f"{task.shapes[i]} ({what})": round(phases[-1].get(f"child_derived_shape{i}_s", 0.0), 3)
            for i, what in zip(task.derived_shapes, task.derived_what, strict=True)},
        "phases_s_last_run": {k: round(v, 3) for k, v in phases[-1].items()},
        # CPU seconds of the last run by process: each sandbox as its own wait4 reports it,
        # the parent (suite, checks, timing) as the rest
        "cpu_s_last_run": _cpu_split(runs[-1]["cpu_s"], phases[-1]),
        "cpus": os.cpu_count(),
    }
    if args.cli:
        result["cli_verify"] = _cli(args.task, args.candidate)
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key}: {value}")
    return 0 if last == "pass" else 1


def _cpu_split(total: float, timings: dict[str, float]) -> dict[str, float]:
    children = {k: round(timings[k], 3) for k in ("worker_cpu_s", "runner_cpu_s")
                if k in timings}
    return {**children, "parent_cpu_s": round(total - sum(children.values()), 3)}


def _cli(task: str, candidate: str) -> dict[str, Any]:
    """`kernelgraph verify TASK CANDIDATE --json` in a fresh process, twice on one new JAX
    compilation cache (tools/compilecache.py): first empty, then holding what the first
    compiled (a user's second verify of the same task)."""
    import tempfile

    from tools import compilecache

    command = [sys.executable, "-m", "kernelgraph", "verify", task, candidate, "--json"]
    with tempfile.TemporaryDirectory(prefix="kg-xla-bench-") as folder:
        env = {k: v for k, v in os.environ.items()
               if k not in compilecache.JAX_CACHE_VARIABLES}
        env[compilecache.CACHE_ENV] = folder
        runs = {}
        for name in ("cold_cache", "warm_cache"):
            done, figures = _timed(lambda: subprocess.run(command, capture_output=True,
                                                          text=True, cwd=ROOT, env=env,
                                                          check=False))
            try:
                verdict = json.loads(done.stdout).get("verdict")
            except json.JSONDecodeError:
                verdict = f"unreadable (exit {done.returncode})"
            runs[name] = {**figures, "verdict": verdict, "exit": done.returncode}
    return runs


@contextlib.contextmanager
def _dependence_clock() -> Iterator[list[float]]:
    """Seconds the suite spends finding which elements of the non-finite case depend on a
    planted value (the oracle's extra runs, :func:`tools.correctness.nonfinite.unplanted`)."""
    from tools.correctness import testsuite

    spent: list[float] = []
    saved = testsuite.unplanted

    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return saved(*args, **kwargs)
        finally:
            spent.append(time.perf_counter() - started)

    testsuite.unplanted = timed  # type: ignore[assignment]
    try:
        yield spent
    finally:
        testsuite.unplanted = saved


@contextlib.contextmanager
def _without_new_checks() -> Iterator[None]:
    """The verifier as it was before: no derived unaligned shapes, no non-finite case, no
    second poison, no direct calls, no accumulation magnitudes, no phase limits."""
    import msgspec
    import numpy as np

    from tools.correctness import testsuite
    from tools.inputs import shapes
    from tools.verification import verify
    from tools.verification.deadlines import PhaseLimits

    saved = (shapes.with_unaligned_shapes, testsuite._magnitudes, verify.worker_request,
             verify.suite_limits, testsuite.nonfinite_shape)
    shapes.with_unaligned_shapes = lambda task, **_: task
    testsuite.nonfinite_shape = lambda task, *_: None  # type: ignore[assignment,return-value]
    testsuite._magnitudes = lambda fn, host, oracle: [np.abs(o.astype(np.float64))
                                                      for o in oracle]
    verify.worker_request = lambda *a, **k: msgspec.structs.replace(  # type: ignore[assignment]
        saved[2](*a, **k), second_poison="", eager_cases=0)
    verify.suite_limits = lambda *a, **_: PhaseLimits(0.0, 0.0, 0.0, 0.0, 0.0)
    try:
        yield
    finally:
        (shapes.with_unaligned_shapes, testsuite._magnitudes, verify.worker_request,
         verify.suite_limits, testsuite.nonfinite_shape) = saved


if __name__ == "__main__":
    sys.exit(main())
