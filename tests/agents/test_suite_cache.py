"""The process's suite cache keeps what is dear to rebuild: a suite that took minutes to
freeze survives many cheap ones, the byte budget holds, and a miss builds once."""

from __future__ import annotations

import asyncio

import numpy as np

from agents.suitecache import SuiteCache, suite_nbytes
from tools.correctness.suitedata import FrozenSuite, SuiteCase
from tools.sandbox.wire import WireArray

MB = 1 << 20


def _suite(name: str, nbytes: int) -> FrozenSuite:
    data = WireArray.of(np.zeros(nbytes // 4, np.float32))
    case = SuiteCase(case_id="c0", shape_index=0, seed=0, kind="seed", inputs=(data,),
                     inputs_sha256="", oracle=(), out_dtypes=("float32",), out_shapes=((1,),),
                     floor_max_abs=(0.0,), floor_mean_abs=(0.0,))
    return FrozenSuite(task_name=name, task_sha256=name, tolerance={}, cases=(case,))


def test_a_suite_counts_the_bytes_of_its_arrays() -> None:
    assert suite_nbytes(_suite("a", 4 * MB)) == 4 * MB


def test_a_dear_suite_outlives_many_cheap_ones_used_after_it() -> None:
    async def scenario() -> SuiteCache:
        cache = SuiteCache(budget_bytes=10 * MB)
        await cache.keep("dear", _suite("dear", 2 * MB), rebuild_s=120.0)
        for i in range(40):  # the other job's runs: freeze, then three phases each
            await cache.keep(f"cheap{i}", _suite(f"cheap{i}", 2 * MB), rebuild_s=2.0)
            for _ in range(3):
                await cache.get(f"cheap{i}", lambda: _suite("never", 1))
        kept = await cache.get("dear", lambda: _suite("rebuilt", 1))
        assert kept.task_name == "dear"
        return cache

    cache = asyncio.run(scenario())
    assert cache.builds == 0
    assert cache.held_bytes <= 10 * MB and "dear" in cache.held()
    assert len(cache.held()) == 5


def test_an_unused_dear_suite_still_goes_once_enough_others_have_come() -> None:
    async def scenario() -> SuiteCache:
        cache = SuiteCache(budget_bytes=4 * MB)
        await cache.keep("dear", _suite("dear", 2 * MB), rebuild_s=10.0)
        for i in range(40):
            await cache.keep(f"cheap{i}", _suite(f"cheap{i}", 2 * MB), rebuild_s=2.0)
        return cache

    cache = asyncio.run(scenario())
    assert "dear" not in cache.held() and cache.held() == ["cheap38", "cheap39"]


def test_a_miss_builds_once_for_concurrent_callers_and_the_newest_stays_over_budget() -> None:
    calls: list[str] = []

    def build() -> FrozenSuite:
        calls.append("built")
        return _suite("big", 8 * MB)

    async def scenario() -> tuple[SuiteCache, list[FrozenSuite]]:
        cache = SuiteCache(budget_bytes=4 * MB)
        await cache.keep("small", _suite("small", 1 * MB), rebuild_s=1.0)
        got = await asyncio.gather(*(cache.get("big", build) for _ in range(3)))
        return cache, list(got)

    cache, got = asyncio.run(scenario())
    assert calls == ["built"] and cache.builds == 1
    assert all(s is got[0] for s in got)
    assert cache.held() == ["big"]  # over the budget alone, and kept: it is in use
