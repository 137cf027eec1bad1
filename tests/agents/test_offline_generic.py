"""The generic class: a reference no specific class takes is tiled over the axes its jaxpr
never mixes, computes what the reference does at every block size, and passes the verifier;
with no such axis it is one block, or refused in the user's terms when that cannot fit."""

from __future__ import annotations

from pathlib import Path

import pytest
from offline_kernels import GATED_MLP, assert_matches_reference, assert_verifies, first_kernel

from agents.llm.offline import generic, generic_fold, planner, variety
from agents.llm.offline.classify import classify_task
from agents.llm.offline.common import drop_unused_imports
from agents.llm.offline.levers import REGISTRY, LeverContext, NotApplicable, variants
from searchpolicies.levers import levers_for

_HEAD = "import jax\nimport jax.numpy as jnp\n\n"

# a sum over the middle axis of a 3-D array, broadcast back: too few rows for the row classes
MIDDLE_SUM = _HEAD + '''SHAPES = [(4, 16, 256), (2, 16, 128)]


def reference(x, w):
    s = jnp.sum(x * w[None, None, :], axis=1, keepdims=True)
    return jnp.tanh(x - s) * 2.0


def make_inputs(key, shape_index=0):
    b, n, d = SHAPES[shape_index]
    kx, kw = jax.random.split(key)
    return jax.random.normal(kx, (b, n, d), jnp.float32), jax.random.normal(kw, (d,), jnp.float32)
'''

# a statistic over the leading axis: the middle (sublane) axis is tiled, in blocks of 8 rows
OVER_BATCH = _HEAD + '''SHAPES = [(4, 64, 256), (2, 32, 128)]


def reference(x):
    return x / (jnp.sum(jnp.abs(x), axis=0, keepdims=True) + 1.0)


def make_inputs(key, shape_index=0):
    return (jax.random.normal(key, SHAPES[shape_index], jnp.float32),)
'''

# columns normalised by their own sums: rows are mixed, columns (the lane axis) independent
COLUMN_NORM = _HEAD + '''SHAPES = [(64, 512), (32, 256)]


def reference(x, b):
    scale = jnp.sum(jnp.abs(x), axis=0, keepdims=True) + 1.0
    return jnp.maximum(x / scale + b[None, :], 0.0)


def make_inputs(key, shape_index=0):
    r, c = SHAPES[shape_index]
    kx, kb = jax.random.split(key)
    return jax.random.normal(kx, (r, c), jnp.float32), jax.random.normal(kb, (c,), jnp.float32)
'''

# the leading axis feeds an iota (a position), the middle one a sum: only the last is tiled
POSITIONAL = _HEAD + '''SHAPES = [(8, 16, 256), (4, 16, 128)]


def reference(x):
    ramp = jnp.arange(x.shape[0], dtype=x.dtype)[:, None, None]
    return x * ramp - jnp.sum(x, axis=1, keepdims=True)


def make_inputs(key, shape_index=0):
    return (jax.random.normal(key, SHAPES[shape_index], jnp.float32),)
'''

# a causal mask over the last two axes, broadcast over a short batch: one image per step, the
# boolean mask broadcast through int32 (Mosaic cannot relayout an i1 vector to broadcast it)
MASKED = _HEAD + '''SHAPES = [(4, 128, 128), (2, 128, 128)]


def reference(x):
    keep = jnp.tril(jnp.ones(x.shape[1:], jnp.bool_))[None]
    e = jnp.exp(jnp.where(keep, x, -1e30))
    return e / jnp.sum(e, axis=-1, keepdims=True)


def make_inputs(key, shape_index=0):
    return (jax.random.normal(key, SHAPES[shape_index], jnp.float32),)
'''

# experts' outputs weighted per token (JAXBench 10p's last einsums): a bf16 dot whose batch dim
# (the expert) is not leading, which XLA:CPU cannot run, so the body moves it to the front
EXPERTS = _HEAD + '''SHAPES = [(2, 32, 4, 64, 128), (2, 16, 4, 64, 128)]


def reference(h, w, p):
    return jnp.einsum("bsne,bsn->bse", jnp.einsum("bsnm,nme->bsne", h, w), p)


def make_inputs(key, shape_index=0):
    b, s, n, m, e = SHAPES[shape_index]
    kh, kw, kp = jax.random.split(key, 3)
    return (jax.random.normal(kh, (b, s, n, m), jnp.bfloat16),
            jax.random.normal(kw, (n, m, e), jnp.bfloat16) * 0.1,
            jax.random.uniform(kp, (b, s, n), jnp.float32))
'''

