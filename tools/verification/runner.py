"""The parent's side of the runner split: the worker's report is read for its programs only.

The worker (:mod:`tools.child.worker`) imports the candidate, so everything it reports is
the candidate's word. Of it the verdict uses: whether the candidate loaded and built, the
tampering it noticed, the diagnostics (for fix agents), the direct calls, and, per shape,
either a trace error or the traced program as data. The lowered text, the kernel count,
the allowlist and every case's outputs come from the runner (:mod:`tools.child.runner`),
a second sandboxed child that never imports candidate code and lowers and runs those
programs itself. A shape the worker sent no program for fails.
"""

from __future__ import annotations

import dataclasses
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import msgspec

from tools.sandbox import wire
from tools.sandbox.launcher import Limits, Mailbox, SandboxResult, run_sandboxed

RUNNER_MODULE = "tools.child.runner"


@dataclass
class PendingRunner:
    """A runner started before the worker, so its start-up (Python, JAX, the Pallas
    modules) overlaps the worker's work; it waits for its request. Its wall limit covers
    the wait: the worker's limit plus its own."""

    mailbox: Mailbox
    result: Future[SandboxResult]
    pool: ThreadPoolExecutor

    def cancel(self) -> None:
        """End it (killed unless it got its programs) and wait until its sandbox directory
        and control groups are gone, so nothing of it outlives the evaluation."""
        self.mailbox.cancel()
        self.pool.shutdown(wait=True)


def start_runner(limits: Limits) -> PendingRunner:
    mailbox = Mailbox()
    pool = ThreadPoolExecutor(1, thread_name_prefix="kg-runner")
    waiting = dataclasses.replace(limits, wall_s=2 * limits.wall_s)
    result = pool.submit(run_sandboxed, RUNNER_MODULE, None, limits=waiting, mailbox=mailbox)
    return PendingRunner(mailbox, result, pool)


@dataclass
class RunnerOutcome:
    response: wire.EvalResponse  # the worker's facts, with the runner's groups
    box: SandboxResult | None  # None when there was nothing to run
    problem: str = ""  # why the runner gave no usable answer (fails the candidate)


def run_programs(worker: wire.EvalResponse, request: wire.EvalRequest,
                 runner: PendingRunner) -> RunnerOutcome:
    """Run the worker's programs in the runner and merge: only the worker's trace errors,
    never its lowered text or outputs, survive into the groups that are judged."""
    programs = {g.shape_index: g.program for g in worker.groups
                if g.program and not g.trace_error}
    box = None
    ran: dict[int, wire.GroupResult] = {}
    problem = ""
    check_seconds = dict(worker.check_seconds)
    if not programs:
        runner.cancel()
    else:
        run = wire.RunRequest(request=msgspec.structs.replace(
            request, candidate_file="", send_programs=False, run_cases=True),
            programs=programs)
        try:
            runner.mailbox.deliver(wire.encode(run))
            box = runner.result.result()
        except Exception as exc:  # it never started, or died before taking the request
            runner.cancel()
            problem = f"the runner could not be given its programs ({exc})"
        runner.pool.shutdown(wait=False)
        if box is None:
            pass
        elif not box.ok:
            problem = f"the runner {box.failure()}"
        else:
            try:
                answer = wire.decode(box.result or b"", wire.EvalResponse)
            except msgspec.DecodeError as exc:
                answer = None
                problem = f"the runner's result could not be read ({exc})"
            if answer is not None:
                if answer.limit_hit:
                    problem = f"the runner: {answer.limit_hit}"
                ran = {g.shape_index: g for g in answer.groups}
                for name, seconds in answer.check_seconds.items():
                    check_seconds[name] = check_seconds.get(name, 0.0) + seconds
    groups = []
    for group in worker.groups:
        if group.shape_index in programs and group.shape_index in ran:
            runner_group = ran[group.shape_index]
            groups.append(msgspec.structs.replace(
                runner_group, diagnostics=group.diagnostics + runner_group.diagnostics))
        elif group.shape_index in programs:
            groups.append(wire.GroupResult(
                group.shape_index, trace_error=problem or "the runner returned no result for "
                "this shape", diagnostics=group.diagnostics))
        else:
            groups.append(wire.GroupResult(
                group.shape_index,
                trace_error=group.trace_error or "the worker sent no program for this shape",
                diagnostics=group.diagnostics))
    merged = msgspec.structs.replace(worker, groups=tuple(groups), check_seconds=check_seconds)
    return RunnerOutcome(merged, box, problem)
