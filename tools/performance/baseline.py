"""Analytic model of the XLA baseline (the task's reference) on one chip; simulated.

The kernel side and assumptions 1-6 are in :mod:`tools.performance.roofline`.

XLA baseline (`reference_cost` compiles the task's reference on the host):
7. The host's post-fusion program stands in for XLA:TPU's: flops and transcendentals from
   its `cost_analysis()`, bytes as each launched fusion's operands + result, except that the
   host's dtype-legalisation converts (XLA:CPU widens bf16 dot operands to f32 and narrows
   results in separate convert fusions; TPU fuses or skips them) are transparent; the raw
   `bytes accessed` is kept beside it. Fusions run one after another, each at achievable
   rates: a fusion takes max(its bytes at HBM bandwidth, its dots' MXU time at
   `XLA_MXU_EFFICIENCY` of the padded peak) plus one `KERNEL_LAUNCH_S`, so an elementwise
   pass XLA leaves outside a matmul (`mask * (x @ y)`) costs its own trip through HBM.
   Dots (from the StableHLO, in program order) go to the fusions that hold a dot, in
   order; the other flops (VPU) and transcendentals (EUP) overlap the whole program.
   A convolution is a dot on the MXU (XLA:TPU lowers it to one): M = batch x output
   positions, N = output channels, K = input channels x window (per feature group; the
   groups are its batch), padded as dots are.
   `XLA_MXU_EFFICIENCY` = 0.95 is fitted to the matmul guide's XLA rows on v5e
   (`tools/performance/calibration.py`: 94-97% of peak once dispatch is taken out).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from tools.lowered.types import split_shaped
from tools.performance.chips import Chip
from tools.performance.roofline import KERNEL_LAUNCH_S, padded_matmul_flops


class DotShape(msgspec.Struct, frozen=True):
    batch: int
    m: int
    n: int
    k: int
    dtype: str


XLA_MXU_EFFICIENCY = 0.95


class FusionCost(msgspec.Struct, frozen=True):
    """One launched kernel of the reference's program: its HBM bytes, and whether it holds a dot."""

    bytes: int
    has_dot: bool


class ReferenceCost(msgspec.Struct, frozen=True):
    """The reference's post-fusion cost (assumption 7), chip-independent."""

    flops: float
    bytes_accessed: float  # launched fusions' operands + results, host-only converts removed
    transcendentals: float
    raw_bytes_accessed: float  # as the host's cost_analysis() reported it
    n_kernels: int
    dots: list[DotShape]
    source: str = "XLA:CPU post-fusion cost_analysis()"
    fusions: list[FusionCost] = []

    @property
    def dot_flops(self) -> float:
        return float(sum(2 * d.batch * d.m * d.n * d.k for d in self.dots))


def reference_cost(reference_fn: Callable[..., Any], args: Sequence[Any]) -> ReferenceCost:
    """Compile the trusted reference on the host and read its post-fusion cost."""
    import jax

    lowered = jax.jit(reference_fn).lower(*args)
    compiled = lowered.compile()
    analysis = compiled.cost_analysis()
    if isinstance(analysis, list):  # older jax returned one dict per computation
        analysis = analysis[0] if analysis else {}
    analysis = analysis or {}
    hlo = compiled.as_text() or ""
    entry_bytes, n_kernels, fusions = _entry_bytes(hlo)
    raw = float(analysis.get("bytes accessed", 0.0))
    return ReferenceCost(
        flops=float(analysis.get("flops", 0.0)),
        bytes_accessed=float(entry_bytes) if n_kernels else raw,
        transcendentals=float(analysis.get("transcendentals", 0.0)),
        raw_bytes_accessed=raw,
        n_kernels=max(n_kernels, 1),
        dots=_dots(lowered.as_text()),
        fusions=fusions,
    )


_HLO_BITS = {"f64": 64, "f32": 32, "bf16": 16, "f16": 16, "s64": 64, "s32": 32, "s16": 16,
             "s8": 8, "u64": 64, "u32": 32, "u16": 16, "u8": 8, "pred": 8, "s4": 4, "u4": 4,
             "f8e4m3fn": 8, "f8e5m2": 8}
_NOT_KERNELS = frozenset({"parameter", "constant", "tuple", "get-tuple-element", "bitcast"})


