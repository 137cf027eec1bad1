"""The frozen test suite: inputs, float64 oracle and error floor, built before any kernel.

Cases: several PRNG seeds at the tuning point, every unseen shape (the task's own and the
unaligned ones :mod:`tools.inputs.shapes` derives), numerics probes (the tuning inputs
scaled to large and to small magnitudes) and one case with NaN and +/-inf in the floating
inputs at the smallest shape (:mod:`tools.correctness.nonfinite`), unless the task opts
out. A tuning point whose inputs exceed :data:`REPEAT_LIMIT_BYTES` runs once (the first
seed; each case there costs seconds in TPU interpret mode): the other seeds and the probes
then run at a "repeat shape" (:func:`repeat_shape`, the largest declared unseen shape under
the limit) beside its own first-seed case, and a note says so. Smaller tuning points keep
every seed and probe at the tuning point.

For each case the reference runs twice in this process, jitted: as written (its own
dtypes) and, with 64-bit types enabled only for that call, on float64 copies of the inputs:
the oracle (:mod:`tools.correctness.oracle`; where the reference cannot run in float64, a
float32 oracle at highest matmul precision, recorded per case). The reference's own error
against the oracle is the floor a candidate is held to. Where the reference rounds to a
narrower float and uses the value again, it also runs op by op as written
(:mod:`tools.correctness.aswritten`): the host compiler may drop such a rounding, and the
floor is then the larger error of the two runs.

Cases are built one at a time, each input made once: before anything is built the suite's
peak memory is estimated (:mod:`tools.correctness.footprint`) and a suite that would not
fit is refused; each finished case's large arrays go to disk, memory-mapped
(:mod:`tools.correctness.store`), so the process holds about one case at a time. The data
types and the hash are in :mod:`tools.correctness.suitedata`.

A suite that cannot tell a right answer from a wrong one is refused, as each case is built:
constant or all-zero reference output, identical output for different seeds at one shape,
or output that does not change when an input is perturbed. A derived unaligned shape is the
loader's, not the task's: one whose output is degenerate is dropped with a note instead,
while another case still leaves the tile.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from tools.correctness.aswritten import as_written
from tools.correctness.conditioning import recorded_conditioning
from tools.correctness.floors import OutputStats, output_stats, term_magnitudes
from tools.correctness.footprint import fit_problem
from tools.correctness.nonfinite import (
    KINDS,
    first_float,
    nonfinite_shape,
    opt_out_note,
    plant,
    specials_differ,
    swamped,
    unplanted,
)
from tools.correctness.oracle import FULL_PRECISION, Oracle, choose_oracle, run_oracle
from tools.correctness.store import SPILL_BYTES, release, spill, suite_directory
from tools.correctness.suitedata import (
    FORMAT_VERSION,
    FrozenSuite,
    ShapeStatics,
    SuiteCase,
    SuiteError,
    SuiteTooLarge,
    VacuousSuite,
    suite_hash,
)
from tools.correctness.vacuity import CONSEQUENCE, degenerate, is_float, refuse_insensitive
from tools.inputs.shapes import tile_pattern
from tools.inputs.tasks import Task, check_reference_output
from tools.sandbox.wire import StaticArg, WireArray, hash_arrays

DEFAULT_SEEDS: tuple[int, ...] = (0, 1, 2)
# Factors applied to every floating input of the tuning case; a task may set PROBE_SCALES.
DEFAULT_PROBE_SCALES: dict[str, float] = {"large": 1e3, "small": 1e-3}
# Above this many bytes of inputs the tuning point runs once; its repeats move to a smaller
# shape (the shipped GEMM tasks' tuning points are above it; the others are not).
REPEAT_LIMIT_BYTES = 8 << 20
_NAMES = {"nan": "NaN", "inf": "+inf/-inf"}

__all__ = ["DEFAULT_PROBE_SCALES", "DEFAULT_SEEDS", "FORMAT_VERSION", "REPEAT_LIMIT_BYTES",
           "FrozenSuite", "SuiteCase", "SuiteError", "SuiteTooLarge", "build_suite",
           "repeat_shape", "suite_hash"]


def build_suite(
    task: Task,
    *,
    seeds: Sequence[int] = DEFAULT_SEEDS,
    unseen: bool = True,
    probes: bool = True,
    nonfinite: bool = True,
    check_memory: bool = True,
    spill_bytes: int | None = SPILL_BYTES,
    directory: Path | None = None,
) -> FrozenSuite:
    """Build and hash the suite for ``task``; raises :class:`SuiteError` if it is vacuous,
    :class:`SuiteTooLarge` (before anything is built) if it would not fit in memory.

    Arrays of ``spill_bytes`` or more go to disk under ``directory`` (default
    :func:`tools.correctness.store.suite_directory`), memory-mapped; None keeps all in memory.
    """
    import jax

    if not seeds:
        raise ValueError(f"{seeds=} must name at least one seed")
    probe_scales = getattr(task.module, "PROBE_SCALES", DEFAULT_PROBE_SCALES)
    fed = tuple(k for k in KINDS if k not in task.nonfinite_opt_out)  # NaN, +/-inf or both
    nonfinite_at = nonfinite_shape(task) if nonfinite and fed else None
    # where the seeds after the first and the probes run: the tuning point, or a smaller shape
    again = repeat_shape(task) if len(seeds) > 1 or probes else 0
    if check_memory:
        counts = {0: 1}  # the first seed; then the other seeds and the probes
        counts[again] = counts.get(again, 0) + len(seeds) - 1 + (
            len(probe_scales) if probes else 0)
        for i in task.unseen_shape_indices if unseen else ():
            counts[i] = counts.get(i, 0) + 1
        if nonfinite_at is not None:
            counts[nonfinite_at] = counts.get(nonfinite_at, 0) + 1
        _, problem = fit_problem(task, counts, held_per_case=spill_bytes is None)
        if problem:
            raise SuiteTooLarge(problem)
    builder = _Builder(task, _storage(spill_bytes, directory))
    for seed in seeds if again == 0 else seeds[:1]:
        builder.add(f"shape0-seed{seed}", 0, seed, "seed", task.make_inputs(seed, 0))
    dropped: dict[int, VacuousSuite] = {}  # derived shapes whose output is degenerate
    if unseen:
        for index in task.unseen_shape_indices:
            try:
                case = builder.add(f"shape{index}-seed{seeds[0]}", index, seeds[0], "unseen",
                                   task.make_inputs(seeds[0], index))
            except VacuousSuite as exc:
                if index not in task.derived_shapes:
                    raise
                dropped[index] = exc
                builder.drop_derived(index, f"shape{index}-seed{seeds[0]}", exc)
                continue
            if index in task.derived_shapes and case is not None:
                what = task.derived_what[task.derived_shapes.index(index)]
                builder.notes.append(f"{case.case_id}: shape {task.shapes[index]!r} derived "
                                     f"off the (8, 128) tile from the task's aligned ones "
                                     f"({what}), so tails are exercised")
    if dropped:
        nonfinite_at = _after_dropped(builder, dropped, again, nonfinite_at)
    if len(task.shapes) - len(task.derived_shapes) == 1:
        builder.notes.append("the task declares no unseen shapes (SHAPES has one entry)")
    if again:
        _add_repeats(builder, again, seeds, probes, unseen)
    if task.alignment_note:
        builder.notes.append(task.alignment_note)
    builder.notes.extend(task.notes)  # what loading decided (scales dropped, sizes fixed)
    statics = _statics(task, {c.shape_index for c in builder.cases})
    builder.notes.extend(f"shape {s.shape_index} ({task.describe_shape(s.shape_index)}): the "
                         "input maker's Python scalars are static arguments, given to the "
                         "reference and the kernel as they are, at their positions"
                         for s in statics)
    if probes:  # the first seed's inputs at their shape, read back from disk where spilled
        base = next((c for c in builder.cases if c.shape_index == again
                     and c.seed == seeds[0] and c.kind in ("seed", "unseen")), None)
        for name, factor in probe_scales.items():
            made = ([a.numpy() for a in base.inputs] if base is not None
                    else task.make_inputs(seeds[0], again))
            scaled = _scale_floats(made, float(factor))
            del made
            if scaled is None:
                builder.notes.append("no floating inputs: numerics probes skipped")
                break
            builder.add(f"shape{again}-seed{seeds[0]}-{name}", again, seeds[0],
                        f"probe-{name}", scaled)
            del scaled
            for wa in base.inputs if base is not None else ():
                release(wa)
    if nonfinite and task.nonfinite_opt_out:
        builder.notes.append(opt_out_note(task.nonfinite_opt_out))
    if nonfinite_at is not None:
        skip = {k for k in task.nonfinite_opt_out if isinstance(k, int)}
        _add_nonfinite(builder, nonfinite_at, seeds[0], fed, skip)
    suite = FrozenSuite(
        task_name=task.name, task_sha256=task.source_sha256,
        tolerance=dict(builder.tolerance or task.tolerance),
        cases=tuple(builder.cases), notes=tuple(builder.notes),
        built_with={"jax": jax.__version__}, scales=task.scales, statics=statics,
    )
    return msgspec.structs.replace(suite, sha256=suite_hash(suite))


def input_bytes(task: Task, index: int) -> int:
    """The bytes of all inputs at shape ``index``, from their specs (nothing is made)."""
    return sum(int(np.prod(s.shape, dtype=np.int64)) * np.dtype(s.dtype).itemsize
               for s in task.input_specs(index))


def repeat_shape(task: Task) -> int:
    """Where the seeds after the first and the numerics probes run: the tuning point (0)
    unless its inputs exceed :data:`REPEAT_LIMIT_BYTES` and the task has unseen shapes; then
    the largest declared unseen shape under the limit, else the smallest unseen shape."""
    unseen = task.unseen_shape_indices
    if not unseen or input_bytes(task, 0) <= REPEAT_LIMIT_BYTES:
        return 0
    sizes = {i: input_bytes(task, i) for i in unseen}
    under = [i for i in unseen
             if i not in task.derived_shapes and sizes[i] <= REPEAT_LIMIT_BYTES]
    if under:
        return max(under, key=lambda i: (sizes[i], -i))
    return min(unseen, key=lambda i: (sizes[i], i))


def _add_repeats(builder: _Builder, index: int, seeds: Sequence[int], probes: bool,
                 unseen: bool) -> None:
    """The seeds after the first at the repeat shape (its first seed is the unseen case
    there), and the note saying where the tuning point's repeats went."""
    task = builder.task
    for seed in seeds[1:] if unseen else seeds:
        builder.add(f"shape{index}-seed{seed}", index, seed, "seed",
                    task.make_inputs(seed, index))
    moved = [f"seed{'s' if len(seeds) > 2 else ''} {', '.join(map(str, seeds[1:]))}"
             if len(seeds) > 1 else "", "the numerics probes" if probes else ""]
    builder.notes.append(
        f"the tuning point ({task.describe_shape(0)}, {_mib(input_bytes(task, 0))} of "
        f"inputs) runs once (seed {seeds[0]}); {' and '.join(m for m in moved if m)} run at "
        f"shape {index} ({task.describe_shape(index)}, {_mib(input_bytes(task, index))}) "
        "so TPU interpret mode stays fast")


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.3g} MiB"


