"""A non-overlapping pooling window (`reduce_window_sum`, JAXBench 49k's AvgPool1d) becomes a
pooling matmul the kernel body can carry; other windows are still refused by name."""

from __future__ import annotations

from pathlib import Path

import pytest
from offline_kernels import assert_matches_reference, assert_verifies, first_kernel

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
    assert_matches_reference(TASK, first_kernel(TASK), seed=4)


@pytest.mark.slow
def test_the_pooled_kernel_passes_the_verifier(tmp_path: Path) -> None:
    assert_verifies(TASK, tmp_path)
