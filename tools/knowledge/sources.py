"""The static corpus: the installed JAX's Pallas API docs and the project's notes.

API documents come from the code itself (signature and docstring of every public name of
`jax.experimental.pallas`, `jax.experimental.pallas.tpu` and, when importable, the Mosaic
TPU dialect module), so they always describe the JAX that will compile the kernels. Notes
are `knowledge/*.md`, one document per `## ` section.

`corpus_fingerprint()` identifies the corpus without importing JAX (package versions plus
the notes' bytes), so checking whether the index is current is cheap.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import importlib.resources
import inspect
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tools.knowledge.text import TOKENIZER_VERSION

NOTES_PACKAGE = "knowledge"

API_MODULES: tuple[tuple[str, str], ...] = (
    ("jax.experimental.pallas", "pl"),
    ("jax.experimental.pallas.tpu", "pltpu"),
    ("jaxlib.mosaic.python.tpu", "tpu"),
)
"""(module, the alias kernels use for it). The Mosaic dialect module is optional."""

_OPTIONAL_MODULES = frozenset({"jaxlib.mosaic.python.tpu"})
_MAX_API_CHARS = 6000
"""Longer docstrings are cut: the start says what a name is for."""


@dataclass(frozen=True)
class Document:
    """One retrievable unit. `doc_id` is stable across rebuilds of the same corpus."""

    doc_id: str
    kind: str
    title: str
    text: str
    source: str
    kernel_classes: tuple[str, ...] = ()
    levers: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)


def corpus_fingerprint() -> str:
    """sha256 over what the static corpus is built from."""
    digest = hashlib.sha256(f"tokenizer={TOKENIZER_VERSION}\n".encode())
    for dist in ("jax", "jaxlib"):
        try:
            version = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            version = "-"
        digest.update(f"{dist}={version}\n".encode())
    for name, data in _note_files():
        digest.update(f"{name}\n{len(data)}\n".encode())
        digest.update(data)
    return digest.hexdigest()


# --- notes --------------------------------------------------------------------------------


def _notes_root() -> Any:
    """The installed `knowledge` package, else the source checkout's `knowledge/` folder
    (an editable install made before the package existed does not map it)."""
    try:
        return importlib.resources.files(NOTES_PACKAGE)
    except ModuleNotFoundError:
        checkout = Path(__file__).resolve().parents[2] / NOTES_PACKAGE
        if (checkout / "__init__.py").is_file():
            return checkout
        raise ModuleNotFoundError(f"the {NOTES_PACKAGE!r} notes package is not installed; "
                                  "reinstall kernelgraph") from None


def _note_files() -> list[tuple[str, bytes]]:
    return sorted((entry.name, entry.read_bytes()) for entry in _notes_root().iterdir()
                  if entry.name.endswith(".md") and entry.is_file())


def _front_matter(text: str) -> tuple[dict[str, Any], str]:
    """`key: value` and `key: [a, b]` lines between `---` fences; the rest of the text."""
    match = re.match(r"\A---[ \t]*\n(.*?)\n---[ \t]*\n", text, re.S)
    if not match:
        return {}, text
    meta: dict[str, Any] = {}
    for line in match.group(1).splitlines():
        key, sep, value = line.partition(":")
        if not sep or not key.strip():
            continue
        value = value.strip()
        if value.startswith("[") and value.endswith("]"):
            meta[key.strip()] = tuple(v.strip().strip("'\"") for v in value[1:-1].split(",")
                                      if v.strip())
        else:
            meta[key.strip()] = value.strip("'\"")
    return meta, text[match.end():]


def parse_note(name: str, text: str) -> list[Document]:
    """One document per `## ` section (plus the introduction, if any) of one note."""
    meta, body = _front_matter(text)
    stem = name.removesuffix(".md")
    title = str(meta.get("title") or stem.replace("_", " "))
    classes = tuple(meta.get("kernel_classes", ()))
    levers = tuple(meta.get("levers", ()))
    pieces = re.split(r"^##[ \t]+(.+?)[ \t]*$", body, flags=re.M)
    sections = [("Overview", pieces[0]), *zip(pieces[1::2], pieces[2::2], strict=True)]
    docs = []
    for heading, section in sections:
        section = section.strip()
        if not section:
            continue
        slug = re.sub(r"[^a-z0-9]+", "-", heading.lower()).strip("-") or "section"
        if any(d.doc_id == f"note:{stem}#{slug}" for d in docs):
            slug = f"{slug}-{len(docs)}"
        docs.append(Document(
            doc_id=f"note:{stem}#{slug}", kind="note", title=f"{title}: {heading}",
            text=section, source=f"knowledge/{name}", kernel_classes=classes, levers=levers))
    return docs


def note_documents() -> list[Document]:
    return [doc for name, data in _note_files() for doc in parse_note(name, data.decode())]


# --- API docs -----------------------------------------------------------------------------


def _signature(obj: Any) -> str:
    try:
        return str(inspect.signature(obj))
    except (TypeError, ValueError):
        return ""


def _api_document(module_name: str, alias: str, name: str, obj: Any) -> Document | None:
    own_doc = inspect.getdoc(obj) or ""
    if inspect.isclass(obj):
        kind, signature = "class", _signature(obj)
        if module_name in _OPTIONAL_MODULES and (name.endswith("Adaptor") or not own_doc):
            return None  # generated op classes without documentation add only noise
        methods = [m for m, _ in inspect.getmembers(obj) if not m.startswith("_")][:40]
        extra = f"Public attributes: {', '.join(methods)}" if methods else ""
    elif callable(obj):
        kind, signature, extra = "function", _signature(obj), ""
        if module_name in _OPTIONAL_MODULES and not own_doc:
            return None
    else:
        kind, signature = "value", ""
        value = " ".join(repr(obj).split())[:200]
        extra = f"value: {value} (type {type(obj).__name__})"
        if own_doc == (inspect.getdoc(type(obj)) or ""):
            own_doc = ""
        type_doc = type(obj).__dict__.get("__doc__") or ""
        if module_name in _OPTIONAL_MODULES and not own_doc:
            return None
        if not own_doc and type_doc.strip():
            extra += f"\n{type(obj).__name__}: {inspect.cleandoc(type_doc).split(chr(10) * 2)[0]}"
    qualified = f"{alias}.{name}"
    header = f"{qualified}{signature}" if signature else qualified
    text = "\n\n".join(part for part in (header, own_doc[:_MAX_API_CHARS], extra) if part)
    return Document(
        doc_id=f"api:{module_name}.{name}", kind="api", title=f"{qualified} ({kind})",
        text=text, source=module_name, extra={"module": module_name, "name": name})


def _api_modules() -> Iterator[tuple[str, str, Any]]:
    for module_name, alias in API_MODULES:
        try:
            module = importlib.import_module(module_name)
        except Exception:
            if module_name in _OPTIONAL_MODULES:
                continue
            raise
        yield module_name, alias, module


def api_documents() -> list[Document]:
    docs = []
    for module_name, alias, module in _api_modules():
        names = getattr(module, "__all__", None) or dir(module)
        for name in sorted(set(names)):
            if name.startswith("_"):
                continue
            obj = getattr(module, name, None)
            if obj is None or inspect.ismodule(obj):
                continue
            doc = _api_document(module_name, alias, name, obj)
            if doc is not None:
                docs.append(doc)
    return docs


def static_documents() -> list[Document]:
    """Everything that a rebuild replaces: API docs and notes."""
    return api_documents() + note_documents()
