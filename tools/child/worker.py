"""The sandboxed side of an evaluation: import, build, trace, lower and run one candidate.

Started by :func:`tools.sandbox.launcher.run_sandboxed` as ``python -I -m tools.child.worker BOX``.
It reads an :class:`~tools.sandbox.wire.EvalRequest` (inputs and settings, never expected outputs),
and writes an :class:`~tools.sandbox.wire.EvalResponse`: per shape, the StableHLO text of the TPU
lowering and, per case, the outputs of the same trace run under TPU interpret mode. The
verifier asks it only to trace (``send_programs``): each trace goes back as data and is
lowered and run by :mod:`tools.child.runner`, which never imports the candidate, so
nothing this process reports about lowered text or outputs is believed. It may be started
before its request exists (it waits for it), and it publishes the programs as soon as
every shape is traced (:data:`tools.sandbox.wire.PROGRAMS_FILE`), before it lowers them for
its own diagnostics and calls the candidate directly.

Everything the candidate could use to influence the verdict lives in the parent. What this
process can still do is notice when the candidate replaces functions the evaluation relies
on (comparison helpers, jit, lowering, hashing, the interpreter; :mod:`tools.child.guard`);
those are reported as tampering and fail the candidate.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import random
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tools import jaxprivate
from tools.child import callbacks, corecompile, interpret, programs, watchdog
from tools.child.guard import IntegrityGuard, primitives_of
from tools.inputs import statics
from tools.sandbox import wire
from tools.sandbox.launcher import REQUEST_FILE, RESULT_FILE
from tools.verification.allowlist import program_problems

CANDIDATE_FILE = "candidate.py"
_replace = os.replace  # bound before any candidate code runs
_sleep = time.sleep
_WAIT_S = 0.02

def _diagnose(exc: BaseException, source: Path, phase: str) -> list[wire.Diagnostic]:
    """Structured diagnostics: the toolchain's when available, else message + line."""
    try:
        import msgspec

        from tools.lowered.compile_check import diagnose  # the compile-check module's reading

        found = [msgspec.to_builtins(d) for d in diagnose(exc, str(source))]
        return [wire.Diagnostic(message=str(d.get("message", "")), kernel=str(d.get("kernel") or ""),
                                line=d.get("line"), hint=str(d.get("hint", "")), phase=phase)
                for d in found]
    except Exception:  # the module is absent or could not read this exception
        pass
    line = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if Path(frame.filename).name == source.name:
            line = frame.lineno
    return [wire.Diagnostic(message=_one_line(exc), line=line, phase=phase)]


def _one_line(exc: BaseException) -> str:
    """The first line and, for wrapped errors (a callback's traceback), the last one too."""
    lines = [ln.strip() for ln in f"{type(exc).__name__}: {exc}".splitlines() if ln.strip()]
    if len(lines) > 1 and lines[-1] != lines[0]:
        return f"{lines[0]} ... {lines[-1]}"[:2000]
    return lines[0][:2000]


def _lower(traced: Any, platform: str, chip: str) -> str:
    if platform == "tpu":
        try:
            from tools.lowered.compile_check import lower_for_tpu
        except ImportError:
            pass
        else:
            return lower_for_tpu(traced, chip=chip)
    return traced.lower(lowering_platforms=(platform,)).as_text()


def run_case(
    fn: Any, case: wire.CaseRequest, races: interpret.RaceLog
) -> wire.CaseResult:
    import jax.numpy as jnp

    started = time.perf_counter()
    host = [a.numpy().copy() for a in case.inputs]
    before = wire.hash_arrays(host)
    device = [jnp.asarray(a) for a in host]
    mark = races.mark()
    try:
        outputs = [np.asarray(o) for o in fn(*device)]
    except Exception as exc:
        interpret.reset_after_failure()
        return wire.CaseResult(case_id=case.case_id, inputs_sha256_before=before,
                               error=_one_line(exc), seconds=time.perf_counter() - started)
    after_device = wire.hash_arrays([np.asarray(d) for d in device])
    after_host = wire.hash_arrays(host)
    return wire.CaseResult(
        case_id=case.case_id,
        outputs=wire.wire_arrays(outputs),
        inputs_sha256_before=before,
        inputs_sha256_after=after_device if after_device != before else after_host,
        races_detected=races.races_since(mark),
        seconds=time.perf_counter() - started,
        visits=races.visits_since(mark),
    )


