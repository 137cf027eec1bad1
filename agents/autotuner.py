"""`autotuner`: sweeps a candidate's TUNABLES across the executors and picks the fastest.

The grid is narrowed by the profile of the default configuration's verdict: its test run's
or, where the sweep runs before any test (simulated targets, `agents.judging`), its compile
check's (many short grid steps: only blocks at least as large, the product of the size
knobs; VMEM above half the budget: only blocks at most as large; both at once: the whole
grid; flags, knobs of 0 and 1, are never narrowed). The default itself is left out: the
test run measured it, or the compile check priced it, and the orchestrator keeps whichever
of the two is faster, testing the default only when no other configuration passed. The
budget caps the other configurations, in the grid's order; of those, one whose lowered
program (hashed) is the default's or an earlier one's is skipped
(`TuningSwept.configs_skipped`): the same program has the same price. The lowerings go in
`LOWERINGS_AT_ONCE` batches, each one sandboxed worker and one runner however many
configurations it holds (`wire.EvalBatch`). On simulated targets that lowering also prices
each configuration (`api.price_configs`, the cost model the verdict uses), and only the
`TESTED_AFTER_PRICING` priced fastest, and faster than the default by `MIN_TUNED_GAIN`, are
tested, one at a time until one passes: the rest cannot win the sweep, and a test run costs
many lowerings' worth of interpret mode (`configs_priced`, with each one's fate in the
tuning table). The default is not lowered again where the iteration already priced it
(`known_default`: the verdict above, or the compile check's price the command passes on):
its price and program hash are the bar and the first program seen. Each configuration
tested is one `MeasureConfig` command, so every executor process on the bus takes part; the
commands' ids derive from this command's, so a restarted sweep does not measure anything
twice.
"""

from __future__ import annotations

import asyncio
import functools
import math
import time
from collections.abc import AsyncIterator
from typing import Any, ClassVar

import msgspec

from agents.base import Agent, AgentContext
from agents.calls import RunHistory, step_id
from agents.commands import MeasureConfig, TuneKernel
from bus.registry import register
from eventstore.events import ConfigMeasured, Event, Json, TuningSwept
from tools import api

VMEM_NARROW_FRACTION = 0.5
LOWERINGS_AT_ONCE = 2
"""Batches of sandboxed lowerings run at once (a batch: one worker and one runner)."""
TESTED_AFTER_PRICING = 2
"""On simulated targets, the configurations priced fastest that go through the full suite."""
MIN_TUNED_GAIN = 0.01
"""A configuration is tested only when priced at least this fraction under the default's
price: a smaller gain is below the cost model's resolution and not worth a test run (at a
large tuning point, minutes of interpret mode)."""


def narrow(configs: list[dict[str, Any]], profile: dict[str, Any] | None) -> tuple[list[dict[str, Any]], str]:
    """The configurations worth timing given the default's profile, and why.

    Only sizes are narrowed by direction: a flag (a knob whose every value is 0 or 1, such
    as a layout switch) says nothing about step count or VMEM, so both its values stay. Many
    short steps and VMEM above half the budget pull opposite ways; then the whole grid stays,
    and the prices (whose lowering includes the compile check) or the timings decide."""
    if not configs or not profile:
        return configs, "no profile: the whole grid"
    default = configs[0]
    overhead = profile.get("bound") == "overhead" or any(
        "larger blocks" in s.lower() for s in profile.get("suggestions", []))
    vmem, limit = profile.get("vmem_bytes"), profile.get("vmem_limit_bytes")
    tight = bool(vmem and limit and vmem > VMEM_NARROW_FRACTION * limit)
    if not overhead and not tight:
        return configs, "profile gives no direction: the whole grid"
    if overhead and tight:
        return configs, ("per-step overhead, and VMEM above half the budget: the directions "
                         "conflict, the whole grid")
    sizes = size_knobs(configs)

    def volume(config: dict[str, Any]) -> int:
        return math.prod(config[knob] for knob in sizes)

    def every_knob(config: dict[str, Any]) -> bool:
        return all(config[knob] >= default[knob] if overhead else config[knob] <= default[knob]
                   for knob in sizes)

    def as_a_whole(config: dict[str, Any]) -> bool:  # a longer q block over fewer heads per
        # block is as large a step as the default, though one knob of it is smaller
        return volume(config) >= volume(default) if overhead else volume(config) <= volume(default)

    # those that move every knob the profile's way first: a budget that cuts the grid keeps them
    kept = ([c for c in configs if every_knob(c)]
            + [c for c in configs if as_a_whole(c) and not every_knob(c)])
    why = "per-step overhead: blocks >= the default's size" if overhead else \
        "VMEM above half the budget: blocks <= the default's size"
    return kept or configs[:1], why


