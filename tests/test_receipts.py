"""Signed receipts: an edited receipt fails even with its hash recomputed, a receipt signed by
another key is reported as such, the speedup is re-derived from its figures, and the key is
created private on first use. Quick: no sandbox, no JAX tracing."""

from __future__ import annotations

import copy
import hashlib
import json
import os
import stat
from pathlib import Path

import numpy as np
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from typer.testing import CliRunner

from tools.correctness.compare import FLOOR_FACTOR, compare_case
from tools.correctness.testsuite import SuiteCase
from tools.inputs.tasks import DEFAULT_TOLERANCE
from tools.sandbox.wire import WireArray
from tools.verification import signing
from tools.verification.receipts import (
    RECEIPT_KIND,
    Checks,
    canonical_json,
    check_receipt,
    seal,
    write_receipt,
)


def _passing_body() -> dict:
    oracle = np.linspace(-1, 1, 256).reshape(2, 128)
    case = SuiteCase(
        case_id="c", shape_index=0, seed=0, kind="seed", inputs=(), inputs_sha256="",
        oracle=(WireArray.of(oracle),), out_dtypes=("float32",), out_shapes=(oracle.shape,),
        floor_max_abs=(1e-6,), floor_mean_abs=(1e-7,), ceiling_applies=(True,))
    checks = Checks(candidate_loaded=True, sandbox_ok=True, compile_ok=True, audit_ok=True,
                    tampering=(), inputs_unmodified=True, inputs_as_sent=True, races_in=(),
                    consistency_problems=(), timing_valid=True, floor_factor=FLOOR_FACTOR,
                    tolerance=dict(DEFAULT_TOLERANCE),
                    cases=(compare_case(case, [oracle.astype(np.float32)], DEFAULT_TOLERANCE),))
    return {"kind": RECEIPT_KIND, "verdict": "pass", "checks": checks,
            "task": {"name": "copy", "sha256": hashlib.sha256(TASK).hexdigest()},
            "candidate": {"sha256": hashlib.sha256(KERNEL).hexdigest(), "config": {}},
            "measurement": {"measured_on": "simulated", "speedup": 1.25, "latency_s": 8e-6,
                            "baseline_s": 1e-5, "valid": True}}


KERNEL = b"def build():\n    return lambda x: x  # the honest kernel the receipt is for\n"
OTHER_KERNEL = b"def build():\n    return lambda x: x * 0  # another kernel\n"
TASK = b"def reference(x):\n    return x\n"


@pytest.fixture
def key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> signing.ReceiptKey:
    monkeypatch.setenv(signing.KEY_ENV, str(tmp_path / "keys" / "receipt-key"))
    return signing.load_key()


def _rehash(receipt: dict) -> dict:
    body = {k: v for k, v in receipt.items() if k not in ("sha256", "signature")}
    receipt["sha256"] = hashlib.sha256(canonical_json(body)).hexdigest()
    return receipt


def test_a_signed_receipt_checks_and_names_its_key(key: signing.ReceiptKey) -> None:
    receipt = seal(_passing_body())
    result = check_receipt(receipt)
    assert result.ok, result.problems
    assert result.key_fingerprint == key.fingerprint and result.key_trusted
    assert receipt["signature"]["algorithm"] == "ed25519"


def test_an_edited_receipt_with_a_recomputed_hash_fails(key: signing.ReceiptKey) -> None:
    edited = copy.deepcopy(seal(_passing_body()))
    edited["measurement"].update(speedup=100.0, latency_s=1e-7)  # consistent figures
    result = check_receipt(_rehash(edited))
    assert result.hash_ok and result.speedup_ok and result.verdict_ok
    assert not result.signature_ok and not result.ok
    assert any("does not match the receipt's contents" in p for p in result.problems)


def test_a_receipt_signed_by_another_key_is_reported(key: signing.ReceiptKey) -> None:
    other = signing.ReceiptKey(Ed25519PrivateKey.generate())
    body = _passing_body()
    body["measurement"].update(speedup=100.0, latency_s=1e-7)
    result = check_receipt(seal(body, key=other))
    assert result.signature_ok and result.hash_ok and not result.key_trusted and not result.ok
    assert result.key_fingerprint == other.fingerprint
    assert any(f"signed by another key ({other.fingerprint})" in p for p in result.problems)
    assert check_receipt(seal(body, key=other), trusted={other.fingerprint}).ok


def test_the_speedup_is_rederived_from_latency_and_baseline(key: signing.ReceiptKey) -> None:
    body = _passing_body()
    body["measurement"]["speedup"] = 100.0  # signed, but not baseline / latency
    result = check_receipt(seal(body))
    assert result.signature_ok and not result.speedup_ok and not result.ok
    assert any("does not follow from the figures" in p for p in result.problems)
    body = _passing_body()
    body["measurement"] = None
    result = check_receipt(seal(body))
    assert not result.ok and "a passing verdict without a measurement" in result.problems


def test_a_device_measurement_must_name_the_audited_program(key: signing.ReceiptKey) -> None:
    body = _passing_body()
    body["programs"] = {"0": "a" * 64, "1": "b" * 64}
    body["measurement"].update(measured_on="real", program_sha256="a" * 64)
    assert check_receipt(seal(body)).ok
    body["measurement"]["program_sha256"] = "c" * 64  # signed, but another program was timed
    result = check_receipt(seal(body))
    assert result.signature_ok and not result.speedup_ok and not result.ok
    assert any("not the audited tuning-point program" in p for p in result.problems)
    del body["measurement"]["program_sha256"]
    assert not check_receipt(seal(body)).ok


def test_an_unsigned_receipt_fails(key: signing.ReceiptKey) -> None:
    receipt = seal(_passing_body())
    del receipt["signature"]
    result = check_receipt(receipt)
    assert not result.ok and "the receipt is not signed" in result.problems


