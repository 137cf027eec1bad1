"""Retrieval for the planner and implementer: Pallas API docs, the project's notes, lessons.

`shared_store().search(query)` returns the best `Hit`s by BM25 over documents of three
kinds: "api" (the installed JAX's Pallas and Mosaic TPU docstrings), "note"
(`knowledge/*.md`, one document per section) and "lesson" (what a lever did in a past run,
added with `add_lesson`). See `tools.knowledge.store` for storage and sharing: processes
share a local folder one operation at a time (`tools.knowledge.folder`).
"""

from __future__ import annotations

from tools.knowledge.folder import ENV_WAIT, KnowledgeError
from tools.knowledge.store import (
    COLLECTION,
    ENV_PATH,
    ENV_URL,
    KINDS,
    Hit,
    IndexReport,
    KnowledgeStore,
    close_shared_stores,
    default_path,
    shared_store,
)

__all__ = [
    "COLLECTION",
    "ENV_PATH",
    "ENV_URL",
    "ENV_WAIT",
    "KINDS",
    "Hit",
    "IndexReport",
    "KnowledgeError",
    "KnowledgeStore",
    "close_shared_stores",
    "default_path",
    "shared_store",
]
