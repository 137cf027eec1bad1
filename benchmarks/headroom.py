"""Figure: how fast any kernel could be, in the model, against each task's XLA baseline.

For every task (shipped task names, task files, or JAXBench task folders), at its tuning
point: the simulated XLA baseline (priced from XLA:TPU's program where libtpu compiles it,
else from the host program, and said which), the task's work (its flops, and the bytes of
its inputs and outputs, which every kernel reads and writes at least once), and the
**ceiling**: the baseline over the least time the model grants any kernel for that work
(flops at the bf16 MXU peak or bytes at full HBM bandwidth, whichever is longer, plus one
launch; the flops are the task's own count, or its reference's dots padded to the MXU where
no layout avoids it, whichever is more: a head_dim of 64 fills a quarter of a 256-wide MXU
in any kernel). No kernel, written by anybody, is priced above its ceiling: a task whose ceiling
is at or below 1.0 cannot be sped up in the model at that size, and the share of tasks
with a ceiling above 1.0 bounds `fast_1` from above.

The floor is generous to kernels (bf16 peak for every flop, no per-step cost, no exposed
transfer), so ceilings are upper bounds. All figures are SIMULATED.

With `--bench-json` (the JSON `kernelgraph bench --json` printed) each task also shows the
speedup its run reached, and the headline counts the tasks between the two.

    python benchmarks/headroom.py <JAXBench>/benchmark --scale 0.125,0.0625 --json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

ROOT = Path(__file__).resolve().parent.parent
ABOVE = 1.0 + 1e-9  # a ceiling of exactly 1.0, computed in floating point, is not room


def task_paths(names: list[str]) -> list[Path]:
    """Shipped task names, task files, JAXBench task folders, or a JAXBench suite folder."""
    out: list[Path] = []
    for name in names:
        path = Path(name)
        if path.is_dir() and (path / "baseline.py").exists():
            out.append(path / "baseline.py")
        elif path.is_dir():
            out += sorted(p / "baseline.py" for p in path.iterdir() if (p / "baseline.py").exists())
        elif path.exists():
            out.append(path)
        elif (ROOT / "tasks" / f"{name}.py").exists():
            out.append(ROOT / "tasks" / f"{name}.py")
        else:
            raise SystemExit(f"headroom: no task {name!r} (a shipped task's name, a task file, "
                             "or a JAXBench folder)")
    return out


def label(path: Path) -> str:
    return path.parent.name if path.name == "baseline.py" else path.stem


def headroom(path: Path, scales: tuple[float, ...] | None, target: str) -> dict[str, Any]:
    """One task's baseline, work and ceiling at its tuning point."""
    from tools.api import chip_for_target, scaled_task
    from tools.inputs.tasks import load_task
    from tools.performance.baseline import task_dots, task_work
    from tools.performance.chips import get_chip
    from tools.performance.floors import least_mxu_flops, model_floor_s
    from tools.performance.roofline import KERNEL_LAUNCH_S
    from tools.performance.simbaseline import simulated_baseline

    started = time.perf_counter()
    if scales and path.name == "baseline.py":  # as `bench` scales it, fitted where it breaks
        path = Path(scaled_task(path, scales))
    task = load_task(path)
    chip = get_chip(chip_for_target(target))
    work, dots = task_work(task), task_dots(task)
    baseline = simulated_baseline(task.reference_at(0), task.input_specs(0), chip)
    floor = model_floor_s(work.flops, float(work.min_bytes), chip, dots) + KERNEL_LAUNCH_S
    return {
        "task": label(path), "shape": task.describe_shape(0),
        "baseline_s": baseline.latency_s, "baseline_priced_from": baseline.label,
        "flops": work.flops, "padded_mxu_flops": least_mxu_flops(dots, chip.mxu_dim),
        "min_bytes": work.min_bytes, "floor_s": floor,
        "ceiling": baseline.latency_s / floor, "wall_s": round(time.perf_counter() - started, 2),
    }


def reached(bench_json: Path | None) -> dict[str, float | None]:
    """Each task's best verified speedup in a `kernelgraph bench --json` output."""
    if bench_json is None:
        return {}
    runs = json.loads(bench_json.read_text())["runs"]
    best: dict[str, float | None] = {}
    for run in runs:
        speedup = run.get("speedup") if run.get("verified") else None
        old = best.get(run["task"])
        best[run["task"]] = speedup if old is None else max(old, speedup or 0.0)
    return best


def main(argv: list[str] | None = None) -> int:
    from tools.inputs.scaling import parse_scales

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tasks", nargs="+", help="shipped task names, task files or JAXBench folders")
    parser.add_argument("--scale", default=None, help="JAXBench scales, as `kernelgraph bench`")
    parser.add_argument("--target", default="sim-tpu-v6e")
    parser.add_argument("--bench-json", type=Path, default=None,
                        help="a `kernelgraph bench --json` output: show each task's speedup")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    scales = parse_scales(args.scale)
    got = reached(args.bench_json)
    rows: list[dict[str, Any]] = []
    started = time.perf_counter()
    for path in task_paths(args.tasks):
        try:
            row = headroom(path, scales, args.target)
        except Exception as exc:  # a task that does not load is counted, with why
            row = {"task": label(path), "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        if row["task"] in got:
            row["speedup"] = got[row["task"]]
        rows.append(row)
        if not args.json:
            print(json.dumps(row), file=sys.stderr, flush=True)
    priced = [r for r in rows if "ceiling" in r]
    summary = {
        "tasks": len(rows), "priced": len(priced),
        "ceiling_above_1": sum(r["ceiling"] > ABOVE for r in priced),
        "ceiling_above_1_1": sum(r["ceiling"] > 1.1 for r in priced),
        # over the tasks that load, as `bench` counts fast_1 over the runs it starts
        "fast_1_at_most": round(sum(r["ceiling"] > ABOVE for r in priced) / max(1, len(priced)), 3),
        "target": args.target, "scales": list(scales or ()), "measured_on": "simulated",
        "wall_s": round(time.perf_counter() - started, 1),
    }
    if got:
        summary["speedup_above_1"] = sum((r.get("speedup") or 0) > 1.0 for r in rows)
        summary["room_above_1_not_reached"] = sorted(
            r["task"] for r in priced if r["ceiling"] > ABOVE and (r.get("speedup") or 0) <= 1.0)
    out = {"summary": summary, "tasks": rows}
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        for r in rows:
            print(f"{r['task']:<48} ceiling {r.get('ceiling', float('nan')):7.3f}  "
                  f"reached {r.get('speedup') or float('nan'):7.3f}  {r.get('error', '')}")
        print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