def size_knobs(configs: list[dict[str, Any]]) -> list[str]:
    """The knobs every configuration sets to an integer, not all 0 or 1 (those are flags)."""
    def sized(knob: str) -> bool:
        values = [c.get(knob) for c in configs]
        return all(isinstance(v, int) and not isinstance(v, bool) for v in values) and \
            any(v not in (0, 1) for v in values)

    return [knob for knob in configs[0] if sized(knob)]


def repeats(default_key: str | None, keys: list[str | None]) -> dict[int, int]:
    """{index in `keys`: -1 (the default's program) or the earlier index it repeats}."""
    seen: dict[str, int] = {default_key: -1} if default_key else {}
    found: dict[int, int] = {}
    for index, key in enumerate(keys):
        if key is None:
            continue
        if key in seen:
            found[index] = seen[key]
        else:
            seen[key] = index
    return found


def same_programs(default: dict[str, Any], planned: list[dict[str, Any]],
                  default_key: str | None, keys: list[str | None]) -> tuple[dict[int, int], list[Json]]:
    """`repeats` of the planned configurations' program keys, and a skipped row for each
    naming the configuration whose program it repeats."""
    again = repeats(default_key, keys)
    return again, [{"config": planned[i], "same_program_as": default if j < 0 else planned[j]}
                   for i, j in again.items()]


def known_default(default: dict[str, Any], record: Json | None, cmd: TuneKernel,
                  ) -> tuple[api.PricedConfig | None, str]:
    """The default configuration's price where this iteration already has it, and where it
    came from: the verdict record of its test run or, for a sweep before any test, of its
    compile check (a valid simulated measurement of this very configuration, with the program
    it priced), else the compile check's price the command carries. (None, "") when neither
    holds both a latency and a program hash: the sweep lowers the default itself. Both are the cost model's price of the same program
    `price_config` lowers; only a program whose price depends on scalar-prefetch values is
    priced on other values: the mean over the suite's tuning-point seed cases in the verdict
    (the figure a tuned configuration must beat), the first case's in the compile check, the
    task's seed-0 inputs in `price_config`."""
    measurement = (record or {}).get("measurement") or {}
    program = (measurement.get("breakdown") or {}).get("program_sha256")
    if (record is not None and record.get("config") == msgspec.to_builtins(default)  # as JSON
            and measurement.get("measured_on") == "simulated" and measurement.get("valid")
            and measurement.get("latency_s") is not None and program):
        return api.PricedConfig(dict(default), program, measurement["latency_s"],
                                measurement.get("speedup")), (
            "the test run's verdict" if record.get("cases") else "the compile check's verdict")
    if cmd.default_latency_s is not None and cmd.default_program_sha256:
        return api.PricedConfig(dict(default), cmd.default_program_sha256,
                                cmd.default_latency_s), "the compile check"
    return None, ""


def bar(default: api.PricedConfig, below_s: float | None = None) -> float | None:
    """The price a configuration must come in under to be tested: `MIN_TUNED_GAIN` under the
    default's, and under `below_s` (the parent to beat) when given; None: no bar."""
    bars = [b for b in (None if default.latency_s is None
                        else default.latency_s * (1.0 - MIN_TUNED_GAIN), below_s)
            if b is not None]
    return min(bars) if bars else None


