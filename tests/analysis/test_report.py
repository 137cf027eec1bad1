"""`kernelgraph report` on synthetic logs: many runs, one run, no valid node, bad input."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

from eventstore.log import EventLog
from kernelgraph.cli import app, load_commands
from tests.analysis.logs import mixed_runs, no_valid_run, write_log

load_commands()
runner = CliRunner()
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.images: list[str] = []
        self.scripts = 0
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "img":
            self.images.append(a.get("src") or "")
        elif tag == "script":
            self.scripts += 1
        elif tag in ("link", "a") and a.get("href"):
            self.links.append(a["href"] or "")


def page_of(out: Path) -> tuple[str, _Page]:
    html = (out / "index.html").read_text()
    page = _Page()
    page.feed(html)
    for src in page.images:  # relative, inside the folder, and a real PNG
        assert not src.startswith(("/", "http:", "https:", "file:")) and ".." not in src, src
        assert (out / src).read_bytes()[:8] == PNG_MAGIC, src
    assert page.scripts == 0
    assert all(link.startswith("#") for link in page.links), page.links  # nothing fetched
    return html, page


@pytest.fixture(scope="module")
def mixed_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_log(tmp_path_factory.mktemp("report") / "mixed.duckdb", mixed_runs())


def test_a_report_of_every_run_over_policies_and_both_labels(mixed_log: Path, tmp_path: Path) -> None:
    out = tmp_path / "report"
    result = runner.invoke(app, ["report", str(mixed_log), "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["report"] == str(out / "index.html")
    html, page = page_of(out)
    with EventLog(mixed_log, read_only=True) as log:
        run_ids = [r.run_id for r in log.runs()]
    assert len(run_ids) == 9
    for run_id in run_ids:
        assert f"graph-{run_id}.png" in page.images and f'id="winner-{run_id}"' in html
    for chart in ("fast_p-simulated.png", "fast_p-real.png", "progression-simulated.png",
                  "progression-real.png", "phases.png"):
        assert chart in page.images
    for policy in ("beam", "greedy", "parallel"):
        assert f"<td>{policy}</td>" in html
    assert 'class="badge sim">simulated<' in html and 'class="badge real">measured<' in html
    assert "No verified winner" in html  # the unfinished run and the one without a valid node
    assert "fix: block shape not divisible" not in html  # failures are named by phase and error
    assert "<b>compile</b>" in html or "<b>test</b>" in html


def test_a_report_of_one_run(mixed_log: Path, tmp_path: Path) -> None:
    out = tmp_path / "one"
    result = runner.invoke(app, ["report", str(mixed_log), "--run", "run-02", "--out", str(out)])
    assert result.exit_code == 0, result.output
    html, page = page_of(out)
    assert [src for src in page.images if src.startswith("graph-")] == ["graph-run-02.png"]
    assert "run-05" not in html and "fast_p-real.png" in page.images
    assert "fast_p-simulated.png" not in page.images  # run-02 is a measured run


def test_a_run_without_a_single_valid_node(tmp_path: Path) -> None:
    db = write_log(tmp_path / "none.duckdb", no_valid_run("lost"))
    out = tmp_path / "none"
    result = runner.invoke(app, ["report", str(db), "--out", str(out)])
    assert result.exit_code == 0, result.output
    html, page = page_of(out)
    assert "graph-lost.png" in page.images and "progression-simulated.png" in page.images
    assert "No verified winner" in html and '<span class="bad">no</span>' in html
    assert "<td>0%</td>" in html  # fast_0 of a run with no correct kernel


def test_bad_input_is_one_line_and_exit_2(mixed_log: Path, tmp_path: Path) -> None:
    foreign = tmp_path / "foreign.duckdb"
    foreign.write_bytes(b"not a database at all" * 100)
    empty = tmp_path / "empty.duckdb"
    EventLog(empty).close()
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    damaged = write_log(tmp_path / "damaged.duckdb", no_valid_run("r"))
    con = duckdb.connect(str(damaged))
    con.execute("""UPDATE events SET body = '{"type": "NoSuchEvent"}' WHERE seq = 3""")
    con.close()
    cases = [
        ([str(damaged)], "row seq=3"),
        ([str(tmp_path / "missing.duckdb")], "no such log"),
        ([str(foreign)], "is not a kernelgraph log"),
        ([str(empty)], "no runs in"),
        ([str(mixed_log), "--run", "nope"], "no run 'nope'"),
    ]
    for args, message in cases:
        result = runner.invoke(app, ["report", *args, "--out", str(tmp_path / "out")])
        assert result.exit_code == 2, (args, result.output)
        assert message in result.output and "Traceback" not in result.output, result.output
    result = runner.invoke(app, ["report", str(mixed_log), "--out", str(a_file)])
    assert result.exit_code == 2 and "is not a folder" in result.output


def test_a_winners_suite_notes_are_shown_and_untested_tails_stand_out() -> None:
    from projections.report.html import _receipt_facts
    from projections.report.model import Winner

    untested = "tails (size % 1024, partial blocks) are NOT exercised for this task"
    receipt = {"suite": {"cases": 7, "sha256": "ab" * 32,
                         "notes": ["shape3-seed0: shape (251, 1019) derived off the tile",
                                   untested]}}
    winner = Winner(node_id="n", verdict="pass", speedup=1.5, measured_on="simulated",
                    reasons=[], code_sha256=None, code=None, config={}, receipt_sha256="cd",
                    receipt=receipt, receipt_text="{}")
    facts = dict((key, value) for key, value in _receipt_facts(winner))
    assert f'<b class="bad">{untested}</b>' in facts["suite notes"]
    assert "shape3-seed0: shape (251, 1019) derived off the tile<br>" in facts["suite notes"]
