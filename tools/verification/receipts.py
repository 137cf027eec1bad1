"""Self-hashed verdict receipts, and the check that a receipt's verdict follows from it.

A receipt is one JSON object: task and candidate hashes, the suite hash, every number the
verdict depends on (per case and output: errors, floor, thresholds, tolerance violations),
the audit and compile results, timings, the environment and the verdict. Its ``sha256``
field is the sha256 of the canonical JSON of everything else (sorted keys, no spaces,
UTF-8). :func:`check_receipt` recomputes the hash and re-derives the verdict with the same
rule the evaluator used (:func:`derive_verdict`), so a receipt edited by hand, or one whose
verdict does not follow from its numbers, is caught.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec

from kernelgraph.errors import KernelgraphError
from tools.correctness.compare import FLOOR_FACTOR, CaseCheck, case_passes

RECEIPT_KIND = "kernelgraph.verify-receipt"
RECEIPT_VERSION = 1


class ReceiptError(KernelgraphError, ValueError):
    """A receipt that cannot be read at all (not JSON, not a receipt)."""


class Checks(msgspec.Struct, frozen=True):
    """The facts a verdict is the conjunction of."""

    candidate_loaded: bool
    sandbox_ok: bool
    compile_ok: bool
    audit_ok: bool
    tampering: tuple[str, ...]
    inputs_unmodified: bool
    inputs_as_sent: bool
    races_in: tuple[str, ...]
    consistency_problems: tuple[str, ...]
    timing_valid: bool  # a real-device time faster than the roofline allows is invalid
    floor_factor: float
    tolerance: dict[str, float]
    cases: tuple[CaseCheck, ...]


def derive_verdict(checks: Checks) -> str:
    """"pass" only when every fact holds and every case passes; the one rule for both sides."""
    ok = (
        checks.candidate_loaded and checks.sandbox_ok and checks.compile_ok and checks.audit_ok
        and not checks.tampering and checks.inputs_unmodified and checks.inputs_as_sent
        and not checks.races_in and not checks.consistency_problems and checks.timing_valid
        and checks.floor_factor == FLOOR_FACTOR
        and bool(checks.cases) and all(case_passes(c) for c in checks.cases)
        and all(o.floor_factor == checks.floor_factor
                and o.atol == checks.tolerance.get("atol") and o.rtol == checks.tolerance.get("rtol")
                for c in checks.cases for o in c.outputs)
    )
    return "pass" if ok else "fail"


def canonical_json(obj: Mapping[str, Any]) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False).encode()


def _finite(obj: Any) -> Any:
    """JSON has no inf/NaN: such figures (never a check) are kept as strings."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    return obj


def seal(body: Mapping[str, Any]) -> dict[str, Any]:
    """The receipt: ``body`` as plain JSON data plus its own sha256."""
    plain = _finite(msgspec.to_builtins(dict(body)))
    plain.pop("sha256", None)
    plain["sha256"] = hashlib.sha256(canonical_json(plain)).hexdigest()
    return plain


class ReceiptCheck(msgspec.Struct, frozen=True):
    ok: bool
    hash_ok: bool
    verdict_ok: bool
    recorded_verdict: str
    derived_verdict: str
    sha256: str
    computed_sha256: str
    problems: tuple[str, ...]


def check_receipt(receipt: Mapping[str, Any]) -> ReceiptCheck:
    """Re-check a receipt's own hash and that its verdict follows from its numbers."""
    if receipt.get("kind") != RECEIPT_KIND:
        raise ReceiptError(f"not a kernelgraph receipt (kind={receipt.get('kind')!r})")
    body = dict(receipt)
    recorded_sha = str(body.pop("sha256", ""))
    computed = hashlib.sha256(canonical_json(body)).hexdigest()
    problems: list[str] = []
    hash_ok = computed == recorded_sha
    if not hash_ok:
        problems.append("the receipt's sha256 does not match its contents (it was edited)")
    recorded = str(receipt.get("verdict", ""))
    try:
        checks = msgspec.convert(receipt.get("checks"), Checks)
        derived = derive_verdict(checks)
    except msgspec.ValidationError as exc:
        derived = "unreadable"
        problems.append(f"the receipt's checks cannot be read: {exc}")
    verdict_ok = derived == recorded
    if not verdict_ok and derived != "unreadable":
        problems.append(f"the verdict {recorded!r} does not follow from the numbers, which "
                        f"give {derived!r}")
    return ReceiptCheck(
        ok=hash_ok and verdict_ok, hash_ok=hash_ok, verdict_ok=verdict_ok,
        recorded_verdict=recorded, derived_verdict=derived, sha256=recorded_sha,
        computed_sha256=computed, problems=tuple(problems),
    )


def load_receipt(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise ReceiptError(f"{path}: no such file")
    try:
        data = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ReceiptError(f"{path}: not JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ReceiptError(f"{path}: a receipt is a JSON object")
    return data


def write_receipt(receipt: Mapping[str, Any], path: str | Path) -> None:
    Path(path).write_text(json.dumps(receipt, indent=2, sort_keys=True, allow_nan=False) + "\n")
