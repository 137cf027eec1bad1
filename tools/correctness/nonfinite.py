"""The suite's non-finite case: NaN, +inf and -inf planted in the floating inputs.

Random inputs are always finite, so without this case a kernel that turns NaN into 0
(``jnp.nan_to_num``, ``where(x != x, 0, x)``, a masked max that drops NaN) passes every
check. The case takes one shape's seed inputs (the smallest shape: interpret mode stays
fast) and puts one NaN, one +inf and one -inf at fixed pseudo-random positions of every
floating input; integer and bool inputs are untouched. The oracle decides what each output
element must be: where it is NaN the kernel must give NaN, where it is +inf or -inf the
kernel must give that same infinity, and the finite elements are compared as in any case
(:mod:`tools.correctness.compare`). That holds where the reference makes a whole row
non-finite (a reduction over a row with a NaN) as much as element by element. Where the
oracle is NaN only because a masked-out zero met a planted value the element does not depend
on (0 x NaN), the suite records the value a kernel that skips the masked work gives there
(:func:`unplanted`) and either is accepted.

The case is only fair where the reference itself, in its own dtypes, has the oracle's NaN
and inf positions; where it does not, the case is dropped with a note. A task whose
reference is not defined on non-finite inputs opts out with ``NO_NONFINITE_INPUTS = "why"``,
or for one kind only with ``NO_NONFINITE_INPUTS = {"nan": "why"}`` (a top-k: NaN has no
place in an order, while infinities have one), or for one input by its position (``{2:
"why"}``: linear attention's values, which a chunked kernel multiplies by masked zero scores
of earlier tokens, where the scan never touches them), read by :mod:`tools.inputs.tasks`;
the suite records the reason as a note.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from tools.inputs.tasks import Task

SEED = 20261202
KINDS = ("nan", "inf")  # what a task may opt out of, one or both
_SPECIALS: dict[str, tuple[float, ...]] = {"nan": (float("nan"),),
                                           "inf": (float("inf"), float("-inf"))}


def is_float(x: np.ndarray) -> bool:
    return np.issubdtype(x.dtype, np.floating) or x.dtype.name.startswith(("bfloat", "float"))


def plant(inputs: Sequence[Any], kinds: Sequence[str] = KINDS, only: int | None = None,
          skip: Collection[int] = ()) -> tuple[list[np.ndarray], int] | None:
    """Copies of ``inputs`` with NaN, +inf and -inf (those of ``kinds``) at fixed positions
    of every floating input not in ``skip``, or of input ``only`` (one each, fewer in an
    input of fewer elements), and how many were planted; None when nothing is planted."""
    specials = [v for kind in KINDS if kind in kinds for v in _SPECIALS[kind]]
    planted, count = [], 0
    for position, x in enumerate(inputs):
        host = np.array(x)  # a copy: the case's inputs, never the maker's arrays
        if (is_float(host) and host.size and only in (None, position)
                and position not in skip):
            rng = np.random.default_rng([SEED, position])
            where = rng.choice(host.size, size=min(3, host.size), replace=False)
            flat = host.reshape(-1)
            for index, value in zip(where, specials, strict=False):
                flat[index] = value
                count += 1
        planted.append(host)
    return (planted, count) if count else None


def first_float(inputs: Sequence[Any], skip: Collection[int] = ()) -> int | None:
    return next((i for i, x in enumerate(inputs)
                 if is_float(np.asarray(x)) and i not in skip), None)


def swamped(outputs: Sequence[Any]) -> bool:
    """Whether some floating output has no finite element left: such a case only asks for
    NaN everywhere, which a kernel that reads one input's NaN as 0 still gives when another
    input's NaN reaches every element (a NaN weight of a two-layer MLP)."""
    for out in outputs:
        host = np.asarray(out)
        if is_float(host) and host.size and not np.isfinite(host).any():
            return True
    return False


def opt_out(why: Any) -> dict[str | int, str] | None:
    """``NO_NONFINITE_INPUTS`` as kind ("nan", "inf") or input position -> reason (a string:
    both kinds, every input); None when it is neither a non-empty string nor a mapping of
    such keys to non-empty strings."""
    if isinstance(why, str):
        return dict.fromkeys(KINDS, why.strip()) if why.strip() else None
    if not isinstance(why, dict) or not why or not all(
        k in KINDS or (isinstance(k, int) and not isinstance(k, bool) and k >= 0) for k in why
    ):
        return None
    if not all(isinstance(v, str) and v.strip() for v in why.values()):
        return None
    return {k: v.strip() for k, v in why.items()}


