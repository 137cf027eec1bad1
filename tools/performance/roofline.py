"""Analytic roofline model of a Pallas TPU kernel on one chip.

Every figure here is simulated. The assumptions, all of them:

Kernel (per `pallas_call`, read from the lowered Mosaic module by `tools.lowered.mosaic`):
1. Grid steps run in row-major order (last grid dimension fastest), one after another on one
   TensorCore; `parallel` dimensions are not split across cores (v5e/v6e have one core per
   chip; on v7 each core is its own device).
2. Bytes moved: a blocked input is fetched at a step when its block index differs from the
   previous step's (step 0 always fetches); a blocked output is written back when the next
   step's index differs, and after the last step. Index maps and `pl.when` conditions that
   read scalar-prefetch values are evaluated on the values of the case being priced when
   the caller supplies them (`prefetch`, or `inputs` for a whole program) and the kernel
   never writes those refs; otherwise such a block is assumed to change every step and
   both branches of such a condition are counted. Scalar-prefetch operands are copied to
   SMEM before step 0 (their bytes are part of the prologue). `memory_space=ANY` operands
   move only through the kernel's own `enqueue_dma` ops, counted each time they run.
3. Pipelining: the standard Pallas double-buffered pipeline. Step 0's inputs are fetched
   before any compute (prologue) and the last step's outputs are written after it
   (epilogue). During step t the DMA engine fetches step t+1's inputs and writes step t-1's
   outputs; the step takes max(compute + the per-step overhead, those DMAs at HBM
   bandwidth) - the fit of the published 128^3-block matmul times (the overhead is issue
   and bookkeeping work the core does while the DMAs fly). Operands with `pl.Buffered(1)`
   are not overlapped: their transfers add to their step. A manual DMA's wait is paired
   with its start by what both name (semaphore ref and index, source and destination refs
   and slices, evaluated where each runs), across `pl.when`, loops and `run_scoped`
   (:mod:`tools.performance.dmapair`). The transfer overlaps only the work that surely
   runs between the start and the wait (in the same iteration, or from the start in the
   previous iteration or step round to the wait, with the step boundary's overhead; ops
   in a branch between earn nothing, a loop of constant trips its trips); the rest is
   exposed, added to the step (a serial `start(); wait()` gains nothing, whatever region
   the wait sits in). A wait that matches no start or several (values the model cannot
   evaluate) is exposed in full: its bytes, serially; so is a start on a semaphore no
   wait names (never waited for). Any other start no wait claims overlaps its step's
   compute. A step never takes less than all its transfers (pipeline and manual) at HBM
   bandwidth.
4. Compute per step: MXU time (2*M*N*K per `tpu.matmul`, with M padded to 8 rows and N, K to
   the MXU size, 128 on v5e and 256 on v6e/v7, at the peak for the operand dtype: f32 at a
   third of bf16), VPU time (one op per element of each elementwise vector op, reductions one
   op per input element), EUP time (transcendentals), scalar-unit time (4b) and cross-lane
   unit time (transposes that move the lane or sublane axis, rotations along lanes: cycles
   per vreg the TPU compiler schedules, :mod:`tools.performance.chips`); the units overlap,
   so the step's compute is the largest of the five. Other data movement inside VMEM
   (loads, stores, broadcasts, reshapes, transposes of leading axes) is free.
4b. The scalar unit: scalar ALU ops (integer and float arithmetic on scalars, index casts,
   compares, selects) issue two per cycle; an SMEM load costs its load-use latency, a
   store one cycle; a vector -> scalar extract (one element of a vreg) goes through a slow
   cross-unit path of many cycles; each trip of an `scf.for`/`scf.while` costs a loop
   overhead. The cycle counts are in :mod:`tools.performance.chips` (assumed where not
   published). It overlaps the vector units like they overlap each other (one VLIW bundle
   carries both), so scalar work costs time only where it outlasts them: a loop over SMEM
   values is never free, a few index computations per step change nothing.
5. `pl.when` branches run on the steps their condition holds (conditions on program ids, and
   on known scalar-prefetch values, are evaluated per step with exact integer semantics,
   :mod:`tools.lowered.scalar`); a condition that cannot be evaluated counts both branches.
   How often each side was counted is kept (`branch_runs`) for the interpret-mode
   cross-check (:mod:`tools.performance.crosscheck`).
   `fori_loop` bodies count trip-count times when the bounds are known. A loop whose trip
   count cannot be evaluated (data, a while loop, an undefined result), and an op with no
   cost rule, make the estimate unsound (`KernelEstimate.unsound`): the model could only
   under-count them, so the executor declares such a measurement invalid (fail closed).
6. Each kernel launch costs `KERNEL_LAUNCH_S`; XLA ops outside the kernels (layout work)
   each cost a launch plus their operand and result bytes at HBM bandwidth, reshapes free,
   and a transpose that a later transpose undoes (XLA cancels the pair) free. A kernel
   operand aliased to an output (`input_output_aliases`) that is an argument the caller
   did not donate is copied by XLA first: a launch plus its bytes read and written.

The XLA baseline's model (assumption 7) is in :mod:`tools.performance.baseline`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np

from tools.lowered.mosaic import BodyOp, Branch, Loop, LoweredProgram, MosaicKernel, kernel_prefetch
from tools.performance.chips import Chip
from tools.performance.dmapair import price_dma_waits

KERNEL_LAUNCH_S = 1.0e-6
EXPOSED = ("manual DMAs: the part of a transfer the work between its start and its wait "
           "does not hide is exposed")
FREE_OUTSIDE_OPS = frozenset({
    "stablehlo.reshape", "stablehlo.bitcast_convert", "stablehlo.constant",
    "stablehlo.tuple", "stablehlo.get_tuple_element", "stablehlo.optimization_barrier",
})


def _ceil_to(x: int, m: int) -> int:
    return -(-x // m) * m


def padded_matmul_flops(b: int, m: int, n: int, k: int, mxu: int) -> int:
    """2*B*M*N*K with M padded to 8 sublanes and N, K to the MXU size (assumption 4)."""
    return 2 * b * _ceil_to(m, 8) * _ceil_to(n, mxu) * _ceil_to(k, mxu)


class KernelEstimate(msgspec.Struct, frozen=True):
    """One pallas_call's simulated cost, with the figures it was built from."""

    name: str
    grid: list[int]
    grid_steps: int
    latency_s: float
    compute_s: float  # sum over steps of max(MXU, VPU, EUP, scalar unit)
    memory_s: float  # all HBM traffic at peak bandwidth
    overhead_s: float  # per-step overhead x steps + launch
    exposed_dma_s: float  # prologue + epilogue + unoverlapped transfers
    hbm_bytes: int
    input_bytes: int
    output_bytes: int
    manual_dma_bytes: int
    flops: int
    matmul_flops: int
    matmul_padded_flops: int
    transcendentals: int
    vpu_ops: int
    fetches: list[int]  # per window: how many times its block moves
    bound: str  # "memory" | "compute" | "overhead"
    caveats: list[str]
    unsound: list[str] = []  # work the model cannot count: the latency is not a bound
    prefetch_bytes: int = 0  # scalar-prefetch operands copied to SMEM before step 0
    dma_starts: int = 0  # manual DMAs started (both branches where a condition is unknown)
    # Per `scf.if` in pre-order: [steps the then side ran, steps the else side ran, 1 if
    # both were evaluated (this condition and every enclosing one and loop known), else 0].
    branch_runs: list[list[int]] = []
    scalar_s: float = 0.0  # scalar-unit seconds over all steps (assumption 4b)
    xlu_s: float = 0.0  # cross-lane unit seconds over all steps (assumption 4)


