"""How much memory freezing a suite takes, known before anything is built, and whether it fits.

Everything here is abstract evaluation: the input maker's traced shapes and the reference's
jaxpr, in the task's own dtypes and in the oracle's (widened) ones. Nothing is run.

The model, per case (the suite builds one case at a time):

* ``I``: the inputs, held twice (the arrays JAX made, and the host copies the suite keeps);
* the reference run: its peak of live intermediates, from a liveness walk of its jaxpr in
  which an elementwise result used once by another elementwise op or a reduction is fused
  (never materialised), as XLA does; sub-programs add their own peak where they are called;
* the oracle run: widened inputs twice (host and device) and its own peak, the float64
  outputs ``O`` of the first run held (with ``|inputs|``) during the second, the term
  magnitudes, and its outputs' host copies;
* the per-output work after both (:mod:`tools.correctness.floors`): oracle, magnitudes and
  slack, ``3 O``, plus temporaries: five more ``O`` for an output of one chunk, a few
  chunks for a larger one;
* a fixed ``RUNTIME_BYTES`` for what the data model does not see: compiled programs, the
  runtime's own buffers and workspaces (about 130 MiB on XLA:CPU for a small task; up to
  0.43 GiB more than the data model for a float64 Conv3d, the largest excess measured);
* the first case's perturbation check: a float64 copy and noise per input, the reference
  run again;
* at the tuning point, the probes' conditioning (:mod:`tools.correctness.conditioning`): the
  oracle run on perturbed float64 inputs while the first run's outputs, the term
  magnitudes, the float32 running maximum and the slack are held, plus chunk temporaries;
* what the suite already holds: in memory, every earlier case's inputs, oracle and slack
  (nothing, when large arrays go to disk as they are built).

A case's peak is the larger of the reference and oracle phases plus what is held. It is an
estimate, not a guarantee: it overstates where XLA fuses more than the rule above (the side
to err on when the alternative is a process killed for memory) and was at or above the
measured growth of every suite ``benchmarks/suite_memory.py`` froze (shipped tasks, and
JAXBench tasks at full size and scaled).
"""

from __future__ import annotations

import math
import os
import resource
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from tools.correctness.floors import CHUNK
from tools.correctness.oracle import PRECISIONS, OraclePrecision, precision_mode, widened_dtype

SAFETY = 0.85  # share of the available memory a suite may plan to use
RUNTIME_BYTES = 640 << 20  # compiled programs, runtime buffers, workspaces (module doc)
_GIB = float(1 << 30)
_ELEMENTWISE = frozenset({
    "abs", "acos", "acosh", "add", "and", "asin", "asinh", "atan", "atan2", "atanh",
    "broadcast_in_dim", "cbrt", "ceil", "clamp", "convert_element_type", "copy", "copy_p",
    "cos", "cosh", "div", "eq", "erf", "erf_inv", "erfc", "exp", "exp2", "expm1", "floor",
    "ge", "gt", "integer_pow", "is_finite", "le", "lgamma", "log", "log1p", "logistic", "lt",
    "max", "min", "mul", "ne", "neg", "nextafter", "not", "or", "pow", "reduce_precision",
    "rem", "round", "rsqrt", "select_n", "shift_left", "shift_right_arithmetic",
    "shift_right_logical", "sign", "sin", "sinh", "sqrt", "square", "stop_gradient", "sub",
    "tan", "tanh", "xor", "squeeze", "expand_dims", "reshape",
})
_REDUCTIONS = frozenset({"reduce_sum", "reduce_max", "reduce_min", "reduce_prod",
                         "reduce_and", "reduce_or", "argmax", "argmin"})


class CaseFootprint(msgspec.Struct, frozen=True):
    """Bytes of one case's build, by phase (see the module docstring)."""

    shape_index: int
    input_bytes: int
    output_bytes: int  # the reference's outputs in its own dtypes
    reference_peak_bytes: int  # live intermediates of the reference, outputs included
    oracle_input_bytes: int
    oracle_output_bytes: int  # float64 outputs
    oracle_peak_bytes: int
    oracle_precision: str
    held_bytes: int  # what the suite keeps of this case once it is built
    peak_bytes: int  # while this case is built, not counting earlier cases


