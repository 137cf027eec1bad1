"""The offline author's flash-attention kernel on a KV length that is not a multiple of its
KV block: the rows of V past the end of the array are whatever the block buffer holds
(interpret mode poisons them with NaN), and p = 0 there does not help, since 0 x NaN is NaN.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from agents.llm.base import LlmRequest
from agents.llm.offline import OfflineProvider
from agents.llm.parsing import extract_code

TASK = '''
import jax
import jax.numpy as jnp

NAME = "causal_attention_tail"
SHAPES = [(2, 200, 64)]


def reference(q, k, v):
    seq = q.shape[-2]
    scores = jnp.einsum("bqd,bkd->bqk", q, k) * (q.shape[-1] ** -0.5)
    allowed = jnp.arange(seq)[:, None] >= jnp.arange(seq)[None, :]
    scores = jnp.where(allowed, scores, -jnp.inf)
    return jnp.einsum("bqk,bkd->bqd", jax.nn.softmax(scores, axis=-1), v)


def make_inputs(key, shape_index=0):
    kq, kk, kv = jax.random.split(key, 3)
    return tuple(jax.random.normal(k, SHAPES[shape_index], jnp.float32) for k in (kq, kk, kv))
'''


@pytest.mark.slow
def test_a_kv_tail_block_does_not_read_v_past_the_end(tmp_path: Path) -> None:
    import jax

    from tools.child.interpret import InterpretSettings, interpreted
    from tools.inputs.tasks import load_task

    task_path = tmp_path / "causal_attention_tail.py"
    task_path.write_text(TASK)
    author = OfflineProvider()
    context = {"task_path": str(task_path), "task_name": "causal_attention_tail"}
    plan = author.answer(LlmRequest(agent="plan", purpose="plan", prompt="", context=context))
    answer = author.answer(LlmRequest(agent="implement", purpose="implement", prompt="",
                                      context={**context, "plan": plan}))
    candidate = tmp_path / "candidate.py"
    candidate.write_text(extract_code(answer))
    spec = importlib.util.spec_from_file_location("tail_candidate", candidate)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    kernel = module.build(block_q=128, block_kv=128)  # 200 keys: a tail of 72 in block 2

    task = load_task(task_path)
    inputs = [np.asarray(x) for x in task.make_inputs(0, 0)]
    closed = jax.make_jaxpr(kernel)(*inputs)
    out = np.asarray(interpreted(closed, InterpretSettings(detect_races=False))(*inputs)[0])
    want = np.asarray(jax.jit(task.reference_at(0))(*inputs))
    assert not np.isnan(out).any(), f"{np.isnan(out).mean():.0%} of the output is NaN"
    np.testing.assert_allclose(out, want, atol=1e-5, rtol=1e-5)
