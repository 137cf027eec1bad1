"""A large tuning point runs once: the other seeds and the numerics probes move to a smaller
unseen shape (the repeat shape), so TPU interpret mode stays fast; a small tuning point
keeps today's suite, case for case.

The limit is monkeypatched small so that a tiny task stands in for a 2048^3 GEMM.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kernelgraph.tasknames import shipped_tasks
from tools.child.worker import repeat_shape as repeat_in_child
from tools.correctness import testsuite
from tools.correctness.suitedata import VacuousSuite
from tools.correctness.testsuite import build_suite, input_bytes, repeat_shape
from tools.inputs.tasks import load_task
from tools.sandbox import wire
from tools.sandbox.launcher import Limits
from tools.verification.verify import evaluate

MATMUL = (Path(__file__).parent / "evaltasks" / "matmul_small.py").read_text().replace(
    'NAME = "matmul_small"\nSHAPES = [(256, 512, 256), (128, 384, 384)]',
    'NAME = "tiny_matmul"\nSHAPES = [(64, 128, 64), (32, 64, 32), (16, 32, 64)]')
assert "tiny_matmul" in MATMUL

# Sorting rows: at shape 1 every seed permutes the same values, so the inputs differ by
# seed but the output does not (a suite that cannot tell seeds apart there).
SORT = '''
import jax
import jax.numpy as jnp

NAME = "row_sort"
SHAPES = [(64, 256), (16, 128), (8, 256)]


def reference(x):
    return jnp.sort(x, axis=-1)


def make_inputs(key, shape_index=0):
    rows, cols = SHAPES[shape_index]
    if shape_index == 1:
        base = jnp.arange(rows * cols, dtype=jnp.float32).reshape(rows, cols)
        return (base[:, jax.random.permutation(key, cols)],)
    return (jax.random.normal(key, (rows, cols), jnp.float32),)
'''

ROOT = Path(__file__).resolve().parent.parent
LIMIT = 20 << 10  # shape 0 of MATMUL is 64 KiB of inputs, shape 1 16 KiB, shape 2 10 KiB


def _task(tmp_path: Path, source: str) -> Any:
    path = tmp_path / "task.py"
    path.write_text(source)
    return load_task(path)


def test_a_large_tuning_point_runs_once_and_its_repeats_move(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(testsuite, "REPEAT_LIMIT_BYTES", LIMIT)
    task = _task(tmp_path, MATMUL)
    assert input_bytes(task, 0) > LIMIT >= input_bytes(task, 1) > input_bytes(task, 2)
    assert repeat_shape(task) == 1  # the largest declared unseen shape under the limit
    counted: list[dict[int, int]] = []
    real_fit = testsuite.fit_problem

    def fit(task: Any, counts: dict[int, int], **kw: Any) -> Any:
        counted.append(dict(counts))
        return real_fit(task, counts, **kw)

    monkeypatch.setattr(testsuite, "fit_problem", fit)
    suite = build_suite(task, spill_bytes=None)
    cases = {c.case_id: c for c in suite.cases}
    at_tuning = [c for c in suite.cases if c.shape_index == 0]
    assert [(c.case_id, c.kind, c.seed) for c in at_tuning] == [("shape0-seed0", "seed", 0)]
    assert suite.cases[0].case_id == "shape0-seed0"  # compile_check's one case
    assert [(c.case_id, c.kind, c.seed) for c in suite.cases if c.shape_index == 1] == [
        ("shape1-seed0", "unseen", 0), ("shape1-seed1", "seed", 1),
        ("shape1-seed2", "seed", 2), ("shape1-seed0-large", "probe-large", 0),
        ("shape1-seed0-small", "probe-small", 0)]
    # the probes scale the repeat shape's first-seed inputs
    base = cases["shape1-seed0"].inputs[0].numpy()
    assert (cases["shape1-seed0-large"].inputs[0].numpy() == base * 1e3).all()
    assert not any(c.kind.startswith("probe") and c.shape_index != 1 for c in suite.cases)
    note = next(n for n in suite.notes if n.startswith("the tuning point"))
    assert "(64, 128, 64)" in note and "runs once (seed 0)" in note
    assert "seeds 1, 2 and the numerics probes run at shape 1 ((32, 64, 32)" in note
    # the memory estimate counted what was built, shape by shape
    built: dict[int, int] = {}
    for c in suite.cases:
        built[c.shape_index] = built.get(c.shape_index, 0) + 1
    assert counted == [built]


def test_a_small_tuning_point_keeps_todays_suite(tmp_path: Path) -> None:
    task = _task(tmp_path, MATMUL)
    assert repeat_shape(task) == 0
    suite = build_suite(task, spill_bytes=None)
    ids = [c.case_id for c in suite.cases]
    unseen = [f"shape{i}-seed0" for i in task.unseen_shape_indices]
    assert ids[:3] == ["shape0-seed0", "shape0-seed1", "shape0-seed2"]
    assert ids[3:3 + len(unseen)] == unseen
    assert ids[3 + len(unseen):5 + len(unseen)] == ["shape0-seed0-large", "shape0-seed0-small"]
    assert [c.kind for c in suite.cases[:3]] == ["seed"] * 3
    assert not any(n.startswith("the tuning point") for n in suite.notes)


LARGE_TUNING_POINTS = {"matmul": 1, "matmul_bias_gelu": 1, "matmul_bias_gelu_bf16": 1, "matmul_scale_residual": 1,
                       "swiglu_mlp": 2, "grouped_matmul": 2}
"""Shipped tasks whose tuning point runs once, and the shape their repeats run at."""


def test_only_the_shipped_tasks_sized_for_headroom_are_over_the_limit() -> None:
    """The others (tuning points up to 8 MiB of inputs) keep their frozen suites."""
    for name, path in shipped_tasks().items():
        task = load_task(path, validate=False)
        assert repeat_shape(task) == LARGE_TUNING_POINTS.get(name, 0), (name, input_bytes(task, 0))


def test_without_a_declared_shape_under_the_limit_the_smallest_unseen_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(testsuite, "REPEAT_LIMIT_BYTES", 1024)
    task = _task(tmp_path, MATMUL)
    sizes = {i: input_bytes(task, i) for i in task.unseen_shape_indices}
    assert all(size > 1024 for size in sizes.values())
    assert repeat_shape(task) == min(sizes, key=lambda i: (sizes[i], i))


def test_seeds_are_compared_at_their_own_shape(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """At the repeat shape a seed whose output equals the first seed's there is refused;
    at the tuning point itself the one seed case is fine (and perturbation-sensitive)."""
    task = _task(tmp_path, SORT)
    monkeypatch.setattr(testsuite, "REPEAT_LIMIT_BYTES", input_bytes(task, 0) - 1)
    assert repeat_shape(task) == 1
    with pytest.raises(VacuousSuite, match="identical for shape1-seed0 and shape1-seed1"):
        build_suite(task, spill_bytes=None)


def _group(index: int, count: int) -> wire.ShapeGroup:
    return wire.ShapeGroup(index, 0, tuple(wire.CaseRequest(f"shape{index}-{k}", ())
                                           for k in range(count)))


def test_the_child_repeats_where_the_suite_does() -> None:
    """Two simulated cores and the direct calls go to the tuning point when it has several
    cases; when it runs once, to the shape with the most cases (the tuning case then runs on
    one core, which the cost model's cross-check needs)."""
    def request(*groups: wire.ShapeGroup) -> wire.EvalRequest:
        return wire.EvalRequest("k.py", {}, groups, order_seed=0)

    assert repeat_in_child(request(_group(0, 5), _group(1, 1), _group(2, 1))) == 0
    assert repeat_in_child(request(_group(0, 1), _group(1, 1), _group(2, 5))) == 2
    assert repeat_in_child(request(_group(0, 1))) == 0  # the compile check's one case


@pytest.mark.slow
def test_a_result_cache_is_caught_at_the_repeat_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    """The direct calls still see two inputs of one shape when the tuning point runs once."""
    task = load_task(ROOT / "tests" / "evaltasks" / "rmsnorm_small.py")
    monkeypatch.setattr(testsuite, "REPEAT_LIMIT_BYTES", input_bytes(task, 0) - 1)
    suite = build_suite(task)
    assert [c.case_id for c in suite.cases if c.shape_index == 0] == ["shape0-seed0"]
    verdict = evaluate(task.path, ROOT / "tests" / "candidates" / "eager_result_cache.py",
                       suite=suite, limits=Limits(wall_s=240.0))
    assert verdict.verdict == "fail"
    assert "called directly (outside a trace)" in "\n".join(verdict.reasons)
