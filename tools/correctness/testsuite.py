"""The frozen test suite: inputs, float64 oracle and error floor, built before any kernel.

Cases: several PRNG seeds at the tuning point, every unseen shape, and numerics probes (the
tuning inputs scaled to large and to small magnitudes). For each case the reference runs
twice in this process: as written (its own dtypes) and, with 64-bit types enabled only for
that call, on float64 copies of the inputs: the oracle (:mod:`tools.correctness.oracle`;
where the reference cannot run in float64, a float32 oracle at highest matmul precision,
recorded per case). The reference's own error against the oracle is the floor a candidate
is held to.

The suite is data (msgpack, sorted keys) with a sha256 over that canonical encoding, so it
can be stored as an artifact and re-checked. A suite that cannot tell a right answer from
a wrong one is refused: constant or all-zero reference output, or output that does not
change when an input is perturbed.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Sequence
from typing import Any

import msgspec
import numpy as np

from kernelgraph.errors import KernelgraphError
from tools.correctness.ceiling import ceiling_limit, element_slack
from tools.correctness.footprint import fit_problem
from tools.correctness.oracle import FULL_PRECISION, Oracle, choose_oracle, run_oracle
from tools.inputs.tasks import Task, check_reference_output
from tools.sandbox.wire import WireArray, hash_arrays, wire_arrays

FORMAT_VERSION = 2
DEFAULT_SEEDS: tuple[int, ...] = (0, 1, 2)
# Factors applied to every floating input of the tuning case; a task may set PROBE_SCALES.
DEFAULT_PROBE_SCALES: dict[str, float] = {"large": 1e3, "small": 1e-3}
_PERTURB_SEED = 20240917

_ENCODER = msgspec.msgpack.Encoder(order="sorted")


class SuiteError(KernelgraphError, ValueError):
    """The task cannot be tested as it stands (a vacuous suite); the message says why."""


class SuiteTooLarge(SuiteError):
    """Freezing the suite would not fit in this process's memory (the estimate says by how
    much, and the --scale that would fit)."""


class SuiteCase(msgspec.Struct, frozen=True):
    case_id: str
    shape_index: int
    seed: int
    kind: str  # "seed" (tuning point) | "unseen" | "probe-large" | "probe-small" | ...
    inputs: tuple[WireArray, ...]
    inputs_sha256: str
    oracle: tuple[WireArray, ...]  # float64 for floating outputs, else the reference's dtype
    out_dtypes: tuple[str, ...]  # what the reference returns; a candidate must match
    out_shapes: tuple[tuple[int, ...], ...]
    floor_max_abs: tuple[float, ...]  # the reference's own error against the oracle
    floor_mean_abs: tuple[float, ...]
    # False where the reference itself is outside the task TOLERANCE against the oracle
    # (e.g. a large-magnitude probe): that ceiling cannot be asked of a candidate there.
    ceiling_applies: tuple[bool, ...] = ()
    # Per output: what any honest order of accumulation may add to the element-wise
    # ceiling (float32, the output's shape), or an empty array where that is negligible.
    slack: tuple[WireArray, ...] = ()
    # Per output, the largest and the mean magnitude of the terms summed into an element
    # (>= |oracle|): the scale of an honest kernel's rounding, whatever its order.
    terms_max_abs: tuple[float, ...] = ()
    terms_mean_abs: tuple[float, ...] = ()
    # The precision the oracle ran in (tools.correctness.oracle.PRECISIONS); not part of
    # the hash while it is the full "float64", so suites frozen before it keep their hash.
    oracle_precision: str = FULL_PRECISION


class FrozenSuite(msgspec.Struct, frozen=True):
    task_name: str
    task_sha256: str
    tolerance: dict[str, float]
    cases: tuple[SuiteCase, ...]
    notes: tuple[str, ...] = ()
    built_with: dict[str, str] = msgspec.field(default_factory=dict)
    format: int = FORMAT_VERSION
    sha256: str = ""

    def to_bytes(self) -> bytes:
        return _ENCODER.encode(self)

    @classmethod
    def from_bytes(cls, data: bytes) -> FrozenSuite:
        """Decode a stored suite and check its hash; a changed byte is an error."""
        suite = msgspec.msgpack.decode(data, type=cls)
        if suite.format != FORMAT_VERSION:
            raise SuiteError(f"suite format {suite.format} is not {FORMAT_VERSION}")
        if suite_hash(suite) != suite.sha256:
            raise SuiteError("suite hash does not match its contents (the suite was altered)")
        return suite

    def case(self, case_id: str) -> SuiteCase:
        for c in self.cases:
            if c.case_id == case_id:
                return c
        raise KeyError(case_id)

    def summary(self) -> dict[str, Any]:
        return {
            "sha256": self.sha256,
            "task": self.task_name,
            "cases": [
                {"id": c.case_id, "kind": c.kind, "shape_index": c.shape_index, "seed": c.seed,
                 "input_shapes": [list(a.shape) for a in c.inputs]}
                for c in self.cases
            ],
            "notes": list(self.notes),
        }


def suite_hash(suite: FrozenSuite) -> str:
    """sha256 of the canonical encoding with the hash field empty (fields added since
    format 2 are left out while they hold their default)."""
    return hashlib.sha256(_ENCODER.encode(_canonical(suite))).hexdigest()


_LATER_FIELDS: dict[str, Any] = {"oracle_precision": FULL_PRECISION}  # SuiteCase, since 2


def _canonical(suite: FrozenSuite) -> Any:
    emptied = msgspec.structs.replace(suite, sha256="")
    if all(getattr(c, k) == v for c in suite.cases for k, v in _LATER_FIELDS.items()):
        data = msgspec.to_builtins(msgspec.structs.replace(emptied, cases=()),
                                   builtin_types=(bytes, bytearray, memoryview))
        data["cases"] = [_case_without_later_fields(c) for c in suite.cases]
        return data
    return emptied


def _case_without_later_fields(case: SuiteCase) -> dict[str, Any]:
    data = msgspec.to_builtins(case, builtin_types=(bytes, bytearray, memoryview))
    for key in _LATER_FIELDS:
        data.pop(key)
    return data


def build_suite(
    task: Task,
    *,
    seeds: Sequence[int] = DEFAULT_SEEDS,
    unseen: bool = True,
    probes: bool = True,
    check_memory: bool = True,
) -> FrozenSuite:
    """Build and hash the suite for ``task``; raises :class:`SuiteError` if it is vacuous,
    :class:`SuiteTooLarge` (before anything is built) if it would not fit in memory."""
    import jax

    if not seeds:
        raise ValueError(f"{seeds=} must name at least one seed")
    probe_scales = getattr(task.module, "PROBE_SCALES", DEFAULT_PROBE_SCALES)
    if check_memory:
        counts = {0: len(seeds) + (len(probe_scales) if probes else 0)}
        counts.update({i: 1 for i in task.unseen_shape_indices if unseen})
        _, problem = fit_problem(task, counts)
        if problem:
            raise SuiteTooLarge(problem)
    references = {i: jax.jit(task.reference_at(i)) for i in range(len(task.shapes))}
    oracles: dict[int, Oracle] = {}
    noted: set[int] = set()
    cases: list[SuiteCase] = []
    notes: list[str] = []

    tolerance: dict[str, float] = {}

    def make(case_id: str, shape_index: int, seed: int, kind: str,
             inputs: Sequence[Any]) -> SuiteCase | None:
        host = [np.asarray(x) for x in inputs]
        ref = [np.asarray(o) for o in check_reference_output(
            task, references[shape_index](*inputs))]
        if shape_index not in oracles:
            oracles[shape_index] = choose_oracle(task, shape_index, host, ref)
        chosen, oracle = run_oracle(oracles[shape_index], host, ref)
        if chosen.precision != FULL_PRECISION and shape_index not in noted:
            noted.add(shape_index)
            notes.append(f"shape {shape_index}: the oracle runs in {chosen.precision}, not "
                         f"float64 ({chosen.why})")
        oracles[shape_index] = chosen
        if not tolerance:
            tolerance.update(task.tolerance_for([r.dtype.name for r in ref]))
        magnitudes = _magnitudes(chosen, host, oracle)
        floors_max, floors_mean, ceiling, slacks = [], [], [], []
        terms_max, terms_mean = [], []
        for r, o, m in zip(ref, oracle, magnitudes, strict=True):
            finite = np.isfinite(o) if _is_float(o) else np.ones(o.shape, bool)
            if kind.startswith("probe") and not finite.all():
                notes.append(f"{case_id} dropped: the oracle is not finite at this magnitude")
                return None
            wide = o.astype(np.float64)
            if kind.startswith("probe") and not np.isfinite(r.astype(np.float64))[finite].all():
                notes.append(f"{case_id} dropped: the reference overflows {r.dtype.name} at "
                             "this magnitude")
                return None
            slack = element_slack(r.dtype.name, m, wide, tolerance)
            err = np.abs(r.astype(np.float64) - wide)[finite]
            limit = ceiling_limit(r.dtype.name, wide, tolerance, slack)[finite]
            ceiling.append(bool(np.all(err <= limit)))
            if not ceiling[-1]:
                notes.append(f"{case_id}: the reference itself is outside TOLERANCE here; "
                             "only the floor rule applies")
            floors_max.append(float(err.max()) if err.size else 0.0)
            floors_mean.append(float(err.mean()) if err.size else 0.0)
            slacks.append(slack if slack is not None else np.zeros((0,), np.float32))
            terms_max.append(float(m[finite].max()) if m[finite].size else 0.0)
            terms_mean.append(float(m[finite].mean()) if m[finite].size else 0.0)
        return SuiteCase(
            case_id=case_id, shape_index=shape_index, seed=seed, kind=kind,
            inputs=wire_arrays(host), inputs_sha256=hash_arrays(host),
            oracle=wire_arrays(oracle),
            out_dtypes=tuple(r.dtype.name for r in ref),
            out_shapes=tuple(tuple(r.shape) for r in ref),
            floor_max_abs=tuple(floors_max), floor_mean_abs=tuple(floors_mean),
            ceiling_applies=tuple(ceiling), slack=wire_arrays(slacks),
            terms_max_abs=tuple(terms_max), terms_mean_abs=tuple(terms_mean),
            oracle_precision=chosen.precision,
        )

    tuning_inputs = None
    for seed in seeds:
        inputs = task.make_inputs(seed, 0)
        tuning_inputs = tuning_inputs or inputs
        case = make(f"shape0-seed{seed}", 0, seed, "seed", inputs)
        assert case is not None
        cases.append(case)
    if unseen:
        for index in task.unseen_shape_indices:
            case = make(f"shape{index}-seed{seeds[0]}", index, seeds[0], "unseen",
                        task.make_inputs(seeds[0], index))
            assert case is not None
            cases.append(case)
            if index in task.derived_shapes:
                notes.append(f"{case.case_id}: shape {task.shapes[index]!r} derived off the "
                             "(8, 128) tile from the task's aligned ones, so tails are "
                             "exercised")
    if len(task.shapes) - len(task.derived_shapes) == 1:
        notes.append("the task declares no unseen shapes (SHAPES has one entry)")
    if task.alignment_note:
        notes.append(task.alignment_note)
    _refuse_vacuous(task, cases, references[0], tuning_inputs)
    if probes:
        for name, factor in probe_scales.items():
            scaled = _scale_floats(tuning_inputs, float(factor))
            if scaled is None:
                notes.append("no floating inputs: numerics probes skipped")
                break
            case = make(f"shape0-seed{seeds[0]}-{name}", 0, seeds[0], f"probe-{name}", scaled)
            if case is not None:
                cases.append(case)
    suite = FrozenSuite(
        task_name=task.name, task_sha256=task.source_sha256,
        tolerance=dict(tolerance or task.tolerance),
        cases=tuple(cases), notes=tuple(notes), built_with={"jax": jax.__version__},
    )
    return msgspec.structs.replace(suite, sha256=suite_hash(suite))


def _magnitudes(oracle_fn: Oracle, host: Sequence[np.ndarray],
                oracle: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Per output, the magnitude of the terms that were summed into each element: the
    reference in the oracle's precision on the absolute values of its floating inputs (for
    a matmul exactly sum |a||b|), never less than |oracle|. Where that run fails or is not
    finite, |oracle| alone."""
    absolute = [np.abs(x) if _is_float(x) else x for x in host]
    try:
        summed = oracle_fn(absolute)
    except Exception:  # a reference that rejects these inputs: fall back to |oracle|
        summed = [np.zeros(o.shape) for o in oracle]
    found = []
    for s, o in zip(summed, oracle, strict=True):
        wide = np.abs(o.astype(np.float64))
        if s.shape != o.shape or not _is_float(o):
            found.append(wide)
            continue
        s = np.abs(s.astype(np.float64))
        found.append(np.maximum(np.where(np.isfinite(s), s, 0.0), wide))
    return found


