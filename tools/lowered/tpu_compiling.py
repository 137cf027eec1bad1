"""The TPU compiler run in this process: what the compile child (:mod:`tools.child.tpucompile`)
does with each program it is given.

:func:`prepare_process` sets what libtpu reads when it starts (before it loads);
:func:`compile_text` compiles one lowered program for one TensorCore of a chip and turns the
compiler's refusal into a result (:class:`~tools.lowered.tpu_compiler.RealCompile`), with
the kernels' static cycles read from the bundle schedules libtpu dumped
(:func:`read_cycles`) where they were asked for. The parent never compiles here: it asks a
sandboxed child (:func:`tools.lowered.tpu_compiler.compile_all`).
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import time
from pathlib import Path
from typing import Any

from tools.lowered.tpu_compiler import (
    DUMP_FLAGS,
    NOT_ASKED,
    RealCompile,
    TpuCompilerError,
    libtpu_version,
    program_sha256,
    topology_name,
)
from tools.performance.llo_cycles import KernelCycles

_MESSAGE_CHARS = 2000  # of a compiler's error kept in a result


def prepare_process(dump_folder: str | None = None) -> None:
    """Settings libtpu reads when it starts: no lockfile (several compiles, and the parent,
    may hold libtpu at once) and no metadata-server queries (there is no TPU VM). With
    ``dump_folder`` (the compile child's own), the compiler writes each kernel's final
    bundle schedule there, which :func:`compile_text` reads for its static cycles."""
    os.environ["ALLOW_MULTIPLE_LIBTPU_LOAD"] = "1"
    os.environ["TPU_SKIP_MDS_QUERY"] = "1"
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    if dump_folder is not None:
        from tools.performance.llo_cycles import PASS_REGEX

        flags = DUMP_FLAGS.format(folder=dump_folder, regex=PASS_REGEX)
        os.environ["LIBTPU_INIT_ARGS"] = " ".join(
            f for f in (os.environ.get("LIBTPU_INIT_ARGS", ""), flags) if f)


@functools.cache
def _device(chip: str) -> Any:
    from jax.experimental import topologies

    prepare_process()
    return topologies.get_topology_desc(topology_name=topology_name(chip),
                                        platform="tpu").devices[0]


def classify(message: str) -> str:
    if re.search(r"memory space vmem|[Ss]coped allocation|vmem", message):
        return "vmem"
    if re.search(r"memory space smem|\bsmem\b", message, re.IGNORECASE):
        return "smem"
    return "compile"


_HEADLINES = (
    r"Ran out of memory in memory space \w+\. Used [\d.]+\w? of [\d.]+\w? \w+",
    r"Scoped allocation with size [\d.]+\w? and limit [\d.]+\w?",
)


def trim(message: str) -> str:
    """The compiler's message without the stack trace JAX appends, its one-line figure (what
    was used of what limit) first."""
    text = message.split("\n\nSee ")[0].strip()
    for pattern in _HEADLINES:
        m = re.search(pattern, text)
        if m:
            text = f"{m.group(0)} ({text})"
            break
    return text if len(text) <= _MESSAGE_CHARS else text[:_MESSAGE_CHARS] + " ..."


_CUSTOM_CALL = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+) = [^\n]*custom-call\([^\n]*"
                          r'custom_call_target="tpu_custom_call"', re.MULTILINE)


def read_cycles(folder: Path, hlo: str, chip: str = "v6e") -> tuple[list[KernelCycles], str]:
    """The kernels' static cycles from the dump in ``folder`` (then emptied), in the order
    their custom calls run in the compiled program ``hlo``; (cycles, why none) ."""
    from tools.performance.llo_cycles import LloError, read_dump

    try:
        found = read_dump(folder, chip)
    except (LloError, OSError, ValueError) as exc:  # a figure, never the verdict
        return [], f"the bundle schedule could not be read: {exc}"[:500]
    finally:
        empty(folder)
    # XLA's own ops compiled to programs of their own (a copy) are dumped beside the kernels.
    order = {name: i for i, name in enumerate(_CUSTOM_CALL.findall(hlo))}
    kernels = [k for k in found if k.name in order]
    if len(kernels) != len(order):
        return [], (f"the dump's programs ({', '.join(k.name for k in found) or 'none'}) "
                    f"miss some of the program's Mosaic kernels ({', '.join(order)})")
    return sorted(kernels, key=lambda k: order[k.name]), ""


def empty(folder: Path) -> None:
    """Remove one compile's dump (what cannot be removed is left in the child's private /tmp)."""
    for path in folder.iterdir():
        with contextlib.suppress(OSError):
            path.unlink()


def compile_text(text: str, chip: str, *, keep_hlo: bool = False,
                 dump_folder: Path | None = None) -> RealCompile:
    """Compile one lowered program (StableHLO text) for one TensorCore of ``chip``, in this
    process. The compiler's refusal is a result; only a compiler that cannot start raises.
    ``dump_folder``: where this process's libtpu writes its bundle schedules
    (:func:`prepare_process`); the kernels' static cycles are read from it."""
    from jaxlib import xla_client as xc

    from tools import jaxprivate

    compiler, mlir = jaxprivate.compiler(), jaxprivate.jax_mlir()

    version = libtpu_version()
    if version is None:
        raise TpuCompilerError("libtpu is not installed (pip install -e '.[tpu-compiler]')")
    device = _device(chip)
    digest = program_sha256(text)
    started = time.perf_counter()
    try:
        with mlir.make_ir_context():
            module = mlir.ir.Module.parse(text)
            options = compiler.get_compile_options(1, 1, device_assignment=[device],
                                                   backend=device.client)
            executable = device.client.compile(module, executable_devices=xc.DeviceList(
                (device,)), compile_options=options)
    except Exception as exc:  # the compiler's refusal (XlaRuntimeError) is the verdict
        message = trim(f"{type(exc).__name__}: {exc}")
        if dump_folder is not None:
            empty(dump_folder)
        return RealCompile(chip, False, digest, f"libtpu {version}", message,
                           classify(message), time.perf_counter() - started)
    seconds = time.perf_counter() - started
    optimal = None
    try:
        cost = executable.cost_analysis()
        found = cost.get("optimal_seconds") if isinstance(cost, dict) else None
        optimal = float(found) if found is not None and float(found) > 0 else None
    except Exception:  # a figure, never the verdict: a program without one has none
        optimal = None
    hlo = ""
    if keep_hlo or dump_folder is not None:
        try:
            hlo = "\n".join(m.to_string() for m in executable.hlo_modules())
        except Exception:  # a figure, never the verdict
            hlo = ""
    kernels: list[KernelCycles] = []
    note = NOT_ASKED
    read_started = time.perf_counter()
    if dump_folder is not None:
        kernels, note = read_cycles(dump_folder, hlo, chip)
    return RealCompile(chip, True, digest, f"libtpu {version}", seconds=seconds,
                       optimal_seconds=optimal, hlo=hlo if keep_hlo else "",
                       kernel_cycles=kernels, cycles_note=note,
                       cycles_seconds=time.perf_counter() - read_started)
