"""The public facade of the evaluator: the only `tools` names agents (and other layers) use.

Everything else under `tools/` is internal and may move. The calls here are blocking and
can take seconds to minutes (sandboxed children, interpret mode, suites); async callers run
them in a thread (`AgentContext.run_tool`).

- `load_task` / `task_summary`: read a task file (trusted) and describe it.
- `freeze_suite`: the frozen test suite of a task, built once and hashed; rebuilding it from
  the same task and seeds gives the same hash, which is how distributed workers share it
  without shipping tens of megabytes (`suite_from_recipe` checks the hash and fails closed).
- `evaluate`: the full verifier (compile check, correctness, firing audit, timing, receipt).
- `compile_check`: the same pipeline on the tuning case only: a cheap first look whose
  verdict is about compiling, not about correctness.
- `measure_baseline`: the XLA reference on a target (simulated: priced from XLA:TPU's program
  or the host's, labelled; or timed on the device).
- `profile`: the profile summary of a passing verdict's measurement.
- `autotune`: sweep a candidate's TUNABLES (one full evaluation per configuration).
- `program_sha256`: the hash of a configuration's lowered program at the tuning point (a
  sandboxed lowering, no run): configurations with the same program have the same price.
- `price_config`: that lowering's program hash and its simulated price (unverified), by
  which the autotuner ranks configurations on simulated targets before testing any;
  `price_configs`: the same for a whole sweep through one worker and one runner.
- `estimate`: an unverified, simulated estimate from the lowering alone (no suite run).
- `candidate_configs`: the configurations a candidate's TUNABLES declare, default first.
- `scaled_task`: the task file to pass everywhere for a run at other sizes (`--scale`);
  `scale_notes`: what it changed in the factors asked for, to say once.
- `receipt_json` / `receipt_problems`: a receipt as text; why a receipt does not hold
  (hash, signature, verdict and speedup re-derived), for the auditor.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from tools.correctness.testsuite import (
    DEFAULT_SEEDS,
    FrozenSuite,
    SuiteError,
    SuiteTooLarge,
    VacuousSuite,
    build_suite,
)
from tools.inputs.candidate import CandidateError, read_candidate
from tools.inputs.files import FileProblem
from tools.inputs.tasks import Task, TaskError, load_task
from tools.performance.autotune import (
    PricedConfig,
    TuneResult,
    TuneRow,
    price_config,
    price_configs,
    program_sha256,
    program_sha256s,
)
from tools.performance.autotune import autotune as _autotune
from tools.performance.executors import (
    DEFAULT_TARGET,
    REAL_TARGETS,
    SIM_TARGETS,
    TARGETS,
    Measurement,
    TargetUnavailable,
    UnknownTarget,
    chip_for_target,
    get_executor,
)
from tools.performance.profile import Profile, render, summarize
from tools.sandbox.launcher import Limits
from tools.verification.verify import DEFAULT_LIMITS, Verdict
from tools.verification.verify import evaluate as _evaluate


class SuiteMismatch(SuiteError):
    """A suite rebuilt from its recipe does not hash to the frozen one: refuse to judge on it."""


class SuiteRecipe(msgspec.Struct, frozen=True):
    """What is needed to rebuild a frozen suite exactly: small enough to travel as an artifact."""

    task_sha256: str
    seeds: tuple[int, ...]
    suite_sha256: str
    n_cases: int
    notes: tuple[str, ...] = ()
    tolerance: dict[str, float] = {}
    cases: tuple[dict[str, Any], ...] = ()


def freeze_suite(task: Task | str | Path, *, seeds: Sequence[int] = DEFAULT_SEEDS) -> FrozenSuite:
    """Build and hash the frozen suite; raises `SuiteError` if it cannot tell right from wrong,
    `SuiteTooLarge` (before building anything) if it would not fit in this process's memory."""
    return build_suite(task if isinstance(task, Task) else load_task(task), seeds=tuple(seeds))


def recipe_of(suite: FrozenSuite, seeds: Sequence[int] = DEFAULT_SEEDS) -> SuiteRecipe:
    summary = suite.summary()
    return SuiteRecipe(
        task_sha256=suite.task_sha256, seeds=tuple(seeds), suite_sha256=suite.sha256,
        n_cases=len(suite.cases), notes=tuple(suite.notes), tolerance=dict(suite.tolerance),
        cases=tuple(summary["cases"]),
    )


