"""Compile check for TPU targets on any machine: the real Pallas TPU lowering plus a VMEM budget.

`lower_for_tpu` runs in the child that traced the candidate: it cross-lowers the trace for
TPU (`traced.lower(lowering_platforms=("tpu",))`), which runs the real Mosaic lowering and
rejects block shapes, index maps and ops it cannot compile. Lowering rules that ask for the
chip (`get_tpu_info()`) would fail on a CPU host, so the target chip's record is registered
for the host's device kind while lowering.

`diagnose` turns a lowering or tracing exception into `Diagnostic`s a fix agent can act on:
the message, the kernel, the line in the candidate file and a hint for common errors.

`check_lowered` runs in the parent on the returned text and adds what the lowering does not
check: the VMEM budget. Each blocked VMEM operand holds `buffer_count` copies of its block
(2 by default: the pipeline double-buffers), each padded to the (8 x packing, 128) tile
layout Mosaic uses in VMEM; VMEM scratch adds once. The body's values count too: Mosaic
code-generates each vector op whole (unrolled over vregs), so the largest `vector<...>`
value the body computes (scf.for / scf.if regions included; tile-padded like a block, a
1-D one densely) is live in full alongside the blocks and scratch, and what of it exceeds
the 64 vregs (256 KiB) spills to VMEM. Blocks + scratch + that spill must fit the scoped
limit: `vmem_limit_bytes` when the kernel sets it (and it must not exceed physical VMEM),
else the chip's default. Under that code generation this is a necessary condition, a
lower bound on what the kernel needs, so it refuses no kernel the chip would compile. Not
counted: the other values live at the same time; loads (their bytes are already in a
block and can be re-read), splats, broadcasts, iotas and masks (a vreg's worth, remade
where used); Mosaic's internal scratch and the compiler's other spills. Scalars, SMEM
refs and index values are never VMEM.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec

from tools.lowered.mosaic import (
    LoweredProgram,
    MosaicError,
    MosaicKernel,
    parse_lowered,
)
from tools.lowered.types import VREG_BYTES, tile_padded_bytes
from tools.performance.chips import Chip, get_chip


class Diagnostic(msgspec.Struct, frozen=True):
    """One problem found by the compile check, phrased for a fix agent."""

    message: str
    kernel: str | None = None
    line: int | None = None
    hint: str = ""
    file: str | None = None
    kind: str = "lowering"  # "lowering" | "tracing" | "vmem" | "smem" | "parse"


class KernelVmem(msgspec.Struct, frozen=True):
    kernel: str
    vmem_bytes: int  # blocks + scratch + the largest value's spill past the vregs
    vmem_limit_bytes: int
    blocks_bytes: int
    scratch_bytes: int
    value_bytes: int = 0  # the largest vector value the body produces (tile-padded)
    value_spill_bytes: int = 0  # what of it the vreg file cannot hold


class CompileReport(msgspec.Struct, frozen=True):
    """Verdict of the compile check for one lowered program on one chip."""

    ok: bool
    diagnostics: list[Diagnostic]
    vmem_bytes: int
    vmem_limit_bytes: int
    chip: str
    kernels: list[KernelVmem] = msgspec.field(default_factory=list)
    # Who judged: "emulated compile check", or the TPU compiler (tools/lowered/tpu_compiler.py),
    # which then wins; `emulated_ok` keeps the emulated check's own answer beside it.
    checker: str = "emulated compile check"
    emulated_ok: bool | None = None
    compile_seconds: float | None = None  # the compiler's wall seconds (cached: the first's)


# ----------------------------------------------------------------------------- child side


@contextlib.contextmanager
def tpu_info_for(chip: str) -> Iterator[None]:
    """Make `pltpu.get_tpu_info()` answer with `chip`'s record on a host without a TPU."""
    from tools import jaxprivate
    from tools.performance.chips import jax_tpu_info

    tpu_info = jaxprivate.tpu_info()

    info = jax_tpu_info(chip)
    kind = tpu_info.get_device_kind()
    if tpu_info.chip_version_from_device_kind(kind) is not None:
        yield  # a real TPU answers for itself
        return
    previous = tpu_info.registry.get(kind)
    tpu_info.registry[kind] = lambda: info
    tpu_info.get_tpu_info.cache_clear()
    try:
        yield
    finally:
        if previous is None:
            tpu_info.registry.pop(kind, None)
        else:
            tpu_info.registry[kind] = previous
        tpu_info.get_tpu_info.cache_clear()


