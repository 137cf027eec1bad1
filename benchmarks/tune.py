"""Autotuning throughput and cost-model speed, printed as JSON.

- `tune_configs_per_min`: an 8-configuration sweep of kernels/matmul.py on tasks/matmul.py
  (sim-tpu-v6e, 2 workers, one frozen suite), each configuration compiled, checked for
  correctness and simulated; configurations completed per minute of wall time, suite
  freezing included.
- `sim_estimate_ms`: parsing one lowered kernel's StableHLO text and estimating it on the
  cost model (median of repeated runs; the lowering itself is done once, beforehand).
- `pricing` (`--pricing`): the autotuner's pricing of every configuration of
  kernels/rmsnorm.py on tasks/rmsnorm.py, one sandboxed worker and runner per configuration
  (`price_config`, each in turn) against one pair for them all (`price_configs`): CPU
  seconds of this process and its children, wall seconds, and whether every price and
  program agrees. The task's baseline is priced once beforehand, so neither pays for it.

- `floor` (`--floor`): the autotuner's pricing of every other configuration of
  kernels/matmul.py on tasks/matmul.py, each time on an empty TPU compile cache: priced whole
  (every configuration compiled for the chip), and with the bar a tuner sweep sets (1% under
  the default's price), where a configuration whose kernels alone miss it is not compiled.
  CPU and wall seconds of each, the programs compiled, the configurations floored, whether
  each floor is at most that configuration's whole price, and whether both pick the same
  configurations to test (`agents.autotuner.worth_testing`).
  `--floor-task` and `--floor-kernel` name another pair (a kernel the search wrote, say).

Usage: python benchmarks/tune.py [--json] [--configs 8] [--workers 2] [--skip-tune] [--pricing]
       [--floor [--floor-task T --floor-kernel K]]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def sim_estimate_ms(repeats: int = 20) -> dict[str, float]:
    import jax

    from tools.inputs.tasks import load_task
    from tools.lowered.compile_check import lower_for_tpu
    from tools.lowered.mosaic import parse_lowered
    from tools.performance.chips import get_chip
    from tools.performance.roofline import estimate_program

    task = load_task(ROOT / "tasks" / "matmul.py")
    args = task.make_inputs(0, 0)
    sys.path.insert(0, str(ROOT / "kernels"))
    import matmul as kernel_module

    text = lower_for_tpu(jax.jit(kernel_module.build()).trace(*args))
    chip = get_chip("v6e")
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        program = parse_lowered(text)
        estimate_program(program, chip)
        times.append(time.perf_counter() - start)
    return {
        "sim_estimate_ms": statistics.median(times) * 1e3,
        "sim_estimate_grid_steps": float(program.kernels[0].grid_steps),
    }


def tune_figure(configs: int, workers: int) -> dict[str, object]:
    from tools.performance.autotune import autotune

    start = time.perf_counter()
    result = autotune(ROOT / "tasks" / "matmul.py", ROOT / "kernels" / "matmul.py",
                      target="sim-tpu-v6e", budget_configs=configs, workers=workers)
    wall = time.perf_counter() - start
    evaluated = result.configs_evaluated
    return {
        "tune_configs_per_min": evaluated / wall * 60.0,
        "tune_wall_s": wall,
        "tune_configs": evaluated,
        "tune_passed": sum(1 for r in result.rows if r.status == "pass"),
        "tune_best_config": result.best_config,
        "tune_best_speedup_simulated": result.best_speedup,
        "tune_workers": workers,
    }


def _cpu_s() -> float:
    import resource

    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def pricing_figure() -> dict[str, object]:
    from tools.api import candidate_configs
    from tools.performance.autotune import price_config, price_configs

    task, kernel = str(ROOT / "tasks" / "rmsnorm.py"), str(ROOT / "kernels" / "rmsnorm.py")
    configs = candidate_configs(kernel)
    price_config(task, kernel, configs[0], "sim-tpu-v6e")  # the baseline, priced once
    figures: dict[str, object] = {"pricing_configs": len(configs)}
    rows = {}
    for name, price in (
            ("one_at_a_time", lambda: [price_config(task, kernel, c, "sim-tpu-v6e")
                                       for c in configs]),
            ("batched", lambda: price_configs(task, kernel, configs, "sim-tpu-v6e"))):
        cpu, wall = _cpu_s(), time.perf_counter()
        rows[name] = price()
        figures[f"pricing_{name}_cpu_s"] = round(_cpu_s() - cpu, 2)
        figures[f"pricing_{name}_wall_s"] = round(time.perf_counter() - wall, 2)
    figures["pricing_agree"] = all(
        (a.program_sha256, a.latency_s) == (b.program_sha256, b.latency_s)
        for a, b in zip(rows["one_at_a_time"], rows["batched"], strict=True))
    figures["pricing_cpu_ratio"] = round(
        figures["pricing_one_at_a_time_cpu_s"] / max(figures["pricing_batched_cpu_s"], 1e-9), 2)
    return figures


def floor_figure(task: str, kernel: str) -> dict[str, object]:
    import tempfile

    from agents.autotuner import bar, worth_testing
    from tools.api import candidate_configs
    from tools.lowered import tpu_compiler
    from tools.performance.autotune import price_config, price_configs

    default, *others = candidate_configs(kernel)
    figures: dict[str, object] = {"floor_task": task, "floor_kernel": kernel,
                                  "floor_configs": len(others)}
    chosen, priced = {}, {}
    with tempfile.TemporaryDirectory() as scratch:
        os.environ[tpu_compiler.CACHE_ENV] = str(Path(scratch) / "default")
        base = price_config(task, kernel, default, "sim-tpu-v6e")  # and the baseline, once
        bar_s = bar(base)
        for name, limit in (("whole", None), ("floored", bar_s)):
            folder = Path(scratch) / name
            os.environ[tpu_compiler.CACHE_ENV] = str(folder)
            tpu_compiler.CACHE = tpu_compiler._Cache()  # nothing compiled before counts
            cpu, wall = _cpu_s(), time.perf_counter()
            rows = price_configs(task, kernel, others, "sim-tpu-v6e", bar_s=limit)
            figures[f"floor_{name}_cpu_s"] = round(_cpu_s() - cpu, 2)
            figures[f"floor_{name}_wall_s"] = round(time.perf_counter() - wall, 2)
            figures[f"floor_{name}_compiled"] = len(list(folder.glob("*.json")))
            chosen[name], priced[name] = worth_testing(base, rows)[0], rows
            if limit is not None:
                figures["floor_not_compiled"] = sum(1 for r in rows if r.floor_s is not None)
    figures["floor_same_chosen"] = chosen["whole"] == chosen["floored"]
    # a floor is never above the configuration's whole price
    figures["floor_sound"] = all(
        f.floor_s <= (w.latency_s or float("inf"))
        for w, f in zip(priced["whole"], priced["floored"], strict=True) if f.floor_s is not None)
    figures["floor_chosen"] = chosen["floored"]
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--configs", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--skip-tune", action="store_true", help="only the cost-model figure")
    parser.add_argument("--pricing", action="store_true",
                        help="also the autotuner's pricing, one at a time against batched")
    parser.add_argument("--floor", action="store_true",
                        help="also the autotuner's pricing with and without its kernels' floor")
    parser.add_argument("--floor-task", default=str(ROOT / "tasks" / "matmul.py"))
    parser.add_argument("--floor-kernel", default=str(ROOT / "kernels" / "matmul.py"))
    opts = parser.parse_args()
    figures: dict[str, object] = {"measured_on": "this machine (figures of the simulator itself)",
                                  "cpus": os.cpu_count(), "python": platform.python_version()}
    figures.update(sim_estimate_ms())
    if not opts.skip_tune:
        figures.update(tune_figure(opts.configs, opts.workers))
    if opts.pricing:
        figures.update(pricing_figure())
    if opts.floor:
        figures.update(floor_figure(opts.floor_task, opts.floor_kernel))
    if opts.json:
        print(json.dumps(figures))
    else:
        for key, value in figures.items():
            print(f"{key}: {value}")


if __name__ == "__main__":
    main()
