"""Executors: how fast a candidate is, on one target, behind one interface.

- `sim-tpu-v6e` (default), `sim-tpu-v5e`, `sim-tpu-v7`: the analytic model of
  `tools.performance.roofline` on the lowered program the compile check produced, against the
  XLA baseline of `tools.performance.simbaseline` (XLA:TPU's program where libtpu is
  installed, else the host program; the breakdown says which). Every figure is labelled
  `measured_on="simulated"`.
- `tpu`, `gpu`: the candidate and the task's reference are timed on the device in a fresh
  sandboxed child (`tools.child.timing`), interleaved in both orders after warm-ups, each call
  ended by `block_until_ready`; the median of many runs is kept. Device time comes from an
  XProf trace of extra interleaved runs (the trace bytes come back and are read here, in the
  parent), wall time otherwise. A candidate faster than the roofline allows for the task's
  minimal work (its inputs read and outputs written once at peak bandwidth, its flops at
  peak compute) is rejected as invalid. Without the device these raise `TargetUnavailable`
  naming what is missing; they never fall back to another target.
"""

from __future__ import annotations

import glob
import hashlib
import importlib.util
import resource
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import msgspec

from kernelgraph.errors import KernelgraphError
from tools import jaxprivate
from tools.lowered.mosaic import LoweredProgram
from tools.performance.baseline import ReferenceCost, reference_cost, task_work
from tools.performance.chips import get_chip
from tools.performance.roofline import estimate_program, roofline_floor_s
from tools.performance.simbaseline import SimBaseline, host_program, simulated_baseline
from tools.performance.timing import (
    CANDIDATE_FILE,
    TimingRequest,
    TimingResult,
    device_times,
    interleaved_times,
)
from tools.performance.xla_tpu import candidate_outside

SIM_TARGETS = {"sim-tpu-v6e": "v6e", "sim-tpu-v5e": "v5e", "sim-tpu-v7": "v7"}
REAL_TARGETS = ("tpu", "gpu")
TARGETS = (*SIM_TARGETS, *REAL_TARGETS)
DEFAULT_TARGET = "sim-tpu-v6e"
# A measured time may undercut the roofline floor by this much (clock boost, figure rounding)
# before it is called impossible.
ROOFLINE_SLACK = 0.9


class TargetUnavailable(KernelgraphError, RuntimeError):
    """The target's hardware or runtime is not on this machine; the message says what."""


class UnknownTarget(KernelgraphError, ValueError):
    pass


class Measurement(msgspec.Struct, frozen=True):
    """How fast a candidate ran (or would run) against the XLA baseline on one target."""

    target: str
    measured_on: str  # "simulated" | "real"
    latency_s: float
    baseline_s: float
    speedup: float
    breakdown: dict[str, Any]
    valid: bool = True
    reasons: list[str] = msgspec.field(default_factory=list)


class Executor(Protocol):
    target: str
    measured_on: str


# ------------------------------------------------------------------------------- simulated


