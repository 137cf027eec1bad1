"""The lever registry: each catalogue lever a pure function `spec -> [spec, ...] | NotApplicable`.

A kernel class keeps a small frozen spec of its schedule (blocks, grid order, buffering,
accumulator, precision, ...); a lever maps the parent's spec to the list of distinct specs
it can become (one per value it may take, each different from the parent), or says why it
does not apply. The seed only picks among those variants, so "no two children alike" is a
property of specs, decided before any code is written. The ids are `knowledge/levers.md`'s.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from agents.llm.offline.classify import TaskFacts

CATALOGUE_CLASS = {"elementwise": "elementwise", "rowwise": "rowwise", "rows_generic": "row_independent",
                   "matmul_epilogue": "matmul", "attention": "attention", "generic": "generic"}
"""A kernel class of the author -> its name in the catalogue's `classes:` lines."""


FALLBACK_VMEM_BYTES = 128 * 1024 * 1024


def raised_vmem_limit(chip: dict[str, Any] | None) -> int:
    """Three quarters of the chip's VMEM (of 128 MiB when the chip does not say): room
    for the compiler's own scratch above a raised scoped limit."""
    vmem = (chip or {}).get("vmem_bytes")
    whole = int(vmem) if isinstance(vmem, int | float) and vmem > 0 else FALLBACK_VMEM_BYTES
    return whole * 3 // 4


@dataclass(frozen=True)
class NotApplicable:
    """A lever that does not apply to this class or task, with the reason (costs no candidate)."""

    reason: str


@dataclass(frozen=True)
class LeverContext:
    """What a lever may read besides the spec: the task's facts and the chip's figures."""

    facts: TaskFacts
    chip: dict[str, Any] = field(default_factory=dict)

    def raised_vmem_limit(self) -> int:
        return raised_vmem_limit(self.chip)


Lever = Callable[[Any, LeverContext], "list[Any] | NotApplicable"]
REGISTRY: dict[str, dict[str, Lever]] = {}
STANDING: dict[str, set[str]] = {}
"""Per class, the levers with no code path at all (registered by `not_applicable`)."""


def lever(kernel_classes: Iterable[str], lever_id: str) -> Callable[[Lever], Lever]:
    """Register `fn` under catalogue id `lever_id` for each of `kernel_classes`."""
    def register(fn: Lever) -> Lever:
        for c in kernel_classes:
            REGISTRY.setdefault(c, {})[lever_id] = fn
        return fn
    return register


def not_applicable(kernel_classes: Iterable[str], lever_id: str, reason: str) -> None:
    """Register a lever that never applies to these classes, with the standing reason."""
    for c in kernel_classes:
        STANDING.setdefault(c, set()).add(lever_id)
    lever(kernel_classes, lever_id)(lambda spec, ctx: NotApplicable(reason))


def variants(kernel_class: str, spec: Any, lever_id: str, ctx: LeverContext) -> list[Any] | NotApplicable:
    """The distinct specs `lever_id` turns `spec` into, in a fixed order, or why none."""
    fn = REGISTRY.get(kernel_class, {}).get(lever_id)
    if fn is None:
        return NotApplicable(f"{lever_id} has no code path in the {kernel_class} writer")
    out = fn(spec, ctx)
    if isinstance(out, NotApplicable):
        return out
    distinct = list(dict.fromkeys(s for s in out if s != spec))
    if not distinct:
        return NotApplicable(f"{lever_id}: every value it can take is already the parent's")
    scheduled = [s for s in distinct if not _limit_only(s, spec)]
    if not scheduled:
        return NotApplicable(f"{lever_id}: it would only raise vmem_limit_bytes, which changes no "
                             "block, no schedule and no configuration the tuner can reach")
    return scheduled


def _limit_only(variant: Any, parent: Any) -> bool:
    """Does `variant` differ from `parent` in its VMEM limit alone? Such a kernel lowers to
    the parent's schedule: the limit only lets larger blocks compile, so it travels with them."""
    limit = getattr(parent, "vmem_limit_bytes", None)
    return (hasattr(variant, "vmem_limit_bytes")
            and changed(variant, vmem_limit_bytes=limit) == parent)


def changed(spec: Any, **fields: Any) -> Any:
    return dataclasses.replace(spec, **fields)


def spec_dict(spec: Any) -> dict[str, Any]:
    return dataclasses.asdict(spec)


def spec_from(cls: type, default: Any, given: dict[str, Any] | None) -> Any:
    """`default` with the fields of `given` that `cls` has and whose type matches."""
    if not isinstance(given, dict):
        return default
    names = {f.name for f in dataclasses.fields(cls)}
    keep: dict[str, Any] = {}
    for k, v in given.items():
        if k not in names:
            continue
        v = tuple(v) if isinstance(v, list) else v  # json has lists where a spec has tuples
        current = getattr(default, k)
        same_type = isinstance(v, type(current)) and isinstance(v, bool) == isinstance(current, bool)
        if current is None or same_type:
            keep[k] = v
    return dataclasses.replace(default, **keep)


def seed_index(seed: int) -> int:
    """Which variant a seed picks: the sum of its base-1000 digits. Seeds are built as
    `run * 1000 + ordinal` per expansion and `* 1000 + iteration` per step (agents/search.py,
    agents/steps.py), so siblings and successive iterations land on consecutive indices
    instead of multiples of 1000 that a small modulus would fold together."""
    seed, total = abs(int(seed)), 0
    while seed:
        seed, digit = divmod(seed, 1000)
        total += digit
    return total


def seed_ordinal(seed: int) -> int:
    """Which expansion of its run a step's seed belongs to: its second base-1000 digit. Every
    orchestrator builds `(run * 1000 + ordinal) * 1000 + iteration` (ordinals from 1; a single
    trajectory, `auto` or HITL, is ordinal 1: `agents.steps`); 0 for a direct call."""
    return abs(int(seed)) // 1000 % 1000


def seed_iteration(seed: int) -> int:
    """Which iteration of its expansion a step's seed belongs to: its last base-1000 digit."""
    return abs(int(seed)) % 1000


def first_step(seed: int) -> bool:
    """Whether the seed is its run's first expansion's first iteration: ordinal 1 (0: a
    direct call), iteration 1 (0: a direct call). Only one step of a run is this, so a
    parallel search's concurrent expansions, which cannot see each other's plans, never all
    take it; nor does a later iteration of a run that is not told its earlier plans (HITL)."""
    return seed_ordinal(seed) <= 1 and seed_iteration(seed) <= 1


@functools.cache
def deepest_buffering() -> int:
    """The largest `pl.Buffered(n)` the installed JAX lowers on a TPU BlockSpec: its Mosaic
    lowering refuses `buffer_count > 2` ("Only single (1) and double (2) buffering are
    supported") in jax 0.10; read from that check, so a JAX that lifts it is noticed."""
    from tools import jaxprivate

    try:
        found = re.search(r"buffer_count > (\d+)", inspect.getsource(jaxprivate.mosaic_lowering()))
    except (ImportError, OSError, TypeError):
        return 2
    return int(found.group(1)) if found else 2


def deeper_buffers_refused(depth: int) -> NotApplicable | None:
    """Why `depth` buffers cannot be written for this JAX, or None when they can."""
    limit = deepest_buffering()
    if depth <= limit:
        return None
    import jax

    return NotApplicable(f"the installed JAX ({jax.__version__}) lowers pl.Buffered(n) for TPU only "
                         f"for n <= {limit} ('Only single (1) and double (2) buffering are supported'); "
                         "single buffers for blocks that never move are a separate lever")
