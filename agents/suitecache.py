"""The frozen suites one process holds, kept by what rebuilding them would cost.

Every phase after the freeze (compile check, tests, tuning, the winner's verification)
needs the run's suite, and a miss rebuilds it from its recipe: the reference and its
float64 oracle run again. That takes seconds for most tasks and minutes for a few. A bench
runs several runs at once, so short runs freeze suites while a long one sits between its
phases. Keeping only the last two suites meant a long run rebuilt its own suite in every
phase.

Suites are kept within a byte budget that counts their arrays. Arrays over a MiB are
memory-mapped from unlinked files (:mod:`tools.correctness.store`), so most of the budget
is disk, not memory. Eviction is GreedyDual-Size (Cao and Irani, 1997):
1. each suite's credit is the floor plus its rebuild seconds per byte, reset whenever it is
   used;
2. the suite with the lowest credit goes first, and the floor rises to that credit.

A cheap suite unused for a while goes before an expensive one, and an expensive one still
goes once enough others have been used since.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from tools import api

BUDGET_BYTES = 2 << 30


def suite_nbytes(suite: api.FrozenSuite) -> int:
    """The bytes of every array a suite holds (inputs, oracles and the per-case extras)."""
    return sum(len(array.data)
               for case in suite.cases
               for arrays in (case.inputs, case.oracle, case.slack, case.conditioning,
                              case.unplanted)
               for array in arrays)


@dataclass
class _Kept:
    suite: api.FrozenSuite
    nbytes: int
    rebuild_s: float
    credit: float = 0.0


class SuiteCache:
    """Suites by recipe sha256: one build per recipe at a time, evicted within `budget_bytes`.

    The newest suite is always kept, even when it alone is over the budget.
    """

    def __init__(self, budget_bytes: int = BUDGET_BYTES,
                 size_of: Callable[[api.FrozenSuite], int] = suite_nbytes) -> None:
        self.budget_bytes = budget_bytes
        self.size_of = size_of
        self.floor = 0.0
        self.builds = 0
        self._kept: dict[str, _Kept] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def get(self, recipe_sha: str, build: Callable[[], api.FrozenSuite]) -> api.FrozenSuite:
        async with self._locks.setdefault(recipe_sha, asyncio.Lock()):
            kept = self._kept.get(recipe_sha)
            if kept is not None:
                self._credit(kept)
                return kept.suite
            started = time.perf_counter()
            suite = await asyncio.to_thread(build)
            self.builds += 1
            self._put(recipe_sha, suite, time.perf_counter() - started)
            return suite

    async def keep(self, recipe_sha: str, suite: api.FrozenSuite, rebuild_s: float) -> None:
        """A suite this process froze itself (`rebuild_s`: what freezing it took), so that an
        executor or verifier beside it need not rebuild it."""
        async with self._locks.setdefault(recipe_sha, asyncio.Lock()):
            self._put(recipe_sha, suite, rebuild_s)

    def held(self) -> list[str]:
        return list(self._kept)

    @property
    def held_bytes(self) -> int:
        return sum(kept.nbytes for kept in self._kept.values())

    def _credit(self, kept: _Kept) -> None:
        kept.credit = self.floor + kept.rebuild_s / max(kept.nbytes, 1)

    def _put(self, recipe_sha: str, suite: api.FrozenSuite, rebuild_s: float) -> None:
        kept = _Kept(suite, self.size_of(suite), max(rebuild_s, 0.0))
        self._credit(kept)
        self._kept[recipe_sha] = kept
        while self.held_bytes > self.budget_bytes and len(self._kept) > 1:
            others = {sha: k for sha, k in self._kept.items() if sha != recipe_sha}
            cheapest = min(others, key=lambda sha: others[sha].credit)
            self.floor = max(self.floor, others[cheapest].credit)
            del self._kept[cheapest]
