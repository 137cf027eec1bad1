"""The Auto loop's figures: one trajectory on the embedded runtime, read back from its log.

    python benchmarks/agents.py --json [--task tasks/rmsnorm.py] [--iterations 5]

- `trajectory_s`: RunRequested to RunFinished of one Auto trajectory (offline provider,
  simulated target: its speedups are simulated).
- `orchestration_overhead_fraction`: the share of that time not covered by provider calls
  (LlmCalled latency) or executor and tool work (the wall time of suite, baseline, compile,
  test, tuning, profile and verification events), as a union of intervals: the bus, the
  orchestrator, artifact traffic and waiting. Goal: <= 0.05.
- `llm_calls_per_trajectory`, `iterations`, `best_speedup_simulated`, per-phase seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WORK_EVENTS = ("TestSuiteFrozen", "BaselineMeasured", "CompileChecked", "TestsRun",
               "ConfigMeasured", "ProfileCaptured", "WinnerVerified")


def union_length(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for start, stop in sorted(intervals):
        if stop <= end:
            continue
        total += stop - max(start, end)
        end = stop
    return total


async def one_trajectory(db: Path, task: Path, provider: str, iterations: int) -> str:
    from kernelgraph.client import KernelRequest, submit, wait
    from kernelgraph.runtime import Runtime, RuntimeConfig

    config = RuntimeConfig(db_path=db, concurrency={"executor": 2, "verifier": 1})
    async with Runtime(config) as runtime:
        assert runtime.client is not None
        run = await submit(runtime.client.nc, KernelRequest(
            task=task, provider=provider, iterations=iterations))
        await wait(runtime.client.nc, run.run_id, timeout=3600)
    return run.run_id


def figures(db: Path, run_id: str) -> dict[str, object]:
    from eventstore.log import EventLog

    with EventLog(db, read_only=True) as log:
        events = list(log.events(run_id=run_id))
    start = next(e.ts for e in events if e.type_name == "RunRequested")
    finished = next(e for e in events if e.type_name == "RunFinished")
    work: list[tuple[float, float]] = []
    phases: dict[str, float] = defaultdict(float)
    llm_s = 0.0
    for e in events:
        if e.type_name == "LlmCalled":
            seconds = e.latency_ms / 1000
            work.append((e.ts - seconds, e.ts))
            llm_s += seconds
        elif e.type_name in WORK_EVENTS:
            work.append((e.ts - e.wall_s, e.ts))
        if getattr(type(e), "phase", None) and hasattr(e, "wall_s"):
            phases[type(e).phase] += e.wall_s
    total = finished.ts - start
    covered = union_length([(max(a, start), min(b, finished.ts)) for a, b in work])
    node = next((e for e in events if e.type_name == "NodeEvaluated"), None)
    return {
        "trajectory_s": round(total, 2),
        "orchestration_overhead_fraction": round(1 - covered / total, 4) if total > 0 else None,
        "llm_calls_per_trajectory": sum(1 for e in events if e.type_name == "LlmCalled"),
        "llm_s": round(llm_s, 3),
        "iterations": sum(1 for e in events if e.type_name == "IterationFinished"),
        "valid_iterations": sum(1 for e in events if e.type_name == "IterationFinished" and e.valid),
        "best_iteration": node.best_iteration if node else None,
        "best_speedup_simulated": node.speedup if node and node.measured_on == "simulated" else None,
        "run_status": finished.status,
        "verified": finished.best_node_id is not None,
        "phase_s": {k: round(v, 2) for k, v in sorted(phases.items())},
        "events": len(events),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", type=Path, default=ROOT / "tasks" / "rmsnorm.py")
    parser.add_argument("--provider", default="offline")
    parser.add_argument("--iterations", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kg-bench-agents-") as tmp:
        os.environ.setdefault("KG_WORKSPACE", str(Path(tmp) / "work"))
        os.environ.setdefault("KG_KNOWLEDGE_PATH", str(Path(tmp) / "knowledge"))
        db = Path(tmp) / "bench.duckdb"
        started = time.monotonic()
        run_id = asyncio.run(one_trajectory(db, args.task, args.provider, args.iterations))
        out = {"task": args.task.stem, "provider": args.provider, "target": "sim-tpu-v6e",
               **figures(db, run_id), "wall_s": round(time.monotonic() - started, 2),
               "load_avg_1m": round(os.getloadavg()[0], 2)}
    if args.json:
        print(json.dumps(out))
    else:
        for key, value in out.items():
            print(f"{key:34} {value}")


if __name__ == "__main__":
    main()
