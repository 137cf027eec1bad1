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
    "option). Recorded in the suite and the receipt.", show_default=False)]


def apply_scale(task: Path, scale: list[str] | None) -> Path:
    """The task file to load at ``scale`` (``task`` itself without one); one-line errors."""
    if not scale:
        return task
    from kernelgraph.errors import KernelgraphError
    from kernelgraph.userterms import given_name, remember
    from tools.api import scaled_task

    try:
        scaled = scaled_task(task, scale)
    except KernelgraphError as exc:  # TaskError: a scale the task cannot take, and why
        fail(str(exc))
    remember(scaled, given_name(task))  # messages name the task given, not the scaled copy
    return scaled
