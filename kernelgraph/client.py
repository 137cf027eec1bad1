"""Publishing a kernel request and following it: the Python face of `search` and `submit`.

```python
async with await kernelgraph.client.connect_bus("nats://127.0.0.1:4222") as nc:
    run = await submit(nc, KernelRequest(task=Path("tasks/rmsnorm.py")))
    result = await wait(nc, run.run_id)          # RunResult: status, best node, speedup
```

A request is two messages: the task source as an artifact and a `RunRequested` event
(the run's root node), then the command that starts the run: `StartRun` for one Auto
trajectory (policy "auto"), `StartSearch` for the search orchestrator (any other policy).
Both carry deterministic ids derived from the run id, so submitting the same request twice
queues it once; `RunRequested.start_command` keeps the command so `resume` can resend it.
"""

from __future__ import annotations

import ast
import asyncio
import dataclasses
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
from nats.aio.client import Client as NATS
from nats.js.api import DeliverPolicy

from agents.commands import StartRun, StartSearch
from bus import artifacts, subjects
from bus.codec import EventDecodeError, decode_event, derived_event_id, encode
from bus.streams import BusSettings, ensure_streams
from eventstore.events import (
    AgentFailed,
    Event,
    NodeEvaluated,
    RunFinished,
    RunRequested,
    WinnerVerified,
    new_event_id,
)
from kernelgraph.errors import KernelgraphError
from tools import api

DEFAULT_PROVIDER = "offline"
START_COMMANDS = ("StartRun", "StartSearch")


class RequestError(KernelgraphError, ValueError):
    """A kernel request that cannot be sent as it stands (bad task file, bad settings)."""


@dataclass(frozen=True)
class SearchLimits:
    """A search's stop criteria (None: no limit) and how many trajectories run at once;
    the same fields travel in `StartSearch`."""

    max_nodes: int | None = 6
    max_candidates: int | None = None
    max_depth: int | None = None
    target_speedup: float | None = None
    max_wall_s: float | None = None
    max_tokens: int | None = None
    concurrency: int = 2

    def check(self) -> None:
        for key in ("max_nodes", "max_candidates", "max_depth", "max_tokens", "concurrency"):
            value = getattr(self, key)
            if value is not None and value < 1:
                raise RequestError(f"{key}={value} must be at least 1")


@dataclass(frozen=True)
class KernelRequest:
    task: Path
    target: str = api.DEFAULT_TARGET
    provider: str = DEFAULT_PROVIDER
    provider_options: dict[str, Any] = field(default_factory=dict)
    iterations: int = 5
    fix_rounds: int = 4
    seed: int = 0
    tune_budget: int | None = 8
    hint: str = ""
    knowledge_cutoff_ts: float | None = None
    price_margin: float = 0.0
    """Simulated targets: test only candidates whose estimate beats their node's parent by
    this fraction (`StartRun.price_margin`)."""
    policy: str = "auto"
    """"auto": one trajectory; any search policy name: a search."""
    policy_params: dict[str, str] = field(default_factory=dict)
    """`--param key=value` strings, checked against the policy's parameters."""
    limits: SearchLimits = field(default_factory=lambda: SearchLimits())


@dataclass(frozen=True)
class SubmittedRun:
    run_id: str
    root_node_id: str
    task_name: str


@dataclass
class RunResult:
    run_id: str
    status: str
    reason: str
    best_node_id: str | None
    speedup: float | None
    measured_on: str | None
    verified: bool
    receipt_sha256: str | None
    code_sha256: str | None
    config: dict[str, Any]
    nodes: int


@dataclass(frozen=True)
class CheckedTask:
    name: str
    needs_input_maker: bool
    policy_params: dict[str, Any] = field(default_factory=dict)
    """The policy's parameters, typed and with defaults filled in."""
    tuning_bytes: int | None = None
    """The inputs' bytes at the tuning point (None: not known before the input maker is
    written); a bench starts the largest first."""