def test_the_key_is_created_private_once_and_a_readable_one_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "cfg" / "kernelgraph" / "receipt-key"
    monkeypatch.setenv(signing.KEY_ENV, str(path))
    first = signing.load_key()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    assert signing.load_key().fingerprint == first.fingerprint
    os.chmod(path, 0o644)
    with pytest.raises(signing.SigningError, match="readable by others"):
        signing.load_key()
    monkeypatch.delenv(signing.KEY_ENV)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert signing.key_path() == tmp_path / "home" / ".config" / "kernelgraph" / "receipt-key"


def test_a_receipt_is_bound_to_its_candidate_and_task_files(key: signing.ReceiptKey) -> None:
    receipt = seal(_passing_body())
    unbound = check_receipt(receipt)
    assert unbound.ok and not unbound.bound and unbound.candidate_ok is None

    right = check_receipt(receipt, candidate=KERNEL, task=TASK)
    assert right.ok and right.bound and right.candidate_ok and right.task_ok, right.problems

    wrong = check_receipt(receipt, candidate=OTHER_KERNEL, task=TASK)
    assert wrong.signature_ok and wrong.verdict_ok and not wrong.ok  # genuine, other kernel
    assert wrong.candidate_ok is False and wrong.task_ok is True
    (line,) = wrong.binding
    other = hashlib.sha256(OTHER_KERNEL).hexdigest()
    assert line.startswith(f"the candidate file's sha256 {other[:16]}") and "another kernel" in line
    assert wrong.problems[0] == line

    wrong_task = check_receipt(receipt, candidate=KERNEL, task=b"def reference(x):\n    return -x\n")
    assert not wrong_task.ok and wrong_task.candidate_ok and wrong_task.task_ok is False
    assert wrong_task.binding[0].startswith("the task file's sha256")

    body = _passing_body()
    body["candidate"]["sha256"] = None  # the candidate never loaded: it vouches for no file
    nameless = check_receipt(seal(body), candidate=KERNEL)
    assert not nameless.ok and "signed no candidate sha256" in nameless.binding[0]


def test_cli_verify_receipt(key: signing.ReceiptKey, tmp_path: Path) -> None:
    from kernelgraph.cli import app, load_commands

    load_commands()
    runner = CliRunner()
    kernel, other, task = tmp_path / "kernel.py", tmp_path / "other.py", tmp_path / "task.py"
    kernel.write_bytes(KERNEL)
    other.write_bytes(OTHER_KERNEL)
    task.write_bytes(TASK)
    good = tmp_path / "good.json"
    write_receipt(seal(_passing_body()), good)
    result = runner.invoke(app, ["verify-receipt", str(good), "--candidate", str(kernel),
                                 "--task", str(task)])
    assert result.exit_code == 0, result.output
    assert result.output.startswith(f"{good}: ok") and f"for {kernel} on task {task}" in result.output
    assert f"signed by key {key.fingerprint} (this installation's key)" in result.output

    # the same genuine receipt next to another kernel, or another task: one line says which
    result = runner.invoke(app, ["verify-receipt", str(good), "--candidate", str(other)])
    assert result.exit_code == 1, result.output
    first = result.output.splitlines()[0]
    assert "FAILED" in first and "the candidate file's sha256" in first, result.output
    assert "another kernel" in first
    task.write_bytes(TASK + b"# edited\n")
    result = runner.invoke(app, ["verify-receipt", str(good), "--candidate", str(kernel),
                                 "--task", str(task)])
    assert result.exit_code == 1 and "the task file's sha256" in result.output.splitlines()[0]
    result = runner.invoke(app, ["verify-receipt", str(good), "--candidate", str(other), "--json"])
    out = json.loads(result.output)
    assert result.exit_code == 1 and out["bound"] and out["candidate_ok"] is False

    # without a candidate file the command refuses, or with --signature-only says it checked
    # the receipt alone: it never reads as "ok" for a kernel
    result = runner.invoke(app, ["verify-receipt", str(good)])
    assert result.exit_code == 2 and "--candidate FILE" in result.output
    result = runner.invoke(app, ["verify-receipt", str(good), "--signature-only"])
    assert result.exit_code == 0, result.output
    assert "signature ok, receipt only" in result.output and "no kernel file was checked" in result.output
    assert ": ok" not in result.output
    result = runner.invoke(app, ["verify-receipt", str(good), "--signature-only", "--json"])
    assert json.loads(result.output)["bound"] is False

    edited = json.loads(good.read_text())
    edited["measurement"].update(speedup=100.0, latency_s=1e-7)
    forged = tmp_path / "forged.json"
    write_receipt(_rehash(edited), forged)
    result = runner.invoke(app, ["verify-receipt", str(forged), "--candidate", str(kernel), "--json"])
    assert result.exit_code == 1, result.output
    assert json.loads(result.output)["signature_ok"] is False

    foreign_key = signing.ReceiptKey(Ed25519PrivateKey.generate())
    foreign = tmp_path / "foreign.json"
    write_receipt(seal(_passing_body(), key=foreign_key), foreign)
    result = runner.invoke(app, ["verify-receipt", str(foreign), "--candidate", str(kernel)])
    assert result.exit_code == 1 and "an untrusted key" in result.output
    assert f"signed by another key ({foreign_key.fingerprint})" in result.output
    result = runner.invoke(app, ["verify-receipt", str(foreign), "--candidate", str(kernel),
                                 "--trust-key", foreign_key.fingerprint])
    assert result.exit_code == 0, result.output

    (tmp_path / "not.json").write_text("[]")
    assert runner.invoke(app, ["verify-receipt", str(tmp_path / "not.json"),
                               "--signature-only"]).exit_code == 2
