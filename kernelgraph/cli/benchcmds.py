"""`kernelgraph bench`: tasks x policies at an equal candidate budget, with the paper's metrics."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from kernelgraph.cli.app import WeakSandboxOpt, app, emit_json, err_console, fail, sandbox_gate
from kernelgraph.cli.buscmds import DEFAULT_DB, NatsOpt
from kernelgraph.cli.progress import first_line
from kernelgraph.cli.runcmds import (
    FixOpt,
    IterOpt,
    JsonOpt,
    ProviderOpt,
    SeedOpt,
    TargetOpt,
    TuneOpt,
)
from kernelgraph.cli.scaleopt import ScaleOpt
from kernelgraph.userterms import given_name, in_user_terms, label_of, remember


@app.command(rich_help_panel="Search")
def bench(
    tasks: Annotated[list[Path], typer.Argument(
        help="Task files or directories (a folder of task files, or a JAXBench benchmark/ "
        "folder whose sub-folders hold baseline.py), or shipped task names.")],
    policy: Annotated[str, typer.Option(
        "--policy", help="Comma-separated policies to compare (auto, parallel, beam, ...).")] = "parallel,beam",
    budget_candidates: Annotated[int, typer.Option(
        "--budget-candidates", min=1, help="Candidate kernels each run may write (all policies "
        "get the same).")] = 8,
    repeat: Annotated[int, typer.Option("--repeat", min=1, help="Runs per task and policy "
                                        "(seeds seed..seed+R-1).")] = 1,
    jobs: Annotated[int, typer.Option("--jobs", min=1, help=(
        "Runs at once (tasks are checked in as many processes; on a sim-* target as many "
        "winners are re-verified at once, on a real device one at a time)."))] = 1,
    scale: ScaleOpt = None,
    provider: ProviderOpt = "offline",
    target: TargetOpt = "sim-tpu-v6e",
    iterations: IterOpt = 2,
    fix_rounds: FixOpt = 2,
    seed: SeedOpt = 0,
    tune_budget: TuneOpt = 4,
    db: Annotated[Path, typer.Option("--db", help="The event log of the bench.")] = DEFAULT_DB,
    nats: NatsOpt = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress lines.")] = False,
    allow_weak_sandbox: WeakSandboxOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Run every task under every policy and report, per policy: compile rate, correctness
    rate, geometric-mean speedup with regressions floored at 1.0, fast_p, candidates (and
    how many it took to reach the best), wall time and tokens. The bench's own wall time
    (`wall_s` in --json) runs from the start of the task checks to the end of the last run;
    `check_s` is the checks' share.

    --iterations is the inner budget of one-trajectory runs (auto); search policies use their
    own (see `kernelgraph policies`). Tasks that cannot run are skipped with a one-line
    reason. Figures from sim-* targets are simulated. The log (--db) keeps every run, so
    `kernelgraph replay` and `kernelgraph report` can analyse the bench afterwards.

    A refusal (a task skipped, or a run that could not freeze its suite) is said once, naming
    the task as given. Exit status: 0 when every task froze a suite, 1 when some task was
    refused, 2 bad input.
    """
    from bus.connection import connect
    from kernelgraph.bench import (
        BenchPlan,
        agent_concurrency,
        check_tasks,
        find_tasks,
        run_bench,
        suite_summary,
        summarise,
    )
    from kernelgraph.client import KernelRequest, SearchLimits
    from kernelgraph.runtime import Runtime, RuntimeConfig
    from kernelgraph.tasknames import UnknownTask, resolve_task
    from searchpolicies.registry import policy_names

    policies = [p.strip() for p in policy.split(",") if p.strip()]
    known = {"auto", *policy_names()}
    unknown = [p for p in policies if p not in known and ":" not in p]
    if not policies or unknown:
        fail(f"unknown policy {', '.join(unknown) or '(none given)'}; known: {', '.join(sorted(known))}")
    try:  # an existing path as it is, else a shipped task's name
        tasks = [resolve_task(t) for t in tasks]
    except UnknownTask as exc:
        fail(str(exc))
    if nats is None:  # candidates run in this process (else in the services', which refuse)
        sandbox_gate(allow_weak_sandbox)
        from agents.executor import unserved_problem

        if problem := unserved_problem(target):
            fail(problem)
    found, skipped = find_tasks(tasks)
    given = {t.name: label_of(t.path) for t in found}  # how messages name each task
    for t in found:
        remember(t.path, given[t.name], current=False)
    found_count = len(found) + sum(1 for s in skipped if s.path.is_file())
    template = KernelRequest(task=Path(), target=target, provider=provider, iterations=iterations,
                             fix_rounds=fix_rounds, seed=seed, tune_budget=tune_budget,
                             limits=SearchLimits(max_nodes=None, max_candidates=budget_candidates))
    plan = BenchPlan(tasks=found, policies=policies, request=template, repeat=repeat, jobs=jobs,
                     scale=scale)
    started = time.monotonic()  # the bench's wall time counts the checks too
    skipped += check_tasks(plan)
    check_s = round(time.monotonic() - started, 1)
    for s in skipped:
        err_console.print(f"[yellow]skipped[/] {escape(in_user_terms(f'{s.path}: {s.reason}'))}",
                          highlight=False, soft_wrap=True)
    if not plan.tasks:
        fail("no task can run (see the reasons above)")
    if scale:  # a factor replaced because it broke a task's structure, said once per task
        from kernelgraph.cli.scaleopt import say_scale_notes
        from tools.api import scale_notes

        for t in plan.tasks:
            say_scale_notes(given.get(t.name, label_of(t.path)), scale_notes(t.path))
    if not quiet:
        err_console.print(f"[dim]{check_s:7.1f}s[/] {len(plan.tasks)} task(s) checked "
                          f"and ordered, {len(skipped)} skipped", highlight=False)

    def progress(outcome: Any, done: int, total: int) -> None:
        if quiet:
            return
        result = f"{outcome.speedup:.2f}x verified" if outcome.verified and outcome.speedup else (
            first_line(outcome.reason) or outcome.status)
        err_console.print(f"[dim]{time.monotonic() - started:7.1f}s[/] \\[{done}/{total}] "
                          f"{outcome.task} / {outcome.policy} (seed {outcome.seed}): {escape(result)}",
                          highlight=False, soft_wrap=True)

    def in_words(outcome: Any) -> Any:
        """The run's reason naming its task as the user gave it (a refusal is said once)."""
        outcome.reason = in_user_terms(outcome.reason, given.get(outcome.task))
        return outcome

    async def collect(nc: Any, read_events: Any) -> dict[str, Any]:
        outcomes = await run_bench(nc, plan, on_done=lambda o, d, t: progress(in_words(o), d, t))
        run_ids = [o.run_id for o in outcomes if o.run_id]
        events = await read_events(run_ids)
        return {"policies": summarise(events), "runs": [o.__dict__ for o in outcomes],
                "summary": suite_summary(found_count, outcomes, events)}

    async def main() -> dict[str, Any]:
        if nats is not None:
            from kernelgraph.client import follow

            nc = await connect(nats, name="kernelgraph-bench")

            async def from_bus(run_ids: list[str]) -> dict[str, list[Any]]:
                return {r: [e async for e in follow(nc, r)] for r in run_ids}

            try:
                return await collect(nc, from_bus)
            finally:
                await nc.drain()
        config = RuntimeConfig(db_path=db, concurrency=agent_concurrency(plan))
        async with Runtime(config) as runtime:
            assert runtime.client is not None and runtime.recorder is not None
            recorder = runtime.recorder

            async def from_log(run_ids: list[str]) -> dict[str, list[Any]]:
                await recorder.wait_idle(timeout=60)
                return await recorder.read(
                    lambda log: {r: list(log.events(run_id=r)) for r in run_ids})

            return await collect(runtime.client.nc, from_log)

    report = asyncio.run(main())
    report.update(tasks=len(plan.tasks), skipped=[{"path": given_name(s.path),
                                                   "reason": in_user_terms(s.reason)}
                                                  for s in skipped],
                  budget_candidates=budget_candidates, repeat=repeat,
                  wall_s=round(time.monotonic() - started, 1), check_s=check_s)
    line = report["summary"]
    refused = bool(skipped) or line["froze_suite"] < line["loaded"]  # a task said no to
    if json_out:
        emit_json(report)
        raise typer.Exit(1 if refused else 0)
    out = sys.stdout
    out.write(f"{line['found']} task(s) found, {line['loaded']} loaded, {line['froze_suite']} froze "
              f"a suite, {line['verified']} got a verified kernel; budget {budget_candidates} "
              f"candidates per run, {repeat} repeat(s)\n")
    if line["vacuous"]:
        out.write(f"{len(line['vacuous'])} task(s) refused as vacuous (their reference output "
                  f"cannot tell right from wrong): {', '.join(line['vacuous'])}\n")
    header = f"{'policy':14} {'runs':>4} {'correct':>7} {'compile':>7} {'geomean':>8} {'fast_1':>6} {'cands':>6} {'to best':>7} {'wall s':>8} label\n"
    out.write(header)
    for name, p in report["policies"].items():
        out.write(f"{name:14} {p['runs']:>4} {p['runs_correct']:>7} "
                  f"{_pct(p['compile_rate']):>7} {p['geomean_speedup_floored']:>7.3f}x "
                  f"{p['fast_p']['1']:>6.2f} {p['candidates']:>6} "
                  f"{p['mean_candidates_to_best'] if p['mean_candidates_to_best'] is not None else '-':>7} "
                  f"{p['wall_s']:>8.1f} {','.join(p['measured_on'])}\n")
    raise typer.Exit(1 if refused else 0)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"
