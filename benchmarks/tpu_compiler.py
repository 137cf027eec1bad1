"""The real TPU compiler as the compile check: its cost and where it disagrees, as JSON.

- `compile_s`: wall seconds of the compiler per program (no cache) at the shipped tuning
  points: the shipped kernels at their tasks' tuning points (every TUNABLES value) and the
  offline author's kernel per shipped task (default and largest knobs); median and worst,
  and the worst programs by name. The compile check reads no bundle schedules;
  `--cycles-cost` compiles the same programs again with them (`compile_s_with_cycles`: the
  compile, and with the kernels' static cycles read, `median_with_cycles_s`,
  `worst_with_cycles_s`; how many compiled programs gave them, the rest named with why). The compiles run one after another in one sandboxed
  child (JAX and libtpu start once: `child_startup_s` is the rest of that child's time).
- `edge`: the same for the tuning configurations at the VMEM edge (tests/tpu_corpus.py),
  where a refused kernel may take the compiler much longer to refuse.
- `disagreements`: every program the emulated check and the compiler judge differently
  (shipped, offline, edge and, with `--adversarial`, the adversarial corpus lowered in
  the sandbox); the compiler's verdict is the one the verifier uses.
- `baselines` (`--baselines`): each shipped task's XLA baseline at its tuning point as
  `simulated_baseline` prices it (tools/performance/simbaseline.py: XLA:TPU's program, or the
  host program with the reason), beside the host program priced by the model (`host_s`),
  XLA:TPU's program priced per op by the kernel model's compute rules (`xla_tpu_s`, even
  where ops without a pricing rule keep it from being the baseline), the same program with
  the compiler's `estimated_cycles` as each op's compute (`xla_tpu_compiler_cycles_s`,
  beside, never the baseline) and XLA's own `optimal_seconds`; how many baselines moved by
  more than 10% from the host program's. `first_kernel_speedups_simulated_unverified`: the
  offline author's first kernel (default knobs) per task priced by the model at the tuning
  point, its speedup over the host-program baseline (before) and over the baseline now
  (after); no correctness run, and kernels the model cannot count are left out.
- `calibration_xla_v5e` (`--baselines`): the published v5e XLA rows (the Pallas matmul
  guide's bf16 jnp.matmul at 1024, 4096, 8192; the sparse guide's 16384^3 dense and masked
  references) against the model alone (the host program), the compiler's static estimate
  alone, the model's rules on XLA:TPU's program (the baseline), the compiler's cycles with
  the model's memory on that program (`combined`, beside) and `optimal_seconds`, each plus
  the timing method's dispatch constant; the worst error of each.
- `install`: the extra's pin and libtpu's installed size (the install's seconds are
  measured outside: `time pip install -e '.[tpu-compiler]'`).

`--part disagreements` is the whole conformance list instead (6-13 minutes on two cores; the
test suite judges a few representative programs): the shipped kernels at every TUNABLES
value, the offline author's kernels, the VMEM-edge configurations (at least 40 tuning
configurations in all) and the adversarial corpus, every disagreement written out, checked
against `tests/tpu_corpus.py`'s KNOWN_DISAGREEMENTS (`unexplained`: new ones and known ones
that went away), and the compiles that crashed or timed out. It exits 1 on anything
unexplained, so it can gate a change to either check.

The machine's load average is printed with the figures: on a shared 2-core machine the
compile seconds scale with it.

Usage: python benchmarks/tpu_compiler.py [--chip v6e] [--adversarial] [--skip-edge]
       [--baselines] [--skip-compile] [--cycles-cost]
       python benchmarks/tpu_compiler.py --part disagreements [--chip v6e]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _seconds(programs: list) -> dict:
    judged = [p for p in programs if p.real is not None]
    seconds = sorted((p.real.seconds, p.name) for p in judged)
    if not seconds:
        return {"programs": 0}
    whole = sorted(p.real.seconds + p.real.cycles_seconds for p in judged)
    compiled = [p for p in judged if p.real.ok]
    return {
        "programs": len(seconds),
        "median_s": round(statistics.median(s for s, _ in seconds), 3),
        "worst_s": round(seconds[-1][0], 3),
        "worst": [{"program": n, "seconds": round(s, 3)} for s, n in seconds[-3:][::-1]],
        # the compile with its kernels' static cycles read from the bundle schedule
        "median_with_cycles_s": round(statistics.median(whole), 3),
        "worst_with_cycles_s": round(whole[-1], 3),
        "compiled_with_kernel_cycles": sum(bool(p.real.kernel_cycles) for p in compiled),
        "compiled_without": [{"program": p.name, "why": p.real.cycles_note}
                             for p in compiled if not p.real.kernel_cycles][:10],
        "refused_by_compiler": sum(not p.real.ok for p in judged),
        "timeouts": sum(p.real.kind == "timeout" for p in judged),
    }


def _lowered_for_tpu(functions: list) -> list[str]:
    import jax

    return [jax.jit(fn).trace(*fargs).lower(lowering_platforms=("tpu",)).as_text()
            for fn, fargs in functions]


def _priced(functions: list, chip_name: str) -> list:
    """(XLA:TPU's program priced or None, optimal_seconds, error) per (fn, args), compiled in
    one child."""
    from tools.lowered import tpu_compiler
    from tools.performance.baseline import dots_of
    from tools.performance.chips import get_chip
    from tools.performance.xla_tpu import price_program

    chip = get_chip(chip_name)
    out = []
    texts = _lowered_for_tpu(functions)
    for text, compiled in zip(texts, tpu_compiler.compile_all(texts, chip.name, keep_hlo=True),
                              strict=True):
        if not compiled.ok:
            out.append((None, None, compiled.message[:200]))
            continue
        price = price_program(compiled.hlo, chip, dots_of(text))
        out.append((price, compiled.optimal_seconds,
                    "unpriced: " + ", ".join(price.unpriced) if price.unpriced else ""))
    return out


def _ratio(seconds: float | None, dispatch: float, published: float) -> float | None:
    return round((seconds + dispatch) / published, 3) if seconds else None


def calibration_xla() -> dict:
    """The published v5e XLA rows (the matmul guide's jnp.matmul at 1024, 4096 and 8192; the
    sparse guide's 16384^3 dense and masked references), each as (figure + dispatch) /
    published for the model alone (the host program), the compiler's static estimate alone
    (its cycles at the clock, summed over the ops, no memory side and no launches), the
    model's rules on XLA:TPU's program (the baseline), the compiler's cycles with the
    model's memory on it (beside) and `optimal_seconds`. The
    dispatch constant is the model calibration's (the 1024^3 row's published time minus the
    model's estimate of it), so the model's ratio there is 1 by construction."""
    import json as _json

    import jax
    import jax.numpy as jnp

    from tools.performance import calibration

    data = calibration.published()
    matmul_rows = [r for r in data["rows"] if r["variant"] == "xla"]
    model_rows = {calibration.config_name(r): calibration.model_seconds(r) for r in matmul_rows}
    dispatch = calibration.dispatch_seconds(matmul_rows, model_rows)
    sparse = _json.loads(calibration.SPARSE_DATA.read_text(encoding="utf-8"))["rows"]
    rows = [*matmul_rows, *(r for r in sparse if r["variant"] in ("xla", "xla_masked"))]
    functions = []
    for r in rows:
        x = jax.ShapeDtypeStruct((r["size"], r["size"]), jnp.bfloat16)
        if r["variant"] == "xla":
            functions.append((jnp.matmul, [x, x]))
        else:
            mask = jax.ShapeDtypeStruct((r["size"], r["size"]), jnp.int32)
            functions.append((lambda m, a, b: m * (a @ b), [mask, x, x]))
    out = []
    for r, (price, optimal, error) in zip(rows, _priced(functions, "v5e"), strict=True):
        published = float(r["seconds"])
        name = calibration.config_name(r)
        model = model_rows.get(name) or calibration.model_seconds(r)
        out.append({"point": name, "published_s": published,
                    "model_ratio": _ratio(model, dispatch, published),
                    "compiler_alone_ratio": _ratio(price and price.compiler_compute_s,
                                                   dispatch, published),
                    "model_on_xla_tpu_ratio": _ratio(price and price.latency_s, dispatch,
                                                     published),
                    "combined_ratio": _ratio(price and price.compiler_latency_s, dispatch,
                                             published),
                    "optimal_ratio": _ratio(optimal, dispatch, published),
                    "bound": sorted({o.bound for o in price.ops}) if price else None,
                    "error": error})
    worst = {k: max((abs(row[k] - 1) for row in out if row[k]), default=None)
             for k in ("model_ratio", "compiler_alone_ratio", "model_on_xla_tpu_ratio",
                       "combined_ratio", "optimal_ratio")}
    return {"dispatch_s": dispatch, "rows": out,
            "worst_abs_error": {k: round(v, 3) if v is not None else None
                                for k, v in worst.items()}}


def _first_kernels(chip_name: str) -> dict:
    """The offline author's first kernel (default knobs) per shipped task, priced by the model
    at the tuning point: {task: (latency_s, sound)}; unverified, simulated."""
    from tests import tpu_corpus
    from tools.lowered.mosaic import parse_lowered
    from tools.performance.chips import get_chip
    from tools.performance.roofline import estimate_program

    chip = get_chip(chip_name)
    found = {}
    for program in tpu_corpus.offline(chip_name):
        name = program.name.split(" ")[1]
        if name in found or not program.name.endswith(" default @ shape 0") or not program.text:
            continue
        priced = estimate_program(parse_lowered(program.text), chip, None)
        found[name] = (priced.latency_s, not any(k.unsound for k in priced.kernels))
    return found


def _geomean(values: list) -> float | None:
    import math

    return round(math.exp(statistics.fmean(math.log(v) for v in values)), 3) if values else None


def baselines(chip_name: str) -> dict:
    """Each shipped task's baseline from both programs, and the offline author's first
    kernels' simulated speedups against each (see the module's text)."""
    import functools

    import jax

    from kernelgraph.tasknames import shipped_tasks
    from tools.inputs.tasks import load_task
    from tools.lowered import tpu_compiler
    from tools.performance.chips import get_chip
    from tools.performance.simbaseline import simulated_baseline

    chip = get_chip(chip_name)
    tasks = []
    for name, path in sorted(shipped_tasks().items()):
        task = load_task(path, validate=False)
        fargs = list(jax.eval_shape(functools.partial(task.make_inputs, 0, 0)))
        tasks.append((name, task.reference_at(0), fargs))
    # one compile child for every reference; simulated_baseline then reads the cache
    tpu_compiler.compile_all(_lowered_for_tpu([(f, a) for _, f, a in tasks]), chip.name,
                             keep_hlo=True)
    kernels = _first_kernels(chip_name)
    rows = []
    for name, reference, fargs in tasks:
        found = simulated_baseline(reference, fargs, chip)
        priced = found.xla_tpu or {}
        host = found.host.latency_s
        row = {"task": name, "host_s": host, "xla_tpu_s": priced.get("latency_s"),
               "xla_tpu_compiler_cycles_s": priced.get("compiler_latency_s"),
               "optimal_s": priced.get("optimal_seconds"), "baseline_s": found.latency_s,
               "priced_from": found.label, "fallback": found.fallback,
               "baseline_over_host": round(found.latency_s / host, 3),
               "xla_tpu_over_host": round(priced["latency_s"] / host, 3)
               if priced.get("latency_s") else None}
        if name in kernels:
            latency, sound = kernels[name]
            row |= {"first_kernel_s": latency, "first_kernel_sound": sound,
                    "speedup_before": round(host / latency, 3),
                    "speedup_after": round(found.latency_s / latency, 3)}
        rows.append(row)
    moved = [r["task"] for r in rows if abs(r["baseline_over_host"] - 1) > 0.10]
    sound = [r for r in rows if r.get("first_kernel_sound")]
    return {
        "baselines": rows,
        "baselines_priced_from_xla_tpu": sum(r["priced_from"].endswith("XLA:TPU's program")
                                             for r in rows),
        "baselines_moved_over_10pct": moved,
        "baselines_moved_over_10pct_count": len(moved),
        "first_kernel_speedups_simulated_unverified": {
            "kernels": len(sound),
            "geomean_before": _geomean([r["speedup_before"] for r in sound]),
            "geomean_after": _geomean([r["speedup_after"] for r in sound]),
            "faster_than_xla_before": sum(r["speedup_before"] > 1 for r in sound),
            "faster_than_xla_after": sum(r["speedup_after"] > 1 for r in sound)},
        "calibration_xla_v5e": calibration_xla(),
    }


def disagreements_part(chip: str) -> tuple[dict, bool]:
    """Every program of the corpus judged by both checks; (figures, nothing unexplained)."""
    from tests import tpu_corpus

    started = time.perf_counter()
    programs = [*tpu_corpus.shipped(chip), *tpu_corpus.edge(chip), *tpu_corpus.offline(chip),
                *tpu_corpus.adversarial(chip)]
    lower_s = time.perf_counter() - started
    tuning = [p for p in programs if p.source in ("shipped", "edge", "offline") and p.text]
    began = time.perf_counter()
    tpu_corpus.judge(programs, chip)
    judged = [p for p in programs if p.real is not None]
    found = tpu_corpus.disagreements(programs)
    unexplained = tpu_corpus.unexplained(found, {p.name for p in judged})
    failed = [{"program": p.name, "kind": p.real.kind, "message": p.real.message[:300]}
              for p in judged if p.real.kind in ("crash", "timeout")]
    edge = [p for p in judged if p.source == "edge"]
    figures = {
        "tuning_configurations": len(tuning),
        "programs_judged": len(judged),
        "by_source": {s: sum(p.source == s for p in judged)
                      for s in ("shipped", "edge", "offline", "adversarial")},
        "not_lowered": [{"program": p.name, "error": p.lower_error[:200]}
                        for p in programs if not p.text],
        "refused_by_compiler": sorted(p.name for p in judged if not p.real.ok),
        "edge_accepted": sum(p.real.ok for p in edge),
        "edge_refused": sum(not p.real.ok for p in edge),
        "disagreements": found,
        "unexplained": unexplained,
        "crashed_or_timed_out": failed,
        "lower_s": round(lower_s, 1),
        "judge_s": round(time.perf_counter() - began, 1),
    }
    # The edge is real only when the compiler refuses some of it and accepts the rest.
    ok = (len(tuning) >= 40 and not failed and not unexplained["new"]
          and not unexplained["gone"] and figures["edge_accepted"] > 0
          and figures["edge_refused"] > 0)
    return figures, ok


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--chip", default="v6e")
    parser.add_argument("--part", choices=("compile", "disagreements"), default="compile",
                        help="compile: compile seconds and figures (default); disagreements: "
                             "every program of the corpus, checked against the known list")
    parser.add_argument("--adversarial", action="store_true")
    parser.add_argument("--skip-edge", action="store_true")
    parser.add_argument("--skip-compile", action="store_true",
                        help="no compile-check figures (with --baselines: baselines only)")
    parser.add_argument("--baselines", action="store_true")
    parser.add_argument("--cycles-cost", action="store_true",
                        help="compile the tuning points again with the bundle schedules "
                             "(compile_s_with_cycles): what reading the kernels' cycles costs")
    parser.add_argument("--json", action="store_true", help="(the output is always JSON)")
    args = parser.parse_args()

    import jax

    jax.config.update("jax_platforms", "cpu")
    from tests import tpu_corpus
    from tools.lowered import tpu_compiler

    if not tpu_compiler.available():
        print(json.dumps({"error": "libtpu is not installed: pip install -e '.[tpu-compiler]'",
                          "compile_check": tpu_compiler.compiler_name()}))
        return 1
    os.environ[tpu_compiler.CACHE_ENV] = tempfile.mkdtemp(prefix="kg-tpu-bench-")
    import libtpu

    figures: dict = {
        "chip": args.chip,
        "compiler": tpu_compiler.compiler_name(),
        "load_average_at_start": os.getloadavg()[0],
        "install": {"extra": "tpu-compiler = jax[tpu]==" + jax.__version__,
                    "libtpu_bytes": _size(Path(libtpu.__file__).parent)},
    }
    if args.part == "disagreements":
        found, ok = disagreements_part(args.chip)
        figures |= found | {"ok": ok, "load_average_at_end": os.getloadavg()[0]}
        print(json.dumps(figures, indent=1))
        return 0 if ok else 1
    if args.baselines:
        figures.update(baselines(args.chip))
    if args.skip_compile:
        print(json.dumps(figures, indent=1))
        return 0
    started = time.perf_counter()
    tuning = [*tpu_corpus.shipped(args.chip), *tpu_corpus.offline(args.chip)]
    lower_s = time.perf_counter() - started
    began = time.perf_counter()
    tpu_corpus.judge(tuning, args.chip)
    batch_s = time.perf_counter() - began
    figures |= {
        "compile_s": _seconds(tuning),
        "lower_s": round(lower_s, 1),
        "child_startup_s": round(batch_s - sum(p.real.seconds for p in tuning if p.real), 1),
        "lowering_failures": [p.name for p in tuning if p.lower_error],
    }
    if args.cycles_cost:  # the same programs compiled again with the bundle schedules
        read = [tpu_corpus.Program(p.name, p.chip, p.source, p.text) for p in tuning if p.text]
        for p, real in zip(read, tpu_compiler.compile_all([p.text for p in read], args.chip,
                                                          cycles=True), strict=True):
            p.real = real
        figures["compile_s_with_cycles"] = _seconds(read)
    programs = list(tuning)
    if not args.skip_edge:
        edge = list(tpu_corpus.edge(args.chip))
        tpu_corpus.judge(edge, args.chip)
        figures["edge"] = _seconds(edge)
        programs += edge
    if args.adversarial:
        adversarial = list(tpu_corpus.adversarial(args.chip))
        tpu_corpus.judge(adversarial, args.chip)
        figures["adversarial"] = {"lowered": sum(bool(p.text) for p in adversarial),
                                  "refused_before_compile": [p.name for p in adversarial
                                                             if not p.text]}
        programs += adversarial
    figures["programs_judged"] = sum(p.real is not None for p in programs)
    figures["disagreements"] = tpu_corpus.disagreements(programs)
    figures["load_average_at_end"] = os.getloadavg()[0]
    print(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
