"""The real TPU compiler, run ahead of time for the target's chip on a machine with no TPU.

With the ``tpu-compiler`` extra installed (``jax[tpu]``: libtpu), XLA:TPU and the Mosaic
compiler run here for a chip's topology (``jax.experimental.topologies``, a compile-only
client): the lowered program the runner produced (StableHLO text with the Mosaic kernels
inside, lowered with the target chip's ``tpu_info``) is compiled for one TensorCore of
that chip, and the compiler's own errors ("Ran out of memory in memory space vmem. Used
139.82M of 127.94M vmem", "Scoped allocation with size 32.02M and limit 32.00M") are the
compile check's verdict, with its numbers. The emulated check
(:func:`tools.lowered.compile_check.check_lowered`) still runs first and is kept in the
report; where the two disagree the compiler wins.

Where it runs: the compile reads a program derived from candidate code, so it runs in a
sandboxed child (:mod:`tools.child.tpucompile`) under a time limit per program; a compile
over its limit is a verdict naming the limit, never a hang; what the child does with each
program is :mod:`tools.lowered.tpu_compiling`. Results are cached by (sha256 of the program
text, chip, libtpu version), in memory and on disk.

Without libtpu nothing changes: every report says "emulated compile check" (and so does
one with ``KG_TPU_COMPILER=0``, which keeps the emulated check alone).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.util
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from kernelgraph.errors import KernelgraphError
from tools.performance.llo_cycles import KernelCycles

EMULATED = "emulated compile check"
# One TensorCore of a small slice is the compile target; the slice's name is libtpu's.
TOPOLOGIES: dict[str, str] = {"v5e": "v5e:2x2", "v6e": "v6e:2x2", "v7": "tpu7x:2x2x1"}
LIMIT_ENV = "KG_TPU_COMPILE_LIMIT_S"
SWITCH_ENV = "KG_TPU_COMPILER"  # "0": the emulated check alone, even with libtpu installed
CACHE_ENV = "KG_TPU_COMPILE_CACHE"
DEFAULT_LIMIT_S = 120.0
DUMP_FLAGS = "--xla_jf_dump_to={folder} --xla_jf_dump_llo_pass_label_regex={regex}"
NOT_ASKED = "no bundle schedule was asked for"
_CACHE_FORMAT = "v3"  # v3: with the kernels' static cycles (v7's six delay slots)


class TpuCompilerError(KernelgraphError, RuntimeError):
    """The compiler could not be asked at all (no libtpu, an unknown chip, a child that died)."""


class RealCompile(msgspec.Struct, frozen=True):
    """What the TPU compiler said about one lowered program on one chip."""

    chip: str
    ok: bool
    program_sha256: str
    compiler: str  # "libtpu 0.0.42.1"
    message: str = ""  # the compiler's error, trimmed
    kind: str = ""  # "" | "vmem" | "smem" | "compile" | "timeout" | "crash"
    seconds: float = 0.0  # wall seconds of the compile (the cached one's, when cached)
    optimal_seconds: float | None = None  # XLA's cost analysis of the compiled program
    cached: bool = False
    hlo: str = ""  # the optimised, scheduled program (kept when asked: the XLA baseline)
    # Each Mosaic kernel's static cycles from the compiler's bundle schedule, in the compiled
    # program's order (tools/performance/llo_cycles.py); empty where none was read
    kernel_cycles: list[KernelCycles] = []
    cycles_note: str = ""  # why no cycles were read, where a kernel has none
    cycles_seconds: float = 0.0  # wall seconds of reading them (after the compile's)


# ------------------------------------------------------------------------------ availability


@functools.cache
def libtpu_version() -> str | None:
    """The installed libtpu's version, or None where the extra is not installed."""
    if importlib.util.find_spec("libtpu") is None:
        return None
    try:
        return importlib.metadata.version("libtpu")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def switched_off() -> bool:
    return os.environ.get(SWITCH_ENV, "").strip() in ("0", "off", "false", "no")


def available() -> bool:
    return libtpu_version() is not None and not switched_off()


def compiler_name() -> str:
    """What a report names as its compile check."""
    version = libtpu_version()
    if version is None:
        return EMULATED
    if switched_off():
        return f"{EMULATED} ({SWITCH_ENV}=0)"
    return f"TPU compiler (libtpu {version}, ahead of time)"


def topology_name(chip: str) -> str:
    try:
        return TOPOLOGIES[chip]
    except KeyError:
        raise TpuCompilerError(f"no TPU topology for chip {chip!r}; known: "
                               f"{', '.join(TOPOLOGIES)}") from None


def limit_s() -> float:
    """The time limit of one program's compile (``KG_TPU_COMPILE_LIMIT_S``)."""
    try:
        value = float(os.environ.get(LIMIT_ENV, DEFAULT_LIMIT_S))
    except ValueError:
        return DEFAULT_LIMIT_S
    return value if value > 0 else DEFAULT_LIMIT_S


