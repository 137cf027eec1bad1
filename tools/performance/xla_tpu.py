"""The XLA baseline priced from XLA:TPU's own optimised program; simulated.

Where libtpu is installed (:mod:`tools.lowered.tpu_compiler`), the task's reference is
lowered for TPU (in the parent, as `reference_cost` compiles it for the host: the reference
is the task's trusted code) and compiled for the target chip in the sandboxed compile child,
which returns the optimised, scheduled HLO. Its ENTRY computation (with the bodies of the
while loops it runs) is what runs: XLA:TPU's
real fusions, their tiled layouts and memory spaces (`S(1)`: VMEM, `S(2)`: SMEM), async
HBM->VMEM copies, and, in each fusion's backend config, the compiler's static estimate
of its cycles (`estimated_cycles`).

Each launched op is priced as the model prices a kernel step, with the kernel model's own
compute rules, so that a speedup compares like with like: compute is what the op's HLO
ops ask of the MXU, VPU and EUP counted as the equivalent Mosaic ops are counted in a
kernel (:mod:`tools.performance.hlo_compute`; dots and convolutions on the MXU as the host
baseline prices them, :func:`tools.performance.baseline.dot_seconds`), the units
overlapping; memory is the bytes of its operands and result that live in HBM, at HBM
bandwidth; the op takes the larger of the two plus one `KERNEL_LAUNCH_S`; ops run one
after another. An async copy (copy-start) moves its operand's bytes through HBM with no
launch of its own (an async slice, slice-start, the slice's bytes), overlapped with the
ops XLA scheduled around it: the program takes the longer of its ops in sequence and its
copies in sequence, and never less than all its HBM bytes at bandwidth plus the launches
(the copies and the ops share one HBM, as a kernel's pipelined and manual transfers do). A
custom call that only reserves a buffer (`AllocateBuffer`) costs nothing, nor does one
that reads slices already in VMEM as one array (`ConcatBitcast`; where they are in HBM, it
is a copy of their bytes). XLA:TPU's own Mosaic kernels (`tpu_custom_call`: its fused
attention, `online-softmax`) are priced by the kernel model as a Pallas kernel
with the same body is (:mod:`tools.performance.xla_kernels`). A while loop (a scan, a
fori_loop) runs its body and condition once per trip, each op priced as above and summed
over the trips, the count read from the program (:mod:`tools.performance.hlo_loops`); an
op on single values (the loop counter's add, copy and compare) is the scalar unit's, one
cycle and no launch. An op with no rule (a custom call such as PartialReduce, a loop
whose trip count the program does not fix) is named in ``unpriced``, never priced at
zero, and such a program is not a baseline; XLA:TPU's TopK custom call and its sort have
one (:func:`tools.performance.hlo_compute.top_k_ops`), and so has a gather:
it moves rows (free, as a dynamic slice is), and an array only gathered from is read for
the rows the gathers return, not whole; so has a scatter (its combiner per updated element).

The compiler's static estimate (each fusion's `estimated_cycles` at the chip's clock) is
kept beside, per op and as the program's price with it as the compute side
(``compiler_latency_s``), but never used for the speedup: a kernel's Mosaic custom call
carries no such estimate, so its compute comes from the model, and so must the
baseline's. `cost_analysis()`'s `optimal_seconds` (XLA's own estimate) is kept beside too.

This is the XLA baseline of simulated targets wherever it prices the whole program;
:mod:`tools.performance.simbaseline` chooses between it and the host program.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from kernelgraph.errors import KernelgraphError
from tools.performance import hlo_loops, xla_kernels
from tools.performance.baseline import DotShape, _hlo_bytes, dot_seconds, dots_of, share_dots
from tools.performance.chips import Chip
from tools.performance.hlo_compute import Instr, Module, Work
from tools.performance.roofline import KERNEL_LAUNCH_S

_NOT_RUN = frozenset({"parameter", "constant", "tuple", "get-tuple-element", "bitcast",
                      "copy-done", "slice-done", "after-all", "partition-id", "replica-id"})
# Custom calls that do no work of their own (XLA:TPU reserves a buffer).
_FREE_TARGETS = frozenset({"AllocateBuffer"})
# Custom calls that only move data (XLA:TPU reads the slices its async slices brought into
# VMEM as one array): free inside VMEM, as a move in a kernel is; a launched copy of their
# HBM bytes where any of them lives in HBM.
_MOVE_TARGETS = frozenset({"ConcatBitcast"})


class FusionPrice(msgspec.Struct, frozen=True):
    """One launched op of XLA:TPU's program and what bound it."""

    name: str
    opcode: str
    hbm_bytes: int  # operands + result held in HBM (no memory-space annotation)
    cycles: int | None  # the compiler's estimated_cycles, where it gives one (beside)
    compute_s: float  # by the kernel model's rules: max(MXU, VPU, EUP, cross-lane unit)
    memory_s: float
    latency_s: float  # max(compute_s, memory_s) + launch
    bound: str  # "compute" | "memory" | "overhead" | "unpriced"
    vpu_ops: float = 0.0
    transcendentals: float = 0.0
    mxu_s: float = 0.0
    # beside, never the baseline: the compiler's cycles at the clock (the model's compute
    # where it gives none) and the op priced with them
    compiler_compute_s: float | None = None
    compiler_latency_s: float | None = None
    trips: int = 1  # times the op runs (inside while loops); the figures are summed over them
    xlu_s: float = 0.0  # cross-lane unit: relayouts inside the op (hlo_compute)