def _after_dropped(builder: _Builder, dropped: dict[int, VacuousSuite], again: int,
                   nonfinite_at: int | None) -> int | None:
    """Where the non-finite case runs once derived shapes were dropped for a degenerate
    output; the first drop's refusal when what is left cannot stand in for them: no case
    off the (8, 128) tile is left (tails would go untested), or the repeat shape is gone."""
    task = builder.task
    first = next(iter(dropped.values()))
    if again in dropped:
        raise first
    if not any(tile_pattern(task.input_specs(c.shape_index)) for c in builder.cases):
        raise VacuousSuite(f"{first}; no other shape of the suite leaves the (8, 128) tile, "
                           "so tails would go untested") from first
    if nonfinite_at in dropped:
        return nonfinite_shape(task, frozenset(dropped))
    return nonfinite_at


def _add_nonfinite(builder: _Builder, index: int, seed: int, kinds: Sequence[str],
                   skip: set[int]) -> None:
    import jax

    made = builder.task.make_inputs(seed, index)
    planted = plant(made, kinds, skip=skip)
    where = "the floating inputs" + (f" but {sorted(skip)}" if skip else "")
    if planted is None:
        builder.notes.append("no floating input to plant NaN or inf in: no non-finite case")
        return
    if swamped(jax.tree.leaves(builder.references[index](*planted[0]))):
        only = first_float(made, skip)  # every element non-finite: one input's alone
        planted = plant(made, kinds, only=only)
        assert planted is not None
        where = (f"input {only} alone (planted in every floating input, an output had no "
                 "finite element left)")
    inputs, count = planted
    case = builder.add(f"shape{index}-seed{seed}-nonfinite", index, seed, "nonfinite", inputs)
    if case is None:
        return
    builder.notes.append(
        f"{case.case_id}: {count} {'/'.join(_NAMES[k] for k in kinds)} planted in "
        f"{where}; a kernel's NaN and inf positions (and signs) must be the oracle's")
    oracle = [o.numpy() for o in case.oracle]
    free = unplanted(builder.oracles[index], made, inputs, oracle)
    del made, oracle
    if any(f.size for f in free):
        counts = ", ".join(f"{int(np.count_nonzero(~np.isnan(f)))} of output {k}"
                           for k, f in enumerate(free) if f.size)
        builder.cases[-1] = msgspec.structs.replace(case, unplanted=builder.store(free))
        builder.notes.append(
            f"{case.case_id}: the oracle is NaN or inf at {counts} element(s) only through "
            "planted elements they do not depend on (moving those leaves them bitwise the "
            "same: a masked-out zero met the planted value); a kernel may return the "
            "oracle's value there or the finite one with only the planted elements they "
            "depend on")


