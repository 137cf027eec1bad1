"""Cumulative sums: a grouped matmul whose reference finds group offsets with a cumsum and a
scan (JAXBench's megablox) is the grouped_matmul class, and a float cumsum becomes a
triangular matmul in the kernel body; both kernels compute their references."""

from __future__ import annotations

from pathlib import Path

import pytest
from offline_kernels import assert_matches_reference, assert_verifies, first_kernel

from agents.llm.offline.classify import classify_task

TASKS = Path(__file__).resolve().parents[1] / "evaltasks"
GROUPED = TASKS / "grouped_cumsum_scan.py"
DECAYED = TASKS / "decayed_cumsum.py"


def test_a_cumsum_and_scan_grouped_matmul_is_the_grouped_class() -> None:
    facts = classify_task(GROUPED)
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


def test_the_grouped_kernel_computes_the_reference_in_interpret_mode() -> None:
    assert_matches_reference(GROUPED, first_kernel(GROUPED), seed=2)


@pytest.mark.slow
def test_the_grouped_kernel_passes_the_verifier(tmp_path: Path) -> None:
    """Also the non-finite case: an inf in one group's rhs stays on that group's rows."""
    assert_verifies(GROUPED, tmp_path)


def test_a_float_cumsum_becomes_a_triangular_matmul_in_the_body() -> None:
    facts = classify_task(DECAYED)
    assert not facts.unsupported, facts.unsupported
    assert facts.kernel_class == "rows_generic", facts.reasons
    assert "cumsum" not in facts.body_source and facts.body_source.count("dot_general") == 2


def test_the_triangular_cumsum_kernel_computes_the_reference_in_interpret_mode() -> None:
    """Forward and reverse cumsums, at the tuning point and the unseen shape."""
    assert_matches_reference(DECAYED, first_kernel(DECAYED), seed=6)
