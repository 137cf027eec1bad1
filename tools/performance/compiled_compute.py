"""Compute from the compiler, memory from the model: a kernel's two sides, step by step.

Every figure here is simulated. For each Mosaic kernel of a lowered program the TPU
compiler's static cycles (:mod:`tools.performance.llo_cycles`, read from its bundle schedule
when libtpu compiled the program: :class:`tools.lowered.tpu_compiler.RealCompile`) give
the compute side of a grid step, at the chip's clock; the model
(:mod:`tools.performance.roofline`) gives the memory side (each step's HBM and DMA
transfers) and the rest of its account (prologue, epilogue, transfers the kernel waits for
in place, launch). They are combined as the model combines its own two sides (assumption 3
of :mod:`tools.performance.roofline`): a step takes the larger of its compute and the
transfers it overlaps. The compiler's step is taken whole, in place of the model's compute
plus its fitted per-step overhead: its bundles hold the step's bookkeeping too. The
pipeline's fill and drain trips and the bundles outside the grid loop are added once. A
kernel of one grid step has no pipeline loop: its whole schedule is its step.

The kernel's own ``pl.when`` regions are counted on the steps they run when the model
evaluated every condition and the compiler kept as many predicated regions as there are
conditions (:func:`tools.performance.llo_cycles.fractions`); otherwise on every step, an
upper bound, and ``regions_counted`` says so.

Both sides are shown beside each other (``kernelgraph estimate --json``), with what bounds
each step under the model alone and under the combination. The price the verdict uses is
the model's: the combination was not more accurate on the published v5e points
(``benchmarks/costmodel.py``, ``docs/targets.md``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec
import numpy as np

from tools.lowered.mosaic import LoweredProgram, kernel_prefetch
from tools.performance.chips import Chip
from tools.performance.llo_cycles import KernelCycles, fractions, step_cycles, total_cycles
from tools.performance.roofline import (
    ProgramEstimate,
    estimate_kernel,
    step_sides,
)

UPPER = "on every step (an upper bound)"
ON_THEIR_STEPS = "on the steps they run (the model's evaluated conditions)"
NO_REGIONS = "none in the step"


class KernelSides(msgspec.Struct, frozen=True):
    """One kernel's compute and memory sides under the model and under the combination."""

    name: str
    grid_steps: int
    memory_s: float  # all the kernel's HBM traffic at bandwidth (the model's)
    model_compute_s: float  # the model's compute, all steps
    model_overhead_s: float  # the model's fitted per-step overhead x steps + launch
    model_latency_s: float
    model_step_bounds: dict[str, int]  # steps bound by "compute" (with overhead), "memory"
    compiler_step_cycles: float | None = None  # one grid step's static cycles
    compiler_cycles: float | None = None  # the whole kernel's
    compiler_compute_s: float | None = None  # compiler_cycles at the chip's clock
    regions_counted: str = ""  # how the kernel's pl.when regions entered the step
    combined_latency_s: float | None = None  # compiler compute + model memory
    combined_step_bounds: dict[str, int] = {}
    # the same with the model's fitted per-step overhead added to the compiler's step (what
    # the schedule cannot see: DMA issue and wait stalls), beside
    combined_overhead_latency_s: float | None = None
    note: str = ""  # why the compiler gave no figure, where it gave none


class ProgramSides(msgspec.Struct, frozen=True):
    """A lowered program's kernels, each with both sides; simulated."""

    chip: str
    clock_hz: float
    kernels: list[KernelSides]
    model_latency_s: float
    combined_latency_s: float | None  # None where a kernel has no compiler figure
    combined_overhead_latency_s: float | None = None  # with the model's per-step overhead
    price: str = "model"  # which the verdict's latency is: the model's (see module doc)
    note: str = ""


def _bounds(busy: np.ndarray, transfers: np.ndarray) -> dict[str, int]:
    memory = int((transfers > busy).sum())
    return {"compute": int(busy.shape[0]) - memory, "memory": memory}