class ProgramEstimate(msgspec.Struct, frozen=True):
    latency_s: float
    kernels: list[KernelEstimate]
    outside_ops_s: float
    outside_bytes: int
    chip: str
    # how the XLA ops around the kernels were priced: XLA:TPU's compiled program of the
    # candidate (its fusions), or the lowered program's ops one by one (each a launch)
    outside_priced_from: str = "the lowered program's ops, each a launch"

    @property
    def hbm_bytes(self) -> int:
        return sum(k.hbm_bytes for k in self.kernels) + self.outside_bytes

    @property
    def flops(self) -> int:
        return sum(k.flops for k in self.kernels)

    @property
    def sound(self) -> bool:
        """Whether every kernel's work was counted (an unsound estimate is no bound)."""
        return bool(self.kernels) and not any(k.unsound for k in self.kernels)


@dataclass
class _StepWork:
    mxu_s: np.ndarray
    vpu: np.ndarray
    trans: np.ndarray
    flops: np.ndarray
    mm_flops: np.ndarray
    mm_padded: np.ndarray
    dma: np.ndarray  # bytes of manual DMAs that overlap the step's compute
    dma_bytes: np.ndarray  # all manual DMA bytes
    serial_s: np.ndarray  # exposed time of manual DMAs the kernel waits for in place
    dma_starts: np.ndarray  # manual DMAs started
    scalar_s: np.ndarray  # scalar-unit time: scalar ALU, SMEM, extracts, loop trips
    xlu_s: np.ndarray  # cross-lane unit time: transposes, shuffles, lane rotations
    branches: list[list[Any]] = field(default_factory=list)  # see KernelEstimate.branch_runs


