"""The agents' side of the knowledge store: retrieval for prompts, lessons after a run."""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("kernelgraph.agents")


def retrieve(query: str, *, limit: int = 4, cutoff_ts: float | None = None) -> list[str]:
    """Snippets for a prompt; lessons recorded after `cutoff_ts` are left out.

    Retrieval is an aid: a store that cannot be opened gives no snippets, not a failure.
    """
    try:
        from tools.knowledge import shared_store

        hits = shared_store().search(query, limit=limit, before_ts=cutoff_ts)
    except Exception as exc:
        log.warning("knowledge retrieval failed (%s: %s); planning without it",
                    type(exc).__name__, exc)
        return []
    return [f"[{h.kind}] {h.title}: {h.text.strip()}" for h in hits]


def record_lessons(lessons: list[dict[str, Any]]) -> int:
    """Append lessons (lever, kernel class, effect, the event that proves it) to the store."""
    from tools.knowledge import shared_store

    store = shared_store()
    for lesson in lessons:
        store.add_lesson(**lesson)
    return len(lessons)
