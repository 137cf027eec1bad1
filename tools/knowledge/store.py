"""`KnowledgeStore`: BM25 retrieval over API docs, notes and lessons, kept in Qdrant.

Qdrant runs in local mode by default (a folder: `$KG_KNOWLEDGE_PATH`, else
`~/.cache/kernelgraph/knowledge`), or as a server when `KG_QDRANT_URL` (or `url=`) is given.
Each document is one point with one sparse vector of BM25 term weights (`tools.knowledge.text`)
and the collection applies IDF at query time (`Modifier.IDF`): no model, no dense vectors,
nothing downloaded.

The static part (API docs and notes, `tools.knowledge.sources`) is rebuilt whenever its
fingerprint changes (another JAX, edited notes, another tokenizer); lessons are never
deleted by a rebuild, only re-weighted for the new average document length.

Local mode locks its folder to one client, in this process and against others. Within a
process, use `shared_store()`: one store per location, opened and indexed on first use and
safe to call from several threads. Several processes that need the store at once should
share a Qdrant server (`KG_QDRANT_URL`).
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tools.knowledge.sources import Document, corpus_fingerprint, static_documents
from tools.knowledge.text import bm25_weights, document_terms, query_weights

SCHEMA_VERSION = 1
COLLECTION = f"kernelgraph_knowledge_v{SCHEMA_VERSION}"
VECTOR = "bm25"
ENV_PATH = "KG_KNOWLEDGE_PATH"
ENV_URL = "KG_QDRANT_URL"
KINDS: tuple[str, ...] = ("api", "note", "lesson")
STATIC_KINDS: tuple[str, ...] = ("api", "note")
DEFAULT_AVG_LEN = 150.0
"""Average document length (terms) assumed before the static part has been indexed."""

_META_ID = str(uuid.uuid5(uuid.NAMESPACE_URL, "kernelgraph:knowledge:meta"))
_BATCH = 256


class KnowledgeError(Exception):
    """The store cannot be opened or used (a locked folder, an unreachable server)."""


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
    counts: dict[str, int]
    seconds: float
    fingerprint: str


def default_path() -> Path:
    env = os.environ.get(ENV_PATH, "").strip()
    return Path(env).expanduser() if env else Path.home() / ".cache" / "kernelgraph" / "knowledge"


def _point_id(doc_id: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"kernelgraph:{doc_id}"))


class KnowledgeStore:
    """One open store. See the module docstring for locations and sharing."""

    def __init__(self, client: Any, *, location: str) -> None:
        from qdrant_client import models

        self._client = client
        self._models = models
        self.location = location
        self._lock = threading.RLock()
        self._ensure_collection()

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
            client = QdrantClient(path=str(folder))
        except RuntimeError as exc:
            if "already accessed" not in str(exc):
                raise
            raise KnowledgeError(
                f"the knowledge store {folder} is open in another client (local mode allows "
                f"one); use shared_store() within a process, or set {ENV_URL} to share a "
                "Qdrant server between processes") from None
        except OSError as exc:
            raise KnowledgeError(f"cannot open the knowledge store {folder}: {exc}") from None
        return cls(client, location=str(folder))

    def _ensure_collection(self) -> None:
        models = self._models
        with self._lock:
            if self._client.collection_exists(COLLECTION):
                return
            self._client.create_collection(
                COLLECTION,
                vectors_config={},
                sparse_vectors_config={VECTOR: models.SparseVectorParams(modifier=models.Modifier.IDF)},
            )
            if not self.is_local:
                for key, schema in (("kind", models.PayloadSchemaType.KEYWORD),
                                    ("kernel_classes", models.PayloadSchemaType.KEYWORD),
                                    ("created_ts", models.PayloadSchemaType.FLOAT)):
                    self._client.create_payload_index(COLLECTION, key, field_schema=schema)

    @property
    def is_local(self) -> bool:
        return not self.location.startswith(("http://", "https://"))

    def close(self) -> None:
        with self._lock:
            self._client.close()

    def __enter__(self) -> KnowledgeStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- indexing -------------------------------------------------------------------------

    def _meta(self) -> dict[str, Any]:
        points = self._client.retrieve(COLLECTION, [_META_ID], with_payload=True)
        return dict(points[0].payload or {}) if points else {}

    def _kind_filter(self, kinds: Sequence[str]) -> Any:
        models = self._models
        return models.Filter(must=[models.FieldCondition(
            key="kind", match=models.MatchAny(any=list(kinds)))])

    def counts(self) -> dict[str, int]:
        """Documents per kind."""
        with self._lock:
            return {kind: self._client.count(COLLECTION, count_filter=self._kind_filter([kind]),
                                             exact=True).count for kind in KINDS}

    def ensure_indexed(self, *, force: bool = False) -> IndexReport:
        """Rebuild the static part if its fingerprint changed (or `force`); keep lessons."""
        start = time.perf_counter()
        fingerprint = corpus_fingerprint()
        with self._lock:
            if not force and self._meta().get("fingerprint") == fingerprint:
                return IndexReport(False, self.counts(), time.perf_counter() - start, fingerprint)
            docs = static_documents()
            avg_len = (sum(len(document_terms(d.title, d.text)) for d in docs) / len(docs)
                       if docs else DEFAULT_AVG_LEN)
            self._client.delete(COLLECTION, points_selector=self._models.FilterSelector(
                filter=self._kind_filter(STATIC_KINDS)))
            self._upsert([self._point(doc, avg_len) for doc in docs])
            lessons = self._scroll(self._kind_filter(["lesson"]))
            self._upsert([self._point(self._lesson_document(p.payload), avg_len) for p in lessons])
            self._client.upsert(COLLECTION, points=[self._models.PointStruct(
                id=_META_ID, vector={}, payload={
                    "kind": "meta", "fingerprint": fingerprint, "avg_len": avg_len,
                    "built_ts": time.time(), "documents": len(docs)})])
            return IndexReport(True, self.counts(), time.perf_counter() - start, fingerprint)

    def _scroll(self, scroll_filter: Any) -> list[Any]:
        points, offset = [], None
        while True:
            batch, offset = self._client.scroll(COLLECTION, scroll_filter=scroll_filter,
                                                limit=_BATCH, offset=offset, with_payload=True)
            points.extend(batch)
            if offset is None:
                return points

    def _upsert(self, points: list[Any]) -> None:
        for i in range(0, len(points), _BATCH):
            self._client.upsert(COLLECTION, points=points[i:i + _BATCH])

    def _point(self, doc: Document, avg_len: float) -> Any:
        weights = bm25_weights(document_terms(doc.title, doc.text), avg_len)
        indices = sorted(weights)
        payload = {
            "doc_id": doc.doc_id, "kind": doc.kind, "title": doc.title, "text": doc.text,
            "source": doc.source, "kernel_classes": list(doc.kernel_classes),
            "levers": list(doc.levers), **doc.extra,
        }
        vector = self._models.SparseVector(indices=indices, values=[weights[i] for i in indices])
        return self._models.PointStruct(id=_point_id(doc.doc_id), vector={VECTOR: vector},
                                        payload=payload)

    @staticmethod
    def _lesson_document(payload: dict[str, Any] | None) -> Document:
        payload = dict(payload or {})
        base = {k: payload.pop(k, default) for k, default in (
            ("doc_id", ""), ("kind", "lesson"), ("title", ""), ("text", ""), ("source", ""),
            ("kernel_classes", []), ("levers", []))}
        return Document(doc_id=base["doc_id"], kind=base["kind"], title=base["title"],
                        text=base["text"], source=base["source"],
                        kernel_classes=tuple(base["kernel_classes"]), levers=tuple(base["levers"]),
                        extra=payload)

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
        with self._lock:
            avg_len = float(self._meta().get("avg_len") or DEFAULT_AVG_LEN)
            self._client.upsert(COLLECTION, points=[self._point(doc, avg_len)])
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
        with self._lock:
            result = self._client.query_points(
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
    """This process's one store for a location, opened and indexed on first use.

    Local mode allows one client per folder, so every caller in the process must go through
    here rather than `KnowledgeStore.open`."""
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
