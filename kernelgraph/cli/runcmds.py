"""`kernelgraph search` and `kernelgraph submit`: a kernel request, end to end."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from kernelgraph.cli.app import (
    WeakSandboxOpt,
    app,
    emit_json,
    err_console,
    fail,
    sandbox_gate,
    task_arg,
)
from kernelgraph.cli.buscmds import DEFAULT_DB, NatsOpt
from kernelgraph.cli.progress import Progress
from kernelgraph.cli.scaleopt import ScaleOpt, apply_scale
from kernelgraph.userterms import in_user_terms

ProviderOpt = Annotated[str, typer.Option(
    "--provider", help="Who writes plans and kernels: offline (deterministic, no LLM), gemini "
    "(needs GEMINI_API_KEY), replay (the answers of a recorded run), or an installed plug-in.")]
TargetOpt = Annotated[str, typer.Option(
    "--target", help="sim-tpu-v6e|sim-tpu-v5e|sim-tpu-v7 (simulated figures), tpu or gpu (a device).")]
IterOpt = Annotated[int, typer.Option("--iterations", min=1, help="Auto iterations (plan .. profile).")]
FixOpt = Annotated[int, typer.Option("--fix-rounds", min=0, help="Fix attempts per compile failure.")]
SeedOpt = Annotated[int, typer.Option("--seed", help="Seed of the provider's choices.")]
TuneOpt = Annotated[int, typer.Option(
    "--tune-budget", min=1, help="Configurations per autotune besides the default (the test "
    "run times that one). On sim-* targets they are priced from their lowering and only the "
    "fastest priced is tested (the next if it fails); on devices each is timed.")]
HintOpt = Annotated[str, typer.Option("--hint", help="A strategy hint for the planner.")]
ModelOpt = Annotated[str | None, typer.Option(
    "--model", envvar="KG_GEMINI_MODEL", help="The Gemini model (gemini provider).", show_default=False)]
ReplayOpt = Annotated[Path | None, typer.Option(
    "--replay-from", help="The log whose answers the replay provider repeats.", show_default=False)]
ReplayRunOpt = Annotated[str | None, typer.Option(
    "--replay-run", help="The recorded run to replay (needed when the log holds several).",
    show_default=False)]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object at the end.")]
PolicyOpt = Annotated[str, typer.Option(
    "--policy", help="auto (one trajectory), or a search policy: parallel, beam, greedy, "
    "evolutionary, adaptive, an installed plug-in, or module:Class (see `kernelgraph policies`).")]
ParamOpt = Annotated[list[str] | None, typer.Option(
    "--param", help="A policy parameter, key=value (repeatable).", show_default=False)]
NodesOpt = Annotated[int, typer.Option("--max-nodes", min=1, help="Search: trajectories the policy may request.")]
CandidatesOpt = Annotated[int | None, typer.Option(
    "--budget-candidates", min=1, help="Search: candidate kernels (iterations over all nodes).",
    show_default=False)]
DepthOpt = Annotated[int | None, typer.Option("--max-depth", min=1, help="Search: deepest node.",
                                              show_default=False)]
TargetSpeedupOpt = Annotated[float | None, typer.Option(
    "--target-speedup", help="Search: stop once a node is this much faster.", show_default=False)]
WallOpt = Annotated[float | None, typer.Option(
    "--max-wall-s", help="Search: stop requesting nodes after this many seconds.", show_default=False)]
TokensOpt = Annotated[int | None, typer.Option(
    "--max-tokens", min=1, help="Search: stop requesting nodes after this many LLM tokens.",
    show_default=False)]
ConcurrencyOpt = Annotated[int, typer.Option(
    "--concurrency", min=1, help="Search: trajectories running at once.")]
MarginOpt = Annotated[float, typer.Option(
    "--price-margin", min=0.0, help="Simulated targets: test a compiled candidate only when "
    "the compile check prices it faster than its node's parent by this fraction (0: strictly "
    "faster); the others end 'not faster' with their estimate, never run in interpret mode.")]


def _request(task: Path, provider: str, target: str, iterations: int, fix_rounds: int, seed: int,
             tune_budget: int, hint: str, model: str | None, replay_from: Path | None,
             replay_run: str | None, policy: str = "auto", param: list[str] | None = None,
             limits: Any = None, price_margin: float = 0.0) -> Any:
    from kernelgraph.client import KernelRequest, SearchLimits
    from searchpolicies.errors import PolicyError
    from searchpolicies.registry import parse_param_args

    try:
        params = parse_param_args(param or [])
    except PolicyError as exc:
        fail(str(exc))

    options: dict[str, Any] = {}
    if model:
        options["model"] = model
    if provider == "replay":
        if replay_from is None:
            fail("--provider replay needs --replay-from LOG (the recorded run's log)")
        options["replay_from"] = str(replay_from.resolve())
        if replay_run:
            options["replay_run"] = replay_run
    cutoff = _replay_cutoff(replay_from, replay_run) if provider == "replay" else None
    return KernelRequest(task=task, target=target, provider=provider, provider_options=options,
                         iterations=iterations, fix_rounds=fix_rounds, seed=seed,
                         tune_budget=tune_budget, hint=hint, knowledge_cutoff_ts=cutoff,
                         policy=policy, policy_params=params, limits=limits or SearchLimits(),
                         price_margin=price_margin)


def _limits(*values: Any) -> Any:
    """The search limits from the options, in `SearchLimits` field order."""
    from kernelgraph.client import SearchLimits

    return SearchLimits(*values)


def _replay_cutoff(log_path: Path | None, run_id: str | None) -> float | None:
    """A replayed run retrieves the knowledge the recorded one could see, no more."""
    from eventstore.log import EventLog

    if log_path is None:
        return None
    with EventLog(log_path, read_only=True) as log:
        for event in log.events(types=["RunRequested"]):
            if run_id is None or event.run_id == run_id:
                return event.ts
    return None


async def _write_winner(nc: Any, result: Any, db: Path, task_name: str) -> tuple[Path | None, Path | None]:
    """The winner's source and receipt next to the log: DB.winners/<task>-<run>.py (.json)."""
    from kernelgraph.client import fetch_text

    if result.code_sha256 is None or not result.verified:
        return None, None
    folder = db.parent / f"{db.name}.winners"
    folder.mkdir(parents=True, exist_ok=True)
    kernel = folder / f"{task_name}-{result.run_id}.py"
    kernel.write_text(await fetch_text(nc, result.code_sha256))
    receipt = None
    if result.receipt_sha256:
        receipt = folder / f"{task_name}-{result.run_id}.receipt.json"
        receipt.write_text(await fetch_text(nc, result.receipt_sha256))
    return kernel, receipt


