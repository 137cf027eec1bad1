"""A suite run: every task under every policy at one candidate budget, with the paper's metrics.

`kernelgraph bench` and `benchmarks/search.py` use this. Runs share one deployment (the
embedded runtime or `--nats`) and one log; the figures are folded from that log by the
same projections `replay` uses, so a bench can be re-analysed from its log alone.
"""

from __future__ import annotations

import asyncio
import math
import textwrap
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from nats.aio.client import Client as NATS

from eventstore.events import (
    BaselineMeasured,
    Event,
    RunFinished,
    RunRequested,
)
from kernelgraph.client import KernelRequest, RequestError, check_request, submit, wait
from projections.metrics import FAST_P, Metrics, efficiency_of, fast_p, geomean_floored

VACUOUS_MARK = "VacuousSuite: "  # how the test synthesiser names a vacuous suite


@dataclass(frozen=True)
class BenchTask:
    path: Path
    name: str


@dataclass
class Skipped:
    path: Path
    reason: str


def find_tasks(args: Iterable[Path]) -> tuple[list[BenchTask], list[Skipped]]:
    """Task files from files and directories: a directory's `*.py` task files, or its
    sub-directories' `baseline.py` (a JAXBench `benchmark/` folder). Files that do not
    look like tasks are skipped with the reason."""
    found: list[Path] = []
    skipped: list[Skipped] = []
    for arg in args:
        if arg.is_file():
            found.append(arg)
        elif arg.is_dir() and (arg / "baseline.py").is_file():
            found.append(arg / "baseline.py")  # one JAXBench task folder (its optimized.py is no task)
        elif arg.is_dir():
            nested = sorted(arg.glob("*/baseline.py"))
            flat = sorted(p for p in arg.glob("*.py") if not p.name.startswith("_"))
            if not nested and not flat:
                skipped.append(Skipped(arg, "no task files (*.py or */baseline.py) in it"))
            found += nested or flat
        else:
            skipped.append(Skipped(arg, "no such file or directory"))
    tasks = []
    for path in found:
        text = path.read_text(errors="replace")
        if "def reference" not in text and "def workload" not in text and "baseline" not in path.name:
            skipped.append(Skipped(path, "not a task file (no reference function)"))
            continue
        name = path.parent.name if path.name == "baseline.py" else path.stem
        tasks.append(BenchTask(path=path, name=name))
    return tasks, skipped


@dataclass
class BenchPlan:
    tasks: list[BenchTask]
    policies: list[str]
    request: KernelRequest
    """The template every run's request is made from (task, policy and seed replaced)."""
    repeat: int = 1
    jobs: int = 1
    scale: list[str] | None = None
    """JAXBench tasks at these `--scale` factors (a task that cannot take them is skipped)."""


@dataclass
class RunOutcome:
    task: str
    policy: str
    seed: int
    run_id: str | None
    status: str
    reason: str = ""
    speedup: float | None = None
    verified: bool = False
    wall_s: float = 0.0


@dataclass
class BenchResult:
    outcomes: list[RunOutcome] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)


def agent_concurrency(plan: BenchPlan) -> dict[str, int]:
    """Commands each heavy agent of the bench's own runtime takes at once. On a simulated
    target a run's speedup comes from the cost model, so its verification may overlap
    another's and one verifier per job keeps `jobs` runs going (with one, a run's final
    check waited for another's: 300 s of JAXBench 47k's 355 s behind 7p's). A real device's
    timings must not overlap, so there the winners are verified one at a time."""
    simulated = plan.request.target.startswith("sim-")
    jobs = max(1, plan.jobs)
    return {"executor": max(2, jobs) if simulated else 2, "verifier": jobs if simulated else 1}


def requests_of(plan: BenchPlan) -> list[tuple[BenchTask, str, int, KernelRequest]]:
    out = []
    for task in plan.tasks:
        for policy in plan.policies:
            for r in range(plan.repeat):
                seed = plan.request.seed + r
                out.append((task, policy, seed, replace(plan.request, task=task.path,
                                                        policy=policy, seed=seed)))
    return out


