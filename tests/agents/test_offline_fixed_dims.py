"""References that fix sizes in Python (`D ** -0.5`, `jnp.ones((S, S))`, `reshape(-1, G, N // G)`):
traced symbolically, those sizes are pinned to the tuning point, and a body traced there is
wrong at the unseen shapes. Attention is found by its numbers instead (which inputs are q, k,
v and a score bias, their layout, scale, causality, head grouping), and any other class gets
one body per shape; the kernels read their sizes from the call."""

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
                            "causal": True, "scale": "rsqrt_d", "kv_heads": 2}),
    ("attention_score_bias", {"q": 0, "k": 1, "v": 2, "bias": 3, "layout": "bhsd",
                              "causal": True, "scale": "rsqrt_d", "kv_heads": None}),
])
def test_attention_with_sizes_fixed_in_python_is_found_by_its_numbers(
        name: str, expected: dict[str, Any]) -> None:
    facts = classify_task(EVALTASKS / f"{name}.py")
    assert facts.pinned, "the task must fix a size in Python, or it tests nothing here"
    assert facts.kernel_class == "attention" and not facts.unsupported, facts.reasons
    assert facts.detail == expected


def test_a_groupnorm_after_a_matmul_gets_one_body_per_shape() -> None:
    facts = classify_task(EVALTASKS / "matmul_groupnorm.py")
    assert facts.pinned and not facts.unsupported, facts.reasons
    assert facts.kernel_class == "rows_generic", facts.reasons
    assert facts.body_source.count("def _body_") == 2 and "_BODIES" in facts.body_source
    # the width is read from the call: the output's last axis follows w's, not a literal
    (out_dims, _), = facts.outs
    assert out_dims == (facts.args[0].dims[0], facts.args[1].dims[1])


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("name", ["attention_gqa_bshd", "attention_score_bias", "matmul_groupnorm"])
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
