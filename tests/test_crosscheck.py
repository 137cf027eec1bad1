"""The cost model's grid points, block transfers and DMAs against an interpret-mode run."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.perf_kernels import dma, good, lower, sparse
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
