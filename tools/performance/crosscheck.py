"""The cost model against what interpret mode actually ran, for the same case.

The child counts, per kernel run under TPU interpret mode, the grid points it visited (and
their order), the blocks its pipeline fetched per input and wrote back per output, the
manual DMAs it started, and how often each side of each conditional ran, laid out in the
order of the Mosaic body's `scf.if` ops (:class:`tools.child.interpret.KernelVisits`,
:mod:`tools.child.branches`). Here the model's assumptions for the same case (the case's
scalar-prefetch values, the visited order: the interpreter permutes `parallel` dimensions)
are compared with those counts. A model that assumed fewer grid points, transfers, DMAs or
branch runs than ran under-counts work: the measurement is invalid (fail closed).
Over-counting is allowed only where the model could not evaluate a value (it then charges
every step / both branches); where it evaluated a condition, its counts must be exact.
Runs split across simulated cores are not compared (each core starts its own pipeline),
nor branch counts whose layout the child could not mirror (it says so) or whose number of
conditionals differs from the Mosaic body's (a lowering that folded or added an `scf.if`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tools.lowered.mosaic import LoweredProgram, MosaicKernel, kernel_prefetch
from tools.performance.chips import Chip
from tools.performance.roofline import changed_steps, estimate_kernel


def _moves(kernel: MosaicKernel, steps: np.ndarray,
           prefetch: Sequence[Any] | None) -> tuple[list[tuple[int, bool]], list[tuple[int, bool]]]:
    """(count, known) of block moves per blocked input and per output, in this step order."""
    n = steps.shape[1]
    values = prefetch if kernel.prefetch_read_only else None
    inputs: list[tuple[int, bool]] = []
    outputs: list[tuple[int, bool]] = []
    for w in kernel.windows:
        if w.block_shape is None:
            continue
        index = w.index_map.over(steps, values) if w.index_map is not None else []
        known = all(v is not None for v in index)
        changed = changed_steps(index, n)
        if w.role == "input":
            inputs.append((int(changed.sum()), known))
        else:
            outputs.append((int(np.append(changed[1:], True).sum()), known))
    return inputs, outputs


def _compare(what: str, model: list[tuple[int, bool]], seen: list[int]) -> list[str]:
    counts = sorted(c for c, _ in model)
    if len(counts) != len(seen):
        return [f"{what}: the model has {len(counts)} blocked operands, interpret mode moved "
                f"blocks of {len(seen)}"]
    if counts == sorted(seen):
        return []
    all_known = all(k for _, k in model)
    if all_known or sum(counts) < sum(seen):
        return [f"{what}: the model assumed {counts} block transfers, interpret mode made "
                f"{sorted(seen)}"]
    return []


def _compare_branches(name: str, model: list[list[int]], seen: list[list[int]]) -> list[str]:
    """Runs of each side of each conditional: never fewer assumed than ran, and equal where
    the model evaluated the condition. Unrolled copies of one conditional (one `cond` in the
    jaxpr, several `scf.if` in Mosaic) are compared summed."""
    if len(model) != len(seen):
        return []  # the lowering folded or added conditionals: not comparable slot by slot
    groups: dict[tuple[int, int], list[int]] = {}
    for (then, other, known), (cond, level, ran_then, ran_other) in zip(model, seen, strict=True):
        g = groups.setdefault((cond, level), [0, 0, 1, ran_then, ran_other])
        g[0] += then
        g[1] += other
        g[2] &= known
    problems = []
    for number, (then, other, known, ran_then, ran_other) in enumerate(groups.values()):
        under = then < ran_then or other < ran_other
        if under or (known and (then, other) != (ran_then, ran_other)):
            problems.append(f"{name}: conditional {number} (pre-order): the model assumed its "
                            f"then/else sides ran {then}/{other} times, interpret mode ran "
                            f"them {ran_then}/{ran_other}")
    return problems


def cross_check(program: LoweredProgram, visits: Sequence[dict[str, Any]],
                inputs: Sequence[Any] | None, chip: Chip) -> list[str]:
    """Problems where the model's grid points, transfers, DMAs or branch runs differ
    from the run's."""
    if len(visits) != len(program.kernels):
        return [f"interpret mode ran {len(visits)} kernel(s), the lowered program has "
                f"{len(program.kernels)}"]
    problems: list[str] = []
    for kernel, seen in zip(program.kernels, visits, strict=True):
        if int(seen.get("cores", 1)) != 1:
            continue
        prefetch = kernel_prefetch(kernel, inputs)
        est = estimate_kernel(kernel, chip, prefetch)
        name = f"kernel {kernel.name}"
        if int(seen["grid_points"]) != est.grid_steps:
            problems.append(f"{name}: the model assumed {est.grid_steps} grid steps, interpret "
                            f"mode visited {seen['grid_points']}")
            continue
        order = seen.get("order") or []
        if seen.get("order_complete", False) and len(order) == est.grid_steps:
            steps = np.asarray(order, dtype=np.int64).reshape(len(order), len(kernel.grid)).T
            if not kernel.grid:
                steps = np.zeros((0, 1), dtype=np.int64)
            model_in, model_out = _moves(kernel, steps, prefetch)
            problems += _compare(f"{name} inputs", model_in, list(seen["input_fetches"]))
            problems += _compare(f"{name} outputs", model_out, list(seen["output_writes"]))
        if seen.get("branches_complete", False):
            problems += _compare_branches(name, est.branch_runs, list(seen.get("branches", [])))
        dmas = int(seen.get("dma_starts", 0))
        unknown = any("could not be evaluated" in c for c in est.caveats)
        if dmas > est.dma_starts or (dmas != est.dma_starts and not unknown):
            problems.append(f"{name}: the model assumed {est.dma_starts} manual DMA starts, "
                            f"interpret mode started {dmas}")
    return problems


def check_tuning_cases(program: LoweredProgram, suite_cases: Sequence[Any],
                       response: Any, chip: Chip, limit: int = 2) -> list[str]:
    """`cross_check` on up to `limit` tuning-point cases that ran on one simulated core,
    each with its own inputs (for scalar-prefetch values); problems deduplicated."""
    by_id = {c.case_id: c for g in (response.groups if response else ()) for c in g.cases}
    problems: list[str] = []
    checked = 0
    for case in suite_cases:
        result = by_id.get(case.case_id)
        if case.shape_index != 0 or result is None or not getattr(result, "visits", ()):
            continue
        if any(int(v.get("cores", 1)) != 1 for v in result.visits):
            continue
        inputs = [a.numpy() for a in case.inputs]
        for problem in cross_check(program, result.visits, inputs, chip):
            text = f"{case.case_id}: {problem}"
            if text not in problems:
                problems.append(text)
        checked += 1
        if checked >= limit:
            break
    return problems


__all__ = ["check_tuning_cases", "cross_check"]
