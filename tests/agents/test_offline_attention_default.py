"""The attention class's default schedule: a head_dim under the lanes goes as (head_dim, seq)
blocks, and short sequences share a step between several (batch x head) groups, so the root
a search starts from neither pads every block to the lanes nor pays the per-step cost once
per head. Both knobs stay reachable: the heads per block are in TUNABLES, and the layout is
the rows one wherever seq on the lanes cannot pay (a score bias, sequences under the lanes)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from offline_kernels import assert_matches_reference, first_kernel

from agents.llm.offline import attention, variety
from agents.llm.offline.classify import classify_task

TASKS = Path(__file__).resolve().parents[2] / "tasks"

# grouped-query, causal, head_dim 32: two query heads per kv head; a KV length off the blocks
GQA = '''import jax
import jax.numpy as jnp

SHAPES = [(2, 4, 2, 256, 32), (1, 4, 2, 200, 32)]


def reference(q, k, v):
    seq, depth = q.shape[2], q.shape[3]
    k = jnp.repeat(k, q.shape[1] // k.shape[1], axis=1)
    v = jnp.repeat(v, q.shape[1] // v.shape[1], axis=1)
    scores = jnp.einsum("bhqd,bhkd->bhqk", q, k) * depth ** -0.5
    allowed = jnp.arange(seq)[:, None] >= jnp.arange(seq)[None, :]
    scores = jnp.where(allowed, scores, -jnp.inf)
    return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(scores, axis=-1), v)


def make_inputs(key, shape_index=0):
    b, hq, hkv, s, d = SHAPES[shape_index]
    kq, kk, kv = jax.random.split(key, 3)
    return (jax.random.normal(kq, (b, hq, s, d), jnp.float32),
            jax.random.normal(kk, (b, hkv, s, d), jnp.float32),
            jax.random.normal(kv, (b, hkv, s, d), jnp.float32))
'''


def test_a_narrow_head_dim_puts_seq_on_the_lanes_and_packs_heads_to_the_score_budget() -> None:
    facts = classify_task(TASKS / "causal_attention.py")  # (1, 8, 1024, 64), 512-wide blocks
    spec = variety.default_spec(facts, {}, None)
    assert (spec.operands, spec.layout) == ("transposed", "transposed")
    # 4 heads of 512 x 512 f32 scores are the 4 MiB a step may hold; 8 would be twice that
    assert spec.heads_per_block == 4 == attention.SCORES_PER_STEP // (512 * 512)
    source = attention.render(facts, spec, "causal_attention")
    # the tuner may try half as many; twice as many f32 blocks would pass 3/4 of scoped VMEM
    assert attention.vmem_bytes(facts, replace(spec, heads_per_block=8)) > 24 << 20
    assert "'heads_per_block': [4, 2]" in source and "SEQ_ON_LANES = True" in source


def test_rows_stay_where_seq_on_the_lanes_cannot_pay(tmp_path: Path) -> None:
    """Sequences under the lanes would pad them in (head_dim, seq) blocks; a head_dim of 128
    fills them already."""
    for name, shapes in (("short", "(2, 4, 2, 64, 32)"), ("full", "(2, 4, 2, 256, 128)")):
        path = tmp_path / f"{name}.py"
        path.write_text(GQA.replace("(2, 4, 2, 256, 32), (1, 4, 2, 200, 32)", shapes))
        spec = variety.default_spec(classify_task(path), {}, None)
        assert (spec.operands, spec.layout) == ("rows", "rows"), name


@pytest.mark.parametrize("heads", [2, 1])
def test_the_default_grouped_query_kernel_computes_the_reference(tmp_path: Path, heads: int) -> None:
    """Two query heads of one kv head per block (the default here) and one, seq on the lanes,
    under the causal mask, at the tuning point and a KV length off the 128-wide blocks."""
    task = tmp_path / "gqa_narrow.py"
    task.write_text(GQA)
    facts = classify_task(task)
    assert facts.kernel_class == "attention", facts.reasons
    spec = variety.default_spec(facts, {}, None)
    assert spec.operands == "transposed" and spec.heads_per_block == 2
    assert_matches_reference(task, first_kernel(task), seed=1, heads_per_block=heads)