class ProgramPrice(msgspec.Struct, frozen=True):
    """XLA:TPU's program priced op by op. ``unpriced`` names each op the pricer has no rule
    for (a custom call such as PartialReduce, a while loop whose trip count the
    program does not fix); where it is not empty the latency leaves work out and is no
    baseline. An op inside a loop is named under it (``while.2/fusion.5``), its figures
    summed over its ``trips``."""

    ops: list[FusionPrice]
    latency_s: float  # the longer of the ops in sequence and the async copies in sequence
    compute_s: float
    memory_s: float
    overhead_s: float
    unpriced: list[str] = []
    compiler_latency_s: float = 0.0  # beside: compute from the compiler's cycles
    compiler_compute_s: float = 0.0  # the compiler's cycles alone, summed


class XlaTpuBaseline(msgspec.Struct, frozen=True):
    latency_s: float
    compute_s: float  # the ops' compute by the kernel model's rules, summed
    memory_s: float  # the ops' HBM bytes at bandwidth, summed
    overhead_s: float
    optimal_seconds: float | None  # cost_analysis() of the compiled program
    fusions: list[FusionPrice]
    chip: str
    compiler: str
    compile_seconds: float
    source: str = "XLA:TPU optimised program (libtpu ahead of time); per op: max(compute " \
                  "by the kernel model's rules, HBM bytes at bandwidth) + launch"
    unpriced: list[str] = []  # ops with no pricing rule: the latency is not a baseline
    # beside, never the baseline: the program priced with the compiler's estimated_cycles
    # as each op's compute side (a kernel has no such figure to compare with)
    compiler_latency_s: float | None = None
    compiler_compute_s: float | None = None


class XlaTpuError(KernelgraphError, RuntimeError):
    """The reference could not be compiled for TPU (a figure is missing, not a verdict)."""


def _arrays(type_text: str) -> list[str]:
    """Each array of an HLO type (a tuple's, in order), with its layout."""
    return re.findall(r"\w+\[[\d,]*\](?:\{[^}]*\})?", type_text)


def _hbm_bytes(type_text: str) -> int:
    """Bytes of the arrays in ``type_text`` that live in HBM (no ``S(n)`` memory space)."""
    total = 0
    for piece in _arrays(type_text):
        if re.search(r"S\(\d+\)", piece):
            continue
        total += _hlo_bytes(piece)
    return total


