"""Signed verdict receipts, and the check that a receipt's verdict follows from it.

A receipt is one JSON object: task and candidate hashes, the suite hash, every number the
verdict depends on (per case and output: errors, floor, thresholds, tolerance violations),
the audit and compile results, the measurement, timings, the environment and the verdict.
Its ``sha256`` field is the sha256 of the canonical JSON of everything but ``sha256`` and
``signature`` (sorted keys, no spaces, UTF-8), and ``signature`` is the Ed25519 signature of
the same bytes by this installation's key (:mod:`tools.verification.signing`).
:func:`check_receipt` checks the signature and which key made it, recomputes the hash,
re-derives the verdict with the same rule the evaluator used (:func:`derive_verdict`) and
the speedup from the latency and baseline figures, so a receipt edited by hand (even with
its hash recomputed), one signed by another key, or one whose verdict or speedup does not
follow from its numbers, is caught.

A receipt is bound to files: given the candidate's bytes (and the task's),
:func:`check_receipt` recomputes their sha256 and fails the receipt when either is not the
one it signed, so a genuine receipt cannot vouch for another kernel. Without them it checks
the receipt alone (``ReceiptCheck.bound`` is false), which says nothing about any file.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

import msgspec

from kernelgraph.errors import KernelgraphError
from tools.correctness.compare import FLOOR_FACTOR, CaseCheck, case_passes
from tools.verification import signing

RECEIPT_KIND = "kernelgraph.verify-receipt"
RECEIPT_VERSION = 2
_UNSIGNED = ("sha256", "signature")
_SPEEDUP_RTOL = 1e-9


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


def seal(body: Mapping[str, Any], key: signing.ReceiptKey | None = None) -> dict[str, Any]:
    """The receipt: ``body`` as plain JSON data plus its sha256 and its signature by ``key``
    (default: this installation's key, created on first use)."""
    plain = _finite(msgspec.to_builtins(dict(body)))
    for name in _UNSIGNED:
        plain.pop(name, None)
    message = canonical_json(plain)
    plain["sha256"] = hashlib.sha256(message).hexdigest()
    plain["signature"] = (key or signing.load_key()).sign(message)
    return plain


class ReceiptCheck(msgspec.Struct, frozen=True):
    ok: bool
    hash_ok: bool
    signature_ok: bool  # a valid Ed25519 signature of the contents by the key it names
    key_trusted: bool  # ...and that key is one of the trusted ones (this installation's)
    key_fingerprint: str  # the key that signed it ("" when unsigned)
    speedup_ok: bool
    verdict_ok: bool
    recorded_verdict: str
    derived_verdict: str
    sha256: str
    computed_sha256: str
    problems: tuple[str, ...]
    candidate_ok: bool | None = None  # None: no candidate file was given, nothing is bound
    task_ok: bool | None = None  # None: no task file was given
    binding: tuple[str, ...] = ()  # which file's hash differs from the signed one, one line each

    @property
    def bound(self) -> bool:
        """Whether the receipt was checked against a candidate file (not only by itself)."""
        return self.candidate_ok is not None


def check_receipt(receipt: Mapping[str, Any],
                  trusted: Collection[str] | None = None, *,
                  candidate: bytes | None = None, task: bytes | None = None) -> ReceiptCheck:
    """Re-check a receipt: its signature and the key that made it (``trusted``: public-key
    fingerprints; default this installation's), its own hash, that its verdict follows from
    its numbers and its speedup from its latency and baseline; and, given the ``candidate``
    file's bytes (and the ``task``'s), that they are the files it signed."""
    if receipt.get("kind") != RECEIPT_KIND:
        raise ReceiptError(f"not a kernelgraph receipt (kind={receipt.get('kind')!r})")
    body = {k: v for k, v in receipt.items() if k not in _UNSIGNED}
    message = canonical_json(body)
    recorded_sha = str(receipt.get("sha256", ""))
    computed = hashlib.sha256(message).hexdigest()
    problems: list[str] = []
    hash_ok = computed == recorded_sha
    if not hash_ok:
        problems.append("the receipt's sha256 does not match its contents (it was edited)")
    signature_ok, key_trusted, key_fp = _check_signature(receipt.get("signature"), message,
                                                         trusted, problems)
    recorded = str(receipt.get("verdict", ""))
    try:
        checks = msgspec.convert(receipt.get("checks"), Checks)
        derived = derive_verdict(checks)
    except msgspec.ValidationError as exc:
        checks, derived = None, "unreadable"
        problems.append(f"the receipt's checks cannot be read: {exc}")
    verdict_ok = derived == recorded
    if not verdict_ok and derived != "unreadable":
        problems.append(f"the verdict {recorded!r} does not follow from the numbers, which "
                        f"give {derived!r}")
    speedup_ok = _check_measurement(receipt.get("measurement"), recorded, checks, problems)
    speedup_ok = _check_timed_program(receipt, recorded, problems) and speedup_ok
    binding: list[str] = []
    candidate_ok = None if candidate is None else _bound(receipt, "candidate", candidate, binding)
    task_ok = None if task is None else _bound(receipt, "task", task, binding)
    return ReceiptCheck(
        ok=(hash_ok and signature_ok and key_trusted and speedup_ok and verdict_ok
            and candidate_ok is not False and task_ok is not False),
        hash_ok=hash_ok, signature_ok=signature_ok, key_trusted=key_trusted,
        key_fingerprint=key_fp, speedup_ok=speedup_ok, verdict_ok=verdict_ok,
        recorded_verdict=recorded, derived_verdict=derived, sha256=recorded_sha,
        computed_sha256=computed, problems=(*binding, *problems),
        candidate_ok=candidate_ok, task_ok=task_ok, binding=tuple(binding),
    )


_NOUN = {"candidate": "kernel", "task": "task"}


def signed_sha256(receipt: Mapping[str, Any], which: str) -> str | None:
    """The sha256 the receipt signed for its ``which`` file ("candidate" or "task")."""
    section = receipt.get(which)
    value = section.get("sha256") if isinstance(section, Mapping) else None
    return value if isinstance(value, str) and value else None


def _bound(receipt: Mapping[str, Any], which: str, data: bytes, binding: list[str]) -> bool:
    """Whether ``data`` (a file's bytes) is the ``which`` file the receipt signed; if not,
    one line saying which hash differs."""
    actual = hashlib.sha256(data).hexdigest()
    signed = signed_sha256(receipt, which)
    if signed == actual:
        return True
    binding.append(
        f"the {which} file's sha256 {actual[:16]}... is not the one the receipt signed "
        f"({signed[:16]}...): the receipt is for another {_NOUN[which]}" if signed else
        f"the receipt signed no {which} sha256, so it vouches for no {_NOUN[which]} file")
    return False


def _check_signature(signature: Any, message: bytes, trusted: Collection[str] | None,
                     problems: list[str]) -> tuple[bool, bool, str]:
    if not isinstance(signature, dict):
        problems.append("the receipt is not signed")
        return False, False, ""
    try:
        key_fp = signing.fingerprint(signing.public_key_of(signature))
    except (signing.SigningError, ValueError):
        problems.append("the receipt's signature names no readable Ed25519 public key")
        return False, False, ""
    valid = signing.signature_valid(signature, message)
    if not valid:
        problems.append(f"the signature by key {key_fp} does not match the receipt's contents "
                        "(it was edited after signing)")
    if trusted is None:
        trusted = installation_fingerprints()
    known = key_fp in trusted
    if not known:
        problems.append(f"signed by another key ({key_fp}), not a trusted one "
                        f"({', '.join(sorted(trusted)) or 'none'})")
    return valid, known, key_fp


def installation_fingerprints() -> set[str]:
    """The fingerprint of this installation's key (none before it signed anything)."""
    try:
        return {signing.load_key(create=False).fingerprint}
    except signing.SigningError:
        return set()


def _check_measurement(measurement: Any, verdict: str, checks: Checks | None,
                       problems: list[str]) -> bool:
    """A pass carries a valid measurement whose speedup is its baseline over its latency."""
    if measurement is None:
        if verdict == "pass":
            problems.append("a passing verdict without a measurement")
            return False
        return True
    try:
        latency, baseline = float(measurement["latency_s"]), float(measurement["baseline_s"])
        speedup, valid = float(measurement["speedup"]), measurement.get("valid", True)
    except (KeyError, TypeError, ValueError):
        problems.append("the measurement cannot be read (latency_s, baseline_s, speedup)")
        return False
    expected = baseline / latency if latency > 0 else 0.0
    ok = math.isfinite(expected) and math.isclose(speedup, expected, rel_tol=_SPEEDUP_RTOL)
    if not ok:
        problems.append(f"the speedup {speedup:g} does not follow from the figures: baseline "
                        f"{baseline:g} s / latency {latency:g} s = {expected:g}")
    if checks is not None and bool(valid) != checks.timing_valid and checks.timing_valid:
        problems.append("the measurement is marked invalid but the checks say timing was valid")
        ok = False
    return ok


def _check_timed_program(receipt: Mapping[str, Any], verdict: str,
                         problems: list[str]) -> bool:
    """A pass measured on a device timed the tuning-point program that was audited: the
    measurement names its sha256 and the receipt's programs list it for shape 0."""
    measurement = receipt.get("measurement")
    if verdict != "pass" or not isinstance(measurement, Mapping) or \
            measurement.get("measured_on") != "real":
        return True
    programs = receipt.get("programs")
    audited = programs.get("0") if isinstance(programs, Mapping) else None
    timed = measurement.get("program_sha256")
    if audited and timed == audited:
        return True
    problems.append(f"the device timed program {timed!r}, not the audited tuning-point "
                    f"program {audited!r}")
    return False


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
