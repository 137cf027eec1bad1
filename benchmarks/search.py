"""The search's figures.

    python benchmarks/search.py --json [--part overhead,scaling,policies] [--nodes 40]
        [--tasks tasks/rmsnorm.py,...] [--policies parallel,beam,greedy] [--budget 6]

- `orchestration_overhead_ms_per_node`: the search orchestrator on a real nats-server, with
  every other agent replaced by one that answers at once (suite, baseline, each node's
  trajectory, the winner's verification, the audit). Wall time of a `greedy` search of
  `--nodes` nodes (one decision per evaluated node, the worst case) and of a `parallel`
  one (all nodes from one decision), divided by the node count. Goal: <= 20 ms.
- `executor_scaling`: nodes per minute of a real `parallel` search (offline author,
  `sim-tpu-v6e`, one iteration per node) with 1 and with 2 executor processes
  (`kernelgraph serve executor`) sharing it; everything else runs in this process.
- `policies`: `kernelgraph bench` of the tasks under each policy at the same candidate
  budget (offline author, simulated speedups): tasks correct, floored geometric mean,
  fast_1, candidates used and candidates needed to reach each run's best.
- `climb` (`--part climb [--tasks ...] [--climb-budget 12]`): `kernelgraph bench TASKS
  --policy greedy --budget-candidates 12` (default: every shipped task; pass a subset with
  --tasks, these runs are expensive), then per task, from the log by the projections' one
  definition (`projections.metrics.Efficiency`): the first valid candidate's speedup
  (before), the best (after), best over first, candidates, distinct kernels and kernels
  tested twice; overall: tasks whose best is >= 1.10x their first (goal: half), distinct
  kernels per candidate (goal 1.0), kernels tested twice (goal 0), candidates judged per
  core-minute, wall time, and per task the autotuner's sweeps (wall time, configurations
  priced, priced from their kernels alone and so not compiled, and tested). `--climb-db
  LOG` reads those figures from a bench log kept earlier.
  Per shipped task also its `roofline_ceiling`: the run's baseline over the least time any
  kernel could take in the model (the task's flops, or its reference's dots padded to the
  MXU as no layout avoids, at the bf16 MXU peak, or its input and output bytes at full HBM
  bandwidth, whichever is longer, plus one launch), and `headroom`,
  that ceiling over the first valid candidate: below 1.10 no kernel can climb 1.10x there,
  so `tasks_with_headroom` counts the tasks where a climb is possible at all. The same at the
  MXU peak of the task's own floating inputs (`..._at_operand_precision`: a third of the bf16
  peak for f32 inputs, whose frozen suites refuse bf16 operands at the shipped tolerances) is
  the ceiling of a kernel that keeps the task's precision. `first_written`
  is the first kernel as written (its first passing test, at its default configuration),
  before the autotuner of its own iteration moved it: `best_over_first` starts from the
  tuned first candidate, so a knob the tuner reaches in the first iteration is no climb
  there; `best_over_first_written` shows what the whole loop, tuner included, gained.
- `race` (`--part race [--tasks ...] [--race-budget 12] [--race-repeat 3] [--jobs 2]`): every
  policy (`--race-policies`, default all five) at the same candidate budget, 3 seeds each;
  per policy the mean and spread of the candidates its runs needed to reach the best
  `parallel` found on the same task and seed (goal: one policy needs at most half of
  parallel's). Where parallel never climbed, its best is its first kernel and every policy
  reaches it at once, so the same figures are also given against the race's best on each
  task (the best any run found there; a run that never reached it counts as the budget plus
  one). `--race-db LOG` reads them from a kept bench log (repeat it to read several).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.append(str(ROOT / "benchmarks"))

from instant_agents import INSTANT_AGENTS  # noqa: E402


async def overhead(nodes: int, policy: str) -> dict[str, Any]:
    from kernelgraph.client import KernelRequest, SearchLimits, check_request, submit, wait
    from kernelgraph.runtime import Runtime, RuntimeConfig

    os.environ.setdefault("KG_AUDIT_INTERVAL_S", "0")
    params = {"parallel": {"trajectories": str(nodes), "iterations": "1"},
              "greedy": {"iterations": "1"}}[policy]
    with tempfile.TemporaryDirectory() as tmp:
        config = RuntimeConfig(db_path=Path(tmp) / "log.duckdb", agents=["search"],
                               concurrency={"search": 1})
        async with Runtime(config) as runtime:
            assert runtime.client is not None
            nc = runtime.client.nc
            fakes = [cls(nc, settings=config.settings, concurrency=64) for cls in INSTANT_AGENTS]
            for fake in fakes:
                await fake.start()
            try:
                request = KernelRequest(task=ROOT / "tasks" / "gelu.py", policy=policy,
                                        policy_params=params, iterations=1,
                                        limits=SearchLimits(max_nodes=nodes, concurrency=nodes))
                await asyncio.to_thread(check_request, request)  # JAX's first trace: not the search's
                started = time.perf_counter()
                run = await submit(nc, request)
                result = await wait(nc, run.run_id, timeout=600)
                wall = time.perf_counter() - started
            finally:
                for fake in fakes:
                    await fake.stop()
    assert result.nodes == nodes, (result.nodes, result.reason)
    return {"policy": policy, "nodes": nodes, "wall_s": round(wall, 3),
            "ms_per_node": round(1000 * wall / nodes, 2), "status": result.status}


def executor_scaling(executors: int, trajectories: int, task: Path) -> dict[str, Any]:
    """A real parallel search with executors in `executors` separate processes."""
    from bus.server import EmbeddedNats

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        env = {**os.environ, "KG_WORKSPACE": str(work / "work"),
               "KG_KNOWLEDGE_PATH": str(work / "knowledge")}
        server = EmbeddedNats(work / "nats", token=False)
        server.start()
        procs: list[subprocess.Popen[bytes]] = []
        try:
            kg = [sys.executable, "-m", "kernelgraph"]
            others = ["test_synth", "baseline", "planner", "implementer", "fixer", "autotuner",
                      "profiler", "verifier", "auto", "search", "auditor"]
            agents = [arg for name in others for arg in ("--agent", name)]
            procs.append(subprocess.Popen([*kg, "up", "--nats", server.url, "--db",
                                           str(work / "log.duckdb"), *agents],
                                          env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            for _ in range(executors):
                procs.append(subprocess.Popen([*kg, "serve", "executor", "--nats", server.url],
                                              env=env, stdout=subprocess.DEVNULL,
                                              stderr=subprocess.DEVNULL))
            started = time.perf_counter()
            done = subprocess.run([*kg, "submit", str(task), "--nats", server.url, "--wait", "--json",
                                   "--policy", "parallel", "--param", f"trajectories={trajectories}",
                                   "--iterations", "1", "--tune-budget", "2",
                                   "--concurrency", str(trajectories)],
                                  env=env, capture_output=True, text=True, timeout=3600)
            wall = time.perf_counter() - started
        finally:
            for proc in procs:
                proc.terminate()
            for proc in procs:
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
            server.stop()
    if done.returncode not in (0, 1):
        raise RuntimeError(done.stderr[-2000:])
    summary = json.loads(done.stdout)
    return {"executors": executors, "nodes": summary["nodes"], "wall_s": round(wall, 1),
            "nodes_per_minute": round(60 * summary["nodes"] / wall, 3)}


def policies(tasks: list[str], names: list[str], budget: int, iterations: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "KG_WORKSPACE": str(Path(tmp) / "work"),
               "KG_KNOWLEDGE_PATH": str(Path(tmp) / "knowledge")}
        done = subprocess.run([sys.executable, "-m", "kernelgraph", "bench", *tasks,
                               "--policy", ",".join(names), "--budget-candidates", str(budget),
                               "--iterations", str(iterations), "--tune-budget", "2", "--db",
                               str(Path(tmp) / "bench.duckdb"), "--json", "--quiet"],
                              env=env, capture_output=True, text=True, timeout=6 * 3600)
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-3000:])
    return json.loads(done.stdout)


def _bench_log(args: list[str], keep: Path | None,
               read: Callable[[Path, float], dict[str, Any]]) -> dict[str, Any]:
    """`kernelgraph bench ARGS` into a log (kept at `keep` when given, for `kernelgraph replay`
    and `report`), read back by `read(log, wall seconds)`."""
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "KG_WORKSPACE": str(Path(tmp) / "work"),
               "KG_KNOWLEDGE_PATH": str(Path(tmp) / "knowledge")}
        db = keep or Path(tmp) / "bench.duckdb"
        started = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "kernelgraph", "bench", *args, "--db",
                               str(db), "--json", "--quiet"],
                              env=env, capture_output=True, text=True, timeout=12 * 3600)
        wall = time.perf_counter() - started
        if done.returncode not in (0, 1) or not db.exists():
            raise RuntimeError(done.stderr[-3000:])
        return read(db, wall)


def climb(tasks: list[str], budget: int, jobs: int = 1, keep: Path | None = None) -> dict[str, Any]:
    """A greedy bench at `budget` candidates per task, read back per task from its log."""
    command = (f"kernelgraph bench {' '.join(Path(t).name for t in tasks)} --policy greedy "
               f"--budget-candidates {budget}")
    return _bench_log([*tasks, "--policy", "greedy", "--budget-candidates", str(budget),
                       "--jobs", str(jobs)], keep, lambda db, wall: climb_figures(db, wall, command))


def climb_figures(db: Path, wall: float | None, command: str) -> dict[str, Any]:
    """The climb's figures from a bench log (`--climb-db` reads one kept earlier; its wall
    time is then the span of its events)."""
    from eventstore.events import BaselineMeasured, RunRequested, TestsRun, TuningSwept
    from eventstore.log import EventLog
    from projections.metrics import CLIMBED, Metrics

    per_task: dict[str, Any] = {}
    judged = 0
    first_ts, last_ts = float("inf"), 0.0
    with EventLog(db, read_only=True) as log:
        for run in log.runs():
            events = list(log.events(run_id=run.run_id))
            if events:
                first_ts, last_ts = min(first_ts, events[0].ts), max(last_ts, events[-1].ts)
            requested = next((e for e in events if isinstance(e, RunRequested)), None)
            stats = Metrics(run.run_id).apply_all(events).state.runs.get(run.run_id)
            if requested is None or stats is None:
                continue
            eff = stats.efficiency
            judged += eff.judged
            sweeps = [e for e in events if isinstance(e, TuningSwept)]
            ratio = eff.best_over_first
            baseline = next((e for e in events if isinstance(e, BaselineMeasured)), None)
            ceiling, kept = (roofline_ceilings(requested.task_name, baseline.latency_s,
                                               baseline.target)
                             if baseline is not None and baseline.measured_on == "simulated"
                             else (None, None))
            written = next((e.speedup for e in events if isinstance(e, TestsRun)
                            and e.passed and e.speedup is not None), None)
            per_task[requested.task_name] = {
                "before": eff.first_valid, "after": eff.best_valid,
                "verified": stats.final_speedup if stats.finished else None,
                "best_over_first": round(ratio, 4) if ratio is not None else None,
                "climbed": ratio is not None and ratio >= CLIMBED * (1 - 1e-9),
                "first_written": written,
                "best_over_first_written": (round(eff.best_valid / written, 4)
                                            if written and eff.best_valid else None),
                "roofline_ceiling": round(ceiling, 3) if ceiling else None,
                "headroom": round(ceiling / eff.first_valid, 3) if ceiling and eff.first_valid else None,
                "roofline_ceiling_at_operand_precision": round(kept, 3) if kept else None,
                "headroom_at_operand_precision": (round(kept / eff.first_valid, 3)
                                                  if kept and eff.first_valid else None),
                **{k: eff.figures()[k] for k in ("candidates", "judged", "distinct_kernels",
                                                  "tested_twice", "candidates_to_best")},
                "autotune": {"sweeps": len(sweeps),
                             "wall_s": round(sum(e.wall_s for e in sweeps), 1),
                             "configs_priced": sum(e.configs_priced for e in sweeps),
                             "configs_not_compiled": sum(e.configs_floored for e in sweeps),
                             "configs_tested": sum(e.configs_tried for e in sweeps)}}
    if wall is None:
        wall = max(last_ts - first_ts, 0.0)
    candidates = sum(t["candidates"] for t in per_task.values())
    distinct = sum(t["distinct_kernels"] for t in per_task.values())
    cores = os.cpu_count() or 1
    return {
        "command": command,
        "tasks": len(per_task),
        "tasks_climbed": sum(1 for t in per_task.values() if t["climbed"]),
        "tasks_with_headroom": sum(1 for t in per_task.values()
                                   if (t["headroom"] or 0) >= CLIMBED),
        "tasks_with_headroom_at_operand_precision": sum(
            1 for t in per_task.values() if (t["headroom_at_operand_precision"] or 0) >= CLIMBED),
        "climbed_over_written": sum(1 for t in per_task.values()
                                    if (t["best_over_first_written"] or 0) >= CLIMBED),
        "climbed_with_headroom": sum(1 for t in per_task.values()
                                     if t["climbed"] and (t["headroom"] or 0) >= CLIMBED),
        "distinct_per_candidate": round(distinct / candidates, 4) if candidates else None,
        "tested_twice": sum(t["tested_twice"] for t in per_task.values()),
        "candidates": candidates, "judged": judged,
        "judged_per_core_minute": round(judged / (wall * cores / 60), 4) if wall else None,
        "cores": cores, "wall_s": round(wall, 1), "per_task": per_task,
        "label": "simulated speedups (sim-tpu-v6e cost model), offline author",
    }


def roofline_ceilings(task_name: str, baseline_s: float,
                      target: str) -> tuple[float | None, float | None]:
    """The run's baseline over the model's least time for the task's work, for a shipped task
    (None for another: its file is not at hand here): with the flops at the bf16 MXU peak,
    and at the peak for the task's own floating inputs (an f32 task's suite usually refuses
    bf16 operands, and then a third of the bf16 peak is its ceiling)."""
    import jax.numpy as jnp

    from tools.api import chip_for_target
    from tools.inputs.tasks import load_task
    from tools.performance.baseline import task_dots, task_work
    from tools.performance.chips import get_chip
    from tools.performance.floors import model_floor_s
    from tools.performance.roofline import KERNEL_LAUNCH_S

    path = ROOT / "tasks" / f"{task_name}.py"
    if not path.exists():
        return None, None
    task = load_task(path)
    work, dots = task_work(task), task_dots(task)
    chip = get_chip(chip_for_target(target))
    floor = model_floor_s(work.flops, float(work.min_bytes), chip, dots) + KERNEL_LAUNCH_S
    floats = [str(a.dtype) for a in task.input_specs(0) if jnp.issubdtype(a.dtype, jnp.floating)]
    peak = min((chip.matmul_peak(d) for d in floats), default=chip.peak_bf16_flops)
    kept = model_floor_s(work.flops, float(work.min_bytes), chip, dots, peak) + KERNEL_LAUNCH_S
    return baseline_s / floor, baseline_s / kept


RACE_POLICIES = "parallel,beam,greedy,adaptive,evolutionary"


def race(tasks: list[str], policies_: str, budget: int, repeat: int, jobs: int,
         keep: Path | None = None) -> dict[str, Any]:
    """Every policy at the same candidate budget, `repeat` seeds each, on the same tasks."""
    args = [*tasks, "--policy", policies_, "--budget-candidates", str(budget), "--repeat",
            str(repeat), "--jobs", str(jobs)]
    command = " ".join(["kernelgraph", "bench", *(Path(a).name if "/" in a else a for a in args)])
    return _bench_log(args, keep, lambda db, wall: {**race_figures(db, budget=budget),
                                                    "wall_s": round(wall, 1),
                                                    "command": command})


def race_figures(*dbs: Path, budget: int | None = None) -> dict[str, Any]:
    """Per policy: how many candidates (1-based, in log order, every finished iteration one,
    as `projections.metrics.Efficiency` counts them) each run needed to reach the best that
    `parallel` found on the same task with the same seed; mean and spread over the runs that
    reached it, and how many did. Then the same against the race's best on each task (the
    best any run of any policy found there), where a run that never reached it counts as
    `budget + 1`: parallel's best is its first kernel wherever parallel did not climb, and
    there every policy reaches it at candidate 1. Several logs are read as one race."""
    import statistics

    from eventstore.events import IterationFinished, RunFinished, RunRequested
    from eventstore.log import EventLog

    trails: dict[tuple[str, str, int], list[float | None]] = {}
    for db in dbs:
        with EventLog(db, read_only=True) as log:
            for run in log.runs():
                events = list(log.events(run_id=run.run_id))
                requested = next((e for e in events if isinstance(e, RunRequested)), None)
                if requested is None or not any(isinstance(e, RunFinished) for e in events):
                    continue  # a run stopped before its end has no figure to give
                trails[(requested.task_name, requested.policy, requested.seed)] = [
                    e.speedup if e.valid else None for e in events
                    if isinstance(e, IterationFinished)]
    bests = {key: max(found) for key, trail in sorted(trails.items())
             if (found := [x for x in trail if x is not None])}
    mark = {(task, seed): b for (task, policy, seed), b in bests.items() if policy == "parallel"}
    best: dict[str, list[float]] = {}
    for (_task, policy, _seed), b in bests.items():
        best.setdefault(policy, []).append(b)
    needed: dict[str, list[int | None]] = {}
    for (task, policy, seed), trail in sorted(trails.items()):
        goal = mark.get((task, seed))
        if goal is None:
            continue
        at = _first_reaching(trail, goal)
        needed.setdefault(policy, []).append(at)
    out: dict[str, Any] = {}
    for policy, ats in needed.items():
        reached = [a for a in ats if a is not None]
        out[policy] = {"runs": len(ats), "reached": len(reached),
                       "mean_candidates": round(statistics.mean(reached), 2) if reached else None,
                       "stdev_candidates": (round(statistics.stdev(reached), 2)
                                            if len(reached) > 1 else None),
                       "per_run": ats,
                       "best_speedup_mean": (round(statistics.mean(best[policy]), 3)
                                             if best.get(policy) else None),
                       "best_speedup_per_run": [round(b, 3) for b in best.get(policy, [])]}
    base = out.get("parallel", {}).get("mean_candidates")
    halves = [p for p, f in out.items() if p != "parallel" and base and f["mean_candidates"]
              and f["reached"] == f["runs"] and f["mean_candidates"] <= base / 2]
    return {"to_reach_parallels_best": out, "policies_needing_at_most_half_of_parallel": halves,
            "parallel_never_climbed": sorted({task for (task, seed), b in mark.items()
                                              if _first_valid(trails[(task, "parallel", seed)]) >= b}),
            **_to_reach_the_race_best(trails, bests, budget),
            "label": "simulated speedups (sim-tpu-v6e cost model), offline author"}


def _first_reaching(trail: list[float | None], goal: float) -> int | None:
    """The 1-based candidate whose speedup first reaches ``goal``; None: none did."""
    return next((i for i, x in enumerate(trail, 1) if x is not None and x >= goal * (1 - 1e-9)),
                None)


def _first_valid(trail: list[float | None]) -> float:
    return next((x for x in trail if x is not None), 0.0)


def _to_reach_the_race_best(trails: dict[tuple[str, str, int], list[float | None]],
                            bests: dict[tuple[str, str, int], float],
                            budget: int | None) -> dict[str, Any]:
    """Candidates each run needed to reach its task's best over the whole race; never: the
    budget plus one (censored), so a policy that stays at its first kernel is not counted
    as fast where the others climbed."""
    import statistics

    cap = (budget or max((len(t) for t in trails.values()), default=0)) + 1
    goal: dict[str, float] = {}
    for (task, _policy, _seed), b in bests.items():
        goal[task] = max(goal.get(task, 0.0), b)
    per: dict[str, dict[str, Any]] = {}
    for (task, policy, seed), trail in sorted(trails.items()):
        at = _first_reaching(trail, goal[task]) if task in goal else None
        row = per.setdefault(policy, {"runs": 0, "reached": 0, "per_run": []})
        row["runs"] += 1
        row["reached"] += at is not None
        row["per_run"].append({"task": task, "seed": seed, "at": at})
    for row in per.values():
        ats = [r["at"] or cap for r in row["per_run"]]
        row["mean_candidates_censored"] = round(statistics.mean(ats), 2)
        row["stdev_candidates_censored"] = round(statistics.stdev(ats), 2) if len(ats) > 1 else None
    base = per.get("parallel", {}).get("mean_candidates_censored")
    halves = [p for p, row in per.items() if p != "parallel" and base
              and row["mean_candidates_censored"] <= base / 2]
    return {"race_best_per_task": {t: round(b, 3) for t, b in sorted(goal.items())},
            "to_reach_the_race_best": per, "never_reached_counts_as": cap,
            "policies_needing_at_most_half_of_parallel_to_the_race_best": halves}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--part", default="overhead,scaling,policies")
    parser.add_argument("--nodes", type=int, default=40)
    parser.add_argument("--scaling-task", default=str(ROOT / "tests" / "evaltasks" / "rmsnorm_small.py"))
    parser.add_argument("--trajectories", type=int, default=4)
    parser.add_argument("--tasks", default="tasks/rmsnorm.py,tasks/softmax.py,tasks/matmul.py,tasks/attention.py")
    parser.add_argument("--policies", default="parallel,beam,greedy,adaptive")
    parser.add_argument("--budget", type=int, default=6)
    parser.add_argument("--iterations", type=int, default=1, help="iterations per node")
    parser.add_argument("--race-policies", default=RACE_POLICIES,
                        help="--part race: the policies compared")
    parser.add_argument("--race-budget", type=int, default=12, help="--part race: candidates per run")
    parser.add_argument("--race-repeat", type=int, default=3, help="--part race: seeds per policy")
    parser.add_argument("--race-db", type=Path, action="append", default=None,
                        help="--part race: read the figures from this kept bench log, run "
                             "nothing (repeat it to read several logs as one race)")
    parser.add_argument("--climb-db", type=Path, default=None,
                        help="--part climb: read the figures from this kept bench log, run nothing")
    parser.add_argument("--climb-budget", type=int, default=12,
                        help="candidates per task for --part climb")
    parser.add_argument("--jobs", type=int, default=1, help="runs at once for --part climb")
    parser.add_argument("--keep-db", type=Path, default=None,
                        help="--part climb: keep the bench's log here (default: a temporary one)")
    args = parser.parse_args()
    args.tasks_given = "--tasks" in sys.argv or any(a.startswith("--tasks=") for a in sys.argv)
    parts = set(args.part.split(","))
    out: dict[str, Any] = {"label": "search orchestration on this machine; speedups are simulated"}
    if "overhead" in parts:
        runs = [asyncio.run(overhead(args.nodes, p)) for p in ("greedy", "parallel")]
        out["orchestration_overhead"] = runs
        out["orchestration_overhead_ms_per_node"] = max(r["ms_per_node"] for r in runs)
    if "scaling" in parts:
        task = Path(args.scaling_task)
        out["executor_scaling"] = []
        for n in (1, 2):
            out["executor_scaling"].append(executor_scaling(n, args.trajectories, task))
            print(json.dumps(out["executor_scaling"][-1]), file=sys.stderr, flush=True)
    tasks = [str(ROOT / t) if not Path(t).is_absolute() else t for t in args.tasks.split(",")]
    if "policies" in parts:
        out["policies"] = policies(tasks, args.policies.split(","), args.budget, args.iterations)
    if "climb" in parts:
        chosen = tasks if args.tasks_given else [str(ROOT / "tasks")]
        out["climb"] = (climb_figures(args.climb_db, None, f"read from {args.climb_db}")
                        if args.climb_db else climb(chosen, args.climb_budget, args.jobs,
                                                    args.keep_db))
    if "race" in parts:
        chosen = tasks if args.tasks_given else [str(ROOT / "tasks")]
        out["race"] = (race_figures(*args.race_db, budget=args.race_budget) if args.race_db else
                       race(chosen, args.race_policies, args.race_budget, args.race_repeat,
                            args.jobs, args.keep_db))
    print(json.dumps(out, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