def suite_from_recipe(task: Task | str | Path, recipe: SuiteRecipe) -> FrozenSuite:
    """Rebuild the frozen suite and prove it is the same one (same sha256), or raise."""
    loaded = task if isinstance(task, Task) else load_task(task)
    if loaded.source_sha256 != recipe.task_sha256:
        raise SuiteMismatch(
            f"the suite was frozen for task sha256 {recipe.task_sha256[:12]}, "
            f"not {loaded.source_sha256[:12]}")
    suite = build_suite(loaded, seeds=recipe.seeds)
    if suite.sha256 != recipe.suite_sha256:
        raise SuiteMismatch(
            f"rebuilding the suite gave sha256 {suite.sha256[:12]}, not the frozen "
            f"{recipe.suite_sha256[:12]}: the task's inputs or reference are not deterministic")
    return suite


def evaluate(
    task: str | Path,
    candidate: str | Path,
    *,
    config: dict[str, Any] | None = None,
    target: str = DEFAULT_TARGET,
    suite: FrozenSuite | None = None,
    limits: Limits | None = None,
) -> Verdict:
    """The full verifier; see `tools.verification.verify.evaluate` for what it checks."""
    return _evaluate(task, candidate, config=config, target=target, suite=suite, limits=limits)


def compile_check(
    task: str | Path,
    candidate: str | Path,
    *,
    config: dict[str, Any] | None = None,
    target: str = DEFAULT_TARGET,
    suite: FrozenSuite,
    limits: Limits | None = None,
) -> Verdict:
    """Build, lower, compile-check and audit at the tuning point, and on a simulated target
    price it; read `compiled(verdict)` and `verdict.measurement`.

    No case runs (interpret mode is the tests' work): the verdict is a "fail" that says so,
    never a test result, so a candidate priced no faster than its parent is never run.
    """
    first = msgspec.structs.replace(suite, cases=suite.cases[:1], sha256="")
    return _evaluate(task, candidate, config=config, target=target, suite=_rehash(first),
                     limits=limits, run_cases=False)


def _rehash(suite: FrozenSuite) -> FrozenSuite:
    from tools.correctness.testsuite import suite_hash

    return msgspec.structs.replace(suite, sha256=suite_hash(suite))


def compiled(verdict: Verdict) -> bool:
    """Did the candidate load, build, lower for TPU and pass the compile check and audit?"""
    checks = verdict.receipt.get("checks", {})
    get = checks.get if isinstance(checks, dict) else lambda k, d=None: getattr(checks, k, d)
    return bool(get("candidate_loaded", False) and get("sandbox_ok", False)
                and get("compile_ok", False))


@dataclass(frozen=True)
class Baseline:
    latency_s: float
    measured_on: str
    target: str
    method: str
    breakdown: dict[str, Any]
    priced_from: str = ""  # simulated: which program was priced (simbaseline's label)


def measure_baseline(task: Task | str | Path, *, target: str = DEFAULT_TARGET) -> Baseline:
    """The XLA reference at the tuning point on `target`.

    Simulated targets price XLA's optimised program on the chip's figures: XLA:TPU's where
    libtpu is installed, else the host's, as `priced_from` and `method` say
    (`tools.performance.simbaseline`). Real targets time the reference on the device
    (raises `TargetUnavailable` without one).
    """
    loaded = task if isinstance(task, Task) else load_task(task)
    executor = get_executor(target)
    if executor.measured_on == "real":
        executor.require_available()  # type: ignore[union-attr]
        return _real_baseline(loaded, executor)
    inputs = loaded.input_specs(0)  # shapes only: the reference is compiled, never run
    found = executor.baseline(loaded.reference, inputs,  # type: ignore[union-attr]
                              key=f"{loaded.source_sha256}:0")
    return Baseline(
        latency_s=float(found.latency_s), measured_on="simulated", target=target,
        method=found.method, breakdown=msgspec.to_builtins(found), priced_from=found.label,
    )


_REFERENCE_AS_CANDIDATE = '''"""The task's own reference, timed as a candidate: the baseline on a real device."""
import importlib.util

_spec = importlib.util.spec_from_file_location("kg_baseline_task", {path!r})
_task = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_task)


def build():
    return getattr(_task, "reference", None) or _task.workload
'''


def _real_baseline(task: Task, executor: Any) -> Baseline:
    source = _REFERENCE_AS_CANDIDATE.format(path=str(Path(task.path).resolve())).encode()
    measurement = executor.time_candidate(task.path, source, {})
    if not measurement.valid:
        raise RuntimeError("; ".join(measurement.reasons) or "baseline timing failed")
    return Baseline(latency_s=float(measurement.baseline_s), measured_on="real",
                    target=executor.target, method=str(measurement.breakdown.get("timing_source")),
                    breakdown=dict(measurement.breakdown))


