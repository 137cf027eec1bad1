"""Per output of a case: the reference's own error against the oracle, in bounded memory.

What the suite records for each output (the floor a candidate is held to, whether the task
ceiling applies, the accumulation slack and the magnitude of the terms) is computed over
chunks of the flattened arrays, so that an output of gigabytes needs a few chunk-sized
temporaries rather than several copies of itself. An output of at most ``CHUNK`` elements
is one chunk and gets exactly the numbers a whole-array computation gives.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tools.correctness.ceiling import ceiling_limit, element_slack, is_exact, raw_slack

CHUNK = 1 << 23  # elements per chunk: 64 MiB of float64 per temporary


@dataclass(frozen=True)
class OutputStats:
    oracle_finite: bool  # every oracle element finite
    reference_finite: bool  # the reference finite wherever the oracle is
    floor_max_abs: float
    floor_mean_abs: float
    ceiling_applies: bool  # the reference itself within TOLERANCE (+ slack) of the oracle
    slack: np.ndarray | None  # float32, the output's shape; None where negligible or exact
    terms_max_abs: float
    terms_mean_abs: float


def _chunks(n: int) -> Iterator[slice]:
    for start in range(0, max(n, 1), CHUNK):
        yield slice(start, min(start + CHUNK, n))


def _is_float(x: np.ndarray) -> bool:
    return np.issubdtype(x.dtype, np.floating) or x.dtype.name.startswith(("bfloat", "float"))


def output_stats(ref: np.ndarray, oracle: np.ndarray, magnitude: np.ndarray,
                 tolerance: dict[str, float]) -> OutputStats:
    """The suite's numbers for one output (see :class:`OutputStats`)."""
    dtype = ref.dtype.name
    r, o, m = (np.ascontiguousarray(a).reshape(-1) for a in (ref, oracle, magnitude))
    floating = _is_float(o)
    if len(r) <= CHUNK:  # one chunk: the whole-array computation, as it always was
        return _whole(ref, oracle, magnitude, tolerance)
    slack_needed = not is_exact(dtype) and any(
        element_slack(dtype, m[c], o[c].astype(np.float64), tolerance) is not None
        for c in _chunks(len(o)))
    slack = np.empty(ref.shape, np.float32) if slack_needed else None
    flat_slack = slack.reshape(-1) if slack is not None else None
    count, err_max, err_sum, term_max, term_sum = 0, 0.0, 0.0, 0.0, 0.0
    oracle_finite = reference_finite = ceiling = True
    for c in _chunks(len(o)):
        wide = o[c].astype(np.float64)
        finite = np.isfinite(wide) if floating else np.ones(wide.shape, bool)
        oracle_finite &= bool(finite.all())
        got = r[c].astype(np.float64)
        reference_finite &= bool(np.isfinite(got)[finite].all())
        chunk_slack = None
        if flat_slack is not None:
            flat_slack[c] = raw_slack(dtype, m[c])
            chunk_slack = flat_slack[c]
        err = np.abs(got - wide)[finite]
        del got
        limit = ceiling_limit(dtype, wide, tolerance, chunk_slack)[finite]
        ceiling &= bool(np.all(err <= limit))
        if err.size:
            count += err.size
            err_max = max(err_max, float(err.max()))
            err_sum += float(err.sum())
            terms = m[c][finite]
            term_max = max(term_max, float(terms.max()))
            term_sum += float(terms.sum())
    return OutputStats(oracle_finite, reference_finite, err_max,
                       err_sum / count if count else 0.0, ceiling, slack, term_max,
                       term_sum / count if count else 0.0)


def _whole(ref: np.ndarray, oracle: np.ndarray, magnitude: np.ndarray,
           tolerance: dict[str, float]) -> OutputStats:
    finite = np.isfinite(oracle) if _is_float(oracle) else np.ones(oracle.shape, bool)
    wide = oracle.astype(np.float64, copy=False)
    got = ref.astype(np.float64)
    reference_finite = bool(np.isfinite(got)[finite].all())
    slack = element_slack(ref.dtype.name, magnitude, wide, tolerance)
    err = np.abs(got - wide)[finite]
    limit = ceiling_limit(ref.dtype.name, wide, tolerance, slack)[finite]
    terms = magnitude[finite]
    return OutputStats(
        oracle_finite=bool(finite.all()), reference_finite=reference_finite,
        floor_max_abs=float(err.max()) if err.size else 0.0,
        floor_mean_abs=float(err.mean()) if err.size else 0.0,
        ceiling_applies=bool(np.all(err <= limit)), slack=slack,
        terms_max_abs=float(terms.max()) if terms.size else 0.0,
        terms_mean_abs=float(terms.mean()) if terms.size else 0.0)


def term_magnitudes(summed: Sequence[Any], oracle: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Per output, max(|summed|, |oracle|) with non-finite sums taken as 0, chunk by chunk
    into one new array (the summed outputs may be released as each is done)."""
    found = []
    for s, o in zip(summed, oracle, strict=True):
        s = np.asarray(s)
        if s.shape != o.shape or not _is_float(o):
            found.append(np.abs(o.astype(np.float64)))
            continue
        out = np.empty(o.shape, np.float64)
        flat_out, flat_s, flat_o = out.reshape(-1), s.reshape(-1), o.reshape(-1)
        for c in _chunks(flat_out.size):
            chunk = np.abs(flat_s[c].astype(np.float64))
            chunk[~np.isfinite(chunk)] = 0.0
            np.maximum(chunk, np.abs(flat_o[c].astype(np.float64)), out=flat_out[c])
        found.append(out)
    return found
