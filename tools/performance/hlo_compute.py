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
  transcendental (negate, exp, add, divide).
- transcendentals (exp, log, tanh, sqrt, rsqrt, sin, power, erf, ...): one EUP op and one
  VPU op per result element (`math.exp` and friends).
- a reduction: one VPU op per input element, each reduced input (`vector.multi_reduction`).
- data movement inside the fusion (broadcast, reshape, transpose, slice, concatenate, pad,
  iota, copy, constants): free, as moves inside VMEM are in a kernel (a copy that changes
  the element type is a convert). An op whose operands
  are all constants (a broadcast constant converted) is folded: free.
- `dot` and `convolution`: counted here only as holding one; their MXU time is the host
  baseline's rule (:func:`tools.performance.baseline.dot_seconds`), given to the fusions
  that hold them in order.

Any other op (gather, scatter, sort, a custom call, a while loop, a reduce-window, ...)
has no rule: it is named, and the program is no baseline (never priced at zero).
"""

from __future__ import annotations

import math
import re

import msgspec

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
RULES: dict[str, tuple[int, int]] = {
    **dict.fromkeys(_ONE_VPU, (1, 0)), **dict.fromkeys(_TRANSCENDENTAL, (1, 1)),
    "clamp": (2, 0), "sign": (7, 0), "logistic": (4, 1),
}
FREE = frozenset({
    "parameter", "constant", "broadcast", "reshape", "bitcast", "transpose", "copy", "slice",
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

    def __add__(self, other: Work) -> Work:
        return Work(self.vpu_ops + other.vpu_ops, self.transcendentals + other.transcendentals,
                    self.dots + other.dots, self.unpriced + other.unpriced)


class Instr(msgspec.Struct, frozen=True):
    name: str
    type_text: str
    opcode: str
    operands: tuple[str, ...]
    rest: str


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
            current.append(Instr(name, type_text, opcode,
                                 tuple(re.findall(r"%([\w.\-]+)", operand_text)), rest))
    return found


def entry_name(hlo: str) -> str | None:
    m = re.search(r"^ENTRY %?([\w.\-]+)", hlo, re.MULTILINE)
    return m.group(1) if m else None


def _dtype(type_text: str) -> str:
    m = re.match(r"\(?(\w+)\[", type_text.strip())
    return m.group(1) if m else ""


def _called(rest: str) -> str | None:
    m = re.search(r"calls=%?([\w.\-]+)", rest)
    return m.group(1) if m else None


class Module:
    """A parsed HLO module whose fused computations are each counted once."""

    def __init__(self, hlo: str) -> None:
        self.computations = parse_computations(hlo)
        self.entry = entry_name(hlo)
        self._memo: dict[str, Work] = {}

    def instr_work(self, ins: Instr, types: dict[str, str]) -> Work:
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
        target = re.search(r'custom_call_target="([^"]+)"', ins.rest)
        return Work(unpriced=(f"{ins.opcode} {ins.name}"
                              + (f" ({target.group(1)})" if target else ""),))

    def computation_work(self, name: str) -> Work:
        """The summed work of a fused computation; an op on constants alone is folded."""
        if name in self._memo:
            return self._memo[name]
        self._memo[name] = Work(unpriced=(f"{name} (calls itself)",))
        types: dict[str, str] = {}
        folded: set[str] = set()
        total = Work()
        for ins in self.computations.get(name, []):
            types[ins.name] = ins.type_text
            if ins.opcode == "constant" or (
                    ins.opcode not in ("parameter", "fusion", *DOTS) and ins.operands
                    and all(o in folded for o in ins.operands)):
                folded.add(ins.name)
                continue
            total = total + self.instr_work(ins, types)
        self._memo[name] = total
        return total


__all__ = ["DOTS", "FREE", "RULES", "Instr", "Module", "Work", "elements", "entry_name",
           "parse_computations"]