def program_sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# ---------------------------------------------------------------------------- parent side


class _Cache:
    """Compiled results by (program sha256, chip, libtpu version): in memory and on disk.
    A timeout or crash is not kept (a later, less loaded try may finish)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._memory: dict[tuple[str, str], RealCompile] = {}

    def _path(self, digest: str, chip: str) -> Path:
        root = Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "kernelgraph"
                    / "tpu-compile")
        return root / f"{digest}-{chip}-{libtpu_version()}-{_CACHE_FORMAT}.json"

    def get(self, digest: str, chip: str) -> RealCompile | None:
        with self._lock:
            found = self._memory.get((digest, chip))
        if found is not None:
            return msgspec.structs.replace(found, cached=True)
        path = self._path(digest, chip)
        try:
            found = msgspec.json.decode(path.read_bytes(), type=RealCompile)
        except (OSError, msgspec.DecodeError):
            return None
        if found.program_sha256 != digest or found.chip != chip:
            return None
        with self._lock:
            self._memory[(digest, chip)] = found
        return msgspec.structs.replace(found, cached=True)

    def put(self, result: RealCompile) -> None:
        if result.kind in ("timeout", "crash"):
            return
        with self._lock:
            self._memory[(result.program_sha256, result.chip)] = result
        path = self._path(result.program_sha256, result.chip)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_name(path.name + f".{os.getpid()}.partial")
            partial.write_bytes(msgspec.json.encode(result))
            os.replace(partial, path)
        except OSError:  # a cache that cannot be written only costs a recompile
            pass


CACHE = _Cache()


class CompileRequest(msgspec.Struct, frozen=True):
    chip: str
    texts: list[str]
    limit_s: float
    keep_hlo: bool = False
    cycles: bool = False  # dump and read the kernels' bundle schedules


class CompileResponse(msgspec.Struct, frozen=True):
    results: list[RealCompile]
    error: str = ""


def compile_all(texts: Sequence[str], chip: str, *, limit: float | None = None,
                keep_hlo: bool = False, cycles: bool = False) -> list[RealCompile]:
    """Every text's compile on ``chip``: cached ones from the cache, the rest in sandboxed
    children (one for all of them; after a compile over its limit, a fresh one for the rest).
    ``cycles``: with the kernels' static cycles from the bundle schedules, which only the
    figures beside a price use (``estimate``, the calibration): the dump costs compile time
    (about 5 s more on a 5-8 s compile of a 512x1024x1024-block bf16 matmul, under load), so the
    verifier's compile check does without; a cached result without them is compiled again."""
    if not available():
        raise TpuCompilerError("libtpu is not installed (pip install -e '.[tpu-compiler]')")
    topology_name(chip)
    limit = limit_s() if limit is None else limit
    found: dict[str, RealCompile] = {}
    for text in texts:
        digest = program_sha256(text)
        hit = found.get(digest) or CACHE.get(digest, chip)
        if hit is not None and (not keep_hlo or hit.hlo or not hit.ok) and (
                not cycles or hit.cycles_note != NOT_ASKED or not hit.ok):
            found[digest] = hit
    todo = list(dict.fromkeys(t for t in texts if program_sha256(t) not in found))
    while todo:
        done = _compile_in_child(todo, chip, limit, keep_hlo, cycles)
        for result in done:
            found[result.program_sha256] = result
            CACHE.put(result)
        todo = [t for t in todo if program_sha256(t) not in found]
    return [found[program_sha256(t)] for t in texts]


_STARTUP_S = 60.0  # importing JAX and starting libtpu in the child, on a loaded machine


def _compile_in_child(texts: list[str], chip: str, limit: float,
                      keep_hlo: bool = False, cycles: bool = False) -> list[RealCompile]:
    """Compile ``texts`` in one sandboxed child; what it did not answer for gets a verdict
    here (the first unanswered one: over its limit or the child died), so each call makes
    progress."""
    from tools.sandbox.launcher import Limits, run_sandboxed

    request = msgspec.msgpack.encode(CompileRequest(chip, texts, limit, keep_hlo, cycles))
    limits = Limits(wall_s=_STARTUP_S + limit * len(texts), memory_bytes=16 << 30)
    box = run_sandboxed("tools.child.tpucompile", request, limits=limits)
    results: list[RealCompile] = []
    error = ""
    if box.result is not None:
        try:
            response = msgspec.msgpack.decode(box.result, type=CompileResponse)
            results, error = _asked_for(response.results, texts, chip), response.error
        except msgspec.DecodeError as exc:
            error = f"the compile child's answer could not be read: {exc}"
    answered = {r.program_sha256 for r in results}
    missing = [t for t in texts if program_sha256(t) not in answered]
    if missing and error:
        raise TpuCompilerError(f"the TPU compiler could not be started for {chip}: {error}")
    if missing and any(r.kind == "timeout" for r in results):
        return results  # the child stopped at one program's limit; the rest go to a fresh one
    if missing:
        digest = program_sha256(missing[0])
        version = f"libtpu {libtpu_version()}"
        if box.timed_out:  # killed at the wall limit: the compile under way was too slow
            results.append(RealCompile(
                chip, False, digest, version,
                f"the TPU compiler did not finish compiling for {chip} within its limit of "
                f"{limit:g} s ({LIMIT_ENV})", "timeout", limit))
        else:
            tail = (box.stderr_tail or "").strip().splitlines()[-3:]
            how = box.failure() or "it exited cleanly, answering for other programs or none"
            results.append(RealCompile(
                chip, False, digest, version,
                f"the TPU compiler's process ended without an answer ({how}): "
                + " | ".join(tail), "crash"))
    return results




