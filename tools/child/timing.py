"""The device timing child: time a program against the reference on the device.

Started by :class:`tools.performance.executors.RealExecutor` through the sandbox as
``python -I -m tools.child.timing BOX``; it reads a
:class:`~tools.performance.timing.TimingRequest` and writes a
:class:`~tools.performance.timing.TimingResult`.

A verified candidate comes as the program that was audited (its tuning-point trace as data,
:mod:`tools.child.programs`): it is rebuilt from JAX's own primitives, jitted for the device
and timed, and the candidate's code is never imported, so it cannot trace differently here
than it did in the verifier. Only a trusted module (the task's reference, for the baseline)
comes as a file whose ``build()`` is run.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from tools.performance.timing import TimingRequest, TimingResult, interleaved_times


def main(box: Path) -> None:
    """Runs in the sandboxed child: time candidate and baseline on the device."""
    from tools.sandbox.launcher import REQUEST_FILE, RESULT_FILE

    request = msgspec.msgpack.decode((box / REQUEST_FILE).read_bytes(), type=TimingRequest)
    gpu = "rocm" if importlib.util.find_spec("jax_rocm7_plugin") or importlib.util.find_spec(
        "jax_rocm60_plugin") else "cuda"
    os.environ["JAX_PLATFORMS"] = {"tpu": "tpu", "gpu": gpu}[request.platform]
    result = time_in_child(request, box)
    (box / RESULT_FILE).write_bytes(msgspec.msgpack.encode(result))


def time_in_child(request: TimingRequest, box: Path) -> TimingResult:
    import jax

    from tools.child.loader import build_in_child, load_in_child
    from tools.inputs.statics import bind
    from tools.inputs.tasks import load_task

    device = jax.devices()[0]
    if device.platform not in {"tpu", "gpu", "cuda", "rocm"}:
        return TimingResult(request.platform, device.device_kind, [], [],
                            error=f"the child's JAX backend is {device.platform!r}, not {request.platform!r}")
    task = load_task(request.task_path)
    args = jax.device_put(task.make_inputs(request.seed, request.shape_index), device)
    try:
        kernel = (program_function(request.program) if request.program else
                  build_in_child(load_in_child(box / request.candidate_path), request.config))
    except Exception as exc:
        return TimingResult(request.platform, device.device_kind, [], [],
                            error=f"building the candidate failed: {type(exc).__name__}: {exc}")
    if not request.program:  # built from a file: it takes the reference's argument list
        kernel = bind(kernel, task.statics_at(request.shape_index))
    program_sha256 = hashlib.sha256(request.program).hexdigest() if request.program else ""
    reference = task.reference_at(request.shape_index)  # the inputs' shape, statics bound

    def kg_candidate(*a: Any) -> Any:
        return kernel(*a)

    def kg_baseline(*a: Any) -> Any:
        return reference(*a)

    cand, base = jax.jit(kg_candidate), jax.jit(kg_baseline)

    try:
        cand_s, base_s, _ = interleaved_times(
            cand, base, args, warmup=max(request.warmup, 1), runs=request.runs
        )
        trace_dir = box / "trace"
        with jax.profiler.trace(str(trace_dir)):
            interleaved_times(cand, base, args, warmup=0, runs=request.trace_runs)
        planes = sorted(trace_dir.glob("**/*.xplane.pb"))
        xplane = planes[-1].read_bytes() if planes else b""
    except Exception as exc:
        return TimingResult(request.platform, device.device_kind, [], [],
                            error=f"running on the device failed: {type(exc).__name__}: {exc}")
    return TimingResult(request.platform, device.device_kind, cand_s, base_s, xplane,
                        program_sha256=program_sha256)


def program_function(data: bytes) -> Callable[..., Any]:
    """The audited program as a function of its inputs, rebuilt from data with JAX's own
    primitives (all of Pallas imported first, so names match the worker's)."""
    from tools.child import programs, worker

    worker._import_all_pallas()
    programs.primitives()
    return programs.as_function(programs.decode(data))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python -m tools.child.timing BOXDIR (run by the sandbox)")
    main(Path(sys.argv[1]))
