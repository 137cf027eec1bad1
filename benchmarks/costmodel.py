"""The simulated chip's calibration and the speed of `estimate`, printed as JSON.

- `calibration`: every configuration of the JAX Pallas TPU matmul guide's published v5e
  bf16 table (tools/performance/data/pallas_matmul_guide_v5e.json), then the sparse
  guide's two XLA references at 16384^3 (`x @ y`, `mask * (x @ y)`): published seconds, the
  model's simulated seconds plus the timing method's dispatch constant, their ratio and
  error; `calibration_dispatch_s` (estimated from the guide's 1024^3 XLA row);
  `calibration_max_abs_error_4096_8192`; `rank_correlation` per size.
- `estimate_8192_wall_s`: `kernelgraph estimate` of kernels/matmul.py at bm=512, bn=1024,
  bk=1024 on the 8192^3 bf16 JAXBench task (benchmarks/tasks/matmul_bf16_8192), end to
  end through the API (sandboxed lowering with abstract inputs, model, baseline), with
  the estimate's own figures (simulated, unverified).

Usage: python benchmarks/costmodel.py [--json] [--skip-estimate]
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


def calibration() -> dict[str, object]:
    from tools.performance.calibration import calibrate, calibrate_sparse_guide, spearman

    started = time.perf_counter()
    rows, dispatch = calibrate()
    sparse_rows = calibrate_sparse_guide(dispatch)
    out = {
        "calibration": [
            {"config": r.config, "published_s": r.published_s, "model_s": r.model_s,
             "model_with_dispatch_s": r.with_dispatch_s, "ratio": round(r.ratio, 4),
             "error": round(r.ratio - 1, 4)}
            for r in [*rows, *sparse_rows]
        ],
        "calibration_dispatch_s": dispatch,
        "calibration_max_abs_error_4096_8192": round(
            max(abs(r.ratio - 1) for r in rows if r.size >= 4096), 4),
        "rank_correlation": {
            str(size): round(spearman([r.published_s for r in rows if r.size == size],
                                      [r.with_dispatch_s for r in rows if r.size == size]), 4)
            for size in sorted({r.size for r in rows})
        },
        "calibration_wall_s": round(time.perf_counter() - started, 2),
    }
    return out


def estimate_8192() -> dict[str, object]:
    from tools import api

    started = time.perf_counter()
    result = api.estimate(ROOT / "benchmarks/tasks/matmul_bf16_8192/baseline.py",
                          ROOT / "kernels/matmul.py", target="sim-tpu-v5e",
                          config={"block_m": 512, "block_n": 1024, "block_k": 1024})
    return {
        "estimate_8192_wall_s": round(time.perf_counter() - started, 2),
        "estimate_8192_latency_s_simulated": result.latency_s,
        "estimate_8192_baseline_s_simulated": result.baseline_s,
        "estimate_8192_speedup_simulated_unverified": round(result.speedup, 4),
        "estimate_8192_sound": result.sound,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print JSON (the only format)")
    parser.add_argument("--skip-estimate", action="store_true")
    args = parser.parse_args()
    out: dict[str, object] = {"measured_on": "simulated", "machine": platform.machine(),
                              "cpus": os.cpu_count()}
    out.update(calibration())
    if not args.skip_estimate:
        out.update(estimate_8192())
    print(json.dumps(out, indent=None if args.json else 2))


if __name__ == "__main__":
    main()
