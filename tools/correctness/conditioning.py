"""How far the exact answer moves when the inputs move by one ulp: the problem's
conditioning, per output element, at the magnitude probes.

At the 1000x probe, causal attention's scores are about 1e6 and softmax is nearly one-hot.
Where a row's two largest scores lie within a few float32 ulps of each other (8 x 512 x 128,
seed 0: one row, a gap of 0.56 at scores of 3e6), the weight between them follows the
rounding of the scores: the float64 oracle itself moves by up to 404 in that row when the
float32 inputs move by one ulp. A kernel that rounds honestly in another order (q scaled
before the dot rather than the scores after it) lands 902 from the oracle there, while the
reference, rounding in XLA's order, lands 38 from it. One scalar floor per output cannot tell
that row from the others; the element-wise movement can.

So each probe case runs the oracle ``PERTURBATIONS`` more times, on the floating inputs
each moved by one ulp of the working precision (``x (1 +/- eps)``, float32's eps for
float32 and narrower inputs, float64's for float64; the sign drawn per element from a fixed
seed), and keeps per element the largest change of the oracle's output beyond
``ROUNDING_ULPS`` ulps of the element and of its terms (what a sum's own rounding moves by:
the floor covers that). It is recorded only where ``CONDITIONING_MULTIPLE`` times it exceeds
what the max-abs limit grants anyway (the reference's own error plus a few ulps) somewhere,
so the suites of well-conditioned tasks are unchanged. A candidate's element may then differ from the oracle by that multiple of the
movement on top of the usual limits (:mod:`tools.correctness.compare`). An honest order of
accumulation lands within a few times the movement (on the case above, 1.4 to 11 times the
largest of 4 perturbations over 100 seeds); a wrong mask, a missing rescale or a finite
mask value that large scores cross is also wrong in well-conditioned elements, where the
movement is nothing. The multiple assumes the sums feeding the ill-conditioned step are a
few hundred terms long (an honest order's error grows with their length).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

import numpy as np

from tools.correctness.ceiling import accumulation_eps
from tools.correctness.floors import CHUNK
from tools.sandbox.wire import numpy_dtype

PERTURBATIONS = 4
CONDITIONING_MULTIPLE = 16.0
# When the inputs move by one ulp, a sum moves by up to a few ulps of the terms summed into
# it, and an output rounded to its dtype (bf16) may flip by one of its own ulps: the floor
# already covers that much. Only the movement beyond it is the problem's.
ROUNDING_ULPS = 4.0
_SEED = 20260417


def _is_float(x: np.ndarray) -> bool:
    return np.issubdtype(x.dtype, np.floating) or x.dtype.name.startswith(("bfloat", "float"))


def _eps(dtype_name: str) -> float:
    """One ulp at 1.0 of the output's dtype (bfloat16 and 8-bit floats included)."""
    dtype = numpy_dtype(dtype_name)
    try:
        return float(np.finfo(dtype).eps)
    except ValueError:
        import ml_dtypes

        return float(ml_dtypes.finfo(dtype).eps)


def perturbed_inputs(host: Sequence[np.ndarray], rng: np.random.Generator) -> list[np.ndarray]:
    """The floating inputs moved by one unit of the working precision (float32 for float32
    and narrower, float64 for float64), relative, with a random sign per element, in float64
    so the move is exact; other inputs as they are."""
    moved = []
    for x in host:
        if _is_float(x) and x.size:
            sign = rng.integers(0, 2, x.shape, dtype=np.int8).astype(np.float64) * 2.0 - 1.0
            moved.append(x.astype(np.float64) * (1.0 + accumulation_eps(x.dtype.name) * sign))
        else:
            moved.append(x)
    return moved