def _cycles(rest: str) -> int | None:
    m = re.search(r"backend_config=(\{.*\})", rest)
    if not m:
        return None
    text = m.group(1)
    found = re.search(r'"estimated_cycles":"(\d+)"', text)
    if found:
        return int(found.group(1))
    try:  # the whole config, where the quick look missed it
        config = json.loads(text)
    except json.JSONDecodeError:
        return None
    value = (config.get("window_config") or {}).get("estimated_cycles")
    return int(value) if value is not None else None


def price_program(hlo: str, chip: Chip, dots: Sequence[DotShape] = (),
                  skip: frozenset[str] = frozenset()) -> ProgramPrice:
    """Each launched op of the ENTRY computation priced (assumptions in the module's text).

    ``dots``: the reference's dots and convolutions in program order (from its StableHLO,
    :func:`tools.performance.baseline.dots_of`), priced on the MXU as the host baseline
    prices them and given to the ops that hold one. Compute by the model's rules
    (:mod:`tools.performance.hlo_compute`), the compiler's cycles kept beside; an op
    without a rule is listed in ``unpriced``, never free. ``skip``: ENTRY ops priced by
    the caller (a candidate's own kernels), left out here."""
    return _price_module(Module(hlo), chip, dots, skip)


def _price_module(module: Module, chip: Chip, dots: Sequence[DotShape],
                  skip: frozenset[str]) -> ProgramPrice:
    found = _Found(skip)
    _collect(module, module.computations.get(module.entry or "", []), chip, 1, "", found)
    mxu = share_dots([w.dots for *_, w in found.rows], [dot_seconds(d, chip) for d in dots])
    priced: list[FusionPrice] = []
    unpriced = found.unpriced
    for (ins, trips, name, hbm, cycles, work), mxu_s in zip(found.rows, mxu, strict=True):
        memory = hbm / chip.hbm_bytes_per_s
        if work.dots and not dots:
            work = work + Work(unpriced=("a dot or convolution with no shape given",))
        if work.unpriced:  # no rule: named, never priced at zero
            inner = ", ".join(work.unpriced)
            unpriced.append(f"fusion {name} ({inner})" if ins.opcode == "fusion" else inner)
            priced.append(FusionPrice(name, ins.opcode, hbm, cycles, 0.0, memory, 0.0,
                                      "unpriced"))
            continue
        xlu_s = work.xlu_seconds(chip)
        compute = max(mxu_s, work.vpu_ops / chip.vpu_ops_per_s,
                      work.transcendentals / chip.transcendentals_per_s, xlu_s)
        by_compiler = cycles / chip.clock_hz if cycles is not None else compute
        launch = KERNEL_LAUNCH_S
        bound = max((("compute", compute), ("memory", memory), ("overhead", launch)),
                    key=lambda kv: kv[1])[0]
        priced.append(_times(FusionPrice(
            name, ins.opcode, hbm, cycles, compute, memory, max(compute, memory) + launch,
            bound, vpu_ops=work.vpu_ops, transcendentals=work.transcendentals, mxu_s=mxu_s,
            xlu_s=xlu_s, compiler_compute_s=by_compiler,
            compiler_latency_s=max(by_compiler, memory) + launch), trips))
    for kernel in found.kernels:
        if kernel.bound == "unpriced":
            unpriced.append(f"XLA:TPU's Mosaic kernel {kernel.name} ({kernel.opcode})")
    priced += found.kernels + found.scalars
    ran = [f for f in priced if f.bound != "unpriced"]
    copies = found.copies
    copy_s = sum(f.latency_s for f in copies)
    memory_s = sum(f.memory_s for f in ran) + copy_s
    launches = KERNEL_LAUNCH_S * sum(f.trips for f in ran if f.bound != "scalar")
    # The copies overlap the ops, but all of them share one HBM: the program never takes
    # less than all its HBM bytes at bandwidth (as a kernel step never does), plus launches.
    return ProgramPrice(
        ops=_in_order(found.order, [*copies, *priced]),
        latency_s=max(sum(f.latency_s for f in ran), copy_s, memory_s + launches),
        compute_s=sum(f.compute_s for f in ran), memory_s=memory_s,
        overhead_s=sum(f.latency_s - max(f.compute_s, f.memory_s) for f in ran),
        unpriced=unpriced,
        compiler_latency_s=max(sum(f.compiler_latency_s or 0.0 for f in ran), copy_s,
                               memory_s + launches),
        compiler_compute_s=sum((f.cycles or 0) / chip.clock_hz for f in ran))


