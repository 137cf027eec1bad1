"""The XLA baseline priced from XLA:TPU's own optimised program; simulated.

Where libtpu is installed (:mod:`tools.lowered.tpu_compiler`), the task's reference is
lowered for TPU (in the parent, as `reference_cost` compiles it for the host: the reference
is the task's trusted code) and compiled for the target chip in the sandboxed compile child,
which returns the optimised, scheduled HLO. Its ENTRY computation is what runs: XLA:TPU's
real fusions, their tiled layouts and memory spaces (`S(1)`: VMEM, `S(2)`: SMEM), async
HBM->VMEM copies, and, in each fusion's backend config, the compiler's static estimate
of its cycles (`estimated_cycles`).

Each launched op is priced as the model prices a kernel step: compute from the compiler
(its estimated cycles at the chip's clock), memory from the model (the bytes of its
operands and result that live in HBM, at HBM bandwidth), the larger of the two, plus one
`KERNEL_LAUNCH_S` per fusion; ops run one after another. An async copy (copy-start) moves
its operand's bytes through HBM with no launch of its own, overlapped with the ops XLA
scheduled around it: the program takes the longer of its ops in sequence and its copies
in sequence. A pure move (copy, reshape, transpose, slice, ...) the compiler gives no
cycles for costs its HBM bytes and a launch; a custom call that only reserves a buffer
(`AllocateBuffer`) costs nothing. Any other op without the compiler's cycles (a custom
call such as TopK or a Mosaic kernel, a gather fusion, a while loop) has no rule here: it is
named in ``unpriced``, never priced at zero, and such a program is not a baseline.
`cost_analysis()`'s `optimal_seconds` (XLA's own estimate) is kept beside it.

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
from tools.performance.baseline import _hlo_bytes
from tools.performance.chips import Chip
from tools.performance.roofline import KERNEL_LAUNCH_S

_NOT_RUN = frozenset({"parameter", "constant", "tuple", "get-tuple-element", "bitcast",
                      "copy-done", "after-all", "partition-id", "replica-id"})
# Ops that only move bytes: without the compiler's cycles they are priced by their HBM bytes.
_MOVES = frozenset({"copy", "reshape", "transpose", "slice", "dynamic-slice",
                    "dynamic-update-slice", "concatenate", "pad", "broadcast", "reverse",
                    "bitcast-convert"})
# Custom calls that do no work of their own (XLA:TPU reserves a buffer).
_FREE_TARGETS = frozenset({"AllocateBuffer"})
_INSTR = re.compile(r"^\s+(?:ROOT )?%?([\w.\-]+) = (.+?) ([\w\-]+)\((.*?)\)(.*)$")


class FusionPrice(msgspec.Struct, frozen=True):
    """One launched op of XLA:TPU's program and what bound it."""

    name: str
    opcode: str
    hbm_bytes: int  # operands + result held in HBM (no memory-space annotation)
    cycles: int | None  # the compiler's estimated_cycles, where it gives one
    compute_s: float
    memory_s: float
    latency_s: float
    bound: str  # "compute" | "memory" | "overhead" | "unpriced"


class ProgramPrice(msgspec.Struct, frozen=True):
    """XLA:TPU's program priced op by op. ``unpriced`` names each op the pricer has no rule
    for (no compiler cycles and not a pure move: a custom call such as TopK, a gather fusion,
    a while loop); where it is not empty the latency leaves work out and is no baseline."""

    ops: list[FusionPrice]
    latency_s: float  # the longer of the ops in sequence and the async copies in sequence
    compute_s: float
    memory_s: float
    overhead_s: float
    unpriced: list[str] = []


class XlaTpuBaseline(msgspec.Struct, frozen=True):
    latency_s: float
    compute_s: float  # the ops' compiler cycles, summed
    memory_s: float  # the ops' HBM bytes at bandwidth, summed
    overhead_s: float
    optimal_seconds: float | None  # cost_analysis() of the compiled program
    fusions: list[FusionPrice]
    chip: str
    compiler: str
    compile_seconds: float
    source: str = "XLA:TPU optimised program (libtpu ahead of time); per op: max(compiler " \
                  "estimated_cycles at the clock, HBM bytes at bandwidth) + launch"
    unpriced: list[str] = []  # ops with no pricing rule: the latency is not a baseline


