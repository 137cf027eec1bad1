"""Whom the verifier believes: the worker's word can fail a shape, never pass one; what the
runner lowered, audited and ran comes from the runner alone; and a real device times the
program that was audited, rebuilt without the candidate's code."""

from __future__ import annotations

import hashlib
import importlib.util
import subprocess
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import jax
import jax.numpy as jnp
import msgspec
import pytest

from tools.child import loader, programs, timing
from tools.correctness.testsuite import build_suite
from tools.inputs.tasks import load_task
from tools.lowered.audit import audit_text
from tools.lowered.compile_check import lower_for_tpu
from tools.performance import executors
from tools.performance.executors import Measurement, RealExecutor
from tools.sandbox import wire
from tools.sandbox.launcher import Limits, Mailbox, SandboxResult
from tools.verification.receipts import check_receipt
from tools.verification.runner import PendingChild, WorkerRun, run_programs
from tools.verification.verify import evaluate

ROOT = Path(__file__).resolve().parent.parent
TASK = ROOT / "tests" / "evaltasks" / "rmsnorm_small.py"
LIMITS = Limits(wall_s=120.0)


def _box(answer: wire.EvalResponse, cpu_s: float) -> SandboxResult:
    return SandboxResult(returncode=0, timed_out=False, result=wire.encode(answer),
                         stdout_tail="", stderr_tail="", wall_s=1.0, limits=LIMITS, cpu_s=cpu_s)


def _answered(answer: wire.EvalResponse) -> PendingChild:
    """A runner that has already answered (its sandbox ran; only its result is read)."""
    done: Future[SandboxResult] = Future()
    done.set_result(_box(answer, 2.0))
    return PendingChild(Mailbox(), done, ThreadPoolExecutor(1))


def test_the_runner_speaks_for_lowering_and_outputs_only_and_the_worker_fails_only() -> None:
    case = wire.CaseResult("c", outputs=wire.wire_arrays([jnp.ones((2, 2))]))
    worker = wire.EvalResponse(
        groups=(wire.GroupResult(0, stablehlo="the worker's text", program=b"p0",
                                 cases=(case,)),
                wire.GroupResult(1, trace_error="lowering failed in the worker"),
                wire.GroupResult(2, stablehlo="traced, never sent")),
        tampering=("numpy.allclose",), eager=(wire.CaseResult("c", error="cached"),))
    runner = wire.EvalResponse(
        groups=(wire.GroupResult(0, stablehlo="the runner's text"),
                wire.GroupResult(1, stablehlo="the runner lowered it"),
                wire.GroupResult(2, stablehlo="not asked for")),
        load_error="", tampering=(), eager=(wire.CaseResult("c"),))
    sent = {0: b"p0", 1: b"p1"}
    request = wire.EvalRequest(candidate_file="candidate.py", config={}, groups=(),
                               order_seed=0)
    outcome = run_programs(worker, request, _answered(runner),
                           WorkerRun(_box(worker, 1.0), sent, problem=""))
    merged = {g.shape_index: g for g in outcome.response.groups}
    assert merged[0].stablehlo == "the runner's text" and not merged[0].cases
    assert merged[1].trace_error == "lowering failed in the worker"
    assert merged[2].trace_error == "the worker sent no program for this shape"
    assert outcome.response.tampering == ("numpy.allclose",)
    assert outcome.response.eager == worker.eager  # the direct calls are the worker's
    assert outcome.programs == sent and not outcome.problem
    assert outcome.cpu_s == {"worker_cpu_s": 1.0, "runner_cpu_s": 2.0}


