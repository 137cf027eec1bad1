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
in sequence. `cost_analysis()`'s `optimal_seconds` (XLA's own estimate) is kept beside it.

Nothing here replaces the host-program baseline (:mod:`tools.performance.baseline`); it is
shown next to it (`estimate --json`: `baseline_xla_tpu`).
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
    bound: str  # "compute" | "memory" | "overhead"


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


def price_program(hlo: str, chip: Chip) -> tuple[list[FusionPrice], float, float, float]:
    """Each launched op of the ENTRY computation priced; (ops, compute, memory, overhead)."""
    entry = hlo[hlo.find("\nENTRY"):] if "\nENTRY" in hlo else ""
    types: dict[str, str] = {}
    priced: list[FusionPrice] = []
    for line in entry.splitlines()[1:]:
        m = _INSTR.match(line)
        if not m:
            continue
        name, type_text, opcode, operand_text, rest = m.groups()
        types[name] = type_text
        if opcode in _NOT_RUN:
            continue
        operands = re.findall(r"%([\w.\-]+)", operand_text)
        if opcode == "copy-start":  # HBM -> VMEM (or back): the HBM side of the move
            moved = sum(_hbm_bytes(types.get(o, "")) for o in operands)
            memory = moved / chip.hbm_bytes_per_s
            priced.append(FusionPrice(name, opcode, moved, None, 0.0, memory, memory, "memory"))
            continue
        hbm = _hbm_bytes(type_text) + sum(_hbm_bytes(types.get(o, "")) for o in operands)
        cycles = _cycles(rest)
        compute = cycles / chip.clock_hz if cycles else 0.0
        memory = hbm / chip.hbm_bytes_per_s
        launch = KERNEL_LAUNCH_S
        bound = max((("compute", compute), ("memory", memory), ("overhead", launch)),
                    key=lambda kv: kv[1])[0]
        priced.append(FusionPrice(name, opcode, hbm, cycles, compute, memory,
                                  max(compute, memory) + launch, bound))
    compute = sum(f.compute_s for f in priced)
    memory = sum(f.memory_s for f in priced)
    overhead = sum(f.latency_s - max(f.compute_s, f.memory_s) for f in priced)
    return priced, compute, memory, overhead


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
    fusions, compute, memory, overhead = price_program(compiled.hlo, chip)
    ops = sum(f.latency_s for f in fusions if f.opcode != "copy-start")
    copies = sum(f.latency_s for f in fusions if f.opcode == "copy-start")
    return XlaTpuBaseline(
        latency_s=max(ops, copies), compute_s=compute, memory_s=memory,
        overhead_s=overhead, optimal_seconds=compiled.optimal_seconds, fusions=fusions,
        chip=chip.name, compiler=compiled.compiler, compile_seconds=compiled.seconds)





def beside_model(reference_fn: Callable[..., Any], args: Sequence[Any],
                 chip: Chip) -> dict[str, Any] | None:
    """What `estimate --json` shows next to the model's baseline: the XLA:TPU-priced one, or
    why there is none; None where libtpu is not installed."""
    from tools.lowered import tpu_compiler

    if not tpu_compiler.available():
        return None
    try:
        found = tpu_baseline(reference_fn, args, chip)
    except (XlaTpuError, tpu_compiler.TpuCompilerError) as exc:
        return {"error": str(exc)}
    return msgspec.to_builtins(found)


__all__ = ["FusionPrice", "XlaTpuBaseline", "XlaTpuError", "beside_model", "price_program",
           "tpu_baseline"]