@dataclass
class Traced:
    """One shape's trace (and, when the runner wants it, the trace as data)."""

    traced: Any
    seconds: float
    program: bytes = b""
    unsendable: str = ""  # why the trace cannot be sent (fails the shape after the checks)


def trace_group(kernel: Any, group: wire.ShapeGroup, request: wire.EvalRequest,
                source: Path) -> Traced | wire.GroupResult:
    """Trace ``kernel`` at the group's input shapes under the trace limit (and encode the
    trace when ``send_programs``); a group result naming the failure when it cannot be
    traced."""
    import jax

    first = group.cases[0].inputs
    specs = [jax.ShapeDtypeStruct(a.shape, wire.numpy_dtype(a.dtype)) for a in first]
    started = time.perf_counter()
    try:
        with _trace_limit(request, group):
            traced = jax.jit(with_statics(kernel, group)).trace(*specs)
    except Exception as exc:
        return wire.GroupResult(group.shape_index, trace_error=_one_line(exc),
                                diagnostics=tuple(_diagnose(exc, source, "trace")),
                                trace_seconds=time.perf_counter() - started)
    seconds = time.perf_counter() - started
    if request.send_programs:  # for the runner, which lowers and runs it without the candidate
        try:
            return Traced(traced, seconds, programs.encode(traced.jaxpr))
        except programs.ProgramError as exc:
            return Traced(traced, seconds,
                          unsendable=f"the traced program cannot be sent to the runner: {exc}")
    return Traced(traced, seconds)


def with_statics(kernel: Any, group: wire.ShapeGroup) -> Any:
    """The kernel as a function of the group's arrays: its static arguments (plain scalars,
    checked by the wire's decoding) put back at their positions, as the reference gets them."""
    return statics.bind(kernel, [(s.position, s.value) for s in group.statics])


def _trace_limit(request: wire.EvalRequest,
                 group: wire.ShapeGroup) -> contextlib.AbstractContextManager[None]:
    limit = request.trace_limit_s
    return watchdog.phase(limit, f"tracing and lowering shape {group.shape_index} did not "
                                 f"finish within its time limit of {limit:g} s")