def _op_seconds(op: BodyOp, chip: Chip) -> float:
    """One run of `op` on its busiest unit (what a DMA issued before it can hide behind)."""
    mxu = 0.0
    if op.matmul is not None:
        b, m, n, k = op.matmul
        mxu = padded_matmul_flops(b, m, n, k, chip.mxu_dim) / chip.matmul_peak(op.matmul_dtype)
    return max(mxu, op.vpu_ops / chip.vpu_ops_per_s,
               op.transcendentals / chip.transcendentals_per_s, _scalar_seconds(op, chip),
               _xlu_seconds(op, chip))


def _accumulate(
    items: Sequence[Any], weight: np.ndarray, env: dict[int, Any],
    work: _StepWork, chip: Chip, caveats: set[str], unsound: set[str], known: bool = True,
) -> None:
    """Add `items`' work at `weight` runs per step; `known`: every enclosing condition and
    trip count was evaluated (the weights are exact, not an over-count)."""
    n = weight.shape[0]
    for item in items:
        if isinstance(item, BodyOp):
            _add_op(item, weight, work, chip)
        elif isinstance(item, Branch):
            value = env.get(item.cond) if item.cond is not None else None
            runs = [0.0, 0.0, int(known and value is not None)]
            work.branches.append(runs)
            if value is None:
                caveats.add("a pl.when condition could not be evaluated: both branches counted")
                runs[:2] = [float(weight.sum())] * 2
                _accumulate(item.then, weight, env, work, chip, caveats, unsound, False)
                _accumulate(item.otherwise, weight, env, work, chip, caveats, unsound, False)
            else:
                cond = np.broadcast_to(np.asarray(value, dtype=bool), (n,))
                runs[:2] = [float((weight * cond).sum()), float((weight * ~cond).sum())]
                _accumulate(item.then, weight * cond, env, work, chip, caveats, unsound, known)
                _accumulate(item.otherwise, weight * ~cond, env, work, chip, caveats,
                            unsound, known)
        elif isinstance(item, Loop):
            trips = item.trips(env, n)
            exact = known and trips is not None
            if trips is None:
                if weight.any():
                    unsound.add("a loop whose trip count depends on data (or a while loop, "
                                "or an undefined result): its work cannot be counted; bound "
                                "the loop by constants or program ids, or make it a grid axis")
                trips = np.ones(n, dtype=np.int64)
            if item.iterates:  # each trip costs the scalar unit its loop overhead
                work.scalar_s += weight * trips * chip.scalar_seconds(0, loop_trips=1)
            _accumulate(item.body, weight * trips, env, work, chip, caveats, unsound, exact)


def _scalar_seconds(op: BodyOp, chip: Chip) -> float:
    return chip.scalar_seconds(op.scalar_ops, op.smem_loads, op.smem_stores, op.lane_extracts)


