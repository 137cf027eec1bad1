"""Fast checks of the agents' pure parts: API lookup, grid narrowing, parsing, requests."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from agents.apilookup import describe, lookup
from agents.autotuner import bar, narrow, worth_testing
from agents.executor import unboxed
from agents.llm.base import PLAN_SECTIONS, UnknownProvider, provider_class
from agents.llm.parsing import MalformedAnswer, check_plan, extract_code, fix_summary, next_levers
from agents.profiler import top_lever, worth_more
from agents.test_synth import needs_input_maker, signature_of
from kernelgraph.cli import app, load_commands
from kernelgraph.client import KernelRequest, RequestError, check_request
from tools.api import PricedConfig

EVALTASKS = Path(__file__).parents[1] / "evaltasks"


def test_api_lookup_names_real_signatures_and_suggests_close_names() -> None:
    assert describe("pl", "BlockSpec").startswith("pl.BlockSpec(")
    missing = describe("pltpu", "CompilerParam")
    assert "does not exist" in missing and "pltpu.CompilerParams" in missing
    found = lookup("pl.pallas_call(...)", "AttributeError: module has no attribute 'cdvi'")
    assert "pl.cdiv" in found and "pl.pallas_call(" in found


def test_narrowing_follows_the_profile() -> None:
    grid = [{"block_rows": b} for b in (256, 128, 512, 64)]
    overhead = {"bound": "overhead", "suggestions": ["Use larger blocks (fewer steps)."]}
    kept, why = narrow(grid, overhead)
    assert kept == [{"block_rows": 256}, {"block_rows": 512}] and "overhead" in why
    tight = {"bound": "memory", "vmem_bytes": 90, "vmem_limit_bytes": 100, "suggestions": []}
    assert narrow(grid, tight)[0] == [{"block_rows": 256}, {"block_rows": 128}, {"block_rows": 64}]
    assert narrow(grid, {"bound": "memory", "suggestions": []})[0] == grid
    assert narrow(grid, None)[0] == grid
    # both signals pull opposite ways: the prices decide (75_Gemm_GroupNorm_Min at 8 rows
    # per step: 78% overhead, 21 of 32 MiB, and 16 rows fit at 0.98x against 0.67x)
    both = {**tight, "bound": "overhead"}
    kept, why = narrow(grid, both)
    assert kept == grid and "conflict" in why
    # a flag is not a size: both its values stay, whichever way the sizes are narrowed
    flagged = [{"block_0": b, "narrow_lanes": f} for b in (8, 16, 4) for f in (0, 1)]
    assert narrow(flagged, tight)[0] == [{"block_0": b, "narrow_lanes": f}
                                         for b in (8, 4) for f in (0, 1)]
    assert narrow(flagged, overhead)[0] == [{"block_0": b, "narrow_lanes": f}
                                            for b in (8, 16) for f in (0, 1)]
    # a step's size is its block as a whole: twice the rows over half the heads is as large
    traded = [{"block_q": q, "heads_per_block": h} for q in (512, 256, 1024) for h in (4, 2)]
    # (those that move every knob the profile's way first, so a budget that cuts the grid keeps them)
    assert narrow(traded, overhead)[0] == [{"block_q": 512, "heads_per_block": 4},
                                           {"block_q": 1024, "heads_per_block": 4},
                                           {"block_q": 1024, "heads_per_block": 2}]
    assert narrow(traded, tight)[0] == [{"block_q": q, "heads_per_block": h}
                                        for q, h in ((512, 4), (512, 2), (256, 4), (256, 2), (1024, 2))]
    wide = [{"block_m": m, "block_n": n} for m in (256, 128, 512) for n in (256, 128, 512)]
    assert narrow(wide, overhead)[0] == [{"block_m": m, "block_n": n} for m, n in (
        (256, 256), (256, 512), (512, 256), (512, 512), (128, 512), (512, 128))]


def test_profile_judgement() -> None:
    assert not worth_more({"bound": "memory", "achieved_bandwidth_fraction": 0.95})
    assert worth_more({"bound": "memory", "achieved_bandwidth_fraction": 0.5})
    assert worth_more({"bound": "overhead"})
    assert top_lever({"bound": "compute", "suggestions": []}).startswith("MXU")
    caveat = "_kernel: model caveat: index maps and conditions evaluated on this case's values"
    assert top_lever({"bound": "memory", "suggestions": [caveat]}).startswith("fewer HBM bytes")
    assert top_lever({"bound": "memory", "suggestions": [caveat, "_kernel: 8 grid steps"]}) == "_kernel: 8 grid steps"


def test_answers_are_parsed_strictly() -> None:
    code = "```python\nTUNABLES = {}\n\ndef build():\n    return None\n```"
    assert extract_code("Here:\n" + code).startswith("TUNABLES")
    with pytest.raises(MalformedAnswer, match="2 ```python blocks"):
        extract_code(code + "\n" + code)
    with pytest.raises(MalformedAnswer, match="no top-level `build`"):
        extract_code("```python\nx = 1\n```")
    with pytest.raises(MalformedAnswer, match="does not parse"):
        extract_code("```python\ndef build(:\n```")
    plan = "\n\n".join(f"## {s}\n\ntext" for s in PLAN_SECTIONS)
    assert check_plan(plan) == plan.strip() + "\n"
    with pytest.raises(MalformedAnswer, match="no '## Strategy'"):
        check_plan(plan.replace("## Strategy", "## Approach"))
    reordered = "\n\n".join(f"## {s}\n\ntext" for s in reversed(PLAN_SECTIONS))
    with pytest.raises(MalformedAnswer, match="out of order"):
        check_plan(reordered)
    assert fix_summary("Error: bad block\nCause: 7 rows\nFix: 8 rows\n") == {
        "error": "bad block", "cause": "7 rows", "fix": "8 rows"}


def test_a_plans_next_levers_are_the_known_ids_its_last_section_names_in_order() -> None:
    known = ["block_shape", "block_skipping", "precision"]
    plan = "\n\n".join(f"## {s}\n\ntext block_shape" for s in PLAN_SECTIONS)
    assert next_levers(plan, known) == []  # ids in other sections are no request
    named = plan + "\n\n## Next levers\n- `block_skipping` (the diagonal)\n- warp_tiles\n- block_shape\n"
    assert check_plan(named) == named.strip() + "\n"
    assert next_levers(named, known) == ["block_skipping", "block_shape"]
    before = named.replace("## Expected effect", "## Next levers\n- precision\n\n## Expected effect")
    assert next_levers(before, known) == ["precision"]  # the section ends at the next heading
    prose = plan + "\n## Next levers\n1. Block skipping on the diagonal, then block-shape.\n"
    assert next_levers(prose, known) == ["block_skipping", "block_shape"]
    longest = plan + "\n## Next levers\n- mxu_alignment\n- alignment\n"
    assert next_levers(longest, ["alignment", "mxu_alignment"]) == ["mxu_alignment", "alignment"]
    assert next_levers(plan + "\n## Next levers\n- mxu alignment\n", ["alignment", "mxu_alignment"]) == [
        "mxu_alignment"]


def test_sandbox_paths_are_removed_from_diagnostics() -> None:
    text = 'at /tmp/kg-sandbox-k6eptbe1/candidate.py:12 and "/var/tmp/kg-sandbox-x_y/candidate.py"'
    assert unboxed(text) == 'at candidate.py:12 and "candidate.py"'


def test_requests_are_checked_before_anything_is_sent(tmp_path: Path) -> None:
    task = EVALTASKS / "rmsnorm_small.py"
    assert check_request(KernelRequest(task=task)).name == "rmsnorm_small"
    partial = check_request(KernelRequest(task=EVALTASKS / "rmsnorm_no_inputs.py"))
    assert partial.needs_input_maker and partial.name == "rmsnorm_no_inputs"
    source = (EVALTASKS / "rmsnorm_no_inputs.py").read_text()
    assert needs_input_maker(source)
    assert signature_of(source)["args"][1] == {"name": "w", "dtype": "float32",
                                               "shapes": [[256], [128]]}
    with pytest.raises(RequestError, match="unknown target"):
        check_request(KernelRequest(task=task, target="sim-tpu-v9"))
    with pytest.raises(RequestError, match="unknown provider"):
        check_request(KernelRequest(task=task, provider="nope"))
    with pytest.raises(RequestError, match="iterations"):
        check_request(KernelRequest(task=task, iterations=0))
    broken = tmp_path / "broken.py"
    broken.write_text("def reference(:\n")
    with pytest.raises(RequestError, match="syntax error"):
        check_request(KernelRequest(task=broken))
    with pytest.raises(UnknownProvider, match="cannot be loaded"):
        provider_class("no_such_module:Nope")


def test_policies_are_told_the_tasks_kernel_class(tmp_path: Path) -> None:
    """A policy draws only the levers of the task's class unless the request names one."""
    task = EVALTASKS / "rmsnorm_small.py"
    told = check_request(KernelRequest(task=task, policy="greedy")).policy_params
    assert told["kernel_class"] == "rowwise"
    kept = check_request(KernelRequest(task=task, policy="greedy",
                                       policy_params={"kernel_class": ""})).policy_params
    assert kept["kernel_class"] == ""
    partial = check_request(KernelRequest(task=EVALTASKS / "rmsnorm_no_inputs.py", policy="greedy"))
    assert partial.policy_params["kernel_class"] == ""  # no input maker yet: any lever


