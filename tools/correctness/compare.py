"""Compare a candidate's outputs with the frozen suite, in the parent process.

A case passes when every output has the reference's shape and dtype, is finite wherever the
oracle is, has NaN exactly where the oracle has NaN and the same infinity (sign included)
where it has one (the suite's non-finite case, :mod:`tools.correctness.nonfinite`), and is
at least as accurate as the data allows:

* max-abs error <= ``floor_factor`` x the reference's own max-abs error + ``eps_max``,
* mean-abs error <= ``floor_factor`` x the reference's own mean-abs error + ``eps_mean``,
* every element within the task's ``TOLERANCE`` ceiling: |c - o| <= atol + rtol |o| plus
  the slack any honest accumulation order needs (:mod:`tools.correctness.ceiling`);
  integer outputs exactly equal.

Where the suite records a probe's conditioning (:mod:`tools.correctness.conditioning`: the
oracle moves by more than the floor when the inputs move by one ulp, as softmax does at
1000x where two scores nearly tie), each element may also differ by
``conditioning_multiple`` x that movement: the floor rules judge the error beyond it, and
the ceiling grows by it.

In the non-finite case, where the oracle is NaN or inf at an element only through planted
elements it does not depend on (a masked-out zero times a planted NaN: the suite records
the value with only those it depends on, :func:`tools.correctness.nonfinite.unplanted`),
a kernel may return the oracle's NaN or inf or that value (a finite number, judged like any
finite element; or an infinity where the oracle has NaN, which must then be that same
infinity): a kernel that skips masked blocks never computes 0 x NaN.

``eps_max``/``eps_mean`` are a few units in the last place of the output dtype at the
output's largest/mean magnitude (4 and 1 ulp): the slack an exact operation (a copy, a
transpose, whose floor is zero) needs when the candidate rounds once differently; and at
least as many float32 ulps of the largest/mean magnitude of the terms summed into an
element, so that an honest order of accumulation passes where the reference happens to
round better (attention on tiny inputs: uniform weights, an almost exact mean). Integer
outputs get none. The candidate's process never
sees any of this; it only returned arrays.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import msgspec
import numpy as np

from tools.correctness.ceiling import accumulation_eps, ceiling_limit, is_exact
from tools.correctness.conditioning import CONDITIONING_MULTIPLE
from tools.correctness.testsuite import SuiteCase
from tools.sandbox.wire import numpy_dtype

FLOOR_FACTOR = 2.0
EPS_ULPS_MAX = 4.0
EPS_ULPS_MEAN = 1.0
NOT_COMPUTED = -1.0  # an error that could not be measured (wrong shape); fails the case
_UNWRITTEN_FRACTION = 0.01  # this share of NaN where the oracle is finite: memory never written


@dataclass(frozen=True)
class Thresholds:
    floor_factor: float = FLOOR_FACTOR
    eps_ulps_max: float = EPS_ULPS_MAX
    eps_ulps_mean: float = EPS_ULPS_MEAN
    conditioning_multiple: float = CONDITIONING_MULTIPLE


class OutputCheck(msgspec.Struct, frozen=True):
    """Every number the verdict on one output follows from (re-checked from receipts)."""

    index: int
    shape_ok: bool
    dtype_ok: bool
    nonfinite: int  # elements not finite where the oracle is finite (or differing specials)
    max_abs: float  # over the elements finite in both; NOT_COMPUTED when shapes differ
    mean_abs: float
    floor_max_abs: float
    floor_mean_abs: float
    eps_max: float
    eps_mean: float
    floor_factor: float
    atol: float
    rtol: float
    tolerance_violations: int
    ceiling_applies: bool  # False: the reference itself breaks TOLERANCE on this case
    elements: int
    problems: tuple[str, ...] = ()
    # Where the suite records the case's conditioning: the multiple of the oracle's own
    # movement each element may differ by (0: none recorded), and the max-abs and mean-abs
    # errors beyond it, which the floor rules then judge instead of max_abs and mean_abs.
    conditioning_multiple: float = 0.0
    beyond_max_abs: float = 0.0
    beyond_mean_abs: float = 0.0
    # In the non-finite case: elements where the oracle is NaN or inf only through a
    # masked-out zero (planted elements they do not depend on) and the kernel returned the
    # value with only those they depend on instead (the suite's ``unplanted``), judged
    # against it like any other element; the figures above include them.
    unplanted: int = 0

    @property
    def max_threshold(self) -> float:
        return self.floor_factor * self.floor_max_abs + self.eps_max

    @property
    def mean_threshold(self) -> float:
        return self.floor_factor * self.floor_mean_abs + self.eps_mean

    @property
    def passed(self) -> bool:
        return output_passes(self)


def output_passes(c: OutputCheck) -> bool:
    """The rule, in one place: receipts are re-checked with this same function."""
    judged_max, judged_mean = ((c.beyond_max_abs, c.beyond_mean_abs) if c.conditioning_multiple
                               else (c.max_abs, c.mean_abs))
    return (
        c.shape_ok and c.dtype_ok and c.nonfinite == 0
        and (c.tolerance_violations == 0 or not c.ceiling_applies)
        and c.max_abs >= 0.0 and c.mean_abs >= 0.0
        and judged_max <= c.floor_factor * c.floor_max_abs + c.eps_max
        and judged_mean <= c.floor_factor * c.floor_mean_abs + c.eps_mean
    )


class CaseCheck(msgspec.Struct, frozen=True):
    case_id: str
    kind: str
    shape_index: int
    outputs: tuple[OutputCheck, ...]
    error: str = ""  # the candidate raised (or was not run) on this case
    problems: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return case_passes(self)


def case_passes(c: CaseCheck) -> bool:
    return not c.error and bool(c.outputs) and all(output_passes(o) for o in c.outputs) \
        and not c.problems


def compare_case(
    case: SuiteCase,
    outputs: Sequence[np.ndarray],
    tolerance: dict[str, float],
    thresholds: Thresholds | None = None,
) -> CaseCheck:
    thresholds = thresholds or Thresholds()
    problems: list[str] = []
    if len(outputs) != len(case.oracle):
        problems.append(f"returned {len(outputs)} outputs, the reference returns "
                        f"{len(case.oracle)}")
    checks = tuple(
        _compare_output(i, np.asarray(out), case, tolerance, thresholds)
        for i, out in enumerate(outputs[: len(case.oracle)])
    )
    return CaseCheck(case_id=case.case_id, kind=case.kind, shape_index=case.shape_index,
                     outputs=checks, problems=tuple(problems))


def failed_case(case: SuiteCase, error: str) -> CaseCheck:
    return CaseCheck(case_id=case.case_id, kind=case.kind, shape_index=case.shape_index,
                     outputs=(), error=error or "no output")


def _compare_output(
    index: int, out: np.ndarray, case: SuiteCase, tolerance: dict[str, float],
    thresholds: Thresholds,
) -> OutputCheck:
    oracle = case.oracle[index].numpy()
    want_dtype = case.out_dtypes[index]
    want_shape = tuple(case.out_shapes[index])
    atol, rtol = float(tolerance["atol"]), float(tolerance["rtol"])
    problems: list[str] = []
    shape_ok = tuple(out.shape) == want_shape
    dtype_ok = out.dtype.name == want_dtype
    common = dict(index=index, floor_max_abs=case.floor_max_abs[index],
                  floor_mean_abs=case.floor_mean_abs[index], floor_factor=thresholds.floor_factor,
                  atol=atol, rtol=rtol, elements=int(np.prod(want_shape, dtype=np.int64)),
                  ceiling_applies=(case.ceiling_applies[index] if case.ceiling_applies
                                   else True))
    if not shape_ok:
        problems.append(f"output {index} has shape {tuple(out.shape)}, the reference's is "
                        f"{want_shape}")
        return OutputCheck(shape_ok=False, dtype_ok=dtype_ok, nonfinite=0, max_abs=NOT_COMPUTED,
                           mean_abs=NOT_COMPUTED, eps_max=0.0, eps_mean=0.0, tolerance_violations=0,
                           problems=tuple(problems), **common)
    if not dtype_ok:
        problems.append(f"output {index} has dtype {out.dtype.name}, the reference's is "
                        f"{want_dtype}")
    got = out.astype(np.float64)
    want = oracle.astype(np.float64)
    magnitude = np.abs(want[np.isfinite(want)])
    got_finite = np.isfinite(got)
    took = _unplanted_taken(case, index, got, got_finite)
    if took is not None:  # judged against the value without the planted elements there
        want = np.where(took, case.unplanted[index].numpy().astype(np.float64), want)
    oracle_finite = np.isfinite(want)
    special_mismatch = ~oracle_finite & ~((got == want) | (np.isnan(got) & np.isnan(want)))
    lost_specials = int(np.count_nonzero(special_mismatch))
    nonfinite = int(np.count_nonzero(oracle_finite & ~got_finite)) + lost_specials
    mask = oracle_finite & got_finite
    with np.errstate(invalid="ignore"):  # inf - inf where either is not finite
        error = np.abs(got - want)
    diff = error[mask]
    max_abs = float(diff.max()) if diff.size else 0.0
    mean_abs = float(diff.mean()) if diff.size else 0.0
    ulp = _ulp(want_dtype)
    eps_max = thresholds.eps_ulps_max * ulp * (float(magnitude.max()) if magnitude.size else 0.0)
    eps_mean = thresholds.eps_ulps_mean * ulp * (float(magnitude.mean()) if magnitude.size
                                                 else 0.0)
    if not is_exact(want_dtype) and index < len(case.terms_max_abs):
        # the same ulps of the terms summed, in the precision sums are carried in: a
        # reference that happens to round better than another honest order is no bar
        acc = accumulation_eps(want_dtype)
        eps_max = max(eps_max, thresholds.eps_ulps_max * acc * case.terms_max_abs[index])
        eps_mean = max(eps_mean, thresholds.eps_ulps_mean * acc * case.terms_mean_abs[index])
    slack = case.slack[index].numpy() if index < len(case.slack) else None
    limit = ceiling_limit(want_dtype, want, {"atol": atol, "rtol": rtol}, slack)
    if took is not None:  # no slack was measured where the oracle is not finite
        limit = np.where(took, ceiling_limit(want_dtype, want, {"atol": atol, "rtol": rtol},
                                             None), limit)
    allowance = _conditioning_allowance(case, index, thresholds.conditioning_multiple)
    judged_max, judged_mean, beyond = max_abs, mean_abs, ""
    if allowance is not None:  # the error beyond what the problem's conditioning allows
        limit = limit + allowance
        with np.errstate(invalid="ignore"):
            excess = np.maximum(np.abs(got - want) - allowance, 0.0)[mask]
        judged_max = float(excess.max()) if excess.size else 0.0
        judged_mean = float(excess.mean()) if excess.size else 0.0
        del excess
        beyond = (f", {{:.3g}} beyond {thresholds.conditioning_multiple:g}x the oracle's own "
                  "change when the inputs move by one ulp,")
    with np.errstate(invalid="ignore"):
        violations = int(np.count_nonzero((error > limit) & mask))
    del error
    if lost_specials:
        problems.append(_specials_problem(index, got, want, special_mismatch))
    if nonfinite - lost_specials:
        nan_where_finite = int(np.count_nonzero(oracle_finite & np.isnan(got)))
        share = nan_where_finite / max(1, int(oracle_finite.sum()))
        problem = (f"output {index} has {nonfinite - lost_specials} non-finite element(s) "
                   "where the reference is finite")
        if share >= _UNWRITTEN_FRACTION:
            problem += (f"; {share:.0%} of the output is NaN, the poison interpret mode puts "
                        "in memory before it is written: output blocks the grid never writes, "
                        "or a scratch accumulator read before it is initialised")
        problems.append(problem)
    if not nonfinite:
        if judged_max > thresholds.floor_factor * common["floor_max_abs"] + eps_max:
            problems.append(
                f"output {index} max-abs error {max_abs:.3g}{beyond.format(judged_max)} exceeds "
                f"{thresholds.floor_factor:g}x the reference's own error "
                f"{common['floor_max_abs']:.3g} (+{eps_max:.2g})")
        if judged_mean > thresholds.floor_factor * common["floor_mean_abs"] + eps_mean:
            problems.append(
                f"output {index} mean-abs error {mean_abs:.3g}{beyond.format(judged_mean)} "
                "exceeds "
                f"{thresholds.floor_factor:g}x the reference's own error "
                f"{common['floor_mean_abs']:.3g} (+{eps_mean:.2g})")
        if violations and common["ceiling_applies"]:
            problems.append(
                f"output {index}: {violations} element(s) differ from the oracle (integers "
                "are compared exactly)" if is_exact(want_dtype) else
                f"output {index}: {violations} element(s) outside the task tolerance "
                f"atol={atol:g}, rtol={rtol:g} (+ the accumulation slack)")
    return OutputCheck(shape_ok=True, dtype_ok=dtype_ok, nonfinite=nonfinite, max_abs=max_abs,
                       mean_abs=mean_abs, eps_max=eps_max, eps_mean=eps_mean,
                       tolerance_violations=violations, problems=tuple(problems),
                       conditioning_multiple=(thresholds.conditioning_multiple
                                              if allowance is not None else 0.0),
                       beyond_max_abs=judged_max if allowance is not None else 0.0,
                       beyond_mean_abs=judged_mean if allowance is not None else 0.0,
                       unplanted=int(np.count_nonzero(took)) if took is not None else 0,
                       **common)


def _unplanted_taken(case: SuiteCase, index: int, got: np.ndarray,
                     got_finite: np.ndarray) -> np.ndarray | None:
    """Where the oracle is not finite only because a masked-out zero met a planted value
    (the suite records the value with only those the element depends on) and the kernel
    returned that value instead (a finite number, or that same infinity): those elements
    are judged against it (None: nothing of the kind)."""
    if index >= len(case.unplanted):
        return None
    free = case.unplanted[index].numpy()
    if free.size == 0 or free.shape != got_finite.shape:
        return None
    with np.errstate(invalid="ignore"):
        took = np.isfinite(free) & got_finite | np.isinf(free) & (got == free)
    return took if took.any() else None


def _conditioning_allowance(case: SuiteCase, index: int, multiple: float) -> np.ndarray | None:
    """``multiple`` x the oracle's movement per element, where the suite records it."""
    if index >= len(case.conditioning):
        return None
    movement = case.conditioning[index].numpy()
    if movement.size == 0:
        return None
    return multiple * movement.astype(np.float64)


def _specials_problem(index: int, got: np.ndarray, want: np.ndarray,
                      mismatch: np.ndarray) -> str:
    """What a kernel made of the reference's NaN and infinities (the non-finite case)."""
    nan = np.isnan(want) & mismatch
    parts = []
    if (to_finite := int(np.count_nonzero(nan & np.isfinite(got)))):
        parts.append(f"{to_finite} NaN returned as finite numbers")
    if (to_inf := int(np.count_nonzero(nan & np.isinf(got)))):
        parts.append(f"{to_inf} NaN returned as infinities")
    if (inf := int(np.count_nonzero(mismatch & ~nan))):
        parts.append(f"{inf} infinities returned as NaN, finite numbers or the other sign")
    return (f"output {index} does not keep the reference's NaN and inf positions: "
            + ", ".join(parts) + " (NaN and infinities must come out where and as the "
            "reference's do)")


def _ulp(dtype_name: str) -> float:
    dtype = numpy_dtype(dtype_name)
    if np.issubdtype(dtype, np.integer) or dtype == np.bool_:
        return 0.0
    try:
        return float(np.finfo(dtype).eps)
    except ValueError:
        import ml_dtypes

        return float(ml_dtypes.finfo(dtype).eps)
