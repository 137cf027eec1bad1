"""The Auto trajectory end to end on the embedded runtime: real nats-server, DuckDB, evaluator."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from eventstore.events import (
    FixAttempted,
    IterationFinished,
    LlmCalled,
    NodeEvaluated,
    PlanProposed,
    RunFinished,
    TestsRun,
    TuningSwept,
    WinnerVerified,
)
from eventstore.log import EventLog
from kernelgraph.client import KernelRequest, submit, wait
from kernelgraph.runtime import Runtime, RuntimeConfig
from projections.searchgraph import SearchGraph

TASK = Path(__file__).parents[1] / "evaltasks" / "rmsnorm_no_inputs.py"
SCRIPTED = "scripted_provider:ScriptedProvider"


async def run_search(db: Path, request: KernelRequest) -> str:
    config = RuntimeConfig(db_path=db, concurrency={"executor": 2})
    async with Runtime(config) as runtime:
        assert runtime.client is not None
        run = await submit(runtime.client.nc, request)
        await wait(runtime.client.nc, run.run_id, timeout=600)
    return run.run_id


def events_of(db: Path, run_id: str) -> list:
    with EventLog(db, read_only=True) as log:
        return list(log.events(run_id=run_id))


@pytest.fixture(scope="module")
def trajectory(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, list]:
    """One four-iteration run, asserted on by every test here: a compile failure past two
    fixes, a malformed answer then a wrong one, a fast kernel, then a slower one. The task
    declares no input maker, so the run starts by having one written."""
    tmp = tmp_path_factory.mktemp("auto")
    db = tmp / "runs.duckdb"
    request = KernelRequest(task=TASK, provider=SCRIPTED, iterations=4, fix_rounds=2, tune_budget=1,
                            provider_options={"script": "broken_wrong_fast_slow", "tag": "a"})
    with pytest.MonkeyPatch.context() as env:
        env.setenv("KG_WORKSPACE", str(tmp / "work"))
        env.setenv("KG_KNOWLEDGE_PATH", str(tmp / "knowledge"))
        run_id = asyncio.run(run_search(db, request))
    return db, run_id, events_of(db, run_id)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_compile_failure_wrong_answer_and_malformed_answer_then_best_of_n_rolls_back(
    trajectory: tuple[Path, str, list],
) -> None:
    db, run_id, events = trajectory
    iterations = [e for e in events if isinstance(e, IterationFinished)]
    assert [(i.iteration, i.valid, i.failed_phase) for i in iterations] == [
        (1, False, "compile"), (2, False, "test"), (3, True, None), (4, True, None)]
    assert iterations[0].compiled is False and iterations[1].compiled is True
    assert len([e for e in events if isinstance(e, FixAttempted) and e.iteration == 1]) == 2
    # the failures travel to the next plans: iteration 2's and 3's prompts name them
    plans = [e for e in events if isinstance(e, LlmCalled) and e.agent == "planner"]
    assert len(plans) == 4
    with EventLog(db, read_only=True) as log:
        prompt2 = log.get_artifact(plans[1].prompt_sha256).decode()
        prompt3 = log.get_artifact(plans[2].prompt_sha256).decode()
    assert "iteration 1, compile" in prompt2
    assert "iteration 1, compile" in prompt3 and "iteration 2, test" in prompt3
    # best-of-N: iteration 3 is faster than the later iteration 4
    assert iterations[2].latency_s < iterations[3].latency_s
    (node,) = [e for e in events if isinstance(e, NodeEvaluated)]
    assert node.valid and node.best_iteration == 3 and node.code_sha256 == iterations[2].code_sha256
    (verified,) = [e for e in events if isinstance(e, WinnerVerified)]
    assert verified.verdict == "pass"
    (finished,) = [e for e in events if isinstance(e, RunFinished)]
    assert finished.status == "completed" and finished.best_node_id == node.node_id
    assert finished.measured_on == "simulated"
    tuned = [e for e in events if isinstance(e, TuningSwept)]
    # on a simulated target every compiled kernel's other configuration is priced before any
    # test (the wrong kernel of iteration 2 too), within the budget of one besides the default
    # (which its compile check priced)
    assert [t.iteration for t in tuned] == [2, 3, 4] and all(t.configs_tried <= 1 for t in tuned)
    order = [type(e).__name__ for e in events
             if isinstance(e, TuningSwept | TestsRun) and e.iteration == 2]
    assert order == ["TuningSwept", "TestsRun"]
    graph = SearchGraph(run_id)
    for event in events:
        graph.apply(event)
    assert graph.best is not None and graph.best.node_id == node.node_id
    with EventLog(db, read_only=True) as log:
        assert log.verify().ok
    assert len({e.event_id for e in events}) == len(events)
    assert len([e for e in events if isinstance(e, PlanProposed)]) == 4
    # iteration 2's first answer had no code: recorded, asked again once with the reason
    asks = [e for e in events if isinstance(e, LlmCalled) and e.agent == "implementer"
            and e.iteration == 2]
    assert len(asks) == 2
    with EventLog(db, read_only=True) as log:
        reask = log.get_artifact(asks[1].prompt_sha256).decode()
    assert "could not be used" in reask and "no ```python code block" in reask


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_task_without_an_input_maker_gets_one_written_and_validated(
    trajectory: tuple[Path, str, list],
) -> None:
    db, _, events = trajectory
    (frozen,) = [e for e in events if e.type_name == "TestSuiteFrozen"]
    assert frozen.task_sha256 is not None and frozen.n_cases >= 3
    with EventLog(db, read_only=True) as log:
        written = log.get_artifact(frozen.task_sha256).decode()
    assert written.startswith(TASK.read_text().rstrip()) and "def make_inputs" in written
    assert next(e.agent for e in events if isinstance(e, LlmCalled)) == "test_synth"
    (finished,) = [e for e in events if isinstance(e, RunFinished)]
    assert finished.best_node_id is not None
