"""`estimate`: a candidate's simulated latency from its lowering alone, never verified.

For pruning configurations before the test suite runs (the planner, the autotuner, a
person at the command line): the candidate is traced in the sandboxed worker and its
program lowered for TPU in the sandboxed runner (as the verifier does), with abstract inputs (shape and dtype only, from `jax.eval_shape` of the task's
input maker), so an 8192^3 configuration costs a lowering and the cost model, not a run.
Scalar-prefetch operands are the exception: integer inputs of modest size are made for
real (seed 0; only those outputs of the input maker are computed) and the model evaluates
index maps and conditions on them. The verifier's compile check (`check_lowered`: the VMEM
budget of blocks, scratch and body values, and SMEM) runs on the lowering, and a candidate
that fails it is refused with its diagnostics, never priced. No correctness check runs: the
figure is an unverified, simulated estimate, and says so.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from kernelgraph.errors import KernelgraphError
from tools.performance.compiled_compute import ProgramSides
from tools.performance.executors import SIM_TARGETS, UnknownTarget

# Integer inputs up to this many elements are made concretely (candidate scalar prefetch).
MAX_CONCRETE_ELEMENTS = 1 << 20
NOTE = ("unverified, simulated estimate: lowering and the cost model only, no correctness "
        "run; abstract inputs except integer (scalar-prefetch) operands")


class EstimateError(KernelgraphError, RuntimeError):
    """The candidate could not be lowered (or read) for an estimate; the message says why."""


class KernelBreakdown(msgspec.Struct, frozen=True):
    name: str
    bound: str
    bytes: int
    flops: int
    steps: int
    latency_s: float
    unsound: list[str] = []
    caveats: list[str] = []


class Estimate(msgspec.Struct, frozen=True):
    latency_s: float
    baseline_s: float
    speedup: float
    measured_on: str  # always "simulated"
    sound: bool
    verified: bool  # always False: nothing was checked for correctness
    breakdown: list[KernelBreakdown]
    target: str
    task: str
    candidate: str
    config: dict[str, Any]
    shape_index: int
    shape: str
    outside_ops_s: float
    reasons: list[str]  # why the estimate is unsound, when it is
    note: str = NOTE
    # how the ops around the kernels were priced (roofline.ProgramEstimate)
    outside_priced_from: str = ""
    wall_s: float = 0.0
    compile_check: str = "emulated compile check"  # or the TPU compiler that judged it
    # XLA:TPU's optimised program priced per op (tools/performance/xla_tpu.py), where it was
    # compiled; None without libtpu (or with beside_xla_tpu=False)
    baseline_xla_tpu: dict[str, Any] | None = None
    # which program baseline_s is priced from (tools/performance/simbaseline.py) and, for a
    # fallback to the host program, why
    baseline_priced_from: str = ""
    baseline_method: str = ""
    baseline_host_s: float | None = None  # the host program priced by the model, beside
    program_sha256: str = ""
    """The sha256 of the lowered program: two configurations with the same one have one price."""
    # Per kernel, the TPU compiler's static compute (cycles, seconds at the chip's clock)
    # beside the model's compute and memory, and what bounds each step under each
    # (tools/performance/compiled_compute.py); latency_s stays the model's
    compute_sides: ProgramSides | None = None


def load_task_quickly(path: str | Path) -> Any:
    """The task without validation or the derived unaligned shape (which would make every
    shape's inputs for real: seconds at full size); its declared shapes keep their indices."""
    import hashlib

    from tools.inputs import tasks
    from tools.inputs.files import read_python_source

    try:
        source, _ = read_python_source(Path(path), tasks.TaskError)
        sha = hashlib.sha256(source).hexdigest()
        return tasks._from_module(Path(path), sha, tasks._import(Path(path), sha), None)
    except AttributeError:  # the loader changed shape: the full one still works
        return tasks.load_task(path, validate=False)


def task_arguments(task: Any, shape_index: int) -> tuple[list[Any], list[Any]]:
    """(abstract inputs, concrete-or-None per input) for one shape of a trusted task."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    make = functools.partial(task.make_inputs, 0, shape_index)
    abstract = list(jax.eval_shape(make))
    wanted = [i for i, a in enumerate(abstract)
              if jnp.issubdtype(a.dtype, jnp.integer) and a.size <= MAX_CONCRETE_ELEMENTS]
    concrete: list[Any] = [None] * len(abstract)
    if wanted:
        made = jax.jit(lambda: [make()[i] for i in wanted])()  # the rest is never computed
        for i, value in zip(wanted, made, strict=True):
            concrete[i] = np.asarray(value)
    return abstract, concrete


def _lowering_request(config: dict[str, Any], abstract: list[Any], chip: str,
                      shape_index: int, statics: Sequence[tuple[int, Any]]) -> Any:
    import numpy as np

    from tools.sandbox import wire

    shapes = tuple(wire.WireArray(np.dtype(a.dtype).name, tuple(a.shape), b"") for a in abstract)
    return wire.EvalRequest(
        candidate_file="candidate.py", config=dict(config),
        groups=(wire.ShapeGroup(shape_index, 0, (wire.CaseRequest("abstract", shapes),),
                                tuple(wire.StaticArg(p, v) for p, v in statics)),),
        order_seed=0, chip=chip, run_cases=False, send_programs=True,
    )


def _run_request(request: Any, shape_index: int, program: bytes) -> Any:
    from tools.sandbox import wire

    return wire.RunRequest(request=msgspec.structs.replace(
        request, candidate_file="", send_programs=False, run_cases=False),
        programs={shape_index: program})


def _runner_text(answer: Any, shape_index: int) -> str:
    """The runner's lowered text for the shape, or EstimateError saying why there is none."""
    lowered = next((g for g in answer.groups if g.shape_index == shape_index), None)
    if lowered is None or lowered.trace_error or not lowered.stablehlo:
        reason = lowered.trace_error if lowered is not None else "no result"
        raise EstimateError(f"the candidate's program did not lower: {reason or 'no program'}")
    problems = list(lowered.program_problems)
    if problems:
        raise EstimateError("the candidate's program cannot be verified: " + "; ".join(problems))
    return lowered.stablehlo


def lower_in_sandbox(candidate: Path, config: dict[str, Any], abstract: list[Any], chip: str,
                     shape_index: int, limits: Any = None,
                     statics: Sequence[tuple[int, Any]] = ()) -> str:
    """The candidate's StableHLO for these input shapes (and the shape's static arguments),
    as the verifier gets it: the sandboxed worker imports and traces the candidate and sends
    the trace as data; the sandboxed runner, which never imports the candidate, rebuilds and
    lowers it."""
    from tools.sandbox import wire
    from tools.sandbox.launcher import Limits, run_sandboxed
    from tools.verification.runner import start_runner

    limits = limits or Limits(wall_s=300.0, memory_bytes=8 << 30)
    request = _lowering_request(config, abstract, chip, shape_index, statics)
    runner = start_runner(limits)  # starts up while the worker traces
    try:
        box = run_sandboxed("tools.child.worker", wire.encode(request),
                            files={"candidate.py": candidate.read_bytes()}, limits=limits)
        group = _worker_group(_worker_response(box))
        runner.mailbox.deliver(wire.encode(_run_request(request, shape_index, group.program)))
        ran = runner.result.result()
    except BaseException:
        runner.cancel()
        raise
    runner.pool.shutdown(wait=False)
    if not ran.ok:
        raise EstimateError(f"the runner {ran.failure()}")
    return _runner_text(wire.decode(ran.result or b"", wire.EvalResponse), shape_index)


def lower_many_in_sandbox(candidate: Path, configs: Sequence[dict[str, Any]],
                          abstract: list[Any], chip: str, shape_index: int,
                          statics: Sequence[tuple[int, Any]] = (),
                          ) -> list[str | EstimateError]:
    """:func:`lower_in_sandbox` for several configurations of one candidate, through one
    worker and one runner (`wire.EvalBatch`): a configuration that fails gets its own
    EstimateError in its place. When a child fails as a whole (one configuration killed
    it, or it hit a limit), each configuration is lowered again alone, so only the ones
    that fail alone fail."""
    if not configs:
        return []
    try:
        return _lower_batch(candidate, configs, abstract, chip, shape_index, statics)
    except EstimateError:
        if len(configs) == 1:
            raise
    results: list[str | EstimateError] = []
    for config in configs:
        try:
            results.append(lower_in_sandbox(candidate, config, abstract, chip, shape_index,
                                            None, statics))
        except EstimateError as exc:
            results.append(exc)
    return results


def _lower_batch(candidate: Path, configs: Sequence[dict[str, Any]], abstract: list[Any],
                 chip: str, shape_index: int, statics: Sequence[tuple[int, Any]],
                 ) -> list[str | EstimateError]:
    from tools.sandbox import wire
    from tools.sandbox.launcher import Limits, run_sandboxed
    from tools.verification.runner import start_runner

    limits = Limits(wall_s=300.0 + 60.0 * (len(configs) - 1), memory_bytes=8 << 30)
    requests = [_lowering_request(c, abstract, chip, shape_index, statics) for c in configs]
    requests = [msgspec.structs.replace(r, eager_cases=0) for r in requests]
    runner = start_runner(limits)
    try:
        box = run_sandboxed("tools.child.worker", wire.encode(wire.EvalBatch(tuple(requests))),
                            files={"candidate.py": candidate.read_bytes()}, limits=limits)
        answers = _batch_responses(box, len(requests), "the candidate's child")
        results: list[str | EstimateError] = []
        runs = []
        for request, answer in zip(requests, answers, strict=True):
            try:
                group = _worker_group(answer)
            except EstimateError as exc:
                results.append(exc)
                continue
            results.append("")  # filled from the runner's answer below
            runs.append((len(results) - 1, _run_request(request, shape_index, group.program)))
        if not runs:
            runner.cancel()
            return results
        runner.mailbox.deliver(wire.encode(wire.RunBatch(tuple(r for _, r in runs))))
        ran = runner.result.result()
    except BaseException:
        runner.cancel()
        raise
    runner.pool.shutdown(wait=False)
    lowered = _batch_responses(ran, len(runs), "the runner")
    for (index, _), answer in zip(runs, lowered, strict=True):
        try:
            results[index] = _runner_text(answer, shape_index)
        except EstimateError as exc:
            results[index] = exc
    return results


def _batch_responses(box: Any, expected: int, who: str) -> tuple[Any, ...]:
    from tools.sandbox import wire

    if not box.ok:
        raise EstimateError(f"{who} {box.failure()}: {box.stderr_tail.strip().splitlines()[-1:]}")
    try:
        responses = wire.decode(box.result or b"", wire.BatchResponse).responses
    except msgspec.DecodeError as exc:  # a time limit's single response, or a forgery
        raise EstimateError(f"{who} did not answer the batch: {exc}") from exc
    if len(responses) != expected:
        raise EstimateError(f"{who} answered {len(responses)} of {expected} configurations")
    return responses


def _worker_response(box: Any) -> Any:
    from tools.sandbox import wire

    if not box.ok:
        raise EstimateError(f"the candidate's child {box.failure()}: "
                            f"{box.stderr_tail.strip().splitlines()[-1:]}")
    return wire.decode(box.result or b"", wire.EvalResponse)


def _worker_group(response: Any) -> Any:
    if response.load_error:
        raise EstimateError(f"the candidate could not be built: {response.load_error}")
    if response.tampering:
        raise EstimateError("the candidate tampered with the child: " + ", ".join(response.tampering))
    if response.limit_hit:
        raise EstimateError(f"the candidate's child: {response.limit_hit}")
    if len(response.groups) != 1:
        raise EstimateError(f"the candidate's child answered {len(response.groups)} shapes of 1")
    (group,) = response.groups
    if group.trace_error or not group.program:
        raise EstimateError(f"the candidate did not trace: {group.trace_error or 'no program'}")
    return group


def estimate(task_path: str | Path, candidate_path: str | Path, *,
             target: str = "sim-tpu-v6e", config: dict[str, Any] | None = None,
             shape_index: int = 0, limits: Any = None, beside_xla_tpu: bool = True) -> Estimate:
    """Simulated latency and speedup of one configuration at one shape; unverified.

    The baseline is the verifier's (`simulated_baseline`, cached per task and shape in this
    process); `beside_xla_tpu=False` leaves its per-op detail out of the result, and the
    compiler's compute beside the kernels' (no bundle schedules are read)."""
    from tools.inputs.candidate import read_candidate

    started = time.perf_counter()
    chip_name = _sim_chip(target)
    task = load_task_quickly(task_path)
    source = read_candidate(candidate_path)  # static: never imported here
    full_config = source.check_config(dict(config or {}))
    abstract, concrete = task_arguments(task, shape_index)
    text = lower_in_sandbox(Path(candidate_path), full_config, abstract, chip_name, shape_index,
                            limits, task.statics_at(shape_index))
    return _priced(text, task, task_path, candidate_path, full_config, target, shape_index,
                   abstract, concrete, beside_xla_tpu, started)


class KernelsFloor(msgspec.Struct, frozen=True):
    """A configuration whose kernels alone are priced at or above the bar it had to beat:
    the ops around them only add time, so its whole price cannot beat the bar either, and it
    was not compiled for the chip (:func:`estimate_many` with ``bar_s``)."""

    config: dict[str, Any]
    program_sha256: str
    kernels_s: float


def kernels_floor_s(text: str, chip: Any, inputs: Sequence[Any]) -> float | None:
    """The cost model's price of a lowered program's kernels alone: a floor under its whole
    price, which adds the ops around them. None where a kernel is not soundly priced, or
    there is none: no floor then."""
    from tools.lowered.mosaic import parse_lowered
    from tools.performance.roofline import estimate_program

    program = estimate_program(parse_lowered(text), chip, inputs, (0.0, 0))
    if not program.kernels or any(k.unsound for k in program.kernels):
        return None
    return program.latency_s


def estimate_many(task_path: str | Path, candidate_path: str | Path,
                  configs: Sequence[dict[str, Any]], *, target: str = "sim-tpu-v6e",
                  shape_index: int = 0, bar_s: float | None = None,
                  ) -> list[Estimate | KernelsFloor | KernelgraphError | ValueError]:
    """:func:`estimate` (without the detail beside) for several configurations of one
    candidate, lowered by one worker and one runner and compiled for the chip by one
    compile child; each configuration gets its estimate or the error that refused it, in
    order. ``bar_s``: a configuration whose kernels alone are priced at or above it gets its
    :class:`KernelsFloor` instead, and is not compiled (most of a sweep's cost where the
    compiler is slow: seconds to a minute per configuration)."""
    from tools.lowered import tpu_compiler
    from tools.performance.chips import get_chip

    chip_name = _sim_chip(target)
    chip = get_chip(chip_name)
    task = load_task_quickly(task_path)
    abstract, concrete = task_arguments(task, shape_index)
    started = time.perf_counter()
    lowered: list[tuple[dict[str, Any], str | KernelsFloor | KernelgraphError | ValueError]] = []
    for full_config, text in lower_configs(task, candidate_path, configs, chip_name, shape_index):
        floor = None
        if bar_s is not None and isinstance(text, str):
            with contextlib.suppress(KernelgraphError, ValueError):  # its pricing says why
                floor = kernels_floor_s(text, chip, concrete)
        if floor is not None and bar_s is not None and floor >= bar_s:
            text = KernelsFloor(full_config, tpu_compiler.program_sha256(text), floor)
        lowered.append((full_config, text))
    tpu_compiler.Compiled([t for _, t in lowered if isinstance(t, str)], chip_name)  # cached
    out: list[Estimate | KernelsFloor | KernelgraphError | ValueError] = []
    for full_config, text in lowered:
        if not isinstance(text, str):
            out.append(text)
            continue
        try:
            out.append(_priced(text, task, task_path, candidate_path, full_config, target,
                               shape_index, abstract, concrete, False, started))
        except (KernelgraphError, ValueError) as exc:
            out.append(exc)
    return out


def lower_configs(task: Any, candidate_path: str | Path, configs: Sequence[dict[str, Any]],
                  chip_name: str, shape_index: int = 0,
                  ) -> list[tuple[dict[str, Any], str | KernelgraphError | ValueError]]:
    """Each configuration checked against the candidate's `TUNABLES` (filled in with its
    defaults) and lowered for `chip_name`, in order: (that full configuration, its lowered
    text or the error that refused it). One worker and one runner lower all that pass the
    check (`lower_many_in_sandbox`)."""
    from tools.inputs.candidate import read_candidate

    source = read_candidate(candidate_path)
    abstract, _ = task_arguments(task, shape_index)
    out: list[tuple[dict[str, Any], str | KernelgraphError | ValueError]] = []
    for config in configs:
        try:
            out.append((source.check_config(dict(config)), ""))
        except (KernelgraphError, ValueError) as exc:
            out.append((dict(config), exc))
    checked = [i for i, (_, refused) in enumerate(out) if refused == ""]
    try:
        texts: Sequence[str | KernelgraphError] = lower_many_in_sandbox(
            Path(candidate_path), [out[i][0] for i in checked], abstract, chip_name, shape_index,
            task.statics_at(shape_index))
    except KernelgraphError as exc:  # no sandbox, or the one configuration's child failed
        texts = [exc] * len(checked)
    for i, text in zip(checked, texts, strict=True):
        out[i] = (out[i][0], text)
    return out


def _sim_chip(target: str) -> str:
    if target not in SIM_TARGETS:
        raise UnknownTarget(f"estimate prices simulated targets only ({', '.join(SIM_TARGETS)}); "
                            f"got {target!r}")
    return SIM_TARGETS[target]


def _priced(text: str, task: Any, task_path: str | Path, candidate_path: str | Path,
            full_config: dict[str, Any], target: str, shape_index: int, abstract: list[Any],
            concrete: list[Any], beside_xla_tpu: bool, started: float) -> Estimate:
    """The compile check and the cost model on one lowered program."""
    import hashlib

    from tools.lowered import tpu_compiler
    from tools.lowered.mosaic import parse_lowered
    from tools.performance.chips import get_chip
    from tools.performance.roofline import estimate_program
    from tools.performance.simbaseline import simulated_baseline
    from tools.performance.xla_tpu import candidate_outside

    chip = get_chip(SIM_TARGETS[target])
    lowered = parse_lowered(text)
    # the verifier's compile check (with the bundle schedules the figures beside it read)
    check = tpu_compiler.check(text, chip=chip, program=lowered, cycles=beside_xla_tpu)
    if not check.ok:  # a kernel the chip cannot compile has no price
        raise EstimateError(f"the candidate fails the compile check on {chip.name}: "
                            + "; ".join(f"{d.message} (hint: {d.hint})" for d in check.diagnostics))
    outside = candidate_outside(text, chip, len(lowered.kernels))
    program = estimate_program(lowered, chip, concrete, None if outside is None
                               else (outside.latency_s, outside.hbm_bytes))
    sides = _sides(text, lowered, program, chip, concrete, beside_xla_tpu)
    baseline = simulated_baseline(task.reference_at(shape_index), abstract, chip,
                                  key=f"{task.source_sha256}:{shape_index}")
    reasons = [f"kernel {k.name}: {u}" for k in program.kernels for u in k.unsound]
    if not program.kernels:
        reasons.append("no pallas_call in the lowered program: nothing to simulate")
    latency = program.latency_s
    return Estimate(
        latency_s=latency, baseline_s=baseline.latency_s,
        speedup=baseline.latency_s / latency if latency > 0 else 0.0,
        measured_on="simulated", sound=not reasons, verified=False,
        breakdown=[KernelBreakdown(k.name, k.bound, k.hbm_bytes, k.flops, k.grid_steps,
                                   k.latency_s, list(k.unsound), list(k.caveats))
                   for k in program.kernels],
        target=target, task=str(task_path), candidate=str(candidate_path), config=full_config,
        shape_index=shape_index, shape=task.describe_shape(shape_index),
        outside_ops_s=program.outside_ops_s, outside_priced_from=program.outside_priced_from,
        reasons=reasons,
        wall_s=time.perf_counter() - started, compile_check=check.checker,
        baseline_xla_tpu=baseline.xla_tpu if beside_xla_tpu else None,
        baseline_priced_from=baseline.label, baseline_method=baseline.method,
        baseline_host_s=baseline.host.latency_s,
        program_sha256=hashlib.sha256(text.encode()).hexdigest(),
        compute_sides=sides,
    )


def _sides(text: str, lowered: Any, program: Any, chip: Any, inputs: Sequence[Any],
           beside: bool) -> ProgramSides:
    """Both sides of every kernel: the compiler's compute where libtpu compiles the program
    with its bundle schedules (``beside``: the figures beside the price are wanted; the
    autotuner's pricing does without them), the model's alone otherwise."""
    from tools.lowered import tpu_compiler
    from tools.performance.compiled_compute import program_sides

    compiled = None
    if beside and tpu_compiler.available():
        try:
            (compiled,) = tpu_compiler.compile_all([text], chip.name, cycles=True)
        except tpu_compiler.TpuCompilerError:  # a figure beside the price, never the verdict
            compiled = None
    return program_sides(lowered, program, chip, compiled, inputs)


__all__ = ["NOTE", "Estimate", "EstimateError", "KernelBreakdown", "KernelsFloor", "estimate",
           "estimate_many", "kernels_floor_s", "task_arguments"]