def _xlu_seconds(op: BodyOp, chip: Chip) -> float:
    if op.xlu is None:
        return 0.0
    kind, bits, vregs = op.xlu
    return chip.xlu_seconds(kind, bits, vregs)


def _add_op(op: BodyOp, weight: np.ndarray, work: _StepWork, chip: Chip) -> None:
    if op.matmul is not None:
        b, m, n, k = op.matmul
        padded = padded_matmul_flops(b, m, n, k, chip.mxu_dim)
        work.mxu_s += weight * (padded / chip.matmul_peak(op.matmul_dtype))
        work.mm_flops += weight * op.flops
        work.mm_padded += weight * padded
    work.flops += weight * op.flops
    work.vpu += weight * op.vpu_ops
    work.trans += weight * op.transcendentals
    work.dma_bytes += weight * op.dma_bytes
    work.scalar_s += weight * _scalar_seconds(op, chip)
    work.xlu_s += weight * _xlu_seconds(op, chip)
    if op.name == "tpu.enqueue_dma":
        work.dma_starts += weight
    work.dma += weight * op.dma_bytes  # overlapped, unless its wait is in place (dmapair)


def changed_steps(index: list[np.ndarray | None], n: int) -> np.ndarray:
    """changed[t]: the block index at step t differs from step t-1 (step 0: True); an
    unknown index (None) changes every step."""
    return _changed(index, n)


def _changed(index: list[np.ndarray | None], n: int) -> np.ndarray:
    """changed[t]: the block index at step t differs from step t-1 (step 0: True)."""
    out = np.zeros(n, dtype=bool)
    out[0] = True
    for dim in index:
        if dim is None:
            return np.ones(n, dtype=bool)
        out[1:] |= dim[1:] != dim[:-1]
    return out


def _prefetch_values(kernel: MosaicKernel, prefetch: Sequence[Any] | None) -> list[Any] | None:
    if prefetch is None or not kernel.scalar_prefetch:
        return None
    if len(prefetch) != len(kernel.scalar_prefetch) or any(p is None for p in prefetch):
        return None
    return [np.asarray(p) for p in prefetch]


@dataclass
class _Steps:
    """Per-step arrays of one kernel, before compute and transfers are combined."""

    n: int
    work: _StepWork
    compute: np.ndarray
    in_pipe: np.ndarray
    out_pipe: np.ndarray
    sync_in: np.ndarray
    sync_out: np.ndarray
    manual: np.ndarray
    prefetch_bytes: int
    fetches: list[int]
    caveats: set[str]
    unsound: set[str]

    @property
    def overlapped(self) -> np.ndarray:
        """Bytes the DMA engine moves while step t computes (pipeline and manual)."""
        overlapped = np.zeros(self.n)
        overlapped[:-1] += self.in_pipe[1:]
        overlapped[1:] += self.out_pipe[:-1]
        return overlapped + self.work.dma


def step_sides(kernel: MosaicKernel, chip: Chip, prefetch: Sequence[Any] | None = None,
               ) -> tuple[np.ndarray, np.ndarray]:
    """Per grid step: (the model's compute seconds, the seconds of the transfers the step
    overlaps at HBM bandwidth), the two sides assumption 3 takes the larger of."""
    s = _kernel_steps(kernel, chip, prefetch)
    return s.compute, s.overlapped / chip.hbm_bytes_per_s


