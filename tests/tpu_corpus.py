"""Programs to hold the emulated compile check against the real TPU compiler.

Three sources, each lowered for TPU as the verifier's runner lowers them:
- the shipped kernels (``kernels/``) at their tasks' tuning points, every TUNABLES value;
- the offline author's kernel for each shipped task at its tuning point (default and
  largest knobs);
- tuning configurations at the VMEM edge: the shipped kernels at large shapes with blocks
  whose emulated footprint lies around each chip's scoped limit;
- the adversarial corpus (``tests/candidates/``) lowered in the sandbox (worker + runner),
  as the verifier gets them.

Used by ``tests/test_tpu_compiler.py`` (a few representative programs: the compiler wins)
and by ``benchmarks/tpu_compiler.py`` (compile seconds; ``--part disagreements`` judges every
program here and lists every disagreement against :data:`KNOWN_DISAGREEMENTS`).
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import importlib.util
import itertools
import tempfile
from collections.abc import Callable, Collection, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


# Every disagreement on v6e, by program, with the compiler's verdict (True: it compiles).
# All three are the emulated check's body-value rule (the largest value the body computes
# held whole, its excess over the vregs counted against VMEM) refusing a kernel the compiler
# compiles: an elementwise body beside blocks that fill the scoped limit exactly, a matmul
# whose (1024, 2048) f32 product is produced tile by tile into the accumulator, and the
# adversarial single-block matmul whose bf16 operands are upcast to f32 in its body under a
# 768 KiB limit (written as one no chip compiles; the compiler compiles it).
KNOWN_DISAGREEMENTS: dict[str, bool] = {
    "kernels/gelu block_rows=512 @ (8192, 4096) float32": True,
    "kernels/matmul blocks=1024x2048x1024 @ 4096^3 bfloat16": True,
    "tests/candidates/f32_copies_over_vmem.py @ matmul_bf16 shape 0": True,
}


@dataclass
class Program:
    name: str  # "kernels/rmsnorm block_rows=512 @ (8192, 4096) float32"
    chip: str
    source: str  # "shipped" | "offline" | "edge" | "adversarial"
    text: str = ""  # the lowered StableHLO ("" when it did not lower)
    lower_error: str = ""
    emulated: Any = None  # CompileReport
    real: Any = None  # RealCompile
    extra: dict[str, Any] = field(default_factory=dict)


def _lower(fn: Callable[..., Any], args: list[Any], chip: str) -> str:
    import jax

    from tools.lowered.compile_check import lower_for_tpu

    return lower_for_tpu(jax.jit(fn).trace(*args), chip=chip)


def _abstract(task_path: Path, index: int = 0) -> tuple[Any, list[Any]]:
    import jax

    from tools.inputs.tasks import load_task

    task = load_task(task_path, validate=False)
    return task, list(jax.eval_shape(functools.partial(task.make_inputs, 0, index)))


def _configs(tunables: dict[str, list[Any]], every: bool) -> list[dict[str, Any]]:
    if not every:
        return [{}, {k: max(v) for k, v in tunables.items()}]
    keys = list(tunables)
    return [dict(zip(keys, values, strict=True))
            for values in itertools.product(*(tunables[k] for k in keys))]


def _describe(config: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in config.items()) or "default"


def shipped(chip: str = "v6e") -> Iterator[Program]:
    """kernels/*.py on tasks/<same>.py's tuning point, every TUNABLES combination."""
    for name in ("gelu", "rmsnorm", "softmax", "matmul"):
        module = importlib.import_module(f"kernels.{name}")
        _, args = _abstract(ROOT / "tasks" / f"{name}.py")
        for config in _configs(module.TUNABLES, every=True):
            yield _program(f"kernels/{name} {_describe(config)} @ tasks/{name} shape 0", chip,
                           "shipped", module.build(**config), args)


# (kernel, shape, dtype, knob, values): blocks around the scoped limit (16 MiB on v5e,
# 32 MiB on v6e) as the emulated check counts them.
_EDGE_ROWS = [
    ("rmsnorm", (8192, 4096), "float32", [64, 128, 192, 256, 320, 384, 512]),
    ("rmsnorm", (16384, 4096), "bfloat16", [128, 256, 384, 512, 768]),
    ("gelu", (8192, 4096), "float32", [128, 192, 256, 384, 512]),
    ("softmax", (4096, 8192), "float32", [64, 96, 128, 192, 256]),
]
_EDGE_MATMUL = [(512, 512, 512), (1024, 1024, 512), (1024, 1024, 1024), (2048, 1024, 512),
                (1024, 2048, 1024), (2048, 2048, 512)]


def edge(chip: str = "v6e") -> Iterator[Program]:
    """Shipped kernels at large shapes with blocks near the chip's scoped VMEM limit."""
    import jax
    import jax.numpy as jnp

    for kernel, shape, dtype, values in _EDGE_ROWS:
        module = importlib.import_module(f"kernels.{kernel}")
        args = [jax.ShapeDtypeStruct(shape, jnp.dtype(dtype))]
        if kernel == "rmsnorm":
            args.append(jax.ShapeDtypeStruct(shape[-1:], jnp.dtype(dtype)))
        for rows in values:
            yield _program(f"kernels/{kernel} block_rows={rows} @ {shape} {dtype}", chip,
                           "edge", module.build(block_rows=rows), args)
    matmul = importlib.import_module("kernels.matmul")
    a = jax.ShapeDtypeStruct((4096, 4096), jnp.bfloat16)
    for bm, bn, bk in _EDGE_MATMUL:
        yield _program(f"kernels/matmul blocks={bm}x{bn}x{bk} @ 4096^3 bfloat16", chip, "edge",
                       matmul.build(block_m=bm, block_n=bn, block_k=bk), [a, a])


def _program(name: str, chip: str, source: str, fn: Callable[..., Any],
             args: list[Any]) -> Program:
    try:
        return Program(name, chip, source, text=_lower(fn, args, chip))
    except Exception as exc:  # a configuration that does not lower is listed as such
        return Program(name, chip, source, lower_error=f"{type(exc).__name__}: {exc}"[:300])


def _ask(purpose: str, context: dict[str, Any]) -> str:
    from agents.llm.base import LlmRequest
    from agents.llm.offline import OfflineProvider

    request = LlmRequest(agent="corpus", purpose=purpose, prompt="(ignored offline)",
                         context=context, seed=0)
    return asyncio.run(OfflineProvider(seed=0).complete(request)).text


def offline(chip: str = "v6e") -> Iterator[Program]:
    """The offline author's kernel for every shipped task it writes one for, at the tuning
    point, default and largest knobs."""
    from agents.llm.base import ProviderError
    from agents.llm.parsing import check_plan, extract_code
    from kernelgraph.tasknames import shipped_tasks
    from tools.api import chip_figures
    from tools.inputs import statics

    target = {"v5e": "sim-tpu-v5e", "v6e": "sim-tpu-v6e", "v7": "sim-tpu-v7"}[chip]
    with tempfile.TemporaryDirectory(prefix="kg-corpus-") as scratch:  # gone when closed
        folder = Path(scratch)
        for name, task_path in sorted(shipped_tasks().items()):
            context = {"task_path": str(task_path), "task_name": name, "target": target,
                       "chip": chip_figures(target), "iteration": 0, "seed": 0, "parent": None,
                       "failures": [], "hint": "", "knowledge": [], "baseline_s": 1e-5,
                       "feedback": ""}
            try:
                plan = check_plan(_ask("plan", context))
                code = extract_code(_ask("implement", {**context, "plan": plan}))
            except ProviderError:
                continue  # the author refuses this task: nothing to compile
            path = folder / f"{name}_offline.py"
            path.write_text(code)
            spec = importlib.util.spec_from_file_location(f"kg_corpus_{name}", path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            task, args = _abstract(Path(task_path))
            for config in _configs(getattr(module, "TUNABLES", {}), every=False):
                fn = statics.bind(module.build(**config), list(task.statics_at(0)))
                yield _program(f"offline {name} {_describe(config)} @ shape 0", chip, "offline",
                               fn, args)


# Adversarial candidates with a kernel worth compiling, and the test task each targets.
# (Those whose point is the sandbox, the wire or the process are judged before any compile.)
ADVERSARIAL = [
    ("f32_copies_over_vmem.py", "matmul_bf16"), ("f32_copies_over_vmem.py", "matmul_small"),
    ("hidden_trip_count.py", "matmul_small"),
    ("parallel_accumulation.py", "matmul_small"), ("half_grid.py", "rmsnorm_small"),
    ("hardcoded_shapes.py", "rmsnorm_small"), ("nonfinite.py", "rmsnorm_small"),
    ("nan_to_zero.py", "rmsnorm_small"), ("xla_math_copy_kernel.py", "rmsnorm_small"),
    ("platform_dependent_body.py", "rmsnorm_small"),
    ("masked_nan_running_max.py", "softmax_small"), ("untouched_tail.py", "gelu_small"),
    ("drops_cols_when_rows_aligned.py", "gelu_small"),
    ("drops_rows_when_lanes_aligned.py", "gelu_small"), ("scalar_topk.py", "topk"),
    ("dma_decoy_first.py", "gelu_small"), ("dma_wait_in_always_true_when.py", "gelu_small"),
]


def adversarial(chip: str = "v6e",
                only: Collection[tuple[str, str]] | None = None) -> Iterator[Program]:
    """The adversarial corpus (or the ``only`` (candidate, task) pairs of it), lowered in the
    sandbox as the verifier lowers it: a few seconds per candidate."""
    from tools.performance.estimate import lower_in_sandbox, task_arguments

    for candidate, task_name in ADVERSARIAL:
        if only is not None and (candidate, task_name) not in only:
            continue
        path = ROOT / "tests" / "candidates" / candidate
        task_path = ROOT / "tests" / "evaltasks" / f"{task_name}.py"
        if not task_path.exists():
            task_path = ROOT / "tasks" / f"{task_name}.py"
        if not path.exists() or not task_path.exists():
            continue
        from tools.inputs.tasks import load_task

        task = load_task(task_path, validate=False)
        abstract, _ = task_arguments(task, 0)
        name = f"tests/candidates/{candidate} @ {task_path.stem} shape 0"
        try:
            text = lower_in_sandbox(path, {}, abstract, chip, 0,
                                    statics=task.statics_at(0))
        except Exception as exc:  # refused before any compile: listed, not compiled
            yield Program(name, chip, "adversarial", lower_error=str(exc)[:300])
            continue
        yield Program(name, chip, "adversarial", text=text)


def judge(programs: list[Program], chip: str) -> list[Program]:
    """The emulated check and the compiler on every program that lowered (one batch)."""
    from tools.lowered import tpu_compiler
    from tools.lowered.compile_check import check_lowered

    lowered = [p for p in programs if p.text]
    for p in lowered:
        p.emulated = check_lowered(p.text, chip=chip)
    for p, real in zip(lowered, tpu_compiler.compile_all([p.text for p in lowered], chip),
                       strict=True):
        p.real = real
    return programs


def named(programs: Iterable[Program], names: Collection[str]) -> list[Program]:
    """The programs of ``names`` from a source, each exactly once (a renamed one fails)."""
    found = [p for p in programs if p.name in names]
    assert sorted(p.name for p in found) == sorted(names), [p.name for p in found]
    return found


def unexplained(found: list[dict[str, Any]], judged: Collection[str]) -> dict[str, Any]:
    """Where ``found`` departs from :data:`KNOWN_DISAGREEMENTS` over the ``judged`` programs:
    new disagreements, and known ones that went away (a known one not judged is neither)."""
    got = {d["program"]: d["compiler_ok"] for d in found}
    known = {k: v for k, v in KNOWN_DISAGREEMENTS.items() if k in judged}
    return {"new": {k: v for k, v in got.items() if known.get(k) != v},
            "gone": sorted(k for k in known if k not in got)}


def disagreements(programs: list[Program]) -> list[dict[str, Any]]:
    """Every program the two checks judge differently, with both answers."""
    found = []
    for p in programs:
        if p.real is None or p.emulated is None or p.real.ok == p.emulated.ok:
            continue
        found.append({
            "program": p.name, "chip": p.chip, "source": p.source,
            "emulated_ok": p.emulated.ok, "compiler_ok": p.real.ok,
            "emulated_vmem_bytes": p.emulated.vmem_bytes,
            "emulated_limit_bytes": p.emulated.vmem_limit_bytes,
            "emulated": [d.message for d in p.emulated.diagnostics][:1],
            "compiler": p.real.message.split(" (")[0][:300],
        })
    return found