class SimExecutor:
    """The analytic roofline model of one TPU generation (see tools/performance/roofline.py)."""

    measured_on = "simulated"

    def __init__(self, target: str) -> None:
        self.target = target
        self.chip = get_chip(SIM_TARGETS[target])

    def reference_cost(self, reference_fn: Callable[..., Any], args: Sequence[Any]) -> ReferenceCost:
        return reference_cost(reference_fn, args)

    def baseline(self, reference_fn: Callable[..., Any], args: Sequence[Any], *,
                 key: str = "") -> SimBaseline:
        """The XLA baseline speedups divide (`simulated_baseline`: which program, and why)."""
        return simulated_baseline(reference_fn, args, self.chip, key=key)

    def estimate(self, lowered: LoweredProgram, reference_cost: SimBaseline | ReferenceCost,
                 inputs: Sequence[Any] | None = None,
                 cases: Sequence[Sequence[Any]] | None = None, text: str = "") -> Measurement:
        """Price the lowered program against `reference_cost`: the baseline from
        :meth:`baseline`, or a host program's cost (then priced from the host program, and
        labelled so).

        `inputs` (the case's arguments) supply the values of
        scalar-prefetch operands, so data-dependent index maps and conditions are evaluated.

        `cases`: several cases' arguments instead (only their scalar-prefetch operands are
        read; others may be None). A program that reads scalar-prefetch values is priced on
        each case's own values and its latency is their mean (the per-case figures are in
        the breakdown): a kernel whose speed depends on the data is not judged on one draw.

        `text`: the lowered program the compile check compiled; with it, the ops around the
        kernels are priced from XLA:TPU's compiled program (its fusions), as the baseline's
        are (:func:`tools.performance.xla_tpu.candidate_outside`).
        """
        found = candidate_outside(text, self.chip, len(lowered.kernels)) if text else None
        outside = None if found is None else (found.latency_s, found.hbm_bytes)
        if cases and any(k.scalar_prefetch for k in lowered.kernels):
            priced = [estimate_program(lowered, self.chip, c, outside) for c in cases]
        else:
            priced = [estimate_program(lowered, self.chip, cases[0] if cases else inputs,
                                       outside)]
        program = priced[0]
        baseline = (reference_cost if isinstance(reference_cost, SimBaseline)
                    else host_program(reference_cost, self.chip, "the caller gave its cost"))
        latency = statistics.fmean(p.latency_s for p in priced)
        breakdown = {
            "chip": self.chip.name,
            "kernels": [msgspec.to_builtins(k) for k in program.kernels],
            "kernel_structure": [k.summary() for k in lowered.kernels],
            "outside_ops_s": program.outside_ops_s,
            "outside_priced_from": program.outside_priced_from,
            "outside_bytes": program.outside_bytes,
            "outside_ops": list(found.ops) if found is not None else [],
            "hbm_bytes": program.hbm_bytes,
            "flops": program.flops,
            "baseline_host": msgspec.to_builtins(baseline.host),
            "baseline_priced_from": baseline.label,
            "baseline_method": baseline.method,
            "baseline_xla_tpu": baseline.xla_tpu,
            "reference_cost": msgspec.to_builtins(baseline.reference_cost),
            "chip_figures": msgspec.to_builtins(self.chip),
            "case_latency_s": [p.latency_s for p in priced],
        }
        reasons: list[str] = []
        if not lowered.kernels:
            reasons.append("no pallas_call in the lowered program: nothing to simulate")
        reasons += sorted({f"the model cannot count the work of kernel {k.name}: {u}"
                           for p in priced for k in p.kernels for u in k.unsound})
        return Measurement(
            target=self.target,
            measured_on="simulated",
            latency_s=float(latency),
            baseline_s=float(baseline.latency_s),
            speedup=float(baseline.latency_s / latency) if latency > 0 else 0.0,
            breakdown=breakdown,
            valid=not reasons,
            reasons=reasons,
        )


# ------------------------------------------------------------------------------------ real

_GPU_FIGURES: tuple[tuple[str, float, float], ...] = (
    # (device_kind substring, HBM bytes/s, dense bf16 flops/s), vendor datasheets
    ("H200", 4.8e12, 989e12),
    ("H100", 3.35e12, 989e12),
    ("B200", 8.0e12, 2.25e15),
    ("A100-SXM4-80GB", 2.039e12, 312e12),
    ("A100", 1.555e12, 312e12),
    ("L40S", 864e9, 362e12),
    ("L4", 300e9, 121e12),
)
_GPU_UNKNOWN = (20e12, 1e16)  # looser than any shipping part, so the check stays sound



