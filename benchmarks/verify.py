"""Figure: seconds to verify one candidate on a 1M-element task (`verify_s`).

The task is tasks/rmsnorm.py (tuning point 2048 x 512 = 1M float32 elements) with three
PRNG seeds, its two unseen shapes and the two magnitude probes; the candidate is
kernels/rmsnorm.py at its default configuration. Each run is one full `evaluate()` on the
default target (sim-tpu-v6e): suite build with the float64 oracle, the sandboxed child
(start, import, trace, TPU lowering, interpret-mode runs), the parent-side checks and the
simulated timing. The parent has imported JAX before the clock starts, as a long-running
verifier would have. Prints one JSON object with --json.

The cost of the coverage checks is reported per check (`checks_s`: the second poison, the
direct calls, the phase limits' reference timing, the unaligned shape's case in the child)
and as one evaluation without any of them (`verify_s_without_new_checks`).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--runs", type=int, default=3, help="full evaluations to time")
    parser.add_argument("--task", default=str(ROOT / "tasks" / "rmsnorm.py"))
    parser.add_argument("--candidate", default=str(ROOT / "kernels" / "rmsnorm.py"))
    args = parser.parse_args(argv)

    import jax  # noqa: F401  (imported before timing, as in a running verifier)

    from tools.inputs.tasks import load_task
    from tools.verification.verify import evaluate

    task = load_task(args.task)
    seconds, phases, verdicts = [], [], []
    for _ in range(args.runs):
        started = time.perf_counter()
        verdict = evaluate(args.task, args.candidate, seeds=(0, 1, 2))
        seconds.append(time.perf_counter() - started)
        phases.append(verdict.timings)
        verdicts.append(verdict.verdict)
    with _without_new_checks():
        started = time.perf_counter()
        bare = evaluate(args.task, args.candidate, seeds=(0, 1, 2))
        without_s = time.perf_counter() - started
    last = verdicts[-1]
    elements = 1
    for size in task.make_inputs(0, 0)[0].shape:
        elements *= size
    result = {
        "figure": "verify_s",
        "verify_s": round(statistics.median(seconds), 3),
        "runs_s": [round(s, 3) for s in seconds],
        "verdicts": verdicts,
        "target": "sim-tpu-v6e",
        "task": Path(args.task).name,
        "candidate": Path(args.candidate).name,
        "elements_at_tuning_point": elements,
        "seeds": 3,
        "unseen_shapes": len(task.unseen_shape_indices),
        "cases": len(verdict.cases),
        "verify_s_without_new_checks": round(without_s, 3),
        "verdict_without_new_checks": bare.verdict,
        "cases_without_new_checks": len(bare.cases),
        "checks_s": {name: round(phases[-1].get(key, 0.0), 3) for name, key in (
            ("second_poison", "child_second_poison_s"), ("direct_calls", "child_eager_s"),
            ("phase_limits", "deadlines_s"), ("unaligned_shape", "child_derived_shapes_s"))},
        "unaligned_shapes_added": len(task.derived_shapes),
        "phases_s_last_run": {k: round(v, 3) for k, v in phases[-1].items()},
        "cpus": __import__("os").cpu_count(),
    }
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key}: {value}")
    return 0 if last == "pass" else 1


@contextlib.contextmanager
def _without_new_checks():  # type: ignore[no-untyped-def]
    """The verifier as it was before: no derived unaligned shape, no second poison, no
    direct calls, no accumulation magnitudes, no phase limits."""
    import msgspec
    import numpy as np

    from tools.correctness import testsuite
    from tools.inputs import shapes
    from tools.verification import verify
    from tools.verification.deadlines import PhaseLimits

    saved = (shapes.with_unaligned_shape, testsuite._magnitudes, verify._request,
             verify.phase_limits)
    shapes.with_unaligned_shape = lambda task: task
    testsuite._magnitudes = lambda fn, host, oracle: [np.abs(o.astype(np.float64))
                                                      for o in oracle]
    verify._request = lambda *a: msgspec.structs.replace(saved[2](*a), second_poison="",
                                                          eager_cases=0)
    verify.phase_limits = lambda *a: PhaseLimits(0.0, 0.0, 0.0, 0.0, 0.0)
    try:
        yield
    finally:
        (shapes.with_unaligned_shape, testsuite._magnitudes, verify._request,
         verify.phase_limits) = saved


if __name__ == "__main__":
    sys.exit(main())
