"""The agents' side of the knowledge store: retrieval for prompts, lessons after a run.

Knowledge is an aid, so a store that cannot be used does not fail a run; but it is never
dropped silently either: both functions return what could not be done, and the callers
(`agents.context.retrieve`, the Auto orchestrator's lessons) record it as a
`KnowledgeUnavailable` event, which the run's progress prints.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from eventstore.events import KnowledgeUnavailable

log = logging.getLogger("kernelgraph.agents")


def store_location() -> str:
    """Where the store is (a folder or a server's URL), for a report; never opens it."""
    from tools.knowledge import ENV_URL, default_path

    return os.environ.get(ENV_URL, "").strip() or str(default_path())


def retrieve(query: str, *, limit: int = 4,
             cutoff_ts: float | None = None) -> tuple[list[str], str | None]:
    """Snippets for a prompt (lessons recorded after `cutoff_ts` left out), and None; or no
    snippets and why the store could not be searched."""
    try:
        from tools.knowledge import shared_store

        hits = shared_store().search(query, limit=limit, before_ts=cutoff_ts)
    except Exception as exc:  # any failure of the store: reported by the caller, never fatal
        reason = f"{type(exc).__name__}: {' '.join(str(exc).split())[:400]}"
        log.warning("knowledge retrieval failed (%s); planning without it", reason)
        return [], reason
    return [f"[{h.kind}] {h.title}: {h.text.strip()}" for h in hits], None


def record_lessons(lessons: list[dict[str, Any]]) -> tuple[int, str | None]:
    """Append lessons (lever, kernel class, effect, the event that proves it) to the store:
    how many were written, and why the rest were not (None when all were)."""
    written = 0
    try:
        from tools.knowledge import shared_store

        store = shared_store()
        for lesson in lessons:
            store.add_lesson(**lesson)
            written += 1
    except Exception as exc:  # any failure of the store: reported by the caller, never fatal
        reason = f"{type(exc).__name__}: {' '.join(str(exc).split())[:400]}"
        log.warning("could not record %d lesson(s): %s", len(lessons) - written, reason)
        return written, reason
    return written, None


def unavailable_fields(operation: str, reason: str, lost: int = 0) -> dict[str, Any]:
    """The payload of a `KnowledgeUnavailable` event."""
    return {"operation": operation, "reason": reason, "store": store_location(), "lost": lost}


__all__ = ["KnowledgeUnavailable", "record_lessons", "retrieve", "unavailable_fields"]
