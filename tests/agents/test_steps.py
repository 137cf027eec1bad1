"""Step seeds: every orchestrator's first step of a run is the one the offline author marks
first, whatever the run seed."""

from __future__ import annotations

import pytest

from agents.commands import ExpandNode, FreezeSuite, ProposePlan, StartRun, StartSearch
from agents.llm.offline.levers import first_step, seed_iteration, seed_ordinal
from agents.steps import StepOrigin, step_command

COMMON = {"run_id": "r", "ts": 0.0, "task_sha256": "t", "task_file": "rmsnorm.py",
          "task_name": "rmsnorm", "target_name": "sim-tpu-v6e", "provider": "offline"}


def _plan_seed(origin: StepOrigin, iteration: int) -> int:
    return step_command(origin, ProposePlan, f"plan{iteration}", node_id="n", task_sha256="t",
                        iteration=iteration).seed


@pytest.mark.parametrize("run_seed", [0, 1, 2, 7, 999, 1234])
def test_a_single_trajectorys_first_plan_is_its_runs_first_step(run_seed: int) -> None:
    """`auto --seed 2` drew step seeds `2 * 1000 + iteration`, which read as a search's second
    expansion: its first plan skipped the class default. A single trajectory now draws the
    seeds of a search's first expansion."""
    origin = StepOrigin.of(StartRun(command_id="c", seed=run_seed, **COMMON))
    seeds = [_plan_seed(origin, i) for i in (1, 2, 3)]
    assert [first_step(s) for s in seeds] == [True, False, False], seeds
    assert [seed_ordinal(s) for s in seeds] == [1, 1, 1]
    assert [seed_iteration(s) for s in seeds] == [1, 2, 3]
    assert len({_plan_seed(StepOrigin.of(StartRun(command_id="c", seed=s, **COMMON)), 1)
                for s in (0, 1, 2, 3)}) == 4  # run seeds still draw different variants
    suite = step_command(origin, FreezeSuite, "suite", node_id=None, task_sha256="t")
    search = StepOrigin.of(StartSearch(command_id="c", seed=run_seed, policy="greedy", **COMMON))
    assert suite.seed == run_seed * 1000 == step_command(search, FreezeSuite, "suite", node_id=None,
                                                         task_sha256="t").seed


@pytest.mark.parametrize("run_seed", [0, 2, 1234])
def test_only_a_searchs_first_expansion_starts_its_run(run_seed: int) -> None:
    for ordinal in (1, 2, 3):
        expansion = ExpandNode(command_id="c", seed=run_seed * 1000 + ordinal, node_id="n",
                               parent_id="root", recipe_sha256="x", **COMMON)
        seeds = [_plan_seed(StepOrigin.of(expansion), i) for i in (1, 2)]
        assert [first_step(s) for s in seeds] == [ordinal == 1, False], (ordinal, seeds)