def run_group(
    kernel: Any, group: wire.ShapeGroup, request: wire.EvalRequest, source: Path,
    races: interpret.RaceLog, rng: random.Random, guard: IntegrityGuard,
    tampering: list[str], check_seconds: dict[str, float], done: Traced | None = None,
) -> wire.GroupResult:
    """Trace (unless ``done`` holds the trace), lower, check and, with ``run_cases``, run one
    shape's cases under interpret mode."""
    if done is None:
        found = trace_group(kernel, group, request, source)
        if isinstance(found, wire.GroupResult):
            return found
        done = found
    traced, program, traced_at = done.traced, done.program, time.perf_counter()
    try:
        with _trace_limit(request, group):
            text = _lower(traced, request.lowering_platform, request.chip)
    except Exception as exc:
        return wire.GroupResult(group.shape_index, trace_error=_one_line(exc),
                                diagnostics=tuple(_diagnose(exc, source, "lower")),
                                trace_seconds=done.seconds,
                                lower_seconds=time.perf_counter() - traced_at)
    lowered_at = time.perf_counter()
    _note(tampering, guard)
    for name in guard.new_primitives(primitives_of(traced.jaxpr)):
        if name not in tampering:
            tampering.append(name)
    n_pallas = interpret.count_pallas_calls(traced.jaxpr)
    problems = tuple(program_problems(traced.jaxpr))
    if done.unsendable:  # after the checks above: a candidate's own primitive is named there
        return wire.GroupResult(group.shape_index, trace_error=done.unsendable,
                                diagnostics=(wire.Diagnostic(done.unsendable, phase="trace"),),
                                trace_seconds=done.seconds)
    cases: list[wire.CaseResult] = []
    if request.run_cases:
        # Two simulated cores split the parallel grid between threads (the race detector
        # then sees cross-core conflicts) but cost about a second per call; one case of the
        # repeat shape (the tuning point's, unless it runs once) gets them where a parallel
        # grid dimension gives the second core work, every case gets NaN-poisoned memory
        # and a randomised grid order.
        multicore = request.multicore_cases if (
            group.shape_index == repeat_shape(request)
            and interpret.splits_across_cores(traced.jaxpr)) else 0
        runners: dict[int, Any] = {}
        order = list(group.cases)
        rng.shuffle(order)
        for position, case in enumerate(order):
            cores = request.num_cores if position < multicore else 1
            if cores not in runners:
                settings = interpret.InterpretSettings(
                    uninitialized_memory=request.uninitialized_memory,
                    detect_races=request.detect_races,
                    random_seed=group.interpret_seed,
                    num_cores=cores,
                )
                try:
                    runners[cores] = interpret.interpreted(traced.jaxpr, settings)
                except interpret.UnsupportedProgram as exc:
                    return wire.GroupResult(
                        group.shape_index, stablehlo=text, pallas_calls_in_trace=n_pallas,
                        program_problems=problems, trace_error=str(exc),
                        diagnostics=(wire.Diagnostic(str(exc), phase="run"),))
            with _case_limit(request, case.case_id):
                cases.append(run_case(runners[cores], case, races))
            _note(tampering, guard)
        poisoned_at = time.perf_counter()
        cases = with_second_poison(traced.jaxpr, group, request, order, cases)
        check_seconds["second_poison_s"] = (check_seconds.get("second_poison_s", 0.0)
                                            + time.perf_counter() - poisoned_at)
        _note(tampering, guard)
    return wire.GroupResult(
        shape_index=group.shape_index,
        stablehlo=text,
        pallas_calls_in_trace=n_pallas,
        program_problems=problems,
        program=program,
        cases=tuple(sorted(cases, key=lambda c: c.case_id)),
        trace_seconds=done.seconds,
        lower_seconds=lowered_at - traced_at,
    )


def with_second_poison(jaxpr: Any, group: wire.ShapeGroup, request: wire.EvalRequest,
                       order: list[wire.CaseRequest],
                       cases: list[wire.CaseResult]) -> list[wire.CaseResult]:
    """Run the last cases of the shuffled order again with memory never written holding a
    huge finite value instead of NaN (one core, same grid order) and attach the hash of
    those outputs: the parent requires it to equal the hash of the NaN-poisoned outputs."""
    import jax.numpy as jnp
    import msgspec

    chosen = {c.case_id: c for c in order[len(order) - request.second_poison_cases:]}
    if not request.second_poison or request.second_poison_cases <= 0 or not chosen:
        return cases
    if group.shape_index not in _second_poison_shapes(request):
        return cases
    settings = interpret.InterpretSettings(
        uninitialized_memory=request.second_poison, detect_races=False,
        random_seed=group.interpret_seed, num_cores=1)
    runner = interpret.interpreted(jaxpr, settings)
    checked = []
    for result in cases:
        case = chosen.get(result.case_id)
        if case is not None and not result.error:
            try:
                with _case_limit(request, f"{case.case_id} (second poison)"):
                    inputs = [jnp.asarray(a.numpy()) for a in case.inputs]
                    outputs = [np.asarray(o) for o in runner(*inputs)]
                digest = wire.hash_arrays(outputs)
            except Exception as exc:  # a kernel that fails only under this poison fails
                interpret.reset_after_failure()
                digest = f"raised {_one_line(exc)}"
            result = msgspec.structs.replace(result, second_poison_sha256=digest)
        checked.append(result)
    return checked


def _second_poison_shapes(request: wire.EvalRequest) -> set[int]:
    """The last shape only (the derived unaligned one when the task got one, whose partial
    blocks also read padding): each poison compiles the program again, and an
    uninitialised read shows at any shape."""
    indices = [g.shape_index for g in request.groups]
    return {max(indices)} if indices else set()


