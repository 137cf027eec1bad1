"""The cost model's grid points, block transfers, DMAs and branch runs against an
interpret-mode run."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.perf_kernels import branchy, causal, dma, good, lower, sparse
from tools.child import interpret
from tools.lowered.mosaic import parse_lowered
from tools.performance.chips import get_chip
from tools.performance.crosscheck import cross_check

pytestmark = pytest.mark.slow
_LOG = interpret.RaceLog()


@pytest.fixture(scope="module", autouse=True)
def _installed():
    _LOG.install()


def _visits(fn, *args, cores: int = 1, seed: int = 5):
    traced = jax.jit(fn).trace(*args)
    run = interpret.interpreted(traced.jaxpr, interpret.InterpretSettings(
        num_cores=cores, random_seed=seed, detect_races=False))
    mark = _LOG.mark()
    jax.block_until_ready(run(*args))
    return list(_LOG.visits_since(mark))


def _check(fn, *args, **kw):
    visits = _visits(fn, *args, **kw)
    program = parse_lowered(lower(fn, *args))
    return visits, cross_check(program, visits, [np.asarray(a) for a in args], get_chip("v6e"))


def test_matmul_grid_and_transfers_match() -> None:
    a, b = jnp.ones((256, 512), jnp.bfloat16), jnp.ones((512, 384), jnp.bfloat16)
    visits, problems = _check(good.matmul, a, b)
    assert problems == []
    assert visits[0]["grid_points"] == 24 and visits[0]["input_fetches"] == [24, 24]


def test_scalar_prefetch_kernels_match_on_the_case_values() -> None:
    idx = jnp.array([0, 0, 2, 2], jnp.int32)
    visits, problems = _check(good.gather_rows, idx, jnp.ones((32, 128), jnp.float32))
    assert problems == [] and visits[0]["input_fetches"] == [2]
    mask = np.array([1, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1], np.int32)
    prev = np.array([0, 0, 0, 0, 0, 1, 1, 1, 0, 0, 0, 3, 0, 1, 2, 3], np.int32)
    x = jnp.ones((512, 512), jnp.bfloat16)
    _, problems = _check(sparse.masked_matmul, jnp.asarray(mask), jnp.asarray(prev), x, x)
    assert problems == []


def test_branch_runs_match_in_the_order_mosaic_lowers_them() -> None:
    """[cond, level, then runs, else runs] per `scf.if`: pl.when(i even) 3/3, the nested
    pl.when(i == 0) 1/2, switch(min(i, 2)) as two ifs 5/1 and 4/1, and the pl.when of a loop
    unrolled twice over three steps, three copies of one conditional sharing its counts
    (the model evaluates only the remainder copy, whose step is a constant)."""
    visits, problems = _check(branchy.branchy, jnp.ones((48, 128), jnp.float32))
    assert problems == []
    assert visits[0]["branches_complete"]
    assert [b[2:] for b in visits[0]["branches"]] == [
        [3, 3], [1, 2], [5, 1], [4, 1], [6, 12], [6, 12], [6, 12]]


def test_causal_attention_runs_the_blocks_the_model_priced() -> None:
    q = jax.random.normal(jax.random.key(0), (512, 128), jnp.float32).astype(jnp.bfloat16)
    visits, problems = _check(causal.causal_attention, q, q, q)
    assert problems == []
    # 4 x 4 blocks: init at kj == 0, the step on the 10 blocks at or below the diagonal.
    assert [b[2:] for b in visits[0]["branches"]] == [[4, 12], [10, 6], [4, 12]]
    assert sorted(visits[0]["input_fetches"]) == [4, 9, 9]  # clamped: 9 of 16 k/v blocks


def test_a_model_that_miscounts_branches_is_reported() -> None:
    mask = np.array([1, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1], np.int32)
    prev = np.array([0, 0, 0, 0, 0, 1, 1, 1, 0, 0, 0, 3, 0, 1, 2, 3], np.int32)
    x = jnp.ones((512, 512), jnp.bfloat16)
    args = (jnp.asarray(mask), jnp.asarray(prev), x, x)
    inputs = [np.asarray(a) for a in args]
    program = parse_lowered(lower(sparse.masked_matmul, *args))
    (seen,) = _visits(sparse.masked_matmul, *args)
    assert [b[2:] for b in seen["branches"]] == [[16, 48], [32, 32], [16, 48]]
    chip = get_chip("v6e")
    more = [[c, j, t + 4 * (c == 1), e] for c, j, t, e in seen["branches"]]  # ran more
    assert any("conditional 1" in p for p in cross_check(program, [{**seen, "branches": more}],
                                                         inputs, chip))
    moved = [[c, j, t - (c == 1), e + (c == 1)] for c, j, t, e in seen["branches"]]
    problems = cross_check(program, [{**seen, "branches": moved}], inputs, chip)
    assert any("ran 32/32 times, interpret mode ran them 31/33" in p for p in problems)
    # Blind to the mask the model counts both sides of it everywhere: an over-count only.
    assert cross_check(program, [{**seen, "branches": moved}], None, chip) == []
    # A layout the child could not mirror is not compared.
    assert cross_check(program, [{**seen, "branches": more, "branches_complete": False}],
                       inputs, chip) == []


def test_manual_dmas_match_or_are_overcounted_only_where_unknown() -> None:
    x = jnp.ones((2048, 256), jnp.float32)
    for pipelined in (False, True):
        visits, problems = _check(lambda v, p=pipelined: dma.scale_tanh(v, pipelined=p), x)
        assert problems == [], pipelined
        assert visits[0]["dma_starts"] == 4


def test_a_model_that_undercounts_is_reported() -> None:
    a, b = jnp.ones((256, 512), jnp.bfloat16), jnp.ones((512, 384), jnp.bfloat16)
    program = parse_lowered(lower(good.matmul, a, b))
    visits = _visits(good.matmul, a, b)
    more = [{**visits[0], "input_fetches": [24, 48]}]
    assert any("block transfers" in p for p in cross_check(program, more, None, get_chip("v6e")))
    steps = [{**visits[0], "grid_points": 48}]
    assert any("grid steps" in p for p in cross_check(program, steps, None, get_chip("v6e")))
    dmas = [{**visits[0], "dma_starts": 3}]
    assert any("DMA" in p for p in cross_check(program, dmas, None, get_chip("v6e")))
    assert cross_check(program, [], None, get_chip("v6e"))


def test_tuning_cases_on_one_core_are_checked_with_their_own_inputs() -> None:
    from types import SimpleNamespace

    from tools.performance.crosscheck import check_tuning_cases
    from tools.sandbox import wire

    idx = jnp.array([0, 0, 2, 2], jnp.int32)
    x = jnp.ones((32, 128), jnp.float32)
    visits = _visits(good.gather_rows, idx, x)
    program = parse_lowered(lower(good.gather_rows, idx, x))
    inputs = (wire.WireArray.of(np.asarray(idx)), wire.WireArray.of(np.asarray(x)))
    case = SimpleNamespace(case_id="shape0-seed0", shape_index=0, inputs=inputs)
    ok = SimpleNamespace(groups=[SimpleNamespace(cases=[
        SimpleNamespace(case_id="shape0-seed0", visits=tuple(visits))])])
    assert check_tuning_cases(program, [case], ok, get_chip("v6e")) == []
    forged = [{**visits[0], "input_fetches": [4]}]  # as if every step fetched
    bad = SimpleNamespace(groups=[SimpleNamespace(cases=[
        SimpleNamespace(case_id="shape0-seed0", visits=tuple(forged))])])
    (problem,) = check_tuning_cases(program, [case], bad, get_chip("v6e"))
    assert problem.startswith("shape0-seed0: kernel") and "block transfers" in problem
    split = [{**visits[0], "cores": 2, "input_fetches": [4]}]
    two = SimpleNamespace(groups=[SimpleNamespace(cases=[
        SimpleNamespace(case_id="shape0-seed0", visits=tuple(split))])])
    assert check_tuning_cases(program, [case], two, get_chip("v6e")) == []
