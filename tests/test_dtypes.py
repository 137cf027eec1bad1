"""Every TPU dtype end to end: bf16, f16, f32 and integer outputs are checked, each with a
ceiling fit for its precision, and honest bf16 kernels of each class pass."""

from __future__ import annotations

from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest

from tools.correctness.compare import compare_case
from tools.correctness.testsuite import build_suite
from tools.inputs.tasks import DEFAULT_TOLERANCE, default_tolerance, load_task
from tools.sandbox.launcher import Limits
from tools.verification.receipts import check_receipt
from tools.verification.verify import evaluate

ROOT = Path(__file__).resolve().parent.parent
TASKS = ROOT / "tests" / "evaltasks"


def test_default_ceiling_widens_with_lower_precision_and_is_exact_for_integers() -> None:
    f32, f16, bf16 = (default_tolerance([d]) for d in ("float32", "float16", "bfloat16"))
    assert f32 == DEFAULT_TOLERANCE
    assert f32["rtol"] < f16["rtol"] < bf16["rtol"] <= 1e-1
    assert default_tolerance(["int32"]) == {"atol": 0.0, "rtol": 0.0}
    assert default_tolerance(["float32", "bfloat16"]) == bf16  # the least precise output


def _write(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text("import jax, jax.numpy as jnp\nSHAPES = [(64, 128), (24, 200)]\n" + body)
    return path


def test_f16_and_integer_outputs_are_accepted_and_integers_compared_exactly(
    tmp_path: Path,
) -> None:
    f16 = load_task(_write(tmp_path, "half", (
        "def reference(x):\n    return jnp.tanh(x)\n"
        "def make_inputs(key, shape_index=0):\n"
        "    return (jax.random.normal(key, SHAPES[shape_index], jnp.float16),)\n")))
    suite = build_suite(f16, seeds=(0, 1))
    assert suite.tolerance == default_tolerance(["float16"])
    assert all(c.out_dtypes == ("float16",) for c in suite.cases)

    ints = load_task(_write(tmp_path, "ints", (
        "def reference(x):\n    return x * 3 + 1\n"
        "def make_inputs(key, shape_index=0):\n"
        "    return (jax.random.randint(key, SHAPES[shape_index], -1000, 1000, jnp.int32),)\n")))
    suite = build_suite(ints, seeds=(0, 1))
    case = suite.cases[0]
    oracle = case.oracle[0].numpy()
    assert oracle.dtype == np.int32 and suite.tolerance == {"atol": 0.0, "rtol": 0.0}
    assert compare_case(case, [oracle.copy()], suite.tolerance).passed
    off_by_one = oracle.copy()
    off_by_one[3, 5] += 1
    check = compare_case(case, [off_by_one], suite.tolerance)
    assert not check.passed and check.outputs[0].tolerance_violations == 1


def test_complex_outputs_are_refused_with_the_reason(tmp_path: Path) -> None:
    from tools.inputs.tasks import TaskError

    path = _write(tmp_path, "cplx", (
        "def reference(x):\n    return x.astype(jnp.complex64)\n"
        "def make_inputs(key, shape_index=0):\n"
        "    return (jax.random.normal(key, SHAPES[shape_index]),)\n"))
    with pytest.raises(TaskError, match=r"floating .* integer or bool"):
        load_task(path)


def test_bf16_suite_keeps_bf16_inputs_and_a_float64_oracle() -> None:
    suite = build_suite(load_task(TASKS / "softmax_bf16.py"), seeds=(0, 1))
    case = suite.cases[0]
    assert case.inputs[0].dtype == "bfloat16" and case.out_dtypes == ("bfloat16",)
    assert case.oracle[0].dtype == "float64"
    assert suite.tolerance == default_tolerance(["bfloat16"])
    wrong = case.oracle[0].numpy() * 1.2  # 20% off: far outside even the bf16 ceiling
    assert not compare_case(case, [wrong.astype(jnp.bfloat16)], suite.tolerance).passed


@pytest.mark.slow
@pytest.mark.parametrize(
    ("task", "kernel", "config"),
    [
        ("gelu_bf16", "kernels/gelu.py", None),  # elementwise
        ("rmsnorm_bf16", "kernels/rmsnorm.py", {"block_rows": 64}),  # row-wise norm
        ("softmax_bf16", "kernels/softmax.py", None),  # row-wise softmax
        ("matmul_bf16", "kernels/matmul.py", {"block_k": 128}),  # matmul, f32 accumulator
        ("attention_bf16", "tests/fair_kernels/attention.py", None),  # online softmax
    ],
)
def test_honest_bf16_kernels_pass(task: str, kernel: str, config: dict | None) -> None:
    verdict = evaluate(TASKS / f"{task}.py", ROOT / kernel, config=config,
                       limits=Limits(wall_s=180.0))
    assert verdict.verdict == "pass", verdict.reasons
    assert all(o.dtype_ok for c in verdict.cases for o in c.outputs)
    assert verdict.receipt["checks"]["tolerance"] == default_tolerance(["bfloat16"])
    assert check_receipt(verdict.receipt).ok
