"""The `--scale` option shared by the commands that load a task (verify, tune, profile,
estimate): one spelling, one meaning, resolved to a task file before anything else runs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kernelgraph.cli.app import fail

ScaleOpt = Annotated[list[str] | None, typer.Option(
    "--scale", help="Run a JAXBench task at other sizes: factors for the CONFIG entries that "
    "size its inputs, first = tuning point, e.g. --scale 0.25,0.1875,0.125 (or repeat the "
    "option). A factor that breaks the task's structure is replaced by the nearest that "
    "keeps it, and said. Recorded in the suite and the receipt.", show_default=False)]


def apply_scale(task: Path, scale: list[str] | None) -> Path:
    """The task file to load at ``scale`` (``task`` itself without one); one-line errors.
    A factor replaced because it broke the task's structure is said once, here."""
    if not scale:
        return task
    from kernelgraph.errors import KernelgraphError
    from kernelgraph.userterms import given_name, remember
    from tools.api import scale_notes, scaled_task

    try:
        scaled = scaled_task(task, scale)
    except KernelgraphError as exc:  # TaskError: a scale the task cannot take, and why
        fail(str(exc))
    given = given_name(task)
    remember(scaled, given)  # messages name the task given, not the scaled copy
    say_scale_notes(given, scale_notes(scaled))
    return scaled


def say_scale_notes(given: str, notes: tuple[str, ...]) -> None:
    """Each change to the factors asked for, on stderr, naming the task as it was given."""
    from rich.markup import escape

    from kernelgraph.cli.app import err_console
    from kernelgraph.userterms import in_user_terms

    for note in notes:
        err_console.print(f"[yellow]scale[/] {escape(in_user_terms(f'{given}: {note}'))}",
                          highlight=False, soft_wrap=True)