# a matmul's row minimum broadcast against a bias over a new axis: that axis is independent,
# but a grid along it would compute the matmul again at every step
ROW_MIN_BIAS = _HEAD + '''SHAPES = [(64, 128, 256), (32, 128, 128)]


def reference(x, w, b):
    y = jnp.tanh(x @ w)
    m = jnp.min(y, axis=1, keepdims=True)
    return m.reshape(1, 1, -1, 1) + b


def make_inputs(key, shape_index=0):
    n, k, c = SHAPES[shape_index]
    kx, kw, kb = jax.random.split(key, 3)
    return (jax.random.normal(kx, (n, k), jnp.float32),
            jax.random.normal(kw, (k, c), jnp.float32) * 0.1,
            jax.random.normal(kb, (1, c, 1, 1), jnp.float32))
'''

# a global statistic: no axis is independent
GLOBAL = _HEAD + '''SHAPES = [(64, 256), (32, 128)]


def reference(x):
    return (x - jnp.mean(x)) * jax.lax.rsqrt(jnp.mean(jnp.square(x)) + 1e-5)


def make_inputs(key, shape_index=0):
    return (jax.random.normal(key, SHAPES[shape_index], jnp.float32),)
'''

# a norm over (batch, seq, features): the batch is a leading axis, folded into the rows
BATCHED_NORM = _HEAD + '''SHAPES = [(3, 40, 256), (2, 24, 128)]


def reference(x, scale):
    x32 = x.astype(jnp.float32)
    ms = jnp.mean(jnp.square(x32), axis=-1, keepdims=True)
    return (x32 * jax.lax.rsqrt(ms + 1e-5)).astype(x.dtype) * scale


def make_inputs(key, shape_index=0):
    b, s, d = SHAPES[shape_index]
    kx, kw = jax.random.split(key)
    return (jax.random.normal(kx, (b, s, d), jnp.bfloat16),
            (1.0 + 0.1 * jax.random.normal(kw, (d,), jnp.float32)).astype(jnp.bfloat16))
'''

# the gated MLP at test size: every block of rows reads every weight
BATCHED_MLP = GATED_MLP.replace("[(2, 512, 1024, 3584), (1, 136, 256, 640)]",
                                "[(2, 48, 128, 256), (3, 16, 128, 256)]")

GLOBAL_HUGE = GLOBAL.replace("SHAPES = [(64, 256), (32, 128)]", "SHAPES = [(4096, 4096), (2048, 4096)]")