def _refuse_vacuous(task: Task, cases: Sequence[SuiteCase], reference: Any,
                    tuning_inputs: Sequence[Any] | None) -> None:
    import jax

    where = f"{task.path}"
    for case in cases:
        for k, wa in enumerate(case.oracle):
            out = wa.numpy()
            if out.size == 0:
                raise SuiteError(f"{where}: reference output {k} is empty in {case.case_id}")
            if not np.any(out):
                raise SuiteError(
                    f"{where}: reference output {k} is all zero in {case.case_id}; a suite "
                    "built on it cannot tell a right kernel from one that writes nothing")
            finite = out[np.isfinite(out)] if _is_float(out) else out
            if out.size > 1 and finite.size and np.all(finite == finite.flat[0]):
                raise SuiteError(
                    f"{where}: reference output {k} is constant ({finite.flat[0]!r}) in "
                    f"{case.case_id}; it does not depend on the inputs")
    seed_cases = [c for c in cases if c.kind == "seed"]
    for a, b in itertools.pairwise(seed_cases):
        if a.inputs_sha256 != b.inputs_sha256 and all(
            np.array_equal(x.numpy(), y.numpy()) for x, y in zip(a.oracle, b.oracle, strict=True)
        ):
            raise SuiteError(
                f"{where}: reference output is identical for {a.case_id} and {b.case_id} "
                "although their inputs differ; the output does not depend on the inputs")
    if tuning_inputs is None:
        return
    base = [np.asarray(o) for o in jax.tree.leaves(reference(*tuning_inputs))]
    rng = np.random.default_rng(_PERTURB_SEED)
    for i, x in enumerate(tuning_inputs):
        host = np.asarray(x)
        if not _is_float(host) or host.size == 0:
            continue
        wide = host.astype(np.float64)
        spread = float(np.std(wide)) or 1.0
        noisy = (wide + 0.5 * spread * rng.standard_normal(wide.shape)).astype(host.dtype)
        changed = list(tuning_inputs)
        changed[i] = noisy
        outs = [np.asarray(o) for o in jax.tree.leaves(reference(*changed))]
        if all(np.array_equal(p, q, equal_nan=True) for p, q in zip(base, outs, strict=True)):
            raise SuiteError(
                f"{where}: reference output does not change when input {i} is perturbed; "
                "a suite cannot check that a kernel uses it")


def _scale_floats(inputs: Sequence[Any] | None, factor: float) -> list[Any] | None:
    if inputs is None:
        return None
    scaled, any_float = [], False
    for x in inputs:
        host = np.asarray(x)
        if _is_float(host):
            any_float = True
            scaled.append((host.astype(np.float64) * factor).astype(host.dtype))
        else:
            scaled.append(host)
    return scaled if any_float else None


def _is_float(x: np.ndarray) -> bool:
    return np.issubdtype(x.dtype, np.floating) or x.dtype.name.startswith(("bfloat", "float"))
