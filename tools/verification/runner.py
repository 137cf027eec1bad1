"""The parent's side of an evaluation's two sandboxed children: the worker and the runner.

The worker (:mod:`tools.child.worker`) imports the candidate, so everything it reports is
the candidate's word. Of it the verdict uses: whether the candidate loaded and built, the
tampering it noticed, the diagnostics (for fix agents), the direct calls, and, per shape,
either a trace error or the traced program as data. The lowered text, the kernel count,
the allowlist and every case's outputs come from the runner (:mod:`tools.child.runner`),
a second sandboxed child that never imports candidate code and lowers and runs those
programs itself. A shape the worker sent no program for fails, and so does a shape the
worker reports an error for: its word can fail a shape, never pass one.

Both children start before the parent builds the test suite, so their start-up (Python,
JAX, the Pallas modules) overlaps it, and wait for their requests in a mailbox; each one's
wall limit counts from its delivery. The worker publishes its programs as soon as every
shape is traced (:data:`tools.sandbox.wire.PROGRAMS_FILE`) and the runner starts on them
while the worker lowers for its diagnostics and calls the candidate directly. The programs
delivered to the runner are the ones the verdict's text, audit and outputs come from, and
the ones a real device times (:attr:`RunnerOutcome.programs`).
"""

from __future__ import annotations

import random
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

import msgspec

from tools.correctness.suitedata import FrozenSuite
from tools.sandbox import policy, wire
from tools.sandbox.launcher import Limits, Mailbox, SandboxResult, run_sandboxed
from tools.verification.deadlines import PhaseLimits

RUNNER_MODULE = "tools.child.runner"
WORKER_MODULE = "tools.child.worker"
CANDIDATE_FILE = "candidate.py"
RUNNER_WALL_FACTOR = 3.0
"""The most the runner's wall limit grows for a large suite (:func:`runner_wall_s`)."""
_POLL_S = 0.02


@dataclass
class PendingChild:
    """A sandboxed child started before its request exists; it waits in its mailbox."""

    mailbox: Mailbox
    result: Future[SandboxResult]
    pool: ThreadPoolExecutor
    limits: Limits = field(default_factory=Limits)

    def deliver(self, request: bytes, *, wall_s: float | None = None) -> None:
        """Hand it its request (``wall_s``: its wall limit from now, instead of the
        launch's); a child that could not be started raises why."""
        while not self.mailbox.started(_POLL_S):
            if self.result.done():
                self.result.result()  # the launch's own error
                raise RuntimeError("the sandboxed child ended before it got its request")
        self.mailbox.deliver(request, wall_s=wall_s)

    def cancel(self) -> None:
        """End it (killed unless it got its request) and wait until its sandbox directory
        and control groups are gone, so nothing of it outlives the evaluation."""
        self.mailbox.cancel()
        self.pool.shutdown(wait=True)

    def kill(self) -> None:
        """End it even after its delivery (its answer is not wanted) and wait as above."""
        self.mailbox.kill()
        self.pool.shutdown(wait=True)


PendingRunner = PendingChild


def _start(module: str, limits: Limits, files: dict[str, bytes] | None = None) -> PendingChild:
    policy.require()  # refuses here, in the caller's thread, without the full sandbox
    mailbox = Mailbox()
    pool = ThreadPoolExecutor(1, thread_name_prefix=f"kg-{module.rsplit('.', 1)[-1]}")
    result = pool.submit(run_sandboxed, module, None, files=files, limits=limits,
                         mailbox=mailbox)
    return PendingChild(mailbox, result, pool, limits)


def start_runner(limits: Limits) -> PendingChild:
    """The runner, its CPU backstop sized for the longest wall :func:`runner_wall_s` gives."""
    return _start(RUNNER_MODULE, replace(limits, cpu_wall_s=RUNNER_WALL_FACTOR * limits.wall_s))