def lower_for_tpu(traced: Any, *, chip: str = "v6e") -> str:
    """StableHLO text of `jax.jit(f).trace(*args)` lowered for TPU (runs the Mosaic lowering)."""
    with tpu_info_for(chip):
        return traced.lower(lowering_platforms=("tpu",)).as_text()


_HINTS: tuple[tuple[str, str], ...] = (
    (r"divisible by 8 and 128",
     "Make the last two block dims multiples of (8, 128) (16 rows for bf16, 32 for int8) "
     "or equal to the full array dims; pad the array if its size is not a multiple."),
    (r"rank 1 block|rank-1 block",
     "A 1-D block must equal the array length or be a multiple of 1024 (8 x 128) elements; "
     "reshape to 2-D (rows, 128) instead."),
    (r"missing \d+ required positional argument|takes \d+ positional arguments? but \d+ were given",
     "An index map takes one argument per grid dimension (plus one ref per scalar-prefetch "
     "operand); make its arity match the grid."),
    (r"must return \d+ values to match block_shape",
     "An index map returns one block index per block dimension; return as many values as "
     "the block shape has dims."),
    (r"same number of dimensions as the array",
     "The block shape needs one entry per array dimension (use None / pl.Squeezed() to drop one)."),
    (r"Unimplemented primitive|not implemented|NotImplementedError|Unsupported .*(op|primitive)",
     "This operation has no Mosaic TPU lowering; rewrite it with supported ops (elementwise, "
     "jnp.dot / lax.dot_general, reductions over the last axes, broadcasts) or move it outside "
     "the kernel if it is only layout work."),
    (r"Invalid shape for `swap`|Expected shape|shape mismatch",
     "The value stored into a ref must have the ref's block shape; check the out BlockSpec and "
     "the shape of what the kernel writes."),
    (r"buffering are supported",
     "Use pl.Buffered(1) or pl.Buffered(2); deeper pipelines are not supported here."),
    (r"dimension_semantics",
     "Give one dimension semantic per grid dimension: 'parallel' only where steps are "
     "independent, 'arbitrary' for axes that accumulate."),
    (r"float64|\bf64\b|int64",
     "TPU kernels have no 64-bit types; compute in float32/int32 inside the kernel."),
    (r"[Vv][Mm][Ee][Mm]",
     "Shrink the blocks (VMEM holds two buffers per blocked operand plus scratch) or raise "
     "vmem_limit_bytes in pltpu.CompilerParams, within the chip's physical VMEM."),
    (r"index_map|index map",
     "Check the BlockSpec's index map: it returns block indices (not element offsets), one per "
     "block dimension, within the array's block grid."),
)


def _hint_for(message: str) -> str:
    for pattern, hint in _HINTS:
        if re.search(pattern, message):
            return hint
    return "Read the message; the line points at the candidate code that produced it."


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop()
        if e is None or any(e is s for s in seen):
            continue
        seen.append(e)
        todo.extend([e.__context__, e.__cause__])
    return seen


def _message(exc: BaseException) -> str:
    """The most specific message in the chain, without JAX's stack-trace banner."""
    for e in _chain(exc):
        if type(e).__name__ == "JaxStackTraceBeforeTransformation":
            continue
        text = str(e).strip()
        if text:
            return f"{type(e).__name__}: {text}"
    return type(exc).__name__


