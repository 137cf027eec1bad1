"""Correctness coverage beyond one NaN-poisoned trace per shape: a second poison, a derived
unaligned shape (tails), and direct calls of the built callable. Each candidate here passed
the verifier before its check existed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.correctness.testsuite import build_suite
from tools.inputs.shapes import is_aligned, off_tile
from tools.inputs.tasks import load_task
from tools.sandbox.launcher import Limits
from tools.verification.receipts import check_receipt
from tools.verification.verify import evaluate

ROOT = Path(__file__).resolve().parent.parent
TASKS = ROOT / "tests" / "evaltasks"
CANDIDATES = ROOT / "tests" / "candidates"


def test_off_tile_sizes_leave_the_tile_and_small_sizes_stay() -> None:
    assert all(off_tile(n) % 8 for n in (16, 21, 128, 256, 1000, 1024))
    assert off_tile(8) == 8 and off_tile(True) is True


def test_an_all_aligned_task_gets_a_derived_unaligned_shape_and_says_so() -> None:
    task = load_task(TASKS / "gelu_small.py")
    [index] = task.derived_shapes
    assert all(is_aligned(task.make_inputs(0, i)) for i in range(index))
    assert not is_aligned(task.make_inputs(0, index))
    assert "derived" in task.describe_shape(index)


def test_a_task_whose_shapes_cannot_be_varied_is_noted_loudly(tmp_path: Path) -> None:
    path = tmp_path / "fixed.py"
    path.write_text("import jax, jax.numpy as jnp\n"
                    "def reference(x):\n    return x * 2.0\n"
                    "def make_inputs(key, shape_index=0):\n"
                    "    return (jax.random.normal(key, (64, 256)),)\n")
    task = load_task(path)
    assert not task.derived_shapes and "NOT exercised" in task.alignment_note
    assert task.alignment_note in build_suite(task, seeds=(0, 1)).notes


def test_an_aligned_jaxbench_config_is_scaled_off_the_tile(tmp_path: Path) -> None:
    path = tmp_path / "baseline.py"
    path.write_text(
        "import jax, jax.numpy as jnp\n"
        "CONFIG = {'name': 'double', 'rows': 64, 'cols': 256}\n"
        "SCALES = [1.0, 0.5]\n"
        "def create_inputs(dtype=jnp.float32):\n"
        "    return (jax.random.normal(jax.random.PRNGKey(0), "
        "(CONFIG['rows'], CONFIG['cols']), dtype),)\n"
        "def workload(x):\n    return x * 2.0\n")
    task = load_task(path)
    [index] = task.derived_shapes
    assert task.shapes[index] == {"scale": "unaligned", "rows": 27, "cols": 123}
    assert task.make_inputs(0, index)[0].shape == (27, 123)


ATTACKS = [
    ("softmax_small", "masked_nan_running_max.py",
     "holds a huge finite value instead of NaN"),
    ("gelu_small", "untouched_tail.py", "outside the task tolerance"),
    ("rmsnorm_small", "eager_result_cache.py", "called directly (outside a trace)"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("task", "candidate", "expected"), ATTACKS,
                         ids=[a[1].removesuffix(".py") for a in ATTACKS])
def test_coverage_attacks_are_rejected(task: str, candidate: str, expected: str) -> None:
    verdict = evaluate(TASKS / f"{task}.py", CANDIDATES / candidate,
                       limits=Limits(wall_s=240.0))
    assert verdict.verdict == "fail"
    text = "\n".join(verdict.reasons)
    assert expected in text, text
    if candidate == "untouched_tail.py":  # only the derived shape shows it
        failing = {c.case_id for c in verdict.cases if not c.passed}
        derived = load_task(TASKS / f"{task}.py").derived_shapes
        assert failing == {f"shape{i}-seed0" for i in derived}, failing
    assert verdict.measurement is None
    assert check_receipt(verdict.receipt).ok
    assert "second_poison" in verdict.receipt["environment"]["interpret"]
