"""A real search's report, opened in headless Chromium: it loads cleanly and every chart shows.

The screenshot and the report are kept under $KG_TEST_ARTIFACTS (default `tmp`) in
`report/`, for a person to look at.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from kernelgraph.cli import app, load_commands
from tests.realrun import TASK, RealRun

load_commands()
runner = CliRunner()

CHROMIUM = shutil.which("chromium")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars")
WIDTH = 1280

# Injected into a copy of the page (which has no script of its own): records console errors
# and warnings, uncaught errors and failed loads, then each image's state once the page loaded.
PROBE = """<script>
window.__kg = [];
for (const level of ["error", "warn"]) {
  console[level] = (...args) => window.__kg.push(`console.${level}: ${args.join(" ")}`);
}
window.addEventListener("error", (e) => window.__kg.push(
  e.target && e.target !== window ? `failed to load ${e.target.src || e.target.href}`
                                  : `error: ${e.message}`), true);
window.addEventListener("load", () => {
  const out = document.createElement("pre");
  out.id = "kg-probe";
  out.textContent = JSON.stringify({
    problems: window.__kg,
    images: [...document.images].map((i) => ({src: i.getAttribute("src"),
                                              loaded: i.complete && i.naturalWidth > 0,
                                              width: i.naturalWidth})),
    height: document.documentElement.scrollHeight,
  });
  document.body.appendChild(out);
});
</script>"""


def chromium(*args: str, profile: Path) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args],
                          capture_output=True, text=True, timeout=180)


def probe(page: Path, profile: Path) -> dict[str, Any]:
    probed = page.with_name("probe.html")
    probed.write_text(page.read_text().replace("<head>", "<head>" + PROBE, 1))
    try:
        run = chromium("--virtual-time-budget=10000", "--dump-dom", probed.as_uri(), profile=profile)
    finally:
        probed.unlink()
    found = re.search(r'<pre id="kg-probe">(.*?)</pre>', run.stdout, re.S)
    assert found, f"the page never finished loading: {run.stderr[-2000:]}"
    return json.loads(html.unescape(found.group(1)))


def artifacts_dir() -> Path:
    """$KG_TEST_ARTIFACTS/report, emptied: what it holds is this run's report and no other's."""
    folder = Path(os.environ.get("KG_TEST_ARTIFACTS", "tmp")) / "report"
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    return folder


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (.ci/run installs it)")
def test_a_real_runs_report_loads_in_a_browser_with_every_chart(
        real_run: RealRun, tmp_path: Path) -> None:
    out = tmp_path / "report"
    result = runner.invoke(app, ["report", str(real_run.db), "--out", str(out)])
    assert result.exit_code == 0, result.output
    page = out / "index.html"
    text = page.read_text()
    run_id = real_run.summary["run_id"]
    assert run_id in text and TASK.stem in text and 'class="badge sim">simulated<' in text
    if real_run.summary["best"]["verified"]:
        assert "build" in text and real_run.summary["best"]["receipt_sha256"] in text

    state = probe(page, tmp_path / "profile-probe")
    assert state["problems"] == []
    assert len(state["images"]) == 4  # fast_p, progression, the run's graph, phases
    assert all(i["loaded"] and i["width"] > 300 for i in state["images"]), state["images"]

    keep = artifacts_dir()
    shot = keep / "screenshot.png"
    height = min(max(int(state["height"]), 800), 16_000)
    run = chromium("--enable-logging=stderr", "--v=0", f"--window-size={WIDTH},{height}",
                   "--virtual-time-budget=10000", f"--screenshot={shot}", page.as_uri(),
                   profile=tmp_path / "profile-shot")
    console = [line for line in run.stderr.splitlines() if ":CONSOLE" in line]
    assert console == [], console  # the unmodified page logs nothing
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    width, shot_height = (int.from_bytes(shot.read_bytes()[16:24][i:i + 4], "big") for i in (0, 4))
    assert (width, shot_height) == (WIDTH, height)
    for item in out.iterdir():
        shutil.copy2(item, keep / item.name)
