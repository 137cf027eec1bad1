"""`kernelgraph resume`: continue a run that stopped, without redoing finished work."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from kernelgraph.cli.app import WeakSandboxOpt, app, emit_json, err_console, fail, sandbox_gate
from kernelgraph.cli.buscmds import NatsOpt
from kernelgraph.cli.progress import Progress
from kernelgraph.cli.runcmds import JsonOpt, _print_summary, _summary, _write_winner


@app.command(rich_help_panel="Search")
def resume(
    db: Annotated[Path, typer.Argument(help="The log the run was recorded in.")],
    run: Annotated[str | None, typer.Option(
        "--run", help="The run to continue (default: the log's only unfinished run).",
        show_default=False)] = None,
    nats: NatsOpt = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress lines.")] = False,
    allow_weak_sandbox: WeakSandboxOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Continue a run (a search or one trajectory) that was killed part way.

    The command that started the run is sent again with the same id: every step whose
    result is in the log is answered from it, so no finished expansion is redone and no
    node is requested twice. Without --nats the run continues in this process on the
    embedded runtime, beside the same log (its JetStream store is kept next to DB); when
    that store is gone, the run's events and the log's artifacts are put back on the bus
    first. With --nats, the deployment at that URL (whose recorder writes DB) continues it.

    Exit status: 0 a verified kernel; 1 the run ended without one; 2 bad input.
    """
    from bus.connection import connect
    from kernelgraph.client import wait
    from kernelgraph.resume import ResumeError, load_run
    from kernelgraph.resume import resume as resume_run
    from kernelgraph.runtime import Runtime, RuntimeConfig

    if nats is None:  # the run continues in this process
        sandbox_gate(allow_weak_sandbox)
    try:
        saved = load_run(db, run)
    except ResumeError as exc:
        fail(str(exc))
    except Exception as exc:  # a corrupt or locked log
        fail(f"{db}: {exc}")
    if saved.finished is not None:
        fail(f"run {saved.run_id} already finished ({saved.finished.status}); "
             f"see `kernelgraph replay {db} --run {saved.run_id}`")
    progress = Progress(quiet=quiet)
    task_name = saved.requested.task_name

    class _Task:
        def __init__(self) -> None:
            self.task_name = task_name

    async def follow(nc: Any, restore: Any, started: float) -> dict[str, Any]:
        restored = await resume_run(nc, saved, restore)
        if restored and not quiet:
            err_console.print(f"put {restored} events of run {saved.run_id} back on the bus",
                              highlight=False)
        result = await wait(nc, saved.run_id, on_event=progress)
        kernel, receipt = await _write_winner(nc, result, db, task_name)
        return _summary(result, _Task(), kernel, receipt, time.monotonic() - started)

    async def main() -> dict[str, Any]:
        started = time.monotonic()
        if nats is not None:
            nc = await connect(nats, name="kernelgraph-resume")
            try:
                return await follow(nc, None, started)
            finally:
                await nc.drain()
        config = RuntimeConfig(db_path=db, concurrency={"executor": 2, "verifier": 1})
        async with Runtime(config) as runtime:
            assert runtime.client is not None and runtime.recorder is not None
            recorder = runtime.recorder

            async def read_artifacts() -> list[tuple[bytes, str]]:
                rows = await recorder.read(lambda log: log.sql("SELECT data, kind FROM artifacts"))
                return [(bytes(data), str(kind)) for data, kind in rows]  # type: ignore[arg-type]

            return await follow(runtime.client.nc, read_artifacts, started)

    summary = asyncio.run(main())
    if json_out:
        emit_json(summary)
    else:
        _print_summary(summary)
    raise typer.Exit(0 if summary["best"]["verified"] else 1)
