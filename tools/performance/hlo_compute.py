"""The kernel model's compute rules applied to the ops of an XLA:TPU program; simulated.

A speedup divides the baseline's price by a kernel's, so both take their compute from the
same rules. A Pallas kernel's compute is counted per Mosaic op (:mod:`tools.lowered.body`,
:mod:`tools.performance.roofline` assumption 4); here each HLO op inside a launched fusion
(nested fusions included) is counted as the Mosaic ops Pallas lowers the same work to,
per element of the HLO shape:

- elementwise arithmetic, compares, selects, integer and bit ops and converts: one VPU op
  per result element (`arith.addf`, `arith.cmpf`, `arith.select`, `arith.extf`, ...);
  `clamp` two (Pallas lowers it to a max and a min); `sign` seven (Pallas's lowering:
  bitcasts, and, or, abs, a compare and a select); `logistic` four VPU ops and one
  transcendental (negate, exp, add, divide); `is-finite` two (`|x| < inf`: Mosaic has no
  rule for `is_finite`, and the offline author writes it so).
- transcendentals (exp, log, tanh, sqrt, rsqrt, sin, power, erf, ...): one EUP op and one
  VPU op per result element (`math.exp` and friends).
- a reduction: one VPU op per input element, each reduced input (`vector.multi_reduction`);
  a `reduce-window` (pooling) one per element of each output window, each reduced input,
  except one whose every window spans the whole input axis (a row's max broadcast back to
  the row): a reduction, one per input element.
- a `transpose`, or a `copy` that changes the layout, that moves data between lanes or
  sublanes in the physical layouts XLA:TPU gave its operand and result (the minor axis,
  or the second minor, comes from another axis; unit axes ignored): the cross-lane unit's
  cycles per vreg of the larger of the two, tile-padded, as a kernel's transpose
  (:mod:`tools.performance.chips`); one that only reorders leading axes, or is a bitcast in
  those layouts, is free; one read only by dots costs what the compiler takes to fold it
  into the MXU's operand ("into_matmul"). A width the compiler's figures do not cover (not
  16 or 32 bits) has no rule.
- other data movement inside the fusion (broadcast, reshape, slice, concatenate, pad,
  iota, copy, constants): free, as moves inside VMEM are in a kernel (a copy that changes
  the element type is a convert). An op whose operands
  are all constants (a broadcast constant converted) is folded: free.
- `dot` and `convolution`: counted here only as holding one; their MXU time is the host
  baseline's rule (:func:`tools.performance.baseline.dot_seconds`), given to the fusions
  that hold them in order.
- `sort` and the `TopK` custom call (what XLA:TPU makes of `lax.top_k`: TopK for a small
  k, a sort of the whole axis and a slice for a large one): compare-exchanges on the VPU,
  counted by :func:`sort_ops` and :func:`top_k_ops` (the algorithm and why it is the one
  assumed are there).

- `gather`: rows moved by index, free as a dynamic slice is (its HBM side is the rows it
  returns: :func:`tools.performance.xla_tpu.price_program`); XLA:TPU's index bookkeeping
  before it (`GatherScatterIndicesBitpacked`, `AssumeGatherIndicesInBound` custom calls) one
  VPU op per index element.
- `scatter`: its combiner (`to_apply`) once per element of the updates, one VPU op each, the
  windows stored in place as a dynamic update slice is (free). Per-index issue costs are
  not counted: a baseline priced low makes a kernel's speedup smaller, never larger.

A while loop is priced by its caller as its body times its trip count
(:mod:`tools.performance.hlo_loops`), and an op on single values (the loop counter's add and
compare) runs on the scalar unit. Any other op (a custom call such as PartialReduce, ...)
has no rule: it is named, and the program is no baseline (never priced at zero).
"""

from __future__ import annotations

import math
import re

import msgspec

from tools.lowered.types import cross_lane_kind, cross_lane_vregs
from tools.performance.baseline import _hlo_bytes
from tools.performance.chips import Chip