def diagnose(exc: BaseException, source_path: str) -> list[Diagnostic]:
    """Turn a tracing/lowering exception into diagnostics pointing into `source_path`."""
    target = os.path.realpath(source_path)
    line: int | None = None
    for e in _chain(exc):  # an index map named in the message beats the pallas_call frame
        m = re.search(r"Index map function .*? at (.+?):(\d+)", str(e))
        if m and os.path.realpath(m.group(1)) == target:
            line = int(m.group(2))
            break
    for e in _chain(exc) if line is None else ():
        for frame in traceback.extract_tb(e.__traceback__):
            if os.path.realpath(frame.filename) == target:
                line = frame.lineno  # deepest frame of the candidate file wins
        if line is not None:
            break
    message = _message(exc)
    if line is None:
        pattern = re.escape(source_path) + r":(\d+)|" + re.escape(target) + r":(\d+)"
        for e in _chain(exc):
            m = re.search(pattern, str(e))
            if m:
                line = int(m.group(1) or m.group(2))
                break
    if line is None:
        line = _line_naming_primitive(message, source_path)
    kernel = None
    m = re.search(r"pallas_call (\w+)", message) or re.search(r"kernel[ =]+'?(\w+)", message)
    if m:
        kernel = m.group(1)
    kind = "lowering" if re.search(r"[Ll]ower|Mosaic|Pallas TPU", message) else "tracing"
    first = message if len(message) <= 2000 else message[:2000] + " ..."
    return [Diagnostic(first, kernel, line, _hint_for(message), source_path, kind)]


def _line_naming_primitive(message: str, source_path: str) -> int | None:
    """For "Unimplemented primitive ...: sort" (no location in the trace), the one line of
    the candidate that names the primitive, when exactly one does."""
    m = re.search(r"Unimplemented primitive in Pallas TPU lowering for \w+: (\w+)", message)
    if not m:
        return None
    try:
        text = Path(source_path).read_text(encoding="utf-8")
    except OSError:
        return None
    hits = [n for n, src in enumerate(text.splitlines(), start=1)
            if re.search(rf"\b{re.escape(m.group(1))}\b", src.split("#")[0])]
    return hits[0] if len(hits) == 1 else None


# ---------------------------------------------------------------------------- parent side


# A TPU core's vector registers: 64 vregs of (8, 128) 32-bit words; a body value larger
# than this cannot be held in registers and spills to VMEM.
VREG_FILE_BYTES = 64 * VREG_BYTES


def kernel_vmem(kernel: MosaicKernel, chip: Chip) -> KernelVmem:
    blocks = sum(
        w.buffer_count * tile_padded_bytes(w.block_shape, w.dtype)
        for w in kernel.windows
        if w.block_shape is not None and w.memory_space == "vmem"
    )
    scratch = sum(
        tile_padded_bytes(s.shape, s.dtype)
        for s in kernel.scratch
        if s.memory_space == "vmem" and s.nbytes > 0
    )
    value = kernel.largest_value.nbytes if kernel.largest_value is not None else 0
    spill = max(0, value - VREG_FILE_BYTES)
    limit = kernel.vmem_limit_bytes or chip.scoped_vmem_limit_bytes
    return KernelVmem(kernel.name, blocks + scratch + spill, limit, blocks, scratch, value, spill)


def kernel_smem(kernel: MosaicKernel) -> int:
    """Bytes of SMEM a kernel holds: prefetched scalars, SMEM blocks and scratch, each
    element padded to a 32-bit word (SMEM is word-addressed)."""
    def words(shape: tuple[int, ...]) -> int:
        return 4 * math.prod(shape) if shape else 4

    total = sum(words(s.shape) for s in kernel.scalar_prefetch)
    total += sum(w.buffer_count * words(w.block_shape) for w in kernel.windows
                 if w.block_shape is not None and w.memory_space == "smem")
    total += sum(words(s.shape) for s in kernel.scratch
                 if s.memory_space == "smem" and s.nbytes > 0)
    return total


