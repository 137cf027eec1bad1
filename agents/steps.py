"""The commands of a run's steps, built one way for every orchestrator (Auto, search, HITL).

Every step of one run shares its run id, time, cause, task file, target and provider; an
LLM step's seed is its trajectory's `seed * 1000 + iteration`, so each iteration draws its
own variant and a re-run draws the same one. A search's expansion carries the seed
`run seed * 1000 + ordinal` (ordinals from 1); a single trajectory (Auto, HITL) is its run's
one expansion, so its iterations draw `(run seed * 1000 + 1) * 1000 + iteration`, the seeds
of a search's first expansion: the seed alone says which step is a run's first
(`agents.llm.offline.levers.first_step`), whatever the run seed. Its suite is frozen with the
run's own `seed * 1000`, as a search's is. `step_command` fills in what the command class
accepts and leaves the rest to the caller.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, TypeVar

from agents.commands import ExpandNode, StartRun, StartSearch
from bus.commands import Command

K = TypeVar("K", bound=Command)


@dataclass(frozen=True)
class StepOrigin:
    """What every step command of one run (or one node of a search) carries."""

    run_id: str
    ts: float
    causation_id: str
    task_file: str
    target_name: str
    provider: str
    provider_options: dict[str, Any] = field(default_factory=dict)
    seed: int = 0
    knowledge_cutoff_ts: float | None = None
    single_trajectory: bool = False
    """The run is one trajectory (Auto, HITL): its iterations are its first expansion's."""

    @classmethod
    def of(cls, start: StartRun) -> StepOrigin:
        return cls(run_id=start.run_id, ts=start.ts, causation_id=start.command_id,
                   task_file=start.task_file, target_name=start.target_name,
                   provider=start.provider, provider_options=dict(start.provider_options),
                   seed=start.seed, knowledge_cutoff_ts=start.knowledge_cutoff_ts,
                   single_trajectory=not isinstance(start, ExpandNode | StartSearch))

    def step_seed(self, iteration: int) -> int:
        """The seed of an LLM step at `iteration` (0: a run-level step such as the suite)."""
        trajectory = self.seed * 1000 + 1 if self.single_trajectory and iteration > 0 else self.seed
        return trajectory * 1000 + iteration


def step_command(origin: StepOrigin, cls: type[K], command_id: str, *, node_id: str | None,
                 task_sha256: str, iteration: int = 0, recipe_sha256: str = "",
                 **fields: Any) -> K:
    """A `cls` command for one step; explicit `fields` win over what the origin fills in."""
    accepted = cls.__struct_fields__
    defaults: dict[str, Any] = {"task_sha256": task_sha256, "task_file": origin.task_file,
                                "target_name": origin.target_name, "iteration": iteration,
                                "recipe_sha256": recipe_sha256}
    if "provider" in accepted:
        defaults.update(provider=origin.provider, provider_options=dict(origin.provider_options),
                        seed=origin.step_seed(iteration),
                        knowledge_cutoff_ts=origin.knowledge_cutoff_ts)
    for name, value in defaults.items():
        if name in accepted:
            fields.setdefault(name, value)
    return cls(command_id=command_id, run_id=origin.run_id, ts=origin.ts, node_id=node_id,
               causation_id=origin.causation_id, **fields)
