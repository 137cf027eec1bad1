"""The data that crosses the sandbox boundary, as msgspec structs encoded with msgpack.

The child receives inputs and settings only, never expected outputs or the oracle; it
sends back arrays, lowered text and diagnostics. Arrays travel as (dtype name, shape,
raw bytes), which round-trips bfloat16 and other ml_dtypes types exactly.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import Any

import msgspec
import numpy as np


class WireArray(msgspec.Struct, frozen=True):
    dtype: str
    shape: tuple[int, ...]
    data: bytes

    @classmethod
    def of(cls, array: Any) -> WireArray:
        host = contiguous(array)
        return cls(host.dtype.name, tuple(host.shape), host.tobytes())

    def numpy(self) -> np.ndarray:
        return np.frombuffer(self.data, dtype=numpy_dtype(self.dtype)).reshape(self.shape)


def numpy_dtype(name: str) -> np.dtype:
    """np.dtype for a name, including bfloat16 and float8 types from ml_dtypes."""
    try:
        return np.dtype(name)
    except TypeError:
        import ml_dtypes

        return np.dtype(getattr(ml_dtypes, name))


def contiguous(array: Any) -> np.ndarray:
    """``array`` as a C-contiguous host array of exactly its shape. Not
    ``np.ascontiguousarray``: it returns ``ndim >= 1``, so a 0-d output (a loss, a sum)
    would come back as shape (1,) and fail the reference's exact shape ()."""
    return np.asarray(array, order="C")


def hash_arrays(arrays: Iterable[Any]) -> str:
    """sha256 over dtype, shape and bytes of each array, in order."""
    digest = hashlib.sha256()
    for array in arrays:
        host = contiguous(array)
        digest.update(f"{host.dtype.name}|{host.shape}|".encode())
        digest.update(host.tobytes())
    return digest.hexdigest()


class CaseRequest(msgspec.Struct, frozen=True):
    case_id: str
    inputs: tuple[WireArray, ...]


class StaticArg(msgspec.Struct, frozen=True):
    """A Python scalar the task's input maker returns beside its arrays: a static argument
    of its shape (tools.inputs.statics), passed to the kernel at ``position`` of its
    argument list. Plain msgpack scalars only: decoding rejects anything else."""

    position: int
    value: bool | int | float


class ShapeGroup(msgspec.Struct, frozen=True):
    """Cases that share input shapes: traced and lowered once, run once per case."""

    shape_index: int
    interpret_seed: int  # order of `parallel` grid dimensions under interpret mode
    cases: tuple[CaseRequest, ...]
    # The shape's static arguments, put back among the case's arrays before the kernel is
    # called (the cases carry the arrays only); () for none.
    statics: tuple[StaticArg, ...] = ()


class EvalRequest(msgspec.Struct, frozen=True):
    candidate_file: str  # file name inside the sandbox directory
    config: dict[str, Any]
    groups: tuple[ShapeGroup, ...]
    order_seed: int  # shuffles groups and cases, so no case is reliably "the first"
    uninitialized_memory: str = "nan"
    detect_races: bool = True
    num_cores: int = 2  # simulated cores for the cross-core race check...
    multicore_cases: int = 1  # ...on this many tuning-point cases; the rest run on one core
    lowering_platform: str = "tpu"
    chip: str = "v6e"  # the TPU generation the lowering asks about (VMEM size, tiling)
    run_cases: bool = True  # False: trace and lower only (compile check)
    # True: the worker also sends each trace as data (tools.child.programs) for the runner.
    send_programs: bool = False
    # A second poison for memory never written (a huge finite value), on this many cases
    # per shape: their outputs must not change ("" turns it off).
    second_poison: str = "huge"
    second_poison_cases: int = 1
    eager_cases: int = 2  # tuning-point cases the built callable is also called on directly
    # Seconds each phase may take in the child (0: none); the wall limit is the backstop.
    build_limit_s: float = 0.0  # importing the candidate and build()
    trace_limit_s: float = 0.0  # tracing and lowering one shape
    case_limit_s: float = 0.0  # running one case (each run: second poison, direct calls)


