"""The compile child: runs the real TPU compiler on lowered programs, one after another.

Started by :func:`tools.lowered.tpu_compiler.compile_all` as
``python -I -m tools.child.tpucompile BOX`` in the sandbox. It reads a
:class:`~tools.lowered.tpu_compiler.CompileRequest` (a chip, the StableHLO texts, a limit per
text), never imports candidate code, and writes a
:class:`~tools.lowered.tpu_compiler.CompileResponse`. The compiler cannot be interrupted, so
a timer ends the process when one compile passes its limit, after writing the results so far
and a timeout verdict for that program.

Where the request asks for the kernels' cycles, libtpu starts with its bundle schedules
dumped into a folder of the child's own (its private /tmp); after each compile the kernels'
static cycles are read from it and the folder is emptied
(:func:`tools.lowered.tpu_compiling.read_cycles`), so each result carries its own.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import msgspec

from tools.lowered import tpu_compiler, tpu_compiling
from tools.lowered.tpu_compiler import CompileRequest, CompileResponse, RealCompile
from tools.sandbox.launcher import REQUEST_FILE, RESULT_FILE

_replace = os.replace
_exit = os._exit


class _Answer:
    """The response so far, written whole each time it grows (and by the timer at a limit)."""

    def __init__(self, box: Path) -> None:
        self.path = box / RESULT_FILE
        self.results: list[RealCompile] = []
        self.lock = threading.Lock()

    def write(self, error: str = "") -> None:
        partial = self.path.with_name(self.path.name + ".partial")
        partial.write_bytes(msgspec.msgpack.encode(CompileResponse(self.results, error)))
        _replace(partial, self.path)


def _timer(answer: _Answer, request: CompileRequest, state: dict[str, object]) -> None:
    while True:
        time.sleep(0.1)
        with answer.lock:
            started = state.get("started")
            text = state.get("text")
            if not isinstance(started, float) or not isinstance(text, str):
                continue
            if time.monotonic() - started <= request.limit_s:
                continue
            answer.results.append(RealCompile(
                request.chip, False, tpu_compiler.program_sha256(text),
                f"libtpu {tpu_compiler.libtpu_version()}",
                f"the TPU compiler did not finish compiling for {request.chip} within its "
                f"limit of {request.limit_s:g} s ({tpu_compiler.LIMIT_ENV})", "timeout",
                request.limit_s))
            answer.write()
            _exit(0)


def main(argv: list[str]) -> int:
    box = Path(argv[1])
    dump = Path(tempfile.mkdtemp(prefix="kg-llo-"))
    try:
        return _serve(box, dump)
    finally:
        shutil.rmtree(dump, ignore_errors=True)


def _serve(box: Path, dump: Path) -> int:
    request = msgspec.msgpack.decode((box / REQUEST_FILE).read_bytes(), type=CompileRequest)
    tpu_compiling.prepare_process(str(dump) if request.cycles else None)  # before libtpu loads
    import jax

    jax.config.update("jax_platforms", "cpu")
    answer = _Answer(box)
    state: dict[str, object] = {}
    threading.Thread(target=_timer, args=(answer, request, state), daemon=True).start()
    try:
        tpu_compiling._device(request.chip)  # libtpu and the topology, before any limit
    except Exception as exc:  # no compiler: said once, for every program
        answer.write(f"{type(exc).__name__}: {exc}"[:2000])
        return 0
    for text in request.texts:
        with answer.lock:
            state.update(started=time.monotonic(), text=text)
        result = tpu_compiling.compile_text(text, request.chip, keep_hlo=request.keep_hlo,
                                           dump_folder=dump if request.cycles else None)
        with answer.lock:
            state.clear()
            answer.results.append(result)
            answer.write()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