def _task(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text(text)
    return path


def test_a_sum_over_a_middle_axis_is_tiled_one_leading_position_per_step(tmp_path: Path) -> None:
    task = _task(tmp_path, "middle_sum", MIDDLE_SUM)
    facts = classify_task(task)
    assert facts.kernel_class == "generic", facts.reasons
    assert facts.detail["in_axes"] == [[0, None, None], [None]] and facts.detail["units"] == [True]
    assert facts.detail["out_axes"] == [[0, None, None]]
    assert_matches_reference(task, first_kernel(task), seed=3)


@pytest.mark.slow
@pytest.mark.parametrize(("name", "text", "spanning"), [("norm", BATCHED_NORM, 48),
                                                      ("mlp", BATCHED_MLP, 64)])
def test_a_batch_is_folded_into_the_rows_so_a_block_spans_batch_positions(
        tmp_path: Path, name: str, text: str, spanning: int) -> None:
    """Batch rows per block: the leading axis and the rows after it are one axis of the
    grid, so a block may hold rows of two batch positions (and the last one a tail)."""
    task = _task(tmp_path, f"batched_{name}", text)
    facts = classify_task(task)
    assert facts.kernel_class == "generic", facts.reasons
    assert facts.detail["units"][0] and generic_fold.fold(facts) == (0, 1)
    b, s = facts.dim_values[facts.detail["origins"][0]], facts.dim_values[facts.detail["origins"][1]]
    assert generic.sizes(facts)[:2] == [1, b * s]
    source = first_kernel(task)
    assert "_FOLD_IN = (0," in source and "folded into the rows of" in source
    assert spanning % s and spanning < b * s  # crosses a batch boundary, ends in a tail
    assert_matches_reference(task, source, seed=5, block_1=spanning)
    answer = variants("generic", variety.default_spec(facts, {}, {}), "flatten_leading_axes",
                      LeverContext(facts, {}))
    assert isinstance(answer, NotApplicable) and "already folded" in answer.reason
    middle = classify_task(_task(tmp_path, "middle_sum", MIDDLE_SUM))
    assert generic_fold.fold(middle) is None  # its rows are the lanes: nothing to fold into


def test_a_statistic_over_the_leading_axis_is_tiled_over_rows(tmp_path: Path) -> None:
    task = _task(tmp_path, "over_batch", OVER_BATCH)
    facts = classify_task(task)
    assert facts.kernel_class == "generic", facts.reasons
    assert facts.detail["out_axes"] == [[None, 0, None]] and facts.detail["units"] == [False]
    source = first_kernel(task)
    for block in (8, 32, 64):
        assert_matches_reference(task, source, seed=2, block_0=block)


def test_columns_normalised_by_their_sums_are_tiled_over_lanes(tmp_path: Path) -> None:
    task = _task(tmp_path, "column_norm", COLUMN_NORM)
    facts = classify_task(task)
    assert facts.kernel_class == "generic", facts.reasons
    assert facts.detail["out_axes"] == [[None, 0]] and facts.detail["in_axes"] == [[None, 0], [0]]
    source = first_kernel(task)
    for block in (128, 256):
        assert_matches_reference(task, source, seed=5, block_0=block)
    with pytest.raises(ValueError, match="multiple of 128"):
        assert_matches_reference(task, source, seed=5, block_0=64)


def test_an_axis_that_feeds_an_iota_is_not_tiled(tmp_path: Path) -> None:
    task = _task(tmp_path, "positional", POSITIONAL)
    facts = classify_task(task)
    assert facts.kernel_class == "generic", facts.reasons
    assert facts.detail["out_axes"] == [[None, None, 0]], facts.reasons
    assert_matches_reference(task, first_kernel(task), seed=1, block_0=128)


def test_a_masked_batch_is_one_image_per_step_with_the_mask_broadcast_as_int(tmp_path: Path) -> None:
    task = _task(tmp_path, "masked", MASKED)
    facts = classify_task(task)
    assert facts.kernel_class == "generic" and facts.detail["units"] == [True], facts.reasons
    assert "!= 0" in facts.detail["body"] and "iota" in facts.reasons[-1]
    assert_matches_reference(task, first_kernel(task), seed=4)


def test_a_dot_with_its_batch_dim_inside_is_written_batch_first(tmp_path: Path) -> None:
    task = _task(tmp_path, "experts", EXPERTS)
    facts = classify_task(task)
    assert facts.kernel_class == "generic" and facts.detail["units"][0], facts.reasons
    assert "(((2,), (1,)), ((0,), (0,)))" in facts.detail["body"], facts.detail["body"]
    assert_matches_reference(task, first_kernel(task), seed=6, rtol=2e-2, atol=2e-2)


def test_an_axis_only_a_broadcast_runs_along_is_not_tiled(tmp_path: Path) -> None:
    """The bias's axis of the output is independent, but the matmul, the tanh and the minimum
    do not run along it: tiling it would compute them again at every step (40k of JAXBench
    ran past its interpret-mode limit that way). Only the matmul's rows are tiled."""
    task = _task(tmp_path, "row_min_bias", ROW_MIN_BIAS)
    facts = classify_task(task)
    assert facts.kernel_class == "generic", facts.reasons
    assert len(facts.detail["symbols"]) == 1 and facts.detail["in_axes"][0] == [0, None]
    assert any("output axis 1" in r and "compute them again" in r for r in facts.reasons), facts.reasons
    assert_matches_reference(task, first_kernel(task), seed=4)


def test_a_global_statistic_is_one_block(tmp_path: Path) -> None:
    facts = classify_task(_task(tmp_path, "global_stat", GLOBAL))
    assert facts.kernel_class == "single_block" and not facts.unsupported
    assert any("no axis of the output is independent" in r for r in facts.reasons), facts.reasons


@pytest.mark.slow
def test_a_global_statistic_too_big_for_vmem_is_refused_saying_why(tmp_path: Path) -> None:
    facts = classify_task(_task(tmp_path, "global_huge", GLOBAL_HUGE))
    assert facts.unsupported.startswith("no axis of the reference's output can be computed block by block")
    assert "MiB of VMEM" in facts.unsupported and "--scale" in facts.unsupported
    assert "/tmp" not in facts.unsupported and "Error" not in facts.unsupported


def test_the_levers_see_a_class_of_its_own_with_block_tunables(tmp_path: Path) -> None:
    task = _task(tmp_path, "over_batch", OVER_BATCH)
    facts = classify_task(task)
    assert {lv.id for lv in levers_for("generic")} <= set(REGISTRY["generic"])
    base = variety.default_spec(facts, {}, {})
    got = variants("generic", base, "block_shape", LeverContext(facts, {}))
    assert not isinstance(got, NotApplicable) and got
    sources = {drop_unused_imports(variety.WRITERS["generic"].render(facts, s, "t")) for s in [base, *got]}
    assert len(sources) == 1 + len(got)
    assert "TUNABLES = {'block_0': [" in first_kernel(task)
    plan = planner.plan_text(facts, planner.choose(facts, {}), {}, "over_batch")
    assert "**generic**" in plan and '"block_0"' in plan


@pytest.mark.slow
@pytest.mark.parametrize("text", [MIDDLE_SUM, OVER_BATCH, COLUMN_NORM, MASKED, BATCHED_MLP])
def test_the_generic_kernel_passes_the_verifier(tmp_path: Path, text: str) -> None:
    assert_verifies(_task(tmp_path, "generic_task", text), tmp_path)
