"""One local knowledge folder shared by processes at once (two runs on one machine, a
`knowledge search` beside them), and a store that cannot be used reported, never dropped.

Real processes, real qdrant-client local mode: each worker below searches and records
lessons in a loop while the other does the same on the same folder."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from nats.aio.client import Client as NATS

from agents import knowledge
from agents.base import AgentContext
from agents.commands import ProposePlan
from agents.context import retrieve
from agents.planner import PlannerAgent
from eventstore.codec import decode_event, encode_event
from eventstore.events import KnowledgeUnavailable
from tools.knowledge import KnowledgeStore, close_shared_stores
from tools.knowledge.folder import ENV_WAIT

ROOT = Path(__file__).parents[2]
QUERY = "dimension_semantics parallel arbitrary"

WORKER = """
import json, sys, time
from tools.knowledge import shared_store
name, rounds, start_at = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
while time.time() < start_at:
    time.sleep(0.005)
from pathlib import Path
marks = Path(sys.argv[5])
store = shared_store()
rounds_seen, begun = [], time.time()
(marks / ("begun-" + name)).touch()
other = marks / ("begun-" + ("b" if name == "a" else "a"))
for i in range(rounds):
    if i == rounds - 1:  # the last round waits for the other run: the two overlap by design
        deadline = time.time() + 120
        while not other.exists() and time.time() < deadline:
            time.sleep(0.01)
    found = store.search(sys.argv[4], limit=3)
    store.add_lesson("run-" + name, "matmul", "block_shape", "1.1x", name + "-" + str(i),
                     "lesson %d of %s: quokka%s" % (i, name, name))
    mine = store.search("quokka" + name, kinds=["lesson"], limit=100)
    rounds_seen.append([len(found), found[0].kind if found else None, len(mine)])
print(json.dumps({"rounds": rounds_seen, "span": [begun, time.time()]}))
"""

HOLDER = """
import sys, time
from qdrant_client import QdrantClient
client = QdrantClient(path=sys.argv[1])
print("held", flush=True)
time.sleep(float(sys.argv[2]))
client.close()
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("knowledge") / "store"
    with KnowledgeStore.open(path=folder) as store:
        store.ensure_indexed()
    return folder


