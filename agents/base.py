"""The agent template: a service that implements one method yielding events.

`Agent.handle` is final. For each command it builds an `AgentContext` and runs the
subclass's `_run(ctx)`, an async generator of events in causal order; every LLM call made
through `ctx.ask` becomes an `LlmCalled` event yielded just before the event it led to, and
so does whatever else a step reports on the way (`ctx.note`: a knowledge store that could
not be used).
Ids, acks, retries and dead letters are the `Service` base's; artifacts, files and LLM
accounting are this module's:

- `ctx.run_tool(fn, ...)` runs blocking evaluator work in a thread, so a five-minute
  verification never stalls the heartbeats that keep the command from being redelivered.
- `ctx.task_path()` / `ctx.code_path(sha)` turn artifacts into local files the evaluator
  reads (`Workspace`, content-addressed, written atomically).
- `ctx.suite(recipe_sha)` rebuilds the run's frozen suite and proves it is the same one.
- `ctx.ask(...)` renders a prompt file, asks the run's provider, stores prompt and response
  as artifacts, parses strictly, and asks once more with the parse error when the answer
  is malformed.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import tempfile
import time
from abc import abstractmethod
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, ClassVar, Generic, TypeVar, final

import msgspec
import nats.errors

from agents.llm.base import LlmRequest, LlmResponse, Provider, ProviderError, Purpose, get_provider
from agents.llm.parsing import MalformedAnswer
from agents.suitecache import SuiteCache
from bus.artifacts import ArtifactNotFound
from bus.codec import derived_event_id
from bus.commands import Command
from bus.service import PermanentError, Service
from eventstore.events import Event, LlmCalled
from tools import api

C = TypeVar("C", bound=Command)
T = TypeVar("T")

WORKSPACE_ENV = "KG_WORKSPACE"
TRANSIENT_ERRORS: tuple[type[BaseException], ...] = (
    nats.errors.Error, ConnectionError, TimeoutError, ArtifactNotFound)
"""Errors another delivery can cure (the bus, a connection, an artifact not yet replicated);
every other error of an agent is permanent and fails its command at once."""
PROMPTS = Path(__file__).with_name("prompts")


def workspace_root() -> Path:
    root = os.environ.get(WORKSPACE_ENV)
    return Path(root) if root else Path.home() / ".cache" / "kernelgraph" / "work"


class Workspace:
    """Artifacts as local files: `tasks/<sha>/<file name>` and `kernels/<sha>.py`."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = root or workspace_root()

    def task_file(self, sha256: str, file_name: str) -> Path:
        return self.root / "tasks" / sha256 / Path(file_name).name

    def kernel_file(self, sha256: str) -> Path:
        return self.root / "kernels" / f"{sha256}.py"

    @staticmethod
    def write_once(path: Path, data: bytes) -> Path:
        if path.is_file() and path.read_bytes() == data:
            return path
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return path


_PROVIDERS: dict[str, Provider] = {}


def provider_for(name: str, options: dict[str, Any]) -> Provider:
    """One provider per (name, options) in a process, shared by every agent and run."""
    key = f"{name}:{json.dumps(options, sort_keys=True, default=str)}"
    provider = _PROVIDERS.get(key)
    if provider is None:
        provider = _PROVIDERS[key] = get_provider(name, **options)
    return provider


SUITES = SuiteCache()
"""This process's suites, shared by every agent in it (:mod:`agents.suitecache`)."""


def render_prompt(name: str, **fields: Any) -> str:
    """`agents/prompts/<name>.md` with `{field}` placeholders filled in."""
    template = (PROMPTS / f"{name}.md").read_text()
    return template.format_map({k: ("" if v is None else v) for k, v in fields.items()})