def profile(verdict: Verdict) -> Profile | None:
    """The profile of a verdict that was timed; None when it never reached timing."""
    if verdict.measurement is None:
        return None
    return summarize(verdict.measurement, verdict.compile_report)


def autotune(
    task: str | Path,
    candidate: str | Path,
    *,
    target: str = DEFAULT_TARGET,
    suite: FrozenSuite | None = None,
    budget_configs: int | None = None,
    workers: int = 2,
) -> TuneResult:
    return _autotune(task, candidate, target=target, suite=suite, budget_configs=budget_configs,
                     workers=workers)


def estimate(
    task: str | Path,
    candidate: str | Path,
    *,
    target: str = DEFAULT_TARGET,
    config: dict[str, Any] | None = None,
    shape_index: int = 0,
    limits: Limits | None = None,
) -> Any:
    """An unverified, simulated estimate of one configuration from its lowering alone
    (`tools.performance.estimate.Estimate`): for pruning configurations before the suite
    runs, never a result. The candidate is lowered in the sandboxed child."""
    from tools.performance.estimate import estimate as _estimate

    return _estimate(task, candidate, target=target, config=config, shape_index=shape_index,
                     limits=limits)


def scaled_task(task: str | Path, scales: Sequence[float] | Sequence[str] | str | None) -> Path:
    """The task file to use, everywhere, for a run at ``scales`` (the `--scale` factors:
    ``"0.5,0.25"``, ``["0.5", "0.25"]`` or ``[0.5, 0.25]``; None: ``task`` as it is).

    A JAXBench task gets a file that is the original plus ``SCALES = [...]``, written once
    where every process can read it: the suite, the baseline, the verifier, the timing child
    and an agent given its source all load the same sizes from the path (or the source)
    alone. The scaled task is checked here (abstract evaluation only): a factor that breaks
    the task's structure is replaced by the nearest that keeps it (`tools.inputs.scalefit`;
    `scale_notes` says what changed, and the suite repeats it); a scale whose config still
    does not hold is dropped with a note the suite repeats; a tuning scale that does not
    hold, a task whose inputs no CONFIG entry sizes, and a kernelgraph task (its sizes are
    its SHAPES) raise `TaskError` with the reason. The suite and the receipt record the
    scales used (`FrozenSuite.scales`, receipt `suite.scales`).
    """
    from tools.inputs.scalefit import fit_scales
    from tools.inputs.scaling import parse_scales, write_scaled_task

    try:
        factors = parse_scales(scales)
    except ValueError as exc:
        raise TaskError(task, str(exc)) from None
    if factors is None:
        return Path(task)
    original = load_task(task, validate=False)
    if original.format != "jaxbench":
        raise TaskError(task, "--scale applies to JAXBench CONFIG sizes; this task's sizes "
                        "are its SHAPES (edit them, or make_inputs)")
    path = write_scaled_task(task, factors)
    try:  # factors that hold as asked need no search
        loaded = load_task(path, check_derived=True)
        if not any(" dropped: " in note for note in loaded.notes):
            return _derived_whole(task, path, loaded, factors)
    except TaskError:  # the tuning factor does not hold: look for one that does
        pass
    fitted = fit_scales(task, factors)
    if fitted.notes:
        path = write_scaled_task(task, fitted.scales, fitted.keep, fitted.notes)
    try:  # the scaled task must hold: refuse here, with the reason
        loaded = load_task(path, check_derived=True)
    except TaskError as exc:
        if fitted.scales[0] != factors[0] or fitted.keep:
            raise
        raise TaskError(task, f"{exc.problem}; no factor near {factors[0]:g} keeps the task's "
                        f"structure either{_smallest_holding(fitted.smallest)}") from None
    return _derived_whole(task, path, loaded, fitted.scales, fitted.keep, fitted.notes)


def _derived_whole(task: str | Path, path: Path, loaded: Task, scales: Sequence[float],
                   keep: Sequence[str] = (), notes: Sequence[str] = ()) -> Path:
    """The scaled file again with ``DERIVED_WHOLE`` where loading it found a derived shape
    that needs the other sizes whole (`tools.inputs.shapes`): every later load of it then
    derives the same shapes without running the reference."""
    from tools.inputs.scaling import write_scaled_task

    if not loaded.derived_whole:
        return path
    return write_scaled_task(task, scales, keep, notes, whole=loaded.derived_whole)


