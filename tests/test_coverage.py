"""Correctness coverage beyond one NaN-poisoned trace per shape: a second poison, derived
unaligned shapes (tails: each size alone off the tile, then all at once), NaN and inf in the
inputs, and direct calls of the built callable. Each candidate here passed the verifier
before its check existed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tools.correctness.testsuite import build_suite
from tools.inputs.shapes import SHRINK_TO, is_aligned, off_tile, tile_pattern
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


def test_an_all_aligned_task_gets_each_size_off_the_tile_alone_and_all_at_once() -> None:
    task = load_task(TASKS / "gelu_small.py")  # (256, 512), (200, 256), (64, 1024)
    rows, cols, both = task.derived_shapes
    assert all(is_aligned(task.make_inputs(0, i)) for i in range(rows))
    # rows alone: the columns stay whole lanes (shrunk to at most SHRINK_TO), and the other
    # way round; then both at the base's sizes, as before
    assert task.shapes[rows] == (195, 256) and task.shapes[cols] == (200, 251)
    assert task.shapes[both] == (195, 251)
    assert tile_pattern(task.input_specs(rows)) == {(0, "sublanes")}
    assert tile_pattern(task.input_specs(cols)) == {(0, "lanes")}
    assert tile_pattern(task.input_specs(both)) == {(0, "sublanes"), (0, "lanes")}
    assert "only size 0 off the tile" in task.describe_shape(rows)
    assert "every size off the tile" in task.describe_shape(both)


def test_other_sizes_are_shrunk_to_aligned_ones_so_one_size_shapes_stay_small(
    tmp_path: Path,
) -> None:
    path = tmp_path / "big.py"
    path.write_text("import jax, jax.numpy as jnp\n"
                    "SHAPES = [(4096, 2048), (2048, 1024)]\n"
                    "def reference(x):\n    return jnp.tanh(x)\n"
                    "def make_inputs(key, shape_index=0):\n"
                    "    return (jax.random.normal(key, SHAPES[shape_index]),)\n")
    task = load_task(path)
    shapes = [task.shapes[i] for i in task.derived_shapes]
    assert shapes == [(2043, SHRINK_TO), (SHRINK_TO, 1019), (2043, 1019)]


def test_a_task_with_its_own_unaligned_shapes_gets_only_the_patterns_it_lacks(
    tmp_path: Path,
) -> None:
    path = tmp_path / "rows_only.py"  # declares rows off the tile, never the columns
    path.write_text("import jax, jax.numpy as jnp\n"
                    "SHAPES = [(256, 512), (300, 384)]\n"
                    "def reference(x):\n    return jnp.tanh(x)\n"
                    "def make_inputs(key, shape_index=0):\n"
                    "    return (jax.random.normal(key, SHAPES[shape_index]),)\n")
    task = load_task(path)
    assert [task.shapes[i] for i in task.derived_shapes] == [(256, 507), (251, 507)]
    assert [tile_pattern(task.input_specs(i)) for i in task.derived_shapes] == [
        {(0, "lanes")}, {(0, "sublanes"), (0, "lanes")}]


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
    rows, cols, both = task.derived_shapes
    assert task.shapes[rows] == {"scale": "unaligned rows", "rows": 27}
    assert task.shapes[cols] == {"scale": "unaligned cols", "cols": 123}
    assert task.shapes[both] == {"scale": "unaligned", "rows": 27, "cols": 123}
    assert [task.make_inputs(0, i)[0].shape for i in (rows, cols, both)] == [
        (27, 128), (32, 123), (27, 123)]


ATTACKS = [
    ("softmax_small", "masked_nan_running_max.py",
     "holds a huge finite value instead of NaN"),
    ("gelu_small", "untouched_tail.py", "outside the task tolerance"),
    ("rmsnorm_small", "eager_result_cache.py", "called directly (outside a trace)"),
    # shown only by one size off the tile while the others are whole tiles
    ("gelu_small", "drops_rows_when_lanes_aligned.py", "shape3-seed0 (unseen)"),
    ("gelu_small", "drops_cols_when_rows_aligned.py", "shape4-seed0 (unseen)"),
    # shown only by NaN in the inputs
    ("rmsnorm_small", "nan_to_zero.py", "NaN returned as finite numbers"),
]
# The only cases each attack fails (the rest of the suite cannot tell it from a right kernel).
ONLY_FAILING = {
    "drops_rows_when_lanes_aligned.py": {"shape3-seed0"},  # (195, 256)
    "drops_cols_when_rows_aligned.py": {"shape4-seed0"},  # (200, 251)
    "nan_to_zero.py": {"shape5-seed0-nonfinite"},
}


@pytest.mark.slow
@pytest.mark.parametrize(("task", "candidate", "expected"), ATTACKS,
                         ids=[a[1].removesuffix(".py") for a in ATTACKS])
def test_coverage_attacks_are_rejected(task: str, candidate: str, expected: str) -> None:
    verdict = evaluate(TASKS / f"{task}.py", CANDIDATES / candidate,
                       limits=Limits(wall_s=240.0))
    assert verdict.verdict == "fail"
    text = "\n".join(verdict.reasons)
    assert expected in text, text
    failing = {c.case_id for c in verdict.cases if not c.passed}
    if candidate == "untouched_tail.py":  # only the derived shapes show it
        derived = load_task(TASKS / f"{task}.py").derived_shapes
        assert {c for c in failing if "nonfinite" not in c} == {
            f"shape{i}-seed0" for i in derived}, failing
    if candidate in ONLY_FAILING:
        assert failing == ONLY_FAILING[candidate], failing
    assert verdict.measurement is None
    assert check_receipt(verdict.receipt).ok
    assert "second_poison" in verdict.receipt["environment"]["interpret"]


@pytest.mark.slow
def test_a_kernel_wrong_everywhere_is_not_blamed_on_state_kept_across_calls(tmp_path: Path) -> None:
    # every output 1% off: the traced program fails, and so does the direct call, for the
    # same reason; "answers differently from its traced program" would send a fixer astray
    source = (ROOT / "kernels" / "rmsnorm.py").read_text()
    wrong = source.replace("* w_ref[...]).astype", "* w_ref[...] * 1.01).astype")
    assert wrong != source
    (tmp_path / "wrong.py").write_text(wrong)
    verdict = evaluate(TASKS / "rmsnorm_small.py", tmp_path / "wrong.py",
                       limits=Limits(wall_s=240.0))
    assert verdict.verdict == "fail"
    text = "\n".join(verdict.reasons)
    assert "error" in text and "called directly (outside a trace)" not in text, text
