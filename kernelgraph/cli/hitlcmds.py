"""`kernelgraph hitl ...`: one agent, then wait for the user. The session lives in the log."""

from __future__ import annotations

import asyncio
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from kernelgraph.cli.app import (
    WeakSandboxOpt,
    app,
    emit_json,
    err_console,
    fail,
    sandbox_gate,
    task_arg,
)
from kernelgraph.cli.buscmds import DEFAULT_DB
from kernelgraph.cli.runcmds import ModelOpt, ProviderOpt, SeedOpt, TargetOpt, TuneOpt

hitl = typer.Typer(
    help="Human in the loop: the Auto phases one at a time (suite, baseline, plan, implement, "
    "compile, fix, test, tune, profile, verify), each waiting for you. Approve by running "
    "`next`, steer with `next --feedback`, change the plan or kernel with `edit`, jump with "
    "`goto`. Everything is an event in --db, so a session resumes whenever you come back.",
    no_args_is_help=True,
)
app.add_typer(hitl, name="hitl", rich_help_panel="Search")

DbOpt = Annotated[Path, typer.Option("--db", help="The session's event log.")]
RunOpt = Annotated[str | None, typer.Option(
    "--run", help="The session's run id [default: the latest HITL session in --db].",
    show_default=False)]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]


def _user_errors() -> tuple[type[BaseException], ...]:
    from agents.hitl import HitlError
    from kernelgraph.cli.runcmds import _user_errors as run_errors

    return (*run_errors(), HitlError)


def _load(db: Path, run: str | None) -> tuple[Any, dict[str, bytes]]:
    """The session's state folded from the log, and the artifacts its next step reads (for
    `verify`, every artifact the final audit reads too: the bus keeps them only a while)."""
    from agents.hitl import HitlError, HitlState
    from eventstore.log import EventLog
    from projections.audit import cited_artifacts

    if not db.exists():
        raise HitlError(f"{db} does not exist; start a session with `kernelgraph hitl start TASK --db {db}`")
    with EventLog(db, read_only=True) as log:
        if run is None:
            sessions = [r for r in log.events(types=["RunRequested"]) if r.policy == "hitl"]
            if not sessions:
                raise HitlError(f"{db} holds no HITL session; start one with `kernelgraph hitl start`")
            run = sessions[-1].run_id
        events = list(log.events(run_id=run))
        state = HitlState.fold(events)
        if state.request is None:
            raise HitlError(f"no run {run!r} in {db}")
        wanted = state.artifacts_needed()
        if state.next_phase == "verify" and state.finished is None:
            wanted += sorted(cited_artifacts(events))
        artifacts = {sha: log.get_artifact(sha) for sha in dict.fromkeys(wanted)
                     if log.has_artifact(sha)}
    return state, artifacts


async def _publish(nc: Any, events: list[Any]) -> None:
    from bus import subjects
    from bus.codec import encode

    js = nc.jetstream()
    for event in events:
        await js.publish(subjects.event_subject(event.run_id, event.type_name), encode(event),
                         headers={subjects.MSG_ID_HEADER: event.event_id})


def _runtime(db: Path, agents: list[str] | None) -> Any:
    from kernelgraph.runtime import Runtime, RuntimeConfig

    return Runtime(RuntimeConfig(db_path=db, agents=agents, concurrency={"executor": 2}))


def _human(state: Any, phase: str, action: str, text: str = "", sha: str | None = None) -> Any:
    from agents.hitlend import PRODUCER
    from eventstore.events import HumanFeedbackGiven

    return HumanFeedbackGiven.create(run_id=state.run_id, producer=PRODUCER, node_id=state.node_id,
                                     phase_name=phase, action=action, text=text,
                                     artifact_sha256=sha)


def _status(state: Any) -> dict[str, Any]:
    best = state.best
    return {
        "run_id": state.run_id,
        "task": state.request.task_name if state.request else None,
        "next_phase": None if state.finished else state.next_phase,
        "iteration": state.iteration,
        "plan_sha256": state.plan_sha256,
        "code_sha256": state.code_sha256,
        "best": None if best is None else {"iteration": best.iteration, "speedup": best.speedup,
                                           "measured_on": best.measured_on, "config": best.config},
        "finished": state.finished.status if state.finished else None,
        "reason": state.finished.reason if state.finished else None,
        "audit": _audit(state.audit),
        "history": state.history,
    }


def _audit(audited: Any) -> dict[str, Any] | None:
    """The final audit's outcome (None until the session's `verify` asked for it)."""
    if audited is None:
        return None
    return {"clean": audited.clean, "events_checked": audited.events_checked,
            "chain_ok": audited.chain_ok, "findings": list(audited.findings)}


