"""The runner: lowers and runs a candidate's traced programs without ever importing it.

Started by the verifier as ``python -I -m tools.child.runner BOX`` after the worker
(:mod:`tools.child.worker`) imported the candidate, built it and traced it once per shape.
The worker sends each trace as data (:mod:`tools.child.programs`); this process rebuilds
it from JAX's own primitives and classes, traces the rebuilt program, lowers that trace for
TPU (the text the compile check, the audit and the cost model read), checks it against
the allowlist and runs the same trace under TPU interpret mode on every case. So the
lowered text and the outputs the verdict follows from come from code the candidate never
ran in: a candidate that forges the worker's report can only forge a program, which is
then what is lowered, audited, priced and run.

It shares the worker's case machinery (:func:`tools.child.worker.run_group`) but never
reaches its candidate loading: ``tests/test_runner.py`` checks that no candidate module is
imported here.
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

import msgspec

from tools import jaxprivate
from tools.child import callbacks, corecompile, interpret, programs, watchdog, worker
from tools.child.guard import IntegrityGuard
from tools.sandbox import wire
from tools.sandbox.launcher import RESULT_FILE

PROGRAM_SOURCE = Path("<program>")


def run_programs(run: wire.RunRequest) -> wire.EvalResponse:
    """Every shape group of the request, run from its program (no program: not run)."""
    import jax

    started = time.perf_counter()
    request = run.request
    races = interpret.RaceLog()
    races.install()
    guard = IntegrityGuard()
    tampering: list[str] = []  # nothing here can tamper; kept for run_group's signature
    rng = random.Random(request.order_seed)
    groups = list(request.groups)
    rng.shuffle(groups)
    results: list[wire.GroupResult] = []
    check_seconds: dict[str, float] = {}
    for group in groups:
        data = run.programs.get(group.shape_index)
        if data is None:
            continue
        try:
            closed = programs.decode(data)
        except programs.ProgramError as exc:
            message = f"the traced program could not be rebuilt by the runner: {exc}"
            results.append(wire.GroupResult(group.shape_index, trace_error=message,
                                            diagnostics=(wire.Diagnostic(message, phase="run"),)))
            continue
        kernel = programs.as_function(closed)
        # The program is already a function of the arrays alone: the worker bound the
        # shape's static arguments before tracing, so none are put back here.
        arrays_only = msgspec.structs.replace(group, statics=())
        try:
            results.append(worker.run_group(kernel, arrays_only, request, PROGRAM_SOURCE,
                                            races, rng, guard, tampering, check_seconds))
        except Exception as exc:
            message = f"the runner could not run the program: {worker._one_line(exc)}"
            results.append(wire.GroupResult(group.shape_index, trace_error=message,
                                            diagnostics=(wire.Diagnostic(message, phase="run"),)))
    return wire.EvalResponse(
        groups=tuple(sorted(results, key=lambda g: g.shape_index)),
        jax_version=jax.__version__,
        seconds=time.perf_counter() - started,
        check_seconds=check_seconds,
    )


def main(argv: list[str]) -> int:
    box = Path(argv[1])
    import jax
    import jax.experimental.pallas.tpu

    jaxprivate.interpret_pallas_call()
    interpret.install_second_poison()
    corecompile.install()
    callbacks.install()
    worker._import_all_pallas()  # the same primitive names as the worker that encoded
    programs.primitives()
    jax.config.update("jax_platforms", "cpu")
    # Started early: the request comes once the worker has traced the candidate.
    data = worker.wait_for_request(box)
    watchdog.install(box / RESULT_FILE)
    if wire.is_batch(data):
        runs = wire.decode(data, wire.RunBatch).runs
        response: object = wire.BatchResponse(tuple(run_programs(run) for run in runs))
    else:
        response = run_programs(wire.decode(data, wire.RunRequest))
    (box / RESULT_FILE).write_bytes(wire.encode(response))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