class XlaTpuError(KernelgraphError, RuntimeError):
    """The reference could not be compiled for TPU (a figure is missing, not a verdict)."""


def _hbm_bytes(type_text: str) -> int:
    """Bytes of the arrays in ``type_text`` that live in HBM (no ``S(n)`` memory space)."""
    total = 0
    for piece in re.findall(r"\w+\[[\d,]*\](?:\{[^}]*\})?", type_text):
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


def price_program(hlo: str, chip: Chip) -> ProgramPrice:
    """Each launched op of the ENTRY computation priced (assumptions in the module's text).

    An op with the compiler's cycles: max(cycles at the clock, HBM bytes at bandwidth) plus
    a launch; a pure move without them: its HBM bytes plus a launch; an async copy: its HBM
    bytes, overlapped. Any other op has no rule: it is listed in ``unpriced``, never free."""
    entry = hlo[hlo.find("\nENTRY"):] if "\nENTRY" in hlo else ""
    types: dict[str, str] = {}
    priced: list[FusionPrice] = []
    unpriced: list[str] = []
    for line in entry.splitlines()[1:]:
        m = _INSTR.match(line)
        if not m:
            continue
        name, type_text, opcode, operand_text, rest = m.groups()
        types[name] = type_text
        if opcode in _NOT_RUN:
            continue
        target = re.search(r'custom_call_target="([^"]+)"', rest)
        if opcode == "custom-call" and target and target.group(1) in _FREE_TARGETS:
            continue
        operands = re.findall(r"%([\w.\-]+)", operand_text)
        if opcode == "copy-start":  # HBM -> VMEM (or back): the HBM side of the move
            moved = sum(_hbm_bytes(types.get(o, "")) for o in operands)
            memory = moved / chip.hbm_bytes_per_s
            priced.append(FusionPrice(name, opcode, moved, None, 0.0, memory, memory, "memory"))
            continue
        hbm = _hbm_bytes(type_text) + sum(_hbm_bytes(types.get(o, "")) for o in operands)
        cycles = _cycles(rest)
        memory = hbm / chip.hbm_bytes_per_s
        if cycles is None and opcode not in _MOVES:  # no rule: named, never priced at zero
            unpriced.append(f"{opcode} {name}" + (f" ({target.group(1)})" if target else ""))
            priced.append(FusionPrice(name, opcode, hbm, None, 0.0, memory, 0.0, "unpriced"))
            continue
        compute = cycles / chip.clock_hz if cycles else 0.0
        launch = KERNEL_LAUNCH_S
        bound = max((("compute", compute), ("memory", memory), ("overhead", launch)),
                    key=lambda kv: kv[1])[0]
        priced.append(FusionPrice(name, opcode, hbm, cycles, compute, memory,
                                  max(compute, memory) + launch, bound))
    ran = [f for f in priced if f.bound != "unpriced"]
    ops = sum(f.latency_s for f in ran if f.opcode != "copy-start")
    copies = sum(f.latency_s for f in ran if f.opcode == "copy-start")
    return ProgramPrice(
        ops=priced, latency_s=max(ops, copies),
        compute_s=sum(f.compute_s for f in ran), memory_s=sum(f.memory_s for f in ran),
        overhead_s=sum(f.latency_s - max(f.compute_s, f.memory_s) for f in ran),
        unpriced=unpriced)


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
    price = price_program(compiled.hlo, chip)
    return XlaTpuBaseline(
        latency_s=price.latency_s, compute_s=price.compute_s, memory_s=price.memory_s,
        overhead_s=price.overhead_s, optimal_seconds=compiled.optimal_seconds,
        fusions=price.ops, chip=chip.name, compiler=compiled.compiler,
        compile_seconds=compiled.seconds, unpriced=price.unpriced)


__all__ = ["FusionPrice", "ProgramPrice", "XlaTpuBaseline", "XlaTpuError", "price_program",
           "tpu_baseline"]
