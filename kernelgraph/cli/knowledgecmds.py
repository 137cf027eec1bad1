"""Commands on the knowledge store: `knowledge search` and `knowledge index`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from kernelgraph.cli.app import app, console, emit_json, fail

knowledge_app = typer.Typer(
    help=("Search what the planner retrieves: Pallas API docs, the project's notes and "
          "lessons from past runs (BM25 in a local Qdrant store, or KG_QDRANT_URL)."),
    no_args_is_help=True,
)
app.add_typer(knowledge_app, name="knowledge")

JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object instead of a table.")]
PathOpt = Annotated[Path | None, typer.Option(
    "--path", help="Store folder (default: $KG_KNOWLEDGE_PATH or ~/.cache/kernelgraph/knowledge).",
    show_default=False)]

_PREVIEW_LINES = 3


def _store(path: Path | None) -> Any:
    from tools.knowledge import KnowledgeError, KnowledgeStore

    try:
        return KnowledgeStore.open(path=path)
    except KnowledgeError as exc:
        fail(str(exc))


def _preview(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    shown = "\n".join(lines[:_PREVIEW_LINES])
    return shown + ("\n..." if len(lines) > _PREVIEW_LINES else "")


@knowledge_app.command()
def search(
    query: Annotated[str, typer.Argument(help="What the agent would ask, in words or identifiers.", show_default=False)],
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, max=100, help="Number of hits.")] = 5,
    kind: Annotated[list[str] | None, typer.Option("--kind", help="api | note | lesson (repeatable).", show_default=False)] = None,
    kernel_class: Annotated[str | None, typer.Option("--class", help="Leave out documents tagged only for other kernel classes (e.g. matmul, attention).", show_default=False)] = None,
    path: PathOpt = None,
    json: JsonOpt = False,
) -> None:
    """Print the documents an agent would retrieve for QUERY, best first.

    Indexes the static part first if it is missing or out of date. Exit status 0 also when
    nothing matches."""
    from tools.knowledge import KINDS, KnowledgeError

    unknown = [k for k in kind or () if k not in KINDS]
    if unknown:
        fail(f"unknown --kind {unknown[0]!r}; known: {', '.join(KINDS)}")
    store = _store(path)
    try:
        store.ensure_indexed()
        hits = store.search(query, limit=limit, kinds=kind or None, kernel_class=kernel_class)
    except KnowledgeError as exc:
        fail(str(exc))
    finally:
        store.close()
    if json:
        emit_json({"query": query, "store": store.location, "hits": [
            {"rank": i, "score": round(h.score, 4), "id": h.id, "kind": h.kind, "title": h.title,
             "source": h.source, "kernel_classes": list(h.kernel_classes),
             "levers": list(h.levers), "text": h.text}
            for i, h in enumerate(hits, 1)]})
        return
    if not hits:
        console.print(f"no documents match {escape(query)!r}", highlight=False)
        return
    table = Table(title=f"knowledge: {escape(query)}", show_lines=True)
    for column, justify in (("#", "right"), ("score", "right"), ("kind", "left"),
                            ("document", "left")):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for i, hit in enumerate(hits, 1):
        body = f"[bold]{escape(hit.title)}[/]\n{escape(_preview(hit.text))}\n[dim]{escape(hit.source)}[/]"
        table.add_row(str(i), f"{hit.score:.2f}", hit.kind, body)
    console.print(table)


@knowledge_app.command()
def index(
    force: Annotated[bool, typer.Option("--force", help="Compare with the sources even if their fingerprint is unchanged.")] = False,
    path: PathOpt = None,
    json: JsonOpt = False,
) -> None:
    """Build or refresh the static part (API docs and notes) and print document counts.

    The static part is compared with its sources only when the installed JAX or the notes
    changed, or with --force; changed documents are rewritten, lessons are kept."""
    from tools.knowledge import KnowledgeError

    store = _store(path)
    try:
        report = store.ensure_indexed(force=force)
    except KnowledgeError as exc:
        fail(str(exc))
    finally:
        store.close()
    if json:
        emit_json({"store": store.location, "rebuilt": report.rebuilt, "counts": report.counts,
                   "written": report.written, "deleted": report.deleted,
                   "seconds": round(report.seconds, 3), "fingerprint": report.fingerprint})
        return
    what = (f"refreshed ({report.written} written, {report.deleted} deleted)" if report.rebuilt
            else "up to date")
    counts = ", ".join(f"{n} {kind}" for kind, n in report.counts.items())
    console.print(f"{escape(store.location)}: {what} in {report.seconds:.2f} s; {counts}",
                  highlight=False)