class _Found:
    """What `_collect` gathers from a computation and the loops it runs, in program order:
    ops to price by the rules (with their trips), async copies, XLA:TPU's own kernels,
    scalar-unit ops, and what has no rule."""

    def __init__(self, skip: frozenset[str] = frozenset()) -> None:
        self.skip = skip
        self.rows: list[tuple[Instr, int, str, int, int | None, Work]] = []
        self.copies: list[FusionPrice] = []
        self.kernels: list[FusionPrice] = []
        self.scalars: list[FusionPrice] = []
        self.unpriced: list[str] = []
        self.order: list[str] = []


def _collect(module: Module, instrs: list[Instr], chip: Chip, trips: int, prefix: str,
             found: _Found) -> None:
    """The ops of one computation run ``trips`` times; a while loop's body and condition
    are collected with its trip count (:mod:`tools.performance.hlo_loops`), their names
    under the loop's (``while.2/fusion.5``)."""
    types: dict[str, str] = {}
    defs: dict[str, Instr] = {}
    for ins in instrs:
        types[ins.name] = ins.type_text
        defs[ins.name] = ins
        name = prefix + ins.name
        if ins.opcode in _NOT_RUN or name in found.skip:
            continue
        found.order.append(name)
        target = re.search(r'custom_call_target="([^"]+)"', ins.rest)
        if ins.opcode == "custom-call" and target and target.group(1) in _FREE_TARGETS:
            continue
        if ins.opcode == "custom-call" and target and target.group(1) in _MOVE_TARGETS:
            hbm = _hbm_bytes(ins.type_text) + _operand_bytes(module, ins, types)
            if hbm:
                found.rows.append((ins, trips, name, hbm, _cycles(ins.rest), Work()))
            continue
        if ins.opcode == "custom-call" and target and target.group(1) == xla_kernels.TARGET:
            found.kernels.append(_times(_own_kernel(ins, types, chip), trips, name))
            continue
        if ins.opcode in ("copy-start", "slice-start"):  # HBM <-> VMEM: the HBM side
            moved = _moved_bytes(ins, types)
            memory = moved / chip.hbm_bytes_per_s
            found.copies.append(_times(FusionPrice(name, ins.opcode, moved, None, 0.0, memory,
                                                   memory, "memory"), trips))
            continue
        if ins.opcode == "while":
            _collect_loop(module, ins, defs, chip, trips, name, found)
            continue
        if hlo_loops.is_scalar_op(ins, types):  # the scalar unit: a cycle, no launch
            cycle = 1.0 / chip.clock_hz
            found.scalars.append(_times(FusionPrice(
                name, ins.opcode, 0, None, cycle, 0.0, cycle, "scalar",
                compiler_compute_s=cycle, compiler_latency_s=cycle), trips))
            continue
        hbm = _hbm_bytes(ins.type_text) + _operand_bytes(module, ins, types)
        found.rows.append((ins, trips, name, hbm, _cycles(ins.rest),
                           module.instr_work(ins, types)))


def _collect_loop(module: Module, loop: Instr, defs: dict[str, Instr], chip: Chip,
                  trips: int, name: str, found: _Found) -> None:
    """A while loop: its body ``n`` times and its condition ``n + 1`` times, ``n`` its
    trip count; a loop whose count the program does not fix is named, never priced."""
    n = hlo_loops.trip_count(module, loop, defs)
    body = module.computations.get(hlo_loops.called(loop, "body") or "")
    condition = module.computations.get(hlo_loops.called(loop, "condition") or "")
    if n is None or body is None or condition is None:
        found.unpriced.append(f"while {name} (its trip count is not a constant of the "
                              "program)" if n is None else f"while {name} (its body or "
                              "condition is not in the program)")
        return
    _collect(module, condition, chip, trips * (n + 1), f"{name}/", found)
    _collect(module, body, chip, trips * n, f"{name}/", found)


