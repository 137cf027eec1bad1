"""The published v5e points priced three ways: the model alone, the TPU compiler's static
estimate alone, and the combination (compute from the compiler, memory from the model).

Needs the ``tpu-compiler`` extra (libtpu). Each published configuration of the matmul guide
(:mod:`tools.performance.calibration`) and of the sparse guide
(:mod:`tools.performance.sparse_guide`) is lowered for v5e and compiled ahead of time:

- a kernel's program: the model's latency (:func:`~tools.performance.roofline.estimate_program`);
  the compiler's alone, its kernels' static cycles (:mod:`tools.performance.llo_cycles`) and
  the estimated_cycles of XLA's ops around them (the transposed-RHS variant's transposes),
  at the clock, plus one launch each; the combination
  (:func:`tools.performance.compiled_compute.program_sides`);
- an XLA reference: XLA:TPU's program priced per op by the model (``latency_s`` of
  :func:`~tools.performance.xla_tpu.tpu_baseline`, what a verdict's baseline is), the
  compiler's estimated_cycles alone (``compiler_compute_s`` plus a launch per op), and the
  combination (``compiler_latency_s``).

Published times are host ``timeit`` wall times, which hold a fixed dispatch cost; each
method gets its own constant, found as the model's is (the guide's 1024^3 XLA row's
published time minus that method's estimate of it) and never fitted per row. Every
estimate is simulated.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import msgspec

METHODS = ("model", "compiler", "combined", "combined_overhead")


class Point(msgspec.Struct, frozen=True):
    """One published configuration, its three estimates (simulated, before dispatch)."""

    config: str
    variant: str
    size: int
    published_s: float
    model_s: float
    compiler_s: float | None
    combined_s: float | None  # the compiler's step in place of the model's compute + overhead
    combined_overhead_s: float | None  # ... in place of the model's compute, overhead kept
    regions_counted: str = ""  # how the kernel's pl.when regions entered the compiler's step
    note: str = ""


def _kernel_point(text: str, chip: Any, values: list[Any] | None = None,
                  ) -> tuple[float, float | None, float | None, float | None, str, str]:
    from tools.lowered import tpu_compiler
    from tools.lowered.mosaic import parse_lowered
    from tools.performance.baseline import dots_of
    from tools.performance.compiled_compute import program_sides
    from tools.performance.roofline import KERNEL_LAUNCH_S, estimate_program
    from tools.performance.xla_tpu import price_program

    program = parse_lowered(text)
    estimate = estimate_program(program, chip, values)
    (compiled,) = tpu_compiler.compile_all([text], chip.name, keep_hlo=True, cycles=True)
    if not compiled.ok:
        return (estimate.latency_s, None, None, None, "",
                f"the compiler refused it: {compiled.message}")
    sides = program_sides(program, estimate, chip, compiled, values)
    kernels = [k.compiler_compute_s for k in sides.kernels]
    compiler: float | None = None
    if kernels and all(k is not None for k in kernels):
        around = [op for op in price_program(compiled.hlo, chip, dots_of(text)).ops
                  if op.cycles is not None]
        compiler = (sum(k or 0.0 for k in kernels) + len(kernels) * KERNEL_LAUNCH_S
                    + sum(op.cycles or 0 for op in around) / chip.clock_hz
                    + len(around) * KERNEL_LAUNCH_S)
    counted = "; ".join(sorted({k.regions_counted for k in sides.kernels if k.regions_counted}))
    note = sides.note or "; ".join(k.note for k in sides.kernels if k.note)
    return (estimate.latency_s, compiler, sides.combined_latency_s,
            sides.combined_overhead_latency_s, counted, note)


def _xla_point(fn: Callable[..., Any], args: list[Any], chip: Any,
               ) -> tuple[float, float | None, float | None, float | None, str, str]:
    from tools.performance.roofline import KERNEL_LAUNCH_S
    from tools.performance.xla_tpu import tpu_baseline

    base = tpu_baseline(fn, args, chip)
    ran = [f for f in base.fusions if f.bound not in ("unpriced",) and f.opcode != "copy-start"]
    missing = [f.name for f in ran if f.cycles is None]
    compiler = None if missing else (base.compiler_compute_s or 0.0) + len(ran) * KERNEL_LAUNCH_S
    note = f"ops without estimated_cycles: {', '.join(missing)}" if missing else ""
    # an XLA op has no per-step overhead: both combinations are the op's max(compute, memory)
    return base.latency_s, compiler, base.compiler_latency_s, base.compiler_latency_s, "", note


def _sparse_args(variant: str) -> tuple[Callable[..., Any], list[Any], list[Any]]:
    import jax
    import jax.numpy as jnp

    from tools.performance import sparse_guide as sg

    square = jax.ShapeDtypeStruct((sg.SIZE, sg.SIZE), jnp.bfloat16)
    if variant == "dsd":
        rows, cols = sg.dsd_blocks()
        n = len(rows)
        return sg.dsd(n), [jax.ShapeDtypeStruct((n,), jnp.int32),
                           jax.ShapeDtypeStruct((n,), jnp.int32),
                           jax.ShapeDtypeStruct((n, 512, 512), jnp.bfloat16), square,
                           square], [rows, cols, None, None, None]
    maps = sg.tril_prefetch_maps(sg.SIZE // 512)
    return sg.masked_output(), [*(jax.ShapeDtypeStruct(m.shape, jnp.int32) for m in maps),
                                square, square,
                                jax.ShapeDtypeStruct((2, 512, 512), jnp.int32)], [
        *maps, None, None, None]


def point(row: dict[str, Any], chip_name: str = "v5e") -> Point:
    """One published row priced the three ways."""
    import jax
    import jax.numpy as jnp

    from tools.lowered.compile_check import lower_for_tpu
    from tools.performance.calibration import SPARSE_KERNELS, config_name, guide_matmul
    from tools.performance.chips import get_chip

    chip = get_chip(chip_name)
    n = int(row["size"])
    x = jax.ShapeDtypeStruct((n, n), jnp.bfloat16)
    variant = row["variant"]
    if variant == "xla":
        figures = _xla_point(jnp.matmul, [x, x], chip)
    elif variant == "xla_masked":
        mask = jax.ShapeDtypeStruct((n, n), jnp.int32)
        figures = _xla_point(lambda m, a, b: m * (a @ b), [mask, x, x], chip)
    elif variant in SPARSE_KERNELS:
        fn, args, values = _sparse_args(variant)
        figures = _kernel_point(lower_for_tpu(jax.jit(fn).trace(*args), chip=chip_name), chip,
                                values)
    else:
        b = row["block"]
        fn = guide_matmul(b["bm"], b["bk"], b["bn"], variant)
        figures = _kernel_point(lower_for_tpu(jax.jit(fn).trace(x, x), chip=chip_name), chip)
    model, compiler, combined, with_overhead, counted, note = figures
    return Point(config_name(row), variant, n, float(row["seconds"]), model, compiler,
                 combined, with_overhead, counted, note)


def published_rows() -> list[dict[str, Any]]:
    """Every published v5e row: the matmul guide's, then the sparse guide's."""
    from tools.performance.calibration import DATA, SPARSE_DATA

    rows = list(json.loads(DATA.read_text(encoding="utf-8"))["rows"])
    return rows + list(json.loads(SPARSE_DATA.read_text(encoding="utf-8"))["rows"])


def dispatch(points: list[Point], method: str) -> float | None:
    """The method's fixed timing cost, from the smallest XLA row (as the model's)."""
    xla = min((p for p in points if p.variant == "xla"), key=lambda p: p.size)
    value = getattr(xla, f"{method}_s")
    return None if value is None else max(0.0, xla.published_s - value)


def ratios(points: list[Point]) -> dict[str, dict[str, float | None]]:
    """Per point and method: (estimate + the method's dispatch) / published."""
    out: dict[str, dict[str, float | None]] = {}
    fixed = {m: dispatch(points, m) for m in METHODS}
    for p in points:
        out[p.config] = {}
        for m in METHODS:
            value, d = getattr(p, f"{m}_s"), fixed[m]
            out[p.config][m] = None if value is None or d is None else (value + d) / p.published_s
    return out


def summary(points: list[Point], classes: tuple[tuple[str, Callable[[Any], bool]], ...],
            ) -> dict[str, Any]:
    """Per class (points at 4096 and above) and overall: each method's errors, and whether
    the combination is at least as accurate as the model alone (mean and worst error)."""
    r = ratios(points)
    large = [p for p in points if p.size >= 4096]

    def errors(chosen: list[Point], method: str) -> dict[str, float] | None:
        values = [r[p.config][method] for p in chosen]
        if not values or any(v is None for v in values):
            return None
        errs = [abs(v - 1) for v in values if v is not None]
        return {"mean_abs_error": round(sum(errs) / len(errs), 4),
                "max_abs_error": round(max(errs), 4)}

    by_class = []
    for name, member in classes:
        chosen = [p for p in large if member(p)]
        if chosen:
            by_class.append({"class": name, "configs": len(chosen),
                             **{m: errors(chosen, m) for m in METHODS}})
    overall = {m: errors(large, m) for m in METHODS}
    model = overall["model"]

    def holds(method: str) -> bool:
        other = overall[method]
        return bool(model and other and other["mean_abs_error"] <= model["mean_abs_error"]
                    and other["max_abs_error"] <= model["max_abs_error"])

    return {"dispatch_s": {m: dispatch(points, m) for m in METHODS},
            "by_class": by_class, "overall_4096_and_above": overall,
            "at_least_as_accurate_as_the_model": {m: holds(m) for m in METHODS[1:]}}


__all__ = ["METHODS", "Point", "dispatch", "point", "published_rows", "ratios", "summary"]