@pytest.fixture
def folder(built: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    copy = tmp_path / "store"
    shutil.copytree(built, copy)
    monkeypatch.setenv("KG_KNOWLEDGE_PATH", str(copy))
    monkeypatch.delenv("KG_QDRANT_URL", raising=False)
    close_shared_stores()
    yield copy
    close_shared_stores()


def _env(folder: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, "KG_KNOWLEDGE_PATH": str(folder), "PYTHONPATH": str(ROOT), **extra}


@pytest.mark.timeout(300)
def test_two_processes_search_and_keep_lessons_in_one_folder_at_once(
    folder: Path, tmp_path: Path
) -> None:
    rounds = 12
    start_at = time.time() + 4.0  # both import first, then start together
    marks = tmp_path / "marks"
    marks.mkdir()
    workers = [subprocess.Popen([sys.executable, "-c", WORKER, name, str(rounds), str(start_at),
                                 QUERY, str(marks)], env=_env(folder), cwd=ROOT, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True) for name in ("a", "b")]
    while time.time() < start_at + 0.5:
        time.sleep(0.05)
    # `knowledge search` while both runs use the folder: no "open in another client"
    cli = subprocess.run([sys.executable, "-m", "kernelgraph", "knowledge", "search", QUERY,
                          "--json"], env=_env(folder), cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    results = []
    for worker in workers:
        out, err = worker.communicate(timeout=240)
        assert worker.returncode == 0, err[-3000:]
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert cli.returncode == 0, cli.stderr[-2000:]
    assert json.loads(cli.stdout)["hits"]

    (a, b) = results
    assert a["span"][0] < b["span"][1] and b["span"][0] < a["span"][1]  # they overlapped
    for result in results:
        # every search found real documents; each run sees every lesson it wrote so far
        assert [r[0] > 0 for r in result["rounds"]] == [True] * rounds
        assert [r[2] for r in result["rounds"]] == list(range(1, rounds + 1))
    with KnowledgeStore.open(path=folder) as store:
        assert store.counts()["lesson"] == 2 * rounds  # nobody's lessons were lost
        assert {h.id for h in store.search("quokkaa quokkab", kinds=["lesson"], limit=100)} == {
            f"lesson:{n}-{i}" for n in "ab" for i in range(rounds)}


@pytest.fixture
def held(folder: Path) -> Iterator[subprocess.Popen[str]]:
    """A client outside kernelgraph (plain qdrant-client) that keeps the folder open."""
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(folder), "900"], env=_env(folder),
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    yield holder
    holder.kill()
    holder.wait()


def _planner_context() -> AgentContext[ProposePlan]:
    cmd = ProposePlan.create(run_id="run-k", node_id="n1", task_sha256="0" * 64,
                             task_file="task.py", target_name="sim-tpu-v6e", provider="offline")
    return AgentContext(PlannerAgent(NATS()), cmd)


def test_a_store_that_cannot_be_used_is_an_event_not_silence(
    folder: Path, held: subprocess.Popen[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV_WAIT, "0.3")
    ctx = _planner_context()
    assert retrieve(ctx, QUERY) == []  # the prompt goes without, and says so in the log:
    (event,) = ctx.take_pending()
    assert isinstance(event, KnowledgeUnavailable) and event.operation == "retrieve"
    assert "held open by a client outside kernelgraph" in event.reason
    assert event.store == str(folder) and event.run_id == "run-k" and event.node_id == "n1"
    assert decode_event(encode_event(event)) == event  # a stable tag in the union

    lesson = {"run_id": "run-k", "kernel_class": "matmul", "lever": "block_shape",
              "effect": "1.2x", "event_id": "E1", "text": "a lesson"}
    written, problem = knowledge.record_lessons([lesson])
    assert written == 0 and problem is not None and "outside kernelgraph" in problem

    held.kill()
    held.wait()
    ctx = _planner_context()
    assert retrieve(ctx, QUERY) and ctx.take_pending() == []
    assert knowledge.record_lessons([lesson]) == (1, None)


def test_an_operation_waits_for_another_process_operation(folder: Path,
                                                          held: subprocess.Popen[str],
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A holder that lets go within the wait is waited for, not reported."""
    monkeypatch.setenv(ENV_WAIT, "30")
    started = time.monotonic()
    killer = subprocess.Popen([sys.executable, "-c",
                               f"import os, time; time.sleep(1.0); os.kill({held.pid}, 9)"])
    snippets, problem = knowledge.retrieve(QUERY)
    killer.wait()
    assert problem is None and snippets
    assert time.monotonic() - started >= 0.9


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_run_without_its_store_completes_and_its_log_says_what_was_lost(
    folder: Path, held: subprocess.Popen[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A whole Auto run (real bus, log, evaluator) while a client outside kernelgraph holds
    the folder: every prompt's missing retrieval and the lessons not kept are in the log,
    and the audit stays clean."""
    import asyncio

    from eventstore.events import RunAudited, RunFinished
    from eventstore.log import EventLog
    from kernelgraph.client import KernelRequest, submit, wait
    from kernelgraph.runtime import Runtime, RuntimeConfig

    monkeypatch.setenv(ENV_WAIT, "0.2")
    monkeypatch.setenv("KG_WORKSPACE", str(tmp_path / "work"))
    db = tmp_path / "runs.duckdb"
    request = KernelRequest(task=ROOT / "tests" / "evaltasks" / "rmsnorm_small.py",
                            provider="scripted_provider:ScriptedProvider", iterations=1,
                            tune_budget=1, provider_options={"script": "good", "tag": "k"})

    async def run() -> str:
        async with Runtime(RuntimeConfig(db_path=db)) as runtime:
            assert runtime.client is not None
            started = await submit(runtime.client.nc, request)
            await wait(runtime.client.nc, started.run_id, timeout=600)
        return started.run_id

    run_id = asyncio.run(run())
    with EventLog(db, read_only=True) as log:
        events = list(log.events(run_id=run_id))
    lost = [e for e in events if isinstance(e, KnowledgeUnavailable)]
    assert {e.operation for e in lost} == {"retrieve", "lessons"}, [e.type_name for e in events]
    assert all("outside kernelgraph" in e.reason and e.store == str(folder) for e in lost)
    assert [e.lost for e in lost if e.operation == "lessons"] == [1]
    (finished,) = [e for e in events if isinstance(e, RunFinished)]
    assert finished.status == "completed", finished.reason
    assert all(a.clean for a in events if isinstance(a, RunAudited)), [
        a.findings for a in events if isinstance(a, RunAudited)]


def test_the_progress_line_names_what_was_lost_and_why() -> None:
    from kernelgraph.cli.progress import Progress

    def event(**payload: object) -> KnowledgeUnavailable:
        return KnowledgeUnavailable(event_id="e", run_id="r", ts=0.0, producer="test@1",
                                    reason="KnowledgeError: held", store="/s", **payload)

    line = Progress().describe(event(operation="lessons", lost=2))
    assert line is not None and "2 lesson(s) not kept: KnowledgeError: held" in line
    line = Progress().describe(event(operation="retrieve"))
    assert line is not None and "a prompt went without retrieved knowledge" in line