# (VPU ops, EUP ops) per result element, mirroring the Mosaic ops Pallas lowers each to.
_ONE_VPU = (
    "add", "subtract", "multiply", "divide", "maximum", "minimum", "negate", "abs", "floor",
    "ceil", "round-nearest-afz", "round-nearest-even", "compare", "select", "remainder",
    "and", "or", "xor", "not", "shift-left", "shift-right-arithmetic",
    "shift-right-logical", "convert", "count-leading-zeros", "popcnt", "bitcast-convert",
)
_TRANSCENDENTAL = (
    "exponential", "exponential-minus-one", "log", "log-plus-one", "tanh", "sine", "cosine",
    "tan", "sqrt", "rsqrt", "cbrt", "power", "atan2", "erf",
)
# XLA:TPU's index bookkeeping before a gather or scatter: one VPU op per index element
INDEX_TARGETS = frozenset({"GatherScatterIndicesBitpacked", "AssumeGatherIndicesInBound"})
RULES: dict[str, tuple[int, int]] = {
    **dict.fromkeys(_ONE_VPU, (1, 0)), **dict.fromkeys(_TRANSCENDENTAL, (1, 1)),
    "clamp": (2, 0), "sign": (7, 0), "logistic": (4, 1), "is-finite": (2, 0),
}
FREE = frozenset({
    "parameter", "constant", "broadcast", "reshape", "bitcast", "copy", "slice",
    "dynamic-slice", "dynamic-update-slice", "concatenate", "pad", "reverse", "iota", "tuple",
    "get-tuple-element", "after-all", "partition-id", "replica-id",
})
DOTS = frozenset({"dot", "convolution"})
_INSTR = re.compile(r"^\s+(?:ROOT )?%?([\w.\-]+) = (.+?) ([\w\-]+)\((.*?)\)(.*)$")
_HEAD = re.compile(r"^(?:ENTRY )?%?([\w.\-]+)\s.*\{\s*$")


class Work(msgspec.Struct, frozen=True):
    """What one launched op asks of the core's units, counted by the kernel model's rules."""

    vpu_ops: float = 0.0
    transcendentals: float = 0.0
    dots: int = 0  # dot and convolution ops held (their MXU time is priced by the caller)
    unpriced: tuple[str, ...] = ()  # ops with no rule, named
    xlu: tuple[tuple[str, int, float], ...] = ()  # (kind, bits, vregs) of each relayout

    def __add__(self, other: Work) -> Work:
        return Work(self.vpu_ops + other.vpu_ops, self.transcendentals + other.transcendentals,
                    self.dots + other.dots, self.unpriced + other.unpriced,
                    self.xlu + other.xlu)

    def xlu_seconds(self, chip: Chip) -> float:
        return sum(chip.xlu_seconds(kind, bits, vregs) for kind, bits, vregs in self.xlu)


class Instr(msgspec.Struct, frozen=True):
    name: str
    type_text: str
    opcode: str
    operands: tuple[str, ...]
    rest: str
    parameter: int = -1  # a parameter's index in its computation
    root: bool = False  # the computation's result
    literal: str = ""  # a constant's value, as the program writes it


