"""The independent verifier: one candidate, one task, one target -> a verdict and a receipt.

Order of work, all decisions in this (parent) process:

1. Load the task (trusted) and read the candidate statically (never imported here).
2. Freeze the test suite (or take the one given): inputs, float64 oracle, error floor.
3. Run the candidate in two sandboxed children (:mod:`tools.verification.runner`), started
   while the suite is built: the worker imports and builds it, gets inputs only and sends
   one trace per shape as data; the runner, which never imports it, lowers that trace for
   TPU and runs it under TPU interpret mode (NaN-poisoned memory, race detection,
   randomised ``parallel`` grid order).
4. Check, from the data the children returned: the compile check and VMEM budget
   (:mod:`tools.lowered.compile_check`), the firing audit (:mod:`tools.lowered.audit`), input integrity,
   races, tampering, every case against the oracle (:mod:`tools.correctness.compare`), and patterns
   across cases (memoised results, shapes hard-coded to the tuning point).
5. Only a correct candidate is timed, by the target's executor (:mod:`tools.performance.executors`).
6. Seal a receipt (:mod:`tools.verification.receipts`) into a
   :class:`~tools.verification.verdict.Verdict`.
"""

from __future__ import annotations

import hashlib
import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from tools.correctness.compare import FLOOR_FACTOR, CaseCheck, compare_case, failed_case
from tools.correctness.testsuite import DEFAULT_SEEDS, FrozenSuite, SuiteCase, build_suite
from tools.inputs.candidate import CandidateError, CandidateSource, read_candidate
from tools.inputs.tasks import Task, load_task
from tools.lowered import tpu_compiler
from tools.lowered.audit import AuditReport, audit_text
from tools.lowered.mosaic import parse_lowered
from tools.sandbox import wire
from tools.sandbox.launcher import Limits, SandboxResult
from tools.verification import acrosscalls
from tools.verification.deadlines import PhaseLimits, suite_limits
from tools.verification.provenance import child_timings, environment
from tools.verification.receipts import RECEIPT_KIND, RECEIPT_VERSION, Checks, derive_verdict, seal
from tools.verification.runner import Children, run_programs, worker_request
from tools.verification.verdict import Verdict

DEFAULT_LIMITS = Limits(wall_s=300.0, memory_bytes=4 << 30)
LOWERED_ONLY = ("compile check only: the candidate was built, lowered, compiled and audited "
                "(and priced on a simulated target); no case ran, so nothing about its "
                "answers is known")
_MAX_CASE_REASONS = 6