def runner_wall_s(request: wire.EvalRequest, wall_s: float) -> float:
    """The runner's wall limit: never below the sum of the phase limits its watchdog holds
    each phase to (each shape traced and lowered, each case run, and run again under the
    second poison), so a large suite's honest kernel, inside every phase's limit, is not
    killed by the backstop when the machine is loaded; at most `RUNNER_WALL_FACTOR` times
    the evaluation's wall limit."""
    runs = sum(len(g.cases) + (min(request.second_poison_cases, len(g.cases))
                               if request.second_poison else 0) for g in request.groups)
    phases = len(request.groups) * request.trace_limit_s + runs * request.case_limit_s
    return min(max(wall_s, phases), RUNNER_WALL_FACTOR * wall_s)


def start_worker(candidate: bytes, limits: Limits) -> PendingChild:
    """The worker, with the candidate's text in its directory (as ``candidate.py``)."""
    return _start(WORKER_MODULE, limits, {CANDIDATE_FILE: candidate})


def wait_for_programs(worker: PendingChild, max_bytes: int) -> dict[int, bytes] | None:
    """The programs the worker published, as soon as they appear; None when it finished
    (or died) without publishing readable ones: then its result carries them or nothing."""
    while True:
        finished = worker.result.done()
        data = worker.mailbox.read(wire.PROGRAMS_FILE, max_bytes)
        if data is not None:
            try:
                return dict(wire.decode(data, wire.TracedPrograms).programs)
            except msgspec.DecodeError:
                return None
        if finished:
            return None
        time.sleep(_POLL_S)


def deliver_programs(runner: PendingChild, request: wire.EvalRequest,
                     programs: dict[int, bytes], *, run_cases: bool = True) -> str:
    """Hand the runner its programs; why not, in words ("" when delivered). Nothing to run
    ends it. ``run_cases`` off: it lowers them only (the compile check)."""
    if not programs:
        runner.cancel()
        return ""
    run = wire.RunRequest(request=msgspec.structs.replace(
        request, candidate_file="", send_programs=False, run_cases=run_cases),
        programs=programs)
    try:
        runner.deliver(wire.encode(run), wall_s=runner_wall_s(request, runner.limits.wall_s))
    except Exception as exc:  # it never started, or died before taking the request
        runner.cancel()
        return f"the runner could not be given its programs ({exc})"
    return ""


@dataclass
class RunnerOutcome:
    response: wire.EvalResponse  # the worker's facts, with the runner's groups
    box: SandboxResult | None  # None when there was nothing to run
    problem: str = ""  # why the runner gave no usable answer (fails the candidate)
    programs: dict[int, bytes] = field(default_factory=dict)  # what the runner was given
    cpu_s: dict[str, float] = field(default_factory=dict)  # each child's own CPU seconds


def worker_programs(worker: wire.EvalResponse) -> dict[int, bytes]:
    """The programs of the worker's final report (when it published none before)."""
    return {g.shape_index: g.program for g in worker.groups if g.program and not g.trace_error}


