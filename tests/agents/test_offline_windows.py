"""A non-overlapping pooling window (`reduce_window_sum`, JAXBench 49k's AvgPool1d) becomes a
pooling matmul the kernel body can carry; other windows are still refused by name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agents.llm.offline import planner
from agents.llm.offline.author import candidate_source
from agents.llm.offline.classify import classify_task

TASK = Path(__file__).resolve().parents[1] / "evaltasks" / "matmul_avgpool_max.py"


def test_a_pooling_window_no_longer_blocks_the_kernel_body() -> None:
    facts = classify_task(TASK)
    assert not facts.unsupported, facts.unsupported
    assert facts.kernel_class == "rows_generic", facts.reasons
    assert "reduce_window_sum" not in facts.body_source and "dot_general" in facts.body_source


def test_an_overlapping_window_is_still_refused_by_name(tmp_path: Path) -> None:
    task = tmp_path / "overlapping_pool.py"
    task.write_text(
        "import jax\nimport jax.numpy as jnp\n\nSHAPES = [(64, 256), (32, 128)]\n\n"
        "def reference(x):\n"
        "    return jax.lax.reduce_window(x, 0.0, jax.lax.add, (1, 8), (1, 4), 'VALID')\n\n"
        "def make_inputs(key, shape_index=0):\n"
        "    return (jax.random.normal(key, SHAPES[shape_index]),)\n")
    facts = classify_task(task)
    assert "reduce_window_sum" in facts.unsupported


def test_the_pooled_kernel_computes_the_reference_in_interpret_mode() -> None:
    import jax
    from jax.experimental.pallas import tpu as pltpu

    from tools.api import load_task

    facts = classify_task(TASK)
    namespace: dict[str, Any] = {"__name__": "candidate"}
    exec(compile(candidate_source(facts, planner.default_params(facts, {}), "t"), "t", "exec"), namespace)
    task = load_task(TASK)
    for shape_index in (0, *task.unseen_shape_indices):
        inputs = task.make_inputs(4, shape_index)
        with pltpu.force_tpu_interpret_mode():
            got = jax.block_until_ready(namespace["build"]()(*inputs))
        np.testing.assert_allclose(np.asarray(got), np.asarray(task.reference(*inputs)), rtol=1e-4, atol=1e-4)


@pytest.mark.slow
def test_the_pooled_kernel_passes_the_verifier(tmp_path: Path) -> None:
    from tools.api import evaluate

    facts = classify_task(TASK)
    candidate = tmp_path / "candidate.py"
    candidate.write_text(candidate_source(facts, planner.default_params(facts, {}), "matmul_avgpool_max"))
    verdict = evaluate(TASK, candidate, target="sim-tpu-v6e")
    assert verdict.passed, (verdict.reasons, [d.message for d in verdict.diagnostics][:3])
