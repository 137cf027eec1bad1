"""Ragged paged attention of mixed prefill and decode (`ragged_paged_attention`): the float64
model claims a JAXBench-style serving step (three decodes, two prefill chunks, three idle
slots, keys and values in one page array) and nothing that only looks like one; the written
kernel computes the reference at every chunk and key-block size, tails of both included;
its loops are bounded by the lengths, so the cost model prices the pages they own."""

from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agents.llm.offline import patterns, planner, ragged
from agents.llm.offline.author import candidate_source
from agents.llm.offline.classify import TaskFacts, classify_task

ROOT = Path(__file__).resolve().parents[2]
TASK = ROOT / "tests/scaletasks/ragged_mixed/baseline.py"  # 64 tokens, 8 slots, 4 pages of 16


@functools.cache
def _facts() -> TaskFacts:
    return classify_task(TASK)


def _source(**knobs: int) -> str:
    return candidate_source(_facts(), knobs, "ragged_mixed")


@functools.cache
def _case() -> tuple[tuple[Any, ...], np.ndarray]:
    from tools.api import load_task

    task = load_task(TASK)
    inputs = task.make_inputs(0, 0)
    return inputs, np.asarray(task.reference(*inputs), np.float32)


def test_the_serving_step_is_ragged_paged_attention_with_each_input_named() -> None:
    facts = _facts()
    assert facts.kernel_class == "ragged_paged_attention", facts.reasons
    assert facts.detail == {"q": 0, "kv": 1, "lengths": 2, "tables": 3, "starts": 4, "count": 5,
                            "scale": "rsqrt_d"}
    assert planner.default_params(facts, {}) == {"block_q": 64, "pages_per_block": 4}


def _reference(causal: bool) -> Any:
    """Two sequences of 3 and 1 query rows over one page pool, in the class's layout."""
    import jax
    import jax.numpy as jnp

    def reference(q, kv, lengths, tables, starts, count):
        out = jnp.zeros_like(q)
        for b, rows in enumerate((3, 1)):
            pages = kv[tables[b]].reshape(-1, 2, q.shape[-1])
            scores = jnp.einsum("rd,td->rt", jax.lax.dynamic_slice_in_dim(q[:, 0], starts[b], rows),
                                pages[:, 0]) * q.shape[-1] ** -0.5
            key = jnp.arange(pages.shape[0])
            seen = key[None, :] < lengths[b]
            if causal:
                seen &= key[None, :] <= lengths[b] - rows + jnp.arange(rows)[:, None]
            o = jax.nn.softmax(jnp.where(seen, scores, -1e30), axis=-1) @ pages[:, 1]
            o = jnp.where(b < count[0], o, 0.0)
            out = jax.lax.dynamic_update_slice_in_dim(out, o[:, None], starts[b], 0)
        return out

    return reference


@pytest.mark.parametrize("causal", [True, False], ids=["causal", "not_causal"])
def test_the_model_claims_the_causal_offset_only(causal: bool) -> None:
    """Query rows are a sequence's last ones: row r sees keys up to kv_len - q_len + r. The
    same step without that mask is not this class."""
    import jax
    import jax.numpy as jnp

    k = jax.random.split(jax.random.key(3), 2)
    inputs = (jax.random.normal(k[0], (8, 1, 16)), jax.random.normal(k[1], (4, 8, 2, 16)),
              jnp.array([13, 4], jnp.int32), jnp.array([[2, 0], [3, 1]], jnp.int32),
              jnp.array([0, 3, 4], jnp.int32), jnp.array([2], jnp.int32))
    found = patterns.match_mixed_paged_attention(_reference(causal), inputs)
    if causal:
        assert found == {"q": 0, "kv": 1, "lengths": 2, "tables": 3, "starts": 4, "count": 5,
                         "scale": "rsqrt_d"}
    else:
        assert found is None


@pytest.mark.parametrize(("block_q", "pages_per_block"), [(64, 4), (32, 2), (16, 3), (16, 1)])
def test_the_kernel_equals_the_reference_at_every_block(block_q: int, pages_per_block: int) -> None:
    """The TUNABLES' values, then prefill sequences of 20 and 17 rows in 16-row chunks (a
    tail chunk each) over blocks of 3 pages (a tail block past the 4 a sequence holds), and
    one page per block; in TPU interpret mode, where uninitialised output would be NaN."""
    import jax
    from jax.experimental.pallas import tpu as pltpu

    namespace: dict[str, Any] = {"__name__": "candidate"}
    exec(compile(_source(), str(TASK), "exec"), namespace)
    if (block_q, pages_per_block) == (64, 4):
        assert namespace["TUNABLES"] == {"block_q": [64, 32], "pages_per_block": [4, 2]}
    inputs, want = _case()
    with pltpu.force_tpu_interpret_mode():
        got = jax.block_until_ready(namespace["build"](block_q=block_q,
                                                       pages_per_block=pages_per_block)(*inputs))
    got = np.asarray(got, np.float32)
    assert not np.any(got[40:]), "rows of no active sequence are 0"
    np.testing.assert_allclose(got, want, rtol=0, atol=2 ** -7)  # bf16: half an ulp at 2


