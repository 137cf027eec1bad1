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


def test_a_contraction_narrower_than_the_mxu_pads_in_every_layout() -> None:
    from tools.performance.baseline import DotShape
    from tools.performance.chips import get_chip
    from tools.performance.floors import least_mxu_flops, model_floor_s

    chip = get_chip("v6e")
    scores = DotShape(8, 1024, 1024, 64, "float32")  # q k^T: head_dim is the contraction
    mix = DotShape(8, 1024, 64, 1024, "float32")  # p v: head_dim a free axis, on the sublanes
    exact = 2 * 8 * 1024 * 1024 * 64
    assert least_mxu_flops([scores], chip.mxu_dim) == exact * chip.mxu_dim // 64
    assert least_mxu_flops([mix], chip.mxu_dim) == exact
    both = 2 * exact
    padded = (chip.mxu_dim // 64 + 1) * exact
    assert model_floor_s(both, 0, chip, [scores, mix]) == pytest.approx(padded / chip.peak_bf16_flops)
    # a causal task counts half the dots: a kernel that skips blocks needs half the padded work
    assert model_floor_s(both / 2, 0, chip, [scores, mix]) == pytest.approx(
        padded / 2 / chip.peak_bf16_flops)
    assert model_floor_s(both, 0, chip) == pytest.approx(both / chip.peak_bf16_flops)


@pytest.mark.slow
def test_the_padded_floor_bounds_the_authors_attention_kernel(tmp_path: Path) -> None:
    """The floor that counts head_dim 64's padding is still below a real kernel's price."""
    from tests.agents.offline_kernels import first_kernel
    from tools.inputs.tasks import load_task
    from tools.performance.baseline import task_dots, task_work
    from tools.performance.chips import get_chip
    from tools.performance.floors import model_floor_s
    from tools.performance.roofline import KERNEL_LAUNCH_S

    task_path = ROOT / "tasks/attention.py"
    task, chip = load_task(task_path), get_chip("v6e")
    work, dots = task_work(task), task_dots(task)
    f32_floor = model_floor_s(work.flops, work.min_bytes, chip, dots, chip.peak_f32_flops)
    assert f32_floor > 2 * work.flops / chip.peak_f32_flops  # the padding is counted
    candidate = tmp_path / "attention_candidate.py"
    candidate.write_text(first_kernel(task_path))
    result = api.estimate(task_path, candidate)
    assert result.latency_s >= f32_floor + KERNEL_LAUNCH_S
