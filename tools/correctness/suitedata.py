"""The frozen suite as data: its cases, its notes and the sha256 that seals them.

The suite is msgpack with sorted keys; its sha256 is over that canonical encoding with the
hash field empty, so it can be stored as an artifact, rebuilt elsewhere and re-checked.
Arrays may be memory-mapped from disk (:mod:`tools.correctness.store`); the encoding and the
hash are the same either way. Built by :func:`tools.correctness.testsuite.build_suite`.
"""

from __future__ import annotations

from typing import Any

import msgspec

from kernelgraph.errors import KernelgraphError
from tools.correctness.oracle import FULL_PRECISION
from tools.correctness.store import stream_sha256
from tools.sandbox.wire import StaticArg, WireArray

FORMAT_VERSION = 2

_ENCODER = msgspec.msgpack.Encoder(order="sorted")


class SuiteError(KernelgraphError, ValueError):
    """The task cannot be tested as it stands (a vacuous suite); the message says why."""


class VacuousSuite(SuiteError):
    """The reference's output cannot tell a right kernel from a wrong one (empty, all zero,
    constant, or the same for different inputs): the task itself is at fault, not the run."""


class SuiteTooLarge(SuiteError):
    """Freezing the suite would not fit in this process's memory (the estimate says by how
    much, and the --scale that would fit)."""


class SuiteCase(msgspec.Struct, frozen=True):
    case_id: str
    shape_index: int
    seed: int
    kind: str  # "seed" (tuning point) | "unseen" | "probe-large" | "probe-small" | "nonfinite"
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
    # Per output of a probe, how far the oracle moves beyond rounding when the inputs move
    # by one working-precision ulp (float32, the output's shape; empty where it does not
    # matter): the problem's conditioning (tools.correctness.conditioning). () for a case
    # with none; not part of the hash while no case has any.
    conditioning: tuple[WireArray, ...] = ()
    # Per output of the non-finite case, where the oracle is not finite only because a
    # masked-out zero met a planted NaN or inf the element does not depend on, its value
    # with only the planted elements it depends on (float64, NaN elsewhere; empty where
    # there is none): a kernel that skips the masked work may return that
    # (tools.correctness.nonfinite.unplanted). () for a case with none; not hashed then.
    unplanted: tuple[WireArray, ...] = ()


class ShapeStatics(msgspec.Struct, frozen=True):
    """One shape's static arguments, in the order of their positions."""

    shape_index: int
    args: tuple[StaticArg, ...]


class FrozenSuite(msgspec.Struct, frozen=True):
    task_name: str
    task_sha256: str
    tolerance: dict[str, float]
    cases: tuple[SuiteCase, ...]
    notes: tuple[str, ...] = ()
    built_with: dict[str, str] = msgspec.field(default_factory=dict)
    format: int = FORMAT_VERSION
    sha256: str = ""
    # The --scale factors the task was loaded at, one per scaled shape; () for the task
    # file's own sizes (and then not part of the hash, as before the field existed).
    scales: tuple[float, ...] = ()
    # The Python scalars the input maker returns, per shape that has any (static arguments:
    # the cases hold only the arrays; tools.inputs.statics). Hashed when there are any.
    statics: tuple[ShapeStatics, ...] = ()

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

    def statics_at(self, shape_index: int) -> tuple[StaticArg, ...]:
        """The static arguments of one shape (() for none)."""
        return next((s.args for s in self.statics if s.shape_index == shape_index), ())

    def case(self, case_id: str) -> SuiteCase:
        for c in self.cases:
            if c.case_id == case_id:
                return c
        raise KeyError(case_id)

    def summary(self) -> dict[str, Any]:
        statics = {"statics": {str(s.shape_index): [[a.position, a.value] for a in s.args]
                               for s in self.statics}}
        return {
            "sha256": self.sha256,
            "task": self.task_name,
            "cases": [
                {"id": c.case_id, "kind": c.kind, "shape_index": c.shape_index, "seed": c.seed,
                 "input_shapes": [list(a.shape) for a in c.inputs]}
                for c in self.cases
            ],
            "notes": list(self.notes),
            "scales": list(self.scales),
            **(statics if self.statics else {}),
        }


def suite_hash(suite: FrozenSuite) -> str:
    """sha256 of the canonical encoding (msgpack, sorted keys) with the hash field empty;
    fields added since format 2 are left out while every case holds their default. Fed to
    the hash piece by piece (:func:`tools.correctness.store.stream_sha256`): arrays kept on
    disk are read in chunks, never whole."""
    plain = {k for k, v in _LATER_FIELDS.items() if all(getattr(c, k) == v for c in suite.cases)}

    def skip(owner: Any, name: str) -> bool:
        if isinstance(owner, FrozenSuite):
            return ((name == "scales" and not owner.scales)
                    or (name == "statics" and not owner.statics))
        return isinstance(owner, SuiteCase) and name in plain

    return stream_sha256(msgspec.structs.replace(suite, sha256=""), skip)


# SuiteCase fields added since format 2, each hashed only when some case departs from it
_LATER_FIELDS: dict[str, Any] = {"oracle_precision": FULL_PRECISION, "conditioning": (),
                               "unplanted": ()}
