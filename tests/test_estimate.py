"""`kernelgraph estimate` / `api.estimate`: lowering and the cost model only, unverified."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tools import api

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_api_estimate_is_simulated_unverified_and_sound() -> None:
    result = api.estimate(ROOT / "tests/evaltasks/matmul_bf16.py", ROOT / "kernels/matmul.py",
                          config={"block_k": 128})
    assert result.measured_on == "simulated" and result.verified is False
    assert result.sound and result.reasons == []
    (kernel,) = result.breakdown
    assert kernel.steps == 4 and kernel.flops >= 2 * 256 * 512 * 256
    assert kernel.bound in {"memory", "compute", "overhead"} and kernel.bytes > 0
    assert result.speedup == pytest.approx(result.baseline_s / result.latency_s)
    assert "unverified" in result.note
    # the baseline says which program it was priced from, as the verifier's does
    from tools.lowered import tpu_compiler
    from tools.performance.simbaseline import HOST_PROGRAM, XLA_TPU_PROGRAM

    wanted = XLA_TPU_PROGRAM if tpu_compiler.available() else HOST_PROGRAM
    assert result.baseline_priced_from == wanted, result.baseline_method
    assert result.baseline_method.startswith(f"{wanted} on v6e")
    if wanted == XLA_TPU_PROGRAM:  # the compiler's price beside, never the baseline
        assert result.baseline_xla_tpu is not None
        assert result.baseline_s == result.baseline_xla_tpu["latency_s"]
        assert result.baseline_xla_tpu["compiler_latency_s"] > 0
        assert result.baseline_xla_tpu["compiler_latency_s"] != result.baseline_s


@pytest.mark.slow
def test_cli_estimates_a_full_size_bf16_jaxbench_task_as_json() -> None:
    task = ROOT / "benchmarks/tasks/matmul_bf16_8192/baseline.py"
    out = subprocess.run(
        [sys.executable, "-m", "kernelgraph", "estimate", str(task), str(ROOT / "kernels/matmul.py"),
         "--target", "sim-tpu-v5e", "--config", "block_m=512", "--config", "block_n=1024",
         "--config", "block_k=1024", "--json"],
        capture_output=True, text=True, timeout=240, cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert {"latency_s", "baseline_s", "speedup", "measured_on", "sound", "verified",
            "breakdown"} <= set(data)
    assert data["measured_on"] == "simulated" and data["verified"] is False and data["sound"]
    (kernel,) = data["breakdown"]
    assert kernel["steps"] == 16 * 8 * 8 and kernel["flops"] >= 2 * 8192**3
    assert set(kernel) >= {"bound", "bytes", "flops", "steps"}
    assert 0.8 < data["speedup"] < 1.2  # the guide measured 0.99x for this configuration


@pytest.mark.slow
def test_hidden_work_is_an_unsound_estimate() -> None:
    result = api.estimate(ROOT / "tests/evaltasks/matmul_bf16.py",
                          ROOT / "tests/candidates/hidden_trip_count.py")
    assert not result.sound
    assert any("trip count" in r for r in result.reasons)


@pytest.mark.slow
def test_a_kernel_over_the_vmem_budget_is_refused_not_priced(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """estimate runs the verifier's compile check: a body value that cannot fit is an error
    naming the value, never a speedup. The emulated check's rule, so the TPU compiler is
    switched off (it compiles this kernel: tests/test_tpu_compiler.py lists it)."""
    from tools.performance.estimate import EstimateError

    monkeypatch.setenv("KG_TPU_COMPILER", "0")

    with pytest.raises(EstimateError) as info:
        api.estimate(ROOT / "tests/evaltasks/matmul_bf16.py",
                     ROOT / "tests/candidates/f32_copies_over_vmem.py")
    message = str(info.value)
    assert "fails the compile check on v6e" in message
    assert "256x512 float32" in message and "786432" in message