class SuiteFootprint(msgspec.Struct, frozen=True):
    cases: tuple[CaseFootprint, ...]
    peak_bytes: int  # the largest case's peak plus everything held before it
    largest_shape: int

    def describe(self) -> str:
        case = next(c for c in self.cases if c.shape_index == self.largest_shape)
        return (f"about {gib(self.peak_bytes)} at shape {case.shape_index} (inputs "
                f"{gib(case.input_bytes)}, reference peak {gib(case.reference_peak_bytes)}, "
                f"{case.oracle_precision} oracle peak {gib(case.oracle_peak_bytes)} with "
                f"outputs {gib(case.oracle_output_bytes)})")


def gib(n: float) -> str:
    return f"{n / _GIB:.2f} GiB" if n >= _GIB / 100 else f"{n / (1 << 20):.1f} MiB"


def nbytes(specs: Iterable[Any]) -> int:
    return sum(math.prod(s.shape) * np.dtype(s.dtype).itemsize for s in specs)


def case_footprint(task: Any, shape_index: int, held_per_case: bool = True) -> CaseFootprint:
    """The footprint of one case at ``shape_index``, from abstract evaluation only."""
    import jax

    specs = task.input_specs(shape_index)
    reference = task.reference_at(shape_index)
    closed = jax.make_jaxpr(reference)(*specs)
    outs = closed.out_avals
    ref_peak = peak_live_bytes(closed.jaxpr)
    precision, oracle_closed = _oracle_jaxpr(reference, specs)
    wide_in = [jax.ShapeDtypeStruct(s.shape, widened_dtype(s.dtype, precision)) for s in specs]
    oracle_out = sum(math.prod(o.shape) * 8 for o in outs)
    oracle_peak = peak_live_bytes(oracle_closed.jaxpr) if oracle_closed is not None else (
        2 * ref_peak)
    inputs, wide, out = nbytes(specs), nbytes(wide_in), nbytes(outs)
    held = inputs + oracle_out + oracle_out // 2 if held_per_case else 0  # + float32 slack
    perturbed = inputs + 2 * wide + ref_peak + out  # the first case's perturbation check
    oracle_runs = out + inputs + 2 * wide + oracle_peak + 2 * oracle_out
    chunked = min(5 * oracle_out, 6 * CHUNK * 8)  # whole-array temporaries, or per chunk
    per_output = out + 3 * oracle_out + chunked
    # the probes' conditioning runs (at the tuning point): the oracle on perturbed inputs
    # while its first outputs, the term magnitudes, the running maximum and the slack are held
    conditioning = (out + 2 * wide + oracle_peak + 3 * oracle_out
                    + min(3 * oracle_out, 3 * CHUNK * 8)) if shape_index == 0 else 0
    peak = RUNTIME_BYTES + 2 * inputs + max(ref_peak, perturbed, oracle_runs, per_output,
                                            conditioning)
    return CaseFootprint(shape_index, inputs, out, ref_peak, wide, oracle_out, oracle_peak,
                         precision, held, peak)


def suite_footprint(task: Any, cases_per_shape: dict[int, int],
                    held_per_case: bool = True) -> SuiteFootprint:
    """The peak of building cases in order: ``cases_per_shape`` = how many cases each shape
    gets (the tuning point: seeds and probes; unseen shapes: one)."""
    footprints = tuple(case_footprint(task, i, held_per_case) for i in sorted(cases_per_shape))
    held, peak, largest = 0, 0, 0
    for fp in footprints:
        for _ in range(cases_per_shape[fp.shape_index]):
            if held + fp.peak_bytes > peak:
                peak, largest = held + fp.peak_bytes, fp.shape_index
            held += fp.held_bytes
    return SuiteFootprint(footprints, peak, largest)