def _statics(task: Task, shape_indices: set[int]) -> tuple[ShapeStatics, ...]:
    """The static arguments of the suite's shapes, as the suite records them (none: ())."""
    found = {i: task.statics_at(i) for i in sorted(shape_indices)}
    return tuple(ShapeStatics(i, tuple(StaticArg(p, v) for p, v in args))
                 for i, args in found.items() if args)


def _storage(spill_bytes: int | None,
             directory: Path | None) -> Callable[[Sequence[np.ndarray]], tuple[WireArray, ...]]:
    """How a finished case's arrays are kept: in memory, or spilled to disk when large (the
    directory is only looked for once something is that large)."""
    threshold = spill_bytes if spill_bytes is not None else 1 << 62
    where: list[Path] = [directory] if directory is not None else []

    def store(arrays: Sequence[np.ndarray]) -> tuple[WireArray, ...]:
        if not where and any(np.asarray(a).nbytes >= threshold for a in arrays):
            where.append(suite_directory())
        return tuple(spill(np.asarray(a), where[0] if where else Path("."), threshold)
                     for a in arrays)

    return store


class _Builder:
    """Builds the cases one at a time, checking each as it goes (:func:`build_suite`)."""

    def __init__(self, task: Task,
                 store: Callable[[Sequence[np.ndarray]], tuple[WireArray, ...]]) -> None:
        import jax

        self.task, self.store = task, store
        self.references = {i: jax.jit(task.reference_at(i)) for i in range(len(task.shapes))}
        self.oracles: dict[int, Oracle] = {}
        # per shape, the reference run op by op where it narrows a float mid-way, else None
        self.written: dict[int, Callable[..., list[Any]] | None] = {}
        self.cases: list[SuiteCase] = []
        self.notes: list[str] = []
        self.tolerance: dict[str, float] = {}
        self._noted: set[int] = set()  # shapes whose weaker oracle has its note
        # per shape, the last seed (or first-seed unseen) case: (case, inputs, outputs sha256)
        self._last_seed: dict[int, tuple[str, str, str]] = {}
        self._notes_before = 0  # the notes before the case being added (drop_derived)

    def add(self, case_id: str, shape_index: int, seed: int, kind: str,
            inputs: Sequence[Any]) -> SuiteCase | None:
        """Build one case (None: a probe dropped, with a note), check it, keep it."""
        task, notes, tolerance = self.task, self.notes, self.tolerance
        self._notes_before = len(notes)
        host = [np.asarray(x) for x in inputs]
        ref = [np.asarray(o) for o in check_reference_output(
            task, self.references[shape_index](*inputs))]
        written = self._as_written(shape_index, inputs)
        ref_written = ([np.asarray(o) for o in check_reference_output(task, written(*inputs))]
                       if written is not None else [None] * len(ref))
        if shape_index not in self.oracles:
            self.oracles[shape_index] = choose_oracle(task, shape_index, host, ref)
        chosen, oracle = run_oracle(self.oracles[shape_index], host, ref)
        if chosen.precision != FULL_PRECISION and shape_index not in self._noted:
            self._noted.add(shape_index)
            notes.append(f"shape {shape_index}: the oracle runs in {chosen.precision}, not "
                         f"float64 ({chosen.why})")
        self.oracles[shape_index] = chosen
        if not tolerance:
            tolerance.update(task.tolerance_for([r.dtype.name for r in ref]))
        magnitudes = _magnitudes(chosen, host, oracle)
        floors_max, floors_mean, ceiling, slacks = [], [], [], []
        terms_max, terms_mean = [], []
        for r, w, o, m in zip(ref, ref_written, oracle, magnitudes, strict=True):
            with np.errstate(invalid="ignore"):  # inf - inf where the oracle is not finite
                stats = output_stats(r, o, m, tolerance)
                if w is not None:
                    stats = _either(stats, output_stats(w, o, m, tolerance))
            if kind.startswith("probe") and not stats.oracle_finite:
                notes.append(f"{case_id} dropped: the oracle is not finite at this magnitude")
                return None
            if kind.startswith("probe") and not stats.reference_finite:
                notes.append(f"{case_id} dropped: the reference overflows {r.dtype.name} at "
                             "this magnitude")
                return None
            if kind == "nonfinite" and (differ := specials_differ(r, o)):
                notes.append(f"{case_id} dropped: the reference itself ({r.dtype.name}) has "
                             f"NaN or inf at {differ} element(s) of output {len(ceiling)} "
                             "where the oracle does not, or the other way round")
                return None
            ceiling.append(stats.ceiling_applies)
            if not ceiling[-1]:
                notes.append(f"{case_id}: the reference itself is outside TOLERANCE here; "
                             "only the floor rule applies")
            floors_max.append(stats.floor_max_abs)
            floors_mean.append(stats.floor_mean_abs)
            slacks.append(stats.slack if stats.slack is not None
                          else np.zeros((0,), np.float32))
            terms_max.append(stats.terms_max_abs)
            terms_mean.append(stats.terms_mean_abs)
        conditioned: list[np.ndarray] = []
        if kind.startswith("probe"):  # the problem's conditioning at this magnitude
            conditioned, why = recorded_conditioning(
                chosen, host, oracle, [r.dtype.name for r in ref], magnitudes, floors_max)
            notes.extend(f"{case_id}: {line}" for line in why)
        del magnitudes
        inputs_sha256 = hash_arrays(host)
        if kind != "nonfinite":  # what it must tell apart is where the specials go
            self._refuse_vacuous(case_id, kind, shape_index, inputs_sha256, oracle, inputs,
                                 ref)
        case = SuiteCase(
            case_id=case_id, shape_index=shape_index, seed=seed, kind=kind,
            inputs=self.store(host), inputs_sha256=inputs_sha256,
            oracle=self.store(oracle),
            out_dtypes=tuple(r.dtype.name for r in ref),
            out_shapes=tuple(tuple(r.shape) for r in ref),
            floor_max_abs=tuple(floors_max), floor_mean_abs=tuple(floors_mean),
            ceiling_applies=tuple(ceiling), slack=self.store(slacks),
            terms_max_abs=tuple(terms_max), terms_mean_abs=tuple(terms_mean),
            oracle_precision=chosen.precision,
            conditioning=self.store(conditioned) if conditioned else (),
        )
        self.cases.append(case)
        return case

    def drop_derived(self, shape_index: int, case_id: str, refusal: VacuousSuite) -> None:
        """Forget a derived shape whose first case was refused as vacuous, and say why. The
        loader made that shape (:mod:`tools.inputs.shapes`) by moving one size off the tile
        and shrinking the others, which can break a relation the reference fixes in Python
        (a group count that leaves one feature per group normalises to zero); the task's
        own shapes are not at fault, so the shape is dropped rather than the task refused."""
        del self.notes[self._notes_before:]
        for kept in (self.oracles, self.written, self._last_seed):
            kept.pop(shape_index, None)
        why = str(refusal).removeprefix(f"{self.task.path}: ")
        self.notes.append(
            f"{case_id} dropped: shape {self.task.describe_shape(shape_index)} was derived "
            f"by the loader, not declared by the task, and there {why}")

    def _as_written(self, shape_index: int,
                    inputs: Sequence[Any]) -> Callable[..., list[Any]] | None:
        if shape_index not in self.written:
            found = as_written(self.task.reference_at(shape_index), inputs)
            self.written[shape_index] = found[0] if found else None
            if found:
                self.notes.append(
                    f"shape {shape_index}: the reference rounds to a narrower float before using "
                    f"the value again ({', '.join(found[1])}), which XLA on the host may compile "
                    "away; the floor is the larger error of the reference jitted and run op by "
                    "op as written, and the task ceiling applies where both meet it")
        return self.written[shape_index]

    def _refuse_vacuous(self, case_id: str, kind: str, shape_index: int, inputs_sha256: str,
                        oracle: Sequence[np.ndarray], inputs: Sequence[Any],
                        ref: Sequence[np.ndarray]) -> None:
        """Refuse a suite that cannot tell right from wrong, from the case in hand: empty,
        all-zero or constant outputs; for seeds, outputs that do not change with the seed
        (against the last seed at the same shape); for the first seed case, outputs that do
        not change when an input is perturbed."""
        where = f"{self.task.path}"
        for k, out in enumerate(oracle):
            if (why := degenerate(out)) is not None:
                raise VacuousSuite(f"{where}: reference output {k} is {why} in {case_id}"
                                   f"{CONSEQUENCE[why.split(' (')[0]]}")
        if kind not in ("seed", "unseen"):
            return
        first = kind == "seed" and not any(c.kind == "seed" for c in self.cases)
        outputs_sha256 = hash_arrays(oracle)
        last = self._last_seed.get(shape_index)
        self._last_seed[shape_index] = (case_id, inputs_sha256, outputs_sha256)
        if first:
            refuse_insensitive(where, self.references[shape_index], inputs, base=ref)
        elif kind == "seed" and last is not None and (
                last[1] != inputs_sha256 and last[2] == outputs_sha256):
            raise VacuousSuite(
                f"{where}: reference output is identical for {last[0]} and {case_id} "
                "although their inputs differ; the output does not depend on the inputs")