class AgentContext(Generic[C]):
    """What one command's handler may use; see the module docstring."""

    def __init__(self, agent: Agent[C], cmd: C) -> None:
        self.agent = agent
        self.cmd = cmd
        self.workspace = agent.workspace
        self._pending: list[Event] = []
        self._notes = 0

    # --- blocking work ------------------------------------------------------------------

    async def run_tool(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        return await asyncio.to_thread(functools.partial(fn, *args, **kwargs))

    # --- artifacts and files ------------------------------------------------------------

    async def put_text(self, text: str, kind: str) -> str:
        return await self.agent.put_artifact(text.encode(), kind)

    async def get_text(self, sha256: str) -> str:
        return (await self.agent.get_artifact(sha256)).decode()

    async def task_path(self) -> Path:
        cmd: Any = self.cmd
        path = self.workspace.task_file(cmd.task_sha256, cmd.task_file)
        if not path.is_file():
            Workspace.write_once(path, await self.agent.get_artifact(cmd.task_sha256))
        return path

    async def code_path(self, sha256: str) -> Path:
        path = self.workspace.kernel_file(sha256)
        if not path.is_file():
            Workspace.write_once(path, await self.agent.get_artifact(sha256))
        return path

    async def suite(self, recipe_sha256: str) -> api.FrozenSuite:
        recipe = msgspec.json.decode(await self.agent.get_artifact(recipe_sha256),
                                     type=api.SuiteRecipe)
        task = await self.task_path()
        return await SUITES.get(recipe_sha256, lambda: api.suite_from_recipe(task, recipe))

    async def keep_suite(self, recipe_sha256: str, suite: api.FrozenSuite, froze_s: float) -> None:
        await SUITES.keep(recipe_sha256, suite, froze_s)

    # --- language models ------------------------------------------------------------------

    async def ask(
        self,
        purpose: Purpose,
        context: dict[str, Any],
        parse: Callable[[str], T],
        *,
        prompt: str,
        iteration: int | None = None,
    ) -> tuple[T, LlmResponse]:
        """Ask the run's provider; parse strictly; one re-ask with the parse error."""
        cmd: Any = self.cmd
        provider = provider_for(cmd.provider, dict(cmd.provider_options))
        request = LlmRequest(agent=self.agent.agent, purpose=purpose, prompt=prompt,
                             context=context, seed=cmd.seed)
        for attempt in (0, 1):
            started = time.perf_counter()
            try:
                response = await provider.complete(request)
            except ProviderError as exc:
                raise PermanentError(f"{type(exc).__name__}: {exc}") from exc
            await self._record(provider, request, response, started, iteration)
            try:
                return parse(response.text), response
            except MalformedAnswer as exc:
                if attempt == 1:
                    raise PermanentError(f"MalformedAnswer: {exc} (after one re-ask)") from exc
                retry_prompt = render_prompt("reask", prompt=prompt, error=str(exc))
                request = msgspec.structs.replace(request, prompt=retry_prompt, attempt=1)
        raise AssertionError("unreachable")

    async def _record(self, provider: Provider, request: LlmRequest, response: LlmResponse,
                      started: float, iteration: int | None) -> None:
        prompt_sha, response_sha = await self.agent.put_artifacts(
            [(request.prompt.encode(), "prompt"), (response.text.encode(), "response")])
        latency_ms = response.latency_ms or (time.perf_counter() - started) * 1000
        self._pending.append(self.agent.event(
            LlmCalled, self.cmd, agent=self.agent.agent, provider=provider.name,
            model=response.model, prompt_sha256=prompt_sha, response_sha256=response_sha,
            tokens_in=response.tokens_in, tokens_out=response.tokens_out,
            latency_ms=float(latency_ms), iteration=iteration, seed=response.seed,
            temperature=response.temperature))

    def note(self, cls: type[Event], **payload: Any) -> None:
        """Record an event of this command that happened along the way (safe from a tool's
        thread); it is yielded before the handler's next event."""
        self._notes += 1  # named apart from the positional ids: a note that one delivery
        payload.setdefault("event_id", derived_event_id(  # makes and the next does not
            f"{self.cmd.command_id}:note", self._notes, fallback_ms=int(self.cmd.ts * 1000)))
        self._pending.append(self.agent.event(cls, self.cmd, **payload))

    def take_pending(self) -> list[Event]:
        """The `LlmCalled` and noted events since the last call, in order."""
        events, self._pending = self._pending, []
        return events


class Agent(Service, Generic[C]):
    """One agent kind. Subclasses implement `_run`; ids, acks, retries, LLM accounting and
    artifact storage are the base's."""

    workspace: Workspace
    produces: ClassVar[tuple[type[Event], ...]] = ()
    """The event types that end this agent's commands (what callers wait for)."""

    def __init__(self, *args: Any, workspace: Workspace | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.workspace = workspace or Workspace()

    @final
    async def handle(self, cmd: C) -> AsyncIterator[Event]:
        ctx = AgentContext(self, cmd)
        try:
            async for event in self._run(ctx):
                for call in ctx.take_pending():
                    yield call
                yield event
        except TRANSIENT_ERRORS:
            raise
        except PermanentError:
            raise
        except Exception as exc:  # a bug fails the command now, with its cause, not after minutes of retries
            raise PermanentError(f"{type(exc).__name__}: {exc}") from exc
        for call in ctx.take_pending():
            yield call

    @abstractmethod
    def _run(self, ctx: AgentContext[C]) -> AsyncIterator[Event]:
        """Yield this command's events in causal order. Raise PermanentError for bad input."""