def worth_testing(default: api.PricedConfig, priced: list[api.PricedConfig],
                  keep: int = TESTED_AFTER_PRICING, below_s: float | None = None,
                  ) -> tuple[list[dict[str, Any]], list[Json]]:
    """The `keep` configurations priced fastest that beat the default's price by
    `MIN_TUNED_GAIN` (every one priced, when the default's own lowering failed) and are
    priced under `below_s` when given, and a row per configuration saying what became of it."""
    ranked = sorted((p for p in priced if p.latency_s is not None),
                    key=lambda p: p.latency_s or 0.0)
    bar_s = None if default.latency_s is None else default.latency_s * (1.0 - MIN_TUNED_GAIN)
    limit = bar(default, below_s)
    chosen = [p for p in ranked if limit is None or (p.latency_s or 0.0) < limit][:keep]
    rows: list[Json] = []
    for p in priced:
        if any(p is c for c in chosen):
            fate = "to test (fastest first, until one passes)"
        elif p.floor_s is not None:
            fate = (f"not tested: its kernels alone are priced at {p.floor_s:.3g} s, no faster "
                    f"than the price to beat ({limit or 0.0:.3g} s); not compiled")
        elif p.latency_s is None:
            fate = f"not priced: {p.problem}"
        elif default.latency_s is not None and p.latency_s >= default.latency_s:
            fate = f"not tested: priced no faster than the default ({default.latency_s:.3g} s)"
        elif bar_s is not None and p.latency_s >= bar_s:
            fate = (f"not tested: priced within {MIN_TUNED_GAIN:.0%} of the default "
                    f"({default.latency_s:.3g} s)")
        elif below_s is not None and p.latency_s >= below_s:
            fate = f"not tested: priced no faster than the parent to beat ({below_s:.3g} s)"
        else:
            fate = f"not tested: {'one other' if keep == 1 else f'{keep} others'} priced faster"
        rows.append({"config": p.config, "estimate_s": p.latency_s,
                     "estimate_speedup": p.speedup, "fate": fate,
                     **({"kernels_floor_s": p.floor_s} if p.floor_s is not None else {})})
    return [p.config for p in chosen], rows


