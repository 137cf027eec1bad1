"""`test_synth`: freezes the run's test suite once, before any kernel exists.

The suite comes from the task's own input maker (`make_inputs`, or a JAXBench
`create_inputs`). A task that declares only its reference, `SHAPES` and `INPUT_SPECS`
(argument name and dtype per input) gets an input maker written by the run's provider; the
written maker is appended to the task source, validated by a run of the reference on its
inputs (loading the task does that), and refused when the suite would be vacuous. Every
node of the run is judged on this one suite: the event carries its sha256 and the recipe
from which any worker rebuilds it and proves it is the same.
"""

from __future__ import annotations

import ast
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, ClassVar

import msgspec

from agents.base import Agent, AgentContext, Workspace, render_prompt
from agents.commands import FreezeSuite
from agents.llm.parsing import python_block
from bus.registry import register
from bus.service import PermanentError
from eventstore.events import Event, TestSuiteFrozen
from kernelgraph import pyast
from tools import api

INPUT_MAKERS = ("make_inputs", "create_inputs")


def needs_input_maker(source: str) -> bool:
    """True when the task defines no input maker but declares INPUT_SPECS for one."""
    tree = pyast.parse(source)
    functions = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    assigned = {t.id for n in tree.body if isinstance(n, ast.Assign)
                for t in n.targets if isinstance(t, ast.Name)}
    return not functions.intersection(INPUT_MAKERS) and "INPUT_SPECS" in assigned


def literal_assignments(source: str, names: tuple[str, ...]) -> dict[str, ast.expr]:
    """The value expressions of a module's top-level `NAME = ...` lines for the given names."""
    found: dict[str, ast.expr] = {}
    for node in pyast.parse(source).body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name) and node.targets[0].id in names):
            found[node.targets[0].id] = node.value
    return found


def signature_of(source: str) -> dict[str, Any]:
    """{"args": [{name, dtype, shapes}]} from a task's literal INPUT_SPECS and SHAPES."""
    values: dict[str, Any] = {}
    for name, expr in literal_assignments(source, ("INPUT_SPECS", "SHAPES")).items():
        try:
            values[name] = ast.literal_eval(expr)
        except ValueError:
            raise PermanentError(f"{name} must be a literal") from None
    specs, shapes = values.get("INPUT_SPECS"), values.get("SHAPES")
    if not specs or not shapes:
        raise PermanentError("a task without an input maker needs literal INPUT_SPECS and SHAPES")
    args = []
    for position, (name, dtype) in enumerate(specs):
        per_shape = [list(entry[position]) for entry in shapes]
        args.append({"name": name, "dtype": dtype, "shapes": per_shape})
    return {"args": args}


def input_maker(text: str) -> str:
    """The one ```python block of an answer, which must define make_inputs."""
    return python_block(text, defines="make_inputs")


@register
class TestSynthAgent(Agent[FreezeSuite]):
    agent: ClassVar[str] = "test_synth"
    commands: ClassVar[tuple[type, ...]] = (FreezeSuite,)
    produces: ClassVar[tuple[type[Event], ...]] = (TestSuiteFrozen,)

    async def _run(self, ctx: AgentContext[FreezeSuite]) -> AsyncIterator[Event]:
        started = time.perf_counter()
        cmd = ctx.cmd
        path = await ctx.task_path()
        source = path.read_text()
        written_sha: str | None = None
        if needs_input_maker(source):
            path, written_sha = await self._write_input_maker(ctx, path, source)
        froze = time.perf_counter()
        try:
            suite = await ctx.run_tool(api.freeze_suite, path)
        except (api.TaskError, api.SuiteError) as exc:
            raise PermanentError(f"{type(exc).__name__}: {exc}") from exc
        recipe = api.recipe_of(suite)
        recipe_sha = await ctx.put_text(msgspec.json.encode(recipe).decode(), "suite-recipe")
        await ctx.keep_suite(recipe_sha, suite, time.perf_counter() - froze)
        yield self.event(
            TestSuiteFrozen, cmd, suite_sha256=suite.sha256, n_cases=len(suite.cases),
            seeds=list(recipe.seeds), shapes=[dict(c) for c in recipe.cases],
            tolerance=dict(suite.tolerance), wall_s=time.perf_counter() - started,
            recipe_sha256=recipe_sha, task_sha256=written_sha, notes=list(suite.notes))

    async def _write_input_maker(self, ctx: AgentContext[FreezeSuite], path: Path,
                                 source: str) -> tuple[Path, str]:
        signature = signature_of(source)
        prompt = render_prompt("inputs", reference_source=source,
                               signature=msgspec.json.encode(signature).decode())
        context = {"task_path": str(path), "task_name": ctx.cmd.task_file, "signature": signature,
                   "reference_source": source, "target": ctx.cmd.target_name, "iteration": 0,
                   "seed": ctx.cmd.seed}
        code, _ = await ctx.ask("inputs", context, input_maker, prompt=prompt, iteration=0)
        derived = f"{source.rstrip()}\n\n\n# The input maker below was written by the run's provider.\n{code}"
        sha = await ctx.put_text(derived, "task")
        derived_path = Workspace.write_once(
            ctx.workspace.task_file(sha, path.name), derived.encode())
        try:
            await ctx.run_tool(api.load_task, derived_path)
        except api.TaskError as exc:
            raise PermanentError(f"the written input maker does not work: {exc}") from exc
        return derived_path, sha