def kernel_sides(kernel: Any, estimate: Any, cycles: KernelCycles | None, chip: Chip,
                 prefetch: Sequence[Any] | None = None, note: str = "") -> KernelSides:
    """Both sides of one kernel (``estimate``: its :class:`KernelEstimate`)."""
    compute, transfers = step_sides(kernel, chip, prefetch)
    model = KernelSides(
        estimate.name, estimate.grid_steps, estimate.memory_s, estimate.compute_s,
        estimate.overhead_s, estimate.latency_s,
        _bounds(compute + chip.per_step_overhead_s, transfers), note=note)
    if cycles is None:
        return model
    steps = int(compute.shape[0])
    if cycles.trips is not None and cycles.trips < steps:
        return msgspec.structs.replace(model, note=(
            f"the compiler's grid loop runs {cycles.trips} trips for {steps} grid steps: "
            "not this kernel's schedule"))
    runs = fractions(estimate.branch_runs, steps, len(cycles.regions))
    counted = NO_REGIONS if not cycles.regions else ON_THEIR_STEPS if runs else UPPER
    per_step = step_cycles(cycles, runs)
    whole = total_cycles(cycles, steps, runs)
    if steps == 1 and whole is not None:  # no grid: its loops are the kernel's own
        per_step = whole
    if whole is None:
        return msgspec.structs.replace(model, compiler_step_cycles=per_step,
                                       regions_counted=counted,
                                       note="a loop's trip count was not read from the schedule")
    busy = per_step / chip.clock_hz
    combined = estimate_kernel(kernel, chip, prefetch, busy_s=busy)
    with_overhead = estimate_kernel(kernel, chip, prefetch,
                                    busy_s=busy + chip.per_step_overhead_s)
    extra = (whole - steps * per_step) / chip.clock_hz  # fill, drain, outside the loop
    return msgspec.structs.replace(
        model, compiler_step_cycles=per_step, compiler_cycles=whole,
        compiler_compute_s=whole / chip.clock_hz, regions_counted=counted,
        combined_latency_s=combined.latency_s + extra,
        combined_step_bounds=_bounds(np.full(steps, busy), transfers),
        combined_overhead_latency_s=with_overhead.latency_s + extra)


def program_sides(program: LoweredProgram, estimate: ProgramEstimate, chip: Chip,
                  compiled: Any = None, inputs: Sequence[Any] | None = None) -> ProgramSides:
    """Every kernel's two sides. ``compiled``: the program's
    :class:`~tools.lowered.tpu_compiler.RealCompile` (None: the model's sides alone)."""
    found: list[KernelCycles] = list(getattr(compiled, "kernel_cycles", None) or [])
    note = ""
    if compiled is None:
        note = "no TPU compiler (or its figures not asked for): the model's sides alone"
    elif not found:
        note = getattr(compiled, "cycles_note", "") or "the compiler's schedule gave no kernel"
    elif len(found) != len(program.kernels):
        note = (f"the compiled program has {len(found)} Mosaic kernels, the lowered one "
                f"{len(program.kernels)}: not paired")
        found = []
    kernels = []
    for i, (kernel, est) in enumerate(zip(program.kernels, estimate.kernels, strict=True)):
        cycles = found[i] if found else None
        kernels.append(kernel_sides(kernel, est, cycles, chip,
                                    kernel_prefetch(kernel, inputs), "" if cycles else note))
    return ProgramSides(chip.name, chip.clock_hz, kernels, estimate.latency_s,
                        _program(estimate.latency_s, kernels, "combined_latency_s"),
                        _program(estimate.latency_s, kernels, "combined_overhead_latency_s"),
                        note=note)


def _program(model_s: float, kernels: list[KernelSides], field_name: str) -> float | None:
    """The program's latency with each kernel's model latency replaced by ``field_name``."""
    values = [getattr(k, field_name) for k in kernels]
    if not kernels or any(v is None for v in values):
        return None
    return model_s + sum(v - k.model_latency_s for v, k in zip(values, kernels, strict=True))


__all__ = ["KernelSides", "ProgramSides", "kernel_sides", "program_sides"]
