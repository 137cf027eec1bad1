"""ReplayProvider against a real event log written the way the agent base records LLM calls."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.llm.base import LlmRequest, ProviderError, get_provider
from agents.llm.replay import ReplayProvider
from eventstore.events import LlmCalled, RunRequested
from eventstore.log import EventLog

Call = tuple[str, str, str]
"""(agent, prompt, response)"""


def record(log: EventLog, run_id: str, calls: list[Call], *, model: str = "gemini-rec") -> None:
    """Store each call as the agent base does: prompt and response artifacts, then LlmCalled."""
    events = [RunRequested.create(run_id=run_id, producer="test", task_name="rmsnorm",
                                  task_sha256="0" * 64, policy="greedy", target="sim-tpu-v6e",
                                  provider="gemini")]
    for i, (agent, prompt, response) in enumerate(calls):
        prompt_sha, response_sha = log.put_artifacts(
            [(prompt.encode(), "prompt"), (response.encode(), "response")])
        events.append(LlmCalled.create(
            run_id=run_id, producer=agent, agent=agent, provider="gemini", model=model,
            prompt_sha256=prompt_sha, response_sha256=response_sha, tokens_in=100 + i,
            tokens_out=10 + i, latency_ms=5.0 * (i + 1), iteration=i))
    log.append(events)


CALLS: list[Call] = [
    ("planner", "plan rmsnorm", "## Analysis\nrow-wise"),
    ("implementer", "write the kernel", "```python\ndef build(): ...\n```"),
    ("fixer", "fix: shape error", "first fix"),
    ("implementer", "write the kernel", "second kernel"),
    ("fixer", "fix: shape error", "second fix"),
]


@pytest.fixture
def log_path(tmp_path: Path) -> Path:
    path = tmp_path / "old.duckdb"
    with EventLog(path) as log:
        record(log, "run-one", CALLS)
    return path


def ask(agent: str, prompt: str) -> LlmRequest:
    return LlmRequest(agent=agent, purpose="implement", prompt=prompt)


async def test_answers_in_recorded_order(log_path: Path) -> None:
    replay = get_provider("replay", replay_from=str(log_path))
    assert isinstance(replay, ReplayProvider)
    assert replay.run_id == "run-one"
    assert replay.calls == len(CALLS)
    for i, (agent, prompt, text) in enumerate(CALLS):
        response = await replay.complete(ask(agent, prompt))
        assert response.text == text
        assert response.model == "gemini-rec"
        assert (response.tokens_in, response.tokens_out) == (100 + i, 10 + i)
        assert response.latency_ms == pytest.approx(5.0 * (i + 1))
    # the log was closed after loading: a writer can open it again
    with EventLog(log_path) as log:
        assert log.count() == len(CALLS) + 1


async def test_duplicate_prompts_follow_the_recorded_order(log_path: Path) -> None:
    replay = ReplayProvider(replay_from=log_path)
    # the two agents interleave differently than recorded; each keeps its own order
    assert (await replay.complete(ask("fixer", "fix: shape error"))).text == "first fix"
    assert (await replay.complete(ask("implementer", "write the kernel"))).text.startswith("```")
    assert (await replay.complete(ask("fixer", "fix: shape error"))).text == "second fix"
    assert (await replay.complete(ask("implementer", "write the kernel"))).text == "second kernel"
    with pytest.raises(ProviderError, match=r"recorded 2 time\(s\), asked again"):
        await replay.complete(ask("fixer", "fix: shape error"))


async def test_diverged_prompt(log_path: Path) -> None:
    replay = ReplayProvider(replay_from=log_path)
    prompt = "plan rmsnorm, but with a different template " + "x" * 200
    with pytest.raises(ProviderError, match="diverged") as info:
        await replay.complete(ask("planner", prompt))
    message = str(info.value)
    assert "'planner'" in message and prompt[:40] in message and "x" * 60 not in message
    # the same prompt from another agent is not an answer either
    with pytest.raises(ProviderError, match="never recorded"):
        await replay.complete(ask("implementer", "plan rmsnorm"))


def test_several_runs_need_a_choice(log_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KG_REPLAY_RUN", raising=False)
    with EventLog(log_path) as log:
        record(log, "run-two", [("planner", "plan rmsnorm", "another plan")], model="other")
    with pytest.raises(ProviderError, match="2 runs") as info:
        ReplayProvider(replay_from=log_path)
    assert "run-one" in str(info.value) and "run-two" in str(info.value)

    replay = ReplayProvider(replay_from=log_path, replay_run="run-two")
    assert replay.calls == 1
    monkeypatch.setenv("KG_REPLAY_FROM", str(log_path))
    monkeypatch.setenv("KG_REPLAY_RUN", "run-o")  # a unique prefix
    assert ReplayProvider().run_id == "run-one"
    with pytest.raises(ProviderError, match="matches several runs"):
        ReplayProvider(replay_run="run-")
    with pytest.raises(ProviderError, match="is not in the log"):
        ReplayProvider(replay_run="nope")


def test_unusable_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KG_REPLAY_FROM", raising=False)
    with pytest.raises(ProviderError, match="KG_REPLAY_FROM"):
        ReplayProvider()
    with pytest.raises(ProviderError, match="no such log"):
        ReplayProvider(replay_from=tmp_path / "missing.duckdb")
    empty = tmp_path / "empty.duckdb"
    EventLog(empty).close()
    with pytest.raises(ProviderError, match="no runs"):
        ReplayProvider(replay_from=empty)