def _summary(result: Any, run: Any, kernel: Path | None, receipt: Path | None, wall_s: float) -> dict[str, Any]:
    return {
        "run_id": result.run_id,
        "task": run.task_name,
        "status": result.status,
        "reason": in_user_terms(result.reason),
        "best": {
            "node_id": result.best_node_id,
            "speedup": result.speedup,
            "measured_on": result.measured_on,
            "verified": result.verified,
            "kernel_path": str(kernel) if kernel else None,
            "receipt_path": str(receipt) if receipt else None,
            "receipt_sha256": result.receipt_sha256,
            "config": result.config,
        },
        "nodes": result.nodes,
        "wall_s": round(wall_s, 2),
    }


def _print_summary(summary: dict[str, Any], told: bool = False) -> None:
    """The result on stdout; the reason a run ended without a kernel only when the progress
    lines on stderr did not say it (--quiet), so a refusal is printed once."""
    best = summary["best"]
    out = sys.stdout
    out.write(f"run {summary['run_id']} ({summary['task']}): {summary['status']}\n")
    if best["verified"]:
        label = "simulated" if best["measured_on"] == "simulated" else "measured"
        out.write(f"winner: {best['kernel_path']}  config {best['config']}\n")
        out.write(f"speedup ({label}): {best['speedup']:.2f}x over the XLA baseline; "
                  f"re-verified, receipt {best['receipt_path']}\n")
    elif told or not summary["reason"]:
        out.write("no verified kernel (the reason is above)\n" if told else "no verified kernel\n")
    else:
        out.write(f"no verified kernel: {summary['reason']}\n")


