"""The generic class sums over a contracted axis when one block of the independent axes
cannot hold every weight: an MoE's hidden axis becomes a last, `arbitrary` grid axis, the
dots contracting it add into float32 scratch, and the rest of the body (routing, the
weighted combination) runs once on the sums. The budget is lowered here so a small task
takes that path; JAXBench's 10p (115.7 MiB of expert weights at scale 0.125) takes it for real."""

from __future__ import annotations

from pathlib import Path

import pytest
from offline_kernels import assert_matches_reference, first_kernel

from agents.llm.offline import generic
from agents.llm.offline.classify import classify_task

MOE = '''import jax
import jax.numpy as jnp

SHAPES = [(2, 32, 128, 384), (1, 16, 128, 320)]  # batch, tokens, model, hidden


def reference(x, router, gate, up, down):
    logits = jnp.dot(x, router)
    top, idx = jax.lax.top_k(logits, 2)
    probs = jax.nn.softmax(top, axis=-1)
    hidden = jax.nn.silu(jnp.einsum("bse,nem->bsnm", x, gate)) * jnp.einsum(
        "bse,nem->bsnm", x, up)
    experts = jnp.einsum("bsnm,nme->bsne", hidden, down)
    weights = (jax.nn.one_hot(idx, router.shape[-1]) * probs[..., None]).sum(axis=2)
    return jnp.einsum("bsne,bsn->bse", experts, weights)


def make_inputs(key, shape_index=0):
    b, s, e, m = SHAPES[shape_index]
    k = jax.random.split(key, 5)
    return (jax.random.normal(k[0], (b, s, e), jnp.float32),
            jax.random.normal(k[1], (e, 4), jnp.float32) * 0.1,
            jax.random.normal(k[2], (4, e, m), jnp.float32) * 0.05,
            jax.random.normal(k[3], (4, e, m), jnp.float32) * 0.05,
            jax.random.normal(k[4], (4, m, e), jnp.float32) * 0.05)
'''

# the hidden values are also reduced by something other than a dot: no split is possible
READ_AFTER = MOE.replace('    return jnp.einsum("bsne,bsn->bse", experts, weights)',
                         '    return jnp.einsum("bsne,bsn->bse", experts, weights) '
                         '+ jnp.max(hidden, axis=3).sum(axis=2)[..., None]')


@pytest.fixture
def small_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(generic, "RAISED_VMEM_BYTES", 6 * 1024 * 1024)


def test_an_moe_whose_weights_do_not_fit_sums_over_its_hidden_axis(
        tmp_path: Path, small_budget: None) -> None:
    task = tmp_path / "moe_small.py"
    task.write_text(MOE)
    facts = classify_task(task)
    assert facts.kernel_class == "generic" and not facts.unsupported, facts.unsupported
    detail = facts.detail
    assert detail["reduced"] and detail["symbols"][-1] == "R0"
    assert facts.dim_values[detail["origins"][-1]] == 384  # the hidden axis
    assert any("summed grid axis" in r for r in facts.reasons)
    source = first_kernel(task)
    assert "_SUMMED = (False, False, True)" in source and "def _finish(" in source
    assert "scratch_shapes" in source and '"arbitrary"' in source
    # three steps of 128 along the hidden axis at the tuning point, two at the unseen one
    # (its 320 has no 128-multiple divisor but itself: one whole block)
    assert_matches_reference(task, source, seed=0, block_2=128, rtol=1e-4, atol=1e-5)
    assert_matches_reference(task, source, seed=1, rtol=1e-4, atol=1e-5)


def test_a_value_read_after_the_contraction_keeps_the_refusal(
        tmp_path: Path, small_budget: None) -> None:
    task = tmp_path / "moe_read_after.py"
    task.write_text(READ_AFTER)
    facts = classify_task(task)
    assert facts.unsupported and "run it at a smaller size" in facts.unsupported
    assert any("no contracted axis to sum over" in r and "reduce_max: drops the tiled axis" in r
               for r in facts.reasons), facts.reasons


def test_a_summed_block_divides_its_axis() -> None:
    assert generic.dividing(512, 1792, 128) == 256
    assert generic.dividing(128, 384, 128) == 128
    assert generic.dividing(128, 320, 128) == 320  # no multiple of 128 divides it
    assert generic.dividing(1024, 512, 128) == 512
