"""Shared checks for the offline author's first kernel of a small task file (run it in TPU
interpret mode against the reference, or put it through the full verifier), and the task
texts more than one test module writes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np


def first_kernel(task: Path, name: str = "candidate") -> str:
    """The author's candidate for `task` with the class's default blocks."""
    from agents.llm.offline import planner
    from agents.llm.offline.author import candidate_source
    from agents.llm.offline.classify import classify_task

    facts = classify_task(task)
    return candidate_source(facts, planner.default_params(facts, {}), name)


def implemented(task: Path, decision: dict[str, Any]) -> str:
    """The implementer's kernel for a planner decision: the offline provider reads the plan's
    json back, as a run does, not the decision's params directly."""
    from agents.llm.offline import planner
    from agents.llm.offline.classify import classify_task
    from agents.llm.offline.provider import OfflineProvider

    plan = planner.plan_text(classify_task(task), decision, {}, task.stem)
    answer = OfflineProvider()._implement({"task_path": str(task), "task_name": task.stem,
                                           "plan": plan, "chip": None})
    return answer.split("```python", 1)[1].split("```", 1)[0]


def assert_matches_reference(task: Path, source: str, seed: int, *, rtol: float = 1e-4,
                             atol: float = 1e-4, **knobs: Any) -> None:
    """`build(**knobs)` of `source` equals the reference at the tuning point and every unseen
    shape, in TPU interpret mode."""
    import jax
    from jax.experimental.pallas import tpu as pltpu

    from tools.api import load_task

    namespace: dict[str, Any] = {"__name__": "candidate"}
    exec(compile(source, str(task), "exec"), namespace)
    loaded = load_task(task)
    for shape_index in (0, *loaded.unseen_shape_indices):
        inputs = loaded.make_inputs(seed, shape_index)
        with pltpu.force_tpu_interpret_mode():
            got = jax.block_until_ready(namespace["build"](**knobs)(*inputs))
        np.testing.assert_allclose(np.asarray(got), np.asarray(loaded.reference(*inputs)),
                                   rtol=rtol, atol=atol)


def assert_verifies(task: Path, tmp_path: Path) -> None:
    """The full verifier passes the author's first kernel (frozen suite in interpret mode, the
    TPU lowering and compile check, the work inside pallas_call)."""
    from tools.api import evaluate

    candidate = tmp_path / f"{task.stem}_candidate.py"
    candidate.write_text(first_kernel(task, task.stem))
    verdict = evaluate(task, candidate, target="sim-tpu-v6e")
    assert verdict.passed, (verdict.reasons, [d.message for d in verdict.diagnostics][:3])


# A gated MLP in bfloat16 whose weights fit one block (21 MiB): fetched whole, they all arrive
# before the first step. The dots that make the hidden values are most of the MXU work, so
# only a price that counts them sees the summed schedule hide the weights behind it.
GATED_MLP = '''import jax
import jax.numpy as jnp

SHAPES = [(2, 512, 1024, 3584), (1, 136, 256, 640)]  # batch, tokens, model, hidden


def reference(x, gate, up, down):
    return jnp.dot(jax.nn.silu(jnp.dot(x, gate)) * jnp.dot(x, up), down)


def make_inputs(key, shape_index=0):
    b, s, e, m = SHAPES[shape_index]
    k = jax.random.split(key, 4)
    return (jax.random.normal(k[0], (b, s, e), jnp.bfloat16),
            jax.random.normal(k[1], (e, m), jnp.bfloat16) * 0.02,
            jax.random.normal(k[2], (e, m), jnp.bfloat16) * 0.02,
            jax.random.normal(k[3], (m, e), jnp.bfloat16) * 0.02)
'''
