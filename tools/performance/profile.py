"""A profile a fix or tuning agent can act on: where the time goes and what to change.

On simulated targets it is read from the cost model's breakdown (every figure labelled
simulated); on hardware from the XProf device time and the task's minimal work. Either way
it gives latency, bytes moved, flops, the achieved fraction of peak bandwidth and compute,
what bounds the kernel (memory, compute or per-step overhead), VMEM use and grid steps, plus
a few concrete suggestions derived from those numbers.
"""

from __future__ import annotations

import math
from typing import Any

import msgspec

from tools.lowered.compile_check import CompileReport
from tools.performance.executors import Measurement

MIN_USEFUL_STEP_S = 2e-6  # below this a step's work is smaller than ~6x its fixed overhead


class KernelProfile(msgspec.Struct, frozen=True):
    name: str
    grid: list[int]
    grid_steps: int
    latency_s: float
    hbm_bytes: int
    flops: int
    bound: str
    compute_s: float
    memory_s: float
    overhead_s: float
    achieved_bandwidth_fraction: float
    achieved_compute_fraction: float
    mxu_utilisation: float | None  # useful / padded matmul flops
    windows: list[dict[str, Any]]
    vmem_bytes: int | None
    caveats: list[str]


class Profile(msgspec.Struct, frozen=True):
    target: str
    measured_on: str  # "simulated" | "real"
    source: str  # "cost model" | "xprof" | "wall clock"
    latency_s: float
    baseline_s: float
    speedup: float
    hbm_bytes: int
    flops: int
    achieved_bandwidth_fraction: float
    achieved_compute_fraction: float
    bound: str
    grid_steps: int
    vmem_bytes: int | None
    vmem_limit_bytes: int | None
    kernels: list[KernelProfile]
    suggestions: list[str]
    outside_ops_s: float = 0.0  # XLA's ops around the kernels (simulated: from XLA:TPU's program)
    outside_ops: list[str] = msgspec.field(default_factory=list)  # their names, where known


OUTSIDE_SHARE = 0.2
"""From this share of the time on, the ops around the kernels are named as the next step."""
MODEL_CAVEAT = "model caveat: "
"""Marks a suggestion that says what the model could not see: a caveat, not a next step."""


def _fraction(amount: float, rate: float, seconds: float) -> float:
    return amount / seconds / rate if seconds > 0 and rate > 0 else 0.0


def summarize(measurement: Measurement, compile_report: CompileReport | None = None) -> Profile:
    """Build the profile from a measurement (and the compile check's VMEM figures)."""
    if measurement.measured_on == "simulated":
        return _from_model(measurement, compile_report)
    return _from_hardware(measurement, compile_report)


def _from_model(m: Measurement, report: CompileReport | None) -> Profile:
    b = m.breakdown
    chip = b["chip_figures"]
    bw, peak = chip["hbm_bytes_per_s"], chip["peak_bf16_flops"]
    vmem = {k.kernel: k.vmem_bytes for k in report.kernels} if report else {}
    kernels: list[KernelProfile] = []
    structures = b.get("kernel_structure", [])
    for i, k in enumerate(b["kernels"]):
        structure = structures[i] if i < len(structures) else {}
        windows = []
        for w, fetches in zip(structure.get("windows", []), k["fetches"], strict=False):
            block = w["block_shape"]
            blocks_in_array = (
                math.prod(math.ceil(a / max(s, 1)) for a, s in zip(w["array_shape"], block, strict=False))
                if block else 0
            )
            windows.append({**w, "transfers": fetches, "distinct_blocks": blocks_in_array})
        padded = k["matmul_padded_flops"]
        kernels.append(KernelProfile(
            name=k["name"], grid=k["grid"], grid_steps=k["grid_steps"], latency_s=k["latency_s"],
            hbm_bytes=k["hbm_bytes"], flops=k["flops"], bound=k["bound"],
            compute_s=k["compute_s"], memory_s=k["memory_s"], overhead_s=k["overhead_s"],
            achieved_bandwidth_fraction=_fraction(k["hbm_bytes"], bw, k["latency_s"]),
            achieved_compute_fraction=_fraction(k["flops"], peak, k["latency_s"]),
            mxu_utilisation=(k["matmul_flops"] / padded) if padded else None,
            windows=windows,
            vmem_bytes=vmem.get(k["name"]),
            caveats=[*k["caveats"], *(f"not counted: {u}" for u in k.get("unsound", []))],
        ))
    total_bytes = int(b["hbm_bytes"])
    total_flops = int(b["flops"])
    bound = max(kernels, key=lambda k: k.latency_s).bound if kernels else "overhead"
    profile = Profile(
        target=m.target, measured_on="simulated", source="cost model",
        latency_s=m.latency_s, baseline_s=m.baseline_s, speedup=m.speedup,
        hbm_bytes=total_bytes, flops=total_flops,
        achieved_bandwidth_fraction=_fraction(total_bytes, bw, m.latency_s),
        achieved_compute_fraction=_fraction(total_flops, peak, m.latency_s),
        bound=bound,
        grid_steps=sum(k.grid_steps for k in kernels),
        vmem_bytes=report.vmem_bytes if report else None,
        vmem_limit_bytes=report.vmem_limit_bytes if report else None,
        kernels=kernels,
        suggestions=[],
        outside_ops_s=float(b.get("outside_ops_s") or 0.0),
        outside_ops=[str(o) for o in b.get("outside_ops") or []],
    )
    return msgspec.structs.replace(profile, suggestions=suggest(profile))


