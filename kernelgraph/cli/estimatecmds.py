"""`kernelgraph estimate`: a candidate's simulated speed from its lowering, unverified."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from kernelgraph.cli.app import (
    WeakSandboxOpt,
    app,
    console,
    emit_json,
    fail,
    parse_config,
    sandbox_gate,
    task_arg,
)
from kernelgraph.cli.scaleopt import ScaleOpt, apply_scale


@app.command()
def estimate(
    task: Annotated[Path, typer.Argument(help="Task file (kernelgraph task or JAXBench task folder or its baseline.py), or a shipped task's name.", show_default=False)],
    candidate: Annotated[Path, typer.Argument(help="Candidate kernel file (defines build(); optional TUNABLES).", show_default=False)],
    target: Annotated[str, typer.Option("--target", help="sim-tpu-v6e | sim-tpu-v5e | sim-tpu-v7.")] = "sim-tpu-v6e",
    config: Annotated[list[str] | None, typer.Option("--config", help="A tunable as NAME=VALUE; repeat for several.")] = None,
    shape_index: Annotated[int, typer.Option("--shape-index", min=0, help="Which of the task's shapes (0 = the tuning point).")] = 0,
    scale: ScaleOpt = None,
    allow_weak_sandbox: WeakSandboxOpt = False,
    json: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of tables.")] = False,
) -> None:
    """Estimate a configuration's speed from its lowering and the cost model alone.

    No correctness run: the figure is an UNVERIFIED, SIMULATED estimate for pruning
    configurations, never a result. The candidate is lowered in the sandboxed child with
    abstract inputs (shapes and dtypes), so full-size shapes are estimated in seconds.
    Exit status 0 when the estimate is sound (every kernel's work counted), 1 when not."""
    task = task_arg(task)
    if not candidate.is_file():
        fail(f"{candidate}: no such candidate file")
    sandbox_gate(allow_weak_sandbox)
    from kernelgraph.errors import KernelgraphError
    from tools.performance.estimate import estimate as run_estimate

    task = apply_scale(task, scale)

    chosen = parse_config(config or [])
    status = console.status(f"lowering {candidate.name} for {target}", spinner="dots")
    with status if not json else contextlib.nullcontext():
        try:
            result = run_estimate(task, candidate, target=target, config=chosen,
                                  shape_index=shape_index)
        except KernelgraphError as exc:
            fail(str(exc))
        except ValueError as exc:  # a shape index out of range
            fail(str(exc))
    if json:
        emit_json(result)
    else:
        table = Table(title=f"{candidate.name} on {task.name}, {target} (simulated, unverified)")
        for col in ("kernel", "bound", "HBM bytes", "flops", "steps", "latency (us)"):
            table.add_column(col)
        for k in result.breakdown:
            table.add_row(k.name, k.bound, f"{k.bytes:,}", f"{k.flops:,}", str(k.steps),
                          f"{k.latency_s * 1e6:.2f}")
        console.print(table)
        console.print(f"shape {escape(result.shape)}; config "
                      + (", ".join(f"{k}={v}" for k, v in result.config.items()) or "(default)"))
        console.print(f"estimated speedup (simulated, unverified): {result.speedup:.3f}x  "
                      f"latency {result.latency_s:.3e} s vs XLA baseline {result.baseline_s:.3e} s")
        if result.baseline_method:
            console.print(f"[dim]XLA baseline: {escape(result.baseline_method)}[/]")
        if not result.sound:
            console.print("[bold red]unsound[/]: " + escape("; ".join(result.reasons)))
        console.print(f"[dim]compile check: {escape(result.compile_check)}[/]")
        for line in _sides_lines(result.compute_sides):
            console.print(f"[dim]{escape(line)}[/]")
        console.print(f"[dim]{escape(result.note)}[/]")
    raise typer.Exit(0 if result.sound else 1)


def _sides_lines(sides: Any) -> list[str]:
    """Per kernel: the compiler's static compute beside the model's compute and memory, and
    how many steps each bounds (simulated); the latency above is the model's."""
    if sides is None:
        return []
    lines = []
    for k in sides.kernels:
        model = (f"model compute {k.model_compute_s * 1e6:.2f} us, memory {k.memory_s * 1e6:.2f} "
                 f"us, steps bound compute/memory {k.model_step_bounds.get('compute', 0)}/"
                 f"{k.model_step_bounds.get('memory', 0)}")
        if k.compiler_compute_s is None:
            lines.append(f"{k.name}: {model}; compiler compute: none ({k.note or sides.note})")
            continue
        lines.append(
            f"{k.name}: {model}; compiler compute {k.compiler_cycles:,.0f} cycles = "
            f"{k.compiler_compute_s * 1e6:.2f} us ({k.compiler_step_cycles:,.0f} a step, "
            f"pl.when regions {k.regions_counted}); latency with the model's memory "
            f"{(k.combined_latency_s or 0) * 1e6:.2f} us (beside), steps bound compute/memory "
            f"{k.combined_step_bounds.get('compute', 0)}/{k.combined_step_bounds.get('memory', 0)}")
    return lines
