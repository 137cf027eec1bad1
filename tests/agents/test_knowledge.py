"""The knowledge store: indexing, BM25 ranking, lessons across rebuilds, filters, the CLI."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tools.knowledge import (
    KnowledgeStore,
    close_shared_stores,
    shared_store,
    sources,
)
from tools.knowledge.text import tokenize


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store indexed once for the module; each test works on its own copy."""
    folder = tmp_path_factory.mktemp("knowledge") / "store"
    with KnowledgeStore.open(path=folder) as store:
        report = store.ensure_indexed()
    assert report.rebuilt
    return folder


@pytest.fixture
def store(built: Path, tmp_path: Path) -> Iterator[KnowledgeStore]:
    folder = tmp_path / "store"
    shutil.copytree(built, folder)
    with KnowledgeStore.open(path=folder) as opened:
        yield opened


def test_tokenizer_splits_identifiers() -> None:
    terms = tokenize("pltpu.CompilerParams(dimension_semantics=...) VMEM blocks of 128")
    for term in ("pltpu.compilerparam", "pltpu", "compiler", "param", "dimension_semantic",
                 "dimension", "semantic", "vmem", "block", "128"):
        assert term in terms
    assert "of" not in terms


def test_index_counts(store: KnowledgeStore) -> None:
    counts = store.counts()
    assert counts["note"] == len(sources.note_documents()) >= 13 * 4
    assert counts["api"] >= 100  # pl and pltpu alone have well over a hundred public names
    assert counts["lesson"] == 0
    start = time.process_time()  # CPU time: cheap however loaded the machine is
    report = store.ensure_indexed()
    assert not report.rebuilt and report.counts == counts
    assert time.process_time() - start < 2.0


def test_notes_cover_every_class_and_lever() -> None:
    docs = sources.note_documents()
    classes = {c for d in docs for c in d.kernel_classes}
    levers = {lever for d in docs for lever in d.levers}
    assert classes >= {"elementwise", "rowwise", "matmul", "attention", "row_independent"}
    assert levers >= {"block_shape", "grid_order", "accumulator", "epilogue_fusion", "buffering",
                      "alignment", "vmem_budget", "precision"}
    assert all(d.kind == "note" and d.title and d.text for d in docs)


def test_relevant_documents_rank_first(store: KnowledgeStore) -> None:
    hits = store.search("dimension_semantics parallel arbitrary", limit=5)
    top = hits[0]
    assert (top.source == "knowledge/lever_grid_order.md"
            or (top.kind == "api" and "semantics" in top.title.lower()))
    assert any(h.kind == "api" and ("PARALLEL" in h.title or "ARBITRARY" in h.title) for h in hits)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)

    hits = store.search("BlockSpec index_map", limit=3)
    assert any(h.id == "api:jax.experimental.pallas.BlockSpec" for h in hits)
    hits = store.search("causal attention skip fully masked kv blocks", limit=1)
    assert hits[0].source == "knowledge/class_attention.md"
    assert store.search("zzzz qqqq", limit=3) == []