def check_tasks(plan: BenchPlan) -> list[Skipped]:
    """Drop the tasks that cannot run (one line each), keeping the rest in the plan, the
    largest tuning point (input bytes) first, so a bench of many runs at `jobs` at a time
    does not end on its largest run started last. Bytes are a rough proxy for a run's length:
    a small task with much interpret-mode work (many grid steps or DMAs) can take longer.

    With `jobs` above one the tasks are checked in that many processes of their own: the
    checks (scaling, tracing, the reference at derived shapes) hold one core each, and the
    runs start only once every task is checked. The processes take the tasks longest source
    first (:func:`check_order`), so the last check to start is a short one."""
    workers = min(max(1, plan.jobs), len(plan.tasks))
    if workers > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        from tools import compilecache

        context = multiprocessing.get_context("spawn")  # jax in this process is not fork-safe
        order = check_order(plan.tasks)
        # the checks run no candidate code: they share the command's compile cache
        with ProcessPoolExecutor(workers, mp_context=context,
                                 initializer=compilecache.enable) as pool:
            done = list(pool.map(_check_one, [plan] * len(order), [plan.tasks[i] for i in order]))
        checked = [result for _, result in sorted(zip(order, done, strict=True),
                                                  key=lambda pair: pair[0])]
    else:
        checked = [_check_one(plan, task) for task in plan.tasks]
    skipped = [c for c in checked if isinstance(c, Skipped)]
    kept = [c for c in checked if not isinstance(c, Skipped)]
    plan.tasks = [task for _, task in sorted(kept, key=lambda sized: -sized[0])]
    return skipped


def check_order(tasks: Sequence[BenchTask]) -> list[int]:
    """Indices of ``tasks``, the longest task file first. A check's length is not known
    before it runs; a longer reference traces and scales longer, as a rule (JAXBench 7p, the
    longest file, takes 40 of the 100 s the 50 checks take in one process: taken fourth
    from last in name order, it left the other process idle for most of that)."""
    def size(path: Path) -> int:
        try:
            return path.stat().st_size
        except OSError:  # its check says why it cannot run
            return 0

    return sorted(range(len(tasks)), key=lambda i: (-size(tasks[i].path), i))


def _check_one(plan: BenchPlan, task: BenchTask) -> tuple[int, BenchTask] | Skipped:
    """One task of `check_tasks`: its tuning point's input bytes and the task as it runs (its
    scaled file), or why it cannot run."""
    from tools import api

    try:
        if plan.scale:
            task = BenchTask(path=api.scaled_task(task.path, plan.scale), name=task.name)
        checked = check_request(replace(plan.request, task=task.path, policy=plan.policies[0]))
    except RequestError as exc:
        return Skipped(task.path, first_line(exc))
    except Exception as exc:  # a task whose module fails to load or validate
        return Skipped(task.path, f"{type(exc).__name__}: {first_line(exc)}"
                       if str(exc) else type(exc).__name__)
    return checked.tuning_bytes or 0, task


def first_line(exc: BaseException, width: int = 1000) -> str:
    """A refusal's first line for a person: whole up to `width`, else shortened at a word (the
    end of a refusal often says what to do, such as the --scale that fits)."""
    text = str(exc).strip().splitlines()
    return textwrap.shorten(text[0], width, placeholder=" ...") if text else ""


async def run_bench(nc: NATS, plan: BenchPlan, *,
                    on_done: Callable[[RunOutcome, int, int], None] | None = None) -> list[RunOutcome]:
    """Submit every (task, policy, seed) run, at most `plan.jobs` at a time."""
    todo = requests_of(plan)
    gate = asyncio.Semaphore(max(1, plan.jobs))
    outcomes: list[RunOutcome] = []

    async def one(task: BenchTask, policy: str, seed: int, request: KernelRequest) -> None:
        async with gate:
            started = time.monotonic()
            try:
                run = await submit(nc, request)
                result = await wait(nc, run.run_id)
            except RequestError as exc:
                outcome = RunOutcome(task.name, policy, seed, None, "refused", first_line(exc))
            else:
                outcome = RunOutcome(task.name, policy, seed, run.run_id, result.status,
                                     result.reason[:2000], result.speedup, result.verified,
                                     time.monotonic() - started)
            outcomes.append(outcome)
            if on_done is not None:
                on_done(outcome, len(outcomes), len(todo))

    await asyncio.gather(*(one(*item) for item in todo))
    return outcomes


def candidates_to_best(events: Sequence[Event]) -> int | None:
    """How many candidates (iterations, in log order) the run wrote until its first one as
    fast as its best; None without a valid one (`projections.metrics.Efficiency`)."""
    runs = Metrics().apply_all(events).state.runs
    return next((r.efficiency.best_at for r in runs.values()), None)


