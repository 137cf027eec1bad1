"""The tuner prices each lowered program once: configurations that lower to a program it
already planned are skipped, saying which they repeat (a real sweep: sandboxed lowering,
interpret mode, the cost model)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.autotuner import repeats
from tools.performance.autotune import SAME_PROGRAM, autotune, distinct_programs

HERE = Path(__file__).resolve().parent / "perf_kernels"
TASK = HERE / "scale_task.py"
CLAMPED = HERE / "clamped_candidate.py"


def test_repeated_programs_are_found_in_order() -> None:
    assert distinct_programs(["a", "b", "a", None, None, "b", "c"]) == {2: 0, 5: 1}
    # the autotuner agent: the default's program (-1) was priced by the test run
    assert repeats("a", ["b", "a", "b", None]) == {1: -1, 2: 0}
    assert repeats(None, ["b", "b"]) == {1: 0}


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_configurations_that_lower_to_one_program_are_priced_once() -> None:
    result = autotune(TASK, CLAMPED, workers=2)
    by_rows = {r.config["block_rows"]: r for r in result.rows}
    assert by_rows[64].status == "pass" and by_rows[32].status == "pass"
    for clamped in (128, 256):  # min(block_rows, 64 rows) = 64: the default's program
        assert by_rows[clamped].status == "skipped"
        assert by_rows[clamped].reasons == [f"{SAME_PROGRAM} {{'block_rows': 64}}"]
    assert result.configs_skipped == 2 and result.configs_evaluated == 2
    assert result.configs_total == 4 and not result.budget_exhausted


@pytest.mark.timeout(600)
def test_a_configuration_is_priced_from_one_lowering_with_its_program() -> None:
    from tools.performance.autotune import price_config

    default = price_config(str(TASK), str(CLAMPED), {"block_rows": 64}, "sim-tpu-v6e")
    clamped = price_config(str(TASK), str(CLAMPED), {"block_rows": 256}, "sim-tpu-v6e")
    smaller = price_config(str(TASK), str(CLAMPED), {"block_rows": 32}, "sim-tpu-v6e")
    assert default.program_sha256 and default.latency_s and default.speedup and not default.problem
    assert clamped.program_sha256 == default.program_sha256  # clamped to the same block
    assert clamped.latency_s == default.latency_s
    assert smaller.program_sha256 != default.program_sha256
    assert smaller.latency_s is not None and smaller.latency_s > default.latency_s  # more steps
    broken = price_config(str(TASK), str(CLAMPED), {"block_rows": 0}, "sim-tpu-v6e")
    assert broken.program_sha256 is None and broken.latency_s is None and broken.problem