def _from_hardware(m: Measurement, report: CompileReport | None) -> Profile:
    b = m.breakdown
    bw, peak = float(b.get("hbm_bytes_per_s", 0.0)), float(b.get("peak_flops", 0.0))
    nbytes, flops = int(b.get("min_bytes", 0)), int(b.get("flops", 0) or 0)
    bw_frac = _fraction(nbytes, bw, m.latency_s)
    flop_frac = _fraction(flops, peak, m.latency_s)
    bound = "memory" if bw_frac >= flop_frac else "compute"
    if max(bw_frac, flop_frac) < 0.1:
        bound = "overhead"
    source = "xprof" if str(b.get("timing_source", "")).startswith("xprof") else "wall clock"
    profile = Profile(
        target=m.target, measured_on="real", source=source,
        latency_s=m.latency_s, baseline_s=m.baseline_s, speedup=m.speedup,
        hbm_bytes=nbytes, flops=flops,
        achieved_bandwidth_fraction=bw_frac, achieved_compute_fraction=flop_frac,
        bound=bound, grid_steps=0,
        vmem_bytes=report.vmem_bytes if report else None,
        vmem_limit_bytes=report.vmem_limit_bytes if report else None,
        kernels=[], suggestions=[],
    )
    return msgspec.structs.replace(profile, suggestions=suggest(profile))


def suggest(p: Profile) -> list[str]:
    """Concrete next steps read off the numbers (no suggestion without a number behind it)."""
    out: list[str] = []
    if p.latency_s > 0 and p.outside_ops_s >= OUTSIDE_SHARE * p.latency_s:
        named = f" ({', '.join(p.outside_ops[:6])})" if p.outside_ops else ""
        out.append(
            f"XLA ops around the kernels{named} take {p.outside_ops_s * 1e6:.2f} us, "
            f"{p.outside_ops_s / p.latency_s:.0%} of the time. Where they are relayout copies, "
            "read and write those arrays in the layout XLA keeps them (a narrow last axis "
            "transposed in the wrapper is a bitcast)."
        )
    for k in p.kernels:
        per_step = k.latency_s / max(k.grid_steps, 1)
        if k.bound == "overhead" or (per_step < MIN_USEFUL_STEP_S and k.overhead_s > 0.3 * k.latency_s):
            out.append(
                f"{k.name}: {k.grid_steps} grid steps at {per_step * 1e6:.2f} us each; fixed "
                f"per-step overhead is {k.overhead_s / k.latency_s:.0%} of the time. Use larger "
                "blocks (fewer steps)."
            )
        for w in k.windows:
            if w.get("block_shape") and w["distinct_blocks"] and w["transfers"] > 1.5 * w["distinct_blocks"]:
                out.append(
                    f"{k.name}: {w['role']} {w['array_shape']} moves {w['transfers']} blocks of "
                    f"{w['block_shape']} for {w['distinct_blocks']} distinct ones (re-fetched as "
                    "its index changes between consecutive steps). Make the grid axis it does "
                    "not depend on innermost, or enlarge its block along the reduction."
                )
        if k.mxu_utilisation is not None and k.mxu_utilisation < 0.9:
            out.append(
                f"{k.name}: matmul tiles use {k.mxu_utilisation:.0%} of the MXU; make the "
                "contracting and output dims multiples of the MXU size (256 on v6e/v7, 128 on v5e)."
            )
        for c in k.caveats:
            out.append(f"{k.name}: {MODEL_CAVEAT}{c}")
    if p.vmem_bytes and p.vmem_limit_bytes and p.vmem_bytes > 0.8 * p.vmem_limit_bytes:
        out.append(
            f"VMEM use is {p.vmem_bytes / p.vmem_limit_bytes:.0%} of the scoped limit; larger "
            "blocks will not fit without raising vmem_limit_bytes."
        )
    if p.bound == "memory" and p.achieved_bandwidth_fraction < 0.6 and not p.kernels:
        out.append("Memory-bound below 60% of peak bandwidth: check for re-fetched blocks.")
    if p.speedup < 1.0:
        out.append(f"Slower than the XLA baseline ({p.speedup:.2f}x).")
    return out


def render(p: Profile) -> str:
    """Plain text for a prompt or a terminal; every figure carries its provenance."""
    label = "SIMULATED (analytic model)" if p.measured_on == "simulated" else f"measured ({p.source})"
    lines = [
        f"profile on {p.target} - {label}",
        f"latency {p.latency_s * 1e6:.2f} us, XLA baseline {p.baseline_s * 1e6:.2f} us, "
        f"speedup {p.speedup:.2f}x",
        f"bytes moved {p.hbm_bytes:,}, flops {p.flops:,}",
        f"achieved {p.achieved_bandwidth_fraction:.1%} of peak HBM bandwidth, "
        f"{p.achieved_compute_fraction:.1%} of peak bf16 compute; bound: {p.bound}",
        f"grid steps {p.grid_steps}, VMEM {p.vmem_bytes if p.vmem_bytes is not None else '?'} "
        f"of {p.vmem_limit_bytes if p.vmem_limit_bytes is not None else '?'} bytes",
    ]
    for k in p.kernels:
        lines.append(
            f"kernel {k.name}: grid {k.grid}, {k.latency_s * 1e6:.2f} us "
            f"(compute {k.compute_s * 1e6:.2f}, memory {k.memory_s * 1e6:.2f}, "
            f"overhead {k.overhead_s * 1e6:.2f} us), bound {k.bound}"
        )
        for w in k.windows:
            lines.append(
                f"  {w['role']} {w['array_shape']} {w['dtype']} block {w['block_shape']}: "
                f"{w['transfers']} transfers, {w['distinct_blocks']} distinct blocks"
            )
    lines += [f"- {s}" for s in p.suggestions]
    return "\n".join(lines)


__all__ = ["KernelProfile", "Profile", "render", "suggest", "summarize"]
