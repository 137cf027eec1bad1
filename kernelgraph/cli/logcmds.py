"""Commands that read a log: `runs`, `events`, `replay`, `log verify`."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import msgspec
import typer
from rich.markup import escape
from rich.table import Table
from rich.tree import Tree

from kernelgraph.cli.app import app, console, emit_json, err_console, fail

DbArg = Annotated[Path, typer.Argument(help="Path of a kernelgraph DuckDB log.", show_default=False)]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON instead of tables.")]

log_app = typer.Typer(help="Check a log's integrity.", no_args_is_help=True)
app.add_typer(log_app, name="log")


@contextmanager
def _open(db: Path) -> Iterator[Any]:
    from eventstore.log import EventLog, LogError

    if not db.exists():
        fail(f"{db}: no such log")
    try:
        log = EventLog(db, read_only=True)
    except LogError as exc:
        fail(str(exc))
    try:
        yield log
    except LogError as exc:
        fail(str(exc))
    finally:
        log.close()


def _speedup(value: float | None, measured_on: str | None) -> str:
    if value is None:
        return "-"
    return f"{value:.2f}x" + (" (simulated)" if measured_on == "simulated" else "")


def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%d %H:%M:%S")


@app.command()
def runs(db: DbArg, json: JsonOpt = False) -> None:
    """List the runs in a log: task, policy, target, status and the winner's speedup."""
    with _open(db) as log:
        rows = log.runs()
    if json:
        emit_json({"runs": [msgspec.structs.asdict(r) for r in rows]})
        return
    if not rows:
        console.print(f"no runs in {db}")
        return
    table = Table(title=f"runs in {db}", caption="speedups marked sim are simulated")
    for col in ("run", "task", "policy@target", "events", "status", "speedup"):
        table.add_column(col, no_wrap=True, overflow="ellipsis")
    for r in rows:
        speed = "-" if r.speedup is None else f"{r.speedup:.2f}x"
        if r.speedup is not None and r.measured_on == "simulated":
            speed += " sim"
        table.add_row(r.run_id, r.task or "-", f"{r.policy or '-'}@{r.target or '-'}",
                      str(r.events), r.status or "open", speed)
    console.print(table)


def _event_line(seq: int, event: Any) -> str:
    skip = {"event_id", "run_id", "ts", "producer", "node_id", "causation_id", "v"}
    payload = {k: v for k, v in msgspec.structs.asdict(event).items() if k not in skip}
    text = msgspec.json.encode(payload).decode()
    if len(text) > 120:
        text = text[:117] + "..."
    node = f" {event.node_id}" if event.node_id else ""
    return f"{seq:>8} {_when(event.ts)} {event.type_name:<19} {event.run_id}{node} {text}"


@app.command()
def events(
    db: Annotated[Path | None, typer.Argument(
        help="Path of a kernelgraph DuckDB log (or use --nats).", show_default=False)] = None,
    nats: Annotated[str | None, typer.Option(
        "--nats", help="Read the live events stream of this NATS server instead of a log file: "
        "the way to watch a run while the recorder holds the log. Credentials come only from "
        "KG_NATS_TOKEN or KG_NATS_USER/KG_NATS_PASSWORD.")] = None,
    run: Annotated[str | None, typer.Option("--run", help="Only this run.")] = None,
    type_: Annotated[
        list[str] | None,
        typer.Option("--type", help="Only this event type (repeatable), e.g. TestsRun."),
    ] = None,
    after: Annotated[int, typer.Option("--after", help="Only events with seq above this.")] = 0,
    limit: Annotated[int | None, typer.Option("--limit", help="At most this many.")] = None,
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing new events as they are recorded.")
    ] = False,
    interval: Annotated[float, typer.Option(help="Polling interval for --follow, seconds.")] = 0.5,
    json: Annotated[bool, typer.Option("--json", help="One JSON object per event, per line.")] = False,
) -> None:
    """Print events in log order. With --follow, wait for new ones (Ctrl-C to stop).

    With --nats the events come from the bus (what its events stream still retains, then
    live ones), and the number printed first is the stream sequence, not the log's seq.
    """
    from eventstore.codec import encode_event
    from eventstore.events import EVENT_TYPES_BY_NAME
    from eventstore.log import EventLog, LogError, LogLockedError

    for name in type_ or ():
        if name not in EVENT_TYPES_BY_NAME:
            fail(f"unknown event type {name!r}; known: {', '.join(sorted(EVENT_TYPES_BY_NAME))}")

    def show(records: Iterator[tuple[int, Any]]) -> int:
        last = 0
        for seq, event in records:
            if json:
                body = msgspec.json.decode(encode_event(event))
                print(msgspec.json.encode({"seq": seq, **body}).decode(), flush=True)
            else:
                console.print(_event_line(seq, event), highlight=False, soft_wrap=True)
            last = seq
        return last

    if (db is None) == (nats is None):
        fail("give either a log file (DB) or --nats URL")
    if nats is not None:
        _events_from_bus(nats, run, type_, follow, show)
        return
    assert db is not None
    with _open(db) as log:
        last = show(log.read(run_id=run, types=type_, after_seq=after, limit=limit)) or after
    if not follow:
        return
    waiting_said = False
    try:
        while True:
            time.sleep(interval)
            try:
                log = EventLog(db, read_only=True)
            except LogLockedError as exc:
                if not waiting_said:
                    err_console.print(f"[yellow]waiting:[/] {escape(str(exc))}; to watch a running "
                                      "search, use `kernelgraph events --nats URL --follow`")
                    waiting_said = True
                continue
            except LogError as exc:
                fail(str(exc))
            try:
                last = show(log.read(run_id=run, types=type_, after_seq=last)) or last
            finally:
                log.close()
    except KeyboardInterrupt:
        return