def window_ops(ins: Instr, types: dict[str, str]) -> int | None:
    """A `reduce-window`'s VPU ops: one per element of each output window, each reduced
    input; None where its window is not read here. Where every output's window spans the
    whole input along each windowed axis (XLA:TPU writes a row's max broadcast back to the
    row so: a window of 2n - 1 padded by n - 1 on both sides), it is a reduction of the
    row and a broadcast, one op per input element, as a kernel computes it."""
    size = re.search(r"window=\{size=([\dx]+)", ins.rest)
    if size is None:
        return None
    sizes = [int(d) for d in size.group(1).split("x")]
    inputs = ins.operands[:len(ins.operands) // 2]  # then as many init values
    taps = math.prod(sizes)
    shape = (_dims(types.get(inputs[0], "")) or []) if inputs else []
    stride = re.search(r"stride=([\dx]+)", ins.rest)
    pad = re.search(r"pad=([\d_x]+)", ins.rest)
    strides = [int(d) for d in stride.group(1).split("x")] if stride else [1] * len(sizes)
    pads = [tuple(int(v) for v in p.split("_")) for p in pad.group(1).split("x")] if pad \
        else [(0, 0)] * len(sizes)
    out = (_dims(ins.type_text) or []) if not ins.type_text.startswith("(") else []
    if len(shape) == len(sizes) == len(strides) == len(pads) == len(out):
        # output i reads [i * stride - lo, i * stride - lo + w): the last starts at or before
        # the first element, the first ends at or after the last
        whole = all(w == 1 or ((o - 1) * st - lo <= 0 and w - lo >= n)
                    for n, w, st, (lo, _), o in zip(shape, sizes, strides, pads, out, strict=True))
        if whole and taps > 1:
            return sum(elements(types.get(o, "")) for o in inputs)
    return elements(ins.type_text) * taps  # every output's windows


def elements(type_text: str) -> int:
    """Elements of the arrays in an HLO type (a tuple's summed); layouts are ignored."""
    total = 0
    for dims in re.findall(r"\w+\[([\d,]*)\]", type_text):
        total += math.prod(int(d) for d in dims.split(",") if d) if dims else 1
    return total


def parse_computations(hlo: str) -> dict[str, list[Instr]]:
    """Every computation of an HLO module (ENTRY included), its instructions in order."""
    found: dict[str, list[Instr]] = {}
    current: list[Instr] | None = None
    for line in hlo.splitlines():
        head = _HEAD.match(line)
        if head and not line.startswith(" "):
            current = found.setdefault(head.group(1), [])
            continue
        m = _INSTR.match(line)
        if m and current is not None:
            name, type_text, opcode, operand_text, rest = m.groups()
            index = int(operand_text) if opcode == "parameter" and operand_text.isdigit() else -1
            current.append(Instr(name, type_text, opcode,
                                 tuple(re.findall(r"%([\w.\-]+)", operand_text)), rest, index,
                                 line.lstrip().startswith("ROOT "),
                                 operand_text if opcode == "constant" else ""))
    return found


def entry_name(hlo: str) -> str | None:
    m = re.search(r"^ENTRY %?([\w.\-]+)", hlo, re.MULTILINE)
    return m.group(1) if m else None


def _dtype(type_text: str) -> str:
    m = re.match(r"\(?(\w+)\[", type_text.strip())
    return m.group(1) if m else ""


def _dims(type_text: str) -> list[int] | None:
    """The logical dims of the first array in an HLO type (a tuple's first element)."""
    m = re.search(r"\w+\[([\d,]*)\]", type_text)
    return [int(d) for d in m.group(1).split(",") if d] if m else None


def _pow2_at_least(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def bitonic_sort_exchanges(n: int) -> int:
    """Compare-exchanges of a bitonic sorting network over ``n`` (padded to 2^p): (2^p/2)
    p (p+1)/2."""
    m = _pow2_at_least(n)
    p = m.bit_length() - 1
    return m // 2 * p * (p + 1) // 2


def sort_ops(rows: int, n: int, operands: int) -> int:
    """VPU ops of XLA's `sort` of ``rows`` rows of ``n``, carrying ``operands`` arrays: a
    bitonic sorting network (the data-parallel sort whose every step is a select between
    vregs), each compare-exchange one compare and two selects per operand; in XLA's favour,
    as in :func:`top_k_ops`. Never less than one op per element."""
    return max(rows * bitonic_sort_exchanges(n) * (1 + 2 * operands), rows * n)


def top_k_ops(rows: int, n: int, k: int, operands: int = 2) -> int:
    """VPU ops of an exact top-k of ``k`` over each of ``rows`` rows of ``n``; simulated.

    The algorithm assumed is the bitonic top-k (Shanbhag, Pirk and Madden, "Efficient Top-K
    Query Processing on Massively Parallel Hardware", SIGMOD 2018), the data-parallel exact
    top-k with the fewest compare-exchanges for a small k: every run of K (k rounded up to a
    power of two, 2^q) is sorted by a bitonic network ((K/2) q (q+1)/2 compare-exchanges);
    runs are then merged in pairs, each merge keeping the larger of each pair of one run and
    the other reversed (K keep-larger steps) and restoring the order ((K/2) q
    compare-exchanges), until one run is left; where K >= n it is a whole bitonic sort. Why
    this one: XLA:TPU copies TopK's operand into VMEM with the rows along lanes (layout
    `{0,1}`), so each row is one lane and every compare-exchange is a select between vregs,
    as in this network; XLA:TPU's own TopK code is not public and its compiler gives no
    cycles for the op.

    Counted as the kernel model counts (one VPU op per element of each op): a
    compare-exchange of the values and their indices is one compare and two selects per
    operand (5 ops), a keep-larger step one compare and a select per operand (3). In XLA's
    favour: ties cost no extra compare, the comparator's total-order key (its bitcasts, xor
    and select) is taken as made once and not counted, shuffles inside a vreg are free, and
    only logical elements count (no lane padding with fewer than 128 rows). A published v6e
    measurement of XLA's TopK, 32 x 201088 at k=64 in 1010 us (github.com/oliverdutton/
    fast_exact_topk_tpu), is about 16x this rule's price for that shape: where the rule errs,
    the baseline comes out cheaper, never dearer. Never less than one op per element."""
    if rows < 0 or n < 1 or k < 1:
        raise ValueError(f"top-k of {k} over {rows} rows of {n}: sizes must be positive")
    exchange, keep = 1 + 2 * operands, 1 + operands
    run = _pow2_at_least(k)
    if run >= n:
        per_row = bitonic_sort_exchanges(n) * exchange
    else:
        q = run.bit_length() - 1
        runs = -(-n // run)
        per_row = (runs * (run // 2) * q * (q + 1) // 2 * exchange
                   + (runs - 1) * (run * keep + run // 2 * q * exchange))
    return max(rows * per_row, rows * n)


def _ordering_ops(ins: Instr, types: dict[str, str]) -> int | None:
    """A sort's or a TopK custom call's VPU ops; None where its shapes cannot be read."""
    dims = _dims(types.get(ins.operands[0], "")) if ins.operands else None
    if not dims:
        return None
    if ins.opcode == "sort":
        axis = re.search(r"dimensions=\{(\d+)\}", ins.rest)
        if axis is None or int(axis.group(1)) >= len(dims):
            return None
        n = dims[int(axis.group(1))]
        return sort_ops(math.prod(dims) // max(n, 1), n, len(ins.operands))
    out = _dims(ins.type_text)
    if not out or len(out) != len(dims):
        return None
    return top_k_ops(math.prod(dims[:-1]), dims[-1], out[-1])


_LAYOUT = re.compile(r"(\w+)\[([\d,]*)\](?:\{([\d,]*))?")
# HLO element types by width; for the tile padding only the width counts
_WIDTH_TYPES = {"f32": "float32", "s32": "float32", "u32": "float32",
                "bf16": "bfloat16", "f16": "bfloat16", "s16": "bfloat16", "u16": "bfloat16"}


def _physical(type_text: str) -> tuple[str, list[int], list[int]] | None:
    """(element type, logical dims, logical axes from major to minor) of an HLO array type;
    no layout written means row-major."""
    m = _LAYOUT.search(type_text)
    if m is None:
        return None
    dims = [int(d) for d in m.group(2).split(",") if d]
    minor_to_major = [int(a) for a in (m.group(3) or "").split(",") if a]
    if sorted(minor_to_major) != list(range(len(dims))):
        minor_to_major = list(range(len(dims)))[::-1]
    return m.group(1), dims, minor_to_major[::-1]


def cross_lane(ins: Instr, types: dict[str, str], readers: frozenset[str] = frozenset()) -> Work:
    """A transpose's or a same-type copy's work on the cross-lane unit (module doc);
    ``readers``: the opcodes that read its result in its computation."""
    source = _physical(types.get(ins.operands[0], "")) if ins.operands else None
    result = _physical(ins.type_text)
    if source is None or result is None:
        return Work(unpriced=(f"{ins.opcode} {ins.name} (its layouts are not in the program)",))
    perm = list(range(len(result[1])))
    if ins.opcode == "transpose":
        m = re.search(r"dimensions=\{([\d,]*)\}", ins.rest)
        perm = [int(a) for a in m.group(1).split(",") if a] if m else []
        if sorted(perm) != list(range(len(source[1]))) or len(perm) != len(result[1]):
            return Work(unpriced=(f"transpose {ins.name} (its permutation is unreadable)",))
    # the operand's axes in physical order, major to minor, and the same for the result
    # named by the operand axis each comes from; unit axes move nothing
    kind = cross_lane_kind([a for a in source[2] if source[1][a] > 1],
                           [perm[a] for a in result[2] if result[1][a] > 1])
    if not kind:
        return Work()
    if readers and readers <= DOTS:
        kind = "into_matmul"
    width = _WIDTH_TYPES.get(source[0])
    if width is None:
        return Work(unpriced=(f"{ins.opcode} {ins.name} of {source[0]} (the cross-lane unit's "
                              "figures cover 16- and 32-bit elements)",))
    vregs = cross_lane_vregs([source[1][a] for a in source[2]],
                             [result[1][a] for a in result[2]], width)
    return Work(xlu=((kind, 32 if width == "float32" else 16, vregs),))


def _called(rest: str) -> str | None:
    m = re.search(r"calls=%?([\w.\-]+)", rest)
    return m.group(1) if m else None


class Module:
    """A parsed HLO module whose fused computations are each counted once."""

    def __init__(self, hlo: str) -> None:
        self.computations = parse_computations(hlo)
        self.entry = entry_name(hlo)
        self._memo: dict[str, Work] = {}

    def instr_work(self, ins: Instr, types: dict[str, str],
                   readers: frozenset[str] = frozenset()) -> Work:
        """One op's work: by its rule, or its fused computation's summed (module text)."""
        if ins.opcode == "fusion":
            called = _called(ins.rest)
            if called is None or called not in self.computations:
                return Work(unpriced=(f"fusion {ins.name} (its computation is not in the "
                                      "program)",))
            return self.computation_work(called)
        if ins.opcode == "copy" and _dtype(ins.type_text) != _dtype(types.get(
                ins.operands[0] if ins.operands else "", ins.type_text)):
            return Work(float(elements(ins.type_text)))  # a copy that converts: a convert
        if ins.opcode in ("transpose", "copy"):
            return cross_lane(ins, types, readers)
        if ins.opcode in FREE:
            return Work()
        if ins.opcode in DOTS:
            return Work(dots=1)
        if ins.opcode in RULES:
            vpu, eup = RULES[ins.opcode]
            n = elements(ins.type_text)
            return Work(vpu * n, eup * n)
        if ins.opcode == "reduce":
            inputs = ins.operands[:len(ins.operands) // 2]  # then as many init values
            return Work(float(sum(elements(types.get(o, "")) for o in inputs)))
        if ins.opcode == "reduce-window":
            work = window_ops(ins, types)
            if work is not None:
                return Work(float(work))
        if ins.opcode == "gather":  # rows moved by index: free, as a dynamic slice is
            return Work()
        if ins.opcode == "scatter":  # its combiner once per element of the updates
            arrays = (len(ins.operands) - 1) // 2  # operands, the indices, as many updates
            return Work(float(sum(elements(types.get(o, ""))
                                  for o in ins.operands[arrays + 1:])))
        target = re.search(r'custom_call_target="([^"]+)"', ins.rest)
        if target and target.group(1) in INDEX_TARGETS:
            return Work(float(elements(ins.type_text)))  # index arithmetic: one op each
        if ins.opcode == "sort" or (target and target.group(1) == "TopK"):
            ops = _ordering_ops(ins, types)
            if ops is not None:
                return Work(float(ops))
        return Work(unpriced=(f"{ins.opcode} {ins.name}"
                              + (f" ({target.group(1)})" if target else ""),))

    def gathered(self, name: str) -> dict[int, int]:
        """For a fused computation: parameter index -> the bytes its gathers read, for each
        parameter read by nothing but gathers (as the array gathered from): a gather reads
        the rows it returns, not the whole array."""
        instrs = self.computations.get(name, [])
        readers: dict[str, list[tuple[Instr, int]]] = {}
        for ins in instrs:
            for position, operand in enumerate(ins.operands):
                readers.setdefault(operand, []).append((ins, position))
        found: dict[int, int] = {}
        for ins in instrs:
            reads = readers.get(ins.name, [])
            if ins.opcode == "parameter" and ins.parameter >= 0 and reads and all(
                    r.opcode == "gather" and position == 0 for r, position in reads):
                found[ins.parameter] = sum(_hlo_bytes(r.type_text) for r, _ in reads)
        return found

    def computation_work(self, name: str) -> Work:
        """The summed work of a fused computation; an op on constants alone is folded."""
        if name in self._memo:
            return self._memo[name]
        self._memo[name] = Work(unpriced=(f"{name} (calls itself)",))
        types: dict[str, str] = {}
        folded: set[str] = set()
        total = Work()
        readers: dict[str, set[str]] = {}
        for ins in self.computations.get(name, []):
            for operand in ins.operands:
                readers.setdefault(operand, set()).add(ins.opcode)
        for ins in self.computations.get(name, []):
            types[ins.name] = ins.type_text
            if ins.opcode == "constant" or (
                    ins.opcode not in ("parameter", "fusion", *DOTS) and ins.operands
                    and all(o in folded for o in ins.operands)):
                folded.add(ins.name)
                continue
            total = total + self.instr_work(ins, types, frozenset(readers.get(ins.name, ())))
        self._memo[name] = total
        return total


__all__ = ["DOTS", "FREE", "INDEX_TARGETS", "RULES", "Instr", "Module", "Work", "bitonic_sort_exchanges",
           "elements", "entry_name", "parse_computations", "sort_ops", "top_k_ops"]