def opt_out_note(out: dict[str | int, str]) -> str:
    """The suite's note for a task that opts out (loud: the report marks NOT)."""
    if set(out) == set(KINDS) and len(set(out.values())) == 1:
        return ("non-finite inputs (NaN, +/-inf) are NOT fed: the task opts out "
                f"(NO_NONFINITE_INPUTS: {out['nan']})")
    names = {"nan": "NaN inputs are", "inf": "+/-inf inputs are"}
    return "; ".join(f"{names.get(str(k), f'NaN and inf in input {k} are')} NOT fed: the "
                     f"task opts out (NO_NONFINITE_INPUTS[{k!r}]: {why})"
                     for k, why in sorted(out.items(), key=lambda kv: str(kv[0])))


def specials_differ(reference: np.ndarray, oracle: np.ndarray) -> int:
    """Elements where the reference's NaN and inf positions (and signs) are not the
    oracle's: the reference itself would fail the non-finite case there."""
    if not is_float(oracle):
        return 0
    ref = reference.astype(np.float64)
    want = oracle.astype(np.float64)
    same = (ref == want) | (np.isnan(ref) & np.isnan(want))
    return int(np.count_nonzero(~same & ~(np.isfinite(ref) & np.isfinite(want))))


def unplanted(oracle: Callable[[Sequence[np.ndarray]], list[np.ndarray]],
              made: Sequence[Any], planted: Sequence[np.ndarray],
              outputs: Sequence[np.ndarray], most_sets: int = 32) -> list[np.ndarray]:
    """Per output, where the oracle is not finite only through planted elements the element
    does not depend on, its value with just those it depends on planted (float64: finite, or
    an infinity where the oracle is NaN; NaN elsewhere), or an empty array where there is
    no such element.

    The oracle runs on the inputs as made, then once per planted element moved to +2 and
    to -2 times its input's largest magnitude (past every other element, so a max or a min
    over it moves), the others as made: an element depends on a planted one when its value
    moves, bitwise. Where the oracle is not finite, it runs again with only the planted
    elements that element depends on (``most_sets`` distinct sets at most; past that the
    rest stay strict); where that differs the oracle was NaN or inf only because a
    masked-out zero met a planted value it does not depend on (0 x NaN: causal attention's
    weights above the diagonal, the pages past a sequence's length, a block mask written
    as a product), which a kernel that skips the masked work never computes."""
    made = [np.asarray(x) for x in made]
    spots = [(i, int(j)) for i, x in enumerate(planted) if is_float(np.asarray(x))
             for j in np.flatnonzero(~np.isfinite(np.asarray(x, np.float64).reshape(-1)))]
    floats = [k for k, out in enumerate(outputs) if is_float(out)]

    def run(values: dict[tuple[int, int], float]) -> list[np.ndarray]:
        moved = [np.array(x) for x in made]
        for (i, j), value in values.items():
            moved[i].reshape(-1)[j] = value
        return [np.asarray(o).astype(np.float64) for o in oracle(moved)]

    base = run({})
    depends = {k: np.zeros((len(spots), *outputs[k].shape), bool) for k in floats}
    for n, (i, j) in enumerate(spots):
        scale = float(np.abs(made[i].astype(np.float64)).max()) or 1.0
        for sign in (2.0, -2.0):
            moved = run({(i, j): sign * scale})
            for k in floats:
                depends[k][n] |= moved[k].view(np.int64) != base[k].view(np.int64)
    found = {k: np.full(outputs[k].shape, np.nan) for k in floats}
    sets: dict[bytes, list[tuple[int, np.ndarray]]] = {}
    for k in floats:
        special = ~np.isfinite(np.asarray(outputs[k], np.float64))
        keys = np.packbits(depends[k], axis=0).reshape(-1, *outputs[k].shape)
        for index in np.argwhere(special):  # argwhere, not nonzero: a 0-d output too
            key = keys[(slice(None), *index)].tobytes()
            sets.setdefault(key, []).append((k, index))
    for key, elements in list(sets.items())[:most_sets]:
        bits = np.unpackbits(np.frombuffer(key, np.uint8))[: len(spots)].astype(bool)
        if bits.all():
            continue  # every planted element: the oracle itself
        keep = {spot: float(planted[spot[0]].reshape(-1)[spot[1]])
                for spot, on in zip(spots, bits, strict=True) if on}
        alone = run(keep)
        for k, index in elements:
            value = alone[k][tuple(index)]
            if not np.isnan(value) and value != outputs[k][tuple(index)]:
                found[k][tuple(index)] = value  # finite, or an infinity where it was NaN
    return [found[k] if k in found and not np.isnan(found[k]).all()
            else np.zeros((0,), np.float64) for k in range(len(outputs))]


def nonfinite_shape(task: Task, skip: frozenset[int] = frozenset()) -> int:
    """Where the non-finite case runs: the shape with the fewest input elements, an unseen
    one (not in ``skip``) before the tuning point (whose cases the timing checks read)."""
    def elements(index: int) -> int:
        return sum(int(np.prod(s.shape, dtype=np.int64)) for s in task.input_specs(index))

    return min((*(i for i in task.unseen_shape_indices if i not in skip), 0), key=elements)