class TaskWork(msgspec.Struct, frozen=True):
    """The least work any program for a task does: its operands and results moved once, and
    its flops (the task's own count, else the reference's as XLA reports them)."""

    min_bytes: int
    flops: float


def task_work(task: Any, shape_index: int = 0) -> TaskWork:
    """Shapes only: nothing of the task is made or run, unless its `flops()` reads values."""
    import jax

    from tools.inputs.tasks import TaskError

    args = task.input_specs(shape_index)
    outs = jax.tree.leaves(jax.eval_shape(task.reference, *args))
    min_bytes = sum(a.size * a.dtype.itemsize for a in [*args, *outs])
    try:
        flops = task.flops(shape_index, args)
    except TaskError:  # a flops() that reads values, not only shapes
        flops = task.flops(shape_index, task.make_inputs(0, shape_index))
    if flops is None:
        flops = reference_cost(task.reference, args).flops
    return TaskWork(int(min_bytes), float(flops))


def task_dots(task: Any, shape_index: int = 0) -> list[DotShape]:
    """The reference's dots and convolutions at a shape, from its lowering (nothing compiled
    or run): what no kernel computes in fewer padded MXU passes."""
    import jax

    return dots_of(jax.jit(task.reference_at(shape_index)).lower(*task.input_specs(shape_index)).as_text())


def _hlo_bytes(type_text: str) -> int:
    total = 0
    for dtype, dims in re.findall(r"(\w+)\[([\d,]*)\]", type_text):
        if dtype in _HLO_BITS:
            count = math.prod(int(d) for d in dims.split(",") if d) if dims else 1
            total += math.ceil(count * _HLO_BITS[dtype] / 8)
    return total


def _computation_ops(hlo: str) -> dict[str, set[str]]:
    computations: dict[str, set[str]] = {}
    current = None
    for line in hlo.splitlines():
        head = re.match(r"^(?:ENTRY )?%?([\w.\-]+)\s.*\{\s*$", line)
        if head and not line.startswith(" "):
            current = head.group(1)
            computations[current] = set()
            continue
        m = re.match(r"\s+(?:ROOT )?%?[\w.\-]+ = .*? ([\w\-]+)\(", line)
        if current is not None and m:
            computations[current].add(m.group(1))
    return computations


_INSTR = re.compile(r"\s+(?:ROOT )?%?([\w.\-]+) = (.+?) ([\w\-]+)\(([^)]*)\)(.*)$")


def _entry_bytes(hlo: str) -> tuple[int, int, list[FusionCost]]:
    """(HBM bytes, launched kernels) of the ENTRY computation, host-only converts removed.

    Each launched op reads its operands and writes its result. A fusion of nothing but
    converts (XLA:CPU's dtype legalisation) is transparent: its readers read its input
    instead, and a convert after a kernel narrows that kernel's output (TPU fuses both).
    """
    computations = _computation_ops(hlo)
    entry = hlo[hlo.find("ENTRY"):] if "ENTRY" in hlo else ""
    size: dict[str, int] = {}
    source: dict[str, str] = {}  # transparent convert -> what it reads
    kernels: dict[str, list[str]] = {}
    dotted: set[str] = set()
    widened: dict[str, float] = {}  # host-only widening converts -> how much wider
    for line in entry.splitlines()[1:]:
        m = _INSTR.match(line)
        if not m:
            continue
        name, type_text, opcode, operand_text, rest = m.groups()
        operands = re.findall(r"%([\w.\-]+)", operand_text)
        size[name] = _hlo_bytes(type_text)
        if opcode in _NOT_KERNELS:
            continue
        calls = re.search(r"calls=%?([\w.\-]+)", rest)
        body = computations.get(calls.group(1), set()) if calls and opcode == "fusion" else set()
        only_converts = opcode == "convert" or (
            bool(body) and body <= {"parameter", "convert", "bitcast", "copy"} and "convert" in body
        )
        if only_converts and len(operands) == 1:
            src = source.get(operands[0], operands[0])
            if src in kernels:
                size[src] = min(size[src], size[name])
            elif size.get(src) and size[name] > size[src]:
                widened[name] = size[name] / size[src]
            source[name] = src
            continue
        kernels[name] = [source.get(o, o) for o in operands]
        if opcode == "dot" or "dot" in body or "convolution" in body or opcode == "convolution":
            dotted.add(name)
            ratios = [widened.get(o, 1.0) for o in operands]
            if ratios and min(ratios) > 1.0:  # operands widened for the host: TPU keeps
                size[name] = math.ceil(size[name] / min(ratios))  # the narrow result
    per = {k: size[k] + sum(size.get(o, 0) for o in ops) for k, ops in kernels.items()}
    fusions = [FusionCost(per[k], k in dotted) for k in kernels]
    return sum(per.values()), len(kernels), fusions