def repeat_shape(request: wire.EvalRequest) -> int:
    """The shape whose cases repeat it with other inputs, where two simulated cores and the
    direct calls go: the tuning point, unless the suite runs it once (a large one,
    :func:`tools.correctness.testsuite.repeat_shape`); then the shape with the most cases,
    which leaves the tuning case on one core for the cost model's cross-check."""
    sizes = {g.shape_index: len(g.cases) for g in request.groups}
    if sizes.get(0, 0) != 1:
        return 0
    return max(sizes, key=lambda i: (sizes[i], -i))


def run_eager(kernel: Any, request: wire.EvalRequest,
              races: interpret.RaceLog) -> tuple[wire.CaseResult, ...]:
    """Call the built callable directly, outside any trace of ours, on the first cases of
    :func:`repeat_shape` (different inputs) under TPU interpret mode: Python state it keeps
    across calls (results cached by shape) is invisible in the one trace per shape and
    shows here."""
    import jax
    from jax.experimental.pallas import tpu as pltpu

    group = next((g for g in request.groups if g.shape_index == repeat_shape(request)), None)
    if group is None or request.eager_cases <= 0:
        return ()
    params = interpret.InterpretSettings(
        uninitialized_memory=request.uninitialized_memory, detect_races=False,
        random_seed=group.interpret_seed, num_cores=1).params()
    bound = with_statics(kernel, group)

    def called(*args: Any) -> list[Any]:
        with pltpu.force_tpu_interpret_mode(params):
            return jax.tree.leaves(bound(*args))

    results = []
    for case in group.cases[: request.eager_cases]:
        with _case_limit(request, f"{case.case_id} (called directly)"):
            results.append(run_case(called, case, races))
    return tuple(results)


def _case_limit(request: wire.EvalRequest,
                what: str) -> contextlib.AbstractContextManager[None]:
    limit = request.case_limit_s
    return watchdog.phase(limit, f"case {what} did not finish within the per-case time "
                                 f"limit of {limit:g} s")


def _note(tampering: list[str], guard: IntegrityGuard) -> None:
    for name in guard.changed():
        if name not in tampering:
            tampering.append(name)


def evaluate(box: Path, request: wire.EvalRequest, *, publish: bool = True) -> wire.EvalResponse:
    import jax

    from tools.child.loader import build_in_child, load_in_child

    started = time.perf_counter()
    races = interpret.RaceLog()
    races.install()
    guard = IntegrityGuard()
    tampering: list[str] = []
    source = box / request.candidate_file
    limit = request.build_limit_s
    try:
        with watchdog.phase(limit, f"importing the candidate and build() did not return "
                                   f"within the build time limit of {limit:g} s"):
            module = load_in_child(source)
            _note(tampering, guard)
            kernel = build_in_child(module, dict(request.config))
            _note(tampering, guard)
    except BaseException as exc:  # SystemExit and KeyboardInterrupt from candidate code too
        _note(tampering, guard)
        return wire.EvalResponse(load_error=_one_line(exc),
                                 diagnostics=tuple(_diagnose(exc, source, "build")),
                                 tampering=tuple(tampering), jax_version=jax.__version__,
                                 seconds=time.perf_counter() - started)
    rng = random.Random(request.order_seed)
    groups = list(request.groups)
    rng.shuffle(groups)
    results = []
    check_seconds: dict[str, float] = {}
    done: dict[int, Traced | wire.GroupResult] = {}
    if request.send_programs:  # every shape traced first: the runner starts on the programs
        for group in groups:
            try:
                done[group.shape_index] = trace_group(kernel, group, request, source)
            except BaseException as exc:
                done[group.shape_index] = wire.GroupResult(
                    group.shape_index, trace_error=_one_line(exc),
                    diagnostics=tuple(_diagnose(exc, source, "trace")))
        if publish:
            _publish_programs(box, {i: d.program for i, d in done.items()
                                    if isinstance(d, Traced) and d.program})
    for group in groups:
        found = done.get(group.shape_index)
        if isinstance(found, wire.GroupResult):
            results.append(found)
            continue
        try:
            results.append(run_group(kernel, group, request, source, races, rng, guard,
                                     tampering, check_seconds, found))
        except BaseException as exc:
            results.append(wire.GroupResult(group.shape_index, trace_error=_one_line(exc),
                                            diagnostics=tuple(_diagnose(exc, source, "run"))))
    eager: tuple[wire.CaseResult, ...] = ()
    if request.run_cases or request.send_programs:
        eager_at = time.perf_counter()
        try:
            eager = run_eager(kernel, request, races)
        except BaseException as exc:  # reported per case: the parent fails the candidate
            eager = (wire.CaseResult(case_id="", error=_one_line(exc)),)
        check_seconds["eager_s"] = time.perf_counter() - eager_at
    _note(tampering, guard)
    return wire.EvalResponse(
        groups=tuple(sorted(results, key=lambda g: g.shape_index)),
        tampering=tuple(tampering),
        jax_version=jax.__version__,
        seconds=time.perf_counter() - started,
        eager=eager,
        check_seconds=check_seconds,
    )