def _oracle_jaxpr(reference: Any, specs: Sequence[Any]) -> tuple[OraclePrecision, Any]:
    import jax

    for precision in PRECISIONS:
        with precision_mode(precision):
            wide = [jax.ShapeDtypeStruct(s.shape, widened_dtype(s.dtype, precision))
                    for s in specs]
            try:
                return precision, jax.make_jaxpr(reference)(*wide)
            except Exception:  # this precision does not trace; the oracle will not use it
                continue
    return PRECISIONS[-1], None


def peak_live_bytes(jaxpr: Any) -> int:
    """The largest total of intermediates live at once in ``jaxpr`` (its inputs excluded,
    its outputs included), with single-use elementwise results fused into their consumer."""
    from jax.extend import core

    uses: dict[Any, list[int]] = {}
    for i, eqn in enumerate(jaxpr.eqns):
        for v in eqn.invars:
            if isinstance(v, core.Var):
                uses.setdefault(v, []).append(i)
    outputs = {v for v in jaxpr.outvars if isinstance(v, core.Var)}
    fused: set[Any] = set()
    for eqn in jaxpr.eqns:
        if eqn.primitive.name not in _ELEMENTWISE:
            continue
        for v in eqn.outvars:
            readers = uses.get(v, [])
            if v not in outputs and len(readers) == 1 and jaxpr.eqns[readers[0]].primitive.name \
                    in _ELEMENTWISE | _REDUCTIONS:
                fused.add(v)
    # A fused equation runs inside its reader: its operands stay live until that reader runs.
    runs_at = list(range(len(jaxpr.eqns)))
    for i in range(len(jaxpr.eqns) - 1, -1, -1):
        outs = jaxpr.eqns[i].outvars
        if outs and all(v in fused for v in outs):
            runs_at[i] = runs_at[uses[outs[0]][0]]
    last = {v: max(runs_at[i] for i in idx) for v, idx in uses.items()}
    live, peak = 0, 0
    sizes: dict[Any, int] = {}
    for i, eqn in enumerate(jaxpr.eqns):
        inner = max((peak_live_bytes(_open(sub)) for sub in core.jaxprs_in_params(eqn.params)),
                    default=0)
        for v in eqn.outvars:
            if isinstance(v, core.Var) and v not in fused and hasattr(v.aval, "shape"):
                sizes[v] = math.prod(v.aval.shape) * np.dtype(v.aval.dtype).itemsize
                live += sizes[v]
        peak = max(peak, live + inner)
        for v in eqn.invars:
            if isinstance(v, core.Var) and last.get(v) == i and v in sizes and v not in outputs:
                live -= sizes.pop(v)
        for v in eqn.outvars:  # results nobody reads
            if v in sizes and v not in uses and v not in outputs:
                live -= sizes.pop(v)
    return peak


def _open(sub: Any) -> Any:
    return getattr(sub, "jaxpr", sub)


def available_bytes() -> tuple[int, str]:
    """What this process may still allocate: the tightest of MemAvailable, its memory
    cgroup's limit less its usage (v2 or v1, every ancestor), and RLIMIT_AS/RLIMIT_DATA."""
    found: list[tuple[int, str]] = []
    meminfo = _read("/proc/meminfo")
    for line in meminfo.splitlines():
        if line.startswith("MemAvailable:"):
            found.append((int(line.split()[1]) * 1024, "MemAvailable"))
    for limit, usage, where in _cgroup_limits():
        found.append((max(limit - usage, 0), f"cgroup {where}"))
    rss = _rss_bytes()
    for name in ("RLIMIT_AS", "RLIMIT_DATA"):
        soft, _ = resource.getrlimit(getattr(resource, name))
        if soft != resource.RLIM_INFINITY:
            used = _vm_bytes() if name == "RLIMIT_AS" else rss
            found.append((max(soft - used, 0), name))
    if not found:
        return 1 << 62, "no limit found"
    return min(found)


