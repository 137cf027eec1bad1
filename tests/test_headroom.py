"""`benchmarks/headroom.py`: a task's ceiling bounds what any kernel is priced at."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from tools import api

ROOT = Path(__file__).resolve().parents[1]


def _headroom() -> object:
    spec = importlib.util.spec_from_file_location("headroom", ROOT / "benchmarks/headroom.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_no_kernel_is_priced_above_its_tasks_ceiling(capsys: pytest.CaptureFixture[str]) -> None:
    task = ROOT / "tests/evaltasks/matmul_bf16.py"
    assert _headroom().main([str(task), "--json"]) == 0  # type: ignore[attr-defined]
    (row,) = json.loads(capsys.readouterr().out)["tasks"]
    assert row["floor_s"] > 0 and row["ceiling"] == pytest.approx(row["baseline_s"] / row["floor_s"])
    for block_k in (128, 256):  # a slow and a fast configuration of the same kernel
        result = api.estimate(task, ROOT / "kernels/matmul.py", config={"block_k": block_k})
        assert result.latency_s >= row["floor_s"] and result.speedup <= row["ceiling"]
        assert result.baseline_s == pytest.approx(row["baseline_s"])