def _asked_for(results: Sequence[RealCompile], texts: Sequence[str],
               chip: str) -> list[RealCompile]:
    """The child's answers for the programs it was given, on the chip it was given, the first
    for each: the child reads programs derived from candidate code, so what it says is
    stored only under a key the parent chose. An answer for any other program (which would
    land in the cache every later run reads) is dropped, and the program asked about then
    gets the verdict of a child that did not answer."""
    asked = {program_sha256(t) for t in texts}
    kept: dict[str, RealCompile] = {}
    for result in results:
        if result.program_sha256 in asked and result.chip == chip:
            kept.setdefault(result.program_sha256, result)
    return list(kept.values())


def compiled_hlo(text: str, chip: str) -> str:
    """XLA:TPU's optimised program of ``text`` on ``chip`` from the compile check's cache
    (nothing is compiled here); "" where it was not compiled, did not compile or was
    compiled without keeping it."""
    if not available():
        return ""
    hit = CACHE.get(program_sha256(text), chip)
    return hit.hlo if hit is not None and hit.ok else ""


# ------------------------------------------------------------------------ the compile check


def decide(emulated: Any, real: RealCompile | None, *, unavailable: str = "") -> Any:
    """The compile check's report (a :class:`~tools.lowered.compile_check.CompileReport`):
    the compiler's verdict when there is one (the emulated check's answer kept beside it),
    else the emulated check's, saying why the compiler did not judge."""
    from tools.lowered.compile_check import Diagnostic, _hint_for

    if real is None:
        checker = EMULATED if not unavailable else f"{EMULATED} ({unavailable})"
        return msgspec.structs.replace(emulated, checker=checker)
    # Refused by both: the compiler's figures first, then the emulated check's account of
    # what does not fit (the block, value or op it names is what a fix acts on).
    diagnostics = [] if real.ok else [Diagnostic(
        f"TPU compiler ({real.chip}): {real.message}", None, None, _hint_for(real.message),
        None, real.kind), *emulated.diagnostics]
    return msgspec.structs.replace(
        emulated, ok=real.ok, diagnostics=diagnostics, checker=compiler_name(),
        emulated_ok=emulated.ok, compile_seconds=real.seconds)


def check(text: str, *, chip: Any, program: Any = None, cycles: bool = False) -> Any:
    """The compile check of one lowered program: the emulated check, then (with libtpu) the
    TPU compiler, which wins. ``cycles``: compile with the kernels' bundle schedules (cached
    for whoever reads them next: ``estimate``'s figures beside its price)."""
    from tools.lowered.compile_check import check_lowered
    from tools.performance.chips import get_chip

    emulated = check_lowered(text, chip=chip, program=program)
    name = get_chip(chip).name if isinstance(chip, str) else chip.name
    if not available():
        return decide(emulated, None, unavailable=f"{SWITCH_ENV}=0" if switched_off() else "")
    try:  # the compiled program kept: the ops around the kernels are priced from it
        return decide(emulated, compile_all([text], name, cycles=cycles, keep_hlo=True)[0])
    except TpuCompilerError as exc:
        return decide(emulated, None, unavailable=str(exc))


class Compiled:
    """One evaluation's programs compiled together (one child for all shapes), then judged
    one by one with :meth:`judge`."""

    def __init__(self, texts: Sequence[str], chip: str) -> None:
        from tools.performance.chips import get_chip

        self.results: dict[str, RealCompile] = {}
        self.unavailable = ""
        texts = [t for t in texts if t]
        if switched_off():
            self.unavailable = f"{SWITCH_ENV}=0"
        if not texts or not available():
            return
        try:
            for result in compile_all(texts, get_chip(chip).name, keep_hlo=True):
                self.results[result.program_sha256] = result
        except TpuCompilerError as exc:
            self.unavailable = str(exc)

    def judge(self, emulated: Any, text: str) -> Any:
        return decide(emulated, self.results.get(program_sha256(text)),
                      unavailable=self.unavailable)


__all__ = [
    "EMULATED",
    "TOPOLOGIES",
    "CompileRequest",
    "CompileResponse",
    "Compiled",
    "RealCompile",
    "TpuCompilerError",
    "available",
    "check",
    "compile_all",
    "compiler_name",
    "decide",
    "libtpu_version",
]