def _events_from_bus(url: str, run: str | None, types: list[str] | None, follow: bool,
                     show: Callable[[Iterator[tuple[int, Any]]], int]) -> None:
    import asyncio

    import nats.errors

    from bus.connection import BusConfigError, connect
    from bus.watch import watch_events

    async def main() -> None:
        nc = await connect(url, name="kernelgraph-events")
        try:
            async for record in watch_events(nc, run_id=run, types=types, follow=follow):
                show(iter([record]))
        finally:
            await nc.close()

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        return
    except (BusConfigError, nats.errors.Error, OSError) as exc:
        fail(f"--nats {url}: {exc}")


@app.command()
def replay(
    db: DbArg,
    run: Annotated[str | None, typer.Option("--run", help="Only this run.")] = None,
    json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Rebuild the search graph, best-of-N history and metrics from the log alone.

    Shows each run's graph as a tree (best node marked), then the metrics, with simulated and
    real figures kept apart.
    """
    from projections.replay import LogView

    with _open(db) as log:
        view = LogView(run).apply_records(log.read(run_id=run))
    if run is not None and run not in view.graphs:
        fail(f"no run {run!r} in {db}")
    if json:
        emit_json(view.to_json())
        return
    for graph in view.graphs.values():
        console.print(_graph_tree(graph))
    summary = view.metrics.summary()
    console.print(_metrics_table(summary))
    console.print(_efficiency_table(summary))


def _graph_tree(graph: Any) -> Tree:
    s = graph.state
    best = graph.best
    base = "-" if s.baseline_latency_s is None else f"{s.baseline_latency_s * 1e6:.1f} us"
    label = (f"[bold]{s.run_id}[/] task={s.task_name} policy={s.policy} target={s.target} "
             f"baseline={base} ({s.baseline_measured_on or '-'})")
    tree = Tree(label)
    if graph.root is None:
        return tree

    def add(parent: Tree, node: Any) -> None:
        mark = " [bold green]<- best[/]" if best is not None and node.node_id == best.node_id else ""
        colour = "dim" if node.unjudged else {
            "valid": "green", "invalid": "red", "root": "cyan"}.get(node.status, "yellow")
        text = (f"[{colour}]{node.node_id}[/] {_node_what(node)} "
                f"{_speedup(node.speedup, node.measured_on)}{mark}")
        if node.next_levers:
            text += f" [dim]next: {escape(', '.join(node.next_levers[:4]))}[/]"
        branch = parent.add(text)
        for child in graph.children(node.node_id):
            add(branch, child)

    add(tree, graph.root)
    return tree


def _node_what(node: Any) -> str:
    """Status and lever (`[lever=a+b]` read back, not taken for markup), else the hint."""
    from searchpolicies.levers import parse_strategy

    if node.status == "root":
        return "XLA baseline"
    status = node.unjudged or node.status
    strategy = parse_strategy(node.strategy)
    if strategy.levers:
        return f"{status} {escape('[' + '+'.join(strategy.levers) + ']')}"
    return f"{status} {escape(node.strategy)}".rstrip()


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def _efficiency_table(summary: dict[str, Any]) -> Table:
    """How the search spent its candidates (`projections.metrics`): a row per figure and a
    column per policy and label, so the figures' names stay readable in a narrow terminal."""
    table = Table(title="search efficiency per policy")
    heads = ["candidates", "judged", "distinct_kernels", "distinct_per_candidate",
             "tested_twice", "mean_candidates_to_best", "best_over_first", "climbed"]
    columns = [(f"{policy} ({label})", figures["efficiency"])
               for policy, per_label in summary["by_policy"].items()
               for label, figures in per_label.items()]
    table.add_column("figure")
    for name, _ in columns:
        table.add_column(name)
    for head in heads:
        table.add_row(head.replace("_", " "), *(_fmt(e[head]) for _, e in columns))
    return table


def _metrics_table(summary: dict[str, Any]) -> Table:
    table = Table(title=f"metrics over {summary['runs']} run(s)")
    table.add_column("metric")
    labels = list(summary["by_measured_on"])
    for label in labels:
        table.add_column(label)
    keys = ["runs", "kernels", "compile_rate", "correctness_rate", "node_compile_rate",
            "node_correctness_rate", "geomean_speedup"]
    for key in keys:
        table.add_row(key, *(_fmt(summary["by_measured_on"][lb][key]) for lb in labels))
    for p in summary["by_measured_on"][labels[0]]["fast_p"] if labels else ():
        table.add_row(f"fast_{p}", *(_fmt(summary["by_measured_on"][lb]["fast_p"][p]) for lb in labels))
    tokens = summary["tokens"]
    table.add_row("tokens per run", *[_fmt(tokens["per_run"])] * len(labels))
    table.add_row("tokens per correct kernel", *[_fmt(tokens["per_correct_kernel"])] * len(labels))
    for phase, wall in summary["phase_wall_s"].items():
        table.add_row(f"wall {phase} (s, total)", *[_fmt(wall["total"])] * len(labels))
    return table


@log_app.command("verify")
def log_verify(db: DbArg, json: JsonOpt = False) -> None:
    """Recompute the hash chain; exit 1 and name the first broken row if the log was altered."""
    with _open(db) as log:
        report = log.verify()
    if json:
        emit_json({"ok": report.ok, "rows_checked": report.rows_checked,
                   "first_broken_seq": report.first_broken_seq, "reason": report.reason})
    elif report.ok:
        console.print(f"[green]ok[/]: {report.rows_checked} rows, hash chain intact")
    else:
        err_console.print(f"[bold red]broken[/] at seq {report.first_broken_seq}: {report.reason}")
    if not report.ok:
        raise typer.Exit(1)