def evaluate_batch(box: Path, batch: wire.EvalBatch) -> wire.BatchResponse:
    """Each lowering-only request in turn (no programs published: each response carries its
    own). One guard watches the whole batch, so what one configuration's build replaced is
    reported for it and every configuration after it."""
    import msgspec

    guard = IntegrityGuard()
    responses = []
    for request in batch.requests:
        if request.run_cases or not request.send_programs:
            responses.append(wire.EvalResponse(
                load_error="a batch serves lowering-only requests (send_programs, no cases)"))
            continue
        response = evaluate(box, request, publish=False)
        changed = [name for name in guard.changed() if name not in response.tampering]
        if changed:
            response = msgspec.structs.replace(
                response, tampering=(*response.tampering, *changed))
        responses.append(response)
    return wire.BatchResponse(tuple(responses))


def wait_for_request(box: Path) -> bytes:
    """The request, once the parent put it in the box: a child may be started before its
    request exists, so its start-up overlaps the parent's work (the suite being built)."""
    path = box / REQUEST_FILE
    while not path.exists():
        _sleep(_WAIT_S)
    return path.read_bytes()


def _publish_programs(box: Path, sent: dict[int, bytes]) -> None:
    """Put the traces where the parent looks while this process still works (whole: a
    rename), so the runner lowers and runs them while this process lowers for diagnostics
    and calls the candidate directly."""
    staging = box / f".{wire.PROGRAMS_FILE}.new"
    staging.write_bytes(wire.encode(wire.TracedPrograms(sent)))
    _replace(staging, box / wire.PROGRAMS_FILE)


def _import_all_pallas() -> None:
    """Import every Pallas module (Mosaic, SparseCore, Triton, Mosaic GPU) now, so that all of
    JAX's own lowering rules are registered before the guard's snapshot and any rule that
    appears later is the candidate's."""
    import pkgutil

    package = jaxprivate.pallas_package()
    for info in pkgutil.walk_packages(package.__path__, f"{jaxprivate.PALLAS_PACKAGE}."):
        try:
            importlib.import_module(info.name)
        except Exception:  # a backend this install lacks; its rules cannot appear later
            continue


def main(argv: list[str]) -> int:
    box = Path(argv[1])
    # Import everything the evaluation uses before any candidate code runs.
    import jax
    import jax.experimental.pallas.tpu
    import msgspec  # noqa: F401
    jaxprivate.interpret_pallas_call()
    interpret.install_second_poison()
    corecompile.install()
    callbacks.install()

    _import_all_pallas()
    programs.primitives()  # JAX's own primitives by name, before any candidate code runs

    jax.config.update("jax_platforms", "cpu")
    encode = wire.encode
    data = wait_for_request(box)
    (box / REQUEST_FILE).unlink()  # not left lying around for the candidate to read
    watchdog.install(box / RESULT_FILE)
    if wire.is_batch(data):
        response: Any = evaluate_batch(box, wire.decode(data, wire.EvalBatch))
    else:
        response = evaluate(box, wire.decode(data, wire.EvalRequest))
    (box / RESULT_FILE).write_bytes(encode(response))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
