"""Which `pl.when` bodies ran, and how often, in each kernel run under TPU interpret mode.

The cost model prices every `scf.if` of a kernel's Mosaic body by how often it believes each
side runs. Interpret mode runs the kernel's jaxpr instead, where the same conditionals are
`cond` equations, so to compare the two the conditionals are laid out here the way the
Mosaic lowering emits them (jax 0.10's `_cond_lowering_rule` and `_lower_jaxpr_to_for_loop`):

- in program order, each `scf.if` before the ifs nested in it (pre-order, then-region first);
- a `cond` with branches b0..bk is a cascade of k ifs on `index != 0`, `index - 1 != 0`, ...
  whose then-regions nest, so its branches come last to first (bk, ..., b0); if j runs when
  the index is at least j-1, its then side when the index is at least j;
- a `cond` on a literal index is inlined (no if; only that branch is lowered);
- a loop body unrolled u times appears as often as the lowering copies it (the copies
  share one jaxpr, so their counts are compared summed);
- `pjit` and `run_scoped` bodies are inline; a while loop's body once.

Anything this layout cannot mirror (a conditional inside a while loop's condition or inside
another higher-order primitive, one branch jaxpr shared by two conditionals) marks it
incomplete, and incomplete layouts are not compared. The counting itself wraps the
interpreter's jaxpr evaluator: entering a registered kernel body records its layout, and
entering a registered branch adds one to that branch's count, through an IO callback that
runs only when the interpreted program really takes the branch.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

from tools import jaxprivate

_INLINE = {"pjit": "jaxpr", "jit": "jaxpr", "closed_call": "call_jaxpr",
           "run_scoped": "jaxpr"}


@dataclass
class Layout:
    """One kernel body's conditionals in Mosaic order: `slots[s] = (cond, j)` is the s-th
    `scf.if` (cond number, cascade level j >= 1); `branches` maps each branch jaxpr's id to
    (cond, branch index); `complete` is False where the layout cannot mirror the lowering."""

    slots: list[tuple[int, int]] = field(default_factory=list)
    branches: dict[int, tuple[int, int]] = field(default_factory=dict)
    n_conds: int = 0
    complete: bool = True
    _keep: list[Any] = field(default_factory=list)  # the jaxprs whose ids are keys

    def counts(self, runs: dict[tuple[int, int], int]) -> list[list[int]]:
        """Per slot [cond, j, then runs, else runs] from per-branch run counts."""
        out = []
        for cond, j in self.slots:
            then = sum(n for (c, b), n in runs.items() if c == cond and b >= j)
            other = runs.get((cond, j - 1), 0)
            out.append([cond, j, then, other])
        return out


def _copies(length: int, unroll: Any) -> int:
    """How many times the Mosaic lowering copies a scan body of `length` steps."""
    u = int(unroll)
    if u == 0:
        u = length
    if u <= 1:
        return 1
    return (u if length >= u else 0) + length % u


def _has_cond(jaxpr: Any) -> bool:
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "cond":
            return True
        if any(_has_cond(sub) for sub in sub_jaxprs(eqn)):
            return True
    return False


def sub_jaxprs(eqn: Any) -> list[Any]:
    """The jaxprs an equation holds in its parameters (branches, bodies, callees)."""
    core = jaxprivate.core()
    found: list[Any] = []
    for value in eqn.params.values():
        for item in value if isinstance(value, tuple | list) else (value,):
            if isinstance(item, core.ClosedJaxpr):
                found.append(item.jaxpr)
            elif isinstance(item, core.Jaxpr):
                found.append(item)
    return found


def _inner(eqn: Any) -> Any:
    value = eqn.params.get(_INLINE[eqn.primitive.name])
    return getattr(value, "jaxpr", value)


def layout_of(body: Any) -> Layout:
    """The conditionals of a kernel body jaxpr in the order Mosaic lowers them."""
    core = jaxprivate.core()
    layout = Layout()

    def walk(jaxpr: Any) -> list[tuple[int, int]]:
        slots: list[tuple[int, int]] = []
        for eqn in jaxpr.eqns:
            name = eqn.primitive.name
            if name == "cond":
                branches = [b.jaxpr for b in eqn.params["branches"]]
                cond = layout.n_conds
                layout.n_conds += 1
                for index, branch in enumerate(branches):
                    if id(branch) in layout.branches:  # shared: runs cannot be told apart
                        layout.complete = False
                    layout.branches[id(branch)] = (cond, index)
                    layout._keep.append(branch)
                selector = eqn.invars[0]
                if isinstance(selector, core.Literal):  # inlined by the lowering
                    chosen = min(max(int(selector.val), 0), len(branches) - 1)
                    slots += walk(branches[chosen])
                    continue
                slots += [(cond, j) for j in range(1, len(branches))]
                for branch in reversed(branches):
                    slots += walk(branch)
            elif name == "scan":
                body_slots = walk(eqn.params["jaxpr"].jaxpr)
                slots += body_slots * _copies(int(eqn.params["length"]), eqn.params["unroll"])
            elif name == "while":
                if _has_cond(eqn.params["cond_jaxpr"].jaxpr):
                    layout.complete = False
                slots += walk(eqn.params["body_jaxpr"].jaxpr)
            elif name in _INLINE and _inner(eqn) is not None:
                slots += walk(_inner(eqn))
            elif any(_has_cond(sub) for sub in sub_jaxprs(eqn)):
                layout.complete = False
        return slots

    layout.slots = walk(body)
    return layout


class BranchCounter:
    """Registers kernel bodies before they are interpreted and counts, at run time, each
    branch taken into the current kernel run's record (`record()` gives it)."""

    def __init__(self, record: Any) -> None:
        self._record = record  # () -> the current KernelVisits, or None
        self._roots: dict[int, tuple[Any, Layout]] = {}
        self._branches: dict[int, tuple[Layout, int, int]] = {}

    def register(self, body: Any) -> None:
        if id(body) in self._roots and self._roots[id(body)][0] is body:
            return
        layout = layout_of(body)
        self._roots[id(body)] = (body, layout)
        if not layout.slots and layout.complete:
            return  # no scf.if to compare: nothing to count
        for key, (cond, index) in layout.branches.items():
            if key in self._branches and self._branches[key][0] is not layout:
                layout.complete = False  # the same jaxpr object in two kernels
            self._branches[key] = (layout, cond, index)

    def install(self, ipc: Any) -> None:
        """Wrap the interpreter's jaxpr evaluator (it calls itself through the module global)."""
        original = ipc._interpret_jaxpr
        if getattr(original, "counts_branches", False):
            original = original.__wrapped__
        shape = ipc.TOKEN_SHAPE_DTYPE
        counter = self

        @functools.wraps(original)
        def interpret_jaxpr(jaxpr: Any, *args: Any, ctx: Any, token: Any) -> Any:
            root = counter._roots.get(id(jaxpr))
            branch = counter._branches.get(id(jaxpr))
            if root is not None and root[0] is jaxpr and (root[1].slots or not root[1].complete):
                token = _callback(functools.partial(counter._enter, root[1]), shape, token)
            elif branch is not None:
                token = _callback(functools.partial(counter._taken, *branch), shape, token)
            return original(jaxpr, *args, ctx=ctx, token=token)

        interpret_jaxpr.counts_branches = True  # type: ignore[attr-defined]
        ipc._interpret_jaxpr = interpret_jaxpr

    def _enter(self, layout: Layout, token: Any) -> Any:
        record = self._record()
        if record is not None:
            if record.layout is not None and record.layout is not layout:
                record.branch_conflict = True
            record.layout = layout
        return token

    def _taken(self, layout: Layout, cond: int, index: int, token: Any) -> Any:
        record = self._record()
        if record is not None:
            if record.layout is not layout:
                record.branch_conflict = True
            key = (cond, index)
            record.branch_runs[key] = record.branch_runs.get(key, 0) + 1
        return token


def _callback(fn: Any, shape: Any, token: Any) -> Any:
    from jax.experimental import io_callback

    return io_callback(fn, shape, token)


__all__ = ["BranchCounter", "Layout", "layout_of", "sub_jaxprs"]
