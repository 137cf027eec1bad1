"""A Mosaic kernel's static compute cycles, read from the TPU compiler's bundled schedule.

The compiler's cost analysis gives a Mosaic custom call no ``estimated_cycles``, and its
static LLO profile takes minutes. Its final bundle schedule, which the compile writes in
its normal time when libtpu starts with ``--xla_jf_dump_to=DIR`` (and
``--xla_jf_dump_llo_pass_label_regex=final_bundles$`` keeps the dump to that pass: about ten
small files a program), holds everything needed for a static count: one line per VLIW
bundle (its address, the markers ``LB`` loop body / ``PF`` predicated fallthrough, its
depth of loops ``>``), region starts and ends, each branch (``sbr.rel (%p) target =
$regionN``) and each loop's exit test (``scmp.ge.s32 ... 66 /* loop exit test */``).

How the count is made, all of it:
1. One bundle issues per cycle. The schedule's own delays (latencies the scheduler waited
   out) are its empty bundles, counted; stalls it cannot see (a DMA wait that blocks, a
   sync flag not yet set) are not: this is the compute side, never the memory side.
2. A branch backwards (to a region starting at or before it) closes a loop: the loop's body
   runs from that region's first bundle to the branch's last delay slot. Its trip count is
   the constant of the exit test whose predicate the branch reads, with the index counted
   from 0 by 1 (checked: the compared register is an ``sadd.s32 1`` of the index); a test
   against a register, or none, leaves the trips unknown (``unknown_trips``: no total).
3. A branch forwards skips a predicated region: the bundles after its delay slots up to the
   target region's first bundle. A branch's delay slots run whether or not it is taken:
   four on v5e and v6e, six on v7 (``DELAY_SLOTS``, read off the schedules: the bundles
   between a branch and the end of its branch region).
4. The outermost loop is the grid pipeline: one trip per grid step plus the pipeline's fill
   and drain (1024^2 f32 at 256^3 blocks: 64 steps, 66 trips). Predicated regions directly
   in its body are stage guards: they run on the grid steps, not on the fill and drain
   trips. A grid step's cycles are the body's with its guards run; the predicated regions
   nested in them (the kernel's own ``pl.when`` blocks, such as first- and last-step
   work) are counted on every step (``step_cycles``, an upper bound) or on none
   (``step_floor``, a lower bound); with how often each one runs (from the cost model's
   ``branch_runs``, taken only where the counts of regions and conditions agree), on the
   steps they run (:func:`step_cycles`).
5. A kernel with no loop is one step.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from kernelgraph.errors import KernelgraphError

DELAY_SLOTS: dict[str, int] = {"v5e": 4, "v6e": 4, "v7": 6}
PASS_REGEX = "final_bundles$"  # --xla_jf_dump_llo_pass_label_regex: the one pass read here
_BUNDLE = re.compile(r"^\s*(0x[0-9a-f]+|0)\s+(?:(LH|LB|LE|PB|PF|CT):|:)\s*(>*)\s*\{")
_STARTS = re.compile(r"Start(?:/End empty)? region (\d+)")
_BRANCH = re.compile(r"sbr\.rel\s+(?:\((!?)%(\w+)\)\s+)?target = \$region(\d+)")
_EXIT = re.compile(r"%(\w+) = scmp\.(\w+)\.s32\.totalorder %(\w+), (-?\d+) /\* loop exit test")
_FILE = re.compile(r"^\d+-(.+)-\d+-final_bundles\.txt$")


class LloError(KernelgraphError, ValueError):
    """A bundle schedule this reader cannot follow (the text says where)."""


@dataclass
class Bundle:
    address: int
    marker: str
    depth: int
    text: str


@dataclass
class Node:
    """A loop (with its ``trips`` where they were read), a predicated region, a loop's body or
    the whole program, over the bundle addresses [start, end]; ``children`` nest inside."""

    start: int
    end: int
    kind: str  # "loop" | "region" | "program"
    trips: int | None = None
    children: list[Node] = field(default_factory=list)


class KernelCycles(msgspec.Struct, frozen=True):
    """One Mosaic kernel's static cycles (simulated: the compiler's schedule, counted)."""

    name: str  # the custom call's name in the compiled program
    bundles: int  # bundles in its schedule
    trips: int | None  # trips of the outermost loop (grid steps + pipeline fill and drain)
    step_cycles: int  # one grid step, every nested predicated region run (upper bound)
    step_floor: int  # one grid step, no nested predicated region run (lower bound)
    idle_trip_cycles: int  # a fill or drain trip: the stage guards skipped
    outside_cycles: int  # before and after the outermost loop, once
    regions: list[int] = []  # own cycles of each nested predicated region, in address order
    unknown_trips: int = 0  # loops whose trip count was not read: no total is given


def parse_bundles(text: str) -> list[Bundle]:
    """The schedule's bundles, each with its whole text (some span several lines)."""
    bundles: list[Bundle] = []
    for line in text.splitlines():
        m = _BUNDLE.match(line)
        if m:
            bundles.append(Bundle(int(m.group(1), 16), m.group(2) or "", len(m.group(3)), line))
        elif bundles:
            bundles[-1].text += "\n" + line
    if not bundles:
        raise LloError("no bundles in the schedule (not a final_bundles dump?)")
    for i, b in enumerate(bundles):
        if b.address != i:
            raise LloError(f"bundle {i} is at address {b.address:#x}: the schedule has gaps")
    return bundles