def dots_of(stablehlo_text: str) -> list[DotShape]:
    """The dots and convolutions of a StableHLO module as MXU matmuls, in program order."""
    return _dots(stablehlo_text)


def _dots(stablehlo_text: str) -> list[DotShape]:
    dots: list[DotShape] = []
    for line in stablehlo_text.splitlines():
        if "stablehlo.convolution" in line:
            conv = _conv_as_dot(line)
            if conv is not None:
                dots.append(conv)
            continue
        if "stablehlo.dot_general" not in line and "stablehlo.dot " not in line:
            continue
        sig = re.search(r":\s*\((tensor<[^>]*>),\s*(tensor<[^>]*>)\)\s*->", line)
        if not sig:
            continue
        _, lhs, ldt, _ = split_shaped(sig.group(1))
        _, rhs, rdt, _ = split_shaped(sig.group(2))

        def dims(name: str, line: str = line) -> list[int]:
            m = re.search(name + r"\s*=\s*\[([\d,\s]*)\]", line)
            return [int(x) for x in m.group(1).split(",") if x.strip()] if m else []

        lb, rb = dims("batching_dims") or dims("lhs_batching_dimensions"), []
        lc = dims("contracting_dims") or dims("lhs_contracting_dimensions")
        pair = re.search(r"batching_dims = \[([\d, ]*)\] x \[([\d, ]*)\]", line)
        if pair:
            lb = [int(x) for x in pair.group(1).split(",") if x.strip()]
            rb = [int(x) for x in pair.group(2).split(",") if x.strip()]
        cpair = re.search(r"contracting_dims = \[([\d, ]*)\] x \[([\d, ]*)\]", line)
        rc: list[int] = []
        if cpair:
            lc = [int(x) for x in cpair.group(1).split(",") if x.strip()]
            rc = [int(x) for x in cpair.group(2).split(",") if x.strip()]
        if not lc and len(lhs) >= 1:
            lc, rc = [len(lhs) - 1], [0]
        rb = rb or dims("rhs_batching_dimensions")
        rc = rc or dims("rhs_contracting_dimensions") or [0]
        k = math.prod(lhs[i] for i in lc)
        batch = math.prod(lhs[i] for i in lb) if lb else 1
        m = math.prod(s for i, s in enumerate(lhs) if i not in lc and i not in lb)
        n = math.prod(s for i, s in enumerate(rhs) if i not in rc and i not in rb)
        wider = ldt if _HLO_BITS.get(_short(ldt), 32) >= _HLO_BITS.get(_short(rdt), 32) else rdt
        dots.append(DotShape(batch, m, n, k, wider))
    return dots


_CONV_DIMS = re.compile(r"\[([^\]]*)\]x\[([^\]]*)\]->\[([^\]]*)\]")


