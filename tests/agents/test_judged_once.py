"""Nothing judged twice, nothing hopeless tested: a real small search (nats-server, DuckDB,
the evaluator in interpret mode) whose scripted author repeats itself.

Node 1 writes the fast kernel twice; node 2, grown from it, first writes a slower kernel
(priced by its compile check, not faster than its parent: never tested) and then the fast
kernel again. The fast kernel is compiled, tested and tuned once; every other iteration
cites a verdict already in the log, and the final audit checks each citation.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import msgspec
import pytest

from eventstore.events import (
    CompileChecked,
    ConfigMeasured,
    IterationFinished,
    NodeEvaluated,
    PlanProposed,
    ProfileCaptured,
    RunFinished,
    RunRequested,
    TestsRun,
    TuningSwept,
)
from eventstore.log import EventLog
from kernelgraph.client import KernelRequest, SearchLimits, submit, wait
from kernelgraph.runtime import Runtime, RuntimeConfig

TASK = Path(__file__).parents[1] / "evaltasks" / "rmsnorm_small.py"
SCRIPTED = "scripted_provider:ScriptedProvider"
TABLES: dict[str, Any] = {}
"""Every sweep's tuning table read back from the log, by its sha256."""


async def run(db: Path, request: KernelRequest) -> str:
    config = RuntimeConfig(db_path=db, concurrency={"executor": 2})
    async with Runtime(config) as runtime:
        assert runtime.client is not None
        submitted = await submit(runtime.client.nc, request)
        await wait(runtime.client.nc, submitted.run_id, timeout=900)
    return submitted.run_id


def scripted_search(tmp: Path, script: str, tune_budget: int, *, policy: str = "greedy",
                    iterations: int = 2, concurrency: int = 1) -> list:
    """A search of two nodes (greedy: one after the other, two iterations each) by the
    scripted provider; its events."""
    db = tmp / "runs.duckdb"
    params = {"iterations": str(iterations)}
    if policy == "parallel":
        params["trajectories"] = "2"
    request = KernelRequest(task=TASK, provider=SCRIPTED, iterations=iterations, fix_rounds=1,
                            tune_budget=tune_budget, policy=policy, policy_params=params,
                            provider_options={"script": script},
                            limits=SearchLimits(max_nodes=2, concurrency=concurrency))
    with pytest.MonkeyPatch.context() as env:
        env.setenv("KG_WORKSPACE", str(tmp / "work"))
        env.setenv("KG_KNOWLEDGE_PATH", str(tmp / "knowledge"))
        run_id = asyncio.run(run(db, request))
    with EventLog(db, read_only=True) as log:
        assert log.verify().ok
        events = list(log.events(run_id=run_id))
        TABLES.update({e.table_sha256: msgspec.json.decode(log.get_artifact(e.table_sha256))
                       for e in events if isinstance(e, TuningSwept) and e.table_sha256})
        return events


@pytest.fixture(scope="module")
def search(tmp_path_factory: pytest.TempPathFactory) -> list:
    return scripted_search(tmp_path_factory.mktemp("judged"), "fast_then_slow_child", 1)


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_a_kernel_written_again_cites_its_verdict_and_is_tested_once(search: list) -> None:
    events = search
    (finished,) = [e for e in events if isinstance(e, RunFinished)]
    assert finished.status == "completed", finished.reason  # the final audit was clean
    iterations = [e for e in events if isinstance(e, IterationFinished)]
    fast = [i for i in iterations if i.valid]
    assert len(fast) >= 2 and len({i.code_sha256 for i in fast}) == 1
    # across the whole run, the fast kernel was compiled, tested and tuned once
    tests = [e for e in events if isinstance(e, TestsRun)]
    assert [t.code_sha256 for t in tests] == [fast[0].code_sha256]
    assert len([e for e in events if isinstance(e, TuningSwept)
                and e.code_sha256 == fast[0].code_sha256]) == 1
    original = [i for i in fast if i.cites_event_id is None]
    assert len(original) == 1, [(i.node_id, i.iteration, i.cites_event_id) for i in iterations]
    (judged,) = original
    citing = [i for i in fast if i.cites_event_id is not None]
    assert citing and all(i.cites_event_id == judged.event_id for i in citing)
    assert all(i.code_sha256 == judged.code_sha256 and i.speedup == judged.speedup
               and i.verdict_sha256 == judged.verdict_sha256 for i in citing)
    checks = [e for e in events if isinstance(e, CompileChecked)]
    assert len([c for c in checks if c.code_sha256 == judged.code_sha256]) == 1


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_a_planner_is_told_the_plans_the_run_wrote_kernels_from(search: list) -> None:
    """Node 1's second iteration is told of its first (an iteration priced not faster is no
    parent, so nothing else would keep it from writing that kernel again); node 2 starts after
    node 1 wrote two kernels and is told of both (read once the run's history has caught up,
    never from a half-read one)."""
    plans = {(e.node_id, e.iteration): e.summary for e in search if isinstance(e, PlanProposed)}
    first, second = dict.fromkeys(node for node, _ in plans)  # in log order
    assert plans[(first, 1)].endswith("after 0 written plans.")
    assert plans[(first, 2)].endswith("after 1 written plans."), plans
    assert plans[(second, 1)].endswith("after 2 written plans."), plans


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_a_kernel_priced_no_faster_than_its_parent_is_not_tested(search: list) -> None:
    events = search
    (requested,) = [e for e in events if isinstance(e, RunRequested)]
    assert requested.price_margin == 0.0
    priced = [i for i in events if isinstance(i, IterationFinished) and i.failed_phase == "price"]
    assert len(priced) == 1, [(i.node_id, i.iteration, i.failed_phase) for i in events
                              if isinstance(i, IterationFinished)]
    (slow,) = priced
    check = next(e for e in events if e.event_id == slow.cites_event_id)
    assert isinstance(check, CompileChecked) and check.ok and check.code_sha256 == slow.code_sha256
    parent = next(e for e in events if isinstance(e, NodeEvaluated) and e.valid)
    assert slow.estimate_speedup == check.estimate_speedup < parent.speedup
    assert "not faster" in slow.error and "was not tested" in slow.error
    assert not any(isinstance(e, TestsRun) and e.code_sha256 == slow.code_sha256 for e in events)
    # its other configurations were priced before it was given up, and none was tested
    (rescue,) = [e for e in events if isinstance(e, TuningSwept)
                 and e.code_sha256 == slow.code_sha256]
    assert rescue.configs_tried == 0 and rescue.best_latency_s is None
    assert f"none of its {rescue.configs_priced} other configuration(s)" in slow.error
    assert not any(isinstance(e, ConfigMeasured) and e.code_sha256 == slow.code_sha256
                   for e in events)