def check_request(request: KernelRequest) -> CheckedTask:
    """Check the task and the settings before anything is sent.

    A complete task is loaded and validated (its reference runs on its inputs). A task that
    declares only its reference, SHAPES and INPUT_SPECS is checked statically: its input
    maker is written and validated by the test synthesiser.
    """
    if request.iterations < 1:
        raise RequestError(f"iterations={request.iterations} must be at least 1")
    if request.fix_rounds < 0:
        raise RequestError(f"fix_rounds={request.fix_rounds} must be at least 0")
    if request.target not in api.TARGETS:
        raise RequestError(f"unknown target {request.target!r}; known: {', '.join(api.TARGETS)}")
    params = check_policy(request)
    from agents.llm.base import UnknownProvider, provider_class
    from agents.test_synth import needs_input_maker, signature_of

    try:
        provider_class(request.provider)
    except UnknownProvider as exc:
        raise RequestError(str(exc)) from None
    if request.task.is_file() and request.task.suffix == ".py":
        source = request.task.read_text(errors="replace")
        try:
            partial = needs_input_maker(source)
        except SyntaxError as exc:
            raise RequestError(f"{request.task}: syntax error at line {exc.lineno}: {exc.msg}") from None
        if partial:
            try:
                signature_of(source)
            except Exception as exc:
                raise RequestError(f"{request.task}: {exc}") from None
            return CheckedTask(name=_literal_name(source) or request.task.stem,
                               needs_input_maker=True, policy_params=params)
    from tools.correctness.testsuite import input_bytes

    task = api.load_task(request.task)
    return CheckedTask(name=task.name, needs_input_maker=False, policy_params=params,
                       tuning_bytes=input_bytes(task, 0))


def check_policy(request: KernelRequest) -> dict[str, Any]:
    """The search policy's typed parameters; a bad name, key or value is a RequestError."""
    request.limits.check()
    if request.policy == "auto":
        if request.policy_params:
            raise RequestError("--param needs a search policy (--policy); auto takes none")
        return {}
    from searchpolicies.errors import PolicyError
    from searchpolicies.registry import get_policy, policy_class

    params = dict(request.policy_params)
    try:
        cls = policy_class(request.policy)
        names = {p.name for p in cls.params()}
        if "iterations" in names:  # --iterations: per trajectory
            params.setdefault("iterations", str(request.iterations))
        if "kernel_class" in names and "kernel_class" not in params:
            params["kernel_class"] = task_kernel_class(request.task)
        return get_policy(request.policy, params, seed=request.seed).param_values()
    except PolicyError as exc:
        raise RequestError(str(exc)) from None


def task_kernel_class(task: Path) -> str:
    """The task's kernel class as the offline author reads it from the jaxpr, so a policy
    draws only the levers that can change its kernel; '' (any lever) for a class the lever
    catalogue does not name, or a task that cannot be classified before its suite exists."""
    from kernelgraph.taskinfo import describe
    from searchpolicies.common import KERNEL_CLASS

    try:
        found = describe(task).kernel_class or ""
    except Exception:  # only a default: the run itself reports a task it cannot load
        return ""
    return found if found in KERNEL_CLASS.choices else ""


def _literal_name(source: str) -> str | None:
    from agents.test_synth import literal_assignments

    value = literal_assignments(source, ("NAME",)).get("NAME")
    is_text = isinstance(value, ast.Constant) and isinstance(value.value, str)
    return value.value if is_text else None  # type: ignore[union-attr]


def _weak_sandbox() -> bool:
    """Whether this process runs candidates in the weaker sandbox (the user opted in where
    the full one cannot be built): recorded on the run's RunRequested."""
    from tools.sandbox.policy import weak_in_effect

    return weak_in_effect()


