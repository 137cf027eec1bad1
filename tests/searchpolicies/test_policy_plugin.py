"""The example plug-in (examples/policy-plugin): installed by pip into a temporary target,
found by the registry through its entry point, and held to the conformance suite."""

from __future__ import annotations

import importlib
import importlib.metadata
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from searchpolicies import get_policy, policy_class, policy_names
from searchpolicies.registry import GROUP
from searchpolicies.testing import PolicyContract, PolicyFactory

PLUGIN = Path(__file__).resolve().parents[2] / "examples" / "policy-plugin"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """pip-installed into a folder of its own (not the shared environment), put on sys.path."""
    target = tmp_path_factory.mktemp("plugin-site")
    result = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
         "--no-build-isolation", "--disable-pip-version-check", "--target", str(target),
         str(PLUGIN)],
        capture_output=True, text=True, timeout=240, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    sys.path.insert(0, str(target))
    importlib.invalidate_caches()
    try:
        yield target
    finally:
        sys.path.remove(str(target))
        for name in [m for m in sys.modules if m.split(".")[0] == "kg_roulette_policy"]:
            del sys.modules[name]
        importlib.invalidate_caches()


def test_the_entry_point_is_installed_and_found_by_name(installed: Path) -> None:
    (entry_point,) = [ep for ep in importlib.metadata.entry_points(group=GROUP)
                      if ep.name == "roulette"]
    assert entry_point.value == "kg_roulette_policy:RoulettePolicy"
    assert entry_point.dist is not None
    assert Path(str(entry_point.dist.locate_file(""))) == installed
    assert "roulette" in policy_names()
    cls = policy_class("roulette")
    assert cls.__name__ == "RoulettePolicy" and cls.__module__ == "kg_roulette_policy"
    assert get_policy("roulette", {"sharpness": "3"}, seed=2).param_values() == {
        "iterations": 2, "sharpness": 3.0}


def test_kernelgraph_policies_lists_the_built_ins_and_the_plug_in(installed: Path) -> None:
    import json

    from typer.testing import CliRunner

    from kernelgraph.cli import app, load_commands

    load_commands()
    listed = CliRunner().invoke(app, ["policies", "--json"])
    assert listed.exit_code == 0, listed.output
    rows = {row["name"]: row for row in json.loads(listed.output)["policies"]}
    assert {"parallel", "beam", "greedy", "evolutionary", "adaptive", "roulette"} <= set(rows)
    assert not rows["roulette"]["builtin"] and rows["beam"]["builtin"]
    sharpness = next(p for p in rows["roulette"]["parameters"] if p["name"] == "sharpness")
    assert (sharpness["type"], sharpness["default"]) == ("float", 2.0)
    text = CliRunner().invoke(app, ["policies"])
    assert "roulette (plug-in)" in text.output and "--param width=3" in text.output


class TestRoulettePluginContract(PolicyContract):
    @pytest.fixture
    def policy(self, installed: Path) -> PolicyFactory:
        cls = policy_class("roulette")
        return lambda seed: cls(seed=seed)


async def test_the_installed_plug_in_drives_a_real_search(installed: Path, tmp_path: Path) -> None:
    from instant_search import search

    events = await search(tmp_path, policy="roulette", max_nodes=4, seed=1)
    requested = [e for e in events if e.type_name == "ExpansionRequested"]
    assert requested and {e.policy for e in requested} == {"roulette"}
    assert sorted(e.node_id for e in requested) == sorted(
        e.node_id for e in events if e.type_name == "NodeEvaluated")
    assert [e.type_name for e in events][-1] == "RunFinished"