@register
class AutotunerAgent(Agent[TuneKernel]):
    agent: ClassVar[str] = "autotuner"
    commands: ClassVar[tuple[type, ...]] = (TuneKernel,)
    produces: ClassVar[tuple[type[Event], ...]] = (TuningSwept,)

    async def _run(self, ctx: AgentContext[TuneKernel]) -> AsyncIterator[Event]:
        started = time.perf_counter()
        cmd = ctx.cmd
        code = await ctx.code_path(cmd.code_sha256)
        try:
            grid = await ctx.run_tool(api.candidate_configs, code)
        except api.CandidateError:
            grid = [{}]
        profile, record = None, None
        if cmd.verdict_sha256:
            record = msgspec.json.decode(await ctx.get_text(cmd.verdict_sha256))
            if record.get("measurement"):
                profile = msgspec.to_builtins(await ctx.run_tool(
                    api.profile_of, record["measurement"], record.get("compile_report")))
        planned, why = narrow(grid, profile)
        planned = [c for c in planned if c != grid[0]]
        if cmd.budget is not None:
            planned = planned[:max(cmd.budget, 1)]
        priced: list[Json] = []
        default_price: Json | None = None
        if cmd.target_name.startswith("sim-"):
            known = known_default(grid[0], record, cmd)
            planned, skipped, priced, default_price = await self.price(
                ctx, grid[0], planned, known)
        else:
            planned, skipped = await self.distinct(ctx, grid[0], planned)
        commands = [
            MeasureConfig(
                command_id=step_id(cmd, f"config/{i}"), run_id=cmd.run_id, ts=cmd.ts,
                node_id=cmd.node_id, causation_id=cmd.command_id, task_sha256=cmd.task_sha256,
                task_file=cmd.task_file, target_name=cmd.target_name, iteration=cmd.iteration,
                code_sha256=cmd.code_sha256, recipe_sha256=cmd.recipe_sha256, config=config)
            for i, config in enumerate(planned)]
        # Priced configurations go one at a time, fastest first, until one passes: the next
        # is a fallback, not a rival. Real targets time them all at once.
        waves = [[c] for c in commands] if priced else [commands]
        results: list[Any] = []
        async with RunHistory(self.nc, cmd.run_id) as history:
            for wave in waves:
                answered = await history.gather(wave, ConfigMeasured, agent="executor")
                results.extend(answered)
                if priced and any(isinstance(r, ConfigMeasured) and r.passed for r in answered):
                    break

        rows = [msgspec.to_builtins(r) for r in results]
        measured = [r for r in results if isinstance(r, ConfigMeasured)]
        passing = [r for r in measured if r.passed and r.latency_s]
        best = min(passing, key=lambda r: r.latency_s or float("inf")) if passing else None
        table = {"grid_size": len(grid), "planned": len(planned), "narrowing": why, "rows": rows,
                 "skipped": skipped, "priced": priced, "default": default_price}
        table_sha = await ctx.put_text(msgspec.json.encode(table).decode(), "tuning-table")
        yield self.event(
            TuningSwept, cmd, code_sha256=cmd.code_sha256, configs_tried=len(measured),
            configs_skipped=len(skipped), configs_priced=len(priced),
            configs_floored=sum(1 for row in priced if "kernels_floor_s" in row),
            best_config=dict(best.config) if best else {},
            best_latency_s=best.latency_s if best else None,
            measured_on=(best.measured_on if best and best.measured_on else "simulated"),
            table_sha256=table_sha, best_speedup=best.speedup if best else None,
            verdict_sha256=best.verdict_sha256 if best else None, iteration=cmd.iteration,
            wall_s=time.perf_counter() - started)

    async def price(self, ctx: AgentContext[TuneKernel], default: dict[str, Any],
                    planned: list[dict[str, Any]],
                    known: tuple[api.PricedConfig | None, str] = (None, ""),
                    ) -> tuple[list[dict[str, Any]], list[Json], list[Json], Json | None]:
        """On a simulated target: price every planned configuration from its sandboxed
        lowering (batched), and the default too unless its price is `known` (`known_default`),
        skip repeated programs, and test only the `TESTED_AFTER_PRICING` priced fastest that
        beat the default's price. Returns (to test, skipped as repeats, every priced row with
        what became of it, the default's price and where it came from; None: nothing planned)."""
        if not planned:
            return planned, [], [], None
        base, source = known
        if base is None:
            base, *rest = await self.priced(ctx, [default, *planned])
            source = "lowered in this sweep"
        else:  # a configuration whose kernels alone miss the bar is not compiled
            rest = await self.priced(ctx, planned, bar(base, ctx.cmd.beat_latency_s))
        again, skipped = same_programs(default, planned, base.program_sha256,
                                       [f.program_sha256 for f in rest])
        fresh = [f for i, f in enumerate(rest) if i not in again]
        chosen, rows = worth_testing(base, fresh, ctx.cmd.tested_at_most or TESTED_AFTER_PRICING,
                                     below_s=ctx.cmd.beat_latency_s)
        return chosen, skipped, rows, {
            "config": default, "estimate_s": base.latency_s,
            "program_sha256": base.program_sha256, "priced_from": source,
            **({"problem": base.problem} if base.problem else {})}

    async def distinct(self, ctx: AgentContext[TuneKernel], default: dict[str, Any],
                       planned: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[Json]]:
        """The planned configurations whose lowered program is new (not the default's, which
        the test run priced, nor an earlier one's), and those skipped with the one they repeat.
        Each lowering is sandboxed and runs nothing: far cheaper than a measurement."""
        if not planned:
            return planned, []
        keys = await self.lowered(ctx, api.program_sha256s, [default, *planned])
        again, skipped = same_programs(default, planned, keys[0], list(keys[1:]))
        return [c for i, c in enumerate(planned) if i not in again], skipped

    async def priced(self, ctx: AgentContext[TuneKernel], configs: list[dict[str, Any]],
                     bar_s: float | None = None) -> list[api.PricedConfig]:
        return await self.lowered(ctx, functools.partial(api.price_configs, bar_s=bar_s),
                                  configs)

    async def lowered(self, ctx: AgentContext[TuneKernel], tool: Any,
                      configs: list[dict[str, Any]]) -> list[Any]:
        """`tool(task, code, configs, target)` (a batch tool: one answer per configuration,
        in order) over `LOWERINGS_AT_ONCE` batches at once: each batch is one sandboxed
        worker and one runner, whatever its size."""
        cmd = ctx.cmd
        task = await ctx.task_path()
        code = await ctx.code_path(cmd.code_sha256)
        batches = [configs[i::LOWERINGS_AT_ONCE] for i in range(LOWERINGS_AT_ONCE)]
        answered = await asyncio.gather(*(
            ctx.run_tool(tool, str(task), str(code), batch, cmd.target_name)
            for batch in batches if batch))
        by_batch = [iter(rows) for rows in answered]
        return [next(by_batch[i % LOWERINGS_AT_ONCE]) for i in range(len(configs))]
