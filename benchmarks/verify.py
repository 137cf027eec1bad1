"""Figure: seconds to verify one candidate on a 1M-element task (`verify_s`).

The task is tasks/rmsnorm.py (tuning point 2048 x 512 = 1M float32 elements) with three
PRNG seeds, its two unseen shapes and the two magnitude probes; the candidate is
kernels/rmsnorm.py at its default configuration. Each run is one full `evaluate()` on the
default target (sim-tpu-v6e): suite build with the float64 oracle, the sandboxed child
(start, import, trace, TPU lowering, interpret-mode runs), the parent-side checks and the
simulated timing. The parent has imported JAX before the clock starts, as a long-running
verifier would have. Prints one JSON object with --json.
"""

from __future__ import annotations

import argparse
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
        "phases_s_last_run": {k: round(v, 3) for k, v in phases[-1].items()},
        "cpus": __import__("os").cpu_count(),
    }
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key}: {value}")
    return 0 if last == "pass" else 1


if __name__ == "__main__":
    sys.exit(main())
