"""`KnowledgeStore`: BM25 retrieval over API docs, notes and lessons, kept in Qdrant.

Qdrant runs in local mode by default (a folder: `$KG_KNOWLEDGE_PATH`, else
`~/.cache/kernelgraph/knowledge`), or as a server when `KG_QDRANT_URL` (or `url=`) is given.
Each document is one point with one sparse vector of BM25 term weights (`tools.knowledge.text`)
and the collection applies IDF at query time (`Modifier.IDF`): no model, no dense vectors,
nothing downloaded.

The static part (API docs and notes, `tools.knowledge.sources`) is refreshed whenever its
fingerprint changes (another JAX, edited notes, another tokenizer): documents whose content
changed are rewritten, documents that are gone are deleted, the rest stay as they are.
Lessons are never touched by a refresh.

Local mode (qdrant-client's `QdrantLocal`) locks its folder to one client at a time. So
that any number of processes (two searches, `knowledge search` beside a run) share one
folder, no process keeps it open: each operation (a search, a lesson, a refresh) takes
`kernelgraph.lock` in the folder (an exclusive `flock`, waited for up to
`$KG_KNOWLEDGE_WAIT_S`, default 30 s), opens the folder, works and closes it again. Opening
costs milliseconds (the store holds a few hundred documents); every operation sees every
lesson written before it, by any process. A client outside kernelgraph that holds the
folder (qdrant-client's own lock) is waited for just as long; when the wait is over the
operation fails with `KnowledgeError`, which callers report (`agents.knowledge`), never
swallow. Within a process, `shared_store()` gives one store per location, indexed on first
use and safe to call from several threads. A Qdrant server (`KG_QDRANT_URL`) is kept open.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools.knowledge.folder import (
    KnowledgeError,
    folder_lock,
    open_local,
    wait_s,
)
from tools.knowledge.sources import Document, corpus_fingerprint, static_documents
from tools.knowledge.text import TOKENIZER_VERSION, bm25_weights, document_terms, query_weights

SCHEMA_VERSION = 1
COLLECTION = f"kernelgraph_knowledge_v{SCHEMA_VERSION}"
VECTOR = "bm25"
ENV_PATH = "KG_KNOWLEDGE_PATH"
ENV_URL = "KG_QDRANT_URL"
KINDS: tuple[str, ...] = ("api", "note", "lesson")
STATIC_KINDS: tuple[str, ...] = ("api", "note")
AVG_DOC_LEN = 80.0
"""BM25's average document length in terms: fixed, near the static corpus's own (about 83),
so that adding or changing one document never re-weights the others."""

_META_ID = str(uuid.uuid5(uuid.NAMESPACE_URL, "kernelgraph:knowledge:meta"))
_BATCH = 256


@dataclass(frozen=True, slots=True)
class Hit:
    id: str
    kind: str
    title: str
    text: str
    score: float
    source: str
    kernel_classes: tuple[str, ...] = ()
    levers: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class IndexReport:
    rebuilt: bool
    """The fingerprint had changed (or `force`), so the static part was compared and refreshed."""
    counts: dict[str, int]
    seconds: float
    fingerprint: str
    written: int = 0
    """Static documents written (new or changed)."""
    deleted: int = 0
    """Static documents removed because their source no longer has them."""


def default_path() -> Path:
    env = os.environ.get(ENV_PATH, "").strip()
    return Path(env).expanduser() if env else Path.home() / ".cache" / "kernelgraph" / "knowledge"


def _point_id(doc_id: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"kernelgraph:{doc_id}"))


class KnowledgeStore:
    """One store: a server's client, or a local folder opened per operation. See the module
    docstring for locations and sharing."""

    def __init__(self, client: Any = None, *, location: str, folder: Path | None = None) -> None:
        from qdrant_client import models

        if (client is None) == (folder is None):
            raise ValueError("a KnowledgeStore is a server's client or a local folder")
        self._remote = client
        self._folder = folder
        self._active: Any = None  # the local client of the operation in progress
        self._models = models
        self.location = location
        self._lock = threading.RLock()
        with self._session():
            pass  # creates the collection, and fails now if the store cannot be used

    @contextlib.contextmanager
    def _session(self) -> Iterator[Any]:
        """The client for one operation; a local folder is locked and open only inside it
        (nested calls in the same operation reuse it)."""
        with self._lock:
            if self._remote is not None:
                yield self._remote
                return
            if self._active is not None:
                yield self._active
                return
            assert self._folder is not None
            deadline = time.monotonic() + wait_s()
            with folder_lock(self._folder, deadline):
                client = open_local(self._folder, deadline)
                self._active = client
                try:
                    self._ensure_collection(client)
                    yield client
                finally:
                    self._active = None
                    client.close()

    # --- opening --------------------------------------------------------------------------

    @classmethod
    def open(cls, path: str | os.PathLike[str] | None = None, url: str | None = None) -> KnowledgeStore:
        """A local folder (default), or the server at `url` / `$KG_QDRANT_URL`."""
        from qdrant_client import QdrantClient

        url = url or os.environ.get(ENV_URL, "").strip() or None
        if url and path is None:
            try:
                return cls(QdrantClient(url=url), location=url)
            except Exception as exc:
                raise KnowledgeError(f"cannot use the Qdrant server at {url}: "
                                     f"{' '.join(str(exc).split())[:200]}") from None
        folder = Path(path).expanduser() if path is not None else default_path()
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise KnowledgeError(f"cannot open the knowledge store {folder}: {exc}") from None
        return cls(location=str(folder), folder=folder)

    def _ensure_collection(self, client: Any) -> None:
        models = self._models
        if client.collection_exists(COLLECTION):
            return
        client.create_collection(
            COLLECTION,
            vectors_config={},
            sparse_vectors_config={VECTOR: models.SparseVectorParams(modifier=models.Modifier.IDF)},
        )
        if not self.is_local:
            for key, schema in (("kind", models.PayloadSchemaType.KEYWORD),
                                ("kernel_classes", models.PayloadSchemaType.KEYWORD),
                                ("created_ts", models.PayloadSchemaType.FLOAT)):
                client.create_payload_index(COLLECTION, key, field_schema=schema)

    @property
    def is_local(self) -> bool:
        return not self.location.startswith(("http://", "https://"))

    def close(self) -> None:
        """Close a server's client (a local folder is open only during an operation)."""
        with self._lock:
            if self._remote is not None:
                self._remote.close()

    def __enter__(self) -> KnowledgeStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- indexing -------------------------------------------------------------------------

    def _meta(self, client: Any) -> dict[str, Any]:
        points = client.retrieve(COLLECTION, [_META_ID], with_payload=True)
        return dict(points[0].payload or {}) if points else {}

    def _kind_filter(self, kinds: Sequence[str]) -> Any:
        models = self._models
        return models.Filter(must=[models.FieldCondition(
            key="kind", match=models.MatchAny(any=list(kinds)))])

    def counts(self) -> dict[str, int]:
        """Documents per kind."""
        with self._session() as client:
            return {kind: client.count(COLLECTION, count_filter=self._kind_filter([kind]),
                                       exact=True).count for kind in KINDS}

    def ensure_indexed(self, *, force: bool = False) -> IndexReport:
        """Refresh the static part if its fingerprint changed (or `force`); lessons stay."""
        start = time.perf_counter()
        fingerprint = corpus_fingerprint()
        with self._session() as client:
            if not force and self._meta(client).get("fingerprint") == fingerprint:
                return IndexReport(False, self.counts(), time.perf_counter() - start, fingerprint)
            points = [self._point(doc) for doc in static_documents()]
            stored = {str(p.id): (p.payload or {}).get("content_sha256") for p in self._scroll(
                client, self._kind_filter(STATIC_KINDS), payload=["content_sha256"])}
            fresh = {p.id for p in points}
            stale = [point_id for point_id in stored if point_id not in fresh]
            if stale:
                client.delete(COLLECTION, points_selector=self._models.PointIdsList(points=stale))
            changed = [p for p in points if stored.get(p.id) != p.payload["content_sha256"]]
            self._upsert(client, changed)
            client.upsert(COLLECTION, points=[self._models.PointStruct(
                id=_META_ID, vector={}, payload={
                    "kind": "meta", "fingerprint": fingerprint, "built_ts": time.time(),
                    "documents": len(points)})])
            return IndexReport(True, self.counts(), time.perf_counter() - start, fingerprint,
                               written=len(changed), deleted=len(stale))

    @staticmethod
    def _scroll(client: Any, scroll_filter: Any, *, payload: bool | list[str] = True) -> list[Any]:
        points, offset = [], None
        while True:
            batch, offset = client.scroll(COLLECTION, scroll_filter=scroll_filter,
                                          limit=_BATCH, offset=offset, with_payload=payload)
            points.extend(batch)
            if offset is None:
                return points

    @staticmethod
    def _upsert(client: Any, points: list[Any]) -> None:
        for i in range(0, len(points), _BATCH):
            client.upsert(COLLECTION, points=points[i:i + _BATCH])

    def _point(self, doc: Document) -> Any:
        weights = bm25_weights(document_terms(doc.title, doc.text), AVG_DOC_LEN)
        indices = sorted(weights)
        payload = {
            "doc_id": doc.doc_id, "kind": doc.kind, "title": doc.title, "text": doc.text,
            "source": doc.source, "kernel_classes": list(doc.kernel_classes),
            "levers": list(doc.levers), **doc.extra,
        }
        payload["content_sha256"] = hashlib.sha256(
            json.dumps([payload, TOKENIZER_VERSION, AVG_DOC_LEN], sort_keys=True,
                       default=str).encode()).hexdigest()
        vector = self._models.SparseVector(indices=indices, values=[weights[i] for i in indices])
        return self._models.PointStruct(id=_point_id(doc.doc_id), vector={VECTOR: vector},
                                        payload=payload)

    # --- lessons --------------------------------------------------------------------------

    def add_lesson(
        self,
        run_id: str,
        kernel_class: str,
        lever: str,
        effect: str | float,
        event_id: str | None,
        text: str,
        *,
        created_ts: float | None = None,
    ) -> str:
        """Record what a lever did for a kernel class in a run, with the event that shows it.

        The lesson's id follows from `event_id` (or from the run and text when there is no
        event), so recording the same lesson twice keeps one copy. Returns that id."""
        key = event_id or hashlib.sha256(f"{run_id}\n{text}".encode()).hexdigest()[:26]
        doc = Document(
            doc_id=f"lesson:{key}", kind="lesson",
            title=f"Lesson: {lever} on {kernel_class} ({effect})", text=text.strip(),
            source=f"run {run_id}" + (f", event {event_id}" if event_id else ""),
            kernel_classes=(kernel_class,), levers=(lever,),
            extra={"run_id": run_id, "event_id": event_id, "effect": effect,
                   "created_ts": time.time() if created_ts is None else created_ts})
        with self._session() as client:
            client.upsert(COLLECTION, points=[self._point(doc)])
        return doc.doc_id

    # --- retrieval ------------------------------------------------------------------------

    def search(
        self,
        query: str,
        *,
        limit: int = 5,
        kinds: Iterable[str] | None = None,
        kernel_class: str | None = None,
        before_ts: float | None = None,
    ) -> list[Hit]:
        """The `limit` best documents for `query`, best first.

        `kinds` keeps only those kinds; `kernel_class` drops documents tagged only for other
        classes (untagged ones, such as API docs, stay); `before_ts` drops lessons recorded
        after that time, so a replayed run retrieves what the original did."""
        models = self._models
        weights = query_weights(query)
        wanted = [k for k in (kinds or KINDS) if k in KINDS]
        if not weights or not wanted or limit <= 0:
            return []
        must: list[Any] = [models.FieldCondition(key="kind", match=models.MatchAny(any=wanted))]
        if kernel_class:
            must.append(models.Filter(should=[
                models.FieldCondition(key="kernel_classes",
                                      match=models.MatchAny(any=[kernel_class])),
                models.IsEmptyCondition(is_empty=models.PayloadField(key="kernel_classes")),
            ]))
        if before_ts is not None:
            must.append(models.Filter(should=[
                models.Filter(must_not=[models.FieldCondition(
                    key="kind", match=models.MatchValue(value="lesson"))]),
                models.FieldCondition(key="created_ts", range=models.Range(lte=before_ts)),
            ]))
        indices = sorted(weights)
        with self._session() as client:
            result = client.query_points(
                COLLECTION,
                query=models.SparseVector(indices=indices, values=[weights[i] for i in indices]),
                using=VECTOR, query_filter=models.Filter(must=must), limit=limit,
                with_payload=True)
        hits = []
        for point in result.points:
            payload = point.payload or {}
            if point.score <= 0:
                continue
            hits.append(Hit(
                id=str(payload.get("doc_id", point.id)), kind=str(payload.get("kind", "")),
                title=str(payload.get("title", "")), text=str(payload.get("text", "")),
                score=float(point.score), source=str(payload.get("source", "")),
                kernel_classes=tuple(payload.get("kernel_classes") or ()),
                levers=tuple(payload.get("levers") or ())))
        return hits


_shared: dict[str, KnowledgeStore] = {}
_shared_lock = threading.Lock()


def shared_store(path: str | os.PathLike[str] | None = None, url: str | None = None) -> KnowledgeStore:
    """This process's one store for a location, opened and indexed on first use (the index
    is checked once per process; other processes share the folder, see the module docstring)."""
    url = url or os.environ.get(ENV_URL, "").strip() or None
    if url and path is None:
        key = url
    else:
        key = os.path.realpath(Path(path).expanduser() if path is not None else default_path())
    with _shared_lock:
        store = _shared.get(key)
        if store is None:
            store = (KnowledgeStore.open(url=key) if key == url
                     else KnowledgeStore.open(path=key))
            try:
                store.ensure_indexed()
            except BaseException:
                store.close()
                raise
            _shared[key] = store
        return store


def close_shared_stores() -> None:
    """Close every store `shared_store` opened (the next call opens afresh)."""
    with _shared_lock:
        while _shared:
            _, store = _shared.popitem()
            store.close()