def run_programs(worker: wire.EvalResponse, request: wire.EvalRequest,
                 runner: PendingChild, run: WorkerRun | None = None, *,
                 run_cases: bool = True) -> RunnerOutcome:
    """Run the worker's programs in the runner (``run``: the worker's sandbox, with the
    programs already delivered when it published them) and merge: only the worker's errors
    and diagnostics, never its lowered text or outputs, survive into the judged groups.
    ``run_cases`` off: the runner lowers them and runs no case."""
    sent, problem = (run.sent, run.problem) if run is not None else (None, "")
    if sent is None:
        sent = worker_programs(worker)
        problem = deliver_programs(runner, request, sent, run_cases=run_cases)
    box = None
    ran: dict[int, wire.GroupResult] = {}
    check_seconds = dict(worker.check_seconds)
    usable = {g.shape_index for g in worker.groups if not g.trace_error} & sent.keys()
    if sent and not problem and not usable:  # every shape already failed: nothing to wait for
        runner.kill()
    elif sent and not problem:
        box = runner.result.result()
        runner.pool.shutdown(wait=False)
        if not box.ok:
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
        index = group.shape_index
        if group.trace_error or index not in sent:
            groups.append(wire.GroupResult(
                index, trace_error=group.trace_error or "the worker sent no program for this "
                "shape", diagnostics=group.diagnostics))
        elif index in ran:
            runner_group = ran[index]
            groups.append(msgspec.structs.replace(
                runner_group, diagnostics=group.diagnostics + runner_group.diagnostics))
        else:
            groups.append(wire.GroupResult(
                index, trace_error=problem or "the runner returned no result for this shape",
                diagnostics=group.diagnostics))
    merged = msgspec.structs.replace(worker, groups=tuple(groups), check_seconds=check_seconds)
    cpu = {name: child.cpu_s for name, child in (("worker_cpu_s", run and run.box),
                                                  ("runner_cpu_s", box))
           if child is not None and child.cpu_s is not None}
    return RunnerOutcome(merged, box, problem, dict(sent), cpu)


def worker_request(suite: FrozenSuite, config: dict[str, Any], order_seed: int, chip: str,
                   deadlines: PhaseLimits, *, run_cases: bool = True) -> wire.EvalRequest:
    """The worker's request: the cases' inputs (never their expected outputs) by shape, the
    phase limits; it traces and sends programs, the runner runs the cases (``run_cases``
    off: nobody runs them, and the worker does not call the built callable directly)."""
    rng = random.Random(order_seed)
    by_shape: dict[int, list[wire.CaseRequest]] = {}
    for case in suite.cases:
        by_shape.setdefault(case.shape_index, []).append(
            wire.CaseRequest(case.case_id, case.inputs))
    groups = tuple(
        wire.ShapeGroup(shape_index=index, interpret_seed=rng.getrandbits(31),
                        cases=tuple(cases), statics=suite.statics_at(index))
        for index, cases in sorted(by_shape.items())
    )
    request = wire.EvalRequest(
        candidate_file=CANDIDATE_FILE, config=config, groups=groups, order_seed=order_seed,
        chip=chip, build_limit_s=deadlines.build_s, trace_limit_s=deadlines.trace_s,
        case_limit_s=deadlines.case_s, send_programs=True, run_cases=False)
    return request if run_cases else msgspec.structs.replace(request, eager_cases=0)


@dataclass
class WorkerRun:
    box: SandboxResult  # the worker's sandbox
    sent: dict[int, bytes] | None  # programs delivered to the runner before the worker ended
    problem: str  # why that delivery failed ("" when it did not)


@dataclass
class Children:
    """An evaluation's worker and runner, started together before the suite is built."""

    worker: PendingChild
    runner: PendingChild
    run_cases: bool = True  # False: the runner lowers the programs and runs no case

    @classmethod
    def start(cls, candidate: bytes, limits: Limits, *, run_cases: bool = True) -> Children:
        runner = start_runner(limits)
        try:
            worker = start_worker(candidate, limits)
        except BaseException:
            runner.kill()
            raise
        return cls(worker, runner, run_cases)

    def kill(self) -> None:
        """End both (an error in the parent) and clean up."""
        self.worker.kill()
        self.runner.kill()

    def run_worker(self, request: wire.EvalRequest, max_bytes: int) -> WorkerRun:
        """Give the worker its request, the runner the worker's programs as soon as they are
        published, and wait for the worker to end."""
        self.worker.deliver(wire.encode(request))
        sent = wait_for_programs(self.worker, max_bytes)
        problem = "" if sent is None else deliver_programs(self.runner, request, sent,
                                                           run_cases=self.run_cases)
        box = self.worker.result.result()
        self.worker.pool.shutdown(wait=False)
        return WorkerRun(box, sent, problem)