def estimate_kernel(kernel: MosaicKernel, chip: Chip,
                    prefetch: Sequence[Any] | None = None, *,
                    busy_s: float | None = None) -> KernelEstimate:
    """Simulated latency of one pallas_call on `chip` (assumptions 1-6 of the module doc).

    `prefetch`: the values of the kernel's scalar-prefetch operands for the case priced;
    without them index maps and conditions that read those values count as unknown.
    `busy_s`: each step's compute and overhead taken from elsewhere (the TPU compiler's
    static cycles, :mod:`tools.performance.compiled_compute`) in place of the model's.
    """
    s = _kernel_steps(kernel, chip, prefetch)
    n, work, compute, caveats, unsound = s.n, s.work, s.compute, s.caveats, s.unsound
    in_pipe, out_pipe, sync_in, sync_out = s.in_pipe, s.out_pipe, s.sync_in, s.sync_out
    manual, prefetch_bytes, fetches = s.manual, s.prefetch_bytes, s.fetches
    bw = chip.hbm_bytes_per_s
    overlapped = s.overlapped
    sync = sync_in + sync_out
    busy = compute + chip.per_step_overhead_s if busy_s is None else np.full(n, busy_s)
    step_s = np.maximum(busy, overlapped / bw) + sync / bw + work.serial_s
    # However waits hide them, the step's transfers share one HBM: never faster than all
    # of its bytes at full bandwidth.
    step_s = np.maximum(step_s, (overlapped - work.dma + manual + sync) / bw)
    prologue = (in_pipe[0] + prefetch_bytes) / bw
    epilogue = out_pipe[-1] / bw
    latency = KERNEL_LAUNCH_S + prologue + float(step_s.sum()) + epilogue

    total_bytes = float(in_pipe.sum() + out_pipe.sum() + sync.sum() + work.dma_bytes.sum()
                        + prefetch_bytes)
    input_bytes = int(in_pipe.sum() + sync_in.sum() + prefetch_bytes)
    memory_s = total_bytes / bw
    compute_s = float(compute.sum())
    overhead_s = KERNEL_LAUNCH_S + n * chip.per_step_overhead_s
    exposed = prologue + epilogue + float(sync.sum()) / bw + float(work.serial_s.sum()) + float(
        np.maximum(overlapped / bw - busy, 0).sum()
    )
    if work.serial_s.any():
        caveats.add(EXPOSED)
    bound = max(
        (("memory", memory_s), ("compute", compute_s), ("overhead", overhead_s)),
        key=lambda kv: kv[1],
    )[0]
    return KernelEstimate(
        name=kernel.name,
        grid=list(kernel.grid),
        grid_steps=n if kernel.grid else 1,
        latency_s=float(latency),
        compute_s=compute_s,
        memory_s=memory_s,
        overhead_s=overhead_s,
        exposed_dma_s=float(exposed),
        hbm_bytes=round(float(total_bytes)),
        input_bytes=input_bytes,
        output_bytes=int(out_pipe.sum() + sync_out.sum()),
        manual_dma_bytes=int(work.dma_bytes.sum()),
        flops=round(float(work.flops.sum())),
        matmul_flops=round(float(work.mm_flops.sum())),
        matmul_padded_flops=round(float(work.mm_padded.sum())),
        transcendentals=round(float(work.trans.sum())),
        vpu_ops=round(float(work.vpu.sum())),
        fetches=fetches,
        bound=bound,
        caveats=sorted(caveats),
        unsound=sorted(unsound),
        prefetch_bytes=prefetch_bytes,
        dma_starts=round(float(work.dma_starts.sum())),
        branch_runs=[[round(t), round(e), k] for t, e, k in work.branches],
        scalar_s=float(work.scalar_s.sum()),
        xlu_s=float(work.xlu_s.sum()),
    )