def _conv_as_dot(line: str) -> DotShape | None:
    """A `stablehlo.convolution` as the matmul the MXU does: M = batch x output positions,
    N = output channels, K = input channels x window, one per feature (or batch) group.
    None when the line is not in a form read here (the conv is then priced as VPU flops)."""
    sig = re.search(r":\s*\((tensor<[^>]*>),\s*(tensor<[^>]*>)\)\s*->\s*(tensor<[^>]*>)", line)
    labels = _CONV_DIMS.search(line)
    if not sig or not labels:
        return None
    _, lhs, ldt, _ = split_shaped(sig.group(1))
    _, rhs, rdt, _ = split_shaped(sig.group(2))
    _, out, _, _ = split_shaped(sig.group(3))
    lhs_l, rhs_l, out_l = ([x.strip() for x in g.split(",")] for g in labels.groups())
    if not (len(lhs_l) == len(lhs) and len(rhs_l) == len(rhs) and len(out_l) == len(out)):
        return None
    groups = 1
    for name in ("feature_group_count", "batch_group_count"):
        count = re.search(name + r"\s*=\s*(\d+)", line)
        groups *= int(count.group(1)) if count else 1
    try:
        channels = out[out_l.index("f")]
        positions = math.prod(s for s, label in zip(out, out_l, strict=True) if label.isdigit())
        window = math.prod(s for s, label in zip(rhs, rhs_l, strict=True) if label.isdigit())
        m = out[out_l.index("b")] * positions
        k = rhs[rhs_l.index("i")] * window
    except ValueError:  # a label missing: not a layout read here
        return None
    wider = ldt if _HLO_BITS.get(_short(ldt), 32) >= _HLO_BITS.get(_short(rdt), 32) else rdt
    return DotShape(groups, m, max(channels // groups, 1), k, wider)


def _short(dtype: str) -> str:
    return {"float32": "f32", "bfloat16": "bf16", "float16": "f16", "float64": "f64",
            "int8": "s8", "int32": "s32"}.get(dtype, dtype)


class BaselineEstimate(msgspec.Struct, frozen=True):
    latency_s: float
    compute_s: float
    memory_s: float
    overhead_s: float
    flops: float
    bytes_accessed: float
    matmul_padded_flops: float
    bound: str


def dot_seconds(d: DotShape, chip: Chip) -> float:
    """One dot's MXU time as XLA runs it: padded flops at `XLA_MXU_EFFICIENCY` of the peak
    for its operands' dtype (assumption 7)."""
    padded = padded_matmul_flops(d.batch, d.m, d.n, d.k, chip.mxu_dim)
    return padded / (chip.matmul_peak(d.dtype) * XLA_MXU_EFFICIENCY)


def share_dots(counts: Sequence[int], dot_s: Sequence[float]) -> list[float]:
    """MXU seconds per fusion: ``counts[i]`` dots held by fusion i take the program's dots
    (``dot_s``, in program order) in order; where the counts do not add up to the dots, the
    dots' time is spread evenly over the fusions holding one."""
    share = [0.0] * len(counts)
    holders = [i for i, c in enumerate(counts) if c]
    if not dot_s or not holders:
        return share
    if sum(counts) == len(dot_s):
        at = 0
        for i in holders:
            share[i] = float(sum(dot_s[at:at + counts[i]]))
            at += counts[i]
    else:
        for i in holders:
            share[i] = sum(dot_s) / len(holders)
    return share


def estimate_baseline(cost: ReferenceCost, chip: Chip) -> BaselineEstimate:
    """Simulated XLA latency of the reference on `chip` (assumption 7)."""
    dot_s = [dot_seconds(d, chip) for d in cost.dots]
    padded = float(sum(padded_matmul_flops(d.batch, d.m, d.n, d.k, chip.mxu_dim)
                       for d in cost.dots))
    mxu_s = sum(dot_s)
    other = max(cost.flops - cost.dot_flops, 0.0)
    side = max(other / chip.vpu_ops_per_s, cost.transcendentals / chip.transcendentals_per_s)
    bw = chip.hbm_bytes_per_s
    memory = cost.bytes_accessed / bw
    fusions = cost.fusions or [FusionCost(round(cost.bytes_accessed), bool(cost.dots))]
    if dot_s and any(f.has_dot for f in fusions):
        share = share_dots([int(f.has_dot) for f in fusions], dot_s)
        serial = sum(max(f.bytes / bw, s) for f, s in zip(fusions, share, strict=True))
    else:
        serial = sum(f.bytes / bw for f in fusions) if fusions else memory
        serial = max(serial, mxu_s)
    compute = max(mxu_s, side)
    overhead = cost.n_kernels * KERNEL_LAUNCH_S
    latency = max(serial, side) + overhead
    bound = max((("memory", memory), ("compute", compute), ("overhead", overhead)), key=lambda kv: kv[1])[0]
    return BaselineEstimate(latency, compute, memory, overhead, cost.flops, cost.bytes_accessed, padded, bound)


__all__ = [
    "XLA_MXU_EFFICIENCY",
    "BaselineEstimate",
    "DotShape",
    "FusionCost",
    "ReferenceCost",
    "TaskWork",
    "dot_seconds",
    "dots_of",
    "estimate_baseline",
    "reference_cost",
    "share_dots",
    "task_work",
]