def summarise(events_by_run: dict[str, list[Event]]) -> dict[str, Any]:
    """Per policy (and simulated/real label): the paper's figures plus candidates, wall time
    and tokens, all folded from the runs' events."""
    per_policy: dict[str, dict[str, Any]] = {}
    for run_id, events in events_by_run.items():
        requested = next((e for e in events if isinstance(e, RunRequested)), None)
        if requested is None:
            continue
        metrics = Metrics(run_id).apply_all(events)
        stats = metrics.state.runs.get(run_id)
        finished = next((e for e in events if isinstance(e, RunFinished)), None)
        entry = per_policy.setdefault(requested.policy, {
            "runs": 0, "tasks": set(), "kernels": 0, "compiled": 0, "correct_kernels": 0,
            "tested": 0,
            "results": [], "labels": set(), "candidates": 0, "wall_s": 0.0, "tokens": 0,
            "efficiency": [], "baselines": set()})
        entry["runs"] += 1
        entry["baselines"] |= {e.priced_from or e.measured_on for e in events
                               if isinstance(e, BaselineMeasured)}
        entry["tasks"].add(requested.task_name)
        for counts in metrics.state.kernels.values():  # the metrics' own kernels (no_gain: none)
            entry["kernels"] += counts.kernels
            entry["compiled"] += counts.compiled
            entry["correct_kernels"] += counts.correct
            entry["tested"] += counts.tested  # a kernel priced out was never tested
        entry["candidates"] += stats.efficiency.candidates if stats is not None else 0
        result = stats.result if stats is not None else None
        correct = bool(stats is not None and stats.counted and result is not None)
        entry["results"].append(result if correct else None)
        if stats is not None and stats.label:
            entry["labels"].add(stats.label)
        if finished is not None:
            entry["wall_s"] += max(0.0, finished.ts - requested.ts)
        entry["tokens"] += metrics.summary().get("tokens", {}).get("total", 0) or 0
        if stats is not None:
            entry["efficiency"].append(stats.efficiency)
    out: dict[str, Any] = {}
    for policy, e in sorted(per_policy.items()):
        results = e["results"]
        efficiency = {k: round(v, 4) if isinstance(v, float) else v
                      for k, v in efficiency_of(e["efficiency"]).items()}
        correct = [r for r in results if r is not None]
        out[policy] = {
            "runs": e["runs"],
            "tasks": len(e["tasks"]),
            "measured_on": sorted(e["labels"]) or ["simulated"],
            # which program the simulated baselines were priced from (or "real")
            "baseline_priced_from": sorted(e["baselines"]),
            "compile_rate": _ratio(e["compiled"], e["kernels"]),
            "correctness_rate": _ratio(e["correct_kernels"], e["tested"]),
            "runs_correct": len(correct),
            "geomean_speedup_floored": round(geomean_floored(results), 4),
            "best_speedup": round(max(correct), 4) if correct else None,
            "fast_p": {f"{p:g}": round(fast_p(results, p), 4) for p in FAST_P},
            "candidates": e["candidates"],
            "mean_candidates_to_best": efficiency["mean_candidates_to_best"],
            "efficiency": efficiency,
            "wall_s": round(e["wall_s"], 1),
            "tokens": e["tokens"],
        }
    return out


def _ratio(num: int, den: int) -> float | None:
    return round(num / den, 4) if den else None


def geomean(values: Sequence[float]) -> float | None:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def _vacuous(outcome: RunOutcome, events: Sequence[Event]) -> bool:
    """Whether the run ended on a vacuous suite: read from its log, where the run's reason
    keeps the test synthesiser's error name (the outcome's reason is in the user's terms,
    which drop it), or from the reason where there is no log."""
    return VACUOUS_MARK in outcome.reason or any(
        VACUOUS_MARK in getattr(e, "reason", "") for e in events if e.type_name == "RunFinished")


def suite_summary(found: int, outcomes: Sequence[RunOutcome],
                  events_by_run: dict[str, list[Event]]) -> dict[str, Any]:
    """Tasks found, loaded (passed the request check), that froze a suite in some run, and
    that got a verified kernel in some run: the line a suite run ends with. Tasks whose
    reference cannot tell right from wrong (a constant output) are named apart: the task is
    at fault, not the search."""
    froze = {o.task for o in outcomes if o.run_id and any(
        e.type_name == "TestSuiteFrozen" for e in events_by_run.get(o.run_id, ()))}
    vacuous = sorted({o.task for o in outcomes
                      if _vacuous(o, events_by_run.get(o.run_id or "", ()))} - froze)
    return {"found": found, "loaded": len({o.task for o in outcomes}), "froze_suite": len(froze),
            "verified": len({o.task for o in outcomes if o.verified}), "vacuous": vacuous}