def _user_errors() -> tuple[type[BaseException], ...]:
    from kernelgraph.cli.buscmds import _user_errors as bus_errors
    from kernelgraph.client import RequestError
    from tools import api

    return (*bus_errors(), RequestError, api.TaskError)


@app.command(rich_help_panel="Search")
def search(
    task: Annotated[Path, typer.Argument(
        help="A task file (tasks/rmsnorm.py), a shipped task's name (rmsnorm; see `kernelgraph "
        "tasks`) or a JAXBench task folder or its baseline.py.")],
    provider: ProviderOpt = "offline",
    target: TargetOpt = "sim-tpu-v6e",
    db: Annotated[Path, typer.Option("--db", help="The event log (created if missing).")] = DEFAULT_DB,
    iterations: IterOpt = 5,
    fix_rounds: FixOpt = 4,
    seed: SeedOpt = 0,
    tune_budget: TuneOpt = 8,
    hint: HintOpt = "",
    model: ModelOpt = None,
    replay_from: ReplayOpt = None,
    replay_run: ReplayRunOpt = None,
    scale: ScaleOpt = None,
    policy: PolicyOpt = "auto",
    param: ParamOpt = None,
    max_nodes: NodesOpt = 6,
    budget_candidates: CandidatesOpt = None,
    max_depth: DepthOpt = None,
    target_speedup: TargetSpeedupOpt = None,
    max_wall_s: WallOpt = None,
    max_tokens: TokensOpt = None,
    concurrency: ConcurrencyOpt = 2,
    price_margin: MarginOpt = 0.0,
    nats: NatsOpt = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress lines.")] = False,
    allow_weak_sandbox: WeakSandboxOpt = False,
    json_out: JsonOpt = False,
) -> None:
    """Turn TASK's reference into a verified Pallas kernel.

    --policy auto (the default) runs one Auto trajectory of --iterations iterations. Any
    other policy runs a search: the policy expands a graph of trajectories (each in its
    own session, seeded with its parent's kernel, plan, profile and tuning) until it stops
    or a budget (--max-nodes, --budget-candidates, --max-depth, --target-speedup,
    --max-wall-s, --max-tokens) is spent; the best node is re-verified and the run audited.

    Without --nats everything runs in this process: an embedded nats-server, the recorder
    writing --db, and every agent. Progress goes to stderr; at the end the verified winner
    and its receipt are written next to the log (DB.winners/) and summarised. Figures from
    sim-* targets are simulated (a roofline model), never measured. A search killed part
    way continues with `kernelgraph resume DB --run ID`.

    Exit status: 0 a verified kernel; 1 the run ended without one; 2 bad input.
    """
    from bus.connection import connect
    from kernelgraph.client import check_request, submit, wait
    from kernelgraph.runtime import Runtime, RuntimeConfig

    task = apply_scale(task_arg(task), scale)
    if nats is None:  # candidates run in this process (else in the services', which refuse)
        sandbox_gate(allow_weak_sandbox)
    request = _request(task, provider, target, iterations, fix_rounds, seed, tune_budget, hint,
                       model, replay_from, replay_run, policy, param, _limits(
                           max_nodes, budget_candidates, max_depth, target_speedup, max_wall_s,
                           max_tokens, concurrency), price_margin)
    progress = Progress(quiet=quiet)

    async def run_on(nc: Any, started: float) -> dict[str, Any]:
        run = await submit(nc, request)
        result = await wait(nc, run.run_id, on_event=progress)
        if not result.verified:
            progress.end(result.status, result.reason)
        kernel, receipt = await _write_winner(nc, result, db, run.task_name)
        return _summary(result, run, kernel, receipt, time.monotonic() - started)

    async def main() -> dict[str, Any]:
        started = time.monotonic()
        await asyncio.to_thread(check_request, request)
        if nats is not None:
            nc = await connect(nats, name="kernelgraph-search")
            try:
                return await run_on(nc, started)
            finally:
                await nc.drain()
        from agents.executor import unserved_problem
        from kernelgraph.client import RequestError

        if problem := unserved_problem(request.target):
            raise RequestError(problem)
        config = RuntimeConfig(db_path=db, concurrency={"executor": 2, "verifier": 1})
        async with Runtime(config) as runtime:
            assert runtime.client is not None
            return await run_on(runtime.client.nc, started)

    try:
        summary = asyncio.run(main())
    except _user_errors() as exc:
        fail(str(exc))
    if json_out:
        emit_json(summary)
    else:
        _print_summary(summary, told=progress.told is not None and not quiet)
    raise typer.Exit(0 if summary["best"]["verified"] else 1)