def oracle_movement(oracle: Callable[[Sequence[np.ndarray]], list[np.ndarray]],
                    host: Sequence[np.ndarray],
                    outputs: Sequence[np.ndarray]) -> list[np.ndarray | None]:
    """Per output, the largest |oracle(perturbed) - oracle| over ``PERTURBATIONS`` runs
    (float32, the output's shape; 0 where either is not finite); None for non-floating
    outputs. ``outputs`` are the oracle's outputs on ``host`` itself. Temporaries are
    chunk-sized (:data:`tools.correctness.floors.CHUNK`)."""
    rng = np.random.default_rng(_SEED)
    found: list[np.ndarray | None] = [
        np.zeros(np.shape(o), np.float32) if _is_float(np.asarray(o)) else None
        for o in outputs]
    for _ in range(PERTURBATIONS):
        moved = perturbed_inputs([np.asarray(x) for x in host], rng)
        again = oracle(moved)
        del moved
        for base, out, most in zip(outputs, again, found, strict=True):
            if most is None:
                continue
            flat_base, flat_out = np.asarray(base).reshape(-1), np.asarray(out).reshape(-1)
            flat_most = most.reshape(-1)
            for c in _chunks(flat_most.size):
                with np.errstate(invalid="ignore"):
                    change = np.abs(flat_out[c].astype(np.float64) - flat_base[c])
                change[~np.isfinite(change)] = 0.0
                np.maximum(flat_most[c], change.astype(np.float32), out=flat_most[c])
        del again
    return found


def conditioning(oracle: Callable[[Sequence[np.ndarray]], list[np.ndarray]],
                 host: Sequence[np.ndarray], outputs: Sequence[np.ndarray],
                 out_dtypes: Sequence[str], magnitudes: Sequence[np.ndarray],
                 floors_max: Sequence[float]) -> list[np.ndarray | None]:
    """Per output, what the suite records (float32, the output's shape): the oracle's
    movement beyond ``ROUNDING_ULPS`` ulps of the element's term magnitude (in the precision
    the reference's output dtype, ``out_dtypes``, is summed in) and of the element itself
    (in that dtype); None where ``CONDITIONING_MULTIPLE`` times it is nowhere more than the
    max-abs limit grants anyway (the reference's own max-abs error, ``floors_max``, and
    ``ROUNDING_ULPS`` ulps at the largest magnitudes), or for non-floating outputs."""
    if not any(_is_float(np.asarray(x)) and np.asarray(x).size for x in host):
        return [None] * len(outputs)
    movement = oracle_movement(oracle, host, outputs)
    found: list[np.ndarray | None] = []
    for out, dtype, move, terms, floor in zip(outputs, out_dtypes, movement, magnitudes,
                                              floors_max, strict=True):
        if move is None:
            found.append(None)
            continue
        acc, own = ROUNDING_ULPS * accumulation_eps(dtype), ROUNDING_ULPS * _eps(dtype)
        flat_move = move.reshape(-1)
        flat_terms, flat_out = np.asarray(terms).reshape(-1), np.asarray(out).reshape(-1)
        granted = 0.0  # the ulps the max-abs limit grants anyway, at the largest magnitudes
        for c in _chunks(flat_move.size):  # in place: the movement beyond rounding
            summed = acc * flat_terms[c].astype(np.float64)
            itself = own * np.abs(flat_out[c].astype(np.float64))
            with np.errstate(invalid="ignore"):
                granted = max(granted, float(np.nanmax(summed, initial=0.0)),
                              float(np.nanmax(itself, initial=0.0)))
            flat_move[c] = np.maximum(flat_move[c] - (summed + itself), 0.0)
        needed = move.size and CONDITIONING_MULTIPLE * float(move.max()) > floor + granted
        found.append(move if needed else None)
    return found


def _chunks(n: int) -> Iterator[slice]:
    for start in range(0, n, CHUNK):
        yield slice(start, min(start + CHUNK, n))


def recorded_conditioning(oracle: Callable[[Sequence[np.ndarray]], list[np.ndarray]],
                          host: Sequence[np.ndarray], outputs: Sequence[np.ndarray],
                          out_dtypes: Sequence[str], magnitudes: Sequence[np.ndarray],
                          floors_max: Sequence[float]) -> tuple[list[np.ndarray], list[str]]:
    """What a probe case records: one array per output (empty where nothing is needed), or
    [] when no output needs any (the case then holds none and its hash is unchanged), and a
    note per output that has one."""
    found = conditioning(oracle, host, outputs, out_dtypes, magnitudes, floors_max)
    if all(f is None for f in found):
        return [], []
    notes = []
    for k, (f, floor) in enumerate(zip(found, floors_max, strict=True)):
        if f is not None:
            notes.append(
                f"output {k} is ill-conditioned at this magnitude: in {int(np.count_nonzero(f))} "
                f"element(s) the oracle moves by up to {float(f.max()):.3g} beyond rounding "
                f"when the inputs move by one ulp (the reference's own error is {floor:.3g}); "
                f"an element may differ from the oracle by {CONDITIONING_MULTIPLE:g}x that")
    return [f if f is not None else np.zeros((0,), np.float32) for f in found], notes