def _real_hardware_problem(platform: str) -> str:
    """Empty if the platform's runtime and device are present, else what is missing."""
    if platform == "tpu":
        missing = []
        if importlib.util.find_spec("libtpu") is None:
            missing.append("the libtpu package is not installed")
        if not (glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*")):
            missing.append("no TPU device node (/dev/accel* or /dev/vfio/N)")
        return "; ".join(missing)
    if platform == "gpu":
        missing = []
        plugins = ("jax_cuda12_plugin", "jax_cuda13_plugin", "jax_rocm60_plugin", "jax_rocm7_plugin")
        if not any(importlib.util.find_spec(p) for p in plugins):
            missing.append("no JAX GPU plugin (pip install 'jax[cuda12]')")
        if not (glob.glob("/dev/nvidia[0-9]*") or glob.glob("/dev/kfd")):
            missing.append("no GPU device node (/dev/nvidiaN or /dev/kfd)")
        return "; ".join(missing)
    raise UnknownTarget(platform)


class RealExecutor:
    """Times candidate and baseline on the real device, in a fresh sandboxed child."""

    measured_on = "real"

    def __init__(self, platform: str) -> None:
        self.target = platform
        self.platform = platform

    def require_available(self) -> None:
        problem = _real_hardware_problem(self.platform)
        if problem:
            raise TargetUnavailable(f"target {self.platform!r} is not available here: {problem}")

    def estimate(self, lowered: LoweredProgram, reference_cost: ReferenceCost) -> Measurement:
        raise TargetUnavailable(
            f"target {self.platform!r} measures on the device; use time_program(), not the model"
        )

    def time_program(
        self,
        task_path: str | Path,
        program: bytes,
        *,
        warmup: int = 5,
        runs: int = 50,
        trace_runs: int = 10,
        wall_s: float = 600.0,
    ) -> Measurement:
        """Time a verified candidate as the program that was audited: its tuning-point trace
        as data (:mod:`tools.child.programs`), the bytes the runner lowered, compile-checked,
        audited and ran. The timing child rebuilds it from JAX's own primitives and never
        imports the candidate, so no other program can be timed in its place; it reports the
        sha256 of what it ran and a mismatch makes the measurement invalid."""
        request = TimingRequest(self.platform, str(Path(task_path).resolve()), "", {},
                                warmup, runs, trace_runs, program=program)
        measurement = self._time(task_path, request, {}, wall_s)
        ran = measurement.breakdown.get("program_sha256")
        if measurement.valid and ran != hashlib.sha256(program).hexdigest():
            reason = f"the timing child ran program {ran!r}, not the one that was audited"
            return msgspec.structs.replace(measurement, valid=False,
                                           reasons=[*measurement.reasons, reason])
        return measurement

    def time_candidate(
        self,
        task_path: str | Path,
        candidate_source: bytes,
        config: dict[str, Any] | None = None,
        *,
        warmup: int = 5,
        runs: int = 50,
        trace_runs: int = 10,
        wall_s: float = 600.0,
    ) -> Measurement:
        """Median device (or wall) time of a trusted module's ``build()`` (the reference as
        the baseline) and the reference, interleaved both orders. A candidate is timed with
        :meth:`time_program`, never through this: its code could trace differently on the
        device than in the verifier.

        `candidate_source` is copied into the child's box: the child times exactly those
        bytes, never whatever the path holds by then.
        """
        request = TimingRequest(self.platform, str(Path(task_path).resolve()), CANDIDATE_FILE,
                                dict(config or {}), warmup, runs, trace_runs)
        return self._time(task_path, request, {CANDIDATE_FILE: candidate_source}, wall_s)

    def _time(self, task_path: str | Path, request: TimingRequest, files: dict[str, bytes],
              wall_s: float) -> Measurement:
        """Median device (or wall) time of candidate and baseline, interleaved both orders."""
        self.require_available()
        from tools.inputs.tasks import load_task
        from tools.sandbox.launcher import Limits, accelerator_devices, run_sandboxed

        task = load_task(task_path)
        # Device runtimes reserve far more address space than they use: no RLIMIT_AS here.
        limits = Limits(wall_s=wall_s, memory_bytes=resource.RLIM_INFINITY)
        out = run_sandboxed("tools.child.timing", msgspec.msgpack.encode(request), limits=limits,
                            files=files, devices=accelerator_devices())  # in its private /dev
        if not out.ok:
            raise RuntimeError(f"timing child failed: {out.failure()}\n{out.stderr_tail}")
        result = msgspec.msgpack.decode(out.result, type=TimingResult)
        if result.error:
            return Measurement(self.target, "real", 0.0, 0.0, 0.0, {"error": result.error},
                               valid=False, reasons=[result.error])
        return self._judge(task, result)

    def _judge(self, task: Any, result: TimingResult) -> Measurement:
        cand_wall = statistics.median(result.candidate_wall_s)
        base_wall = statistics.median(result.baseline_wall_s)
        device = device_times(result.xplane, ("jit_kg_candidate", "jit_kg_baseline"))
        cand_dev = statistics.median(device["jit_kg_candidate"]) if device["jit_kg_candidate"] else None
        base_dev = statistics.median(device["jit_kg_baseline"]) if device["jit_kg_baseline"] else None
        use_device = cand_dev is not None and base_dev is not None
        latency = cand_dev if use_device else cand_wall
        baseline = base_dev if use_device else base_wall

        work = task_work(task)  # shapes only: nothing is made or run in this process
        min_bytes, flops = work.min_bytes, work.flops
        bw, peak = _device_figures(result.platform, result.device_kind)
        floor = max(flops / peak, min_bytes / bw)
        reasons = []
        if latency < floor * ROOFLINE_SLACK:
            reasons.append(
                f"measured {latency:.3e} s is faster than the roofline allows "
                f"({floor:.3e} s for {min_bytes} bytes and {flops:.3e} flops on "
                f"{result.device_kind}): the timing is invalid"
            )
        breakdown = {
            "device_kind": result.device_kind,
            "timing_source": "xprof device time" if use_device else "wall clock (no device trace)",
            "candidate_wall_median_s": cand_wall,
            "baseline_wall_median_s": base_wall,
            "candidate_device_median_s": cand_dev,
            "baseline_device_median_s": base_dev,
            "runs": len(result.candidate_wall_s),
            "roofline_floor_s": floor,
            "min_bytes": min_bytes,
            "flops": flops,
            "hbm_bytes_per_s": bw,
            "peak_flops": peak,
            "program_sha256": result.program_sha256 or None,
        }
        return Measurement(
            target=self.target,
            measured_on="real",
            latency_s=latency,
            baseline_s=baseline,
            speedup=baseline / latency if latency > 0 else 0.0,
            breakdown=breakdown,
            valid=not reasons,
            reasons=reasons,
        )


def _device_figures(platform: str, device_kind: str) -> tuple[float, float]:
    """(HBM bytes/s, peak flops/s) of the device the child ran on."""
    if platform == "tpu":
        tpu_info = jaxprivate.tpu_info()
        version = tpu_info.chip_version_from_device_kind(device_kind)
        if version is None:
            return _GPU_UNKNOWN
        info = tpu_info.get_tpu_info_for_chip(version, 1)
        return float(info.mem_bw_bytes_per_second), float(info.bf16_ops_per_second)
    for key, bw, peak in _GPU_FIGURES:
        if key in device_kind:
            return bw, peak
    return _GPU_UNKNOWN



# ------------------------------------------------------------------------------- registry


def get_executor(target: str = DEFAULT_TARGET) -> SimExecutor | RealExecutor:
    """The executor for a target name; real targets are returned even when absent
    (they raise `TargetUnavailable` when used), so callers can report why."""
    if target in SIM_TARGETS:
        return SimExecutor(target)
    if target in REAL_TARGETS:
        return RealExecutor(target)
    raise UnknownTarget(f"unknown target {target!r}; known: {', '.join(TARGETS)}")


def chip_for_target(target: str) -> str:
    """The chip whose TPU lowering a target's compile check uses ("v6e" for real targets
    other than TPU, whose own chip is only known on the device)."""
    return SIM_TARGETS.get(target, "v6e")


__all__ = [
    "DEFAULT_TARGET",
    "REAL_TARGETS",
    "SIM_TARGETS",
    "TARGETS",
    "Measurement",
    "RealExecutor",
    "ReferenceCost",
    "SimExecutor",
    "TargetUnavailable",
    "UnknownTarget",
    "chip_for_target",
    "device_times",
    "get_executor",
    "interleaved_times",
    "reference_cost",
    "roofline_floor_s",
]