@app.command(rich_help_panel="Search")
def submit(
    task: Annotated[Path, typer.Argument(help="A task file or a shipped task's name.")],
    nats: NatsOpt = None,
    provider: ProviderOpt = "offline",
    target: TargetOpt = "sim-tpu-v6e",
    iterations: IterOpt = 5,
    fix_rounds: FixOpt = 4,
    seed: SeedOpt = 0,
    tune_budget: TuneOpt = 8,
    hint: HintOpt = "",
    model: ModelOpt = None,
    scale: ScaleOpt = None,
    policy: PolicyOpt = "auto",
    param: ParamOpt = None,
    max_nodes: NodesOpt = 6,
    budget_candidates: CandidatesOpt = None,
    max_depth: DepthOpt = None,
    target_speedup: TargetSpeedupOpt = None,
    max_wall_s: WallOpt = None,
    max_tokens: TokensOpt = None,
    concurrency: ConcurrencyOpt = 2,
    wait_end: Annotated[bool, typer.Option("--wait", help="Follow the run to its end.")] = False,
    db: Annotated[Path | None, typer.Option(
        "--winner-dir", help="With --wait: write the winner next to this log path.",
        show_default=False)] = None,
    json_out: JsonOpt = False,
) -> None:
    """Publish a kernel request to a running deployment (`kernelgraph up`, compose) and print
    its run id; with --wait, follow it to the end like `search`."""
    from bus.connection import connect
    from kernelgraph.client import submit as submit_request
    from kernelgraph.client import wait

    if nats is None:
        fail("submit needs --nats URL (or KG_NATS_URL): the deployment to send the request to")
    task = apply_scale(task_arg(task), scale)
    request = _request(task, provider, target, iterations, fix_rounds, seed, tune_budget, hint,
                       model, None, None, policy, param, _limits(
                           max_nodes, budget_candidates, max_depth, target_speedup, max_wall_s,
                           max_tokens, concurrency))

    async def main() -> dict[str, Any]:
        started = time.monotonic()
        nc = await connect(nats, name="kernelgraph-submit")
        try:
            run = await submit_request(nc, request)
            if not wait_end:
                return {"run_id": run.run_id, "task": run.task_name, "root_node_id": run.root_node_id}
            if not json_out:
                err_console.print(f"run {run.run_id} submitted; following it", highlight=False)
            result = await wait(nc, run.run_id, on_event=Progress(quiet=json_out))
            kernel, receipt = (await _write_winner(nc, result, db, run.task_name)) if db else (None, None)
            return _summary(result, run, kernel, receipt, time.monotonic() - started)
        finally:
            await nc.drain()

    try:
        summary = asyncio.run(main())
    except _user_errors() as exc:
        fail(str(exc))
    if json_out:
        emit_json(summary)
    elif not wait_end:
        sys.stdout.write(summary["run_id"] + "\n")
    else:
        _print_summary(summary)
    if wait_end:
        raise typer.Exit(0 if summary["best"]["verified"] else 1)