def _trips(bundles: list[Bundle], start: int, end: int, predicate: str) -> int | None:
    """The loop's trip count from the exit test the back branch reads (assumption 2)."""
    for b in bundles[start:end + 1]:
        m = _EXIT.search(b.text)
        if m is None or m.group(1) != predicate:
            continue
        op, index, bound = m.group(2), m.group(3), int(m.group(4))
        counted = any(re.search(rf"%{index} = sadd\.s32 1, %\w+", c.text)
                      for c in bundles[start:end + 1])
        if not counted:
            return None
        return {"ge": bound, "eq": bound, "gt": bound + 1}.get(op)
    return None


def build_tree(bundles: list[Bundle], delay: int = 4) -> Node:
    """Loops and predicated regions of the schedule, nested (assumptions 2 and 3)."""
    starts: dict[int, int] = {}
    for b in bundles:
        for region in _STARTS.findall(b.text):
            starts.setdefault(int(region), b.address)
    nodes: list[Node] = []
    last = len(bundles) - 1
    for b in bundles:
        m = _BRANCH.search(b.text)
        if m is None:
            continue
        negated, predicate, region = m.group(1) == "!", m.group(2), int(m.group(3))
        if region not in starts:
            raise LloError(f"the branch at {b.address:#x} targets region {region}, which "
                           "starts nowhere in the schedule")
        target = starts[region]
        if target <= b.address:
            end = min(b.address + delay, last)
            trips = _trips(bundles, target, end, predicate) if predicate and negated else None
            nodes.append(Node(target, end, "loop", trips))
        elif target > b.address + delay + 1:
            nodes.append(Node(b.address + delay + 1, target - 1, "region"))
    root = Node(0, last, "program")
    nodes.sort(key=lambda n: (n.start, -n.end, n.kind != "loop"))
    stack = [root]
    for node in nodes:
        while node.start > stack[-1].end:
            stack.pop()
        parent = stack[-1]
        if node.end > parent.end:
            raise LloError(f"{node.kind} [{node.start:#x}, {node.end:#x}] overlaps "
                           f"{parent.kind} [{parent.start:#x}, {parent.end:#x}] without nesting")
        parent.children.append(node)
        stack.append(node)
    return root


def cycles(node: Node, *, regions: bool = True) -> tuple[int, int]:
    """(cycles of one run of ``node``, loops whose trips are unknown), loops at their trips
    (an unknown count as one), predicated regions run (``regions``) or skipped."""
    own = node.end - node.start + 1 - sum(c.end - c.start + 1 for c in node.children)
    total, unknown = own, 0
    for child in node.children:
        if child.kind == "region" and not regions:
            continue
        inner, lost = cycles(child, regions=regions)
        if child.kind == "loop":
            unknown += lost + (child.trips is None)
            inner *= child.trips if child.trips is not None else 1
        else:
            unknown += lost
        total += inner
    return total, unknown


def _nested_regions(node: Node) -> list[Node]:
    """Predicated regions under ``node`` in address order (pre-order), loops looked into."""
    found: list[Node] = []
    for child in node.children:
        if child.kind == "region":
            found.append(child)
        found.extend(_nested_regions(child))
    return found


def _own_run(region: Node) -> int:
    """Cycles one run of ``region`` adds beyond its nested predicated regions."""
    return cycles(region, regions=False)[0]


def delay_slots(chip: str) -> int:
    try:
        return DELAY_SLOTS[chip]
    except KeyError:
        raise LloError(f"no branch delay known for chip {chip!r}; known: "
                       f"{', '.join(DELAY_SLOTS)}") from None


