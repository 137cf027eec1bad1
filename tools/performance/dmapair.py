"""Manual DMA waits paired with their starts by what they name, never by order.

A `.wait()` blocks until the DMA on its semaphore with its source and destination lands, so
each time a wait runs the model looks for the start that names the same semaphore (ref and
index) and the same source and destination (refs and slices), with their index values
evaluated at that point (:class:`tools.lowered.kernel.DmaKey`, :mod:`tools.lowered.scalar`).
A wait runs at a point: a grid step, or one iteration of its innermost `scf.for` at a step
(the loop's induction variable bound to each trip's value). Its start is one of: a start
earlier in the same iteration (or step), whatever regions (`pl.when`, `run_scoped`) either
sits in; a start in the previous iteration of the same loop (the previous step, for a
wait in no loop); a start before the loop (at the step, or in an earlier loop of it).
The transfer hides behind the work that surely runs between the two, from the start round
to the wait (the rest of the previous iteration, and the step boundary's overhead between
steps); ops inside a branch on the way earn nothing, a loop of constant trips its trips.
The rest of the transfer is exposed (assumption 3 of :mod:`tools.performance.roofline`).

Exactly one start must match. A wait that matches none or several (two starts naming the
same buffers, a value the model cannot evaluate: a loop-carried value, an index read from
data, an outer loop's induction variable) is unpaired and counts fully exposed: the bytes
its own refs describe, serially, every time it runs. Conditions are evaluated at each
point; one that cannot be counts as holding (the wait runs; a start may have run). A
start on a semaphore no wait names is never waited for (the kernel races its own DMA;
interpret mode copies at once): its transfer is charged in full, serially.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tools.lowered.kernel import BodyOp, Branch, DmaKey, Loop, MosaicKernel
from tools.lowered.scalar import UNKNOWN, Instr, run_with_memory
from tools.performance.chips import Chip

# Points (grid steps x trips) a loop's values are evaluated over at most; past it, its
# waits are unpaired (exposed): never cheaper for being large.
MAX_POINTS = 1 << 20
UNPAIRED = ("a manual DMA wait that matches no single start by semaphore and buffers is "
            "counted fully exposed")
NEVER_WAITED = ("a manual DMA on a semaphore no wait names (never waited for) is counted "
                "fully exposed")


@dataclass(frozen=True)
class _Site:
    op: BodyOp
    pos: int  # pre-order position in the body
    path: tuple[int, ...]  # enclosing containers (branch sides, loop and region bodies)
    loops: tuple[Loop, ...]  # enclosing iterating loops, outermost first
    conds: tuple[tuple[int | None, bool], ...]  # enclosing branches: (condition slot, side)

    @property
    def scope(self) -> Loop | None:
        return self.loops[-1] if self.loops else None


@dataclass
class DmaPricing:
    """Per grid step: exposed seconds of waits (at the wait's step), and bytes of the
    starts they paired with (at the start's step, where it counted them as overlapped;
    its wait prices them instead)."""

    serial_s: np.ndarray
    refund_bytes: np.ndarray
    caveats: set[str] = field(default_factory=set)


def _sites(items: Sequence[Any], path: tuple[int, ...], loops: tuple[Loop, ...],
           conds: tuple[tuple[int | None, bool], ...], out: list[_Site], ids: list[int],
           runs: dict[int, float]) -> None:
    """Every body op in pre-order; `runs`: container -> how often it surely runs each time
    the op that holds it does (a branch side 0, a loop its constant trips, a region 1)."""
    for item in items:
        ids[0] += 1
        here = ids[0]
        if isinstance(item, BodyOp):
            out.append(_Site(item, here, path, loops, conds))
        elif isinstance(item, Branch):
            runs[here * 2] = runs[here * 2 + 1] = 0.0
            _sites(item.then, (*path, here * 2), loops, (*conds, (item.cond, True)), out, ids,
                   runs)
            _sites(item.otherwise, (*path, here * 2 + 1), loops, (*conds, (item.cond, False)),
                   out, ids, runs)
        elif isinstance(item, Loop):
            runs[here * 2] = float(item.trip_count or 0) if item.iterates else 1.0
            inner = (*loops, item) if item.iterates else loops
            _sites(item.body, (*path, here * 2), inner, conds, out, ids, runs)


class _Points:
    """The body's scalar values at every point of one scope: (n steps, T trips) arrays."""

    def __init__(self, kernel: MosaicKernel, steps: np.ndarray, memory: dict[int, Any],
                 env0: dict[int, Any], wanted: set[int]) -> None:
        self.kernel, self.steps, self.memory, self.env0 = kernel, steps, memory, env0
        self.n = steps.shape[1]
        self._cache: dict[int, tuple[dict[int, Any], np.ndarray] | None] = {}
        self.program = _slice(kernel.scalar_program, wanted)

    def grid_slots(self, extra: int) -> dict[int, Any]:
        k = min(self.kernel.n_grid_slots, self.steps.shape[0])
        return {i: self.steps[i].reshape(self.n, *([1] * extra)) for i in range(k)}

    def of(self, scope: Loop | None) -> tuple[dict[int, Any], np.ndarray] | None:
        """(env, valid points) of a scope; None when its trips cannot be evaluated."""
        key = id(scope)
        if key not in self._cache:
            self._cache[key] = self._make(scope)
        return self._cache[key]

    def _make(self, scope: Loop | None) -> tuple[dict[int, Any], np.ndarray] | None:
        if scope is None:
            env = run_with_memory(self.program, self.grid_slots(1), self.memory)
            return env, np.ones((self.n, 1), dtype=bool)
        trips = scope.trips(self.env0, self.n)
        if trips is None or scope.iv is None or scope.bounds is None:
            return None
        lb, step = (self.env0.get(s, UNKNOWN) for s in (scope.bounds[0], scope.bounds[2]))
        if lb is UNKNOWN or step is UNKNOWN:
            return None
        t = max(int(trips.max(initial=0)), 1)
        if self.n * t > MAX_POINTS:
            return None  # (a grid alone is always evaluated: the body's env holds it too)
        lb = np.broadcast_to(np.asarray(lb, np.int64), (self.n,))[:, None]
        step = np.broadcast_to(np.asarray(step, np.int64), (self.n,))[:, None]
        iv = lb + step * np.arange(t, dtype=np.int64)[None, :]
        slots = {**self.grid_slots(1), scope.iv: iv}
        env = run_with_memory(self.program, slots, self.memory)
        return env, np.arange(t)[None, :] < trips[:, None]


def _slice(program: Sequence[Instr], wanted: set[int]) -> tuple[Instr, ...]:
    """The instructions the `wanted` slots depend on (keys and conditions only: a loop's
    points hold (steps x trips) values, so nothing else is evaluated over them)."""
    need = set(wanted)
    kept: list[Instr] = []
    for ins in reversed(program):
        if need.intersection(ins.results):
            kept.append(ins)
            need.update(ins.operands)
    return tuple(reversed(kept))


def _values(env: dict[int, Any], slots: Sequence[int], shape: tuple[int, int]) -> list[np.ndarray] | None:
    out = []
    for slot in slots:
        v = env.get(slot, UNKNOWN)
        if v is UNKNOWN:
            return None
        out.append(np.broadcast_to(np.asarray(v, np.int64), shape))
    return out


def _runs(site: _Site, env: dict[int, Any], valid: np.ndarray) -> np.ndarray:
    mask = valid.copy()
    for slot, side in site.conds:
        v = env.get(slot, UNKNOWN) if slot is not None else UNKNOWN
        if v is UNKNOWN:
            continue  # unknown: may hold
        v = np.broadcast_to(np.asarray(v, bool), valid.shape)
        mask &= v if side else ~v
    return mask


def _same(a: list[np.ndarray], b: list[np.ndarray]) -> np.ndarray:
    out = np.ones(a[0].shape if a else b[0].shape if b else (1, 1), dtype=bool)
    for x, y in zip(a, b, strict=True):
        out &= x == y
    return out


def price_dma_waits(kernel: MosaicKernel, steps: np.ndarray, env0: dict[int, Any],
                    memory: dict[int, Any], chip: Chip,
                    op_seconds: Any) -> DmaPricing:
    """Exposed time of every manual DMA wait, paired by identity (module doc)."""
    n = steps.shape[1]
    pricing = DmaPricing(np.zeros(n), np.zeros(n))
    sites: list[_Site] = []
    runs_of: dict[int, float] = {}
    _sites(kernel.body, (), (), (), sites, [0], runs_of)
    waits = [s for s in sites if s.op.dma_wait]
    starts = [s for s in sites if s.op.name == "tpu.enqueue_dma"]
    if not starts and not waits:
        return pricing
    wanted = {slot for site in (*starts, *waits) if site.op.dma_key is not None
              for slot in site.op.dma_key.slots}
    wanted |= {slot for site in (*starts, *waits) for slot, _ in site.conds if slot is not None}
    points = _Points(kernel, steps, memory, env0, wanted)
    bw = chip.hbm_bytes_per_s
    _never_waited(starts, waits, points, env0, bw, pricing)
    for wait in waits:
        outer = _outer(wait, env0, n)
        scope = points.of(wait.scope)
        fallback = max([wait.op.wait_bytes, *(s.op.dma_bytes for s in starts)])
        exposed_bytes = wait.op.wait_bytes or fallback
        if scope is None:  # the wait's points cannot be evaluated: exposed at every run
            trips = wait.scope.trips(env0, n) if wait.scope is not None else None
            runs = outer * (trips if trips is not None else 1)
            pricing.serial_s += runs * exposed_bytes / bw
            pricing.caveats.add(UNPAIRED)
            continue
        env, valid = scope
        runs = _runs(wait, env, valid)
        shape = valid.shape
        total = np.zeros(shape, dtype=np.int64)
        found: list[tuple[_Site, np.ndarray, str]] = []
        wv = _values(env, wait.op.dma_key.slots, shape) if wait.op.dma_key else None
        for start in starts if wv is not None else ():
            key: DmaKey | None = start.op.dma_key
            if key is None or wait.op.dma_key is None or key.shape != wait.op.dma_key.shape:
                continue
            total += _matches(start, wait, wv, env, valid, points, found)
        unpaired = runs & (total != 1)
        if unpaired.any():
            pricing.caveats.add(UNPAIRED)
        pricing.serial_s += outer * unpaired.sum(axis=1) * exposed_bytes / bw
        for start, hit, kind in found:
            count = outer * (runs & (total == 1) & hit).sum(axis=1)
            if not count.any():
                continue
            hidden = _hidden(kind, start, wait, sites, runs_of, op_seconds, chip)
            pricing.serial_s += count * max(0.0, start.op.dma_bytes / bw - hidden)
            if kind == "prev" and wait.scope is None:  # started at the step before
                pricing.refund_bytes[:-1] += count[1:] * start.op.dma_bytes
            else:
                pricing.refund_bytes += count * start.op.dma_bytes
    return pricing


def _outer(site: _Site, env0: dict[int, Any], n: int) -> np.ndarray:
    """Runs per step of the loops around the site's own (its scope's points count the rest)."""
    outer = np.ones(n)
    for loop in site.loops[:-1]:
        trips = loop.trips(env0, n)
        outer = outer * (trips if trips is not None else 1)
    return outer


def _never_waited(starts: list[_Site], waits: list[_Site], points: _Points,
                  env0: dict[int, Any], bw: float, pricing: DmaPricing) -> None:
    """A start on a semaphore no wait names is never waited for: the kernel reads its
    buffer whenever it likes (interpret mode copies at once; the chip races), so its
    transfer is charged in full, serially, every time it runs."""
    if any(w.op.dma_key is None for w in waits):
        return  # a wait whose semaphore is not read may be any start's
    named = {w.op.dma_key.shape[0][1] for w in waits if w.op.dma_key is not None}
    n = points.n
    for start in starts:
        if start.op.dma_key is None or start.op.dma_key.shape[0][1] in named:
            continue
        made = points.of(start.scope)
        if made is None:
            trips = start.scope.trips(env0, n) if start.scope is not None else None
            runs = _outer(start, env0, n) * (trips if trips is not None else 1)
        else:
            env, valid = made
            runs = _outer(start, env0, n) * _runs(start, env, valid).sum(axis=1)
        pricing.serial_s += runs * start.op.dma_bytes / bw
        pricing.refund_bytes += runs * start.op.dma_bytes
        pricing.caveats.add(NEVER_WAITED)


def _surely(site: _Site, start: _Site, wait: _Site, runs_of: dict[int, float]) -> float:
    """How often `site` surely runs each time the start or the wait does: 1 on their own
    paths, times the constant trips of loops it sits in beyond them, 0 inside a branch."""
    common = 0
    for path in (start.path, wait.path):
        k = 0
        while k < min(len(path), len(site.path)) and path[k] == site.path[k]:
            k += 1
        common = max(common, k)
    factor = 1.0
    for container in site.path[common:]:
        factor *= runs_of.get(container, 0.0)
    return factor


def _hidden(kind: str, start: _Site, wait: _Site, sites: list[_Site],
            runs_of: dict[int, float], op_seconds: Any, chip: Chip) -> float:
    """Seconds of work that surely run between the start and the wait: what the transfer
    can hide behind. `kind`: "same" iteration, "prev" (the wait's previous iteration or
    step: the rest of that one after the start, then this one up to the wait) or "before"
    (a start before the wait's loop: up to the wait's first trip)."""
    scope = wait.scope
    total = 0.0
    for site in sites:
        if kind == "prev":
            if scope is not None and not any(loop is scope for loop in site.loops):
                continue
            times = (site.pos > start.pos) + (site.pos < wait.pos)
        else:
            times = int(start.pos < site.pos < wait.pos)
        if times:
            total += times * _surely(site, start, wait, runs_of) * op_seconds(site.op)
    if kind == "prev" and scope is None:
        total += chip.per_step_overhead_s  # the step boundary's own work
    return total


def _matches(start: _Site, wait: _Site, wv: list[np.ndarray], env: dict[int, Any],
             valid: np.ndarray, points: _Points,
             found: list[tuple[_Site, np.ndarray, str]]) -> np.ndarray:
    """How many runs of `start` the wait could be waiting for, at each of its points."""
    assert start.op.dma_key is not None
    shape = valid.shape
    count = np.zeros(shape, dtype=np.int64)
    if start.scope is wait.scope:
        sv = _values(env, start.op.dma_key.slots, shape)
        if sv is None:
            return count
        ran = _runs(start, env, valid)
        if start.pos < wait.pos:  # earlier in the same iteration
            hit = ran & _same(sv, wv)
            found.append((start, hit, "same"))
            count += hit
        prev = np.zeros(shape, dtype=bool)  # the previous iteration (step, outside loops)
        axis = 1 if wait.scope is not None else 0
        if shape[axis] > 1:
            cut = (slice(None), slice(None, -1)) if axis else (slice(None, -1), slice(None))
            late = (slice(None), slice(1, None)) if axis else (slice(1, None), slice(None))
            prev[late] = ran[cut] & _same([v[cut] for v in sv], [v[late] for v in wv])
        found.append((start, prev, "prev"))
        return count + prev
    if start.pos > wait.pos or any(loop is start.scope for loop in wait.loops):
        return count  # later in the body, or in a loop around the wait's (not evaluated)
    made = points.of(start.scope)
    if made is None:
        return count
    senv, svalid = made
    sv = _values(senv, start.op.dma_key.slots, svalid.shape)
    if sv is None:
        return count
    ran = _runs(start, senv, svalid)  # (n, Ts): any of the start's earlier runs this step
    if ran.shape[1] * shape[1] * shape[0] > MAX_POINTS:
        return count + 2  # too many to compare: ambiguous, so unpaired
    eq = np.broadcast_to(ran[:, None, :], (shape[0], shape[1], ran.shape[1])).copy()
    for s, w in zip(sv, wv, strict=True):
        eq &= s[:, None, :] == w[:, :, None]
    hits = eq.sum(axis=2)
    found.append((start, hits == 1, "before"))
    return count + hits


__all__ = ["MAX_POINTS", "NEVER_WAITED", "UNPAIRED", "DmaPricing", "price_dma_waits"]