def test_a_planted_nan_or_infinity_stays_on_the_rows_and_heads_the_reference_puts_it_on() -> None:
    """The suite's non-finite case (one NaN, +inf and -inf in the queries and in the pages):
    where the reference is finite the kernel is finite and equal, so no value is moved or
    selected by arithmetic that meets a planted one (a 0/1 matmul, a masked zero of
    another head or row)."""
    import jax
    import jax.numpy as jnp
    from jax.experimental.pallas import tpu as pltpu

    from tools.api import load_task
    from tools.correctness.nonfinite import plant

    namespace: dict[str, Any] = {"__name__": "candidate"}
    exec(compile(_source(), str(TASK), "exec"), namespace)
    planted, count = plant(_case()[0])
    inputs = tuple(jnp.asarray(x) for x in planted)
    want = np.asarray(load_task(TASK).reference(*inputs), np.float32)
    with pltpu.force_tpu_interpret_mode():
        got = np.asarray(jax.block_until_ready(namespace["build"](block_q=16)(*inputs)), np.float32)
    finite = np.isfinite(want)
    assert count == 6 and not finite.all(), "the planted values reach the output"
    assert np.isfinite(got[finite]).all()
    np.testing.assert_allclose(got[finite], want[finite], rtol=0, atol=2 ** -7)


def test_a_chunk_that_is_no_multiple_of_the_packed_tile_is_refused() -> None:
    namespace: dict[str, Any] = {"__name__": "candidate"}
    exec(compile(_source(), str(TASK), "exec"), namespace)
    with pytest.raises(ValueError, match="block_q=24 must be a positive multiple of 16"):
        namespace["build"](block_q=24)(*_case()[0])


def test_rendered_sources_are_lint_clean(tmp_path: Path) -> None:
    paths = []
    for block_q, pages_per_block in ((64, 4), (16, 1), (24, 3)):  # 24: aligned down to 16
        out = tmp_path / f"ragged_{block_q}_{pages_per_block}.py"
        out.write_text(_source(block_q=block_q, pages_per_block=pages_per_block))
        paths.append(str(out))
    assert "block_q: int = 16" in Path(paths[-1]).read_text()
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--config",
                           str(ROOT / "pyproject.toml"), *paths], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:]


def test_vmem_counts_the_rows_of_a_chunk_and_the_pages_of_a_block() -> None:
    facts = _facts()  # 4 heads of depth 32; 2 x 2 kv heads x 32 = 128 lanes a page row
    one, text = ragged.vmem_bytes(facts, {"block_q": 16, "pages_per_block": 1})
    two, _ = ragged.vmem_bytes(facts, {"block_q": 16, "pages_per_block": 2})
    assert two - one == 2 * 16 * 128 * 2  # one more page per slot (16 or 32 keys: one lane tile)
    wider, _ = ragged.vmem_bytes(facts, {"block_q": 32, "pages_per_block": 1})
    more_rows = 4 * 16  # 16 more rows of each of 4 heads: acc, m and l, each padded to 128 lanes
    assert wider - one == 4 * more_rows * 3 * 128 + 4 * 16 * 128 + 2 * 2 * 16 * 128 * 2
    assert text.endswith(f"= {one:,} B") and "2 x 1 x 16x128 pages" in text


def test_the_cost_model_prices_the_pages_the_lengths_ask_for(tmp_path: Path) -> None:
    """The loops' trip counts come from the lengths in SMEM: with one chunk per sequence and
    one page per key block, the kernel fetches the 13 pages the five active sequences own
    (lengths 5, 33, 64, 40, 17 in pages of 16), each once, and the three idle slots none."""
    from tools.api import estimate

    candidate = tmp_path / "ragged_candidate.py"
    candidate.write_text(_source())
    got = estimate(TASK, candidate, config={"block_q": 64, "pages_per_block": 1})
    assert got.sound, got.reasons
    (kernel,) = got.breakdown
    assert kernel.steps == 8 and got.latency_s > 0
    page, rows = 16 * 128 * 2, 144 * 128 * 2  # q and out: 64 tokens + a chunk + a tile
    smem = (8 + 32 + 9 + 1) * 4
    assert kernel.bytes == 13 * page + 2 * rows + smem
