"""A grouped matmul whose reference finds group offsets with a cumsum and a scan (JAXBench's
megablox) is the grouped_matmul class, and its kernel computes the reference."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agents.llm.offline import planner
from agents.llm.offline.author import candidate_source
from agents.llm.offline.classify import classify_task

TASK = Path(__file__).resolve().parents[1] / "evaltasks" / "grouped_cumsum_scan.py"


def test_a_cumsum_and_scan_grouped_matmul_is_the_grouped_class() -> None:
    facts = classify_task(TASK)
    assert facts.kernel_class == "grouped_matmul", facts.reasons
    assert facts.detail == {"lhs": 0, "rhs": 1, "group_sizes": 2}
    assert "cumsum" in facts.primitives and not facts.unsupported


def test_a_cumsum_that_is_no_ragged_dot_is_not_taken(tmp_path: Path) -> None:
    task = tmp_path / "cumsum_rows.py"
    task.write_text(
        "import jax\nimport jax.numpy as jnp\n\nSHAPES = [(64, 128), (32, 128)]\n\n"
        "def reference(lhs, rhs, sizes):\n"
        "    return jnp.cumsum(lhs, axis=0) @ rhs[0] + sizes.sum()\n\n"
        "def make_inputs(key, shape_index=0):\n"
        "    m, k = SHAPES[shape_index]\n"
        "    return (jax.random.normal(key, (m, k)), jnp.ones((2, k, k)), jnp.full((2,), m // 2, jnp.int32))\n")
    assert classify_task(task).kernel_class != "grouped_matmul"


@pytest.mark.slow
def test_its_kernel_passes_the_verifier(tmp_path: Path) -> None:
    from tools.api import evaluate

    facts = classify_task(TASK)
    candidate = tmp_path / "candidate.py"
    candidate.write_text(candidate_source(facts, planner.default_params(facts, {}), "grouped_cumsum_scan"))
    verdict = evaluate(TASK, candidate, target="sim-tpu-v6e")
    assert verdict.passed, (verdict.reasons, [d.message for d in verdict.diagnostics][:3])


def test_its_kernel_computes_the_reference_in_interpret_mode(tmp_path: Path) -> None:
    import jax
    from jax.experimental.pallas import tpu as pltpu

    from tools.api import load_task

    facts = classify_task(TASK)
    namespace: dict[str, Any] = {"__name__": "candidate"}
    exec(compile(candidate_source(facts, planner.default_params(facts, {}), "t"), "t", "exec"), namespace)
    task = load_task(TASK)
    for shape_index in (0, *task.unseen_shape_indices):
        inputs = task.make_inputs(2, shape_index)
        with pltpu.force_tpu_interpret_mode():
            got = jax.block_until_ready(namespace["build"]()(*inputs))
        np.testing.assert_allclose(np.asarray(got), np.asarray(task.reference(*inputs)), rtol=1e-4, atol=1e-4)


DECAYED = Path(__file__).resolve().parents[1] / "evaltasks" / "decayed_cumsum.py"


def test_a_float_cumsum_becomes_a_triangular_matmul_in_the_body() -> None:
    facts = classify_task(DECAYED)
    assert not facts.unsupported, facts.unsupported
    assert facts.kernel_class == "rows_generic", facts.reasons
    assert "cumsum" not in facts.body_source and facts.body_source.count("dot_general") == 2


def test_the_triangular_cumsum_kernel_computes_the_reference_in_interpret_mode() -> None:
    """Forward and reverse cumsums, at the tuning point and the unseen shape."""
    import jax
    from jax.experimental.pallas import tpu as pltpu

    from tools.api import load_task

    facts = classify_task(DECAYED)
    namespace: dict[str, Any] = {"__name__": "candidate"}
    exec(compile(candidate_source(facts, planner.default_params(facts, {}), "t"), "t", "exec"), namespace)
    task = load_task(DECAYED)
    for shape_index in (0, *task.unseen_shape_indices):
        inputs = task.make_inputs(6, shape_index)
        with pltpu.force_tpu_interpret_mode():
            got = jax.block_until_ready(namespace["build"]()(*inputs))
        np.testing.assert_allclose(np.asarray(got), np.asarray(task.reference(*inputs)), rtol=1e-4, atol=1e-4)
