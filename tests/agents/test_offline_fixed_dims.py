"""References that fix sizes in Python (`D ** -0.5`, `jnp.ones((S, S))`, `reshape(-1, G, N // G)`):
traced symbolically, those sizes are pinned to the tuning point, and a body traced there is
wrong at the unseen shapes. Attention is found by its numbers instead (which inputs are q, k,
v and a score bias, their layout, scale, causality, head grouping), and any other class gets
one body per shape; the kernels read their sizes from the call. Dots with two batch dims
(`einsum("bhqd,bhkd->bhqk")` outside attention) go through one merged batch dim."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from agents.llm.base import LlmRequest
from agents.llm.offline import OfflineProvider
from agents.llm.offline.classify import classify_task

ROOT = Path(__file__).resolve().parents[2]
EVALTASKS = ROOT / "tests" / "evaltasks"


def _context(task: Path) -> dict[str, Any]:
    from tools.api import chip_figures

    return {"task_path": str(task), "task_name": task.stem, "target": "sim-tpu-v6e",
            "chip": chip_figures("sim-tpu-v6e"), "iteration": 0, "seed": 0, "parent": None,
            "failures": [], "hint": "", "knowledge": [], "baseline_s": 1e-5, "feedback": ""}


def _ask(purpose: str, context: dict[str, Any]) -> str:
    request = LlmRequest(agent="test", purpose=purpose, prompt="(ignored offline)",
                         context=context, seed=0)
    return asyncio.run(OfflineProvider(seed=0).complete(request)).text


@pytest.mark.parametrize(("name", "expected"), [
    ("attention_gqa_bshd", {"q": 0, "k": 1, "v": 2, "bias": None, "layout": "bshd",
                            "causal": True, "scale": "rsqrt_d", "kv_heads": 2,
                            "dots_dtype": "bfloat16"}),
    ("attention_score_bias", {"q": 0, "k": 1, "v": 2, "bias": 3, "layout": "bhsd",
                              "causal": True, "scale": "rsqrt_d", "kv_heads": None,
                              "dots_dtype": "float32"}),
])
def test_attention_with_sizes_fixed_in_python_is_found_by_its_numbers(
        name: str, expected: dict[str, Any]) -> None:
    facts = classify_task(EVALTASKS / f"{name}.py")
    assert facts.pinned, "the task must fix a size in Python, or it tests nothing here"
    assert facts.kernel_class == "attention" and not facts.unsupported, facts.reasons
    assert facts.detail == expected


def test_ragged_paged_attention_with_heads_third_pages_is_paged_attention() -> None:
    facts = classify_task(EVALTASKS / "paged_attention_ragged.py")
    assert facts.pinned and facts.kernel_class == "paged_attention", facts.reasons
    assert facts.detail == {"q": 0, "k": 1, "v": 2, "tables": 4, "lengths": 3, "starts": 5,
                            "scale": "rsqrt_d", "layout": "pshd"}


def test_a_groupnorm_after_a_matmul_gets_one_body_per_shape() -> None:
    facts = classify_task(EVALTASKS / "matmul_groupnorm.py")
    assert facts.pinned and not facts.unsupported, facts.reasons
    assert facts.kernel_class == "rows_generic", facts.reasons
    assert facts.body_source.count("def _body_") == 2 and "_BODIES" in facts.body_source
    # the width is read from the call: the output's last axis follows w's, not a literal
    (out_dims, _), = facts.outs
    assert out_dims == (facts.args[0].dims[0], facts.args[1].dims[1])


@pytest.mark.parametrize(("lhs", "rhs", "numbers"), [
    ((2, 3, 16, 8), (2, 3, 24, 8), (((3,), (3,)), ((0, 1), (0, 1)))),  # q k^T per (batch, head)
    ((2, 3, 16, 24), (2, 3, 24, 8), (((3,), (2,)), ((0, 1), (0, 1)))),  # p v
    ((2, 16, 4, 5), (2, 16, 4), (((2,), (2,)), ((0, 1), (0, 1)))),  # a weighted sum per token
    ((16, 2, 4, 5), (4, 2, 16), (((2,), (0,)), ((0, 1), (2, 1)))),  # batch axes not leading
])
def test_a_dot_with_several_batch_dims_is_one_merged_batched_matmul(
        lhs: tuple[int, ...], rhs: tuple[int, ...], numbers: Any) -> None:
    import jax
    import numpy as np
    from jax import lax

    from agents.llm.offline.batchdims import merge_batch_dims, needs_merge

    a = jax.random.normal(jax.random.key(0), lhs)
    b = jax.random.normal(jax.random.key(1), rhs)

    def dot(x: Any, y: Any) -> Any:
        return lax.dot_general(x, y, numbers)

    closed = jax.make_jaxpr(dot)(a, b)
    assert needs_merge(closed)
    merged = merge_batch_dims(closed)
    assert not needs_merge(merged)
    got = jax.core.eval_jaxpr(merged.jaxpr, merged.consts, a, b)[0]
    np.testing.assert_allclose(np.asarray(got), np.asarray(dot(a, b)), rtol=1e-6, atol=1e-6)


def test_a_body_that_needs_every_size_concrete_gets_one_per_shape() -> None:
    facts = classify_task(EVALTASKS / "rope_matmul.py")
    assert not facts.unsupported and facts.kernel_class == "single_block", facts.reasons
    assert set(facts.pinned) == set(facts.symbols)  # no row block: the bodies are concrete
    assert facts.body_source.count("def _body_") == 2


def test_a_reference_whose_dots_have_two_batch_dims_gets_a_body() -> None:
    facts = classify_task(EVALTASKS / "retention_small.py")
    assert not facts.unsupported and facts.body_source, facts.reasons
    assert "dot_general" in facts.primitives


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("name", ["attention_gqa_bshd", "attention_score_bias", "matmul_groupnorm",
                                  "retention_small", "paged_attention_ragged", "rope_matmul"])
def test_the_kernel_passes_the_verifier_at_every_shape(name: str, tmp_path: Path) -> None:
    from agents.llm.parsing import check_plan, extract_code
    from tools.api import evaluate, freeze_suite, load_task

    task = EVALTASKS / f"{name}.py"
    suite = freeze_suite(load_task(task), seeds=(0, 1))
    assert [c.kind for c in suite.cases].count("unseen") >= 1
    plan = check_plan(_ask("plan", _context(task)))
    candidate = tmp_path / f"{name}_offline.py"
    candidate.write_text(extract_code(_ask("implement", {**_context(task), "plan": plan})))
    verdict = evaluate(task, candidate, suite=suite)
    assert verdict.verdict == "pass", (verdict.reasons, [d.message for d in verdict.diagnostics][:3])
