"""`ReplayProvider`: answers every call with the response recorded in an earlier run's log.

A past run re-executes exactly, without a model: each `LlmCalled` event of the recorded run
holds the sha256 of the prompt and of the response, both stored in the log as artifacts.
A request is answered by the recorded call of the same agent whose prompt has the same
sha256; when one agent asked the same prompt several times, the n-th ask gets the n-th
recorded answer. A prompt the recorded run never asked means the new run took another path
(a changed prompt template, task or tool): that is a `ProviderError` naming the agent and
the prompt's start, never a guess.

The old log is opened read-only once, at construction, and closed before the first call, so
replay needs a log no process is writing (a finished run's log).

Settings: `replay_from` (`KG_REPLAY_FROM`), the log; `replay_run` (`KG_REPLAY_RUN`), the run
id or a unique prefix of it, needed only when the log holds several runs.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import defaultdict, deque
from pathlib import Path
from typing import Any, ClassVar

from agents.llm.base import LlmRequest, LlmResponse, Provider, ProviderError
from eventstore.events import LlmCalled
from eventstore.log import EventLog, LogError

ENV_REPLAY_FROM = "KG_REPLAY_FROM"
ENV_REPLAY_RUN = "KG_REPLAY_RUN"

_PROMPT_PREVIEW = 80


class ReplayProvider(Provider):
    """Recorded answers from one run of an earlier log; see the module docstring."""

    name: ClassVar[str] = "replay"

    def __init__(
        self,
        *,
        replay_from: str | os.PathLike[str] | None = None,
        replay_run: str | None = None,
        **_: Any,
    ) -> None:
        source = replay_from or os.environ.get(ENV_REPLAY_FROM, "").strip()
        if not source:
            raise ProviderError(f"replay needs a log: pass replay_from or set {ENV_REPLAY_FROM}")
        self.log_path = Path(source)
        wanted = replay_run or os.environ.get(ENV_REPLAY_RUN, "").strip() or None
        self.run_id, calls = self._load(wanted)
        self.calls = len(calls)
        self._lock = threading.Lock()
        self._answers: dict[tuple[str, str], deque[LlmResponse]] = defaultdict(deque)
        for agent, prompt_sha, response in calls:
            self._answers[(agent, prompt_sha)].append(response)
        self._asked: dict[tuple[str, str], int] = defaultdict(int)

    def _load(self, wanted: str | None) -> tuple[str, list[tuple[str, str, LlmResponse]]]:
        """The run id and its calls in log order: (agent, prompt sha256, recorded response)."""
        run_id = wanted or "?"
        try:
            with EventLog(self.log_path, read_only=True) as log:
                run_id = self._pick_run([r.run_id for r in log.runs()], wanted)
                calls = []
                for event in log.events(run_id=run_id, types=["LlmCalled"]):
                    assert isinstance(event, LlmCalled)
                    log.get_artifact(event.prompt_sha256)  # present and intact
                    text = log.get_artifact(event.response_sha256).decode()
                    calls.append((event.agent, event.prompt_sha256, LlmResponse(
                        text=text, model=event.model, tokens_in=event.tokens_in,
                        tokens_out=event.tokens_out, latency_ms=event.latency_ms,
                        seed=event.seed, temperature=event.temperature)))
        except LogError as exc:
            raise ProviderError(f"cannot replay from {self.log_path}: {exc}") from None
        except KeyError as exc:
            raise ProviderError(f"cannot replay run {run_id}: {exc.args[0]}") from None
        except UnicodeDecodeError:
            raise ProviderError(f"cannot replay run {run_id}: a recorded response is not "
                                "UTF-8 text") from None
        if not calls:
            raise ProviderError(f"run {run_id} in {self.log_path} recorded no LLM calls")
        return run_id, calls

    def _pick_run(self, run_ids: list[str], wanted: str | None) -> str:
        if not run_ids:
            raise ProviderError(f"{self.log_path} holds no runs to replay")
        listing = ", ".join(run_ids)
        if wanted is None:
            if len(run_ids) > 1:
                raise ProviderError(f"{self.log_path} holds {len(run_ids)} runs; choose one with "
                                    f"replay_run or {ENV_REPLAY_RUN}: {listing}")
            return run_ids[0]
        if wanted in run_ids:
            return wanted
        matches = [r for r in run_ids if r.startswith(wanted)]
        if len(matches) == 1:
            return matches[0]
        what = "matches several runs" if matches else "is not in the log"
        raise ProviderError(f"run {wanted!r} {what} ({self.log_path}); runs: {listing}")

    def describe(self) -> str:
        return f"replay:{self.log_path}#{self.run_id}"

    async def complete(self, request: LlmRequest) -> LlmResponse:
        prompt_sha = hashlib.sha256(request.prompt.encode()).hexdigest()
        key = (request.agent, prompt_sha)
        with self._lock:
            self._asked[key] += 1
            answers = self._answers.get(key)
            if answers:
                return answers.popleft()
            asked = self._asked[key]
        preview = " ".join(request.prompt[:_PROMPT_PREVIEW].split())
        recorded = f"recorded {asked - 1} time(s), asked again" if asked > 1 else "never recorded"
        raise ProviderError(f"the run diverged from recorded run {self.run_id}: agent "
                            f"{request.agent!r} asked a prompt {recorded}: {preview!r}")
