"""The search's compile check (`api.compile_check`) builds, lowers, compiles, audits and prices
a candidate at the tuning point and runs no case: a kernel that answers wrong passes it,
priced, with a verdict that says nothing about its answers; the full verifier fails it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools import api
from tools.correctness.testsuite import build_suite
from tools.inputs.tasks import load_task
from tools.sandbox.launcher import Limits
from tools.verification.verify import LOWERED_ONLY

ROOT = Path(__file__).resolve().parents[1]
TASK = ROOT / "tests" / "evaltasks" / "rmsnorm_small.py"
RIGHT = "o_ref[...] = (x * jax.lax.rsqrt(ms + EPS) * w_ref[...]).astype(o_ref.dtype)"
LIMITS = Limits(wall_s=300.0, memory_bytes=8 << 30)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_wrong_kernel_compiles_and_is_priced_without_a_case_run(tmp_path: Path) -> None:
    source = (ROOT / "kernels" / "rmsnorm.py").read_text()
    assert RIGHT in source
    wrong = tmp_path / "twice.py"
    wrong.write_text(source.replace(RIGHT, RIGHT.replace("w_ref[...])", "w_ref[...] * 2.0)")))
    suite = build_suite(load_task(TASK), seeds=(0,))
    checked = api.compile_check(TASK, wrong, suite=suite, limits=LIMITS)
    assert api.compiled(checked), checked.reasons
    assert checked.measurement is not None and checked.measurement.latency_s > 0
    assert checked.verdict == "fail" and checked.reasons == [LOWERED_ONLY]
    assert not checked.cases  # nothing ran, nothing was judged
    timings = checked.receipt["timings"]
    assert "child_second_poison_s" not in timings and timings.get("child_eager_s", 0.0) < 0.01
    tested = api.evaluate(TASK, wrong, suite=suite, limits=LIMITS)
    assert tested.verdict == "fail" and tested.cases and not any(c.passed for c in tested.cases)
    # the same program priced alike: the test run's price is the compile check's
    assert tested.measurement is None or tested.measurement.latency_s == pytest.approx(
        checked.measurement.latency_s)
