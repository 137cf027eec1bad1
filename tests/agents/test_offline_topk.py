"""The offline author's top-k: a tournament on the vector unit where the block fits its
layout, k rounds of max elsewhere, both giving exactly what `lax.top_k` gives (values bit
for bit, indices, ties to the lowest index, +0 above -0, infinities in order); the
`reduction_layout` lever moves between the groupings, and the kernel it writes verifies."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from agents.llm.offline import topk_source
from agents.llm.offline.classify import classify_task
from agents.llm.offline.levers import LeverContext, NotApplicable, variants
from agents.llm.offline.rows import default_spec, render

ROOT = Path(__file__).resolve().parents[2]
TOPK = ROOT / "tasks" / "topk.py"


def _helper(group: int) -> dict[str, Any]:
    namespace: dict[str, Any] = {"jnp": jnp, "lax": lax}
    exec(topk_source.with_group(topk_source.HELPER, group), namespace)
    return namespace


def _adversarial(shape: tuple[int, int]) -> dict[str, jax.Array]:
    x = jax.random.normal(jax.random.PRNGKey(3), shape, jnp.float32)
    cols = jnp.arange(shape[1])
    return {
        "normal": x,
        "ties": jnp.round(x * 2) / 2,
        "constant": jnp.zeros(shape, jnp.float32),
        "signed zeros": jnp.where(x > 0, 0.0, -0.0),
        "infinities": jnp.where(x > 1.2, jnp.inf, jnp.where(x < -1.0, -jnp.inf, x)),
        "all -inf but one": jnp.full(shape, -jnp.inf).at[:, 5].set(1.0),
        "one group holds them all": jnp.where((cols >= 16) & (cols < 24), 9.0 + cols, x),
        "late ties": jnp.where(cols >= shape[1] - 12, 7.0, x),
    }


def _same(got: tuple[jax.Array, jax.Array], x: jax.Array, k: int) -> None:
    values, indices = jax.lax.top_k(x, k)
    np.testing.assert_array_equal(np.asarray(got[1]), np.asarray(indices))
    np.testing.assert_array_equal(np.asarray(got[0]).view(np.int32),
                                  np.asarray(values).view(np.int32))


def _stacked(shape: tuple[int, int]) -> jax.Array:
    """Every adversarial case, one above the other (rows are independent: one compile)."""
    return jnp.concatenate(list(_adversarial(shape).values()), axis=0)


def _which(x_rows: int, shape: tuple[int, int]) -> str:
    return list(_adversarial(shape))[x_rows // shape[0]]


def _check(fn: Any, shape: tuple[int, int], k: int, what: str) -> None:
    x = _stacked(shape)
    values, indices = jax.jit(fn, static_argnums=1)(x, k)
    want_values, want_indices = jax.lax.top_k(x, k)
    bad = np.nonzero((np.asarray(indices) != np.asarray(want_indices)).any(axis=1)
                     | (np.asarray(values).view(np.int32)
                        != np.asarray(want_values).view(np.int32)).any(axis=1))[0]
    assert not bad.size, f"{what}, k={k}: {_which(int(bad[0]), shape)} at {shape} differs"


@pytest.mark.parametrize("group", [8, 16, 32, 0])
def test_every_grouping_gives_lax_top_k_exactly(group: int) -> None:
    for k in (8, 3):
        _check(_helper(group)["_top_k_last"], (128, 512), k, f"group {group}")


def test_blocks_off_the_tournaments_layout_take_the_rounds_exactly() -> None:
    """Rows not a multiple of 128, a width not a multiple of the group, bf16 and int32."""
    top_k_last = jax.jit(_helper(8)["_top_k_last"], static_argnums=1)
    for shape in ((24, 200), (32, 100)):
        _check(top_k_last, shape, 8, "rounds")
    x = jax.random.normal(jax.random.PRNGKey(1), (128, 256), jnp.bfloat16)
    _same(top_k_last(x, 8), x, 8)
    n = jax.random.randint(jax.random.PRNGKey(2), (16, 64), -4, 4, jnp.int32).at[:, 3].set(-2**31)
    _same(top_k_last(n, 8), n, 8)


def test_the_grouping_is_rewritten_only_in_a_body_holding_a_top_k() -> None:
    assert topk_source.group_of(topk_source.HELPER) == topk_source.DEFAULT_GROUP
    body = topk_source.with_group(topk_source.HELPER, 32)
    assert topk_source.group_of(body) == 32 and body.count("TOPK_GROUP = ") == 1
    with pytest.raises(ValueError, match="multiple of 8"):
        topk_source.with_group(topk_source.HELPER, 12)
    with pytest.raises(ValueError, match="no top-k"):
        topk_source.with_group("def _body(x):\n    return x", 16)


def test_reduction_layout_moves_between_groupings_and_says_why_elsewhere() -> None:
    facts = classify_task(TOPK)
    spec = default_spec(facts, {}, None)
    out = variants(facts.kernel_class, spec, "reduction_layout", LeverContext(facts))
    assert not isinstance(out, NotApplicable)
    assert [s.topk_group for s in out] == [16, 32, 0]
    sources = {render(facts, s, "topk") for s in out} | {render(facts, spec, "topk")}
    assert len(sources) == 4  # four different kernels
    assert "TOPK_GROUP = 16 " in render(facts, out[0], "topk")
    again = variants(facts.kernel_class, out[0], "reduction_layout", LeverContext(facts))
    assert not isinstance(again, NotApplicable) and [s.topk_group for s in again] == [8, 32, 0]
    softmax = classify_task(ROOT / "tasks" / "softmax.py")
    refused = variants(softmax.kernel_class, default_spec(softmax, {}, None), "reduction_layout",
                       LeverContext(softmax))
    assert isinstance(refused, NotApplicable) and "only a top-k" in refused.reason


@pytest.mark.slow
@pytest.mark.parametrize("group", [8, 16])
def test_the_tournament_kernel_passes_the_verifier(group: int, tmp_path: Path) -> None:
    """The frozen suite (its edge cases and unseen shapes) in interpret mode, the TPU
    lowering and compile check, the work inside pallas_call."""
    from tools.api import evaluate

    facts = classify_task(TOPK)
    spec = default_spec(facts, {}, None)
    if group != topk_source.DEFAULT_GROUP:
        spec = next(s for s in variants(facts.kernel_class, spec, "reduction_layout",
                                        LeverContext(facts)) if s.topk_group == group)
    candidate = tmp_path / "topk_candidate.py"
    candidate.write_text(render(facts, spec, "topk"))
    verdict = evaluate(TOPK, candidate, target="sim-tpu-v6e")
    assert verdict.passed, (verdict.reasons, [d.message for d in verdict.diagnostics][:3])
