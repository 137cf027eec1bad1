"""Scales that keep a task's structure: the nearest factor that holds, for one that breaks.

A ``--scale`` factor rounds each size entry of ``CONFIG`` to a multiple of 8 on its own, so a
task whose sizes are tied together can break at a factor that suits the others: a LayerNorm
whose weight one entry sizes and whose normalised axis another, channels that must stay a
multiple of a group count the scale leaves alone, page tables and lengths fixed in Python.
Whether a scaled config keeps the task's structure is the check every scaled config gets
(:func:`tools.inputs.scaling.probe_config`: the input maker and the reference trace at it,
and integer inputs follow the sizes). For each factor asked for that fails it, this module
looks for the nearest that passes, by that same check and nothing task-specific:

1. one factor for every size entry, the nearest to the one asked (by ratio, within
   ``REACH`` times either way and no larger than full size unless more was asked) on a grid
   of 1/32 steps, at most ``MAX_PROBES`` distinct configs tried, never one a factor before
   it already uses;
2. for the tuning point, when no such factor holds: the factor asked, with the entries that
   break the task on their own (each scaled alone, the rest at full size) kept at full
   size, when the rest then hold.

The search stops after ``BUDGET_S`` seconds of probing (a reference with a long unrolled
loop takes seconds per probe); what is left is reported as not fitted.

When the tuning factor has neither, the smallest factor beyond ``REACH`` that keeps the
structure (full size at most) is looked for too, within the same budget, so that the
refusal can name it.

Factors that hold are used as asked. What was asked, why it broke and what is used instead
becomes a note, which the scaled task file carries (``SCALE_NOTES``, beside ``SCALES`` and
``SCALE_KEEP``) into the suite and the receipt, and which the command line prints once. A
factor with no fit is left as asked, so loading drops it (or refuses the tuning point) with
its reason as before.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tools.inputs.scaling import (
    ConfigRoles,
    config_roles,
    integer_inputs,
    probe_config,
    scale_config,
    write_scaled_task,
)

if TYPE_CHECKING:
    from tools.inputs.tasks import Task

GRID = 32  # factors tried are multiples of 1/GRID
REACH = 4.0  # a fitted factor is within this ratio of the one asked
MAX_PROBES = 6  # distinct configs tried per factor before giving up on it
BUDGET_S = 120.0  # seconds of probing per task: a task whose every probe is slow stops here


@dataclass(frozen=True)
class Fitted:
    """The factors to write (one per factor asked), the entries kept at full size, and
    what was changed and why, one note per change."""

    scales: tuple[float, ...]
    keep: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    # where the tuning factor has no fit: the smallest factor beyond REACH that keeps the
    # task's structure (1.0: only full size does), for the refusal to name; None: none
    # found within the probing budget, or not looked for
    smallest: float | None = None


def fit_scales(path: str | Path, factors: Sequence[float]) -> Fitted:
    """For a JAXBench task file, ``factors`` with each one that breaks the task replaced by
    the nearest that keeps it (module doc). Anything that keeps the task from loading at
    full size is left to the scaled load to report: the factors come back as asked."""
    from tools.inputs.tasks import load_task

    asked = tuple(float(f) for f in factors)
    try:  # the original sizes, also when ``path`` is itself a scaled copy
        task = load_task(write_scaled_task(path, [1.0]), validate=False)
    except Exception:  # the scaled load fails the same way and says why
        return Fitted(asked)
    if task.format != "jaxbench" or not task.config_sizes:
        return Fitted(asked)
    return _Fitter(task).fit(asked)


class _Fitter:
    """One task at full size, and the verdict of every config probed (each probed once)."""

    def __init__(self, task: Task) -> None:
        self.task = task
        self.base = dict(task.module.CONFIG)
        self.roles = config_roles(task.module, self.base)
        try:
            self.full = integer_inputs(task.module, self.base) if self.roles.traced else None
        except Exception:  # integer inputs that cannot be made are not compared (as loading)
            self.full = None
        self.seen: dict[str, str | None] = {}
        self.deadline = time.monotonic() + BUDGET_S

    def problem(self, config: dict[str, Any], keep: Sequence[str] = ()) -> str | None:
        key = repr((sorted(config.items()), sorted(keep)))
        if key not in self.seen and time.monotonic() > self.deadline:
            return "the search for a scale that keeps the task's structure ran out of time"
        if key not in self.seen:
            self.seen[key] = probe_config(self.task, config, _held(self.roles, keep),
                                          self.full)
        return self.seen[key]

    def config(self, factor: float, keep: Sequence[str] = ()) -> dict[str, Any]:
        return scale_config(self.base, [k for k in self.roles.scaled if k not in keep], factor)

    def fit(self, asked: tuple[float, ...]) -> Fitted:
        scales: list[float] = []
        keep: tuple[str, ...] = ()
        notes: list[str] = []
        used: list[dict[str, Any]] = []
        for index, factor in enumerate(asked):
            config = self.config(factor, keep)
            why = self.problem(config, keep)
            if why is None:
                scales.append(factor)
                used.append(config)
                continue
            nearest = self.nearest(factor, keep, config, used)
            if nearest is not None:
                scales.append(nearest)
                used.append(self.config(nearest, keep))
                notes.append(f"--scale {factor:g} breaks the task's structure ({why}); "
                             f"{nearest:g}, the nearest factor that keeps it, is used instead")
                continue
            held = self.held(factor) if index == 0 else ()
            if held:
                keep = held
                scales.append(factor)
                used.append(self.config(factor, keep))
                notes.append(f"--scale {factor:g} breaks the task's structure ({why}); no "
                             "factor near it keeps it, so it is used with "
                             f"{', '.join(held)} kept at full size (scaling "
                             f"{'it' if len(held) == 1 else 'them'} alone breaks the task)")
                continue
            scales.append(factor)  # loading drops it, or refuses the tuning point, and says why
        smallest = self.smallest(asked[0]) if asked and scales[0] == asked[0] and not keep \
            and self.problem(self.config(asked[0])) is not None else None
        return Fitted(tuple(scales), keep, tuple(notes), smallest)

    def smallest(self, factor: float) -> float | None:
        """The smallest factor past ``factor`` times REACH, up to full size, whose config
        holds: what a refusal names, so that a person can ask for it knowingly."""
        if factor >= 1:
            return None
        start = math.floor(min(1.0, factor * REACH) * GRID) + 1
        seen: list[dict[str, Any]] = []
        for step in range(start, GRID + 1):
            candidate = step / GRID
            config = self.config(candidate)
            if config in seen:
                continue
            seen.append(config)
            why = self.problem(config)
            if why is None:
                return candidate
            if why.startswith("the search for a scale"):  # out of probing time
                return None
        return None

    def nearest(self, factor: float, keep: Sequence[str], broken: dict[str, Any],
                used: list[dict[str, Any]]) -> float | None:
        """The factor nearest ``factor`` whose config holds and is not used yet (step 1)."""
        top = factor * REACH if factor > 1 else min(1.0, factor * REACH)
        grid = {k / GRID for k in range(1, math.floor(top * GRID) + 1)}
        order = sorted((g for g in grid if g >= factor / REACH and g != factor),
                       key=lambda g: (abs(math.log(g / factor)), -g))
        tried: list[dict[str, Any]] = [broken]
        for candidate in order:
            config = self.config(candidate, keep)
            if config in tried or config in used:
                continue
            if len(tried) > MAX_PROBES:
                return None
            tried.append(config)
            if self.problem(config, keep) is None:
                return candidate
        return None

    def held(self, factor: float) -> tuple[str, ...]:
        """The entries that break the task when scaled alone, if the rest scaled by
        ``factor`` then hold with them at full size (step 2); () otherwise."""
        if factor >= 1:
            return ()
        scaled = self.roles.scaled
        breaking = tuple(k for k in scaled
                         if self.problem(scale_config(self.base, [k], factor)) is not None)
        if not breaking or len(breaking) == len(scaled):
            return ()
        if self.problem(self.config(factor, breaking), breaking) is not None:
            return ()
        return breaking


def _held(roles: ConfigRoles, keep: Sequence[str]) -> ConfigRoles:
    """``roles`` with ``keep`` held at full size: not scaled, and not among the sizes the
    integer inputs must shrink with (as loading the scaled file reads them)."""
    return dataclasses.replace(roles, sizes=tuple(k for k in roles.sizes if k not in keep),
                               indices=tuple(k for k in roles.indices if k not in keep),
                               held=tuple(keep))
