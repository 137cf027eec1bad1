"""Figure: freezing a task's suite with glibc's default malloc and with the command's tuning
(`tools/allocator.py`), printed as JSON.

For each task (shipped names, or task files such as a JAXBench `baseline.py`, scaled with
`--scale` as `kernelgraph bench --scale` does), a fresh interpreter per mode and repeat loads
the task and freezes its suite as a run's test synthesiser does; its own resource usage over
the freeze is reported: wall, user and system seconds, minor page faults, peak resident
memory, and the suite's hash (the two modes must freeze the same suite). Modes run in
alternation, so a slower stretch of the machine falls on both.

Usage: python benchmarks/allocator.py [--json] [--repeats 1] [--scale F[,F]]
       [TASK ...]   (default: rmsnorm swiglu_mlp)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(ROOT))
DEFAULT_TASKS = ("rmsnorm", "swiglu_mlp")
MODES = ("system", "tuned")

_CHILD = r"""
import json, resource, sys, time
from tools import allocator
if sys.argv[3] == "tuned":
    allocator.reexec_tuned()
from tools.api import freeze_suite, load_task, scaled_task
from kernelgraph.tasknames import shipped_tasks
task = shipped_tasks().get(sys.argv[1], sys.argv[1])
if sys.argv[2]:
    task = scaled_task(task, sys.argv[2])
loaded = load_task(task)
before = resource.getrusage(resource.RUSAGE_SELF)
started = time.perf_counter()
suite = freeze_suite(loaded)
wall = time.perf_counter() - started
after = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({
    "wall_s": round(wall, 2), "user_s": round(after.ru_utime - before.ru_utime, 2),
    "sys_s": round(after.ru_stime - before.ru_stime, 2),
    "minor_faults": after.ru_minflt - before.ru_minflt,
    "peak_rss_gb": round(after.ru_maxrss / (1 << 20), 2), "suite_sha256": suite.sha256}))
"""


def _freeze(task: str, scale: str, mode: str) -> dict[str, Any]:
    from tools import allocator

    env = {k: v for k, v in os.environ.items() if k not in (allocator.ENV,)}
    env[allocator.OPT_OUT_ENV] = "system" if mode == "system" else ""
    done = subprocess.run([sys.executable, "-c", _CHILD, task, scale, mode], cwd=ROOT, env=env,
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{task} ({mode}): {done.stderr.strip().splitlines()[-1:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(task: str, scale: str, repeats: int) -> dict[str, Any]:
    runs: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
    for _ in range(repeats):
        for mode in MODES:
            runs[mode].append(_freeze(task, scale, mode))
            print(f"{Path(task).parent.name or task} {mode}: {runs[mode][-1]}", file=sys.stderr)
    result: dict[str, Any] = {"task": task, "scale": scale or None}
    for mode in MODES:
        rows = runs[mode]
        result[mode] = {key: statistics.median(row[key] for row in rows)
                        for key in ("wall_s", "user_s", "sys_s", "minor_faults", "peak_rss_gb")}
    system, tuned = result["system"], result["tuned"]
    result["same_suite"] = len({row["suite_sha256"] for mode in MODES for row in runs[mode]}) == 1
    result["cpu_s_saved"] = round(system["user_s"] + system["sys_s"]
                                  - tuned["user_s"] - tuned["sys_s"], 2)
    result["wall_ratio"] = round(system["wall_s"] / tuned["wall_s"], 2) if tuned["wall_s"] else None
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tasks", nargs="*", default=list(DEFAULT_TASKS))
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--scale", default="")
    parser.add_argument("--json", action="store_true", help="JSON only (the default prints it too)")
    args = parser.parse_args()
    results = [measure(task, args.scale, max(1, args.repeats)) for task in args.tasks]
    print(json.dumps({"benchmark": "allocator", "repeats": args.repeats, "tasks": results},
                     indent=None if args.json else 2))


if __name__ == "__main__":
    main()
