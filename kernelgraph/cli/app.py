"""The root Typer application that every command module attaches to."""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from typing import Annotated, Any, NoReturn

import msgspec
import typer
from rich.console import Console
from rich.markup import escape

app = typer.Typer(
    name="kernelgraph",
    help=(
        "kernelgraph turns a reference JAX function into a verified, faster Pallas kernel.\n\n"
        "Every phase result is an event in an append-only DuckDB log; graphs and metrics are "
        "rebuilt from it. Figures from the default target (sim-tpu-v6e) are simulated and "
        "labelled so."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

console = Console()
err_console = Console(stderr=True)


def emit_json(obj: Any) -> None:
    """Print one JSON object on stdout, for scripts and notebooks."""
    sys.stdout.write(msgspec.json.encode(obj).decode() + "\n")
    sys.stdout.flush()


def fail(message: str, *, code: int = 2) -> NoReturn:
    """Stop with a one-line error a user can act on, never a traceback; the task is named as
    the user gave it (`kernelgraph.userterms`)."""
    from kernelgraph.userterms import in_user_terms

    err_console.print(f"[bold red]error:[/] {escape(in_user_terms(message))}", highlight=False,
                      soft_wrap=True)
    raise typer.Exit(code)


WeakSandboxOpt = Annotated[bool, typer.Option(
    "--allow-weak-sandbox", help="Run candidate code even where the full sandbox (namespaces "
    "of its own, uid 65534, read-only filesystem, private /tmp) cannot be built; also "
    "KG_ALLOW_WEAK_SANDBOX=1. Every verdict, receipt, run event and report records it. "
    "`kernelgraph doctor` shows what this machine offers.")]


def sandbox_gate(allow_weak: bool) -> None:
    """Refuse up front, in one line, to run candidate code without the full sandbox, unless
    the user opted in (then say, once, that the weaker one runs)."""
    from tools.sandbox import policy

    if allow_weak:
        policy.allow_weak()
    try:
        full = policy.require()
    except policy.SandboxUnavailable as exc:
        fail(str(exc))
    if not full:
        err_console.print(f"[bold yellow]warning:[/] {escape(policy.problem())}; candidates run "
                          f"in a weaker sandbox, as you asked ({policy.ALLOW_FLAG} or "
                          f"{policy.ALLOW_ENV}), and every verdict records it",
                          highlight=False, soft_wrap=True)


def task_arg(value: Path) -> Path:
    """A TASK argument as a file: an existing path (a JAXBench task folder means its
    baseline.py), or the name of a shipped task."""
    from kernelgraph.tasknames import UnknownTask, resolve_task
    from kernelgraph.userterms import remember

    try:
        path = resolve_task(value)
    except UnknownTask as exc:
        fail(str(exc))
    if path.is_dir() and (path / "baseline.py").is_file():
        remember(path / "baseline.py", str(value))
        return path / "baseline.py"  # a JAXBench task folder
    remember(path, str(value))
    if path.is_dir():
        fail(f"{path}: a folder without a baseline.py; give a task file or a JAXBench task "
             "folder (`kernelgraph bench` takes folders of tasks)")
    if not path.is_file():
        fail(f"{path}: not a task file")
    return path


def parse_config(items: list[str] | None) -> dict[str, Any]:
    """`--config NAME=VALUE` options as a dict; values are Python literals where they parse."""
    config: dict[str, Any] = {}
    for item in items or ():
        name, sep, raw = item.partition("=")
        if not sep or not name.isidentifier():
            fail(f"--config takes NAME=VALUE, got {item!r}")
        try:
            config[name] = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            config[name] = raw
    return config