def _moved_bytes(ins: Instr, types: dict[str, str]) -> int:
    """The HBM bytes an async copy moves: a copy-start its operand's, where it lives in
    HBM; a slice-start the slice's (its result, beside the operand in its type), where
    the operand or the slice lives in HBM."""
    if ins.opcode == "copy-start":
        return sum(_hbm_bytes(types.get(o, "")) for o in ins.operands)
    operand = types.get(ins.operands[0], "") if ins.operands else ""
    pieces = _arrays(ins.type_text)
    if len(pieces) < 2:
        return _hbm_bytes(operand)
    sliced = pieces[-2]  # ((operand), slice, sync flag)
    in_hbm = _hbm_bytes(operand) > 0 or _hbm_bytes(sliced) > 0
    return _hlo_bytes(sliced) if in_hbm else 0


def _times(price: FusionPrice, trips: int, name: str | None = None) -> FusionPrice:
    """``price`` for an op run ``trips`` times: its figures summed over the trips."""
    if trips == 1 and name is None:
        return price
    cycles = None if price.cycles is None else price.cycles * trips
    return msgspec.structs.replace(
        price, name=price.name if name is None else name, trips=price.trips * trips,
        hbm_bytes=price.hbm_bytes * trips, cycles=cycles, compute_s=price.compute_s * trips,
        memory_s=price.memory_s * trips, latency_s=price.latency_s * trips,
        vpu_ops=price.vpu_ops * trips, transcendentals=price.transcendentals * trips,
        mxu_s=price.mxu_s * trips, xlu_s=price.xlu_s * trips,
        compiler_compute_s=None if price.compiler_compute_s is None
        else price.compiler_compute_s * trips,
        compiler_latency_s=None if price.compiler_latency_s is None
        else price.compiler_latency_s * trips)


class OutsidePrice(msgspec.Struct, frozen=True):
    """The XLA ops around a candidate's kernels, as XLA:TPU compiled them (its fusions of the
    wrapper's transposes, pads and slices, and any relayout copies it put around the
    kernels), priced by the same rules as the baseline's ops."""

    latency_s: float
    hbm_bytes: int
    ops: list[str]  # the launched ops, by name


def price_outside(hlo: str, chip: Chip, kernels: int,
                  dots: Sequence[DotShape] = ()) -> OutsidePrice | None:
    """The ops of XLA:TPU's program of a candidate other than its ``kernels`` Mosaic kernels
    (its `tpu_custom_call`s), priced as :func:`price_program` prices a baseline's. None where
    the program does not hold exactly that many kernels or holds an op with no rule: the
    caller then prices the lowered program's ops one by one (each a launch)."""
    module = Module(hlo)
    entry = module.computations.get(module.entry or "", [])
    own = [i for i in entry if i.opcode == "custom-call"
           and f'custom_call_target="{xla_kernels.TARGET}"' in i.rest]
    if len(own) != kernels:
        return None
    price = _price_module(module, chip, dots, frozenset(i.name for i in own))
    if price.unpriced:
        return None
    return OutsidePrice(price.latency_s, sum(f.hbm_bytes for f in price.ops),
                        [f.name for f in price.ops if f.bound != "scalar"])


def candidate_outside(text: str, chip: Chip, kernels: int) -> OutsidePrice | None:
    """:func:`price_outside` on the program the compile check compiled from the lowered
    ``text`` (its cached compile: nothing is compiled here); None without one."""
    from tools.lowered import tpu_compiler

    hlo = tpu_compiler.compiled_hlo(text, chip.name)
    return price_outside(hlo, chip, kernels, dots_of(text)) if hlo else None


