"""The verifier prices a scalar-prefetch kernel on each tuning case's own values and checks
the model against what interpret mode ran (grid, transfers, DMAs and branch runs)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tools.correctness.testsuite import build_suite
from tools.inputs.tasks import load_task
from tools.sandbox.launcher import Limits
from tools.verification.receipts import check_receipt
from tools.verification.verify import evaluate

ROOT = Path(__file__).resolve().parent.parent
TASK = ROOT / "tests" / "evaltasks" / "block_masked_matmul.py"
KERNEL = ROOT / "tests" / "perf_kernels" / "sparse.py"

pytestmark = pytest.mark.slow


def test_each_seed_case_is_priced_on_its_own_mask() -> None:
    suite = build_suite(load_task(TASK), seeds=(0, 1, 2), unseen=False, probes=False)
    verdict = evaluate(TASK, KERNEL, suite=suite, limits=Limits(wall_s=240.0, memory_bytes=4 << 30))
    assert verdict.verdict == "pass", verdict.reasons
    # NaN and inf planted: the oracle is NaN where a masked block meets them (0 x NaN), which
    # the kernel skips; the suite records what those elements are without them
    [nonfinite] = [c for c in verdict.cases if c.kind == "nonfinite"]
    assert nonfinite.passed and nonfinite.outputs[0].unplanted > 0
    assert check_receipt(verdict.receipt).ok  # the receipt's figures give the same verdict
    measurement = verdict.measurement
    per_case = measurement.breakdown["case_latency_s"]
    assert len(per_case) == 3 and len(set(per_case)) > 1  # three masks, three prices
    assert measurement.latency_s == pytest.approx(float(np.mean(per_case)))
    (kernel,) = measurement.breakdown["kernels"]
    assert "index maps and conditions evaluated on this case's scalar-prefetch values" in \
        kernel["caveats"]
    assert all(known for _, _, known in kernel["branch_runs"])  # every condition evaluated