def test_programs_are_read_from_the_box_only_as_plain_files(tmp_path: Path) -> None:
    mailbox = Mailbox()
    assert mailbox.read(wire.PROGRAMS_FILE, 1 << 20) is None  # no child yet
    proc = subprocess.Popen(["true"])
    proc.wait()
    mailbox._attach(tmp_path, proc)
    (tmp_path / wire.PROGRAMS_FILE).symlink_to("/etc/passwd")
    assert mailbox.read(wire.PROGRAMS_FILE, 1 << 20) is None
    (tmp_path / wire.PROGRAMS_FILE).unlink()
    (tmp_path / wire.PROGRAMS_FILE).write_bytes(b"x" * 100)
    assert mailbox.read(wire.PROGRAMS_FILE, 50) is None  # over the cap
    assert mailbox.read(wire.PROGRAMS_FILE, 100) == b"x" * 100


def test_the_worker_publishes_its_programs_before_it_finishes(tmp_path: Path) -> None:
    """Every shape's program is in the box as soon as all are traced (the runner starts on
    them), and they are the programs the worker's final report carries."""
    from tools.child import worker

    (tmp_path / "candidate.py").write_bytes((ROOT / "kernels" / "gelu.py").read_bytes())
    x = wire.WireArray("float32", (64, 128), b"")
    groups = tuple(wire.ShapeGroup(i, 0, (wire.CaseRequest(f"c{i}", (x,)),)) for i in (0, 1))
    request = wire.EvalRequest(candidate_file="candidate.py", config={}, groups=groups,
                               order_seed=3, send_programs=True, run_cases=False,
                               eager_cases=0)
    response = worker.evaluate(tmp_path, request)
    published = wire.decode((tmp_path / wire.PROGRAMS_FILE).read_bytes(),
                            wire.TracedPrograms).programs
    assert published == {g.shape_index: g.program for g in response.groups}
    assert set(published) == {0, 1} and all(published.values())


def test_a_mailbox_childs_wall_limit_counts_from_its_delivery() -> None:
    mailbox = Mailbox(wait_s=600.0)
    assert mailbox.deadline(100.0, 5.0) == 700.0  # waiting for its request
    mailbox.delivered_at = 400.0
    assert mailbox.deadline(100.0, 5.0) == 405.0
    mailbox.delivered_wall_s = 50.0  # a delivery that set its own wall limit
    assert mailbox.deadline(100.0, 5.0) == 450.0


def test_the_runners_wall_limit_covers_its_phases_on_a_large_suite() -> None:
    """The backstop is never below the phase limits summed (each shape traced, each case run,
    once more under the second poison), and grows at most RUNNER_WALL_FACTOR-fold."""
    from tools.verification.runner import RUNNER_WALL_FACTOR, runner_wall_s

    def request(cases_per_shape: tuple[int, ...], case_s: float) -> wire.EvalRequest:
        groups = tuple(wire.ShapeGroup(i, 0, tuple(wire.CaseRequest(f"{i}-{c}", ())
                                                   for c in range(n)))
                       for i, n in enumerate(cases_per_shape))
        return wire.EvalRequest("candidate.py", {}, groups, 0, trace_limit_s=30.0,
                                case_limit_s=case_s)

    assert runner_wall_s(request((2, 1), 30.0), 300.0) == 300.0  # small: the launch's
    # 7 cases + 2 second-poison runs at 40 s, 2 shapes at 30 s
    assert runner_wall_s(request((5, 2), 40.0), 300.0) == 2 * 30.0 + 9 * 40.0
    assert runner_wall_s(request((50,), 100.0), 300.0) == RUNNER_WALL_FACTOR * 300.0
    unpoisoned = msgspec.structs.replace(request((5, 2), 40.0), second_poison="")
    assert runner_wall_s(unpoisoned, 300.0) == 2 * 30.0 + 7 * 40.0


@pytest.fixture(autouse=True)
def _primitive_names_as_in_the_children() -> None:
    """Every Pallas module imported and the primitive names rebuilt, as the children do on
    start: a table cached earlier in this process could name a primitive differently."""
    from tools.child import worker

    worker._import_all_pallas()
    programs.primitives.cache_clear()
    programs._keys.cache_clear()


