"""`kernelgraph tasks`: the shipped task suite, with each task's kernel class, dtypes and shapes."""

from __future__ import annotations

import contextlib
import sys
from typing import Annotated

import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from kernelgraph.cli.app import app, console, emit_json, fail


@app.command("tasks")
def tasks(
    name: Annotated[list[str] | None, typer.Argument(
        help="Only these tasks (names or paths); default: every shipped task.",
        show_default=False)] = None,
    no_class: Annotated[bool, typer.Option(
        "--no-class", help="Skip the kernel class (classifying traces each reference; "
        "classes are cached per task and author version).")] = False,
    json: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of a table.")] = False,
) -> None:
    """List the shipped tasks: kernel class (as the offline author reads it from the jaxpr), dtypes and shapes.

    Any command that takes a TASK accepts one of these names as well as a path: `kernelgraph verify rmsnorm kernels/rmsnorm.py`. The first shape is the tuning point, the rest are unseen shapes (unaligned ones are derived: each size off the tile alone and all at once, where no declared shape already is). A class marked unsupported is one the offline author refuses, with its reason."""
    from kernelgraph.errors import KernelgraphError
    from kernelgraph.taskinfo import describe
    from kernelgraph.tasknames import resolve_task, shipped_tasks

    try:
        paths = [resolve_task(n) for n in name] if name else list(shipped_tasks().values())
    except KernelgraphError as exc:
        fail(str(exc))
    infos = []
    status = (console.status("reading tasks", spinner="dots") if not json and sys.stdout.isatty()
              else contextlib.nullcontext())
    with status as spinner:
        for path in paths:
            if spinner is not None:
                spinner.update(f"reading {path.stem} ({len(infos) + 1}/{len(paths)})")
            try:
                infos.append(describe(path, classify=not no_class))
            except KernelgraphError as exc:
                fail(str(exc))
    if json:
        emit_json({"tasks": [i.to_json() for i in infos]})
        return
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    table.add_column("task", no_wrap=True)
    table.add_column("class", no_wrap=True)
    table.add_column("dtype", no_wrap=True)
    table.add_column("shapes (tuning point first)", overflow="fold")
    for info in infos:
        kind = "-" if info.kernel_class is None else info.kernel_class
        if info.unsupported:
            kind += " [red](unsupported)[/]"
        shapes = ", ".join(_shape(s) + ("*" if i in info.derived_shapes else "")
                           + _statics(info.statics, i) for i, s in enumerate(info.shapes))
        table.add_row(escape(info.name), kind, info.dtype, escape(shapes))
    console.print(table)
    if any(info.derived_shapes for info in infos):
        console.print("[dim]* an unaligned shape the verifier derives (a size off the tile "
                      "alone or all at once, where no declared shape is)[/]")
    for info in infos:
        if info.unsupported:
            console.print(f"[dim]{escape(info.name)}: unsupported: {escape(info.unsupported)}[/]")


def _statics(statics: list[str], index: int) -> str:
    """` [static max_expert_size=256 (argument 3)]` after a shape with static arguments."""
    text = statics[index] if index < len(statics) else ""
    return f" [static {text}]" if text else ""


def _shape(shape: object) -> str:
    """(1024, 1024) as 1024x1024; a JAXBench shape (a dict of sizes) as k=v pairs."""
    if isinstance(shape, list | tuple):
        return "x".join(str(d) for d in shape)
    if isinstance(shape, dict):
        return " ".join(f"{k}={v}" for k, v in shape.items())
    return str(shape)