def evaluate(
    task_path: str | Path,
    candidate_path: str | Path,
    *,
    config: dict[str, Any] | None = None,
    target: str = "sim-tpu-v6e",
    suite: FrozenSuite | None = None,
    limits: Limits | None = None,
    seeds: Sequence[int] = DEFAULT_SEEDS,
    order_seed: int | None = None,
    run_cases: bool = True,
) -> Verdict:
    """Verify ``candidate_path`` against ``task_path`` on ``target``.

    Raises ``TaskError`` for an unusable task, ``ValueError`` for a bad config or target,
    ``TargetUnavailable`` when a real target's device is absent. Everything wrong with the
    candidate itself is a "fail" verdict with reasons.

    ``run_cases`` off (the compile check): the candidate is built, traced, lowered, compiled
    and audited and, on a simulated target, priced, but no case runs; the verdict is a
    "fail" that says so (`LOWERED_ONLY`), never a pass, and `api.compiled` reads it.
    """
    from tools.performance.executors import chip_for_target, get_executor

    started = time.perf_counter()
    limits = limits or DEFAULT_LIMITS
    executor = get_executor(target)
    if executor.measured_on == "real":
        executor.require_available()  # type: ignore[union-attr]
    task = load_task(task_path)
    timings: dict[str, float] = {}
    try:
        source: CandidateSource | None = read_candidate(candidate_path)
    except CandidateError as exc:
        source = None
        candidate_problem = str(exc)
    full_config = source.check_config(dict(config or {})) if source else dict(config or {})
    if suite is not None and suite.task_sha256 != task.source_sha256:
        raise ValueError(f"the suite was frozen for another version of {task.path} "
                         f"(task sha256 {suite.task_sha256[:12]} != {task.source_sha256[:12]})")
    # Both children start now: their start-up overlaps the suite being built.
    children = (Children.start(source.text.encode(), limits, run_cases=run_cases)
                if source else None)
    try:
        t = time.perf_counter()
        suite = suite if suite is not None else build_suite(task, seeds=seeds)
        timings["suite_s"] = time.perf_counter() - t
    except BaseException:
        if children is not None:
            children.kill()
        raise
    order_seed = order_seed if order_seed is not None else random.SystemRandom().getrandbits(31)
    chip = chip_for_target(target)
    context = _Context(task, suite, target, chip, full_config, order_seed, limits,
                       run_cases=run_cases)
    if task.alignment_note:  # loudly: tails are not exercised for this task
        context.diagnostics.append(wire.Diagnostic(message=task.alignment_note, phase="suite"))
    if task.nonfinite_opt_out:  # as loudly: no NaN or inf (or one of them) is fed
        from tools.correctness.nonfinite import opt_out_note

        context.diagnostics.append(wire.Diagnostic(
            message=opt_out_note(task.nonfinite_opt_out), phase="suite"))
    if source is None or children is None:
        context.fail(f"candidate: {candidate_problem}")
        return context.finish(Path(candidate_path), None, timings, started)

    try:
        t = time.perf_counter()
        context.deadlines = suite_limits(task, suite, limits.wall_s)
        timings["deadlines_s"] = time.perf_counter() - t
        request = worker_request(suite, full_config, order_seed, chip, context.deadlines,
                                 run_cases=run_cases)
        t = time.perf_counter()
        worker = children.run_worker(request, limits.file_bytes)
        timings["sandbox_s"] = time.perf_counter() - t
    except BaseException:
        children.kill()
        raise
    context.sandbox = box = worker.box
    t = time.perf_counter()
    response = context.read_response(box)
    if response is not None and not response.load_error and not response.limit_hit:
        # The worker imported the candidate: of its report only the programs are run, by
        # a runner that never imports it (the lowered text and outputs come from there).
        ran = run_programs(response, request, children.runner, worker, run_cases=run_cases)
        timings["runner_s"] = time.perf_counter() - t  # after the worker: what the split adds
        timings.update(ran.cpu_s)  # each child's own CPU seconds
        response = context.response = ran.response
        context.programs = ran.programs
        if ran.problem:
            context.fail(f"candidate: {ran.problem}")
        t = time.perf_counter()
    else:
        children.runner.kill()
    if response is not None:
        try:
            context.judge(response)
        except Exception as exc:  # a well-typed but inconsistent result: fail, never crash
            problem = f"the child's result is malformed: {type(exc).__name__}: {exc}"
            context.consistency.append(problem)
            context.fail(problem)
    timings["judge_s"] = time.perf_counter() - t
    if context.worth_pricing():
        t = time.perf_counter()
        context.measure(executor)
        timings["measure_s"] = time.perf_counter() - t
    return context.finish(source.path, source, timings, started)