def test_search_and_submit_refuse_bad_input_in_one_line(tmp_path: Path) -> None:
    load_commands()
    runner = CliRunner()
    missing = runner.invoke(app, ["search", str(tmp_path / "nope.py"), "--db", str(tmp_path / "x.duckdb")])
    assert missing.exit_code == 2 and "no such task file" in missing.output
    assert "Traceback" not in missing.output
    no_bus = runner.invoke(app, ["submit", str(EVALTASKS / "rmsnorm_small.py")], env={"KG_NATS_URL": ""})
    assert no_bus.exit_code == 2 and "needs --nats" in no_bus.output
    replay = runner.invoke(app, ["search", str(EVALTASKS / "rmsnorm_small.py"), "--provider", "replay"])
    assert replay.exit_code == 2 and "--replay-from" in replay.output


def test_the_tuner_tests_only_the_configurations_priced_fastest_and_faster_than_the_default() -> None:
    def priced(block: int, latency: float | None) -> PricedConfig:
        return PricedConfig({"block": block}, None if latency is None else f"p{block}",
                            latency, None if latency is None else 1.0 / latency, "vmem" * (latency is None))

    default = priced(256, 4.0)
    others = [priced(128, 5.0), priced(512, 2.0), priced(1024, None), priced(64, 3.0),
              priced(32, 3.5), priced(16, 3.99)]
    chosen, rows = worth_testing(default, others, keep=2)
    assert chosen == [{"block": 512}, {"block": 64}]  # fastest first
    fates = {r["config"]["block"]: r["fate"] for r in rows}
    assert fates[512] == fates[64] == "to test (fastest first, until one passes)"
    assert fates[128].startswith("not tested: priced no faster than the default")
    assert fates[1024] == "not priced: vmem"
    assert fates[32] == "not tested: 2 others priced faster"
    # a sweep before the default's test tests one (agents.judging)
    chosen, rows = worth_testing(default, others, keep=1)
    assert chosen == [{"block": 512}]
    assert {r["config"]["block"]: r["fate"] for r in rows}[64] == (
        "not tested: one other priced faster")
    # a gain below the model's resolution is not worth a test run, even with room to test
    assert fates[16] == "not tested: priced within 1% of the default (4 s)"
    assert {"block": 16} not in worth_testing(default, others, keep=9)[0]
    assert worth_testing(priced(256, 1.0), others, keep=2)[0] == []  # nothing beats it
    unpriced_default = PricedConfig({"block": 256}, None, problem="did not lower")
    assert worth_testing(unpriced_default, others, keep=5)[0] == [
        {"block": 512}, {"block": 64}, {"block": 32}, {"block": 16}, {"block": 128}]
    # kernels alone priced over the bar: never tested, and the table says it was not compiled
    floored = PricedConfig({"block": 8}, "p8", floor_s=3.5)
    chosen, rows = worth_testing(default, [*others, floored], keep=2, below_s=3.2)
    assert chosen == [{"block": 512}, {"block": 64}]
    (row,) = [r for r in rows if r["config"] == {"block": 8}]
    assert row["fate"] == ("not tested: its kernels alone are priced at 3.5 s, no faster than "
                           "the price to beat (3.2 s); not compiled")
    assert row["kernels_floor_s"] == 3.5 and row["estimate_s"] is None
    assert bar(default) == 4.0 * 0.99 and bar(default, 3.2) == 3.2 and bar(unpriced_default) is None