def kernel_cycles(text: str, name: str, chip: str = "v6e") -> KernelCycles:
    """Read one kernel's final bundle schedule for ``chip`` (assumptions 1-5)."""
    bundles = parse_bundles(text)
    root = build_tree(bundles, delay_slots(chip))
    loops = [c for c in root.children if c.kind == "loop"]
    if not loops:  # one step: the whole program
        whole, unknown = cycles(root)
        return KernelCycles(name, len(bundles), None, whole, cycles(root, regions=False)[0],
                            0, 0, [_own_run(r) for r in _nested_regions(root)], unknown)
    grid = max(loops, key=lambda n: cycles(n)[0] * (n.trips or 1))
    body = Node(grid.start, grid.end, "body", children=grid.children)
    step, unknown = cycles(body)
    guards = [c for c in grid.children if c.kind == "region"]
    if guards:
        floor = body.end - body.start + 1 - sum(c.end - c.start + 1 for c in body.children)
        for child in body.children:  # guards run, what they nest skipped
            inner = cycles(child, regions=False)[0]
            floor += inner * (child.trips or 1) if child.kind == "loop" else inner
        idle = cycles(body, regions=False)[0]
        nested = [r for g in guards for r in _nested_regions(g)]
        nested += [r for c in body.children if c.kind == "loop" for r in _nested_regions(c)]
        nested.sort(key=lambda r: r.start)
    else:
        floor = idle = cycles(body, regions=False)[0]
        nested = _nested_regions(body)
    rest = Node(root.start, root.end, "program", children=[c for c in root.children
                                                           if c is not grid])
    outside, lost = cycles(rest)
    outside -= grid.end - grid.start + 1
    return KernelCycles(name, len(bundles), grid.trips, step, floor, idle, outside,
                        [_own_run(r) for r in nested], unknown + lost + (grid.trips is None))


def fractions(branch_runs: Sequence[Sequence[int]], steps: int,
              regions: int) -> list[float] | None:
    """How often each nested predicated region runs per grid step, from the cost model's
    ``branch_runs`` (per ``scf.if`` in pre-order: then-runs, else-runs, 1 if known). Only
    where every condition was evaluated and there are as many conditions as regions (the
    compiler if-converts small branches, and an else side may be a region of its own):
    otherwise None, and the upper bound stands."""
    if steps <= 0 or not regions or len(branch_runs) != regions:
        return None
    if any(len(r) < 3 or not r[2] for r in branch_runs):
        return None
    return [r[0] / steps for r in branch_runs]


def step_cycles(k: KernelCycles, runs: Sequence[float] | None = None) -> float:
    """One grid step's cycles: the nested regions on the share of steps they run (``runs``,
    from :func:`fractions`), else every one on every step (the upper bound)."""
    if runs is None or len(runs) != len(k.regions):
        return float(k.step_cycles)
    return k.step_floor + sum(f * c for f, c in zip(runs, k.regions, strict=True))


def total_cycles(k: KernelCycles, grid_steps: int,
                 runs: Sequence[float] | None = None) -> float | None:
    """The whole kernel: ``grid_steps`` steps, the fill and drain trips, and the bundles
    outside the loop; None where a trip count is unknown (assumption 2)."""
    if k.unknown_trips:
        return None
    if k.trips is None:
        return step_cycles(k, runs) + k.outside_cycles
    idle = max(k.trips - grid_steps, 0)
    return k.outside_cycles + grid_steps * step_cycles(k, runs) + idle * k.idle_trip_cycles


def read_dump(folder: str | Path, chip: str = "v6e") -> list[KernelCycles]:
    """Every Mosaic kernel's cycles in a dump folder, in the order the compiler wrote them
    (XLA's own programs, ``TLP`` and ``<late-...>``, are left out)."""
    found: list[tuple[int, KernelCycles]] = []
    for path in sorted(Path(folder).iterdir()):
        m = _FILE.match(path.name)
        if m is None or m.group(1) == "TLP" or m.group(1).startswith("<"):
            continue
        stamp = int(path.name.split("-", 1)[0])
        found.append((stamp, kernel_cycles(path.read_text(errors="replace"), m.group(1), chip)))
    return [k for _, k in sorted(found, key=lambda sk: sk[0])]


__all__ = ["DELAY_SLOTS", "PASS_REGEX", "KernelCycles", "LloError", "build_tree", "cycles",
           "delay_slots", "fractions", "kernel_cycles", "parse_bundles", "read_dump", "step_cycles",
           "total_cycles"]
