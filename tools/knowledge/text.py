"""Tokens and BM25 document weights for the knowledge store, computed locally.

Identifiers are the vocabulary that matters in kernel questions (`dimension_semantics`,
`pltpu.CompilerParams`, `vmem_limit_bytes`), so each identifier yields its whole lowercased
form and its parts split on dots, underscores and camelCase: a query for "compiler params"
and one for `CompilerParams` meet on the same terms. A light plural fold ("blocks" ->
"block") is applied to every term. Terms map to sparse-vector indices by a stable hash, so
no vocabulary has to be stored or shared.

The store keeps `bm25_weights` (term frequency with BM25 saturation and length
normalisation) in each document's sparse vector; the IDF factor is applied at query time
by Qdrant (`Modifier.IDF`), over whatever the collection holds at that moment.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Iterable

TOKENIZER_VERSION = 1
"""Bump when tokens change: stored vectors are then rebuilt."""

K1 = 1.2
B = 0.75
TITLE_WEIGHT = 2
"""Title tokens count this many times: a name in the title is what a document is about."""

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*|\d+(?:\.\d+)?")
_CAMEL = re.compile(r"[A-Z]+(?=[A-Z][a-z0-9])|[A-Z]?[a-z]+|[A-Z]+|\d+")

STOP_WORDS = frozenset(["a", "an", "and", "are", "as", "at", "be", "been", "but", "by", "can", "do", "does", "for", "from", "has", "have", "how", "if", "in", "into", "is", "it", "its", "of", "on", "or", "so", "such", "than", "that", "the", "their", "then", "there", "these", "this", "those", "to", "was", "were", "when", "where", "which", "while", "will", "with", "would", "you", "your", "we", "our", "not", "no", "yes", "i", "me", "my", "what", "why", "should", "could"])


def _fold(term: str) -> str:
    """Plural to singular, conservatively ("blocks" -> "block", "semantics" -> "semantic")."""
    if len(term) > 4 and term.endswith("ies"):
        return term[:-3] + "y"
    if len(term) > 3 and term.endswith("s") and not term.endswith(("ss", "us", "is")):
        return term[:-1]
    return term


def tokenize(text: str) -> list[str]:
    """Terms of `text` in order: whole identifiers and their parts, lowercased and folded."""
    terms: list[str] = []
    for match in _WORD.finditer(text):
        word = match.group(0)
        parts = [p for piece in re.split(r"[._]", word) if piece
                 for p in (_CAMEL.findall(piece) or [piece])]
        whole = word.lower()
        if len(parts) > 1 or "." in word or "_" in word:
            terms.append(_fold(whole))
        for part in parts:
            term = part.lower()
            if term in STOP_WORDS or (len(term) == 1 and not term.isdigit()):
                continue
            terms.append(_fold(term))
    return terms


def term_index(term: str) -> int:
    """A stable uint32 sparse-vector index for a term."""
    return int.from_bytes(hashlib.blake2b(term.encode(), digest_size=4).digest(), "big")


def document_terms(title: str, text: str) -> list[str]:
    return tokenize(title) * TITLE_WEIGHT + tokenize(text)


def bm25_weights(terms: Iterable[str], avg_len: float) -> dict[int, float]:
    """Sparse index -> BM25 term weight (without IDF) for one document."""
    counts = Counter(terms)
    length = sum(counts.values())
    norm = K1 * (1.0 - B + B * length / max(avg_len, 1.0))
    weights: dict[int, float] = {}
    for term, tf in counts.items():
        index = term_index(term)
        weights[index] = weights.get(index, 0.0) + tf * (K1 + 1.0) / (tf + norm)
    return weights


def query_weights(query: str) -> dict[int, float]:
    """Sparse index -> 1.0 for each distinct query term (IDF is Qdrant's)."""
    return {term_index(term): 1.0 for term in tokenize(query)}