def test_a_price_failure_reaches_the_planner_with_the_plan_it_judged() -> None:
    """Price and wrong-answer failures get their plan, read once: from the plans already read
    when there."""
    import asyncio

    from agents.planner import _with_plans

    class Artifacts:
        asked: list[str] = []

        async def get_text(self, sha256: str) -> str:
            self.asked.append(sha256)
            return f"plan {sha256}"

    failures = [{"iteration": 1, "phase": "price", "error": "not faster", "plan_sha256": "a"},
                {"iteration": 2, "phase": "test", "error": "wrong answer", "plan_sha256": "b"},
                {"iteration": 3, "phase": "price", "error": "not faster", "plan_sha256": "c"},
                {"iteration": 4, "phase": "compile", "error": "no plan recorded"},
                {"iteration": 5, "phase": "compile", "error": "did not lower", "plan_sha256": "e"}]
    ctx = Artifacts()
    got = asyncio.run(_with_plans(ctx, failures, {"a": "the plan of a"}))  # type: ignore[arg-type]
    assert [f.get("plan") for f in got] == ["the plan of a", "plan b", "plan c", None, None]
    assert ctx.asked == ["b", "c"] and got[4] == failures[4]


def test_a_configuration_priced_at_its_parents_latency_does_not_beat_it() -> None:
    """From a real log: the parent's latency, rebuilt through the default's estimate and speedup,
    came out one ulp above the parent's own, so a configuration priced exactly like the parent
    counted as faster and was tested."""
    from agents import judged
    from eventstore.events import CompileChecked

    checked = CompileChecked.create(run_id="r", node_id="n", producer="test", iteration=2,
                                    code_sha256="c", ok=True,
                                    estimate_s=6.7931084148462355e-06,
                                    estimate_speedup=0.9157369374464949)
    parent_speedup, parent_latency_s = 1.0225704671074451, 6.083395223753976e-06
    beat_s = judged.latency_to_beat(checked, parent_speedup, 0.0)
    assert beat_s is not None and not parent_latency_s < beat_s
    assert parent_latency_s * 0.999 < beat_s  # one priced 0.1% faster still beats it


def test_the_autotune_progress_line_says_how_many_priced_were_not_compiled() -> None:
    from eventstore.codec import decode_event, encode_event
    from eventstore.events import TuningSwept
    from kernelgraph.cli.progress import Progress

    def swept(**counts: int) -> TuningSwept:
        return TuningSwept(event_id="e", run_id="r", ts=0.0, producer="autotuner@1", iteration=1,
                           code_sha256="c" * 64, configs_tried=0, **counts)

    line = Progress().describe(swept(configs_priced=3, configs_floored=2))
    assert line is not None and "autotune: 3 priced (2 not compiled), 0 tested" in line
    line = Progress().describe(swept(configs_priced=3))
    assert line is not None and "autotune: 3 priced, 0 tested" in line
    # a log written before the count decodes with none floored
    old = encode_event(swept(configs_priced=3)).replace(b',"configs_floored":0', b"")
    assert b"configs_floored" not in old and decode_event(old).configs_floored == 0
