"""The cost model against what interpret mode actually ran, for the same case.

The child counts, per kernel run under TPU interpret mode, the grid points it visited (and
their order), the blocks its pipeline fetched per input and wrote back per output, and the
manual DMAs it started (:class:`tools.child.interpret.KernelVisits`). Here the model's
assumptions for the same case (the case's scalar-prefetch values, the visited order: the
interpreter permutes `parallel` dimensions) are compared with those counts. A model that
assumed fewer grid points, transfers or DMAs than ran under-counts work: the measurement is
invalid (fail closed). Over-counting is allowed only where the model could not evaluate a
value (it then charges every step / both branches). Runs split across simulated cores are
not compared (each core starts its own pipeline). Branch counts are not compared:
interpret mode evaluates `pl.when` inside its own jitted loop with no callback to count.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tools.lowered.mosaic import LoweredProgram, MosaicKernel
from tools.performance.chips import Chip
from tools.performance.roofline import changed_steps, estimate_kernel, kernel_prefetch


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


def cross_check(program: LoweredProgram, visits: Sequence[dict[str, Any]],
                inputs: Sequence[Any] | None, chip: Chip) -> list[str]:
    """Problems where the model's grid points, transfers or DMAs differ from the run's."""
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
