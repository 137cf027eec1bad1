"""A real sweep through the evaluator (sandboxed child, TPU lowering, interpret mode, model)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.performance.autotune import autotune
from tools.performance.executors import TargetUnavailable

HERE = Path(__file__).resolve().parent / "perf_kernels"
TASK = HERE / "scale_task.py"
CANDIDATE = HERE / "scale_candidate.py"


@pytest.mark.slow
def test_sweep_checks_each_config_and_picks_the_fastest_that_passed() -> None:
    seen: list[int] = []
    result = autotune(TASK, CANDIDATE, workers=2, on_row=lambda row, done, of: seen.append(done))
    assert result.measured_on == "simulated" and result.target == "sim-tpu-v6e"
    assert [r.config["block_rows"] for r in result.rows] == [8, 32, 7]
    by_rows = {r.config["block_rows"]: r for r in result.rows}
    assert by_rows[8].status == "pass" and by_rows[32].status == "pass"
    assert by_rows[7].status == "fail"  # not a multiple of 8: the TPU lowering rejects it
    assert any("8 and 128" in reason or "lower" in reason for reason in by_rows[7].reasons)
    # Fewer, larger blocks win on the model (per-step overhead dominates this tiny task).
    assert result.best_config == {"block_rows": 32}
    assert result.best_speedup == max(r.speedup for r in result.rows if r.status == "pass")
    assert by_rows[32].latency_s < by_rows[8].latency_s
    assert sorted(seen) == [1, 2, 3] and result.configs_evaluated == 3
    assert len(result.suite_sha256) == 64


def test_real_target_without_device_is_refused_before_any_work() -> None:
    from tools.performance.executors import _real_hardware_problem

    if not _real_hardware_problem("tpu"):
        pytest.skip("this machine has a TPU")
    with pytest.raises(TargetUnavailable, match=r"libtpu|device node"):
        autotune(TASK, CANDIDATE, target="tpu")


@pytest.mark.slow
def test_cli_tune_within_a_budget_and_profile_print_one_json_object() -> None:
    import json

    from typer.testing import CliRunner

    from kernelgraph.cli import app, load_commands

    load_commands()
    runner = CliRunner()
    # A configuration budget of one, one worker: the default is evaluated, the rest skipped
    # (the sweep that picks the fastest is test_sweep_checks_each_config_...).
    tuned = runner.invoke(app, ["tune", str(TASK), str(CANDIDATE), "--budget-configs", "1",
                                "--workers", "1", "--json"])
    assert tuned.exit_code == 0, tuned.output
    data = json.loads(tuned.stdout)
    assert data["measured_on"] == "simulated" and data["best_config"] == {"block_rows": 8}
    assert [r["status"] for r in data["rows"]] == ["pass", "skipped", "skipped"]
    assert data["budget_exhausted"] and data["configs_evaluated"] == 1 and data["workers"] == 1
    profiled = runner.invoke(app, ["profile", str(TASK), str(CANDIDATE), "--config", "block_rows=32", "--json"])
    assert profiled.exit_code == 0, profiled.output
    prof = json.loads(profiled.stdout)["profile"]
    assert prof["measured_on"] == "simulated" and prof["grid_steps"] == 2
    bad = runner.invoke(app, ["tune", str(TASK), str(CANDIDATE), "--target", "sim-tpu-v9"])
    assert bad.exit_code == 2 and "unknown target" in bad.output