def _smallest_holding(factor: float | None) -> str:
    """The refusal's pointer to a scale that loads, where the fit found one."""
    if factor is None:
        return ""
    if factor >= 1:
        return "; only full size keeps it (run without --scale)"
    return f"; the smallest factor that keeps it is {factor:g} (--scale {factor:g})"


def scale_notes(task: str | Path) -> tuple[str, ...]:
    """What `scaled_task` changed in the factors asked for, and why (a factor that broke the
    task's structure, the one used instead), read from the scaled file; () for a task file
    whose factors held as asked or that is not scaled."""
    import ast

    from kernelgraph import pyast
    from tools.inputs.files import read_python_source

    _, text = read_python_source(Path(task), TaskError)
    for node in pyast.parse(text).body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "SCALE_NOTES" for t in node.targets):
            return tuple(str(n) for n in ast.literal_eval(node.value))
    return ()


def candidate_configs(candidate: str | Path) -> list[dict[str, Any]]:
    """Every configuration of the candidate's TUNABLES, the default first."""
    return list(read_candidate(candidate).configs())


def chip_figures(target: str) -> dict[str, Any]:
    """The published figures of the chip a target simulates or compiles for."""
    from tools.performance.chips import get_chip

    if target not in TARGETS:
        raise UnknownTarget(f"unknown target {target!r}; known: {', '.join(TARGETS)}")
    return msgspec.to_builtins(get_chip(chip_for_target(target)))


def read_tunables(candidate: str | Path) -> dict[str, list[Any]]:
    """The candidate's TUNABLES, read statically (the file is never imported here)."""
    return {name: list(values) for name, values in read_candidate(candidate).tunables.items()}


def profile_of(measurement: dict[str, Any], compile_report: dict[str, Any] | None = None) -> Profile:
    """The profile of a measurement kept as plain data (an artifact, a verdict record)."""
    from tools.lowered.compile_check import CompileReport

    report = msgspec.convert(compile_report, CompileReport) if compile_report else None
    return summarize(msgspec.convert(measurement, Measurement), report)


def receipt_json(receipt: dict[str, Any]) -> str:
    """A receipt as the JSON text `verify-receipt` reads."""
    import json

    return json.dumps(receipt, indent=2, sort_keys=True, allow_nan=False) + "\n"


def receipt_problems(receipt: Mapping[str, Any], also_trusted: Collection[str] = (), *,
                     candidate: bytes | None = None, task: bytes | None = None) -> list[str]:
    """Why a receipt does not hold (empty when it does): its hash, its signature by a trusted
    key (this installation's, or one of the `also_trusted` fingerprints), its verdict and
    speedup re-derived from its numbers, and, given the `candidate` file's bytes (and the
    `task`'s), that they are the files it signed (a file that is not comes first)."""
    from tools.verification.receipts import ReceiptError, check_receipt, installation_fingerprints

    trusted = installation_fingerprints() | set(also_trusted) if also_trusted else None
    try:
        checked = check_receipt(receipt, trusted, candidate=candidate, task=task)
    except ReceiptError as exc:
        return [str(exc)]
    if checked.ok:
        return []
    return list(checked.problems) or ["the receipt does not check"]


__all__ = [
    "DEFAULT_LIMITS",
    "DEFAULT_SEEDS",
    "DEFAULT_TARGET",
    "REAL_TARGETS",
    "SIM_TARGETS",
    "TARGETS",
    "Baseline",
    "CandidateError",
    "FileProblem",
    "FrozenSuite",
    "Limits",
    "Measurement",
    "PricedConfig",
    "Profile",
    "SuiteError",
    "SuiteMismatch",
    "SuiteRecipe",
    "SuiteTooLarge",
    "TargetUnavailable",
    "Task",
    "TaskError",
    "TuneResult",
    "TuneRow",
    "UnknownTarget",
    "VacuousSuite",
    "Verdict",
    "autotune",
    "candidate_configs",
    "chip_figures",
    "chip_for_target",
    "compile_check",
    "compiled",
    "estimate",
    "evaluate",
    "freeze_suite",
    "load_task",
    "measure_baseline",
    "price_config",
    "price_configs",
    "profile",
    "profile_of",
    "program_sha256",
    "program_sha256s",
    "read_tunables",
    "receipt_json",
    "receipt_problems",
    "recipe_of",
    "render",
    "scale_notes",
    "scaled_task",
    "suite_from_recipe",
]