@pytest.fixture(scope="module")
def retuned(tmp_path_factory: pytest.TempPathFactory) -> list:
    return scripted_search(tmp_path_factory.mktemp("retuned"), "medium_then_retunable_child", 2)


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_a_child_priced_slow_at_its_default_is_tested_at_a_configuration_that_beats_its_parent(
        retuned: list) -> None:
    events = retuned
    (finished,) = [e for e in events if isinstance(e, RunFinished)]
    assert finished.status == "completed", finished.reason
    parent = next(e for e in events if isinstance(e, NodeEvaluated) and e.valid)
    checks = {e.code_sha256: e for e in events if isinstance(e, CompileChecked) and e.ok}
    child = [i for i in events if isinstance(i, IterationFinished) and i.valid
             and i.code_sha256 != parent.code_sha256 and i.cites_event_id is None]
    assert len(child) == 1, [(i.node_id[-5:], i.iteration, i.code_sha256[:8], i.speedup,
                              i.tunables, i.cites_event_id is not None, i.failed_phase,
                              i.error[:80]) for i in events if isinstance(i, IterationFinished)]
    (won,) = child
    priced = checks[won.code_sha256]
    assert priced.estimate_speedup is not None and priced.estimate_speedup <= parent.speedup
    assert won.tunables == {"block_rows": 256} and won.speedup > parent.speedup
    proof = next(e for e in events if e.event_id == won.proof_event_id)
    assert isinstance(proof, TuningSwept) and proof.configs_tried == 1 and proof.best_config == won.tunables
    # the default's price was its compile check's, not lowered again in the sweep
    default = TABLES[proof.table_sha256 or ""]["default"]
    assert default["priced_from"] == "the compile check" and priced.program_sha256
    assert (default["estimate_s"], default["program_sha256"]) == (priced.estimate_s,
                                                                  priced.program_sha256)
    assert proof.configs_priced == 1  # the other block alone
    # tested through the full suite at that configuration only, never at its slow default
    assert not any(isinstance(e, TestsRun) and e.code_sha256 == won.code_sha256 for e in events)
    measured = [e for e in events if isinstance(e, ConfigMeasured) and e.code_sha256 == won.code_sha256]
    assert [m.config for m in measured] == [{"block_rows": 256}] and measured[0].passed


@pytest.fixture(scope="module")
def siblings(tmp_path_factory: pytest.TempPathFactory) -> list:
    """Two trajectories from the root at once, each writing the same kernel."""
    return scripted_search(tmp_path_factory.mktemp("siblings"), "good", 1, policy="parallel",
                           iterations=1, concurrency=2)


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_a_kernel_two_siblings_write_at_once_is_tested_once_and_cited(siblings: list) -> None:
    """The sibling whose compile check came second waits for the first to judge the kernel,
    then cites it: one test, one sweep, one profile."""
    events = siblings
    (finished,) = [e for e in events if isinstance(e, RunFinished)]
    assert finished.status == "completed", finished.reason
    iterations = [e for e in events if isinstance(e, IterationFinished)]
    assert len({i.node_id for i in iterations}) == 2 and all(i.valid for i in iterations)
    assert len({i.code_sha256 for i in iterations}) == 1
    (judged,) = [i for i in iterations if i.cites_event_id is None]
    (citing,) = [i for i in iterations if i.cites_event_id is not None]
    assert citing.cites_event_id == judged.event_id and citing.speedup == judged.speedup
    assert len([e for e in events if isinstance(e, TestsRun)]) == 1
    assert len([e for e in events if isinstance(e, TuningSwept)]) == 1
    assert len([e for e in events if isinstance(e, ProfileCaptured)]) == 1