def _cgroup_limits() -> list[tuple[int, int, str]]:
    limits = []
    for line in _read("/proc/self/cgroup").splitlines():
        hierarchy, controllers, path = [*line.split(":", 2), "", ""][:3]
        if hierarchy == "0" and not controllers:  # cgroup v2
            base, names = Path("/sys/fs/cgroup"), ("memory.max", "memory.current")
        elif "memory" in controllers.split(","):  # cgroup v1
            base, names = Path("/sys/fs/cgroup/memory"), ("memory.limit_in_bytes",
                                                          "memory.usage_in_bytes")
        else:
            continue
        for directory in _ancestors(base, path):
            limit, usage = _read(directory / names[0]).strip(), _read(directory / names[1]).strip()
            if limit.isdigit() and usage.isdigit() and int(limit) < 1 << 60:
                limits.append((int(limit), int(usage), str(directory / names[0])))
    return limits


def _ancestors(base: Path, path: str) -> list[Path]:
    """The cgroup's directory and its parents, as far as they are mounted here (inside a
    container the process's own cgroup is often the mount's root)."""
    parts = [p for p in path.strip("/").split("/") if p]
    found = [base / Path(*parts[:n]) if n else base for n in range(len(parts), -1, -1)]
    return [d for d in found if d.is_dir()]


def _read(path: str | Path) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def _rss_bytes() -> int:
    fields = _read("/proc/self/statm").split()
    return int(fields[1]) * os.sysconf("SC_PAGE_SIZE") if len(fields) > 1 else 0


def _vm_bytes() -> int:
    fields = _read("/proc/self/statm").split()
    return int(fields[0]) * os.sysconf("SC_PAGE_SIZE") if fields else 0


SCALE_LADDER: tuple[float, ...] = (0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625)
SCALE_RATIOS: tuple[float, ...] = (1.0, 0.75, 0.5)  # the suggested list, as the default's


def fit_problem(task: Any, cases_per_shape: dict[int, int], held_per_case: bool = True,
                available: tuple[int, str] | None = None) -> tuple[SuiteFootprint, str | None]:
    """The suite's footprint and, when it does not fit, why (with the --scale that would)."""
    footprint = suite_footprint(task, cases_per_shape, held_per_case)
    room, source = available or available_bytes()
    if footprint.peak_bytes <= SAFETY * room:
        return footprint, None
    problem = (f"{task.path}: freezing the suite needs {footprint.describe()}, more than "
               f"{SAFETY:.0%} of the {gib(room)} this process can use ({source})")
    return footprint, problem + "; " + _suggestion(task, cases_per_shape, held_per_case,
                                                   SAFETY * room)


def _suggestion(task: Any, cases_per_shape: dict[int, int], held_per_case: bool,
                room: float) -> str:
    if task.format != "jaxbench":
        return "reduce the sizes in its SHAPES (--scale applies to JAXBench CONFIG sizes)"
    from tools.inputs.tasks import TaskError, load_task

    first = task.shapes[0].get("scale", 1.0) if isinstance(task.shapes[0], dict) else 1.0
    base = float(first) if isinstance(first, int | float) else 1.0
    for step in SCALE_LADDER:
        scales = [round(base * step * r, 6) for r in SCALE_RATIOS]
        try:
            scaled = load_task(task.path, scales=scales, validate=False)
            counts = {i: cases_per_shape.get(i, 1) if i == 0 else 1
                      for i in range(len(scaled.shapes))}
            peak = suite_footprint(scaled, counts, held_per_case).peak_bytes
        except TaskError:
            continue
        if peak <= room:
            return (f"--scale {','.join(f'{s:g}' for s in scales)} would need about "
                    f"{gib(peak)}")
    return (f"not even --scale {base * SCALE_LADDER[-1]:g} fits: the task's sizes do not "
            "shrink with its CONFIG")