def test_lessons_are_found_and_survive_a_rebuild(store: KnowledgeStore,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    text = "Raising block_m and block_n to 512 on v6e doubled MXU use for a 4096 matmul."
    lesson_id = store.add_lesson("run-1", "matmul", "block_shape", "1.8x", "01EVENTID", text)
    assert store.add_lesson("run-1", "matmul", "block_shape", "1.8x", "01EVENTID", text) == lesson_id
    assert store.counts()["lesson"] == 1
    (hit,) = store.search("matmul block_m 512 v6e", kinds=["lesson"], limit=5)
    assert (hit.id, hit.kind, hit.text) == (lesson_id, "lesson", text)
    assert "run-1" in hit.source and "01EVENTID" in hit.source
    assert store.search("raising block_m block_n 512 doubled MXU", limit=1)[0].id == lesson_id

    # the notes change: the static part is rebuilt, the lesson stays
    extra = (b"---\nkind: note\ntitle: Extra\nkernel_classes: [matmul]\nlevers: []\n---\n"
             b"## One\nquixotic tiling words\n\n## Two\nmore quixotic words\n")
    files = [*sources._note_files(), ("zz_extra.md", extra)]
    monkeypatch.setattr(sources, "_note_files", lambda: files)
    before = store.counts()
    report = store.ensure_indexed()
    assert report.rebuilt and (report.written, report.deleted) == (2, 0)  # only the new note
    assert report.counts == {**before, "note": before["note"] + 2}
    assert store.search("quixotic", limit=1)[0].source == "knowledge/zz_extra.md"
    assert store.search("raising block_m block_n 512 doubled MXU", limit=1)[0].id == lesson_id
    assert not store.ensure_indexed().rebuilt

    monkeypatch.undo()  # the note is gone again
    report = store.ensure_indexed()
    assert report.rebuilt and (report.written, report.deleted) == (0, 2)
    assert report.counts == before
    assert store.search("quixotic", limit=3) == []
    assert store.search("raising block_m block_n 512 doubled MXU", limit=1)[0].id == lesson_id


def test_filters(store: KnowledgeStore) -> None:
    query = "accumulate in float32 scratch over the reduction axis"
    assert {h.kind for h in store.search(query, limit=10, kinds=["api"])} == {"api"}
    assert {h.kind for h in store.search(query, limit=10, kinds=["note"])} == {"note"}

    hits = store.search("matmul tiles epilogue bias", limit=20, kernel_class="elementwise")
    assert hits
    for hit in hits:
        assert hit.kind == "api" or "elementwise" in hit.kernel_classes
    assert not any(h.source == "knowledge/class_matmul.md" for h in hits)

    store.add_lesson("run-old", "matmul", "grid_order", "1.1x", "E1", "zebra lesson old",
                     created_ts=100.0)
    store.add_lesson("run-new", "matmul", "grid_order", "1.2x", "E2", "zebra lesson new",
                     created_ts=200.0)
    assert {h.id for h in store.search("zebra", limit=5)} == {"lesson:E1", "lesson:E2"}
    assert [h.id for h in store.search("zebra", limit=5, before_ts=150.0)] == ["lesson:E1"]
    assert store.search("zebra", limit=5, kernel_class="attention") == []
    assert [h.id for h in store.search("zebra grid", limit=5, kernel_class="matmul",
                                       kinds=["lesson"], before_ts=150.0)] == ["lesson:E1"]


def test_shared_store_is_one_store_per_folder_and_others_may_open_it(built: Path,
                                                                     tmp_path: Path) -> None:
    folder = tmp_path / "shared"
    shutil.copytree(built, folder)
    try:
        first = shared_store(folder)
        assert shared_store(str(folder)) is first
        assert first.counts()["note"] > 0
        with KnowledgeStore.open(path=folder) as other:  # the folder is open only per operation
            other.add_lesson("run-x", "matmul", "grid_order", "1.1x", "EX", "wombat lesson")
        assert [h.id for h in first.search("wombat", limit=3)] == ["lesson:EX"]
    finally:
        close_shared_stores()


def test_cli_search_and_index_json(built: Path, tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import kernelgraph.cli.knowledgecmds  # noqa: F401 (attaches the commands)
    from kernelgraph.cli.app import app

    folder = tmp_path / "cli"
    shutil.copytree(built, folder)
    monkeypatch.setenv("KG_KNOWLEDGE_PATH", str(folder))
    monkeypatch.delenv("KG_QDRANT_URL", raising=False)
    runner = CliRunner()

    result = runner.invoke(app, ["knowledge", "index", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["rebuilt"] is False and report["counts"]["note"] > 0

    result = runner.invoke(app, ["knowledge", "search", "dimension_semantics parallel arbitrary",
                                 "--limit", "3", "--kind", "note", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert [h["rank"] for h in out["hits"]] == [1, 2, 3]
    assert {h["kind"] for h in out["hits"]} == {"note"}
    assert out["hits"][0]["source"] == "knowledge/lever_grid_order.md"

    result = runner.invoke(app, ["knowledge", "search", "online softmax running max",
                                 "--class", "attention", "--json"])
    assert result.exit_code == 0, result.output
    hits = json.loads(result.stdout)["hits"]
    assert hits and all(h["kind"] == "api" or "attention" in h["kernel_classes"] for h in hits)

    result = runner.invoke(app, ["knowledge", "search", "tiles", "--kind", "nope"])
    assert result.exit_code == 2

    result = runner.invoke(app, ["knowledge", "search", "grid order parallel axes"])
    assert result.exit_code == 0 and "Grid order" in result.stdout
