"""The simulated XLA baseline: the one function every simulated speedup's denominator comes from.

The verifier's measurement (and so its receipt, the search and `bench`), the `baseline`
agent's `BaselineMeasured`, `estimate` and the benchmarks all call :func:`simulated_baseline`.
Which program it is priced from, in order:

1. XLA:TPU's optimised program for the target chip (:mod:`tools.performance.xla_tpu`), where
   libtpu is installed (and not switched off with ``KG_TPU_COMPILER=0``), the reference
   compiles for TPU, and the pricer has a rule for every op it launches. Its structure
   (fusions, HBM bytes, async copies, memory spaces) is XLA:TPU's; each fusion's compute is
   priced by the same model rules as a kernel's (the compiler's `estimated_cycles` are kept
   beside, never taken: a kernel has no such figure). Labelled
   ``simulated, priced from XLA:TPU's program``.
2. Otherwise the reference's host (XLA:CPU) program priced by the model
   (:mod:`tools.performance.baseline`), labelled ``simulated, priced from the host program``,
   with the reason XLA:TPU's was not used in ``fallback`` (no libtpu, a failed compile, or
   the ops the pricer has no rule for): recorded, never silent. Work without a rule never
   makes the baseline cheaper: its XLA:TPU price is set aside, not summed without it.

The host program is priced either way (it is cheap: a host compile, no run) and kept beside.
Results are cached in this process by (what the caller says identifies the reference, the
argument shapes and dtypes, the chip, the pricing wanted): a change of libtpu or of
``KG_TPU_COMPILER`` is a different key. The TPU compile itself runs in the sandboxed compile
child and is cached on disk by :mod:`tools.lowered.tpu_compiler`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, Literal

import msgspec

from tools.performance.baseline import (
    BaselineEstimate,
    ReferenceCost,
    estimate_baseline,
    reference_cost,
)
from tools.performance.chips import Chip
from tools.performance.xla_tpu import XlaTpuBaseline

XLA_TPU_PROGRAM = "simulated, priced from XLA:TPU's program"
HOST_PROGRAM = "simulated, priced from the host program"
PricedFrom = Literal["xla-tpu", "host"]


class SimBaseline(msgspec.Struct, frozen=True):
    """The XLA reference's simulated latency on one chip, and which program it came from."""

    latency_s: float
    chip: str
    priced_from: PricedFrom
    label: str  # XLA_TPU_PROGRAM or HOST_PROGRAM
    host: BaselineEstimate  # the host program priced by the model (always)
    reference_cost: ReferenceCost
    fallback: str = ""  # why not XLA:TPU's program, where the host one is the baseline
    xla_tpu: dict[str, Any] | None = None  # XLA:TPU's program priced per op, where compiled

    @property
    def method(self) -> str:
        """One line for an event or a report: the label, then the reason for a fallback."""
        text = f"{self.label} on {self.chip}"
        return f"{text} ({self.fallback})" if self.fallback else text


_LOCK = threading.Lock()
_CACHE: dict[tuple[Any, ...], SimBaseline] = {}


def pricing_wanted() -> str:
    """Which pricing a baseline asks for now: part of every cache key."""
    from tools.lowered import tpu_compiler

    if tpu_compiler.available():
        return f"xla-tpu libtpu {tpu_compiler.libtpu_version()}"
    if tpu_compiler.switched_off():
        return f"host ({tpu_compiler.SWITCH_ENV}=0)"
    return "host (libtpu is not installed)"


def _shapes(args: Sequence[Any]) -> tuple[Any, ...]:
    return tuple((tuple(getattr(a, "shape", ())), str(getattr(a, "dtype", type(a).__name__)))
                 for a in args)


def simulated_baseline(reference_fn: Callable[..., Any], args: Sequence[Any], chip: Chip, *,
                       key: str = "") -> SimBaseline:
    """The simulated XLA baseline of ``reference_fn(*args)`` on ``chip``.

    ``key``: what identifies the reference (a task's sha256 and shape); "" caches nothing."""
    cache_key = (key, _shapes(args), chip.name, pricing_wanted()) if key else None
    if cache_key is not None:
        with _LOCK:
            hit = _CACHE.get(cache_key)
        if hit is not None:
            return hit
    cost = reference_cost(reference_fn, args)
    found, why = _xla_tpu(reference_fn, args, chip)
    result = choose(cost, chip, found, why)
    if cache_key is not None:
        with _LOCK:
            _CACHE[cache_key] = result
    return result


def host_program(cost: ReferenceCost, chip: Chip, why: str) -> SimBaseline:
    """The baseline priced from a host program's cost the caller already has, saying why."""
    return choose(cost, chip, None, why)


def choose(cost: ReferenceCost, chip: Chip, found: XlaTpuBaseline | None,
           why: str = "") -> SimBaseline:
    """The baseline from XLA:TPU's priced program where it prices every op it launches at
    more than nothing; else the host program's, with the reason (``why``, where XLA:TPU's
    program was not had at all)."""
    host = estimate_baseline(cost, chip)
    priced = msgspec.to_builtins(found) if found is not None else None
    if found is not None and found.unpriced:
        why = ("XLA:TPU's program has work the pricer has no rule for: "
               + ", ".join(found.unpriced[:6])
               + (f" and {len(found.unpriced) - 6} more" if len(found.unpriced) > 6 else ""))
    elif found is not None and not found.latency_s > 0:
        why = "XLA:TPU's program priced at zero seconds"
    elif found is not None:
        return SimBaseline(float(found.latency_s), chip.name, "xla-tpu", XLA_TPU_PROGRAM, host,
                           cost, xla_tpu=priced)
    return SimBaseline(float(host.latency_s), chip.name, "host", HOST_PROGRAM, host, cost,
                       fallback=why or "XLA:TPU's program was not priced", xla_tpu=priced)


def _xla_tpu(reference_fn: Callable[..., Any], args: Sequence[Any],
             chip: Chip) -> tuple[XlaTpuBaseline | None, str]:
    """(XLA:TPU's program priced, or None and why not)."""
    from tools.lowered import tpu_compiler
    from tools.performance import xla_tpu

    if not tpu_compiler.available():
        return None, pricing_wanted().removeprefix("host (").removesuffix(")")
    try:
        return xla_tpu.tpu_baseline(reference_fn, args, chip), ""
    except (xla_tpu.XlaTpuError, tpu_compiler.TpuCompilerError) as exc:
        return None, f"XLA:TPU's program could not be had: {exc}"[:600]


def clear_cache() -> None:
    with _LOCK:
        _CACHE.clear()


__all__ = ["HOST_PROGRAM", "XLA_TPU_PROGRAM", "SimBaseline", "choose", "clear_cache", "host_program",
           "pricing_wanted", "simulated_baseline"]
