"""Figure: the offline author on the shipped task suite (`tasks`).

For every task in tasks/: the kernel class the offline author reads from the jaxpr, the
dtypes, and the verifier's verdict on the author's first kernel (plan, then implement, as
the first iteration of an Auto trajectory does; no fixing, no tuning) on the default target
(sim-tpu-v6e): pass, fail (with the verifier's first reasons) or unsupported (with the
author's reason). The speedup is the verifier's over the XLA baseline at the tuning point;
on a sim-* target it is SIMULATED (analytic cost model) and is reported as
`speedup_simulated`, never mixed with measured figures. Prints one JSON object with --json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# This folder holds scripts named like the project's packages (agents.py, tasks/): import
# the project's, not them.
sys.path = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]


def _ask(purpose: str, context: dict[str, Any]) -> str:
    from agents.llm.base import LlmRequest
    from agents.llm.offline import OfflineProvider

    request = LlmRequest(agent="benchmark", purpose=purpose, prompt="", context=context, seed=0)
    return asyncio.run(OfflineProvider(seed=0).complete(request)).text


def run_task(path: Path, target: str, workdir: Path) -> dict[str, Any]:
    """One task: describe it, ask the offline author for a kernel, verify that kernel."""
    from agents.llm.base import ProviderError
    from agents.llm.parsing import check_plan, extract_code
    from kernelgraph.taskinfo import describe
    from tools.api import chip_figures, evaluate

    info = describe(path)
    row: dict[str, Any] = {"task": info.name, "class": info.kernel_class, "dtype": info.dtype,
                           "target": target}
    context = {"task_path": str(path), "task_name": path.stem, "target": target,
               "chip": chip_figures(target), "iteration": 0, "seed": 0, "parent": None,
               "failures": [], "hint": "", "knowledge": [], "baseline_s": None, "feedback": ""}
    started = time.perf_counter()
    try:
        plan = check_plan(_ask("plan", context))
        code = extract_code(_ask("implement", {**context, "plan": plan}))
    except ProviderError as exc:
        text = str(exc)
        kind = "unsupported" if text.startswith("unsupported: ") else "author_error"
        return {**row, "result": kind, "reason": text.removeprefix("unsupported: "),
                "author_s": round(time.perf_counter() - started, 2)}
    row["author_s"] = round(time.perf_counter() - started, 2)
    candidate = workdir / f"{path.stem}_offline.py"
    candidate.write_text(code)
    started = time.perf_counter()
    verdict = evaluate(path, candidate, target=target)
    row["verify_s"] = round(time.perf_counter() - started, 2)
    row["result"] = verdict.verdict
    if not verdict.passed:
        row["reason"] = "; ".join(verdict.reasons[:2]) or "; ".join(
            d.message for d in verdict.diagnostics[:2])
    if verdict.measurement is not None:
        m = verdict.measurement
        label = "simulated" if m.measured_on == "simulated" else "measured"
        row[f"speedup_{label}"] = round(float(m.speedup), 3)
        row[f"latency_s_{label}"] = float(m.latency_s)
        row[f"baseline_s_{label}"] = float(m.baseline_s)
    return row


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    counts = {k: sum(r["result"] == k for r in rows)
              for k in ("pass", "fail", "unsupported", "author_error")}
    speedups = [r["speedup_simulated"] for r in rows
                if r["result"] == "pass" and "speedup_simulated" in r]
    geomean = math.exp(sum(math.log(s) for s in speedups) / len(speedups)) if speedups else None
    floored = (math.exp(sum(math.log(max(s, 1.0)) for s in speedups) / len(speedups))
               if speedups else None)
    return {**counts, "tasks": len(rows),
            "geomean_speedup_simulated_of_passes": None if geomean is None else round(geomean, 3),
            "geomean_speedup_simulated_floored_1": None if floored is None else round(floored, 3),
            "faster_than_xla_simulated": sum(s > 1.0 for s in speedups)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--target", default="sim-tpu-v6e", help="the verifier's target")
    parser.add_argument("--task", action="append", default=[],
                        help="only this shipped task (name or path; repeat)")
    args = parser.parse_args(argv)

    import jax  # noqa: F401  (imported before timing)

    from kernelgraph.tasknames import resolve_task, shipped_tasks

    paths = [resolve_task(t) for t in args.task] or list(shipped_tasks().values())
    started = time.perf_counter()
    rows = []
    with tempfile.TemporaryDirectory(prefix="kg-bench-tasks-") as workdir:
        for path in paths:
            rows.append(run_task(path, args.target, Path(workdir)))
            if not args.json:
                print(_line(rows[-1]), flush=True)
    result = {"figure": "tasks", "target": args.target, "summary": summarise(rows),
              "tasks": rows, "wall_s": round(time.perf_counter() - started, 1)}
    if args.json:
        print(json.dumps(result))
    else:
        print(json.dumps(result["summary"]))
    return 0


def _line(row: dict[str, Any]) -> str:
    speed = (f"{row['speedup_simulated']:.2f}x simulated" if "speedup_simulated" in row else
             f"{row['speedup_measured']:.2f}x measured" if "speedup_measured" in row else "-")
    reason = f"  ({row['reason'][:100]})" if row.get("reason") else ""
    return (f"{row['task']:<24} {row['class'] or '-':<18} {row['dtype']:<14} "
            f"{row['result']:<12} {speed}{reason}")


if __name__ == "__main__":
    sys.exit(main())