def _operand_bytes(module: Module, ins: Instr, types: dict[str, str]) -> int:
    """The HBM bytes an op reads: its operands in HBM, except that an array only gathered
    from is read for the rows the gathers return (:meth:`Module.gathered`)."""
    if ins.opcode == "fusion":
        called = re.search(r"calls=%?([\w.\-]+)", ins.rest)
        gathered = module.gathered(called.group(1)) if called else {}
    elif ins.opcode == "gather":
        gathered = {0: _hbm_bytes(ins.type_text)}
    else:
        gathered = {}
    total = 0
    for position, operand in enumerate(ins.operands):
        size = _hbm_bytes(types.get(operand, ""))
        total += min(size, gathered[position]) if position in gathered else size
    return total


def _own_kernel(ins: Instr, types: dict[str, str], chip: Chip) -> FusionPrice:
    """XLA:TPU's own Mosaic kernel (its fused attention) priced by the kernel model
    (:mod:`tools.performance.xla_kernels`); bound "unpriced", with why as its opcode, where
    the model cannot price it."""
    try:
        est = xla_kernels.price(ins.name, ins.type_text, [types.get(o, "") for o in ins.operands],
                                ins.rest, chip)
    except xla_kernels.XlaKernelError as exc:
        # the model's reason, without its advice to a kernel's author (after the "; "):
        # XLA:TPU's kernels are not ours to change
        why = str(exc).split("; ")[0]
        return FusionPrice(ins.name, f"custom-call: {why if len(why) <= 300 else why[:297] + '...'}",
                           0, None, 0.0, 0.0, 0.0, "unpriced")
    return FusionPrice(ins.name, "custom-call (Mosaic kernel, priced by the kernel model)",
                       est.hbm_bytes, None, est.compute_s, est.memory_s, est.latency_s,
                       est.bound, vpu_ops=float(est.vpu_ops),
                       transcendentals=float(est.transcendentals),
                       compiler_compute_s=est.compute_s, compiler_latency_s=est.latency_s)


def _in_order(names: list[str], ops: list[FusionPrice]) -> list[FusionPrice]:
    """The priced ops in the program's order (``names``)."""
    at = {name: i for i, name in enumerate(names)}
    return sorted(ops, key=lambda f: at.get(f.name, 0))


def tpu_baseline(reference_fn: Callable[..., Any], args: Sequence[Any],
                 chip: Chip) -> XlaTpuBaseline:
    """The reference compiled by XLA:TPU for ``chip`` and priced per launched op."""
    import jax

    from tools.lowered import tpu_compiler

    try:
        text = jax.jit(reference_fn).trace(*args).lower(lowering_platforms=("tpu",)).as_text()
    except Exception as exc:  # the reference has no TPU lowering: no figure
        raise XlaTpuError(f"the reference did not lower for TPU: {type(exc).__name__}: "
                          f"{exc}"[:500]) from exc
    (compiled,) = tpu_compiler.compile_all([text], chip.name, keep_hlo=True)
    if not compiled.ok or not compiled.hlo:
        raise XlaTpuError(f"XLA:TPU did not compile the reference for {chip.name}: "
                          f"{compiled.message or 'no program came back'}")
    price = price_program(compiled.hlo, chip, dots_of(text))
    return XlaTpuBaseline(
        latency_s=price.latency_s, compute_s=price.compute_s, memory_s=price.memory_s,
        overhead_s=price.overhead_s, optimal_seconds=compiled.optimal_seconds,
        fusions=price.ops, chip=chip.name, compiler=compiled.compiler,
        compile_seconds=compiled.seconds, unpriced=price.unpriced,
        compiler_latency_s=price.compiler_latency_s, compiler_compute_s=price.compiler_compute_s)


__all__ = ["FusionPrice", "OutsidePrice", "ProgramPrice", "XlaTpuBaseline", "XlaTpuError",
           "candidate_outside", "price_outside", "price_program", "tpu_baseline"]