def _either(jitted: OutputStats, written: OutputStats) -> OutputStats:
    """One output's numbers when two runs of the reference are both faithful to it: the
    larger error of the two, the ceiling only where both meet it."""
    return OutputStats(
        oracle_finite=jitted.oracle_finite,
        reference_finite=jitted.reference_finite and written.reference_finite,
        floor_max_abs=max(jitted.floor_max_abs, written.floor_max_abs),
        floor_mean_abs=max(jitted.floor_mean_abs, written.floor_mean_abs),
        ceiling_applies=jitted.ceiling_applies and written.ceiling_applies,
        slack=jitted.slack, terms_max_abs=jitted.terms_max_abs,
        terms_mean_abs=jitted.terms_mean_abs)


def _magnitudes(oracle_fn: Oracle, host: Sequence[np.ndarray],
                oracle: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Per output, the magnitude of the terms that were summed into each element: the
    reference in the oracle's precision on the absolute values of its floating inputs (for
    a matmul exactly sum |a||b|), never less than |oracle|. Where that run fails or is not
    finite, |oracle| alone."""
    absolute = [np.abs(x) if is_float(x) else x for x in host]
    try:
        summed = oracle_fn(absolute)
    except Exception:  # a reference that rejects these inputs: fall back to |oracle|
        summed = [np.zeros(o.shape) for o in oracle]
    del absolute
    return term_magnitudes(summed, oracle)


def _scale_floats(inputs: Sequence[Any] | None, factor: float) -> list[Any] | None:
    if inputs is None:
        return None
    scaled, any_float = [], False
    for x in inputs:
        host = np.asarray(x)
        if is_float(host):
            any_float = True
            scaled.append((host.astype(np.float64) * factor).astype(host.dtype))
        else:
            scaled.append(host)
    return scaled if any_float else None
