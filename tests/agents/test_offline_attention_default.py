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


@pytest.mark.parametrize("heads", [8, 4, 2, 1])
def test_the_default_grouped_query_kernel_computes_the_reference(tmp_path: Path, heads: int) -> None:
    """Every group in one block (the default here: 8 query heads of 4 kv heads, each read by
    its own two), two kv heads' query heads, one kv head's, and one query head, seq on the
    lanes, under the causal mask, at the tuning point and a KV length off the 128-wide
    blocks."""
    task = tmp_path / "gqa_narrow.py"
    task.write_text(GQA)
    facts = classify_task(task)
    assert facts.kernel_class == "attention", facts.reasons
    spec = variety.default_spec(facts, {}, None)
    assert spec.operands == "transposed" and spec.heads_per_block == 8
    assert "'heads_per_block': [8, 4]" in first_kernel(task)
    assert_matches_reference(task, first_kernel(task), seed=1, heads_per_block=heads)


# a per-head score bias shared by the batch (flex attention's relative positions), causal
BIASED = '''import jax
import jax.numpy as jnp

SHAPES = [(2, 4, 256, 32), (1, 4, 200, 32)]


def reference(q, k, v, bias):
    seq = q.shape[2]
    scores = jnp.einsum("bhqd,bhkd->bhqk", q, k) * q.shape[-1] ** -0.5 + BIAS_OF(bias)
    allowed = jnp.arange(seq)[:, None] >= jnp.arange(seq)[None, :]
    scores = jnp.where(allowed, scores, -1e30)
    return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(scores, axis=-1), v)


def make_inputs(key, shape_index=0):
    b, h, s, d = SHAPES[shape_index]
    kq, kk, kv, kb = jax.random.split(key, 4)
    return (jax.random.normal(kq, (b, h, s, d), jnp.float32),
            jax.random.normal(kk, (b, h, s, d), jnp.float32),
            jax.random.normal(kv, (b, h, s, d), jnp.float32),
            jax.random.normal(kb, BIAS_SHAPE(h, s), jnp.float32))
'''


@pytest.mark.parametrize(("bias_of", "bias_shape", "default", "heads"), [
    ("bias[None]", "(h, s, s)", 4, 4), ("bias[None]", "(h, s, s)", 4, 2),
    ("bias[None, None]", "(s, s)", 8, 4)])
def test_a_score_bias_goes_beside_packed_heads_and_seq_on_the_lanes(
        tmp_path: Path, bias_of: str, bias_shape: str, default: int, heads: int) -> None:
    """Consecutive query groups read consecutive bias groups (one block of several heads), or
    the one bias all heads share (broadcast over the block), transposed in VMEM to the (kv, q)
    scores. A block never holds more heads than divide the bias groups (4 here), unless there
    is one."""
    task = tmp_path / "biased.py"
    task.write_text(BIASED.replace("BIAS_OF(bias)", bias_of)
                    .replace("BIAS_SHAPE(h, s)", bias_shape))
    facts = classify_task(task)
    assert facts.kernel_class == "attention" and attention.has_bias(facts), facts.reasons
    spec = variety.default_spec(facts, {}, None)
    assert (spec.operands, spec.layout, spec.heads_per_block) == ("transposed", "transposed", default)
    assert_matches_reference(task, first_kernel(task), seed=2, heads_per_block=heads)
    rows = attention.render(facts, replace(spec, operands="rows", layout="rows"), "biased")
    assert_matches_reference(task, rows, seed=2, heads_per_block=heads)
