"""Commands that measure a candidate: `tune` (sweep its TUNABLES) and `profile`."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Annotated, Any

import msgspec
import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from kernelgraph.cli.app import (
    WeakSandboxOpt,
    app,
    console,
    emit_json,
    err_console,
    fail,
    parse_config,
    sandbox_gate,
    task_arg,
)
from kernelgraph.cli.scaleopt import ScaleOpt, apply_scale

TaskArg = Annotated[Path, typer.Argument(help="Task file (kernelgraph task or JAXBench task folder or its baseline.py), or a shipped task's name.", show_default=False)]
CandidateArg = Annotated[Path, typer.Argument(help="Candidate kernel file (defines build(); optional TUNABLES).", show_default=False)]
TargetOpt = Annotated[str, typer.Option("--target", help="sim-tpu-v6e | sim-tpu-v5e | sim-tpu-v7 (simulated) or tpu | gpu (real device).")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object instead of tables.")]


def _check_paths(task: Path, candidate: Path) -> Path:
    """The task file (a path, or a shipped task's name resolved); both files must exist."""
    resolved = task_arg(task)
    if not candidate.is_file():
        fail(f"{candidate}: no such candidate file")
    return resolved


def _check_target(target: str) -> None:
    from tools.performance.executors import TARGETS

    if target not in TARGETS:
        fail(f"unknown target {target!r}; known: {', '.join(TARGETS)}")


def _label(measured_on: str) -> str:
    return " (simulated)" if measured_on == "simulated" else " (measured)"


@app.command()
def tune(
    task: TaskArg,
    candidate: CandidateArg,
    target: TargetOpt = "sim-tpu-v6e",
    budget_configs: Annotated[int | None, typer.Option("--budget-configs", min=1, help="Evaluate at most N configurations (default first).")] = None,
    budget_s: Annotated[float | None, typer.Option("--budget-s", min=1.0, help="Start no configuration after S seconds.")] = None,
    workers: Annotated[int, typer.Option("--workers", min=1, help="Parallel worker processes.")] = 2,
    scale: ScaleOpt = None,
    allow_weak_sandbox: WeakSandboxOpt = False,
    json: JsonOpt = False,
) -> None:
    """Sweep the candidate's TUNABLES and print the table and the best configuration.

    Each configuration is compiled and checked for correctness against one frozen test suite
    before it is timed. On a real device configurations run one at a time. Exit status 0
    when at least one configuration passed."""
    task = _check_paths(task, candidate)
    _check_target(target)
    sandbox_gate(allow_weak_sandbox)
    task = apply_scale(task, scale)
    from kernelgraph.errors import KernelgraphError
    from tools.inputs.candidate import CandidateError, read_candidate
    from tools.performance.autotune import autotune

    try:
        total = read_candidate(candidate).num_configs
    except CandidateError as exc:
        fail(str(exc))
    planned = min(total, budget_configs) if budget_configs else total
    progress = Progress(
        TextColumn("[bold]tuning[/] {task.description}"), BarColumn(), MofNCompleteColumn(),
        TimeElapsedColumn(), console=err_console, transient=True, disable=json,
    )
    try:
        with progress:
            bar = progress.add_task(f"{candidate.name} on {target}", total=planned)

            def on_row(row: Any, done: int, of: int) -> None:
                progress.update(bar, completed=done, total=of)

            result = autotune(task, candidate, target=target, budget_configs=budget_configs,
                              budget_s=budget_s, workers=workers, on_row=on_row)
    except KernelgraphError as exc:  # TaskError, CandidateError, SuiteError, TargetUnavailable, ...
        fail(str(exc))
    except ImportError as exc:
        fail(f"the evaluator is not available: {exc}")
    if json:
        emit_json(result)
    else:
        label = _label(result.measured_on)
        table = Table(title=f"tuning {candidate} on {target}{label} - suite {result.suite_sha256[:12]}")
        for col in ("config", "status", f"speedup{label}", "latency (us)", "reasons"):
            table.add_column(col)
        for row in result.rows:
            table.add_row(
                ", ".join(f"{k}={v}" for k, v in row.config.items()) or "(default)",
                row.status,
                "-" if row.speedup is None else f"{row.speedup:.3f}x",
                "-" if row.latency_s is None else f"{row.latency_s * 1e6:.2f}",
                "; ".join(row.reasons)[:120],
            )
        console.print(table)
        if result.best_config is not None:
            console.print(f"best: {result.best_config} at {result.best_speedup:.3f}x{label}")
        else:
            console.print("[bold red]no configuration passed[/]")
        console.print(f"{result.configs_evaluated} of {result.configs_total} configurations "
                      f"in {result.wall_s:.1f} s with {result.workers} workers"
                      + (" (budget exhausted)" if result.budget_exhausted else ""))
    raise typer.Exit(0 if result.best_config is not None else 1)


@app.command()
def profile(
    task: TaskArg,
    candidate: CandidateArg,
    target: TargetOpt = "sim-tpu-v6e",
    config: Annotated[list[str] | None, typer.Option("--config", help="A tunable as NAME=VALUE; repeat for several.")] = None,
    scale: ScaleOpt = None,
    allow_weak_sandbox: WeakSandboxOpt = False,
    json: JsonOpt = False,
) -> None:
    """Evaluate the candidate and summarise where its time goes.

    Latency, bytes moved, flops, fraction of peak bandwidth and compute, what bounds it, VMEM
    use, grid steps, and concrete suggestions. Simulated figures are labelled so. Exit status
    0 only when the candidate passed verification."""
    task = _check_paths(task, candidate)
    _check_target(target)
    sandbox_gate(allow_weak_sandbox)
    task = apply_scale(task, scale)
    from kernelgraph.errors import KernelgraphError
    from tools.performance.profile import render, summarize

    chosen = parse_config(config or [])
    from tools.verification.verify import evaluate

    with console.status(f"evaluating {candidate.name} on {target}", spinner="dots") if not json else contextlib.nullcontext():
        try:
            verdict = evaluate(task, candidate, config=chosen, target=target)
        except KernelgraphError as exc:  # TaskError, CandidateError, TargetUnavailable, ...
            fail(str(exc))
    measurement = getattr(verdict, "measurement", None)
    if measurement is None:
        reasons = "; ".join(getattr(verdict, "reasons", []) or []) or "no measurement"
        fail(f"no profile: the candidate did not get as far as timing ({reasons})")
    report = getattr(verdict, "compile_report", None)
    summary = summarize(measurement, report)
    if json:
        emit_json({"verdict": verdict.verdict, "reasons": list(verdict.reasons),
                   "profile": msgspec.to_builtins(summary)})
    else:
        console.print(render(summary), highlight=False)
        if verdict.verdict != "pass":
            console.print(f"[bold red]verdict: {verdict.verdict}[/] - "
                          + escape("; ".join(verdict.reasons)))
    if verdict.verdict != "pass":
        raise typer.Exit(1)