def _audit_text(audit: dict[str, Any] | None) -> str:
    if audit is None:
        return "audit: none yet (the final audit runs when `verify` ends the session)"
    if audit["clean"]:
        return f"audit: clean ({audit['events_checked']} events)"
    lines = [f"audit: NOT clean, {len(audit['findings'])} finding(s)"]
    lines += [f"  - {f.get('check', '?')}: {f.get('message', '')}" for f in audit["findings"][:10]]
    return "\n".join(lines)


def _print_status(status: dict[str, Any]) -> None:
    out = sys.stdout
    out.write(f"session {status['run_id']} ({status['task']}), iteration {status['iteration']}\n")
    for line in status["history"]:
        out.write(f"  - {line}\n")
    best = status["best"]
    if best:
        out.write(f"best so far: iteration {best['iteration']}, {best['speedup']:.2f}x "
                  f"({best['measured_on']}), config {best['config']}\n")
    out.write(_audit_text(status["audit"]) + "\n")
    if status["finished"]:
        reason = f" ({status['reason']})" if status["reason"] else ""
        out.write(f"ended: {status['finished']}{reason}\n")
    else:
        out.write(f"next: {status['next_phase']}  (kernelgraph hitl next)\n")


@hitl.command("start")
def start(
    task: Annotated[Path, typer.Argument(help="A task file, or a shipped task's name (see `kernelgraph tasks`).")],
    db: DbOpt = DEFAULT_DB,
    provider: ProviderOpt = "offline",
    target: TargetOpt = "sim-tpu-v6e",
    seed: SeedOpt = 0,
    tune_budget: TuneOpt = 8,
    hint: Annotated[str, typer.Option("--hint", help="A strategy hint for the planner.")] = "",
    model: ModelOpt = None,
    allow_weak_sandbox: WeakSandboxOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Record a kernel request as a HITL session; nothing runs until `hitl next`."""
    from agents.hitl import session_node
    from agents.hitlend import PRODUCER
    from bus import artifacts
    from eventstore.events import ExpansionRequested, RunRequested, new_event_id
    from kernelgraph.client import KernelRequest, check_request
    from kernelgraph.userterms import given_name
    from tools.sandbox.policy import weak_in_effect

    task = task_arg(task)
    sandbox_gate(allow_weak_sandbox)
    request = KernelRequest(task=task, target=target, provider=provider, seed=seed,
                            tune_budget=tune_budget, hint=hint,
                            provider_options={"model": model} if model else {})

    async def main() -> dict[str, Any]:
        loaded = await asyncio.to_thread(check_request, request)
        async with _runtime(db, []) as runtime:
            nc = runtime.client.nc
            (task_sha,) = await artifacts.publish_artifacts(
                nc.jetstream(), [(task.read_bytes(), "task")], max_payload=nc.max_payload)
            run_id, now = new_event_id(), time.time()
            params = {"task_file": task.name, "provider_options": request.provider_options,
                      "knowledge_cutoff_ts": now, "hint": hint,
                      "task_given": given_name(task)}  # how `next` names it in a refusal
            requested = RunRequested.create(
                run_id=run_id, producer=PRODUCER, node_id=new_event_id(), task_name=loaded.name,
                task_sha256=task_sha, policy="hitl", target=target, provider=provider, seed=seed,
                policy_params=params, budget={"tune_budget": tune_budget},
                weak_sandbox=weak_in_effect())
            node = session_node(requested)
            expansion = ExpansionRequested.create(
                run_id=run_id, producer=PRODUCER, node_id=node, parent_id=requested.node_id or "",
                policy="hitl", strategy=hint, causation_id=requested.event_id)
            await _publish(nc, [requested, expansion])
        return {"run_id": run_id, "task": loaded.name, "next_phase": "suite", "db": str(db)}

    try:
        out = asyncio.run(main())
    except _user_errors() as exc:
        fail(str(exc))
    if json_out:
        emit_json(out)
    else:
        sys.stdout.write(f"session {out['run_id']} ({out['task']}) recorded in {db}\n"
                         "next: suite  (kernelgraph hitl next)\n")


def _current_task(given: str) -> None:
    from kernelgraph.userterms import remember

    if given:
        remember(Path(given), given)


@hitl.command("status")
def status(db: DbOpt = DEFAULT_DB, run: RunOpt = None, json_out: JsonOpt = False) -> None:
    """What the session has done, the best kernel so far, and the next phase."""
    try:
        state, _ = _load(db, run)
    except _user_errors() as exc:
        fail(str(exc))
    summary = _status(state)
    if json_out:
        emit_json(summary)
    else:
        _print_status(summary)


@hitl.command("next")
def next_phase(
    db: DbOpt = DEFAULT_DB,
    run: RunOpt = None,
    feedback: Annotated[str | None, typer.Option(
        "--feedback", help="Text for the agent of this phase (a plan or kernel to write).",
        show_default=False)] = None,
    allow_weak_sandbox: WeakSandboxOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Run the next phase's agent once, show its result, and stop. `verify` ends the
    session: the node is evaluated, its best kernel re-verified and the run audited; the
    session fails (exit 1) when the audit is not clean."""
    from agents.calls import RunHistory
    from agents.hitl import RESULTS, next_command
    from agents.hitlend import close_iterations, evaluate
    from bus import artifacts

    sandbox_gate(allow_weak_sandbox)
    try:
        state, stored = _load(db, run)
        if state.request is not None:  # a refusal names the task as `hitl start` was given it
            _current_task(str(state.request.policy_params.get("task_given", "")))
        human = [_human(state, state.next_phase, "feedback", feedback)] if feedback else []
        for event in human:
            state.apply(event)
        phase, command = next_command(state)
        ending = evaluate(state) if phase == "verify" else []
        if ending:
            phase, command = next_command(state, phase)  # the evaluated node's kernel
    except _user_errors() as exc:
        fail(str(exc))
    if not json_out:
        err_console.print(f"running {phase} (iteration {command.iteration}) ...", highlight=False)

    async def main() -> tuple[Any, str, dict[str, Any]]:
        from bus.registry import load_agents
        from kernelgraph.runtime import AGENT_MODULES

        agents = [a for a in load_agents(AGENT_MODULES) if a not in ("auto", "echo")]
        async with _runtime(db, agents) as runtime:
            nc = runtime.client.nc
            await artifacts.publish_artifacts(
                nc.jetstream(), [(data, "artifact") for data in stored.values()],
                max_payload=nc.max_payload)
            await _publish(nc, [*human, *ending])
            async with RunHistory(nc, state.run_id) as history:
                if phase == "verify":
                    return await _end_session(nc, history, state, command)
                result = await history.call(command, RESULTS[phase])
                if phase == "plan":  # the previous iteration ended with this plan
                    state.apply(result)
                    await _publish(nc, close_iterations(state, result.iteration - 1))
            return result, await _describe(nc, phase, result), {}

    try:
        result, text, extra = asyncio.run(main())
    except _user_errors() as exc:
        fail(str(exc))
    except Exception as exc:
        from agents.calls import CommandFailed

        if isinstance(exc, CommandFailed):
            fail(f"{phase} failed: {exc.failure.error}", code=1)
        raise
    if json_out:
        import msgspec

        emit_json({"phase": phase, "event": msgspec.to_builtins(result), "text": text, **extra})
    else:
        sys.stdout.write(text.rstrip() + "\n")
    if extra.get("finished", {}).get("status") == "failed":
        raise typer.Exit(1)


async def _end_session(nc: Any, history: Any, state: Any,
                       command: Any) -> tuple[Any, str, dict[str, Any]]:
    """Re-verify the evaluated node's kernel, ask for the final audit and end the run, as
    Auto does: completed only after a clean audit; no answer within `KG_AUDIT_TIMEOUT_S`,
    or findings, and the session fails."""
    import msgspec

    from agents.calls import CommandFailed
    from agents.finalaudit import audit_problem, audit_timeout_s
    from agents.hitlend import audit_command, finish_session
    from eventstore.events import RunAudited, WinnerVerified

    verified, failure = None, None
    try:
        verified = await history.call(command, WinnerVerified)
    except CommandFailed as exc:
        failure = exc.failure.error
    audited, timeout = None, audit_timeout_s()
    try:
        async with asyncio.timeout(timeout):
            audited = await history.call(audit_command(state), RunAudited)
        problem = audit_problem(audited)
    except TimeoutError:
        problem = f"no audit: the auditor did not answer within {timeout:g} s"
    except CommandFailed as exc:
        problem = f"no audit: {exc.failure.error[:2000]}"
    finished = finish_session(state, verified, failure, problem)
    await _publish(nc, [finished])
    lines = [await _describe(nc, "verify", verified) if verified is not None
             else f"re-verification failed to run: {failure}"]
    lines.append(_audit_text(_audit(audited)) if audited is not None else f"audit: {problem}")
    lines.append(f"session ended: {finished.status}"
                 + (f" ({finished.reason})" if finished.reason else ""))
    return verified, "\n".join(lines), {"audit": _audit(audited),
                                        "finished": msgspec.to_builtins(finished)}


async def _describe(nc: Any, phase: str, e: Any) -> str:
    from kernelgraph.client import fetch_text

    if phase == "plan":
        return await fetch_text(nc, e.plan_sha256)
    if phase in ("implement", "fix"):
        head = f"# fix round {e.attempt}: {e.error} / {e.cause} / {e.fix}\n" if phase == "fix" else ""
        return head + await fetch_text(nc, e.code_sha256)
    if phase == "compile":
        return "compiled" if e.ok else "compile failed:\n" + "\n".join(
            f"- {d.get('message', '')}" for d in e.diagnostics)
    if phase == "test":
        if e.passed:
            return f"tests pass ({e.n_cases} cases); speedup {e.speedup:.2f}x ({e.measured_on})"
        return "tests FAILED:\n" + "\n".join(f"- {r}" for r in e.reasons)
    if phase == "tune":
        if e.best_latency_s is None:  # the test run timed the default; no other config did
            timed = (f"{e.configs_tried} other configuration(s) timed, none valid"
                     if e.configs_tried else "no other configuration to time")
            return f"{timed}; the tested configuration stands"
        return f"{e.configs_tried} configurations; best {e.best_config}" + (
            f" at {e.best_speedup:.2f}x ({e.measured_on})" if e.best_speedup else "")
    if phase == "profile":
        import json

        return json.loads(await fetch_text(nc, e.profile_sha256)).get("rendered", e.bound)
    if phase == "verify":
        return f"re-verification: {e.verdict}" + (f", {e.speedup:.2f}x ({e.measured_on})"
                                                   if e.speedup else "") + "".join(
            f"\n- {r}" for r in e.reasons)
    if phase == "suite":
        return f"suite frozen: {e.n_cases} cases, sha256 {e.suite_sha256}"
    return f"baseline: {e.latency_s:.3e} s ({e.measured_on}, {e.method})"


@hitl.command("edit")
def edit(
    what: Annotated[str, typer.Argument(help="plan or kernel")] = "kernel",
    db: DbOpt = DEFAULT_DB,
    run: RunOpt = None,
) -> None:
    """Open the current plan or kernel in $EDITOR; a changed file is recorded as your edit."""
    from agents.hitl import EDITABLE, HitlError

    if what not in EDITABLE:
        fail(f"edit takes one of {', '.join(EDITABLE)}, not {what!r}")
    try:
        state, stored = _load(db, run)
        sha = state.plan_sha256 if what == "plan" else state.code_sha256
        if state.finished is not None or state.evaluated is not None:
            raise HitlError("the session's node is evaluated; there is nothing left to edit")
        if sha is None or sha not in stored:
            raise HitlError(f"there is no {what} yet to edit")
    except _user_errors() as exc:
        fail(str(exc))
    original = stored[sha]
    suffix = ".md" if what == "plan" else ".py"
    with tempfile.NamedTemporaryFile("wb", suffix=suffix, delete=False) as handle:
        handle.write(original)
        path = Path(handle.name)
    editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
    try:
        code = subprocess.call([*shlex.split(editor), str(path)])
        edited = path.read_bytes()
    finally:
        path.unlink(missing_ok=True)
    if code != 0:
        fail(f"the editor ({editor}) exited with {code}; nothing recorded", code=1)
    if edited == original:
        sys.stdout.write(f"the {what} is unchanged; nothing recorded\n")
        return

    async def main() -> str:
        from bus import artifacts

        async with _runtime(db, []) as runtime:
            nc = runtime.client.nc
            (new_sha,) = await artifacts.publish_artifacts(
                nc.jetstream(), [(edited, "plan" if what == "plan" else "kernel")],
                max_payload=nc.max_payload)
            await _publish(nc, [_human(state, what, "edit", sha=new_sha)])
        return new_sha

    try:
        new_sha = asyncio.run(main())
    except _user_errors() as exc:
        fail(str(exc))
    following = "implement" if what == "plan" else "compile"
    sys.stdout.write(f"recorded your {what} ({new_sha[:12]}); next: {following}\n")


@hitl.command("goto")
def goto(
    phase: Annotated[str, typer.Argument(help="suite, baseline, plan, implement, compile, fix, "
                                              "test, tune, profile or verify")],
    db: DbOpt = DEFAULT_DB,
    run: RunOpt = None,
) -> None:
    """Choose the next phase (verify ends the session with the best kernel so far)."""
    from agents.hitl import PHASES, next_command

    if phase not in PHASES:
        fail(f"unknown phase {phase!r}; phases: {', '.join(PHASES)}")
    try:
        state, _ = _load(db, run)
        next_command(state, phase)  # refuse a phase whose inputs do not exist yet
    except _user_errors() as exc:
        fail(str(exc))

    async def main() -> None:
        async with _runtime(db, []) as runtime:
            await _publish(runtime.client.nc, [_human(state, phase, "goto")])

    asyncio.run(main())
    sys.stdout.write(f"next: {phase}\n")