class _Context:
    """Accumulates the facts of one evaluation and turns them into a verdict."""

    def __init__(self, task: Task, suite: FrozenSuite, target: str, chip: str,
                 config: dict[str, Any], order_seed: int, limits: Limits, *,
                 run_cases: bool = True) -> None:
        self.task, self.suite, self.target, self.chip = task, suite, target, chip
        self.config, self.order_seed, self.limits = config, order_seed, limits
        self.run_cases = run_cases
        self.reasons: list[str] = []
        self.diagnostics: list[wire.Diagnostic] = []
        self.cases: dict[str, CaseCheck] = {}
        self.audits: dict[int, AuditReport] = {}
        self.compile_reports: dict[int, Any] = {}
        self.compiled = tpu_compiler.Compiled([], chip)  # the TPU compiler's, when installed
        self.candidate_loaded = False
        self.sandbox_ok = False
        self.tampering: tuple[str, ...] = ()
        self.inputs_unmodified = True
        self.inputs_as_sent = True
        self.races_in: list[str] = []
        self.consistency: list[str] = []  # across cases, and lowered vs run
        self.measurement: Any = None
        self.timing_error: str | None = None
        self.sandbox: SandboxResult | None = None
        self.response: wire.EvalResponse | None = None
        self.programs: dict[int, bytes] = {}  # what the runner lowered, audited and ran
        self.deadlines: PhaseLimits | None = None
        self.tuning_text = ""

    def fail(self, reason: str) -> None:
        if reason not in self.reasons:
            self.reasons.append(reason)

    # ------------------------------------------------------------------ reading the child
    def read_response(self, box: SandboxResult) -> wire.EvalResponse | None:
        if not box.ok:
            self.fail(f"candidate {box.failure()}")
            if box.stderr_tail.strip():
                last = box.stderr_tail.strip().splitlines()[-1][:300]
                self.diagnostics.append(wire.Diagnostic(message=last, phase="sandbox"))
            return None
        try:
            response = wire.decode(box.result or b"", wire.EvalResponse)
        except msgspec.DecodeError as exc:
            self.fail(f"the child's result could not be read ({exc})")
            return None
        self.sandbox_ok = True
        self.response = response
        return response

    def judge(self, response: wire.EvalResponse) -> None:
        self.diagnostics.extend(response.diagnostics)
        if response.limit_hit:  # the child's watchdog ended it; nothing else came back
            self.fail(f"candidate {response.limit_hit} (killed; the overall limit is "
                      f"{self.limits.wall_s:g} s)")
            return
        if response.tampering:
            self.tampering = response.tampering
            self.fail("candidate tampered with the evaluation process: replaced "
                      + ", ".join(response.tampering))
        if response.load_error:
            self.fail(f"candidate could not be built: {response.load_error}")
            return
        self.candidate_loaded = True
        groups = {g.shape_index: g for g in response.groups}
        self.compiled = tpu_compiler.Compiled([g.stablehlo for g in response.groups], self.chip)
        if not self.run_cases:  # lowered, compiled and audited; nothing ran to judge
            for group in response.groups:
                self._judge_group_once(group)
                if group.trace_error:
                    self.fail(f"shape {group.shape_index}: {group.trace_error}")
            return
        for case in self.suite.cases:
            group = groups.get(case.shape_index)
            if group is None:
                self.cases[case.case_id] = failed_case(case, "the child did not run this shape")
                continue
            self._judge_group_once(group)
            if group.trace_error:
                self.cases[case.case_id] = failed_case(case, group.trace_error)
                continue
            result = next((c for c in group.cases if c.case_id == case.case_id), None)
            self.cases[case.case_id] = self._judge_case(case, result)
        self._judge_eager(response.eager)
        self._cross_case()
        self._case_reasons()

    def _judge_group_once(self, group: wire.GroupResult) -> None:
        index = group.shape_index
        if index in self.audits or (group.trace_error and not group.stablehlo):
            if group.trace_error and index not in self.audits:
                self.diagnostics.extend(group.diagnostics)
                self.audits[index] = AuditReport(False, 0, {}, {}, (), ())
            return
        self.diagnostics.extend(group.diagnostics)
        if index == 0:
            self.tuning_text = group.stablehlo
        try:  # parsed once for the audit and the compile check (each reports a failure)
            program = parse_lowered(group.stablehlo)
        except Exception:
            program = None
        try:
            audit = audit_text(group.stablehlo, program=program)
        except Exception as exc:  # an unreadable program fails the candidate, not the verifier
            audit = AuditReport(False, 0, {}, {}, (), (
                f"the lowered program could not be audited: {type(exc).__name__}: {exc}",))
        self.audits[index] = audit
        for problem in audit.problems:
            self.fail(problem)
        for problem in group.program_problems:  # what runs would not be what is audited
            if problem not in self.consistency:
                self.consistency.append(problem)
            self.fail(problem)
        if audit.kernels != group.pallas_calls_in_trace and not audit.problems:
            problem = (f"the program that ran has {group.pallas_calls_in_trace} pallas_call(s) "
                       f"but the lowered one has {audit.kernels} kernel(s)")
            self.consistency.append(problem)
            self.fail(problem)
        from tools.lowered.compile_check import check_lowered

        try:
            report = self.compiled.judge(
                check_lowered(group.stablehlo, chip=self.chip, program=program), group.stablehlo)
        except Exception as exc:
            problem = (f"compile check could not read the lowered program: "
                       f"{type(exc).__name__}: {exc}")
            self.consistency.append(problem)
            self.fail(problem)
            return
        self.compile_reports[index] = report
        if not report.ok:
            for d in report.diagnostics:
                self.fail(f"compile check ({self.task.describe_shape(index)}): {d.message}")
                self.diagnostics.append(wire.Diagnostic(
                    message=d.message, kernel=d.kernel or "", line=d.line, hint=d.hint,
                    phase="compile"))

    def _judge_case(self, case: SuiteCase, result: wire.CaseResult | None) -> CaseCheck:
        if result is None:
            return failed_case(case, "the child returned no result for this case")
        if result.inputs_sha256_before and result.inputs_sha256_before != case.inputs_sha256:
            self.inputs_as_sent = False
            self.fail(f"{case.case_id}: the inputs the kernel received differ from the suite's")
        if result.error:
            return failed_case(case, result.error)
        if result.inputs_sha256_after != result.inputs_sha256_before:
            self.inputs_unmodified = False
            self.fail(f"{case.case_id}: the kernel modified its inputs")
        if result.races_detected:
            self.races_in.append(case.case_id)
            self.fail(f"{case.case_id}: the interpreter's race detector found a data race "
                      "(two grid steps or cores touch the same memory without ordering)")
        outputs = [a.numpy() for a in result.outputs]
        check = compare_case(case, outputs, self.suite.tolerance)
        if result.second_poison_sha256 and result.second_poison_sha256 != wire.hash_arrays(
            outputs
        ):
            check = msgspec.structs.replace(check, problems=(*check.problems, (
                "the outputs change when memory the kernel never wrote holds a huge finite "
                "value instead of NaN: it reads memory before writing it (a comparison or "
                "select that masks NaN hides this from NaN poisoning)")))
        return check

    def _judge_eager(self, results: Sequence[wire.CaseResult]) -> None:
        self.consistency.extend(acrosscalls.eager_problems(self.suite, self.cases, results))

    def _cross_case(self) -> None:
        self.consistency.extend(acrosscalls.memoised(self.suite, self.response))
        self.consistency.extend(acrosscalls.hard_coded_shapes(self.task, self.cases))
        for problem in self.consistency:
            self.fail(problem)

    def _case_reasons(self) -> None:
        failing = [c for c in self.cases.values() if not c.passed]
        for case in failing[:_MAX_CASE_REASONS]:
            details = [case.error] if case.error else []
            details += list(case.problems) + [p for o in case.outputs for p in o.problems]
            self.fail(f"{case.case_id} ({case.kind}): " + "; ".join(details or ["failed"]))
        if len(failing) > _MAX_CASE_REASONS:
            self.fail(f"... and {len(failing) - _MAX_CASE_REASONS} more failing case(s)")

    def all_correct(self) -> bool:
        return derive_verdict(self.checks()) == "pass"

    def worth_pricing(self) -> bool:
        """Every case passed; with no case run, built, lowered, compiled and audited with
        nothing wrong found."""
        if self.run_cases:
            return self.all_correct()
        checks = self.checks()
        return (checks.candidate_loaded and checks.sandbox_ok and checks.compile_ok
                and checks.audit_ok and not checks.tampering and not self.reasons)

    # ------------------------------------------------------------------------- timing
    def measure(self, executor: Any) -> None:
        try:
            if executor.measured_on == "real":  # what was lowered and audited is what is timed
                if not self.programs.get(0):
                    raise ValueError("no audited program of the tuning point to time")
                self.measurement = executor.time_program(self.task.path, self.programs[0])
            else:
                inputs = [a.numpy() for a in self.suite.cases[0].inputs]
                cost = executor.baseline(self.task.reference, inputs,
                                         key=f"{self.task.source_sha256}:0")
                lowered = parse_lowered(self.tuning_text)
                # Each tuning-point seed case priced on its own scalar-prefetch values.
                sources = {s for k in lowered.kernels for s in k.prefetch_sources}
                cases = [[a.numpy() if i in sources else None for i, a in enumerate(c.inputs)]
                         for c in self.suite.cases if c.shape_index == 0 and c.kind == "seed"]
                priced = executor.estimate(lowered, cost, inputs=inputs, cases=cases or None,
                                           text=self.tuning_text)
                # The program priced, hashed as `estimate` hashes it: the autotuner reuses this
                # price for the default configuration instead of lowering it once more.
                self.measurement = msgspec.structs.replace(priced, breakdown={
                    **priced.breakdown,
                    "program_sha256": hashlib.sha256(self.tuning_text.encode()).hexdigest()})
                from tools.performance.crosscheck import check_tuning_cases

                for problem in check_tuning_cases(lowered, self.suite.cases, self.response,
                                                  executor.chip):
                    self.timing_error = "the cost model disagrees with interpret mode"
                    self.fail(f"timing: the cost model disagrees with interpret mode: {problem}")
        except Exception as exc:  # fail the candidate (closed), never crash the verifier
            message = f"timing failed: {type(exc).__name__}: {exc}"
            self.timing_error = message
            self.diagnostics.append(wire.Diagnostic(message=message, phase="timing"))
            self.fail(message)
            return
        if not getattr(self.measurement, "valid", True):
            for reason in getattr(self.measurement, "reasons", []):
                self.fail(f"timing: {reason}")

    # ------------------------------------------------------------------------- verdict
    def checks(self) -> Checks:
        return Checks(
            candidate_loaded=self.candidate_loaded,
            sandbox_ok=self.sandbox_ok,
            compile_ok=bool(self.compile_reports) and all(
                r.ok for r in self.compile_reports.values()),
            audit_ok=bool(self.audits) and all(a.ok for a in self.audits.values()),
            tampering=self.tampering,
            inputs_unmodified=self.inputs_unmodified,
            inputs_as_sent=self.inputs_as_sent,
            races_in=tuple(self.races_in),
            consistency_problems=tuple(self.consistency),
            timing_valid=self.timing_error is None and (
                self.measurement is None or bool(getattr(self.measurement, "valid", True))),
            floor_factor=FLOOR_FACTOR,
            tolerance=dict(self.suite.tolerance),
            cases=tuple(self.cases[c.case_id] for c in self.suite.cases
                        if c.case_id in self.cases),
        )

    def finish(self, candidate_path: Path, source: CandidateSource | None,
               timings: dict[str, float], started: float) -> Verdict:
        if derive_verdict(self.checks()) == "pass" and self.reasons:
            self.consistency.append("a reason was recorded for a passing verdict")
        checks = self.checks()
        verdict = derive_verdict(checks)
        if verdict == "fail" and not self.reasons:
            self.fail(LOWERED_ONLY if not self.run_cases  # clean: why it is still no pass
                      else "no case passed" if not checks.cases else "a check failed")
        timings["total_s"] = time.perf_counter() - started
        if self.response is not None:
            timings.update(child_timings(self.response, self.suite, self.task.derived_shapes))
        compile_report = self.compile_reports.get(0)
        measurement = self.measurement
        body = {
            "kind": RECEIPT_KIND,
            "version": RECEIPT_VERSION,
            "verdict": verdict,
            "reasons": self.reasons,
            "task": {"name": self.task.name, "path": str(self.task.path),
                     "sha256": self.task.source_sha256, "format": self.task.format},
            "candidate": {"path": str(candidate_path),
                          "sha256": source.sha256 if source else None,
                          "config": self.config},
            "suite": {"sha256": self.suite.sha256, "cases": len(self.suite.cases),
                      "notes": list(self.suite.notes), "scales": list(self.suite.scales)},
            "target": self.target,
            "checks": checks,
            "audit": {str(k): v for k, v in self.audits.items()},
            "compile": {str(k): v for k, v in self.compile_reports.items()},
            # each shape's program as the runner got it: lowered, audited, run (a device times 0)
            "programs": {str(k): hashlib.sha256(v).hexdigest()
                         for k, v in sorted(self.programs.items())},
            "measurement": None if measurement is None else {
                "measured_on": measurement.measured_on, "speedup": measurement.speedup,
                "latency_s": measurement.latency_s, "baseline_s": measurement.baseline_s,
                "valid": getattr(measurement, "valid", True),
                "program_sha256": measurement.breakdown.get("program_sha256"),
                # which program the simulated baseline was priced from, and any fallback
                "baseline_method": measurement.breakdown.get("baseline_method")},
            "timings": timings,
            "environment": environment(
                self.response, self.sandbox, self.limits, self.deadlines,
                order_seed=self.order_seed, chip=self.chip),
        }
        receipt = seal(body)
        return Verdict(
            verdict=verdict, reasons=list(self.reasons), task=str(self.task.path),
            candidate=str(candidate_path), config=self.config, target=self.target,
            suite_sha256=self.suite.sha256, cases=list(checks.cases),
            audit=self.audits.get(0), compile_report=compile_report, measurement=measurement,
            diagnostics=self.diagnostics, timings=timings, receipt=receipt,
        )