async def submit(nc: NATS, request: KernelRequest, *, run_id: str | None = None) -> SubmittedRun:
    """Publish the request (task artifact, RunRequested, StartRun); returns its run id."""
    task = await asyncio.to_thread(check_request, request)
    source = request.task.read_bytes()
    run_id = run_id or new_event_id()
    js = nc.jetstream()
    await ensure_streams(js, BusSettings.from_env())  # a fresh deployment may not have them yet
    (task_sha,) = await artifacts.publish_artifacts(js, [(source, "task")],
                                                   max_payload=nc.max_payload)
    now = time.time()
    root = derived_event_id(f"{run_id}/root", 0, fallback_ms=int(now * 1000))
    request_id = derived_event_id(f"{run_id}/request", 0, fallback_ms=int(now * 1000))
    fields: dict[str, Any] = dict(
        command_id=derived_event_id(f"{run_id}/start", 0, fallback_ms=int(now * 1000)),
        run_id=run_id, ts=now, node_id=root, causation_id=request_id,
        task_sha256=task_sha, task_file=request.task.name, task_name=task.name,
        target_name=request.target, provider=request.provider,
        provider_options=dict(request.provider_options), iterations=request.iterations,
        fix_rounds=request.fix_rounds, seed=request.seed, tune_budget=request.tune_budget,
        hint=request.hint, knowledge_cutoff_ts=request.knowledge_cutoff_ts or now,
        price_margin=request.price_margin)
    budget: dict[str, Any] = {"iterations": request.iterations, "fix_rounds": request.fix_rounds,
                              "tune_budget": request.tune_budget}
    start: StartRun
    if request.policy == "auto":
        start = StartRun(**fields)
        params: dict[str, Any] = {"hint": request.hint} if request.hint else {}
    else:
        limits = dataclasses.asdict(request.limits)
        start = StartSearch(**fields, policy=request.policy, policy_params=task.policy_params,
                            **limits)
        budget.update(limits)
        params = dict(task.policy_params)
    requested = RunRequested(
        event_id=request_id, run_id=run_id, ts=now, producer="kernelgraph-client@1",
        node_id=root, task_name=task.name, task_sha256=task_sha, policy=request.policy,
        target=request.target, provider=request.provider, budget=budget, seed=request.seed,
        policy_params=params, start_command=msgspec.to_builtins(start),
        price_margin=request.price_margin, weak_sandbox=_weak_sandbox())
    await js.publish(subjects.event_subject(run_id, requested.type_name), encode(requested),
                     headers={subjects.MSG_ID_HEADER: requested.event_id})
    await send_start(js, start)
    return SubmittedRun(run_id=run_id, root_node_id=root, task_name=task.name)


async def send_start(js: Any, start: StartRun) -> None:
    """Queue the command that starts (or resumes) a run; its id makes a resend a no-op
    while the first copy is still queued."""
    await js.publish(start.subject(), encode(start),
                     headers={subjects.MSG_ID_HEADER: start.command_id})


async def follow(nc: NATS, run_id: str) -> AsyncIterator[Event]:
    """Every event of the run, from its first, until (and including) RunFinished."""
    js = nc.jetstream()
    sub = await js.subscribe(subjects.run_events_subject(run_id), ordered_consumer=True,
                             deliver_policy=DeliverPolicy.ALL)
    try:
        while True:
            msg = await sub.next_msg(timeout=None)
            try:
                event = decode_event(msg.data)
            except EventDecodeError:
                continue
            yield event
            if isinstance(event, RunFinished):
                return
    finally:
        await sub.unsubscribe()


async def wait(nc: NATS, run_id: str, *, on_event: Callable[[Event], None] | None = None,
               timeout: float | None = None) -> RunResult:
    """Follow the run to its end and summarise it."""
    evaluated: dict[str, NodeEvaluated] = {}
    verified: WinnerVerified | None = None
    async with asyncio.timeout(timeout):
        async for event in follow(nc, run_id):
            if on_event is not None:
                on_event(event)
            if isinstance(event, NodeEvaluated) and event.node_id:
                evaluated[event.node_id] = event
            elif isinstance(event, WinnerVerified):
                verified = event
            elif isinstance(event, AgentFailed) and event.command_type in START_COMMANDS:
                # the orchestrator itself gave up: no RunFinished will come
                return RunResult(run_id=run_id, status="failed",
                                 reason=f"{event.agent} gave up on the run: {event.error}"[:2000],
                                 best_node_id=None, speedup=None, measured_on=None, verified=False,
                                 receipt_sha256=None, code_sha256=None, config={},
                                 nodes=len(evaluated))
            elif isinstance(event, RunFinished):
                best = evaluated.get(event.best_node_id or "")
                return RunResult(
                    run_id=run_id, status=event.status, reason=event.reason,
                    best_node_id=event.best_node_id, speedup=event.speedup,
                    measured_on=event.measured_on if event.best_node_id else None,
                    verified=bool(verified and verified.verdict == "pass" and event.best_node_id),
                    receipt_sha256=event.receipt_sha256,
                    code_sha256=best.code_sha256 if best else None,
                    config=dict(best.tunables) if best else {}, nodes=len(evaluated))
    raise AssertionError("unreachable")


async def fetch_text(nc: NATS, sha256: str) -> str:
    data, _ = await artifacts.fetch_artifact(nc.jetstream(), sha256)
    return data.decode()