def _kernel_steps(kernel: MosaicKernel, chip: Chip,
                  prefetch: Sequence[Any] | None) -> _Steps:
    """Each grid step's work and transfers (assumptions 2-5), not yet combined."""
    steps = kernel.steps()
    n = steps.shape[1]
    caveats: set[str] = set()
    unsound: set[str] = set()
    values = _prefetch_values(kernel, prefetch)
    if values is not None and kernel.prefetch_read_only:
        caveats.add("index maps and conditions evaluated on this case's scalar-prefetch values")
    elif kernel.scalar_prefetch and values is not None:
        caveats.add("the kernel writes its scalar-prefetch refs: their values are not used")

    in_pipe = np.zeros(n)
    out_pipe = np.zeros(n)
    sync_in = np.zeros(n)
    sync_out = np.zeros(n)
    fetches: list[int] = []
    memory_values = values if kernel.prefetch_read_only else None
    for w in kernel.windows:
        if w.block_shape is None:  # left in HBM: moved only by the kernel's own DMAs
            fetches.append(0)
            continue
        index = w.index_map.over(steps, memory_values) if w.index_map is not None else []
        if any(v is None for v in index):
            caveats.add(f"{w.role} {w.position} block index depends on data: fetched every step")
        changed = _changed(index, n)
        moves = changed if w.role == "input" else np.append(changed[1:], True)
        fetches.append(int(moves.sum()))
        bytes_per = moves * float(w.block_bytes)
        if w.buffer_count < 2:
            (sync_in if w.role == "input" else sync_out)[:] += bytes_per
        elif w.role == "input":
            in_pipe += bytes_per
        else:
            out_pipe += bytes_per
    prefetch_bytes = sum(s.nbytes for s in kernel.scalar_prefetch)

    work = _StepWork(*(np.zeros(n) for _ in range(12)))
    env = kernel.scalar_env(steps, memory_values)
    _accumulate(kernel.body, np.ones(n), env, work, chip, caveats, unsound)
    waits = price_dma_waits(kernel, steps, env, kernel.prefetch_memory(memory_values), chip,
                            lambda op: _op_seconds(op, chip))
    work.serial_s += waits.serial_s
    manual = work.dma.copy()  # every manual DMA started in the step, waited where it may be
    work.dma = np.maximum(work.dma - waits.refund_bytes, 0.0)
    caveats |= waits.caveats
    if kernel.unmodelled_ops:
        unsound.add(f"ops with no cost rule: {', '.join(kernel.unmodelled_ops)}")

    compute = np.maximum.reduce([
        work.mxu_s, work.vpu / chip.vpu_ops_per_s, work.trans / chip.transcendentals_per_s,
        work.scalar_s, work.xlu_s,
    ])
    return _Steps(n, work, compute, in_pipe, out_pipe, sync_in, sync_out, manual,
                  prefetch_bytes, fetches, caveats, unsound)


OUTSIDE_FROM_XLA_TPU = "XLA:TPU's compiled program of the candidate"


def estimate_program(program: LoweredProgram, chip: Chip,
                     inputs: Sequence[Any] | None = None,
                     outside: tuple[float, int] | None = None) -> ProgramEstimate:
    """Kernels one after another, plus the XLA layout ops around them (assumption 6).

    `inputs`: the case's arguments to the program (only scalar-prefetch operands are read).
    `outside`: the ops around the kernels already priced from XLA:TPU's compiled program of
    the candidate, (seconds, HBM bytes) (:func:`tools.performance.xla_tpu.price_outside`);
    None prices the lowered program's ops one by one.
    """
    kernels = [estimate_kernel(k, chip, kernel_prefetch(k, inputs)) for k in program.kernels]
    if outside is not None:
        outside_s, outside_bytes = outside
        latency = sum(k.latency_s for k in kernels) + outside_s
        return ProgramEstimate(float(latency), kernels, float(outside_s), int(outside_bytes),
                               chip.name, OUTSIDE_FROM_XLA_TPU)
    costly = [(name, b) for name, b in program.outside_op_bytes if name not in FREE_OUTSIDE_OPS]
    costly += [("alias copy", 2 * b) for _, b in program.alias_copies]
    outside_bytes = sum(b for _, b in costly)
    outside_s = len(costly) * KERNEL_LAUNCH_S + outside_bytes / chip.hbm_bytes_per_s
    latency = sum(k.latency_s for k in kernels) + outside_s
    return ProgramEstimate(float(latency), kernels, float(outside_s), outside_bytes, chip.name)


def roofline_floor_s(flops: float, hbm_bytes: float, chip: Chip) -> float:
    """The least time any kernel could take for this work on `chip` (bf16 peak, full bandwidth)."""
    return max(flops / chip.peak_bf16_flops, hbm_bytes / chip.hbm_bytes_per_s)


__all__ = [
    "EXPOSED",
    "KERNEL_LAUNCH_S",
    "KernelEstimate",
    "ProgramEstimate",
    "estimate_kernel",
    "estimate_program",
    "padded_matmul_flops",
    "roofline_floor_s",
]