def _value_diagnostic(k: MosaicKernel, u: KernelVmem, chip: Chip) -> Diagnostic:
    """The blocks fit but a value the body computes does not: name the op that makes it."""
    v = k.largest_value
    assert v is not None
    shape = "x".join(str(d) for d in v.shape)
    return Diagnostic(
        f"kernel {k.name}: the body computes a {shape} {v.dtype} value (the result of {v.op}, {u.value_bytes} "
        f"bytes tile-padded) that is live in full; beyond the {VREG_FILE_BYTES} bytes of vregs "
        f"it needs {u.value_spill_bytes} bytes of VMEM, which with {u.blocks_bytes} in "
        f"pipelined blocks and {u.scratch_bytes} in scratch is {u.vmem_bytes} bytes, over the "
        f"scoped limit of {min(u.vmem_limit_bytes, chip.vmem_bytes)} bytes on {chip.name}",
        k.name, None,
        "Do not build the whole value at once: tile the dimension it spans (a smaller block, "
        "or a grid axis over it), or loop over chunks with lax.fori_loop and accumulate in a "
        "VMEM scratch buffer (e.g. an online max/sum for a softmax over a wide axis).",
        None, "vmem",
    )


def check_lowered(stablehlo_text: str, *, chip: Chip | str = "v6e",
                  program: LoweredProgram | None = None) -> CompileReport:
    """Check a lowered program's VMEM budget on `chip`; parse failures are diagnostics too
    (``program``: the text's parse, when the caller already has it)."""
    chip = get_chip(chip) if isinstance(chip, str) else chip
    try:
        program = program if program is not None else parse_lowered(stablehlo_text)
    except MosaicError as exc:
        diag = Diagnostic(str(exc), None, None, "The lowered program could not be read.", None, "parse")
        return CompileReport(False, [diag], 0, chip.scoped_vmem_limit_bytes, chip.name)
    diagnostics: list[Diagnostic] = []
    usage = [kernel_vmem(k, chip) for k in program.kernels]
    for k, u in zip(program.kernels, usage, strict=True):
        if u.vmem_limit_bytes > chip.vmem_bytes:
            diagnostics.append(Diagnostic(
                f"kernel {k.name}: vmem_limit_bytes={u.vmem_limit_bytes} exceeds the "
                f"{chip.name} VMEM of {chip.vmem_bytes} bytes",
                k.name, None,
                f"Keep vmem_limit_bytes at or below {chip.vmem_bytes}.", None, "vmem",
            ))
        budget = min(u.vmem_limit_bytes, chip.vmem_bytes)
        if u.vmem_bytes > budget and u.blocks_bytes + u.scratch_bytes <= budget:
            diagnostics.append(_value_diagnostic(k, u, chip))
        elif u.vmem_bytes > budget:
            parts = ", ".join(
                f"{w.role} block {w.block_shape} {w.dtype} x{w.buffer_count}"
                for w in k.windows if w.block_shape is not None and w.memory_space == "vmem"
            )
            diagnostics.append(Diagnostic(
                f"kernel {k.name}: needs {u.vmem_bytes} bytes of VMEM ({u.blocks_bytes} in "
                f"pipelined blocks: {parts}; {u.scratch_bytes} in scratch), over the scoped "
                f"limit of {u.vmem_limit_bytes} bytes on {chip.name}",
                k.name, None, _hint_for("VMEM"), None, "vmem",
            ))
    for k in program.kernels:
        smem = kernel_smem(k)
        if smem > chip.smem_bytes:
            diagnostics.append(Diagnostic(
                f"kernel {k.name}: needs {smem} bytes of SMEM (scalar-prefetch operands, SMEM "
                f"blocks and SMEM scratch, in 4-byte words), over the {chip.smem_bytes} bytes "
                f"of SMEM on {chip.name}",
                k.name, None, "Prefetch fewer scalars (e.g. one row of the table per call) or "
                "keep large tables in HBM and copy the slice a step needs.", None, "smem",
            ))
    total = max((u.vmem_bytes for u in usage), default=0)
    limit = max((u.vmem_limit_bytes for u in usage), default=chip.scoped_vmem_limit_bytes)
    return CompileReport(not diagnostics, diagnostics, total, limit, chip.name, usage)


__all__ = [
    "VREG_FILE_BYTES",
    "CompileReport",
    "Diagnostic",
    "KernelVmem",
    "check_lowered",
    "diagnose",
    "kernel_smem",
    "kernel_vmem",
    "lower_for_tpu",
    "tpu_info_for",
]