class Diagnostic(msgspec.Struct, frozen=True):
    """A problem a fix agent can act on; mirrors tools.lowered.compile_check.Diagnostic."""

    message: str
    kernel: str = ""
    line: int | None = None
    hint: str = ""
    phase: str = ""


class CaseResult(msgspec.Struct, frozen=True):
    case_id: str
    outputs: tuple[WireArray, ...] = ()
    inputs_sha256_before: str = ""
    inputs_sha256_after: str = ""
    races_detected: bool = False
    error: str = ""
    seconds: float = 0.0
    # hash_arrays of the outputs when run again under the second poison ("" when not run)
    second_poison_sha256: str = ""
    # Per kernel run under interpret mode: grid points visited (and order), block fetches
    # and write-backs, manual DMA starts (tools.child.interpret.KernelVisits.summary).
    visits: tuple[dict[str, Any], ...] = ()


class GroupResult(msgspec.Struct, frozen=True):
    shape_index: int
    stablehlo: str = ""
    pallas_calls_in_trace: int = 0
    trace_error: str = ""
    # Why the trace cannot be verified by interpreting it (tools.verification.allowlist).
    program_problems: tuple[str, ...] = ()
    program: bytes = b""  # the traced program as data (tools.child.programs), for the runner
    diagnostics: tuple[Diagnostic, ...] = ()
    cases: tuple[CaseResult, ...] = ()
    trace_seconds: float = 0.0
    lower_seconds: float = 0.0


class EvalResponse(msgspec.Struct, frozen=True):
    load_error: str = ""
    diagnostics: tuple[Diagnostic, ...] = ()
    groups: tuple[GroupResult, ...] = ()
    tampering: tuple[str, ...] = ()
    jax_version: str = ""
    seconds: float = 0.0
    eager: tuple[CaseResult, ...] = ()  # the built callable called directly, per case
    limit_hit: str = ""  # the phase time limit that ended the child, in words
    check_seconds: dict[str, float] = {}  # what each extra check cost, by name


PROGRAMS_FILE = "programs.bin"  # put in the worker's directory before the worker finishes


class TracedPrograms(msgspec.Struct, frozen=True):
    """The worker's traces by shape, written (renamed into place whole) as soon as every
    shape is traced: the runner starts on them while the worker lowers for its diagnostics
    and calls the candidate directly. They are the candidate's word, like all it reports."""

    programs: dict[int, bytes]


class RunRequest(msgspec.Struct, frozen=True):
    """What the runner gets: the settings and cases, and the worker's programs by shape."""

    request: EvalRequest
    programs: dict[int, bytes]


class EvalBatch(msgspec.Struct, frozen=True):
    """Lowering-only requests (``run_cases`` off, ``send_programs`` on) for one candidate at
    several configurations, served by one worker: a tuning sweep's pricing pays one
    interpreter start-up, not one per configuration. Each is evaluated as if alone, except
    that tampering by any configuration's build is reported for every later one."""

    requests: tuple[EvalRequest, ...]


class BatchResponse(msgspec.Struct, frozen=True):
    """One response per request of an :class:`EvalBatch` or a :class:`RunBatch`, in order."""

    responses: tuple[EvalResponse, ...]


class RunBatch(msgspec.Struct, frozen=True):
    """The runner's side of an :class:`EvalBatch`: one run request per configuration."""

    runs: tuple[RunRequest, ...]


class _BatchProbe(msgspec.Struct):
    requests: msgspec.Raw = msgspec.Raw()
    runs: msgspec.Raw = msgspec.Raw()


def is_batch(data: bytes) -> bool:
    """Does this request hold a batch? Reads the keys only (a request's arrays are skipped)."""
    probe = msgspec.msgpack.decode(data, type=_BatchProbe)
    return len(probe.requests) > 0 or len(probe.runs) > 0


def encode(obj: Any) -> bytes:
    return msgspec.msgpack.encode(obj)


def decode(data: bytes, kind: type[Any]) -> Any:
    return msgspec.msgpack.decode(data, type=kind)


def wire_arrays(arrays: Sequence[Any]) -> tuple[WireArray, ...]:
    return tuple(WireArray.of(a) for a in arrays)
