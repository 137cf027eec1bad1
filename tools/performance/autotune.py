"""Sweep a candidate's TUNABLES: every configuration compiled and checked before it is timed.

The grid is the cartesian product of `TUNABLES` (read statically from the file, the default
configuration first). The test suite is frozen once for the whole sweep and handed to every
evaluation, so all configurations face the same cases. Each configuration goes through the
full evaluator (`tools.verification.verify.evaluate`: sandboxed build, TPU lowering and compile check,
correctness under interpret mode, then the target's timing) in a pool of worker processes.
A budget caps the number of configurations and/or the seconds spent; configurations not
started within it are listed as skipped. Before any is evaluated, every planned configuration
is lowered at the tuning point (`program_sha256`: the sandboxed lowering `estimate` uses, no
run) and one whose lowered program equals an earlier one's (a block the kernel clamps to the
same size) is skipped, saying which it repeats: the same program has the same price. The best configuration is the fastest one that
passed; figures from simulated and real targets are never mixed (one target per sweep).
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from tools.performance.executors import DEFAULT_TARGET, get_executor


class TuneRow(msgspec.Struct, frozen=True):
    config: dict[str, Any]
    status: str  # "pass" | "fail" | "error" | "skipped"
    speedup: float | None = None
    latency_s: float | None = None
    baseline_s: float | None = None
    reasons: list[str] = msgspec.field(default_factory=list)
    wall_s: float = 0.0
    receipt_sha256: str | None = None


class TuneResult(msgspec.Struct, frozen=True):
    task: str
    candidate: str
    target: str
    measured_on: str
    suite_sha256: str
    rows: list[TuneRow]
    best_config: dict[str, Any] | None
    best_speedup: float | None
    configs_total: int
    configs_evaluated: int
    budget_exhausted: bool
    wall_s: float
    workers: int
    configs_skipped: int = 0
    """Configurations not evaluated because they lower to a program already planned."""


SAME_PROGRAM = "lowers to the same program as"


def program_sha256(task_path: str, candidate_path: str, config: dict[str, Any],
                   target: str) -> str | None:
    """The sha256 of the candidate's lowered program at the tuning point under `config`;
    None when it does not lower (its evaluation will say why). Runs the sandboxed children."""
    return program_sha256s(task_path, candidate_path, [config], target)[0]


def program_sha256s(task_path: str, candidate_path: str, configs: list[dict[str, Any]],
                    target: str) -> list[str | None]:
    """:func:`program_sha256` for several configurations, through one sandboxed worker and
    one runner (`estimate.lower_configs`); None where one did not lower (its evaluation
    reports why)."""
    import hashlib

    from tools.performance.estimate import load_task_quickly, lower_configs
    from tools.performance.executors import chip_for_target

    lowered = lower_configs(load_task_quickly(task_path), candidate_path, configs,
                            chip_for_target(target))
    return [hashlib.sha256(text.encode()).hexdigest() if isinstance(text, str) else None
            for _, text in lowered]


class PricedConfig(msgspec.Struct, frozen=True):
    """One configuration priced from its lowering alone (unverified, simulated)."""

    config: dict[str, Any]
    program_sha256: str | None  # None: it did not lower or failed the compile check
    latency_s: float | None = None
    speedup: float | None = None
    problem: str = ""
    # Not priced whole: its kernels alone were priced at this, at or above the bar it had to
    # beat (`price_configs`' bar_s), so it was not compiled for the chip.
    floor_s: float | None = None


def price_config(task_path: str, candidate_path: str, config: dict[str, Any],
                 target: str) -> PricedConfig:
    """The configuration's lowered program and its simulated price at the tuning point, from
    one sandboxed lowering (`estimate`, no run): on simulated targets the tuner tests only the
    configurations priced best, as `price_problem` keeps a search from testing a kernel that
    cannot beat its parent."""
    from kernelgraph.errors import KernelgraphError
    from tools.performance.estimate import estimate

    try:
        found = estimate(task_path, candidate_path, target=target, config=dict(config),
                         beside_xla_tpu=False)
    except (KernelgraphError, ValueError) as exc:  # its evaluation would say the same
        return PricedConfig(dict(config), None, problem=str(exc).splitlines()[0][:300])
    return PricedConfig(dict(config), found.program_sha256, found.latency_s, found.speedup)


def price_configs(task_path: str, candidate_path: str, configs: list[dict[str, Any]],
                  target: str, *, bar_s: float | None = None) -> list[PricedConfig]:
    """:func:`price_config` for several configurations of one candidate, from one sandboxed
    worker, one runner and one compile child (`estimate_many`): the same prices, one
    interpreter start-up each instead of one per configuration. ``bar_s``: the price to beat;
    a configuration whose kernels alone cost at least that gets only its `floor_s`, and is
    not compiled."""
    from tools.performance.estimate import KernelsFloor, estimate_many

    rows = []
    for config, found in zip(configs, estimate_many(task_path, candidate_path, configs,
                                                    target=target, bar_s=bar_s), strict=True):
        if isinstance(found, KernelsFloor):
            rows.append(PricedConfig(dict(config), found.program_sha256,
                                     floor_s=found.kernels_s))
        elif isinstance(found, Exception):
            rows.append(PricedConfig(dict(config), None,
                                     problem=str(found).splitlines()[0][:300]))
        else:
            rows.append(PricedConfig(dict(config), found.program_sha256, found.latency_s,
                                     found.speedup))
    return rows


def distinct_programs(keys: list[str | None]) -> dict[int, int]:
    """{index: the earlier index whose program it repeats} for every repeated program."""
    first: dict[str, int] = {}
    repeats: dict[int, int] = {}
    for index, key in enumerate(keys):
        if key is None:
            continue
        if key in first:
            repeats[index] = first[key]
        else:
            first[key] = index
    return repeats


def _evaluate_config(
    task_path: str, candidate_path: str, config: dict[str, Any], target: str, suite_bytes: bytes
) -> TuneRow:
    """Runs in a worker process: one full evaluation of one configuration."""
    from tools.correctness.testsuite import FrozenSuite
    from tools.verification.verify import evaluate

    started = time.monotonic()
    suite = FrozenSuite.from_bytes(suite_bytes)
    try:
        verdict = evaluate(task_path, candidate_path, config=config, target=target, suite=suite)
    except Exception as exc:  # the evaluator itself failed: report, keep sweeping
        return TuneRow(config, "error", reasons=[f"{type(exc).__name__}: {exc}"],
                       wall_s=time.monotonic() - started)
    measurement = getattr(verdict, "measurement", None)
    receipt = getattr(verdict, "receipt", None)
    receipt_sha = getattr(verdict, "receipt_sha256", None) or (
        receipt.get("sha256") if isinstance(receipt, dict) else getattr(receipt, "sha256", None)
    )
    return TuneRow(
        config=config,
        status="pass" if verdict.verdict == "pass" else "fail",
        speedup=getattr(measurement, "speedup", None),
        latency_s=getattr(measurement, "latency_s", None),
        baseline_s=getattr(measurement, "baseline_s", None),
        reasons=list(getattr(verdict, "reasons", []) or []),
        wall_s=time.monotonic() - started,
        receipt_sha256=receipt_sha,
    )


def autotune(
    task_path: str | Path,
    candidate_path: str | Path,
    *,
    target: str = DEFAULT_TARGET,
    budget_configs: int | None = None,
    budget_s: float | None = None,
    workers: int = 2,
    suite: Any = None,
    on_row: Callable[[TuneRow, int, int], None] | None = None,
) -> TuneResult:
    """Sweep the candidate's TUNABLES on `target` within the budget; return table and best."""
    from tools.correctness.testsuite import build_suite
    from tools.inputs.candidate import read_candidate
    from tools.inputs.tasks import load_task

    if workers < 1:
        raise ValueError(f"{workers=} must be at least 1")
    if budget_configs is not None and budget_configs < 1:
        raise ValueError(f"{budget_configs=} must be at least 1")
    executor = get_executor(target)
    if executor.measured_on == "real":
        executor.require_available()  # type: ignore[union-attr]
        workers = 1  # one device: concurrent timings would disturb each other
    started = time.monotonic()
    task = load_task(task_path)
    source = read_candidate(candidate_path)
    configs = list(source.configs())
    total = len(configs)
    planned = configs[:budget_configs] if budget_configs else configs
    frozen = suite if suite is not None else build_suite(task)
    suite_bytes = frozen.to_bytes()
    deadline = started + budget_s if budget_s else None

    rows: dict[int, TuneRow] = {}
    pending: dict[cf.Future[TuneRow], int] = {}
    budget_exhausted = len(planned) < total
    context = multiprocessing.get_context("spawn")  # a clean interpreter per worker
    with cf.ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        keys = (program_sha256s(str(task_path), str(candidate_path), planned, target)
                if len(planned) > 1 else [None] * len(planned))
        repeats = distinct_programs(keys)
        for index, earlier in repeats.items():
            rows[index] = TuneRow(planned[index], "skipped",
                                  reasons=[f"{SAME_PROGRAM} {planned[earlier]}"])
        queue = [(i, c) for i, c in enumerate(planned) if i not in repeats]

        def submit_next() -> None:
            nonlocal budget_exhausted
            while queue and len(pending) < workers:
                if deadline is not None and time.monotonic() >= deadline:
                    budget_exhausted = True
                    return
                index, config = queue.pop(0)
                future = pool.submit(
                    _evaluate_config, str(task_path), str(candidate_path), config, target, suite_bytes
                )
                pending[future] = index

        submit_next()
        while pending:
            done, _ = cf.wait(list(pending), return_when=cf.FIRST_COMPLETED)
            for future in done:
                index = pending.pop(future)
                try:
                    row = future.result()
                except Exception as exc:  # the worker process died
                    row = TuneRow(planned[index], "error", reasons=[f"worker failed: {exc}"])
                rows[index] = row
                if on_row is not None:
                    on_row(row, len(rows), len(planned))
            submit_next()
    for index, config in queue:
        rows[index] = TuneRow(config, "skipped", reasons=["budget exhausted before it started"])
    for offset, config in enumerate(configs[len(planned):]):
        rows[len(planned) + offset] = TuneRow(config, "skipped",
                                              reasons=["over the configuration budget"])
    table = [rows[i] for i in sorted(rows)]
    passed = [r for r in table if r.status == "pass" and r.speedup is not None]
    best = max(passed, key=lambda r: r.speedup or 0.0) if passed else None
    return TuneResult(
        task=str(task_path),
        candidate=str(candidate_path),
        target=target,
        measured_on=executor.measured_on,
        suite_sha256=frozen.sha256,
        rows=table,
        best_config=best.config if best else None,
        best_speedup=best.speedup if best else None,
        configs_total=total,
        configs_evaluated=sum(1 for r in table if r.status != "skipped"),
        budget_exhausted=budget_exhausted,
        wall_s=time.monotonic() - started,
        workers=workers,
        configs_skipped=len(repeats),
    )


__all__ = ["SAME_PROGRAM", "TuneResult", "TuneRow", "autotune", "distinct_programs",
           "program_sha256"]
