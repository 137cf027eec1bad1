"""The simulated chip's calibration and the speed of `estimate`, printed as JSON.

- `calibration`: every configuration of the JAX Pallas TPU matmul guide's published v5e
  bf16 table (tools/performance/data/pallas_matmul_guide_v5e.json), then the sparse
  guide's 16384^3 rows (tools/performance/data/pallas_sparse_guide_v5e.json: XLA `x @ y`
  and `mask * (x @ y)`, and its two scalar-prefetch kernels priced on the benchmark's own
  prefetch values): published seconds, the model's simulated seconds plus the timing
  method's dispatch constant, their ratio and error; for the scalar-prefetch kernels also
  `model_blind_s`, the model without the prefetch values (every block fetched, both sides
  of a data-dependent `pl.when` counted: how they were priced before). Then
  `calibration_dispatch_s` (from the guide's 1024^3 XLA row),
  `calibration_max_abs_error_4096_8192`, `rank_correlation` per size, and
  `error_by_class`: per kernel class, the configurations at 4096 and above (where dispatch
  does not dominate), their ratio range and mean absolute error.
- `compiler_calibration` (with the `tpu-compiler` extra; `--skip-compiler` leaves it out):
  every published v5e point (both guides) priced three ways, each with its own dispatch
  constant found as the model's is (tools/performance/compiler_calibration.py): the model
  alone, the TPU compiler's static estimate alone (its kernels' bundle cycles, XLA's ops'
  estimated_cycles), and the combination (compute from the compiler, memory from the
  model; with and without the model's per-step overhead added to the compiler's step). Per
  point the three ratios, per class at 4096 and above each method's mean and worst error,
  and whether a combination is at least as accurate as the model alone (it decides whether
  the compiler's compute enters the verdict's price).
- `estimate_8192_*`: `kernelgraph estimate` of kernels/matmul.py at bm=512, bn=1024,
  bk=1024 on the 8192^3 bf16 JAXBench-format task (benchmarks/tasks/matmul_bf16_8192), end
  to end through the API (sandboxed lowering with abstract inputs, model, baseline).
- `jaxbench_estimate`: the same for a task of a JAXBench checkout at its full size (default
  12p_RMSNorm, bf16 (8, 4096, 8192), with kernels/rmsnorm.py at block_rows=128 on
  sim-tpu-v6e); the checkout is read where it is (`--jaxbench`, or $KG_JAXBENCH), never
  copied. Its wall time and the estimate's own figures (simulated, unverified).

Usage: python benchmarks/costmodel.py [--json] [--skip-estimate] [--skip-compiler]
       [--jaxbench DIR] [--jaxbench-task NAME]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
JAXBENCH = Path(os.environ.get("KG_JAXBENCH", "/tmp/jaxbench/JAXBench/benchmark"))

# Kernel classes of the published configurations: (name, test on a calibration row).
CLASSES = (
    ("blocked matmul, 128^3 blocks (overhead-bound): plain, ReLU, transposed RHS",
     lambda r: r.variant in {"plain", "relu", "transposed_rhs"} and "bm=128" in r.config),
    ("blocked matmul, 512x1024x1024 blocks (MXU-bound): plain, ReLU",
     lambda r: r.variant in {"plain", "relu"} and "bm=512" in r.config),
    ("blocked matmul, 512x1024x1024 blocks, transposed RHS (y.T.T around the kernel)",
     lambda r: r.variant == "transposed_rhs" and "bm=512" in r.config),
    ("XLA matmul", lambda r: r.variant == "xla"),
    ("XLA matmul + an unfused elementwise pass (mask * (x @ y))",
     lambda r: r.variant == "xla_masked"),
    ("scalar prefetch: dense @ dense, block-sparse output mask (MXU-bound)",
     lambda r: r.variant == "masked_output"),
    ("scalar prefetch: block-sparse @ dense (memory-bound, strided 512^2 blocks)",
     lambda r: r.variant == "dsd"),
)


def calibration() -> dict[str, object]:
    from tools.performance.calibration import (
        SPARSE_KERNELS,
        calibrate,
        calibrate_sparse_guide,
        spearman,
    )
    from tools.performance.sparse_guide import kernel_seconds

    started = time.perf_counter()
    rows, dispatch = calibrate()
    sparse_rows = calibrate_sparse_guide(dispatch)
    table = []
    for r in [*rows, *sparse_rows]:
        entry: dict[str, object] = {
            "config": r.config, "published_s": r.published_s, "model_s": r.model_s,
            "model_with_dispatch_s": r.with_dispatch_s, "ratio": round(r.ratio, 4),
            "error": round(r.ratio - 1, 4)}
        if r.variant in SPARSE_KERNELS:
            blind = kernel_seconds(r.variant, with_prefetch_values=False)
            entry["model_blind_s"] = blind
            entry["ratio_blind"] = round((blind + dispatch) / r.published_s, 4)
        table.append(entry)
    large = [r for r in [*rows, *sparse_rows] if r.size >= 4096]
    by_class = []
    for name, member in CLASSES:
        chosen = [r for r in large if member(r)]
        if chosen:
            ratios = [r.ratio for r in chosen]
            by_class.append({
                "class": name, "configs": len(chosen), "sizes": sorted({r.size for r in chosen}),
                "ratio_min": round(min(ratios), 4), "ratio_max": round(max(ratios), 4),
                "mean_abs_error": round(sum(abs(x - 1) for x in ratios) / len(ratios), 4)})
    return {
        "calibration": table,
        "calibration_dispatch_s": dispatch,
        "calibration_max_abs_error_4096_8192": round(
            max(abs(r.ratio - 1) for r in rows if r.size >= 4096), 4),
        "rank_correlation": {
            str(size): round(spearman([r.published_s for r in rows if r.size == size],
                                      [r.with_dispatch_s for r in rows if r.size == size]), 4)
            for size in sorted({r.size for r in rows})
        },
        "error_by_class": by_class,
        "calibration_wall_s": round(time.perf_counter() - started, 2),
    }


def compiler_calibration() -> dict[str, object]:
    from tools.lowered import tpu_compiler
    from tools.performance import compiler_calibration as cc

    if not tpu_compiler.available():
        return {"compiler_calibration": {"skipped": tpu_compiler.compiler_name()}}
    started = time.perf_counter()
    points = [cc.point(row) for row in cc.published_rows()]
    ratios = cc.ratios(points)
    table = [{"config": p.config, "published_s": p.published_s,
              **{f"{m}_s": getattr(p, f"{m}_s") for m in cc.METHODS},
              **{f"{m}_ratio": None if ratios[p.config][m] is None
                 else round(ratios[p.config][m] or 0.0, 4) for m in cc.METHODS},
              "regions_counted": p.regions_counted, "note": p.note} for p in points]
    return {"compiler_calibration": {
        "measured_on": "simulated", "compiler": tpu_compiler.compiler_name(),
        "points": table, **cc.summary(points, CLASSES),
        "wall_s": round(time.perf_counter() - started, 2)}}


def _estimate(task: Path, candidate: Path, target: str, config: dict[str, int],
              prefix: str) -> dict[str, object]:
    from tools import api

    started = time.perf_counter()
    result = api.estimate(task, candidate, target=target, config=config)
    return {
        f"{prefix}_wall_s": round(time.perf_counter() - started, 2),
        f"{prefix}_target": target,
        f"{prefix}_shape": result.shape,
        f"{prefix}_latency_s_simulated": result.latency_s,
        f"{prefix}_baseline_s_simulated": result.baseline_s,
        f"{prefix}_speedup_simulated_unverified": round(result.speedup, 4),
        f"{prefix}_sound": result.sound,
        f"{prefix}_steps": [k.steps for k in result.breakdown],
    }


def estimate_8192() -> dict[str, object]:
    return _estimate(ROOT / "benchmarks/tasks/matmul_bf16_8192/baseline.py",
                     ROOT / "kernels/matmul.py", "sim-tpu-v5e",
                     {"block_m": 512, "block_n": 1024, "block_k": 1024}, "estimate_8192")


def jaxbench_estimate(root: Path, name: str) -> dict[str, object]:
    task = root / name / "baseline.py"
    if not task.is_file():
        return {"jaxbench_estimate": {"skipped": f"no JAXBench task at {task}"}}
    figures = _estimate(task, ROOT / "kernels/rmsnorm.py", "sim-tpu-v6e", {"block_rows": 128},
                        "jaxbench")
    return {"jaxbench_estimate": {"task": f"JAXBench {name}", "candidate": "kernels/rmsnorm.py",
                                  "config": {"block_rows": 128}, **figures}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print JSON (the only format)")
    parser.add_argument("--skip-estimate", action="store_true")
    parser.add_argument("--skip-compiler", action="store_true",
                        help="leave out the three-way calibration with the TPU compiler")
    parser.add_argument("--jaxbench", type=Path, default=JAXBENCH,
                        help="a JAXBench checkout's benchmark/ folder (read in place)")
    parser.add_argument("--jaxbench-task", default="12p_RMSNorm")
    args = parser.parse_args()
    out: dict[str, object] = {"measured_on": "simulated", "machine": platform.machine(),
                              "cpus": os.cpu_count()}
    out.update(calibration())
    if not args.skip_compiler:
        out.update(compiler_calibration())
    if not args.skip_estimate:
        out.update(estimate_8192())
        out.update(jaxbench_estimate(args.jaxbench, args.jaxbench_task))
    print(json.dumps(out, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