def _traced(path: Path, shape: tuple[int, int]):
    spec = importlib.util.spec_from_file_location(f"kg_test_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    x = jax.ShapeDtypeStruct(shape, jnp.float32)
    w = jax.ShapeDtypeStruct(shape[1:], jnp.float32)
    return jax.jit(module.build()).trace(x, w), (x, w)


def test_the_timing_child_rebuilds_the_audited_program_without_candidate_code(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    traced, specs = _traced(ROOT / "kernels" / "rmsnorm.py", (256, 512))
    data = programs.encode(traced.jaxpr)

    def refuse(*_args, **_kwargs):
        raise AssertionError("the timing child loaded candidate code")

    monkeypatch.setattr(loader, "load_in_child", refuse)
    monkeypatch.setattr(loader, "build_in_child", refuse)
    before = set(sys.modules)
    timed = jax.jit(timing.program_function(data)).trace(*specs)
    audited, rebuilt = audit_text(lower_for_tpu(traced)), audit_text(lower_for_tpu(timed))
    assert audited.ok and rebuilt.ok and audited.kernel_summaries == rebuilt.kernel_summaries
    assert not {m for m in set(sys.modules) - before if "candidate" in m}


class _Device(RealExecutor):
    """The real executor with the device's timing child replaced by a record of what it was
    handed: this machine has no device; what reaches the child is what is under test."""

    def __init__(self, ran: str | None = None) -> None:
        super().__init__("tpu")
        self.timed: list[bytes] = []
        self.ran = ran

    def require_available(self) -> None:
        pass

    def time_candidate(self, *_args, **_kwargs) -> Measurement:
        raise AssertionError("a verified candidate was timed from its source")

    def _time(self, task_path, request, files, wall_s) -> Measurement:
        assert not files and not request.candidate_path  # no candidate file reaches it
        self.timed.append(request.program)
        ran = self.ran or hashlib.sha256(request.program).hexdigest()
        return Measurement("tpu", "real", 1e-4, 2e-4, 2.0, {"program_sha256": ran})


def test_a_device_measurement_of_another_program_is_invalid() -> None:
    device = _Device(ran="0" * 64)
    measured = device.time_program(TASK, b"the audited program")
    assert not measured.valid and "not the one that was audited" in measured.reasons[-1]
    assert _Device().time_program(TASK, b"the audited program").valid


@pytest.mark.slow
def test_a_device_times_the_program_the_runner_audited(monkeypatch: pytest.MonkeyPatch) -> None:
    """A candidate that would build a copy kernel on an accelerator: the device is handed
    the audited CPU trace, so its copy branch never runs and the receipt names the program."""
    device = _Device()
    monkeypatch.setattr(executors, "get_executor", lambda target: device)
    task = load_task(TASK)
    candidate = ROOT / "tests" / "candidates" / "device_switch.py"
    verdict = evaluate(TASK, candidate, target="tpu", suite=build_suite(task, seeds=(0,)),
                       limits=LIMITS)
    assert verdict.verdict == "pass", verdict.reasons
    (program,) = device.timed
    sha = hashlib.sha256(program).hexdigest()
    assert verdict.receipt["programs"]["0"] == sha
    assert verdict.receipt["measurement"]["program_sha256"] == sha
    assert check_receipt(verdict.receipt).ok
    honest, specs = _traced(candidate, task.shapes[0])
    timed = jax.jit(timing.program_function(program)).trace(*specs)
    assert audit_text(lower_for_tpu(timed)).kernel_summaries == verdict.audit.kernel_summaries
    assert msgspec.to_builtins(verdict.audit.kernel_summaries) == msgspec.to_builtins(
        audit_text(lower_for_tpu(honest)).kernel_summaries)


def test_a_child_that_cannot_be_started_says_why_at_delivery() -> None:
    failed: Future[SandboxResult] = Future()  # its launch raised; no process ever existed
    failed.set_exception(OSError("no such interpreter"))
    broken = PendingChild(Mailbox(), failed, ThreadPoolExecutor(1))
    with pytest.raises(OSError, match="no such interpreter"):
        broken.deliver(b"request")
